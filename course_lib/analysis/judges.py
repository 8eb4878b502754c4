r"""Judges of generated text that do not favour one kind of language model.

The AR model's likelihood favours text like its own samples and a masked LM's pseudo-log-
likelihood favours text like its own fillings. The course's text, though, comes from a known
generator (:mod:`course_lib.data.corpus`), and every sentence it writes carries its part-of-
speech tags. That gives a judge that knows neither model:

* :class:`GrammarJudge`: a text is *grammatical* when some tagging of its words (each word
  may take any class the generator ever gave it) makes every run of ``n`` consecutive classes
  one that the generator produces (a large sample of the generator's documents decides). A
  class is the word itself for function words (*the*, *is*, *because*, *she*, punctuation),
  and the part of speech plus an ending (``-s``, ``-ed``, ``-ing``) for content words
  (nouns, verbs, adjectives, adverbs, names, numerals), so *the cats eats* fails where *the
  cats eat* passes, and unseen combinations of content words are not held against a text. A
  finite-state check of this kind accepts a superset of the generator's language: its false
  negatives are measured on held-out text of the generator (the ceiling), and its power on
  that text shuffled (the floor).
* :func:`distinct_n`: the share of distinct ``n``-grams among all ``n``-grams of a set of
  continuations (Li et al., 2016): low when a generator writes the same few phrases.
* :func:`text_words`: the words and punctuation marks of decoded text, the unit both use.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

__all__ = ["CONTENT_POS", "GrammarJudge", "distinct_n", "text_words"]

#: parts of speech whose words are judged by their class, not their identity
CONTENT_POS = frozenset({"NOUN", "VERB", "ADJ", "ADV", "PROPN", "NUM"})
#: function-word parts of speech judged by the part of speech alone (the rest keep their word)
_POS_ONLY = frozenset({"ADP", "SCONJ", "CCONJ"})
_START = "<s>"


def text_words(text: str) -> list[str]:
    """The lower-cased words and punctuation marks of ``text``; a contraction split by a
    WordPiece decoder (*didn ' t*) becomes the generator's tokens (*did*, *n't*)."""
    w = re.findall(r"\w+|[^\w\s]", text.lower())
    out: list[str] = []
    i = 0
    while i < len(w):
        if len(w[i]) > 1 and w[i].endswith("n") and w[i + 1 : i + 3] == ["'", "t"]:
            out += [w[i][:-1], "n't"]
            i += 3
        else:
            out.append(w[i])
            i += 1
    return out


def word_class(pos: str, word: str) -> str:
    """The class :class:`GrammarJudge` reads for ``word`` tagged ``pos``."""
    if pos in _POS_ONLY:
        return pos
    if pos == "DET":
        return word if word in ("a", "an") else "DET"
    if pos not in CONTENT_POS:
        return word
    ending = next((e for e in ("ing", "ed", "s") if word.endswith(e)), "")
    return f"{pos}:{ending}"


def distinct_n(continuations: Sequence[Sequence[str]], n: int) -> float:
    """Distinct ``n``-grams / all ``n``-grams over ``continuations`` (each a list of words)."""
    if n < 1:
        raise ValueError(f"n must be positive, got {n}")
    grams = [tuple(w[i : i + n]) for w in continuations for i in range(len(w) - n + 1)]
    if not grams:
        raise ValueError(f"the continuations hold no {n}-gram")
    return len(set(grams)) / len(grams)


class GrammarJudge:
    """Accepts a text when every ``n``-gram of word classes can be one the generator writes.

    Build it with :meth:`from_sentences` from tagged sentences of the generator (documents
    keep their order, so runs across a sentence boundary are seen too); :meth:`accepts` runs
    a small dynamic programme over the classes each word may take.
    """

    def __init__(self, lexicon: dict[str, frozenset[str]], ngrams: frozenset[tuple[str, ...]], n: int):
        if n < 2:
            raise ValueError(f"n must be at least 2, got {n}")
        self.lexicon, self.ngrams, self.n = lexicon, ngrams, n

    @classmethod
    def from_sentences(cls, documents: Iterable[Sequence], normalise, *, n: int = 3) -> GrammarJudge:
        """``documents``: sequences of tagged :class:`~course_lib.data.corpus.Sentence`\\ s
        (a sentence alone is a document of one). ``normalise(word) -> list[str]``: what a
        model's tokenizer makes of one of the generator's tokens once decoded (e.g. a
        WordPiece round trip then :func:`text_words`), so that the judge reads the text the
        way it reaches the models."""
        pieces_of: dict[tuple[str, str], list[str]] = {}
        lexicon: dict[str, set[str]] = {}
        grams: set[tuple[str, ...]] = set()

        def classes(sentence) -> list[str]:
            out = []
            for word, pos in zip(sentence.tokens, sentence.pos):
                key = (word, pos)
                if key not in pieces_of:
                    pieces_of[key] = ["n't"] if word == "n't" else normalise(word)
                    for p in pieces_of[key]:
                        lexicon.setdefault(p, set()).add(word_class(pos, p))
                out += [word_class(pos, p) for p in pieces_of[key]]
            return out

        for doc in documents:
            if not doc or doc[0].pos is None:
                raise ValueError("GrammarJudge needs the generator's tagged sentences")
            per_sentence = [[_START, *classes(s)] for s in doc]
            stream = [_START] + [c for s in per_sentence for c in s[1:]]
            for seq in (stream, *per_sentence):  # every sentence may also start a text
                grams.update(zip(*(seq[i:] for i in range(n))))
        return cls({w: frozenset(c) for w, c in lexicon.items()}, frozenset(grams), n)

    def accepts(self, words: Sequence[str]) -> bool:
        """Whether ``words`` (a text that starts a sentence, as from :func:`text_words`) has a
        tagging whose every ``n``-gram of classes the generator produced; an unknown word fails."""
        states = {(_START,)}
        for w in words:
            options = self.lexicon.get(w)
            if not options:
                return False
            nxt = set()
            for st in states:
                for c in options:
                    g = (*st, c)
                    if len(g) == self.n and g not in self.ngrams:
                        continue
                    nxt.add(g[-(self.n - 1) :])
            if not nxt:
                return False
            states = nxt
        return True

    def grammatical_share(self, texts: Sequence[Sequence[str]]) -> float:
        """The share of ``texts`` (word lists) that :meth:`accepts`."""
        if not texts:
            raise ValueError("grammatical_share needs at least one text")
        return sum(self.accepts(t) for t in texts) / len(texts)

    def known(self, word: str) -> bool:
        return word in self.lexicon
