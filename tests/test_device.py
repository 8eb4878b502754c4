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
    # an explicit choice (a command's --device) is named as such, not as the environment's
    monkeypatch.delenv("COURSE_DEVICE")
    with pytest.raises(ValueError, match="^device='mps' asks for MPS, but it is not available$"):
        get_device("mps")
    # a name torch does not know, or a device the course does not run on (a traceback before)
    with pytest.raises(ValueError, match="^device='tpu' is not a device: use cpu, cuda"):
        get_device("tpu")
    monkeypatch.setenv("COURSE_DEVICE", "gpu")
    with pytest.raises(ValueError, match="^COURSE_DEVICE='gpu' is not a device"):
        get_device()
    with pytest.raises(ValueError, match="^device='meta': the course runs on cpu, cuda or mps$"):
        get_device("meta")


def test_an_unknown_device_is_one_line_in_every_command(tmp_path, monkeypatch, capsys):
    """A practitioner's review: `course eval --device tpu` and COURSE_DEVICE=gpu for any
    command ended in a traceback; now one line, exit 2."""
    from course_lib.cli import main

    (tmp_path / "t.txt").write_text("Some text here. More text there.\n")
    capsys.readouterr()
    assert main(["eval", str(tmp_path), "--data", str(tmp_path / "t.txt"), "--device", "tpu"]) == 2
    err = capsys.readouterr().err.strip()
    assert "'tpu' is not a device" in err and len(err.splitlines()) == 1, err
    monkeypatch.setenv("COURSE_DEVICE", "gpu")
    argv = ["train", "bert", "--data", "generated", "--n-docs", "20", "--size", "tiny", "--steps", "2"]
    assert main([*argv, "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert "COURSE_DEVICE='gpu' is not a device" in err and len(err.splitlines()) == 1, err


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


# --- COURSE_PRECISION: a GPU's bf16 numerics on the CPU ---------------------------------------


def test_course_precision_bf16_runs_cpu_under_bf16_autocast(monkeypatch):
    from course_lib.device import precision

    monkeypatch.setenv("COURSE_PRECISION", "bf16")
    assert precision() == "bf16"
    assert autocast_dtype("cpu") is torch.bfloat16
    lin = torch.nn.Linear(4, 4)
    with autocast("cpu"):
        y = lin(torch.ones(2, 4))
    assert y.dtype == torch.bfloat16
    with autocast("cpu", enabled=False):
        assert lin(torch.ones(2, 4)).dtype == torch.float32
    assert "bf16 autocast" in describe_device("cpu")
    monkeypatch.setenv("COURSE_PRECISION", "fp32")
    assert autocast_dtype("cpu") is None and autocast_dtype("cuda") is None
    monkeypatch.setenv("COURSE_PRECISION", "AUTO")
    assert autocast_dtype("cpu") is None
    monkeypatch.setenv("COURSE_PRECISION", "fp16")
    with pytest.raises(ValueError, match="COURSE_PRECISION must be one of auto, fp32, bf16, got 'fp16'"):
        autocast_dtype("cpu")


def test_course_precision_bf16_trains_through_the_training_loop_under_autocast(monkeypatch):
    """fit's default precision ("auto") follows the switch: the CUDA path, on the CPU."""
    from course_lib.train import fit

    seen = []

    class Probe(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 1)

        def forward(self, x):
            out = self.lin(x)
            seen.append(out.dtype)
            return out.float().pow(2).mean()

    batches = [torch.ones(2, 4)] * 3
    for setting, dtype in (("bf16", torch.bfloat16), ("auto", torch.float32)):
        monkeypatch.setenv("COURSE_PRECISION", setting)
        seen.clear()
        seed_everything(0)
        fit(Probe(), batches, lambda m, b: m(b), steps=2, lr=1e-2, progress=False)
        assert seen and set(seen) == {dtype}, setting


def test_the_checkpoint_cache_keys_on_precision(monkeypatch):
    from course_lib.checkpoints import cache_key

    monkeypatch.delenv("COURSE_PRECISION", raising=False)
    fp32 = cache_key("m", {"a": 1})
    monkeypatch.setenv("COURSE_PRECISION", "fp32")
    assert cache_key("m", {"a": 1}) == fp32  # the float32 key is unchanged
    monkeypatch.setenv("COURSE_PRECISION", "bf16")
    assert cache_key("m", {"a": 1}) != fp32
