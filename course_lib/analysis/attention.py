"""Attention-head scores: how much one word attends to another, in every layer and head.

:func:`word_attention` runs a BERT with ``output_attentions=True`` and keeps the rows of one
word (the mean over its WordPieces); :func:`head_scores` reads off the weight it puts on a
second word, e.g. "it" -> "animal" in "The animal didn't cross the street because it was too
tired" (chapter 3: which heads resolve the pronoun).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from ..data.tokenizers import find_word
from ..models.bert import BertModel

__all__ = ["WordAttention", "word_attention", "head_scores"]


@dataclass
class WordAttention:
    """Attention paid by one word to every token, in every layer and head."""

    tokens: list[str]  # the WordPieces, [CLS] and [SEP] included
    source: list[int]  # positions of the attending word
    weights: Tensor  # [n_layers, n_heads, seq_len]: mean over the word's pieces

    def to(self, target: Sequence[int]) -> Tensor:
        """``[n_layers, n_heads]``: total weight on the token positions ``target``."""
        return self.weights[:, :, list(target)].sum(-1)


@torch.no_grad()
def word_attention(
    model: BertModel, tokenizer, sentence: str, word: str, *, occurrence: int = 0
) -> WordAttention:
    """How much ``word`` attends to each token of ``sentence`` in every layer and head."""
    enc = tokenizer.encode(sentence)
    src = find_word(enc, sentence, word, occurrence=occurrence)
    ids = torch.tensor([enc.ids], device=model.device)
    out = model(input_ids=ids, token_type_ids=torch.zeros_like(ids), output_attentions=True)
    att = torch.stack([a[0] for a in out.attentions])  # [layers, heads, seq, seq]
    return WordAttention(tokens=list(enc.tokens), source=src, weights=att[:, :, src, :].mean(2).cpu())


def head_scores(model: BertModel, tokenizer, sentence: str, source: str, target: str) -> Tensor:
    """``[n_layers, n_heads]``: attention from the word ``source`` to the word ``target``
    (first occurrences), e.g. "it" -> "animal"."""
    enc = tokenizer.encode(sentence)
    tgt = find_word(enc, sentence, target)
    return word_attention(model, tokenizer, sentence, source).to(tgt)
