"""Measure the grader: overhead per submission and batch throughput.

    .venv/bin/python tests/grading_fixtures/bench.py [N] [JOBS]

1. In-process, one checker: the wall time of grading one submission, split into starting
   the sandbox (bubblewrap + Python + torch import + limits), forking the student process
   and running the answer cells, and the checks (calls, reference answers, comparisons).
   The student's own compute in chapter 02 is a few milliseconds, so this is the overhead.
2. ``course grade`` on N submissions (default 50: honest, partial and stub notebooks in
   turn) with ``--jobs JOBS`` (default 2), end to end (including the start of the command
   and of its checker processes).
"""

from __future__ import annotations

import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from grading_fixtures.cases import ATT, CONCAT_PE, HONEST_ALTERNATIVE, NAN_ROWS, NO_SCALE, PE, Case


def per_submission(repeats: int = 5) -> None:
    import course_lib.grading.checker as checker
    import course_lib.grading.sandbox as sandbox
    import course_lib.grading.sandbox_setup as sandbox_setup
    from course_lib.grading.format import load_assignment
    from course_lib.grading.grade import Submission

    mode, _ = sandbox_setup.choose_mode(None)
    assignment = load_assignment(Path(__file__).resolve().parents[2] / "solutions" / "02_transformer.ipynb")
    reference = checker.Reference(assignment)
    answers = Case("solution").notebook()
    sub = Submission(
        "x", by_id={c["id"]: "".join(c["source"]) for c in answers["cells"] if c["cell_type"] == "code"}
    )
    timings: dict[str, list[float]] = {"start": [], "spawn": [], "total": []}
    orig_start, orig_spawn = sandbox.Sandbox.start, sandbox.Sandbox.spawn

    def start(self, deadline):
        t = time.perf_counter()
        orig_start(self, deadline)
        timings["start"].append(time.perf_counter() - t)

    def spawn(self, deadline):
        t = time.perf_counter()
        orig_spawn(self, deadline)
        timings["spawn"].append(time.perf_counter() - t)

    sandbox.Sandbox.start, sandbox.Sandbox.spawn = start, spawn
    cpu0 = _self_cpu()
    for _ in range(repeats):
        t = time.perf_counter()
        result = checker.grade_answers(assignment, reference, sub.answers_for(assignment), mode=mode)
        timings["total"].append(time.perf_counter() - t)
        assert result["points"] == 12, result
    cpu = (_self_cpu() - cpu0) / repeats
    sandbox.Sandbox.start, sandbox.Sandbox.spawn = orig_start, orig_spawn
    med = {k: statistics.median(v) for k, v in timings.items()}
    print(f"sandbox: {mode}; median of {repeats} gradings of the solution (12 checks)")
    print(
        f"  start sandbox + zygote (torch import): {med['start']:.2f} s (includes the first fork: {med['spawn']:.3f} s)"
    )
    print(f"  answers + 12 checks + cleanup:         {med['total'] - med['start']:.2f} s")
    print(f"  total per submission:                  {med['total']:.2f} s wall")
    print(f"  CPU of the checker (reference answers, comparisons, JSON, cleanup): {cpu:.2f} s per submission")
    print(f"  (load average now: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs)")


def batch(n: int, jobs: int) -> None:
    variants = [
        Case("solution"),
        Case("alternative", answers=HONEST_ALTERNATIVE),
        Case("no_scale", answers={ATT: NO_SCALE}),
        Case("mixed", answers={PE: CONCAT_PE, ATT: NAN_ROWS}),
        Case("stub", base="stub"),
    ]
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        paths = []
        for i in range(n):
            case = variants[i % len(variants)]
            path = folder / f"student{i:03d}.ipynb"
            path.write_text(Case(case.name, answers=case.answers, base=case.base).write(folder).read_text())
            paths.append(str(path))
        t = time.perf_counter()
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "course_lib.cli",
                "grade",
                *paths,
                "--out",
                str(folder / "out"),
                "--jobs",
                str(jobs),
            ],
            capture_output=True,
            text=True,
        )
        elapsed = time.perf_counter() - t
        assert proc.returncode == 0, proc.stderr[-2000:]
        rows = (folder / "out" / "grades.csv").read_text().splitlines()[1:]
        assert len(rows) == n and all(r.endswith(",graded") for r in rows)
    print(
        f"course grade, {n} submissions, --jobs {jobs}: {elapsed:.1f} s wall ({elapsed / n:.2f} s per submission, "
        f"{n / elapsed * 60:.0f} per minute); load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"
    )


def _self_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


if __name__ == "__main__":
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 50
    jobs = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    per_submission()
    batch(n, jobs)
