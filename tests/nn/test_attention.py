"""Scaled dot-product attention: both paths, masks, bad input, parity with torch.nn.MultiheadAttention."""

import math

import pytest
import torch
from torch import nn

from course_lib.models.transformer import copy_mha_from_torch
from course_lib.nn import (
    MultiHeadAttention,
    attention,
    attention_explicit,
    attention_fast,
    causal_mask,
    check_mask,
    padding_mask,
)

TOL = 1e-5


def brute_force_attention(q, k, v, mask=None, bias=None):
    """Loop over every query and key: softmax(q.k / sqrt(d) + bias) over the allowed keys."""
    *lead, nq, d = q.shape
    nk = k.shape[-2]
    out = torch.zeros(*lead, nq, v.shape[-1], dtype=torch.float64)
    qf, kf, vf = (
        q.double().reshape(-1, nq, d),
        k.double().reshape(-1, nk, d),
        v.double().reshape(-1, nk, v.shape[-1]),
    )
    m = None if mask is None else mask.expand(*lead, nq, nk).reshape(-1, nq, nk)
    bb = None if bias is None else bias.double().expand(*lead, nq, nk).reshape(-1, nq, nk)
    o = out.view(-1, nq, v.shape[-1])
    for b in range(qf.shape[0]):
        for i in range(nq):
            scores = [
                float(qf[b, i] @ kf[b, j]) / math.sqrt(d) + (0.0 if bb is None else float(bb[b, i, j]))
                for j in range(nk)
            ]
            allowed = [j for j in range(nk) if m is None or bool(m[b, i, j])]
            if not allowed:
                continue
            top = max(scores[j] for j in allowed)
            w = {j: math.exp(scores[j] - top) for j in allowed}
            z = sum(w.values())
            for j in allowed:
                o[b, i] += w[j] / z * vf[b, j]
    return out.float()


@pytest.mark.parametrize("causal", [False, True])
def test_explicit_and_fast_paths_agree(causal):
    q, k, v = (torch.randn(2, 3, 7, 16) for _ in range(3))
    mask = padding_mask(torch.tensor([[1] * 7, [1] * 4 + [0] * 3]))
    out_e, w = attention_explicit(q, k, v, mask, causal=causal)
    out_f = attention_fast(q, k, v, mask, causal=causal)
    assert (out_e - out_f).abs().max() < TOL
    assert torch.allclose(w.sum(-1), torch.ones(2, 3, 7), atol=1e-6)
    assert w.shape == (2, 3, 7, 7)


def test_matches_brute_force_with_padding():
    q, k, v = torch.randn(2, 2, 5, 8), torch.randn(2, 2, 6, 8), torch.randn(2, 2, 6, 4)
    mask = padding_mask(torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 0, 1, 0, 0]]))
    ref = brute_force_attention(q, k, v, mask)
    out, w = attention(q, k, v, mask, return_weights=True)
    assert (out - ref).abs().max() < TOL
    assert (attention(q, k, v, mask)[0] - ref).abs().max() < TOL
    # masked keys get exactly zero weight
    assert w[1, :, :, [2, 4, 5]].abs().max() == 0


def test_fully_masked_rows_are_zero_in_both_paths():
    q, k, v = (torch.randn(1, 1, 3, 4) for _ in range(3))
    mask = torch.tensor([[True, True, False], [False, False, False], [True, False, False]])
    out_e, w = attention_explicit(q, k, v, mask)
    out_f = attention_fast(q, k, v, mask)
    assert torch.isfinite(out_e).all() and torch.isfinite(out_f).all()
    assert out_e[0, 0, 1].abs().max() == 0 and out_f[0, 0, 1].abs().max() == 0
    assert w[0, 0, 1].abs().max() == 0
    assert (out_e - out_f).abs().max() < TOL


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("bias_shape", [(2, 3, 5, 5), (3, 5, 5), (5, 5), (2, 1, 1, 5)])
def test_score_bias_matches_brute_force_with_masks(causal, bias_shape):
    torch.manual_seed(0)
    q, k, v = torch.randn(2, 3, 5, 8), torch.randn(2, 3, 5, 8), torch.randn(2, 3, 5, 4)
    bias = torch.randn(*bias_shape) * 2
    mask = padding_mask(torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]]))
    full = mask & causal_mask(5) if causal else mask
    ref = brute_force_attention(q, k, v, full, bias)
    out_e, w = attention_explicit(q, k, v, mask, bias=bias, causal=causal)
    out_f = attention_fast(q, k, v, mask, bias=bias, causal=causal)
    assert (out_e - ref).abs().max() < TOL
    assert (out_f - ref).abs().max() < TOL
    assert (attention(q, k, v, mask, bias=bias, causal=causal)[0] - ref).abs().max() < TOL
    assert w[1, :, :, 3:].abs().max() == 0  # masked keys get zero weight whatever their bias
    # a bias alone (no mask) through both paths
    ref_b = brute_force_attention(q, k, v, causal_mask(5) if causal else None, bias)
    assert (attention_fast(q, k, v, bias=bias, causal=causal) - ref_b).abs().max() < TOL
    assert (attention_explicit(q, k, v, bias=bias, causal=causal)[0] - ref_b).abs().max() < TOL


def test_score_bias_keeps_fully_masked_rows_zero():
    q, k, v = (torch.randn(1, 1, 3, 4) for _ in range(3))
    mask = torch.tensor([[True, True, False], [False, False, False], [True, False, False]])
    bias = torch.randn(3, 3)
    out_e, w = attention_explicit(q, k, v, mask, bias=bias)
    out_f = attention_fast(q, k, v, mask, bias=bias)
    assert torch.isfinite(out_e).all() and torch.isfinite(out_f).all()
    assert out_e[0, 0, 1].abs().max() == 0 and out_f[0, 0, 1].abs().max() == 0 and w[0, 0, 1].abs().max() == 0
    assert (out_e - brute_force_attention(q, k, v, mask, bias)).abs().max() < TOL
    assert (out_e - out_f).abs().max() < TOL


def test_multi_head_attention_takes_a_score_bias():
    torch.manual_seed(0)
    mha = MultiHeadAttention(16, 4).eval()
    x = torch.randn(2, 6, 16)
    bias = torch.randn(4, 6, 6)
    mask = padding_mask(torch.tensor([[1] * 6, [1] * 4 + [0] * 2]))
    with torch.no_grad():
        fast, _ = mha(x, mask=mask, bias=bias)
        slow, w = mha(x, mask=mask, bias=bias, return_weights=True)
        q, k, v = (mha.split_heads(lin(x)) for lin in (mha.w_q, mha.w_k, mha.w_v))
        ref = mha.w_o(mha.merge_heads(brute_force_attention(q, k, v, mask, bias)))
        plain, _ = mha(x, mask=mask)
        zero, _ = mha(x, mask=mask, bias=torch.zeros(6, 6))
    assert (fast - ref).abs().max() < TOL and (slow - ref).abs().max() < TOL
    assert (zero - plain).abs().max() < TOL  # a zero bias changes nothing
    assert torch.allclose(w[0].sum(-1), torch.ones(4, 6), atol=1e-6)
    with pytest.raises(ValueError, match="float"):
        mha(x, bias=torch.ones(6, 6, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"bias of shape \(5, 5\) does not broadcast"):
        mha(x, bias=torch.zeros(5, 5))


def test_causal_mask_shape_and_offset():
    m = causal_mask(3)
    assert m.tolist() == [[True, False, False], [True, True, False], [True, True, True]]
    m2 = causal_mask(2, key_length=4)  # two new queries after two cached keys
    assert m2.tolist() == [[True, True, True, False], [True, True, True, True]]


def test_causal_attention_leaks_nothing_from_the_future():
    mha = MultiHeadAttention(16, 4).eval()
    x = torch.randn(2, 6, 16)
    base, _ = mha(x, causal=True)
    for t in range(6):
        x2 = x.clone()
        x2[:, t] += torch.randn(2, 16) * 5
        out, _ = mha(x2, causal=True)
        if t > 0:
            assert (out[:, :t] - base[:, :t]).abs().max() == 0  # earlier outputs unchanged
        assert (out[:, t:] - base[:, t:]).abs().max() > 0  # later ones do change


def test_bad_inputs_raise_clear_errors():
    with pytest.raises(ValueError, match="divisible"):
        MultiHeadAttention(10, 3)
    mha = MultiHeadAttention(8, 2)
    x = torch.randn(2, 5, 8)
    with pytest.raises(ValueError, match=r"does not broadcast.*\[2, 2, 5, 5\]"):
        mha(x, mask=torch.ones(2, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match="boolean"):
        mha(x, mask=torch.zeros(5, 5))
    with pytest.raises(ValueError, match="batch, seq_len"):
        padding_mask(torch.ones(5))
    with pytest.raises(ValueError, match="batch, length, d_model"):
        mha(torch.randn(5, 8))
    assert check_mask(torch.ones(2, 1, 1, 5, dtype=torch.long), 2, 2, 5, 5).dtype == torch.bool


def test_parity_with_torch_multihead_attention():
    ref = nn.MultiheadAttention(32, 4, batch_first=True).eval()
    ours = MultiHeadAttention(32, 4).eval()
    copy_mha_from_torch(ours, ref)
    q, kv = torch.randn(3, 5, 32), torch.randn(3, 7, 32)
    keep = torch.tensor([[1] * 7, [1] * 5 + [0] * 2, [1] * 2 + [0] * 5])
    with torch.no_grad():
        ref_out, ref_w = ref(
            q, kv, kv, key_padding_mask=keep == 0, need_weights=True, average_attn_weights=False
        )
        out, w = ours(q, kv, kv, mask=padding_mask(keep), return_weights=True)
        fast, _ = ours(q, kv, kv, mask=padding_mask(keep))
        # causal self-attention
        cm = torch.triu(torch.ones(5, 5, dtype=torch.bool), 1)
        ref_c, _ = ref(q, q, q, attn_mask=cm)
        ours_c, _ = ours(q, causal=True)
    assert (out - ref_out).abs().max() <= TOL
    assert (fast - ref_out).abs().max() <= TOL
    assert (w - ref_w).abs().max() <= TOL
    assert (ours_c - ref_c).abs().max() <= TOL


def test_ablate_heads_zeroes_exactly_those_heads():
    from course_lib.nn import ablate_heads

    mha = MultiHeadAttention(16, 4).eval()
    x = torch.randn(2, 5, 16)
    full, _ = mha(x)
    with ablate_heads(mha, range(4)):
        none, _ = mha(x)
    assert torch.allclose(none, mha.w_o.bias.expand_as(none))  # only the bias is left
    with ablate_heads(mha, [1]):
        part, _ = mha(x)
    # by linearity of W_O: full - part is exactly head 1's contribution
    q, k, v = (mha.split_heads(f(x)) for f in (mha.w_q, mha.w_k, mha.w_v))
    heads, _ = attention(q, k, v)
    contrib = heads[:, 1].transpose(0, 1).reshape(5, 2, 4).transpose(0, 1) @ mha.w_o.weight[:, 4:8].T
    assert (full - part - contrib).abs().max() < 1e-5
    after, _ = mha(x)
    assert torch.equal(after, full)  # the hook is gone
    with pytest.raises(ValueError, match="out of range"):
        ablate_heads(mha, [4])


@pytest.mark.parametrize("case", ["none", "padding", "bias", "padding_and_bias", "causal"])
def test_cpu_dropout_path_equals_sdpa_with_the_same_random_numbers(case):
    """Training on the CPU takes the written-out path (SDPA's fallback has no fused kernel
    there): same output and gradients as SDPA under one seed, so the same dropout draws."""
    import torch.nn.functional as F

    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 3, 7, 16, requires_grad=True) for _ in range(3))
    mask = padding_mask(torch.tensor([[1] * 7, [1] * 4 + [0] * 3])) if "padding" in case else None
    bias = torch.randn(2, 3, 7, 7) if "bias" in case else None
    causal = case == "causal"
    attn_mask = mask
    if bias is not None:
        attn_mask = bias if mask is None else bias.masked_fill(~mask, float("-inf"))

    def run(fn):
        torch.manual_seed(7)
        out = fn()
        grads = torch.autograd.grad(out.square().sum(), (q, k, v))
        return out.detach(), grads

    ours, g_ours = run(lambda: attention_fast(q, k, v, mask, bias=bias, causal=causal, dropout_p=0.3))
    ref, g_ref = run(
        lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=0.3, is_causal=causal)
    )
    assert (ours - ref).abs().max() < TOL
    for a, b in zip(g_ours, g_ref):
        assert (a - b).abs().max() < 1e-4
    torch.manual_seed(8)  # positive control: another seed drops other weights
    other = attention_fast(q, k, v, mask, bias=bias, causal=causal, dropout_p=0.3).detach()
    assert (other - ours).abs().max() > 1e-2


def test_cpu_dropout_path_keeps_fully_masked_rows_zero():
    q, k, v = (torch.randn(1, 2, 4, 8) for _ in range(3))
    mask = torch.ones(1, 1, 4, 4, dtype=torch.bool)
    mask[..., 2, :] = False  # query 2 may see no key
    out = attention_fast(q, k, v, mask, dropout_p=0.2)
    assert torch.all(out[..., 2, :] == 0) and torch.isfinite(out).all()
    assert out[..., 0, :].abs().sum() > 0


@pytest.mark.parametrize("dropout_p", [0.0, 0.3])
def test_a_mask_that_hides_nothing_is_no_mask(dropout_p):
    """A batch without padding gives an all-True mask: attention_fast drops it (one check, then
    the unmasked kernels), with the same output and the same dropout draws as no mask at all;
    a mask that hides one key still changes the output (positive control)."""
    q, k, v = (torch.randn(2, 3, 7, 16) for _ in range(3))
    full = torch.ones(2, 1, 1, 7, dtype=torch.bool)
    outs = []
    for mask in (None, full):
        torch.manual_seed(5)
        outs.append(attention_fast(q, k, v, mask, dropout_p=dropout_p))
    assert torch.equal(outs[0], outs[1])
    hidden = full.clone()
    hidden[..., -1] = False
    torch.manual_seed(5)
    assert (attention_fast(q, k, v, hidden, dropout_p=dropout_p) - outs[0]).abs().max() > 1e-3


@pytest.mark.parametrize("dropout_p", [0.0, 0.3])
def test_a_padded_batch_costs_one_host_read_per_call(dropout_p, monkeypatch):
    """The mask checks read their two facts in one copy to the host (on a GPU each read makes
    the host wait for the queue: once per attention call, not twice), for a padded batch, a
    full one and one with an empty row. The reads are counted where Python asks a tensor for
    a value (``bool``, ``item``, ``tolist``); positive control: ``bool`` of a tensor counts."""
    reads = []
    for method in ("__bool__", "item", "tolist"):
        original = getattr(torch.Tensor, method)

        def counted(self, *args, _original=original, _method=method):
            reads.append(_method)
            return _original(self, *args)

        monkeypatch.setattr(torch.Tensor, method, counted)
    q, k, v = (torch.randn(2, 3, 5, 8) for _ in range(3))
    padded = padding_mask(torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]]))
    empty_row = torch.ones(1, 1, 5, 5, dtype=torch.bool)
    empty_row[..., 2, :] = False
    for mask in (padded, torch.ones_like(padded), empty_row):
        reads.clear()
        attention_fast(q, k, v, mask, dropout_p=dropout_p)
        assert len(reads) == 1, (mask.shape, reads)
    reads.clear()
    attention_fast(q, k, v, None, dropout_p=dropout_p)
    assert reads == []
    bool(padded.all())
    assert reads == ["__bool__"]
