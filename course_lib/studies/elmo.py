"""Study ``01_elmo``: chapter 1's layer probes over seeds, and an LSTM against a Transformer on a
long-range dependency.

**Layer probes.** For each seed, the chapter's biLM is pretrained afresh
(:func:`~course_lib.recipes.elmo.pretrain_elmo` with :data:`~course_lib.recipes.elmo.CHAPTER`'s
settings; the seed sets the generated corpus, the batch order and the initial weights, so seed 0
is the chapter's own model), and the chapter's probes (:mod:`course_lib.analysis.word_probes`)
measure each layer: part-of-speech accuracy of a linear probe over all test words and over the
ambiguous ones (arms ``layer0``, ``layer1``, ``layer2``; the most-frequent-tag baseline is arm
``lookup``), and nearest-centroid sense accuracy, for *jam* and averaged over the 12 ambiguous
words. Arm ``bilm`` holds the held-out losses of each seed's model.

**Long-range dependency.** :func:`first_token_task`: a sequence of ``d + 1`` random symbols, the
label is the first one, and the model answers at the last position, ``d`` positions later, past
``d - 1`` distractors. A one-layer LSTM and a one-layer Transformer encoder
(:class:`~course_lib.models.transformer.Encoder` with sinusoidal positions) of about the same
number of weights get the same small budget (steps, batch, learning rate, fresh sequences every
step) and are scored on held-out sequences: arms ``lstm`` and ``transformer``, metrics
``acc_d4``, ``acc_d16``, ... and ``parameters``. Arm ``lstm_longer`` trains the LSTM once more at
one distance with four times the steps (is its failure a matter of a few more steps?).

``course study run 01_elmo`` runs seeds 0-2 (about three minutes a seed on one CPU thread, two of
them pretraining the biLM); chapter 1 loads the results with ``load_study("01_elmo")``.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..analysis.word_probes import (
    occurrence_vectors,
    pos_features,
    pos_layer_accuracy,
    sense_accuracy,
    tag_lookup,
)
from ..data import generate_corpus, sense_words
from ..device import seed_everything
from ..models.transformer import Encoder, TransformerConfig
from ..nn import SinusoidalPositionalEncoding, count_parameters
from ..recipes.elmo import CHAPTER, pretrain_elmo
from . import Study, register_study

__all__ = [
    "SETTINGS",
    "QUICK",
    "first_token_task",
    "LSTMReader",
    "TransformerReader",
    "long_range_accuracy",
    "run",
    "STUDY",
]

SETTINGS: dict[str, Any] = dict(
    # the chapter's biLM (CHAPTER without its seed: the study's seed replaces it)
    elmo={k: v for k, v in CHAPTER.items() if k != "seed"},
    # the chapter's probes (§1.5): POS on generate_corpus(900, seed=123), 600 train / 300 test
    pos=dict(corpus_seed=123, n_train=600, n_test=300),
    sense=dict(n_train=40, n_test=20, seed=2, words="all"),
    # an LSTM vs a Transformer on the first-token task
    long_range=dict(
        distances=[4, 16, 64],
        n_symbols=10,
        d_model=64,
        n_heads=4,
        d_ff=128,
        steps=300,
        batch_size=64,
        lr=3e-3,
        n_test=2000,
    ),
    # the LSTM once more at one distance, with a larger budget: is its failure a matter of a few steps?
    lstm_longer=dict(distance=16, steps=1200),
)
# quick=True (tests): the tiny biLM, few sentences and steps, two sense words, short runs
QUICK: dict[str, Any] = dict(
    elmo=dict(size="tiny", n_sentences=600, vocab_size=500, steps=10, batch_size=16),
    pos=dict(corpus_seed=123, n_train=40, n_test=20),
    sense=dict(n_train=6, n_test=4, seed=2, words=["jam", "bat"]),
    long_range=dict(SETTINGS["long_range"], steps=5, batch_size=16, n_test=100),
    lstm_longer=dict(distance=16, steps=10),
)


def first_token_task(n: int, distance: int, *, n_symbols: int = 10, seed: int = 0) -> tuple[Tensor, Tensor]:
    """``(sequences [n, distance + 1], labels [n])``: ``n`` sequences of ``distance + 1`` symbols
    (ids ``0 .. n_symbols - 1``, uniform and independent), each labelled with its **first** symbol.

    A model that answers at the last position must carry the first symbol across ``distance``
    positions, past ``distance - 1`` distractors drawn from the same symbols; chance is
    ``1 / n_symbols``. The same ``seed`` gives the same sequences.
    """
    if n < 1 or distance < 1:
        raise ValueError(f"n and distance must be positive, got n={n}, distance={distance}")
    if n_symbols < 2:
        raise ValueError(f"n_symbols must be at least 2, got {n_symbols}")
    g = torch.Generator().manual_seed(seed)
    sequences = torch.randint(n_symbols, (n, distance + 1), generator=g)
    return sequences, sequences[:, 0].clone()


class LSTMReader(nn.Module):
    """Symbol embeddings, one LSTM layer (left to right), a linear layer on the last state."""

    def __init__(self, n_symbols: int, d_model: int):
        super().__init__()
        self.embed = nn.Embedding(n_symbols, d_model)
        self.lstm = nn.LSTM(d_model, d_model, batch_first=True)
        self.out = nn.Linear(d_model, n_symbols)

    def forward(self, x: Tensor) -> Tensor:
        h, _ = self.lstm(self.embed(x))
        return self.out(h[:, -1])


class TransformerReader(nn.Module):
    """Symbol embeddings plus sinusoidal positions, one Transformer encoder layer (the course's
    :class:`~course_lib.models.transformer.Encoder`), a linear layer on the last position."""

    def __init__(self, n_symbols: int, d_model: int, n_heads: int, d_ff: int, max_len: int):
        super().__init__()
        self.embed = nn.Embedding(n_symbols, d_model)
        self.positions = SinusoidalPositionalEncoding(d_model, max_len)
        config = TransformerConfig(
            d_model=d_model, n_heads=n_heads, n_encoder_layers=1, d_ff=d_ff, dropout=0.0
        )
        self.encoder = Encoder(config)
        self.out = nn.Linear(d_model, n_symbols)

    def forward(self, x: Tensor) -> Tensor:
        h, _ = self.encoder(self.positions(self.embed(x)))
        return self.out(h[:, -1])


def long_range_accuracy(
    kind: str,
    distance: int,
    *,
    seed: int,
    n_symbols: int,
    d_model: int,
    n_heads: int,
    d_ff: int,
    steps: int,
    batch_size: int,
    lr: float,
    n_test: int,
) -> tuple[float, int]:
    """Train one reader (``kind`` ``"lstm"`` or ``"transformer"``) on the first-token task at
    ``distance`` (Adam at a constant ``lr``, fresh sequences every step) and return
    ``(accuracy on n_test held-out sequences, number of weights)``."""
    seed_everything(seed)
    if kind == "lstm":
        model: nn.Module = LSTMReader(n_symbols, d_model)
    elif kind == "transformer":
        model = TransformerReader(n_symbols, d_model, n_heads, d_ff, max_len=distance + 1)
    else:
        raise ValueError(f"kind must be 'lstm' or 'transformer', got {kind!r}")
    optimiser = torch.optim.Adam(model.parameters(), lr=lr)
    for step in range(steps):
        x, y = first_token_task(batch_size, distance, n_symbols=n_symbols, seed=seed * 1_000_003 + step)
        optimiser.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimiser.step()
    x, y = first_token_task(n_test, distance, n_symbols=n_symbols, seed=-1 - seed)  # never trained on
    model.eval()
    with torch.no_grad():
        accuracy = (model(x).argmax(-1) == y).float().mean().item()
    return accuracy, count_parameters(model)


def _layer_probes(seed: int, s: dict[str, Any]) -> dict[str, dict[str, Any]]:
    e = s["elmo"]
    sentences = generate_corpus(e["n_sentences"], seed=seed)  # what load_sentences gives the chapter
    lm, vocab, history = pretrain_elmo(
        e["size"],
        sentences,
        steps=e["steps"],
        batch_size=e["batch_size"],
        vocab_size=e["vocab_size"],
        seed=seed,
        prefix_eval=False,
        progress=False,
    )
    held = {k: v[-1] for k, v in history.evals.items()}
    out: dict[str, dict[str, Any]] = {
        "bilm": {
            "forward_loss": held["forward_loss"],
            "backward_loss": held["backward_loss"],
            "vocab": len(vocab),
        }
    }

    p = s["pos"]
    corpus = generate_corpus(p["n_train"] + p["n_test"], seed=p["corpus_seed"])
    X_train, y_train, w_train = pos_features(lm, corpus[: p["n_train"]])
    X_test, y_test, w_test = pos_features(lm, corpus[p["n_train"] :])
    lookup, ambiguous = tag_lookup(w_train, y_train, w_test)
    right = lookup == y_test
    out["lookup"] = {
        "pos_all": right.float().mean().item(),
        "pos_ambiguous": right[ambiguous].float().mean().item(),
    }
    for j, (acc_all, acc_amb) in enumerate(pos_layer_accuracy(X_train, y_train, X_test, y_test, ambiguous)):
        out[f"layer{j}"] = {"pos_all": acc_all, "pos_ambiguous": acc_amb}

    c = s["sense"]
    words = sense_words() if c["words"] == "all" else list(c["words"])
    table = {
        w: sense_accuracy(lm, w, n_train=c["n_train"], n_test=c["n_test"], seed=c["seed"]) for w in words
    }
    for j in range(3):
        out[f"layer{j}"]["sense_all"] = sum(table[w][j] for w in words) / len(words)
        out[f"layer{j}"]["sense_jam"] = table["jam"][j]
    out["bilm"]["n_ambiguous_test_tokens"] = int(ambiguous.sum())
    return out


def _long_range(seed: int, s: dict[str, Any]) -> dict[str, dict[str, Any]]:
    r = dict(s["long_range"])
    distances = r.pop("distances")
    out: dict[str, dict[str, Any]] = {"lstm": {}, "transformer": {}}
    for kind in out:
        for d in distances:
            acc, n_weights = long_range_accuracy(kind, d, seed=seed, **r)
            out[kind][f"acc_d{d}"] = acc
        out[kind]["parameters"] = n_weights
    longer = s["lstm_longer"]
    acc, _ = long_range_accuracy("lstm", longer["distance"], seed=seed, **{**r, "steps": longer["steps"]})
    out["lstm_longer"] = {f"acc_d{longer['distance']}": acc, "steps": longer["steps"]}
    return out


def run(seed: int, quick: bool) -> dict[str, dict[str, Any]]:
    """One seed of the study: ``{arm: {metric: value}}`` (see the module's docstring)."""
    s = QUICK if quick else SETTINGS
    with torch.random.fork_rng():
        return {**_layer_probes(seed, s), **_long_range(seed, s)}


STUDY = register_study(
    Study(
        name="01_elmo",
        description="chapter 1: per-layer POS and sense probes of the biLM over seeds; "
        "an LSTM vs a Transformer on a long-range dependency",
        settings=dict(SETTINGS, quick=QUICK),
        run=run,
        extra_sources=(
            pretrain_elmo,
            pos_features,
            tag_lookup,
            pos_layer_accuracy,
            occurrence_vectors,
            sense_accuracy,
        ),
    )
)
