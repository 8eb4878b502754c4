"""Train on your own text: read text files into the same Document/Sentence objects as the corpus.

Every chapter takes its training text from :func:`load_documents` / :func:`load_sentences`.
Without a source they generate the course corpus; with a path, a directory or a glob
(``"~/books/*.txt"``, ``"data/**/*.md"``) they read your files instead:

* documents are separated by blank lines (a file without blank lines is one document);
* sentences are split at ``. ! ?`` followed by a capital letter, words with
  :func:`~course_lib.data.words.word_tokenize`;
* user sentences have no gold trees (``sentence.has_tree`` is False), so the probing
  chapter still needs the generated corpus.

The environment variable ``COURSE_TEXT`` sets the default source for every chapter, e.g.
``COURSE_TEXT="~/books/*.txt" make book``. A chapter that caches trained models should put
:func:`source_fingerprint` of its source in the cache key.
"""

from __future__ import annotations

import glob
import hashlib
import os
import re
from pathlib import Path

from .corpus import Document, Sentence, generate_corpus, generate_documents
from .words import split_sentences, word_tokenize

__all__ = [
    "ENV_VAR",
    "find_text_files",
    "read_text_files",
    "load_documents",
    "load_sentences",
    "resolve_source",
    "source_fingerprint",
]

ENV_VAR = "COURSE_TEXT"
_GLOB_CHARS = re.compile(r"[*?\[]")
_PARAGRAPH_RE = re.compile(r"\n\s*\n")


def find_text_files(source: str | os.PathLike | list) -> list[Path]:
    """The files named by a path, a directory (its ``*.txt`` files, recursively) or a glob; sorted.

    Raises FileNotFoundError for a missing path and ValueError when a glob or directory
    matches no file.
    """
    if isinstance(source, (list, tuple)):
        if not source:
            raise ValueError("empty list of text sources")
        out: list[Path] = []
        for s in source:
            out.extend(p for p in find_text_files(s) if p not in out)
        return out
    text = os.path.expanduser(str(source))
    if _GLOB_CHARS.search(text):
        files = sorted(Path(p) for p in glob.glob(text, recursive=True) if os.path.isfile(p))
        if not files:
            raise ValueError(f"no files match the pattern {text!r}")
        return files
    path = Path(text)
    if not path.exists():
        raise FileNotFoundError(f"text source {text!r} does not exist")
    if path.is_dir():
        files = sorted(p for p in path.rglob("*.txt") if p.is_file())
        if not files:
            raise ValueError(
                f"directory {text!r} holds no *.txt files (give a glob such as {text!r}/**/*.md)"
            )
        return files
    return [path]


def _read(path: Path, encoding: str) -> str:
    data = path.read_bytes()
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as exc:
        raise ValueError(
            f"{path}: byte {exc.start} ({data[exc.start : exc.start + 1]!r}) is not valid {encoding}; "
            f"pass encoding='latin-1' (or the file's real encoding), or re-save the file as UTF-8"
        ) from None


def read_text_files(source, *, encoding: str = "utf-8", max_sentence_words: int = 100) -> list[Document]:
    """Read files into :class:`Document` objects (blank lines separate documents).

    Sentences longer than ``max_sentence_words`` tokens are cut into pieces of that length.
    Raises ValueError if the files hold no words at all.
    """
    if max_sentence_words < 1:
        raise ValueError(f"max_sentence_words must be >= 1, got {max_sentence_words}")
    docs: list[Document] = []
    for path in find_text_files(source):
        text = _read(path, encoding).replace("\r\n", "\n").replace("\r", "\n")
        for para in _PARAGRAPH_RE.split(text):
            sents = []
            for s in split_sentences(para):
                toks = word_tokenize(s)
                for i in range(0, len(toks), max_sentence_words):
                    sents.append(Sentence(tokens=tuple(toks[i : i + max_sentence_words])))
            if sents:
                docs.append(Document(tuple(sents)))
    if not docs:
        raise ValueError(f"the files of {source!r} contain no words")
    return docs


def resolve_source(source=None) -> str | None:
    """``source`` if given, else ``$COURSE_TEXT`` if set, else None (= the generated corpus)."""
    if source is not None and source != "":
        return source
    env = os.environ.get(ENV_VAR, "").strip()
    return env or None


def load_documents(
    source=None,
    *,
    n_docs: int = 2000,
    seed: int = 0,
    sentences: tuple[int, int] = (3, 8),
    encoding: str = "utf-8",
) -> list[Document]:
    """Documents for training: ``n_docs`` generated ones, or all documents of the user's files."""
    src = resolve_source(source)
    if src is None:
        return generate_documents(n_docs, seed=seed, sentences=sentences)
    return read_text_files(src, encoding=encoding)


def load_sentences(
    source=None, *, n_sentences: int = 20_000, seed: int = 0, encoding: str = "utf-8"
) -> list[Sentence]:
    """Sentences for training: ``n_sentences`` generated ones, or all sentences of the user's files."""
    src = resolve_source(source)
    if src is None:
        return generate_corpus(n_sentences, seed=seed)
    return [s for d in read_text_files(src, encoding=encoding) for s in d.sentences]


def source_fingerprint(source=None) -> str:
    """A short string that changes when the training text changes (for checkpoint cache keys).

    ``"generated"`` for the corpus (its seed and size belong in the caller's spec), else a
    hash of the files' names, sizes and contents.
    """
    src = resolve_source(source)
    if src is None:
        return "generated"
    h = hashlib.sha256()
    for p in find_text_files(src):
        h.update(str(p.resolve()).encode())
        h.update(p.read_bytes())
    return "files:" + h.hexdigest()[:16]
