"""BERT's weight initialisation, which every model of the course starts from."""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["init_weights"]


def init_weights(module: nn.Module, std: float) -> None:
    """N(0, ``std``) weights and zero biases for every ``Linear``, N(0, ``std``) embedding rows
    with the padding row zeroed, unit-and-zero LayerNorms: BERT's initialisation (Hugging
    Face's ``_init_weights``), applied to ``module`` and everything inside it, in module order."""
    for m in module.modules():
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, mean=0.0, std=std)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, mean=0.0, std=std)
            if m.padding_idx is not None:
                with torch.no_grad():
                    m.weight[m.padding_idx].zero_()
        elif isinstance(m, nn.LayerNorm):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)
