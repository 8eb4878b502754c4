"""course_lib.analysis.ar_ae: AR vs AE language models, checked against brute force on tiny
random models (each check beside a deliberately wrong computation that it would catch); the
right-to-left LM (reversed rows, the recipe's ``direction``, ``course train causal``),
one hidden token from either side and the grid of two-word names."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from course_lib.analysis.ar_ae import (
    cloze_log_probs,
    fill_masks,
    find_name,
    inconsistent_mass,
    mask_discrepancy,
    name_joints,
    name_pairs,
    next_token_log_probs,
    normalise_grid,
    pair_joint,
    perplexity,
    product_of_experts,
    pseudo_log_likelihood,
    sample_causal,
    sequence_log_likelihood,
)
from course_lib.cli import main as course_main
from course_lib.data.documents import train_tokenizer
from course_lib.data.tasks import name_documents, name_sentences, two_word_cities
from course_lib.models.bert import BertConfig, BertForMaskedLM, BertLMHeadModel
from course_lib.objectives import reverse_sequences
from course_lib.objectives.pretraining import evaluate_causal_lm, pretraining_examples
from course_lib.recipes.bert import pretrain_bert
from course_lib.recipes.common import load_pretrained

PAD, CLS, SEP, MASK = 0, 2, 3, 4  # ids 0-4 play [PAD] [UNK] [CLS] [SEP] [MASK]
TINY = dict(
    vocab_size=40,
    hidden_size=16,
    num_hidden_layers=2,
    num_attention_heads=2,
    intermediate_size=32,
    max_position_embeddings=32,
    initializer_range=0.2,  # sharper distributions than BERT's 0.02: wrong answers differ clearly
)


def _models(vocab_size: int) -> tuple[BertForMaskedLM, BertLMHeadModel]:
    torch.manual_seed(0)
    config = BertConfig(**{**TINY, "vocab_size": vocab_size})
    return BertForMaskedLM(config).eval(), BertLMHeadModel(replace(config, is_decoder=True)).eval()


@pytest.fixture(scope="module")
def models():
    return _models(40)


@pytest.fixture(scope="module")
def small_vocab_models():
    """12 tokens: every pair of candidates can be enumerated."""
    return _models(12)


def _padded_batch() -> tuple[torch.Tensor, torch.Tensor]:
    """[CLS] words [SEP] [PAD]...: three sequences of 9, 6 and 4 real tokens."""
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(5, 40, (3, 9), generator=g)
    att = torch.ones_like(ids)
    for row, n in enumerate((9, 6, 4)):
        ids[row, 0], ids[row, n - 1] = CLS, SEP
        ids[row, n:], att[row, n:] = PAD, 0
    return ids, att


def _prefix_log_prob(model: nn.Module, seq: torch.Tensor, t: int) -> float:
    """log p(seq[t] | seq[:t]), from the model run on the prefix alone (no causal mask needed)."""
    with torch.no_grad():
        logits = model(input_ids=seq[None, :t]).logits[0, -1]
    return torch.log_softmax(logits.float(), -1)[seq[t]].item()


# ---------------------------------------------------------------------------------------
# AR: chain rule
# ---------------------------------------------------------------------------------------


def test_causal_model_never_sees_the_future(models):
    """Changing the tokens from position 6 on leaves log p(x_t | x_<t) for t < 6 exactly
    unchanged; the same edit moves a bidirectional model's outputs at the earlier positions."""
    mlm, ar = models
    ids = torch.randint(5, 40, (2, 10), generator=torch.Generator().manual_seed(2))
    later = ids.clone()
    later[:, 6:] = (later[:, 6:] + 7 - 5) % 35 + 5  # another word at every later position
    a, b = next_token_log_probs(ar, ids), next_token_log_probs(ar, later)
    assert torch.equal(a[:, :5], b[:, :5])  # column t - 1 scores token t
    assert (a[:, 5:] - b[:, 5:]).abs().max() > 1e-3
    with torch.no_grad():
        assert (mlm(ids).logits[:, :6] - mlm(later).logits[:, :6]).abs().max() > 1e-3


def test_sequence_log_likelihood_is_the_chain_rule(models):
    """Equals a loop over every position, each scored from its prefix alone (padding
    included); the perplexity is exp of its per-token mean and agrees with the recipe's
    evaluate_causal_lm; reading the logits one position late (no shift) would be caught."""
    _, ar = models
    ids, att = _padded_batch()
    got = sequence_log_likelihood(ar, ids, att)
    lengths = att.sum(1).tolist()
    brute = torch.tensor(
        [sum(_prefix_log_prob(ar, ids[b], t) for t in range(1, n)) for b, n in enumerate(lengths)]
    )
    assert got.shape == (3,)
    assert (got - brute).abs().max() <= 1e-5
    n_predicted = sum(n - 1 for n in lengths)
    ppl = perplexity(ar, ids, att)
    assert ppl == pytest.approx(float(torch.exp(-brute.sum() / n_predicted)), rel=1e-5)
    lm_loss = evaluate_causal_lm(ar, {"input_ids": ids, "attention_mask": att})["lm_loss"]
    assert ppl == pytest.approx(math.exp(lm_loss), rel=1e-5)  # the recipe's own metric agrees
    with torch.no_grad():  # the wrong reading: the logits at t score the token at t
        unshifted = torch.log_softmax(ar(ids, att).logits.float(), -1).gather(-1, ids[..., None])[..., 0]
    wrong = (unshifted[:, 1:] * att[:, 1:]).sum(1)
    assert (wrong - brute).abs().max() > 1e-2


# ---------------------------------------------------------------------------------------
# AE: pseudo-log-likelihood
# ---------------------------------------------------------------------------------------


def test_pseudo_log_likelihood_matches_masking_one_position_at_a_time(models):
    mlm, _ = models
    ids, att = _padded_batch()
    got = pseudo_log_likelihood(mlm, ids, att, mask_token_id=MASK, special_ids=(CLS, SEP), chunk_size=5)
    brute, unmasked = [], []
    for b, n in enumerate(att.sum(1).tolist()):
        seq, total, wrong = ids[b, :n], 0.0, 0.0
        for t in range(n):
            if int(seq[t]) in (CLS, SEP):
                continue
            x = seq.clone()
            x[t] = MASK
            with torch.no_grad():
                total += torch.log_softmax(mlm(x[None]).logits[0, t], -1)[seq[t]].item()
                wrong += torch.log_softmax(mlm(seq[None]).logits[0, t], -1)[seq[t]].item()
        brute.append(total)
        unmasked.append(wrong)
    brute, unmasked = torch.tensor(brute), torch.tensor(unmasked)
    assert (got - brute).abs().max() <= 1e-5
    assert (unmasked - brute).abs().max() > 1e-2  # forgetting to mask would be caught
    with_specials = pseudo_log_likelihood(mlm, ids, att, mask_token_id=MASK)
    assert (with_specials - got).abs().min() > 1e-3  # the specials were skipped, not scored


# ---------------------------------------------------------------------------------------
# The joint of two positions
# ---------------------------------------------------------------------------------------


def test_pair_joint_masked_lm_is_the_outer_product_of_two_marginals(small_vocab_models):
    mlm, _ = small_vocab_models
    seq = torch.tensor([CLS, 7, 9, 5, 11, 8, SEP])
    i, j, ci, cj = 2, 4, [5, 6, 9, 10], [7, 8, 11]
    got = pair_joint(mlm, seq, (i, j), ci, cj, mask_token_id=MASK)
    x = seq.clone()
    x[[i, j]] = MASK
    with torch.no_grad():
        p = torch.softmax(mlm(x[None]).logits[0], -1)
    assert got.shape == (4, 3)
    assert (got - torch.outer(p[i, ci], p[j, cj])).abs().max() <= 1e-6
    x_one = seq.clone()  # the wrong input: only position i masked, j visible
    x_one[i] = MASK
    with torch.no_grad():
        p_one = torch.softmax(mlm(x_one[None]).logits[0], -1)
    assert (got - torch.outer(p_one[i, ci], p[j, cj])).abs().max() > 1e-4
    full = pair_joint(mlm, seq, (i, j), range(12), range(12), mask_token_id=MASK)
    assert abs(full.sum().item() - 1) <= 1e-5


def test_pair_joint_causal_lm_equals_brute_force_over_every_pair(small_vocab_models):
    """Every (a, b) of a 12-token vocabulary: the full sequence built and scored token by
    token, each token from its prefix alone. Also: the full grid sums to 1, padding changes
    nothing, and the independence shortcut (b scored with the original token at i) is caught."""
    _, ar = small_vocab_models
    seq = torch.tensor([CLS, 7, 9, 5, 11, 8])
    i, j = 2, 5  # j is the last token: the span i..j is the whole continuation
    grid = pair_joint(ar, seq, (i, j), range(12), range(12))
    span = pair_joint(ar, seq, (i, j), range(12), range(12), include_between=True)
    brute, brute_span = torch.zeros(12, 12), torch.zeros(12, 12)
    for a in range(12):
        for b in range(12):
            x = seq.clone()
            x[i], x[j] = a, b
            logp = {t: _prefix_log_prob(ar, x, t) for t in range(i, j + 1)}
            brute[a, b] = logp[i] + logp[j]
            brute_span[a, b] = sum(logp.values())
    assert (grid.log() - brute).abs().max() <= 1e-5
    assert (span.log() - brute_span).abs().max() <= 1e-5
    assert abs(grid.sum().item() - 1) <= 1e-5
    # the span's joint is the ratio of two chain-rule likelihoods, full sequence over prefix
    x = seq.clone()
    x[i], x[j] = 6, 10
    ratio = sequence_log_likelihood(ar, x[None]) - sequence_log_likelihood(ar, x[None, :i])
    assert abs(span[6, 10].log().item() - ratio.item()) <= 1e-5
    # the independence shortcut: the second factor read with the original token at i
    with torch.no_grad():
        logp = torch.log_softmax(ar(seq[None]).logits[0].float(), -1)
    shortcut = logp[i - 1][:, None] + logp[j - 1][None, :]
    assert (shortcut - brute).abs().max() > 1e-2
    # padding after the sequence changes nothing
    padded = torch.cat([seq, torch.zeros(3, dtype=torch.long)])
    att = (torch.arange(9) < 6).long()
    again = pair_joint(ar, padded, (i, j), range(12), range(12), attention_mask=att)
    assert (again.log() - grid.log()).abs().max() <= 1e-5


def test_inconsistent_mass_on_a_hand_made_grid():
    """Candidates ("New", "Los") x ("York", "Angeles"); only the diagonal is a real name."""
    joint = torch.tensor([[0.4, 0.1], [0.2, 0.3]])
    assert inconsistent_mass(joint, {(0, 0), (1, 1)}) == pytest.approx(0.3)
    assert inconsistent_mass(joint * 10, torch.eye(2, dtype=torch.bool)) == pytest.approx(0.3)
    assert inconsistent_mass(joint, {(0, 1), (1, 0)}) == pytest.approx(0.7)
    assert torch.allclose(normalise_grid(joint * 4), joint)
    # an outer product cannot do better than 1/2 when the truth is half "New York", half "Los Angeles"
    half = torch.tensor([0.5, 0.5])
    assert inconsistent_mass(torch.outer(half, half), {(0, 0), (1, 1)}) == pytest.approx(0.5)


# ---------------------------------------------------------------------------------------
# Generation
# ---------------------------------------------------------------------------------------


class _OrderStub(nn.Module):
    """A masked LM over 6 tokens ([MASK] = 5) that is sure position 2 holds token 1, and at
    position 1 prefers token 3 once position 2 holds 1, token 2 otherwise (weakly). It also
    likes [MASK] itself everywhere, which must never be chosen."""

    config = SimpleNamespace(is_decoder=False, vocab_size=6)

    def forward(self, input_ids, attention_mask=None, **_):
        logits = torch.zeros(*input_ids.shape, 6)
        logits[:, 2, 1] = 5.0
        logits[:, 1, 2] = 1.0
        logits[:, 1, 3] = torch.where(input_ids[:, 2] == 1, 2.0, 0.0)
        logits[..., 5] = 4.0
        return SimpleNamespace(mlm_logits=logits)


def test_fill_masks_order_on_a_stub():
    """Left to right fills position 1 before it knows position 2; most confident fills the
    sure position 2 first, which changes the choice at position 1."""
    x = torch.zeros(4, dtype=torch.long)
    ltr, ltr_order = fill_masks(_OrderStub(), x, [2, 1], mask_token_id=5, return_order=True)
    mc, mc_order = fill_masks(
        _OrderStub(), x, [1, 2], mask_token_id=5, order="most_confident", return_order=True
    )
    assert ltr.tolist() == [0, 2, 1, 0] and ltr_order.tolist() == [[1, 2]]
    assert mc.tolist() == [0, 3, 1, 0] and mc_order.tolist() == [[2, 1]]


def test_fill_masks_greedy_and_sampled(models):
    mlm, _ = models
    ids, att = _padded_batch()
    where = [1, 2, 3]
    for order in ("left_to_right", "most_confident"):
        a = fill_masks(
            mlm, ids, where, mask_token_id=MASK, order=order, attention_mask=att, banned_ids=(PAD,)
        )
        b = fill_masks(
            mlm, ids, where, mask_token_id=MASK, order=order, attention_mask=att, banned_ids=(PAD,)
        )
        assert torch.equal(a, b) and a.shape == ids.shape
        others = torch.ones(9, dtype=torch.bool)
        others[where] = False
        assert torch.equal(a[:, others], ids[:, others])  # only the listed positions change
        assert not torch.isin(a[:, where], torch.tensor([MASK, PAD])).any()
        chosen = a[:, where].unique().tolist()  # ban every token chosen: others must come
        c = fill_masks(
            mlm, ids, where, mask_token_id=MASK, order=order, attention_mask=att, banned_ids=chosen
        )
        assert not torch.isin(c[:, where], torch.tensor(chosen)).any()

    def sampled(seed: int) -> torch.Tensor:
        g = torch.Generator().manual_seed(seed)
        return fill_masks(
            mlm, ids, where, mask_token_id=MASK, temperature=3.0, generator=g, attention_mask=att
        )

    assert torch.equal(sampled(7), sampled(7))
    assert any(not torch.equal(sampled(7), sampled(s)) for s in range(3))


def test_sample_causal(models):
    """Greedy equals an explicit argmax loop; a seeded sample repeats; eos ends it."""
    _, ar = models
    prompt = torch.tensor([CLS, 9, 17])
    greedy = sample_causal(ar, prompt, 5, temperature=0.0)
    x = prompt.tolist()
    for _ in range(5):
        with torch.no_grad():
            x.append(int(ar(torch.tensor([x])).logits[0, -1].argmax()))
    assert greedy.tolist() == x
    g = [torch.Generator().manual_seed(s) for s in (3, 3)]
    batch = prompt.expand(4, -1)
    a, b = (sample_causal(ar, batch, 6, temperature=3.0, generator=gen) for gen in g)
    assert torch.equal(a, b) and a.shape == (4, 9) and torch.equal(a[:, :3], batch)
    assert len({tuple(r) for r in a.tolist()}) > 1  # the rows are drawn independently
    stopped = sample_causal(ar, prompt, 5, temperature=0.0, eos_token_id=x[3])
    assert stopped.tolist() == x[:4]
    # in a batch a finished row repeats eos while the other goes on, until n_tokens
    other = torch.tensor([CLS, 21, 30])
    y = sample_causal(ar, other, 5, temperature=0.0)
    assert x[3] not in y[3:].tolist()
    both = sample_causal(ar, torch.stack([prompt, other]), 5, temperature=0.0, eos_token_id=x[3])
    assert both[0].tolist() == x[:4] + [x[3]] * 4 and torch.equal(both[1], y)


# ---------------------------------------------------------------------------------------
# The [MASK] discrepancy
# ---------------------------------------------------------------------------------------


def test_mask_discrepancy(models):
    mlm, _ = models
    ids, att = _padded_batch()
    kw = dict(mask_token_id=MASK, special_ids=(CLS, SEP), attention_mask=att)
    none = mask_discrepancy(mlm, ids, mask_share=0.0, **kw)
    assert none["n_masked"] == 0 and none["n_compared"] == 7 + 4 + 2  # words only, no specials
    assert none["cosine"] == pytest.approx(1.0, abs=1e-6) and none["l2_distance"] <= 1e-6
    assert none["top1_changed"] == 0.0
    half = mask_discrepancy(mlm, ids, mask_share=0.5, generator=torch.Generator().manual_seed(0), **kw)
    assert half["n_masked"] == 4 + 2 + 1 and half["n_compared"] == 13 - 7
    assert half["cosine"] < 0.99 and half["l2_distance"] > 0.1
    # recompute what is compared: the unmasked words' last-layer vectors, clean vs masked input
    masked = half["masked"]
    assert not masked[ids == CLS].any() and not masked[att == 0].any()
    words = att.bool() & ~torch.isin(ids, torch.tensor([CLS, SEP]))
    with torch.no_grad():
        clean = mlm(ids, att, output_hidden_states=True).hidden_states[-1]
        noisy = mlm(ids.masked_fill(masked, MASK), att, output_hidden_states=True).hidden_states[-1]
    cos = torch.cosine_similarity(clean, noisy, dim=-1)
    assert half["cosine"] == pytest.approx(cos[words & ~masked].mean().item(), abs=1e-6)
    assert abs(cos[words].mean().item() - half["cosine"]) > 1e-3  # averaging in the masked ones differs
    assert torch.allclose(
        half["cosine_per_sequence"], torch.stack([cos[r][(words & ~masked)[r]].mean() for r in range(3)])
    )


# ---------------------------------------------------------------------------------------
# Modes and bad inputs
# ---------------------------------------------------------------------------------------


def test_eval_mode_inside_and_training_mode_restored():
    """With dropout active in training mode, the results still equal eval mode's, and the
    model comes back in training mode."""
    torch.manual_seed(0)
    config = BertConfig(**{**TINY, "hidden_dropout_prob": 0.5})
    mlm = BertForMaskedLM(config).train()
    ar = BertLMHeadModel(replace(config, is_decoder=True)).train()
    ids, att = _padded_batch()
    train_mode = [
        sequence_log_likelihood(ar, ids, att),
        pseudo_log_likelihood(mlm, ids, att, mask_token_id=MASK),
        pair_joint(mlm, ids[0], (1, 2), [5, 6], [7], mask_token_id=MASK),
    ]
    assert mlm.training and ar.training
    mlm.eval(), ar.eval()
    eval_mode = [
        sequence_log_likelihood(ar, ids, att),
        pseudo_log_likelihood(mlm, ids, att, mask_token_id=MASK),
        pair_joint(mlm, ids[0], (1, 2), [5, 6], [7], mask_token_id=MASK),
    ]
    assert all(torch.equal(a, b) for a, b in zip(train_mode, eval_mode))


def test_bad_inputs_raise_clear_errors(models):
    mlm, ar = models
    ids, att = _padded_batch()
    seq = ids[0]
    left_padded = att.flip(1)
    cases = [
        (lambda: sequence_log_likelihood(mlm, ids), "causal"),
        (lambda: perplexity(mlm, ids), "causal"),
        (lambda: sample_causal(mlm, seq, 3), "causal"),
        (lambda: pseudo_log_likelihood(ar, ids, mask_token_id=MASK), "masked LM"),
        (lambda: fill_masks(ar, seq, [1], mask_token_id=MASK), "masked LM"),
        (lambda: mask_discrepancy(ar, ids, mask_token_id=MASK), "masked LM"),
        (lambda: sequence_log_likelihood(ar, ids, left_padded), "right-padded"),
        (lambda: sequence_log_likelihood(ar, ids, att[:, :4]), "shape of input_ids"),
        (lambda: sequence_log_likelihood(ar, ids.float()), "integer"),
        (lambda: perplexity(ar, ids[:, :1]), "no token to predict"),
        (lambda: pseudo_log_likelihood(mlm, ids, mask_token_id=99), "mask_token_id=99"),
        (lambda: pair_joint(mlm, seq, (3, 2), [5], [6], mask_token_id=MASK), "0 <= i < j"),
        (lambda: pair_joint(mlm, seq, (2, 30), [5], [6], mask_token_id=MASK), "0 <= i < j"),
        (lambda: pair_joint(mlm, ids, (1, 2), [5], [6], mask_token_id=MASK), "one sequence"),
        (lambda: pair_joint(mlm, seq, (1, 2), [], [6], mask_token_id=MASK), "candidates_i is empty"),
        (
            lambda: pair_joint(mlm, seq, (1, 2), [5], [60], mask_token_id=MASK),
            "candidates_j holds ids outside",
        ),
        (lambda: pair_joint(mlm, seq, (1, 2), [5], [6]), "mask_token_id is required"),
        (lambda: pair_joint(ar, seq, (0, 2), [5], [6]), "i must be >= 1"),
        (lambda: fill_masks(mlm, seq, [1], mask_token_id=MASK, order="random"), "order must be"),
        (lambda: fill_masks(mlm, seq, [], mask_token_id=MASK), "positions is empty"),
        (lambda: fill_masks(mlm, seq, [1, 1], mask_token_id=MASK), "distinct"),
        (lambda: fill_masks(mlm, ids, [5], mask_token_id=MASK, attention_mask=att), r"\[0, 4\)"),
        (lambda: fill_masks(mlm, seq, [1], mask_token_id=MASK, temperature=-1.0), "temperature"),
        (lambda: sample_causal(ar, seq, 0), "n_tokens must be positive"),
        (lambda: sample_causal(ar, seq, 30), "max_position_embeddings"),
        (lambda: mask_discrepancy(mlm, ids, mask_token_id=MASK, mask_share=1.0), "mask_share"),
        (lambda: inconsistent_mass(torch.ones(2, 2), {(2, 0)}), "outside the grid"),
        (lambda: inconsistent_mass(torch.ones(2, 2), torch.ones(3, 3, dtype=torch.bool)), "shape"),
        (lambda: normalise_grid(torch.zeros(2, 2)), "sums to 0"),
    ]
    for call, message in cases:
        with pytest.raises(ValueError, match=message):
            call()


RECIPE_TINY = dict(steps=12, batch_size=8, max_len=32, device="cpu", progress=False)

# ---------------------------------------------------------------------------------------
# reversed rows
# ---------------------------------------------------------------------------------------


def test_reverse_sequences_reverses_the_real_tokens_only_and_twice_is_identity():
    ids, att = _padded_batch()
    batch = {
        "input_ids": ids,
        "attention_mask": att,
        "token_type_ids": torch.arange(9).expand(3, 9),
        "y": ids[:, 0],
    }
    r = reverse_sequences(batch)
    for row in range(3):
        n = int(att[row].sum())
        assert r["input_ids"][row, :n].tolist() == ids[row, :n].flip(0).tolist()  # [SEP] ... [CLS]
        assert r["input_ids"][row, n:].tolist() == ids[row, n:].tolist()  # padding stays on the right
        assert r["token_type_ids"][row, :n].tolist() == list(range(n))[::-1]
    assert torch.equal(r["attention_mask"], att) and torch.equal(r["y"], batch["y"])  # not a [B, T] field
    again = reverse_sequences(r)
    assert all(torch.equal(again[k], batch[k]) for k in batch)
    with pytest.raises(ValueError, match="right padding"):
        reverse_sequences({"input_ids": ids, "attention_mask": att.flip(1)})
    with pytest.raises(ValueError, match="attention_mask"):
        reverse_sequences({"input_ids": ids})


# ---------------------------------------------------------------------------------------
# one hidden token
# ---------------------------------------------------------------------------------------


def test_cloze_log_probs_of_a_masked_lm_masks_one_position_at_a_time(models):
    mlm, _ = models
    ids, att = _padded_batch()
    positions = [(0, 3), (1, 1), (2, 2), (0, 7)]
    got = cloze_log_probs(mlm, ids, positions, attention_mask=att, mask_token_id=MASK, chunk_size=3)
    for k, (r, t) in enumerate(positions):
        x = ids[r : r + 1].clone()
        x[0, t] = MASK
        with torch.no_grad():
            want = torch.log_softmax(mlm(input_ids=x, attention_mask=att[r : r + 1]).mlm_logits[0, t], -1)
        torch.testing.assert_close(got[k], want, atol=1e-5, rtol=0)
    # the wrong thing: not masking the position (the model then sees the answer)
    with torch.no_grad():
        unmasked = torch.log_softmax(mlm(input_ids=ids[:1], attention_mask=att[:1]).mlm_logits[0, 3], -1)
    assert (got[0] - unmasked).abs().max() > 1e-3


def test_cloze_log_probs_left_to_right_reads_only_the_left_side(models):
    _, lm = models
    ids, att = _padded_batch()
    got = cloze_log_probs(lm, ids, [(0, 4), (2, 2)], attention_mask=att)
    picked = next_token_log_probs(lm, ids, att)  # column t - 1: log p(x_t | x_<t)
    assert got[0, ids[0, 4]].item() == pytest.approx(picked[0, 3].item(), abs=1e-5)
    assert got[1, ids[2, 2]].item() == pytest.approx(picked[2, 1].item(), abs=1e-5)
    changed = ids.clone()
    changed[0, 4:] = 7  # the token itself and everything after it
    torch.testing.assert_close(cloze_log_probs(lm, changed, [(0, 4)], attention_mask=att)[0], got[0])
    with pytest.raises(ValueError, match="first token"):
        cloze_log_probs(lm, ids, [(0, 0)], attention_mask=att)


def test_cloze_log_probs_right_to_left_reads_only_the_right_side(models):
    _, lm = models  # any causal LM; "right to left" means it reads each row reversed
    ids, att = _padded_batch()
    got = cloze_log_probs(lm, ids, [(1, 2)], attention_mask=att, direction="right_to_left")
    n = int(att[1].sum())  # 6: the reversed row is ids[1, 5], ids[1, 4], ..., ids[1, 0]
    rev = ids[1, :n].flip(0)
    with torch.no_grad():
        want = torch.log_softmax(
            lm(input_ids=rev[None, : n - 1 - 2]).logits[0, -1], -1
        )  # reads x_5, x_4, x_3
    torch.testing.assert_close(got[0], want, atol=1e-5, rtol=0)
    changed = ids.clone()
    changed[1, :3] = 9  # the token and everything to its left
    torch.testing.assert_close(
        cloze_log_probs(lm, changed, [(1, 2)], attention_mask=att, direction="right_to_left")[0], got[0]
    )
    with pytest.raises(ValueError, match="last token"):
        cloze_log_probs(lm, ids, [(1, n - 1)], attention_mask=att, direction="right_to_left")
    with pytest.raises(ValueError, match="not a real token"):
        cloze_log_probs(lm, ids, [(2, 5)], attention_mask=att)  # padding
    with pytest.raises(ValueError, match="direction"):
        cloze_log_probs(lm, ids, [(1, 2)], attention_mask=att, direction="both")


def test_product_of_experts_is_the_normalised_product():
    g = torch.Generator().manual_seed(0)
    a, b = (torch.log_softmax(torch.randn(3, 7, generator=g), -1) for _ in range(2))
    got = product_of_experts(a, b).exp()
    want = a.exp() * b.exp()
    torch.testing.assert_close(got, want / want.sum(-1, keepdim=True))
    assert (got.sum(-1) - 1).abs().max() < 1e-6
    with pytest.raises(ValueError, match="two"):
        product_of_experts(a)
    with pytest.raises(ValueError, match="shape"):
        product_of_experts(a, b[:, :3])


# ---------------------------------------------------------------------------------------
# two-word names
# ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def city_tokenizer():
    docs = name_documents(300, seed=0)
    return train_tokenizer(docs, vocab_size=600)


def test_two_word_cities_and_name_documents():
    cities = two_word_cities()
    assert ("New", "York") in cities and ("Los", "Angeles") in cities and all(len(c) == 2 for c in cities)
    assert ("Salt", "Lake") not in cities  # three words
    docs = name_documents(12, seed=3, per_document=5)
    assert [len(d) for d in docs] == [5, 5, 2]
    assert [x for d in docs for x in d] == [s.text for s in name_sentences(12, seed=3)]
    with pytest.raises(ValueError, match="per_document"):
        name_documents(3, per_document=0)


def test_name_pairs_builds_the_grid_and_find_name_finds_each_name(city_tokenizer):
    tok = city_tokenizer
    pairs = name_pairs(tok, [("New", "York"), ("New", "Delhi"), ("Los", "Angeles"), ("Xqzv", "Wpx")])
    assert pairs.names == [("New", "York"), ("New", "Delhi"), ("Los", "Angeles")]  # Xqzv is no single token
    assert pairs.row_words == ["New", "Los"] and pairs.col_words == ["York", "Delhi", "Angeles"]
    assert pairs.cells == [(0, 0), (0, 1), (1, 2)] and pairs.consistent == {(0, 0), (0, 1), (1, 2)}
    assert pairs.rows == [tok.token_to_id("new"), tok.token_to_id("los")]
    ids = tok.encode("She flew to Los Angeles and New Delhi.").ids
    t, k = find_name(ids, pairs)
    assert pairs.names[k] == ("Los", "Angeles") and ids[t] == tok.token_to_id("los")
    assert find_name(tok.encode("York New").ids, pairs) is None  # the order matters
    with pytest.raises(ValueError, match="single tokens"):
        name_pairs(tok, [("Xqzv", "Wpx")])


def test_name_joints_against_a_direct_computation(models, city_tokenizer):
    tok = city_tokenizer
    pairs = name_pairs(tok, two_word_cities())
    texts = ["She flew to Los Angeles.", "Nothing here.", "New York is a big city."]
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=tok.get_vocab_size(),
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=32,
        initializer_range=0.2,
    )
    mlm = BertForMaskedLM(config).eval()
    mask = tok.token_to_id("[MASK]")
    r = name_joints(mlm, tok, texts, pairs, mask_token_id=mask)
    assert r["n"] == 2 and len(r["grids"]) == 2  # the text without a city is skipped

    def direct(text: str, first: str) -> torch.Tensor:
        ids = tok.encode(text).ids
        t = ids.index(tok.token_to_id(first))
        x = torch.tensor([ids])
        x[0, t : t + 2] = mask
        with torch.no_grad():
            p = torch.softmax(mlm(input_ids=x).mlm_logits[0], -1)
        return p[t, pairs.rows][:, None] * p[t + 1, pairs.cols][None, :]  # independence: an outer product

    grids = [direct(texts[0], "los"), direct(texts[2], "new")]
    for got, grid in zip(r["grids"], grids):
        torch.testing.assert_close(got, grid / grid.sum(), atol=1e-6, rtol=1e-5)
    incons = [inconsistent_mass(g, pairs.consistent) for g in grids]
    assert r["per_text_inconsistent_mass"] == pytest.approx(incons, abs=1e-5)
    assert r["inconsistent_mass"] == pytest.approx(sum(incons) / 2, abs=1e-5)
    assert r["grid_mass"] == pytest.approx(sum(float(g.sum()) for g in grids) / 2, rel=1e-5)
    tops = [divmod(int(g.argmax()), g.size(1)) for g in r["grids"]]
    assert r["top_is_name"] == sum(t in pairs.consistent for t in tops) / 2
    assert r["top_is_right"] == sum(t == pairs.cells[k] for t, k in zip(tops, r["names"])) / 2
    assert [pairs.names[k] for k in r["names"]] == [("Los", "Angeles"), ("New", "York")]
    with pytest.raises(ValueError, match="no text"):
        name_joints(mlm, tok, ["Nothing here."], pairs, mask_token_id=mask)


# ---------------------------------------------------------------------------------------
# the right-to-left recipe
# ---------------------------------------------------------------------------------------


def test_a_right_to_left_lm_is_the_causal_recipe_on_reversed_blocks(docs, tok):
    r2l, _, history = pretrain_bert(
        "tiny",
        docs,
        tokenizer=tok,
        pair_task=None,
        causal=True,
        direction="right_to_left",
        heldout=0.1,
        eval_every=12,
        **RECIPE_TINY,
    )
    assert isinstance(r2l, BertLMHeadModel) and r2l.config.is_decoder
    # its held-out metric was computed on reversed blocks: evaluate again the same way
    held = pretraining_examples(docs[9::10], tok, max_len=32, pair_task=None, seed=1)  # every 10th, as split
    e = evaluate_causal_lm(r2l, reverse_sequences(held))
    assert e["lm_loss"] == pytest.approx(history.evals["lm_loss"][-1], rel=1e-5)
    assert math.isfinite(e["lm_loss"])
    with pytest.raises(ValueError, match="causal=True"):
        pretrain_bert("tiny", docs, tokenizer=tok, pair_task=None, direction="right_to_left", **RECIPE_TINY)
    with pytest.raises(ValueError, match="direction"):
        pretrain_bert("tiny", docs, tokenizer=tok, pair_task=None, causal=True, direction="up", **RECIPE_TINY)


def test_cli_trains_a_right_to_left_lm_and_records_the_direction(tmp_path):
    out = tmp_path / "r2l"
    args = ["train", "causal", "--out", str(out), "--n-docs", "40", "--causal", "right-to-left"]
    args += ["--size", "tiny", "--steps", "3", "--batch-size", "4", "--max-len", "32", "--vocab-size", "300"]
    assert course_main(args) == 0
    model, _ = load_pretrained(out)
    assert isinstance(model, BertLMHeadModel) and model.config.is_decoder
    assert json.loads((out / "model.json").read_text())["recipe"]["causal"] == "right-to-left"
