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


def brute_force_attention(q, k, v, mask=None):
    """Loop over every query and key: the definition, with no broadcasting tricks."""
    *lead, nq, d = q.shape
    nk = k.shape[-2]
    out = torch.zeros(*lead, nq, v.shape[-1], dtype=torch.float64)
    qf, kf, vf = q.double().reshape(-1, nq, d), k.double().reshape(-1, nk, d), v.double().reshape(-1, nk, v.shape[-1])
    m = None if mask is None else mask.expand(*lead, nq, nk).reshape(-1, nq, nk)
    o = out.view(-1, nq, v.shape[-1])
    for b in range(qf.shape[0]):
        for i in range(nq):
            scores = [float(qf[b, i] @ kf[b, j]) / math.sqrt(d) for j in range(nk)]
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
        ref_out, ref_w = ref(q, kv, kv, key_padding_mask=keep == 0, need_weights=True, average_attn_weights=False)
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
