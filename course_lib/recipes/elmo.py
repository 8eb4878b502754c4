r"""Pretraining ELMo's biLM: the recipe chapter 1 runs and ``course train elmo`` runs.

One set of functions serves three users: chapter 1 (a small biLM on the generated corpus, on
a CPU, inside :func:`~course_lib.checkpoints.train_or_load`), a reader with their own text
(``course train elmo --text 'books/*.txt' --steps 20000 --device cuda --out elmo/``), and the
tests (a tiny model for a few steps).

**Data.** Every sentence is wrapped in ``<S> ... </S>`` and stored once as indices into a
table of word spellings (:class:`ElmoLMData`): the character ids of a batch are a lookup in
that table, so batching costs no Python loop over words. The softmax vocabulary is the
``vocab_size`` most frequent words (:func:`build_vocab`); rarer words are still *read* from
their characters, but are predicted as ``<unk>``. Batches hold sentences of similar length
(less padding for the LSTMs to run over).

**Objective.** The forward LM predicts word :math:`k+1` from words :math:`\le k`, the
backward LM predicts word :math:`k-1` from words :math:`\ge k`; the loss is the mean of the
two directions' cross-entropies (:meth:`~course_lib.models.elmo.ElmoLanguageModel.lm_loss`):

.. math::

    \mathcal{L} = \tfrac12\Big(-\tfrac1N\sum_k \log p(t_{k+1} \mid t_{\le k})
    \;-\; \tfrac1N\sum_k \log p(t_{k-1} \mid t_{\ge k})\Big).

Held-out sentences are scored at the end (and every ``eval_every`` steps): both directions'
losses, and the forward loss with the future really deleted (``prefix_forward_loss``), which
is equal for an honest model and far worse for the naive "seeing itself" one.

Command line::

    course train elmo [--text PATH_OR_GLOB] [--steps N] [--size small] [--device cuda] --out DIR

writes ``DIR/model.safetensors`` (+ ``model.json`` with the training history),
``DIR/config.json`` and ``DIR/vocab.json``; :func:`load_pretrained_elmo` reads them back.
Without ``--text`` (and without ``$COURSE_TEXT``) it trains on the generated corpus, with the
same settings as chapter 1, so ``course train elmo --out DIR`` regenerates the chapter's
model; ``OMP_NUM_THREADS=1 course train elmo --device cpu --out DIR`` (one thread, as the
chapter runs on a CPU) gives the same weights bit for bit, on the same machine and torch version.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, NamedTuple

import torch
from torch import Tensor

from ..data import WordVocab, load_sentences
from ..data.chars import BOS_TOKEN, EOS_TOKEN, MAX_CHARS_PER_TOKEN, words_to_char_ids
from ..device import get_device, seed_everything
from ..models.elmo import ElmoConfig, ElmoLanguageModel
from ..objectives.losses import elmo_lm_loss
from ..train import History, fit, model_device, to_device
from .common import (
    TrainingOptions,
    add_recipe_command,
    fingerprint,
    load_model,
    module_main,
    positive,
    register_model,
    require_positive,
    run_recipe,
    save_model,
    train_cached,
    training_arguments,
)

register_model(ElmoLanguageModel)  # the class the ELMo recipe builds, saves and loads

__all__ = [
    "SIZES",
    "DEFAULT_LR",
    "CHAPTER",
    "elmo_config",
    "build_vocab",
    "ElmoLMData",
    "random_word_sampler",
    "evaluate_lm",
    "train_elmo",
    "NaiveComparison",
    "compare_naive_bidirectional",
    "PretrainedElmo",
    "pretrain_elmo",
    "sentences_fingerprint",
    "save_pretrained_elmo",
    "load_pretrained_elmo",
    "register",
    "main",
]

# Model shapes by name (the softmax vocabulary is set from the data). "small" is chapter 1's.
SIZES: dict[str, dict[str, Any]] = {
    # tests: milliseconds per step
    "tiny": dict(
        char_embed_dim=8, filters=((1, 8), (2, 8), (3, 16)), n_highway=1, projection_dim=32, lstm_cell_dim=64
    ),
    # chapter 1, on two CPU cores
    "small": dict(
        char_embed_dim=16,
        filters=((1, 32), (2, 32), (3, 64), (4, 64), (5, 64)),
        n_highway=1,
        projection_dim=128,
        lstm_cell_dim=256,
    ),
    # ElmoConfig()'s defaults: a few minutes on a CPU
    "medium": dict(),
    # allennlp's released shapes (a GPU; "original" is the paper's 93.6M model)
    "allennlp-small": dict(
        filters=((1, 32), (2, 32), (3, 64), (4, 128), (5, 256), (6, 512), (7, 1024)),
        n_highway=1,
        projection_dim=128,
        lstm_cell_dim=1024,
    ),
    "original": dict(
        filters=((1, 32), (2, 32), (3, 64), (4, 128), (5, 256), (6, 512), (7, 1024)),
        n_highway=2,
        projection_dim=512,
        lstm_cell_dim=4096,
    ),
}
DEFAULT_LR = {
    "tiny": 1e-2,
    "small": 5e-3,
    "medium": 3e-3,
    "allennlp-small": 1e-3,
    "original": 5e-4,
}  # peak AdamW rates

# What chapter 1 trains; the defaults of `course train elmo`.
CHAPTER: dict[str, Any] = dict(
    size="small", n_sentences=20_000, vocab_size=8000, steps=400, batch_size=32, seed=0
)


def elmo_config(size: str = "small", *, vocab_size: int, **overrides: Any) -> ElmoConfig:
    """An :class:`ElmoConfig` of a named size (:data:`SIZES`) with a softmax over ``vocab_size`` words."""
    if size not in SIZES:
        raise ValueError(f"unknown size {size!r}; choose one of {sorted(SIZES)}")
    return ElmoConfig(**{**SIZES[size], "vocab_size": vocab_size, **overrides})


def _tokens(sentence: Any) -> Sequence[str]:
    if isinstance(sentence, str):
        raise ValueError(
            "sentences must be token lists or Sentence objects, got a str: split it with word_tokenize first"
        )
    return sentence.tokens if hasattr(sentence, "tokens") else sentence


def build_vocab(sentences: Sequence[Any], *, vocab_size: int = 8000, min_count: int = 1):
    """The LM's softmax vocabulary: ``<pad> <unk> <S> </S>``, then the most frequent words.

    ``vocab_size`` counts the 4 specials; words outside it are predicted as ``<unk>``.
    Returns a :class:`~course_lib.data.WordVocab`.
    """
    if vocab_size <= len(WordVocab.SPECIALS):
        raise ValueError(
            f"vocab_size must exceed the {len(WordVocab.SPECIALS)} special tokens, got {vocab_size}"
        )
    vocab = WordVocab.build([_tokens(s) for s in sentences], min_count=min_count, max_size=vocab_size)
    if len(vocab) <= len(WordVocab.SPECIALS):
        raise ValueError("the sentences hold no words to build a vocabulary from")
    return vocab


class ElmoLMData:
    """Sentences as index tensors, ready to be cut into biLM batches without Python loops.

    * ``types [n, width]``: each position's row in ``char_table`` (0 = padding); every
      sentence is ``<S> w_1 ... w_m </S>``, cut to ``max_len`` tokens in all;
    * ``char_table [n_types + 1, max_chars]`` (int16): the character ids of every distinct
      word (row 0 is all zeros);
    * ``word_ids [n, width]``: softmax ids (unknown words = ``<unk>``, padding = 0).

    :meth:`batch` returns ``{"char_ids", "word_ids", "mask"}`` for a set of rows, trimmed to
    its longest sentence; :meth:`sampler` gives a ``step -> batch`` function for
    :func:`~course_lib.train.fit` with length-grouped, shuffled epochs.
    """

    def __init__(
        self, sentences: Sequence[Any], vocab, *, max_len: int = 64, max_chars: int = MAX_CHARS_PER_TOKEN
    ):
        if max_len < 3:
            raise ValueError(f"max_len must be at least 3 (<S>, a word, </S>), got {max_len}")
        rows = []
        for i, s in enumerate(sentences):
            toks = list(_tokens(s))
            if not toks:
                raise ValueError(f"sentence {i} is empty: every sentence needs at least one word")
            rows.append([BOS_TOKEN, *toks[: max_len - 2], EOS_TOKEN])
        if not rows:
            raise ValueError("ElmoLMData needs at least one sentence")
        spelling = {w: k + 1 for k, w in enumerate(dict.fromkeys(w for r in rows for w in r))}
        chars, _ = words_to_char_ids([list(spelling)], max_chars=max_chars)
        self.char_table = torch.cat([torch.zeros(1, max_chars, dtype=torch.int16), chars[0].to(torch.int16)])
        self.words = ["", *spelling]  # row k of char_table spells words[k]
        flat = [w for r in rows for w in r]
        self.lengths = torch.tensor([len(r) for r in rows])
        mask = (
            torch.arange(int(self.lengths.max()))[None, :] < self.lengths[:, None]
        )  # row-major = the order of flat
        self.types = torch.zeros(mask.shape, dtype=torch.long).masked_scatter_(
            mask, torch.tensor([spelling[w] for w in flat])
        )
        self.word_ids = torch.zeros(mask.shape, dtype=torch.long).masked_scatter_(
            mask, torch.tensor(vocab.encode(flat))
        )
        self.vocab = vocab
        self.max_chars = max_chars

    def __len__(self) -> int:
        return self.types.shape[0]

    def to(self, device: torch.device | str) -> ElmoLMData:
        """Move the tables to ``device`` (batches are then cut there)."""
        for name in ("char_table", "types", "word_ids", "lengths"):
            setattr(self, name, getattr(self, name).to(device))
        return self

    def batch(self, rows: Tensor | Sequence[int]) -> dict[str, Tensor]:
        """``{"char_ids" [b, t, max_chars] int16, "word_ids" [b, t], "mask" [b, t]}`` for ``rows``."""
        rows = torch.as_tensor(rows, device=self.types.device).long()
        width = int(self.lengths[rows].max())
        types = self.types[rows, :width]
        return {
            "char_ids": self.char_table[types],
            "word_ids": self.word_ids[rows, :width],
            "mask": types > 0,
        }

    def sampler(
        self, batch_size: int, *, seed: int = 0, group: int = 50
    ) -> Callable[[int], dict[str, Tensor]]:
        """``step -> batch``: epochs of shuffled sentences, cut into ``group * batch_size`` chunks
        that are sorted by length and cut into batches, which are shuffled again."""
        n = len(self)
        if not 1 <= batch_size <= n:
            raise ValueError(
                f"batch_size must be between 1 and the number of sentences ({n}), got {batch_size}"
            )
        per_epoch = n // batch_size
        lengths = self.lengths.cpu()
        cache: dict[int, list[Tensor]] = {}

        def epoch_batches(epoch: int) -> list[Tensor]:
            g = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
            order = torch.randperm(n, generator=g)[: per_epoch * batch_size]
            out = []
            for i in range(0, order.numel(), group * batch_size):
                part = order[i : i + group * batch_size]
                part = part[torch.sort(lengths[part], stable=True).indices]
                out.extend(part.split(batch_size))
            return [out[k] for k in torch.randperm(len(out), generator=g).tolist()]

        def batch_at(step: int) -> dict[str, Tensor]:
            epoch, k = divmod(step, per_epoch)
            if epoch not in cache:
                cache.clear()
                cache[epoch] = epoch_batches(epoch)
            return self.batch(cache[epoch][k])

        return batch_at


def random_word_sampler(
    words: Sequence[str],
    *,
    length: int,
    batch_size: int,
    seed: int = 0,
    max_chars: int = MAX_CHARS_PER_TOKEN,
) -> Callable[[int], dict[str, Tensor]]:
    r"""``step -> batch`` of pure noise: sentences ``<S> w_1 ... w_length </S>`` whose words are
    drawn uniformly and independently from ``words``, fresh at every step.

    No language model can predict such a word better than :math:`\ln |\text{words}|` nats,
    so an honest biLM's loss cannot go below
    :math:`\frac{\text{length}}{\text{length} + 1} \ln |\text{words}|` per direction (only
    the closing ``</S>`` resp. opening ``<S>`` is predictable); a model that gets lower is
    reading the answer. Softmax ids follow ``WordVocab(words)``: ``<S>`` = 2, ``</S>`` = 3,
    ``words[i]`` = ``4 + i`` (so the model needs ``vocab_size >= len(words) + 4``).
    """
    words = list(words)
    if len(words) < 2 or len(set(words)) != len(words):
        raise ValueError(
            f"random_word_sampler needs at least 2 distinct words, got {len(words)} ({len(set(words))} "
            "distinct)"
        )
    if length < 1 or batch_size < 1:
        raise ValueError(
            f"length and batch_size must be positive, got length={length}, batch_size={batch_size}"
        )
    chars, _ = words_to_char_ids([[BOS_TOKEN, EOS_TOKEN, *words]], max_chars=max_chars)
    table = chars[0].to(torch.int16)  # row i spells word id i + 2
    bos, eos = torch.full((batch_size, 1), 2), torch.full((batch_size, 1), 3)

    def batch_at(step: int) -> dict[str, Tensor]:
        g = torch.Generator().manual_seed(seed * 1_000_003 + step)
        word_ids = torch.cat(
            [bos, 4 + torch.randint(len(words), (batch_size, length), generator=g), eos], dim=1
        )
        return {
            "char_ids": table[word_ids - 2],
            "word_ids": word_ids,
            "mask": torch.ones_like(word_ids, dtype=torch.bool),
        }

    return batch_at


@torch.no_grad()
def evaluate_lm(
    model: ElmoLanguageModel, batch: Mapping[str, Tensor], *, prefix: bool = True
) -> dict[str, float]:
    """Held-out losses on one batch, in eval mode: ``forward_loss``, ``backward_loss`` and, with
    ``prefix``, ``prefix_forward_loss`` (each word predicted with everything after it deleted;
    equal to ``forward_loss`` for an honest model, see
    :meth:`~course_lib.models.elmo.ElmoLanguageModel.prefix_forward_loss`)."""
    was_training = model.training
    model.eval()
    b = to_device(dict(batch), model_device(model))
    out = model.lm_loss(b["char_ids"], b["word_ids"], b.get("mask"))
    result = {"forward_loss": out.forward.item(), "backward_loss": out.backward.item()}
    if prefix:
        result["prefix_forward_loss"] = model.prefix_forward_loss(
            b["char_ids"], b["word_ids"], b.get("mask")
        ).item()
    model.train(was_training)
    return result


def train_elmo(
    model: ElmoLanguageModel,
    batches: Any,
    *,
    steps: int,
    lr: float = 5e-3,
    eval_batch: Mapping[str, Tensor] | None = None,
    eval_every: int | None = None,
    prefix_eval: bool = True,
    progress: bool | None = None,
    desc: str = "biLM",
    **fit_kwargs: Any,
) -> History:
    """The one ELMo trainer: ``model`` on ``batches`` (anything :func:`~course_lib.train.fit`
    takes: a list, an iterable, ``step -> batch``) with
    :func:`~course_lib.objectives.losses.elmo_lm_loss` (AdamW, 5% warm-up, cosine decay,
    gradient clipping at 1; ``fit_kwargs`` go to ``fit``); returns the History.

    With ``eval_batch`` the history's ``evals`` hold :func:`evaluate_lm` on it every
    ``eval_every`` steps and at the end (``prefix_eval=False`` skips the prefix loss, which
    runs one copy of the batch per position).
    """
    require_positive(steps=steps)
    eval_fn = None if eval_batch is None else (lambda m: evaluate_lm(m, eval_batch, prefix=prefix_eval))
    return fit(
        model,
        batches,
        elmo_lm_loss,
        steps=steps,
        lr=lr,
        eval_fn=eval_fn,
        eval_every=eval_every,
        progress=progress,
        desc=desc,
        **fit_kwargs,
    )


@dataclass
class NaiveComparison:
    """What :func:`compare_naive_bidirectional` returns: models and histories keyed "elmo" and "naive"."""

    models: dict[str, ElmoLanguageModel] = field(default_factory=dict)
    histories: dict[str, Any] = field(default_factory=dict)


def compare_naive_bidirectional(
    batches: Any,
    *,
    config: ElmoConfig,
    steps: int,
    lr: float = 2e-3,
    seed: int = 0,
    device: torch.device | str | None = None,
    **train_kwargs: Any,
) -> NaiveComparison:
    """Train the honest biLM and the naive "seeing itself" variant on the same batches.

    Returns an object with ``.models`` and ``.histories``, each keyed ``"elmo"`` and
    ``"naive"``. Both start from the same seed; the naive model differs only in
    ``naive_bidirectional=True`` (its layer-2 LSTMs are wider, reading both directions).
    Expect the naive training loss to fall well below the honest one, and its
    ``prefix_forward_loss`` (the future hidden) to be far above it. Measured with the default
    config on 19k generated sentences (vocabulary 3,723, batch 32, lr 1e-2, 300 steps): honest
    forward loss 4.22 = prefix loss 4.22; naive forward loss 3.08, prefix loss 12.2 (worse than
    a uniform guess, ln 3723 = 8.2). ``train_kwargs`` go to :func:`train_elmo` for both models
    (``eval_batch``, ``eval_every``, ``prefix_eval`` and :func:`~course_lib.train.fit`'s options).
    """
    device = torch.device(device) if device is not None else get_device()
    result = NaiveComparison()
    for name, naive in (("elmo", False), ("naive", True)):
        seed_everything(seed)  # the course's seeding: COURSE_SEED_OFFSET shifts it (claim bands)
        model = ElmoLanguageModel(replace(config, naive_bidirectional=naive)).to(device)
        result.models[name] = model
        result.histories[name] = train_elmo(model, batches, steps=steps, lr=lr, desc=name, **train_kwargs)
    return result


class PretrainedElmo(NamedTuple):
    """What :func:`pretrain_elmo` returns (unpacks as ``model, vocab, history``)."""

    model: ElmoLanguageModel  # in eval mode
    vocab: Any  # the WordVocab of the softmax
    history: History  # losses per step; evals on held-out sentences (forward/backward/prefix_forward_loss)


def sentences_fingerprint(sentences: Sequence[Any]) -> str:
    """A short hash of the sentences' tokens (changes when the training text changes)."""
    return fingerprint(part for s in sentences for part in ("\x1f".join(_tokens(s)).encode(), b"\x1e"))


def _split_heldout(sentences: list, heldout: float | int | None) -> tuple[list, list]:
    if heldout is None or heldout == 0:
        return sentences, []
    k = heldout if isinstance(heldout, int) else None
    if k is None:
        if not 0.0 < heldout < 1.0:
            raise ValueError(
                f"heldout must be a fraction in (0, 1), a number of sentences, or None; got {heldout}"
            )
        k = int(len(sentences) * heldout)
    if k < 1 or len(sentences) - k < 1:
        return sentences, []
    return sentences[:-k], sentences[-k:]


def pretrain_elmo(
    config: ElmoConfig | str = "small",
    sentences: Sequence[Any] | None = None,
    *,
    steps: int = CHAPTER["steps"],
    batch_size: int = CHAPTER["batch_size"],
    lr: float | None = None,
    vocab_size: int = CHAPTER["vocab_size"],
    max_len: int = 64,
    heldout: float | int | None = 256,
    n_eval: int = 128,
    eval_every: int | None = None,
    prefix_eval: bool = True,
    naive_bidirectional: bool = False,
    seed: int = CHAPTER["seed"],
    device: torch.device | str | None = None,
    cache_name: str | None = None,
    progress: bool | None = None,
) -> PretrainedElmo:
    """Pretrain an ELMo biLM from scratch; returns ``(model, vocab, history)``.

    Args:
        config: an :class:`ElmoConfig` or a size name of :data:`SIZES`; its ``vocab_size``
            is set from the data.
        sentences: Sentence objects or token lists; ``None`` reads
            :func:`~course_lib.data.load_sentences` (``$COURSE_TEXT``, else
            ``CHAPTER["n_sentences"]`` generated sentences).
        steps, batch_size, lr: optimiser steps, sentences per step, peak learning rate
            (default :data:`DEFAULT_LR` of the size, 3e-3 for a custom config).
        vocab_size: the softmax vocabulary, specials included (fewer if the text has fewer words).
        max_len: tokens per sentence including ``<S>`` and ``</S>`` (longer ones are cut).
        heldout: the last sentences to hold out (a count, or a fraction); ``n_eval`` of them
            are scored at the end and every ``eval_every`` steps (:func:`evaluate_lm`;
            ``prefix_eval=False`` skips the prefix loss).
        naive_bidirectional: build the leaky "seeing itself" variant instead (chapter 1).
        seed: seeds the batch order and the initial weights.
        device: default :func:`~course_lib.device.get_device`.
        cache_name: train through :func:`~course_lib.checkpoints.train_or_load` under this
            name (a second call with the same arguments loads the weights).
    """
    device = get_device() if device is None else torch.device(device)
    sentences = list(
        load_sentences(n_sentences=CHAPTER["n_sentences"], seed=seed) if sentences is None else sentences
    )
    if not sentences:
        raise ValueError("pretrain_elmo got no sentences")
    require_positive(steps=steps, batch_size=batch_size)
    train_sents, held_sents = _split_heldout(sentences, heldout)
    if len(train_sents) < batch_size:
        raise ValueError(
            f"only {len(train_sents)} training sentences, fewer than batch_size={batch_size}; give more text "
            "or a smaller batch"
        )
    vocab = build_vocab(train_sents, vocab_size=vocab_size)
    size = config if isinstance(config, str) else None
    if size is not None:
        config = elmo_config(size, vocab_size=len(vocab))
    elif isinstance(config, ElmoConfig):
        config = replace(config, vocab_size=len(vocab))
    else:
        raise TypeError(f"config must be an ElmoConfig or a size name, got {type(config).__name__}")
    config = replace(config, naive_bidirectional=naive_bidirectional)
    lr = DEFAULT_LR.get(size or "", 3e-3) if lr is None else lr

    data = ElmoLMData(train_sents, vocab, max_len=max_len, max_chars=config.max_chars_per_token)
    eval_batch = None
    if held_sents:
        held = ElmoLMData(held_sents[:n_eval], vocab, max_len=max_len, max_chars=config.max_chars_per_token)
        eval_batch = held.batch(torch.arange(len(held)))

    seed_everything(seed)
    model = ElmoLanguageModel(config).to(device)

    def train(m: ElmoLanguageModel) -> History:
        kind = "naive biLM" if naive_bidirectional else "biLM"
        return train_elmo(
            m,
            data.sampler(batch_size, seed=seed),
            steps=steps,
            lr=lr,
            eval_batch=eval_batch,
            eval_every=eval_every,
            prefix_eval=prefix_eval,
            progress=progress,
            desc=kind,
        )

    def spec() -> dict[str, Any]:
        return dict(
            recipe="pretrain_elmo",
            config=asdict(config),
            steps=steps,
            batch_size=batch_size,
            lr=lr,
            max_len=max_len,
            seed=seed,
            eval_every=eval_every,
            n_eval=n_eval,
            prefix_eval=prefix_eval,
            sentences=sentences_fingerprint(train_sents),
            heldout=sentences_fingerprint(held_sents) if held_sents else None,
            vocab=len(vocab),
        )

    history = train_cached(cache_name, model, spec, train)
    return PretrainedElmo(model, vocab, history)


# ---------------------------------------------------------------------------------------
# Saving and loading
# ---------------------------------------------------------------------------------------


def save_pretrained_elmo(
    out_dir: Path | str, model: ElmoLanguageModel, vocab, *, metadata: Mapping[str, Any] | None = None
) -> Path:
    """Write ``model.safetensors`` (+ ``model.json``), ``config.json`` and ``vocab.json`` into
    ``out_dir``, each atomically. Returns the folder."""
    if not isinstance(model, ElmoLanguageModel):
        raise TypeError(f"expected an ElmoLanguageModel, got {type(model).__name__}")
    return save_model(out_dir, model, {"vocab.json": json.dumps(vocab.to_dict())}, metadata=metadata)


def load_pretrained_elmo(
    path: Path | str, *, device: torch.device | str | None = None
) -> tuple[ElmoLanguageModel, Any]:
    """Read what :func:`save_pretrained_elmo` (or ``course train elmo``) wrote: ``(model, vocab)``,
    eval mode."""
    model, folder = load_model(
        path,
        ("vocab.json",),
        "course train elmo",
        default_architecture="ElmoLanguageModel",
        expected=ElmoLanguageModel,
        device=device,
    )
    vocab = WordVocab.from_dict(json.loads((folder / "vocab.json").read_text()))
    if len(vocab) != model.config.vocab_size:
        raise ValueError(
            f"{folder}: vocab.json has {len(vocab)} words, the model's softmax {model.config.vocab_size}"
        )
    return model, vocab


# ---------------------------------------------------------------------------------------
# Command line: course train elmo
# ---------------------------------------------------------------------------------------


def _cmd(args: argparse.Namespace) -> int:
    def train(sentences: list, device: torch.device) -> PretrainedElmo:
        held = getattr(args, "heldout", None)  # a fraction; None: the recipe's 256 sentences
        extra = {} if held is None else {"heldout": held}
        return pretrain_elmo(args.size, sentences, device=device, **extra, **training_arguments(args))

    def summary(model: ElmoLanguageModel, vocab, history: History, device: torch.device, seconds: float):
        return (
            f"trained a {args.size} ELMo biLM ({model.num_parameters() / 1e6:.2f}M parameters without the "
            f"softmax, softmax over {len(vocab)} words) for {len(history.loss)} steps on {device.type} in "
            f"{seconds:.0f} s; final training loss {history.loss[-1]:.3f}"
        )

    def perplexity(evals: Mapping[str, float]) -> str:
        return f" (perplexity {math.exp((evals['forward_loss'] + evals['backward_loss']) / 2):.1f})"

    return run_recipe(
        args,
        "train-elmo",
        read_text=lambda: load_sentences(args.text, n_sentences=args.n_sentences, seed=args.seed),
        train=train,
        save=save_pretrained_elmo,
        summary=summary,
        held_back="sentences",
        loader="course_lib.recipes.elmo.load_pretrained_elmo",
        heldout_note=perplexity,
    )


def _options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--n-sentences",
        type=positive(int),
        default=CHAPTER["n_sentences"],
        help=f"generated sentences when no --text is given (default {CHAPTER['n_sentences']})",
    )


def register(sub) -> None:
    """Add ``course train elmo`` to the ``course`` command."""
    add_recipe_command(
        sub,
        "train-elmo",
        help="pretrain an ELMo biLM on your text or the generated corpus",
        description="Pretrain an ELMo biLM (char CNN + forward and backward LSTMs) from scratch "
        "with the course's "
        "recipe (course_lib.recipes.elmo) and save model.safetensors, config.json and vocab.json in --out. "
        "The defaults regenerate chapter 1's model.",
        out_help="folder for the model, its config and vocabulary",
        training=TrainingOptions(
            sizes=list(SIZES),
            size_help="model shape (default small; original = the paper's)",
            steps=CHAPTER["steps"],
            batch_size=CHAPTER["batch_size"],
            batch_unit="sentences",
            max_len=64,
            max_len_help="tokens per sentence with <S> and </S>",
            vocab_size=CHAPTER["vocab_size"],
            vocab_help="softmax vocabulary, 4 specials included",
            size=CHAPTER["size"],
            seed=CHAPTER["seed"],
        ),
        options=_options,
        run=_cmd,
    )


def main(argv: list[str] | None = None) -> int:
    """``python -m course_lib.recipes.elmo ...``: the same as ``course train elmo ...``."""
    return module_main(register, "train-elmo", "course_lib.recipes.elmo", argv)


if __name__ == "__main__":
    sys.exit(main())
