"""The pretraining data and metrics of the BERT family: documents -> packed rows for a pair task
(NSP, SOP) or without one (:func:`pretraining_examples`), BERT's 80/10/10 masker for a tokenizer
(:func:`make_masker`), batches of similar lengths (:class:`LengthGroupedMLMData`,
:func:`pretraining_data`), and the held-out masked-LM and left-to-right LM metrics
(:func:`evaluate_mlm`, :func:`evaluate_causal_lm`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..data.documents import segment_documents, tokenize_documents
from ..data.tokenizers import special_ids
from ..train import evaluating, model_device
from .losses import PAIR_LABELS, data_pair_task, pair_fields
from .masking import IGNORE_INDEX, KEPT, MASKED, MLM_PROBABILITY, RANDOM, MaskedLMData, MLMMasker
from .pairs import make_nsp_pairs, make_sop_pairs, pack_pairs, pack_sentences, pack_stream, trim_padding

__all__ = [
    "ROW_UNITS",
    "check_pair_task",
    "check_row_unit",
    "pretraining_examples",
    "make_masker",
    "LengthGroupedMLMData",
    "pretraining_data",
    "mlm_logits",
    "evaluate_causal_lm",
    "evaluate_mlm",
]

# the pairs of each sentence-pair task: (documents of units, rng) -> a, b, label
_PAIR_MAKERS: dict[str, Callable[..., Any]] = {"nsp": make_nsp_pairs, "sop": make_sop_pairs}


def check_pair_task(pair_task: Any) -> str | None:
    if pair_task is not None and pair_task not in _PAIR_MAKERS:
        raise ValueError(f"pair_task must be one of {sorted(_PAIR_MAKERS)} or None, got {pair_task!r}")
    return pair_task


ROW_UNITS = ("block", "sentence")


def check_row_unit(row_unit: str, pair_task: str | None) -> None:
    if row_unit not in ROW_UNITS:
        raise ValueError(f"row_unit must be one of {ROW_UNITS}, got {row_unit!r}")
    if row_unit != "block" and pair_task is not None:
        raise ValueError(
            f"row_unit={row_unit!r} lays out rows without a pair task; with pair_task={pair_task!r} "
            "the rows are pairs (choose their unit with nsp_unit)"
        )


def pretraining_examples(
    documents: Sequence[Any],
    tokenizer,
    *,
    max_len: int = 128,
    pair_task: str | None = "nsp",
    nsp_unit: str = "sentence",
    row_unit: str = "block",
    seed: int = 0,
) -> dict[str, Tensor]:
    """Packed, unmasked pretraining inputs ``[n, width]``.

    ``pair_task`` (default ``"nsp"``) chooses the rows:

    * ``"nsp"``: next-sentence pairs (``[CLS] A [SEP] B [SEP]``, ``token_type_ids`` 0/1,
      ``next_sentence_label`` 0 = is next, 1 = random; :func:`~course_lib.objectives.pairs.make_nsp_pairs`);
      needs at least two documents.
    * ``"sop"``: sentence-order pairs (ALBERT): A and B are consecutive units of one
      document, ``sentence_order_label`` 0 = in order, 1 = swapped
      (:func:`~course_lib.objectives.pairs.make_sop_pairs`); needs a document with two units.
    * ``None``: no pairs, no pair labels; ``row_unit`` chooses the rows: RoBERTa's
      full-sentence stream, documents separated by ``[SEP]``, cut into blocks of ``max_len``
      tokens (``"block"``), or one sentence per row, ``[CLS] sentence [SEP]`` right-padded
      (``"sentence"``, :func:`~course_lib.objectives.pairs.pack_sentences`).

    ``nsp_unit`` is the unit of a pair, for either pair task: single sentences
    (``"sentence"``: one pair per sentence with a successor) or, as in the BERT and ALBERT
    papers, segments of consecutive sentences of up to half the length each (``"segment"``,
    :func:`segment_documents`). The label column's name is ``PAIR_LABELS[pair_task]``
    (:data:`~course_lib.objectives.losses.PAIR_LABELS`). ``seed`` draws the pairs.
    """
    pair_task = check_pair_task(pair_task)
    if nsp_unit not in ("sentence", "segment"):
        raise ValueError(f"nsp_unit must be 'sentence' or 'segment', got {nsp_unit!r}")
    check_row_unit(row_unit, pair_task)
    ids = special_ids(tokenizer)
    # a stream of blocks is running text (a sentence start inside it carries its space); a
    # sentence row or a pair's segment is given to a tokenizer on its own
    docs = tokenize_documents(documents, tokenizer, running=pair_task is None and row_unit == "block")
    if pair_task is not None and nsp_unit == "segment":
        docs = segment_documents(docs, (max_len - 3) // 2)
    if pair_task is not None:
        pairs = _PAIR_MAKERS[pair_task](docs, seed)
        packed = pack_pairs(
            pairs.a, pairs.b, max_len, cls_id=ids["cls"], sep_id=ids["sep"], pad_id=ids["pad"]
        )
        packed[PAIR_LABELS[pair_task]] = pairs.label
        return packed
    if row_unit == "sentence":
        return pack_sentences(
            [s for d in docs for s in d], max_len, cls_id=ids["cls"], sep_id=ids["sep"], pad_id=ids["pad"]
        )
    stream = [[t for s in d for t in s] for d in docs]
    return pack_stream(
        [s for s in stream if s],
        max_len,
        cls_id=ids["cls"],
        sep_id=ids["sep"],
        pad_id=ids["pad"],
        separator_id=ids["sep"],
    )


def make_masker(
    tokenizer,
    *,
    mlm_probability: float = MLM_PROBABILITY,
    mask_replace_prob: float = 0.8,
    random_replace_prob: float = 0.1,
) -> MLMMasker:
    """BERT's 80/10/10 masking for this tokenizer (its special tokens are never chosen)."""
    ids = special_ids(tokenizer)
    return MLMMasker(
        vocab_size=tokenizer.get_vocab_size(),
        mask_token_id=ids["mask"],
        special_ids=tuple(sorted(set(ids.values()))),
        mlm_probability=mlm_probability,
        mask_replace_prob=mask_replace_prob,
        random_replace_prob=random_replace_prob,
    )


class LengthGroupedMLMData(MaskedLMData):
    """:class:`~course_lib.objectives.masking.MaskedLMData` whose batches hold sequences of similar length.

    Each epoch's random order is cut into chunks of ``group`` batches; inside a chunk the
    sequences are sorted by length before being cut into batches, and the batches are then
    shuffled. With :func:`trim_padding` a batch is only as wide as its longest member, so
    far less compute goes to padding (Hugging Face's ``group_by_length`` does the same).
    """

    def __init__(self, examples: Mapping[str, Tensor], *, group: int = 50, **kwargs: Any):
        super().__init__(examples, **kwargs)
        if group < 1:
            raise ValueError(f"group must be at least 1 batch, got {group}")
        self.group = group
        mask = self.examples.get("attention_mask")
        self.lengths = (
            mask.sum(1)
            if mask is not None
            else torch.full((self.examples["input_ids"].size(0),), self.examples["input_ids"].size(1))
        )

    def batches(self, epoch: int) -> Iterator[dict[str, Tensor]]:
        view = self.epoch_view(epoch)
        n = view["input_ids"].size(0)
        g = torch.Generator().manual_seed(self.seed + 7919 * (epoch + 1))
        order = torch.randperm(n, generator=g) if self.shuffle else torch.arange(n)
        chunk = self.batch_size * self.group
        batches = []
        for i in range(0, n, chunk):
            part = order[i : i + chunk]
            part = part[torch.sort(self.lengths[part], descending=True, stable=True).indices]
            for j in range(0, part.numel(), self.batch_size):
                sel = part[j : j + self.batch_size]
                if sel.numel() == self.batch_size or not self.drop_last:
                    batches.append(sel)
        for k in torch.randperm(len(batches), generator=g).tolist() if self.shuffle else range(len(batches)):
            yield {key: v[batches[k]] for key, v in view.items()}


def pretraining_data(
    examples: Mapping[str, Tensor],
    tokenizer,
    *,
    masking: str = "static",
    static_copies: int = 1,
    batch_size: int = 64,
    mlm_probability: float = MLM_PROBABILITY,
    group_by_length: bool = True,
    seed: int = 0,
) -> MaskedLMData:
    """Batches for :func:`pretrain`: the examples masked statically (BERT) or dynamically
    (RoBERTa), in batches of similar lengths (``group_by_length``) or in random order."""
    kwargs = dict(
        masker=make_masker(tokenizer, mlm_probability=mlm_probability),
        masking=masking,
        static_copies=static_copies,
        batch_size=batch_size,
        shuffle=True,
        drop_last=True,
        seed=seed,
    )
    return LengthGroupedMLMData(examples, **kwargs) if group_by_length else MaskedLMData(examples, **kwargs)


def mlm_logits(model: nn.Module, **inputs: Tensor) -> Tensor:
    """``[batch, seq, vocab]`` masked-LM logits of a ``BertForPreTraining`` or ``*ForMaskedLM``
    model: ``model(**inputs).mlm_logits``."""
    return model(**inputs).mlm_logits


@torch.no_grad()
def evaluate_causal_lm(
    model: nn.Module, examples: Mapping[str, Tensor], *, batch_size: int = 256
) -> dict[str, float]:
    """A left-to-right LM on held-out ``examples`` (unmasked): ``lm_loss`` (mean next-token
    cross-entropy, nats) and ``lm_accuracy`` (top-1 next token), over every real token after
    the first."""
    if not getattr(getattr(model, "config", None), "is_decoder", False):
        raise ValueError(
            "evaluate_causal_lm needs a left-to-right LM (config.is_decoder=True), got "
            f"{type(model).__name__}; score a masked LM with evaluate_mlm"
        )
    device = model_device(model)
    loss_sum, correct, total = 0.0, 0, 0
    with evaluating(model):
        for i in range(0, examples["input_ids"].size(0), batch_size):
            fields = ("input_ids", "attention_mask", "token_type_ids")
            batch = {k: v[i : i + batch_size] for k, v in examples.items() if k in fields}
            batch = {k: v.to(device) for k, v in trim_padding(batch).items()}
            logits = model(**batch).logits[:, :-1].float()
            target = batch["input_ids"][:, 1:]
            real = batch["attention_mask"][:, 1:].bool() if "attention_mask" in batch else target >= 0
            loss_sum += F.cross_entropy(logits[real], target[real], reduction="sum").item()
            correct += int((logits[real].argmax(-1) == target[real]).sum())
            total += int(real.sum())
    return {"lm_loss": loss_sum / max(total, 1), "lm_accuracy": correct / max(total, 1)}


@torch.no_grad()
def evaluate_mlm(
    model: nn.Module,
    examples: Mapping[str, Tensor],
    masker: MLMMasker,
    *,
    seed: int = 0,
    batch_size: int = 256,
) -> dict[str, float]:
    """Masked-LM (and sentence-pair) quality on held-out ``examples``, masked once with ``seed``.

    Returns ``mlm_accuracy`` (top-1 over all chosen tokens), ``mlm_loss``, the accuracy
    split by what the input showed at the chosen position (``accuracy_masked``: ``[MASK]``,
    ``accuracy_random``: a random token, ``accuracy_kept``: the true token),
    ``accuracy_unchosen`` (ordinary tokens that were not chosen, where the loss never looks:
    how often the output reproduces the input, as a fine-tuning input would be read) and,
    for a model with a sentence-pair head (``pair_objective``) and examples with pair labels,
    the head's accuracy on them, named after the examples' task: ``nsp_accuracy`` or
    ``sop_accuracy`` (either head on either task, as in the ALBERT paper's Table 5).
    """
    was_training = model.training
    model.eval()
    device = model_device(model)
    g = torch.Generator().manual_seed(seed)
    special = examples["attention_mask"] == 0 if "attention_mask" in examples else None
    inputs, labels, actions = masker(
        examples["input_ids"], generator=g, special_mask=special, return_actions=True
    )
    n = inputs.size(0)
    specials = torch.tensor(masker.special_ids + (masker.mask_token_id,))
    visible = (actions == 0) & ~torch.isin(examples["input_ids"], specials)
    if special is not None:
        visible &= ~special
    loss_sum, correct, count = 0.0, torch.zeros(4), torch.zeros(4)
    pair_correct, pair_count = 0, 0
    head = getattr(model, "pair_objective", None)
    task = data_pair_task(examples) if head is not None else None  # the head, scored on the data's task
    has_pair = task is not None
    label_field, logits_field = (PAIR_LABELS[task], pair_fields(head)[1]) if has_pair else (None, None)
    for i in range(0, n, batch_size):
        sl = slice(i, i + batch_size)
        batch = {
            "input_ids": inputs[sl],
            "labels": labels[sl],
            "actions": actions[sl],
            "visible": visible[sl],
        }
        for k in ("attention_mask", "token_type_ids"):
            if k in examples:
                batch[k] = examples[k][sl]
        batch = {k: v.to(device) for k, v in trim_padding(batch).items()}
        kwargs = {k: batch[k] for k in ("attention_mask", "token_type_ids") if k in batch}
        out = model(batch["input_ids"], **kwargs)
        logits = out.mlm_logits
        chosen = batch["labels"] != IGNORE_INDEX
        lg, lb, act = logits[chosen].float(), batch["labels"][chosen], batch["actions"][chosen]
        loss_sum += F.cross_entropy(lg, lb, reduction="sum").item()
        hit = (lg.argmax(-1) == lb).cpu()
        act = act.cpu()
        for a in (MASKED, RANDOM, KEPT):
            sel = act == a
            correct[a] += hit[sel].sum()
            count[a] += sel.sum()
        vis = batch["visible"]
        correct[0] += (logits[vis].argmax(-1) == batch["input_ids"][vis]).sum().cpu()
        count[0] += vis.sum().cpu()
        if has_pair:
            label = examples[label_field][sl].to(device)
            pair_correct += int((getattr(out, logits_field).argmax(-1) == label).sum())
            pair_count += label.numel()
    model.train(was_training)
    total = count[1:].sum().clamp(min=1)
    result = {
        "mlm_accuracy": float(correct[1:].sum() / total),
        "mlm_loss": loss_sum / float(total),
        "accuracy_masked": float(correct[MASKED] / count[MASKED].clamp(min=1)),
        "accuracy_random": float(correct[RANDOM] / count[RANDOM].clamp(min=1)),
        "accuracy_kept": float(correct[KEPT] / count[KEPT].clamp(min=1)),
        "accuracy_unchosen": float(correct[0] / count[0].clamp(min=1)),
    }
    if has_pair:
        result[f"{task}_accuracy"] = pair_correct / max(pair_count, 1)
    return result
