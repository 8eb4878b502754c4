"""Tagged items shared by the fine-tuning tests (the tokenizer and corpus: tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch


def _noun_task(n: int, seed: int) -> list[tuple[list[str], list[int]]]:
    """Tag 1 for the nouns of a fixed little vocabulary, 0 for every other word."""
    g = torch.Generator().manual_seed(seed)
    nouns, others = ["cat", "dog", "bird", "chef"], ["the", "saw", "a", "near", "and", "happy"]
    items = []
    for _ in range(n):
        words = [
            (nouns if float(torch.rand((), generator=g)) < 0.4 else others)[
                int(torch.randint(4, (), generator=g))
            ]
            for _ in range(6)
        ]
        items.append((words, [int(w in nouns) for w in words]))
    return items


@pytest.fixture(scope="session")
def noun_task() -> Callable[[int, int], list[tuple[list[str], list[int]]]]:
    """``noun_task(n, seed)``: ``n`` six-word sentences, each word tagged 1 if it is one of four
    nouns, else 0 (a task a tiny model learns in a few dozen steps)."""
    return _noun_task


@pytest.fixture(scope="module")
def mod3_items(docs):
    """The sentences of the first 10 ``docs``, each word tagged with its position mod 3."""
    return [(s.tokens, [i % 3 for i in range(len(s.tokens))]) for d in docs[:10] for s in d.sentences]
