r"""Which attention heads track syntax and reference (Clark et al., 2019, "What does BERT look at?").

A head *tracks* a relation when, for the words in that relation, the word it attends to most is
the related word. With word-level attention maps ``[layers, heads, n, n]`` per sentence
(:func:`course_lib.analysis.layers.encoder_word_attentions`) and pairs ``(source, target)`` of
word indices, :func:`head_accuracy` gives every head's accuracy

.. math:: \mathrm{acc}_{l,h} = \frac{1}{|P|}\sum_{(s, t) \in P} \bigl[\arg\max_j A^{(l,h)}_{s j} = t\bigr].

The pairs come from the gold annotation: :func:`dependency_pairs` (for a relation such as
``nsubj`` or ``det``: the dependent attending to its head, e.g. *dog* → *barked*, *the* → *dog*,
or the other way) and :func:`coreference_pairs` (a pronoun attending to its antecedent, the
"it" → "animal" of chapter 3). :func:`offset_baseline` is the paper's baseline: always predict
the word at one fixed relative position, the best such offset for the relation.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

__all__ = ["head_accuracy", "dependency_pairs", "coreference_pairs", "offset_baseline"]

DIRECTIONS = ("dependent", "head")


def dependency_pairs(sentence: Any, relation: str, *, direction: str = "dependent") -> list[tuple[int, int]]:
    """``(source, target)`` word pairs for every arc labelled ``relation`` (a Universal
    Dependencies name, e.g. ``"nsubj"``, ``"det"``, ``"amod"``) in a sentence with a tree
    (``heads`` and ``deprels``): ``direction="dependent"`` pairs the dependent with its head
    (the dependent attends), ``"head"`` the head with its dependent."""
    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be one of {DIRECTIONS}, got {direction!r}")
    if getattr(sentence, "heads", None) is None or getattr(sentence, "deprels", None) is None:
        raise ValueError("dependency_pairs needs a sentence with a gold tree (heads and deprels)")
    pairs = [
        (i, h) for i, (h, r) in enumerate(zip(sentence.heads, sentence.deprels)) if r == relation and h >= 0
    ]
    return pairs if direction == "dependent" else [(h, i) for i, h in pairs]


def coreference_pairs(sentence: Any) -> list[tuple[int, int]]:
    """``(pronoun, antecedent)`` pairs of a sentence's ``coref`` annotation."""
    return [tuple(p) for p in getattr(sentence, "coref", ())]


def head_accuracy(
    attentions: Sequence[Tensor], pairs: Sequence[Sequence[tuple[int, int]]]
) -> tuple[Tensor, int]:
    """``([layers, heads] accuracy, number of pairs)``: for each head, the share of pairs
    ``(source, target)`` whose source word attends most to its target word (self-attention
    included among the candidates; ties go to the first word).

    ``attentions``: one ``[layers, heads, n, n]`` word-level map per sentence; ``pairs``: the
    pairs of each sentence (word indices). Sentences without pairs are skipped.
    """
    if len(attentions) != len(pairs):
        raise ValueError(f"{len(attentions)} attention maps but pairs for {len(pairs)} sentences")
    hits: Tensor | None = None
    total = 0
    for k, (att, ps) in enumerate(zip(attentions, pairs)):
        if not ps:
            continue
        if att.dim() != 4 or att.size(-1) != att.size(-2):
            raise ValueError(
                f"sentence {k}: expected a [layers, heads, n, n] map, got shape {tuple(att.shape)}"
            )
        n = att.size(-1)
        src = torch.tensor([s for s, _ in ps])
        tgt = torch.tensor([t for _, t in ps])
        if int(src.max()) >= n or int(tgt.max()) >= n or int(src.min()) < 0 or int(tgt.min()) < 0:
            raise ValueError(f"sentence {k}: a pair points outside its {n} words: {list(ps)}")
        best = att[:, :, src].argmax(-1)  # [layers, heads, pairs]
        h = (best == tgt).sum(-1)
        hits = h if hits is None else hits + h
        total += len(ps)
    if hits is None:
        raise ValueError("no pairs to score")
    return hits.float() / total, total


def offset_baseline(
    pairs: Sequence[Sequence[tuple[int, int]]], lengths: Sequence[int], *, max_offset: int = 5
) -> tuple[int, float]:
    """``(offset, accuracy)`` of the best fixed relative position: predict ``source + offset``
    for every pair, for each offset in ``-max_offset..max_offset`` except 0."""
    if len(pairs) != len(lengths):
        raise ValueError(f"pairs for {len(pairs)} sentences but {len(lengths)} lengths")
    total = sum(len(p) for p in pairs)
    if total == 0:
        raise ValueError("no pairs to score")
    best = (0, -1.0)
    for off in [o for o in range(-max_offset, max_offset + 1) if o != 0]:
        acc = sum(t == s + off for ps in pairs for s, t in ps) / total
        if acc > best[1]:
            best = (off, acc)
    return best
