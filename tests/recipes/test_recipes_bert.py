"""course_lib.recipes.bert: pretraining and fine-tuning end to end on tiny models, the
`course train bert` command on generated and user text, and its error messages."""

from __future__ import annotations

import json
import math

import pytest
import torch

from course_lib.analysis import minimal_pair_preference
from course_lib.analysis.minimal_pairs import labelled_pairs, word_order_pairs
from course_lib.cli import main as course_main
from course_lib.data.documents import tokenize_documents
from course_lib.models.bert import (
    BertForMaskedLM,
    BertForPreTraining,
    BertForSequenceClassification,
    BertForTokenClassification,
)
from course_lib.models.roberta import RobertaConfig, RobertaForSequenceClassification
from course_lib.objectives import IGNORE_INDEX, MaskedLMData, tagging_inputs, trim_padding
from course_lib.objectives.pretraining import (
    LengthGroupedMLMData,
    evaluate_mlm,
    make_masker,
    pretraining_data,
    pretraining_examples,
)
from course_lib.recipes.bert import bert_config, pretrain_bert
from course_lib.recipes.common import (
    MODEL_CLASSES,
    load_pretrained,
    register_model,
    save_pretrained,
    weights_fingerprint,
)
from course_lib.recipes.finetune import (
    classification_accuracy,
    finetune_classifier,
    finetune_tagger,
    tagging_accuracy,
)

TINY = dict(steps=40, batch_size=8, max_len=32, vocab_size=300, device="cpu", progress=False)


@pytest.fixture(scope="module")
def pretrained(docs):
    return pretrain_bert("tiny", docs, heldout=0.1, eval_every=20, **TINY)


# --- data ------------------------------------------------------------------------------------


def test_tokenize_documents_keeps_the_document_structure(docs, tok):
    ids = tokenize_documents(docs, tok)
    assert [len(d) for d in ids] == [len(d) for d in docs]
    assert ids[0][0] == tok.encode(docs[0].sentences[0].text, add_special_tokens=False).ids
    plain = tokenize_documents([["A cat sat.", "It slept."]], tok)
    assert len(plain) == 1 and len(plain[0]) == 2
    with pytest.raises(ValueError, match="not one str"):
        tokenize_documents(["just a string"], tok)


def test_nsp_examples_and_stream_examples(docs, tok):
    ex = pretraining_examples(docs, tok, max_len=32, pair_task="nsp", seed=0)
    n_pairs = sum(len(d) - 1 for d in docs)
    assert ex["input_ids"].shape[0] == n_pairs and ex["input_ids"].shape[1] <= 32
    assert set(ex["next_sentence_label"].unique().tolist()) <= {0, 1}
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    assert (ex["input_ids"][:, 0] == cls).all()
    assert ((ex["input_ids"] == sep).sum(1) == 2).all()  # [CLS] A [SEP] B [SEP]
    assert (ex["token_type_ids"] <= ex["attention_mask"]).all()
    stream = pretraining_examples(docs, tok, max_len=32, pair_task=None)
    assert "next_sentence_label" not in stream and stream["input_ids"].shape[1] == 32
    assert (stream["token_type_ids"] == 0).all()
    n_tokens = sum(len(s) for d in tokenize_documents(docs, tok) for s in d)
    assert int(stream["attention_mask"].sum()) == n_tokens + len(docs) + 2 * stream["input_ids"].shape[0]


def test_trim_padding_drops_only_all_padding_columns():
    batch = {
        "input_ids": torch.tensor([[2, 5, 3, 0, 0], [2, 6, 7, 3, 0]]),
        "attention_mask": torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 0]]),
        "next_sentence_label": torch.tensor([0, 1]),
    }
    out = trim_padding(batch)
    assert out["input_ids"].tolist() == [[2, 5, 3, 0], [2, 6, 7, 3]]
    assert out["next_sentence_label"].tolist() == [0, 1]
    assert trim_padding({"input_ids": torch.ones(2, 3)})["input_ids"].shape == (2, 3)


def test_length_grouped_batches_cover_every_example_once_with_the_same_masks(docs, tok):
    ex = pretraining_examples(docs, tok, max_len=32)
    grouped = pretraining_data(ex, tok, batch_size=8, masking="dynamic", seed=1)
    plain = MaskedLMData(ex, masker=grouped.masker, masking="dynamic", batch_size=8, drop_last=True, seed=1)
    assert isinstance(grouped, LengthGroupedMLMData)
    for epoch in (0, 1):
        view = plain.epoch_view(epoch)
        seen = []
        for batch in grouped.batches(epoch):
            assert batch["input_ids"].shape[0] == 8
            for row in range(8):  # every row is an example of this epoch's masked view, unchanged
                hits = (
                    (view["input_ids"] == batch["input_ids"][row]).all(1)
                    & (view["labels"] == batch["labels"][row]).all(1)
                ).nonzero()
                assert hits.numel() >= 1
                seen.append(int(hits[0]))
        n, chunks = ex["input_ids"].shape[0], -(-ex["input_ids"].shape[0] // (8 * grouped.group))
        assert len(seen) == len(set(seen)) and n - 8 * chunks < len(seen) <= n

    # similar lengths inside a batch: much less padding than random batches
    def padding(data):
        return sum(int((trim_padding(b)["attention_mask"] == 0).sum()) for b in data.batches(0))

    assert padding(grouped) < 0.5 * padding(plain)
    with pytest.raises(ValueError, match="group"):
        LengthGroupedMLMData(ex, masker=grouped.masker, group=0)


# --- pretraining -----------------------------------------------------------------------------


def test_pretrain_bert_end_to_end(pretrained):
    model, tok, history = pretrained
    assert isinstance(model, BertForPreTraining) and not model.training
    assert model.config.vocab_size == tok.get_vocab_size() and model.config.max_position_embeddings == 32
    assert len(history.loss) == TINY["steps"] and all(math.isfinite(x) for x in history.loss)
    assert sum(history.loss[-5:]) < sum(history.loss[:5]), "the loss should fall over 40 steps"
    for key in (
        "mlm_accuracy",
        "accuracy_masked",
        "accuracy_random",
        "accuracy_kept",
        "accuracy_unchosen",
        "nsp_accuracy",
    ):
        assert len(history.evals[key]) == 2 and all(0.0 <= v <= 1.0 for v in history.evals[key])


def test_evaluate_mlm_agrees_with_a_direct_count(pretrained, docs):
    model, tok, _ = pretrained
    ex = pretraining_examples(docs[:20], tok, max_len=32, seed=5)
    masker = make_masker(tok)
    got = evaluate_mlm(model, ex, masker, seed=4, batch_size=7)
    inputs, labels, actions = masker(
        ex["input_ids"],
        generator=torch.Generator().manual_seed(4),
        special_mask=ex["attention_mask"] == 0,
        return_actions=True,
    )
    with torch.no_grad():
        out = model(inputs, attention_mask=ex["attention_mask"], token_type_ids=ex["token_type_ids"])
    chosen = labels != IGNORE_INDEX
    hit = out.prediction_logits.argmax(-1) == labels
    assert got["mlm_accuracy"] == pytest.approx(hit[chosen].float().mean().item())
    for name, code in (("accuracy_masked", 1), ("accuracy_random", 2), ("accuracy_kept", 3)):
        sel = actions == code
        assert got[name] == pytest.approx(hit[sel].float().mean().item() if sel.any() else 0.0)
    visible = (
        (actions == 0)
        & ex["attention_mask"].bool()
        & ~torch.isin(ex["input_ids"], torch.tensor(masker.special_ids))
    )
    copied = out.prediction_logits.argmax(-1) == ex["input_ids"]
    assert got["accuracy_unchosen"] == pytest.approx(copied[visible].float().mean().item())
    loss = torch.nn.functional.cross_entropy(out.prediction_logits[chosen], labels[chosen]).item()
    assert got["mlm_loss"] == pytest.approx(loss, rel=1e-4)
    nsp = (out.seq_relationship_logits.argmax(-1) == ex["next_sentence_label"]).float().mean().item()
    assert got["nsp_accuracy"] == pytest.approx(nsp)


def test_pretrain_without_nsp_dynamic_masking_and_byte_bpe(docs):
    model, tok, history = pretrain_bert(
        "tiny",
        docs,
        pair_task=None,
        masking="dynamic",
        tokenizer_kind="byte-bpe",
        heldout=0.1,
        **{**TINY, "steps": 10},
    )
    assert isinstance(model, BertForMaskedLM)
    assert tok.token_to_id("<pad>") == model.config.pad_token_id == 1
    assert "nsp_accuracy" not in history.evals and len(history.evals["mlm_accuracy"]) == 1


def test_pretrain_bert_caches_with_train_or_load(docs, tok, tmp_path, monkeypatch):
    monkeypatch.setenv("COURSE_CACHE", str(tmp_path))
    kwargs = dict(tokenizer=tok, heldout=None, cache_name="test-recipe", **{**TINY, "steps": 5})
    first = pretrain_bert("tiny", docs, **kwargs)
    second = pretrain_bert("tiny", docs, **kwargs)
    assert not first.history.loaded and second.history.loaded
    assert weights_fingerprint(first.model) == weights_fingerprint(second.model)
    third = pretrain_bert("tiny", docs, **{**kwargs, "masking": "dynamic"})  # another spec: trains again
    assert not third.history.loaded


def test_continued_pretraining_starts_from_init(pretrained, docs):
    model, tok, _ = pretrained
    fingerprint = weights_fingerprint(model)
    more = pretrain_bert(model.config, docs, tokenizer=tok, init=model, heldout=None, **{**TINY, "steps": 1})
    before = model.bert.embeddings.position_embeddings.weight
    after = more.model.bert.embeddings.position_embeddings.weight
    assert not torch.equal(before, after) and (before - after).abs().max() < 0.05  # one small step away
    assert weights_fingerprint(model) == fingerprint  # init is not modified
    with pytest.raises(ValueError, match="same configuration"):
        pretrain_bert(
            "tiny", docs, tokenizer=tok, init=model, pair_task=None, heldout=None, **{**TINY, "steps": 1}
        )


def test_pretrain_bert_rejects_bad_input(docs, tok):
    with pytest.raises(ValueError, match="unknown size"):
        pretrain_bert("huge", docs, **TINY)
    with pytest.raises(ValueError, match="steps"):
        pretrain_bert("tiny", docs, **{**TINY, "steps": 0})
    with pytest.raises(ValueError, match="at least 2 training documents"):
        pretrain_bert("tiny", docs[:1], tokenizer=tok, heldout=None, **TINY)
    with pytest.raises(ValueError, match="fewer than batch_size"):
        pretrain_bert("tiny", docs[:3], tokenizer=tok, heldout=None, **{**TINY, "batch_size": 64})
    with pytest.raises(ValueError, match="masking"):
        pretrain_bert("tiny", docs, tokenizer=tok, masking="sometimes", **TINY)
    with pytest.raises(TypeError, match="BertConfig or a size"):
        pretrain_bert(128, docs, tokenizer=tok, **TINY)
    with pytest.raises(ValueError, match="heldout"):
        pretrain_bert("tiny", docs, tokenizer=tok, **{**TINY, "heldout": 1.5})


def test_bert_config_sizes():
    c = bert_config("base-like", vocab_size=30522, max_len=512)
    assert (c.hidden_size, c.num_hidden_layers, c.num_attention_heads, c.intermediate_size) == (
        768,
        12,
        12,
        3072,
    )
    with pytest.raises(ValueError, match="unknown size"):
        bert_config("xl", vocab_size=100)


# --- minimal pairs -----------------------------------------------------------------------------


def test_word_order_pairs_swap_two_neighbours(docs):
    from course_lib.data import word_tokenize

    sentences = [s for d in docs for s in d.sentences]
    pairs = word_order_pairs(sentences, seed=0)
    assert pairs == word_order_pairs(sentences, seed=0) and pairs != word_order_pairs(sentences, seed=1)
    assert len(pairs) == sum(len(s) >= 4 for s in sentences)
    for good, bad in pairs:
        g, b = word_tokenize(good), word_tokenize(bad)
        diff = [i for i, (x, y) in enumerate(zip(g, b)) if x != y]
        assert len(g) == len(b) and len(diff) == 2 and diff[1] == diff[0] + 1
        assert (g[diff[0]], g[diff[1]]) == (b[diff[1]], b[diff[0]]) and g[-1] == b[-1] == "."
    assert word_order_pairs([["Hi", "there", "."]]) == []  # too short to swap
    items = labelled_pairs(pairs, seed=0)
    assert sorted(items) == sorted([(g, 1) for g, _ in pairs] + [(b, 0) for _, b in pairs])
    assert items != [(g, 1) for g, _ in pairs] + [(b, 0) for _, b in pairs]  # shuffled


def test_minimal_pair_preference_scores_only_the_differing_tokens(tok):
    torch.manual_seed(0)
    model = BertForMaskedLM(bert_config("tiny", vocab_size=tok.get_vocab_size(), max_len=32)).eval()
    the, a = tok.token_to_id("the"), tok.token_to_id("a")
    assert the is not None and a is not None
    with torch.no_grad():
        model.mlm_head.bias[the] = 50.0  # the model always wants "the"
    pairs = [("He saw the man.", "He saw a man."), ("The dog ate the bread.", "The dog ate a bread.")]
    assert minimal_pair_preference(model, tok, pairs) == (1.0, 2)
    assert minimal_pair_preference(model, tok, [(b, g) for g, b in pairs]) == (0.0, 2)
    # a pair whose tokenizations differ in length is skipped; identical sentences too
    share, n = minimal_pair_preference(
        model, tok, pairs + [("He saw the man.", "He saw the man and the dog."), ("A cat.", "A cat.")]
    )
    assert (share, n) == (1.0, 2)
    with pytest.raises(ValueError, match="nothing to score"):
        minimal_pair_preference(model, tok, [("A cat.", "A cat.")])


# --- fine-tuning -----------------------------------------------------------------------------


def _keyword_task(n: int, seed: int):
    """Label 1 when the sentence mentions a plural 'were' (an easy task a tiny model learns)."""
    g = torch.Generator().manual_seed(seed)
    nouns = ["cat", "dog", "bird", "fish", "chef", "nurse"]
    items = []
    for _ in range(n):
        a, b = (nouns[int(i)] for i in torch.randint(len(nouns), (2,), generator=g))
        label = int(torch.rand((), generator=g) < 0.5)
        items.append((f"The {a} saw the {b} and they {'were' if label else 'was'} happy.", label))
    return items


def test_finetune_classifier_learns_and_copies_the_body(pretrained):
    model, tok, _ = pretrained
    train, test = _keyword_task(96, 0), _keyword_task(64, 1)
    clf, history = finetune_classifier(
        model, tok, train, steps=100, batch_size=16, lr=3e-3, eval_items=test, eval_every=50
    )
    assert isinstance(clf, BertForSequenceClassification) and not clf.training
    assert history.evals["accuracy"][-1] == classification_accuracy(clf, tok, test)
    assert classification_accuracy(clf, tok, test) > 0.9
    # the body started from the pretrained weights: zero steps would leave them unchanged
    clf0, _ = finetune_classifier(model, tok, train, steps=1, lr=1e-12)
    assert torch.allclose(
        clf0.bert.embeddings.word_embeddings.weight, model.bert.embeddings.word_embeddings.weight
    )
    scratch0, _ = finetune_classifier(model.config, tok, train, steps=1, lr=1e-12)
    assert not torch.allclose(
        scratch0.bert.embeddings.word_embeddings.weight, model.bert.embeddings.word_embeddings.weight
    )
    # same seed: the classifier layer starts equal in both runs
    assert torch.allclose(clf0.classifier.weight, scratch0.classifier.weight)


def test_recipes_cut_roberta_inputs_at_its_length_limit(tok):
    # RoBERTa reserves padding_idx + 1 position rows: 14 rows place 12 tokens. The recipes cut
    # inputs at config.max_len (12), not at max_position_embeddings (14, two tokens too late).
    config = RobertaConfig(
        vocab_size=300,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=14,
    )
    assert config.max_len == 12
    clf = RobertaForSequenceClassification(config)
    long_text = " ".join(["the cat sat on the mat"] * 10)
    assert 0.0 <= classification_accuracy(clf, tok, [(long_text, 0), (long_text, 1)]) <= 1.0


def test_finetune_classifier_rejects_bad_input(pretrained):
    model, tok, _ = pretrained
    with pytest.raises(ValueError, match="no examples"):
        finetune_classifier(model, tok, [], steps=1)
    with pytest.raises(ValueError, match="num_labels"):
        finetune_classifier(model, tok, [("a cat.", 2)], steps=1)
    with pytest.raises(ValueError, match="pairs"):
        finetune_classifier(model, tok, [("a cat.", 1, "extra")], steps=1)
    with pytest.raises(TypeError, match="body"):
        finetune_classifier(torch.nn.Linear(2, 2), tok, [("a cat.", 1)], steps=1)


# --- fine-tuning a tagger -------------------------------------------------------------------


def test_tagging_inputs_label_the_first_piece_of_each_word(tok):
    words = [["The", "unbelievably", "sleepy", "cat", "."], ["A", "dog", "ran", "."]]
    tags = [[0, 1, 2, 3, 4], [0, 3, 5, 4]]
    enc = tagging_inputs(tok, words, tags, max_len=32)
    specials = {tok.token_to_id(t) for t in ("[CLS]", "[SEP]", "[PAD]")}
    for k, (ws, ts) in enumerate(zip(words, tags)):
        pieces = [tok.encode(w, add_special_tokens=False).ids for w in ws]  # brute force: word by word
        n = 2 + sum(map(len, pieces))
        assert enc["input_ids"][k, :n].tolist() == [
            tok.token_to_id("[CLS]"),
            *[i for p in pieces for i in p],
            tok.token_to_id("[SEP]"),
        ]
        assert enc["attention_mask"][k].tolist() == [1] * n + [0] * (enc["input_ids"].size(1) - n)
        expected, where = [-100], [-1]
        for w, (p, t) in enumerate(zip(pieces, ts)):
            expected += [t] + [-100] * (len(p) - 1)
            where += [w] + [-1] * (len(p) - 1)
        pad = enc["input_ids"].size(1) - len(expected)
        assert enc["labels"][k].tolist() == expected + [-100] * (pad)
        assert enc["word_index"][k].tolist() == where + [-1] * pad
        assert not set(enc["input_ids"][k, 1 : n - 1].tolist()) & specials
    assert len(tok.encode("unbelievably", add_special_tokens=False).ids) > 1  # the test covers a split word
    short = tagging_inputs(tok, words[:1], tags[:1], max_len=4)  # [CLS] two pieces [SEP]
    assert short["input_ids"].shape == (1, 4) and short["input_ids"][0, -1].item() == tok.token_to_id("[SEP]")
    with pytest.raises(ValueError, match="max_len"):
        tagging_inputs(tok, words, tags, max_len=2)


def test_finetune_tagger_learns_and_reports_unseen_words(pretrained, noun_task):
    model, tok, _ = pretrained
    train, test = noun_task(64, 0), noun_task(32, 1)
    test = test + [(["the", "fish", "saw", "a", "nurse"], [0, 1, 0, 0, 1])]  # two words never seen labelled
    tagger, history = finetune_tagger(
        model, tok, train, num_labels=2, steps=60, batch_size=16, lr=3e-3, eval_items=test, eval_every=30
    )
    assert isinstance(tagger, BertForTokenClassification) and not tagger.training
    scores = tagging_accuracy(tagger, tok, test, known_words={w for ws, _ in train for w in ws})
    assert history.evals["accuracy"][-1] == scores["accuracy"] > 0.9
    assert history.evals["unseen_accuracy"][-1] == scores["unseen_accuracy"]
    n_words = sum(len(ws) for ws, _ in test)
    assert scores["unseen_share"] == pytest.approx(2 / n_words)
    # the body started from the pretrained weights; the new layer is the same for both starts
    t0, _ = finetune_tagger(model, tok, train, num_labels=2, steps=1, lr=1e-12)
    s0, _ = finetune_tagger(model.config, tok, train, num_labels=2, steps=1, lr=1e-12)
    assert torch.allclose(
        t0.bert.embeddings.word_embeddings.weight, model.bert.embeddings.word_embeddings.weight
    )
    assert not torch.allclose(
        s0.bert.embeddings.word_embeddings.weight, model.bert.embeddings.word_embeddings.weight
    )
    assert torch.allclose(t0.classifier.weight, s0.classifier.weight)


def test_finetune_tagger_rejects_bad_input(pretrained):
    model, tok, _ = pretrained
    with pytest.raises(ValueError, match="no sentences"):
        finetune_tagger(model, tok, [], num_labels=2, steps=1)
    with pytest.raises(ValueError, match="one tag per word"):
        finetune_tagger(model, tok, [(["a", "cat"], [0])], num_labels=2, steps=1)
    with pytest.raises(ValueError, match="one tag per word"):
        finetune_tagger(model, tok, [("a cat", [0, 1])], num_labels=2, steps=1)
    with pytest.raises(ValueError, match="num_labels"):
        finetune_tagger(model, tok, [(["a", "cat"], [0, 2])], num_labels=2, steps=1)
    with pytest.raises(ValueError, match="steps"):
        finetune_tagger(model, tok, [(["a", "cat"], [0, 1])], num_labels=2, steps=0)


# --- saving, loading and the command line ---------------------------------------------------


def test_save_and_load_round_trip(pretrained, tmp_path):
    model, tok, _ = pretrained
    save_pretrained(tmp_path / "m", model, tok, metadata={"note": "test"})
    loaded, tok2 = load_pretrained(tmp_path / "m")
    assert isinstance(loaded, BertForPreTraining) and tok2.to_str() == tok.to_str()
    ids = torch.tensor([tok.encode("The cat sat on the mat.").ids])
    with torch.no_grad():
        assert torch.equal(loaded(ids).prediction_logits, model(ids).prediction_logits)
    assert json.loads((tmp_path / "m" / "model.json").read_text())["note"] == "test"
    with pytest.raises(FileNotFoundError, match="config.json"):
        load_pretrained(tmp_path / "nothing")
    with pytest.raises(TypeError, match="BertForPreTraining"):
        save_pretrained(tmp_path / "x", torch.nn.Linear(2, 2), tok)


def test_a_new_bert_family_model_plugs_into_the_recipes_without_copying(docs, tok, tmp_path):
    """How ALBERT (or any BERT-family model) joins: a class of its own, registered once; then
    pretrain_bert trains it, save/load round-trips it by name and fine-tuning starts from it."""

    class ReluHeadMaskedLM(BertForMaskedLM):  # a variant: its MLM head uses ReLU, not GELU
        head_activation = "relu"

    register_model(ReluHeadMaskedLM)
    try:
        model, tok2, history = pretrain_bert(
            "tiny",
            docs,
            pair_task=None,
            model_class=ReluHeadMaskedLM,
            tokenizer=tok,
            heldout=None,
            **{**TINY, "steps": 3},
        )
        assert type(model) is ReluHeadMaskedLM and len(history.loss) == 3
        save_pretrained(tmp_path / "relu", model, tok2)
        assert (
            json.loads((tmp_path / "relu" / "config.json").read_text())["architecture"] == "ReluHeadMaskedLM"
        )
        loaded, _ = load_pretrained(tmp_path / "relu")
        ids = torch.tensor([tok.encode("The cat sat on the mat.").ids])
        with torch.no_grad():
            assert type(loaded) is ReluHeadMaskedLM and torch.equal(
                loaded(ids).mlm_logits, model(ids).mlm_logits
            )
        clf, clf_history = finetune_classifier(
            model, tok, [("a cat", 0), ("a dog", 1)] * 4, steps=2, batch_size=4, device="cpu", progress=False
        )  # starts from its body
        assert isinstance(clf, BertForSequenceClassification) and len(clf_history.loss) == 2
        with pytest.raises(ValueError, match="pair_objective"):
            pretrain_bert("tiny", docs, pair_task="nsp", model_class=ReluHeadMaskedLM, tokenizer=tok, **TINY)
    finally:
        MODEL_CLASSES.pop("ReluHeadMaskedLM")
    with pytest.raises(ValueError, match="unknown architecture 'ReluHeadMaskedLM'"):
        load_pretrained(tmp_path / "relu")


CLI_TINY = [
    "--size",
    "tiny",
    "--steps",
    "6",
    "--batch-size",
    "4",
    "--max-len",
    "32",
    "--vocab-size",
    "300",
    "--device",
    "cpu",
]


def _write_user_text(folder):
    folder.mkdir()
    (folder / "a.txt").write_text(
        "The river was cold. The boat moved slowly. A heron watched the water.\n\n"
        "My sister bakes bread. She likes rye flour. The oven is hot today.\n\n"
        "Trains leave at noon. The station is crowded. Nobody knows the way.\n"
    )
    (folder / "b.txt").write_text(
        "Bees visit the flowers. The garden smells sweet. Honey fills the jars.\n\n"
        "The old clock stopped. Nobody wound it. Dust covered the glass.\n"
    )


def test_cli_on_user_text_writes_a_checkpoint_that_loads(tmp_path, capsys):
    _write_user_text(tmp_path / "text")
    out = tmp_path / "model"
    assert (
        course_main(
            ["train", "bert", "--text", str(tmp_path / "text" / "*.txt"), "--out", str(out), *CLI_TINY]
        )
        == 0
    )
    printed = capsys.readouterr().out
    assert "pretrained a tiny BERT" in printed and str(out) in printed
    assert {p.name for p in out.iterdir()} >= {
        "model.safetensors",
        "model.json",
        "config.json",
        "tokenizer.json",
    }
    model, tok = load_pretrained(out)
    assert isinstance(model, BertForPreTraining)
    ids = tok.encode("The river was cold.").ids
    assert tok.token_to_id("[UNK]") not in ids  # the tokenizer learned this text
    meta = json.loads((out / "model.json").read_text())
    assert meta["recipe"]["steps"] == 6 and len(meta["history"]["loss"]) == 6
    assert "*.txt" in meta["text"]


def test_cli_generated_corpus_without_nsp(tmp_path):
    out = tmp_path / "mlm"
    assert (
        course_main(
            [
                "train",
                "bert",
                "--out",
                str(out),
                "--n-docs",
                "40",
                "--no-nsp",
                "--masking",
                "dynamic",
                *CLI_TINY,
            ]
        )
        == 0
    )
    model, _ = load_pretrained(out)
    assert isinstance(model, BertForMaskedLM)
    assert json.loads((out / "config.json").read_text())["architecture"] == "BertForMaskedLM"


def test_cli_reports_bad_input_without_a_traceback(tmp_path, capsys):
    assert (
        course_main(
            [
                "train",
                "bert",
                "--text",
                str(tmp_path / "missing" / "*.txt"),
                "--out",
                str(tmp_path / "o"),
                *CLI_TINY,
            ]
        )
        == 2
    )
    assert "no files match" in capsys.readouterr().err
    (tmp_path / "one.txt").write_text("Only one paragraph here. It has two sentences.")
    assert (
        course_main(
            ["train", "bert", "--text", str(tmp_path / "one.txt"), "--out", str(tmp_path / "o"), *CLI_TINY]
        )
        == 2
    )
    assert "--pair-task none" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()
    with pytest.raises(SystemExit):
        course_main(["train", "bert", "--out", str(tmp_path / "o"), "--steps", "0"])
