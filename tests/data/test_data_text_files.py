"""Reading a user's own text files: paths, globs, directories, clear errors."""

import pytest

from course_lib.data.text_files import (
    find_text_files,
    load_documents,
    load_sentences,
    read_text_files,
    source_fingerprint,
)


@pytest.fixture()
def texts(tmp_path):
    (tmp_path / "a.txt").write_text(
        "The cat sat. It didn't move!\n\nA new paragraph starts here. Dr Who waved.\n"
    )
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.txt").write_text("One line only\n")
    (tmp_path / "notes.md").write_text("# Title\n\nSome markdown text.\n")
    return tmp_path


def test_paths_globs_and_directories(texts):
    assert [p.name for p in find_text_files(texts)] == ["a.txt", "b.txt"]
    assert [p.name for p in find_text_files(str(texts / "*.md"))] == ["notes.md"]
    assert [p.name for p in find_text_files(str(texts / "**" / "*.txt"))] == ["a.txt", "b.txt"]
    assert [p.name for p in find_text_files([texts / "a.txt", str(texts / "*.txt")])] == ["a.txt"]


def test_documents_and_sentences(texts):
    docs = read_text_files(texts / "a.txt")
    assert len(docs) == 2  # a blank line separates documents
    assert [s.text for s in docs[0].sentences] == ["The cat sat.", "It didn't move!"]
    assert docs[0].sentences[1].tokens == ("It", "did", "n't", "move", "!")
    assert not docs[0].sentences[0].has_tree and docs[0].topic is None
    assert docs[0].sentences[1].punct_mask == (False, False, False, False, True)
    sents = load_sentences(texts)  # a directory: its *.txt files, recursively
    assert [s.text for s in sents][-1] == "One line only"


def test_long_sentences_are_cut(tmp_path):
    (tmp_path / "long.txt").write_text(" ".join(["word"] * 25))
    docs = read_text_files(tmp_path / "long.txt", max_sentence_words=10)
    assert [len(s) for s in docs[0].sentences] == [10, 10, 5]


def test_clear_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        read_text_files(tmp_path / "missing.txt")
    with pytest.raises(ValueError, match="no files match"):
        read_text_files(str(tmp_path / "*.nothing"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="no \\*.txt files"):
        read_text_files(tmp_path / "empty")
    (tmp_path / "blank.txt").write_text("\n\n   \n")
    with pytest.raises(ValueError, match="contain no words"):
        read_text_files(tmp_path / "blank.txt")
    (tmp_path / "latin.txt").write_bytes("Caf\xe9 au lait. Tr\xe8s bien.".encode("latin-1"))
    with pytest.raises(ValueError, match=r"latin\.txt: byte 3 .*not valid utf-8"):
        read_text_files(tmp_path / "latin.txt")
    docs = read_text_files(tmp_path / "latin.txt", encoding="latin-1")
    assert docs[0].sentences[0].tokens == ("Café", "au", "lait", ".")


def test_default_source_is_generated_or_the_environment(texts, monkeypatch):
    monkeypatch.delenv("COURSE_TEXT", raising=False)
    generated = load_documents(n_docs=5, seed=1)
    assert len(generated) == 5 and generated[0].topic is not None and generated[0].sentences[0].has_tree
    assert source_fingerprint() == "generated"
    monkeypatch.setenv("COURSE_TEXT", str(texts / "a.txt"))
    docs = load_documents(n_docs=5)
    assert docs[0].sentences[0].text == "The cat sat."
    fp = source_fingerprint()
    assert fp.startswith("files:")
    (texts / "a.txt").write_text("Changed text.")
    assert source_fingerprint() != fp
