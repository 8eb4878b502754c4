"""Labelled tasks built from the generated corpus, one function per chapter's need.

* :func:`agreement_pairs` / :func:`agreement_examples`: subject-verb agreement
  acceptability (Linzen et al. 2016; Goldberg 2019). Each grammatical sentence whose
  subject is separated from its verb by a noun of the *other* number (*The keys to the
  cabinet are ...*) is paired with the same sentence with the verb's number flipped, so
  that it agrees with the distractor (*The keys to the cabinet is ...*). Label 1 =
  grammatical, 0 = agreement violation.
* :func:`sense_examples`: occurrences of an ambiguous word (*jam*: traffic / fruit) with
  their sense, for measuring how contextual embeddings separate senses.
* :func:`pronoun_pairs`: Winograd-style minimal pairs that differ in one adjective, which
  decides what "it" refers to.
* :func:`name_sentences`: sentences with multi-token names (*New York*, *Harry Potter*).

BERT's next-sentence and ALBERT's sentence-order pair tasks on this text are drawn by the
pretraining pairs' own rule: :func:`course_lib.objectives.pairs.text_pairs`.
"""

from __future__ import annotations

import functools
import random
from dataclasses import dataclass

from .corpus import CorpusConfig, Document, Grammar, Sentence, generate_corpus
from .lexicon import load_lexicon
from .words import detokenize

__all__ = [
    "AgreementExample",
    "agreement_examples",
    "agreement_pairs",
    "SenseExample",
    "sense_words",
    "sense_examples",
    "PronounPair",
    "pronoun_pairs",
    "name_sentences",
    "name_documents",
    "two_word_cities",
    "topic_pairs",
    "pos_tagging_task",
]


@functools.lru_cache(maxsize=1)
def _number_tables() -> tuple[dict[str, str], frozenset[str], frozenset[str]]:
    lex = load_lexicon()
    flip = {
        "is": "are",
        "are": "is",
        "was": "were",
        "were": "was",
        "has": "have",
        "have": "has",
        "does": "do",
        "do": "does",
    }
    for v in lex.verbs:
        flip[v.s3] = v.lemma
        flip[v.lemma] = v.s3
    singular = frozenset(n.lemma for n in lex.nouns if n.plural is not None)
    plural = frozenset(n.plural for n in lex.nouns if n.plural is not None)
    return flip, singular - plural, plural - singular


@dataclass(frozen=True)
class AgreementExample:
    tokens: tuple[str, ...]
    label: int  # 1 = grammatical, 0 = the verb agrees with the distractor instead
    subject: int  # index of the subject's head noun
    verb: int  # index of the verb (or auxiliary) that shows number
    attractor: int  # index of the distractor noun between them

    @property
    def text(self) -> str:
        return detokenize(self.tokens)


def agreement_examples(n_pairs: int, *, seed: int = 0) -> list[AgreementExample]:
    """``2 * n_pairs`` examples: each grammatical sentence followed by its violating twin."""
    if n_pairs < 0:
        raise ValueError(f"n_pairs must be >= 0, got {n_pairs}")
    flip, singular, plural = _number_tables()
    out: list[AgreementExample] = []
    chunk = 0
    while len(out) < 2 * n_pairs:
        for s in generate_corpus(max(64, n_pairs), seed=seed * 1000 + chunk, kind="agreement"):
            if len(out) >= 2 * n_pairs:
                break
            if not s.agreement:
                continue
            subj, verb, att = s.agreement[-1]
            if att < 0:
                continue
            ns = "s" if s.tokens[subj] in singular else "p" if s.tokens[subj] in plural else None
            na = "s" if s.tokens[att] in singular else "p" if s.tokens[att] in plural else None
            if ns is None or na is None or ns == na or s.tokens[verb] not in flip:
                continue
            bad = list(s.tokens)
            bad[verb] = flip[bad[verb]]
            out.append(AgreementExample(s.tokens, 1, subj, verb, att))
            out.append(AgreementExample(tuple(bad), 0, subj, verb, att))
        chunk += 1
    return out


def agreement_pairs(n_pairs: int, *, seed: int = 0, shuffle: bool = True) -> list[tuple[str, int]]:
    """``(sentence, label)`` for agreement acceptability: label 1 grammatical, 0 violation.

    ``2 * n_pairs`` items, balanced; with ``shuffle=False`` each grammatical sentence is
    directly followed by its violating twin (a minimal pair).
    """
    items = [(e.text, e.label) for e in agreement_examples(n_pairs, seed=seed)]
    if shuffle:
        random.Random(seed).shuffle(items)
    return items


@dataclass(frozen=True)
class SenseExample:
    sentence: Sentence
    index: int  # position of the ambiguous word
    sense: str  # e.g. "traffic" / "fruit"

    @property
    def word(self) -> str:
        return self.sentence.tokens[self.index]


def sense_words() -> list[str]:
    """The ambiguous nouns of the lexicon (jam, bank, bat, mouse, ...)."""
    return sorted(load_lexicon().senses)


def sense_examples(word: str = "jam", *, n_per_sense: int = 50, seed: int = 0) -> list[SenseExample]:
    """``n_per_sense`` sentences for each sense of ``word``, in which context separates the senses."""
    lex = load_lexicon()
    if word not in lex.senses:
        raise ValueError(f"{word!r} is not an ambiguous word of the lexicon; choose from {sense_words()}")
    if n_per_sense < 1:
        raise ValueError(f"n_per_sense must be >= 1, got {n_per_sense}")
    senses = [n.sense for n in lex.senses[word]]
    got: dict[str, list[SenseExample]] = {s: [] for s in senses}
    rng = random.Random(seed)
    g = Grammar(lex, rng, CorpusConfig())
    for _ in range(200 * n_per_sense):
        if all(len(v) >= n_per_sense for v in got.values()):
            break
        if word == "jam":
            sent = g.sentence("food", "jam")
        else:
            sent = g.forced_sentence(rng.choice(lex.senses[word]))
        for idx, sense in sent.senses:
            if (
                sent.tokens[idx].lower() in (word, *(n.plural for n in lex.senses[word] if n.plural))
                and sense in got
                and len(got[sense]) < n_per_sense
            ):
                got[sense].append(SenseExample(sent, idx, sense))
    return [e for s in senses for e in got[s]]


@dataclass(frozen=True)
class PronounPair:
    """Two sentences that differ only in the adjective: "it" is the subject in one, the object
    in the other."""

    to_subject: Sentence  # The animal didn't cross the street because it was too tired.
    to_object: Sentence  # The animal didn't cross the street because it was too wide.

    @property
    def pronoun(self) -> int:
        return self.to_subject.coref[0][0]


def pronoun_pairs(n: int, *, seed: int = 0) -> list[PronounPair]:
    """``n`` Winograd-style minimal pairs with gold antecedents in ``sentence.coref``."""
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    g = Grammar(load_lexicon(), random.Random(seed), CorpusConfig())
    return [PronounPair(*g.winograd_pair()) for _ in range(n)]


def name_sentences(n: int, *, seed: int = 0) -> list[Sentence]:
    """``n`` sentences that contain a multi-token name (``sentence.names`` has its span)."""
    out: list[Sentence] = []
    chunk = 0
    while len(out) < n:
        out.extend(s for s in generate_corpus(max(64, n), seed=seed * 1000 + chunk, kind="name") if s.names)
        chunk += 1
    return out[:n]


def name_documents(n: int, *, seed: int = 0, per_document: int = 5) -> list[list[str]]:
    """:func:`name_sentences` as training text: ``n`` sentences with a multi-token name, in
    documents of ``per_document`` sentences (lists of strings, as the recipes take them).

    The documents of :func:`~course_lib.data.load_documents` rarely name a city (a few times
    in 2,000 documents); chapter 5 adds these so that each two-word city is seen often.
    """
    if per_document < 1:
        raise ValueError(f"per_document must be at least 1, got {per_document}")
    texts = [x.text for x in name_sentences(n, seed=seed)]
    return [texts[i : i + per_document] for i in range(0, len(texts), per_document)]


def two_word_cities() -> list[tuple[str, str]]:
    """The lexicon's cities whose name is two words (*New York*, *Los Angeles*, *San Jose*),
    as ``(first, second)`` pairs in the lexicon's order: the consistent pairs of chapter 5's
    joint distributions (*New Angeles* is no city)."""
    return [tuple(city.split()) for city, _ in load_lexicon().places if len(city.split()) == 2]


def _check_docs(documents, sentences_per_unit: int = 1) -> list[Document]:
    docs = list(documents)
    if sum(len(d) > sentences_per_unit for d in docs) == 0:
        raise ValueError(
            f"pairs of units of {sentences_per_unit} sentence(s) need at least one document with more than "
            f"{sentences_per_unit} sentences"
        )
    return docs


def topic_pairs(documents, n: int, *, seed: int = 0) -> list[tuple[str, str, int]]:
    """A sentence-pair task: ``(a, b, label)`` with a and b from two *different* documents,
    label 1 when the documents share a topic and 0 when not (half each). Unlike NSP, b never
    continues a, so only the meaning of the words tells the classes apart."""
    docs = [d for d in _check_docs(documents) if d.topic is not None and len(d) >= 1]
    by_topic: dict[str, list[Document]] = {}
    for d in docs:
        by_topic.setdefault(d.topic, []).append(d)
    topics = sorted(t for t, ds in by_topic.items() if len(ds) >= 2)
    if len(topics) < 2:
        raise ValueError("topic pairs need at least two topics with two or more documents each")
    rng = random.Random(seed)
    out = []
    for i in range(n):
        same = i % 2 == 0
        t = rng.choice(topics)
        d1, d2 = (
            rng.sample(by_topic[t], 2)
            if same
            else (rng.choice(by_topic[t]), rng.choice(by_topic[rng.choice([u for u in topics if u != t])]))
        )
        a, b = rng.choice(d1.sentences), rng.choice(d2.sentences)
        out.append((a.text, b.text, int(same)))
    rng.shuffle(out)
    return out


def pos_tagging_task(
    train: tuple[int, int], test: tuple[int, int]
) -> tuple[list[str], list[tuple[list[str], list[int]]], list[tuple[list[str], list[int]]]]:
    """Part-of-speech tagging on generated sentences: ``(tagset, training items, test items)``.

    ``train`` and ``test`` are ``(sentences, seed)`` of :func:`~course_lib.data.generate_corpus`;
    an item is ``(tokens, tag indices)`` into the tagset, the sorted tags of both sets."""
    tag_train, tag_test = generate_corpus(train[0], seed=train[1]), generate_corpus(test[0], seed=test[1])
    tagset = sorted({x for sent in tag_train + tag_test for x in sent.pos})
    items = [(sent.tokens, [tagset.index(x) for x in sent.pos]) for sent in tag_train]
    evals = [(sent.tokens, [tagset.index(x) for x in sent.pos]) for sent in tag_test]
    return tagset, items, evals
