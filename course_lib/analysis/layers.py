r"""Layer vectors: what each layer of a trained model says about each word.

:func:`layer_vectors` runs ELMo's biLM over sentences and returns every layer's vector for
every word: the input of the probes (:mod:`course_lib.analysis.probes`) and of the
layer-by-layer comparisons of chapter 1.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from ..data.chars import words_to_char_ids
from ..data.tokenizers import token_lists
from ..models.elmo import ElmoLanguageModel
from ..train import model_device

__all__ = ["layer_vectors"]


@torch.no_grad()
def layer_vectors(
    model: ElmoLanguageModel,
    sentences: Sequence[Any],
    *,
    add_sentence_boundaries: bool = True,
    batch_size: int = 256,
) -> list[Tensor]:
    """Every layer's vector for every word: one ``[n_layers + 1, len(sentence), 2 * projection_dim]``
    tensor per sentence, on the CPU, in float32 (boundary tokens removed again).

    Layer 0 is the context-free char-CNN vector ``[x; x]``; layer :math:`j \\ge 1` is
    ``[forward_j; backward_j]``. Sentences are run with ``<S>``/``</S>`` as in training.
    """
    was_training = model.training
    model.eval()
    device = model_device(model)
    toks = [list(t) for t in token_lists(sentences)]
    order = sorted(range(len(toks)), key=lambda i: len(toks[i]))  # similar lengths together: less padding
    out: list[Tensor | None] = [None] * len(toks)
    off = 1 if add_sentence_boundaries else 0
    for i in range(0, len(order), batch_size):
        idx = order[i : i + batch_size]
        ids, mask = words_to_char_ids(
            [toks[j] for j in idx],
            add_sentence_boundaries=add_sentence_boundaries,
            max_chars=model.config.max_chars_per_token,
            device=device,
        )
        layers = model(ids, mask).float().cpu()
        for row, j in enumerate(idx):
            out[j] = layers[:, row, off : off + len(toks[j])]
    model.train(was_training)
    return out  # type: ignore[return-value]
