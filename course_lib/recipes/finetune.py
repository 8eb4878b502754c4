r"""Fine-tuning (Devlin et al. 2019, §3.2): a sentence classifier and a word tagger on a
pretrained encoder, or on a random one with the same seed, data and steps.

A classifier reads the pooled ``[CLS]`` vector,
:math:`p(y \mid x) = \mathrm{softmax}(W \tanh(W_p h_{[CLS]} + b_p) + b)`, and every weight is
trained on the labelled task. Starting the encoder from pretrained weights instead of random
ones is the whole point of pretraining; :func:`finetune_classifier` does both, with the same
seed, data and steps, so the difference is the pretraining alone. :func:`finetune_tagger` does
the same for one label per word; with ``freeze_body=True`` (the feature-based approach) its
linear layer reads the frozen encoder's last layer, ELMo's scalar mix of every layer, or a
BiLSTM over the top layers (``features``, :data:`FEATURES`). The helpers
(:func:`start_model`, :func:`shuffled_batches`, :func:`split_tagged`, :func:`check_labels`)
serve the distillation recipes too.

The start's family chooses the task model (:data:`FAMILIES`): the BERT family's classifiers and
tagger, or XLNet's tagger (:class:`~course_lib.models.xlnet.XLNetForTokenClassification`) on
the same inputs (``[CLS] ... [SEP]``, one segment; XLNet's relative segment term then adds the
same score to every key and changes nothing).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any, NamedTuple

import torch
from torch import Tensor, nn

from ..data import encode_texts
from ..device import get_device, seed_everything
from ..models.albert import AlbertConfig, AlbertForSequenceClassification
from ..models.base import WithBody
from ..models.bert import BertConfig, BertForSequenceClassification, BertForTokenClassification
from ..models.elmo import ScalarMix
from ..models.hf import BertModelOutput
from ..models.xlnet import XLNetConfig, XLNetForTokenClassification
from ..objectives import IGNORE_INDEX, tagging_inputs, trim_padding
from ..train import History, fit, model_device
from .common import fingerprint, require_positive, tokenizer_fingerprint, train_cached, weights_fingerprint

__all__ = [
    "Family",
    "FAMILIES",
    "family_of",
    "input_length",
    "classification_inputs",
    "split_labelled",
    "classification_accuracy",
    "start_model",
    "shuffled_batches",
    "check_labels",
    "finetune_classifier",
    "split_tagged",
    "tagging_accuracy",
    "FEATURES",
    "TOP_LAYERS",
    "ScalarMixTagger",
    "TopLayersBiLSTMTagger",
    "finetune_tagger",
]


class Family(NamedTuple):
    """What the fine-tuning recipes need to know of a model family."""

    name: str
    config_class: type  # a start given as this config (or a subclass) is a random start of the family
    classifier: type | None  # finetune_classifier's model (None: not implemented for the family)
    tagger: type | None  # finetune_tagger's model
    body_dropout: tuple[str, ...]  # the config's dropouts inside the body, the first the rate on its states


# most specific first (ALBERT's and RoBERTa's configs are BertConfigs)
FAMILIES: tuple[Family, ...] = (
    Family(
        "ALBERT",
        AlbertConfig,
        AlbertForSequenceClassification,
        None,
        ("hidden_dropout_prob", "attention_probs_dropout_prob"),
    ),
    Family(
        "BERT",
        BertConfig,
        BertForSequenceClassification,
        BertForTokenClassification,
        ("hidden_dropout_prob", "attention_probs_dropout_prob"),
    ),
    Family("XLNet", XLNetConfig, None, XLNetForTokenClassification, ("dropout",)),
)

# the longest input of a model without a position table (XLNet's relative positions): XLNet's
# pretraining length (Yang et al. 2019, §3.1)
RELATIVE_MAX_LEN = 512


def _start_body(start: nn.Module) -> nn.Module:
    """The pretrained body of ``start``: ``start`` itself when it is a body (the ``model_class``
    of a task model in :data:`FAMILIES`), else its ``base``."""
    bodies = tuple({m.model_class for f in FAMILIES for m in (f.classifier, f.tagger) if m is not None})
    if isinstance(start, bodies):
        return start
    if isinstance(start, WithBody) and isinstance(start.base, bodies):
        return start.base
    configs = ", ".join(f.config_class.__name__ for f in FAMILIES)
    raise TypeError(
        f"fine-tuning starts from a pretrained BERT-family or XLNet model (a body, or a model with one) "
        f"or from a config ({configs}), got {type(start).__name__}"
    )


def _start_config(start: nn.Module | BertConfig | XLNetConfig):
    return _start_body(start).config if isinstance(start, nn.Module) else start


def family_of(start: nn.Module | BertConfig | XLNetConfig) -> Family:
    """The :data:`FAMILIES` entry of a fine-tuning start (a pretrained model or a config);
    ``TypeError`` for anything else."""
    config = _start_config(start)
    family = next((f for f in FAMILIES if isinstance(config, f.config_class)), None)
    if family is None:
        raise TypeError(
            f"fine-tuning starts from a pretrained model or a config of "
            f"{', '.join(f.config_class.__name__ for f in FAMILIES)}, got {type(start).__name__}"
        )
    return family


def _task_model(start: nn.Module | BertConfig | XLNetConfig, task: str) -> type:
    """The family's model for ``task`` (``"tagger"`` or ``"classifier"``); ``TypeError`` if none."""
    family = family_of(start)
    model_cls = getattr(family, task)
    if model_cls is None:
        have = [f.name for f in FAMILIES if getattr(f, task) is not None]
        raise TypeError(f"the course has no {family.name} {task}; fine-tuning a {task} starts from {have}")
    return model_cls


def input_length(config) -> int:
    """The longest input of a model: its position table's (the BERT family's ``max_len``), or
    :data:`RELATIVE_MAX_LEN` for a model with relative positions only (XLNet)."""
    return getattr(config, "max_len", RELATIVE_MAX_LEN)


def classification_inputs(
    tokenizer, texts: Sequence[str], pairs: Sequence[str] | None = None, *, max_len: int = 128
) -> dict[str, Tensor]:
    """``[CLS] text [SEP]`` (or a pair) for every text: ``input_ids``, ``token_type_ids``,
    ``attention_mask`` (1 = real token), right-padded, truncated to ``max_len``."""
    enc = encode_texts(tokenizer, list(texts), None if pairs is None else list(pairs), max_len=max_len)
    enc["attention_mask"] = enc["attention_mask"].long()
    return enc


def split_labelled(items: Sequence[tuple[Any, int]], what: str) -> tuple[list[str], Tensor, list[str] | None]:
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
    texts, labels, seconds = split_labelled(items, "items")
    device = model_device(model)
    max_len = max_len or input_length(model.config)
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


def start_model(
    start: nn.Module | BertConfig | XLNetConfig, model_cls: type, seed: int, device, **config_changes: Any
) -> tuple[nn.Module, nn.Module | None]:
    """A fine-tuning model of ``model_cls``: its new layers from ``seed``, its encoder copied
    from ``start`` (the pooler too when both have one) or random when ``start`` is a config.
    The configuration is the start's with ``config_changes``, in ``model_cls.config_class``
    when the start's lacks the task's fields (XLNet's pretraining config)."""
    if isinstance(start, nn.Module):
        body = _start_body(start)
        if type(body) is not model_cls.model_class:
            raise TypeError(
                f"{model_cls.__name__} starts from a {model_cls.model_class.__name__} body, got "
                f"{type(start).__name__}"
            )
        config = body.config
    else:
        config, body = start, None
    if isinstance(config, model_cls.config_class):
        config = replace(config, **config_changes)
    else:  # e.g. XLNetConfig -> XLNetTaskConfig
        config = model_cls.config_class(**{**config.to_dict(), **config_changes})
    device = (
        (model_device(body) if body is not None else get_device()) if device is None else torch.device(device)
    )
    seed_everything(seed)
    model = model_cls(config)  # new layers (and a scratch body) from the seed
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

    model_class: type  # the task model: BertForSequenceClassification, XLNetForTokenClassification, ...
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
    start: nn.Module | BertConfig | XLNetConfig,
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
    (:func:`start_model`), then ``steps`` batches of ``batch_size`` rows of ``task.inputs`` in
    an order drawn from ``seed`` (reshuffled each epoch, the remainder carried over), trained
    with :func:`~course_lib.train.fit`; cached under ``cache_name``. Returns ``(model, history)``.

    ``freeze_body``: the *feature-based* approach (ELMo's): the encoder's weights stay as
    they are (no gradient, no dropout inside it: the family's ``body_dropout`` set to 0) and
    only the new layer on top is trained, with the body's dropout rate (or ``dropout``) before
    it."""
    require_positive(steps=steps, batch_size=batch_size)
    changes: dict[str, Any] = dict(num_labels=num_labels, classifier_dropout=dropout)
    if freeze_body:
        inside = family_of(start).body_dropout
        rate = getattr(_start_config(start), inside[0])
        changes.update(
            {name: 0.0 for name in inside}, classifier_dropout=rate if dropout is None else dropout
        )
    model, body = start_model(start, task.model_class, seed, device, **changes)
    if freeze_body:
        model.base.requires_grad_(False)
    batch_at = shuffled_batches(task.inputs(input_length(model.config)), batch_size, seed)

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
            tokenizer=tokenizer_fingerprint(tokenizer),
            steps=steps,
            batch_size=batch_size,
            lr=lr,
            seed=seed,
            eval_every=eval_every,
            **({"freeze_body": True} if freeze_body else {}),
        )

    return model, train_cached(cache_name, model, spec, train)


def check_labels(low: int, high: int, num_labels: int, what: str) -> None:
    if low < 0 or high >= num_labels:
        raise ValueError(f"{what} must lie in [0, num_labels={num_labels}), got values in [{low}, {high}]")


def _digest(obj: Any) -> str:
    return fingerprint([json.dumps(obj).encode()])


def finetune_classifier(
    start: nn.Module | BertConfig | XLNetConfig,
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
) -> tuple[nn.Module, History]:
    """Fine-tune a sentence classifier on ``(text, label)`` items; returns ``(classifier, history)``.

    ``start`` is a pretrained model (``BertModel`` or any model with a ``.bert`` body: its
    encoder weights are copied, the pooler too when it has one) or a :class:`BertConfig`
    (random weights: training from scratch); an ALBERT start gets ALBERT's classifier, an
    XLNet start is refused (the course has no XLNet sentence classifier). Either way the
    classifier layer is initialised from ``seed`` and the batches come in the same order, so
    two calls that differ only in ``start`` isolate the effect of pretraining.
    ``history.evals["accuracy"]`` is the accuracy on ``eval_items``. An item's text may be a
    pair ``(a, b)``: the input is then ``[CLS] a [SEP] b [SEP]`` with segment ids 0/1.
    ``freeze_body``: train only the classifier on the frozen encoder (feature-based), see
    :func:`_finetune`.
    """
    texts, labels, seconds = split_labelled(train_items, "train_items")
    check_labels(int(labels.min()), int(labels.max()), num_labels, "labels")

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
    task = _Task(_task_model(start, "classifier"), inputs, loss_fn, eval_fn if eval_items else None, spec)
    options = locals()
    return _finetune(task, start, tokenizer, **{k: options[k] for k in _FINETUNE_OPTIONS})


def split_tagged(
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
    """Share of words tagged right (each word judged at its first piece), over the words that
    have one within the model's length, and that share of all words (``"tagged_share"``: a
    word the tokenizer gives no piece, or one cut off, has no tag; ``accuracy * tagged_share``
    counts those as wrong); with ``known_words`` also the accuracy on the words outside that
    set (``"unseen_accuracy"``: the words the tagger never saw labelled) and their share
    (``"unseen_share"``)."""
    words, tags = split_tagged(items, "items")
    device = model_device(model)
    was_training = model.training
    model.eval()
    right, total, right_new, total_new, every = 0, 0, 0, 0, 0
    for i in range(0, len(words), batch_size):
        enc = tagging_inputs(
            tokenizer, words[i : i + batch_size], tags[i : i + batch_size], max_len=input_length(model.config)
        )
        inputs = {k: enc[k].to(device) for k in ("input_ids", "attention_mask", "token_type_ids")}
        logits = model(**inputs).logits  # by keyword: XLNet's third positional argument is mems
        labelled = enc["labels"] != IGNORE_INDEX
        hit = (logits.argmax(-1).cpu() == enc["labels"]) & labelled
        right += int(hit.sum())
        total += int(labelled.sum())
        every += sum(len(ws) for ws in words[i : i + batch_size])
        if known_words is not None:  # [sentence, word] unseen flags, read at each labelled position
            chunk = words[i : i + batch_size]
            unseen = torch.zeros(len(chunk), max(map(len, chunk)), dtype=torch.bool)
            for r, ws in enumerate(chunk):
                unseen[r, : len(ws)] = torch.tensor([w.lower() not in known_words for w in ws])
            new = unseen.gather(1, enc["word_index"].clamp(min=0)) & labelled
            total_new += int(new.sum())
            right_new += int((hit & new).sum())
    model.train(was_training)
    result = {"accuracy": right / max(total, 1), "tagged_share": total / max(every, 1)}
    if known_words is not None:
        result["unseen_accuracy"] = right_new / max(total_new, 1)
        result["unseen_share"] = total_new / max(total, 1)
    return result


# The feature-based taggers (ELMo, Peters et al. 2018, §3.3; BERT, Devlin et al. 2019, §5.3):
# what a frozen encoder hands to the task model. "last": its last layer (the fine-tuned
# tagger's input); "scalar_mix": ELMo's learned softmax-weighted sum of every hidden state
# (the embeddings' output and each layer) times a learned gamma; "top_bilstm": BERT's
# feature-based arm, a BiLSTM over the concatenated top TOP_LAYERS hidden states. Each ends in
# the fine-tuned tagger's own dropout and linear layer, initialised from the same seed.
FEATURES = ("last", "scalar_mix", "top_bilstm")
TOP_LAYERS = 4  # the paper's best feature-based arm concatenates the last four hidden layers


class _FeatureTagger(BertForTokenClassification):
    """A :class:`BertForTokenClassification` whose linear layer reads features made from all
    the body's hidden states (:meth:`combine`) instead of its last layer. The extra layers
    are built after the tagger's own, without drawing random numbers before them, so the
    linear layer starts from the same weights as the fine-tuned tagger's for a given seed."""

    reads_hidden_states = True

    def __init__(self, config: BertConfig):
        super().__init__(config)
        self.build_features(config)

    def build_features(self, config: BertConfig) -> None:
        raise NotImplementedError

    def combine(self, hidden_states: Sequence[Tensor], attention_mask: Tensor) -> Tensor:
        """``[batch, seq, hidden]`` from the body's ``hidden_states`` (embeddings first)."""
        raise NotImplementedError

    def features(self, out: BertModelOutput, attention_mask: Tensor | None) -> BertModelOutput:
        # the tagger's own head (dropout, linear layer, loss) then reads the new features
        hidden = out.last_hidden_state
        mask = torch.ones(hidden.shape[:2], dtype=torch.long, device=hidden.device)
        mixed = self.combine(out.hidden_states, mask if attention_mask is None else attention_mask)
        return BertModelOutput(
            last_hidden_state=mixed, hidden_states=out.hidden_states, attentions=out.attentions
        )


class ScalarMixTagger(_FeatureTagger):
    r"""ELMo's way of using a frozen encoder: :math:`\gamma \sum_j \mathrm{softmax}(w)_j h_j`
    over every hidden state (embeddings' output and each layer, :class:`ScalarMix`, :math:`w`
    from 0 and :math:`\gamma` from 1), then the fine-tuned tagger's dropout and linear layer."""

    def build_features(self, config: BertConfig) -> None:
        self.scalar_mix = ScalarMix(config.num_hidden_layers + 1)

    def combine(self, hidden_states: Sequence[Tensor], attention_mask: Tensor) -> Tensor:
        return self.scalar_mix(list(hidden_states))


class TopLayersBiLSTMTagger(_FeatureTagger):
    """BERT's feature-based arm (Devlin et al. 2019, §5.3, at a small size): the top
    :data:`TOP_LAYERS` hidden states (all of them when the encoder has fewer) concatenated,
    a one-layer BiLSTM of ``hidden_size // 2`` units each way over the real tokens, then the
    fine-tuned tagger's dropout and linear layer (PyTorch's default LSTM initialisation)."""

    def build_features(self, config: BertConfig) -> None:
        self.top = min(TOP_LAYERS, config.num_hidden_layers + 1)
        self.lstm = nn.LSTM(
            self.top * config.hidden_size, config.hidden_size // 2, batch_first=True, bidirectional=True
        )

    def combine(self, hidden_states: Sequence[Tensor], attention_mask: Tensor) -> Tensor:
        x = torch.cat(list(hidden_states[-self.top :]), dim=-1)
        lengths = attention_mask.sum(1).clamp(min=1).cpu()
        packed = nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        y, _ = self.lstm(packed)
        y, _ = nn.utils.rnn.pad_packed_sequence(y, batch_first=True, total_length=x.size(1))
        return y


_FEATURE_TAGGERS = {"scalar_mix": ScalarMixTagger, "top_bilstm": TopLayersBiLSTMTagger}


def _tagger_class(start: nn.Module | BertConfig | XLNetConfig, features: str) -> type:
    """The start family's tagger for ``features="last"``, else a feature-based BERT tagger."""
    tagger = _task_model(start, "tagger")
    if features == "last":
        return tagger
    if tagger is not BertForTokenClassification:
        raise TypeError(
            f"features={features!r} builds on BERT's tagger; an {family_of(start).name} start takes "
            "features='last' only"
        )
    return _FEATURE_TAGGERS[features]


def finetune_tagger(
    start: nn.Module | BertConfig | XLNetConfig,
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
    features: str = "last",
) -> tuple[nn.Module, History]:
    """Fine-tune a tagger on ``(words, tag ids)`` sentences; returns ``(tagger, history)``.

    ``start`` as in :func:`finetune_classifier`: a pretrained model (its encoder is copied)
    or a config (random weights), with the same new layer and batch order for a given
    ``seed``. The start's family chooses the tagger: BERT's
    (:class:`~course_lib.models.bert.BertForTokenClassification`) for a ``BertModel`` (or a
    model with one, or a :class:`BertConfig`), XLNet's
    (:class:`~course_lib.models.xlnet.XLNetForTokenClassification`) for an ``XLNetModel`` (an
    ``XLNetLMHeadModel``, or an :class:`XLNetConfig`); XLNet reads the same inputs, cut at
    :data:`RELATIVE_MAX_LEN` pieces, and ``dropout`` adds a dropout before its classifier (its
    body's own output dropout stays). ``history.evals`` holds ``accuracy`` and
    ``unseen_accuracy`` on ``eval_items`` (unseen: words that never occur in ``train_items``).
    ``freeze_body``: train only the tagging layer on the frozen encoder (feature-based, ELMo's
    way). ``features`` (with ``freeze_body=True`` and a BERT-family start only) says what the
    frozen encoder hands to that layer (:data:`FEATURES`): ``"last"`` its last layer (as when
    fine-tuning), ``"scalar_mix"`` ELMo's learned mix of every hidden state
    (:class:`ScalarMixTagger`), ``"top_bilstm"`` a BiLSTM over the top layers
    (:class:`TopLayersBiLSTMTagger`, BERT's feature-based arm).
    """
    if features not in FEATURES:
        raise ValueError(f"features must be one of {', '.join(map(repr, FEATURES))}, got {features!r}")
    if features != "last" and not freeze_body:
        raise ValueError(
            f"features={features!r} is a feature-based tagger: it needs freeze_body=True (a fine-tuned "
            "tagger reads the last layer)"
        )
    words, tags = split_tagged(train_items, "train_items")
    flat = [t for ts in tags for t in ts]
    check_labels(min(flat), max(flat), num_labels, "tags")
    known = {w.lower() for ws in words for w in ws}

    def inputs(max_len: int) -> dict[str, Tensor]:
        enc = tagging_inputs(tokenizer, words, tags, max_len=max_len)
        del enc["word_index"]
        return enc

    def loss_fn(m: nn.Module, batch: Mapping[str, Tensor]):
        out = m(  # by keyword: XLNet's third positional argument is mems
            input_ids=batch["input_ids"],
            attention_mask=batch["attention_mask"],
            token_type_ids=batch["token_type_ids"],
            labels=batch["labels"],
        )
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
        **({"features": features} if features != "last" else {}),
    )
    task = _Task(_tagger_class(start, features), inputs, loss_fn, eval_fn if eval_items else None, spec)
    options = locals()
    return _finetune(task, start, tokenizer, **{k: options[k] for k in _FINETUNE_OPTIONS})
