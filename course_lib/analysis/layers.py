r"""Layer vectors: what each layer of a trained model says about each word.

:func:`layer_vectors` runs ELMo's biLM over sentences and returns every layer's vector for
every word: the input of the probes (:mod:`course_lib.analysis.probes`) and of the
layer-by-layer comparisons of chapter 1.

:func:`layer_transitions` measures how much each layer of a BERT-family encoder changes the
vectors that pass through it (the ALBERT paper's Figure 1): the mean L2 distance and cosine
similarity between each real token's vector entering a layer and leaving it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..data.chars import words_to_char_ids
from ..data.tokenizers import token_lists
from ..models.elmo import ElmoLanguageModel
from ..train import model_device

__all__ = ["layer_transitions", "layer_vectors"]


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


@torch.no_grad()
def layer_transitions(
    model: nn.Module, examples: dict[str, Tensor], *, batch_size: int = 256
) -> dict[str, list[float]]:
    """How much each layer of a BERT-family encoder moves the token vectors.

    For layer :math:`l = 1, \\dots, L`, with :math:`h_{l-1}` the vector of a token entering it
    and :math:`h_l` leaving it, the means over every real (unpadded) token of ``examples``
    (``input_ids``, ``attention_mask``, optional ``token_type_ids``) of
    :math:`\\lVert h_l - h_{l-1} \\rVert_2` (``"l2"``) and :math:`\\cos(h_{l-1}, h_l)`
    (``"cosine"``): one value per layer, in eval mode. For ALBERT, :math:`h_0` is the
    embedding after its projection to the hidden width.
    """
    from ..models.bert import body_of

    body = body_of(model)
    was_training = body.training
    body.eval()
    device = model_device(body)
    l2: Tensor | None = None
    cosine: Tensor | None = None
    tokens = 0
    for i in range(0, examples["input_ids"].size(0), batch_size):
        sl = slice(i, i + batch_size)
        mask = examples["attention_mask"][sl].to(device)
        types = examples.get("token_type_ids")
        out = body(
            examples["input_ids"][sl].to(device),
            attention_mask=mask,
            token_type_ids=types[sl].to(device) if types is not None else None,
            output_hidden_states=True,
        )
        h = torch.stack(out.hidden_states).float()[:, mask.bool()]  # [L + 1, real tokens, H]
        before, after = h[:-1], h[1:]
        batch_l2 = (after - before).norm(dim=-1).sum(-1)
        batch_cos = F.cosine_similarity(before, after, dim=-1).sum(-1)
        l2 = batch_l2 if l2 is None else l2 + batch_l2
        cosine = batch_cos if cosine is None else cosine + batch_cos
        tokens += int(mask.sum())
    body.train(was_training)
    if l2 is None or cosine is None or tokens == 0:
        raise ValueError("layer_transitions needs at least one example with a real token")
    return {"l2": (l2 / tokens).tolist(), "cosine": (cosine / tokens).tolist()}
