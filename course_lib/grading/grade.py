"""``course grade``: grade a batch of submitted notebooks.

The main process reads each submission (size-limited, plain JSON parsing: nothing in it is
executed or trusted), picks its answer cells by cell id, and hands them to a pool of
checker processes (``--jobs``), each of which grades one submission at a time in its own
sandbox. Results are written per submission (``DIR/<stem>/report.json`` and
``report.md``) and for the batch (``DIR/grades.csv``, in the order given). A submission
that cannot be graded gets a row with ``status = "error: <reason>"``; the exit code is
non-zero only when the grader itself cannot run.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import select
import stat
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from queue import Queue

from .format import META, Assignment, FormatError, load_assignment
from .report import (
    clean_text,
    earlier_report,
    exercise_summary,
    format_points,
    gradescope_results,
    report_folders,
    write_atomic,
    write_grades_csv,
    write_report,
)
from .sandbox import SandboxLimits
from .sandbox_setup import choose_mode

__all__ = [
    "GradeError",
    "Submission",
    "read_submission",
    "solutions_dir",
    "grade_files",
    "MAX_NOTEBOOK_BYTES",
]

MAX_NOTEBOOK_BYTES = 25 * 2**20
CHECKER_SLACK = 90.0  # seconds a checker may take beyond the submission's time limit
PREFLIGHT_TIMEOUT = 180.0  # the known-good answer's run before a batch (torch's import included)


class GradeError(RuntimeError):
    """The grader itself cannot run (unknown assignment, unwritable output folder, ...)."""


@dataclass
class Submission:
    path: str
    assignment: str | None = None  # from the notebook's metadata
    by_id: dict[str, str] = field(default_factory=dict)  # code cell id -> source
    by_marker: dict[str, str] = field(default_factory=dict)  # metadata course.answer -> source (last wins)
    error: str | None = None
    sha256: str | None = None  # of the file's bytes (a resumed batch reuses the report of the same file)
    # every code cell in notebook order: {"id", "marker", "tags", "source", "exercise"} (the
    # exercise whose instructions, a markdown cell tagged "exercise", come last above it)
    cells: list[dict] = field(default_factory=list)

    def answers_for(self, assignment: Assignment) -> dict[str, str | None]:
        return self.answer_plan(assignment)[0]

    def answer_plan(
        self,
        assignment: Assignment,
        known_ids: set[str] | frozenset = frozenset(),
        known_sources: set[str] | frozenset = frozenset(),
    ):
        """What the grader runs, as the notebook would: ``(answers, cells, notes)``.

        ``answers``: answer key -> the source graded (None when missing). When several cells
        carry an answer's id or its ``course.answer`` marker (Jupyter's copy keeps the
        metadata), the **last** one in notebook order is graded, and ``notes`` says so.
        ``cells``: in notebook order, the chosen answer cells and the cells the student added
        (a helper or an import in a cell of its own, above the first exercise or inside one;
        the answer written in a new cell below the stub): code cells without a grader role
        whose id is not one of the released notebook's (``known_ids``) and whose code is not
        one of its cells' (``known_sources``, whitespace-normalised: the set-up cell of a copy
        that lost its ids); each ``{"key", "exercise", "source", "helper"}``. A cell above
        the first exercise belongs to the first exercise.
        """
        keys = {a.key: a.exercise for a in assignment.answers}
        exercises = {e.id for e in assignment.exercises}
        chosen: dict[str, int] = {}
        count: dict[str, int] = {}
        for i, c in enumerate(self.cells):
            for key in {c["id"], c["marker"]} & set(keys):
                chosen[key] = i
                count[key] = count.get(key, 0) + 1
        answers = {key: (self.cells[chosen[key]]["source"] if key in chosen else None) for key in keys}
        if not chosen:  # nothing of this assignment: no helpers either
            return answers, [], {}
        notes = {}
        for key, n in count.items():
            if n > 1:
                c = self.cells[chosen[key]]
                where = f"cell id {c['id']!r}" if isinstance(c["id"], str) else "a cell without id"
                notes[key] = (
                    f"{n} cells are marked as answer {key} (a copied cell keeps the marker); the last one in the "
                    f"notebook ({where}) was graded, the others were not"
                )
        by_index = {i: key for key, i in chosen.items()}
        plan = []
        first = assignment.exercises[0].id if assignment.exercises else None
        for i, c in enumerate(self.cells):
            if i in by_index:
                key = by_index[i]
                plan.append({"key": key, "exercise": keys[key], "source": c["source"], "helper": False})
            elif (
                (c["exercise"] in exercises or c["exercise"] is None)
                and not (set(c["tags"]) & _ROLE_OR_GENERATED)
                and " ".join(c["source"].split()) not in known_sources
                and c["marker"] is None
                and c["id"] not in known_ids
                and c["id"] not in keys
                and c["source"].strip()
            ):
                label = f"added cell {c['id']}" if isinstance(c["id"], str) else f"added cell #{i + 1}"
                plan.append(
                    {
                        "key": label[:120],
                        "exercise": c["exercise"] or first,
                        "source": c["source"],
                        "helper": True,
                    }
                )
        return answers, plan, notes


def read_submission(path: str, *, max_bytes: int = MAX_NOTEBOOK_BYTES) -> Submission:
    """Parse a submitted file as data; any problem becomes ``Submission.error``."""
    sub = Submission(path)
    p = Path(path)
    try:
        try:
            st = os.lstat(p)
        except FileNotFoundError:
            sub.error = "file not found"
            return sub
        if stat.S_ISLNK(st.st_mode):
            sub.error = "a symbolic link, not a regular file (only the notebook file itself is graded)"
            return sub
        if not stat.S_ISREG(st.st_mode):
            sub.error = "not a regular file" + (" (a folder)" if stat.S_ISDIR(st.st_mode) else "")
            return sub
        fd = os.open(p, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
        with os.fdopen(fd, "rb") as fh:
            st = os.fstat(fh.fileno())
            if not stat.S_ISREG(st.st_mode):  # replaced between the two looks
                sub.error = "not a regular file"
                return sub
            size = st.st_size
            if size == 0:
                sub.error = "empty file"
                return sub
            if size > max_bytes:
                sub.error = f"file too large ({size / 2**20:.1f} MB; the limit is {max_bytes / 2**20:g} MB)"
                return sub
            raw = fh.read(max_bytes + 1)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            sub.error = "a symbolic link, not a regular file (only the notebook file itself is graded)"
        else:
            sub.error = f"cannot read the file ({exc.strerror or exc})"
        return sub
    if len(raw) > max_bytes:
        sub.error = f"file too large (the limit is {max_bytes / 2**20:g} MB)"
        return sub
    sub.sha256 = hashlib.sha256(raw).hexdigest()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        sub.error = "not a notebook (not UTF-8 text)"
        return sub
    try:
        nb = json.loads(text)
    except json.JSONDecodeError as exc:
        what = re.sub(r"\s+(starting\s+)?at$", "", exc.msg)  # "Unterminated string starting at"
        sub.error = f"not a notebook (invalid JSON at line {exc.lineno}, column {exc.colno}: {what})"
        return sub
    except (ValueError, RecursionError):
        sub.error = "not a notebook (invalid or too deeply nested JSON)"
        return sub
    if not isinstance(nb, dict):
        sub.error = f"not a notebook (the JSON is a {type(nb).__name__}, not an object)"
        return sub
    nbformat = nb.get("nbformat")
    if isinstance(nbformat, bool) or not isinstance(nbformat, int):
        sub.error = "not a Jupyter notebook (no nbformat version)"
        return sub
    if nbformat != 4:
        sub.error = (
            f"nbformat {nbformat} notebook: only nbformat 4 is graded; open it in Jupyter and save it again"
            if nbformat < 4
            else f"nbformat {nbformat} is not supported (only nbformat 4)"
        )
        return sub
    cells = nb.get("cells")
    if not isinstance(cells, list):
        sub.error = "not a notebook (no list of cells)"
        return sub
    meta = nb.get("metadata")
    course = meta.get(META) if isinstance(meta, dict) else None
    if isinstance(course, dict) and isinstance(course.get("assignment"), str):
        sub.assignment = course["assignment"][:200]
    exercise = None
    for cell in cells:
        if isinstance(cell, dict) and cell.get("cell_type") == "markdown":
            cmeta, tags = cell.get("metadata"), None
            tags = cmeta.get("tags") if isinstance(cmeta, dict) else None
            course = cmeta.get(META) if isinstance(cmeta, dict) else None
            if (
                isinstance(tags, list)
                and "exercise" in tags
                and isinstance(course, dict)
                and isinstance(course.get("id"), str)
            ):
                exercise = course["id"]
            continue
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        src = cell.get("source", "")
        if isinstance(src, list) and all(isinstance(s, str) for s in src):
            src = "".join(src)
        if not isinstance(src, str):
            continue
        cid = cell.get("id")
        if isinstance(cid, str) and cid not in sub.by_id:
            sub.by_id[cid] = src
        cmeta = cell.get("metadata")
        marker = cmeta.get(META) if isinstance(cmeta, dict) else None
        if isinstance(marker, dict) and isinstance(marker.get("answer"), str):
            sub.by_marker[marker["answer"]] = src
        tags = cmeta.get("tags") if isinstance(cmeta, dict) else None
        sub.cells.append(
            {
                "id": cid if isinstance(cid, str) else None,
                "marker": marker["answer"]
                if isinstance(marker, dict) and isinstance(marker.get("answer"), str)
                else None,
                "tags": [t for t in tags if isinstance(t, str)] if isinstance(tags, list) else [],
                "source": src,
                "exercise": exercise,
            }
        )
    return sub


_ROLE_OR_GENERATED = {
    "exercise",
    "answer",
    "check",
    "hidden-check",
    "preamble",
    "solution-only",
    "course-generated",
    "course-forbid",
}


def solution_cells(assignment: Assignment) -> tuple[set[str], set[str]]:
    """The ids of the solution notebook's cells (the released copy's are a subset) and the
    code of its code cells that are neither answers nor checks (set-up, preamble, demos),
    whitespace-normalised: what :meth:`Submission.answer_plan` takes for the released
    notebook's own cells."""
    try:
        nb = json.loads(Path(assignment.path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return set(), set()
    cells = [c for c in nb.get("cells", []) if isinstance(c, dict)]
    ids = {c["id"] for c in cells if isinstance(c.get("id"), str)}
    sources = set()
    for c in cells:
        src = c.get("source", "")
        src = "".join(src) if isinstance(src, list) else src
        meta = c.get("metadata") if isinstance(c.get("metadata"), dict) else {}
        graded = {"answer", "check", "hidden-check", "solution-only"} & set(meta.get("tags") or [])
        if c.get("cell_type") == "code" and isinstance(src, str) and src.strip() and not graded:
            sources.add(" ".join(src.split()))
    return ids, sources


def solutions_dir(explicit: str | os.PathLike | None = None) -> Path:
    if explicit:
        return Path(explicit)
    if os.environ.get("COURSE_SOLUTIONS"):
        return Path(os.environ["COURSE_SOLUTIONS"])
    from ..tools.book import project_root

    try:
        return project_root() / "solutions"
    except FileNotFoundError:
        return Path("solutions")


class _CheckerOutOfTime(RuntimeError):
    """A checker killed for time: the submission is not sent to another one."""


class _Checker:
    """One checker process (``python -m course_lib.grading.checker``)."""

    def __init__(self):
        self.log = tempfile.TemporaryFile()
        env = dict(os.environ)
        env.setdefault("OMP_NUM_THREADS", "1")
        env["PYTHONUNBUFFERED"] = "1"
        env.setdefault("PYDEVD_DISABLE_FILE_VALIDATION", "1")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "course_lib.grading.checker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            env=env,
            start_new_session=True,
        )
        self.buf = bytearray()

    def grade(self, request: dict, timeout: float) -> dict:
        try:
            self.proc.stdin.write(json.dumps(request).encode() + b"\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            raise RuntimeError(self._died()) from None
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buf:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.close()
                raise _CheckerOutOfTime(f"the grader's checker did not finish within {timeout:.0f} s")
            ready, _, _ = select.select([fd], [], [], remaining)
            if ready:
                chunk = os.read(fd, 1 << 20)
                if not chunk:
                    raise RuntimeError(self._died())
                self.buf += chunk
        nl = self.buf.index(b"\n")
        line = bytes(self.buf[:nl])
        del self.buf[: nl + 1]
        return json.loads(line)

    def _died(self) -> str:
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        self.log.seek(0)
        tail = self.log.read()[-1500:].decode(errors="replace").strip().splitlines()
        return (
            f"the grader's checker process ended unexpectedly ({tail[-1] if tail else self.proc.returncode})"
        )

    def close(self) -> None:
        try:
            if self.proc.poll() is None:
                try:
                    self.proc.stdin.write(b'{"op": "exit"}\n')
                    self.proc.stdin.flush()
                    self.proc.wait(timeout=5)
                except (OSError, subprocess.TimeoutExpired):
                    pass
            if self.proc.poll() is None:
                os.killpg(self.proc.pid, 9)
                self.proc.wait(timeout=5)
        except (OSError, subprocess.TimeoutExpired):
            pass
        for f in (self.proc.stdin, self.proc.stdout, self.log):
            try:
                f.close()
            except OSError:
                pass


def grade_files(
    paths: list[str],
    out_dir: str | os.PathLike,
    *,
    assignment: str | None = None,
    jobs: int = 1,
    timeout: float = 300.0,
    check_timeout: float | None = None,
    solutions: str | os.PathLike | None = None,
    sandbox: str | None = None,
    limits: SandboxLimits | None = None,
    log=None,
    format: str = "course",
    resume: bool = False,
) -> list[dict]:
    """Grade ``paths`` into ``out_dir``; returns the rows of grades.csv (each graded row with
    ``exercises``: exercise id -> points, and ``exercise_max``). Raises :class:`GradeError`.
    Each report is written as soon as its submission is graded. On Ctrl-C
    (``KeyboardInterrupt``, raised again after) the checkers are stopped and grades.csv lists
    what was graded and, as not graded, the rest; ``resume=True`` keeps the report of every
    submission graded earlier from the same file under the same grading (:func:`grading_key`)
    and grades only the others.
    ``format="gradescope"`` also writes each submission's ``results.json`` (Gradescope's
    autograder format) next to its report."""
    if format not in ("course", "gradescope"):
        raise GradeError(f"unknown format {format!r}: use course or gradescope")
    log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
    sol_dir = solutions_dir(solutions)
    cache: dict[str, Assignment | None] = {}

    def get_assignment(name: str) -> Assignment | None:
        if name not in cache:
            path = sol_dir / f"{name}.ipynb"
            if not re.fullmatch(r"[A-Za-z0-9_.-]+", name) or name.startswith(".") or not path.is_file():
                cache[name] = None
            else:
                cache[name] = load_assignment(path)  # FormatError: the grader cannot run
        return cache[name]

    if assignment is not None:
        assignment = assignment.removesuffix(".ipynb")
        try:
            if get_assignment(assignment) is None:
                known = sorted(p.stem for p in sol_dir.glob("*.ipynb")) if sol_dir.is_dir() else []
                raise GradeError(
                    f"unknown assignment {assignment!r}: no {sol_dir / (assignment + '.ipynb')} (known: {', '.join(known) or 'none'})"
                )
        except FormatError as exc:
            raise GradeError(str(exc)) from None
    out = Path(out_dir)
    from ..files import check_output_path

    try:
        check_output_path(out, "--out", folder=True)  # a file named as the folder: one line naming it
    except ValueError as exc:
        raise GradeError(str(exc)) from None
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = tempfile.NamedTemporaryFile(dir=out, prefix=".write-test-", delete=True)
        probe.close()
    except OSError as exc:
        raise GradeError(f"cannot write to the output folder {out}: {exc.strerror or exc}") from None
    try:
        mode, warning = choose_mode(sandbox)
    except RuntimeError as exc:
        raise GradeError(str(exc)) from None
    if warning:
        log(f"warning: {warning}")
    limits = limits or SandboxLimits()

    limits_note = {
        "kind": "per process (rlimits; no cgroup), plus a seccomp filter against memory rlimits do not count",
        "memory_mb_per_process": limits.memory_mb,
        "processes": limits.nproc,
        "file_mb": limits.fsize_mb,
        "tmpfs_mb": limits.tmpfs_mb if mode == "bwrap" else None,
        "grader_memory_mb": limits.grader_memory_mb,
        "check_memory_mb": limits.check_memory_mb,
    }
    folders = report_folders(paths)
    csv_path = out / "grades.csv"
    rows: list[dict] = [{} for _ in paths]
    reports: list[dict] = [{} for _ in paths]
    todo = []
    not_written: list[str] = []
    interrupted = threading.Event()
    write_lock = threading.Lock()
    settings = {"timeout": timeout, "check_timeout": check_timeout, "mode": mode, "limits": vars(limits)}

    def finish(i: int) -> None:
        """Write submission ``i``'s report now (an interrupted batch keeps every finished one)."""
        row = rows[i]
        row["status"] = " ".join(clean_text(row["status"]).split())[:500]
        report = {
            "submission": str(paths[i]),
            "assignment": row["assignment"],
            "points": row["points"],
            "max_points": row["max_points"],
            "status": row["status"],
            "report_folder": folders[i],
            **{
                k: v
                for k, v in reports[i].items()
                if k not in ("submission", "assignment", "points", "max_points", "status")
            },
        }
        try:
            asg = cache.get(row["assignment"]) if row["assignment"] else None
            titles = {e.id: e.title for e in asg.exercises} if asg else {}
            write_report(out / folders[i], report, titles)
            if format == "gradescope":
                results = gradescope_results(report, titles)
                write_atomic(
                    out / folders[i] / "results.json",
                    json.dumps(results, indent=1, ensure_ascii=False) + "\n",
                )
        except Exception as exc:
            with write_lock:
                not_written.append(folders[i])
            log(
                clean_text(
                    f"{paths[i]}: the report could not be written to {out / folders[i]}: {type(exc).__name__}: {exc}"
                )
            )
            row["status"] = f"{row['status']} (report not written: {type(exc).__name__})"

    def error_row(i: int, path, name, max_points, status: str) -> None:
        base = {
            "submission": str(path),
            "assignment": name,
            "points": 0,
            "max_points": max_points,
            "status": status,
        }
        log(clean_text(f"{path}: {status}"))
        rows[i] = base
        reports[i] = {**base, "checks": [], "answers": [], "warnings": [warning] if warning else []}
        finish(i)

    reused = 0
    for i, path in enumerate(paths):
        try:
            sub = read_submission(path)
            name = assignment or sub.assignment
            base = {
                "submission": str(path),
                "assignment": name,
                "points": 0,
                "max_points": 0,
                "status": "graded",
            }
            asg, error = None, sub.error
            if name is not None:
                try:
                    asg = get_assignment(name)
                except FormatError as exc:  # only for names from metadata: --assignment was checked above
                    cache[name] = None
                    error = (
                        error
                        or f"the solution notebook of assignment {name!r} is invalid ({len(exc.problems)} problems)"
                    )
            if error is None:
                if name is None:
                    error = "cannot tell which assignment this is (no course.assignment in the notebook's metadata; pass --assignment)"
                elif asg is None:
                    error = f"unknown assignment {name!r} in the notebook's metadata"
                elif assignment is not None and sub.assignment not in (None, assignment):
                    error = f"this notebook is for assignment {sub.assignment!r}, not {assignment!r}"
            if asg is not None:
                base["max_points"] = asg.max_points
            answers, plan, notes = (
                sub.answer_plan(asg, *solution_cells(asg))
                if asg is not None and error is None
                else ({}, [], {})
            )
            if error is None and not any(v is not None for v in answers.values()):
                error = f"no answer cells of {asg.name} found (submit the exercise notebook you were given, with its answer cells)"
            if error is not None:
                error_row(i, path, name, base["max_points"], f"error: {error}")
                continue
            key = {"submission_sha256": sub.sha256, "grading": grading_key(asg, settings)}
            earlier = earlier_report(out / folders[i], key) if resume else None
            if earlier is not None:
                rows[i] = {
                    **base,
                    **{k: earlier[k] for k in ("points", "max_points", "exercises", "exercise_max")},
                }
                reused += 1
                continue
            todo.append((i, asg, answers, {**base, **key}, plan, notes))
        except Exception as exc:
            error_row(
                i,
                path,
                assignment,
                0,
                f"error: grader failure while reading the file: {type(exc).__name__}: {exc}",
            )
    if reused:
        log(
            f"--resume: {reused} submission(s) kept from the reports already in {out} (same file, same grading)"
        )

    checkers: Queue = Queue()
    n_checkers = max(1, min(jobs, len(todo)))
    created: list[_Checker] = []
    lock = threading.Lock()
    if todo:  # prove the sandbox runs a known-good answer before anyone's code is graded
        first = _Checker()
        try:
            reply = first.grade({"op": "preflight", "mode": mode, "limits": vars(limits)}, PREFLIGHT_TIMEOUT)
        except (RuntimeError, ValueError) as exc:
            reply = {"ok": False, "error": str(exc)}
        except KeyboardInterrupt:
            first.close()
            raise
        if not reply.get("ok"):
            first.close()
            raise GradeError(
                f"nothing was graded: {clean_text(reply.get('error') or 'the preflight failed')}"
            )
        created.append(first)
        checkers.put(first)

    def take_checker() -> _Checker | None:
        with lock:
            if interrupted.is_set():
                return None
            if checkers.empty() and len(created) < n_checkers:
                c = _Checker()
                created.append(c)
                return c
        return checkers.get()  # None after an interruption

    def grade_one(item):
        i, asg, answers, base, plan, notes = item
        request = {
            "op": "grade",
            "solution": str(asg.path),
            "answers": answers,
            "cells": plan,
            "notes": notes,
            "mode": mode,
            "timeout": timeout,
            "check_timeout": check_timeout,
            "limits": vars(limits),
        }
        reply, err = None, None
        for attempt in range(2):
            checker = take_checker()
            if checker is None:
                return
            try:
                reply = checker.grade(request, timeout + CHECKER_SLACK)
            except (RuntimeError, ValueError) as exc:  # ValueError: a reply that is not JSON
                err = str(exc)
                checker.close()
                with lock:
                    if checker in created:
                        created.remove(checker)
                if isinstance(exc, _CheckerOutOfTime):  # killed for time: never again for the same submission
                    break
                continue
            checkers.put(checker)
            break
        if interrupted.is_set():  # its checker was stopped: not graded, no report
            return
        if reply is not None and reply.get("ok"):
            result = reply["result"]
            per_ex: dict[str, float] = {e.id: 0 for e in asg.exercises}
            per_max: dict[str, float] = {e.id: e.points for e in asg.exercises}
            for c in result["checks"]:
                per_ex[c["exercise"]] = per_ex.get(c["exercise"], 0) + c["points"]
            row = {
                **base,
                "points": result["points"],
                "max_points": result["max_points"],
                "exercises": per_ex,
                "exercise_max": per_max,
            }
            report = {**row, **result, "sandbox": mode, "limits": limits_note}
            report["warnings"] = ([warning] if warning else []) + result["warnings"]
            report.pop("sandbox_starts", None)
        else:
            reason = (reply or {}).get("error") or err or "unknown grader failure"
            row = {**base, "status": f"error: grader failure: {reason}"}
            report = {**row, "checks": [], "answers": [], "warnings": [warning] if warning else []}
        rows[i] = row
        reports[i] = report
        finish(i)
        log(
            clean_text(
                f"{base['submission']}: {format_points(row['points'])}/{format_points(row['max_points'])} {row['status']}"
            )
        )

    def grade_safely(item):
        try:
            grade_one(item)
        except Exception as exc:
            if interrupted.is_set():
                return
            i, base = item[0], item[3]
            error_row(
                i,
                base["submission"],
                base["assignment"],
                base["max_points"],
                f"error: grader failure: {type(exc).__name__}: {exc}",
            )

    pool = ThreadPoolExecutor(max_workers=n_checkers)
    try:
        for future in [pool.submit(grade_safely, item) for item in todo]:
            future.result()
    except KeyboardInterrupt:  # Ctrl-C: stop the checkers, keep what was graded, write the gradebook
        interrupted.set()
        pool.shutdown(wait=False, cancel_futures=True)
        with lock:
            stopping = list(created)
        for c in stopping:
            c.close()
        for _ in range(n_checkers):
            checkers.put(None)
    finally:
        pool.shutdown(wait=True)
        for c in created:
            c.close()

    pending = {item[0]: item[3] for item in todo}
    missing = [i for i, row in enumerate(rows) if not row]
    for i in missing:  # interrupted before it was graded: a row that says so, no report
        rows[i] = {
            **pending[i],
            "status": "not graded: the batch was interrupted (run the same command with --resume)",
        }
    try:
        write_grades_csv(csv_path, rows)
    except Exception as exc:
        raise GradeError(
            f"grades.csv was NOT written ({type(exc).__name__}: {exc}); the reports are in {out}"
        ) from None
    if not_written:
        log(f"warning: {len(not_written)} report(s) could not be written: {', '.join(not_written[:10])}")
    others = sorted(
        p.name
        for p in out.iterdir()
        if p.is_dir() and (p / "report.json").is_file() and p.name not in folders
    )
    if others:
        log(
            f"note: {len(others)} report folder(s) in {out} are not from this batch (an earlier run's; grades.csv "
            f"lists this batch only): {', '.join(others[:5])}{' ...' if len(others) > 5 else ''}"
        )
    if interrupted.is_set():
        log(
            f"interrupted: {len(paths) - len(missing)} of {len(paths)} submission(s) have their report; grades.csv "
            "lists the rest as not graded. The same command with --resume grades only those."
        )
        raise KeyboardInterrupt
    summary = exercise_summary(rows)
    if summary:
        log("per exercise (graded submissions):\n  " + "\n  ".join(summary))
    return rows


def grading_key(asg: Assignment, settings: dict) -> str:
    """What decides a submission's grade besides its file: the solution notebook, the
    course_lib code that grades it and the limits. A report written under another key is
    never reused by ``--resume``."""
    from ..hashing import files_hash, library_hash

    solution = files_hash([("solution", Path(asg.path))])
    return hashlib.sha256(
        json.dumps([solution, library_hash(), settings], sort_keys=True).encode()
    ).hexdigest()
