"""Splitting raw English text into sentences and word tokens, and joining tokens back.

The generated corpus and a user's own text go through the same rules, so a model trained on
either sees the same kind of tokens. Tokens follow the Penn Treebank / Universal
Dependencies convention: punctuation is split off and negation and possessive clitics are
separate tokens (``didn't`` -> ``did`` ``n't``, ``Tom's`` -> ``Tom`` ``'s``).
:func:`detokenize` inverts :func:`word_tokenize` on text written in that style:
``word_tokenize(detokenize(tokens)) == tokens`` holds for every generated sentence.
"""

from __future__ import annotations

import re

__all__ = ["word_tokenize", "detokenize", "split_sentences"]

# Order matters: the stem of a negation ("did" in "didn't") first, then the clitics,
# then words (letters/digits, with inner hyphens or apostrophes), then any other symbol.
_TOKEN_RE = re.compile(
    r"[A-Za-z]+(?=n't\b)"  # "did" in "didn't", "ca" in "can't" (Penn Treebank style)
    r"|n't\b"
    r"|[^\W_]+(?='(?:s|re|ve|ll|d|m)\b)"  # "Tom" in "Tom's"
    r"|'(?:s|re|ve|ll|d|m)\b"
    r"|\d+(?:[.,]\d+)+"  # 3.5, 1,000
    r"|[^\W_]+(?:[-'][^\W_]+)*"
    r"|\S",
    re.IGNORECASE,
)

_NO_SPACE_BEFORE = frozenset(
    {".", ",", "!", "?", ";", ":", "n't", "'s", "'re", "'ve", "'ll", "'d", "'m", ")", "%"}
)
_NO_SPACE_AFTER = frozenset({"(", "$"})

# A sentence ends at . ! or ? (optionally followed by a closing quote or bracket) before
# whitespace and an upper-case letter of any script (Ü, É, Я), a digit or an opening quote:
# the regex finds the candidates, :func:`split_sentences` keeps those before such a letter.
_SENTENCE_END_RE = re.compile(r"(?:(?<=[.!?])|(?<=[.!?][\"')\]]))\s+(?=[\"'(\[]?(\w))")


def word_tokenize(text: str) -> list[str]:
    """Split ``text`` into word and punctuation tokens (Penn Treebank style clitics)."""
    return _TOKEN_RE.findall(text)


def detokenize(tokens: list[str] | tuple[str, ...]) -> str:
    """Join tokens with single spaces, except before punctuation and clitics."""
    out: list[str] = []
    glue = True
    for tok in tokens:
        if out and not glue and tok not in _NO_SPACE_BEFORE:
            out.append(" ")
        out.append(tok)
        glue = tok in _NO_SPACE_AFTER
    return "".join(out)


def split_sentences(text: str) -> list[str]:
    """Split a paragraph into sentences at ``. ! ?`` followed by a capital letter (of any
    script) or digit.

    A heuristic (abbreviations such as "Dr. Smith" split wrongly); good enough for training
    a language model on one's own text.
    """
    text = " ".join(text.split())
    if not text:
        return []
    out, start = [], 0
    for m in _SENTENCE_END_RE.finditer(text):
        if m.group(1).isupper() or m.group(1).isdigit():
            out.append(text[start : m.start()])
            start = m.end()
    out.append(text[start:])
    return [s for s in out if s.strip()]
