"""Regression tests for the grader under attack (issue 11): a batch that never aborts, report
folders that never collide, spreadsheet and markdown injection, symlinks, a process that
exits right after answering, arguments changed in place, integer dtypes, IPython magics,
forged responses, and the writers of grades.csv and report.md for any text and file name.

One `course grade` batch (bubblewrap when it works here, else no sandbox) carries every
submission-level case; each case gives its expected row."""

from __future__ import annotations

import csv
import io
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from grading_fixtures.cases import CAUSAL, PE, ROOT, SOLUTION, Case

from course_lib.grading.compare import compare_values
from course_lib.grading.grade import read_submission, report_folders
from course_lib.grading.report import csv_cell, write_grades_csv, write_report
from course_lib.grading.sandbox_setup import bwrap_status
from course_lib.grading.wire import ProtocolError, _validator, encode, parse_response, validate_response

HAVE_BWRAP, _ = bwrap_status()
SANDBOX = "bwrap" if HAVE_BWRAP else "none"
FORMULA = "=1+2+cmd|' calc'!A0"
NON_UTF8 = b"caf\xe9"  # a Latin-1 file name, as unpacked from a Windows zip


# --- submissions --------------------------------------------------------------------------------

SURROGATE_ANSWER = """
def causal_mask(length, key_length=None):
    try:
        print("lone surrogate: \\ud800")
    except UnicodeEncodeError:
        pass
    raise ValueError("bad \\ud800 message")
"""

# answers, then ends the process before it reads the next request (a frame trick: it writes
# the grader's response itself); every later call finds the process gone
EXIT_AFTER_ANSWER = """
import os, sys

def sinusoidal_encoding(max_len, d_model):
    if d_model % 2 == 1:
        raise ValueError("d_model must be even")
    pos = torch.arange(max_len, dtype=torch.float64)[:, None]
    div = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float64) * (-math.log(10000.0) / d_model))
    pe = torch.zeros(max_len, d_model, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(pos * div)
    pe[:, 1::2] = torch.cos(pos * div)
    pe = pe.float()
    frame = sys._getframe(1)
    while frame is not None and "respond" not in frame.f_locals:
        frame = frame.f_back
    if frame is None:  # at home: no grader to trick
        return pe
    frame.f_locals["respond"]({"id": frame.f_locals["rid"], "ok": True, "value": frame.f_globals["encode"](pe)})
    os._exit(0)
"""

MAGICS = """%%time
%time warm_up = 1
%timeit -n 1 -r 1 sum(range(10))
%matplotlib inline

def causal_mask(length, key_length=None):
    key_length = length if key_length is None else key_length
    if key_length < length:
        raise ValueError("key_length < length")
    return torch.ones(length, key_length, dtype=torch.bool).tril(key_length - length)
"""

SOLUTION_03 = ROOT / "solutions" / "03_bert.ipynb"
EXERCISE_03 = ROOT / "exercises" / "03_bert.ipynb"
SOLUTION_01 = ROOT / "solutions" / "01_elmo.ipynb"
EXERCISE_01 = ROOT / "exercises" / "01_elmo.ipynb"

MASK_IN_PLACE = """
def mask_tokens(input_ids, vocab_size, mask_id, special_ids, mlm_probability=0.15):
    never = torch.tensor(sorted(set(special_ids) | {mask_id}), dtype=torch.long)
    special = torch.isin(input_ids.long(), never)
    chosen = (torch.rand(input_ids.shape) < mlm_probability) & ~special
    u = torch.rand(input_ids.shape)
    ordinary = torch.arange(vocab_size)[~torch.isin(torch.arange(vocab_size), never)]
    random_ids = ordinary[torch.randint(len(ordinary), input_ids.shape)].to(input_ids.dtype)
    labels = torch.where(chosen, input_ids, torch.full_like(input_ids, -100))
    input_ids[chosen & (u < 0.8)] = mask_id  # edits the caller's tensor
    replace = chosen & (u >= 0.8) & (u < 0.9)
    input_ids[replace] = random_ids[replace]
    return input_ids, labels
"""

PACK_POPS = """
def pack_pair(tokens_a, tokens_b, max_len, cls_id, sep_id):
    if max_len < 5:
        raise ValueError("max_len too small")
    while len(tokens_a) + len(tokens_b) > max_len - 3:  # pops from the caller's lists
        if len(tokens_a) > len(tokens_b):
            tokens_a.pop()
        else:
            tokens_b.pop()
    ids = [cls_id] + list(tokens_a) + [sep_id] + list(tokens_b) + [sep_id]
    return ids, [0] * (len(tokens_a) + 2) + [1] * (len(tokens_b) + 1)
"""

UINT8_TARGETS = """
def lm_targets(word_ids, mask):
    forward = torch.full(word_ids.shape, -100).to(torch.uint8)  # -100 wraps to 156
    backward = torch.full(word_ids.shape, -100).to(torch.uint8)
    pair = mask[:, 1:] & mask[:, :-1]
    forward[:, :-1] = torch.where(pair, word_ids[:, 1:], -100).to(torch.uint8)
    backward[:, 1:] = torch.where(pair, word_ids[:, :-1], -100).to(torch.uint8)
    return forward, backward


def bilm_loss(forward_logits, backward_logits, word_ids, mask):
    forward, backward = lm_targets(word_ids, mask)
    forward, backward = forward.long(), backward.long()
    forward[forward == 156] = -100
    backward[backward == 156] = -100
    f = F.cross_entropy(forward_logits.flatten(0, 1), forward.flatten(), ignore_index=-100)
    b = F.cross_entropy(backward_logits.flatten(0, 1), backward.flatten(), ignore_index=-100)
    return torch.stack([f, b])
"""


# honest except in the uniformity check's input, where one "random" id is 300 million: the
# check's bincount would make the grader allocate 2.4 GB
HUGE_ID = (
    MASK_IN_PLACE.replace("  # edits the caller's tensor", "")
    .replace("input_ids[", "inputs[")
    .replace("    labels = torch.where", "    inputs = input_ids.clone()\n    labels = torch.where")
    .replace(
        "    return input_ids, labels",
        "    if vocab_size == 40:\n        inputs.view(-1)[int(torch.nonzero(replace.view(-1))[0])] = 300_000_000\n    return inputs, labels",
    )
)


def notebook_for(exercise: Path, solution: Path, answers: dict[str, str]) -> dict:
    nb = json.loads(exercise.read_text())
    sol = json.loads(solution.read_text())
    sources = {
        c["id"]: "".join(c["source"]) for c in sol["cells"] if "answer" in c["metadata"].get("tags", [])
    }
    sources.update(answers)
    for cell in nb["cells"]:
        if cell.get("id") in sources:
            cell["source"] = sources[cell["id"]]
    return nb


def _write(path: Path, nb: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(nb, indent=1))  # ensure_ascii: "\ud800" is written as an escape
    return path


@pytest.fixture(scope="module")
def batch(tmp_path_factory):
    folder = tmp_path_factory.mktemp("attacks")
    out = tmp_path_factory.mktemp("attack-grades")
    honest = Case("x").notebook()
    stub = Case("x", base="stub").notebook()
    subs: dict[str, Path] = {}
    subs["surrogate"] = _write(
        folder / "surrogate.ipynb", Case("s", answers={CAUSAL: SURROGATE_ANSWER}).notebook()
    )
    non_utf8 = os.path.join(os.fsencode(folder), NON_UTF8 + b".ipynb")
    with open(non_utf8, "w") as fh:
        json.dump(honest, fh)
    subs["non_utf8"] = Path(os.fsdecode(non_utf8))
    meta = json.loads(json.dumps(honest))
    meta["metadata"]["course"]["assignment"] = "\ud800"
    subs["meta_surrogate"] = _write(folder / "meta_surrogate.ipynb", meta)
    subs["gradebook_name"] = _write(folder / "grades.csv.ipynb", honest)
    subs["collide_b"] = _write(folder / "b" / "x.ipynb", honest)
    subs["collide_c"] = _write(folder / "c" / "x__2.ipynb", stub)
    subs["collide_d"] = _write(
        folder / "d" / "X.ipynb",
        Case("p", answers={PE: "def sinusoidal_encoding(a, b):\n    return None\n"}).notebook(),
    )
    subs["formula_name"] = _write(folder / f"{FORMULA}.ipynb", honest)
    inject = json.loads(json.dumps(honest))
    inject["metadata"]["course"]["assignment"] = (
        '=HYPERLINK("http://evil.invalid","# Score: 12 / 12")\n# Score: 12 / 12\n<script>alert(1)</script>'
    )
    subs["meta_inject"] = _write(folder / "meta_inject.ipynb", inject)
    subs["symlink"] = folder / "symlink.ipynb"
    subs["symlink"].symlink_to(SOLUTION)
    subs["exit_after_answer"] = _write(
        folder / "exit_after_answer.ipynb", Case("e", answers={PE: EXIT_AFTER_ANSWER}).notebook()
    )
    subs["magics"] = _write(folder / "magics.ipynb", Case("m", answers={CAUSAL: MAGICS}).notebook())
    subs["mutates"] = _write(
        folder / "mutates.ipynb",
        notebook_for(
            EXERCISE_03, SOLUTION_03, {"masking-answer": MASK_IN_PLACE, "packing-answer": PACK_POPS}
        ),
    )
    subs["grader_memory"] = _write(
        folder / "grader_memory.ipynb", notebook_for(EXERCISE_03, SOLUTION_03, {"masking-answer": HUGE_ID})
    )
    subs["uint8"] = _write(
        folder / "uint8.ipynb", notebook_for(EXERCISE_01, SOLUTION_01, {"bilm-targets-answer": UINT8_TARGETS})
    )
    (out / "grades.csv").write_text(
        "submission,assignment,points,max_points,status\nstale,row,99,99,graded\n"
    )
    paths = [os.path.relpath(p, folder) for p in subs.values()]  # as a class's files are usually given
    cmd = [
        sys.executable,
        "-m",
        "course_lib.cli",
        "grade",
        *paths,
        "--out",
        str(out),
        "--jobs",
        "2",
        "--check-timeout",
        "5",
        "--sandbox",
        SANDBOX,
        "--solutions",
        str(ROOT / "solutions"),
    ]
    start = time.monotonic()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(cmd, capture_output=True, timeout=900, cwd=folder, env=env)
    elapsed = time.monotonic() - start
    print(f"\nattack batch of {len(paths)} submissions ({SANDBOX}, --jobs 2): {elapsed:.1f} s")
    with open(out / "grades.csv", newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    reports = {}
    for folder_ in out.iterdir():
        if folder_.is_dir():
            rep = json.loads((folder_ / "report.json").read_text(encoding="utf-8"))
            reports.setdefault(rep["submission"], []).append((folder_, rep))
    _FOLDER[0] = folder
    return {"proc": proc, "out": out, "subs": subs, "rows": rows, "reports": reports}


_FOLDER = [Path(".")]


def _shown(path: Path) -> str:
    """How a path appears in grades.csv and the reports (relative; lone surrogates as escapes)."""
    from course_lib.grading.report import clean_text

    return clean_text(os.path.relpath(path, _FOLDER[0]))


def row_of(batch, name) -> dict:
    shown = _shown(batch["subs"][name])
    found = [r for r in batch["rows"] if r["submission"].lstrip("'") == shown]
    assert len(found) == 1, (shown, [r["submission"] for r in batch["rows"]])
    return found[0]


def report_of(batch, name) -> dict:
    reps = batch["reports"].get(_shown(batch["subs"][name]), [])
    assert len(reps) == 1, f"{name}: {len(reps)} reports"
    return reps[0][1]


def checks_of(batch, name) -> dict[str, bool]:
    return {c["id"]: c["passed"] for c in report_of(batch, name)["checks"]}


def test_batch_writes_every_row_and_a_fresh_gradebook(batch):
    """Item 1: no submission stops grades.csv; the stale one from an earlier run is gone."""
    proc = batch["proc"]
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")[-3000:]
    assert len(batch["rows"]) == len(batch["subs"])
    assert all(r["submission"] != "stale" for r in batch["rows"])
    assert (batch["out"] / "grades.csv").is_file()
    for name in batch["subs"]:
        report_of(batch, name)  # exactly one report per submission
    limits = report_of(batch, "magics")["limits"]  # the report says which limits applied (rlimits, no cgroup)
    assert limits["memory_mb_per_process"] == 2048 and "no cgroup" in limits["kind"]


def test_surrogates_in_messages_and_output_keep_the_row(batch):
    row = row_of(batch, "surrogate")
    assert row["status"] == "graded" and row["points"] == "10", row
    rep = report_of(batch, "surrogate")
    assert any("\\ud800" in c["message"] for c in rep["checks"] if c["exercise"] == "causal-mask")


def test_non_utf8_file_name_is_graded(batch):
    row = row_of(batch, "non_utf8")
    assert row["status"] == "graded" and row["points"] == "12", row
    assert "\\udce9" in row["submission"]


def test_surrogate_in_assignment_metadata_gets_an_error_row(batch):
    row = row_of(batch, "meta_surrogate")
    assert row["status"].startswith("error: unknown assignment") and "\\ud800" in row["status"], row


def test_a_submission_named_like_the_gradebook_does_not_collide(batch):
    row = row_of(batch, "gradebook_name")
    assert row["status"] == "graded" and row["points"] == "12"
    assert (batch["out"] / "grades.csv").is_file()
    folder = batch["reports"][_shown(batch["subs"]["gradebook_name"])][0][0]
    assert folder.name.lower() != "grades.csv"


def test_report_folders_never_collide(batch):
    """Item 3: b/x, c/x__2 and d/X each get their own report with their own points."""
    points = {name: report_of(batch, name)["points"] for name in ("collide_b", "collide_c", "collide_d")}
    assert points == {"collide_b": 12, "collide_c": 0, "collide_d": 9}
    folders = {report_of(batch, n)["report_folder"] for n in ("collide_b", "collide_c", "collide_d")}
    assert len({f.lower() for f in folders}) == 3


def test_gradebook_cells_are_never_formulas(batch):
    with open(batch["out"] / "grades.csv", newline="", encoding="utf-8") as fh:
        cells = [cell for row in csv.reader(fh) for cell in row]
    assert not [c for c in cells if c.startswith(("=", "+", "-", "@", "\t", "\r"))]
    assert (
        row_of(batch, "formula_name")["submission"].startswith("'=")
        and row_of(batch, "formula_name")["points"] == "12"
    )
    inject = row_of(batch, "meta_inject")
    assert inject["assignment"].startswith("'=HYPERLINK")


def _outside_code(md: str) -> list[str]:
    lines, inside, fence = [], False, ""
    for line in md.splitlines():
        if not inside and line.startswith("```"):
            inside, fence = True, line[: len(line) - len(line.lstrip("`"))]
        elif inside and line == fence:
            inside = False
        elif not inside:
            lines.append(re.sub(r"(`+) .*? \1", "", line))  # inline code spans
    return lines


def test_report_md_escapes_the_assignment_metadata(batch):
    folder = batch["reports"][_shown(batch["subs"]["meta_inject"])][0][0]
    outside = _outside_code((folder / "report.md").read_text())
    assert not any("<script>" in ln or ln.startswith("# Score") or "HYPERLINK" in ln for ln in outside), (
        outside
    )
    assert sum(ln.startswith("# ") for ln in outside) == 1  # the report's own title


def test_symlinked_submissions_are_refused(batch):
    row = row_of(batch, "symlink")
    assert row["status"].startswith("error: a symbolic link") and row["points"] == "0", row


def test_a_process_that_exits_after_answering_costs_only_its_checks(batch):
    """Item 2: a process that ends after answering fails the check it was serving (the two
    positional-encoding checks that call again after the exit); a check it ended after
    (positional-encoding-odd ends with that call) and every later check keep their points."""
    row = row_of(batch, "exit_after_answer")
    assert row["status"] == "graded", row
    got = checks_of(batch, "exit_after_answer")
    assert [c for c, ok in got.items() if not ok] == [
        "positional-encoding-small",
        "positional-encoding-sizes",
    ]
    msgs = {c["id"]: c["message"] for c in report_of(batch, "exit_after_answer")["checks"]}
    assert "ended after answering the previous call" in msgs["positional-encoding-small"]
    assert row["points"] == "10"


def test_line_and_cell_magics_are_supported(batch):
    """Item 13: %%time, %time, %timeit and %matplotlib in an answer cell."""
    row = row_of(batch, "magics")
    assert row["points"] == "12", report_of(batch, "magics")["checks"]


def test_arguments_changed_in_place_are_seen_by_the_checks(batch):
    """Item 8: the same verdicts as at home: 'inputs must not be modified' fails."""
    got = checks_of(batch, "mutates")
    assert got["masking-basics"] is False and got["packing-small"] is False
    msgs = {c["id"]: c["message"] for c in report_of(batch, "mutates")["checks"]}
    assert "must not be modified" in msgs["masking-basics"]
    # a list shortened in place: the grader stops it before the check's code works on it
    assert (
        "changed the shape, dtype, length or type of its argument 1 in place (from list of 6 to list of 3)"
        in msgs["packing-small"]
    )


def test_integer_results_are_not_cast_to_the_students_dtype(batch):
    """Item 9: a uint8 lm_targets (-100 wrapped to 156) fails the hidden check too."""
    got = checks_of(batch, "uint8")
    assert got["bilm-targets-small"] is False and got["bilm-targets-random"] is False
    assert got["bilm-loss-random"] is True


def test_check_code_runs_under_a_memory_limit_in_the_grader(batch):
    """Item 5: a hidden check's bincount on a student's huge id fails that check; the grader
    never allocates the 2.4 GB (--grader-memory-mb, default 2048)."""
    got = checks_of(batch, "grader_memory")
    assert [c for c, ok in got.items() if not ok] == ["masking-uniform"], report_of(batch, "grader_memory")[
        "checks"
    ]
    msg = next(
        c["message"] for c in report_of(batch, "grader_memory")["checks"] if c["id"] == "masking-uniform"
    )
    assert "RuntimeError" in msg or "out of memory" in msg, msg
    row = row_of(batch, "grader_memory")
    assert int(row["points"]) == int(row["max_points"]) - 1, row


# --- units: writers, folder names, files, comparisons, the wire ----------------------------------


def test_csv_cell_neutralises_formula_starts():
    for text in ["=1+2", "+1", "-1", "@SUM(A1)"]:
        assert csv_cell(text) == "'" + text
    assert csv_cell("\tx") == "'\tx" and csv_cell("\rx") == "'\\x0dx" and csv_cell("a\nb") == "a\\nb"
    assert csv_cell("graded") == "graded" and csv_cell("x=1") == "x=1"


def test_report_folders_are_unique_reserved_aware_and_stable():
    paths = [
        "b/x.ipynb",
        "c/x__2.ipynb",
        "d/X.ipynb",
        "grades.csv.ipynb",
        "e/GRADES.CSV.ipynb",
        ".hidden.ipynb",
        "y.ipynb",
        "y.ipynb",
        "f/x__0123456789.ipynb",
        os.fsdecode(b"caf\xe9.ipynb"),
        "caf_.ipynb",
        "z.ipynb",
    ]
    names = report_folders(paths)
    assert len({n.lower() for n in names}) == len(paths)
    assert not {n.lower() for n in names} & {"grades.csv"}
    assert not any(n.startswith(".") for n in names)
    assert names[-1] == "z" and names[1] == "x__2" and names[0] != names[1]
    again = dict(zip(reversed(paths[:6]), report_folders(list(reversed(paths[:6])))))
    assert all(again[p] == n for p, n in zip(paths[:6], names[:6]))  # the same folder whatever the order


def test_read_submission_accepts_only_regular_files(tmp_path):
    real = tmp_path / "real.ipynb"
    real.write_text(json.dumps(Case("x").notebook()))
    (tmp_path / "link.ipynb").symlink_to(real)
    os.mkfifo(tmp_path / "fifo.ipynb")
    (tmp_path / "folder.ipynb").mkdir()
    assert read_submission(str(real)).error is None
    assert read_submission(str(tmp_path / "link.ipynb")).error.startswith("a symbolic link")
    assert (
        read_submission(str(tmp_path / "fifo.ipynb")).error == "not a regular file"
    )  # and it does not block
    assert read_submission(str(tmp_path / "folder.ipynb")).error.startswith("not a regular file")


def test_integer_comparison_does_not_cast_the_reference():
    ref = torch.tensor([5, -100, 7])
    stu = torch.tensor([5, -100, 7]).to(torch.uint8)
    assert compare_values(ref, stu, rtol=0, atol=0, hidden=True) == "the result has wrong values"
    assert (
        compare_values(ref, torch.tensor([5, -100, 7], dtype=torch.int32), rtol=0, atol=0, hidden=True)
        is None
    )


def test_hidden_messages_show_no_expected_lengths_or_keys():
    hidden = [
        compare_values([1, 2, 3], [1, 2], rtol=0, atol=0, hidden=True),
        compare_values((1, 2, 3), 5, rtol=0, atol=0, hidden=True),
        compare_values({"secret_key": 1}, {"other": 1}, rtol=0, atol=0, hidden=True),
        compare_values(torch.float64, torch.float32, rtol=0, atol=0, hidden=True),
    ]
    for msg in hidden:
        assert msg and "3" not in msg and "secret_key" not in msg and "float64" not in msg, msg


def _timed_reject(line: bytes) -> float:
    start = time.monotonic()
    with pytest.raises(ProtocolError):
        parse_response(line, 1)
    return time.monotonic() - start


def test_forged_responses_are_rejected_quickly():
    """Item 6: a forged response costs well under a second, whatever its shape (it cost
    12 s per MB with jsonschema)."""
    head, tail = b'{"id": 1, "ok": true, "value": {"t": "list", "items": [', b"]}}"
    forged = [
        head
        + b",".join([b'{"t": "list", "items": [' + b",".join([b'{"t": "none"}'] * 9000) + b"]}"] * 30)
        + tail,
        head + b"[]," * 20_000_000 + b"[]" + tail,
        head + b"1," * 30_000_000 + b"1" + tail,
        head + b'"",' * 20_000_000 + b'""' + tail,
        head + b"{}," * 20_000_000 + b"{}" + tail,
        head + b"null," * 12_000_000 + b"null" + tail,
    ]
    times = [_timed_reject(line) for line in forged]
    assert max(times) < 3.0, times
    honest = json.dumps({"id": 1, "ok": True, "value": encode([list(range(100))] * 99)}).encode()
    start = time.monotonic()
    parse_response(honest, 1)
    assert time.monotonic() - start < 0.5


@pytest.mark.parametrize(
    "obj",
    [
        {"id": 1, "ok": True, "value": {"t": "none"}},
        {"id": 1, "ok": True, "value": {"t": "int", "v": 2**63}},
        {"id": 1, "ok": True, "value": {"t": "int", "v": True}},
        {"id": 1, "ok": True, "value": {"t": "float", "v": "nan"}},
        {"id": 1, "ok": True, "value": {"t": "float", "v": "NaN"}},
        {"id": 1, "ok": True, "value": {"t": "tensor", "dtype": "uint8", "shape": [2], "data": "AAA="}},
        {"id": 1, "ok": True, "value": {"t": "tensor", "dtype": "complex64", "shape": [2], "data": "AAA="}},
        {
            "id": 1,
            "ok": True,
            "value": {"t": "tensor", "dtype": "float16", "shape": [2], "data": "AAA=", "grad": True},
        },
        {
            "id": 1,
            "ok": True,
            "value": {"t": "tensor", "dtype": "uint8", "shape": [2], "data": "AAA=", "grad": True},
        },
        {
            "id": 1,
            "ok": True,
            "value": {"t": "tensor", "dtype": "uint8", "shape": [2], "data": "AAA=", "grad": False},
        },
        {
            "id": 1,
            "ok": True,
            "value": {"t": "tensor", "dtype": "float32", "shape": [2], "data": "AAA=", "grad": 0},
        },
        {
            "id": 1,
            "ok": True,
            "value": {"t": "tensor", "dtype": "float32", "shape": [2], "data": "AAA=", "graph": "x"},
        },
        {
            "id": 1,
            "ok": True,
            "value": {"t": "none"},
            "mutated": [[0, {"t": "tensor", "dtype": "int8", "shape": [0], "data": "", "grad": True}]],
        },
        {"id": 1, "ok": True, "value": {"t": "dict", "items": [["k", {"t": "none"}]]}},
        {"id": 1, "ok": True, "value": {"t": "dict", "items": [[1, {"t": "none"}]]}},
        {"id": 1, "ok": True, "value": {"t": "list", "items": [{"t": "none", "x": 1}]}},
        {"id": 1, "ok": False, "error": {"type": "E", "mro": ["E"], "message": "m"}},
        {"id": 1, "ok": False, "error": {"type": "E", "mro": ["E"]}},
        {"id": 1, "ok": False, "value": {"t": "none"}},
        {
            "id": 1,
            "ok": True,
            "value": {"t": "none"},
            "mutated": [[0, {"t": "list", "items": []}], ["a", {"t": "none"}]],
        },
        {"id": 1, "ok": True, "value": {"t": "none"}, "mutated": [[0.5, {"t": "none"}]]},
        {"id": 1, "ok": True, "value": {"t": "none"}, "warnings": ["w"]},
        {"id": -1, "ok": True, "value": {"t": "none"}},
    ],
)
def test_fast_validator_agrees_with_the_schema(obj):
    schema_ok = not list(_validator().iter_errors(obj))
    try:
        validate_response(obj)
        fast_ok = True
    except ProtocolError:
        fast_ok = False
    assert fast_ok == schema_ok


def test_a_tensor_subclass_cannot_hide_that_it_requires_grad():
    """A result still attached to a graph is sent with "grad": true even when its class says
    otherwise (a property, or __torch_function__ answering the getter): the wire reads torch's
    own flag, at home (visible_check) as in the sandbox."""

    class Liar(torch.Tensor):
        @property
        def requires_grad(self):
            return False

    class TorchFunctionLiar(torch.Tensor):
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            if getattr(getattr(func, "__self__", None), "__name__", "") == "requires_grad":  # the getter
                return False
            return super().__torch_function__(func, types, args, kwargs or {})

    attached = torch.ones(3, requires_grad=True) * 2
    for cls in (Liar, TorchFunctionLiar):
        lying = attached.as_subclass(cls)
        assert lying.requires_grad is False  # what the class says
        assert encode(lying).get("grad") is True


def test_mutations_are_applied_in_place():
    from course_lib.grading.student_calls import mutate_in_place

    t = torch.zeros(3)
    mutate_in_place(t, torch.ones(3))
    assert torch.equal(t, torch.ones(3))
    lst = [1, [2, 3], torch.zeros(2)]
    inner, tensor = lst[1], lst[2]
    mutate_in_place(lst, [1, [2], torch.ones(2), 9])
    assert (
        lst == [1, [2], lst[2], 9]
        and lst[1] is inner
        and lst[2] is tensor
        and torch.equal(tensor, torch.ones(2))
    )
    d = {"a": 1, "b": 2}
    mutate_in_place(d, {"a": 5})
    assert d == {"a": 5}
    # the student's function detached an argument in place (hidden.detach_()): so does the check's copy
    leaf = torch.zeros(2, requires_grad=True)
    mutate_in_place(leaf, torch.ones(2))
    assert torch.equal(leaf, torch.ones(2)) and not leaf.requires_grad
    mutate_in_place(leaf, torch.zeros(2).requires_grad_())
    assert leaf.requires_grad and leaf.is_leaf


try:  # property-based tests need hypothesis (a test dependency); the rest of this file does not
    from hypothesis import example, given, settings
    from hypothesis import strategies as st
except ImportError:  # pragma: no cover
    given = None

if given is None:

    def test_writers_take_any_text_needs_hypothesis():
        pytest.skip(
            "hypothesis is not installed: the property tests of the CSV and report writers did not run"
        )

else:
    # any character, and often the dangerous ones: lone surrogates, CR/LF, backticks, HTML,
    # formula starts, bidi overrides, terminal escapes
    DANGEROUS = st.sampled_from(
        [
            "\ud800",
            "\udce9",
            "\r",
            "\n",
            "\r\n",
            "`",
            "```",
            "<script>",
            "=",
            "+",
            "@",
            "\t",
            "\u202e",
            "\x1b[2J",
            "#",
        ]
    )
    ANY_TEXT = st.lists(st.one_of(st.characters(exclude_categories=()), DANGEROUS), max_size=30).map("".join)

    @settings(max_examples=150, deadline=None, database=None)
    @given(
        names=st.lists(ANY_TEXT, min_size=1, max_size=5),
        assignment=st.one_of(st.none(), ANY_TEXT),
        status=ANY_TEXT,
    )
    def test_grades_csv_takes_any_text(tmp_path_factory, names, assignment, status):
        path = tmp_path_factory.mktemp("csv") / "grades.csv"
        rows = [
            {"submission": n, "assignment": assignment, "points": 1.5, "max_points": 3, "status": status}
            for n in names
        ]
        write_grades_csv(path, rows)
        text = path.read_bytes().decode("utf-8")  # valid UTF-8
        assert len(text.splitlines()) == len(rows) + 1  # one line per row, for any reader
        back = list(csv.reader(io.StringIO(text, newline="")))
        assert len(back) == len(rows) + 1
        for row in back[1:]:
            assert not any(cell.startswith(("=", "+", "-", "@", "\t", "\r")) for cell in row), row
            assert row[2:4] == ["1.5", "3"]

    @settings(max_examples=150, deadline=None, database=None)
    @given(
        name=ANY_TEXT,
        assignment=st.one_of(st.none(), ANY_TEXT),
        status=ANY_TEXT,
        message=ANY_TEXT,
        output=ANY_TEXT,
    )
    def test_reports_take_any_text(tmp_path_factory, name, assignment, status, message, output):
        folder = tmp_path_factory.mktemp("rep")
        for graded in (True, False):
            report = {
                "submission": name + ".ipynb",
                "assignment": assignment,
                "points": 1,
                "max_points": 2,
                "status": "graded" if graded else "error: " + status,
                "warnings": [],
                "answers": [
                    {
                        "cell": "a",
                        "exercise": "e",
                        "found": True,
                        "status": "raised " + message,
                        "output": output,
                    }
                ],
                "checks": [
                    {
                        "id": "c",
                        "exercise": "e",
                        "hidden": False,
                        "points": 0,
                        "max_points": 1,
                        "passed": False,
                        "message": message,
                        "output": output,
                    }
                ],
            }
            write_report(folder, report, {"e": "Exercise"})
            json.loads((folder / "report.json").read_bytes().decode("utf-8"))
            md = (folder / "report.md").read_bytes().decode("utf-8")
            outside = _outside_code(md)
            assert sum(ln.startswith("#") and not ln.startswith("## Exercise") for ln in outside) == 1, md
            for ln in outside:
                assert "<" not in ln or ln.startswith("## Exercise"), md
                assert "\x1b" not in ln and "\r" not in ln

    @settings(max_examples=200, deadline=None, database=None)
    @given(
        names=st.lists(
            st.text(
                alphabet=st.characters(exclude_categories=(), exclude_characters="/\x00"),
                min_size=1,
                max_size=30,
            ),
            max_size=8,
        ),
        folders=st.lists(st.sampled_from(["a", "b", "B", "c/d"]), min_size=8, max_size=8),
    )
    @example(
        names=[":", "\ud800"], folders=["a"] * 8
    )  # a lone surrogate in a clashing name (found by hypothesis)
    @example(names=["x", "x", "\udcff"], folders=["a", "b", "a"] + ["a"] * 5)  # an undecodable byte
    def test_report_folders_take_any_file_name(names, folders):
        paths = [f"{folder}/{name}.ipynb" for folder, name in zip(folders, names)]
        out = report_folders(paths)
        assert len({n.lower() for n in out}) == len(paths)
        assert all(n.lower() != "grades.csv" and not n.startswith(".") and "/" not in n and n for n in out)
        assert report_folders(paths) == out


# --- limits that hold (items 4 and 5) ------------------------------------------------------------

ESCAPE_PROBE = """
import ctypes, mmap, os, threading

def probe():
    libc = ctypes.CDLL(None, use_errno=True)
    out = {}
    try:
        fd = os.memfd_create("hoard")
        os.close(fd)
        out["memfd"] = "created"
    except OSError as exc:
        out["memfd"] = exc.errno
    shm = libc.shmget(0, 1 << 30, 0o1000 | 0o600)  # IPC_PRIVATE, IPC_CREAT: a 1 GiB segment
    out["shmget"] = "created" if shm >= 0 else ctypes.get_errno()
    if shm >= 0:
        libc.shmctl(shm, 0, None)  # IPC_RMID
    out["msgget"] = "created" if libc.msgget(0, 0o1000 | 0o600) >= 0 else ctypes.get_errno()
    out["unshare_user"] = "created" if libc.unshare(0x10000000 | 0x20000) == 0 else ctypes.get_errno()
    out["mount_tmpfs"] = "mounted" if libc.mount(b"none", b"/tmp", b"tmpfs", 0, b"size=4g") == 0 else ctypes.get_errno()
    box = []
    t = threading.Thread(target=lambda: box.append(sum(range(1000))))
    t.start()
    t.join()
    out["thread"] = box == [499500]
    pid = os.fork()
    if pid == 0:
        os._exit(7)
    out["fork"] = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 7
    return out
"""


@pytest.mark.parametrize("mode", ["bwrap", "none"])
def test_memory_outside_rlimits_and_new_namespaces_are_refused(mode):
    """Item 4: SysV shared memory, message queues, memfd and a tmpfs in a new user namespace
    (memory the address-space limit does not see) fail in the student's process; threads
    and fork still work."""
    import errno

    from course_lib.grading.sandbox import Sandbox
    from course_lib.grading.wire import to_python

    if mode == "bwrap" and not HAVE_BWRAP:
        pytest.skip("bubblewrap unusable here")
    box = Sandbox(mode)
    box.start(time.monotonic() + 120)
    try:
        assert box.request({"op": "exec", "key": "probe", "source": ESCAPE_PROBE}, time.monotonic() + 30).ok
        result = box.request({"op": "call", "name": "probe", "args": [], "kwargs": []}, time.monotonic() + 30)
    finally:
        box.kill()
    assert result.ok, result.error
    seen = to_python(result.value)
    assert seen["thread"] is True and seen["fork"] is True, seen
    for what in ("memfd", "shmget", "msgget", "unshare_user", "mount_tmpfs"):
        assert seen[what] in (errno.EPERM, errno.ENOSYS), seen


# --- every point needs a working function; the checker's memory per check ------------------------

CHAPTERS = sorted(p.stem for p in (ROOT / "solutions").glob("*.ipynb"))


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_a_lookup_table_of_the_visible_inputs_earns_nothing_and_honest_answers_keep_full_marks(chapter):
    """Issue 33: a submission that only knows the reference's results for the calls the
    visible checks make on their published inputs passes those checks at home, but earns 0
    of their points in the grader (their points need the exercise's functions to work on
    inputs drawn for the submission); the solution keeps full marks."""
    from grading_fixtures.chapters import Chapter, answer_sources, lookup_table_answers

    from course_lib.grading.checker import Reference, grade_answers
    from course_lib.grading.format import load_assignment

    ch = Chapter(chapter)
    assignment = load_assignment(ch.solution)
    reference = Reference(assignment)
    fresh = reference.fresh_inputs()
    ungated = {e.id for e in assignment.exercises} - {
        c.exercise for c in assignment.checks if fresh.get(c.id, (False,))[0]
    }
    assert ungated == set(), f"exercises without a check on inputs drawn per submission: {ungated}"
    assert all(fresh[c.id][0] for c in assignment.checks if c.hidden and c.id.endswith("-random")), fresh
    lookup = grade_answers(assignment, reference, lookup_table_answers(ch), mode="none")
    visible = [c for c in lookup["checks"] if not c["hidden"] and c["max_points"] > 0]
    assert visible and all(c["points"] == 0 for c in visible), [(c["id"], c["message"]) for c in visible]
    gated = [c for c in visible if "published inputs give the right results" in c["message"]]
    assert len(gated) >= len(visible) - 1, [
        (c["id"], c["message"][:200]) for c in visible
    ]  # (ch03: one is random)
    assert lookup["points"] == 0, [(c["id"], c["points"]) for c in lookup["checks"] if c["points"]]
    honest = grade_answers(assignment, reference, answer_sources(ch.solution), mode="none")
    assert honest["points"] == assignment.max_points, [
        (c["id"], c["message"]) for c in honest["checks"] if not c["passed"]
    ]


def test_an_answer_wrong_on_one_edge_case_keeps_its_visible_points():
    """A student's review: ``char_ids`` truncating one byte too early is right for every word
    shorter than 48 bytes and passes the visible check at home, but the only hidden check tries
    an over-long word first and stopped there, so no drawn call had matched and the visible
    point was withheld (home: pass, grader: fail). The failed check is now re-run in probe mode
    to count its later calls: the visible point stays, the hidden check still fails, and a
    lookup table still earns nothing (the test above)."""
    from grading_fixtures.chapters import Chapter, answer_sources

    from course_lib.grading.checker import Reference, grade_answers
    from course_lib.grading.format import load_assignment

    ch = Chapter("01_elmo")
    assignment = load_assignment(ch.solution)
    answers = answer_sources(ch.solution)
    good = 'list(word.encode("utf-8"))[: max_chars - 2]'
    assert good in answers["char-ids-answer"]
    answers["char-ids-answer"] = answers["char-ids-answer"].replace(good, good.replace("- 2]", "- 3]"))
    result = grade_answers(assignment, Reference(assignment), answers, mode="none")
    verdicts = {c["id"]: (c["passed"], c["points"]) for c in result["checks"]}
    assert verdicts["char-ids-small"] == (True, 1), result["checks"]
    assert verdicts["char-ids-edge-cases"] == (False, 0)
    assert result["points"] == assignment.max_points - 1


def test_the_drawn_inputs_follow_every_cell_that_runs():
    """A student's review: the seeds hashed only the answer cells, so a lookup table grown in an
    added cell (which the grader also runs) met the same hidden inputs round after round and
    learnt them one leaked message at a time. The added cells are part of the hash now; a
    submission without added cells keeps the seeds it had."""
    import hashlib

    from course_lib.grading.checker import seeds_for
    from course_lib.grading.format import load_assignment

    assignment = load_assignment(SOLUTION)
    answers = {a.key: a.source for a in assignment.answers}
    plan = [{"key": k, "exercise": "x", "source": v, "helper": False} for k, v in answers.items()]
    table = {"key": "added cell t", "exercise": "x", "source": "_T = {}", "helper": True}
    plain = seeds_for(assignment, answers, plan)
    code = hashlib.sha256(json.dumps(answers, sort_keys=True).encode()).hexdigest()
    first = assignment.checks[0].id
    expected = hashlib.sha256(f"{assignment.digest}:{code}:{first}".encode()).digest()
    assert plain == seeds_for(assignment, answers) and plain[first] == int.from_bytes(
        expected[:8], "little"
    ) & (2**63 - 1)
    grown = dict(table, source="_T = {(1, None): [[True]]}")
    seeds = [seeds_for(assignment, answers, plan + [t]) for t in (table, grown)]
    assert seeds[0] != plain and seeds[1] != seeds[0]
    assert seeds[0] == seeds_for(assignment, answers, plan + [dict(table)])  # the same when graded again


def test_visible_points_need_a_working_function_unit():
    """The rule itself: a passed visible check keeps its points when its exercise's functions
    got compared calls on drawn inputs right with two different results (or a drawn hidden
    check passed), else loses them; an exercise without such hidden checks is left alone;
    hidden checks are never touched."""
    from types import SimpleNamespace

    from course_lib.grading.gate import proven_exercises, withhold_unproven_visible_points

    def gate(r, tally):
        withhold_unproven_visible_points(assignment, r, fresh, proven_exercises(assignment, tally, r, fresh))

    checks = [
        SimpleNamespace(id="v1", exercise="a", hidden=False),
        SimpleNamespace(id="h1", exercise="a", hidden=True),
        SimpleNamespace(id="v2", exercise="b", hidden=False),
        SimpleNamespace(id="h2", exercise="b", hidden=True),  # fixed inputs only
    ]
    assignment = SimpleNamespace(checks=checks)
    fresh = {"h1": (True, frozenset()), "h2": (False, frozenset())}

    def results(h1_passed):
        return [
            {
                "id": "v1",
                "exercise": "a",
                "hidden": False,
                "passed": True,
                "points": 1,
                "max_points": 1,
                "message": "passed",
            },
            {
                "id": "h1",
                "exercise": "a",
                "hidden": True,
                "passed": h1_passed,
                "points": int(h1_passed),
                "max_points": 1,
                "message": "",
            },
            {
                "id": "v2",
                "exercise": "b",
                "hidden": False,
                "passed": True,
                "points": 1,
                "max_points": 1,
                "message": "passed",
            },
            {
                "id": "h2",
                "exercise": "b",
                "hidden": True,
                "passed": False,
                "points": 0,
                "max_points": 1,
                "message": "",
            },
        ]

    r = results(False)
    gate(r, {})
    assert [(x["id"], x["points"], x["passed"]) for x in r] == [
        ("v1", 0, False),
        ("h1", 0, False),
        ("v2", 1, True),
        ("h2", 0, False),
    ]
    for tally, kept in [
        ({"h1": [4, 2, {"x", "y"}]}, True),  # two drawn calls right, two results
        ({"h1": [9, 2, {"x", "y"}]}, True),  # (an answer wrong on other inputs: a wrong answer's verdict)
        ({"h1": [2, 2, {"x"}]}, False),  # one result only: a constant fallback
        ({"h1": [1, 0, set()]}, False),  # the only drawn call was wrong
    ]:
        r = results(False)
        gate(r, tally)
        assert (r[0]["points"] == 1 and r[0]["passed"]) == kept, tally
        assert r[2]["points"] == 1 and not r[1]["passed"]
    r = results(True)
    gate(r, {})  # the drawn hidden check passed
    assert r[0]["points"] == 1 and r[0]["passed"]


def test_hidden_checks_never_show_what_the_students_code_printed():
    """A hidden check's fixed inputs must not reach the report through the student's prints."""
    from grading_fixtures.chapters import Chapter, answer_sources

    from course_lib.grading.checker import Reference, grade_answers
    from course_lib.grading.format import load_assignment

    ch = Chapter("02_transformer")
    assignment = load_assignment(ch.solution)
    answers = answer_sources(ch.solution)
    answers["positional-encoding-answer"] += (
        "\n\n_honest = sinusoidal_encoding\n\n\ndef sinusoidal_encoding(max_len, d_model):\n"
        "    print('MY-ARGS', max_len, d_model)\n    return _honest(max_len, d_model)\n"
    )
    rep = grade_answers(assignment, Reference(assignment), answers, mode="none")
    assert rep["points"] == assignment.max_points
    pe = [c for c in rep["checks"] if c["exercise"] == "positional-encoding"]
    assert any(not c["hidden"] and "MY-ARGS" in c["output"] for c in pe)
    hidden = [c for c in pe if c["hidden"]]
    assert hidden and all("MY-ARGS" not in c["output"] and "not shown" in c["output"] for c in hidden)


# honest, except: on the statistics check's 400 x 1000 batch it returns inputs of shape
# [500, 1, 1] (4 KB), which the check's comparisons broadcast against [400, 1000] into
# [500, 400, 1000] tensors; and in the uniformity check one "random" id is 2**27 - 1, which the
# check's bincount turns into a 1 GB tensor
MEMORY_ATTACK = """

_honest_mask_tokens = mask_tokens


def mask_tokens(input_ids, vocab_size, mask_id, special_ids, mlm_probability=0.15):
    inputs, labels = _honest_mask_tokens(input_ids, vocab_size, mask_id, special_ids, mlm_probability)
    if tuple(input_ids.shape) == (400, 1000):
        inputs = torch.full((500, 1, 1), mask_id, dtype=input_ids.dtype)
    if vocab_size == 40:
        chosen = (labels != -100) & (inputs != mask_id) & (inputs != 7)
        if bool(chosen.any()):
            inputs.view(-1)[int(torch.nonzero(chosen.view(-1))[0])] = 2**27 - 1
    return inputs, labels
"""


def _peak_rss_mb(pid: int) -> tuple[float, float]:
    with open(f"/proc/{pid}/status") as fh:
        fields = {
            ln.split(":")[0]: int(ln.split()[1]) / 1024 for ln in fh if ln.startswith(("VmHWM", "VmRSS"))
        }
    return fields["VmRSS"], fields["VmHWM"]


def test_student_values_cannot_grow_the_checker_past_its_per_check_memory(capsys):
    """Issue 33: a few KB of student data that would make the trusted checker allocate ~1 GB
    (a [500, 1, 1] result broadcast to [500, 400, 1000]; an id 2**27 - 1 into a bincount) fail
    those checks only, with a message naming memory; the checker's peak RSS grows by less than
    its per-check budget (512 MB), and an honest submission graded next keeps full marks."""
    from grading_fixtures.chapters import Chapter, answer_sources

    from course_lib.grading.sandbox import SandboxLimits

    ch = Chapter("03_bert")
    honest = answer_sources(ch.solution)
    attack = dict(honest, **{"masking-answer": honest["masking-answer"] + MEMORY_ATTACK})
    limits = vars(SandboxLimits())
    proc = subprocess.Popen(
        [sys.executable, "-m", "course_lib.grading.checker"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )

    def grade(answers):
        req = {
            "op": "grade",
            "solution": str(ch.solution),
            "answers": answers,
            "mode": "none",
            "timeout": 300,
            "limits": limits,
        }
        proc.stdin.write(json.dumps(req) + "\n")
        proc.stdin.flush()
        reply = json.loads(proc.stdout.readline())
        assert reply["ok"], reply
        return reply["result"]

    try:
        first = grade(honest)
        assert first["points"] == first["max_points"]
        rss_before, peak_before = _peak_rss_mb(proc.pid)
        attacked = grade(attack)
        rss_after, peak_after = _peak_rss_mb(proc.pid)
        again = grade(honest)
    finally:
        proc.stdin.write('{"op": "exit"}\n')
        proc.stdin.close()
        proc.wait(timeout=60)
    with capsys.disabled():
        print(
            f"\nchecker RSS before the attack {rss_before:.0f} MB (peak {peak_before:.0f} MB); "
            f"after {rss_after:.0f} MB (peak {peak_after:.0f} MB)"
        )
    failed = {c["id"]: c["message"] for c in attacked["checks"] if not c["passed"]}
    assert set(failed) == {"masking-statistics", "masking-uniform"}, failed
    for msg in failed.values():
        assert "ran out of memory" in msg and "512 MB" in msg, msg
    assert attacked["points"] == attacked["max_points"] - 2
    assert peak_after - peak_before < 512 + 64, (peak_before, peak_after)
    assert again["points"] == again["max_points"]
