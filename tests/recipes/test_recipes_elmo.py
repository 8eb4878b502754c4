"""The ELMo recipe: data tables and batches, a tiny training run, caching, `course train elmo`
(on the corpus and on a user's text files), loading what it writes, and clear errors."""

from __future__ import annotations

import math

import pytest
import torch

from course_lib.analysis import layer_vectors
from course_lib.cli import main as course_main
from course_lib.data import WordVocab, generate_corpus
from course_lib.data.chars import words_to_char_ids
from course_lib.models.elmo import ElmoLanguageModel
from course_lib.recipes.elmo import (
    SIZES,
    ElmoLMData,
    build_vocab,
    elmo_config,
    load_pretrained_elmo,
    pretrain_elmo,
    random_word_sampler,
    save_pretrained_elmo,
)


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def corpus():
    return generate_corpus(300, seed=1)


def test_vocab_and_data_tables(corpus):
    vocab = build_vocab(corpus, vocab_size=50)
    assert len(vocab) == 50 and vocab.itos[:4] == list(WordVocab.SPECIALS)
    data = ElmoLMData(corpus, vocab, max_len=10)
    assert len(data) == len(corpus)
    assert data.char_table.dtype == torch.int16 and (data.char_table[0] == 0).all()
    rows = [0, 5, 7]
    b = data.batch(rows)
    sents = [["<S>", *corpus[i].tokens[:8], "</S>"] for i in rows]
    width = max(len(s) for s in sents)
    assert b["char_ids"].shape == (3, width, 50) and b["mask"].shape == b["word_ids"].shape == (3, width)
    # the table lookup spells exactly what words_to_char_ids spells
    expected, mask = words_to_char_ids(sents)
    assert torch.equal(b["char_ids"].long(), expected) and torch.equal(b["mask"], mask)
    for r, s in enumerate(sents):
        assert b["word_ids"][r, : len(s)].tolist() == vocab.encode(s)
        assert (b["word_ids"][r, len(s) :] == 0).all()
    assert (b["word_ids"][b["mask"]] == vocab.unk_id).any()  # a 50-word vocabulary leaves words unknown
    assert int(data.lengths.max()) <= 10


def test_sampler_epochs_cover_every_sentence_once_and_group_lengths(corpus):
    data = ElmoLMData(corpus, build_vocab(corpus))
    sample = data.sampler(10, seed=3, group=5)
    per_epoch = len(corpus) // 10
    seen = []
    widths = []
    for step in range(per_epoch):
        b = sample(step)
        assert b["char_ids"].shape[0] == 10
        widths.append(b["mask"].shape[1])
        # recover the rows from the word ids: sentence i is the only one with its exact id row
        for row in b["word_ids"]:
            seen.append(tuple(row[row > 0].tolist()))
    assert (
        len(set(seen)) == len(seen) == per_epoch * 10
    )  # no sentence twice in an epoch (the corpus has no duplicates)
    assert (
        sample(0)["word_ids"].tolist() == data.sampler(10, seed=3, group=5)(0)["word_ids"].tolist()
    )  # reproducible
    random_width = sum(data.batch(torch.randperm(len(data))[:10])["mask"].shape[1] for _ in range(per_epoch))
    assert sum(widths) < random_width  # length grouping: less padding than random batches
    with pytest.raises(ValueError, match="batch_size"):
        data.sampler(len(corpus) + 1)


def test_random_word_sampler():
    sample = random_word_sampler(["jam", "cat", "bank"], length=5, batch_size=4, seed=0)
    b = sample(0)
    assert b["char_ids"].shape == (4, 7, 50) and b["mask"].all()
    assert (b["word_ids"][:, 0] == 2).all() and (b["word_ids"][:, -1] == 3).all()  # <S> and </S>
    assert set(b["word_ids"][:, 1:-1].unique().tolist()) <= {4, 5, 6}
    words = ["<S>", "</S>", "jam", "cat", "bank"]
    spelled = words_to_char_ids([[words[i - 2] for i in row] for row in b["word_ids"].tolist()])[0]
    assert torch.equal(b["char_ids"].long(), spelled)
    assert torch.equal(
        sample(3)["word_ids"],
        random_word_sampler(["jam", "cat", "bank"], length=5, batch_size=4, seed=0)(3)["word_ids"],
    )
    assert not torch.equal(sample(3)["word_ids"], sample(4)["word_ids"])
    with pytest.raises(ValueError, match="distinct"):
        random_word_sampler(["jam", "jam"], length=3, batch_size=2)
    with pytest.raises(ValueError, match="length"):
        random_word_sampler(["a", "b"], length=0, batch_size=2)


def test_tiny_training_lowers_the_loss_and_is_honest(corpus):
    model, vocab, history = pretrain_elmo(
        "tiny", corpus, steps=40, batch_size=16, heldout=32, device="cpu", progress=False
    )
    assert model.config.vocab_size == len(vocab) and not model.training
    assert len(history.loss) == 40
    assert sum(history.loss[-5:]) / 5 < sum(history.loss[:5]) / 5 - 0.5
    ev = {k: v[-1] for k, v in history.evals.items()}
    assert set(ev) == {"forward_loss", "backward_loss", "prefix_forward_loss"}
    assert ev["forward_loss"] < math.log(len(vocab))  # better than a uniform guess on held-out sentences
    assert (
        abs(ev["prefix_forward_loss"] - ev["forward_loss"]) < 1e-4
    )  # an honest forward LM never looks ahead
    quick = pretrain_elmo(
        "tiny", corpus, steps=2, batch_size=16, heldout=32, prefix_eval=False, device="cpu", progress=False
    )
    assert set(quick.history.evals) == {"forward_loss", "backward_loss"}


def test_layer_vectors_match_the_model(corpus):
    lm = ElmoLanguageModel(elmo_config("tiny", vocab_size=20)).eval()
    sents = [corpus[3], corpus[0].tokens, ["jam"]]
    vecs = layer_vectors(lm, sents, batch_size=2)
    assert [tuple(v.shape) for v in vecs] == [(3, len(corpus[3]), 64), (3, len(corpus[0]), 64), (3, 1, 64)]
    ids, mask = words_to_char_ids([list(corpus[0].tokens)], add_sentence_boundaries=True)
    with torch.no_grad():
        direct = lm(ids, mask)[:, 0, 1:-1]
    torch.testing.assert_close(vecs[1], direct)


def test_cache_name_trains_once_then_loads(corpus, tmp_path, monkeypatch):
    monkeypatch.setenv("COURSE_CACHE", str(tmp_path))
    first = pretrain_elmo(
        "tiny", corpus, steps=5, batch_size=8, heldout=16, device="cpu", cache_name="t-elmo", progress=False
    )
    second = pretrain_elmo(
        "tiny", corpus, steps=5, batch_size=8, heldout=16, device="cpu", cache_name="t-elmo", progress=False
    )
    assert not first.history.loaded and second.history.loaded
    assert second.history.loss == first.history.loss
    for (n, a), (_, b) in zip(first.model.state_dict().items(), second.model.state_dict().items()):
        assert torch.equal(a, b), n
    naive = pretrain_elmo(
        "tiny",
        corpus,
        steps=5,
        batch_size=8,
        heldout=16,
        device="cpu",
        cache_name="t-elmo",
        naive_bidirectional=True,
        progress=False,
    )
    assert not naive.history.loaded and naive.model.config.naive_bidirectional  # a different spec: trained


def test_cli_writes_a_checkpoint_that_loads(tmp_path, capsys):
    out = tmp_path / "elmo"
    args = [
        "train",
        "elmo",
        "--size",
        "tiny",
        "--steps",
        "6",
        "--n-sentences",
        "200",
        "--batch-size",
        "8",
        "--device",
        "cpu",
        "--out",
        str(out),
    ]
    assert course_main(args) == 0
    printed = capsys.readouterr().out
    assert "trained a tiny ELMo biLM" in printed and "held-out:" in printed
    model, vocab = load_pretrained_elmo(out)
    assert isinstance(model, ElmoLanguageModel) and len(vocab) == model.config.vocab_size
    # the command runs the same recipe as pretrain_elmo: the same weights
    same = pretrain_elmo(
        "tiny", generate_corpus(200, seed=0), steps=6, batch_size=8, device="cpu", progress=False
    )
    for (n, a), (_, b) in zip(model.state_dict().items(), same.model.state_dict().items()):
        assert torch.equal(a, b), n
    assert vocab.itos == same.vocab.itos


def test_cli_trains_on_the_users_text_files(tmp_path, capsys):
    folder = tmp_path / "books"
    folder.mkdir()
    story = " ".join(f"The zyxwort number {i} ate a quokka near the river." for i in range(40))
    (folder / "a.txt").write_text(story)
    (folder / "b.txt").write_text("A quokka is small. " * 30)
    out = tmp_path / "mine"
    assert (
        course_main(
            [
                "train",
                "elmo",
                "--text",
                str(folder / "*.txt"),
                "--size",
                "tiny",
                "--steps",
                "3",
                "--batch-size",
                "4",
                "--device",
                "cpu",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    model, vocab = load_pretrained_elmo(out)
    assert "zyxwort" in vocab and "quokka" in vocab


def test_clear_errors(tmp_path, corpus, capsys):
    # the command: a missing text source, an empty file, a batch larger than the text
    assert (
        course_main(
            [
                "train",
                "elmo",
                "--text",
                str(tmp_path / "nope.txt"),
                "--size",
                "tiny",
                "--out",
                str(tmp_path / "x"),
            ]
        )
        == 2
    )
    assert "does not exist" in capsys.readouterr().err
    (tmp_path / "empty.txt").write_text("   \n\n")
    assert (
        course_main(
            [
                "train",
                "elmo",
                "--text",
                str(tmp_path / "empty.txt"),
                "--size",
                "tiny",
                "--out",
                str(tmp_path / "x"),
            ]
        )
        == 2
    )
    assert "no words" in capsys.readouterr().err
    (tmp_path / "short.txt").write_text("One sentence. Two sentences here.")
    assert (
        course_main(
            [
                "train",
                "elmo",
                "--text",
                str(tmp_path / "short.txt"),
                "--size",
                "tiny",
                "--out",
                str(tmp_path / "x"),
            ]
        )
        == 2
    )
    assert "batch_size" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        course_main(["train", "elmo", "--steps", "0", "--out", str(tmp_path / "x")])
    assert not (tmp_path / "x").exists()
    # the functions
    with pytest.raises(ValueError, match="unknown size"):
        elmo_config("huge", vocab_size=10)
    with pytest.raises(ValueError, match="str"):
        build_vocab(["a plain string"])
    with pytest.raises(ValueError, match="special"):
        build_vocab(corpus, vocab_size=4)
    with pytest.raises(ValueError, match="max_len"):
        ElmoLMData(corpus, build_vocab(corpus), max_len=2)
    with pytest.raises(ValueError, match="empty"):
        ElmoLMData([["a"], []], build_vocab([["a"]]))
    with pytest.raises(ValueError, match="steps"):
        pretrain_elmo("tiny", corpus, steps=0, device="cpu")
    with pytest.raises(TypeError, match="ElmoConfig"):
        pretrain_elmo(42, corpus, steps=1, device="cpu")  # type: ignore[arg-type]
    with pytest.raises(FileNotFoundError, match="course train elmo"):
        load_pretrained_elmo(tmp_path / "missing")


def test_saved_vocabulary_must_match_the_model(tmp_path, corpus):
    vocab = build_vocab(corpus, vocab_size=30)
    lm = ElmoLanguageModel(elmo_config("tiny", vocab_size=30))
    save_pretrained_elmo(tmp_path, lm, vocab)
    loaded, v = load_pretrained_elmo(tmp_path)
    assert v.itos == vocab.itos
    save_pretrained_elmo(tmp_path, lm, build_vocab(corpus, vocab_size=20))
    with pytest.raises(ValueError, match="vocab.json"):
        load_pretrained_elmo(tmp_path)


def test_elmo_folders_go_through_the_model_registry(tmp_path, corpus):
    """ELMo is saved and loaded as BERT is: config.json names the registered class."""
    import json

    import course_lib.recipes.bert  # noqa: F401  (registers the BERT classes)
    from course_lib.recipes.common import registered_class

    assert registered_class("ElmoLanguageModel") is ElmoLanguageModel
    vocab = build_vocab(corpus, vocab_size=30)
    lm = ElmoLanguageModel(elmo_config("tiny", vocab_size=30))
    save_pretrained_elmo(tmp_path, lm, vocab, metadata={"note": "x"})
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["architecture"] == "ElmoLanguageModel" and config["vocab_size"] == 30
    # a folder written before the registry (no "architecture") still loads
    del config["architecture"]
    (tmp_path / "config.json").write_text(json.dumps(config))
    loaded, _ = load_pretrained_elmo(tmp_path)
    assert loaded.config == lm.config
    for (n, a), (_, b) in zip(loaded.state_dict().items(), lm.state_dict().items()):
        assert torch.equal(a, b), n
    (tmp_path / "config.json").write_text(json.dumps({**config, "architecture": "BertForMaskedLM"}))
    with pytest.raises(ValueError, match="'BertForMaskedLM' is not a kind of ElmoLanguageModel"):
        load_pretrained_elmo(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({**config, "hidden_size": 8}))
    with pytest.raises(ValueError, match="unknown ElmoConfig fields"):
        load_pretrained_elmo(tmp_path)


def test_sizes_build():
    for size in ("tiny", "small", "medium"):
        assert elmo_config(size, vocab_size=100).vocab_size == 100
    assert set(SIZES) >= {"tiny", "small", "original"}
    with torch.device("meta"):
        assert ElmoLanguageModel(elmo_config("original", vocab_size=10)).num_parameters() == 93_600_864
