r"""Layer-by-layer probes of ELMo's biLM on the generated corpus's gold labels (chapter 1, §1.5).

* *Part of speech*: :func:`pos_features` gives every word's layer vectors and gold tag,
  :func:`tag_lookup` the baseline (each test word's most frequent training tag) and the
  **ambiguous** test words (seen with more than one tag in training, so only the context
  decides), :func:`pos_layer_accuracy` one linear probe (:func:`~course_lib.analysis.train_probe`)
  per layer, scored over all test words and over the ambiguous ones.
* *Word sense*: :func:`occurrence_vectors` gives the layer vectors of one word in each of its
  sentences, :func:`sense_accuracy` a nearest-centroid rule per layer (each sense's mean
  vector over the training sentences; a test occurrence gets the sense whose mean is closest
  by cosine), as in the paper's word-sense experiment.

Chapter 1 runs them on its model; the study ``01_elmo`` (:mod:`course_lib.studies.elmo`) runs
them on one model per seed.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from ..data import UPOS_TAGS, sense_examples
from ..models.elmo import ElmoLanguageModel
from .layers import layer_vectors
from .probes import train_probe

__all__ = ["pos_features", "tag_lookup", "pos_layer_accuracy", "occurrence_vectors", "sense_accuracy"]


def pos_features(model: ElmoLanguageModel, sentences: Sequence[Any]) -> tuple[Tensor, Tensor, list[str]]:
    """``(X [layers, tokens, dim], tags [tokens], words)``: the layer vectors of every word of the
    sentences (in order), their gold UPOS ids (indices into ``UPOS_TAGS``) and the words."""
    X = torch.cat(layer_vectors(model, sentences), dim=1)
    y = torch.tensor([UPOS_TAGS.index(t) for s in sentences for t in s.pos])
    return X, y, [w for s in sentences for w in s.tokens]


def tag_lookup(
    train_words: Sequence[str], train_tags: Tensor, test_words: Sequence[str], *, default: str = "NOUN"
) -> tuple[Tensor, Tensor]:
    """``(lookup [m], ambiguous [m])`` for the test words: the tag each one had most often in
    training (``default`` for unseen words), and whether it was seen with more than one tag."""
    tags_of: dict[str, Counter] = defaultdict(Counter)
    for w, t in zip(train_words, train_tags.tolist()):
        tags_of[w][t] += 1
    ambiguous = torch.tensor([len(tags_of.get(w, ())) > 1 for w in test_words])
    fallback = UPOS_TAGS.index(default)
    lookup = torch.tensor([tags_of[w].most_common(1)[0][0] if w in tags_of else fallback for w in test_words])
    return lookup, ambiguous


def pos_layer_accuracy(
    X_train: Tensor, y_train: Tensor, X_test: Tensor, y_test: Tensor, ambiguous: Tensor
) -> list[tuple[float, float]]:
    """One linear probe per layer of ``X [layers, tokens, dim]``: ``(accuracy over all test words,
    accuracy over the ambiguous ones)`` for each layer."""
    out = []
    for j in range(X_train.shape[0]):
        right = train_probe(X_train[j], y_train, len(UPOS_TAGS))(X_test[j]) == y_test
        out.append((right.float().mean().item(), right[ambiguous].float().mean().item()))
    return out


def occurrence_vectors(model: ElmoLanguageModel, examples: Sequence[Any]) -> Tensor:
    """``[layers, n, dim]``: the layer vectors of each example's word (``example.sentence``,
    ``example.index``, as :func:`~course_lib.data.sense_examples` returns them)."""
    vecs = layer_vectors(model, [e.sentence for e in examples])
    return torch.stack([v[:, e.index] for v, e in zip(vecs, examples)], dim=1)


def sense_accuracy(
    model: ElmoLanguageModel, word: str, *, n_train: int = 40, n_test: int = 20, seed: int = 2
) -> list[float]:
    """Per layer, the nearest-centroid sense accuracy of ``word``: ``n_train + n_test`` sentences
    per sense (:func:`~course_lib.data.sense_examples` with ``seed``), the first ``n_train`` of
    each sense to build the centroids, the rest to test. Chance is one over the number of senses."""
    examples = sense_examples(word, n_per_sense=n_train + n_test, seed=seed)
    X = F.normalize(occurrence_vectors(model, examples), dim=-1)
    senses = sorted({e.sense for e in examples})
    y = torch.tensor([senses.index(e.sense) for e in examples])
    rank = torch.tensor([sum(f.sense == e.sense for f in examples[:i]) for i, e in enumerate(examples)])
    train, test = rank < n_train, rank >= n_train
    result = []
    for j in range(X.shape[0]):
        centroids = F.normalize(
            torch.stack([X[j][train & (y == c)].mean(0) for c in range(len(senses))]), dim=-1
        )
        result.append(((X[j][test] @ centroids.T).argmax(-1) == y[test]).float().mean().item())
    return result
