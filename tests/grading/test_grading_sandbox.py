"""`course grade` end to end: honest, partial, adversarial and broken submissions, graded
in one batch with --jobs 2 in bubblewrap, again without a sandbox, and the edge cases of
the command (rerun into the same folder, submission time limit, exit codes)."""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from grading_fixtures.cases import (
    ALL_CHECKS,
    CHECKS,
    FILE_CASES,
    MARKER,
    SOLUTION,
    Case,
    graded_cases,
    solution_answers,
)

from course_lib.grading.sandbox import OUTPUT_KEEP, Sandbox
from course_lib.grading.sandbox_setup import bwrap_status

HAVE_BWRAP, BWRAP_REASON = bwrap_status()
needs_bwrap = pytest.mark.skipif(not HAVE_BWRAP, reason=f"bubblewrap unusable here: {BWRAP_REASON}")
CHECK_TIMEOUT = "5"  # generous: the suite shares 2 cores with other jobs


def course_grade(subs, out, *extra, env=None, timeout=900):
    """`course grade` as a separate command, exactly as users and outside tests call it."""
    cmd = [sys.executable, "-m", "course_lib.cli", "grade", *map(str, subs), "--out", str(out), *extra]
    start = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    return proc, time.monotonic() - start


def course_grade_here(capsys, subs, out, *extra):
    """The same command in this process (it still starts its checkers and sandboxes as
    separate processes), saving the start of a Python that imports torch."""
    from course_lib.cli import main as course_main

    capsys.readouterr()
    start = time.monotonic()
    code = course_main(["grade", *map(str, subs), "--out", str(out), *extra])
    captured = capsys.readouterr()
    return subprocess.CompletedProcess([], code, captured.out, captured.err), time.monotonic() - start


def read_rows(out: Path) -> list[dict]:
    with open(out / "grades.csv", newline="") as fh:
        return list(csv.DictReader(fh))


def report(out: Path, name: str) -> dict:
    return json.loads((out / name / "report.json").read_text())


def leftover_processes() -> list[str]:
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
            except OSError:
                continue
            if MARKER in cmdline and "pytest" not in cmdline:
                found.append(f"{pid}: {cmdline}")
    return found


class Listener:
    """A TCP server on the host's loopback: the sandbox must not reach it."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.sock.settimeout(0.5)
        self.port = self.sock.getsockname()[1]
        self.received: list[bytes] = []
        self.stop = False
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while not self.stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            conn.settimeout(1)
            try:
                self.received.append(conn.recv(100))
            except OSError:
                self.received.append(b"<connected>")
            conn.close()

    def close(self):
        self.stop = True
        self.thread.join(timeout=2)
        self.sock.close()


# --- the main batch: bubblewrap, --jobs 2 -----------------------------------------------------------


@pytest.fixture(scope="module")
def batch(tmp_path_factory):
    if not HAVE_BWRAP:
        pytest.skip(f"bubblewrap unusable here: {BWRAP_REASON}")
    folder = tmp_path_factory.mktemp("submissions")
    out = tmp_path_factory.mktemp("grades")
    listener = Listener()
    cases = [c for c in graded_cases(listener.port) if "bwrap" in c.modes]
    paths = [c.write(folder) for c in cases]
    for name, (writer, _) in FILE_CASES.items():
        writer(folder / f"{name}.ipynb")
        paths.append(folder / f"{name}.ipynb")
    proc, elapsed = course_grade(
        paths, out, "--assignment", "02_transformer", "--jobs", "2", "--check-timeout", CHECK_TIMEOUT
    )
    listener.close()
    print(f"\nbatch of {len(paths)} submissions (--jobs 2): {elapsed:.1f} s")
    return {
        "proc": proc,
        "out": out,
        "cases": {c.name: c for c in cases},
        "paths": paths,
        "listener": listener,
    }


def test_batch_exit_code_and_one_row_per_submission(batch):
    proc, out = batch["proc"], batch["out"]
    assert proc.returncode == 0, proc.stderr[-3000:]
    header = "submission,assignment,points,max_points,status,causal-mask,positional-encoding,attention,heads"
    assert (out / "grades.csv").read_text().splitlines()[0] == header
    rows = read_rows(out)
    assert [r["submission"] for r in rows] == [str(p) for p in batch["paths"]]
    for path in batch["paths"]:
        assert (out / path.stem / "report.json").is_file() and (out / path.stem / "report.md").is_file()


@pytest.mark.parametrize("name", [c.name for c in graded_cases(0) if "bwrap" in c.modes])
def test_batch_exact_points(batch, name):
    case = batch["cases"][name]
    row = next(r for r in read_rows(batch["out"]) if Path(r["submission"]).stem == name)
    rep = report(batch["out"], name)
    failing = case.failing_checks()
    got = {c["id"]: c["passed"] for c in rep["checks"]}
    assert list(got) == ALL_CHECKS
    assert got == {c: c not in failing for c in ALL_CHECKS}, {c["id"]: c["message"] for c in rep["checks"]}
    assert row["status"] == "graded" and row["max_points"] == "12"
    assert int(row["points"]) == case.expected_points() == rep["points"]


@pytest.mark.parametrize("name", list(FILE_CASES))
def test_batch_bad_files_get_an_error_row(batch, name):
    row = next(r for r in read_rows(batch["out"]) if Path(r["submission"]).stem == name)
    assert row["status"].startswith(FILE_CASES[name][1]), row
    assert row["points"] == "0" and row["max_points"] == "12"
    md = (batch["out"] / name / "report.md").read_text()
    assert "could not grade" in md


def messages(out, name) -> dict[str, str]:
    return {c["id"]: c["message"] for c in report(out, name)["checks"]}


def test_batch_failure_messages_say_why(batch):
    out = batch["out"]
    assert "not implemented yet" in messages(out, "stub")["attention-basic"]
    hangs = messages(out, "hangs")
    assert "did not finish within the time limit" in hangs["causal-mask-small"]
    # the hanging cell is interrupted at the answer-cell limit; what it defined before runs (and raises)
    assert "raised ValueError: never reached" in hangs["positional-encoding-small"]
    cell = {a["cell"]: a for a in report(out, "hangs")["answers"]}["positional-encoding-answer"]
    assert cell["status"].startswith("interrupted after the answer-cell limit"), cell
    crashes = messages(out, "crashes")
    assert "SIGSEGV" in crashes["causal-mask-small"] and "exit status 3" in crashes["attention-basic"]
    assert "exit status 3" in crashes["attention-masks"] and "raised SystemExit" in crashes["heads-small"]
    assert (
        "sandbox running your code ended" in crashes["positional-encoding-small"]
    )  # it killed the zygote too
    env = messages(out, "cheat_env")
    assert "may not be used in this assignment" in env["attention-basic"]
    assert "course_lib is not available" in env["heads-small"]
    assert "invalid response" in env["positional-encoding-small"]
    assert "course_lib is not available" in messages(out, "course_lib_top")["causal-mask-small"]
    data = messages(out, "cheat_data")
    assert "cannot compare" in data["positional-encoding-small"] and "numpy array" in data["heads-small"]
    res = messages(out, "resources")
    assert "larger than 64 MB" in res["causal-mask-small"]
    assert any(s in res["positional-encoding-small"] for s in ("MemoryError", "time limit"))


def test_batch_hidden_checks_stay_hidden(batch):
    """No report shows a hidden check's source or an expected value of a hidden check."""
    sol = json.loads(SOLUTION.read_text())
    visible = {
        ln.strip() for c in sol["cells"] if "check" in c["metadata"].get("tags", []) for ln in c["source"]
    }
    hidden_lines = [
        ln.strip()
        for c in sol["cells"]
        if "hidden-check" in c["metadata"].get("tags", [])
        for ln in c["source"]
        if len(ln.strip()) > 25 and ln.strip() not in visible
    ]
    assert hidden_lines
    hidden_ids = {
        c["metadata"]["course"]["id"] for c in sol["cells"] if "hidden-check" in c["metadata"].get("tags", [])
    }
    for folder in batch["out"].iterdir():
        if not folder.is_dir():
            continue
        text = (folder / "report.md").read_text() + (folder / "report.json").read_text()
        for line in hidden_lines:
            assert line not in text, f"{folder.name}: hidden check source in the report: {line}"
        for check in report(batch["out"], folder.name)["checks"]:
            if check["id"] in hidden_ids:
                assert not re.search(r"expected -?[\d\[]", check["message"]), check["message"]


def test_batch_student_output_is_escaped_and_bounded(batch):
    md = (batch["out"] / "evil_snoop_network" / "report.md").read_text()
    assert "\x1b" not in md and "\r" not in md and "\u202e" not in md
    inside, fence = False, None
    for line in md.splitlines():
        if not inside and line.startswith("```"):
            inside, fence = True, line[: len(line) - len(line.lstrip("`"))]
        elif inside and line == fence:
            inside = False
        elif not inside:
            assert "YOU GOT FULL MARKS" not in line and "<script>" not in line, line
    big = report(batch["out"], "resources")["checks"]
    attention = next(c for c in big if c["id"] == "attention-basic")
    assert attention["passed"] and "more bytes of output not kept" in attention["output"]
    assert len(attention["output"]) < OUTPUT_KEEP + 200


def test_batch_sandbox_holds(batch):
    out = batch["out"]
    assert batch["listener"].received == [], "the sandbox reached the host's network"
    env_out = " ".join(c["output"] for c in report(out, "cheat_env")["checks"])
    assert "nothing found" in env_out and "FOUND-SOLUTION" not in env_out
    forks = [
        int(n) for c in report(out, "resources")["checks"] for n in re.findall(r"FORKED (\d+)", c["output"])
    ]
    assert forks and max(forks) <= 32
    assert leftover_processes() == []


# --- without a sandbox ------------------------------------------------------------------------------


def test_fallback_without_sandbox(tmp_path, capsys):
    """`--sandbox none` (what runs where bubblewrap is missing): limits still hold, with a warning."""
    cases = [c for c in graded_cases(0) if c.name in ("solution", "crashes", "resources", "background")]
    paths = [c.write(tmp_path) for c in cases]
    proc, _ = course_grade_here(
        capsys,
        paths,
        tmp_path / "out",
        "--assignment",
        "02_transformer",
        "--jobs",
        "2",
        "--check-timeout",
        CHECK_TIMEOUT,
        "--sandbox",
        "none",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "warning: bubblewrap (bwrap) is not usable here" in proc.stderr
    rows = {Path(r["submission"]).stem: r for r in read_rows(tmp_path / "out")}
    for case in cases:
        rep = report(tmp_path / "out", case.name)
        assert rep["sandbox"] == "none" and any("not usable" in w for w in rep["warnings"])
        assert int(rows[case.name]["points"]) == case.expected_points(), {
            c["id"]: c["message"] for c in rep["checks"]
        }
    if os.geteuid() == 0:  # as root the student code still runs under its own uid: processes are bounded
        forks = [
            int(n)
            for c in report(tmp_path / "out", "resources")["checks"]
            for n in re.findall(r"FORKED (\d+)", c["output"])
        ]
        assert forks and max(forks) <= 32
    assert leftover_processes() == []


# --- the command's other promises ---------------------------------------------------------------------

ALL_SOLUTIONS = sorted((SOLUTION.parent).glob("*.ipynb"))


@pytest.mark.parametrize("solution", ALL_SOLUTIONS, ids=[p.stem for p in ALL_SOLUTIONS])
def test_every_solution_gets_full_marks_and_its_stub_zero(solution, tmp_path, capsys):
    stub = SOLUTION.parents[1] / "exercises" / solution.name
    sol_copy, stub_copy = tmp_path / "solution.ipynb", tmp_path / "stub.ipynb"
    shutil.copy(solution, sol_copy)
    shutil.copy(stub, stub_copy)
    proc, _ = course_grade_here(capsys, [sol_copy, stub_copy], tmp_path / "out", "--jobs", "2")
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = read_rows(tmp_path / "out")
    assert rows[0]["points"] == rows[0]["max_points"] != "0", report(tmp_path / "out", "solution")["checks"]
    assert rows[1]["points"] == "0" and rows[1]["status"] == "graded"


def test_gradebook_columns_summary_and_gradescope_files(tmp_path, capsys):
    """A real batch (no sandbox, to be quick): grades.csv's exercise columns, the class
    summary at the end, and --format gradescope's results.json per submission."""
    partial = Case(
        "partial",
        base="stub",
        answers={k: v for k, v in solution_answers().items() if k == "causal-mask-answer"},
    )
    subs = [Case("solution").write(tmp_path), partial.write(tmp_path)]
    proc, _ = course_grade_here(
        capsys,
        subs,
        tmp_path / "out",
        "--sandbox",
        "none",
        "--format",
        "gradescope",
        "--check-timeout",
        CHECK_TIMEOUT,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = read_rows(tmp_path / "out")
    assert list(rows[0])[5:] == list(CHECKS)  # one column per exercise, after the totals
    assert [rows[0][e] for e in CHECKS] == [str(len(c)) for c in CHECKS.values()]
    assert [rows[1][e] for e in CHECKS] == ["2", "0", "0", "0"]
    assert "causal-mask: mean 2.00 / 2, full 2 of 2, zero 0 of 2" in proc.stderr
    assert "attention: mean 2.50 / 5, full 1 of 2, zero 1 of 2" in proc.stderr
    for name, score in (("solution", 12.0), ("partial", 2.0)):
        res = json.loads((tmp_path / "out" / name / "results.json").read_text())
        assert res["score"] == score and len(res["tests"]) == len(ALL_CHECKS)
        assert (
            sum(t["score"] for t in res["tests"]) == score
            and sum(t["max_score"] for t in res["tests"]) == 12.0
        )
        assert all(set(t) >= {"name", "score", "max_score", "output"} for t in res["tests"])


def _insert_after(answer_key: str, cell: dict):
    def edit(nb):
        i = next(i for i, c in enumerate(nb["cells"]) if c.get("id") == answer_key)
        nb["cells"].insert(i + 1, cell)

    return edit


def _code_cell(cid: str, source: str, metadata: dict | None = None) -> dict:
    return {
        "cell_type": "code",
        "id": cid,
        "metadata": metadata or {},
        "source": source,
        "outputs": [],
        "execution_count": None,
    }


def _top_cell_without_ids(nb):
    """A helper cell added above the first exercise, in a copy that lost its cell ids (nbformat
    4.4): the released set-up cell must still not run (its code is the solution's), the helper must."""
    _insert_after("preamble", _code_cell("top", "import math as _top_math\n_TOP_SCALE = 1\n"))(nb)
    for cell in nb["cells"]:
        cell.pop("id", None)
    nb["nbformat_minor"] = 4


ANSWER_STYLE_CASES = {
    # Jupyter's copy keeps the answer marker: the stub above stays, the copy below holds the answer
    "copied_cell": dict(
        base="stub",
        answers={k: v for k, v in solution_answers().items() if k != "causal-mask-answer"},
        edit=_insert_after(
            "causal-mask-answer",
            _code_cell(
                "copy-1",
                solution_answers()["causal-mask-answer"],
                {"course": {"answer": "causal-mask-answer", "exercise": "causal-mask"}},
            ),
        ),
    ),
    # the stub left as it is, the answer written in a new cell below it; a helper in a cell of its own
    "new_cell_below": dict(
        base="stub",
        answers={k: v for k, v in solution_answers().items() if k != "heads-answer"},
        edit=_insert_after(
            "heads-answer",
            _code_cell("mine", "def _last_dim():\n    return -1\n\n" + solution_answers()["heads-answer"]),
        ),
    ),
    # the helper the exercise texts recommend, imported at the top of the answer cell
    "raises_import": dict(
        answers={
            "causal-mask-answer": "from course_lib.grading.checks import raises\n\n"
            + solution_answers()["causal-mask-answer"]
            + "\nwith raises(ValueError):\n    causal_mask(3, 2)\n"
        }
    ),
    # a helper (an import, a constant) in a new cell above the first exercise, used by an answer;
    # the copy lost its cell ids. It passes at home; it used to be a NameError in the grader
    "top_cell": dict(
        answers={
            "heads-answer": solution_answers()["heads-answer"]
            + "\n\n_split = split_heads\n\n\ndef split_heads(x, n_heads):\n"
            + "    return _split(x, n_heads * _TOP_SCALE + 0 * int(_top_math.pi))\n"
        },
        edit=_top_cell_without_ids,
    ),
    # a correct function, then a demo slower than the answer-cell limit: interrupted, the function kept
    "slow_demo": dict(
        answers={
            "heads-answer": solution_answers()["heads-answer"]
            + "\nimport time\nprint('demo starts')\ntime.sleep(120)\n"
        }
    ),
}


@pytest.mark.parametrize("mode", ["bwrap", "none"])
def test_answers_written_as_students_write_them_get_full_marks(mode, tmp_path, capsys):
    """Copied answer cells (the last one is graded, and the report says so), the answer in a
    new cell below the stub, a helper cell, `raises` imported in an answer, a slow demo after
    a correct function (interrupted at the answer-cell limit, the function kept)."""
    if mode == "bwrap" and not HAVE_BWRAP:
        pytest.skip(f"bubblewrap unusable here: {BWRAP_REASON}")
    subs = [Case(name, **kw).write(tmp_path) for name, kw in ANSWER_STYLE_CASES.items()]
    proc, elapsed = course_grade_here(
        capsys, subs, tmp_path / "out", "--sandbox", mode, "--check-timeout", CHECK_TIMEOUT
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    for name in ANSWER_STYLE_CASES:
        rep = report(tmp_path / "out", name)
        assert rep["points"] == rep["max_points"] == 12, (
            name,
            [c["message"] for c in rep["checks"] if not c["passed"]],
            rep["answers"],
        )
    answers = {a["cell"]: a for a in report(tmp_path / "out", "copied_cell")["answers"]}
    assert "2 cells are marked as answer causal-mask-answer" in answers["causal-mask-answer"]["note"]
    assert "cell id 'copy-1'" in answers["causal-mask-answer"]["note"]
    md = (tmp_path / "out" / "copied_cell" / "report.md").read_text()
    assert "the last one in the notebook" in md
    answers = {a["cell"]: a for a in report(tmp_path / "out", "new_cell_below")["answers"]}
    assert answers["added cell mine"]["helper"] and answers["added cell mine"]["status"] == "ok"
    added = [a for a in report(tmp_path / "out", "top_cell")["answers"] if a.get("helper")]
    assert [(a["cell"], a["status"]) for a in added] == [("added cell #4", "ok")], added
    slow = {a["cell"]: a for a in report(tmp_path / "out", "slow_demo")["answers"]}["heads-answer"]
    assert (
        slow["status"].startswith(f"interrupted after the answer-cell limit of {float(CHECK_TIMEOUT):g} s")
        and "demo starts" in slow["output"]
    )


def _spending_solution(folder: Path) -> Path:
    """02_transformer with four more checks of exercise 4: two 0-point checks, one whose own
    loop runs over the student's result (compare off), one that loops over its argument."""
    nb = json.loads(SOLUTION.read_text())
    i = next(i for i, c in enumerate(nb["cells"]) if c.get("id") == "heads-hidden") + 1
    new = [
        (
            "heads-zero-a",
            0,
            True,
            "h = split_heads(torch.zeros(1, 2, 6), 3)\nassert h.shape == (1, 3, 2, 2)\n",
        ),
        (
            "heads-zero-b",
            0,
            True,
            "h = split_heads(torch.zeros(1, 4, 6), 3)\nassert h.shape == (1, 3, 4, 2)\n",
        ),
        (
            "heads-loop",
            1,
            False,
            "h = split_heads(torch.full((1, 2, 4), 7.0), 2)\nn = 0\nfor v in h.flatten().tolist():\n    for _ in range(int(v)):\n        n += 1\nassert n == 56\n",
        ),
        (
            "heads-mut",
            1,
            True,
            "x = torch.full((1, 2, 4), 5.0)\nh = split_heads(x, 2)\nn = 0\nfor a in x.flatten().tolist():\n    for b in x.flatten().tolist():\n        n += 1\nassert n == 64\n",
        ),
    ]
    for cid, points, compare, src in new:
        meta = {"id": cid, "points": points, **({} if compare else {"compare": False})}
        nb["cells"].insert(
            i,
            {
                "cell_type": "code",
                "id": cid,
                "metadata": {"course": meta, "tags": ["hidden-check"]},
                "source": src,
                "outputs": [],
                "execution_count": None,
            },
        )
        i += 1
    ex = next(c for c in nb["cells"] if c.get("id") == "ex-heads")
    ex["metadata"]["course"]["points"] = 4
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "02_transformer.ipynb"
    path.write_text(json.dumps(nb, indent=1))
    return path


SPENDING = {
    # its result makes the check's own loop run ~forever: that check fails within its limit
    "huge_result": ("import torch as _t\n_honest_split = None\n", "heads-loop", "ran out of time"),
    # it turns the check's [1, 2, 4] argument into a [1, 7000] one in place after answering right
    "grow_argument": ("", "heads-mut", "changed the shape, dtype, length or type of its argument 1 in place"),
    # it hangs on 0-point checks only (their all-zero inputs with 3 heads; the honest checks draw
    # random values, and their head counts, 3 included): those never use up the exercise's timeouts
    "hang_on_zero_point": ("", None, None),
    # a call of exercise 1 leaves a thread that ends its process during exercise 2's honest call
    "kill_later": ("", None, None),
}
HEADS = solution_answers()["heads-answer"]
SPENDING_ANSWERS = {
    "huge_result": {
        "heads-answer": HEADS.replace("def split_heads(", "def _split(")
        + "\n\ndef split_heads(x, n_heads):\n    if float(x.flatten()[0]) == 7.0:\n        return torch.full((1, 2, 2, 2), 1e12)\n    return _split(x, n_heads)\n"
    },
    "grow_argument": {
        "heads-answer": HEADS.replace("def split_heads(", "def _split(")
        + "\n\ndef split_heads(x, n_heads):\n    out = _split(x, n_heads)\n    if float(x.flatten()[0]) == 5.0:\n        x.set_(torch.zeros(1, 7000))\n    return out\n"
    },
    "hang_on_zero_point": {
        "heads-answer": HEADS.replace("def split_heads(", "def _split(")
        + "\n\ndef split_heads(x, n_heads):\n    if n_heads == 3 and not x.any():\n        while True:\n            pass\n    return _split(x, n_heads)\n"
    },
    "kill_later": {
        "causal-mask-answer": solution_answers()["causal-mask-answer"].replace(
            "def causal_mask(", "def _mask("
        )
        + (
            "\n\nimport os, sys, threading, time\n\ndef _watch():\n    while True:\n        for f in list(sys._current_frames().values()):\n"
            "            while f is not None:\n                if f.f_code.co_name == 'sinusoidal_encoding':\n                    os._exit(3)\n                f = f.f_back\n"
            "        time.sleep(0.001)\n\ndef causal_mask(length, key_length=None):\n    threading.Thread(target=_watch, daemon=True).start()\n"
            "    return _mask(length, key_length)\n"
        )
    },
}


def test_checks_cannot_be_made_to_spend(tmp_path, capsys):
    """Item 5: a result that makes the check's own loop long fails that check within its limit;
    an argument grown in place fails with a clear message before the check loops over it; a
    0-point check's timeouts leave the exercise's other checks to run; a process ended by a
    thread an earlier call left behind never fails a later honest check."""
    sol = _spending_solution(tmp_path / "solutions")
    subs = [Case(name, answers=SPENDING_ANSWERS[name]).write(tmp_path) for name in SPENDING]
    proc, elapsed = course_grade_here(
        capsys, subs, tmp_path / "out", "--solutions", str(sol.parent), "--check-timeout", CHECK_TIMEOUT
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    for name, (_, failing, message) in SPENDING.items():
        rep = report(tmp_path / "out", name)
        failed = {c["id"]: c["message"] for c in rep["checks"] if not c["passed"]}
        if name == "hang_on_zero_point":
            assert set(failed) == {"heads-zero-a", "heads-zero-b"} and rep["points"] == 14, failed
            assert all("did not finish" in m for m in failed.values()), failed
        elif failing is None:
            assert failed == {} and rep["points"] == 14, failed
        else:
            assert set(failed) == {failing} and message in failed[failing] and rep["points"] == 13, failed
    assert elapsed < 240


def test_an_object_passed_twice_is_one_object_in_the_sandbox():
    from course_lib.grading.student_calls import argument_aliases
    from course_lib.grading.wire import encode_for_sandbox, to_python

    box = Sandbox("bwrap" if HAVE_BWRAP else "none")
    box.start(time.monotonic() + 120)
    try:
        assert box.request(
            {"op": "exec", "key": "a", "source": "def same(x, y):\n    x.add_(1)\n    return x is y\n"},
            time.monotonic() + 30,
        ).ok
        import torch

        t = torch.zeros(2)
        req = {
            "op": "call",
            "name": "same",
            "args": [encode_for_sandbox(t), encode_for_sandbox(t)],
            "kwargs": [],
        }
        plain = box.request(req, time.monotonic() + 30)
        shared = box.request({**req, "aliases": argument_aliases((t, t), {})}, time.monotonic() + 30)
    finally:
        box.kill()
    assert to_python(plain.value) is False and to_python(shared.value) is True


MESSAGE_CASES = {
    # torch's (or the student's own) NotImplementedError keeps its message
    "own_not_implemented": (
        {
            "causal-mask-answer": "def causal_mask(length, key_length=None):\n    raise NotImplementedError('sparse masks are not supported here')\n"
        },
        "causal-mask-small",
        "raised NotImplementedError: sparse masks are not supported here",
    ),
    # a function that raised where a check (compare off) used its result: "raised", not "returned"
    "raised_not_returned": (
        {
            "heads-answer": HEADS.replace("def split_heads(", "def _split(")
            + "\n\ndef split_heads(x, n_heads):\n    if float(x.flatten()[0]) == 7.0:\n        raise TypeError('my own message')\n    return _split(x, n_heads)\n"
        },
        "heads-loop",
        "raised TypeError: my own message",
    ),
}


def test_messages_say_what_happened(tmp_path, capsys):
    sol = _spending_solution(tmp_path / "solutions")
    subs = [Case(name, answers=answers).write(tmp_path) for name, (answers, _, _) in MESSAGE_CASES.items()]
    proc, _ = course_grade_here(
        capsys,
        subs,
        tmp_path / "out",
        "--solutions",
        str(sol.parent),
        "--check-timeout",
        CHECK_TIMEOUT,
        "--sandbox",
        "none",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    for name, (_, check, expected) in MESSAGE_CASES.items():
        msg = messages(tmp_path / "out", name)[check]
        assert expected in msg and "not implemented yet" not in msg and "returned" not in msg, msg


def test_rerun_into_the_same_folder_gives_the_same_results(tmp_path, capsys):
    """Without --assignment the assignment comes from each notebook's metadata."""
    subs = tmp_path / "subs"
    subs.mkdir()
    paths = [Case("partial_mixed", answers=graded_cases(0)[4].answers).write(subs)]
    FILE_CASES["other_assignment"][0](subs / "other.ipynb")
    other = json.loads((subs / "other.ipynb").read_text())
    other["metadata"]["course"]["assignment"] = "99_missing"  # an assignment with no solutions notebook
    (subs / "other.ipynb").write_text(json.dumps(other))
    FILE_CASES["no_answers"][0](subs / "plain.ipynb")
    paths += [subs / "other.ipynb", subs / "plain.ipynb"]
    out = tmp_path / "out"
    snapshots = []
    for _ in range(2):
        proc, _ = course_grade_here(capsys, paths, out, "--check-timeout", CHECK_TIMEOUT)
        assert proc.returncode == 0, proc.stderr[-3000:]
        snapshots.append({p.relative_to(out): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()})
    assert snapshots[0] == snapshots[1]
    rows = read_rows(out)
    assert rows[0]["points"] == "8" and rows[0]["assignment"] == "02_transformer"
    assert rows[1]["status"] == "error: unknown assignment '99_missing' in the notebook's metadata"
    assert rows[2]["status"].startswith("error: cannot tell which assignment")


def test_submission_time_limit_keeps_earlier_credit(tmp_path, capsys):
    loop = "def sinusoidal_encoding(max_len, d_model):\n    while True:\n        pass\n"
    path = Case("slow", answers={"positional-encoding-answer": loop}).write(tmp_path)
    proc, elapsed = course_grade_here(
        capsys, [path], tmp_path / "out", "--timeout", "15", "--check-timeout", "60"
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    rep = report(tmp_path / "out", "slow")
    assert rep["points"] == 2  # the causal mask, graded before the loop
    msgs = {c["id"]: c["message"] for c in rep["checks"]}
    assert "did not finish" in msgs["positional-encoding-small"]
    assert all("time limit was reached" in msgs[c] for c in CHECKS["attention"] + CHECKS["heads"])
    assert elapsed < 120


def test_exit_code_is_nonzero_only_when_the_grader_cannot_run(tmp_path, monkeypatch, capsys):
    """The command's exit codes (run in-process: none of these starts a sandbox)."""
    import course_lib.grading.sandbox_setup as sandbox_setup
    from course_lib.cli import main as course_main

    sub = str(Case("solution").write(tmp_path))
    assert course_main(["grade", sub, "--out", str(tmp_path / "o1"), "--assignment", "99_nothing"]) == 1
    assert "unknown assignment '99_nothing'" in capsys.readouterr().err
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("x")
    assert course_main(["grade", sub, "--out", str(not_a_dir), "--assignment", "02_transformer"]) == 1
    assert f"--out {not_a_dir} is a file; give a folder" in capsys.readouterr().err
    assert course_main(["grade", sub, "--out", str(not_a_dir / "sub"), "--assignment", "02_transformer"]) == 1
    assert "is a file, so no folder can be made inside it" in capsys.readouterr().err
    (tmp_path / "ro").mkdir(mode=0o500)
    if os.geteuid() != 0:  # (root writes anywhere)
        assert (
            course_main(["grade", sub, "--out", str(tmp_path / "ro"), "--assignment", "02_transformer"]) == 1
        )
        assert "cannot write to the output folder" in capsys.readouterr().err
    monkeypatch.setattr(sandbox_setup, "_BWRAP_CACHE", {})
    monkeypatch.setenv("PATH", str(tmp_path))  # no bwrap on the PATH
    assert course_main(["grade", sub, "--out", str(tmp_path / "o2"), "--sandbox", "bwrap"]) == 1
    assert "bubblewrap does not work here" in capsys.readouterr().err
    monkeypatch.setattr(sandbox_setup, "_BWRAP_CACHE", {})
    monkeypatch.delenv("COURSE_GRADER_SANDBOX", raising=False)
    assert course_main(["grade", sub, "--out", str(tmp_path / "o2")]) == 1  # the default refuses too
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "make system-deps" in err[0] and "--sandbox none" in err[0], err
    monkeypatch.setattr(sandbox_setup, "_BWRAP_CACHE", {})
    monkeypatch.setenv("PATH", "/usr/local/bin:/usr/bin:/bin")
    assert course_main(["grade", str(tmp_path / "missing.ipynb"), "--out", str(tmp_path / "o3")]) == 0
    assert read_rows(tmp_path / "o3")[0]["status"] == "error: file not found"
    with pytest.raises(SystemExit):  # argparse: --out is required
        course_main(["grade", sub])


def test_a_sandbox_that_cannot_start_grades_nothing(tmp_path, monkeypatch, capsys):
    """A broken sandbox is the grader's failure: the preflight (a known-good answer run in it)
    fails, the batch grades nothing and says why in one line; no student gets 0 for it."""
    import course_lib.grading.sandbox_setup as sandbox_setup

    fake = tmp_path / "bin" / "bwrap"
    fake.parent.mkdir()
    fake.write_text(
        '#!/bin/sh\nfor last; do :; done\n[ "$last" = /bin/true ] && exit 0\necho "bwrap: broken" >&2\nexit 1\n'
    )
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}:{os.environ['PATH']}")
    monkeypatch.setattr(sandbox_setup, "_BWRAP_CACHE", {})
    sub = Case("solution").write(tmp_path)
    for mode in ("bwrap", "auto"):
        proc, _ = course_grade_here(capsys, [sub], tmp_path / "out", "--sandbox", mode)
        monkeypatch.setattr(sandbox_setup, "_BWRAP_CACHE", {})
        assert proc.returncode == 1, proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(
            "course grade: nothing was graded: the sandbox (bwrap) cannot run a known-good answer"
        )
        assert "bwrap: broken" in lines[0]
        assert not (tmp_path / "out" / "grades.csv").exists() and not (tmp_path / "out" / "solution").exists()


@needs_bwrap
@pytest.mark.parametrize("as_root", [True, False], ids=["root", "unprivileged-style"])
def test_sandbox_sees_no_solutions_no_network_and_no_course_lib(as_root, monkeypatch):
    """The bubblewrap sandbox, as root (uid drop) and as an unprivileged grader would run it
    (its own user namespace, no uid change)."""
    import course_lib.grading.sandbox as sandbox
    import course_lib.grading.sandbox_setup as sandbox_setup

    if not as_root:
        monkeypatch.setattr(sandbox, "is_root", lambda: False)
        monkeypatch.setattr(sandbox_setup, "is_root", lambda: False)
    elif os.geteuid() != 0:
        pytest.skip("needs root")
    box = Sandbox("bwrap")
    box.start(time.monotonic() + 120)
    probe = f"""
import os, socket
def probe():
    out = {{"root": sorted(os.listdir("/")), "cwd": os.getcwd(), "uid": os.getuid()}}
    out["solution_visible"] = os.path.exists({str(SOLUTION)!r})
    out["repo_visible"] = os.path.exists({str(SOLUTION.parents[1] / "course_lib")!r})
    try:
        socket.create_connection(("127.0.0.1", 22), timeout=1)
        out["network"] = "connected"
    except OSError as exc:
        out["network"] = type(exc).__name__
    try:
        import course_lib.nn
        out["course_lib"] = "imported"
    except ImportError as exc:
        out["course_lib"] = str(exc)
    try:
        open("/usr/evil", "w")
        out["usr_writable"] = True
    except OSError:
        out["usr_writable"] = False
    return out
"""
    try:
        assert box.request({"op": "exec", "key": "probe", "source": probe}, time.monotonic() + 30).ok
        result = box.request({"op": "call", "name": "probe", "args": [], "kwargs": []}, time.monotonic() + 30)
    finally:
        box.kill()
    from course_lib.grading.wire import to_python

    seen = to_python(result.value)
    assert seen["solution_visible"] is False and seen["repo_visible"] is False
    assert seen["network"] != "connected" and "course_lib is not available" in seen["course_lib"]
    assert seen["usr_writable"] is False and seen["cwd"] == "/tmp"
    assert "work" not in seen["root"] or not seen["repo_visible"]
    if as_root:
        assert seen["uid"] != 0


@pytest.mark.skipif(not HAVE_BWRAP, reason=f"bubblewrap unusable: {BWRAP_REASON}")
def test_directories_under_tmp_stay_visible_in_the_sandbox(tmp_path):
    """A checkout (and its venv) below /tmp must not be hidden by the sandbox's private /tmp."""
    import shutil

    from course_lib.grading.sandbox_setup import bwrap_command

    assert str(tmp_path).startswith("/tmp/")
    (tmp_path / "probe.txt").write_text("visible\n")
    cmd = bwrap_command(shutil.which("bwrap"), tmpfs_mb=8, extra_dirs=[str(tmp_path), "/tmp"])
    out = subprocess.run(
        cmd + ["/bin/sh", "-c", f"cat {tmp_path}/probe.txt; touch /tmp/w && echo writable"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert out.stdout.split() == ["visible", "writable"], out.stderr


GRAD_PROBE = """
import torch


def probe(x, plain):
    out = {"leaf": x.is_leaf, "grad": x.requires_grad, "plain_grad": plain.requires_grad}
    try:
        x.add_(1)
        out["in_place"] = "allowed"
    except RuntimeError as exc:
        out["in_place"] = str(exc)
    out["attached"], out["detached"] = x * 2, (x * 2).detach()
    return out


def cut(x):
    x.detach_()
"""


def test_requires_grad_crosses_the_sandbox_both_ways():
    """An argument that requires grad reaches the student's function as a leaf that requires
    grad (an in-place write raises, as at home); a result still attached to a graph comes
    back flagged, a detached one not; an argument detached in place is reported changed."""
    import torch

    from course_lib.grading.sandbox_worker import encode
    from course_lib.grading.wire import to_python

    x = torch.arange(3.0).requires_grad_()
    args = [encode(x), encode(torch.zeros(2))]
    box = Sandbox("none")
    box.start(time.monotonic() + 120)
    try:
        assert box.request({"op": "exec", "key": "probe", "source": GRAD_PROBE}, time.monotonic() + 30).ok
        result = box.request(
            {"op": "call", "name": "probe", "args": args, "kwargs": []}, time.monotonic() + 30
        )
        cut = box.request(
            {"op": "call", "name": "cut", "args": args[:1], "kwargs": []}, time.monotonic() + 30
        )
    finally:
        box.kill()
    assert result.ok and not result.mutated, (result.error, result.mutated)
    seen = to_python(result.value)
    assert seen["leaf"] is True and seen["grad"] is True and seen["plain_grad"] is False
    assert "leaf Variable that requires grad" in seen["in_place"]
    assert seen["attached"].requires_grad and not seen["detached"].requires_grad
    assert torch.equal(seen["attached"].detach(), torch.tensor([0.0, 2.0, 4.0]))
    assert cut.ok and [key for key, _ in cut.mutated] == [0]
    now = to_python(cut.mutated[0][1])
    assert torch.equal(now, x.detach()) and not now.requires_grad


def _checkers_with(marker: str) -> list[int]:
    """Pids of live processes whose environment holds ``marker`` (a batch's checkers)."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and marker.encode() in (proc / "environ").read_bytes():
                found.append(int(proc.name))
        except OSError:
            pass
    return found


def test_ctrl_c_keeps_every_finished_report_and_resume_grades_only_the_rest(tmp_path):
    """A student's review: Ctrl-C in a class batch deleted the old gradebook and wrote nothing,
    not even the reports of the submissions already graded (they were written at the end), and
    there was no way to continue. Now each report is written when its submission is graded; on
    Ctrl-C the checkers stop, grades.csv lists the graded ones and the rest as not graded, and
    the exit is 130 with one line; ``--resume`` keeps those reports (not rewritten) and grades
    the rest; a changed file is graded again."""
    import signal

    honest = Case("honest").write(tmp_path)
    subs = []
    for k in range(8):
        path = tmp_path / f"s{k}.ipynb"
        shutil.copy(honest, path)
        subs.append(str(path))
    out = tmp_path / "out"
    marker = f"COURSE_TEST_BATCH={os.getpid()}-{time.monotonic_ns()}"
    env = {**os.environ, marker.split("=")[0]: marker.split("=")[1]}
    sandbox = ["--sandbox", "bwrap" if HAVE_BWRAP else "none"]
    cmd = [sys.executable, "-m", "course_lib.cli", "grade", *subs, "--out", str(out), *sandbox]
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # as in a terminal
    )
    deadline = time.monotonic() + 300
    while not (out / "s1" / "report.json").exists() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.2)
    assert (out / "s1" / "report.json").exists(), proc.communicate()
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-2000:]
    assert err.strip().splitlines()[-1] == "course grade: interrupted", err[-2000:]
    assert "--resume grades only those" in err
    with open(out / "grades.csv", newline="") as fh:
        rows = {Path(r["submission"]).stem: r for r in csv.DictReader(fh)}
    graded = {k for k, r in rows.items() if r["status"] == "graded"}
    assert len(rows) == 8 and 2 <= len(graded) < 8, rows
    assert all(
        rows[k]["status"].startswith("not graded: the batch was interrupted") for k in rows.keys() - graded
    )
    assert {k for k in rows if (out / k / "report.json").exists()} == graded
    time.sleep(1)
    assert _checkers_with(marker) == [], "checker processes outlived the interrupted batch"
    kept = {k: (out / k / "report.json").stat().st_mtime_ns for k in graded}
    changed = sorted(graded)[0]
    Path(subs[int(changed[1:])]).write_text(Path(subs[int(changed[1:])]).read_text() + "\n")
    done = subprocess.run([*cmd, "--resume"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"--resume: {len(graded) - 1} submission(s) kept" in done.stderr, done.stderr[-2000:]
    with open(out / "grades.csv", newline="") as fh:
        rows = {Path(r["submission"]).stem: r for r in csv.DictReader(fh)}
    assert all(r["status"] == "graded" and r["points"] == "12" for r in rows.values()), rows
    for k, mtime in kept.items():
        assert ((out / k / "report.json").stat().st_mtime_ns == mtime) == (k != changed), k
