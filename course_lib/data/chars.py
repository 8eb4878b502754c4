r"""ELMo's character codec (allennlp's ``ELMoCharacterMapper`` convention), in one place.

A word is encoded as its UTF-8 bytes (0..255) framed by begin-of-word and end-of-word
markers and filled up to ``max_chars`` with a padding character. Sentence boundaries are
words of their own: [begin-of-word, begin/end-of-sentence, end-of-word, padding...].
Every id is then shifted by +1, so that 0 is free for "no token here" (padding in the
sequence dimension). Hence 256 bytes + 5 specials + 1 = 262 ids.

:func:`word_to_char_ids` spells one word, :func:`words_to_char_ids` a batch of tokenised
sentences, :func:`char_ids_to_words` decodes; :func:`elmo_char_ids` takes corpus sentences.
The model (:mod:`course_lib.models.elmo`) reads these ids; this module knows nothing of it.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from .tokenizers import WordVocab, token_lists

__all__ = [
    "BEGINNING_OF_SENTENCE_CHAR",
    "END_OF_SENTENCE_CHAR",
    "BEGINNING_OF_WORD_CHAR",
    "END_OF_WORD_CHAR",
    "PADDING_CHAR",
    "N_CHARACTERS",
    "MAX_CHARS_PER_TOKEN",
    "BOS_TOKEN",
    "EOS_TOKEN",
    "word_to_char_ids",
    "words_to_char_ids",
    "char_ids_to_words",
    "elmo_char_ids",
]

BEGINNING_OF_SENTENCE_CHAR = 256  # before the +1 shift
END_OF_SENTENCE_CHAR = 257
BEGINNING_OF_WORD_CHAR = 258
END_OF_WORD_CHAR = 259
PADDING_CHAR = 260
N_CHARACTERS = 262  # ids 0..261 after the shift; 0 = padding token
MAX_CHARS_PER_TOKEN = 50
BOS_TOKEN = "<S>"  # these two strings are encoded as the sentence-boundary words
EOS_TOKEN = "</S>"


def _boundary_word(char: int, max_chars: int) -> list[int]:
    ids = [PADDING_CHAR] * max_chars
    ids[0], ids[1], ids[2] = BEGINNING_OF_WORD_CHAR, char, END_OF_WORD_CHAR
    return [c + 1 for c in ids]


def word_to_char_ids(word: str, *, max_chars: int = MAX_CHARS_PER_TOKEN) -> list[int]:
    """The ``max_chars`` character ids of one word (already shifted by +1, so never 0).

    Layout: ``[BOW, byte_1, ..., byte_n, EOW, PAD, ...]`` with the word's UTF-8 bytes.
    **Over-long words are truncated**: only the first ``max_chars - 2`` bytes are kept, and
    the begin- and end-of-word markers always stay (allennlp does the same). A cut can fall
    inside a multi-byte character; :func:`char_ids_to_words` then drops the broken tail.
    ``"<S>"`` and ``"</S>"`` become the sentence-boundary words.
    """
    if max_chars < 3:
        raise ValueError(
            f"max_chars must be at least 3 (begin marker, one byte, end marker), got {max_chars}"
        )
    if not isinstance(word, str):
        raise ValueError(f"words must be str, got {type(word).__name__}: {word!r}")
    if word == "":
        raise ValueError("empty word: a token needs at least one character")
    if word == BOS_TOKEN:
        return _boundary_word(BEGINNING_OF_SENTENCE_CHAR, max_chars)
    if word == EOS_TOKEN:
        return _boundary_word(END_OF_SENTENCE_CHAR, max_chars)
    encoded = word.encode("utf-8", "ignore")[: max_chars - 2]
    ids = [PADDING_CHAR] * max_chars
    ids[0] = BEGINNING_OF_WORD_CHAR
    ids[1 : len(encoded) + 1] = list(encoded)
    ids[len(encoded) + 1] = END_OF_WORD_CHAR
    return [c + 1 for c in ids]


def words_to_char_ids(
    sentences: Sequence[Sequence[str]],
    *,
    max_chars: int = MAX_CHARS_PER_TOKEN,
    add_sentence_boundaries: bool = False,
    device: torch.device | str | None = None,
) -> tuple[Tensor, Tensor]:
    """Encode a batch of tokenised sentences: ``(char_ids [batch, seq, max_chars], mask [batch, seq])``.

    Shorter sentences are padded at the end with all-zero tokens; ``mask`` is True for real
    tokens. ``add_sentence_boundaries`` wraps every sentence in ``<S> ... </S>`` (what the LM
    is trained on). Over-long words are truncated as described in :func:`word_to_char_ids`.
    An empty batch or an empty sentence raises ``ValueError``.
    """
    if isinstance(sentences, str) or (len(sentences) > 0 and isinstance(sentences[0], str)):
        raise ValueError("words_to_char_ids expects a batch: a list of sentences, each a list of words")
    if len(sentences) == 0:
        raise ValueError("empty batch: words_to_char_ids needs at least one sentence")
    rows = []
    for i, sentence in enumerate(sentences):
        if isinstance(sentence, str):
            raise ValueError(f"sentence {i} is a str; pass a list of words (e.g. text.split())")
        if len(sentence) == 0:
            raise ValueError(f"sentence {i} is empty: every sentence needs at least one word")
        rows.append([BOS_TOKEN, *sentence, EOS_TOKEN] if add_sentence_boundaries else list(sentence))
    # each distinct word is spelled once; a row of the table per distinct word, 0 = padding
    vocab = {w: k + 1 for k, w in enumerate(dict.fromkeys(w for r in rows for w in r))}
    table = torch.tensor(
        [[0] * max_chars] + [word_to_char_ids(w, max_chars=max_chars) for w in vocab], dtype=torch.long
    )
    seq = max(len(r) for r in rows)
    index = torch.tensor([[vocab[w] for w in r] + [0] * (seq - len(r)) for r in rows], dtype=torch.long)
    char_ids, mask = table[index], index > 0
    if device is not None:
        char_ids, mask = char_ids.to(device), mask.to(device)
    return char_ids, mask


def char_ids_to_words(char_ids: Tensor, mask: Tensor | None = None) -> list[list[str]]:
    """Decode ``[batch, seq, max_chars]`` character ids back to words (inverse of :func:`words_to_char_ids`).

    Padding tokens (all zeros, or False in ``mask``) are dropped; boundary words come back
    as ``"<S>"`` / ``"</S>"``; bytes are decoded as UTF-8, ignoring a character cut by truncation.
    """
    if char_ids.dim() != 3:
        raise ValueError(f"char_ids must be [batch, seq, max_chars], got shape {tuple(char_ids.shape)}")
    ids = char_ids.detach().cpu().tolist()
    keep = (char_ids > 0).any(-1) if mask is None else mask.bool()
    keep = keep.detach().cpu().tolist()
    out = []
    for row, row_keep in zip(ids, keep):
        words = []
        for token, k in zip(row, row_keep):
            if not k:
                continue
            chars = [c - 1 for c in token]
            if chars[1] == BEGINNING_OF_SENTENCE_CHAR:
                words.append(BOS_TOKEN)
                continue
            if chars[1] == END_OF_SENTENCE_CHAR:
                words.append(EOS_TOKEN)
                continue
            body = []
            for c in chars[1:]:
                if c == END_OF_WORD_CHAR:
                    break
                body.append(c)
            words.append(bytes(b for b in body if 0 <= b < 256).decode("utf-8", "ignore"))
        out.append(words)
    return out


def elmo_char_ids(
    sentences,
    *,
    add_bos_eos: bool = True,
    max_len: int | None = None,
    max_chars: int = MAX_CHARS_PER_TOKEN,
    device: torch.device | str | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """ELMo character ids ``[B, T, max_chars]`` (0 = padding) and the token mask ``[B, T]``.

    Identical to allennlp's ``ELMoCharacterMapper``: a token is
    ``[259, b_1 + 1, ..., b_k + 1, 260, 261, ...]`` for its utf-8 bytes ``b`` (truncated to
    ``max_chars - 2``), ``<S>`` is ``[259, 257, 260, 261, ...]`` and ``</S>`` is
    ``[259, 258, 260, 261, ...]``.

    The corpus-facing spelling of :func:`words_to_char_ids` (the one implementation): it also
    takes :class:`~course_lib.data.corpus.Sentence` objects, adds ``<S>``/``</S>`` by default,
    keeps at most ``max_len`` tokens per sentence (boundaries included) and allows an empty
    sentence when no boundaries are added (an all-padding row).
    """
    if max_chars < 3:
        raise ValueError(f"max_chars must be >= 3 (begin, one char, end), got {max_chars}")
    if max_len is not None and max_len < 1:
        raise ValueError(f"max_len must be >= 1, got {max_len}")
    seqs = [list(t) for t in token_lists(sentences)]
    if not seqs:
        raise ValueError("elmo_char_ids needs at least one sentence")
    if add_bos_eos:
        seqs = [[WordVocab.BOS, *s, WordVocab.EOS] for s in seqs]
    if max_len is not None:
        seqs = [s[:max_len] for s in seqs]
    filled = [i for i, s in enumerate(seqs) if s]
    width = max(max(len(s) for s in seqs), 1)
    chars = torch.zeros(len(seqs), width, max_chars, dtype=torch.long)
    mask = torch.zeros(len(seqs), width, dtype=torch.bool)
    if filled:  # an empty row (no words, no boundaries) stays all padding
        c, m = words_to_char_ids([seqs[i] for i in filled], max_chars=max_chars)
        chars[filled, : c.shape[1]], mask[filled, : m.shape[1]] = c, m
    return chars.to(device), mask.to(device)
