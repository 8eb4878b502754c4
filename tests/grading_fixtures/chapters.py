"""One chapter's graded exercises as its tests use them, for any chapter (``Chapter("03_bert")``):
the tagged cells of a notebook, the reference answers, submissions made from the released
notebook, the release check, and one ``course grade`` batch. (cases.py builds chapter 02's
submissions for the sandbox and attack tests.)"""

from __future__ import annotations

import ast
import contextlib
import csv
import importlib
import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from course_lib.grading.release import release
from course_lib.tools.notebooks import check_notebook

ROOT = Path(__file__).resolve().parents[2]


def tagged_cells(nb: dict, tag: str) -> list[dict]:
    """The cells of the notebook ``nb`` that carry ``tag``, in order."""
    return [c for c in nb["cells"] if tag in c.get("metadata", {}).get("tags", [])]


def cell_source(cell: dict) -> str:
    return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]


def answer_sources(path: Path) -> dict[str, str]:
    """The answer cells of the notebook at ``path``: cell id -> source."""
    return {c["id"]: cell_source(c) for c in tagged_cells(json.loads(path.read_text()), "answer")}


@dataclass(frozen=True)
class Chapter:
    """A chapter's solution notebook and its released exercise notebook."""

    name: str  # e.g. "03_bert"

    @property
    def solution(self) -> Path:
        return ROOT / "solutions" / f"{self.name}.ipynb"

    @property
    def exercise(self) -> Path:
        return ROOT / "exercises" / f"{self.name}.ipynb"

    def reference(self) -> dict:
        """The preamble and the reference answers, executed."""
        nb = json.loads(self.solution.read_text())
        ns: dict = {}
        for cell in tagged_cells(nb, "preamble") + tagged_cells(nb, "answer"):
            exec(cell_source(cell), ns)
        return ns

    def submission(self, folder: Path, name: str, answers: dict[str, str], base: str = "solution") -> Path:
        """``folder/name.ipynb``: the released notebook with the answer cells of ``answers`` (cell
        id -> source); the other answer cells are the solution's (``base="solution"``) or stay
        stubs (``base="stub"``)."""
        nb = json.loads(self.exercise.read_text())
        sources = answer_sources(self.solution) if base == "solution" else {}
        sources.update(answers)
        for cell in nb["cells"]:
            if cell.get("id") in sources:
                cell["source"] = sources[cell["id"]]
        path = folder / f"{name}.ipynb"
        path.write_text(json.dumps(nb, indent=1))
        return path

    def submissions(
        self, folder: Path, partial: dict[str, str], rewritten: dict[str, str], one_exercise: dict[str, str]
    ) -> dict[str, Path]:
        """The solution, the stub, the solution with the ``partial`` and with the ``rewritten``
        answers, and the stub with the ``one_exercise`` answers (name -> notebook)."""
        return {
            "solution": self.solution,
            "stub": self.exercise,
            "partial": self.submission(folder, "partial", partial),
            "rewritten": self.submission(folder, "rewritten", rewritten),
            "one_exercise": self.submission(folder, "one_exercise", one_exercise, base="stub"),
        }

    def assert_released(self) -> None:
        """The released notebook is up to date and both notebooks are valid; the released one
        holds no line of a hidden check (other than the visible checks' lines) and no statement
        of an answer's body (the docstrings excepted)."""
        target, fresh = release(self.solution, self.exercise.parent, check=True)
        assert fresh, f"exercises/{self.name}.ipynb is out of date: run `course release {self.name}`"
        assert check_notebook(self.solution) == [] and check_notebook(self.exercise) == []
        released = {
            ln.strip()
            for c in json.loads(self.exercise.read_text())["cells"]
            for ln in cell_source(c).splitlines()
        }
        sol = json.loads(self.solution.read_text())
        visible = {ln.strip() for c in tagged_cells(sol, "check") for ln in cell_source(c).splitlines()}
        for cell in tagged_cells(sol, "hidden-check"):
            for line in cell_source(cell).splitlines():
                if len(line.strip()) > 30 and line.strip() not in visible:
                    assert line.strip() not in released, line
        for cell in tagged_cells(sol, "answer"):
            src = cell_source(cell)
            for fn in ast.parse(src).body:
                body = fn.body[1:] if ast.get_docstring(fn) else fn.body
                for stmt in body:
                    first = ast.get_source_segment(src, stmt).splitlines()[0].strip()
                    assert first not in released, first

    def grade_cases(
        self,
        tmp_path_factory,
        partial: dict[str, str],
        rewritten: dict[str, str],
        one_exercise: dict[str, str],
        gaming: dict[str, tuple[dict[str, str], set]] | None = None,
    ) -> dict[str, tuple[dict, dict, Path]]:
        """One ``course grade`` batch over :meth:`submissions` and the ``gaming`` answers
        (name -> (answers on the stub, the checks they should pass)): name -> (row, report,
        notebook), as :meth:`grade`."""
        folder, out = (
            tmp_path_factory.mktemp(f"subs{self.name[:2]}"),
            tmp_path_factory.mktemp(f"grades{self.name[:2]}"),
        )
        subs = self.submissions(folder, partial, rewritten, one_exercise)
        for name, (answers, _) in (gaming or {}).items():
            subs[name] = self.submission(folder, name, answers, base="stub")
        return self.grade(subs, out)

    @staticmethod
    def assert_points(
        graded: dict, name: str, points: int, failing: set, all_checks: list[str], max_points: int
    ) -> None:
        """Submission ``name`` failed exactly the checks ``failing`` and got ``points`` of
        ``max_points``, in its row of grades.csv and in its report."""
        row, rep, _ = graded[name]
        got = {c["id"]: c["passed"] for c in rep["checks"]}
        assert got == {c: c not in failing for c in all_checks}, {
            c["id"]: c["message"] for c in rep["checks"]
        }
        assert row["status"] == "graded" and row["max_points"] == str(max_points)
        assert int(row["points"]) == points == rep["points"]

    def home_verdicts(self, answers: dict[str, str], *, forbid: bool = True) -> dict[str, bool]:
        """The released notebook as a student runs it, in one namespace: its ``course-forbid``
        cell (if any; skipped with ``forbid=False``), the preamble, the answer cells (``answers``:
        cell id -> source; the others as released), then each visible check cell: check id -> passed."""
        import torch

        nb = json.loads(self.exercise.read_text())
        ns: dict = {"__name__": "__main__"}
        out = {}
        with forbidden_at_home(nb, ns) if forbid else contextlib.nullcontext():
            for cell in tagged_cells(nb, "preamble"):
                exec(compile(cell_source(cell), "<preamble>", "exec"), ns)
            for cell in tagged_cells(nb, "answer"):
                try:
                    exec(
                        compile(answers.get(cell["id"], cell_source(cell)), f"<answer {cell['id']}>", "exec"),
                        ns,
                    )
                except Exception:
                    pass
            for i, cell in enumerate(tagged_cells(nb, "check")):
                torch.manual_seed(2000 + i)
                try:
                    exec(compile(cell_source(cell), f"<check cell {i}>", "exec"), ns)
                    out[cell["metadata"]["course"]["id"]] = True
                except Exception:
                    out[cell["metadata"]["course"]["id"]] = False
        return out

    def assert_texts(self) -> None:
        """The released notebook's introduction states the number of exercises and points of
        the assignment's metadata, what answers may use, and the grader's limits (the answer
        cell's and each check's time limit, the notebook's size), with the grader's numbers
        (a student's review found the answer cell's given as 10 s, the checks' limit, where
        the grader allows ANSWER_CELL_TIMEOUT)."""
        from course_lib.grading.format import load_assignment
        from course_lib.grading.grade import MAX_NOTEBOOK_BYTES

        a = load_assignment(self.solution)
        words = "zero one two three four five six seven eight nine ten".split()
        intro = " ".join(cell_source(json.loads(self.exercise.read_text())["cells"][0]).split())
        assert (
            f"{words[len(a.exercises)].capitalize()} graded exercises ({a.max_points:g} points)" in intro
        ), intro
        from course_lib.grading.checker import ANSWER_CELL_TIMEOUT

        timeout = max(c.timeout for c in a.checks)
        assert f"Each answer cell may run for {ANSWER_CELL_TIMEOUT:g} s (then it is interrupted" in intro, (
            intro
        )
        assert (
            f"each check within {timeout:g} s" in intro
            and f"at most {MAX_NOTEBOOK_BYTES // 2**20} MB" in intro
        ), intro
        assert "**What your answers may use.** torch" in intro and "Not course_lib" in intro, intro
        assert "points) (" not in intro, intro
        for e in a.exercises:  # each exercise's header gives its points
            header = next(
                cell_source(c)
                for c in tagged_cells(json.loads(self.exercise.read_text()), "exercise")
                if c["metadata"]["course"]["id"] == e.id
            )
            assert f"({e.points:g} point" in header.splitlines()[0], header.splitlines()[0]

    def assert_home_verdicts(self, graded: dict) -> None:
        """Every graded submission's visible checks pass or fail at home as in the grader. A
        check whose points the grader withheld because the exercise's functions worked on none
        of the inputs drawn for the submission (``gated``: a lookup table of the published
        inputs) passed on those inputs, as at home."""
        for name, (_, rep, path) in graded.items():
            home = self.home_verdicts(answer_sources(path))
            grader = {c["id"]: c["passed"] or bool(c.get("gated")) for c in rep["checks"] if not c["hidden"]}
            assert home == grader, (name, home, grader)

    @staticmethod
    def grade(subs: dict[str, Path], out: Path) -> dict[str, tuple[dict, dict, Path]]:
        """``course grade`` on ``subs`` (name -> notebook) with two jobs, in a subprocess:
        name -> (its row of grades.csv, its report.json, the notebook)."""
        cmd = [
            sys.executable,
            "-m",
            "course_lib.cli",
            "grade",
            *map(str, subs.values()),
            "--out",
            str(out),
            "--jobs",
            "2",
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        assert proc.returncode == 0, proc.stderr[-3000:]
        with open(out / "grades.csv", newline="") as fh:
            rows = {Path(r["submission"]).resolve(): r for r in csv.DictReader(fh)}
        reports = {}
        for name, path in subs.items():
            row = rows[path.resolve()]
            folder = next(
                p
                for p in out.iterdir()
                if p.is_dir()
                and json.loads((p / "report.json").read_text()).get("submission", "")
                in (str(path), str(path.resolve()))
            )
            reports[name] = (row, json.loads((folder / "report.json").read_text()), path)
        return reports


@contextlib.contextmanager
def forbidden_at_home(nb: dict, ns: dict):
    """Run a released notebook's ``course-forbid`` cell in ``ns`` (as the student's kernel
    does: the functions the grader turns off raise there too) and put the functions back
    afterwards (the test process goes on)."""
    saved = []
    for dotted in nb["metadata"].get("course", {}).get("forbid", []):
        owner, attr = resolve_owner(dotted)
        # a class attribute is saved as stored (a staticmethod stays one: getattr would unwrap it
        # and put back a plain function, which Python then binds as a method)
        raw = (
            owner.__dict__[attr]
            if isinstance(owner, type) and attr in owner.__dict__
            else getattr(owner, attr)
        )
        saved.append((dotted, attr, raw))
    try:
        for cell in tagged_cells(nb, "course-forbid"):
            exec(compile(cell_source(cell), "<forbid>", "exec"), ns)
        yield
    finally:
        # the owner is resolved again: importing the first forbidden names can put another module
        # object under a name than the one resolved before (transformers' lazy module, imported by
        # course_lib's modules), and the forbid cell stubs the one there now
        for dotted, attr, original in saved:
            setattr(resolve_owner(dotted)[0], attr, original)


def resolve_owner(dotted: str):
    """``(owner, attribute)`` of a forbidden name as ``forbid`` resolves it: the longest prefix
    that imports is the module, the rest are attributes (``pkg.mod.Class.method``)."""
    parts = dotted.split(".")
    for i in range(len(parts) - 1, 0, -1):
        try:
            owner = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for attr in parts[i:-1]:
            owner = getattr(owner, attr)
        return owner, parts[-1]
    raise ImportError(dotted)


def forbid_gaps(forbid) -> list[str]:
    """What a forbid list misses: names that resolve to nothing, and for every forbidden
    object each other module attribute bound to it (an alias a student could import instead)
    in course_lib (all its modules) and in the other packages the list names."""
    import pkgutil
    import types

    import course_lib

    for info in pkgutil.walk_packages(course_lib.__path__, "course_lib."):
        if "__main__" not in info.name and ".grading" not in info.name:
            with contextlib.suppress(Exception):
                importlib.import_module(info.name)
    # the subpackages the list reaches into outside course_lib, imported whole, so the check does
    # not depend on what the test session happened to import before (an alias in a module nobody
    # imported yet is an alias all the same)
    for package in sorted({d.rsplit(".", 2)[0] for d in forbid if not d.startswith("course_lib.")}):
        if package.count(".") < 1:
            continue
        with contextlib.suppress(Exception):
            top = importlib.import_module(package)
            for info in pkgutil.walk_packages(
                getattr(top, "__path__", []), package + ".", onerror=lambda _: None
            ):
                if ".tests" in info.name or ".test_" in info.name or "conftest" in info.name:
                    continue  # packages' own tests (some skip themselves on import)
                try:
                    importlib.import_module(info.name)
                except Exception:  # an optional dependency missing
                    continue
    problems, objects = [], {}
    for dotted in forbid:
        try:
            owner, attr = resolve_owner(dotted)
            obj = owner.__dict__[attr] if isinstance(owner, type) else getattr(owner, attr)
        except (ImportError, AttributeError, KeyError):
            problems.append(f"{dotted}: names nothing")
            continue
        if not callable(obj) and not isinstance(obj, staticmethod):
            problems.append(f"{dotted}: not a function or class")
        objects.setdefault(id(obj), obj)
    roots = {d.split(".")[0] for d in forbid} | {"course_lib"}
    listed = set(forbid)
    for name, module in list(sys.modules.items()):
        if not isinstance(module, types.ModuleType) or name.split(".")[0] not in roots or ".grading" in name:
            continue
        for attr, value in list(vars(module).items()):
            if id(value) in objects and value is objects[id(value)] and f"{name}.{attr}" not in listed:
                problems.append(f"{name}.{attr}: an alias of a forbidden function that is not forbidden")
    return problems


def forbid_rule_tests(chapter: Chapter, must_forbid, routes: dict, *, route_works=None):
    """The two rule tests every chapter's grading module shares; assign them to ``test_`` names:

        test_forbid_list, test_forbidden_route = forbid_rule_tests(CHAPTER, MUST_FORBID, ROUTES)

    ``routes``: name -> (answer cell, an answer that hands the job to a forbidden function, its
    visible check). ``route_works(route, source)`` checks that a route really does the job with
    nothing forbidden (default: its visible check passes at home without the forbid cell).
    """
    import pytest

    from course_lib.grading.format import load_assignment

    def test_forbid_list_covers_every_alias_and_the_texts_follow_the_metadata():
        """The routes the held-out attacks found are forbidden, under every module path that holds
        the same object (so a re-export cannot pass at home and fail in the grader); the released
        notebook forbids the same list, and its introduction states the metadata's counts and
        points, the rules and the grader's limits."""
        a = load_assignment(chapter.solution)
        assert set(must_forbid) <= set(a.forbid)
        assert forbid_gaps(a.forbid) == []
        assert json.loads(chapter.exercise.read_text())["metadata"]["course"]["forbid"] == list(a.forbid)
        chapter.assert_texts()

    @pytest.mark.parametrize("route", list(routes))
    def test_a_forbidden_route_fails_at_home_as_in_the_grader(route):
        """An answer that calls a forbidden function fails its visible check at home too (in the
        grader course_lib cannot be imported and the other names are turned off the same way)."""
        cell, source, check = routes[route]
        if route_works is None:  # the route works (nothing forbidden, course_lib use not flagged)...
            from unittest import mock

            import course_lib.grading.checks as checks

            with mock.patch.object(checks, "course_lib_use", lambda fn, _seen=None: None):
                assert chapter.home_verdicts({cell: source}, forbid=False)[check] is True, route
        else:
            route_works(route, source)
        home = chapter.home_verdicts({cell: source})
        assert home[check] is False, (route, home)  # ...until its function is turned off

    return (
        test_forbid_list_covers_every_alias_and_the_texts_follow_the_metadata,
        test_a_forbidden_route_fails_at_home_as_in_the_grader,
    )


# --- a lookup table: the visible checks' published inputs -> the reference's results ----------

_LOOKUP_HELPERS = """
import base64 as _b64
import pickle as _pickle

import torch as _torch


def _k(v):
    if isinstance(v, _torch.Tensor):
        return ("T", str(v.dtype), tuple(v.shape), repr(v.tolist()))
    if isinstance(v, (list, tuple)):
        return ("L",) + tuple(_k(x) for x in v)
    if isinstance(v, dict):
        return ("D",) + tuple(sorted((str(a), _k(b)) for a, b in v.items()))
    return repr(v)


_TABLE = _pickle.loads(_b64.b64decode("{blob}"))


def _look(name, args, kwargs):
    entry = _TABLE.get((name, _k(list(args)), _k(dict(kwargs))))
    if entry is None:
        raise ValueError("not in my table")  # every error check expects a ValueError anyway
    if entry[0] == "raise":
        raise ValueError(entry[1])
    return entry[1]
"""


def lookup_table_answers(chapter: Chapter) -> dict[str, str]:
    """Answer cells that know nothing but the results of the calls the visible checks make on
    their published inputs (recorded on the reference answers): the trick "every point needs
    a working function" is about. Any other call raises ValueError."""
    import base64
    import pickle
    import random

    import torch

    from course_lib.grading.checker import Reference
    from course_lib.grading.format import load_assignment

    assignment = load_assignment(chapter.solution)
    reference = Reference(assignment)
    helpers: dict = {}
    exec(_LOOKUP_HELPERS.replace('_TABLE = _pickle.loads(_b64.b64decode("{blob}"))', ""), helpers)
    key = helpers["_k"]
    table: dict = {}

    def recorder(name, fn):
        def call(*args, **kwargs):
            k = (name, key(list(args)), key(dict(kwargs)))
            try:
                value = fn(*args, **kwargs)
            except Exception as exc:
                table[k] = ("raise", str(exc))
                raise
            table[k] = ("value", value)
            return value

        return call

    for check in assignment.checks:
        if check.hidden:
            continue
        ns = dict(reference.base)
        for exercise in assignment.exercises:
            for name in exercise.functions:
                fn = reference.functions[name]
                ns[name] = recorder(name, fn) if exercise.id == check.exercise else fn
        random.seed(0)
        torch.manual_seed(0)
        exec(compile(check.source, f"<check {check.id}>", "exec"), ns)
    blob = base64.b64encode(pickle.dumps(table)).decode()
    head = _LOOKUP_HELPERS.replace("{blob}", blob)
    answers = {}
    for answer in assignment.answers:
        body = "".join(
            f"\n\ndef {name}(*args, **kwargs):\n    return _look({name!r}, args, kwargs)\n"
            for name in answer.functions
        )
        answers[answer.key] = head + body
    return answers
