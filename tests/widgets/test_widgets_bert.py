"""The BERT widgets in plain pytest: the masking widget's draws and callbacks, and the BERT
attention viewer built on AttentionExplorer. ipywidgets callbacks run synchronously, so
setting ``.value`` or calling ``button.click()`` updates the state at once."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import pytest
import torch

from course_lib.data import generate_documents, train_byte_bpe, train_wordpiece
from course_lib.models.bert import BertConfig, BertForMaskedLM, BertForPreTraining, BertModel
from course_lib.models.roberta import RobertaConfig, RobertaForMaskedLM
from course_lib.objectives import KEPT, MASKED, RANDOM
from course_lib.widgets import AttentionExplorer, MaskingWidget, bert_attention, bert_attention_explorer

LONG = "The keys to the old cabinet are on the table near the window of the quiet house in the city."


@pytest.fixture(scope="module")
def tok():
    return train_wordpiece(generate_documents(40, seed=1), vocab_size=400)


@pytest.fixture(scope="module")
def model(tok):
    torch.manual_seed(0)
    cfg = BertConfig(
        vocab_size=tok.get_vocab_size(),
        hidden_size=32,
        num_attention_heads=2,
        num_hidden_layers=2,
        intermediate_size=64,
        max_position_embeddings=64,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    return BertForMaskedLM(cfg).eval()


# --- masking widget: the logic ----------------------------------------------------------------


def test_mlm_probability_zero_and_one(model, tok):
    w = MaskingWidget(model, tok, text=LONG, mlm_probability=0.0)
    d = w.draw()
    assert d.n_chosen == 0 and torch.equal(d.masked_ids, d.input_ids) and d.accuracy() is None
    assert all(not r.predictions and r.action == "" for r in d.rows)
    d = w.set_mlm_probability(1.0)
    assert d.rows[0].token == "[CLS]" and d.rows[-1].token == "[SEP]"
    assert not d.rows[0].chosen and not d.rows[-1].chosen, "special tokens are never chosen"
    assert d.n_chosen == len(d.rows) - 2


def test_rows_are_consistent_with_the_actions(model, tok):
    w = MaskingWidget(model, tok, text=LONG, mlm_probability=0.6, seed=3, k=4)
    d = w.draw()
    specials = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"}
    for r, orig, shown, act in zip(d.rows, d.input_ids.tolist(), d.masked_ids.tolist(), d.actions.tolist()):
        assert r.token == tok.id_to_token(orig) and r.shown == tok.id_to_token(shown)
        assert r.chosen == (act != 0)
        if act == MASKED:
            assert r.action == "[MASK]" and r.shown == "[MASK]"
        elif act == KEPT or act == 0:
            assert r.shown == r.token
        elif act == RANDOM:
            assert r.action == "random" and r.shown not in specials
        if r.chosen:
            probs = [p for _, p in r.predictions]
            assert (
                len(r.predictions) == 4
                and probs == sorted(probs, reverse=True)
                and 0 < sum(probs) <= 1 + 1e-6
            )
    counts = d.counts()
    assert sum(counts.values()) == d.n_chosen
    assert "top predictions" in d.to_text() and d.to_html().startswith("<table")


def test_predictions_are_the_models_top_k(model, tok):
    w = MaskingWidget(model, tok, text=LONG, mlm_probability=0.5, seed=1, k=3)
    d = w.draw()
    with torch.no_grad():
        logits = model(d.masked_ids[None]).logits[0]
    for pos, r in enumerate(d.rows):
        if r.chosen:
            top = torch.softmax(logits[pos], -1).topk(3)
            assert [t for t, _ in r.predictions] == [tok.id_to_token(int(i)) for i in top.indices]
            assert [p for _, p in r.predictions] == pytest.approx(top.values.tolist(), abs=1e-6)
            assert r.correct == (r.predictions[0][0] == r.token)


def test_draws_are_reproducible_and_redraw_changes_the_mask(model, tok):
    a = MaskingWidget(model, tok, text=LONG, mlm_probability=0.5, seed=7).draw()
    b = MaskingWidget(model, tok, text=LONG, mlm_probability=0.5, seed=7).draw()
    assert torch.equal(a.actions, b.actions) and torch.equal(a.masked_ids, b.masked_ids)
    w = MaskingWidget(model, tok, text=LONG, mlm_probability=0.5, seed=7)
    masks = {tuple(w.redraw().actions.tolist()) for _ in range(5)}
    assert len(masks) > 1 and w.seed == 12 and w.draws == 5


def test_the_80_10_10_split_over_many_draws(model, tok):
    w = MaskingWidget(model, tok, text=LONG, mlm_probability=1.0, k=1)
    totals = {"[MASK]": 0, "random": 0, "kept": 0}
    for _ in range(40):
        for key, v in w.redraw().counts().items():
            totals[key] += v
    n = sum(totals.values())
    assert n == 40 * (len(w.last.rows) - 2)
    # binomial standard deviation of a 10% share over ~800 draws is about 1.1%
    assert abs(totals["[MASK]"] / n - 0.8) < 0.05
    assert abs(totals["random"] / n - 0.1) < 0.04 and abs(totals["kept"] / n - 0.1) < 0.04


def test_masking_widget_works_with_a_pretraining_model_and_byte_bpe():
    docs = generate_documents(30, seed=2)
    bpe = train_byte_bpe(docs, vocab_size=400)
    cfg = RobertaConfig(
        vocab_size=bpe.get_vocab_size(),
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=66,
    )
    d = MaskingWidget(RobertaForMaskedLM(cfg).eval(), bpe, text="The cat sleeps.", mlm_probability=1.0).draw()
    assert d.rows[0].token == "<s>" and not d.rows[0].chosen and d.n_chosen == len(d.rows) - 2
    wp = train_wordpiece(docs, vocab_size=300)
    pre = BertForPreTraining(
        BertConfig(
            vocab_size=wp.get_vocab_size(),
            hidden_size=32,
            num_attention_heads=2,
            num_hidden_layers=1,
            intermediate_size=64,
            max_position_embeddings=32,
        )
    )
    d = MaskingWidget(pre.eval(), wp, text="The cat sleeps.", mlm_probability=1.0, k=2).draw()
    assert all(len(r.predictions) == 2 for r in d.rows if r.chosen)


def test_masking_widget_rejects_bad_input(model, tok):
    with pytest.raises(ValueError, match="mlm_probability must lie in"):
        MaskingWidget(model, tok, mlm_probability=1.5)
    with pytest.raises(ValueError, match="k must"):
        MaskingWidget(model, tok, k=0)
    w = MaskingWidget(model, tok)
    with pytest.raises(ValueError, match="empty"):
        w.set_text("   ")
    with pytest.raises(ValueError, match="at most 64"):
        w.set_text(" ".join(["cat"] * 80))
    with pytest.raises(ValueError, match="mlm_probability must lie in"):
        w.set_mlm_probability(-0.1)


# --- masking widget: the ipywidgets callbacks ---------------------------------------------------


def test_masking_widget_precomputes_every_reachable_draw(model, tok):
    w = MaskingWidget(model, tok, text="The cat sleeps.", mlm_probability=0.3, seed=2, k=3)
    data = w.widget(texts=[LONG], n_seeds=2).data
    assert w.draws == 0 and w.seed == 2 and w.text == "The cat sleeps."  # the widget's state untouched
    assert [s["text"] for s in data["sentences"]] == ["The cat sleeps.", LONG]
    assert data["rates"][0] == 0.0 and data["rates"][-1] == 1.0 and data["rates"][data["rate"]] == 0.3
    vocab = data["vocab"]
    for s in data["sentences"]:
        for r, rate in enumerate(data["rates"]):
            for k in range(2):
                ref = MaskingWidget(model, tok, text=s["text"], mlm_probability=rate, seed=2 + k, k=3).draw()
                d = s["draws"][r][k]
                assert [vocab[i] for i in s["tokens"]] == [row.token for row in ref.rows]
                assert [data["actions"][a] for a in d["a"]] == [row.action for row in ref.rows]
                assert [vocab[i] for i in d["s"]] == [row.shown for row in ref.rows]
                for preds, row in zip(d["p"], ref.rows):
                    assert [vocab[t] for t, _ in preds] == [t for t, _ in row.predictions]
                    assert [p for _, p in preds] == pytest.approx([p for _, p in row.predictions], abs=5e-4)
    # with a kernel, a typed sentence is drawn on request
    answer = w._answer({"text": "A dog barks.", "rates": [0.5], "n_seeds": 1})
    ref = MaskingWidget(model, tok, text="A dog barks.", mlm_probability=0.5, seed=2, k=3).draw()
    assert [answer["vocab"][i] for i in answer["sentence"]["draws"][0][0]["s"]] == [r.shown for r in ref.rows]
    with pytest.raises(ValueError, match="empty"):
        w._answer({"text": "  ", "rates": [0.5], "n_seeds": 1})
    with pytest.raises(ValueError, match="empty"):
        w.widget(texts=["  "])


# --- attention viewer -----------------------------------------------------------------------------


def test_bert_attention_shapes_and_rows(model, tok):
    weights, labels = bert_attention(
        model, tok, {"a": "The cat sleeps.", "pair": "The cat sleeps. ||| It is tired."}
    )
    assert list(weights) == ["a", "pair"]
    n = len(tok.encode("The cat sleeps.").ids)
    assert len(weights["a"]) == model.config.num_hidden_layers
    assert weights["a"][0].shape == (2, n, n) and labels["a"][0] == tok.encode("The cat sleeps.").tokens
    for w in weights["pair"]:
        torch.testing.assert_close(w.sum(-1), torch.ones(w.shape[:2]))
    assert labels["pair"][0].count("[SEP]") == 2
    # the same weights the model reports for the pair, with its segment ids
    enc = tok.encode("The cat sleeps.", "It is tired.")
    with torch.no_grad():
        ref = model.bert(
            torch.tensor([enc.ids]), token_type_ids=torch.tensor([enc.type_ids]), output_attentions=True
        ).attentions
    for ours, theirs in zip(weights["pair"], ref):
        torch.testing.assert_close(ours, theirs[0])


def test_bert_attention_explorer_widget_draws_the_chosen_head(model, tok):
    explorer = bert_attention_explorer(model.bert, tok, ["The cat sleeps.", "A dog barks loudly."])
    assert isinstance(explorer, AttentionExplorer) and explorer.kinds == [
        "The cat sleeps.",
        "A dog barks loudly.",
    ]
    weights, _ = bert_attention(model, tok, ["The cat sleeps.", "A dog barks loudly."])
    box = explorer.widget()
    torch.testing.assert_close(
        torch.tensor(box.data["weights"]["A dog barks loudly."][1][1]).float(),
        weights["A dog barks loudly."][1][1],
        atol=5e-5,
        rtol=0,
    )
    fig = explorer.draw("The cat sleeps.", 0, 0)
    assert fig.axes and box is not None
    plt.close("all")


def test_bert_attention_with_roberta_and_errors(tok):
    cfg = RobertaConfig(
        vocab_size=tok.get_vocab_size(),
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=66,
        pad_token_id=0,
    )
    weights, _ = bert_attention(RobertaForMaskedLM(cfg).eval(), tok, "The cat sleeps. ||| It is tired.")
    assert len(weights) == 1 and len(next(iter(weights.values()))) == 1
    body = BertModel(
        BertConfig(
            vocab_size=tok.get_vocab_size(),
            hidden_size=32,
            num_attention_heads=2,
            num_hidden_layers=1,
            intermediate_size=128,
            max_position_embeddings=32,
        )
    )
    with pytest.raises(ValueError, match="pair"):
        bert_attention(body, tok, "a ||| b ||| c")
    with pytest.raises(ValueError, match="at least one"):
        bert_attention(body, tok, [])
    with pytest.raises(TypeError, match="BertModel"):
        bert_attention(torch.nn.Linear(2, 2), tok, "a cat")
