r"""ALBERT: "A Lite BERT for Self-supervised Learning of Language Representations"
(Lan et al., 2020).

ALBERT is BERT (:mod:`course_lib.models.bert`, reused layer for layer) with three changes,
and nothing else:

**1. Factorised embeddings.** The token table is :math:`V \times E` with a small
:math:`E` (128), and one projection :math:`E \to H` brings every embedding to the hidden
width:

.. math::

    E_i = \mathrm{LayerNorm}_E\big(W^{tok}_{x_i} + W^{pos}_i + W^{seg}_{s_i}\big), \qquad
    H^{(0)}_i = E_i\, W_{E \to H} + b,

so the embeddings cost :math:`V E + E H` instead of :math:`V H` (for V = 30,000,
H = 4,096: 4.4M instead of 123M). The masked-LM head maps back the other way
(:math:`H \to E`, then the tied :math:`E \times V` decoder).

**2. Cross-layer parameter sharing.** The L layers reuse parameters. ``sharing`` says
which:

* ``"all"`` (ALBERT's default): every layer is the *same* layer, run L times,
  :math:`H^{(l)} = f_\theta(H^{(l-1)})`. Hugging Face generalises it to groups:
  ``num_hidden_groups`` G groups of ``inner_group_num`` distinct layers; layer i runs group
  :math:`\lfloor i / (L / G) \rfloor` (all of its inner layers). G = L is no sharing at all.
* ``"attention"``: one attention sub-layer (with its LayerNorm) for all layers, each layer
  its own feed-forward network;
* ``"ffn"``: one feed-forward network (with its LayerNorm), each layer its own attention;
* ``"none"``: every layer its own (BERT with factorised embeddings).

These are the four rows of the paper's sharing ablation (Table 4). Sharing divides the
*parameters*; it does not divide the *computation*: a forward pass still runs L layers.

**3. Sentence-order prediction (SOP)** replaces NSP: A and B are two consecutive segments
of one document, in order (label 0) or swapped (label 1). Both classes share a topic, so
the head must learn coherence, not topic (:mod:`course_lib.objectives.pairs`).
:math:`\mathcal{L} = \mathcal{L}_{MLM} + \mathcal{L}_{SOP}`, the SOP head a linear map
of the pooled [CLS] vector (after dropout ``classifier_dropout_prob``).

ALBERT v2 also drops dropout (``hidden_dropout_prob = attention_probs_dropout_prob = 0``)
and uses the tanh GELU (``gelu_new``); this config's defaults are ALBERT-base v2's
(Hugging Face's ``AlbertConfig()`` defaults to xxlarge).

Paper vs ours: Hugging Face's ALBERT applies no dropout to the feed-forward output; the
original TensorFlow code and this module (the BERT layer) do. With v2's dropout of 0 the two
are the same model; in eval mode always. ``sharing="attention"/"ffn"`` exist only here
(Hugging Face cannot express them), so their models have no ``from_hf``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from torch import Tensor, nn

from .bert import (
    BertConfig,
    BertEncoder,
    BertForMaskedLM,
    BertForSequenceClassification,
    BertLayer,
    BertModel,
    BertModelOutput,
    WithMLMHead,
)
from .hf import HEADS_ALBERT_MLM, HEADS_ALBERT_PRETRAINING, AlbertForPreTrainingOutput, albert_body_names

__all__ = [
    "SHARING_MODES",
    "AlbertConfig",
    "AlbertEncoder",
    "AlbertModel",
    "AlbertForPreTraining",
    "AlbertForMaskedLM",
    "AlbertForSequenceClassification",
    "AlbertForPreTrainingOutput",
]

SHARING_MODES = ("all", "attention", "ffn", "none")


@dataclass
class AlbertConfig(BertConfig):
    """ALBERT's sizes and options; defaults are ALBERT-base v2. Field names are Hugging Face's
    (``AlbertConfig``), plus ``sharing`` (see the module docstring)."""

    vocab_size: int = 30000  # SentencePiece vocabulary
    embedding_size: int = 128  # E: width of the embedding tables (factorised)
    hidden_act: str = "gelu_new"  # v2: the tanh GELU
    hidden_dropout_prob: float = 0.0  # v2: no dropout
    attention_probs_dropout_prob: float = 0.0
    num_hidden_groups: int = 1  # G groups of distinct layers (sharing="all")
    inner_group_num: int = 1  # distinct layers inside a group, all run each time the group runs
    classifier_dropout_prob: float = 0.1  # dropout before the SOP head and the classifier
    sharing: str = "all"  # "all" (groups), "attention", "ffn" or "none"
    _family: ClassVar[str] = "albert"

    def __post_init__(self):
        super().__post_init__()
        if self.embedding_size <= 0:
            raise ValueError(f"embedding_size must be positive, got {self.embedding_size}")
        if self.sharing not in SHARING_MODES:
            raise ValueError(f"sharing must be one of {SHARING_MODES}, got {self.sharing!r}")
        if not 1 <= self.num_hidden_groups <= self.num_hidden_layers:
            raise ValueError(
                f"num_hidden_groups={self.num_hidden_groups} must lie in [1, num_hidden_layers="
                f"{self.num_hidden_layers}]"
            )
        if self.inner_group_num < 1:
            raise ValueError(f"inner_group_num must be at least 1, got {self.inner_group_num}")
        if self.sharing != "all" and (self.num_hidden_groups, self.inner_group_num) != (1, 1):
            raise ValueError(
                f"sharing={self.sharing!r} shares one sub-layer across all layers; groups are the "
                "'all' mode's (set num_hidden_groups=1 and inner_group_num=1)"
            )
        if self.is_decoder:
            raise ValueError("ALBERT is an encoder: is_decoder is not supported")

    @property
    def embedding_width(self) -> int:
        return self.embedding_size

    @property
    def classifier_dropout_rate(self) -> float:
        """ALBERT's classifiers use ``classifier_dropout_prob`` (``classifier_dropout`` overrides it)."""
        return self.classifier_dropout_prob if self.classifier_dropout is None else self.classifier_dropout


class AlbertEncoder(BertEncoder):
    """The projection :math:`E \\to H`, then L layer applications over shared layers.

    ``layers`` holds the *distinct* layers; :attr:`schedule` lists which one runs at each
    step (``num_hidden_layers * inner_group_num`` steps). In the ``"attention"`` and
    ``"ffn"`` modes every layer is its own :class:`~course_lib.models.bert.BertLayer` whose
    attention (or feed-forward) sub-layer *is* layer 0's module: one tensor, counted once.
    """

    def __init__(self, config: AlbertConfig):
        nn.Module.__init__(self)
        c = config
        self.embedding_hidden_mapping_in = nn.Linear(c.embedding_size, c.hidden_size)
        L, inner = c.num_hidden_layers, c.inner_group_num
        if c.sharing == "all":
            self.layers = nn.ModuleList(BertLayer(c) for _ in range(c.num_hidden_groups * inner))
            per_group = L / c.num_hidden_groups  # Hugging Face's group of layer i: int(i / (L / G))
            self.schedule = tuple(int(i / per_group) * inner + j for i in range(L) for j in range(inner))
        else:
            self.layers = nn.ModuleList(BertLayer(c) for _ in range(L))
            self.schedule = tuple(range(L))
            shared = {"attention": ("attention", "attention_norm"), "ffn": ("ffn", "ffn_norm")}
            for name in shared.get(c.sharing, ()):
                for layer in self.layers[1:]:
                    setattr(layer, name, getattr(self.layers[0], name))

    def layer_sequence(self) -> list[BertLayer]:
        return [self.layers[k] for k in self.schedule]

    def project_in(self, x: Tensor) -> Tensor:
        return self.embedding_hidden_mapping_in(x)


class AlbertModel(BertModel):
    """ALBERT's encoder: factorised embeddings, the projection, shared layers, the pooler.

    Same interface as :class:`~course_lib.models.bert.BertModel` (Hugging Face's arguments,
    a :class:`~course_lib.models.hf.BertModelOutput`); ``from_hf`` copies a
    ``transformers.AlbertModel``.
    """

    config_class = AlbertConfig
    encoder_class = AlbertEncoder

    def __init__(self, config: AlbertConfig, *, add_pooling_layer: bool = True):
        if not isinstance(config, AlbertConfig):
            raise TypeError(f"expected an AlbertConfig, got {type(config).__name__}")
        super().__init__(config, add_pooling_layer=add_pooling_layer)

    @staticmethod
    def body_names(config: AlbertConfig, ours: str, theirs: str, *, pooler: bool) -> dict[str, str]:
        return albert_body_names(config, ours, theirs, pooler=pooler)


class _AlbertHeads:
    """What every ALBERT task model says about its body (mixed in before the BERT base)."""

    config_class = AlbertConfig
    model_class = AlbertModel
    base_attr = "albert"


class AlbertForPreTraining(_AlbertHeads, WithMLMHead):
    """ALBERT with both pre-training heads: masked LM (through E) and sentence order.

    ``forward(..., labels=None, sentence_order_label=None, masked_only=False)``:
    ``sentence_order_label`` is 0 when A and B are in their original order and 1 when
    swapped. ``loss`` sums the parts whose labels are given.
    """

    add_pooling_layer = True
    hf_heads = HEADS_ALBERT_PRETRAINING
    pair_objective = "sop"

    def build_heads(self, config: AlbertConfig) -> dict[str, nn.Module]:
        return {
            **super().build_heads(config),
            "sop_dropout": nn.Dropout(config.classifier_dropout_rate),
            "sop_head": nn.Linear(config.hidden_size, 2),
        }

    def forward_heads(
        self,
        out: BertModelOutput,
        labels: Tensor | None,
        *,
        sentence_order_label: Tensor | None = None,
        masked_only: bool = False,
    ) -> AlbertForPreTrainingOutput:
        logits, mlm = self._mlm(out.last_hidden_state, labels, masked_only)
        sop_logits = self.sop_head(self.sop_dropout(out.pooler_output))
        sop = self._pair_loss(sop_logits, sentence_order_label)
        return self._output(
            AlbertForPreTrainingOutput,
            out,
            loss=self._pretraining_loss(mlm, sop),
            prediction_logits=logits,
            sop_logits=sop_logits,
            mlm_loss=mlm,
            sop_loss=sop,
        )


class AlbertForMaskedLM(_AlbertHeads, BertForMaskedLM):
    """ALBERT (no pooler) with the masked-LM head; ``logits`` are ``[batch, seq_len, vocab_size]``."""

    hf_heads = HEADS_ALBERT_MLM


class AlbertForSequenceClassification(_AlbertHeads, BertForSequenceClassification):
    """ALBERT + dropout (``classifier_dropout_prob``) + a linear classifier on the pooled
    [CLS] vector; ``labels`` as in :class:`~course_lib.models.bert.BertForSequenceClassification`."""
