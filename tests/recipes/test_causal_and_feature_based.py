"""The arms chapter 3's study adds: a left-to-right LM trained by the shared recipe, NSP on
segments, feature-based fine-tuning (frozen encoder), sentence-pair classification, the
one-side-hidden test and greedy generation."""

from __future__ import annotations

import math

import pytest
import torch

from course_lib.analysis import SIDES, generate_greedy, generation_statistics, hidden_word_accuracy
from course_lib.data import topic_pairs
from course_lib.data.documents import segment_documents, tokenize_documents
from course_lib.data.tokenizers import special_ids
from course_lib.models.bert import BertLMHeadModel
from course_lib.objectives import MaskedLMData, causal_lm_loss
from course_lib.objectives.pretraining import evaluate_causal_lm, make_masker, pretraining_examples
from course_lib.recipes.bert import pretrain_bert
from course_lib.recipes.finetune import classification_accuracy, finetune_classifier, finetune_tagger

TINY = dict(steps=30, batch_size=8, max_len=32, vocab_size=300, device="cpu", progress=False)


@pytest.fixture(scope="module")
def causal(docs, tok):
    return pretrain_bert(
        "tiny", docs, tokenizer=tok, pair_task=None, causal=True, heldout=0.1, eval_every=15, **TINY
    )


@pytest.fixture(scope="module")
def masked(docs, tok):
    return pretrain_bert("tiny", docs, tokenizer=tok, heldout=0.1, **TINY)


def test_masking_none_gives_unmasked_inputs_and_every_real_token_as_label(docs, tok):
    ex = pretraining_examples(docs, tok, max_len=32, pair_task=None)
    data = MaskedLMData(ex, masker=make_masker(tok), masking="none", batch_size=4)
    view = data.epoch_view(0)
    assert torch.equal(view["input_ids"], ex["input_ids"])
    real = ex["attention_mask"].bool()
    assert torch.equal(view["labels"][real], ex["input_ids"][real]) and (view["labels"][~real] == -100).all()
    with pytest.raises(ValueError, match="causal LM"):
        MaskedLMData(ex, masker=make_masker(tok), masking="random")


def test_causal_pretraining_learns_and_its_evaluation_matches_a_direct_count(causal, docs):
    model, tok, history = causal
    assert isinstance(model, BertLMHeadModel) and model.config.is_decoder
    assert sum(history.loss[-5:]) < sum(history.loss[:5])
    assert len(history.evals["lm_loss"]) == 2
    ex = pretraining_examples(docs[:10], tok, max_len=32, pair_task=None, seed=3)
    got = evaluate_causal_lm(model, ex, batch_size=3)
    with torch.no_grad():
        logits = model(ex["input_ids"], attention_mask=ex["attention_mask"]).logits
    losses, hits = [], []
    for row in range(ex["input_ids"].size(0)):
        n = int(ex["attention_mask"][row].sum())
        for t in range(1, n):
            lg = logits[row, t - 1]
            losses.append(-torch.log_softmax(lg, -1)[ex["input_ids"][row, t]].item())
            hits.append(int(lg.argmax() == ex["input_ids"][row, t]))
    assert math.isclose(got["lm_loss"], sum(losses) / len(losses), rel_tol=1e-4)
    assert got["lm_accuracy"] == sum(hits) / len(hits)
    # the training loss is the same quantity
    batch = {
        "input_ids": ex["input_ids"],
        "attention_mask": ex["attention_mask"],
        "labels": ex["input_ids"].masked_fill(ex["attention_mask"] == 0, -100),
    }
    with torch.no_grad():
        loss, metrics = causal_lm_loss(model, batch)
    assert math.isclose(loss.item(), sum(losses) / len(losses), rel_tol=1e-4)


def test_causal_recipe_rejects_nsp(docs, tok):
    with pytest.raises(ValueError, match="pair_task=None"):
        pretrain_bert("tiny", docs, tokenizer=tok, causal=True, **TINY)
    with pytest.raises(ValueError, match="masking"):
        pretrain_bert("tiny", docs, tokenizer=tok, masking="none", **TINY)


def test_segments_join_consecutive_sentences_up_to_the_length(docs, tok):
    per_doc = tokenize_documents(docs, tok)
    segs = segment_documents(per_doc, 14)
    for doc, seg in zip(per_doc, segs):
        assert [t for s in doc for t in s] == [t for s in seg for t in s]  # nothing lost, order kept
        assert all(len(s) <= 14 or any(len(x) == len(s) for x in doc) for s in seg)
        assert len(seg) <= len(doc)
    sent = pretraining_examples(docs, tok, max_len=64, pair_task="nsp", seed=1)
    seg = pretraining_examples(docs, tok, max_len=64, pair_task="nsp", nsp_unit="segment", seed=1)
    assert seg["input_ids"].size(0) < sent["input_ids"].size(0)  # fewer, longer pairs
    assert seg["attention_mask"].sum(1).float().mean() > sent["attention_mask"].sum(1).float().mean()
    with pytest.raises(ValueError, match="nsp_unit"):
        pretraining_examples(docs, tok, nsp_unit="paragraph")


def test_frozen_body_trains_only_the_new_layer(masked, mod3_items):
    model, tok, _ = masked
    items = mod3_items
    tagger, _ = finetune_tagger(model, tok, items, num_labels=3, steps=5, lr=1e-2, freeze_body=True)
    for (name, p), q in zip(tagger.bert.named_parameters(), model.bert.parameters()):
        assert torch.equal(p, q), name
    assert tagger.config.hidden_dropout_prob == 0.0 and tagger.config.classifier_dropout == 0.1
    moved, _ = finetune_tagger(model, tok, items, num_labels=3, steps=5, lr=1e-2)
    assert not torch.equal(
        moved.bert.embeddings.word_embeddings.weight, model.bert.embeddings.word_embeddings.weight
    )


def test_topic_pairs_and_sentence_pair_classification(masked, docs):
    model, tok, _ = masked
    pairs = topic_pairs(docs, 40, seed=0)
    assert len(pairs) == 40 and sum(y for _, _, y in pairs) == 20
    topic_of = {s.text: d.topic for d in docs for s in d.sentences}
    for a, b, y in pairs:
        assert (topic_of[a] == topic_of[b]) == bool(y)
    items = [((a, b), y) for a, b, y in pairs]
    clf, h = finetune_classifier(model, tok, items, steps=3, eval_items=items)
    assert h.evals["accuracy"][-1] == classification_accuracy(clf, tok, items)
    with pytest.raises(ValueError, match="mixes"):
        finetune_classifier(model, tok, items[:3] + [("one text", 1)], steps=1)


def test_hidden_word_accuracy_against_a_direct_computation(masked, causal, docs):
    model, tok, _ = masked
    sentences = [
        s.text for d in docs[:8] for s in d.sentences if len(s) >= 5 and len(tok.encode(s.text).ids) <= 32
    ]
    sp = special_ids(tok)
    for hide in ("mask", "attention"):
        got = hidden_word_accuracy(model, tok, sentences, hide=hide, seed=2)
        assert set(got) == set(SIDES)
        g = torch.Generator().manual_seed(2)
        hits = {k: 0 for k in SIDES}
        for text in sentences:
            ids = tok.encode(text).ids
            p = int(torch.randint(1, len(ids) - 2, (), generator=g))
            for side in SIDES:
                x = list(ids)
                x[p] = sp["mask"]
                hidden = (
                    range(p + 1, len(ids) - 1)
                    if side == "right side hidden"
                    else range(1, p)
                    if side == "left side hidden"
                    else range(0)
                )
                att = [1] * len(ids)
                for i in hidden:
                    if hide == "mask":
                        x[i] = sp["mask"]
                    else:
                        att[i] = 0
                with torch.no_grad():
                    logits = model(torch.tensor([x]), attention_mask=torch.tensor([att])).mlm_logits[0, p]
                hits[side] += int(logits.argmax() == ids[p])
        for side in SIDES:
            assert got[side] == pytest.approx(hits[side] / len(sentences))
    lm = causal.model
    got = hidden_word_accuracy(lm, tok, sentences, seed=2)
    assert set(got) == {"right side hidden"}
    g = torch.Generator().manual_seed(2)
    hits = 0
    for text in sentences:
        ids = tok.encode(text).ids
        p = int(torch.randint(1, len(ids) - 2, (), generator=g))
        with torch.no_grad():
            hits += int(lm(torch.tensor([ids[:p]])).logits[0, -1].argmax() == ids[p])
    assert got["right side hidden"] == pytest.approx(hits / len(sentences))
    with pytest.raises(ValueError, match="hide"):
        hidden_word_accuracy(model, tok, sentences, hide="drop")


def test_greedy_generation_and_its_statistics(masked, causal):
    for model in (masked.model, causal.model):
        text = generate_greedy(model, masked.tokenizer, "The chef", 4)
        assert text.lower().startswith("the chef") and len(text) > len("the chef")
    stats = generation_statistics(["a b b.", "c ."])
    assert stats == {"full_stop_share": 2 / 6, "distinct_share": (3 + 2) / 6, "repeat_share": 1 / 6}
    with pytest.raises(ValueError, match="no words"):
        generation_statistics(["", " "])


def test_causal_evaluation_refuses_a_masked_lm_and_restores_the_mode(causal, masked, docs):
    model, tok, _ = causal
    ex = pretraining_examples(docs[:4], tok, max_len=32, pair_task=None, seed=3)
    with pytest.raises(ValueError, match="left-to-right"):
        evaluate_causal_lm(masked[0], ex)
    model.train()
    evaluate_causal_lm(model, ex)
    assert model.training
    model.eval()
