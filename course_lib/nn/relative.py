r"""Relative positions and segment-level memory: the pieces Transformer-XL and XLNet share.

Transformer-XL (Dai et al., 2019) and XLNet (Yang et al., 2019) score a query against a key
by their *distance* instead of adding absolute positions to the input, and let a segment
attend to a cached memory of the previous one. Both models here (:mod:`course_lib.models.transfo_xl`,
:mod:`course_lib.models.xlnet`) build their attention from this module.

**Keys and distances.** A layer attends over the memory (:math:`M` states) followed by the
current segment (:math:`T` states): :math:`K = M + T` keys. Query :math:`i` (``0..T-1``) sits
at key position :math:`M + i`, so its distance to key :math:`j` is :math:`\delta_{ij} = M + i
- j`. :func:`relative_distances` lists every distance that can occur, from :math:`K` down to
:math:`-T + 1` (:math:`K + T` of them; the negative ones are keys to the right of the query,
which a causal model masks), optionally clipped to :math:`\pm` ``clamp_len``.

**Encodings.** :func:`relative_sinusoids` encodes a distance :math:`\delta` as

.. math::

    r_\delta = [\sin(\delta\omega_0), \dots, \sin(\delta\omega_{d/2-1});\;
                \cos(\delta\omega_0), \dots, \cos(\delta\omega_{d/2-1})], \qquad
    \omega_k = 10000^{-2k/d},

all sines first, then all cosines (the original code's layout; the Transformer's
:func:`~course_lib.nn.positional.sinusoidal_table` interleaves them). The attention score's
position term is :math:`(q_i + v)^\top W_r\, r_{\delta_{ij}}`.

**The relative shift.** Computing :math:`(q_i + v)^\top W_r r_{\delta_{ij}}` for every pair
directly would need a ``[T, K, d]`` tensor of encodings. Instead every query is scored once
against every listed distance, :math:`B^{raw}_{ip} = (q_i + v)^\top W_r r_{K - p}` (``[T, K +
T]``), and the entry for key :math:`j` is the one at :math:`p = K - \delta_{ij} = j + T - i`:
row :math:`i` shifted left by :math:`T - i`. The classic way to do this for all rows at once
is by reshaping: read the ``[T, K + T]`` matrix (row-major) as ``[K + T, T]``, drop its first row
(:math:`T` numbers), read the rest as ``[T, K + T - 1]`` and keep the first :math:`K` columns.
Element :math:`(i, j)` of the result is element :math:`T + i(K + T - 1) + j = i(K + T) + (j + T
- i)` of the original, i.e. :math:`B^{raw}_{i,\, j + T - i}`. :func:`rel_shift` reads exactly
those elements through one strided view (start :math:`T`, row stride :math:`K + T - 1`), which
copies nothing forward and once backward (Transformer-XL's original code pads a zero column
first, which copies the scores; under ``torch.compile`` the view is built from the reshapes).

**Memory** (segment-level recurrence). After a segment, every layer :math:`m` keeps the states
it received as input (the previous layer's output), appended to its old memory, as the next
segment's memory, with the gradient stopped:

.. math::

    \mathrm{mem}^{(m)}_{new} = \mathrm{sg}\big([\mathrm{mem}^{(m)};\, h^{(m-1)}]\big)_{[-\mathrm{mem\_len}:]}.

:func:`update_memory` computes that for one layer and :func:`check_mems` validates a list of
memories. Transformer-XL here keeps them batch-first, ``[batch, mem_len, d_model]``
(``seq_dim=1``, the default); XLNet keeps Hugging Face's time-first ``[mem_len, batch,
d_model]`` (``seq_dim=0``) so that its memories interoperate with ``transformers``.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from .attention import MultiHeadAttention, attention

__all__ = [
    "relative_distances",
    "relative_sinusoids",
    "rel_shift",
    "update_memory",
    "check_mems",
    "RelativeAttention",
]


def relative_distances(q_len: int, k_len: int, *, clamp_len: int = -1, device=None) -> Tensor:
    """The distances ``k_len, k_len - 1, ..., -q_len + 1`` (float ``[k_len + q_len]``), clipped
    to ``[-clamp_len, clamp_len]`` when ``clamp_len > 0``.

    Row ``p`` is distance ``k_len - p``; :func:`rel_shift` turns scores against these rows into
    scores against the ``k_len`` keys (memory first) of ``q_len`` queries that end the keys.
    """
    d = torch.arange(k_len, -q_len, -1, device=device, dtype=torch.int64).float()
    return d.clamp(-clamp_len, clamp_len) if clamp_len > 0 else d


def relative_sinusoids(distances: Tensor, d_model: int) -> Tensor:
    r"""``[n, d_model]``: :math:`[\sin(\delta \omega); \cos(\delta \omega)]` per distance, with
    :math:`\omega_k = 10000^{-2k/d_{model}}` (all sines first, then all cosines; the
    Transformer's table interleaves them)."""
    if d_model % 2 != 0:
        raise ValueError(f"relative sinusoids need an even d_model (sines and cosines), got {d_model}")
    freq = torch.arange(0, d_model, 2.0, device=distances.device, dtype=torch.int64).float()
    inv_freq = 1 / torch.pow(10000, freq / d_model)
    angles = distances[:, None] * inv_freq[None, :]
    return torch.cat([torch.sin(angles), torch.cos(angles)], dim=-1)


def rel_shift(scores: Tensor, k_len: int) -> Tensor:
    """``[..., q_len, k_len + q_len]`` scores by distance index -> ``[..., q_len, k_len]`` by key:
    ``out[..., i, j] = scores[..., i, j + q_len - i]``, for all rows at once as one strided view
    of ``scores`` (see the module docstring).

    The columns of ``scores`` are the distances of :func:`relative_distances` (``k_len`` down to
    ``-q_len + 1``); ``scores`` may have more columns (they are never read), not fewer.
    """
    *lead, q_len, width = scores.shape
    if k_len < 0 or width < k_len + q_len:
        raise ValueError(
            f"rel_shift needs scores [..., q_len, k_len + q_len] (one column per distance of "
            f"relative_distances), got {q_len} queries x {width} columns for k_len={k_len}"
        )
    # the same element, read in place: scores[..., i, j + q_len - i] sits at flat offset
    # q_len + i * (width - 1) + j of a contiguous [q_len, width] block (no copy forward, one
    # backward); the leading dimensions may have any strides
    if scores.stride(-1) != 1 or scores.stride(-2) != width:
        scores = scores.contiguous()
    if torch.compiler.is_compiling():
        # dynamo cannot trace a read of the storage offset: the same view as the block read
        # flat, past its first q_len numbers, in rows of width - 1 (a second copy backward)
        return scores.flatten(-2)[..., q_len:].unflatten(-1, (q_len, width - 1))[..., :k_len]
    strides = scores.stride()
    return scores.as_strided(
        (*lead, q_len, k_len), (*strides[:-2], width - 1, 1), scores.storage_offset() + q_len
    )


def update_memory(
    mems: Tensor | None, hidden: Tensor, mem_len: int | None, *, seq_dim: int = 1
) -> Tensor | None:
    """One layer's memory for the next segment: the last ``mem_len`` positions of ``[mems;
    hidden]`` along the sequence dimension, detached (no gradient flows into the past).

    Args:
        mems: this layer's memory of the segments so far, or None (no memory yet).
        hidden: the states the layer received as input in this segment.
        mem_len: how many positions to keep; ``None`` keeps all of them, ``0`` keeps none and
            returns None (no memory). Fewer positions than ``mem_len`` are kept as they are.
        seq_dim: the sequence dimension: 1 for batch-first ``[batch, seq, d_model]`` (the
            default, Transformer-XL's layout here), 0 for time-first ``[seq, batch, d_model]``
            (XLNet's, as Hugging Face's).
    """
    if mem_len is not None and mem_len < 0:
        raise ValueError(f"mem_len must be None (keep everything) or >= 0, got {mem_len}")
    if seq_dim not in (0, 1):
        raise ValueError(f"seq_dim must be 0 (time first) or 1 (batch first), got {seq_dim}")
    if mem_len == 0:
        return None
    if hidden.dim() != 3:
        raise ValueError(
            "hidden must be a 3-d [batch, seq, d_model] or [seq, batch, d_model] tensor, "
            f"got {tuple(hidden.shape)}"
        )
    if mems is not None:
        other = 1 - seq_dim
        if mems.dim() != 3 or mems.size(other) != hidden.size(other) or mems.size(2) != hidden.size(2):
            raise ValueError(
                f"mems {tuple(mems.shape)} and hidden {tuple(hidden.shape)} must agree in every dimension "
                f"but the sequence (dimension {seq_dim})"
            )
    states = hidden if mems is None else torch.cat([mems, hidden], dim=seq_dim)
    if mem_len is not None:
        n = states.size(seq_dim)
        states = states.narrow(seq_dim, max(0, n - mem_len), min(n, mem_len))
    return states.detach()


def check_mems(
    mems: Sequence[Tensor] | None, n_layers: int, batch: int, d_model: int, *, seq_dim: int = 1
) -> list[Tensor] | None:
    """Validate memories given to a model: one 3-d tensor per layer, all of the same shape, with
    the input's batch size and the model's width (``ValueError`` naming the problem otherwise).

    Layout: ``[batch, mem_len, d_model]`` with ``seq_dim=1`` (Transformer-XL's here),
    ``[mem_len, batch, d_model]`` with ``seq_dim=0`` (XLNet's). Returns them as a list (None
    stays None).
    """
    if mems is None:
        return None
    if seq_dim not in (0, 1):
        raise ValueError(f"seq_dim must be 0 (time first) or 1 (batch first), got {seq_dim}")
    mems = list(mems)
    if len(mems) != n_layers:
        raise ValueError(f"mems must hold one tensor per layer ({n_layers}), got {len(mems)}")
    layout = (
        f"[batch={batch}, mem_len, d_model={d_model}] (batch first, as returned)"
        if seq_dim == 1
        else f"[mem_len, batch={batch}, d_model={d_model}] (time first, as returned)"
    )
    shapes = [tuple(m.shape) for m in mems]
    for m in mems:
        if (
            m.dim() != 3
            or m.size(1 - seq_dim) != batch
            or m.size(2) != d_model
            or tuple(m.shape) != shapes[0]
        ):
            raise ValueError(f"every mems tensor must be {layout}, all of one length; got {shapes}")
    return mems


class RelativeAttention(MultiHeadAttention):
    r"""Multi-head attention scored by relative distance: what Transformer-XL and XLNet share.

    The projections are :class:`~course_lib.nn.attention.MultiHeadAttention`'s (no biases, as
    in both papers), plus ``w_r`` (:math:`W_R`) for the relative encodings and the per-head
    vectors ``r_w_bias`` (:math:`u`, content) and ``r_r_bias`` (:math:`v`, position),
    ``[heads, d_head]``. A query :math:`q_i` scores key :math:`j` as

    .. math::

        (q_i + u)^\top k_j + (q_i + v)^\top W_R\, r_{\delta_{ij}} \;(+\text{ a subclass's terms}),

    over :math:`\sqrt{d_{head}}`. Transformer-XL (:mod:`course_lib.models.transfo_xl`) adds a
    causal mask over ``[memory; segment]``; XLNet (:mod:`course_lib.models.xlnet`) a segment
    term and two streams. Subclasses define ``forward``.
    """

    def __init__(self, d_model: int, n_heads: int, *, dropout: float = 0.0):
        super().__init__(d_model, n_heads, dropout=dropout, bias=False)
        self.w_r = nn.Linear(d_model, d_model, bias=False)
        self.r_w_bias = nn.Parameter(torch.zeros(n_heads, self.d_head))  # u: content
        self.r_r_bias = nn.Parameter(torch.zeros(n_heads, self.d_head))  # v: position

    def relative_keys(self, pos_emb: Tensor) -> Tensor:
        """``[heads, P, d_head]``: the encodings ``pos_emb`` ``[P, d_model]`` through ``w_r``, per head."""
        return self.w_r(pos_emb).view(-1, self.n_heads, self.d_head).transpose(0, 1).contiguous()

    def relative_scores(self, q: Tensor, k_r: Tensor, k_len: int, *, scale: float = 1.0) -> Tensor:
        r"""The position term :math:`(q_i + v)^\top W_R r_{\delta_{ij}}` times ``scale``, ``[batch,
        heads, q_len, k_len]``: every query ``q`` ``[batch, heads, q_len, d_head]`` against every
        listed distance (``k_r`` from :meth:`relative_keys`), then :func:`rel_shift` puts distance
        :math:`M + i - j` under key :math:`j`. The scale multiplies ``q + v`` (``d_head`` numbers
        a query), not the scores (``k_len + q_len``)."""
        qv = q + self.r_r_bias[:, None]
        if scale != 1.0:
            qv = qv.mul_(scale)
        b, n, q_len, d = qv.shape
        # one product per head over every query of the batch: [n, b * q_len, d] x [n, d, P]
        raw = torch.bmm(qv.transpose(0, 1).reshape(n, b * q_len, d), k_r.transpose(-1, -2))
        return rel_shift(raw.view(n, b, q_len, -1).transpose(0, 1), k_len)  # [b, n, q_len, P]

    def attend(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        bias: Tensor,
        mask: Tensor | None,
        return_weights: bool,
    ) -> tuple[Tensor, Tensor | None]:
        r""":math:`\mathrm{softmax}\big((q + u) k^\top / \sqrt{d_{head}} + \text{bias}\big)\, v`, per
        head (before ``w_o``); ``bias`` is already scaled; dropout on the weights in training."""
        p = self.dropout if self.training else 0.0
        return attention(
            q + self.r_w_bias[:, None], k, v, mask, bias=bias, dropout_p=p, return_weights=return_weights
        )
