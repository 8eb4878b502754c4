"""Pre-training objectives: what the model is asked to predict, and the loss ``fit()`` minimises.

* :mod:`.masking`: which tokens a masked LM must fill in (BERT's 80/10/10), static or
  dynamic masking of a whole data set;
* :mod:`.pairs`: sentence pairs on token ids (next-sentence and sentence-order prediction),
  packing, batches;
* :mod:`.losses`: the ``loss_fn`` of each objective for :func:`course_lib.train.fit`.
* :mod:`.distillation`: knowledge distillation (soft targets at a temperature with the
  :math:`T^2` factor, FitNets' hints, TinyBERT's layer mapping and layer losses).
* :mod:`.tagging`: word-level labels on word pieces (a word's first piece carries its tag).
* :mod:`.pretraining`: the BERT family's pretraining rows (pairs or blocks), BERT's masker for a
  tokenizer, length-grouped batches, held-out masked-LM and left-to-right LM metrics.
* :mod:`.permutation`: XLNet's permutation LM (factorisation orders, ``perm_mask`` and
  ``target_mapping`` with partial prediction, its ``loss_fn``).

This layer sits above the models (it calls them) and the data (it reads token ids).
"""

from .losses import (
    PAIR_LABELS,
    PAIR_LOGITS,
    causal_lm_loss,
    data_pair_task,
    elmo_lm_loss,
    pair_fields,
    pretraining_loss,
)
from .masking import IGNORE_INDEX, KEPT, MASKED, RANDOM, MaskedLMData, MLMMasker, as_generator, mask_tokens
from .pairs import (
    NSPPairs,
    SOPPairs,
    collate,
    make_nsp_pairs,
    make_sop_pairs,
    pack_pair,
    pack_pairs,
    pack_sentences,
    pack_stream,
    reverse_sequences,
    text_pairs,
    trim_padding,
    truncate_pair_lengths,
)
from .permutation import (
    PermutationMasks,
    factorised_log_prob,
    factorised_step_log_probs,
    order_context,
    order_ranks,
    permutation_masks,
    plm_batch,
    plm_loss,
    sample_orders,
    sample_spans,
    targets_per_row,
)
from .tagging import tagging_inputs

__all__ = [
    "IGNORE_INDEX",
    "KEPT",
    "MASKED",
    "RANDOM",
    "MLMMasker",
    "MaskedLMData",
    "NSPPairs",
    "SOPPairs",
    "PAIR_LABELS",
    "PAIR_LOGITS",
    "data_pair_task",
    "pair_fields",
    "make_sop_pairs",
    "text_pairs",
    "as_generator",
    "collate",
    "elmo_lm_loss",
    "make_nsp_pairs",
    "mask_tokens",
    "pack_pair",
    "pack_pairs",
    "pack_sentences",
    "pack_stream",
    "pretraining_loss",
    "causal_lm_loss",
    "tagging_inputs",
    "trim_padding",
    "reverse_sequences",
    "truncate_pair_lengths",
    "PermutationMasks",
    "sample_orders",
    "order_ranks",
    "targets_per_row",
    "sample_spans",
    "permutation_masks",
    "plm_batch",
    "plm_loss",
    "order_context",
    "factorised_log_prob",
    "factorised_step_log_probs",
]
