r"""RoBERTa: "A Robustly Optimized BERT Pretraining Approach" (Liu et al., 2019).

The network is BERT's (this module reuses :mod:`course_lib.models.bert` layer for layer);
what changed is the recipe:

* **no next-sentence prediction**: inputs are full sentences packed up to 512 tokens, and
  the loss is the masked-LM loss alone;
* **dynamic masking**: a new mask every time a sequence is seen (BERT masked once, while
  preprocessing; see :mod:`course_lib.objectives.masking`);
* **byte-level BPE** (GPT-2's, 50,265 tokens): any string is encodable, no ``[UNK]``;
* bigger batches (8k sequences), more data (160 GB), longer training.

Two details of the released checkpoints matter for loading them:

**Position ids skip the padding index.** With ``padding_idx = 1`` (the id of ``<pad>``),

.. math::

    \mathrm{pos}_i = \Big(\sum_{j \le i} [x_j \ne \mathrm{pad}]\Big)\, [x_i \ne \mathrm{pad}]
    + \mathrm{padding\_idx},

so real tokens are numbered from 2 and padding sits at position 1. The table therefore has
514 rows for 512 tokens. (The numbering comes from fairseq, and it also makes positions
independent of *left* padding.)

**One token type.** ``type_vocab_size = 1``: a single segment vector is still added to every
token, a learned constant offset.

The MLM head is BERT's (dense, GELU, LayerNorm, tied decoder plus bias) but always uses the
exact GELU; the classification head reads the ``<s>`` vector through
``dropout -> dense -> tanh -> dropout -> linear`` (RoBERTa has no pooler).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor, nn

from .bert import BertConfig, BertEmbeddings, BertForMaskedLM, BertForSequenceClassification, BertModel
from .hf import HEADS_ROBERTA_CLASSIFIER, HEADS_ROBERTA_MLM, BertModelOutput

__all__ = [
    "RobertaConfig",
    "RobertaEmbeddings",
    "RobertaModel",
    "RobertaForMaskedLM",
    "RobertaForSequenceClassification",
    "roberta_position_ids",
]


@dataclass
class RobertaConfig(BertConfig):
    """RoBERTa-base's sizes (the ``roberta-base`` checkpoint); field names as in :class:`BertConfig`."""

    vocab_size: int = 50265  # byte-level BPE
    max_position_embeddings: int = 514  # 512 tokens + the padding_idx + 1 = 2 reserved rows
    type_vocab_size: int = 1  # a single segment vector
    layer_norm_eps: float = 1e-5
    pad_token_id: int = 1  # <pad>; also RoBERTa's padding_idx for positions
    bos_token_id: int = 0  # <s>, plays [CLS]'s role
    eos_token_id: int = 2  # </s>, plays [SEP]'s role
    _roberta_positions: ClassVar[bool] = True
    _family: ClassVar[str] = "roberta"

    def __post_init__(self):
        super().__post_init__()
        if self.max_position_embeddings <= self.pad_token_id + 1:
            raise ValueError(
                f"max_position_embeddings={self.max_position_embeddings} leaves no room: RoBERTa reserves "
                f"padding_idx + 1 = {self.pad_token_id + 1} positions"
            )

    @property
    def max_len(self) -> int:
        """Longest input: ``max_position_embeddings - padding_idx - 1`` (512 for 514 rows)."""
        return self.max_position_embeddings - self.pad_token_id - 1


def roberta_position_ids(input_ids: Tensor, padding_idx: int) -> Tensor:
    """``cumsum(ids != pad) * (ids != pad) + padding_idx``: real tokens from ``padding_idx + 1``,
    padding at ``padding_idx``."""
    real = (input_ids != padding_idx).long()
    return torch.cumsum(real, dim=1) * real + padding_idx


class RobertaEmbeddings(BertEmbeddings):
    """BERT's embeddings with RoBERTa's position numbering (padding keeps ``padding_idx``)."""

    def __init__(self, config: RobertaConfig):
        super().__init__(config)
        c = config
        self.position_embeddings = nn.Embedding(
            c.max_position_embeddings, c.hidden_size, padding_idx=c.pad_token_id
        )

    def max_length(self) -> int:
        return self.config.max_position_embeddings - self.config.pad_token_id - 1

    def default_position_ids(self, input_ids: Tensor) -> Tensor:
        n, limit, c = input_ids.size(1), self.max_length(), self.config
        if n > limit:
            raise ValueError(
                f"input length {n} exceeds RoBERTa's limit of {limit} tokens: max_position_embeddings="
                f"{c.max_position_embeddings} minus the padding_idx + 1 = {c.pad_token_id + 1} reserved "
                "positions; "
                "truncate the input"
            )
        return roberta_position_ids(input_ids, c.pad_token_id)


class RobertaModel(BertModel):
    """BERT's encoder with RoBERTa's embeddings; same ``forward`` and outputs as :class:`BertModel`."""

    config_class = RobertaConfig
    embeddings_class = RobertaEmbeddings

    def __init__(self, config: RobertaConfig, *, add_pooling_layer: bool = True):
        if not isinstance(config, RobertaConfig):
            raise TypeError(f"expected a RobertaConfig, got {type(config).__name__}")
        super().__init__(config, add_pooling_layer=add_pooling_layer)


class RobertaForMaskedLM(BertForMaskedLM):
    """RoBERTa (no pooler) with the masked-LM head; the only pre-training objective.

    The same network as :class:`~course_lib.models.bert.BertForMaskedLM`; the body is
    ``roberta`` (RoBERTa's embeddings), the head's activation is always the exact GELU and
    Hugging Face calls the head ``lm_head``.
    """

    config_class = RobertaConfig
    model_class = RobertaModel
    base_attr = "roberta"
    head_activation = "gelu"
    hf_heads = HEADS_ROBERTA_MLM


class RobertaForSequenceClassification(BertForSequenceClassification):
    """RoBERTa + a two-layer head on the ``<s>`` vector: dropout, dense, tanh, dropout, linear.

    BERT's classifier (same ``forward``, loss and output) with RoBERTa's body, no pooler,
    and the pooling done inside the head (:meth:`sequence_logits`).
    """

    config_class = RobertaConfig
    model_class = RobertaModel
    base_attr = "roberta"
    add_pooling_layer = False
    hf_heads = HEADS_ROBERTA_CLASSIFIER

    def build_heads(self, config: RobertaConfig) -> dict[str, nn.Module]:
        p = config.hidden_dropout_prob if config.classifier_dropout is None else config.classifier_dropout
        return {
            "dropout": nn.Dropout(p),
            "dense": nn.Linear(config.hidden_size, config.hidden_size),
            "out_proj": nn.Linear(config.hidden_size, config.num_labels),
        }

    def sequence_logits(self, out: BertModelOutput) -> Tensor:
        x = self.dropout(out.last_hidden_state[:, 0])
        x = self.dropout(torch.tanh(self.dense(x)))
        return self.out_proj(x)
