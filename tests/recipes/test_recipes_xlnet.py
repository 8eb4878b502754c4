"""course_lib.recipes.xlnet: permutation-LM pretraining end to end on a tiny XLNet, its held-out
evaluation against factorised_log_prob, `course train xlnet` on user text, and its errors."""

from __future__ import annotations

import json

import pytest
import torch

from course_lib.cli import main as course_main
from course_lib.models.xlnet import XLNetConfig, XLNetLMHeadModel
from course_lib.objectives import trim_padding
from course_lib.objectives.permutation import factorised_log_prob, sample_orders
from course_lib.objectives.pretraining import pretraining_examples
from course_lib.recipes.common import MODEL_CLASSES, load_pretrained, save_pretrained
from course_lib.recipes.xlnet import (
    evaluate_plm,
    pretrain_xlnet,
    xlnet_config,
)

TINY = dict(steps=40, batch_size=8, max_len=32, vocab_size=300, device="cpu", progress=False)


@pytest.fixture(scope="module")
def pretrained(docs):
    return pretrain_xlnet("tiny", docs, heldout=0.1, eval_every=20, **TINY)


def test_pretrain_xlnet_learns_and_evaluates(pretrained):
    model, tok, history = pretrained
    assert isinstance(model, XLNetLMHeadModel) and not model.training
    assert model.config.vocab_size == tok.get_vocab_size()
    assert len(history.loss) == 40 and "plm_accuracy" in history.metrics
    first, last = sum(history.loss[:5]) / 5, sum(history.loss[-5:]) / 5
    assert last < first - 0.3, (first, last)
    assert history.eval_steps == [19, 39] and len(history.evals["plm_loss"]) == 2
    assert history.evals["plm_loss"][-1] < history.evals["plm_loss"][0]


def test_same_seed_same_run(docs, pretrained):
    again = pretrain_xlnet("tiny", docs, heldout=0.1, eval_every=20, **TINY)
    assert again.history.loss == pytest.approx(pretrained.history.loss, rel=1e-5)


def test_evaluate_plm_with_every_token_a_target_is_the_factorised_likelihood(pretrained, docs):
    """K=1: the held-out loss is minus the orders' log-likelihood per token, scored one sequence
    at a time by factorised_log_prob with the same orders (drawn from the same seed)."""
    model, tok, _ = pretrained
    rows = pretraining_examples(docs[:6], tok, max_len=32, pair_task=None, row_unit="sentence")
    rows = {k: v[:10] for k, v in rows.items()}
    got = evaluate_plm(model, rows, K=1, seed=3, batch_size=4)
    g = torch.Generator().manual_seed(3)
    total, n = 0.0, 0
    for i in range(0, 10, 4):
        batch = trim_padding({k: v[i : i + 4] for k, v in rows.items()})
        order = sample_orders(batch["attention_mask"], g)
        with torch.no_grad():
            total -= float(factorised_log_prob(model, batch["input_ids"], order).sum())
        n += int(batch["attention_mask"].sum())
    assert got["plm_loss"] == pytest.approx(total / n, rel=1e-5)
    assert 0.0 <= got["plm_accuracy"] <= 1.0


def test_partial_prediction_scores_fewer_targets(pretrained, docs):
    model, tok, _ = pretrained
    rows = pretraining_examples(docs[:6], tok, max_len=32, pair_task=None, row_unit="sentence")
    one = evaluate_plm(model, rows, n_predict=1, seed=0)
    allk = evaluate_plm(model, rows, K=1, seed=0)
    assert one != allk  # the last token of an order has all the others as context ...
    assert one["plm_loss"] < allk["plm_loss"]  # ... and is easier than the average token


def test_xlnet_is_registered_and_round_trips(pretrained, tmp_path):
    model, tok, _ = pretrained
    assert MODEL_CLASSES["XLNetLMHeadModel"] is XLNetLMHeadModel
    save_pretrained(tmp_path / "m", model, tok, metadata={"note": "test"})
    loaded, tok2 = load_pretrained(tmp_path / "m")
    assert tok2.to_str() == tok.to_str() and loaded.config == model.config
    for k, v in model.state_dict().items():
        assert torch.equal(v, loaded.state_dict()[k]), k
    with pytest.raises(FileNotFoundError, match="course train"):
        load_pretrained(tmp_path / "nothing")
    with pytest.raises(ValueError, match="'XLNetLMHeadModel' is not a kind of Linear"):
        load_pretrained(tmp_path / "m", expected=torch.nn.Linear)


def test_xlnet_config_sizes_match_the_bert_recipe():
    config = xlnet_config("small", vocab_size=100, pad_id=0)
    assert isinstance(config, XLNetConfig)
    assert (config.d_model, config.n_head, config.n_layer, config.d_inner) == (128, 4, 2, 512)
    with pytest.raises(ValueError, match="unknown size"):
        xlnet_config("huge", vocab_size=100, pad_id=0)


def test_pretrain_xlnet_rejects_bad_input(docs):
    with pytest.raises(ValueError, match="not both"):
        pretrain_xlnet("tiny", docs, K=6, n_predict=2, **TINY)
    with pytest.raises(ValueError, match="K must be at least 1"):
        pretrain_xlnet("tiny", docs, K=0.5, **TINY)
    with pytest.raises(ValueError, match="row_unit"):
        pretrain_xlnet("tiny", docs, row_unit="page", **TINY)
    with pytest.raises(ValueError, match="no documents"):
        pretrain_xlnet("tiny", [], **TINY)
    with pytest.raises(ValueError, match="batch_size"):
        pretrain_xlnet("tiny", docs[:2], **{**TINY, "batch_size": 4096})
    with pytest.raises(TypeError, match="XLNetConfig"):
        pretrain_xlnet(object(), docs, **TINY)


def test_cli_on_user_text_writes_a_model_that_loads(tmp_path, capsys):
    text = tmp_path / "text.txt"
    text.write_text(
        "The river was cold. The boat moved slowly. A heron watched the water.\n\n"
        "My sister bakes bread. She likes rye flour. The oven is hot today.\n\n"
        "Trains leave at noon. The station is crowded. Nobody knows the way.\n"
    )
    out = tmp_path / "model"
    argv = ["train", "xlnet", "--text", str(text), "--out", str(out), "--size", "tiny", "--steps", "4"]
    argv += ["--batch-size", "2", "--max-len", "16", "--vocab-size", "200", "--device", "cpu", "--K", "2"]
    assert course_main(argv) == 0
    printed = capsys.readouterr().out
    assert "pretrained a tiny XLNet" in printed and str(out) in printed
    model, tok = load_pretrained(out)
    assert isinstance(model, XLNetLMHeadModel)
    assert tok.token_to_id("[UNK]") not in tok.encode("The river was cold.").ids
    meta = json.loads((out / "model.json").read_text())
    assert meta["recipe"]["K"] == 2 and len(meta["history"]["loss"]) == 4


def test_cli_reports_bad_input_without_a_traceback(tmp_path, capsys):
    text = tmp_path / "one.txt"
    text.write_text("Too little text.\n")
    argv = ["train", "xlnet", "--text", str(text), "--out", str(tmp_path / "m"), "--size", "tiny"]
    assert course_main([*argv, "--steps", "2", "--device", "cpu"]) == 2
    assert "course train xlnet:" in capsys.readouterr().err
    assert not (tmp_path / "m").exists()
