"""course_lib.analysis.xlnet: the permutation LM's questions (targets last in the order) against
masks written out by hand from the definition, on a tiny random XLNet in float64."""

from __future__ import annotations

import pytest
import torch

from course_lib.analysis.ar_ae import name_joints, name_pairs, pair_joint
from course_lib.analysis.xlnet import (
    context_then_targets,
    is_permutation_lm,
    plm_cloze_log_probs,
    plm_pair_joint,
    plm_target_log_probs,
    same_context_log_probs,
)
from course_lib.models.bert import BertConfig, BertForMaskedLM
from course_lib.models.xlnet import XLNetConfig, XLNetLMHeadModel

V = 11


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    config = XLNetConfig(vocab_size=V, d_model=16, n_head=2, n_layer=2, d_inner=64, dropout=0.0)
    model = XLNetLMHeadModel(config).double().eval()
    with torch.no_grad():  # larger weights than the initialisation's, so that positions matter
        for p in model.parameters():
            p.normal_(0.0, 0.5)
    return model


def _by_hand(model, ids, context, targets):
    """Log-probs of ``targets`` (in order) from masks built by loops: context tokens see each
    other, a target sees the context and the targets before it, never itself."""
    n = ids.size(1)
    perm = torch.ones(1, n, n, dtype=torch.float64)
    for q in range(n):
        for k in range(n):
            if k in context and (q in context or q in targets):
                perm[0, q, k] = 0
            if q in targets and k in targets and targets.index(k) < targets.index(q):
                perm[0, q, k] = 0
    mapping = torch.zeros(1, len(targets), n, dtype=torch.float64)
    for p, t in enumerate(targets):
        mapping[0, p, t] = 1
    with torch.no_grad():
        out = model(ids, perm_mask=perm, target_mapping=mapping)
    return torch.log_softmax(out.logits, -1)[0]


def test_context_then_targets_orders_and_errors():
    mask = torch.tensor([[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]])
    got = context_then_targets(mask, torch.tensor([[3, 0], [1, 4]]))
    assert got.tolist() == [[1, 2, 3, 0, -1], [0, 2, 3, 1, 4]]
    with pytest.raises(ValueError, match="padding"):
        context_then_targets(mask, torch.tensor([[4], [0]]))
    with pytest.raises(ValueError, match="twice"):
        context_then_targets(mask, torch.tensor([[1, 1], [0, 2]]))
    with pytest.raises(ValueError, match="positions in"):
        context_then_targets(mask, torch.tensor([[7], [0]]))


def test_target_log_probs_match_masks_written_by_hand(model):
    ids = torch.tensor([[1, 5, 2, 7, 3, 9]])
    got = plm_target_log_probs(model, ids, [[4, 1]])[0]
    want = _by_hand(model, ids, context=[0, 2, 3, 5], targets=[4, 1])
    assert torch.allclose(got.double(), want, atol=1e-9)


def test_cloze_is_one_target_given_every_other_token(model):
    ids = torch.tensor([[1, 5, 2, 7, 3, 9], [4, 4, 6, 8, 2, 0]])
    att = torch.tensor([[1] * 6, [1] * 5 + [0]])
    got = plm_cloze_log_probs(model, ids, torch.tensor([[0, 2], [1, 3]]), attention_mask=att)
    want0 = _by_hand(model, ids[:1], context=[0, 1, 3, 4, 5], targets=[2])[0]
    want1 = _by_hand(model, ids[1:, :5], context=[0, 1, 2, 4], targets=[3])[0]
    assert torch.allclose(got[0].double(), want0, atol=1e-9)
    assert torch.allclose(got[1].double(), want1, atol=1e-9)
    # the hidden token's own identity never matters
    swapped = ids.clone()
    swapped[0, 2] = 10
    again = plm_cloze_log_probs(model, swapped, torch.tensor([[0, 2]]), attention_mask=att)
    assert torch.allclose(again[0], got[0], atol=1e-9)


def test_pair_joint_is_the_chain_rule_and_sums_to_one(model):
    ids = torch.tensor([1, 5, 2, 7, 3, 9])
    grid = plm_pair_joint(model, ids, (2, 3), range(V), range(V))
    assert float(grid.sum()) == pytest.approx(1.0, abs=1e-9)
    for a in (0, 4, 10):
        x = ids.clone()[None]
        x[0, 2] = a
        lp = _by_hand(model, x, context=[0, 1, 4, 5], targets=[2, 3])
        for b in (1, 6):
            assert float(grid[a, b]) == pytest.approx(float((lp[0, a] + lp[1, b]).exp()), rel=1e-9)
    # ar_ae.pair_joint hands a permutation LM to the same computation
    assert torch.allclose(pair_joint(model, ids, (2, 3), [0, 4], [1, 6]), grid[[0, 4]][:, [1, 6]])


def test_same_context_gives_each_position_its_own_distribution(model):
    ids = torch.tensor([[1, 5, 2, 7, 3, 9]])
    lp_i, lp_j = same_context_log_probs(model, ids, [(0, 2, 3)])
    want_i = _by_hand(model, ids, context=[0, 1, 4, 5], targets=[2, 3])[0]
    want_j = _by_hand(model, ids, context=[0, 1, 4, 5], targets=[3, 2])[0]
    assert torch.allclose(lp_i[0].double(), want_i, atol=1e-9)
    assert torch.allclose(lp_j[0].double(), want_j, atol=1e-9)
    assert (lp_i - lp_j).abs().max() > 1e-3  # the query stream knows which position it predicts
    # the marginal of the pair joint's first position is p(x_i | context)
    grid = plm_pair_joint(model, ids[0], (2, 3), range(V), range(V))
    assert torch.allclose(grid.sum(1).log(), lp_i[0].cpu(), atol=1e-9)
    with pytest.raises(ValueError, match="different"):
        same_context_log_probs(model, ids, [(0, 2, 2)])


def test_name_joints_work_for_a_permutation_lm(model):
    class Tok:  # a word-level tokenizer over the model's vocabulary
        words = "[CLS] [SEP] she flew to new los york angeles . x".split()

        def encode(self, text, add_special_tokens=True):
            ids = [self.words.index(w) for w in text.split()]
            ids = [0, *ids, 1] if add_special_tokens else ids

            class E:
                pass

            e = E()
            e.ids = ids
            return e

    tok = Tok()
    pairs = name_pairs(tok, [("new", "york"), ("los", "angeles")])
    r = name_joints(model, tok, ["she flew to new york .", "she flew to los angeles ."], pairs)
    assert r["n"] == 2 and 0.0 <= r["inconsistent_mass"] <= 1.0
    assert all(float(g.sum()) == pytest.approx(1.0, abs=1e-9) for g in r["grids"])


def test_only_a_permutation_lm_is_accepted(model):
    assert is_permutation_lm(model)
    bert = BertForMaskedLM(
        BertConfig(
            vocab_size=V, hidden_size=16, num_attention_heads=2, num_hidden_layers=1, intermediate_size=64
        )
    )
    assert not is_permutation_lm(bert)
    with pytest.raises(ValueError, match="permutation LM"):
        plm_target_log_probs(bert, torch.tensor([[1, 2, 3]]), [[1]])
