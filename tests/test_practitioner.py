"""The practitioner's options of ``course train``: warm-up, weight decay, gradient clipping,
keeping the last k states, and SIGTERM (a preemptible machine) saving the state."""

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
from course_lib.train import fit, loop_overrides

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
