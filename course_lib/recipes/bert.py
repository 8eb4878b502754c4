r"""Pretraining BERT: the recipe the chapter runs and ``course train bert`` runs.

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

The data are prepared by :mod:`course_lib.data.documents` (tokenizer, documents as token
ids) and :mod:`course_lib.objectives.pretraining` (pairs or blocks, the masker, the held-out
metrics); fine-tuning is :mod:`course_lib.recipes.finetune`; sizes, learning rates and model
folders are shared with every recipe (:mod:`course_lib.recipes.common`).

The command line (``course train bert|roberta|albert|causal``) is
:mod:`course_lib.recipes.bert_command`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from functools import partial
from typing import Any

import torch
from torch import Tensor, nn

from ..data import load_documents, special_ids
from ..data.documents import sentence_texts, split_documents, train_tokenizer
from ..device import get_device
from ..models.albert import AlbertConfig
from ..models.bert import BertConfig, BertForMaskedLM, BertForPreTraining, BertLMHeadModel
from ..objectives import MaskedLMData, causal_lm_loss, pretraining_loss, reverse_sequences
from ..objectives.masking import MLM_PROBABILITY
from ..objectives.pretraining import (
    check_pair_task,
    check_row_unit,
    evaluate_causal_lm,
    evaluate_mlm,
    pretraining_data,
    pretraining_examples,
)
from ..train import History, fit
from .common import (
    BERT_NAMES,
    DEFAULT_LR,
    MODEL_CLASSES,
    PretrainedModel,
    RecipeInputs,
    new_model,
    registered_class,
    require_positive,
    sized,
    train_pretrained,
)

__all__ = ["CAUSAL_DIRECTIONS", "bert_config", "pretrain", "pretrain_bert"]

CAUSAL_DIRECTIONS = ("left_to_right", "right_to_left")  # the two orders of a causal LM's product rule


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
    (:data:`~course_lib.recipes.common.SIZES`) for a tokenizer of ``vocab_size`` tokens:
    ``max_len`` positions, ``pad_token_id=pad_id``, ``dropout`` on the hidden states and the
    attention weights, then ``overrides`` (Hugging Face's field names). An ALBERT config's
    ``embedding_size`` defaults to ``min(128, hidden_size // 4)``: the course's sizes keep
    ALBERT's factorisation (32 for the chapter's 128, ALBERT-base's 128 from 512 on)."""
    shape = sized(size, BERT_NAMES)
    fields = dict(
        vocab_size=vocab_size,
        **shape,
        max_position_embeddings=max_len,
        pad_token_id=pad_id,
        hidden_dropout_prob=dropout,
        attention_probs_dropout_prob=dropout,
    )
    if issubclass(config_class, AlbertConfig):
        fields["embedding_size"] = max(1, min(128, shape["hidden_size"] // 4))
    return config_class(**{**fields, **overrides})


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


def _check_options(
    *,
    steps: int,
    batch_size: int,
    max_len: int,
    pair_task: str | None,
    row_unit: str,
    causal: bool,
    direction: str,
    masking: str,
    model_class: type[nn.Module] | None,
) -> tuple[str | None, str, type[nn.Module]]:
    """:func:`pretrain_bert`'s options checked together (``ValueError`` naming the first that
    does not fit): ``(pair task, masking, model class)``, with ``"auto"``, the causal LM's
    masking (``"none"``) and the default class resolved."""
    require_positive(steps=steps, batch_size=batch_size)
    if max_len < 8:
        raise ValueError(f"max_len={max_len} is too short for [CLS] A [SEP] B [SEP]; use at least 8")
    if pair_task == "auto":
        pair_task = getattr(model_class, "pair_objective", None) if model_class is not None else "nsp"
    pair_task = check_pair_task(pair_task)
    if causal and pair_task is not None:
        raise ValueError("causal=True trains a left-to-right LM on full-sentence blocks: pass pair_task=None")
    check_row_unit(row_unit, pair_task)
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
    return pair_task, masking, model_class


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
    mlm_probability: float = MLM_PROBABILITY,
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
) -> PretrainedModel:
    """Pretrain a BERT from scratch on ``documents``; returns ``(model, tokenizer, history)``.

    Args:
        config: a :class:`BertConfig`, or a size name of
            :data:`~course_lib.recipes.common.SIZES` (``"small"``, ``"base-like"``, ...). Its
            ``vocab_size``, ``pad_token_id`` and ``max_position_embeddings`` are set from the
            tokenizer and ``max_len``.
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
    pair_task, masking, model_class = _check_options(
        steps=steps,
        batch_size=batch_size,
        max_len=max_len,
        pair_task=pair_task,
        row_unit=row_unit,
        causal=causal,
        direction=direction,
        masking=masking,
        model_class=model_class,
    )
    train_docs, held_docs = split_documents(documents, heldout)
    if pair_task == "nsp" and sum(1 for d in train_docs if sentence_texts(d)) < 2:
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
    masks = dict(masking=masking, static_copies=static_copies, mlm_probability=mlm_probability)
    data = pretraining_data(examples, tokenizer, **masks, batch_size=batch_size, seed=seed)
    held = None
    if held_docs:
        held = pretraining_examples(held_docs, tokenizer, **pairs, seed=seed + 1)
        if direction == "right_to_left":
            held = reverse_sequences(held)
    # the held-out evaluation (none without held-out documents)
    if held is None:
        eval_fn = None
    elif causal:
        eval_fn = partial(evaluate_causal_lm, examples=held)
    else:
        eval_fn = partial(evaluate_mlm, examples=held, masker=data.masker, seed=seed)

    model = new_model(model_class, config, seed=seed, device=device, init=init)

    def train(m: nn.Module) -> History:
        return pretrain(
            m,
            data,
            steps=steps,
            lr=lr,
            eval_fn=eval_fn,
            eval_every=eval_every,
            progress=progress,
            desc=f"{direction.replace('_', '-')} LM pretraining"
            if causal
            else f"BERT pretraining ({masking} masking)",
            loss_fn=causal_lm_loss if causal else pretraining_loss,
        )

    # the cache key: every option that decides the model, always (no conditional keys)
    loop = dict(steps=steps, batch_size=batch_size, lr=lr, seed=seed, eval_every=eval_every)
    objective = dict(architecture=model_class.__name__, causal=causal, direction=direction)
    options = {**loop, **pairs, **masks, **objective}
    inputs = RecipeInputs(train_docs, held_docs, tokenizer, init)
    return train_pretrained("pretrain_bert", model, train, options, inputs, cache_name=cache_name)
