"""Measure every chapter claim under several seeds, CPU kernel sets and thread counts.

A chapter checks what its prose says with ``course_lib.claims.claim(statement, value, low=...,
high=..., evidence=...)``. This script shows where each band comes from: it executes the
chapters once per *setting* (a seed offset, a CPU kernel set, a thread count), each setting
with its own empty model cache so that every model is trained afresh under that setting, with
``COURSE_CLAIMS_RECORD_ONLY=1`` (a failing claim is recorded, not raised), and writes

- ``benchmarks/claim_bands.md``: per claim, the value under every setting, the range, the
  band, and whether every setting fell inside it;
- ``_build/bands/claims-<chapter>-<setting>.jsonl``: the raw records of each run; running a
  chapter under a setting again replaces that file, so the table never keeps a claim that a
  chapter no longer makes.

The table is rebuilt from the records of this checkout *and* the committed table: a chapter
measured here under some settings keeps the committed values of its other settings for every
claim it still makes (same statement), except a claim whose evidence is identical on every
machine (a stored study, exact arithmetic), whose committed values may come from older stored
results; a claim it no longer makes leaves the table; a chapter not measured here keeps its
committed rows as they are. ``ok`` reads values and bands as the table shows them (four
significant digits). So a new setting (or one chapter) can be
measured alone, and the table still shows every setting.

    .venv/bin/python benchmarks/claim_bands.py                      # the default grid, 2 jobs
    .venv/bin/python benchmarks/claim_bands.py --chapters 02 --jobs 1
    .venv/bin/python benchmarks/claim_bands.py --summarise-only     # rebuild the table from the records

``ATEN_CPU_CAPABILITY`` (``default``, ``avx2``, ``avx512``) makes PyTorch pick another set of
CPU kernels; with another ``OMP_NUM_THREADS`` reductions sum in another order: together the
cheapest stand-in for another machine. ``COURSE_SEED_OFFSET`` shifts every
``seed_everything`` seed (model initialisation and dropout; the data stay the same).
``COURSE_PRECISION=bf16`` (the ``-bf16`` setting) trains and evaluates every chapter under bf16
autocast on the CPU, the code path a GPU takes: a band must hold under a GPU's numerics too.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "_build" / "bands"
TABLE = ROOT / "benchmarks" / "claim_bands.md"

# (name, ATEN_CPU_CAPABILITY, OMP_NUM_THREADS, COURSE_SEED_OFFSET[, COURSE_PRECISION])
GRID = [
    ("seed0-avx2-2t", "avx2", "2", "0"),
    ("seed0-default-1t", "default", "1", "0"),
    ("seed1-avx2-1t", "avx2", "1", "1"),
    ("seed2-default-2t", "default", "2", "2"),
    ("seed0-avx512-2t", "avx512", "2", "0"),  # a CPU's native kernels where it has AVX-512
    # a GPU's numerics: every model trained under bf16 autocast (course_lib.device), on the CPU
    ("seed0-avx2-2t-bf16", "avx2", "2", "0", "bf16"),
]

RUNNER = """
import sys
from pathlib import Path
from course_lib.tools.notebooks import execute_notebook
execute_notebook(Path(sys.argv[1]), timeout=1800)
"""


def run_one(chapter: Path, setting: tuple[str, ...]) -> tuple[str, str, float, str]:
    name, capability, threads, offset = setting[:4]
    precision = setting[4] if len(setting) > 4 else "auto"
    log = OUT / f"claims-{chapter.stem}-{name}.jsonl"
    env = dict(os.environ)
    env.update(
        ATEN_CPU_CAPABILITY=capability,
        OMP_NUM_THREADS=threads,
        MKL_NUM_THREADS=threads,
        # idle threads sleep instead of spinning: the same sums, no waste on a busy machine
        OMP_WAIT_POLICY="PASSIVE",
        COURSE_SEED_OFFSET=offset,
        COURSE_CACHE=str(OUT / f"cache-{name}"),
        COURSE_CLAIMS_LOG=str(log),
        COURSE_CLAIMS_RECORD_ONLY="1",
        COURSE_CLAIMS_CHAPTER=chapter.stem,
        COURSE_CLAIMS_SETTING=name,
        COURSE_DEVICE="cpu",
        COURSE_PRECISION=precision,  # auto is float32 on the CPU; bf16 is bf16 autocast
        PYDEVD_DISABLE_FILE_VALIDATION="1",
    )
    done = OUT / f"done-{chapter.stem}-{name}"
    if done.exists():
        return chapter.stem, name, 0.0, "done before (delete _build/bands/done-* to measure again)"
    log.unlink(missing_ok=True)  # this run's records replace the last run's
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", RUNNER, str(chapter)], env=env, capture_output=True, text=True
    )
    seconds = time.perf_counter() - t0
    (OUT / f"log-{chapter.stem}-{name}.txt").write_text(proc.stdout + proc.stderr)
    if proc.returncode == 0:
        done.write_text(f"{seconds:.0f} s\n")
    status = (
        "ok"
        if proc.returncode == 0
        else f"failed: {proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else proc.returncode}"
    )
    return chapter.stem, name, seconds, status


def read_table(text: str) -> dict[tuple[str, str], dict]:
    """The rows of a table :func:`summarise` wrote (one or more header lines, each naming its
    settings): ``{(chapter, claim): {"low", "high", "values": {setting: value}}}``."""
    rows: dict[tuple[str, str], dict] = {}
    settings: list[str] = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        if line.startswith("| chapter |"):
            settings = cells[3:-2]
        elif line.startswith("| ") and settings and len(cells) == len(settings) + 5:
            lo, hi = (x.strip() for x in cells[2].strip("[]").split(","))
            row = rows.setdefault(
                (cells[0], cells[1]),
                {
                    "low": None if lo == "-inf" else float(lo),
                    "high": None if hi == "inf" else float(hi),
                    "values": {},
                },
            )
            row["values"].update({k: float(v) for k, v in zip(settings, cells[3:-2]) if v})
    return rows


def summarise(logs: Path | list[Path], previous: str = "") -> str:
    """The table of the records in ``logs`` merged with ``previous`` (the committed table's text;
    see the module's docstring for the rule)."""
    rows: dict[tuple[str, str], dict] = {}
    settings: list[str] = []
    logs = [logs] if isinstance(logs, Path) else logs
    lines = [line for log in logs for line in log.read_text().splitlines() if line.strip()]
    for line in lines:
        r = json.loads(line)
        setting = r.get("setting") or f"seed{r['seed_offset']}-{r['cpu_capability'].lower()}-{r['threads']}t"
        if setting not in settings:
            settings.append(setting)
        row = rows.setdefault((r["chapter"], r["claim"]), {"low": r["low"], "high": r["high"], "values": {}})
        row["low"], row["high"] = r["low"], r["high"]  # the latest band
        row["values"][setting] = r["value"]
        row["evidence"] = r.get("evidence") or ""
    measured = {chapter for chapter, _ in rows}
    for key, old in read_table(previous).items():
        if key[0] not in measured:
            rows[key] = old
        elif key in rows and "identical on every machine" not in rows[key].get("evidence", ""):
            rows[key]["values"] = {**old["values"], **rows[key]["values"]}
        else:
            continue
        settings += [s for s in old["values"] if s not in settings]
    settings = sorted(settings, key=lambda s: (s.endswith("-bf16"), s))
    out = [
        "# Claim bands: every chapter claim under several seeds, kernels and thread counts",
        "",
        "Made by `benchmarks/claim_bands.py` (see its docstring). A setting is "
        "`seed<COURSE_SEED_OFFSET>-<CPU kernels>-<threads>[-bf16]` (`-bf16`: under bf16 autocast, "
        "`COURSE_PRECISION=bf16`); every setting trains its models afresh. "
        "`ok` means every measured value lies inside the band the chapter asserts.",
        "",
        "| chapter | claim | band | " + " | ".join(settings) + " | range | ok |",
        "|---|---|---|" + "---|" * len(settings) + "---|---|",
    ]
    for (chapter, statement), row in sorted(rows.items(), key=lambda kv: kv[0][0]):
        vals = [row["values"].get(s) for s in settings]
        present = [v for v in vals if v is not None]
        lo = "-inf" if row["low"] is None else f"{row['low']:.4g}"
        hi = "inf" if row["high"] is None else f"{row['high']:.4g}"
        shown = [float(f"{v:.4g}") for v in present]  # as the table shows them
        low, high = (None if b is None else float(f"{b:.4g}") for b in (row["low"], row["high"]))
        ok = all((low is None or v >= low) and (high is None or v <= high) for v in shown)
        cells = " | ".join("" if v is None else f"{v:.4g}" for v in vals)
        rng = f"{min(present):.4g} to {max(present):.4g}" if present else ""
        out.append(
            f"| {chapter} | {statement} | [{lo}, {hi}] | {cells} | {rng} | {'yes' if ok else '**NO**'} |"
        )
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--chapters", nargs="*", default=None, help="chapter prefixes, e.g. 01 03 (default: all)")
    ap.add_argument("--settings", nargs="*", default=None, help="setting names from the grid (default: all)")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--summarise-only", action="store_true")
    args = ap.parse_args(argv)
    OUT.mkdir(parents=True, exist_ok=True)
    if not args.summarise_only:
        chapters = sorted((ROOT / "book").glob("[0-9][0-9]_*.ipynb"))
        if args.chapters:
            chapters = [c for c in chapters if c.stem[:2] in args.chapters]
        grid = [g for g in GRID if not args.settings or g[0] in args.settings]
        jobs = [(c, g) for g in grid for c in chapters]
        with ThreadPoolExecutor(max_workers=args.jobs) as pool:
            for chapter, name, seconds, status in pool.map(lambda job: run_one(*job), jobs):
                print(f"{chapter:>16}  {name:>18}  {seconds:6.0f} s  {status}", flush=True)
    previous = TABLE.read_text() if TABLE.exists() else ""
    TABLE.write_text(summarise(sorted(OUT.glob("claims-*.jsonl")), previous))
    print(f"wrote {TABLE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
