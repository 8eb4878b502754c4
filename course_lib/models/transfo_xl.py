r"""Transformer-XL: "Attentive Language Models Beyond a Fixed-Length Context" (Dai et al., 2019).

A Transformer language model trained on fixed-length segments sees nothing before its
segment: every segment starts from scratch (*context fragmentation*), and the longest
dependency it can learn is the segment length :math:`L`. Transformer-XL keeps the left-to-right
factorisation :math:`\log p(x) = \sum_t \log p(x_t \mid x_{<t})` and adds two things.

**Segment-level recurrence.** The states a layer computed for the previous segment
:math:`\tau` are cached and reused, without gradient, as extra keys and values for segment
:math:`\tau + 1`. For layer :math:`n` (``SG``: stop-gradient, :math:`\circ`: concatenation
along the sequence):

.. math::

    \tilde h^{n-1}_{\tau+1} &= \big[\mathrm{SG}(m^{n-1}_{\tau}) \circ h^{n-1}_{\tau+1}\big] \\
    q^n,\; k^n,\; v^n &= h^{n-1}_{\tau+1} W_q^\top,\;
        \tilde h^{n-1}_{\tau+1} W_{k}^\top,\; \tilde h^{n-1}_{\tau+1} W_v^\top \\
    h^n_{\tau+1} &= \text{Transformer-Layer}(q^n, k^n, v^n)

The memory :math:`m^{n-1}` of layer :math:`n` holds the last ``mem_len`` states that layer
received as input (:func:`~course_lib.nn.relative.update_memory`). Queries come from the
current segment only, keys and values from memory and segment. Since layer :math:`n`'s memory
was itself computed with memory, the longest dependency grows to about :math:`N \times
\mathrm{mem\_len}` for :math:`N` layers, and at evaluation a segment's states are computed
once and reused, instead of recomputing a sliding window for every token.

**Relative positional encodings.** Absolute positions cannot work with a memory: position 3 of
segment :math:`\tau` and position 3 of segment :math:`\tau + 1` would look the same. So no
position is added to the input; the attention score of query :math:`i` and key :math:`j`
depends on their distance instead. With the memory's :math:`M` states first, query :math:`i`
(``0..T-1``) sits at key position :math:`M + i`, its distance to key :math:`j` is
:math:`\delta_{ij} = M + i - j`, and the paper's four terms

.. math::

    A^{rel}_{ij} = \underbrace{q_i^\top k_j}_{(a)\ \text{content}}
    + \underbrace{q_i^\top W_R R_{\delta_{ij}}}_{(b)\ \text{content-position}}
    + \underbrace{u^\top k_j}_{(c)\ \text{global content bias}}
    + \underbrace{v^\top W_R R_{\delta_{ij}}}_{(d)\ \text{global position bias}}
    = (q_i + u)^\top k_j + (q_i + v)^\top W_R R_{\delta_{ij}},

with :math:`R_\delta` the sinusoid of the distance (:func:`~course_lib.nn.relative.relative_sinusoids`:
sines, then cosines; no learned position table), :math:`W_R` its own projection (``w_r``,
the paper's :math:`W_{k,R}`) and :math:`u, v` learned vectors, one per head (``r_w_bias``,
``r_r_bias``) that replace the query's absolute position. Scores are scaled by
:math:`1/\sqrt{d_{head}}` (as in the authors' code; the paper's formula leaves the scale out),
every key to the right of the query is masked (:math:`j \le M + i`: the memory is always
visible), and the softmax weights average the values :math:`W_v \tilde h_j` as in any
attention. The position term
is computed once per query against every distance and moved under its key by
:func:`~course_lib.nn.relative.rel_shift`. The content term is the course's
:func:`~course_lib.nn.attention.attention` on the query :math:`q_i + u`; the position term
enters it as its additive score ``bias``.

**Layer** (post-LN, as in the paper):

.. math::

    o &= \mathrm{LayerNorm}\big(h + \mathrm{Dropout}(\mathrm{MultiHead}_{rel}(h, [m; h]))\big) \\
    h' &= \mathrm{LayerNorm}\big(o + \mathrm{Dropout}(\mathrm{FFN}(o))\big), \qquad
    \mathrm{FFN}(x) = W_2\, \mathrm{Dropout}(\mathrm{ReLU}(W_1 x + b_1)) + b_2

**Model.** :math:`h^0 = \mathrm{Dropout}(\sqrt{d_{model}}\, e(x))` (the word embedding scaled as
in the authors' code), ``n_layer`` layers, dropout on the output; the dropout of the relative
encodings is shared by the layers. The language-model head is a plain softmax over the
vocabulary with the word embeddings as its matrix (tied) and a bias:
:math:`p(x_{t+1} = x \mid \cdot) \propto \exp(e(x)^\top h^N_t + b_x)`.

**Memories in and out.** ``forward(input_ids, mems=None)`` returns ``mems``: a tuple of one
``[batch, mem_len, d_model]`` tensor per layer, the states that layer received as input
(layer 0's: the embeddings; in training mode after dropout, as in the authors' code), the
last ``mem_len`` of them (``config.mem_len``, or the
``mem_len`` argument of ``forward``; 0: no memory is returned), detached. Feed them back as
``mems=`` with the next segment of the same rows. Given ``mems`` may have any length; they
are used whole.

**Training and evaluation.** Train on consecutive segments of a long text, carrying ``mems``
from one step to the next (the gradient stops at the memory); the loss of a segment is the
next-token cross-entropy inside it (``labels`` are the input ids, shifted by one inside the
model, ``-100`` for no loss, as in Hugging Face's causal LMs). :func:`segmented_nll` evaluates
a long sequence segment by segment and returns every token's negative log-likelihood, so the
loss can be plotted against the position (or the context a token had), with memory and
without (``mem_len=0``).

Paper / authors' code / Hugging Face vs ours:

* Plain tied softmax over the whole vocabulary; the paper's word-level models use an adaptive
  softmax (``cutoffs``) and adaptive input embeddings (``div_val``), which are not
  implemented.
* ``d_head`` must be ``d_model / n_head`` (the heads split ``d_model``, as in
  :class:`~course_lib.nn.attention.MultiHeadAttention`); the paper's WikiText-103 models
  satisfy it (410 = 10 x 41, 1024 = 16 x 64), the authors' code does not require it.
* The relative encodings list the distances ``k_len .. -q_len + 1`` (as XLNet's, from
  :mod:`course_lib.nn.relative`) where the authors' code lists ``k_len - 1 .. 0``; the extra
  rows only ever meet masked keys, so every visible score is the same.
* ``mems`` are batch-first ``[batch, mem_len, d_model]`` like every other tensor of the
  course; the authors' code and Hugging Face keep them time-first ``[mem_len, batch,
  d_model]``.
* Not implemented: ``same_length`` (every query attending to the same number of keys, an
  evaluation option), ``ext_len``, pre-LN (``pre_lnorm``), padding masks (the model reads
  continuous text), ``head_mask``, ``inputs_embeds``. There is no ``from_hf``: the installed
  ``transformers`` (5.x) no longer ships Transformer-XL.
* :class:`TransfoXLConfig` has Hugging Face's field names (``n_head``, ``n_layer``,
  ``d_inner``, ``layer_norm_epsilon``, ``init_std``, ...) and none of its options for the
  parts not implemented (``cutoffs``, ``div_val``, ``d_embed``, ``pre_lnorm``,
  ``same_length``, ``init``, ``init_range``, ``proj_init_std``); weights are drawn from
  N(0, ``init_std``) as with Hugging Face's ``init="normal"``, LayerNorms start at one.
* ``untie_r=True`` (the default, as in Hugging Face's config) gives every layer its own
  :math:`u, v`; ``untie_r=False`` shares one pair across the layers (the authors' code's
  default).
* The defaults are the paper's WikiText-103 base sizes (16 layers, ``d_model=410``, 10 heads
  of 41, ``d_inner=2100``, ``mem_len=150``, vocabulary 267,735). With the plain tied softmax,
  :class:`TransfoXLLMHeadModel` of that size has 151,118,605 parameters (the embedding matrix
  109,771,350 of them, the output bias 267,735), :class:`TransfoXLModel` 150,850,870; the
  paper's table gives 151M for its base model.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import torch
from torch import Tensor, nn

from ..nn.attention import causal_mask
from ..nn.checks import check_id_ranges, check_token_batch
from ..nn.feedforward import FeedForward, get_activation
from ..nn.init import init_weights
from ..nn.layer import PostLNLayer
from ..nn.relative import (
    RelativeAttention,
    check_mems,
    relative_distances,
    relative_sinusoids,
    update_memory,
)
from .base import CountsParameters, TiedLMHeadModel
from .bert import next_token_loss
from .hf import ModelOutput

__all__ = [
    "TransfoXLConfig",
    "TransfoXLModelOutput",
    "TransfoXLLMHeadModelOutput",
    "TransfoXLRelativeAttention",
    "TransfoXLLayer",
    "TransfoXLModel",
    "TransfoXLLMHeadModel",
    "segment_token_nll",
    "segmented_nll",
]


# ---------------------------------------------------------------------------------------
# Configuration
# ---------------------------------------------------------------------------------------


@dataclass
class TransfoXLConfig:
    """Sizes and options of a Transformer-XL; field names are Hugging Face's (``TransfoXLConfig``).

    Defaults are the paper's WikiText-103 base model (with a plain softmax, see the module
    docstring). ``d_head`` defaults to ``d_model / n_head`` and must equal it. ``ff_activation``
    (Hugging Face's Transformer-XL is always ReLU) is XLNet's name for the same option.
    """

    vocab_size: int = 267735  # WikiText-103's word vocabulary
    d_model: int = 410  # width of every layer (and of the word embeddings)
    n_head: int = 10
    d_head: int | None = None  # None: d_model / n_head (41); any other value is refused
    n_layer: int = 16
    d_inner: int = 2100  # inner width of the feed-forward network
    mem_len: int = 150  # states kept per layer for the next segment (0: no memory)
    clamp_len: int = -1  # > 0: relative distances clipped to clamp_len
    dropout: float = 0.1  # on the embeddings, relative encodings, sub-layer outputs, output
    dropatt: float = 0.0  # on the attention weights
    ff_activation: str = "relu"
    layer_norm_epsilon: float = 1e-5
    init_std: float = 0.02  # std of the normal initialisation
    untie_r: bool = True  # u, v per layer (False: one pair shared by all layers)
    tie_word_embeddings: bool = True  # the LM head's matrix is the word embedding matrix
    pad_token_id: int | None = None  # the model needs none (continuous text); kept for tokenizers

    def __post_init__(self):
        for name in ("vocab_size", "d_model", "n_head", "n_layer", "d_inner"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if self.d_model % self.n_head != 0:
            raise ValueError(f"d_model={self.d_model} must be divisible by n_head={self.n_head}")
        if self.d_head is None:
            self.d_head = self.d_model // self.n_head
        if self.d_head * self.n_head != self.d_model:
            raise ValueError(
                f"d_head={self.d_head} must be d_model / n_head = {self.d_model // self.n_head}: "
                "course_lib's Transformer-XL splits d_model into its heads"
            )
        if self.d_model % 2 != 0:
            raise ValueError(f"d_model={self.d_model} must be even (sines and cosines of the distances)")
        if self.mem_len is None or self.mem_len < 0:
            raise ValueError(f"mem_len must be >= 0 (0: no memory), got {self.mem_len}")
        for name in ("dropout", "dropatt"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ValueError(f"{name} must be in [0, 1), got {getattr(self, name)}")
        if self.layer_norm_epsilon <= 0:
            raise ValueError(f"layer_norm_epsilon must be positive, got {self.layer_norm_epsilon}")
        if self.init_std < 0:
            raise ValueError(f"init_std must be >= 0, got {self.init_std}")
        if self.pad_token_id is not None and not 0 <= self.pad_token_id < self.vocab_size:
            raise ValueError(
                f"pad_token_id={self.pad_token_id} must be None or lie in [0, vocab_size={self.vocab_size})"
            )
        get_activation(self.ff_activation)

    def to_dict(self) -> dict:
        return asdict(self)


# ---------------------------------------------------------------------------------------
# Outputs (Hugging Face's field names)
# ---------------------------------------------------------------------------------------


@dataclass
class TransfoXLModelOutput(ModelOutput):
    last_hidden_state: Tensor  # [batch, seq_len, d_model]
    mems: tuple[Tensor, ...] | None = None  # per layer [batch, mem_len, d_model]: feed back as `mems`
    hidden_states: tuple[Tensor, ...] | None = None  # every layer's input, then the last layer's output
    attentions: tuple[Tensor, ...] | None = None  # per layer [batch, heads, seq_len, mem_len + seq_len]


@dataclass
class TransfoXLLMHeadModelOutput(ModelOutput):
    loss: Tensor | None = None  # mean next-token cross-entropy over the labelled positions
    logits: Tensor | None = None  # [batch, seq_len, vocab_size]: position t scores token t + 1
    mems: tuple[Tensor, ...] | None = None
    hidden_states: tuple[Tensor, ...] | None = None
    attentions: tuple[Tensor, ...] | None = None


# ---------------------------------------------------------------------------------------
# Layers
# ---------------------------------------------------------------------------------------


class TransfoXLRelativeAttention(RelativeAttention):
    r"""Causal multi-head attention over ``[memory; segment]`` with relative positions.

    The parameters are :class:`~course_lib.nn.relative.RelativeAttention`'s: the projections
    (no biases, as in the paper), ``w_r`` (:math:`W_R`) for the relative encodings and the
    per-head vectors ``r_w_bias`` (:math:`u`) and ``r_r_bias`` (:math:`v`), ``[heads, d_head]``. Its
    ``forward`` takes the segment's states, the memory and the encodings, not
    ``MultiHeadAttention``'s ``(query, key, value)``.
    """

    def project(self, h: Tensor, mem: Tensor | None) -> tuple[Tensor, Tensor, Tensor]:
        """``(q, k, v)``, ``[batch, heads, length, d_head]``: queries from ``h`` ``[batch, q_len,
        d_model]``, keys and values from ``[mem; h]`` (``mem``: ``[batch, mem_len, d_model]``)."""
        keys = h if mem is None else torch.cat([mem, h], dim=1)
        return (
            self.split_heads(self.w_q(h)),
            self.split_heads(self.w_k(keys)),
            self.split_heads(self.w_v(keys)),
        )

    def position_scores(self, q: Tensor, pos_emb: Tensor, k_len: int) -> Tensor:
        r"""The unscaled position term :math:`(q_i + v)^\top W_R R_{\delta_{ij}}`, ``[batch, heads,
        q_len, k_len]``.

        ``q``: ``[batch, heads, q_len, d_head]``; ``pos_emb``: ``[k_len + q_len, d_model]``, the
        sinusoids of :func:`~course_lib.nn.relative.relative_distances` (``k_len`` down to
        ``-q_len + 1``). Every query is scored against every distance, then
        :func:`~course_lib.nn.relative.rel_shift` puts distance :math:`M + i - j` under key :math:`j`.
        """
        if pos_emb.dim() != 2 or pos_emb.size(0) != k_len + q.size(-2):
            raise ValueError(
                f"pos_emb must be [k_len + q_len, d_model] = [{k_len + q.size(-2)}, {self.d_model}] "
                f"(one row per distance), got {tuple(pos_emb.shape)}"
            )
        return self.relative_scores(q, self.relative_keys(pos_emb), k_len)

    def scores(self, h: Tensor, *, pos_emb: Tensor, mem: Tensor | None = None) -> Tensor:
        r"""The attention scores before masking and softmax, ``[batch, heads, q_len, k_len]``:
        :math:`\big[(q_i + u)^\top k_j + (q_i + v)^\top W_R R_{M+i-j}\big] / \sqrt{d_{head}}`
        (the entries right of the diagonal are computed too, and masked by ``forward``)."""
        q, k, _ = self.project(h, mem)
        content = torch.matmul(q + self.r_w_bias[:, None], k.transpose(-2, -1))
        return (content + self.position_scores(q, pos_emb, k.size(-2))) / self.d_head**0.5

    def forward(
        self,
        h: Tensor,
        *,
        pos_emb: Tensor,
        mem: Tensor | None = None,
        return_weights: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        """``(output [batch, q_len, d_model], weights [batch, heads, q_len, mem_len + q_len] or
        None)``: softmax over the keys ``j <= mem_len + i`` of the scores, times the values,
        through ``w_o``."""
        q, k, v = self.project(h, mem)
        q_len, k_len = q.size(-2), k.size(-2)
        bias = self.position_scores(q, pos_emb, k_len) / self.d_head**0.5
        mask = causal_mask(q_len, key_length=k_len, device=h.device)  # key j <= mem_len + i
        out, weights = self.attend(q, k, v, bias, mask, return_weights)
        return self.w_o(self.merge_heads(out)), weights


class TransfoXLLayer(PostLNLayer):
    """One post-LN layer: relative attention over ``[mem; h]``, then the feed-forward network,
    each with dropout, a residual connection and a LayerNorm."""

    def __init__(self, config: TransfoXLConfig):
        c = config
        super().__init__(
            TransfoXLRelativeAttention(c.d_model, c.n_head, dropout=c.dropatt),
            FeedForward(c.d_model, c.d_inner, dropout=c.dropout, activation=c.ff_activation),
            dropout=c.dropout,
            eps=c.layer_norm_epsilon,
        )

    def forward(
        self, h: Tensor, *, pos_emb: Tensor, mem: Tensor | None = None, return_weights: bool = False
    ) -> tuple[Tensor, Tensor | None]:
        a, weights = self.attention(h, pos_emb=pos_emb, mem=mem, return_weights=return_weights)
        return self.sublayers(h, a), weights


# ---------------------------------------------------------------------------------------
# The models
# ---------------------------------------------------------------------------------------


def _init_transfo_xl_weights(module: nn.Module, std: float) -> None:
    """BERT's initialisation (N(0, std) weights, zero biases, unit LayerNorms), and N(0, std)
    for the attention's ``u`` and ``v``."""
    init_weights(module, std)
    for m in module.modules():
        if isinstance(m, TransfoXLRelativeAttention):
            nn.init.normal_(m.r_w_bias, mean=0.0, std=std)
            nn.init.normal_(m.r_r_bias, mean=0.0, std=std)


def check_inputs(config: TransfoXLConfig, input_ids: Tensor) -> None:
    """``input_ids`` ``[batch, seq_len]`` of integer ids inside the vocabulary (``ValueError`` otherwise)."""
    check_token_batch(input_ids, min_length=1)
    check_id_ranges(("input_ids", input_ids, "vocab_size", config.vocab_size))


class TransfoXLModel(CountsParameters, nn.Module):
    """The word embeddings and the stack of relative-attention layers, with memory.

    ``forward(input_ids, mems=None, *, mem_len=None, output_attentions=False,
    output_hidden_states=False)`` returns a :class:`TransfoXLModelOutput` whose ``mems``
    (unless the memory length is 0) are the next segment's ``mems`` (see the module docstring).
    ``mem_len`` overrides ``config.mem_len`` for the returned memory.
    """

    config_class = TransfoXLConfig

    def __init__(self, config: TransfoXLConfig):
        super().__init__()
        if not isinstance(config, TransfoXLConfig):
            raise TypeError(f"expected a TransfoXLConfig, got {type(config).__name__}")
        c = config
        self.config = c
        self.word_embedding = nn.Embedding(c.vocab_size, c.d_model)
        self.layers = nn.ModuleList(TransfoXLLayer(c) for _ in range(c.n_layer))
        self.dropout = nn.Dropout(c.dropout)
        if not c.untie_r:  # one u and one v for the whole model
            first = self.layers[0].attention
            for layer in self.layers[1:]:
                layer.attention.r_w_bias = first.r_w_bias
                layer.attention.r_r_bias = first.r_r_bias
        _init_transfo_xl_weights(self, c.init_std)

    @property
    def device(self) -> torch.device:
        return self.word_embedding.weight.device

    def embed(self, input_ids: Tensor) -> Tensor:
        r""":math:`\sqrt{d_{model}}\, e(x)`, ``[batch, seq_len, d_model]`` (before dropout)."""
        return self.word_embedding(input_ids) * self.config.d_model**0.5

    def relative_encoding(self, q_len: int, k_len: int) -> Tensor:
        """``[k_len + q_len, d_model]``: the sinusoids of the distances ``k_len .. -q_len + 1``
        (clipped by ``config.clamp_len``), in the model's dtype."""
        d = relative_distances(q_len, k_len, clamp_len=self.config.clamp_len, device=self.device)
        return relative_sinusoids(d, self.config.d_model).to(self.word_embedding.weight.dtype)

    def forward(
        self,
        input_ids: Tensor,
        mems: Sequence[Tensor] | None = None,
        *,
        mem_len: int | None = None,
        output_attentions: bool = False,
        output_hidden_states: bool = False,
    ) -> TransfoXLModelOutput:
        c = self.config
        check_inputs(c, input_ids)
        if mem_len is not None and mem_len < 0:
            raise ValueError(f"mem_len must be None (config.mem_len) or >= 0, got {mem_len}")
        keep = c.mem_len if mem_len is None else mem_len
        b, q_len = input_ids.shape
        mems = check_mems(mems, c.n_layer, b, c.d_model)
        m_len = 0 if mems is None else mems[0].size(1)

        pos_emb = self.dropout(self.relative_encoding(q_len, m_len + q_len))
        h = self.dropout(self.embed(input_ids))
        new_mems: list[Tensor] = []
        hidden: list[Tensor] = []
        weights: list[Tensor] = []
        for i, layer in enumerate(self.layers):
            mem = None if mems is None else mems[i]
            if keep:
                new_mems.append(update_memory(mem, h, keep))
            if output_hidden_states:
                hidden.append(h)
            h, w = layer(h, pos_emb=pos_emb, mem=mem, return_weights=output_attentions)
            if output_attentions:
                weights.append(w)
        if output_hidden_states:
            hidden.append(h)
        return TransfoXLModelOutput(
            last_hidden_state=self.dropout(h),
            mems=tuple(new_mems) if keep else None,
            hidden_states=tuple(hidden) if output_hidden_states else None,
            attentions=tuple(weights) if output_attentions else None,
        )


class TransfoXLLMHeadModel(TiedLMHeadModel):
    r"""Transformer-XL with its language-model head: :math:`\mathrm{logits} = h\, W_e^\top + b`,
    a plain softmax over the whole vocabulary (the paper's adaptive softmax is not
    implemented), ``W_e`` the word embeddings when ``tie_word_embeddings``.

    ``forward(input_ids, mems=None, *, labels=None, mem_len=None, ...)`` returns a
    :class:`TransfoXLLMHeadModelOutput`. ``labels`` ``[batch, seq_len]`` are the input ids
    (``-100``: no loss); ``logits[:, t]`` predicts token ``t + 1`` and the loss is the mean
    next-token cross-entropy inside the segment (:func:`~course_lib.models.bert.next_token_loss`).
    The segment's last position predicts the first token of the next segment, which the loss
    cannot see; use :func:`segmented_nll` to score every token of a long text.
    """

    config_class = TransfoXLConfig
    body_class = TransfoXLModel
    output_class = TransfoXLLMHeadModelOutput
    loss_fn = staticmethod(next_token_loss)
    std_field = "init_std"

    def forward(
        self,
        input_ids: Tensor,
        mems: Sequence[Tensor] | None = None,
        *,
        labels: Tensor | None = None,
        mem_len: int | None = None,
        output_attentions: bool = False,
        output_hidden_states: bool = False,
    ) -> TransfoXLLMHeadModelOutput:
        out = self.transformer(
            input_ids,
            mems,
            mem_len=mem_len,
            output_attentions=output_attentions,
            output_hidden_states=output_hidden_states,
        )
        return self.head_output(out, labels)


# ---------------------------------------------------------------------------------------
# Evaluation over a long sequence
# ---------------------------------------------------------------------------------------


def segment_token_nll(
    model: TransfoXLLMHeadModel, input_ids: Tensor, segment_len: int, mem_len: int | None = None
) -> Tensor:
    r"""``[batch, T - 1]``: every token's negative log-likelihood over a long sequence read
    segment by segment, with the memory carried from one segment to the next, in the model's
    current mode and *with* gradients (the memory itself is detached): the training loss of
    segment-level recurrence is its mean, :func:`segmented_nll` its evaluation.

    ``input_ids`` ``[batch, T]`` is cut into segments of ``segment_len`` tokens (the last may be
    shorter); ``mem_len`` is the memory's length (default ``config.mem_len``; 0 runs every
    segment on its own). Entry ``t`` is :math:`-\log p(x_{t+1} \mid \text{context of } x_t)`, the
    loss of the prediction made at position ``t`` (the first token is never predicted). A
    segment's last position predicts the next segment's first token, so no token is skipped at
    a boundary.
    """
    if not isinstance(model, TransfoXLLMHeadModel):
        raise TypeError(f"segmented_nll needs a TransfoXLLMHeadModel, got {type(model).__name__}")
    check_token_batch(input_ids, min_length=2)
    if segment_len <= 0:
        raise ValueError(f"segment_len must be positive, got {segment_len}")
    if mem_len is not None and mem_len < 0:
        raise ValueError(f"mem_len must be None (config.mem_len) or >= 0, got {mem_len}")
    total = input_ids.size(1)
    parts = []
    mems = None
    for start in range(0, total - 1, segment_len):
        out = model(input_ids[:, start : start + segment_len], mems, mem_len=mem_len)
        mems = out.mems
        targets = input_ids[:, start + 1 : start + segment_len + 1]
        logits = out.logits[:, : targets.size(1)]
        logp = torch.log_softmax(logits.to(torch.promote_types(logits.dtype, torch.float32)), dim=-1)
        parts.append(-logp.gather(-1, targets[..., None]).squeeze(-1))
    return torch.cat(parts, dim=1)


@torch.no_grad()
def segmented_nll(
    model: TransfoXLLMHeadModel, input_ids: Tensor, segment_len: int, mem_len: int | None = None
) -> Tensor:
    r"""Every token's negative log-likelihood (nats) over a long sequence, read segment by segment:
    :func:`segment_token_nll` in eval mode (no dropout) without gradients (the model's mode is
    restored). Returns ``[batch, T - 1]``: entry ``t`` is :math:`-\log p(x_{t+1} \mid
    \text{context of } x_t)`.

    Within a segment, position ``k`` (0-based) sees ``k`` tokens of its segment plus the
    memory; without memory, the loss of a token depends on its position in the segment.
    """
    was_training = model.training
    model.eval()
    try:
        return segment_token_nll(model, input_ids, segment_len, mem_len)
    finally:
        model.train(was_training)
