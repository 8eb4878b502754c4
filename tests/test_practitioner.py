"""The practitioner's options of ``course train``: warm-up, weight decay, gradient clipping,
dropout, masking rate, held-out fraction, keeping the last k states, and SIGTERM (a
preemptible machine) saving the state."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from torch import nn

from course_lib.cli import main
from course_lib.train import fit, loop_overrides, set_dropout

ROOT = Path(__file__).resolve().parents[1]
TRAIN = ["--data", "generated", "--size", "tiny", "--n-docs", "40", "--batch-size", "8"]


def test_warmup_weight_decay_and_clip_reach_the_loop(tmp_path):
    out = tmp_path / "m"
    args = [
        *TRAIN,
        "--steps",
        "6",
        "--lr",
        "0.001",
        "--warmup",
        "3",
        "--weight-decay",
        "0",
        "--grad-clip",
        "0",
    ]
    assert main(["train", "bert", *args, "--out", str(out)]) == 0
    lr = json.loads((out / "model.json").read_text())["history"]["lr"]
    assert lr[:3] == pytest.approx([0.001 / 3, 0.002 / 3, 0.001])
    # the values are part of the run: a resume with another warm-up is refused
    assert main(["train", "bert", *args[:-6], "--warmup", "2", "--out", str(out), "--resume"]) == 2


def test_loop_overrides_set_decay_and_clipping():
    torch.manual_seed(0)
    model = nn.Linear(4, 4)
    big = lambda m, b: m(b).pow(2).sum() * 1e6  # noqa: E731
    before = model.weight.detach().clone()
    with loop_overrides(grad_clip=0, weight_decay=0.0, warmup=0):
        fit(model, lambda s: torch.ones(2, 4), big, steps=1, lr=0.1, progress=False)
    # Adam's first step moves every weight by lr whatever the gradient's size: no clipping needed
    assert (model.weight - before).abs().max().item() == pytest.approx(0.1, rel=1e-4)
    with pytest.raises(ValueError, match="keep_last"):
        with loop_overrides(keep_last=0):
            pass


def test_keep_last_keeps_the_k_previous_states(tmp_path):
    out = tmp_path / "m"
    args = [*TRAIN, "--steps", "10", "--checkpoint-every", "2", "--keep-last", "2", "--out", str(out)]
    assert main(["train", "bert", *args]) == 0
    (stage,) = (out / "checkpoints").iterdir()
    kept = sorted(p.name for p in stage.glob("state-*.pt"))
    assert kept == ["state-00000006.pt", "state-00000008.pt"]
    assert torch.load(stage / kept[0], weights_only=True)["done"] == 6
    assert torch.load(stage / "state.pt", weights_only=True)["done"] == 10


def test_sigterm_saves_the_state_and_the_resumed_run_ends_as_if_never_stopped(tmp_path):
    env = dict(os.environ, COURSE_PROGRESS="0", OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    cmd = [sys.executable, "-m", "course_lib.cli", "train", "bert", *TRAIN, "--steps", "60"]
    whole, stopped = tmp_path / "whole", tmp_path / "stopped"
    subprocess.run([*cmd, "--out", str(whole)], env=env, check=True, capture_output=True)
    proc = subprocess.Popen([*cmd, "--out", str(stopped)], env=env, stderr=subprocess.PIPE, text=True)
    log = stopped / "logs"
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None:
        rows = sum(len(p.read_text().splitlines()) for p in log.glob("*.csv")) if log.exists() else 0
        if rows > 4:
            break
        time.sleep(0.02)
    assert proc.poll() is None, "the run ended before SIGTERM"
    proc.send_signal(signal.SIGTERM)
    err = proc.communicate(timeout=120)[1].strip()
    assert proc.returncode == 1 and "stopped by SIGTERM after step" in err and len(err.splitlines()) == 1, err
    state = next((stopped / "checkpoints").glob("*/state.pt"))
    assert 0 < torch.load(state, weights_only=True)["done"] < 60
    subprocess.run([*cmd, "--out", str(stopped), "--resume"], env=env, check=True, capture_output=True)
    assert (whole / "model.safetensors").read_bytes() == (stopped / "model.safetensors").read_bytes()


def _tiny_bert():
    from course_lib.models.bert import BertConfig, BertForMaskedLM

    torch.manual_seed(0)
    config = BertConfig(vocab_size=40, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=32, max_position_embeddings=16)  # fmt: skip
    return BertForMaskedLM(config)


def test_set_dropout_sets_what_the_configuration_implies():
    model = _tiny_bert()
    ids = torch.randint(5, 40, (2, 10))
    model.train()
    with torch.no_grad():
        noisy = model(input_ids=ids).logits  # the recipe's dropout 0.1: train mode is random
    set_dropout(model, 0.0)
    with torch.no_grad():
        train_mode = model(input_ids=ids).logits
        model.eval()
        eval_mode = model(input_ids=ids).logits
    assert not torch.allclose(noisy, eval_mode)  # the control: dropout was on
    torch.testing.assert_close(train_mode, eval_mode)  # and now every dropout is off
    set_dropout(model, 0.3)
    assert model.config.hidden_dropout_prob == model.config.attention_probs_dropout_prob == 0.3
    rates = {name: m.p for name, m in model.named_modules() if isinstance(m, nn.Dropout)}
    assert any(p == 0.3 for p in rates.values())
    # BERT has no dropout between the feed-forward matrices: it stays off
    assert all(p == 0.0 for name, p in rates.items() if ".ffn." in name)
    teacher = _tiny_bert().requires_grad_(False)  # a frozen network is left alone
    holder = nn.ModuleDict({"student": model, "teacher": teacher})
    set_dropout(holder, 0.2)
    assert model.config.hidden_dropout_prob == 0.2 and teacher.config.hidden_dropout_prob == 0.1
    with pytest.raises(ValueError, match="dropout must be in"):
        set_dropout(model, 1.0)


def test_dropout_mask_rate_and_heldout_reach_the_recipe(tmp_path, monkeypatch, capsys):
    import course_lib.recipes.bert_command as bert

    seen = {}
    real = bert.pretrain_bert

    def spy(*args, **kwargs):
        seen.update(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(bert, "pretrain_bert", spy)
    out = tmp_path / "m"
    argv = ["train", "bert", *TRAIN, "--steps", "2", "--out", str(out)]
    assert main([*argv, "--dropout", "0", "--mask-rate", "0.4", "--heldout", "0.25"]) == 0
    assert seen["mlm_probability"] == 0.4 and seen["heldout"] == 0.25
    config = json.loads((out / "config.json").read_text())
    assert config["hidden_dropout_prob"] == config["attention_probs_dropout_prob"] == 0.0
    capsys.readouterr()
    assert main([*argv, "--heldout", "0", "--out", str(tmp_path / "n")]) == 0
    assert "held-out: none (--heldout 0)" in capsys.readouterr().out
    assert seen["heldout"] is None and seen["mlm_probability"] == 0.15  # 0: nothing held out
    config = json.loads((tmp_path / "n" / "config.json").read_text())
    assert config["hidden_dropout_prob"] == 0.1  # the recipe's without --dropout


@pytest.mark.parametrize(
    "argv,named",
    [
        (["train", "bert", "--dropout", "1"], "--dropout: must be in [0, 1), got 1"),
        (["train", "bert", "--mask-rate", "0"], "--mask-rate: must be in (0, 1), got 0"),
        (["train", "xlnet", "--heldout", "-0.1"], "--heldout: must be in [0, 1), got -0.1"),
        # every k-th document, k = round(1/F): above 0.5 k would be 1 (everything held out)
        (["train", "bert", "--heldout", "0.9"], "--heldout: must be at most 0.5 (every k-th one"),
        (["finetune", "m", "--task", "tag", "--train", "t", "--heldout", "0.7"], "must be at most 0.5"),
        (["train", "xlnet", "--mask-rate", "0.2"], "unrecognized arguments: --mask-rate"),
        (["train", "elmo", "--dropout", "x"], "--dropout: not a number: x"),
    ],
)
def test_bad_regularisation_values_are_one_line(argv, named, tmp_path, capsys):
    from course_lib.data.documents import split_documents

    with pytest.raises(ValueError, match=r"in \(0, 0.5\]"):  # the library refuses it too
        split_documents(list(range(10)), 0.7)
    assert split_documents(list(range(10)), 0.5) == ([0, 2, 4, 6, 8], [1, 3, 5, 7, 9])  # control
    with pytest.raises(SystemExit) as stop:
        main([*argv, "--out", str(tmp_path / "o")])
    assert stop.value.code == 2
    assert named in capsys.readouterr().err


def test_an_empty_out_and_a_grader_count_of_zero_are_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # an empty --out used to write the model into the current folder
    assert main(["train", "bert", *TRAIN, "--steps", "2", "--out", ""]) == 2
    assert "--out is empty" in capsys.readouterr().err and not any(tmp_path.iterdir())
    with pytest.raises(SystemExit):
        main(["grade", "x.ipynb", "--out", "g", "--jobs", "0"])
    err = capsys.readouterr().err
    assert "--jobs: must be positive, got 0" in err and "_positive_int" not in err


def test_a_warmup_as_long_as_the_run_is_refused(tmp_path, capsys):
    """The learning rate would never reach its peak; control: a shorter warm-up trains."""
    assert (
        main(["train", "bert", *TRAIN, "--warmup", "100", "--steps", "3", "--out", str(tmp_path / "o")]) == 2
    )
    err = capsys.readouterr().err.strip()
    assert "--warmup 100 is not below --steps 3" in err and len(err.splitlines()) == 1
    assert main(["train", "bert", *TRAIN, "--warmup", "2", "--steps", "3", "--out", str(tmp_path / "o")]) == 0


def test_regularisation_values_in_a_config_file_are_checked(tmp_path, capsys):
    config = tmp_path / "run.toml"
    config.write_text("dropout = 1.5\n")
    assert main(["train", "bert", *TRAIN, "--config", str(config), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert "dropout = 1.5: must be in [0, 1)" in err and len(err.splitlines()) == 1
    config.write_text('mask-rate = "often"\n')
    assert main(["train", "roberta", *TRAIN, "--config", str(config), "--out", str(tmp_path / "o")]) == 2
    assert "mask-rate = 'often': not a number" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv,usage",
    [
        (["train", "distill", "--teacher", "t", "--max-len", "5"], "usage: course train distill"),
        (["train", "xlnet", "--mask-rate", "0.2"], "usage: course train xlnet"),
        (["grade", "x.ipynb", "--out", "o", "--bogus"], "usage: course grade"),
        (["eval", "m", "--data", "d", "--bogus"], "usage: course eval"),
    ],
)
def test_an_unknown_option_is_named_with_its_commands_usage(argv, usage, capsys):
    """A practitioner's review: an option a subcommand does not have was reported with the top
    level's usage (`usage: course [-h] COMMAND ...`), which says nothing of what the command
    takes. Now the subcommand's own parser says it, with its usage."""
    with pytest.raises(SystemExit) as stop:
        main(argv)
    err = capsys.readouterr().err
    assert stop.value.code == 2 and err.startswith(usage) and "unrecognized arguments: " in err, err
