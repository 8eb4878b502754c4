"""Transformer-XL: every attention score from its definition by explicit loops, the relative
shift (and a wrong one caught), causality, memory (exact equivalences with one long run, no
gradient into the past, truncation, clear errors), the LM loss, short fits, segmented_nll,
the shared helpers of course_lib.nn.relative, configuration and exports."""

import math

import pytest
import torch
import torch.nn.functional as F

import course_lib
from course_lib.models.bert import next_token_loss
from course_lib.models.transfo_xl import (
    TransfoXLConfig,
    TransfoXLLMHeadModel,
    TransfoXLModel,
    segmented_nll,
)
from course_lib.nn import relative
from course_lib.nn.relative import check_mems, rel_shift, relative_distances, update_memory
from course_lib.train import fit

TOL = 1e-5  # brute force vs the model (float64 model, float64 loops)
EXACT = 1e-10  # two float64 computations of the same thing
V = 13
TINY = dict(vocab_size=V, d_model=8, n_head=2, n_layer=2, d_inner=16, mem_len=6, dropout=0.0)


def make(cls=TransfoXLLMHeadModel, seed: int = 0, std: float = 0.3, **overrides):
    """A float64 model in eval mode with large random weights (std ``std``: attention far from
    uniform, so a wrong score shows)."""
    torch.manual_seed(seed)
    config = TransfoXLConfig(**{**TINY, "init_std": std, **overrides})
    return cls(config).double().eval()


def ids(*shape: int, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, V, shape, generator=torch.Generator().manual_seed(seed))


def max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    assert a.shape == b.shape, (tuple(a.shape), tuple(b.shape))
    return (a - b).abs().max().item() if a.numel() else 0.0


# ---------------------------------------------------------------------------------------
# Brute force: the definition, one score at a time
# ---------------------------------------------------------------------------------------


def sinusoid(delta: float, d_model: int, clamp_len: int = -1) -> torch.Tensor:
    """R_delta = [sin(delta w_0..); cos(delta w_0..)], w_k = 10000^(-2k/d), from the formula."""
    if clamp_len > 0:
        delta = max(-clamp_len, min(clamp_len, delta))
    omega = torch.tensor([10000.0 ** (-2 * k / d_model) for k in range(d_model // 2)], dtype=torch.float64)
    return torch.cat([torch.sin(delta * omega), torch.cos(delta * omega)])


def brute_force_layer(layer, x: torch.Tensor, mem: torch.Tensor, clamp_len: int = -1):
    """One layer on one row by explicit loops: ``x`` [T, d] (the segment), ``mem`` [M, d].

    Returns (scores [H, T, M+T] including the masked ones, weights [H, T, M+T], attention
    output [T, d], layer output [T, d]), each score written as
    ((q_i + u) . k_j + (q_i + v) . W_R R_{M+i-j}) / sqrt(d_head).
    """
    attn = layer.attention
    n_heads, dh = attn.n_heads, attn.d_head
    d = x.size(1)
    keys = torch.cat([mem, x])
    m_len, t_len, k_len = mem.size(0), x.size(0), keys.size(0)
    wq, wk, wv, wr, wo = (w.weight for w in (attn.w_q, attn.w_k, attn.w_v, attn.w_r, attn.w_o))
    u, v = attn.r_w_bias, attn.r_r_bias
    scores = torch.zeros(n_heads, t_len, k_len, dtype=torch.float64)
    weights = torch.zeros_like(scores)
    heads_out = torch.zeros(t_len, d, dtype=torch.float64)
    for h in range(n_heads):
        cut = slice(h * dh, (h + 1) * dh)
        for i in range(t_len):
            q = (wq @ x[i])[cut]
            for j in range(k_len):
                k = (wk @ keys[j])[cut]
                r = (wr @ sinusoid(m_len + i - j, d, clamp_len))[cut]
                scores[h, i, j] = ((q + u[h]) @ k + (q + v[h]) @ r) / math.sqrt(dh)
            visible = m_len + i + 1  # keys 0 .. M + i
            weights[h, i, :visible] = torch.softmax(scores[h, i, :visible], dim=0)
            for j in range(visible):
                heads_out[i, cut] += weights[h, i, j] * (wv @ keys[j])[cut]
    out = heads_out @ wo.T
    o = F.layer_norm(
        x + out, (d,), layer.attention_norm.weight, layer.attention_norm.bias, layer.attention_norm.eps
    )
    ffn = layer.ffn.linear2(torch.relu(layer.ffn.linear1(o)))
    y = F.layer_norm(o + ffn, (d,), layer.ffn_norm.weight, layer.ffn_norm.bias, layer.ffn_norm.eps)
    return scores, weights, out, y


def brute_force_errors(
    model: TransfoXLLMHeadModel, seg1: torch.Tensor, seg2: torch.Tensor
) -> dict[str, float]:
    """Run seg1, then seg2 with its memory; compare every layer of seg2, row by row, with the
    loops. Returns the largest difference per quantity."""
    body = model.transformer
    with torch.no_grad():
        first = model(seg1)
        out = model(seg2, first.mems, output_attentions=True, output_hidden_states=True)
        errors = dict(scores=0.0, weights=0.0, attention=0.0, layer=0.0)
        m_len, t_len = first.mems[0].size(1), seg2.size(1)
        assert m_len + t_len > t_len  # memory present: more keys than queries
        pos_emb = body.relative_encoding(t_len, m_len + t_len)
        for n, layer in enumerate(body.layers):
            x, mem = out.hidden_states[n], first.mems[n]
            scores = layer.attention.scores(x, pos_emb=pos_emb, mem=mem)
            attended, _ = layer.attention(x, pos_emb=pos_emb, mem=mem)
            for b in range(seg2.size(0)):
                s, w, a, y = brute_force_layer(layer, x[b], mem[b], body.config.clamp_len)
                errors["scores"] = max(errors["scores"], max_diff(scores[b], s))
                errors["weights"] = max(errors["weights"], max_diff(out.attentions[n][b], w))
                errors["attention"] = max(errors["attention"], max_diff(attended[b], a))
                errors["layer"] = max(errors["layer"], max_diff(out.hidden_states[n + 1][b], y))
    return errors


@pytest.mark.parametrize("clamp_len", [-1, 3])
def test_every_score_weight_and_output_equals_the_definition_with_memory(clamp_len):
    model = make(clamp_len=clamp_len)
    errors = brute_force_errors(model, ids(2, 7, seed=1), ids(2, 4, seed=2))  # M = 6 keys of memory, T = 4
    assert max(errors.values()) <= TOL, errors


def test_the_masked_scores_are_zero_weights_and_the_memory_is_visible_to_all():
    model = make()
    first = model(ids(2, 7))
    out = model(ids(2, 4, seed=2), first.mems, output_attentions=True)
    m_len = first.mems[0].size(1)
    for w in out.attentions:
        for i in range(4):
            assert torch.all(w[:, :, i, m_len + i + 1 :] == 0)  # keys to the right of the query
            assert torch.all(w[:, :, i, : m_len + i + 1] > 0)  # memory and the past
        torch.testing.assert_close(w.sum(-1), torch.ones_like(w.sum(-1)))


# ---------------------------------------------------------------------------------------
# The relative shift
# ---------------------------------------------------------------------------------------


def shift_by_indexing(scores: torch.Tensor, k_len: int) -> torch.Tensor:
    """out[..., i, j] = scores[..., i, j + q_len - i], one entry at a time."""
    q_len = scores.size(-2)
    out = scores.new_zeros(*scores.shape[:-1], k_len)
    for i in range(q_len):
        for j in range(k_len):
            out[..., i, j] = scores[..., i, j + q_len - i]
    return out


def mirrored_shift(scores: torch.Tensor, k_len: int) -> torch.Tensor:
    """A plausible bug: the shift applied to the rows in reverse order, so row i moves by
    i + 1 instead of q_len - i (out[i, j] = scores[i, j + 1 + i])."""
    return rel_shift(scores.flip(-2), k_len).flip(-2)


@pytest.mark.parametrize("q_len,k_len", [(1, 1), (1, 5), (3, 3), (3, 8), (5, 2), (4, 10), (7, 7)])
def test_rel_shift_equals_indexing_and_puts_each_distance_under_its_key(q_len, k_len):
    scores = torch.randn(2, 3, q_len, k_len + q_len)
    assert torch.equal(rel_shift(scores, k_len), shift_by_indexing(scores, k_len))
    # a score that *is* the distance of its column ends up as M + i - j under key j
    dist = relative_distances(q_len, k_len).expand(q_len, -1)
    m_len = k_len - q_len
    expected = m_len + torch.arange(q_len)[:, None] - torch.arange(k_len)[None, :]
    assert torch.equal(rel_shift(dist, k_len), expected.float())
    if q_len > 1:
        assert not torch.equal(mirrored_shift(scores, k_len), shift_by_indexing(scores, k_len))


def test_rel_shift_reads_in_place_with_the_indexing_gradient():
    """One strided view of the scores (no copy), also of wider or non-contiguous scores, and
    the gradient of indexing."""
    scores = torch.randn(2, 3, 4, 6 + 4 + 2, requires_grad=True)  # two columns more than needed
    out = rel_shift(scores, 6)
    assert out.untyped_storage().data_ptr() == scores.untyped_storage().data_ptr()
    assert torch.equal(out, shift_by_indexing(scores.detach(), 6))
    grad = torch.randn_like(out)
    (out * grad).sum().backward()
    ref = scores.detach().clone().requires_grad_()
    (shift_by_indexing(ref, 6) * grad).sum().backward()
    assert torch.equal(scores.grad, ref.grad)
    blocks = torch.randn(3, 2, 5, 7).transpose(0, 1)  # [2, 3, 5, 7]: contiguous blocks, permuted
    assert torch.equal(rel_shift(blocks, 2), shift_by_indexing(blocks, 2))
    assert rel_shift(blocks, 2).untyped_storage().data_ptr() == blocks.untyped_storage().data_ptr()
    columns = torch.randn(2, 5, 9)[..., :7]  # rows with a gap: copied first
    assert torch.equal(rel_shift(columns, 2), shift_by_indexing(columns, 2))
    transposed = torch.randn(2, 7, 5).transpose(-1, -2)  # [2, 5, 7], columns contiguous
    assert torch.equal(rel_shift(transposed, 2), shift_by_indexing(transposed, 2))


def test_rel_shift_traces_under_torch_compile_without_a_graph_break():
    """Under dynamo the shift is built from views (no storage offset read in Python), traced
    whole, with the same values and gradient as indexing; the count is real (positive control:
    a Python read of a tensor's storage offset breaks)."""
    scores = torch.randn(2, 3, 4, 10)
    explained = torch._dynamo.explain(rel_shift)(scores, 6)
    assert explained.graph_break_count == 0 and explained.graph_count == 1
    torch._dynamo.reset()
    compiled = torch.compile(rel_shift, backend="eager", fullgraph=True)
    for block in (scores, torch.randn(3, 2, 4, 10).transpose(0, 1), torch.randn(2, 4, 12)[..., :10]):
        x = block.clone().requires_grad_()
        out = compiled(x, 6)
        assert torch.equal(out, shift_by_indexing(block, 6))
        grad = torch.randn_like(out)
        (out * grad).sum().backward()
        ref = block.clone().requires_grad_()
        (shift_by_indexing(ref, 6) * grad).sum().backward()
        assert torch.equal(x.grad, ref.grad)

    def offset_read(x):
        return x[..., 1:] * x[..., 1:].storage_offset()

    assert torch._dynamo.explain(offset_read)(scores).graph_break_count >= 1


def test_rel_shift_refuses_too_few_columns():
    with pytest.raises(ValueError, match="k_len \\+ q_len"):
        rel_shift(torch.zeros(3, 6), k_len=4)


def test_a_mirrored_shift_is_caught_by_the_brute_force(monkeypatch):
    model = make()
    seg1, seg2 = ids(2, 7, seed=1), ids(2, 4, seed=2)
    right = brute_force_errors(model, seg1, seg2)
    monkeypatch.setattr(relative, "rel_shift", mirrored_shift)
    wrong = brute_force_errors(model, seg1, seg2)
    assert max(right.values()) <= TOL, right
    assert wrong["scores"] > 1e-2 and wrong["layer"] > 1e-3, wrong


# ---------------------------------------------------------------------------------------
# Causality and memory
# ---------------------------------------------------------------------------------------


def test_a_future_token_never_changes_earlier_outputs_or_memory():
    model = make(mem_len=20)
    mems = model(ids(2, 5, seed=3)).mems
    x = ids(2, 8)
    base = model(x, mems, output_hidden_states=True)
    for t in range(8):
        y = x.clone()
        y[:, t] = (y[:, t] + 1) % V
        out = model(y, mems, output_hidden_states=True)
        assert max_diff(out.logits[:, :t], base.logits[:, :t]) <= EXACT
        assert max_diff(out.logits[:, t:], base.logits[:, t:]) > 1e-6  # the token itself counts
        for new, old in zip(out.mems, base.mems):  # memory: 5 old positions, then this segment's
            assert max_diff(new[:, : 5 + t], old[:, : 5 + t]) <= EXACT


def test_the_memory_is_used():
    model = make()
    seg1, seg2 = ids(2, 6, seed=1), ids(2, 4, seed=2)
    other = seg1.clone()
    other[:, 0] = (other[:, 0] + 1) % V
    a = model(seg2, model(seg1).mems).logits
    b = model(seg2, model(other).mems).logits
    assert max_diff(a, b) > 1e-6


def test_segments_with_enough_memory_equal_one_long_run():
    """Causal attention with a memory that holds everything before the segment is the full
    causal attention: three segments of 4 with mem_len = 8 give the outputs of one run over
    all 12 tokens, in every layer."""
    model = make(n_layer=3, mem_len=8)
    x = ids(2, 12)
    full = model(x, output_hidden_states=True)
    mems, worst = None, 0.0
    for s in range(0, 12, 4):
        out = model(x[:, s : s + 4], mems, output_hidden_states=True)
        mems = out.mems
        for mine, whole in zip(out.hidden_states, full.hidden_states):
            worst = max(worst, max_diff(mine, whole[:, s : s + 4]))
        worst = max(worst, max_diff(out.logits, full.logits[:, s : s + 4]))
    assert worst <= EXACT, worst


def test_one_layer_with_a_short_memory_equals_a_run_over_the_window():
    """With one layer the memory is the embeddings of the last mem_len tokens, so segment 2
    sees exactly the window x[L - M : 2L]: running that window with no memory gives the same
    outputs (relative positions: the window's offset does not matter). With two layers it does
    not hold: layer 2's memory was computed with context before the window (the receptive field
    grows beyond mem_len with depth)."""
    seg_len, m = 6, 3
    x = ids(2, 2 * seg_len)
    for n_layers, same in ((1, True), (2, False)):
        model = make(n_layer=n_layers, mem_len=m)
        mems = model(x[:, :seg_len]).mems
        assert mems[0].size(1) == m
        with_memory = model(x[:, seg_len:], mems).logits
        window = model(x[:, seg_len - m :], mem_len=0).logits[:, m:]
        diff = max_diff(with_memory, window)
        assert (diff <= EXACT) if same else (diff > 1e-6), (n_layers, diff)


def test_memory_is_detached_no_gradient_reaches_the_previous_segment():
    model = make(dropout=0.1).train()
    seg1, seg2 = ids(2, 5, seed=1), ids(2, 5, seed=2)
    first = model(seg1, labels=seg1, output_hidden_states=True)
    assert all(not m.requires_grad and m.grad_fn is None for m in first.mems)
    second = model(seg2, first.mems, labels=seg2)
    (grad,) = torch.autograd.grad(second.loss, first.hidden_states[0], retain_graph=True, allow_unused=True)
    assert grad is None  # segment 2's loss does not depend on segment 1's graph
    first.loss.backward()  # frees segment 1's graph ...
    second.loss.backward()  # ... and segment 2 still backpropagates: it never used that graph
    assert all(p.grad is not None for p in model.transformer.layers[0].parameters())


def test_memory_keeps_the_last_mem_len_input_states_of_every_layer():
    model = make(mem_len=5)
    x = ids(2, 9)
    mems, seen = None, [torch.zeros(2, 0, 8, dtype=torch.float64) for _ in range(2)]
    for s, expected_len in ((0, 3), (3, 5), (6, 5)):
        out = model(x[:, s : s + 3], mems, output_hidden_states=True)
        seen = [torch.cat([old, h], dim=1) for old, h in zip(seen, out.hidden_states)]
        mems = out.mems
        assert len(mems) == 2
        for m, states in zip(mems, seen):
            assert m.shape == (2, expected_len, 8)
            assert torch.equal(m, states[:, -5:])
    assert model(x, mem_len=0).mems is None
    assert model(x, mem_len=2).mems[1].shape == (2, 2, 8)
    assert make(mem_len=0)(x).mems is None


def test_mems_errors_name_the_problem():
    model = make()
    x = ids(2, 4)
    mems = model(x).mems
    with pytest.raises(ValueError, match="one tensor per layer \\(2\\), got 1"):
        model(x, mems[:1])
    with pytest.raises(ValueError, match="batch=3"):
        model(ids(3, 4), mems)
    with pytest.raises(ValueError, match="batch first"):
        model(x, [m.transpose(0, 1) for m in mems])  # time-first, as Hugging Face keeps them
    with pytest.raises(ValueError, match="d_model=8"):
        model(x, [m[..., :4] for m in mems])
    with pytest.raises(ValueError, match="all of one length"):
        model(x, [mems[0], mems[1][:, :2]])
    with pytest.raises(ValueError, match="mem_len"):
        model(x, mem_len=-1)


# ---------------------------------------------------------------------------------------
# The shared helpers of course_lib.nn.relative
# ---------------------------------------------------------------------------------------


def test_update_memory_keeps_the_last_positions_detached_in_either_layout():
    old = torch.arange(2 * 3 * 2.0).view(2, 3, 2)
    new = -torch.arange(2 * 4 * 2.0, requires_grad=True).view(2, 4, 2)
    both = torch.cat([old, new], dim=1)
    kept = update_memory(old, new, 5)
    assert torch.equal(kept, both[:, -5:]) and not kept.requires_grad
    assert torch.equal(update_memory(old, new, None), both)  # None keeps everything
    assert torch.equal(update_memory(old, new, 100), both)
    assert torch.equal(update_memory(None, new, 2), new[:, -2:])
    assert update_memory(old, new, 0) is None
    time_first = update_memory(old.transpose(0, 1), new.transpose(0, 1), 5, seq_dim=0)
    assert torch.equal(time_first, both[:, -5:].transpose(0, 1))
    with pytest.raises(ValueError, match="mem_len"):
        update_memory(old, new, -1)
    with pytest.raises(ValueError, match="every dimension but the sequence"):
        update_memory(old[:1], new, 5)


def test_check_mems_accepts_both_layouts_and_refuses_wrong_ones():
    mems = [torch.zeros(2, 5, 8) for _ in range(3)]
    assert check_mems(None, 3, 2, 8) is None
    assert len(check_mems(tuple(mems), 3, 2, 8)) == 3
    assert len(check_mems([m.transpose(0, 1) for m in mems], 3, 2, 8, seq_dim=0)) == 3
    with pytest.raises(ValueError, match="time first"):
        check_mems(mems, 3, 2, 8, seq_dim=0)
    with pytest.raises(ValueError, match="one tensor per layer"):
        check_mems(mems, 4, 2, 8)
    with pytest.raises(ValueError, match="batch first"):
        check_mems([torch.zeros(2, 8)] * 3, 3, 2, 8)


# ---------------------------------------------------------------------------------------
# The language model
# ---------------------------------------------------------------------------------------


def test_the_loss_is_the_next_token_cross_entropy_by_hand():
    model = make()
    x = ids(3, 6)
    labels = x.clone()
    labels[0, 2] = labels[2, 5] = -100
    out = model(x, model(ids(3, 4)).mems, labels=labels)
    logp = torch.log_softmax(out.logits, dim=-1)
    terms = [-logp[b, t, labels[b, t + 1]] for b in range(3) for t in range(5) if labels[b, t + 1] != -100]
    assert len(terms) == 13
    assert abs(out.loss.item() - torch.stack(terms).mean().item()) <= EXACT
    assert next_token_loss(out.logits, torch.full_like(x, -100)).item() == 0.0
    with pytest.raises(ValueError, match="shifted inside"):
        model(x, labels=x[:, 1:])


def test_the_head_is_the_tied_embedding_with_a_bias():
    model = make()
    assert model.lm_head.weight is model.transformer.word_embedding.weight
    out = model(ids(2, 5), output_hidden_states=True)
    by_hand = out.hidden_states[-1] @ model.transformer.word_embedding.weight.T + model.lm_head.bias
    assert max_diff(out.logits, by_hand) <= EXACT
    untied = make(tie_word_embeddings=False)
    assert untied.lm_head.weight is not untied.transformer.word_embedding.weight
    assert untied.num_parameters() == model.num_parameters() + V * 8


def test_a_short_fit_lowers_the_loss_on_a_repeating_pattern():
    torch.manual_seed(0)
    config = TransfoXLConfig(
        vocab_size=V, d_model=32, n_head=4, n_layer=2, d_inner=64, mem_len=8, dropout=0.0
    )
    model = TransfoXLLMHeadModel(config)
    pattern = torch.tensor([3, 1, 4, 1, 5, 9, 2, 6])
    rows = torch.stack([pattern.roll(-k).repeat(2) for k in range(8)])  # [8, 16]
    history = fit(model, [rows], lambda m, b: m(b, labels=b).loss, steps=30, lr=1e-2, progress=False)
    first, last = sum(history.loss[:3]) / 3, sum(history.loss[-3:]) / 3
    assert last < 0.5 * first, (first, last)


# ---------------------------------------------------------------------------------------
# segmented_nll
# ---------------------------------------------------------------------------------------


def test_segmented_nll_shapes_and_what_it_equals():
    model = make(mem_len=12)
    x = ids(2, 11)
    full = model(x).logits[:, :-1]
    by_token = -torch.log_softmax(full, -1).gather(-1, x[:, 1:, None])[..., 0]  # [2, 10]
    nll = segmented_nll(model, x, 4)  # segments 4, 4, 3; the memory holds everything before
    assert nll.shape == (2, 10) and nll.dtype == torch.float64
    assert max_diff(nll, by_token) <= EXACT
    alone = segmented_nll(model, x, 4, mem_len=0)  # no memory: every segment on its own
    for s in range(0, 11, 4):
        seg = x[:, s : s + 5]  # the segment and the next token, which its last position predicts
        logits = model(x[:, s : s + 4], mem_len=0).logits[:, : seg.size(1) - 1]
        expected = -torch.log_softmax(logits, -1).gather(-1, seg[:, 1:, None])[..., 0]
        assert max_diff(alone[:, s : s + expected.size(1)], expected) <= EXACT
    assert max_diff(alone[:, :4], nll[:, :4]) <= EXACT  # the first segment has no memory either way
    model.train()
    segmented_nll(model, x, 4)
    assert model.training  # the mode is restored


def test_segmented_nll_refuses_bad_arguments():
    model = make()
    with pytest.raises(ValueError, match="seq_len >= 2"):
        segmented_nll(model, ids(2, 1), 4)
    with pytest.raises(ValueError, match="segment_len"):
        segmented_nll(model, ids(2, 5), 0)
    with pytest.raises(ValueError, match="mem_len"):
        segmented_nll(model, ids(2, 5), 2, mem_len=-1)
    with pytest.raises(TypeError, match="TransfoXLLMHeadModel"):
        segmented_nll(model.transformer, ids(2, 5), 2)


def test_memory_lowers_the_nll_of_a_period_longer_than_the_segment():
    """Rows repeat a random pattern of 6 tokens; segments are 4 long. After training with
    memory (as Transformer-XL trains: segments in order, memory carried), a token is predicted
    by copying the one 6 back, which only the memory shows: without memory the same model
    cannot see it."""
    period, seg_len, length = 6, 4, 24

    def periodic(n: int, gen: torch.Generator) -> torch.Tensor:
        return torch.randint(0, 8, (n, period), generator=gen).repeat(1, length // period)

    def loss_fn(m, batch):
        mems, total = None, 0.0
        for s in range(0, length, seg_len):
            out = m(batch[:, s : s + seg_len], mems, labels=batch[:, s : s + seg_len])
            mems, total = out.mems, total + out.loss
        return total / (length // seg_len)

    torch.manual_seed(0)
    config = TransfoXLConfig(
        vocab_size=8, d_model=32, n_head=4, n_layer=1, d_inner=64, mem_len=8, dropout=0.0
    )
    model = TransfoXLLMHeadModel(config)
    gen = torch.Generator().manual_seed(1)
    fit(model, lambda step: periodic(32, gen), loss_fn, steps=120, lr=1e-2, progress=False)
    test = periodic(16, torch.Generator().manual_seed(99))
    with_memory = segmented_nll(model, test, seg_len)[:, period:].mean().item()
    without = segmented_nll(model, test, seg_len, mem_len=0)[:, period:].mean().item()
    assert with_memory < 0.5 < math.log(8) < without, (with_memory, without)


# ---------------------------------------------------------------------------------------
# Configuration and exports
# ---------------------------------------------------------------------------------------


def test_config_validates_and_round_trips():
    c = TransfoXLConfig(**TINY)
    assert c.d_head == 4 and c.n_head == 2 and c.n_layer == 2 and c.d_inner == 16
    for course_name in ("n_heads", "n_layers", "d_ff", "hidden_size", "initializer_range"):  # one vocabulary
        assert not hasattr(c, course_name), course_name
    assert TransfoXLConfig(**c.to_dict()) == c
    assert TransfoXLConfig().d_head == 41
    for bad, match in (
        (dict(d_model=9), "divisible"),
        (dict(d_head=3), "d_head=3"),
        (dict(d_model=6, n_head=2), None),  # fine: 3 per head, even d_model
        (dict(d_model=3, n_head=3), "even"),
        (dict(mem_len=-1), "mem_len"),
        (dict(dropout=1.0), "dropout"),
        (dict(vocab_size=0), "vocab_size"),
        (dict(pad_token_id=V), "pad_token_id"),
        (dict(ff_activation="nope"), "unknown activation"),
    ):
        if match is None:
            TransfoXLConfig(**{**TINY, **bad})
            continue
        with pytest.raises(ValueError, match=match):
            TransfoXLConfig(**{**TINY, **bad})
    with pytest.raises(TypeError, match="TransfoXLConfig"):
        TransfoXLModel(object())


def test_input_checks():
    model = make()
    with pytest.raises(ValueError, match="vocab_size"):
        model(torch.tensor([[0, V]]))
    with pytest.raises(ValueError, match="batch, seq_len"):
        model(torch.tensor([1, 2]))
    with pytest.raises(ValueError, match="integer"):
        model(torch.zeros(1, 3))


def test_parameters_sharing_device_and_exports():
    model = make()
    d, f = 8, 16
    per_layer = 5 * d * d + 2 * d + 2 * 2 * d + (d * f + f) + (f * d + d)  # q k v r o, u v, 2 LN, FFN
    assert model.transformer.num_parameters() == V * d + 2 * per_layer
    assert model.num_parameters() == V * d + 2 * per_layer + V  # tied matrix once, plus the bias
    assert model.num_parameters(exclude_embeddings=True) == 2 * per_layer + V
    shared = make(untie_r=False)
    layers = shared.transformer.layers
    assert layers[0].attention.r_w_bias is layers[1].attention.r_w_bias
    assert shared.num_parameters() == model.num_parameters() - 2 * d
    assert model.device == torch.device("cpu") and model.config_class is TransfoXLConfig
    assert TransfoXLModel.config_class is TransfoXLConfig and model.transformer.config is model.config
    assert course_lib.TransfoXLConfig is TransfoXLConfig
    assert course_lib.TransfoXLModel is TransfoXLModel
    assert course_lib.TransfoXLLMHeadModel is TransfoXLLMHeadModel
    out = model(ids(1, 3))
    assert out.keys() == ["logits", "mems"] and out[0] is out.logits
