"""benchmarks/gpu_check.py: its CPU path (--smoke), end to end, and what it reports."""

import json
import subprocess
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "gpu_check.py"


def _stub(path: Path, first_cell: str = "import torch") -> Path:
    cells = [
        first_cell,
        "from course_lib.claims import claim\nfrom course_lib import get_device\nprint(get_device())",
        'claim("holds", 0.5, low=0.0, high=1.0, evidence="stub")',
        'claim("does not hold", 2.0, high=1.0, evidence="stub")',
    ]
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells]), path)
    return path


def test_the_cpu_path_runs_every_step_and_reports_them(tmp_path):
    chapter = _stub(tmp_path / "01_stub.ipynb")
    needs = _stub(tmp_path / "02_needs.ipynb", "import a_package_nobody_has_installed")
    out = tmp_path / "report"
    cmd = [sys.executable, str(SCRIPT), "--smoke", "--chapters", str(chapter), str(needs), "--out", str(out),
           "--budget", "900", "--repeats", "1", "--jobs", "2"]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads((out / "report.json").read_text())
    steps = report["steps"]
    assert steps["environment"]["device"] == "cpu"
    bench = steps["bench"]
    assert bench["status"] == "ok", bench
    assert set(bench["summary"]) == {"bert", "albert", "xlnet"}
    assert all(v["ratio"] > 0 and 0 < v["mfu_course"] for v in bench["summary"].values())
    for kind in ("train_compile", "train_torchrun"):
        assert steps[kind]["status"].startswith("ok"), steps[kind]
        assert len(steps[kind]["losses"]) == 2
    assert "torch.distributed.run" in steps["train_torchrun"]["command"]
    stub = steps["chapters"]["01_stub"]
    assert stub["status"] == "ok" and stub["seconds"] > 0
    assert [(c["claim"], c["ok"]) for c in stub["claims"]] == [("holds", True), ("does not hold", False)]
    skipped = steps["chapters"]["02_needs"]
    assert skipped["status"] == "skipped: missing package a_package_nobody_has_installed"
    assert steps["not_run"] == []
    md = (out / "report.md").read_text()
    assert "| 01_stub | ok |" in md and "does not hold (2 not in [-inf, 1])" in md and "| bert |" in md


def test_the_gpu_command_asks_for_compile_and_bert_base_size():
    import importlib.util

    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    gpu_check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gpu_check)
    cmd = gpu_check.train_command("compile", Path("o"), "cuda", smoke=False)
    assert "--compile" in cmd and cmd[cmd.index("--device") + 1] == "cuda"
    assert gpu_check.BASE == {"batch": 32, "seq": 512, "layers": 12, "hidden": 768, "heads": 12,
                              "intermediate": 3072, "vocab": 30522}  # fmt: skip


def test_without_cuda_it_says_so(tmp_path):
    import torch

    if torch.cuda.is_available():
        return
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--out", str(tmp_path)], capture_output=True, text=True
    )
    assert done.returncode == 2 and "no CUDA device" in done.stderr and "Traceback" not in done.stderr
