"""Word-level labels on word pieces: the inputs of a token-tagging task (chapter 3's tagger,
chapter 7's distilled taggers).

A sentence comes as words; the tokenizer splits each word into pieces and only a word's
**first** piece carries its label (the BERT paper's recipe for tagging, §5.3); the other pieces
and the special tokens get :data:`IGNORE_INDEX`, so the loss and the accuracy see one position
per word.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from ..data import special_ids
from .masking import IGNORE_INDEX

__all__ = ["tagging_inputs"]


def tagging_inputs(
    tokenizer,
    words: Sequence[Sequence[str]],
    tags: Sequence[Sequence[int]] | None = None,
    *,
    max_len: int = 128,
    piece_words: bool = False,
) -> dict[str, Tensor]:
    """``[CLS] pieces [SEP]`` for every sentence given as words, right-padded to the longest.

    ``labels`` (when ``tags`` are given) holds a word's tag at its **first** word piece and
    ``-100`` at every other position (the BERT paper's tagging recipe); ``word_index`` holds
    the word each labelled position belongs to (``-1`` elsewhere). A sentence longer than
    ``max_len`` pieces is cut (its last words get no position and no label). With
    ``piece_words=True``, ``piece_word`` holds the word of **every** piece (``-1`` for the
    special tokens and padding), for pooling a word's pieces (chapter 8's probes).
    """
    if max_len < 3:
        raise ValueError(f"max_len must leave room for [CLS], a piece and [SEP], got {max_len}")
    ids = special_ids(tokenizer)
    rows, labels, word_index, piece_word = [], [], [], []
    for k, ws in enumerate(words):
        enc = tokenizer.encode(list(ws), is_pretokenized=True, add_special_tokens=False)
        piece_ids, word_ids = enc.ids[: max_len - 2], enc.word_ids[: max_len - 2]
        first = [w is not None and (j == 0 or word_ids[j - 1] != w) for j, w in enumerate(word_ids)]
        rows.append([ids["cls"], *piece_ids, ids["sep"]])
        word_index.append([-1, *[w if f else -1 for w, f in zip(word_ids, first)], -1])
        piece_word.append([-1, *[-1 if w is None else w for w in word_ids], -1])
        if tags is not None:
            labels.append(
                [
                    IGNORE_INDEX,
                    *[tags[k][w] if f else IGNORE_INDEX for w, f in zip(word_ids, first)],
                    IGNORE_INDEX,
                ]
            )
    width = max(len(r) for r in rows)

    def pad(seqs: list[list[int]], value: int) -> Tensor:
        return torch.tensor([r + [value] * (width - len(r)) for r in seqs])

    out = {
        "input_ids": pad(rows, ids["pad"]),
        "attention_mask": pad([[1] * len(r) for r in rows], 0),
        "token_type_ids": torch.zeros(len(rows), width, dtype=torch.long),
        "word_index": pad(word_index, -1),
    }
    if tags is not None:
        out["labels"] = pad(labels, IGNORE_INDEX)
    if piece_words:
        out["piece_word"] = pad(piece_word, -1)
    return out
