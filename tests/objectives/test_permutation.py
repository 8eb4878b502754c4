"""XLNet's permutation LM: random orders, the masks against their definition (invariants over
many orders, a brute-force loop, the paper's 4-token example), a sequence's factorised
log-probability against one model call per target, probabilities that sum to one over a whole
tiny vocabulary, and the loss against a hand computation."""

import itertools
import math

import pytest
import torch

from course_lib.models.xlnet import XLNetConfig, XLNetLMHeadModel, XLNetModel
from course_lib.objectives import (
    factorised_log_prob,
    order_context,
    order_ranks,
    permutation_masks,
    plm_batch,
    plm_loss,
    sample_orders,
    sample_spans,
)
from course_lib.train import fit

V = 5  # a vocabulary small enough to enumerate every sequence


def tiny_model(seed: int = 0, vocab_size: int = V, std: float = 0.5, double: bool = False):
    """A 2-layer XLNet with large random weights (so that the predictions depend on the context),
    no dropout, eval mode."""
    torch.manual_seed(seed)
    config = XLNetConfig(vocab_size=vocab_size, d_model=16, n_layer=2, n_head=2, d_inner=32, dropout=0.0)
    model = XLNetLMHeadModel(config)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g) * std
            p.copy_(1 + noise if "norm.weight" in name else noise)
    return (model.double() if double else model).eval()


def random_masks(n: int, width: int, g: torch.Generator) -> torch.Tensor:
    """[n, width] attention masks with padding anywhere (right, left, inside), some rows full,
    some of one token, some empty."""
    mask = (torch.rand(n, width, generator=g) < 0.75).long()
    mask[0] = 1
    mask[1] = 0
    mask[2] = 0
    mask[2, width // 2] = 1
    lengths = torch.randint(0, width + 1, (n // 4,), generator=g)
    mask[3 : 3 + n // 4] = (torch.arange(width)[None] < lengths[:, None]).long()  # right padding
    return mask


def rows(order: torch.Tensor) -> list[list[int]]:
    """Each row's order as a list of positions (the -1s dropped)."""
    return [[p for p in r if p >= 0] for r in order.tolist()]


def n_targets(length: int, n_predict=None, K=None) -> int:
    """The number of targets, from the definition."""
    if n_predict is not None:
        return min(n_predict, length)
    if K is not None:
        return 0 if length == 0 else max(1, math.floor(length / K))
    return length


def reference_masks(order: list[int], width: int, nt: int):
    """XLNet's masks for one order, written from the definition with loops: a target sees the
    positions before it in the order; a non-target sees the non-targets (itself included);
    padding sees nothing and is seen by nobody. Returns (perm_mask [T, T], targets in order)."""
    cut = len(order) - nt
    context, targets = order[:cut], order[cut:]
    perm = torch.ones(width, width)
    for i in order:
        sees = context if i in context else order[: order.index(i)]
        for j in sees:
            perm[i, j] = 0
    return perm, targets


def one_target(model, ids, mask, perm, pos: int) -> torch.Tensor:
    """The logits of one row's token at ``pos``, in a call of its own (``perm``: [T, T])."""
    mapping = torch.zeros(1, 1, ids.size(0))
    mapping[0, 0, pos] = 1
    out = model(ids[None], attention_mask=mask[None], perm_mask=perm[None], target_mapping=mapping)
    return out.logits[0, 0]


SETTINGS = [{}, {"K": 1}, {"K": 2}, {"K": 6}, {"K": 7}, {"K": 2.5}, {"n_predict": 1}, {"n_predict": 3}]


# ---------------------------------------------------------------------------------------
# Orders
# ---------------------------------------------------------------------------------------


def test_orders_are_permutations_of_the_real_positions_and_leave_the_input_alone():
    g = torch.Generator().manual_seed(0)
    mask = random_masks(200, 11, g)
    before = mask.clone()
    order = sample_orders(mask, torch.Generator().manual_seed(1))
    assert torch.equal(mask, before)
    assert order.shape == mask.shape and order.dtype == torch.long
    for r, m, full in zip(rows(order), mask.tolist(), order.tolist()):
        real = [i for i, v in enumerate(m) if v]
        assert sorted(r) == real  # a permutation of the real positions, padding never in it
        assert full == r + [-1] * (len(m) - len(real))
    assert sum(r != sorted(r) for r in rows(order)) > 100  # the orders are not the identity
    again = sample_orders(mask, torch.Generator().manual_seed(1))
    assert torch.equal(order, again)
    assert not torch.equal(order, sample_orders(mask, torch.Generator().manual_seed(2)))
    # lengths: the first lengths[b] positions are real
    by_length = sample_orders(torch.tensor([3, 0, 5]), 7, seq_len=6)
    assert [sorted(r) for r in rows(by_length)] == [[0, 1, 2], [], [0, 1, 2, 3, 4]]
    assert by_length.shape == (3, 6)


def test_orders_are_uniform():
    """Every one of the 3! orders of a 3-token row is drawn with probability 1/6 (5 sigma)."""
    n = 6000
    order = sample_orders(torch.full((n,), 3), torch.Generator().manual_seed(0))
    counts = {}
    for r in order.tolist():
        counts[tuple(r)] = counts.get(tuple(r), 0) + 1
    assert set(counts) == set(itertools.permutations(range(3)))
    sigma = math.sqrt(n * (1 / 6) * (5 / 6))
    for perm, c in counts.items():
        assert abs(c - n / 6) < 5 * sigma, (perm, c)


def test_bad_orders_and_arguments_are_refused():
    with pytest.raises(ValueError, match="twice"):
        permutation_masks([0, 1, 1])
    with pytest.raises(ValueError, match="positions in"):
        permutation_masks([0, 3, 1])
    with pytest.raises(ValueError, match="after the positions"):
        permutation_masks([0, -1, 1])
    with pytest.raises(ValueError, match="not both"):
        permutation_masks([0, 1], K=2, n_predict=1)
    with pytest.raises(ValueError, match="K must be"):
        permutation_masks([0, 1], K=0.5)
    with pytest.raises(ValueError, match="not in the order"):
        order_context([3, 2, 4, 1], 5)


# ---------------------------------------------------------------------------------------
# Masks
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("setting", SETTINGS, ids=[str(s) for s in SETTINGS])
def test_mask_invariants_over_many_orders(setting):
    g = torch.Generator().manual_seed(3)
    width = 12
    mask = random_masks(300, width, g)
    ids = torch.randint(0, 50, mask.shape, generator=g)
    order = sample_orders(mask, g)
    m = permutation_masks(order, input_ids=ids, **setting)
    lengths = mask.bool().sum(1)
    nt = torch.tensor([n_targets(int(n), **setting) for n in lengths])
    check_mask_invariants(order, mask, ids, m, nt)


def check_mask_invariants(order, mask, ids, m, nt):
    """Every property of XLNet's masks, by brute force over a batch: a target's query row sees
    exactly the positions before it in the order (never itself or a later one), non-targets see
    each other and never a target (in the content stream too), padding is invisible, and the
    targets are the last ``nt`` of each order, listed in ``target_mapping`` in that order."""
    rank = torch.full(mask.shape, -1)
    for b, r in enumerate(rows(order)):
        for t, p in enumerate(r):
            rank[b, p] = t
    assert torch.equal(order_ranks(order), rank)
    real = mask.bool()
    lengths = real.sum(1)
    width = mask.size(1)
    target = real & (rank >= (lengths - nt)[:, None])
    assert torch.equal(m.is_target, target)
    assert torch.equal(m.is_target.sum(1), nt)
    context = real & ~target
    visible = m.perm_mask == 0
    ti, tj = target[:, :, None], target[:, None, :]
    ci, cj = context[:, :, None], context[:, None, :]
    earlier = rank[:, None, :] < rank[:, :, None]  # [b, i, j]: j comes before i

    # a target sees nothing that comes at or after it in the order: never its own token
    assert not (visible & ti & ~earlier).any()
    assert (m.perm_mask.diagonal(dim1=1, dim2=2)[target] == 1).all()
    # ... and everything before it (every non-target included)
    assert (visible | ~(ti & earlier & (real[:, None, :]))).all()
    assert (visible | ~(ti & cj)).all()
    # non-targets never see a target, and see each other (themselves too)
    assert not (visible & ci & tj).any()
    assert (visible | ~(ci & cj)).all()
    # padding: never seen, sees nothing, never a target
    pad = ~real
    assert (m.perm_mask.transpose(1, 2)[pad] == 1).all()
    assert (m.perm_mask[pad] == 1).all()
    assert not m.is_target[pad].any()

    # targets: one-hot rows in the order's sequence, then zero rows with label -100
    width_p = int(nt.max())
    assert m.target_mapping.shape == (mask.size(0), width_p, width)
    assert torch.equal(m.target_mask, (torch.arange(width_p)[None] < nt[:, None]).float())
    assert torch.equal(m.target_mapping.sum(-1), m.target_mask)
    for b, r in enumerate(rows(order)):
        k = int(nt[b])
        expect = r[len(r) - k :]
        assert m.target_mapping[b, :k].argmax(-1).tolist() == expect
        assert m.target_positions[b].tolist() == expect + [-1] * (width_p - k)
        assert m.labels[b].tolist() == ids[b, expect].tolist() + [-100] * (width_p - k)

    # what the model makes of it: the query stream sees exactly `visible` (padding hidden), the
    # content stream that and itself
    h, q = XLNetModel.attention_masks(ids, 0, mask, None, m.perm_mask)
    assert torch.equal(q[:, 0], visible)
    assert torch.equal(h[:, 0], visible | torch.eye(width, dtype=torch.bool))
    assert not (h[:, 0] & ci & tj).any()  # a non-target's content stream never sees a target


@pytest.mark.parametrize("setting", SETTINGS, ids=[str(s) for s in SETTINGS])
def test_masks_match_a_loop_over_the_definition(setting):
    g = torch.Generator().manual_seed(5)
    width = 9
    mask = random_masks(120, width, g)
    ids = torch.randint(0, 50, mask.shape, generator=g)
    order = sample_orders(mask, g)
    m = permutation_masks(order, input_ids=ids, **setting)
    for b, r in enumerate(rows(order)):
        perm, targets = reference_masks(r, width, n_targets(len(r), **setting))
        assert torch.equal(m.perm_mask[b], perm), (r, setting)
        k = len(targets)
        assert m.target_positions[b, :k].tolist() == targets
        expect = torch.zeros(m.target_mapping.size(1), width)
        for p, pos in enumerate(targets):
            expect[p, pos] = 1
        assert torch.equal(m.target_mapping[b], expect)


def test_the_four_token_example():
    """The paper's order 3 -> 2 -> 4 -> 1 (1-based): 3 sees nothing, 2 sees {3}, 4 sees {3, 2},
    1 sees {3, 2, 4}."""
    assert order_context([3, 2, 4, 1], 3) == []
    assert order_context([3, 2, 4, 1], 2) == [3]
    assert order_context([3, 2, 4, 1], 4) == [3, 2]
    assert order_context([3, 2, 4, 1], 1) == [3, 2, 4]
    assert order_context(torch.tensor([2, 1, 3, 0, -1]), 0) == [2, 1, 3]

    order = [2, 1, 3, 0]  # the same order, 0-based
    m = permutation_masks(order, input_ids=torch.tensor([[10, 20, 30, 40]]))
    #                       sees 1  2  3  4
    perm = torch.tensor([[1, 0, 0, 0],  # 1: {2, 3, 4}
                         [1, 1, 0, 1],  # 2: {3}
                         [1, 1, 1, 1],  # 3: nothing
                         [1, 0, 0, 1]]).float()  # 4: {2, 3}  # fmt: skip
    assert torch.equal(m.perm_mask[0], perm)
    assert m.target_positions.tolist() == [[2, 1, 3, 0]]
    assert m.labels.tolist() == [[30, 20, 40, 10]]
    assert torch.equal(m.target_mapping[0], torch.eye(4)[[2, 1, 3, 0]])
    for i in range(4):
        assert set(torch.nonzero(perm[i] == 0).flatten().tolist()) == set(order_context(order, i))
    # the content stream of each token: its query stream's view and itself
    content, _ = XLNetModel.attention_masks(torch.zeros(1, 4, dtype=torch.long), 0, None, None, m.perm_mask)
    assert content[0, 0].long().tolist() == [[1, 1, 1, 1], [0, 1, 1, 0], [0, 0, 1, 0], [0, 1, 1, 1]]

    # partial prediction with K = 2: tokens 3 and 2 are context (they see each other), 4 and 1 targets
    half = permutation_masks(order, K=2)
    perm = torch.tensor([[1, 0, 0, 0],  # 1: {2, 3, 4}
                         [1, 0, 0, 1],  # 2: {2, 3}
                         [1, 0, 0, 1],  # 3: {2, 3}
                         [1, 0, 0, 1]]).float()  # 4: {2, 3}  # fmt: skip
    assert torch.equal(half.perm_mask[0], perm)
    assert half.target_positions.tolist() == [[3, 0]]


def test_partial_prediction_hides_each_target_from_earlier_ones():
    """Behaviour of the model under the masks: a target's prediction ignores its own token and
    the later targets' tokens, and depends on the non-targets."""
    model = tiny_model(1, vocab_size=20)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 20, (1, 8), generator=g)
    order = sample_orders(torch.ones(1, 8), g)
    m = permutation_masks(order, K=3)  # 2 targets of 8
    assert m.target_positions.size(1) == 2
    first, second = m.target_positions[0].tolist()

    def logits(x):
        with torch.no_grad():
            return model(x, perm_mask=m.perm_mask, target_mapping=m.target_mapping).logits[0]

    base = logits(ids)
    changed = ids.clone()
    changed[0, first] = (ids[0, first] + 1) % 20
    changed[0, second] = (ids[0, second] + 1) % 20
    out = logits(changed)
    assert torch.allclose(out[0], base[0], atol=1e-6)  # the first target: neither token seen
    assert not torch.allclose(out[1], base[1], atol=1e-3)  # the second sees the first
    context = order[0, 0].item()
    changed = ids.clone()
    changed[0, context] = (ids[0, context] + 1) % 20
    out = logits(changed)
    assert not torch.allclose(out[0], base[0], atol=1e-3)  # a non-target is seen by both


# ---------------------------------------------------------------------------------------
# Span targets
# ---------------------------------------------------------------------------------------

SPAN_SETTINGS = [{}, {"K": 3}, {"K": 2.5, "max_span": 3}, {"n_predict": 4}, {"K": 1}]


def spans_of(span_ids: list[int]) -> dict[int, list[int]]:
    """Span index -> the positions carrying it (sorted)."""
    out: dict[int, list[int]] = {}
    for i, v in enumerate(span_ids):
        if v >= 0:
            out.setdefault(v, []).append(i)
    return out


@pytest.mark.parametrize("setting", SPAN_SETTINGS, ids=[str(s) for s in SPAN_SETTINGS])
def test_span_targets_are_runs_of_consecutive_real_tokens_with_the_requested_count(setting):
    g = torch.Generator().manual_seed(7)
    mask = random_masks(300, 16, g)
    span_ids = sample_spans(mask, g, **setting)
    max_span = setting.get("max_span", 5)
    count = {k: v for k, v in setting.items() if k != "max_span"} or {"K": 6}
    assert span_ids.shape == mask.shape and span_ids.dtype == torch.long
    for r, m in zip(span_ids.tolist(), mask.tolist()):
        real = [i for i, v in enumerate(m) if v]
        assert all(r[i] == -1 for i in range(len(m)) if not m[i])  # padding never a target
        spans = spans_of(r)
        assert sorted(spans) == list(range(len(spans)))  # numbered 0, 1, ...
        for positions in spans.values():
            at = real.index(positions[0])
            assert positions == real[at : at + len(positions)]  # consecutive real tokens
            assert 1 <= len(positions) <= max_span
        assert sum(v >= 0 for v in r) == n_targets(len(real), **count)
    g = torch.Generator().manual_seed(7)
    assert torch.equal(sample_spans(random_masks(300, 16, g), g, **setting), span_ids)  # reproducible


def test_span_lengths_and_target_share_on_long_rows():
    """Rows of 600 tokens, K = 6: a sixth of the tokens are targets, in spans of length n = 1..5
    with p(n) ~ 1/n."""
    span_ids = sample_spans(torch.full((200,), 600), torch.Generator().manual_seed(0), K=6)
    sizes = [len(p) for r in span_ids.tolist() for p in spans_of(r).values()]
    share = (span_ids >= 0).float().mean().item()
    assert share == pytest.approx(100 / 600)
    counts = [sizes.count(n) for n in range(1, 6)]
    assert counts[1] > counts[2] > counts[3] > counts[4] > 100, counts
    for n in range(2, 6):  # p(n) / p(1) = 1 / n
        assert counts[n - 1] / counts[0] == pytest.approx(1 / n, rel=0.1), counts
    # the same count with the last 1/K of random orders: almost never a run of 5
    order = sample_orders(torch.full((200,), 600), torch.Generator().manual_seed(0))
    last = permutation_masks(order, K=6).is_target.long()
    runs5 = (last.unfold(1, 5, 1).sum(-1) == 5).sum().item()
    assert runs5 < counts[4] / 10


@pytest.mark.parametrize("length", [9, 13, 17, 40])
def test_every_position_of_a_row_can_be_a_span_target(length):
    """The windows tile the row: every position is a target about as often as with the last
    1/K of random orders (a walk that stopped at the count would leave the row's end out)."""
    n = 6000
    chosen = sample_spans(torch.full((n,), length), torch.Generator().manual_seed(length), K=6) >= 0
    share = chosen.float().mean(0)
    expected = max(1, length // 6) / length
    assert share.mean().item() == pytest.approx(expected)
    assert share.min().item() > 0.5 * expected, share.tolist()


@pytest.mark.parametrize("setting", SPAN_SETTINGS, ids=[str(s) for s in SPAN_SETTINGS])
def test_span_orders_put_every_target_last_and_the_masks_pass_every_check(setting):
    """The exhaustive mask checks of the last-1/K targets, on span targets: the order puts the
    spans after every non-target, so the same masks follow; and against a loop over the
    definition."""
    g = torch.Generator().manual_seed(11)
    width = 12
    mask = random_masks(300, width, g)
    ids = torch.randint(0, 50, mask.shape, generator=g)
    chosen = sample_spans(mask, g, **setting) >= 0
    order = sample_orders(mask, g, last=chosen)
    nt = chosen.sum(1)
    m = permutation_masks(order, n_predict=nt, input_ids=ids)
    assert torch.equal(m.is_target, chosen)
    check_mask_invariants(order, mask, ids, m, nt)
    for b, r in enumerate(rows(order)):
        perm, targets = reference_masks(r, width, int(nt[b]))
        assert torch.equal(m.perm_mask[b], perm)
        assert sorted(targets) == chosen[b].nonzero().flatten().tolist()
    # plm_batch(targets="span") is this composition, on one generator
    seed = 12
    gen = torch.Generator().manual_seed(seed)
    span_kw = {k: v for k, v in setting.items()}
    chosen = sample_spans(mask, gen, **span_kw) >= 0
    order = sample_orders(mask, gen, last=chosen)
    expect = permutation_masks(order, n_predict=chosen.sum(1), input_ids=ids)
    batch = plm_batch(ids, mask, generator=seed, targets="span", **span_kw)
    for k, v in expect.as_batch().items():
        assert torch.equal(batch[k], v), k


def test_orders_with_targets_last_are_uniform_within_each_part():
    n = 6000
    last = torch.tensor([[False, True, False, True]]).expand(n, 4)
    order = sample_orders(torch.full((n,), 4), torch.Generator().manual_seed(0), last=last)
    counts = {}
    for r in order.tolist():
        counts[tuple(r)] = counts.get(tuple(r), 0) + 1
    assert set(counts) == {(a, b, c, d) for a, b in ((0, 2), (2, 0)) for c, d in ((1, 3), (3, 1))}
    sigma = math.sqrt(n * 0.25 * 0.75)
    assert all(abs(c - n / 4) < 5 * sigma for c in counts.values()), counts


def test_a_span_is_predicted_with_none_of_its_tokens_in_the_context():
    """The first target of a span (in the order) depends on no token of the span; every target
    depends on the non-targets."""
    model = tiny_model(2, vocab_size=20)
    g = torch.Generator().manual_seed(3)
    ids = torch.randint(0, 20, (1, 12), generator=g)
    span_ids = torch.full((1, 12), -1)
    span_ids[0, 4:7] = 0  # one span of three tokens
    order = sample_orders(torch.ones(1, 12), g, last=span_ids >= 0)
    m = permutation_masks(order, n_predict=3)
    assert sorted(m.target_positions[0].tolist()) == [4, 5, 6]

    def logits(x):
        with torch.no_grad():
            return model(x, perm_mask=m.perm_mask, target_mapping=m.target_mapping).logits[0]

    base = logits(ids)
    changed = ids.clone()
    changed[0, 4:7] = (ids[0, 4:7] + 1) % 20
    assert torch.allclose(logits(changed)[0], base[0], atol=1e-6)  # the whole span is hidden from it
    assert not torch.allclose(logits(changed)[2], base[2], atol=1e-3)  # the last sees the first two
    changed = ids.clone()
    changed[0, 0] = (ids[0, 0] + 1) % 20
    assert not torch.allclose(logits(changed)[0], base[0], atol=1e-3)  # the context is seen


def test_span_arguments_are_checked_and_plm_loss_takes_span_targets():
    with pytest.raises(ValueError, match="targets must be one of"):
        plm_batch(torch.zeros(2, 4, dtype=torch.long), targets="spans")
    with pytest.raises(ValueError, match="max_span"):
        sample_spans(torch.ones(2, 4), 0, max_span=0)
    with pytest.raises(ValueError, match="last must be"):
        sample_orders(torch.ones(2, 4), 0, last=torch.ones(2, 3, dtype=torch.bool))
    model = tiny_model(0, vocab_size=20)
    g = torch.Generator().manual_seed(0)
    batch = {"input_ids": torch.randint(0, 20, (4, 13), generator=g), "attention_mask": torch.ones(4, 13)}
    loss, metrics = plm_loss(model, batch, K=3, targets="span", generator=0)
    assert torch.isfinite(loss) and 0 <= metrics["plm_accuracy"] <= 1


# ---------------------------------------------------------------------------------------
# Factorised probabilities
# ---------------------------------------------------------------------------------------


def test_factorised_log_prob_equals_one_call_per_target():
    model = tiny_model(2, vocab_size=30)
    g = torch.Generator().manual_seed(4)
    mask = random_masks(6, 7, g)
    mask[1] = 1  # no empty row here
    ids = torch.randint(0, 30, mask.shape, generator=g)
    order = sample_orders(mask, g)
    with torch.no_grad():
        got = factorised_log_prob(model, ids, order)
        expect = torch.zeros(6)
        for b, r in enumerate(rows(order)):
            for t, pos in enumerate(r):
                perm, _ = reference_masks(r, 7, len(r))  # the whole order's masks, one target
                logits = one_target(model, ids[b], mask[b], perm, pos)
                expect[b] += torch.log_softmax(logits, -1)[ids[b, pos]]
        assert torch.allclose(got, expect, atol=1e-5), (got, expect)
        # one order for the whole batch, and a single row
        shared = torch.tensor([4, 0, 6, 2, 1, 5, 3])
        both = factorised_log_prob(model, ids[:2], shared)
        assert torch.allclose(both[1], factorised_log_prob(model, ids[1], shared), atol=1e-6)
        assert factorised_log_prob(model, ids[1], shared).dim() == 0


@pytest.mark.parametrize("length", [3, 4])
def test_factorised_probabilities_sum_to_one(length):
    """Exhaustive: for one fixed order, the probabilities of all V**length sequences sum to 1,
    which fails if any conditional sees its own token or a later one."""
    model = tiny_model(3, double=True)
    seqs = torch.tensor(list(itertools.product(range(V), repeat=length)))
    order = torch.tensor([2, 0, 3, 1][:length] if length == 4 else [1, 2, 0])
    with torch.no_grad():
        logp = factorised_log_prob(model, seqs, order)
    assert logp.shape == (V**length,)
    total = logp.exp().sum().item()
    assert abs(total - 1) < 1e-10, total
    # the conditionals really depend on the context (else the sum would be trivially one)
    first = order[0].item()
    cond = {}
    for s, lp in zip(seqs.tolist(), logp.tolist()):
        cond.setdefault(s[first], []).append(lp)
    assert max(max(v) for v in cond.values()) - min(min(v) for v in cond.values()) > 0.5

    # control: the same sum with a leaky mask (the query stream sees its own token) is not one
    m = permutation_masks(order.expand(len(seqs), -1), input_ids=seqs)
    leaky = m.perm_mask.clone()
    leaky[:, range(length), range(length)] = 0
    with torch.no_grad():
        out = model(seqs, perm_mask=leaky, target_mapping=m.target_mapping.double())
    lp = torch.log_softmax(out.logits, -1).gather(-1, m.labels[..., None]).squeeze(-1).sum(-1)
    assert abs(lp.exp().sum().item() - 1) > 0.05


# ---------------------------------------------------------------------------------------
# Loss
# ---------------------------------------------------------------------------------------


def test_plm_loss_matches_a_hand_computation():
    model = tiny_model(4, vocab_size=V)
    g = torch.Generator().manual_seed(6)
    mask = torch.tensor([[1, 1, 1, 1, 1, 1, 1, 1], [0, 0, 1, 1, 1, 1, 1, 0], [1, 1, 1, 0, 0, 0, 0, 0]])
    ids = torch.randint(0, V, mask.shape, generator=g)
    order = sample_orders(mask, g)
    m = permutation_masks(order, K=3, input_ids=ids)  # 2, 1 and 1 targets
    assert m.target_mask.sum(1).tolist() == [2, 1, 1]
    batch = {"input_ids": ids, "attention_mask": mask, **m.as_batch()}
    loss, metrics = plm_loss(model, batch)

    nll, correct, count = 0.0, 0, 0
    with torch.no_grad():
        for b, r in enumerate(rows(order)):
            nt = max(1, len(r) // 3)
            perm, targets = reference_masks(r, 8, nt)
            for pos in targets:
                logits = one_target(model, ids[b], mask[b], perm, pos)
                nll -= torch.log_softmax(logits, -1)[ids[b, pos]].item()
                correct += int(logits.argmax().item() == ids[b, pos].item())
                count += 1
    assert count == 4 and 0 < correct < count  # (an accuracy of 0 or 1 would hide a wrong denominator)
    assert abs(loss.item() - nll / count) < 1e-5, (loss.item(), nll / count)
    assert metrics == {"plm_accuracy": pytest.approx(correct / count)}
    loss.backward()  # the loss trains the model
    assert model.transformer.mask_emb.grad is not None and model.transformer.mask_emb.grad.abs().sum() > 0


def test_plm_loss_draws_orders_for_a_plain_batch():
    """A batch without masks (a causal-LM batch: its [batch, seq] labels are replaced) gets a
    fresh order per row from the generator; the same seed gives the same loss as plm_batch."""
    model = tiny_model(5, vocab_size=30)
    g = torch.Generator().manual_seed(7)
    mask = torch.tensor([[1] * 10 + [0] * 2, [1] * 6 + [0] * 6])  # the last two columns are all padding
    ids = torch.randint(0, 30, mask.shape, generator=g)
    plain = {"input_ids": ids, "attention_mask": mask, "labels": ids.masked_fill(mask == 0, -100)}
    with torch.no_grad():
        a, ma = plm_loss(model, plain, K=2, generator=torch.Generator().manual_seed(0))
        b, _ = plm_loss(model, plain, K=2, generator=torch.Generator().manual_seed(0))
        c, _ = plm_loss(model, plain, K=2, generator=torch.Generator().manual_seed(1))
        ready = plm_batch(ids[:, :10], mask[:, :10], K=2, generator=torch.Generator().manual_seed(0))
        d, md = plm_loss(model, ready)
    assert ready["labels"].shape == (2, 5) and ready["target_mask"].sum().item() == 8
    assert torch.equal(ready["input_ids"], ids[:, :10])  # never reordered
    assert a.item() == b.item() == d.item() and ma == md
    assert a.item() != c.item()
    assert plm_batch(ids, mask)["target_mask"].sum().item() == 10 // 6 + 1  # K = 6 by default


def test_fit_lowers_the_permutation_lm_loss():
    """A few steps of fit() with plm_loss on rows of one repeated token: the targets can copy any
    non-target, and the loss falls well below log(12), the uniform guess."""
    torch.manual_seed(0)
    config = XLNetConfig(vocab_size=12, d_model=32, n_layer=2, n_head=2, d_inner=64, dropout=0.0)
    model = XLNetLMHeadModel(config)
    g = torch.Generator().manual_seed(0)
    starts = torch.randint(0, 12, (64, 1), generator=g)
    ids = starts.expand(-1, 10).contiguous()  # one token per row: any visible token gives the answer
    ones = torch.ones(16, 10, dtype=torch.long)
    data = [{"input_ids": ids[i : i + 16], "attention_mask": ones} for i in range(0, 64, 16)]
    gen = torch.Generator().manual_seed(1)
    history = fit(
        model,
        data,
        lambda m, b: plm_loss(m, b, K=2, generator=gen),
        steps=60,
        lr=3e-3,
        progress=False,
    )
    first, last = sum(history.loss[:5]) / 5, sum(history.loss[-5:]) / 5
    assert last < 0.5 * first, (first, last)
    assert sum(history.metrics["plm_accuracy"][-5:]) / 5 > 0.7
