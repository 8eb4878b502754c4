"""Data parallelism for :func:`course_lib.train.fit` under ``torchrun``.

When ``torch.distributed`` is initialised with more than one process, the loop wraps the
objective in :class:`LossModule` (so DistributedDataParallel sees every submodule and head
a course loss calls), gives every rank its equal slice of each global batch
(:func:`shard_batch`), averages the recorded loss over the processes (:func:`average`) and
lets all processes stop together (:func:`agree`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import nn

__all__ = ["distributed_info", "shard_batch", "first_rows", "agree", "average", "LossModule"]


def distributed_info() -> tuple[int, int]:
    """``(rank, world size)``: ``(0, 1)`` unless ``torch.distributed`` is initialised."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return 0, 1


def shard_batch(batch: Any, rank: int, world: int) -> Any:
    """Rank ``rank``'s contiguous slice of every tensor in ``batch`` that has the batch's rows.

    The rows are those of the first tensor found; their number must divide by ``world``
    (``ValueError`` naming both otherwise). Other values are left alone."""
    if world == 1:
        return batch
    rows = first_rows(batch)
    if rows is None:
        return batch
    if rows % world:
        raise ValueError(
            f"a batch of {rows} rows does not split over {world} processes: "
            f"use a batch size divisible by {world}"
        )
    per = rows // world
    return _slice_rows(batch, rows, slice(rank * per, (rank + 1) * per))


def first_rows(batch: Any) -> int | None:
    if isinstance(batch, torch.Tensor):
        return batch.size(0) if batch.dim() else None
    values = (
        batch.values() if isinstance(batch, Mapping) else batch if isinstance(batch, (list, tuple)) else ()
    )
    for v in values:
        n = first_rows(v)
        if n is not None:
            return n
    return None


def _slice_rows(batch: Any, rows: int, sel: slice) -> Any:
    if isinstance(batch, torch.Tensor):
        return batch[sel] if batch.dim() and batch.size(0) == rows else batch
    if isinstance(batch, Mapping):
        return type(batch)({k: _slice_rows(v, rows, sel) for k, v in batch.items()})
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):
        return type(batch)(*(_slice_rows(v, rows, sel) for v in batch))
    if isinstance(batch, (list, tuple)):
        return type(batch)(_slice_rows(v, rows, sel) for v in batch)
    return batch


def agree(flag: bool, world: int, device: torch.device) -> bool:
    """``flag`` on any process (one all-reduce when there are several): all stop together."""
    if world == 1:
        return flag
    t = torch.tensor([1.0 if flag else 0.0], device=device)
    torch.distributed.all_reduce(t)
    return bool(t.item() > 0)


class LossModule(nn.Module):
    """``forward(batch) = loss_fn(model, batch)``: the objective as one module, so that
    DistributedDataParallel sees the loss's whole graph (every submodule and head a course
    loss calls), not only ``model.forward``."""

    def __init__(self, model: nn.Module, forward: Any, loss_fn: Callable[[nn.Module, Any], Any]) -> None:
        super().__init__()
        self.model = model
        self._forward = forward  # the model, or its torch.compile'd version
        self._loss_fn = loss_fn

    def forward(self, batch: Any) -> Any:
        return self._loss_fn(self._forward, batch)


def average(loss: Any, world: int, device: torch.device) -> Any:
    """The step's loss (a float or a device scalar, returned as the same kind) averaged over
    the processes: what one process with the whole batch records."""
    t = torch.as_tensor(loss, dtype=torch.float32, device=device).reshape(1).clone()
    torch.distributed.all_reduce(t)
    t /= world
    return t[0] if isinstance(loss, torch.Tensor) else float(t[0])
