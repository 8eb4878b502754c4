r"""The ``loss_fn``\ s that :func:`course_lib.train.fit` receives, one per pre-training objective.

* :func:`pretraining_loss`: BERT's masked-LM loss, plus the sentence-pair loss (BERT's NSP,
  ALBERT's sentence order) when the model has that head and the batch its labels. The
  masked-LM formula itself, :func:`~course_lib.models.bert.masked_lm_loss`, belongs to the
  model (its ``forward`` computes it when given ``labels``); this function feeds a batch in
  and reports metrics.
* :func:`causal_lm_loss`: a left-to-right language model's next-token loss
  (``BertLMHeadModel``: BERT with causal attention, the masked LM's controlled baseline).
* :func:`elmo_lm_loss`: ELMo's forward + backward language-model loss.

A new sentence-pair objective is one more entry of :data:`PAIR_LABELS` and
:data:`PAIR_LOGITS`; a new objective of another kind (distillation, XLNet's permutation LM)
is one more function here with the same signature: ``loss_fn(model, batch) -> (loss, metrics)``.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import Tensor, nn

from ..models.bert import IGNORE_INDEX
from ..models.elmo import ElmoLanguageModel
from .pairs import trim_padding

__all__ = [
    "PAIR_LABELS",
    "PAIR_LOGITS",
    "pair_fields",
    "data_pair_task",
    "pretraining_loss",
    "causal_lm_loss",
    "elmo_lm_loss",
]

# Each sentence-pair objective (a model's ``pair_objective``): the batch field holding its
# labels (also the keyword of the model's ``forward``) and the output field holding its
# [batch, 2] logits. The output's loss part is ``<objective>_loss`` (``nsp_loss``, ``sop_loss``).
PAIR_LABELS = {"nsp": "next_sentence_label", "sop": "sentence_order_label"}
PAIR_LOGITS = {"nsp": "seq_relationship_logits", "sop": "sop_logits"}


def pair_fields(objective: str) -> tuple[str, str]:
    """``(label field, logits field)`` of a sentence-pair objective (``"nsp"``, ``"sop"``);
    ``ValueError`` naming the known objectives otherwise."""
    if objective not in PAIR_LABELS:
        raise ValueError(f"unknown sentence-pair objective {objective!r}; known: {sorted(PAIR_LABELS)}")
    return PAIR_LABELS[objective], PAIR_LOGITS[objective]


def data_pair_task(batch: Mapping[str, Tensor]) -> str | None:
    """The sentence-pair task whose labels ``batch`` holds (``"nsp"``, ``"sop"``) or None.

    A model's pair head (its ``pair_objective``) is one linear map of the pooled [CLS] vector
    to two classes, whatever the task: it is trained and scored on the task of the data it is
    given (BERT's head on SOP pairs, ALBERT's on NSP pairs: the ALBERT paper's Table 5), its
    labels passed under the head's own keyword, its metrics named after the data's task.
    """
    found = [task for task, field in PAIR_LABELS.items() if field in batch]
    if len(found) > 1:
        raise ValueError(f"a batch holds the labels of one sentence-pair task, got {found}")
    return found[0] if found else None


def pretraining_loss(
    model: nn.Module, batch: Mapping[str, Tensor], *, masked_only: bool = True
) -> tuple[Tensor, dict[str, float]]:
    """``loss_fn`` for :func:`course_lib.train.fit`: MLM (+ the model's sentence-pair loss when
    the batch has its labels).

    The model's ``pair_objective`` names its pair head: ``"nsp"`` (``BertForPreTraining``,
    keyword ``next_sentence_label``), ``"sop"`` (ALBERT, ``sentence_order_label``) or ``None``
    (``BertForMaskedLM``, ``RobertaForMaskedLM``: MLM only, pair labels are ignored). A head
    is trained on whichever pair task's labels the batch holds (:func:`data_pair_task`).
    Columns that are padding in every row are dropped first
    (:func:`~course_lib.objectives.pairs.trim_padding`). Returns ``(loss, metrics)``:
    ``mlm_accuracy`` (on masked tokens) and, with pair labels, ``mlm_loss``,
    ``<task>_loss`` and ``<task>_accuracy`` named after the data's task (``nsp_loss``,
    ``sop_accuracy``, ...). ``masked_only`` runs the vocabulary projection on masked
    positions only (same loss, less work).
    """
    batch = trim_padding(batch)
    kwargs = {k: batch[k] for k in ("attention_mask", "token_type_ids") if k in batch}
    labels = batch["labels"]
    head = model.pair_objective
    task = data_pair_task(batch) if head is not None else None
    pair_label = None
    if task is not None:
        label_field, logits_field = pair_fields(head)
        pair_label = batch[PAIR_LABELS[task]]
        kwargs[label_field] = pair_label
    out = model(batch["input_ids"], labels=labels, masked_only=masked_only, **kwargs)
    metrics: dict[str, float] = {}
    with torch.no_grad():
        logits = out.mlm_logits
        chosen = labels != IGNORE_INDEX
        if bool(chosen.any()):
            predicted = logits.argmax(-1) if masked_only else logits[chosen].argmax(-1)
            metrics["mlm_accuracy"] = (predicted == labels[chosen]).float().mean().item()
        if pair_label is not None:
            metrics["mlm_loss"] = out.mlm_loss.item()
            metrics[f"{task}_loss"] = getattr(out, f"{head}_loss").item()
            predicted = getattr(out, logits_field).argmax(-1)
            metrics[f"{task}_accuracy"] = (predicted == pair_label.view(-1)).float().mean().item()
    return out.loss, metrics


def causal_lm_loss(model: nn.Module, batch: Mapping[str, Tensor]) -> tuple[Tensor, dict[str, float]]:
    r"""``loss_fn`` for :func:`course_lib.train.fit`: :math:`-\frac1N\sum_t \log p(x_{t+1} \mid x_{\le t})`.

    ``batch`` holds unmasked ``input_ids`` and ``labels`` (the same ids, ``-100`` at
    padding), as :class:`~course_lib.objectives.masking.MaskedLMData` gives them with
    ``masking="none"``; the model shifts the labels by one. Metrics: next-token accuracy.
    """
    batch = trim_padding(batch)
    kwargs = {k: batch[k] for k in ("attention_mask", "token_type_ids") if k in batch}
    labels = batch["labels"]
    out = model(batch["input_ids"], labels=labels, **kwargs)
    with torch.no_grad():
        target = labels[:, 1:]
        chosen = target != IGNORE_INDEX
        predicted = out.logits[:, :-1].argmax(-1)
        acc = ((predicted == target) & chosen).sum() / chosen.sum().clamp(min=1)
    return out.loss, {"lm_accuracy": acc.item()}


def elmo_lm_loss(model: ElmoLanguageModel, batch: Mapping[str, Tensor]) -> tuple[Tensor, dict[str, float]]:
    """``loss_fn`` for :func:`course_lib.train.fit`: ELMo's forward + backward LM loss.

    ``batch`` = ``{"char_ids", "word_ids", "mask" (optional)}``.
    """
    out = model.lm_loss(batch["char_ids"], batch["word_ids"], batch.get("mask"))
    return out.loss, {"forward_loss": out.forward.item(), "backward_loss": out.backward.item()}
