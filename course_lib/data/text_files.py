"""Train on your own text: read text files into the same Document/Sentence objects as the corpus.

Every chapter takes its training text from :func:`load_documents` / :func:`load_sentences`.
Without a source they generate the course corpus; with a path, a directory or a glob
(``"~/books/*.txt"``, ``"data/**/*.md"``) they read your files instead:

* documents are separated by blank lines (a file without blank lines is one document);
* sentences are split at ``. ! ?`` followed by a capital letter or digit, and after the
  CJK full stops ``。！？``; a line break inside a paragraph is a space (hard-wrapped text
  keeps its sentences); words with :func:`~course_lib.data.words.word_tokenize`, a word
  longer than ``MAX_WORD_CHARS`` cut into pieces of that length (so no input makes
  tokenizer training super-linear);
* binary files (archives, images, PDFs, anything with NUL bytes) and encoded or minified
  data (a large file with almost no whitespace: base64, minified code) are refused with a
  one-line ``ValueError`` naming the file; ``encoding`` (``course train --encoding``, see
  :func:`reading_encoding`) decodes the files, UTF-8 by default;
* user sentences have no gold trees (``sentence.has_tree`` is False), so the probing
  chapter still needs the generated corpus.

The environment variable ``COURSE_TEXT`` sets the default source for every chapter, e.g.
``COURSE_TEXT="~/books/*.txt" make book``. A chapter that caches trained models should put
:func:`source_fingerprint` of its source in the cache key.
"""

from __future__ import annotations

import contextvars
import glob
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ..hashing import files_hash
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
    "reading_encoding",
    "MAX_WORD_CHARS",
]

ENV_VAR = "COURSE_TEXT"
_GLOB_CHARS = re.compile(r"[*?\[]")
_PARAGRAPH_RE = re.compile(r"\n\s*\n")
_CJK_END_RE = re.compile(r"(?<=[。！？])\s*")
MAX_WORD_CHARS = 100  # longer "words" (base64, hashes, minified code) are cut into pieces
_ENCODING: contextvars.ContextVar[str] = contextvars.ContextVar("course_text_encoding", default="utf-8")
# magic numbers of files that are not text: (prefix, offset, what it is)
_MAGIC = [
    (b"\x1f\x8b", 0, "a gzip archive"),
    (b"PK\x03\x04", 0, "a zip archive"),
    (b"BZh", 0, "a bzip2 archive"),
    (b"\xfd7zXZ\x00", 0, "an xz archive"),
    (b"7z\xbc\xaf\x27\x1c", 0, "a 7z archive"),
    (b"(\xb5/\xfd", 0, "a zstd archive"),
    (b"ustar", 257, "a tar archive"),
    (b"%PDF", 0, "a PDF"),
    (b"\x89PNG", 0, "a PNG image"),
    (b"\xff\xd8\xff", 0, "a JPEG image"),
    (b"GIF8", 0, "a GIF image"),
    (b"\x7fELF", 0, "an executable"),
    (b"SQLite format 3", 0, "an SQLite database"),
]


@contextmanager
def reading_encoding(encoding: str | None) -> Iterator[None]:
    """Text files read inside decode with ``encoding`` (``None``: UTF-8), unless a call names
    its own; ``course train --encoding`` sets it for the whole run. An unknown encoding is a
    ``ValueError``."""
    import codecs

    enc = encoding or "utf-8"
    try:
        codecs.lookup(enc)
    except LookupError:
        raise ValueError(f"unknown encoding {enc!r} (e.g. utf-8, latin-1, cp1252, utf-16)") from None
    token = _ENCODING.set(enc)
    try:
        yield
    finally:
        _ENCODING.reset(token)


def _not_text(path: Path, data: bytes, encoding: str) -> str | None:
    """What ``data`` is when it is not text (``None`` for text)."""
    for magic, offset, what in _MAGIC:
        if data[offset : offset + len(magic)] == magic:
            return what
    if not encoding.lower().replace("-", "").startswith("utf16") and b"\x00" in data[:65536]:
        if data[:2] in (b"\xff\xfe", b"\xfe\xff"):  # UTF-16's byte-order mark: text, in another encoding
            return "UTF-16 text (it starts with UTF-16's byte-order mark): read it with --encoding utf-16"
        return "a binary file (it holds NUL bytes)"
    return None


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
    what = _not_text(path, data, encoding)
    if what is not None and what.startswith("UTF-16"):
        raise ValueError(f"{path} is {what}")
    if what is not None:
        raise ValueError(f"{path} is {what}, not text: give text files (extract archives first)")
    try:
        # a byte-order mark (Windows editors write one) is no character of the text
        text = data.decode(encoding).removeprefix("\ufeff")
    except UnicodeDecodeError as exc:
        raise ValueError(
            f"{path}: byte {exc.start} ({data[exc.start : exc.start + 1]!r}) is not valid {encoding}; "
            f"pass --encoding latin-1 (or the file's real encoding), or re-save the file as UTF-8"
        ) from None
    if len(text) > 100_000:
        spaces = sum(text.count(c) for c in " \n\t\u3000")
        if spaces / len(text) < 0.01 and not _mostly_cjk(text):
            raise ValueError(
                f"{path}: {len(text):,} characters with {100 * spaces / len(text):.2f}% whitespace look like "
                "encoded or minified data (base64, minified code), not prose: give text files"
            )
    return text


def _mostly_cjk(text: str) -> bool:
    """Chinese and Japanese prose has no spaces between words: not a sign of encoded data."""
    sample = text[:20000]
    return sum("\u3000" <= c <= "\u9fff" or "\uac00" <= c <= "\ud7af" for c in sample) > len(sample) // 4


def _sentences(paragraph: str) -> list[str]:
    return [p for s in split_sentences(paragraph) for p in _CJK_END_RE.split(s) if p.strip()]


def _cap(tokens: list[str]) -> list[str]:
    if all(len(t) <= MAX_WORD_CHARS for t in tokens):
        return tokens
    return [t[i : i + MAX_WORD_CHARS] for t in tokens for i in range(0, len(t), MAX_WORD_CHARS)]


def read_text_files(source, *, encoding: str | None = None, max_sentence_words: int = 100) -> list[Document]:
    """Read files into :class:`Document` objects (blank lines separate documents).

    Sentences longer than ``max_sentence_words`` tokens are cut into pieces of that length.
    ``encoding`` ``None``: the one of the enclosing :func:`reading_encoding` (UTF-8).
    Raises ValueError if the files hold no words at all, or for a file that is not text.
    """
    encoding = encoding or _ENCODING.get()
    if max_sentence_words < 1:
        raise ValueError(f"max_sentence_words must be >= 1, got {max_sentence_words}")
    docs: list[Document] = []
    for path in find_text_files(source):
        text = _read(path, encoding).replace("\r\n", "\n").replace("\r", "\n")
        for para in _PARAGRAPH_RE.split(text):
            sents = []
            for s in _sentences(para):
                words = word_tokenize(s)
                toks = _cap(words)
                if len(toks) <= max_sentence_words and toks == words:  # whole: keep it as written
                    sents.append(Sentence(tokens=tuple(toks), written=s.strip()))
                    continue
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
    encoding: str | None = None,
) -> list[Document]:
    """Documents for training: ``n_docs`` generated ones, or all documents of the user's files."""
    src = resolve_source(source)
    if src is None:
        return generate_documents(n_docs, seed=seed, sentences=sentences)
    return read_text_files(src, encoding=encoding)


def load_sentences(
    source=None, *, n_sentences: int = 20_000, seed: int = 0, encoding: str | None = None
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
    return "files:" + files_hash((str(p.resolve()), p) for p in find_text_files(src))[:16]
