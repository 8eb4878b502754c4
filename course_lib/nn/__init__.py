"""Building blocks shared by every model of the course."""

from .attention import (
    MultiHeadAttention,
    ablate_heads,
    attention,
    attention_explicit,
    attention_fast,
    causal_mask,
    check_mask,
    combine_masks,
    padding_mask,
)
from .positional import LearnedPositionalEmbedding, SinusoidalPositionalEncoding, check_length, sinusoidal_table

__all__ = [
    "MultiHeadAttention",
    "ablate_heads",
    "attention",
    "attention_explicit",
    "attention_fast",
    "causal_mask",
    "check_mask",
    "combine_masks",
    "padding_mask",
    "LearnedPositionalEmbedding",
    "SinusoidalPositionalEncoding",
    "check_length",
    "sinusoidal_table",
]
