r"""Pretraining and fine-tuning BERT: the recipe the chapter runs and ``course train bert`` runs.

One set of functions serves three users: the BERT chapter (a small model on the generated
corpus, on a CPU, inside :func:`~course_lib.checkpoints.train_or_load`), a reader with a GPU
and their own text (``course train bert --text 'books/*.txt' --device cuda --size
base-like``), and the tests (a tiny model for a few steps).

**Pretraining** (Devlin et al. 2019, §3.1). Documents become sentence pairs
``[CLS] A [SEP] B [SEP]`` for the model's pair task: next-sentence prediction (``"nsp"``,
BERT: B follows A with probability 1/2, else it is a sentence of another document) or
sentence-order prediction (``"sop"``, ALBERT: A and B are consecutive, swapped with
probability 1/2); without a pair task (``None``) they become RoBERTa's stream of full
sentences cut into blocks (:mod:`course_lib.objectives.masking`). 15% of the tokens are
chosen; 80% of those become ``[MASK]``, 10% a random token, 10% stay. The loss is

.. math::

    \mathcal{L} = -\frac{1}{|M|}\sum_{i \in M} \log p_\theta(x_i \mid \tilde x)
    \;-\; \log p_\theta(y \mid \tilde x) \quad (\text{second term only with a pair task}),

with :math:`M` the chosen positions, :math:`\tilde x` the corrupted input and :math:`y` the
pair's label (IsNext / NotNext, or in order / swapped). Masks are drawn
once (``masking="static"``, BERT) or afresh every epoch (``"dynamic"``, RoBERTa).

**Fine-tuning** (§3.2). A classifier reads the pooled ``[CLS]`` vector,
:math:`p(y \mid x) = \mathrm{softmax}(W \tanh(W_p h_{[CLS]} + b_p) + b)`, and every weight is
trained on the labelled task. Starting the encoder from pretrained weights instead of random
ones is the whole point of pretraining; :func:`finetune_classifier` does both, with the same
seed, data and steps, so the difference is the pretraining alone.

Command line::

    course train bert --text 'PATH or GLOB' --steps N --out DIR [--device cuda] [--size small|base-like]
        [--pair-task nsp|sop|none] [--pair-unit sentence|segment] [--architecture CLASS]

writes ``DIR/model.safetensors`` (+ ``model.json`` with the training history),
``DIR/config.json`` and ``DIR/tokenizer.json``; :func:`load_pretrained_bert` reads them back.
Without ``--text`` (and without ``$COURSE_TEXT``) it trains on the generated corpus.
``--architecture`` names any registered class (:func:`~course_lib.recipes.common.register_model`),
e.g. ``AlbertForPreTraining`` once its module is imported; without ``--pair-task`` the
class's own ``pair_objective`` is the pair task.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from tokenizers import Tokenizer
from torch import Tensor, nn

from ..data import (
    detokenize,
    encode_texts,
    load_documents,
    special_ids,
    train_byte_bpe,
    train_wordpiece,
)
from ..device import get_device, seed_everything
from ..models.albert import (
    AlbertConfig,
    AlbertForMaskedLM,
    AlbertForPreTraining,
    AlbertForSequenceClassification,
)
from ..models.bert import (
    BertConfig,
    BertForMaskedLM,
    BertForPreTraining,
    BertForSequenceClassification,
    BertForTokenClassification,
    BertLMHeadModel,
    BertModel,
    body_of,
)
from ..models.roberta import RobertaForMaskedLM
from ..objectives import (
    IGNORE_INDEX,
    KEPT,
    MASKED,
    PAIR_LABELS,
    RANDOM,
    MaskedLMData,
    MLMMasker,
    causal_lm_loss,
    data_pair_task,
    make_nsp_pairs,
    make_sop_pairs,
    pack_pairs,
    pack_sentences,
    pack_stream,
    pair_fields,
    pretraining_loss,
    reverse_sequences,
    tagging_inputs,
    trim_padding,
)
from ..train import History, evaluating, fit, model_device
from .common import (
    MODEL_CLASSES,
    TrainingOptions,
    add_recipe_command,
    fingerprint,
    load_model,
    module_main,
    positive,
    register_model,
    registered_class,
    require_positive,
    run_recipe,
    save_model,
    train_cached,
    training_arguments,
)

# the BERT-family classes the recipes build, save and load (a new family registers its own)
_FAMILY = (
    BertForPreTraining,
    BertForMaskedLM,
    BertLMHeadModel,
    RobertaForMaskedLM,
    AlbertForPreTraining,
    AlbertForMaskedLM,
)
for _cls in _FAMILY:
    register_model(_cls)

__all__ = [
    "SIZES",
    "DEFAULT_LR",
    "CAUSAL_DIRECTIONS",
    "ROW_UNITS",
    "bert_config",
    "train_tokenizer",
    "tokenize_documents",
    "pretraining_examples",
    "make_masker",
    "LengthGroupedMLMData",
    "pretraining_data",
    "trim_padding",
    "evaluate_mlm",
    "pretrain",
    "PretrainedBert",
    "split_documents",
    "pretrain_bert",
    "mlm_logits",
    "top_predictions",
    "word_order_pairs",
    "labelled_pairs",
    "classification_inputs",
    "finetune_classifier",
    "classification_accuracy",
    "finetune_tagger",
    "shuffled_batches",
    "tagging_inputs",
    "tagging_accuracy",
    "weights_fingerprint",
    "documents_fingerprint",
    "save_pretrained_bert",
    "load_pretrained_bert",
    "load_with_tokenizer",
    "data_spec",
    "register",
    "main",
]

# Model shapes by name. "small" is the chapter's model; "base-like" is BERT-base's shape.
SIZES: dict[str, dict[str, int]] = {
    "tiny": dict(d_model=32, n_heads=2, n_layers=2, d_ff=64),  # tests: milliseconds per step
    "small": dict(d_model=128, n_heads=4, n_layers=2, d_ff=512),  # the chapter, on a CPU
    "medium": dict(d_model=256, n_heads=4, n_layers=6, d_ff=1024),  # a laptop GPU, minutes
    "base-like": dict(d_model=768, n_heads=12, n_layers=12, d_ff=3072),  # BERT-base: a real GPU, hours
}
CAUSAL_DIRECTIONS = ("left_to_right", "right_to_left")  # the two orders of a causal LM's product rule
DEFAULT_LR = {"tiny": 3e-3, "small": 1e-3, "medium": 5e-4, "base-like": 1e-4}  # peak Adam learning rates


def bert_config(
    size: str = "small",
    *,
    vocab_size: int,
    max_len: int = 128,
    pad_id: int = 0,
    dropout: float = 0.1,
    config_class: type[BertConfig] = BertConfig,
    **overrides: Any,
) -> BertConfig:
    """A config (a :class:`BertConfig` unless ``config_class`` says otherwise) of a named size
    (:data:`SIZES`) for a tokenizer of ``vocab_size`` tokens."""
    if size not in SIZES:
        raise ValueError(f"unknown size {size!r}; choose one of {sorted(SIZES)}")
    return config_class.from_course(
        vocab_size=vocab_size, max_len=max_len, pad_id=pad_id, dropout=dropout, **SIZES[size], **overrides
    )


# ---------------------------------------------------------------------------------------
# Data
# ---------------------------------------------------------------------------------------


def _sentence_texts(doc: Any) -> list[str]:
    """The sentences of a Document, or of a plain list of sentence strings."""
    if hasattr(doc, "sentences"):
        return [s.text if hasattr(s, "text") else str(s) for s in doc.sentences]
    if isinstance(doc, str):
        raise ValueError("a document must be a Document or a list of sentence strings, not one str")
    return [s.text if hasattr(s, "text") else str(s) for s in doc]


def train_tokenizer(documents: Sequence[Any], *, kind: str = "wordpiece", vocab_size: int = 4000):
    """A WordPiece (BERT) or byte-level BPE (RoBERTa) tokenizer trained on the documents' sentences."""
    texts = [t for d in documents for t in _sentence_texts(d)]
    if not texts:
        raise ValueError("the documents hold no sentences to train a tokenizer on")
    if kind == "wordpiece":
        return train_wordpiece(texts, vocab_size=vocab_size)
    if kind == "byte-bpe":
        return train_byte_bpe(texts, vocab_size=vocab_size)
    raise ValueError(f"tokenizer kind must be 'wordpiece' or 'byte-bpe', got {kind!r}")


def tokenize_documents(documents: Sequence[Any], tokenizer) -> list[list[list[int]]]:
    """Token ids without special tokens: ``[document][sentence][token]``.

    ``documents``: :class:`~course_lib.data.corpus.Document` objects (generated or read by
    :func:`~course_lib.data.load_documents`) or lists of sentence strings.
    """
    per_doc = [_sentence_texts(d) for d in documents]
    flat = [t for texts in per_doc for t in texts]
    if not flat:
        raise ValueError("the documents hold no sentences")
    encodings = tokenizer.encode_batch(flat, add_special_tokens=False)
    ids = [e.ids for e in encodings]
    out, k = [], 0
    for texts in per_doc:
        out.append(ids[k : k + len(texts)])
        k += len(texts)
    return out


def segment_documents(docs: Sequence[Sequence[Sequence[int]]], length: int) -> list[list[list[int]]]:
    """Each document's sentences joined into *segments* of consecutive sentences: a segment
    grows until adding the next sentence would pass ``length`` tokens (a longer sentence is a
    segment of its own). BERT's NSP pairs are such spans of text, not single sentences."""
    if length < 1:
        raise ValueError(f"segment length must be positive, got {length}")
    out = []
    for doc in docs:
        segs: list[list[int]] = []
        for sent in doc:
            if segs and len(segs[-1]) + len(sent) <= length:
                segs[-1] = segs[-1] + list(sent)
            else:
                segs.append(list(sent))
        out.append(segs)
    return out


# the pairs of each sentence-pair task: (documents of units, rng) -> a, b, label
_PAIR_MAKERS: dict[str, Callable[..., Any]] = {"nsp": make_nsp_pairs, "sop": make_sop_pairs}


def _check_pair_task(pair_task: Any) -> str | None:
    if pair_task is not None and pair_task not in _PAIR_MAKERS:
        raise ValueError(f"pair_task must be one of {sorted(_PAIR_MAKERS)} or None, got {pair_task!r}")
    return pair_task


ROW_UNITS = ("block", "sentence")


def _check_row_unit(row_unit: str, pair_task: str | None) -> None:
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
    pair_task = _check_pair_task(pair_task)
    if nsp_unit not in ("sentence", "segment"):
        raise ValueError(f"nsp_unit must be 'sentence' or 'segment', got {nsp_unit!r}")
    _check_row_unit(row_unit, pair_task)
    ids = special_ids(tokenizer)
    docs = tokenize_documents(documents, tokenizer)
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
    mlm_probability: float = 0.15,
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
    mlm_probability: float = 0.15,
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


def pretrain(
    model: nn.Module,
    data: MaskedLMData,
    *,
    steps: int,
    lr: float = 1e-3,
    warmup: int | None = None,
    eval_fn: Callable[[nn.Module], Mapping[str, float]] | None = None,
    eval_every: int | None = None,
    progress: bool | None = None,
    desc: str = "pretraining",
    loss_fn: Callable[[nn.Module, Mapping[str, Tensor]], tuple[Tensor, dict[str, float]]] = pretraining_loss,
) -> History:
    """Train a ``BertForPreTraining`` (MLM + NSP), an ``AlbertForPreTraining`` (MLM + SOP) or a
    ``BertForMaskedLM`` (MLM only) on ``data`` with :func:`~course_lib.train.fit` (AdamW,
    warm-up, cosine decay, bf16 on a capable GPU); ``loss_fn=causal_lm_loss`` trains a
    ``BertLMHeadModel`` on unmasked data instead."""
    return fit(
        model,
        data,
        loss_fn,
        steps=steps,
        lr=lr,
        warmup=warmup,
        eval_fn=eval_fn,
        eval_every=eval_every,
        progress=progress,
        desc=desc,
    )


# ---------------------------------------------------------------------------------------
# Fingerprints for cache keys
# ---------------------------------------------------------------------------------------


def documents_fingerprint(documents: Sequence[Any]) -> str:
    """A short hash of the documents' sentences (changes when the training text changes)."""
    return fingerprint(part for d in documents for part in ("\n".join(_sentence_texts(d)).encode(), b"\x00"))


def _tokenizer_fingerprint(tokenizer) -> str:
    return fingerprint([tokenizer.to_str().encode()])


def weights_fingerprint(model: nn.Module) -> str:
    """A short hash of a model's weights (e.g. to key a fine-tuning run on the pretrained body)."""
    return fingerprint(
        part
        for name, t in sorted(model.state_dict().items())
        for part in (name.encode(), t.detach().float().cpu().contiguous().numpy().tobytes())
    )


# ---------------------------------------------------------------------------------------
# The whole recipe
# ---------------------------------------------------------------------------------------


class PretrainedBert(NamedTuple):
    """What :func:`pretrain_bert` returns (unpacks as ``model, tokenizer, history``)."""

    model: nn.Module  # BertForPreTraining (NSP), BertForMaskedLM (no pair task) or model_class; eval mode
    tokenizer: Any  # the tokenizers.Tokenizer the model reads
    history: History  # losses per step; evals["mlm_accuracy"] etc. on held-out documents


def split_documents(documents: Sequence[Any], heldout: Sequence[Any] | float | None) -> tuple[list, list]:
    """``(training documents, held-out documents)``: ``heldout`` is a fraction (every k-th
    document is held out; nothing when fewer than 2 would remain on either side), a list of
    held-out documents, or ``None``."""
    documents = list(documents)
    if heldout is None:
        return documents, []
    if isinstance(heldout, float):
        if not 0.0 < heldout < 1.0:
            raise ValueError(
                f"heldout must be a fraction in (0, 1), a list of documents or None, got {heldout}"
            )
        k = max(1, round(1 / heldout))
        train = [d for i, d in enumerate(documents) if i % k != k - 1]
        held = [d for i, d in enumerate(documents) if i % k == k - 1]
        if len(held) < 2 or len(train) < 2:  # too little text to hold any back: evaluate on nothing
            return documents, []
        return train, held
    return documents, list(heldout)


def _pair_model_class(pair_task: str) -> type[nn.Module]:
    """The one registered class whose ``pair_objective`` is ``pair_task`` (``ValueError`` when
    there is none or more than one: then ``model_class`` must name it)."""
    found = sorted(n for n, c in MODEL_CLASSES.items() if getattr(c, "pair_objective", None) == pair_task)
    if len(found) != 1:
        which = (
            f"several are registered ({', '.join(found)})"
            if found
            else "none is registered (import its module first, e.g. course_lib.models.albert)"
        )
        raise ValueError(
            f"pair_task={pair_task!r} needs a model_class whose pair_objective is {pair_task!r}, and {which}"
        )
    return MODEL_CLASSES[found[0]]


def pretrain_bert(
    config: BertConfig | str = "small",
    documents: Sequence[Any] | None = None,
    *,
    steps: int = 1000,
    batch_size: int = 64,
    lr: float | None = None,
    masking: str = "static",
    static_copies: int = 1,
    pair_task: str | None = "auto",
    nsp_unit: str = "sentence",
    row_unit: str = "block",
    causal: bool = False,
    direction: str = "left_to_right",
    max_len: int = 128,
    mlm_probability: float = 0.15,
    tokenizer: Any = None,
    tokenizer_kind: str = "wordpiece",
    vocab_size: int = 4000,
    heldout: Sequence[Any] | float | None = 0.05,
    eval_every: int | None = None,
    init: nn.Module | None = None,
    model_class: type[nn.Module] | None = None,
    seed: int = 0,
    device: torch.device | str | None = None,
    cache_name: str | None = None,
    progress: bool | None = None,
) -> PretrainedBert:
    """Pretrain a BERT from scratch on ``documents``; returns ``(model, tokenizer, history)``.

    Args:
        config: a :class:`BertConfig`, or a size name of :data:`SIZES` (``"small"``,
            ``"base-like"``, ...). Its ``vocab_size``, ``pad_token_id`` and
            ``max_position_embeddings`` are set from the tokenizer and ``max_len``.
        documents: Document objects or lists of sentence strings; ``None`` reads
            :func:`~course_lib.data.load_documents` (``$COURSE_TEXT`` or the generated corpus).
        steps, batch_size, lr: optimiser steps, sequences per step, peak learning rate
            (default :data:`DEFAULT_LR` of the size, 1e-3 for a custom config).
        masking, static_copies: ``"static"`` (BERT; ``static_copies`` masked copies cycle
            over the epochs) or ``"dynamic"`` (RoBERTa: a new mask every epoch).
        pair_task: the sentence-pair objective besides MLM, and the data it reads
            (:func:`pretraining_examples`): ``"nsp"`` (next-sentence pairs and the NSP loss,
            ``BertForPreTraining``), ``"sop"`` (ALBERT's sentence-order pairs and loss; the
            model is ``model_class``, by default the one registered class whose
            ``pair_objective`` is ``"sop"``) or ``None`` (``BertForMaskedLM`` on
            full-sentence blocks, RoBERTa). ``"auto"`` (the default): ``model_class``'s
            ``pair_objective`` when a ``model_class`` is given, else ``"nsp"``.
        nsp_unit: the unit of a pair (for NSP and SOP alike): A and B are single sentences
            (``"sentence"``) or segments of consecutive sentences (``"segment"``, as in the
            BERT and ALBERT papers; :func:`pretraining_examples`).
        row_unit: without a pair task, the rows: full-sentence blocks of ``max_len`` tokens
            (``"block"``, RoBERTa) or one sentence per row (``"sentence"``).
        causal: train the same network as a left-to-right language model instead
            (``BertLMHeadModel``, causal attention, next-token loss, no masking) on the
            full-sentence blocks; needs ``pair_task=None``. Held-out
            ``lm_loss``/``lm_accuracy``.
        direction: the order of the causal LM's product rule: ``"left_to_right"``
            (:math:`p(x_t | x_{<t})`) or ``"right_to_left"`` (:math:`p(x_t | x_{>t})`,
            the same network trained on every block reversed by
            :func:`~course_lib.objectives.pairs.reverse_sequences`; give it reversed inputs
            to score text). Only with ``causal=True``.
        tokenizer: a trained ``tokenizers.Tokenizer``; by default one of ``tokenizer_kind``
            (``"wordpiece"`` or ``"byte-bpe"``) with ``vocab_size`` tokens is trained on the
            training documents.
        heldout: documents for evaluation, or the fraction of ``documents`` to hold out
            (every k-th one), or ``None``. Held-out MLM accuracy (and ``nsp_accuracy`` or
            ``sop_accuracy``, :func:`evaluate_mlm`) is logged every ``eval_every`` steps and
            at the end (``history.evals``).
        init: a model of the same architecture to start from (continued pretraining)
            instead of random weights; it is not modified.
        model_class: the registered model class to train (see
            :func:`~course_lib.recipes.common.register_model`); by default
            ``BertForPreTraining`` with NSP, ``BertForMaskedLM`` without a pair task and
            the registered class whose ``pair_objective`` is the pair task otherwise. Its
            ``pair_objective`` must equal ``pair_task``.
        seed: seeds the pairs, the masks, the batch order and the initial weights.
        device: default :func:`~course_lib.device.get_device`.
        cache_name: train through :func:`~course_lib.checkpoints.train_or_load` under this
            name (a second call with the same arguments loads the weights).
    """
    device = get_device() if device is None else torch.device(device)
    documents = list(load_documents() if documents is None else documents)
    if not documents:
        raise ValueError("pretrain_bert got no documents")
    require_positive(steps=steps, batch_size=batch_size)
    if max_len < 8:
        raise ValueError(f"max_len={max_len} is too short for [CLS] A [SEP] B [SEP]; use at least 8")
    if pair_task == "auto":
        pair_task = getattr(model_class, "pair_objective", None) if model_class is not None else "nsp"
    pair_task = _check_pair_task(pair_task)
    if causal and pair_task is not None:
        raise ValueError("causal=True trains a left-to-right LM on full-sentence blocks: pass pair_task=None")
    _check_row_unit(row_unit, pair_task)
    if direction not in CAUSAL_DIRECTIONS:
        raise ValueError(f"direction must be one of {CAUSAL_DIRECTIONS}, got {direction!r}")
    if direction != "left_to_right" and not causal:
        raise ValueError(f"direction={direction!r} orders a causal LM's product rule: it needs causal=True")
    if causal:
        masking = "none"
    elif masking not in ("static", "dynamic"):
        raise ValueError(f"masking must be 'static' or 'dynamic', got {masking!r}")
    # the BERT classes of the recipe (None for a pair task that BERT has no head for)
    default_class = (
        BertLMHeadModel if causal else {"nsp": BertForPreTraining, None: BertForMaskedLM}.get(pair_task)
    )
    if model_class is None:
        model_class = default_class or _pair_model_class(pair_task)
    if registered_class(model_class.__name__) is not model_class:
        raise ValueError(
            f"model_class {model_class!r} is not the class registered as {model_class.__name__!r}"
        )
    objective = getattr(model_class, "pair_objective", None)
    if (objective is None) != (pair_task is None):  # a pair head trains on either pair task
        raise ValueError(
            f"{model_class.__name__} has pair_objective={objective!r}, but the data's sentence-pair task is "
            f"pair_task={pair_task!r}: pass pair_task={objective!r} or a model class whose pair_objective "
            f"is {pair_task!r}"
        )
    train_docs, held_docs = split_documents(documents, heldout)
    if pair_task == "nsp" and sum(1 for d in train_docs if _sentence_texts(d)) < 2:
        raise ValueError(
            "next-sentence prediction needs at least 2 training documents (random sentences come from "
            "another "
            f"document; in text files, blank lines separate documents), got {len(train_docs)}: add text or "
            "use "
            "pair_task=None (--pair-task none)"
        )
    if tokenizer is None:
        tokenizer = train_tokenizer(train_docs, kind=tokenizer_kind, vocab_size=vocab_size)
    ids = special_ids(tokenizer)
    size = config if isinstance(config, str) else None
    if size is not None:
        config = bert_config(
            size,
            vocab_size=tokenizer.get_vocab_size(),
            max_len=max_len,
            pad_id=ids["pad"],
            config_class=model_class.config_class,
        )
    elif isinstance(config, model_class.config_class):
        config = replace(
            config,
            vocab_size=tokenizer.get_vocab_size(),
            pad_token_id=ids["pad"],
            max_position_embeddings=max_len,
        )
    else:
        raise TypeError(
            f"config must be a {model_class.config_class.__name__} or a size name, got "
            f"{type(config).__name__}"
        )
    if causal:
        config = replace(config, is_decoder=True)
    if lr is None:
        lr = DEFAULT_LR.get(size or "", 1e-3)

    pairs = dict(max_len=max_len, pair_task=pair_task, nsp_unit=nsp_unit, row_unit=row_unit)
    examples = pretraining_examples(train_docs, tokenizer, **pairs, seed=seed)
    if direction == "right_to_left":
        examples = reverse_sequences(examples)
    if examples["input_ids"].size(0) < batch_size:
        raise ValueError(
            f"the training text gives only {examples['input_ids'].size(0)} sequences, fewer than "
            f"batch_size={batch_size}; "
            "give more text or a smaller batch size"
        )
    data = pretraining_data(
        examples,
        tokenizer,
        masking=masking,
        static_copies=static_copies,
        batch_size=batch_size,
        mlm_probability=mlm_probability,
        seed=seed,
    )
    held = None
    if held_docs:
        held = pretraining_examples(held_docs, tokenizer, **pairs, seed=seed + 1)
        if direction == "right_to_left":
            held = reverse_sequences(held)
    masker = data.masker

    def eval_fn(m: nn.Module) -> dict[str, float]:
        if held is None:
            return {}
        return evaluate_causal_lm(m, held) if causal else evaluate_mlm(m, held, masker, seed=seed)

    seed_everything(seed)
    model = model_class(config).to(device)
    if init is not None:
        if type(init) is not type(model) or init.config.to_dict() != config.to_dict():
            raise ValueError(
                f"init must be a {type(model).__name__} with the same configuration as the model to train"
            )
        model.load_state_dict(init.state_dict())

    def train(m: nn.Module) -> History:
        return pretrain(
            m,
            data,
            steps=steps,
            lr=lr,
            eval_fn=eval_fn if held is not None else None,
            eval_every=eval_every,
            progress=progress,
            desc=f"{direction.replace('_', '-')} LM pretraining"
            if causal
            else f"BERT pretraining ({masking} masking)",
            loss_fn=causal_lm_loss if causal else pretraining_loss,
        )

    def spec() -> dict[str, Any]:
        # every option that decides the model, always (no conditional keys)
        return dict(
            recipe="pretrain_bert",
            architecture=model_class.__name__,
            config=config.to_dict(),
            steps=steps,
            batch_size=batch_size,
            lr=lr,
            masking=masking,
            static_copies=static_copies,
            pair_task=pair_task,
            nsp_unit=nsp_unit,
            row_unit=row_unit,
            causal=causal,
            direction=direction,
            max_len=max_len,
            mlm_probability=mlm_probability,
            seed=seed,
            eval_every=eval_every,
            **data_spec(train_docs, held_docs, tokenizer, init),
        )

    history = train_cached(cache_name, model, spec, train)
    return PretrainedBert(model, tokenizer, history)


@torch.no_grad()
def top_predictions(
    model: nn.Module,
    tokenizer,
    inputs: Mapping[str, Tensor],
    positions: Sequence[int],
    *,
    k: int = 5,
    row: int = 0,
) -> list[list[tuple[str, float]]]:
    """The ``k`` most probable tokens (with probabilities) at each of ``positions`` of row ``row``."""
    device = model_device(model)
    kwargs = {
        key: v[row : row + 1].to(device)
        for key, v in inputs.items()
        if key in ("input_ids", "attention_mask", "token_type_ids")
    }
    was_training = model.training
    model.eval()
    logits = mlm_logits(model, **kwargs)[0]
    model.train(was_training)
    out = []
    for pos in positions:
        p = torch.softmax(logits[pos].float(), -1)
        top = p.topk(k)
        out.append([(tokenizer.id_to_token(int(i)), float(v)) for v, i in zip(top.values, top.indices)])
    return out


# ---------------------------------------------------------------------------------------
# Minimal pairs: what a masked LM prefers, without any fine-tuning
# ---------------------------------------------------------------------------------------


def word_order_pairs(sentences: Sequence[Any], *, seed: int = 0) -> list[tuple[str, str]]:
    """``(original, corrupted)`` minimal pairs: two adjacent words of each sentence swapped.

    ``sentences``: Sentence objects or token lists (the final punctuation mark stays in
    place; sentences with fewer than three words before it are skipped). A word-order
    acceptability task in the spirit of CoLA, built from any text.
    """
    rng = random.Random(seed)
    out = []
    for s in sentences:
        toks = list(s.tokens if hasattr(s, "tokens") else s)
        body, end = (toks[:-1], toks[-1:]) if toks and not any(c.isalnum() for c in toks[-1]) else (toks, [])
        candidates = [i for i in range(len(body) - 1) if body[i].lower() != body[i + 1].lower()]
        if len(body) < 3 or not candidates:
            continue
        i = rng.choice(candidates)
        bad = body[:i] + [body[i + 1], body[i]] + body[i + 2 :]
        out.append((detokenize(body + end), detokenize(bad + end)))
    return out


def labelled_pairs(pairs: Sequence[tuple[str, str]], *, seed: int = 0) -> list[tuple[str, int]]:
    """Minimal pairs -> shuffled ``(text, label)`` items: 1 for the first member, 0 for the second."""
    items = [(good, 1) for good, _ in pairs] + [(bad, 0) for _, bad in pairs]
    random.Random(seed).shuffle(items)
    return items


# ---------------------------------------------------------------------------------------
# Fine-tuning a classifier
# ---------------------------------------------------------------------------------------


def classification_inputs(
    tokenizer, texts: Sequence[str], pairs: Sequence[str] | None = None, *, max_len: int = 128
) -> dict[str, Tensor]:
    """``[CLS] text [SEP]`` (or a pair) for every text: ``input_ids``, ``token_type_ids``,
    ``attention_mask`` (1 = real token), right-padded, truncated to ``max_len``."""
    enc = encode_texts(tokenizer, list(texts), None if pairs is None else list(pairs), max_len=max_len)
    enc["attention_mask"] = enc["attention_mask"].long()
    return enc


def _split_labelled(
    items: Sequence[tuple[Any, int]], what: str
) -> tuple[list[str], Tensor, list[str] | None]:
    """``(texts, labels, second texts or None)`` of ``(text, label)`` or ``((a, b), label)`` items."""
    if not items:
        raise ValueError(f"{what} holds no examples")
    texts, seconds, labels = [], [], []
    for it in items:
        if len(it) != 2:
            raise ValueError(f"{what}: expected (text, label) pairs, got {it!r}")
        text = it[0]
        if isinstance(text, (tuple, list)):
            if len(text) != 2:
                raise ValueError(f"{what}: a sentence pair must be (a, b), got {text!r}")
            texts.append(str(text[0]))
            seconds.append(str(text[1]))
        else:
            texts.append(str(text))
        labels.append(int(it[1]))
    if seconds and len(seconds) != len(texts):
        raise ValueError(f"{what} mixes single texts and sentence pairs")
    return texts, torch.tensor(labels), (seconds or None)


@torch.no_grad()
def classification_accuracy(
    model: nn.Module,
    tokenizer,
    items: Sequence[tuple[str, int]],
    *,
    batch_size: int = 256,
    max_len: int | None = None,
) -> float:
    """Share of ``(text, label)`` (or ``((a, b), label)``) items the classifier gets right."""
    texts, labels, seconds = _split_labelled(items, "items")
    device = model_device(model)
    max_len = max_len or model.config.max_len
    was_training = model.training
    model.eval()
    correct = 0
    for i in range(0, len(texts), batch_size):
        pair = seconds[i : i + batch_size] if seconds is not None else None
        enc = classification_inputs(tokenizer, texts[i : i + batch_size], pair, max_len=max_len)
        logits = model(**{k: v.to(device) for k, v in enc.items()}).logits
        correct += int((logits.argmax(-1).cpu() == labels[i : i + batch_size]).sum())
    model.train(was_training)
    return correct / len(texts)


def _start_model(
    start: nn.Module | BertConfig, model_cls: type, seed: int, device, **config_changes: Any
) -> tuple[nn.Module, BertModel | None]:
    """A fine-tuning model of ``model_cls``: its new layers from ``seed``, its encoder copied
    from ``start`` (the pooler too when both have one) or random when ``start`` is a config."""
    if isinstance(start, BertConfig):
        config, body = start, None
    else:
        body = body_of(start)
        if type(body) is not model_cls.model_class:
            raise TypeError(
                f"{model_cls.__name__} starts from a {model_cls.model_class.__name__} body, got "
                f"{type(start).__name__}"
            )
        config = body.config
    device = (
        (model_device(body) if body is not None else get_device()) if device is None else torch.device(device)
    )
    seed_everything(seed)
    model = model_cls(replace(config, **config_changes))  # new layers (and a scratch body) from the seed
    if body is not None:
        model.load_body(body)
    return model.to(device), body


def shuffled_batches(
    rows: Mapping[str, Tensor], batch_size: int, seed: int
) -> Callable[[int], dict[str, Tensor]]:
    """``step -> batch``: ``batch_size`` rows of ``rows`` (a dict of tensors with one row per
    example) at a time, in an order drawn from ``seed`` and reshuffled every epoch (the
    remainder of an epoch carries over), each batch cut to its longest row
    (:func:`trim_padding`). The fine-tuning and distillation recipes draw their batches so."""
    require_positive(batch_size=batch_size)
    n = rows["input_ids"].size(0)
    gen = torch.Generator().manual_seed(seed)
    order: list[int] = []

    def batch_at(step: int) -> dict[str, Tensor]:
        nonlocal order
        if len(order) < batch_size:  # a new epoch: shuffle again (the remainder carries over)
            order = order + torch.randperm(n, generator=gen).tolist()
        sel, order = order[:batch_size], order[batch_size:]
        return trim_padding({k: v[sel] for k, v in rows.items()})

    return batch_at


class _Task(NamedTuple):
    """What a fine-tuning recipe brings to the run both share (:func:`_finetune`)."""

    model_class: type  # the task model: BertForSequenceClassification, BertForTokenClassification
    inputs: Callable[[int], dict[str, Tensor]]  # max_len -> the training rows, labels included
    loss_fn: Callable[[nn.Module, Mapping[str, Tensor]], tuple[Tensor, dict[str, float]]]
    eval_fn: Callable[[nn.Module], dict[str, float]] | None
    spec: dict[str, Any]  # the recipe's name and digests of its data (part of the cache key)


# the options both fine-tuning recipes take and hand to _finetune unchanged
_FINETUNE_OPTIONS = (
    "num_labels",
    "dropout",
    "steps",
    "batch_size",
    "lr",
    "seed",
    "device",
    "eval_every",
    "cache_name",
    "progress",
    "freeze_body",
)


def _finetune(
    task: _Task,
    start: nn.Module | BertConfig,
    tokenizer,
    *,
    num_labels: int,
    dropout: float | None,
    steps: int,
    batch_size: int,
    lr: float,
    seed: int,
    device: torch.device | str | None,
    eval_every: int | None,
    cache_name: str | None,
    progress: bool | None,
    freeze_body: bool = False,
) -> tuple[nn.Module, History]:
    """The run both fine-tuning recipes share: a ``task.model_class`` from ``start``
    (:func:`_start_model`), then ``steps`` batches of ``batch_size`` rows of ``task.inputs`` in
    an order drawn from ``seed`` (reshuffled each epoch, the remainder carried over), trained
    with :func:`~course_lib.train.fit`; cached under ``cache_name``. Returns ``(model, history)``.

    ``freeze_body``: the *feature-based* approach (ELMo's): the encoder's weights stay as
    they are (no gradient, no dropout inside it) and only the new layer on top is trained."""
    require_positive(steps=steps, batch_size=batch_size)
    changes: dict[str, Any] = dict(num_labels=num_labels, classifier_dropout=dropout)
    if freeze_body:
        base = start if isinstance(start, BertConfig) else body_of(start).config
        changes.update(
            hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0,
            classifier_dropout=base.hidden_dropout_prob if dropout is None else dropout,
        )
    model, body = _start_model(start, task.model_class, seed, device, **changes)
    if freeze_body:
        model.base.requires_grad_(False)
    batch_at = shuffled_batches(task.inputs(model.config.max_len), batch_size, seed)

    def train(m: nn.Module) -> History:
        return fit(
            m,
            batch_at,
            task.loss_fn,
            steps=steps,
            lr=lr,
            eval_fn=task.eval_fn,
            eval_every=eval_every,
            progress=progress,
            desc="fine-tuning" if body is not None else "training from scratch",
        )

    def spec() -> dict[str, Any]:
        return dict(
            task.spec,
            config=model.config.to_dict(),
            start=weights_fingerprint(body) if body is not None else "scratch",
            tokenizer=_tokenizer_fingerprint(tokenizer),
            steps=steps,
            batch_size=batch_size,
            lr=lr,
            seed=seed,
            eval_every=eval_every,
            **({"freeze_body": True} if freeze_body else {}),
        )

    return model, train_cached(cache_name, model, spec, train)


def _check_labels(low: int, high: int, num_labels: int, what: str) -> None:
    if low < 0 or high >= num_labels:
        raise ValueError(f"{what} must lie in [0, num_labels={num_labels}), got values in [{low}, {high}]")


def _digest(obj: Any) -> str:
    return fingerprint([json.dumps(obj).encode()])


def finetune_classifier(
    start: nn.Module | BertConfig,
    tokenizer,
    train_items: Sequence[tuple[str, int]],
    *,
    steps: int,
    batch_size: int = 32,
    lr: float = 1e-4,
    num_labels: int = 2,
    dropout: float | None = None,
    eval_items: Sequence[tuple[str, int]] | None = None,
    eval_every: int | None = None,
    seed: int = 0,
    device: torch.device | str | None = None,
    cache_name: str | None = None,
    progress: bool | None = None,
    freeze_body: bool = False,
) -> tuple[BertForSequenceClassification, History]:
    """Fine-tune a sentence classifier on ``(text, label)`` items; returns ``(classifier, history)``.

    ``start`` is a pretrained model (``BertModel`` or any model with a ``.bert`` body: its
    encoder weights are copied, the pooler too when it has one) or a :class:`BertConfig`
    (random weights: training from scratch). Either way the classifier layer is initialised
    from ``seed`` and the batches come in the same order, so two calls that differ only in
    ``start`` isolate the effect of pretraining. ``history.evals["accuracy"]`` is the
    accuracy on ``eval_items``. An item's text may be a pair ``(a, b)``: the input is then
    ``[CLS] a [SEP] b [SEP]`` with segment ids 0/1. ``freeze_body``: train only the
    classifier on the frozen encoder (feature-based), see :func:`_finetune`.
    """
    texts, labels, seconds = _split_labelled(train_items, "train_items")
    _check_labels(int(labels.min()), int(labels.max()), num_labels, "labels")

    def inputs(max_len: int) -> dict[str, Tensor]:
        return {**classification_inputs(tokenizer, texts, seconds, max_len=max_len), "labels": labels}

    def loss_fn(m: nn.Module, batch: Mapping[str, Tensor]):
        out = m(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"], labels=batch["labels"])
        acc = (out.logits.argmax(-1) == batch["labels"]).float().mean().item()
        return out.loss, {"train_accuracy": acc}

    def eval_fn(m: nn.Module) -> dict[str, float]:
        return {"accuracy": classification_accuracy(m, tokenizer, eval_items)}

    spec = dict(
        recipe="finetune_classifier",
        train=_digest([texts, labels.tolist()] + ([seconds] if seconds is not None else [])),
        eval=_digest([[list(t) if isinstance(t, (tuple, list)) else t, y] for t, y in eval_items or []]),
    )
    start_config = start if isinstance(start, BertConfig) else body_of(start).config
    classifier = (
        AlbertForSequenceClassification
        if isinstance(start_config, AlbertConfig)
        else BertForSequenceClassification
    )
    task = _Task(classifier, inputs, loss_fn, eval_fn if eval_items else None, spec)
    options = locals()
    return _finetune(task, start, tokenizer, **{k: options[k] for k in _FINETUNE_OPTIONS})


# ---------------------------------------------------------------------------------------
# Fine-tuning a tagger (one label per word)
# ---------------------------------------------------------------------------------------


def _split_tagged(
    items: Sequence[tuple[Sequence[str], Sequence[int]]], what: str
) -> tuple[list[list[str]], list[list[int]]]:
    if not items:
        raise ValueError(f"{what} holds no sentences")
    words, tags = [], []
    for k, it in enumerate(items):
        if len(it) != 2 or isinstance(it[0], str) or len(it[0]) != len(it[1]) or not len(it[0]):
            raise ValueError(
                f"{what}[{k}]: expected (words, tags) with one tag per word and at least one word, got "
                f"{it!r}"[:300]
            )
        words.append([str(w) for w in it[0]])
        tags.append([int(t) for t in it[1]])
    return words, tags


@torch.no_grad()
def tagging_accuracy(
    model: nn.Module,
    tokenizer,
    items: Sequence[tuple[Sequence[str], Sequence[int]]],
    *,
    known_words: set[str] | None = None,
    batch_size: int = 256,
) -> dict[str, float]:
    """Share of words tagged right (each word judged at its first piece); with ``known_words``
    also the accuracy on the words outside that set (``"unseen_accuracy"``: the words the
    tagger never saw labelled) and their share (``"unseen_share"``)."""
    words, tags = _split_tagged(items, "items")
    device = model_device(model)
    was_training = model.training
    model.eval()
    right, total, right_new, total_new = 0, 0, 0, 0
    for i in range(0, len(words), batch_size):
        enc = tagging_inputs(
            tokenizer, words[i : i + batch_size], tags[i : i + batch_size], max_len=model.config.max_len
        )
        logits = model(
            enc["input_ids"].to(device), enc["attention_mask"].to(device), enc["token_type_ids"].to(device)
        ).logits
        labelled = enc["labels"] != IGNORE_INDEX
        hit = (logits.argmax(-1).cpu() == enc["labels"]) & labelled
        right += int(hit.sum())
        total += int(labelled.sum())
        if known_words is not None:  # [sentence, word] unseen flags, read at each labelled position
            chunk = words[i : i + batch_size]
            unseen = torch.zeros(len(chunk), max(map(len, chunk)), dtype=torch.bool)
            for r, ws in enumerate(chunk):
                unseen[r, : len(ws)] = torch.tensor([w.lower() not in known_words for w in ws])
            new = unseen.gather(1, enc["word_index"].clamp(min=0)) & labelled
            total_new += int(new.sum())
            right_new += int((hit & new).sum())
    model.train(was_training)
    result = {"accuracy": right / max(total, 1)}
    if known_words is not None:
        result["unseen_accuracy"] = right_new / max(total_new, 1)
        result["unseen_share"] = total_new / max(total, 1)
    return result


def finetune_tagger(
    start: nn.Module | BertConfig,
    tokenizer,
    train_items: Sequence[tuple[Sequence[str], Sequence[int]]],
    *,
    num_labels: int,
    steps: int,
    batch_size: int = 16,
    lr: float = 1e-4,
    dropout: float | None = None,
    eval_items: Sequence[tuple[Sequence[str], Sequence[int]]] | None = None,
    eval_every: int | None = None,
    seed: int = 0,
    device: torch.device | str | None = None,
    cache_name: str | None = None,
    progress: bool | None = None,
    freeze_body: bool = False,
) -> tuple[BertForTokenClassification, History]:
    """Fine-tune a tagger (:class:`~course_lib.models.bert.BertForTokenClassification`) on
    ``(words, tag ids)`` sentences; returns ``(tagger, history)``.

    ``start`` as in :func:`finetune_classifier`: a pretrained model (its encoder is copied)
    or a :class:`BertConfig` (random weights), with the same new layer and batch order for
    a given ``seed``. ``history.evals`` holds ``accuracy`` and ``unseen_accuracy`` on
    ``eval_items`` (unseen: words that never occur in ``train_items``). ``freeze_body``:
    train only the tagging layer on the frozen encoder (feature-based, ELMo's way).
    """
    words, tags = _split_tagged(train_items, "train_items")
    flat = [t for ts in tags for t in ts]
    _check_labels(min(flat), max(flat), num_labels, "tags")
    known = {w.lower() for ws in words for w in ws}

    def inputs(max_len: int) -> dict[str, Tensor]:
        enc = tagging_inputs(tokenizer, words, tags, max_len=max_len)
        del enc["word_index"]
        return enc

    def loss_fn(m: nn.Module, batch: Mapping[str, Tensor]):
        out = m(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"], labels=batch["labels"])
        labelled = batch["labels"] != IGNORE_INDEX
        acc = ((out.logits.argmax(-1) == batch["labels"]) & labelled).sum() / labelled.sum().clamp(min=1)
        return out.loss, {"train_accuracy": acc.item()}

    def eval_fn(m: nn.Module) -> dict[str, float]:
        r = tagging_accuracy(m, tokenizer, eval_items, known_words=known)
        return {"accuracy": r["accuracy"], "unseen_accuracy": r["unseen_accuracy"]}

    spec = dict(
        recipe="finetune_tagger",
        train=_digest([words, tags]),
        eval=_digest([list(map(list, it)) for it in eval_items or []]),
    )
    task = _Task(BertForTokenClassification, inputs, loss_fn, eval_fn if eval_items else None, spec)
    options = locals()
    return _finetune(task, start, tokenizer, **{k: options[k] for k in _FINETUNE_OPTIONS})


# ---------------------------------------------------------------------------------------
# Saving and loading a pretrained model (the command line's output)
# ---------------------------------------------------------------------------------------


def save_pretrained_bert(
    out_dir: Path | str, model: nn.Module, tokenizer, *, metadata: Mapping[str, Any] | None = None
) -> Path:
    """Write ``model.safetensors`` (+ ``model.json``), ``config.json`` and ``tokenizer.json``
    into ``out_dir``, each atomically. Returns the folder."""
    return save_model(out_dir, model, {"tokenizer.json": tokenizer.to_str()}, metadata=metadata)


def load_with_tokenizer(
    path: Path | str,
    command: str,
    *,
    default_architecture: str,
    expected: type[nn.Module] = nn.Module,
    device: torch.device | str | None = None,
) -> tuple[nn.Module, Any]:
    """``(model in eval mode, tokenizer)`` of a folder written by :func:`save_pretrained_bert`
    (or by any recipe's ``save_pretrained_*``): :func:`~course_lib.recipes.common.load_model`
    plus ``tokenizer.json``; ``command`` names what writes such folders."""
    model, folder = load_model(
        path,
        ("tokenizer.json",),
        command,
        default_architecture=default_architecture,
        expected=expected,
        device=device,
    )
    return model, Tokenizer.from_file(str(folder / "tokenizer.json"))


def data_spec(
    train_docs: Sequence[Any], held_docs: Sequence[Any], tokenizer, init: nn.Module | None
) -> dict[str, Any]:
    """The part of a recipe's cache key that every recipe shares: fingerprints of the training
    and held-out documents, of the tokenizer and of the starting weights."""
    return dict(
        documents=documents_fingerprint(train_docs),
        heldout=documents_fingerprint(held_docs) if held_docs else None,
        tokenizer=_tokenizer_fingerprint(tokenizer),
        init=weights_fingerprint(init) if init is not None else None,
    )


def load_pretrained_bert(
    path: Path | str, *, device: torch.device | str | None = None
) -> tuple[nn.Module, Any]:
    """Read what :func:`save_pretrained_bert` (or ``course train bert``) wrote:
    ``(model, tokenizer)``, eval mode."""
    return load_with_tokenizer(
        path, "course train bert", default_architecture="BertForPreTraining", device=device
    )


# ---------------------------------------------------------------------------------------
# Command line: course train bert
# ---------------------------------------------------------------------------------------


def _pair_arguments(args: argparse.Namespace) -> dict[str, Any]:
    """``pretrain_bert``'s ``model_class`` and ``pair_task`` from ``--architecture``,
    ``--pair-task`` and ``--no-nsp`` (``pair_task`` only when one of the last two is given;
    otherwise ``pretrain_bert`` takes the architecture's own pair task, or NSP)."""
    out: dict[str, Any] = {}
    if args.architecture is not None:
        out["model_class"] = registered_class(args.architecture)
    if args.no_nsp or (getattr(args, "causal", None) and args.pair_task is None):
        out["pair_task"] = None  # (a causal LM has no pair task)
    elif args.pair_task is not None:
        out["pair_task"] = None if args.pair_task == "none" else args.pair_task
    return out


def _cmd(args: argparse.Namespace) -> int:
    def train(documents: list, device: torch.device) -> PretrainedBert:
        return pretrain_bert(
            args.size,
            documents,
            masking=args.masking,
            static_copies=args.static_copies,
            nsp_unit=args.pair_unit,
            row_unit=args.row_unit,
            causal=args.causal is not None,
            direction=(args.causal or "left-to-right").replace("-", "_"),
            tokenizer_kind=args.tokenizer,
            heldout=getattr(args, "heldout", 0.05) or None,  # --heldout 0: none
            mlm_probability=getattr(args, "mask_rate", None) or 0.15,
            device=device,
            **_pair_arguments(args),
            **training_arguments(args),
        )

    def summary(model: nn.Module, tokenizer, history: History, device: torch.device, seconds: float) -> str:
        bert = type(model) in (BertForPreTraining, BertForMaskedLM)
        return (
            f"pretrained a {args.size} {'BERT' if bert else type(model).__name__} "
            f"({model.num_parameters() / 1e6:.1f}M parameters, vocabulary "
            f"{tokenizer.get_vocab_size()}) "
            f"for {len(history.loss)} steps on {device.type} in {seconds:.0f} s; final training loss "
            f"{history.loss[-1]:.3f}"
        )

    return run_recipe(
        args,
        "pretrain-bert",
        read_text=lambda: load_documents(args.text, n_docs=args.n_docs, seed=args.seed),
        train=train,
        save=save_pretrained_bert,
        summary=summary,
        held_back="documents",
        loader="course_lib.recipes.bert.load_pretrained_bert",
    )


def _options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--tokenizer", choices=["wordpiece", "byte-bpe"], default="wordpiece", help="default wordpiece (BERT)"
    )
    p.add_argument(
        "--masking",
        choices=["static", "dynamic"],
        default="static",
        help="default static, as pretrain_bert and BERT's preprocessing (roberta masks dynamically)",
    )
    p.add_argument(
        "--static-copies",
        type=positive(int),
        default=1,
        help="masked copies for static masking (BERT used 10)",
    )
    pair = p.add_mutually_exclusive_group()
    pair.add_argument(
        "--pair-task",
        choices=["nsp", "sop", "none"],
        default=None,
        help="sentence-pair objective besides the masked LM: nsp (BERT's next sentence), sop (ALBERT's "
        "sentence order; needs a registered SOP model) or none (masked LM only, on full-sentence blocks, "
        "RoBERTa); default: the --architecture's own, else nsp",
    )
    pair.add_argument(
        "--no-nsp", action="store_true", help="masked LM only, on full-sentence blocks (= --pair-task none)"
    )
    p.add_argument(
        "--pair-unit",
        choices=["sentence", "segment"],
        default="sentence",
        help="A and B of a pair are single sentences (default) or segments of consecutive sentences "
        "up to half of --max-len each (as in the BERT and ALBERT papers)",
    )
    p.add_argument(
        "--row-unit",
        choices=list(ROW_UNITS),
        default="block",
        help="without a pair task (--no-nsp, --causal): full-sentence blocks of --max-len tokens "
        "(default, RoBERTa) or one sentence per row",
    )
    p.add_argument(
        "--architecture",
        default=None,
        metavar="CLASS",
        help="registered model class to train, e.g. BertForPreTraining, BertForMaskedLM, "
        "AlbertForPreTraining (default: BertForPreTraining with nsp, BertForMaskedLM with none, the "
        "registered SOP model with sop)",
    )
    p.add_argument(
        "--causal",
        choices=["left-to-right", "right-to-left"],
        default=None,
        help="train the same network as an autoregressive LM instead (BertLMHeadModel: causal attention, "
        "next-token loss, no masking, full-sentence blocks, no pair task) reading in this direction; "
        "stored in model.json's recipe",
    )
    p.add_argument(
        "--n-docs", type=positive(int), default=2000, help="generated documents when no --text is given"
    )


def register(sub) -> None:
    """Add ``course train bert`` to the ``course`` command."""
    add_recipe_command(
        sub,
        "pretrain-bert",
        help="pretrain a BERT (MLM + NSP) or another BERT-family model (e.g. MLM + SOP) on your text "
        "or the generated corpus",
        description="Pretrain a BERT from scratch with the course's recipe (course_lib.recipes.bert) "
        "and save "
        "model.safetensors, config.json and tokenizer.json in --out. Documents are separated by blank lines.",
        out_help="folder for the model, its config and tokenizer",
        training=TrainingOptions(
            sizes=sorted(SIZES),
            size_help="model shape (default small; base-like = BERT-base)",
            steps=2000,
            batch_size=64,
            batch_unit="sequences",
            max_len=128,
            max_len_help="tokens per sequence",
            vocab_size=8000,
            vocab_help="tokenizer vocabulary",
        ),
        options=_options,
        run=_cmd,
    )


def main(argv: list[str] | None = None) -> int:
    """``python -m course_lib.recipes.bert ...``: the same as ``course train bert ...``."""
    return module_main(register, "pretrain-bert", "course_lib.recipes.bert", argv)


if __name__ == "__main__":
    sys.exit(main())
