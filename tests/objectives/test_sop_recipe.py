"""ALBERT's sentence-order prediction (SOP) in the shared BERT recipe: the pairs
(course_lib.objectives.pairs.make_sop_pairs), their packing and label column, the loss and
the held-out accuracy for a model whose pair_objective is "sop", pretrain_bert and
`course train bert --pair-task sop` end to end on tiny models, and the errors when the
data's pair task and the model's head disagree."""

from __future__ import annotations

import json
import math
import random

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from course_lib.cli import main as course_main
from course_lib.data.documents import segment_documents, tokenize_documents
from course_lib.models.albert import AlbertConfig, AlbertForMaskedLM, AlbertForPreTraining
from course_lib.models.bert import BertConfig, BertForMaskedLM, BertForPreTraining
from course_lib.objectives import PAIR_LABELS, pretraining_loss
from course_lib.objectives.losses import PAIR_LOGITS, pair_fields
from course_lib.objectives.pairs import SOPPairs, make_sop_pairs, pack_pairs
from course_lib.objectives.pretraining import (
    evaluate_mlm,
    make_masker,
    pretraining_data,
    pretraining_examples,
)
from course_lib.recipes import common as recipe_common
from course_lib.recipes.bert import pretrain_bert
from course_lib.recipes.common import MODEL_CLASSES, load_pretrained, register_model

TINY = dict(steps=30, batch_size=8, max_len=32, device="cpu", progress=False)


def tiny_albert_config(vocab_size: int = 300) -> AlbertConfig:
    return AlbertConfig(
        vocab_size=vocab_size,
        embedding_size=16,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
    )


def tiny_bert_config(vocab_size: int) -> BertConfig:
    return BertConfig(
        vocab_size=vocab_size,
        hidden_size=32,
        num_attention_heads=2,
        num_hidden_layers=1,
        intermediate_size=128,
        max_position_embeddings=64,
    )


@pytest.fixture(scope="module", autouse=True)
def albert_registered():
    """The ALBERT classes in the recipes' registry (as their module registers them); what this
    module adds is removed again at the end."""
    added = [c for c in (AlbertForPreTraining, AlbertForMaskedLM) if c.__name__ not in MODEL_CLASSES]
    for c in added:
        register_model(c)
    yield
    for c in added:
        MODEL_CLASSES.pop(c.__name__, None)


def coded_documents(n_docs: int, seed: int = 0, *, min_sent: int = 1, max_sent: int = 6):
    """Documents whose sentences say where they come from: sentence i of document d starts
    with the id 10_000 + 100 d + i, followed by 0-3 filler ids."""
    rng = random.Random(seed)
    return [
        [[10_000 + 100 * d + i] + [rng.randrange(5, 50) for _ in range(rng.randrange(4))] for i in range(n)]
        for d, n in enumerate(rng.randint(min_sent, max_sent) for _ in range(n_docs))
    ]


# --- the pairs -------------------------------------------------------------------------------


def test_sop_pairs_are_consecutive_sentences_in_order_or_swapped():
    docs = coded_documents(300, seed=1)
    pairs = make_sop_pairs(docs, 0)
    assert isinstance(pairs, SOPPairs) and len(pairs.a) == len(pairs.b) == pairs.label.numel()
    assert pairs.label.dtype == torch.long and set(pairs.label.tolist()) == {0, 1}
    code_a = torch.tensor([s[0] for s in pairs.a]) - 10_000
    code_b = torch.tensor([s[0] for s in pairs.b]) - 10_000
    assert torch.equal(code_a // 100, code_b // 100)  # always the same document
    in_order = pairs.label == 0
    assert torch.equal(code_b[in_order], code_a[in_order] + 1)  # label 0: B is A's successor
    assert torch.equal(code_a[~in_order], code_b[~in_order] + 1)  # label 1: B is A's predecessor
    # one pair per sentence with a successor, each neighbour pair exactly once, in document order
    first = torch.minimum(code_a, code_b)
    expected = [100 * d + i for d, doc in enumerate(docs) for i in range(len(doc) - 1)]
    assert first.tolist() == expected
    # the whole sentences travel, not only their first id
    by_code = {s[0]: s for doc in docs for s in doc}
    assert all(a == by_code[a[0]] and b == by_code[b[0]] for a, b in zip(pairs.a, pairs.b))


def test_sop_labels_are_balanced_and_follow_swap_prob():
    docs = coded_documents(2000, seed=2, min_sent=2)
    pairs = make_sop_pairs(docs, torch.Generator().manual_seed(0))
    n = pairs.label.numel()
    assert n > 5000 and abs(pairs.label.float().mean().item() - 0.5) < 4 * 0.5 / math.sqrt(n)
    assert make_sop_pairs(docs, 0, swap_prob=0.0).label.sum() == 0
    assert make_sop_pairs(docs, 0, swap_prob=1.0).label.sum() == n
    quarter = make_sop_pairs(docs, 0, swap_prob=0.25).label.float().mean().item()
    assert abs(quarter - 0.25) < 4 * math.sqrt(0.25 * 0.75 / n)


def test_sop_pairs_are_deterministic_and_validate():
    docs = coded_documents(50, seed=3)
    a, b = make_sop_pairs(docs, 7), make_sop_pairs(docs, 7)
    assert a.a == b.a and a.b == b.b and torch.equal(a.label, b.label)
    assert not torch.equal(make_sop_pairs(docs, 8).label, a.label)
    for rng in (np.random.default_rng(0), random.Random(0), torch.Generator().manual_seed(0), None):
        assert make_sop_pairs(docs, rng).label.numel() == a.label.numel()
    # one document is enough (NSP needs two); empty sentences are dropped first
    one = make_sop_pairs([[[1], [], [2], [3]]], 0)
    assert sorted(sorted((x[0], y[0])) for x, y in zip(one.a, one.b)) == [[1, 2], [2, 3]]
    with pytest.raises(ValueError, match="two consecutive"):
        make_sop_pairs([[[1]], [[2], []], []], 0)
    with pytest.raises(ValueError, match="swap_prob"):
        make_sop_pairs(docs, 0, swap_prob=1.5)


# --- packing and the recipe's examples --------------------------------------------------------


def test_sop_examples_pack_the_pairs_with_their_label_column(docs, tok):
    ex = pretraining_examples(docs, tok, max_len=32, pair_task="sop", seed=4)
    assert PAIR_LABELS["sop"] == "sentence_order_label"
    assert set(ex) == {"input_ids", "token_type_ids", "attention_mask", "sentence_order_label"}
    ids = tokenize_documents(docs, tok)
    pairs = make_sop_pairs(ids, 4)
    packed = pack_pairs(
        pairs.a, pairs.b, 32, cls_id=tok.token_to_id("[CLS]"), sep_id=tok.token_to_id("[SEP]")
    )
    for k, v in packed.items():
        assert torch.equal(ex[k], v), k
    assert torch.equal(ex["sentence_order_label"], pairs.label)
    assert ex["input_ids"].size(0) == sum(len(d) - 1 for d in docs)
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    assert (ex["input_ids"][:, 0] == cls).all() and ((ex["input_ids"] == sep).sum(1) == 2).all()
    # a row in order reads sentence i then i + 1; a swapped row the other way round
    k0 = int((ex["sentence_order_label"] == 0).nonzero()[0])
    k1 = int((ex["sentence_order_label"] == 1).nonzero()[0])
    for k in (k0, k1):
        row = ex["input_ids"][k][ex["attention_mask"][k].bool()].tolist()
        first_sep = row.index(sep)
        a, b = row[1:first_sep], row[first_sep + 1 : -1]
        assert a == pairs.a[k][: len(a)] and b == pairs.b[k][: len(b)]
        assert (ex["token_type_ids"][k][first_sep + 1 : len(row)] == 1).all()
    # the pair unit applies to SOP as to NSP: segments of consecutive sentences
    seg = pretraining_examples(docs, tok, max_len=64, pair_task="sop", nsp_unit="segment", seed=4)
    seg_docs = segment_documents(ids, (64 - 3) // 2)
    assert seg["input_ids"].size(0) == sum(max(len(d) - 1, 0) for d in seg_docs) < ex["input_ids"].size(0)
    # deterministic under the seed; batches carry the label column
    again = pretraining_examples(docs, tok, max_len=32, pair_task="sop", seed=4)
    assert all(torch.equal(again[k], ex[k]) for k in ex)
    batch = next(iter(pretraining_data(ex, tok, batch_size=8)))
    assert batch["sentence_order_label"].shape == (8,)


def test_pair_task_chooses_the_rows(docs, tok):
    nsp = pretraining_examples(docs[:20], tok, max_len=32, pair_task="nsp", seed=2)
    assert all(
        torch.equal(nsp[k], v) for k, v in pretraining_examples(docs[:20], tok, max_len=32, seed=2).items()
    )  # NSP is the default
    assert "next_sentence_label" in nsp
    stream = pretraining_examples(docs[:20], tok, max_len=32, pair_task=None)
    assert set(stream) == {"input_ids", "token_type_ids", "attention_mask"}
    assert "sentence_order_label" in pretraining_examples(docs[:20], tok, max_len=32, pair_task="sop")
    with pytest.raises(ValueError, match="pair_task must be one of"):
        pretraining_examples(docs, tok, pair_task="order")


# --- the loss and the held-out accuracy -------------------------------------------------------


def test_pretraining_loss_adds_the_sop_loss_of_a_sop_model(docs, tok):
    torch.manual_seed(0)
    model = AlbertForPreTraining(tiny_albert_config(tok.get_vocab_size())).eval()
    ex = pretraining_examples(docs, tok, max_len=32, pair_task="sop")
    batch = next(iter(pretraining_data(ex, tok, batch_size=16, seed=1)))
    loss, metrics = pretraining_loss(model, batch)
    assert set(metrics) == {"mlm_accuracy", "mlm_loss", "sop_loss", "sop_accuracy"}
    assert loss.item() == pytest.approx(metrics["mlm_loss"] + metrics["sop_loss"], rel=1e-5)
    with torch.no_grad():
        kwargs = {k: batch[k] for k in ("attention_mask", "token_type_ids")}
        out = model(batch["input_ids"], **kwargs)
    label = batch["sentence_order_label"]
    assert metrics["sop_loss"] == pytest.approx(F.cross_entropy(out.sop_logits, label).item(), rel=1e-4)
    assert metrics["sop_accuracy"] == pytest.approx(
        (out.sop_logits.argmax(-1) == label).float().mean().item()
    )
    # the same head trained on another task's labels: the metrics are named after the data's task
    nsp_batch = {k: v for k, v in batch.items() if k != "sentence_order_label"}
    nsp_batch["next_sentence_label"] = label
    loss2, metrics2 = pretraining_loss(model, nsp_batch)
    assert set(metrics2) == {"mlm_accuracy", "mlm_loss", "nsp_loss", "nsp_accuracy"}
    assert loss2.item() == pytest.approx(loss.item(), rel=1e-5)
    assert metrics2["nsp_accuracy"] == pytest.approx(metrics["sop_accuracy"])
    bert = BertForPreTraining(tiny_bert_config(tok.get_vocab_size()))
    bert_metrics = pretraining_loss(bert, batch)[1]  # BERT's NSP head on SOP labels
    assert {"sop_loss", "sop_accuracy"} <= set(bert_metrics) and "nsp_loss" not in bert_metrics
    both = {**batch, "next_sentence_label": label}
    with pytest.raises(ValueError, match="one sentence-pair task"):
        pretraining_loss(model, both)
    mlm_only = AlbertForMaskedLM(tiny_albert_config(tok.get_vocab_size()))
    assert set(pretraining_loss(mlm_only, batch)[1]) == {"mlm_accuracy"}
    assert pair_fields("sop") == ("sentence_order_label", "sop_logits") and set(PAIR_LOGITS) == set(
        PAIR_LABELS
    )
    with pytest.raises(ValueError, match="unknown sentence-pair objective"):
        pair_fields("order")


def test_evaluate_mlm_reports_sop_accuracy(docs, tok):
    torch.manual_seed(0)
    model = AlbertForPreTraining(tiny_albert_config(tok.get_vocab_size())).eval()
    ex = pretraining_examples(docs[:20], tok, max_len=32, pair_task="sop", seed=5)
    masker = make_masker(tok)
    got = evaluate_mlm(model, ex, masker, seed=4, batch_size=7)
    assert "sop_accuracy" in got and "nsp_accuracy" not in got
    inputs, _ = masker(
        ex["input_ids"], generator=torch.Generator().manual_seed(4), special_mask=ex["attention_mask"] == 0
    )
    with torch.no_grad():
        out = model(inputs, attention_mask=ex["attention_mask"], token_type_ids=ex["token_type_ids"])
    expected = (out.sop_logits.argmax(-1) == ex["sentence_order_label"]).float().mean().item()
    assert got["sop_accuracy"] == pytest.approx(expected)
    # an NSP model on SOP examples: its head is scored on the examples' task
    bert = BertForPreTraining(tiny_bert_config(tok.get_vocab_size())).eval()
    result = evaluate_mlm(bert, ex, masker, seed=4)
    assert "nsp_accuracy" not in result
    with torch.no_grad():
        out = bert(inputs, attention_mask=ex["attention_mask"], token_type_ids=ex["token_type_ids"])
    expected = (out.seq_relationship_logits.argmax(-1) == ex["sentence_order_label"]).float().mean().item()
    assert result["sop_accuracy"] == pytest.approx(expected)


# --- the recipe end to end --------------------------------------------------------------------


def test_pretrain_bert_with_sop_end_to_end(docs, tok):
    model, tok2, history = pretrain_bert(
        tiny_albert_config(),
        docs,
        pair_task="sop",
        model_class=AlbertForPreTraining,
        tokenizer=tok,
        heldout=0.1,
        eval_every=15,
        lr=3e-3,
        **TINY,
    )
    assert type(model) is AlbertForPreTraining and not model.training and tok2 is tok
    assert model.config.embedding_size == 16 and model.config.vocab_size == tok.get_vocab_size()
    assert model.config.max_position_embeddings == 32
    assert len(history.loss) == TINY["steps"] and all(math.isfinite(x) for x in history.loss)
    assert sum(history.loss[-5:]) < sum(history.loss[:5]), "the loss should fall over 30 steps"
    assert {"sop_loss", "sop_accuracy", "mlm_loss"} <= set(history.metrics)
    assert "nsp_loss" not in history.metrics and "nsp_accuracy" not in history.evals
    assert len(history.evals["sop_accuracy"]) == 2 and all(0 <= v <= 1 for v in history.evals["sop_accuracy"])


def test_pretrain_bert_takes_the_pair_task_from_the_model_class_and_the_class_from_the_registry(
    docs, tok, monkeypatch
):
    short = dict(TINY, steps=1)
    # no pair_task: the model class's own pair objective
    model, _, history = pretrain_bert(
        tiny_albert_config(), docs, model_class=AlbertForPreTraining, tokenizer=tok, heldout=0.1, **short
    )
    assert type(model) is AlbertForPreTraining and "sop_accuracy" in history.evals
    mlm, _, history = pretrain_bert(
        tiny_albert_config(), docs, model_class=AlbertForMaskedLM, tokenizer=tok, heldout=0.1, **short
    )
    assert type(mlm) is AlbertForMaskedLM and "sop_accuracy" not in history.evals
    # no model_class: the one registered class whose pair_objective is "sop"
    sop_classes = [n for n, c in MODEL_CLASSES.items() if getattr(c, "pair_objective", None) == "sop"]
    for name in sop_classes:
        if name != "AlbertForPreTraining":
            monkeypatch.delitem(MODEL_CLASSES, name)
    model, _, _ = pretrain_bert(
        tiny_albert_config(), docs, pair_task="sop", tokenizer=tok, heldout=None, **short
    )
    assert type(model) is AlbertForPreTraining

    class OtherSop(AlbertForPreTraining):
        pass

    monkeypatch.setitem(MODEL_CLASSES, "OtherSop", OtherSop)
    with pytest.raises(ValueError, match="several are registered"):
        pretrain_bert(tiny_albert_config(), docs, pair_task="sop", tokenizer=tok, **short)
    monkeypatch.delitem(MODEL_CLASSES, "OtherSop")
    monkeypatch.delitem(MODEL_CLASSES, "AlbertForPreTraining")
    with pytest.raises(ValueError, match="none is registered"):
        pretrain_bert(tiny_albert_config(), docs, pair_task="sop", tokenizer=tok, **short)


def test_cache_keys_name_sop_and_keep_the_old_keys_for_nsp_and_mlm(docs, tok, monkeypatch):
    keys = {}

    class Captured(Exception):
        pass

    def capture(cache_name, model, spec, train):
        keys[cache_name] = spec()
        raise Captured

    monkeypatch.setattr(recipe_common, "train_cached", capture)
    short = dict(TINY, steps=1, tokenizer=tok, heldout=None)
    runs = {
        "default": dict(config="tiny"),
        "nsp": dict(config="tiny", pair_task="nsp"),
        "mlm": dict(config="tiny", pair_task=None),
        "sop": dict(config=tiny_albert_config(), pair_task="sop", model_class=AlbertForPreTraining),
        "sop_auto": dict(config=tiny_albert_config(), model_class=AlbertForPreTraining),
    }
    for name, kw in runs.items():
        config = kw.pop("config")
        with pytest.raises(Captured):
            pretrain_bert(config, docs, cache_name=name, **short, **kw)
    assert keys["default"] == keys["nsp"] != keys["mlm"] and keys["sop"] == keys["sop_auto"]
    # every option is in every key, whatever its value
    options = {"architecture", "pair_task", "nsp_unit", "row_unit", "causal", "direction", "masking"}
    assert all(options <= set(k) for k in keys.values())
    assert (keys["nsp"]["pair_task"], keys["mlm"]["pair_task"], keys["sop"]["pair_task"]) == (
        "nsp",
        None,
        "sop",
    )
    assert (
        keys["nsp"]["architecture"] == "BertForPreTraining"
        and keys["mlm"]["architecture"] == "BertForMaskedLM"
    )
    assert keys["sop"]["architecture"] == "AlbertForPreTraining"


def test_pretrain_bert_rejects_a_pair_task_the_model_has_no_head_for(docs, tok):
    short = dict(TINY, steps=1, tokenizer=tok, heldout=None)
    # a pair head trains on either pair task (the ALBERT paper's NSP-trained ALBERT)
    _, _, h = pretrain_bert(
        tiny_albert_config(), docs, pair_task="nsp", model_class=AlbertForPreTraining, **short
    )
    assert "nsp_accuracy" in h.metrics
    with pytest.raises(ValueError, match="AlbertForPreTraining has pair_objective='sop'.*pair_task=None"):
        pretrain_bert(tiny_albert_config(), docs, pair_task=None, model_class=AlbertForPreTraining, **short)
    with pytest.raises(ValueError, match="AlbertForMaskedLM has pair_objective=None.*pair_task='sop'"):
        pretrain_bert(tiny_albert_config(), docs, pair_task="sop", model_class=AlbertForMaskedLM, **short)
    with pytest.raises(ValueError, match="BertForMaskedLM has pair_objective=None"):
        pretrain_bert("tiny", docs, pair_task="sop", model_class=BertForMaskedLM, **short)
    with pytest.raises(ValueError, match="pair_task=None"):
        pretrain_bert(tiny_albert_config(), docs, pair_task="sop", causal=True, **short)
    with pytest.raises(ValueError, match="pair_task must be one of"):
        pretrain_bert("tiny", docs, pair_task="order", **short)
    with pytest.raises(TypeError, match="AlbertConfig or a size"):
        pretrain_bert(BertConfig(), docs, pair_task="sop", model_class=AlbertForPreTraining, **short)
    one_sentence_docs = [[d.sentences[0].text] for d in docs]
    with pytest.raises(ValueError, match="two consecutive"):
        pretrain_bert(
            tiny_albert_config(),
            one_sentence_docs,
            pair_task="sop",
            model_class=AlbertForPreTraining,
            **short,
        )


# --- course train bert -------------------------------------------------------------------------

CLI_TINY = [
    "--size",
    "tiny",
    "--steps",
    "4",
    "--batch-size",
    "4",
    "--max-len",
    "32",
    "--vocab-size",
    "300",
    "--device",
    "cpu",
]


def test_cli_pair_task_sop_and_architecture(tmp_path, capsys):
    out = tmp_path / "albert"
    args = ["train", "bert", "--out", str(out), "--n-docs", "40", "--pair-task", "sop"]
    assert (
        course_main([*args, "--architecture", "AlbertForPreTraining", "--pair-unit", "segment", *CLI_TINY])
        == 0
    )
    printed = capsys.readouterr().out
    assert "pretrained a tiny AlbertForPreTraining" in printed and "sop_accuracy" in printed
    assert json.loads((out / "config.json").read_text())["architecture"] == "AlbertForPreTraining"
    meta = json.loads((out / "model.json").read_text())
    assert meta["recipe"]["pair_task"] == "sop" and meta["recipe"]["pair_unit"] == "segment"
    assert "sop_accuracy" in meta["heldout"] and "sop_loss" in meta["history"]["metrics"]
    model, tok = load_pretrained(out)
    assert type(model) is AlbertForPreTraining and model.config.vocab_size == tok.get_vocab_size()
    # the albert objective brings the architecture and its pair task; --pair-task alone finds the
    # registered SOP model
    arch_only = tmp_path / "arch"
    assert course_main(["train", "albert", "--out", str(arch_only), "--n-docs", "40", *CLI_TINY]) == 0
    assert json.loads((arch_only / "model.json").read_text())["heldout"].keys() >= {"sop_accuracy"}
    assert json.loads((arch_only / "config.json").read_text())["architecture"] == "AlbertForPreTraining"
    sop_classes = [n for n, c in MODEL_CLASSES.items() if getattr(c, "pair_objective", None) == "sop"]
    assert sop_classes == ["AlbertForPreTraining"]
    task_only = tmp_path / "task"
    assert (
        course_main(
            ["train", "bert", "--out", str(task_only), "--n-docs", "40", "--pair-task", "sop", *CLI_TINY]
        )
        == 0
    )
    assert json.loads((task_only / "config.json").read_text())["architecture"] == "AlbertForPreTraining"


def test_cli_pair_task_none_keeps_no_nsp_and_reports_mismatches(tmp_path, capsys):
    out = tmp_path / "mlm"
    assert (
        course_main(["train", "bert", "--out", str(out), "--n-docs", "40", "--pair-task", "none", *CLI_TINY])
        == 0
    )
    model, _ = load_pretrained(out)
    assert type(model) is BertForMaskedLM
    capsys.readouterr()
    bad = tmp_path / "bad"
    base = ["train", "bert", "--out", str(bad), "--n-docs", "40", *CLI_TINY]
    assert course_main([*base, "--pair-task", "sop", "--architecture", "BertForMaskedLM"]) == 2
    assert "pair_objective=None" in capsys.readouterr().err
    assert course_main([*base, "--architecture", "NoSuchModel"]) == 2
    assert "unknown architecture 'NoSuchModel'" in capsys.readouterr().err
    assert course_main([*base, "--architecture", "XLNetLMHeadModel"]) == 2  # registered, not a masked LM
    err = capsys.readouterr().err.strip()
    assert (
        "XLNetLMHeadModel is not a masked LM" in err and "pair_task" not in err and len(err.splitlines()) == 1
    )
    assert not bad.exists()
    with pytest.raises(SystemExit):
        course_main([*base, "--no-nsp", "--pair-task", "sop"])
    with pytest.raises(SystemExit):
        course_main([*base, "--pair-task", "order"])
