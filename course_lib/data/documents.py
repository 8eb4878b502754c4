"""Documents as the pretraining recipes read them: their sentence texts, a tokenizer trained on
them, their sentences as token ids (:func:`tokenize_documents`), joined into segments of
consecutive sentences (:func:`segment_documents`), and held-out documents split off
(:func:`split_documents`).

A document is a :class:`~course_lib.data.corpus.Document` (generated, or read from text files
by :func:`~course_lib.data.load_documents`) or a plain list of sentence strings.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .text_files import load_documents
from .tokenizers import train_byte_bpe, train_wordpiece

__all__ = [
    "sentence_texts",
    "running_texts",
    "train_tokenizer",
    "tokenize_documents",
    "segment_documents",
    "split_documents",
    "split_corpus",
]


def sentence_texts(doc: Any) -> list[str]:
    """The sentences of a Document, or of a plain list of sentence strings."""
    if hasattr(doc, "sentences"):
        return [s.text if hasattr(s, "text") else str(s) for s in doc.sentences]
    if isinstance(doc, str):
        raise ValueError("a document must be a Document or a list of sentence strings, not one str")
    return [s.text if hasattr(s, "text") else str(s) for s in doc]


def running_texts(doc: Any) -> list[str]:
    """A document's sentences as they stand in its running text: each after the first with
    the space before it. A byte-level BPE tokenizer makes that space part of the next word
    (``ĠThe``, not ``The``), as in any text it is later given; WordPiece ignores it."""
    texts = sentence_texts(doc)
    return texts[:1] + [" " + t for t in texts[1:]]


def train_tokenizer(documents: Sequence[Any], *, kind: str = "wordpiece", vocab_size: int = 4000):
    """A WordPiece (BERT) or byte-level BPE (RoBERTa) tokenizer trained on the documents'
    sentences; a byte-level BPE also on the sentences as they stand in running text
    (:func:`running_texts`), so that it learns both ``The`` (a sentence given alone) and
    ``ĠThe`` (a sentence start inside a text). WordPiece ignores the space."""
    texts = [t for d in documents for t in sentence_texts(d)]
    if kind == "byte-bpe":
        texts += [t for d in documents for t in running_texts(d)[1:]]
    if not texts:
        raise ValueError("the documents hold no sentences to train a tokenizer on")
    if kind == "wordpiece":
        return train_wordpiece(texts, vocab_size=vocab_size)
    if kind == "byte-bpe":
        return train_byte_bpe(texts, vocab_size=vocab_size)
    raise ValueError(f"tokenizer kind must be 'wordpiece' or 'byte-bpe', got {kind!r}")


def tokenize_documents(
    documents: Sequence[Any], tokenizer, *, running: bool = False
) -> list[list[list[int]]]:
    """Token ids without special tokens: ``[document][sentence][token]``.

    ``documents``: :class:`~course_lib.data.corpus.Document` objects (generated or read by
    :func:`~course_lib.data.load_documents`) or lists of sentence strings. ``running``: each
    sentence encoded as it stands in the document's running text (:func:`running_texts`),
    for rows that join a document's sentences into one stream; else each on its own, as a
    sentence or a pair's segment is later given to the tokenizer.
    """
    per_doc = [running_texts(d) if running else sentence_texts(d) for d in documents]
    flat = [t for texts in per_doc for t in texts]
    if not flat:
        raise ValueError("the documents hold no sentences")
    encodings = tokenizer.encode_batch(flat, add_special_tokens=False)
    ids = [e.ids for e in encodings]
    out, k = [], 0
    for texts in per_doc:
        out.append(ids[k : k + len(texts)])
        k += len(texts)
    return out


def segment_documents(docs: Sequence[Sequence[Sequence[int]]], length: int) -> list[list[list[int]]]:
    """Each document's sentences joined into *segments* of consecutive sentences: a segment
    grows until adding the next sentence would pass ``length`` tokens (a longer sentence is a
    segment of its own). BERT's NSP pairs are such spans of text, not single sentences."""
    if length < 1:
        raise ValueError(f"segment length must be positive, got {length}")
    out = []
    for doc in docs:
        segs: list[list[int]] = []
        for sent in doc:
            if segs and len(segs[-1]) + len(sent) <= length:
                segs[-1] = segs[-1] + list(sent)
            else:
                segs.append(list(sent))
        out.append(segs)
    return out


def split_documents(documents: Sequence[Any], heldout: Sequence[Any] | float | None) -> tuple[list, list]:
    """``(training documents, held-out documents)``: ``heldout`` is a fraction up to 0.5
    (every k-th document is held out, k = round(1/heldout); nothing when fewer than 2 would
    remain on either side), a list of
    held-out documents, or ``None``."""
    documents = list(documents)
    if heldout is None:
        return documents, []
    if isinstance(heldout, float):
        if not 0.0 < heldout <= 0.5:
            raise ValueError(
                f"heldout must be a fraction in (0, 0.5] (every k-th document is held out, "
                f"k = round(1/heldout) >= 2), a list of documents or None, got {heldout}"
            )
        k = round(1 / heldout)
        train = [d for i, d in enumerate(documents) if i % k != k - 1]
        held = [d for i, d in enumerate(documents) if i % k == k - 1]
        if len(held) < 2 or len(train) < 2:  # too little text to hold any back: evaluate on nothing
            return documents, []
        return train, held
    return documents, list(heldout)


def split_corpus(n_docs: int, seed: int, heldout: float) -> tuple[list, list]:
    """``(training documents, held-out documents)`` of the course corpus's ``n_docs`` documents
    of ``seed`` (:func:`~course_lib.data.load_documents`), every k-th one held out
    (:func:`split_documents`): the text every study starts from."""
    return split_documents(load_documents(n_docs=n_docs, seed=seed), heldout)
