r"""BERT: "Pre-training of Deep Bidirectional Transformers for Language Understanding"
(Devlin et al., 2019).

BERT is the Transformer's encoder stack, trained to fill in blanks. Everything here reuses
the Transformer chapter's pieces: :class:`~course_lib.nn.attention.MultiHeadAttention`
(projections ``w_q, w_k, w_v, w_o``) and :class:`~course_lib.nn.feedforward.FeedForward`.

**Input embeddings.** Three learned tables are *summed*, then normalised:

.. math::

    E_i = \mathrm{LayerNorm}\big(W^{tok}_{x_i} + W^{pos}_{i} + W^{seg}_{s_i}\big),
    \qquad s_i \in \{0, 1\} \text{ (sentence A or B)}

**Encoder layer** (post-LN, as in the Transformer paper):

.. math::

    H' = \mathrm{LayerNorm}\big(H + \mathrm{Dropout}(\mathrm{MultiHead}(H, H, H))\big), \qquad
    H'' = \mathrm{LayerNorm}\big(H' + \mathrm{Dropout}(\mathrm{act}(H' W_1 + b_1) W_2 + b_2)\big)

with ``act`` the exact GELU :math:`x\,\Phi(x)` for ``hidden_act="gelu"`` and every
LayerNorm using :math:`\epsilon = 10^{-12}`.

**Heads.** The pooler reads the first ([CLS]) vector, :math:`p = \tanh(W_p h_{[CLS]} + b_p)`;
next-sentence prediction is a linear map of it to two logits. The masked-LM head transforms
each vector, :math:`t = \mathrm{LayerNorm}(\mathrm{act}(W_t h + b_t))`, and scores the whole
vocabulary against the *input* embedding table (weights tied), with its own bias:

.. math::

    \mathrm{logits} = t\, (W^{tok})^\top + b_{vocab}

**Pre-training loss.** Cross-entropy over the masked positions only (labels ``-100``
elsewhere) plus the next-sentence cross-entropy:
:math:`\mathcal{L} = \mathcal{L}_{MLM} + \mathcal{L}_{NSP}`.

**Interop.** Parameter shapes and configuration names follow Hugging Face ``transformers``
so that :meth:`BertModel.from_hf` (and the same method on every head model) copies a
``transformers`` model exactly; outputs carry Hugging Face field names
(``last_hidden_state``, ``pooler_output``, ``prediction_logits``, ...). All of that lives in
:mod:`course_lib.models.hf`; this file is the paper's model, top to bottom.
Paper vs ours: the paper's BERT-base 108M counts 30,000 tokens and no pooler; with
``vocab_size=30522`` ``BertModel`` has 109,482,240 parameters (Hugging Face's count too).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..nn.attention import MultiHeadAttention, padding_mask
from ..nn.checks import check_id_ranges, check_same_shape, check_token_batch
from ..nn.feedforward import FeedForward, get_activation
from ..nn.init import init_weights
from ..nn.layer import PostLNLayer
from ..nn.positional import check_length
from .base import CountsParameters, WithBody
from .hf import (
    HEADS_BERT_MLM,
    HEADS_BERT_PRETRAINING,
    HEADS_CLASSIFIER,
    BertForPreTrainingOutput,
    BertModelOutput,
    HFBody,
    HFConfig,
    HFWithHeads,
    MaskedLMOutput,
    ModelOutput,
    SequenceClassifierOutput,
    TokenClassifierOutput,
)

__all__ = [
    "BertConfig",
    "ModelOutput",
    "BertModelOutput",
    "BertForPreTrainingOutput",
    "MaskedLMOutput",
    "SequenceClassifierOutput",
    "BertEmbeddings",
    "BertLayer",
    "BertEncoder",
    "BertPooler",
    "BertMLMHead",
    "BertModel",
    "init_from_teacher",
    "BertForPreTraining",
    "BertForMaskedLM",
    "BertLMHeadModel",
    "CausalLMOutput",
    "BertForSequenceClassification",
    "TokenClassifierOutput",
    "BertForTokenClassification",
    "body_of",
    "masked_lm_loss",
    "next_token_loss",
    "token_classification_loss",
    "IGNORE_INDEX",
    "check_inputs",
]

IGNORE_INDEX = -100  # label of positions that do not count in the loss (PyTorch's default)


# ---------------------------------------------------------------------------------------
# Configuration and input checks
# ---------------------------------------------------------------------------------------


@dataclass
class BertConfig(HFConfig):
    """Sizes and options of a BERT model. Defaults are BERT-base (uncased).

    Field names are Hugging Face's, so ``BertConfig(**hf_config.to_dict())``-style copies
    work (see :meth:`from_hf`); ``max_len`` is the longest input (from
    :class:`~course_lib.models.hf.HFConfig`). A config of one of the course's sizes:
    :func:`~course_lib.recipes.bert.bert_config`.
    """

    vocab_size: int = 30522  # WordPiece vocabulary (uncased English)
    hidden_size: int = 768  # d_model: width of every layer
    num_hidden_layers: int = 12  # n_layers
    num_attention_heads: int = 12  # n_heads; d_head = hidden_size / heads = 64
    intermediate_size: int = 3072  # d_ff: inner width of the feed-forward network (4 x d_model)
    hidden_act: str = "gelu"  # "gelu" is the exact erf GELU; "gelu_new" the tanh form
    hidden_dropout_prob: float = 0.1  # on embeddings and on each sub-layer's output
    attention_probs_dropout_prob: float = 0.1  # on the attention weights
    max_position_embeddings: int = 512  # rows of the learned position table: the length limit
    type_vocab_size: int = 2  # segment (token-type) embeddings: sentence A / sentence B
    layer_norm_eps: float = 1e-12  # epsilon of every LayerNorm
    pad_token_id: int = 0  # id of [PAD]; its embedding row gets no gradient
    initializer_range: float = 0.02  # std of the normal initialisation of weights
    tie_word_embeddings: bool = True  # MLM decoder shares the input embedding matrix
    num_labels: int = 2  # outputs of BertForSequenceClassification (1 = regression)
    classifier_dropout: float | None = None  # dropout before the classifier (None: hidden_dropout_prob)
    is_decoder: bool = False  # causal self-attention: each token sees itself and the tokens before it

    def __post_init__(self):
        if self.hidden_size % self.num_attention_heads != 0:
            raise ValueError(
                f"hidden_size={self.hidden_size} must be divisible by "
                f"num_attention_heads={self.num_attention_heads}"
            )
        sizes = (
            "vocab_size",
            "hidden_size",
            "num_hidden_layers",
            "intermediate_size",
            "max_position_embeddings",
            "type_vocab_size",
        )
        for name in sizes:
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if not 0 <= self.pad_token_id < self.vocab_size:
            raise ValueError(
                f"pad_token_id={self.pad_token_id} must lie in [0, vocab_size={self.vocab_size})"
            )
        get_activation(self.hidden_act)

    @property
    def embedding_width(self) -> int:
        """Width of the embedding tables and of the MLM head's output: ``hidden_size`` in BERT
        (ALBERT factorises it: ``embedding_size``)."""
        return self.hidden_size

    @property
    def classifier_dropout_rate(self) -> float:
        """Dropout before a classifier: ``classifier_dropout``, else ``hidden_dropout_prob``."""
        return self.hidden_dropout_prob if self.classifier_dropout is None else self.classifier_dropout


def check_inputs(
    config: BertConfig,
    input_ids: Tensor,
    attention_mask: Tensor | None = None,
    token_type_ids: Tensor | None = None,
    position_ids: Tensor | None = None,
) -> None:
    """Every check on BERT's inputs, in one place: shapes, and ids inside their tables.

    An out-of-range id would otherwise be an IndexError on CPU and a device-side assert on
    a GPU. The length limit of default positions is checked where they are numbered
    (:meth:`BertEmbeddings.default_position_ids`).
    """
    c = config
    check_token_batch(input_ids)
    check_same_shape(input_ids, token_type_ids=token_type_ids, attention_mask=attention_mask)
    limits = [("input_ids", input_ids, "vocab_size", c.vocab_size)]
    if token_type_ids is not None:
        limits.append(("token_type_ids", token_type_ids, "type_vocab_size", c.type_vocab_size))
    if position_ids is not None:
        limits.append(("position ids", position_ids, "max_position_embeddings", c.max_position_embeddings))
    check_id_ranges(*limits)


# ---------------------------------------------------------------------------------------
# Layers
# ---------------------------------------------------------------------------------------


class BertEmbeddings(nn.Module):
    r"""Token + learned position + segment embeddings, summed, then LayerNorm and dropout."""

    def __init__(self, config: BertConfig):
        super().__init__()
        c = config
        self.config = c
        width = c.embedding_width  # hidden_size (BERT) or embedding_size (ALBERT)
        self.word_embeddings = nn.Embedding(c.vocab_size, width, padding_idx=c.pad_token_id)
        self.position_embeddings = nn.Embedding(c.max_position_embeddings, width)
        self.token_type_embeddings = nn.Embedding(c.type_vocab_size, width)
        self.norm = nn.LayerNorm(width, eps=c.layer_norm_eps)
        self.dropout = nn.Dropout(c.hidden_dropout_prob)

    def max_length(self) -> int:
        """Longest input this table can place."""
        return self.config.max_position_embeddings

    def default_position_ids(self, input_ids: Tensor) -> Tensor:
        """BERT numbers positions ``0, 1, ..., n-1`` (padding included)."""
        check_length(input_ids.size(1), self.max_length(), "input")
        return torch.arange(input_ids.size(1), device=input_ids.device)[None, :]

    def forward(
        self, input_ids: Tensor, token_type_ids: Tensor | None = None, position_ids: Tensor | None = None
    ) -> Tensor:
        if position_ids is None:
            position_ids = self.default_position_ids(input_ids)
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        x = (
            self.word_embeddings(input_ids)
            + self.token_type_embeddings(token_type_ids)
            + self.position_embeddings(position_ids)
        )
        return self.dropout(self.norm(x))


class BertLayer(PostLNLayer):
    """One post-LN encoder layer: self-attention, then the feed-forward network."""

    def __init__(self, config: BertConfig):
        c = config
        super().__init__(
            MultiHeadAttention(c.hidden_size, c.num_attention_heads, dropout=c.attention_probs_dropout_prob),
            # BERT has no dropout between the two FFN matrices: only on the sub-layer output
            FeedForward(c.hidden_size, c.intermediate_size, dropout=0.0, activation=c.hidden_act),
            dropout=c.hidden_dropout_prob,
            eps=c.layer_norm_eps,
        )

    def forward(
        self, x: Tensor, mask: Tensor | None = None, *, return_weights: bool = False, causal: bool = False
    ) -> tuple[Tensor, Tensor | None]:
        a, weights = self.attention(x, mask=mask, return_weights=return_weights, causal=causal)
        return self.sublayers(x, a), weights


class BertEncoder(nn.Module):
    """A stack of :class:`BertLayer`, run in the order of :meth:`layer_sequence`.

    BERT runs each of its layers once; ALBERT's encoder (a subclass) projects the embeddings
    to the hidden width first (:meth:`project_in`) and runs shared layers repeatedly.
    """

    def __init__(self, config: BertConfig):
        super().__init__()
        self.layers = nn.ModuleList(BertLayer(config) for _ in range(config.num_hidden_layers))

    def layer_sequence(self) -> list[BertLayer]:
        """The layers in the order they run (each once, in BERT)."""
        return list(self.layers)

    def project_in(self, x: Tensor) -> Tensor:
        """The embeddings -> the first layer's input (nothing to do in BERT)."""
        return x

    def forward(
        self,
        x: Tensor,
        mask: Tensor | None = None,
        *,
        return_weights: bool = False,
        return_hidden: bool = False,
        causal: bool = False,
    ) -> tuple[Tensor, list[Tensor] | None, list[Tensor] | None]:
        """Returns ``(last, [inputs, after layer 1, ...] or None, [weights per layer] or None)``;
        ``causal``: no position attends to a later one."""
        x = self.project_in(x)
        hidden = [x] if return_hidden else None
        weights = [] if return_weights else None
        for layer in self.layer_sequence():
            x, w = layer(x, mask, return_weights=return_weights, causal=causal)
            if return_hidden:
                hidden.append(x)
            if return_weights:
                weights.append(w)
        return x, hidden, weights


class BertPooler(nn.Module):
    r""":math:`p = \tanh(W h_{[CLS]} + b)`: the [CLS] vector through a dense layer."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)

    def forward(self, hidden: Tensor) -> Tensor:
        return torch.tanh(self.dense(hidden[:, 0]))


class BertMLMHead(nn.Module):
    r"""Masked-LM head: :math:`\mathrm{LayerNorm}(\mathrm{act}(W_t h + b_t))\, (W^{tok})^\top + b`.

    ``decoder.weight`` is tied to the input embedding matrix by the model that owns both;
    ``bias`` is the head's own. ``activation`` is ``hidden_act`` for BERT and always the
    exact GELU for RoBERTa. ``W_t`` maps ``hidden_size`` to the embedding width (the same
    in BERT; ALBERT's ``embedding_size``), so the tied decoder fits the embedding table.
    """

    def __init__(self, config: BertConfig, *, activation: str | None = None):
        super().__init__()
        c = config
        width = c.embedding_width
        self.dense = nn.Linear(c.hidden_size, width)
        self.activation = get_activation(activation or c.hidden_act)
        self.norm = nn.LayerNorm(width, eps=c.layer_norm_eps)
        self.decoder = nn.Linear(width, c.vocab_size, bias=False)
        self.bias = nn.Parameter(torch.zeros(c.vocab_size))

    def forward(self, hidden: Tensor) -> Tensor:
        x = self.norm(self.activation(self.dense(hidden)))
        # the bias inside the product (one vocabulary-wide output, not a product and a sum)
        return F.linear(x, self.decoder.weight, self.bias)


# ---------------------------------------------------------------------------------------
# The model: embeddings, encoder, pooler; then the task models
# ---------------------------------------------------------------------------------------


class BertModel(CountsParameters, HFBody, nn.Module):
    """Embeddings, the encoder stack and (optionally) the pooler.

    ``forward(input_ids, attention_mask=None, token_type_ids=None, position_ids=None, *,
    output_attentions=False, output_hidden_states=False)`` takes Hugging Face's keyword
    arguments (``attention_mask``: 1 = real token, 0 = padding) and returns a
    :class:`BertModelOutput`.
    """

    config_class = BertConfig
    embeddings_class = BertEmbeddings
    encoder_class = BertEncoder

    def __init__(self, config: BertConfig, *, add_pooling_layer: bool = True):
        super().__init__()
        if not isinstance(config, BertConfig):
            raise TypeError(f"expected a BertConfig, got {type(config).__name__}")
        self.config = config
        self.embeddings = self.embeddings_class(config)
        self.encoder = self.encoder_class(config)
        self.pooler = BertPooler(config) if add_pooling_layer else None
        init_weights(self, config.initializer_range)

    @property
    def device(self) -> torch.device:
        return self.embeddings.word_embeddings.weight.device

    def attention_mask_to_mask(self, input_ids: Tensor, attention_mask: Tensor | None) -> Tensor | None:
        """HF's ``[batch, seq]`` 1/0 mask -> the course's boolean ``[batch, 1, 1, seq]``
        (None when all ones)."""
        if attention_mask is None:
            return None
        # nothing to hide: let SDPA run unmasked (a data-dependent branch: not under torch.compile,
        # where the mask is simply kept, so the graph does not break)
        if not torch.compiler.is_compiling() and bool(attention_mask.all()):
            return None
        return padding_mask(attention_mask)

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        token_type_ids: Tensor | None = None,
        position_ids: Tensor | None = None,
        *,
        output_attentions: bool = False,
        output_hidden_states: bool = False,
    ) -> BertModelOutput:
        check_inputs(self.config, input_ids, attention_mask, token_type_ids, position_ids)
        x = self.embeddings(input_ids, token_type_ids, position_ids)
        mask = self.attention_mask_to_mask(input_ids, attention_mask)
        h, hidden, weights = self.encoder(
            x,
            mask,
            return_weights=output_attentions,
            return_hidden=output_hidden_states,
            causal=self.config.is_decoder,
        )
        return BertModelOutput(
            last_hidden_state=h,
            pooler_output=self.pooler(h) if self.pooler is not None else None,
            hidden_states=tuple(hidden) if hidden is not None else None,
            attentions=tuple(weights) if weights is not None else None,
        )


def body_of(model: nn.Module) -> BertModel:
    """The encoder of ``model``: the model itself when it is a :class:`BertModel`, else the
    body of a BERT-family task model (``model.base``)."""
    if isinstance(model, BertModel):
        return model
    if isinstance(model, _BertWithHeads):
        return model.base
    raise TypeError(
        f"expected a BertModel or a BERT-family task model (a body with heads), got {type(model).__name__}"
    )


class _BertWithHeads(WithBody, HFWithHeads, nn.Module):
    """A BERT body with task heads: what every pretraining and fine-tuning model shares.

    A subclass names its body attribute (``base_attr``: ``bert`` / ``roberta``, also the
    Hugging Face prefix), the body's class and configuration class, whether the body keeps
    its pooler, and its heads (:meth:`build_heads`, initialised here in the order given) with
    their Hugging Face names (``hf_heads``, tables in :mod:`course_lib.models.hf`). ``forward``
    is shared: the body runs on Hugging Face's arguments, :meth:`features` may remake its
    output (identity by default; a model whose heads read every layer sets
    ``reads_hidden_states``, and the body then returns every hidden state whatever the caller
    asked), then the subclass's :meth:`forward_heads` turns it into the task's record and loss.
    """

    config: BertConfig
    config_class: type = BertConfig
    model_class: type = BertModel
    base_attr = "bert"
    add_pooling_layer = False
    optional_body_keys = ("pooler.",)  # load_body copies the pooler when both have one
    reads_hidden_states = False  # True: features() reads every hidden state, not only the last

    def __init__(self, config: BertConfig):
        super().__init__()
        self.config = config
        setattr(self, self.base_attr, self.model_class(config, add_pooling_layer=self.add_pooling_layer))
        heads = self.build_heads(config)
        for name, head in heads.items():
            setattr(self, name, head)
        for head in heads.values():
            init_weights(head, config.initializer_range)
        self.tie_weights()

    def build_heads(self, config: BertConfig) -> dict[str, nn.Module]:
        """The modules on top of the body (attribute name -> module)."""
        return {}

    def tie_weights(self) -> None:
        """Share weights between heads and body (none by default)."""

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        token_type_ids: Tensor | None = None,
        position_ids: Tensor | None = None,
        *,
        labels: Tensor | None = None,
        output_attentions: bool = False,
        output_hidden_states: bool = False,
        **head_options: Any,
    ) -> ModelOutput:
        """Run the body (:class:`BertModel`'s arguments), its :meth:`features`, then the heads
        (:meth:`forward_heads`), which receive ``labels`` and the model's own options
        (``next_sentence_label``, ``masked_only``). The output carries the body's hidden states
        only when ``output_hidden_states`` asks for them."""
        out = self.base(
            input_ids,
            attention_mask,
            token_type_ids,
            position_ids,
            output_attentions=output_attentions,
            output_hidden_states=output_hidden_states or self.reads_hidden_states,
        )
        out = self.features(out, attention_mask)
        if self.reads_hidden_states and not output_hidden_states:
            out = replace(out, hidden_states=None)
        return self.forward_heads(out, labels, **head_options)

    def features(self, out: BertModelOutput, attention_mask: Tensor | None) -> BertModelOutput:
        """What the heads read, from the body's output (``hidden_states`` holds every layer when
        ``reads_hidden_states``): the body's output itself by default."""
        return out

    def forward_heads(self, out: BertModelOutput, labels: Tensor | None) -> ModelOutput:
        """The task's output record (with its loss when ``labels`` are given) from the body's output."""
        raise NotImplementedError

    @staticmethod
    def _output(record: type, out: BertModelOutput, **fields: Any) -> ModelOutput:
        """``record(**fields)`` carrying the body's ``hidden_states`` and ``attentions``."""
        return record(**fields, hidden_states=out.hidden_states, attentions=out.attentions)


class WithMLMHead(_BertWithHeads):
    """The models with a masked-LM head (tied to the input embeddings when the config says so)."""

    head_activation: str | None = None  # None: the config's hidden_act
    pair_objective: str | None = None  # the sentence-pair head besides MLM: "nsp" (BERT), None (RoBERTa)
    hf_heads = HEADS_BERT_MLM

    def build_heads(self, config: BertConfig) -> dict[str, nn.Module]:
        return {"mlm_head": BertMLMHead(config, activation=self.head_activation)}

    def tie_weights(self) -> None:
        """Share the MLM decoder's matrix with the input embeddings (when the config says so)."""
        if self.config.tie_word_embeddings:
            self.mlm_head.decoder.weight = self.base.embeddings.word_embeddings.weight

    def _mlm(self, hidden: Tensor, labels: Tensor | None, masked_only: bool) -> tuple[Tensor, Tensor | None]:
        """The MLM head on the last hidden states: ``(logits, loss or None)``.

        ``masked_only=True`` (needs ``labels``) runs the head only where a label is set: the
        logits are then ``[n_masked, vocab_size]`` in row-major order of the masked positions,
        and the vocabulary projection, the biggest matrix product of a small BERT, shrinks
        about 1 / 0.15 times. The loss is the same either way.
        """
        if not masked_only:
            logits = self.mlm_head(hidden)
            return logits, (masked_lm_loss(logits, labels) if labels is not None else None)
        if labels is None:
            raise ValueError("masked_only=True needs labels (it keeps the positions whose label is not -100)")
        if labels.shape != hidden.shape[:-1]:
            raise ValueError(
                f"labels of shape {tuple(labels.shape)} do not match the input {tuple(hidden.shape)[:-1]}"
            )
        chosen = labels != IGNORE_INDEX
        logits = self.mlm_head(hidden[chosen])
        return logits, masked_lm_loss(logits, labels[chosen])

    @staticmethod
    def _pair_loss(pair_logits: Tensor, pair_label: Tensor | None) -> Tensor | None:
        """The sentence-pair head's cross-entropy (NSP, SOP); None without ``pair_label``."""
        return F.cross_entropy(pair_logits.float(), pair_label.view(-1)) if pair_label is not None else None

    @staticmethod
    def _pretraining_loss(*parts: Tensor | None) -> Tensor | None:
        """The sum of the loss parts whose labels are given (None when none is)."""
        given = [x for x in parts if x is not None]
        return sum(given) if given else None


class BertForPreTraining(WithMLMHead):
    """BERT with both pre-training heads: masked-LM and next-sentence prediction.

    ``forward(..., labels=None, next_sentence_label=None)``: ``labels`` are the original ids
    at masked positions and ``-100`` elsewhere; ``next_sentence_label`` is 0 when sentence B
    follows A and 1 when it is random. ``loss`` sums the parts whose labels are given
    (Hugging Face requires both).
    """

    add_pooling_layer = True
    hf_heads = HEADS_BERT_PRETRAINING
    pair_objective = "nsp"

    def build_heads(self, config: BertConfig) -> dict[str, nn.Module]:
        return {**super().build_heads(config), "nsp_head": nn.Linear(config.hidden_size, 2)}

    def forward_heads(
        self,
        out: BertModelOutput,
        labels: Tensor | None,
        *,
        next_sentence_label: Tensor | None = None,
        masked_only: bool = False,
    ) -> BertForPreTrainingOutput:
        """``masked_only=True``: MLM logits only at labelled positions (see :meth:`WithMLMHead._mlm`)."""
        logits, mlm = self._mlm(out.last_hidden_state, labels, masked_only)
        nsp_logits = self.nsp_head(out.pooler_output)
        nsp = self._pair_loss(nsp_logits, next_sentence_label)
        return self._output(
            BertForPreTrainingOutput,
            out,
            loss=self._pretraining_loss(mlm, nsp),
            prediction_logits=logits,
            seq_relationship_logits=nsp_logits,
            mlm_loss=mlm,
            nsp_loss=nsp,
        )


class BertForMaskedLM(WithMLMHead):
    """BERT (no pooler) with the masked-LM head; ``logits`` are ``[batch, seq_len, vocab_size]``."""

    def forward_heads(
        self, out: BertModelOutput, labels: Tensor | None, *, masked_only: bool = False
    ) -> MaskedLMOutput:
        """``masked_only=True``: logits only at labelled positions (see :meth:`WithMLMHead._mlm`)."""
        logits, loss = self._mlm(out.last_hidden_state, labels, masked_only)
        return self._output(MaskedLMOutput, out, loss=loss, logits=logits)


@dataclass
class CausalLMOutput(ModelOutput):
    loss: Tensor | None = None
    logits: Tensor | None = None  # [batch, seq_len, vocab_size]: position t scores token t + 1
    hidden_states: tuple[Tensor, ...] | None = None
    attentions: tuple[Tensor, ...] | None = None


class BertLMHeadModel(WithMLMHead):
    r"""BERT as a left-to-right language model: the same network with causal self-attention
    (``config.is_decoder=True``), the same (tied) LM head, trained on the next token.

    It is the controlled baseline for the masked LM: identical parameters and size, only the
    attention mask and the objective differ,
    :math:`\log p(x) = \sum_t \log p(x_t \mid x_{<t})`. ``labels`` are the input ids
    (``-100`` where no loss is taken); the loss shifts them by one position, as Hugging
    Face's ``BertLMHeadModel`` does.
    """

    def __init__(self, config: BertConfig):
        if not config.is_decoder:
            raise ValueError("BertLMHeadModel needs a config with is_decoder=True (causal self-attention)")
        super().__init__(config)

    def forward_heads(self, out: BertModelOutput, labels: Tensor | None) -> CausalLMOutput:
        logits = self.mlm_head(out.last_hidden_state)
        loss = None
        if labels is not None:
            if labels.shape != logits.shape[:-1]:
                raise ValueError(
                    f"labels of shape {tuple(labels.shape)} do not match the input {tuple(logits.shape)[:-1]}"
                )
            loss = next_token_loss(logits, labels)
        return self._output(CausalLMOutput, out, loss=loss, logits=logits)


class _BertClassifier(_BertWithHeads):
    """Dropout (``config.classifier_dropout_rate``) and a linear layer to ``num_labels``, named
    as in Hugging Face (``classifier``)."""

    hf_heads = HEADS_CLASSIFIER

    def build_heads(self, config: BertConfig) -> dict[str, nn.Module]:
        return {
            "dropout": nn.Dropout(config.classifier_dropout_rate),
            "classifier": nn.Linear(config.hidden_size, config.num_labels),
        }

    @classmethod
    def from_pretrained_body(
        cls, body: BertModel, *, num_labels: int = 2, classifier_dropout: float | None = None
    ):
        """A classifier whose encoder starts from ``body``'s weights (the fine-tuning recipe)."""
        model = cls(replace(body.config, num_labels=num_labels, classifier_dropout=classifier_dropout))
        model.load_body(body)
        return model.to(body.device)


class BertForSequenceClassification(_BertClassifier):
    """BERT + dropout + a linear classifier on the pooled [CLS] vector (fine-tuning).

    ``labels``: class ids ``[batch]`` (cross-entropy), or floats when ``num_labels == 1``
    (mean squared error).
    """

    add_pooling_layer = True

    def sequence_logits(self, out: BertModelOutput) -> Tensor:
        """``[batch, num_labels]``: the classifier on the pooled [CLS] vector."""
        return self.classifier(self.dropout(out.pooler_output))

    def forward_heads(self, out: BertModelOutput, labels: Tensor | None) -> SequenceClassifierOutput:
        logits = self.sequence_logits(out)
        loss = _classification_loss(logits, labels, self.config.num_labels) if labels is not None else None
        return self._output(SequenceClassifierOutput, out, loss=loss, logits=logits)


class BertForTokenClassification(_BertClassifier):
    """BERT (no pooler) + dropout + a linear classifier on every token's last vector: the
    fine-tuning recipe for tagging (the paper's NER set-up, figure 4d).

    ``labels``: ``[batch, seq_len]`` class ids, ``-100`` where no loss is taken (padding,
    special tokens, and, in the paper's recipe, every word piece but a word's first).
    """

    def forward_heads(self, out: BertModelOutput, labels: Tensor | None) -> TokenClassifierOutput:
        logits = self.classifier(self.dropout(out.last_hidden_state))
        loss = token_classification_loss(logits, labels) if labels is not None else None
        return self._output(TokenClassifierOutput, out, loss=loss, logits=logits)


# ---------------------------------------------------------------------------------------
# Losses (the task models' forward passes compute them when given labels)
# ---------------------------------------------------------------------------------------


def masked_lm_loss(logits: Tensor, labels: Tensor) -> Tensor:
    """Mean cross-entropy over positions whose label is not ``-100``.

    The same as ``F.cross_entropy(..., ignore_index=-100)``, except that a batch with no
    masked position gives 0 (not NaN).
    """
    if labels.shape != logits.shape[:-1]:
        raise ValueError(
            f"labels of shape {tuple(labels.shape)} do not match logits {tuple(logits.shape)[:-1]}"
        )
    labels = labels.reshape(-1)
    total = F.cross_entropy(
        logits.reshape(-1, logits.size(-1)).float(), labels, ignore_index=IGNORE_INDEX, reduction="sum"
    )
    return total / (labels != IGNORE_INDEX).sum().clamp(min=1)


def next_token_loss(logits: Tensor, labels: Tensor) -> Tensor:
    """Mean cross-entropy of ``logits[:, t]`` against ``labels[:, t + 1]`` over the labels that
    are not ``-100`` (labels are the input ids; the shift happens here). 0 when none counts.

    Computed in at least float32 (half-precision logits are upcast, float64 ones kept).
    """
    if labels.shape != logits.shape[:-1]:
        raise ValueError(
            f"labels of shape {tuple(labels.shape)} must have the input's shape {tuple(logits.shape)[:-1]} "
            "(they are the input ids, shifted inside the model)"
        )
    logits, labels = logits[:, :-1], labels[:, 1:].reshape(-1)
    logits = logits.reshape(-1, logits.size(-1))
    total = F.cross_entropy(
        logits.to(torch.promote_types(logits.dtype, torch.float32)),
        labels,
        ignore_index=IGNORE_INDEX,
        reduction="sum",
    )
    return total / (labels != IGNORE_INDEX).sum().clamp(min=1)


def token_classification_loss(logits: Tensor, labels: Tensor) -> Tensor:
    """A tagger's loss: mean cross-entropy of ``logits`` ``[batch, seq_len, num_labels]``
    against ``labels`` ``[batch, seq_len]`` over the positions whose label is not ``-100``
    (Hugging Face's ``*ForTokenClassification``; BERT's and XLNet's taggers)."""
    if labels.shape != logits.shape[:2]:
        raise ValueError(
            f"labels must be [batch, seq_len] = {tuple(logits.shape[:2])}, got {tuple(labels.shape)}"
        )
    return F.cross_entropy(
        logits.float().reshape(-1, logits.size(-1)), labels.reshape(-1), ignore_index=IGNORE_INDEX
    )


def _classification_loss(logits: Tensor, labels: Tensor, num_labels: int) -> Tensor:
    if num_labels == 1:  # regression (e.g. STS-B)
        return F.mse_loss(logits.squeeze(-1).float(), labels.float())
    return F.cross_entropy(logits.float(), labels.view(-1))


def init_from_teacher(student: BertModel, teacher: BertModel, layers: Sequence[int]) -> None:
    """DistilBERT's student initialisation: copy the teacher's embeddings (and pooler, when
    both have one) and, into student layer ``m`` (0-based), teacher layer ``layers[m]``
    (0-based; DistilBERT takes every other layer, ``[0, 2, 4, ...]``). The two bodies must
    have the same widths; ``ValueError`` names what does not fit."""
    if type(student.encoder) is not BertEncoder or type(teacher.encoder) is not BertEncoder:
        raise ValueError("init_from_teacher copies BERT layers (not ALBERT's shared ones)")
    layers = [int(i) for i in layers]
    if len(layers) != len(student.encoder.layers):
        raise ValueError(
            f"give one teacher layer per student layer: {len(student.encoder.layers)}, got {len(layers)}"
        )
    n = len(teacher.encoder.layers)
    if any(not 0 <= i < n for i in layers):
        raise ValueError(f"teacher layers must lie in [0, {n}), got {layers}")
    if student.config.hidden_size != teacher.config.hidden_size:
        raise ValueError(
            f"the student's width {student.config.hidden_size} differs from the teacher's "
            f"{teacher.config.hidden_size}: layers can only be copied between equal widths"
        )
    try:
        student.embeddings.load_state_dict(teacher.embeddings.state_dict())
        for m, i in enumerate(layers):
            student.encoder.layers[m].load_state_dict(teacher.encoder.layers[i].state_dict())
        if student.pooler is not None and teacher.pooler is not None:
            student.pooler.load_state_dict(teacher.pooler.state_dict())
    except RuntimeError as exc:
        raise ValueError(f"the teacher's layers do not fit the student: {exc}") from None
