r"""The position-wise feed-forward network and the activations the course's models use.

.. math::

    \mathrm{FFN}(x) = \mathrm{act}(x W_1 + b_1)\, W_2 + b_2

The Transformer uses ``act = ReLU``; BERT and its descendants the GELU
:math:`x\,\Phi(x)` (exact erf form) or its tanh approximation. ``ACTIVATIONS`` maps the
names Hugging Face configs use to the functions.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["ACTIVATIONS", "FeedForward", "get_activation", "drop_in_place", "draw_dropout"]


def draw_dropout(p: float, training: bool, shape: tuple[int, ...], device: torch.device) -> None:
    """Draw the random numbers a dropout of rate ``p`` draws on a tensor of ``shape``, and
    nothing else.

    Code that skips a computation nobody reads calls it where the skipped dropout would have
    run, so every later dropout mask is the one the full computation draws. How many random
    numbers a dropout takes does not depend on the tensor's dtype (tested), so a boolean
    tensor stands in for any.
    """
    if training and 0.0 < p < 1.0 and math.prod(shape) > 0:
        torch.empty(shape, dtype=torch.bool, device=device).bernoulli_(1 - p)


def drop_in_place(dropout: nn.Dropout, x: Tensor) -> Tensor:
    """``dropout(x)``, overwriting ``x`` on the CPU: for a fresh tensor that nothing else reads
    and whose producer's backward does not need it (a linear layer's output, a GELU's).

    On the CPU the same random numbers and the same arithmetic as ``dropout(x)`` (``x * mask /
    (1 - p)``), without allocating the output: there writing fresh memory costs as much as the
    multiplication itself. Autograd refuses it (an error, not a wrong gradient) where a
    backward does need ``x``. Elsewhere it is ``dropout(x)``: a GPU's fused dropout kernel
    (one pass) has no in-place form.
    """
    return F.dropout(x, dropout.p, dropout.training, inplace=x.device.type == "cpu")


def _gelu_tanh(x: Tensor) -> Tensor:
    return F.gelu(x, approximate="tanh")


ACTIVATIONS = {
    "relu": F.relu,
    "gelu": F.gelu,  # exact erf form (BERT's "gelu")
    "gelu_new": _gelu_tanh,  # tanh form (GPT-2, ALBERT v2)
    "gelu_pytorch_tanh": _gelu_tanh,
    # other names Hugging Face configs use for the same two GELUs
    "gelu_python": F.gelu,
    "gelu_fast": _gelu_tanh,
    "gelu_accurate": _gelu_tanh,
    "gelu_python_tanh": _gelu_tanh,
    "quick_gelu": lambda x: x * torch.sigmoid(1.702 * x),  # CLIP's sigmoid approximation
    "mish": F.mish,
    "silu": F.silu,
    "swish": F.silu,
    "tanh": torch.tanh,
}


_READ_INPUT = (F.gelu, _gelu_tanh, F.silu)


def get_activation(name: str):
    """The activation function called ``name`` (a key of ``ACTIVATIONS``)."""
    try:
        return ACTIVATIONS[name]
    except KeyError:
        raise ValueError(f"unknown activation {name!r}; choose one of {sorted(ACTIVATIONS)}") from None


class FeedForward(nn.Module):
    r"""Position-wise FFN: :math:`\mathrm{FFN}(x) = \mathrm{act}(x W_1 + b_1) W_2 + b_2`."""

    def __init__(self, d_model: int, d_ff: int, *, dropout: float = 0.0, activation: str = "relu"):
        super().__init__()
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)
        self.activation = get_activation(activation)

    def forward(self, x: Tensor) -> Tensor:
        h = self.activation(self.linear1(x))
        # the GELUs' and SiLU's backward read their input, so their output may be dropped in place
        h = drop_in_place(self.dropout, h) if self.activation in _READ_INPUT else self.dropout(h)
        return self.linear2(h)
