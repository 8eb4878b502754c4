"""Data parallelism under torchrun, on CPU with the gloo backend and 2 processes: the same
loss curve and parameters as one process with the same global batch, a resume on another
number of processes, and ``course train`` itself under torchrun."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
WORKER = ROOT / "tests" / "ddp_train.py"

pytestmark = pytest.mark.skipif(
    not torch.distributed.is_available(), reason="torch.distributed is not built in"
)


def _env() -> dict[str, str]:
    return dict(os.environ, COURSE_PROGRESS="0", OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))


def _run(out: Path, processes: int, *extra: str, expect: int = 0) -> None:
    out.mkdir(parents=True, exist_ok=True)
    if processes == 1:
        cmd = [sys.executable, str(WORKER), str(out), *extra]
    else:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(processes),
               "--standalone", str(WORKER), str(out), *extra]  # fmt: skip
    done = subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == expect or (expect and done.returncode != 0), done.stderr[-3000:]


def _result(out: Path) -> dict:
    return torch.load(out / "result.pt", weights_only=True)


@pytest.fixture(scope="module")
def one_process(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("one")
    _run(out, 1)
    return _result(out)


def test_two_processes_follow_one_process(tmp_path, one_process):
    _run(tmp_path, 2)
    two = _result(tmp_path)
    assert two["world"] == 2 and one_process["world"] == 1
    assert two["ddp"] == ["LossModule"] and one_process["ddp"] == []  # torch's DDP, around the loss
    assert two["loss"] == pytest.approx(one_process["loss"], abs=1e-5)
    for name, p in one_process["params"].items():
        torch.testing.assert_close(two["params"][name], p, atol=1e-5, rtol=1e-4)


def test_accumulation_on_two_processes_follows_one_process(tmp_path):
    """DDP's no_sync for all but the last micro-batch: the same steps as one process."""
    _run(tmp_path / "one", 1, "--accumulate", "2", "--steps", "4")
    _run(tmp_path / "two", 2, "--accumulate", "2", "--steps", "4")
    one, two = _result(tmp_path / "one"), _result(tmp_path / "two")
    assert two["loss"] == pytest.approx(one["loss"], abs=1e-5)
    for name, p in one["params"].items():
        torch.testing.assert_close(two["params"][name], p, atol=1e-5, rtol=1e-4)


def test_a_run_killed_on_two_processes_resumes_on_one(tmp_path, one_process):
    _run(tmp_path, 2, "--crash-at", "5", expect=17)  # both die in step 5; the state of step 4 is on disk
    assert torch.load(tmp_path / "ckpt" / "state.pt", weights_only=True)["done"] == 4
    assert not (tmp_path / "result.pt").exists()
    _run(tmp_path, 1, "--resume")
    resumed = _result(tmp_path)
    assert resumed["loss"] == pytest.approx(one_process["loss"], abs=1e-5)
    for name, p in one_process["params"].items():
        torch.testing.assert_close(resumed["params"][name], p, atol=1e-5, rtol=1e-4)


def test_course_train_under_torchrun(tmp_path):
    out = tmp_path / "model"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--standalone",
           "-m", "course_lib.cli", "train", "causal", "--data", "generated", "--size", "tiny", "--steps", "6",
           "--n-docs", "60", "--batch-size", "8", "--out", str(out)]  # fmt: skip
    done = subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    meta = json.loads((out / "model.json").read_text())
    assert meta["processes"] == 2 and len(meta["history"]["loss"]) == 6
    assert done.stdout.count("saved to") == 1  # rank 0 alone saves and reports


def _course_train(out: Path, processes: int, *extra: str) -> list[float]:
    argv = ["-m", "course_lib.cli", "train", "causal", "--data", "generated", "--size", "tiny",
            "--steps", "4", "--n-docs", "60", "--batch-size", "8", "--out", str(out), *extra]  # fmt: skip
    launcher = [] if processes == 1 else ["-m", "torch.distributed.run", "--nproc_per_node", str(processes),
                                          "--standalone"]  # fmt: skip
    done = subprocess.run(
        [sys.executable, *launcher, *argv], env=_env(), capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads((out / "model.json").read_text())["history"]["loss"]


def test_course_train_on_two_processes_follows_one_process_with_dropout_off(tmp_path):
    """``course train`` itself: with ``--dropout 0`` the 2-process loss curve is the 1-process
    one (within 1e-5). The control: with the recipe's dropout the processes draw their own
    masks, and the curves part by more than that."""
    one = _course_train(tmp_path / "one", 1, "--dropout", "0")
    two = _course_train(tmp_path / "two", 2, "--dropout", "0")
    assert len(one) == len(two) == 4
    assert two == pytest.approx(one, abs=1e-5)
    one_dropout = _course_train(tmp_path / "one-d", 1)
    two_dropout = _course_train(tmp_path / "two-d", 2)
    assert max(abs(a - b) for a, b in zip(one_dropout, two_dropout)) > 1e-5


def test_two_nodes_of_one_process_each(tmp_path, one_process):
    """Multi-node, simulated: two torchrun launchers (one per 'node') meet at a c10d rendezvous."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    launchers = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "torch.distributed.run",
                "--nnodes",
                "2",
                "--nproc_per_node",
                "1",
                "--node_rank",
                str(node),
                "--rdzv_backend",
                "c10d",
                "--rdzv_endpoint",
                f"127.0.0.1:{port}",
                "--rdzv_id",
                "course-test",
                str(WORKER),
                str(tmp_path),
            ],  # fmt: skip
            env=_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for node in (0, 1)
    ]
    for p in launchers:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err[-3000:]
    two = _result(tmp_path)
    assert two["world"] == 2
    assert two["loss"] == pytest.approx(one_process["loss"], abs=1e-5)


def test_fsdp2_shards_the_loss_module_and_follows_one_process(tmp_path):
    """The plan beyond one GPU's memory, run on CPUs with gloo: ``fully_shard`` on each encoder
    layer and then on the loss-module wrapper the loop gives DDP. Each of 2 processes holds
    half of the parameters (and so of the gradients and AdamW moments), and the loss curve and
    the gathered parameters are those of one unsharded process."""
    worker = ROOT / "tests" / "fsdp_train.py"
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    one = subprocess.run([sys.executable, str(worker), str(tmp_path / "one")], env=_env(),
                         capture_output=True, text=True, timeout=300)  # fmt: skip
    assert one.returncode == 0, one.stderr[-3000:]
    launcher = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--standalone"]
    two = subprocess.run([*launcher, str(worker), str(tmp_path / "two")], env=_env(),
                         capture_output=True, text=True, timeout=300)  # fmt: skip
    assert two.returncode == 0, two.stderr[-3000:]
    a, b = (torch.load(tmp_path / d / "fsdp.pt", weights_only=True) for d in ("one", "two"))
    assert a["world"] == 1 and b["world"] == 2
    assert a["held"] == 1.0 and b["held"] == pytest.approx(0.5, abs=0.01)  # really sharded
    assert b["loss"] == pytest.approx(a["loss"], abs=1e-5)
    assert a["loss"][-1] < a["loss"][0]  # it trains
    for name, p in a["params"].items():
        torch.testing.assert_close(b["params"][name], p, atol=1e-5, rtol=1e-4)
