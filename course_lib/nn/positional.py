r"""Position information: the Transformer's sinusoids and BERT's learned table.

.. math::

    PE_{(pos, 2i)} = \sin\!\left(pos / 10000^{2i/d_{model}}\right), \qquad
    PE_{(pos, 2i+1)} = \cos\!\left(pos / 10000^{2i/d_{model}}\right)

Each pair of dimensions is a rotation at its own frequency, so ``PE[pos + k]`` is a linear
function of ``PE[pos]`` and the dot product ``PE[p] . PE[q]`` depends only on ``p - q``.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

__all__ = ["sinusoidal_table", "SinusoidalPositionalEncoding", "LearnedPositionalEmbedding", "check_length"]


def check_length(length: int, max_len: int, what: str = "sequence") -> None:
    """Raise ``ValueError`` naming the limit when ``length > max_len``."""
    if length > max_len:
        raise ValueError(
            f"{what} length {length} exceeds the maximum of {max_len} positions the model has "
            "(max_len / max_position_embeddings); truncate the input or build the model with a larger limit"
        )


def sinusoidal_table(max_len: int, d_model: int, *, base: float = 10000.0) -> Tensor:
    """``[max_len, d_model]`` table: even columns ``sin``, odd columns ``cos`` (interleaved, as in
    the paper)."""
    if d_model % 2 != 0:
        raise ValueError(f"sinusoidal encoding needs an even d_model, got {d_model}")
    pos = torch.arange(max_len, dtype=torch.float64)[:, None]
    inv_freq = torch.exp(-math.log(base) * torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    angles = pos * inv_freq[None, :]
    table = torch.empty(max_len, d_model, dtype=torch.float64)
    table[:, 0::2] = torch.sin(angles)
    table[:, 1::2] = torch.cos(angles)
    return table.float()


class SinusoidalPositionalEncoding(nn.Module):
    """Adds the fixed sinusoidal table to ``[batch, length, d_model]`` inputs, then dropout."""

    def __init__(self, d_model: int, max_len: int = 512, *, dropout: float = 0.0):
        super().__init__()
        self.max_len = max_len
        self.register_buffer("table", sinusoidal_table(max_len, d_model), persistent=False)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor, offset: int = 0) -> Tensor:
        check_length(offset + x.size(1), self.max_len)
        return self.dropout(x + self.table[offset : offset + x.size(1)])


class LearnedPositionalEmbedding(nn.Module):
    """A trained ``[max_len, d_model]`` table (BERT's choice), added to the inputs, then dropout."""

    def __init__(self, d_model: int, max_len: int = 512, *, dropout: float = 0.0):
        super().__init__()
        self.max_len = max_len
        self.embedding = nn.Embedding(max_len, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor, offset: int = 0) -> Tensor:
        check_length(offset + x.size(1), self.max_len)
        positions = torch.arange(offset, offset + x.size(1), device=x.device)
        return self.dropout(x + self.embedding(positions))
