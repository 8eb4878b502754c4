"""The training loop's long-run features: accumulation, precision, schedules, logs and failures."""

from __future__ import annotations

import csv

import pytest
import torch
from torch import nn

from course_lib.train import (
    SCHEDULES,
    RunOptions,
    current_run,
    fit,
    training_run,
    warmup_linear,
)
from course_lib.train_parallel import shard_batch


def _model(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(5, 12), nn.Tanh(), nn.Linear(12, 2))


def _rows(n: int = 8, seed: int = 3) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 5, generator=g), torch.randn(n, 2, generator=g)


def _mse(model, batch):
    return nn.functional.mse_loss(model(batch[0]), batch[1])


def test_accumulation_equals_the_whole_batch():
    """4 micro-batches of 2 rows and one batch of 8 give the same steps (a per-row mean loss)."""
    x, y = _rows()
    whole = _model()
    h1 = fit(whole, [(x, y)], _mse, steps=6, progress=False, lr=0.05)
    pieces = _model()
    h4 = fit(
        pieces,
        [(x[i : i + 2], y[i : i + 2]) for i in range(0, 8, 2)],
        _mse,
        steps=6,
        progress=False,
        lr=0.05,
        accumulate=4,
    )
    for p, q in zip(whole.parameters(), pieces.parameters()):
        torch.testing.assert_close(p, q, atol=1e-6, rtol=1e-5)
    assert h4.loss == pytest.approx(h1.loss, rel=1e-5)


def test_schedules():
    assert warmup_linear(0, total=100, warmup=10) == pytest.approx(0.1)
    assert warmup_linear(55, total=100, warmup=10) == pytest.approx(0.5)
    assert warmup_linear(100, total=100, warmup=10, floor=0.1) == pytest.approx(0.1)
    assert SCHEDULES["constant"](50, total=100, warmup=10) == 1.0
    h = fit(_model(), [_rows()], _mse, steps=20, warmup=2, progress=False, lr=0.1, schedule="linear")
    assert h.lr[1] == pytest.approx(0.1) and h.lr[-1] == pytest.approx(
        0.1 * warmup_linear(19, total=20, warmup=2)
    )


@pytest.mark.parametrize("precision", ["bf16", "fp16", "fp32"])
def test_every_precision_trains_on_cpu(precision):
    h = fit(_model(), [_rows()], _mse, steps=30, progress=False, lr=0.05, precision=precision)
    assert h.loss[-1] < 0.7 * h.loss[0]


def test_bf16_autocast_is_really_used():
    seen = []

    def loss(model, batch):
        out = model[0](batch[0])
        seen.append(out.dtype)
        return out.float().pow(2).mean()

    fit(_model(), [_rows()], loss, steps=1, progress=False, precision="bf16")
    fit(_model(), [_rows()], loss, steps=1, progress=False, precision="fp32")
    assert seen == [torch.bfloat16, torch.float32]


def test_a_non_finite_loss_names_the_step():
    calls: list[int] = []

    def loss(model, batch):
        calls.append(1)
        value = _mse(model, batch)
        return value * float("nan") if len(calls) == 3 else value

    with pytest.raises(FloatingPointError, match="at step 2"):
        fit(_model(), [_rows()], loss, steps=10, progress=False)


def test_running_out_of_memory_names_a_batch_size_to_try():
    def loss(model, batch):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    with pytest.raises(RuntimeError, match=r"batch of 8 rows: try --batch-size 4 --accumulate 2"):
        fit(_model(), [_rows()], loss, steps=2, progress=False)


def test_the_metrics_log(tmp_path):
    path = tmp_path / "log.csv"
    fit(
        _model(),
        [_rows()],
        lambda m, b: (_mse(m, b), {"extra": 2.0}),
        steps=5,
        progress=False,
        log_csv=path,
        eval_fn=lambda m: {"heldout": 1.5},
        eval_every=2,
    )
    rows = list(csv.DictReader(path.open()))
    assert [int(r["step"]) for r in rows] == list(range(5)) and rows[0]["extra"] == "2"
    evals = list(csv.DictReader(path.with_name("log-evals.csv").open()))
    assert [int(r["step"]) for r in evals] == [1, 3, 4] and evals[0]["heldout"] == "1.5"
    fit(_model(), [_rows()], _mse, steps=2, progress=False, log_csv=path)  # a new run starts a new log
    assert len(list(csv.DictReader(path.open()))) == 2


def test_training_run_reaches_fit_and_validates():
    assert current_run() == RunOptions()
    with training_run(accumulate=2, precision="fp32") as opts:
        assert current_run() is opts and opts.accumulate == 2
        seen = []
        fit(_model(), lambda step: seen.append(step) or _rows(), _mse, steps=3, progress=False)
        assert seen == list(range(6))  # two micro-batches a step
    assert current_run() == RunOptions()
    for bad, match in (
        ({"accumulate": 0}, "accumulate"),
        ({"precision": "fp8"}, "precision"),
        ({"schedule": "step"}, "schedule"),
    ):
        with pytest.raises(ValueError, match=match):
            RunOptions(**bad)


def test_shard_batch_takes_equal_slices_of_every_row_tensor():
    batch = {
        "ids": torch.arange(12).view(6, 2),
        "labels": torch.arange(6),
        "scale": torch.tensor(2.0),
        "name": "x",
    }
    parts = [shard_batch(batch, r, 3) for r in range(3)]
    assert torch.equal(torch.cat([p["ids"] for p in parts]), batch["ids"])
    assert parts[1]["labels"].tolist() == [2, 3] and parts[2]["scale"] == 2.0 and parts[0]["name"] == "x"
    with pytest.raises(ValueError, match="6 rows does not split over 4 processes"):
        shard_batch(batch, 0, 4)
    assert shard_batch(batch, 0, 1) is batch


def test_reading_the_loss_back_in_batches_changes_nothing(monkeypatch):
    """On a GPU the loop reads losses back every 10 steps, not every step (no host-device sync
    per step); forced here on the CPU, the history and the weights are the same, and a NaN
    still names its own step."""
    import course_lib.train as train

    eager_model = _model()
    eager = fit(
        eager_model, [_rows()], lambda m, b: (_mse(m, b), {"m": torch.tensor(2.0)}), steps=13, progress=False
    )
    monkeypatch.setattr(train, "_SYNC_EVERY", {"cpu": 4})
    lazy_model = _model()
    lazy = fit(
        lazy_model, [_rows()], lambda m, b: (_mse(m, b), {"m": torch.tensor(2.0)}), steps=13, progress=False
    )
    assert lazy.loss == pytest.approx(eager.loss, rel=1e-6) and lazy.steps == eager.steps
    assert lazy.metrics["m"] == [2.0] * 13
    assert all(torch.equal(p, q) for p, q in zip(eager_model.parameters(), lazy_model.parameters()))
    calls: list[int] = []

    def loss(model, batch):
        calls.append(1)
        value = _mse(model, batch)
        return value * float("inf") if len(calls) == 6 else value

    with pytest.raises(FloatingPointError, match="at step 5"):
        fit(_model(), [_rows()], loss, steps=12, progress=False)


def test_tensorboard_logs_or_says_how_to_get_it(tmp_path):
    with training_run(tensorboard=str(tmp_path / "tb"), log_dir=str(tmp_path / "logs")):
        try:
            import torch.utils.tensorboard  # noqa: F401

            installed = True
        except ImportError:
            installed = False
        if installed:
            fit(_model(), [_rows()], _mse, steps=3, progress=False)
            assert list((tmp_path / "tb").rglob("events.out.tfevents.*"))
        else:
            with pytest.warns(UserWarning, match="pip install tensorboard"):
                fit(_model(), [_rows()], _mse, steps=3, progress=False)
    assert len(list(csv.DictReader((tmp_path / "logs" / "1-training.csv").open()))) == 3


def test_compile_hands_the_compiled_model_to_the_loss(monkeypatch):
    """--compile: the loss sees torch.compile's module (a real compile takes minutes on a CPU,
    so it is replaced by a recording stand-in here; `course train bert --compile` ran in the
    issue's measurements)."""
    compiled = []

    def fake_compile(model):
        compiled.append(model)
        return model

    monkeypatch.setattr(torch, "compile", fake_compile)
    seen = []
    model = _model()
    with training_run(compile=True):
        fit(model, [_rows()], lambda m, b: seen.append(m) or _mse(m, b), steps=2, progress=False)
    assert compiled == [model] and seen == [model, model]
    fit(_model(), [_rows()], _mse, steps=1, progress=False)
    assert len(compiled) == 1
