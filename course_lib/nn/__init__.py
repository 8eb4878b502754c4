"""Building blocks shared by every model of the course."""

from .attention import (
    MultiHeadAttention,
    ablate_heads,
    attention,
    attention_explicit,
    attention_fast,
    causal_mask,
    check_bias,
    check_mask,
    combine_masks,
    padding_mask,
)
from .feedforward import ACTIVATIONS, FeedForward, get_activation
from .layer import PostLNLayer
from .parameters import count_parameters
from .positional import (
    LearnedPositionalEmbedding,
    SinusoidalPositionalEncoding,
    check_length,
    sinusoidal_table,
)
from .relative import check_mems, rel_shift, relative_distances, relative_sinusoids, update_memory

__all__ = [
    "MultiHeadAttention",
    "ablate_heads",
    "attention",
    "attention_explicit",
    "attention_fast",
    "causal_mask",
    "check_bias",
    "check_mask",
    "combine_masks",
    "padding_mask",
    "ACTIVATIONS",
    "FeedForward",
    "get_activation",
    "PostLNLayer",
    "count_parameters",
    "LearnedPositionalEmbedding",
    "SinusoidalPositionalEncoding",
    "check_length",
    "sinusoidal_table",
    "check_mems",
    "rel_shift",
    "relative_distances",
    "relative_sinusoids",
    "update_memory",
]
