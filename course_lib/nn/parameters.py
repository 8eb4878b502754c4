"""Counting a model's parameters the way papers do: each tensor once, however often it is shared."""

from __future__ import annotations

from collections.abc import Iterable

from torch import Tensor, nn

__all__ = ["count_parameters"]


def count_parameters(
    model: nn.Module, *, skip: Iterable[Tensor] = (), exclude_embeddings: bool = False
) -> int:
    """Number of distinct parameters of ``model`` (a tied tensor counts once), leaving out ``skip``
    and, with ``exclude_embeddings``, the weight of every ``nn.Embedding`` inside it."""
    skipped = {id(t) for t in skip}
    if exclude_embeddings:
        skipped |= {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    return sum(p.numel() for p in model.parameters() if id(p) not in skipped)
