"""Device choice, autocast policy and bit-reproducible seeding."""

import pytest
import torch

from course_lib.device import autocast, autocast_dtype, describe_device, get_device, seed_everything


def test_device_order_and_override(monkeypatch):
    monkeypatch.delenv("COURSE_DEVICE", raising=False)
    expected = (
        "cuda" if torch.cuda.is_available() else ("mps" if torch.backends.mps.is_available() else "cpu")
    )
    assert get_device().type == expected
    monkeypatch.setenv("COURSE_DEVICE", "cpu")
    assert get_device() == torch.device("cpu")
    assert get_device("cpu") == torch.device("cpu")


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_asking_for_a_missing_device_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("COURSE_DEVICE", "cuda")
    with pytest.raises(ValueError, match="COURSE_DEVICE='cuda'.*no CUDA"):
        get_device()


def test_cpu_runs_in_float32():
    assert autocast_dtype("cpu") is None
    with autocast("cpu"):
        y = torch.ones(2, 2) @ torch.ones(2, 2)
    assert y.dtype == torch.float32
    assert "float32" in describe_device("cpu")


def _train_a_little(seed):
    seed_everything(seed)
    model = torch.nn.Sequential(
        torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Dropout(0.2), torch.nn.Linear(16, 1)
    )
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for _ in range(20):
        x = torch.randn(32, 8)
        loss = (model(x) - x.sum(1, keepdim=True)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def test_seeded_cpu_runs_are_bit_identical():
    a, b, c = _train_a_little(0), _train_a_little(0), _train_a_little(1)
    assert torch.equal(a, b)
    assert not torch.equal(a, c)
