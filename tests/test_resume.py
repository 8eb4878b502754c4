"""Exact resume: a run killed mid-training and resumed ends with the same parameters, bit for
bit, as a run never interrupted; checkpoints are written atomically."""

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
from safetensors.torch import load_file
from torch import nn

from course_lib import checkpoints as ck
from course_lib.train import History, RunOptions, fit, training_run

ROOT = Path(__file__).resolve().parents[1]


def _course(*args: str, **popen: object) -> list[str]:
    return [sys.executable, "-m", "course_lib.cli", *args]


def _env() -> dict[str, str]:
    env = dict(os.environ, COURSE_PROGRESS="0", OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    env.pop("COURSE_CACHE", None)
    return env


def _done(state: Path) -> int:
    try:
        return int(torch.load(state, weights_only=True)["done"])
    except Exception:
        return -1


TINY = ["--size", "tiny", "--batch-size", "8"]
# objective -> its options at tiny sizes (each run takes a few seconds)
OBJECTIVES = {
    "bert": [*TINY, "--n-docs", "60"],
    "roberta": [*TINY, "--n-docs", "60"],
    "albert": [*TINY, "--n-docs", "60"],
    "causal": [*TINY, "--n-docs", "60"],
    "xlnet": [*TINY, "--n-docs", "60"],
    "transfo-xl": [*TINY, "--n-docs", "60"],
    "elmo": [*TINY, "--n-sentences", "400"],
    "distill": ["--batch-size", "8", "--n-docs", "60", "--layers", "1"],
}
STEPS = 40


@pytest.fixture(scope="module")
def teacher(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("teacher")
    cmd = ["train", "bert", *OBJECTIVES["bert"], "--steps", "10", "--out", str(folder)]
    subprocess.run(_course(*cmd), env=_env(), check=True, capture_output=True)
    return folder


def _kill_when(proc: subprocess.Popen, states: Path, done: int) -> int:
    """SIGKILL ``proc`` once a training state under ``states`` has ``done`` steps; return the
    steps of the last state written."""
    deadline = time.time() + 300
    files: list[Path] = []
    while time.time() < deadline and proc.poll() is None:
        files = sorted(states.glob("*/state.pt")) if states.exists() else []
        if files and _done(files[-1]) >= done:
            break
        time.sleep(0.02)
    assert proc.poll() is None, (
        "the run ended before it could be killed: " + proc.stderr.read().decode()[-2000:]
    )
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    return _done(files[-1])


CASES = [(o, 1) for o in OBJECTIVES] + [("bert", 2), ("xlnet", 2), ("distill", 2)]


@pytest.mark.parametrize("objective,accumulate", CASES, ids=[f"{o}-acc{a}" for o, a in CASES])
def test_a_killed_run_resumes_to_the_same_parameters(tmp_path, objective, accumulate, request):
    """Every objective of ``course train``: SIGKILL mid-run, resume, and the model file is
    byte-identical to the uninterrupted run's (so every random source and counter an objective
    owns, XLNet's word orders and distillation's soft/hard schedule included, is in the state)."""
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    extra = ["--teacher", str(request.getfixturevalue("teacher"))] if objective == "distill" else []
    cmd = ["train", objective, "--data", "generated", *OBJECTIVES[objective], *extra]
    cmd += ["--steps", str(STEPS), "--checkpoint-every", "2", "--accumulate", str(accumulate)]
    subprocess.run(_course(*cmd, "--out", str(whole)), env=_env(), check=True, capture_output=True)

    proc = subprocess.Popen(
        _course(*cmd, "--out", str(killed)), env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    stopped_at = _kill_when(proc, killed / "checkpoints", 4)
    assert 4 <= stopped_at < STEPS
    assert not (killed / "model.safetensors").exists()

    out = subprocess.run(
        _course(*cmd, "--out", str(killed), "--resume"), env=_env(), capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert (whole / "model.safetensors").read_bytes() == (killed / "model.safetensors").read_bytes(), (
        f"{objective}: the resumed model differs from the uninterrupted run's"
    )
    a, b = load_file(whole / "model.safetensors"), load_file(killed / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    history_a = json.loads((whole / "model.json").read_text())["history"]
    history_b = json.loads((killed / "model.json").read_text())["history"]
    assert history_a["loss"] == history_b["loss"]
    assert history_a["steps"][-STEPS:] == list(
        range(history_a["steps"][-1] - STEPS + 1, history_a["steps"][-1] + 1)
    )
    # the metrics log holds each step once, also after the resume
    for log in (killed / "logs").glob("*[!s].csv"):
        steps = [int(r.split(",")[1]) for r in log.read_text().splitlines()[1:]]
        assert steps == sorted(set(steps))


def _toy(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(6, 16), nn.Dropout(0.2), nn.ReLU(), nn.Linear(16, 3))


def _draw(
    step: int,
) -> tuple[torch.Tensor, torch.Tensor]:  # uses the global random state, like dynamic masking
    return torch.randn(8, 6), torch.randint(0, 3, (8,))


def _loss(model, batch):
    return nn.functional.cross_entropy(model(batch[0]), batch[1])


class _Killed(Exception):
    pass


def _killing(at: int):
    calls = {"n": 0}

    def loss(model, batch):
        calls["n"] += 1
        if calls["n"] > at:
            raise _Killed
        return _loss(model, batch)

    return loss


@pytest.mark.parametrize("accumulate", [1, 3])
@pytest.mark.parametrize("batches", ["function", "list"])
def test_fit_resumes_exactly_from_any_checkpoint(tmp_path, accumulate, batches):
    data = (lambda: _draw) if batches == "function" else (lambda: [_draw(i) for i in range(5)])
    torch.manual_seed(1)
    whole = _toy()
    ref = fit(
        whole,
        data(),
        _loss,
        steps=11,
        progress=False,
        accumulate=accumulate,
        eval_fn=lambda m: {"x": 1.0},
        eval_every=4,
    )
    after_ref = torch.rand(3)

    torch.manual_seed(1)
    model = _toy()
    with pytest.raises(_Killed):
        fit(
            model,
            data(),
            _killing(7 * accumulate + 1),
            steps=11,
            progress=False,
            accumulate=accumulate,
            checkpoint=tmp_path,
            checkpoint_every=3,
            eval_fn=lambda m: {"x": 1.0},
            eval_every=4,
        )
    assert torch.load(tmp_path / "state.pt", weights_only=True)["done"] == 6

    torch.manual_seed(1)
    model = _toy()
    history = fit(
        model,
        data(),
        _loss,
        steps=11,
        progress=False,
        accumulate=accumulate,
        checkpoint=tmp_path,
        checkpoint_every=3,
        resume=True,
        eval_fn=lambda m: {"x": 1.0},
        eval_every=4,
    )
    assert all(torch.equal(p, q) for p, q in zip(whole.parameters(), model.parameters()))
    assert history.loss == ref.loss and history.steps == ref.steps and history.eval_steps == ref.eval_steps
    assert torch.equal(torch.rand(3), after_ref), "the random state after training differs"


def test_a_finished_run_is_loaded_not_trained_again(tmp_path):
    torch.manual_seed(0)
    model = _toy()
    fit(model, _draw, _loss, steps=5, progress=False, checkpoint=tmp_path)
    again = _toy(seed=5)
    _toy(seed=0)  # the global random state (which draws the batches) as at the first run's start
    history = fit(again, _draw, _killing(0), steps=5, progress=False, checkpoint=tmp_path, resume=True)
    assert len(history.loss) == 5
    assert all(torch.equal(p, q) for p, q in zip(model.parameters(), again.parameters()))


def test_each_fit_of_a_run_gets_its_own_checkpoint(tmp_path):
    """A recipe with two stages (as distillation has) resumes inside the second one."""

    def recipe(loss2):
        torch.manual_seed(0)
        model = _toy()
        h = fit(model, _draw, _loss, steps=4, progress=False, desc="stage one")
        fit(model, _draw, loss2, steps=6, progress=False, desc="stage two", history=h)
        return model, h

    whole, ref = recipe(_loss)
    with training_run(RunOptions(checkpoint_dir=str(tmp_path), checkpoint_every=2)):
        with pytest.raises(_Killed):
            recipe(_killing(5))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["1-stage-one", "2-stage-two"]
    with training_run(RunOptions(checkpoint_dir=str(tmp_path), checkpoint_every=2, resume=True)):
        model, history = recipe(_loss)
    assert all(torch.equal(p, q) for p, q in zip(whole.parameters(), model.parameters()))
    assert history.loss == ref.loss and history.steps == list(range(10))


def test_a_kill_during_the_write_keeps_the_last_good_state(tmp_path, monkeypatch):
    torch.manual_seed(0)
    model = _toy()
    fit(model, _draw, _loss, steps=4, progress=False, checkpoint=tmp_path, checkpoint_every=2)
    good = (tmp_path / "state.pt").read_bytes()

    def dies_half_way(obj, f, *a, **k):
        Path(f).write_bytes(good[: len(good) // 2])  # a truncated file, as a kill would leave
        raise KeyboardInterrupt

    monkeypatch.setattr(ck.torch, "save", dies_half_way)
    with pytest.raises(KeyboardInterrupt):
        fit(_toy(), _draw, _loss, steps=4, progress=False, checkpoint=tmp_path, checkpoint_every=2)
    assert (tmp_path / "state.pt").read_bytes() == good
    assert [p.name for p in tmp_path.iterdir()] == ["state.pt"], "the temporary file was left behind"


def test_resume_refuses_a_state_of_another_run_length(tmp_path):
    fit(_toy(), _draw, _loss, steps=4, progress=False, checkpoint=tmp_path)
    with pytest.raises(ValueError, match=r"--steps 4 \(saved\) vs 6 \(now\)"):
        fit(_toy(), _draw, _loss, steps=6, progress=False, checkpoint=tmp_path, resume=True)
    (tmp_path / "state.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(ValueError, match="not a readable training state"):
        fit(_toy(), _draw, _loss, steps=4, progress=False, checkpoint=tmp_path, resume=True)


def test_resume_without_a_folder_is_an_error():
    with pytest.raises(ValueError, match="checkpoint"):
        fit(_toy(), _draw, _loss, steps=2, progress=False, resume=True)
    with pytest.raises(ValueError, match="checkpoint_dir"):
        RunOptions(resume=True)


def test_history_round_trip_after_resume(tmp_path):
    h = History(steps=[0], loss=[1.0])
    assert History.from_dict(h.to_dict()) == h


def test_ctrl_c_is_one_line_naming_the_state_to_resume(tmp_path):
    """SIGINT (Ctrl-C) mid-run: exit status 130 and one line naming the last training state
    and how to continue, not a traceback (the resume itself: the test above)."""
    out = tmp_path / "run"
    cmd = ["train", "bert", "--data", "generated", *OBJECTIVES["bert"], "--steps", "4000"]
    cmd += ["--checkpoint-every", "2", "--out", str(out)]
    proc = subprocess.Popen(_course(*cmd), env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None:
        states = sorted((out / "checkpoints").glob("*/state.pt")) if (out / "checkpoints").exists() else []
        if states and _done(states[-1]) >= 4:
            break
        time.sleep(0.02)
    assert proc.poll() is None, "the run ended before it could be interrupted"
    proc.send_signal(signal.SIGINT)
    err = proc.stderr.read().decode().strip()
    assert proc.wait() == 130, err[-2000:]
    assert "Traceback" not in err, err[-2000:]
    last = err.splitlines()[-1]
    assert "interrupted; the last training state (saved every 2 steps) is in" in last, last
    assert "--resume" in last and not (out / "model.safetensors").exists()


def test_ctrl_c_in_any_command_is_one_line(monkeypatch, capsys):
    """Every `course` command, not only training: Ctrl-C (KeyboardInterrupt) anywhere is one
    line naming the command and exit status 130. Control: the command runs when not stopped."""
    from course_lib import cli

    calls = {"n": 0}
    real = cli.build_parser

    def parser_then_stop():
        parser = real()
        calls["n"] += 1
        if calls["n"] == 1:
            raise KeyboardInterrupt
        return parser

    monkeypatch.setattr(cli, "build_parser", parser_then_stop)
    assert cli.main(["study", "list"]) == 130
    assert capsys.readouterr().err.strip() == "course study list: interrupted"
    assert cli.main(["study", "list"]) == 0  # control
