"""Checks on a model's inputs, in one place: token-id batches, companion tensors, id ranges.

An id outside its table is an ``IndexError`` deep inside ``nn.Embedding`` on the CPU and a
device-side assert on a GPU; these checks turn it (and a wrong shape) into one ``ValueError``
that names the input, the table and the values found.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["check_token_batch", "check_same_shape", "check_id_ranges"]


def check_token_batch(input_ids: Tensor, *, name: str = "input_ids", min_length: int = 0) -> None:
    """``input_ids`` is ``[batch, seq_len]`` (``seq_len >= min_length``) of integer ids."""
    if input_ids.dim() != 2 or input_ids.size(1) < min_length:
        need = f" with seq_len >= {min_length}" if min_length else ""
        raise ValueError(f"{name} must be [batch, seq_len]{need}, got shape {tuple(input_ids.shape)}")
    if input_ids.is_floating_point() or input_ids.is_complex() or input_ids.dtype == torch.bool:
        raise ValueError(f"{name} must hold integer token ids, got dtype {input_ids.dtype}")


def check_same_shape(input_ids: Tensor, **others: Tensor | None) -> None:
    """Every tensor of ``others`` that is given has the shape of ``input_ids``."""
    for name, t in others.items():
        if t is not None and tuple(t.shape) != tuple(input_ids.shape):
            extra = " (1 = real token, 0 = padding)" if name == "attention_mask" else ""
            want = tuple(input_ids.shape)
            raise ValueError(f"{name} must have the shape of input_ids {want}{extra}, got {tuple(t.shape)}")


def check_id_ranges(*limits: tuple[str, Tensor, str, int]) -> None:
    """Each ``(name, ids, table, size)``: every id lies in ``[0, size)``, with one host sync for all.

    Skipped under ``torch.compile`` (reading values back would break the graph; compiled code
    checks shapes only). Empty tensors pass.
    """
    if torch.compiler.is_compiling():
        return
    limits = tuple(lim for lim in limits if lim[1].numel())
    if not limits:
        return
    hi = torch.stack([t.max().long() for _, t, _, _ in limits]).tolist()
    lo = torch.stack([t.min().long() for _, t, _, _ in limits]).tolist()
    for (name, _, table, size), top, bottom in zip(limits, hi, lo):
        if top >= size or bottom < 0:
            raise ValueError(f"{name} must lie in [0, {table}={size}), got values in [{bottom}, {top}]")
