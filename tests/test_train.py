"""The shared training loop."""

import math

import pytest
import torch
from torch import nn

from course_lib.train import History, fit, to_device, warmup_cosine


def regression():
    torch.manual_seed(0)
    w = torch.randn(4, 1)
    model = nn.Linear(4, 1)

    def batch(step):
        x = torch.randn(64, 4)
        return {"x": x, "y": x @ w}

    def loss_fn(model, b):
        loss = (model(b["x"]) - b["y"]).pow(2).mean()
        return loss, {"rmse": loss.sqrt().item()}

    return model, batch, loss_fn


def test_fit_learns_and_records_history():
    model, batch, loss_fn = regression()
    calls = []

    def ev(m):
        assert not m.training and not torch.is_grad_enabled()
        calls.append(1)
        return {"score": 1.0}

    h = fit(model, batch, loss_fn, steps=200, lr=0.05, eval_fn=ev, eval_every=50, progress=False)
    assert h.steps == list(range(200)) and len(h.loss) == len(h.lr) == 200
    assert h.loss[-1] < 0.01 * h.loss[0]
    assert len(h.metrics["rmse"]) == 200
    assert h.eval_steps == [49, 99, 149, 199] and len(calls) == 4
    assert not model.training  # handed back in eval mode
    assert h.seconds > 0


def test_iterables_are_reused_as_epochs_and_iterators_stop():
    model, batch, loss_fn = regression()
    data = [batch(i) for i in range(3)]
    h = fit(model, data, loss_fn, steps=7, progress=False)
    assert len(h.loss) == 7  # 3 + 3 + 1
    h2 = fit(model, iter(data), loss_fn, steps=7, progress=False)
    assert len(h2.loss) == 3  # a one-shot iterator ends the run
    with pytest.raises(ValueError, match="yielded nothing"):
        fit(model, [], loss_fn, steps=2, progress=False)


def test_warmup_then_cosine():
    assert warmup_cosine(0, total=100, warmup=10) == pytest.approx(0.1)
    assert warmup_cosine(9, total=100, warmup=10) == pytest.approx(1.0)
    assert warmup_cosine(55, total=100, warmup=10) == pytest.approx(0.5)
    assert warmup_cosine(100, total=100, warmup=10, floor=0.1) == pytest.approx(0.1)


def test_bad_runs_fail_loudly():
    model, batch, loss_fn = regression()
    with pytest.raises(ValueError, match="steps must be positive"):
        fit(model, batch, loss_fn, steps=0)
    with pytest.raises(FloatingPointError, match="step 0"):
        fit(model, batch, lambda m, b: torch.tensor(math.nan, requires_grad=True), steps=3, progress=False)


def test_history_round_trip_and_plot():
    model, batch, loss_fn = regression()
    h = fit(model, batch, loss_fn, steps=30, eval_fn=lambda m: {"acc": 0.5}, eval_every=10, progress=False)
    again = History.from_dict(h.to_dict())
    assert again.loss == h.loss and again.evals == h.evals
    assert len(h.smoothed_loss(5)) == 30
    ax = h.plot()
    assert ax.get_yscale() == "log"


def test_to_device_walks_nested_batches():
    b = {"a": torch.ones(2), "b": [torch.zeros(1), (torch.ones(1), "text")], "n": 3}
    out = to_device(b, torch.device("cpu"))
    assert out["n"] == 3 and out["b"][1][1] == "text" and torch.equal(out["a"], b["a"])
