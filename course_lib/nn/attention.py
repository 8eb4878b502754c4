r"""Scaled dot-product attention and multi-head attention.

.. math::

    \mathrm{Attention}(Q, K, V) = \mathrm{softmax}\!\left(\frac{Q K^\top}{\sqrt{d_k}}\right) V

Two paths compute the same thing:

* :func:`attention_explicit` writes the formula out and also returns the attention
  weights (for teaching, plots and ``output_attentions``);
* :func:`attention_fast` calls :func:`torch.nn.functional.scaled_dot_product_attention`,
  which picks a fused kernel (flash or memory-efficient attention) and never materialises
  the weights.

:func:`attention` chooses: the explicit path when weights are asked for, the fast path
otherwise. Both agree to float32 precision (tested).

Masks are boolean and broadcast to ``[batch, heads, query_len, key_len]``; ``True`` means
"may attend" (the same convention as PyTorch's SDPA). A query row whose keys are all
masked gets a zero output and zero weights in both paths.

A ``bias`` is a float tensor added to the scores before the softmax, broadcast the same way:

.. math::

    \mathrm{softmax}\!\left(\frac{Q K^\top}{\sqrt{d_k}} + B\right) V

It carries what the mask cannot: relative-position scores (Transformer-XL, XLNet), ALiBi
slopes, any learned score offset. Hide keys with the boolean mask, not with ``-inf`` in the
bias: only the mask gives fully masked rows their defined zero output.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = [
    "attention",
    "attention_explicit",
    "attention_fast",
    "causal_mask",
    "padding_mask",
    "combine_masks",
    "check_mask",
    "check_bias",
    "MultiHeadAttention",
    "ablate_heads",
]


def causal_mask(
    length: int, *, device: torch.device | str | None = None, key_length: int | None = None
) -> Tensor:
    """Boolean ``[length, key_length]`` mask, True on and below the diagonal.

    Query ``i`` may attend to keys ``0..i`` (plus any extra leading keys when
    ``key_length > length``, as with a cache or memory).
    """
    key_length = length if key_length is None else key_length
    offset = key_length - length
    return torch.ones(length, key_length, dtype=torch.bool, device=device).tril(diagonal=offset)


def padding_mask(attention_mask: Tensor) -> Tensor:
    """``[batch, key_len]`` 1/0 (or bool) -> boolean ``[batch, 1, 1, key_len]`` (True = real token)."""
    if attention_mask.dim() != 2:
        raise ValueError(
            f"attention_mask must be [batch, seq_len] with 1 for real tokens and 0 for padding, "
            f"got shape {tuple(attention_mask.shape)}"
        )
    return attention_mask.to(torch.bool)[:, None, None, :]


def combine_masks(*masks: Tensor | None) -> Tensor | None:
    """Logical AND of the given boolean masks (None entries are ignored)."""
    out = None
    for m in masks:
        if m is None:
            continue
        out = m if out is None else out & m
    return out


def _check_broadcast(t: Tensor, what: str, target: tuple[int, int, int, int]) -> None:
    """``ValueError`` unless ``t`` broadcasts to ``target`` = ``[batch, heads, q_len, k_len]``."""
    shape = (1,) * (4 - t.dim()) + tuple(t.shape)
    if t.dim() > 4 or not all(s == 1 or s == n for s, n in zip(shape, target)):
        raise ValueError(
            f"attention {what} of shape {tuple(t.shape)} does not broadcast to "
            f"[batch, heads, query_len, key_len] = {list(target)}"
        )


def check_mask(mask: Tensor | None, batch: int, heads: int, q_len: int, k_len: int) -> Tensor | None:
    """Validate a mask against the attention shape; return it as bool.

    Raises ``ValueError`` naming the expected shape when the mask cannot broadcast to
    ``[batch, heads, q_len, k_len]``.
    """
    if mask is None:
        return None
    if mask.dtype != torch.bool:
        if mask.is_floating_point():
            raise ValueError(
                "attention masks are boolean (True = may attend); got a float mask. "
                "Convert an additive mask with `mask == 0` or a 1/0 mask with `mask.bool()`."
            )
        mask = mask.to(torch.bool)
    _check_broadcast(mask, "mask", (batch, heads, q_len, k_len))
    return mask


def check_bias(bias: Tensor | None, batch: int, heads: int, q_len: int, k_len: int) -> Tensor | None:
    """Validate an additive score bias: a float tensor that broadcasts to the attention shape.

    Raises ``ValueError`` for a boolean bias (that is a mask) or one that cannot broadcast to
    ``[batch, heads, q_len, k_len]``.
    """
    if bias is None:
        return None
    if not bias.is_floating_point():
        raise ValueError(
            f"an attention bias is a float tensor added to the scores; got dtype {bias.dtype}. "
            "Pass boolean masks as `mask`."
        )
    _check_broadcast(bias, "bias", (batch, heads, q_len, k_len))
    return bias


def attention_explicit(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None = None,
    *,
    bias: Tensor | None = None,
    causal: bool = False,
    dropout_p: float = 0.0,
    scale: float | None = None,
) -> tuple[Tensor, Tensor]:
    r"""The formula written out: returns ``(output, weights)``.

    ``q``: ``[..., q_len, d_k]``, ``k``: ``[..., k_len, d_k]``, ``v``: ``[..., k_len, d_v]``.
    ``weights`` has shape ``[..., q_len, k_len]`` and each unmasked row sums to 1.
    ``bias`` (float, broadcast to ``[..., q_len, k_len]``) is added to the scaled scores.
    """
    scale = 1.0 / math.sqrt(q.size(-1)) if scale is None else scale
    scores = torch.matmul(q, k.transpose(-2, -1)) * scale
    if bias is not None:
        scores = scores + bias.to(scores.dtype)
    if causal:
        mask = combine_masks(mask, causal_mask(q.size(-2), key_length=k.size(-2), device=q.device))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    if mask is not None:
        # rows with every key masked: softmax of all -inf is NaN; define them as zeros
        weights = weights.nan_to_num(0.0)
    if dropout_p > 0.0:
        weights = F.dropout(weights, p=dropout_p)
    return torch.matmul(weights, v), weights


def attention_fast(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None = None,
    *,
    bias: Tensor | None = None,
    causal: bool = False,
    dropout_p: float = 0.0,
    scale: float | None = None,
) -> Tensor:
    """The same attention through :func:`torch.nn.functional.scaled_dot_product_attention`.

    With no mask and ``causal=True`` SDPA can use the flash kernel on a GPU; with a mask it
    uses the memory-efficient kernel. With a ``bias`` SDPA receives one float ``attn_mask``:
    the bias where the boolean mask allows, ``-inf`` where it does not. Training on the CPU
    (``dropout_p > 0``), where SDPA has no fused kernel, takes :func:`_attention_cpu_dropout`.
    """
    if (mask is not None or bias is not None or q.size(-2) != k.size(-2)) and causal:
        mask = combine_masks(mask, causal_mask(q.size(-2), key_length=k.size(-2), device=q.device))
        causal = False
    empty_rows = None
    if mask is not None:
        has_key = mask.any(dim=-1, keepdim=True)
        # Two facts decide the path, read with one device-to-host copy (on a GPU each read
        # waits for the queue): a mask that hides nothing (a batch without padding) is dropped
        # for the unmasked kernels; SDPA returns NaN (GPU) or zeros (CPU) for a row that sees
        # no key, so such rows attend freely and their output is zeroed after. Under
        # torch.compile the second path is always taken: no data-dependent branch, no break.
        if torch.compiler.is_compiling():
            hides_nothing, every_row_sees_a_key = False, False
        else:
            hides_nothing, every_row_sees_a_key = torch.stack((mask.all(), has_key.all())).tolist()
        if hides_nothing:
            mask = None
        elif not every_row_sees_a_key:
            empty_rows = ~has_key
            mask = mask | empty_rows
    if dropout_p > 0.0 and q.device.type == "cpu":
        if causal:
            mask = causal_mask(q.size(-2), key_length=k.size(-2), device=q.device)
        out = _attention_cpu_dropout(q, k, v, mask, bias=bias, dropout_p=dropout_p, scale=scale)
        return out if empty_rows is None else out.masked_fill(empty_rows, 0.0)
    attn_mask = mask
    if bias is not None:
        attn_mask = bias.to(q.dtype)
        if mask is not None:
            attn_mask = attn_mask.masked_fill(~mask, float("-inf"))
    out = F.scaled_dot_product_attention(
        q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=causal, scale=scale
    )
    if empty_rows is not None:
        out = out.masked_fill(empty_rows, 0.0)
    return out


def _attention_cpu_dropout(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None,
    *,
    bias: Tensor | None,
    dropout_p: float,
    scale: float | None,
) -> Tensor:
    """SDPA's path for dropout on the CPU, written out once (``mask`` has no fully masked row;
    :func:`attention_fast` passes None for a mask that hides nothing).

    PyTorch's fused CPU kernels take no dropout, so there SDPA falls back to its math path,
    which scales ``q`` and ``k`` separately, turns the mask into a float tensor and checks every
    row for ``-inf`` after the softmax. This computes the same with in-place steps:
    ``q k^T * scale + bias``, ``-inf`` where masked, softmax, dropout, times ``v``. The dropout
    is :func:`torch.dropout`, the call SDPA's fallback makes, so both draw the same random
    numbers (tested: equal outputs under one seed).
    """
    scores = torch.matmul(q, k.transpose(-2, -1))
    scores.mul_(1.0 / math.sqrt(q.size(-1)) if scale is None else scale)
    if bias is not None:
        scores.add_(bias.to(scores.dtype))
    if mask is not None:
        # outside autograd: a masked score's gradient is zero anyway (its softmax weight is 0),
        # and no saved tensor is this one, so the backward needs no masking pass of its own
        with torch.no_grad():
            scores.masked_fill_(~mask, float("-inf"))
    weights = F.dropout(torch.softmax(scores, dim=-1), p=dropout_p)
    return torch.matmul(weights, v)


def attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None = None,
    *,
    bias: Tensor | None = None,
    causal: bool = False,
    dropout_p: float = 0.0,
    scale: float | None = None,
    return_weights: bool = False,
) -> tuple[Tensor, Tensor | None]:
    """Scaled dot-product attention: ``(output, weights or None)``.

    Takes the explicit path when ``return_weights`` is True, the SDPA path otherwise.
    ``mask`` is boolean (True = may attend); ``bias`` is a float tensor added to the scores.
    """
    kw = dict(bias=bias, causal=causal, dropout_p=dropout_p, scale=scale)
    if return_weights:
        return attention_explicit(q, k, v, mask, **kw)
    return attention_fast(q, k, v, mask, **kw), None


class MultiHeadAttention(nn.Module):
    r"""Multi-head attention.

    .. math::

        \mathrm{head}_i = \mathrm{Attention}(Q W^Q_i, K W^K_i, V W^V_i), \qquad
        \mathrm{MultiHead}(Q, K, V) = [\mathrm{head}_1; \dots; \mathrm{head}_h]\, W^O

    Args:
        d_model: width of the model (input and output).
        n_heads: number of heads; ``d_model`` must be divisible by it.
        dropout: dropout on the attention weights while training.
        bias: whether the four projections have biases.
        d_kv: width of the key/value inputs when it differs from ``d_model``.

    Inputs are batch-first: ``[batch, length, d_model]``.
    """

    def __init__(
        self, d_model: int, n_heads: int, *, dropout: float = 0.0, bias: bool = True, d_kv: int | None = None
    ):
        super().__init__()
        if n_heads <= 0 or d_model % n_heads != 0:
            raise ValueError(f"d_model={d_model} must be divisible by n_heads={n_heads}")
        self.d_model = d_model
        self.n_heads = n_heads
        self.d_head = d_model // n_heads
        self.dropout = dropout
        d_kv = d_model if d_kv is None else d_kv
        self.w_q = nn.Linear(d_model, d_model, bias=bias)
        self.w_k = nn.Linear(d_kv, d_model, bias=bias)
        self.w_v = nn.Linear(d_kv, d_model, bias=bias)
        self.w_o = nn.Linear(d_model, d_model, bias=bias)

    def split_heads(self, x: Tensor) -> Tensor:
        """``[batch, length, d_model] -> [batch, heads, length, d_head]`` (a view)."""
        b, n, _ = x.shape
        return x.view(b, n, self.n_heads, self.d_head).transpose(1, 2)

    def merge_heads(self, x: Tensor) -> Tensor:
        """``[batch, heads, length, d_head] -> [batch, length, d_model]``."""
        b, _, n, _ = x.shape
        return x.transpose(1, 2).reshape(b, n, self.d_model)

    def scores(self, query: Tensor, key: Tensor | None = None) -> Tensor:
        r"""The *unnormalised* scores :math:`Q K^\top / \sqrt{d_k}` ``[batch, heads, q_len, k_len]``
        of this module's projections, before any mask, bias or softmax (TinyBERT distils
        them). Self-attention scores when ``key`` is omitted."""
        key = query if key is None else key
        q = self.split_heads(self.w_q(query))
        k = self.split_heads(self.w_k(key))
        return torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(self.d_head)

    def forward(
        self,
        query: Tensor,
        key: Tensor | None = None,
        value: Tensor | None = None,
        mask: Tensor | None = None,
        *,
        bias: Tensor | None = None,
        causal: bool = False,
        return_weights: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        """Self-attention when ``key``/``value`` are omitted, cross-attention otherwise.

        ``mask`` (boolean, True = may attend) and ``bias`` (float, added to the scores) both
        broadcast to ``[batch, heads, q_len, k_len]``.

        Returns ``(output [batch, q_len, d_model], weights [batch, heads, q_len, k_len] or None)``.
        """
        key = query if key is None else key
        value = key if value is None else value
        if query.dim() != 3 or key.dim() != 3 or value.dim() != 3:
            raise ValueError(
                "MultiHeadAttention expects [batch, length, d_model] inputs, got "
                f"query {tuple(query.shape)}, key {tuple(key.shape)}, value {tuple(value.shape)}"
            )
        if query.size(-1) != self.d_model:
            raise ValueError(f"query width {query.size(-1)} != d_model {self.d_model}")
        b, q_len, k_len = query.size(0), query.size(1), key.size(1)
        mask = check_mask(mask, b, self.n_heads, q_len, k_len)
        bias = check_bias(bias, b, self.n_heads, q_len, k_len)
        q = self.split_heads(self.w_q(query))
        k = self.split_heads(self.w_k(key))
        v = self.split_heads(self.w_v(value))
        p = self.dropout if self.training else 0.0
        out, weights = attention(
            q, k, v, mask, bias=bias, causal=causal, dropout_p=p, return_weights=return_weights
        )
        return self.w_o(self.merge_heads(out)), weights


class ablate_heads:
    """Context manager: zero the given heads' outputs (before ``W_O``) in a MultiHeadAttention.

    ``with ablate_heads(model.decoder.layers[1].cross_attn, [0, 2]): ...`` runs the model as if
    those heads had produced zeros, which measures how much the model relies on them.
    """

    def __init__(self, mha: MultiHeadAttention, heads):
        self.mha = mha
        self.heads = sorted(set(int(h) for h in heads))
        bad = [h for h in self.heads if not 0 <= h < mha.n_heads]
        if bad:
            raise ValueError(f"heads {bad} out of range 0..{mha.n_heads - 1}")
        self._handle = None

    def _hook(self, module, args):
        (x,) = args
        x = x.clone()
        for h in self.heads:
            x[..., h * self.mha.d_head : (h + 1) * self.mha.d_head] = 0
        return (x,)

    def __enter__(self):
        self._handle = self.mha.w_o.register_forward_pre_hook(self._hook)
        return self

    def __exit__(self, *exc):
        if self._handle is not None:
            self._handle.remove()
            self._handle = None
        return False
