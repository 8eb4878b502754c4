"""Analysis of trained models: probes (structural probes of parse trees in ``structural``),
layer vectors, minimal pairs, attention-head scores (heads that track dependencies and
coreference in ``heads``), and autoregressive vs autoencoding scoring and generation (``ar_ae``).

This layer sits above the models and the data (it runs models on data); the chapters import it.
"""

from .ar_ae import (
    FILL_ORDERS,
    fill_masks,
    inconsistent_mass,
    mask_discrepancy,
    next_token_log_probs,
    normalise_grid,
    pair_joint,
    perplexity,
    pseudo_log_likelihood,
    sample_causal,
    sequence_log_likelihood,
)
from .attention import WordAttention, head_scores, word_attention
from .cloze import SIDES, generate_greedy, generation_statistics, hidden_word_accuracy, top_predictions
from .distill import inference_seconds, tag_agreement, word_logits
from .heads import coreference_pairs, dependency_pairs, head_accuracy, offset_baseline
from .layers import encoder_word_attentions, encoder_word_vectors, layer_transitions, layer_vectors
from .lm_steps import next_tokens
from .minimal_pairs import labelled_pairs, minimal_pair_preference, word_order_pairs
from .probes import linear_probe, normalise_layers, train_probe
from .structural import (
    DepthProbe,
    DistanceProbe,
    chain_distances,
    depth_scores,
    distance_scores,
    fit_structural_probe,
    minimum_spanning_tree,
    spearman,
    uuas,
)
from .topics import TopicMatcher

__all__ = [
    "DepthProbe",
    "DistanceProbe",
    "chain_distances",
    "coreference_pairs",
    "dependency_pairs",
    "depth_scores",
    "distance_scores",
    "encoder_word_attentions",
    "encoder_word_vectors",
    "fit_structural_probe",
    "head_accuracy",
    "minimum_spanning_tree",
    "offset_baseline",
    "spearman",
    "uuas",
    "inference_seconds",
    "tag_agreement",
    "word_logits",
    "FILL_ORDERS",
    "fill_masks",
    "inconsistent_mass",
    "mask_discrepancy",
    "next_token_log_probs",
    "next_tokens",
    "normalise_grid",
    "pair_joint",
    "perplexity",
    "pseudo_log_likelihood",
    "sample_causal",
    "sequence_log_likelihood",
    "SIDES",
    "TopicMatcher",
    "generate_greedy",
    "generation_statistics",
    "hidden_word_accuracy",
    "top_predictions",
    "WordAttention",
    "head_scores",
    "layer_vectors",
    "linear_probe",
    "minimal_pair_preference",
    "word_order_pairs",
    "labelled_pairs",
    "layer_transitions",
    "normalise_layers",
    "train_probe",
    "word_attention",
]
