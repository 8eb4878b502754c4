r"""XLNet: "Generalized Autoregressive Pretraining for Language Understanding" (Yang et al., 2019).

XLNet keeps the left-to-right language model's factorisation of :math:`p(x)` but lets the
*order* vary. For a sequence of length :math:`T` and a factorisation order :math:`z`, a
permutation of :math:`1..T`, it maximises

.. math::

    \mathbb{E}_{z}\Big[\sum_{t=1}^{T} \log p_\theta\big(x_{z_t} \mid x_{z_{<t}}\big)\Big],

so every token is, on average over orders, predicted from context on both of its sides, and
no ``[MASK]`` token ever enters the input. Only the attention masks change with :math:`z`:
the tokens stay in their places and keep their positions.

**Two streams.** Predicting :math:`x_{z_t}` needs a representation that knows the *position*
:math:`z_t` but not the *token* there, while later tokens need one that knows the token. So
every layer :math:`m` keeps two vectors per position, with the same weights:

.. math::

    h^{(m)}_{z_t} &= \mathrm{Attention}\big(Q = h^{(m-1)}_{z_t},\; KV = h^{(m-1)}_{z_{\le t}}\big)
    \qquad \text{(content stream: sees itself)} \\
    g^{(m)}_{z_t} &= \mathrm{Attention}\big(Q = g^{(m-1)}_{z_t},\; KV = h^{(m-1)}_{z_{< t}}\big)
    \qquad \text{(query stream: not its own token)}

starting from :math:`h^{(0)}_i = e(x_i)` (the word embedding) and :math:`g^{(0)}_i = w`, one
learned vector (``mask_emb``). The prediction reads the query stream, with the word embeddings
as output matrix (tied) and a bias: :math:`p(x_{z_t} = x \mid \cdot) \propto
\exp\big(e(x)^\top g^{(M)}_{z_t} + b_x\big)`.

Here the order is given as ``perm_mask`` ``[batch, T, T]``: ``perm_mask[b, i, j] = 1`` hides
token ``j`` from position ``i`` (0: visible). The query stream of ``i`` sees exactly the
positions that ``perm_mask`` leaves visible; the content stream of ``i`` sees those and
always itself. For an order :math:`z`, with :math:`\rho(i)` the step at which position
:math:`i` comes, :math:`\mathrm{perm\_mask}_{ij} = [\rho(j) \ge \rho(i)]`: the diagonal is set,
which is what keeps a target's query stream blind to its own token (as in Hugging Face, a
``perm_mask`` that leaves ``i`` visible to itself, or a ``target_mapping`` without any
``perm_mask``, lets the query stream of ``i`` see its own token). Padding (``attention_mask``
0, or ``input_mask`` 1) hides a key from every query. Only some positions are predicted (the
last tokens of each order, the paper's *partial prediction*): ``target_mapping``
:math:`\Theta \in \{0, 1\}^{P \times T}` (one row per prediction, a one at its position)
selects them, the query stream starts from :math:`P` copies of ``mask_emb``, and a layer
places those queries at their positions with :math:`\Theta^\top`, attends there, and reads
the results back with :math:`\Theta`. With a ``target_mapping`` the model's output is the
query stream (``[batch, P, d_model]``), without one the content stream (``[batch, T, d_model]``).

**Relative attention** (Transformer-XL's, Dai et al. 2019). Keys are the memory (below) and
the segment, :math:`K = M + T` of them; query :math:`i` sits at key position :math:`M + i`,
so its distance to key :math:`j` is :math:`\delta = M + i - j`. With :math:`q_i = W_q x_i`,
:math:`k_j = W_k \tilde h_j`, the sinusoid :math:`r_\delta = [\sin(\delta\omega);
\cos(\delta\omega)]`, :math:`\omega_k = 10000^{-2k/d}` (sines, then cosines), and per-head
learned vectors :math:`u` (``r_w_bias``), :math:`v` (``r_r_bias``), :math:`b` (``r_s_bias``):

.. math::

    a_{ij} = \frac{1}{\sqrt{d_{head}}}\Big[\underbrace{(q_i + u)^\top k_j}_{\text{content}}
    + \underbrace{(q_i + v)^\top W_r\, r_{M+i-j}}_{\text{position}}
    + \underbrace{(q_i + b)^\top s_{ij}}_{\text{segment}}\Big]

then a softmax over the visible keys, the values :math:`W_v \tilde h_j` and :math:`W_o` as in
any multi-head attention. The content term is the course's
:func:`~course_lib.nn.attention.attention` on the query :math:`q_i + u`; the position and
segment terms enter it as its additive score ``bias``.

*The relative shift.* With ``attn_type="bi"`` the distances :math:`\delta = K, K-1, \dots,
-T+1` are encoded once (:math:`K + T` rows), every query is scored against all of them,
:math:`B^{raw}_{ip} = (q_i + v)^\top W_r r_{K - p}`, and the score of key :math:`j` is the entry
at :math:`p = K - \delta = j + T - i`: row :math:`i` shifted left by :math:`T - i`. Reading
the ``[T, K+T]`` matrix as ``[K+T, T]``, dropping its first row and reading the rest as
``[T, K+T-1]`` does exactly that shift for every row at once (:func:`rel_shift`); the first
:math:`K` columns are the keys. ``clamp_len > 0`` clips :math:`\delta` to
:math:`\pm` ``clamp_len``. With ``bi_data`` (the original pretraining's
*bidirectional data*) the second half of the batch reads every distance negated,
:math:`-\delta` (the distances :math:`-K, \dots, T - 1`, clipped the same way), as Hugging
Face's ``relative_positional_encoding`` does. XLNet's data pipeline filled that half with the
token stream read backwards (each row reversed, the segments taken from the end): reversed
tokens with negated distances give every key of the segment its true side again (without
memory, that half computes exactly what the forward model computes on the rows before they
were reversed), while the memory, which now holds the text that *follows* the segment, sits
at negative distances, to the right of every query. One batch thus trains the memory in both
directions. The batch size must be even.
The distances, their sinusoids, the shift and the memory update live
in :mod:`course_lib.nn.relative`, shared with Transformer-XL (:mod:`course_lib.models.transfo_xl`);
this module re-exports :func:`relative_distances`, :func:`relative_sinusoids` and
:func:`rel_shift`.

*Relative segments.* Instead of a segment embedding added to the input, a pair of positions
is scored by whether it lies in the same segment: :math:`s_{ij} = s_{+}` (``seg_embed[0]``)
when ``token_type_ids`` of :math:`i` and :math:`j` agree, :math:`s_{-}` (``seg_embed[1]``)
otherwise. Ids are only compared, so any number of segments works (XLNet's ``<cls>`` has its
own id, 2). Memory positions count as segment 0. Without ``token_type_ids`` the term is absent.

**Layer** (post-LN, both streams, the same weights):

.. math::

    x' &= \mathrm{LayerNorm}\big(x + \mathrm{Dropout}(\mathrm{MultiHead}_{rel}(x))\big) \\
    x'' &= \mathrm{LayerNorm}\big(x' + \mathrm{Dropout}(\mathrm{FFN}(x'))\big), \qquad
    \mathrm{FFN}(x) = W_2\, \mathrm{Dropout}(\mathrm{act}(W_1 x + b_1)) + b_2

**Memory** (Transformer-XL's segment recurrence). A layer's keys and values may start with
the previous segment's content states: layer :math:`m` attends over
:math:`\tilde h = [\mathrm{mem}^{(m)}; h^{(m-1)}]`, and returns for the next segment

.. math::

    \mathrm{mem}^{(m)}_{new} = \mathrm{sg}\big([\mathrm{mem}^{(m)}; h^{(m-1)}]\big)_{[-\mathrm{mem\_len}:]},

the last ``mem_len`` input states of the layer (all of them when ``mem_len`` is None;
with ``reuse_len`` only the first ``reuse_len`` tokens of the segment enter it), with the
gradient stopped (``sg``: detached; :func:`~course_lib.nn.relative.update_memory`).
``mem_len=0`` means no memory, as in Transformer-XL: no ``mems`` are returned. (Hugging
Face's XLNet keeps *everything* for ``mem_len=0``, as for None; :mod:`course_lib.models.hf`
translates its configs both ways.) Memory is visible to every query of both streams (the
previous segment's padding too: its mask is not remembered, as in Hugging Face). The
returned ``mems`` are a tuple of one ``[mem_len, batch, d_model]`` tensor per layer: Hugging
Face's (and the original code's) time-first layout, so the memory of either library feeds
the other. ``use_mems`` (default ``config.use_mems_eval`` in eval mode,
``config.use_mems_train`` in training) says whether to return them; given ``mems`` are used
either way.

**Interop.** :class:`XLNetModel` and :class:`XLNetLMHeadModel` take Hugging Face's keyword
arguments (``input_ids, attention_mask, mems, perm_mask, target_mapping, token_type_ids,
input_mask, use_mems, labels``) and return its field names (``last_hidden_state`` / ``logits``,
``mems``, ``hidden_states``, ``attentions``); ``from_hf`` copies a ``transformers`` model of
the same configuration (:class:`XLNetConfig` uses Hugging Face's field names). Hugging Face
stores :math:`W_q, W_k, W_v, W_r, W_o` as ``[d_model, heads, d_head]`` tensors used by
``einsum``; here they are the bias-free ``nn.Linear`` projections of
:class:`~course_lib.nn.attention.MultiHeadAttention` (``w_q, w_k, w_v, w_o``, plus ``w_r``),
and :func:`~course_lib.models.hf.xlnet_state_dict_to_ours` converts the layout.

Paper / Hugging Face vs ours:

* Only ``attn_type="bi"`` (every position may attend everywhere the masks allow: XLNet's
  pretraining and fine-tuning setting); ``"uni"`` is refused. ``same_length`` acts only with
  ``"uni"``, so it is kept in the config but has no effect. ``bi_data=True`` (backward
  distances for the second half of the batch, as Hugging Face's) refuses an odd batch size,
  where Hugging Face fails with a shape error; reversing the rows of that half, which the
  original data pipeline did, is the caller's (the model only reads positions backwards).
* A query-stream row with no visible key (a ``perm_mask`` row hiding everything and no
  memory: the first position of an order in which every token is a target) gets a zero
  attention output here (the rule of :mod:`course_lib.nn.attention`); Hugging Face fills
  hidden scores with :math:`-10^{30}`, so such a row attends uniformly to *every* key, hidden
  ones included (a leak). With XLNet's partial prediction the non-target tokens are visible
  to every target and no such row occurs; all other outputs are the same.
* In training mode the dropout on the relative encodings is drawn once per batch here (once
  per direction with ``bi_data``: the encodings are shared by the batch); Hugging Face draws
  it per sequence. Eval mode is identical.
* Of the task heads only :class:`XLNetForTokenClassification` (a linear layer on every
  position of the content stream) is implemented; not implemented: ``inputs_embeds``,
  ``logits_to_keep``, and the other task heads (sequence summary, sequence classification,
  multiple choice, question answering). Sampling orders and targets (the pretraining
  data pipeline) is not part of the model: it receives ``perm_mask`` and ``target_mapping``.
* Hugging Face's ``XLNetConfig()`` defaults to XLNet-large; this config's defaults are
  XLNet-base's sizes (``d_model=768``, 12 layers, 12 heads, ``d_inner=3072``) with Hugging
  Face's default options. ``XLNetModel`` of that size has 116,718,336 parameters, as
  ``transformers.XLNetModel`` does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any

import torch
from torch import Tensor, nn

from ..nn.checks import check_id_ranges, check_same_shape, check_token_batch
from ..nn.feedforward import FeedForward, draw_dropout, get_activation
from ..nn.init import init_weights
from ..nn.layer import PostLNLayer
from ..nn.relative import (
    RelativeAttention,
    check_mems,
    rel_shift,
    relative_distances,
    relative_sinusoids,
    update_memory,
)
from .base import CountsParameters, TiedLMHeadModel, WithBody
from .bert import masked_lm_loss, token_classification_loss
from .hf import (
    XLNetForTokenClassificationOutput,
    XLNetLMHeadModelOutput,
    XLNetModelOutput,
    linear_names,
    load_hf_state_dict,
    xlnet_config_from_hf,
    xlnet_hf_names,
    xlnet_state_dict_to_ours,
)

__all__ = [
    "XLNetConfig",
    "XLNetModelOutput",
    "XLNetLMHeadModelOutput",
    "XLNetRelativeAttention",
    "XLNetLayer",
    "XLNetModel",
    "XLNetLMHeadModel",
    "XLNetTaskConfig",
    "XLNetForTokenClassification",
    "XLNetForTokenClassificationOutput",
    "relative_distances",
    "relative_sinusoids",
    "rel_shift",
    "xlnet_hf_names",
    "xlnet_state_dict_to_ours",
]


# ---------------------------------------------------------------------------------------
# Configuration
# ---------------------------------------------------------------------------------------


@dataclass
class XLNetConfig:
    """Sizes and options of an XLNet model; field names are Hugging Face's (``XLNetConfig``).

    Defaults are XLNet-base's sizes. ``d_head = d_model / n_head`` is read-only (Hugging Face
    sets it from the same two fields). ``mem_len`` is the course's, the same as
    Transformer-XL's: the states kept per layer, 0 none (no memory returned) and None all of
    them. Hugging Face's XLNet keeps all of them for 0 as for None; :mod:`course_lib.models.hf`
    translates (``xlnet_config_from_hf``, ``xlnet_config_to_hf``).
    """

    vocab_size: int = 32000  # SentencePiece vocabulary
    d_model: int = 768  # width of every layer
    n_layer: int = 12
    n_head: int = 12  # d_head = d_model / n_head = 64
    d_inner: int = 3072  # inner width of the feed-forward network
    ff_activation: str = "gelu"  # exact erf GELU
    attn_type: str = "bi"  # only "bi" is implemented (see the module docstring)
    initializer_range: float = 0.02  # std of the normal initialisation
    layer_norm_eps: float = 1e-12
    dropout: float = 0.1  # on embeddings, relative encodings, attention weights, sub-layer outputs
    mem_len: int | None = 512  # states kept as memory per layer (0: none, None: all of them)
    reuse_len: int | None = None  # tokens of a segment that enter the memory (None: all)
    use_mems_eval: bool = True  # return mems by default in eval mode
    use_mems_train: bool = False  # ... and in training mode
    bi_data: bool = False  # True: the batch's second half reads every distance negated (even batch sizes)
    clamp_len: int = -1  # > 0: relative distances clipped to [-clamp_len, clamp_len]
    same_length: bool = False  # acts only with attn_type="uni" (kept for Hugging Face round trips)
    pad_token_id: int = 5  # <pad> of XLNet's SentencePiece vocabulary (the model needs no pad id)
    tie_word_embeddings: bool = True  # the LM head's matrix is the word embedding matrix

    def __post_init__(self):
        for name in ("vocab_size", "d_model", "n_layer", "n_head", "d_inner"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if self.d_model % self.n_head != 0:
            raise ValueError(f"d_model={self.d_model} must be divisible by n_head={self.n_head}")
        if self.d_model % 2 != 0:
            raise ValueError(f"d_model={self.d_model} must be even (sines and cosines of the positions)")
        if self.attn_type != "bi":
            raise ValueError(
                f"attn_type={self.attn_type!r} is not implemented: course_lib's XLNet has attn_type='bi' "
                "(attention wherever perm_mask and padding allow)"
            )
        if self.mem_len is not None and self.mem_len < 0:
            raise ValueError(f"mem_len must be None or >= 0, got {self.mem_len}")
        if self.reuse_len is not None and self.reuse_len < 0:
            raise ValueError(f"reuse_len must be None or >= 0, got {self.reuse_len}")
        get_activation(self.ff_activation)

    @property
    def d_head(self) -> int:
        return self.d_model // self.n_head

    @classmethod
    def from_hf(cls, hf_config: Any) -> XLNetConfig:
        """The same configuration as a ``transformers.XLNetConfig`` (object or ``config.json``
        dict): :func:`~course_lib.models.hf.xlnet_config_from_hf`."""
        return cls(**xlnet_config_from_hf(hf_config, {f.name for f in fields(cls)}))

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class XLNetTaskConfig(XLNetConfig):
    """:class:`XLNetConfig` and what a task model adds (Hugging Face keeps these in every
    config; here they stay out of the pretraining models' configurations, whose ``to_dict``
    keys their cached runs): the number of labels and an optional dropout before the
    classifier."""

    num_labels: int = 2  # outputs of the classifier
    # dropout before the classifier, after the body's own output dropout (``dropout``); None:
    # none (Hugging Face's XLNetForTokenClassification). The feature-based recipe, whose frozen
    # body runs without dropout, puts the body's rate here.
    classifier_dropout: float | None = None

    def __post_init__(self):
        super().__post_init__()
        if self.num_labels < 1:
            raise ValueError(f"num_labels must be positive, got {self.num_labels}")


# ---------------------------------------------------------------------------------------
# Layers
# ---------------------------------------------------------------------------------------


class XLNetRelativeAttention(RelativeAttention):
    """Multi-head attention with relative positions and segments, for both streams.

    :class:`~course_lib.nn.relative.RelativeAttention` (the projections without biases, ``w_r``
    for the relative encodings, the per-head vectors ``r_w_bias`` (u) and ``r_r_bias`` (v))
    plus XLNet's segment term: ``r_s_bias`` (b) and ``seg_embed`` (:math:`s_+, s_-`). Its ``forward``
    takes the two streams and the relative encodings, not ``MultiHeadAttention``'s
    ``(query, key, value)``.
    """

    def __init__(self, d_model: int, n_heads: int, *, dropout: float = 0.0):
        super().__init__(d_model, n_heads, dropout=dropout)
        self.r_s_bias = nn.Parameter(torch.zeros(n_heads, self.d_head))  # b: segment
        self.seg_embed = nn.Parameter(torch.zeros(2, n_heads, self.d_head))  # s+ (same), s- (different)

    def score_bias(self, q: Tensor, k_r: Tensor, seg_diff: Tensor | None, k_len: int) -> Tensor:
        """The position and segment terms of the scores, scaled: ``[batch, heads, q_len, k_len]``.

        ``q``: ``[batch, heads, q_len, d_head]`` at positions ``0..q_len-1``; ``k_r``:
        ``[heads, k_len + q_len, d_head]``, the projected encodings of :func:`relative_distances`
        (with ``bi_data``, ``[2, heads, k_len + q_len, d_head]``: the forward distances for the
        first half of the batch, the negated ones for the second); ``seg_diff``: boolean
        ``[batch, q_len, k_len]``, True where the segments differ.
        """
        scale = 1 / self.d_head**0.5  # applied to the queries, the smaller tensor
        if k_r.dim() == 4:  # bi_data
            half = q.size(0) // 2
            bias = torch.cat(
                [
                    self.relative_scores(q[:half], k_r[0], k_len, scale=scale),
                    self.relative_scores(q[half:], k_r[1], k_len, scale=scale),
                ]
            )
        else:
            bias = self.relative_scores(q, k_r, k_len, scale=scale)
        if seg_diff is not None:
            seg = torch.einsum("bnid,snd->bnis", (q + self.r_s_bias[:, None]) * scale, self.seg_embed)
            bias = torch.where(seg_diff[:, None], seg[..., 1:], seg[..., :1]).add_(bias)
        return bias

    def attend_stream(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        k_r: Tensor,
        seg_diff: Tensor | None,
        mask: Tensor | None,
        return_weights: bool,
    ) -> tuple[Tensor, Tensor | None]:
        """softmax((q + u) k^T / sqrt(d_head) + position + segment) v, per head (before ``w_o``)."""
        return self.attend(q, k, v, self.score_bias(q, k_r, seg_diff, k.size(-2)), mask, return_weights)

    def forward(
        self,
        h: Tensor,
        g: Tensor | None = None,
        *,
        pos_emb: Tensor,
        mem: Tensor | None = None,
        seg_diff: Tensor | None = None,
        mask_h: Tensor | None = None,
        mask_g: Tensor | None = None,
        target_mapping: Tensor | None = None,
        return_weights: bool = False,
        content: bool = True,
    ) -> tuple[Tensor | None, Tensor | None, Any]:
        """Both streams over the keys ``[mem; h]``: ``(h out, g out or None, weights or None)``.

        ``h``: ``[batch, q_len, d_model]``; ``g``: ``[batch, num_predict, d_model]`` placed by
        ``target_mapping`` ``[batch, num_predict, q_len]`` (or ``[batch, q_len, d_model]`` without
        one); ``mem``: ``[batch, mem_len, d_model]``; ``pos_emb``: ``[k_len + q_len, d_model]``;
        masks boolean (True = may attend), broadcasting to ``[batch, heads, q_len, k_len]``.
        Weights: the content stream's, or the pair (content, query) when ``g`` is given.
        ``content=False``: h out is None, not computed (its keys and values and its dropout's
        random draw are: see :meth:`XLNetModel.forward`).
        """
        if not content and (g is None or return_weights):
            raise ValueError("content=False needs the query stream g and no attention weights")
        keys = h if mem is None else torch.cat([mem, h], dim=1)  # k, v per head once, for both streams
        k = self.split_heads(self.w_k(keys)).contiguous()
        v = self.split_heads(self.w_v(keys)).contiguous()
        if pos_emb.dim() == 2:
            k_r = self.relative_keys(pos_emb)  # [heads, P, d_head]
        else:  # bi_data: [2 (forward, backward), heads, P, d_head]
            k_r = torch.stack([self.relative_keys(p) for p in pos_emb])
        if content:
            out_h, w_h = self.attend_stream(
                self.split_heads(self.w_q(h)), k, v, k_r, seg_diff, mask_h, return_weights
            )
            out_h = self.w_o(self.merge_heads(out_h))
        else:  # the random numbers the content stream's attention dropout would take
            out_h = w_h = None
            p, shape = (self.dropout if h.device.type == "cpu" else 0.0), (*h.shape[:2], k.size(-2))
            draw_dropout(p, self.training, (shape[0], self.n_heads, *shape[1:]), h.device)
        if g is None:
            return out_h, None, w_h
        q_g = self.split_heads(self.w_q(g))  # [batch, heads, num_predict, d_head]
        if target_mapping is not None:  # each prediction's query to its position
            target_mapping = target_mapping.to(q_g.dtype)
            q_g = torch.einsum("bnmd,bml->bnld", q_g, target_mapping)
        out_g, w_g = self.attend_stream(q_g, k, v, k_r, seg_diff, mask_g, return_weights)
        if target_mapping is not None:  # ... and the result back to the prediction
            out_g = torch.einsum("bnld,bml->bnmd", out_g, target_mapping)
        out_g = self.w_o(self.merge_heads(out_g))
        return out_h, out_g, ((w_h, w_g) if return_weights else None)


class XLNetLayer(PostLNLayer):
    """One post-LN layer, applied to both streams with the same weights: relative attention,
    then the feed-forward network (as :class:`~course_lib.models.bert.BertLayer`)."""

    def __init__(self, config: XLNetConfig):
        c = config
        super().__init__(
            XLNetRelativeAttention(c.d_model, c.n_head, dropout=c.dropout),
            FeedForward(c.d_model, c.d_inner, dropout=c.dropout, activation=c.ff_activation),
            dropout=c.dropout,
            eps=c.layer_norm_eps,
        )

    def forward(
        self, h: Tensor, g: Tensor | None = None, *, content: bool = True, **attention_args: Any
    ) -> tuple[Tensor | None, Tensor | None, Any]:
        """``(h, g, weights)``; ``content=False``: ``h`` None, its dropouts' draws made."""
        a_h, a_g, weights = self.attention(h, g, content=content, **attention_args)
        h = self.sublayers(h, a_h) if content else self.draw_sublayer_dropouts(h)
        g = self.sublayers(g, a_g) if g is not None else None
        return h, g, weights


# ---------------------------------------------------------------------------------------
# The models
# ---------------------------------------------------------------------------------------


def _init_xlnet_weights(module: nn.Module, std: float) -> None:
    """BERT's initialisation (N(0, std) weights, zero biases, unit LayerNorms), and N(0, std)
    for ``mask_emb`` and the relative attention's vectors (as Hugging Face does)."""
    init_weights(module, std)
    for m in module.modules():
        if isinstance(m, XLNetRelativeAttention):
            for p in (m.r_w_bias, m.r_r_bias, m.r_s_bias, m.seg_embed):
                nn.init.normal_(p, mean=0.0, std=std)
        elif isinstance(m, XLNetModel):
            nn.init.normal_(m.mask_emb, mean=0.0, std=std)


def check_inputs(
    config: XLNetConfig,
    input_ids: Tensor,
    *,
    attention_mask: Tensor | None = None,
    input_mask: Tensor | None = None,
    token_type_ids: Tensor | None = None,
    perm_mask: Tensor | None = None,
    target_mapping: Tensor | None = None,
) -> None:
    """Shapes of XLNet's inputs, and ids inside the vocabulary (``ValueError`` otherwise)."""
    check_token_batch(input_ids)
    b, n = input_ids.shape
    check_same_shape(
        input_ids, attention_mask=attention_mask, input_mask=input_mask, token_type_ids=token_type_ids
    )
    if attention_mask is not None and input_mask is not None:
        raise ValueError("give attention_mask (1 = token, 0 = padding) or input_mask (1 = padding), not both")
    if perm_mask is not None and tuple(perm_mask.shape) != (b, n, n):
        raise ValueError(
            f"perm_mask must be [batch, seq_len, seq_len] = {(b, n, n)}, got {tuple(perm_mask.shape)}"
        )
    if target_mapping is not None and (
        target_mapping.dim() != 3 or target_mapping.size(0) != b or target_mapping.size(2) != n
    ):
        raise ValueError(
            f"target_mapping must be [batch, num_predict, seq_len] = ({b}, P, {n}), "
            f"got {tuple(target_mapping.shape)}"
        )
    check_id_ranges(("input_ids", input_ids, "vocab_size", config.vocab_size))


class XLNetModel(CountsParameters, nn.Module):
    """The word embeddings, ``mask_emb`` and the stack of two-stream layers.

    ``forward(input_ids, attention_mask=None, mems=None, perm_mask=None, target_mapping=None,
    token_type_ids=None, input_mask=None, *, use_mems=None, output_attentions=False,
    output_hidden_states=False)`` takes Hugging Face's arguments (see the module docstring) and
    returns an :class:`XLNetModelOutput`: the query stream at the targets when
    ``target_mapping`` is given, else the content stream.
    """

    config_class = XLNetConfig

    def __init__(self, config: XLNetConfig):
        super().__init__()
        if not isinstance(config, XLNetConfig):
            raise TypeError(f"expected an XLNetConfig, got {type(config).__name__}")
        c = config
        self.config = c
        self.word_embedding = nn.Embedding(c.vocab_size, c.d_model)
        self.mask_emb = nn.Parameter(torch.zeros(1, 1, c.d_model))  # w: the query stream's start
        self.layers = nn.ModuleList(XLNetLayer(c) for _ in range(c.n_layer))
        self.dropout = nn.Dropout(c.dropout)
        _init_xlnet_weights(self, c.initializer_range)

    @property
    def device(self) -> torch.device:
        return self.word_embedding.weight.device

    # --- pieces of the forward pass -----------------------------------------------------

    def relative_encoding(self, q_len: int, k_len: int) -> Tensor:
        """``[k_len + q_len, d_model]``: the sinusoids of the distances ``k_len .. -q_len + 1``;
        with ``bi_data``, ``[2, k_len + q_len, d_model]``: those and the negated distances
        ``-k_len .. q_len - 1`` (the backward half of the batch), as Hugging Face's
        ``relative_positional_encoding``."""
        c = self.config
        d = relative_distances(q_len, k_len, clamp_len=c.clamp_len, device=self.device)
        if c.bi_data:
            backward = -d + 0.0  # + 0.0: distance 0 stays +0.0
            pos = torch.stack([relative_sinusoids(x, c.d_model) for x in (d, backward)])
        else:
            pos = relative_sinusoids(d, c.d_model)
        return pos.to(self.word_embedding.weight.dtype)

    @staticmethod
    def attention_masks(
        input_ids: Tensor,
        mem_len: int,
        attention_mask: Tensor | None,
        input_mask: Tensor | None,
        perm_mask: Tensor | None,
    ) -> tuple[Tensor | None, Tensor | None]:
        """Boolean ``(content mask, query mask)``, ``[batch, 1, q_len, mem_len + q_len]``
        (True = may attend), or ``(None, None)`` when nothing is hidden.

        A key is hidden from query ``i`` where ``perm_mask[i, j]`` is set or ``j`` is padding;
        memory is visible to all; the content stream also sees its own position.
        """
        b, q_len = input_ids.shape
        pad = None
        if attention_mask is not None:
            pad = attention_mask == 0
        elif input_mask is not None:
            pad = input_mask != 0
        if pad is not None and not bool(pad.any()):
            pad = None
        hidden = None if perm_mask is None else perm_mask != 0  # [batch, q_len, q_len]
        if pad is not None:
            hidden = pad[:, None, :] if hidden is None else hidden | pad[:, None, :]
        if hidden is None:
            return None, None
        visible = ~hidden.expand(b, q_len, q_len)
        if mem_len:
            visible = torch.cat([visible.new_ones(b, q_len, mem_len), visible], dim=-1)
        keys = torch.arange(mem_len + q_len, device=input_ids.device)
        itself = keys[None, :] == torch.arange(q_len, device=input_ids.device)[:, None] + mem_len
        return (visible | itself)[:, None], visible[:, None]

    @staticmethod
    def segment_differences(token_type_ids: Tensor | None, mem_len: int) -> Tensor | None:
        """Boolean ``[batch, q_len, mem_len + q_len]``: True where query and key lie in different
        segments (memory counts as segment 0); None without ``token_type_ids``."""
        if token_type_ids is None:
            return None
        keys = token_type_ids
        if mem_len:
            keys = torch.cat([token_type_ids.new_zeros(token_type_ids.size(0), mem_len), keys], dim=1)
        return token_type_ids[:, :, None] != keys[:, None, :]

    def memory_of(self, h: Tensor, mem: Tensor | None) -> Tensor:
        """The next segment's memory of one layer, ``[mem_len, batch, d_model]``: the last
        ``mem_len`` of ``[mem; h[:reuse_len]]``, detached (``mem`` in that layout too)."""
        c = self.config
        cur = h.transpose(0, 1)  # time-first, Hugging Face's layout
        if c.reuse_len:
            cur = cur[: c.reuse_len]
        return update_memory(mem, cur, c.mem_len, seq_dim=0)  # None keeps all (mem_len=0: never called)

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        mems: Sequence[Tensor] | None = None,
        perm_mask: Tensor | None = None,
        target_mapping: Tensor | None = None,
        token_type_ids: Tensor | None = None,
        input_mask: Tensor | None = None,
        *,
        use_mems: bool | None = None,
        output_attentions: bool = False,
        output_hidden_states: bool = False,
    ) -> XLNetModelOutput:
        c = self.config
        check_inputs(
            c,
            input_ids,
            attention_mask=attention_mask,
            input_mask=input_mask,
            token_type_ids=token_type_ids,
            perm_mask=perm_mask,
            target_mapping=target_mapping,
        )
        b, q_len = input_ids.shape
        if c.bi_data and b % 2:
            raise ValueError(f"bi_data=True needs an even batch size (forward half, backward half), got {b}")
        mems = check_mems(mems, c.n_layer, b, c.d_model, seq_dim=0)
        mem_len = 0 if mems is None else mems[0].size(0)
        if use_mems is None:
            use_mems = c.use_mems_train if self.training else c.use_mems_eval
        use_mems = use_mems and c.mem_len != 0  # mem_len=0: no memory

        mask_h, mask_g = self.attention_masks(input_ids, mem_len, attention_mask, input_mask, perm_mask)
        seg_diff = self.segment_differences(token_type_ids, mem_len)
        pos_emb = self.dropout(self.relative_encoding(q_len, mem_len + q_len))
        h = self.dropout(self.word_embedding(input_ids))
        g = None
        if target_mapping is not None:
            g = self.dropout(self.mask_emb.expand(b, target_mapping.size(1), -1))

        new_mems: list[Tensor] = []
        hidden: list[Tensor] = []
        weights: list[Any] = []
        # Nothing reads the last layer's content stream when the output is the query stream's
        # (no hidden states or weights asked for): it is skipped, its keys, values and dropout
        # draws kept, so every mask is the full computation's. A GPU's fused attention dropout
        # cannot draw alone, so there, in training, it runs.
        skip_last = g is not None and not (output_hidden_states or output_attentions)
        skip_last = skip_last and (not self.training or c.dropout == 0 or h.device.type == "cpu")
        for i, layer in enumerate(self.layers):
            mem = None if mems is None else mems[i]
            if use_mems:
                new_mems.append(self.memory_of(h, mem))
            if output_hidden_states:
                hidden.extend((h, g) if g is not None else (h,))
            h, g, w = layer(
                h,
                g,
                pos_emb=pos_emb,
                mem=None if mem is None else mem.transpose(0, 1),
                seg_diff=seg_diff,
                mask_h=mask_h,
                mask_g=mask_g,
                target_mapping=target_mapping,
                return_weights=output_attentions,
                content=not (skip_last and i == len(self.layers) - 1),
            )
            if output_attentions:
                weights.append(w)
        if output_hidden_states:
            hidden.extend((h, g) if g is not None else (h,))
        return XLNetModelOutput(
            last_hidden_state=self.dropout(g if g is not None else h),
            mems=tuple(new_mems) if use_mems else None,
            hidden_states=tuple(hidden) if output_hidden_states else None,
            attentions=tuple(weights) if output_attentions else None,
        )

    # --- Hugging Face -------------------------------------------------------------------

    def hf_names(self, prefix: str = "") -> dict[str, str]:
        """Our parameter names -> ``transformers.XLNetModel``'s (with ``prefix``, e.g. ``"transformer"``)."""
        return xlnet_hf_names(self.config, "", prefix)

    @classmethod
    def from_hf(cls, hf_model: nn.Module) -> XLNetModel:
        """The same configuration and weights as a ``transformers`` XLNet (``XLNetModel``, or a
        model with one inside, e.g. ``XLNetLMHeadModel``: its body is copied). Eval mode."""
        model = cls(XLNetConfig.from_hf(hf_model.config))
        base = getattr(hf_model, "base_model", hf_model)
        load_hf_state_dict(model, xlnet_state_dict_to_ours(base.state_dict()), model.hf_names())
        return model.eval()


class _XLNetHeads:
    """The forward pass every XLNet model with a head shares: :class:`XLNetModel`'s arguments
    (keywords are safest: the third positional one is ``mems``) and ``labels``, the body at
    ``transformer``, then the model's own ``head_output(out, labels)``."""

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        mems: Sequence[Tensor] | None = None,
        perm_mask: Tensor | None = None,
        target_mapping: Tensor | None = None,
        token_type_ids: Tensor | None = None,
        input_mask: Tensor | None = None,
        *,
        labels: Tensor | None = None,
        use_mems: bool | None = None,
        output_attentions: bool = False,
        output_hidden_states: bool = False,
    ):
        out = self.transformer(
            input_ids,
            attention_mask,
            mems,
            perm_mask,
            target_mapping,
            token_type_ids,
            input_mask,
            use_mems=use_mems,
            output_attentions=output_attentions,
            output_hidden_states=output_hidden_states,
        )
        return self.head_output(out, labels)


class XLNetLMHeadModel(_XLNetHeads, TiedLMHeadModel):
    r"""XLNet with its language-model head: :math:`\mathrm{logits} = x\, W_e^\top + b` on the
    model's output (the query stream at the targets with ``target_mapping``), ``W_e`` the word
    embeddings when ``tie_word_embeddings``.

    ``forward`` takes :class:`XLNetModel`'s arguments and ``labels`` ``[batch, num_predict]``
    (``-100``: no loss), and returns an :class:`XLNetLMHeadModelOutput`; the loss is the mean
    cross-entropy over the labelled targets.
    """

    config_class = XLNetConfig
    body_class = XLNetModel
    output_class = XLNetLMHeadModelOutput
    loss_fn = staticmethod(masked_lm_loss)

    def hf_names(self) -> dict[str, str]:
        """Our parameter names -> ``transformers.XLNetLMHeadModel``'s (a tied head maps to the
        word embeddings too)."""
        names = xlnet_hf_names(self.config, self.base_attr, self.base_attr)
        return {**names, **linear_names("lm_head", "lm_loss")}

    @classmethod
    def from_hf(cls, hf_model: nn.Module) -> XLNetLMHeadModel:
        """Copy a ``transformers.XLNetLMHeadModel`` (configuration and weights); eval mode."""
        return _copy_hf(cls, hf_model)


class XLNetForTokenClassification(_XLNetHeads, WithBody, nn.Module):
    """XLNet with a tagging head: a ``Linear(d_model, num_labels)`` (``classifier``) on every
    position of the content stream, as ``transformers.XLNetForTokenClassification``. The dropout
    before it is the body's own output dropout (``config.dropout``), plus
    ``config.classifier_dropout`` when set.

    ``forward`` takes :class:`XLNetModel`'s arguments (keywords are safest: the third positional
    argument is ``mems``, not BERT's ``token_type_ids``) and ``labels`` ``[batch, seq_len]``
    (``-100``: no loss), and returns an :class:`XLNetForTokenClassificationOutput`; the loss is the
    mean cross-entropy over the labelled positions
    (:func:`~course_lib.models.bert.token_classification_loss`). Fine-tuning starts from a
    pretrained :class:`XLNetModel` (:meth:`load_body`), e.g. the body of an
    :class:`XLNetLMHeadModel`.
    """

    config_class = XLNetTaskConfig
    model_class = XLNetModel  # the body (fine-tuning recipes check a start against it)
    base_attr = "transformer"

    def __init__(self, config: XLNetConfig):
        super().__init__()
        if not isinstance(config, XLNetConfig):
            raise TypeError(f"expected an XLNetConfig, got {type(config).__name__}")
        if not isinstance(config, XLNetTaskConfig):  # a pretraining config: the task fields' defaults
            config = XLNetTaskConfig(**config.to_dict())
        self.config = config
        self.transformer = XLNetModel(config)
        self.dropout = nn.Dropout(config.classifier_dropout or 0.0)
        self.classifier = nn.Linear(config.d_model, config.num_labels)
        init_weights(self.classifier, config.initializer_range)

    def head_output(self, out: XLNetModelOutput, labels: Tensor | None) -> XLNetForTokenClassificationOutput:
        """The tagging head on the body's output ``out``, with the loss when ``labels`` are given."""
        logits = self.classifier(self.dropout(out.last_hidden_state))
        return XLNetForTokenClassificationOutput(
            loss=token_classification_loss(logits, labels) if labels is not None else None,
            logits=logits,
            mems=out.mems,
            hidden_states=out.hidden_states,
            attentions=out.attentions,
        )

    def hf_names(self) -> dict[str, str]:
        """Our parameter names -> ``transformers.XLNetForTokenClassification``'s."""
        names = xlnet_hf_names(self.config, self.base_attr, self.base_attr)
        return {**names, **linear_names("classifier", "classifier")}

    @classmethod
    def from_hf(cls, hf_model: nn.Module) -> XLNetForTokenClassification:
        """Copy a ``transformers.XLNetForTokenClassification`` (configuration, ``num_labels``
        from its ``id2label``, and weights); eval mode."""
        return _copy_hf(cls, hf_model)


def _copy_hf(cls: type, hf_model: nn.Module) -> nn.Module:
    """``cls`` (an XLNet model with a body at ``transformer``) with the configuration and weights
    of the ``transformers`` model of the same name; eval mode."""
    model = cls(cls.config_class.from_hf(hf_model.config))
    load_hf_state_dict(model, xlnet_state_dict_to_ours(hf_model.state_dict()), model.hf_names())
    return model.eval()
