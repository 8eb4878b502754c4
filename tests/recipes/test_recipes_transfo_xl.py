"""course_lib.recipes.transfo_xl: Transformer-XL pretraining with segment recurrence on a tiny
model, its loss against segmented_nll, the held-out evaluation, `course train transfo-xl`
on user text, and its errors."""

from __future__ import annotations

import json

import pytest
import torch

from course_lib.cli import main as course_main
from course_lib.models.transfo_xl import TransfoXLLMHeadModel, segmented_nll
from course_lib.recipes.common import MODEL_CLASSES, load_pretrained, save_pretrained
from course_lib.recipes.transfo_xl import (
    evaluate_transfo_xl,
    pretrain_transfo_xl,
    segment_loss,
    stream_rows,
    token_stream,
    transfo_xl_config,
)

TINY = dict(
    steps=40, batch_size=8, segment_len=8, segments_per_row=3, vocab_size=300, device="cpu", progress=False
)


@pytest.fixture(scope="module")
def pretrained(docs):
    return pretrain_transfo_xl("tiny", docs, heldout=0.1, eval_every=20, **TINY)


def test_pretrain_transfo_xl_learns_and_evaluates_with_and_without_memory(pretrained):
    model, tok, history = pretrained
    assert isinstance(model, TransfoXLLMHeadModel) and not model.training
    assert model.config.mem_len == 8 and model.config.vocab_size == tok.get_vocab_size()
    first, last = sum(history.loss[:5]) / 5, sum(history.loss[-5:]) / 5
    assert last < first - 0.3, (first, last)
    assert history.eval_steps == [19, 39]
    assert set(history.evals) == {"lm_loss", "lm_loss_no_memory"}
    assert history.evals["lm_loss"][-1] < history.evals["lm_loss"][0]


def test_same_seed_same_run(docs, pretrained):
    again = pretrain_transfo_xl("tiny", docs, heldout=0.1, eval_every=20, **TINY)
    assert again.history.loss == pytest.approx(pretrained.history.loss, rel=1e-5)


def test_the_training_loss_is_the_mean_of_segmented_nll(pretrained, docs):
    model, tok, _ = pretrained
    rows = stream_rows(token_stream(docs[:10], tok), 24)[:4]
    with torch.no_grad():
        loss, _ = segment_loss(model.eval(), {"input_ids": rows}, segment_len=8, mem_len=8)
        alone, _ = segment_loss(model, {"input_ids": rows}, segment_len=8, mem_len=0)
    assert float(loss) == pytest.approx(float(segmented_nll(model, rows, 8, 8).mean()), rel=1e-6)
    assert abs(float(alone) - float(loss)) > 1e-6  # the memory matters: without it, another loss


def test_evaluation_is_segmented_nll_with_and_without_memory(pretrained, docs):
    model, tok, _ = pretrained
    rows = stream_rows(token_stream(docs[:10], tok), 24)[:5]
    got = evaluate_transfo_xl(model, rows, segment_len=8, batch_size=2)
    assert got["lm_loss"] == pytest.approx(float(segmented_nll(model, rows, 8).mean()), rel=1e-6)
    assert got["lm_loss_no_memory"] == pytest.approx(float(segmented_nll(model, rows, 8, 0).mean()), rel=1e-6)


def test_stream_and_rows(docs, pretrained):
    tok = pretrained.tokenizer
    stream = token_stream(docs[:3], tok)
    sep = tok.token_to_id("[SEP]")
    assert int((stream == sep).sum()) == 3 and int(stream[-1]) == sep  # one [SEP] after each document
    assert tok.token_to_id("[CLS]") not in stream.tolist()
    rows = stream_rows(stream, 10)
    assert rows.shape == (stream.numel() // 10, 10) and torch.equal(rows.flatten(), stream[: rows.numel()])
    with pytest.raises(ValueError, match="at least 2"):
        stream_rows(stream, 1)


def test_no_memory_trains_the_same_network_without_memory(docs):
    run = pretrain_transfo_xl("tiny", docs, heldout=None, mem_len=0, **{**TINY, "steps": 3})
    assert run.model.config.mem_len == 0
    x = torch.randint(0, run.model.config.vocab_size, (1, 8))
    assert run.model(x).mems is None


def test_registered_and_round_trips(pretrained, tmp_path):
    model, tok, _ = pretrained
    assert MODEL_CLASSES["TransfoXLLMHeadModel"] is TransfoXLLMHeadModel
    save_pretrained(tmp_path / "m", model, tok)
    loaded, tok2 = load_pretrained(tmp_path / "m")
    assert tok2.to_str() == tok.to_str() and loaded.config == model.config
    for k, v in model.state_dict().items():
        assert torch.equal(v, loaded.state_dict()[k]), k
    with pytest.raises(FileNotFoundError, match="course train"):
        load_pretrained(tmp_path / "nothing")


def test_config_sizes_and_bad_input(docs):
    c = transfo_xl_config("small", vocab_size=100, mem_len=16)
    assert (c.d_model, c.n_head, c.n_layer, c.d_inner, c.mem_len) == (128, 4, 2, 512, 16)
    with pytest.raises(ValueError, match="unknown size"):
        transfo_xl_config("huge", vocab_size=100, mem_len=0)
    with pytest.raises(ValueError, match="segment_len"):
        pretrain_transfo_xl("tiny", docs, **{**TINY, "segment_len": 1})
    with pytest.raises(ValueError, match="mem_len"):
        pretrain_transfo_xl("tiny", docs, mem_len=-1, **TINY)
    with pytest.raises(ValueError, match="batch_size"):
        pretrain_transfo_xl("tiny", docs[:2], **{**TINY, "batch_size": 4096})
    with pytest.raises(ValueError, match="no documents"):
        pretrain_transfo_xl("tiny", [], **TINY)
    with pytest.raises(TypeError, match="TransfoXLConfig"):
        pretrain_transfo_xl(object(), docs, **TINY)


def test_cli_on_user_text_writes_a_model_that_loads(tmp_path, capsys):
    text = tmp_path / "text.txt"
    text.write_text(
        (
            "The river was cold. The boat moved slowly. A heron watched the water.\n\n"
            "My sister bakes bread. She likes rye flour. The oven is hot today.\n\n"
        )
        * 6
    )
    out = tmp_path / "model"
    argv = ["train", "transfo-xl", "--text", str(text), "--out", str(out), "--size", "tiny", "--steps", "3"]
    argv += [
        "--batch-size",
        "2",
        "--max-len",
        "8",
        "--segments-per-row",
        "2",
        "--vocab-size",
        "200",
        "--device",
        "cpu",
    ]
    assert course_main(argv) == 0
    printed = capsys.readouterr().out
    assert "pretrained a tiny Transformer-XL" in printed and str(out) in printed
    model, tok = load_pretrained(out)
    assert isinstance(model, TransfoXLLMHeadModel) and model.config.mem_len == 8
    meta = json.loads((out / "model.json").read_text())
    assert meta["recipe"]["segments_per_row"] == 2 and len(meta["history"]["loss"]) == 3


def test_cli_reports_bad_input_without_a_traceback(tmp_path, capsys):
    text = tmp_path / "one.txt"
    text.write_text("Too little text.\n")
    argv = ["train", "transfo-xl", "--text", str(text), "--out", str(tmp_path / "m"), "--size", "tiny"]
    assert course_main([*argv, "--steps", "2", "--device", "cpu"]) == 2
    assert "course train transfo-xl:" in capsys.readouterr().err
    assert not (tmp_path / "m").exists()
