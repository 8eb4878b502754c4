"""Read and validate an instructor's solution notebook (the format is described in
:mod:`course_lib.grading`).

:func:`load_assignment` turns ``solutions/NN_topic.ipynb`` into an :class:`Assignment`:
the exercises, their answer cells, visible and hidden checks, points and limits. Every
problem found is reported at once in a :class:`FormatError`, each naming the cell.
"""

from __future__ import annotations

import ast
import builtins
import difflib
import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "read_notebook",
    "ROLE_TAGS",
    "EXERCISE_TAG",
    "ANSWER_TAG",
    "CHECK_TAG",
    "HIDDEN_CHECK_TAG",
    "PREAMBLE_TAG",
    "SOLUTION_ONLY_TAG",
    "GENERATED_TAG",
    "META",
    "DEFAULT_CHECK_TIMEOUT",
    "DEFAULT_RTOL",
    "DEFAULT_ATOL",
    "FormatError",
    "AnswerCell",
    "Check",
    "Exercise",
    "Assignment",
    "cell_source",
    "load_assignment",
    "parse_assignment",
]

EXERCISE_TAG = "exercise"
ANSWER_TAG = "answer"
CHECK_TAG = "check"
HIDDEN_CHECK_TAG = "hidden-check"
PREAMBLE_TAG = "preamble"
SOLUTION_ONLY_TAG = "solution-only"
GENERATED_TAG = "course-generated"
ROLE_TAGS = (EXERCISE_TAG, ANSWER_TAG, CHECK_TAG, HIDDEN_CHECK_TAG, PREAMBLE_TAG, SOLUTION_ONLY_TAG)
META = "course"  # the key of our metadata, in the notebook's and in each cell's metadata

DEFAULT_CHECK_TIMEOUT = 10.0  # seconds of wall time per check
DEFAULT_RTOL = 1e-5
DEFAULT_ATOL = 1e-5

_ID = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")
_DOTTED = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+$")


class FormatError(ValueError):
    """A solution notebook breaks the format; ``problems`` lists every problem found."""

    def __init__(self, path: str, problems: list[str]):
        self.path = path
        self.problems = problems
        super().__init__(f"{path}: {len(problems)} problem(s):\n" + "\n".join(f"  - {p}" for p in problems))


@dataclass(frozen=True)
class AnswerCell:
    key: str  # the cell id: how a submission's answer cell is found
    exercise: str
    source: str
    functions: tuple[str, ...]  # public top-level functions it defines (what checks call)
    stub: str | None  # an explicit stub from the metadata, else generated


@dataclass(frozen=True)
class Check:
    id: str
    exercise: str
    hidden: bool
    points: float
    source: str
    cell_id: str
    timeout: float
    rtol: float
    atol: float
    compare: bool  # compare every call of a student function with the reference
    exact_dtype: bool = (
        False  # metadata "dtype": "exact": tensors must have the reference's dtype, not only its kind
    )


@dataclass
class Exercise:
    id: str
    title: str
    points: float
    answers: list[AnswerCell] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)

    @property
    def functions(self) -> tuple[str, ...]:
        return tuple(name for a in self.answers for name in a.functions)


@dataclass
class Assignment:
    name: str
    title: str
    path: Path
    digest: str  # sha256 of the solution file: seeds the hidden checks' inputs
    exercises: list[Exercise]
    preamble: list[str]  # sources of the preamble cells, in order
    forbid: tuple[str, ...]
    max_points: float

    @property
    def checks(self) -> list[Check]:
        return [c for e in self.exercises for c in e.checks]

    @property
    def answers(self) -> list[AnswerCell]:
        return [a for e in self.exercises for a in e.answers]

    def exercise(self, exercise_id: str) -> Exercise:
        return next(e for e in self.exercises if e.id == exercise_id)


def cell_source(cell: dict) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else str(src)


def _tags(cell: dict) -> list[str]:
    tags = cell.get("metadata", {}).get("tags", [])
    return [t for t in tags if isinstance(t, str)] if isinstance(tags, list) else []


def _number(value, what: str, problems: list[str], where: str, *, positive: bool = True):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        problems.append(f"{where}: {what} must be a number, got {value!r}")
        return None
    if positive and value <= 0:
        problems.append(f"{where}: {what} must be positive, got {value!r}")
        return None
    return value


def _public_functions(tree: ast.Module) -> tuple[list[str], list[str]]:
    funcs, classes = [], []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not node.name.startswith("_"):
            funcs.append(node.name)
        elif isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
            classes.append(node.name)
    return funcs, classes


def _bound_names(tree: ast.AST) -> set[str]:
    """Every name the code binds anywhere (assignments, imports, defs, arguments, loops)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            names.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                names.add((alias.asname or alias.name).split(".")[0])
        elif isinstance(node, ast.ExceptHandler) and node.name:
            names.add(node.name)
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            names.update(node.names)
        elif hasattr(ast, "MatchAs") and isinstance(node, (ast.MatchAs, ast.MatchStar)) and node.name:
            names.add(node.name)
    return names


def _loaded_names(tree: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def _imported_modules(tree: ast.AST) -> list[str]:
    mods = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            mods += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            mods.append(node.module)
    return mods


def _uses_course_lib(tree: ast.AST, *, allow_grading: bool) -> bool:
    for mod in _imported_modules(tree):
        if mod == "course_lib" or mod.startswith("course_lib."):
            if allow_grading and (mod == "course_lib.grading" or mod.startswith("course_lib.grading.")):
                continue
            return True
    return False


def parse_assignment(nb: dict, path: Path | str, *, raw: bytes | None = None) -> Assignment:
    """Validate a solution notebook (already parsed JSON) and build its :class:`Assignment`."""
    from ..tools.notebooks import setup_cell_source

    path = Path(path)
    problems: list[str] = []
    if not isinstance(nb, dict) or nb.get("nbformat") != 4 or not isinstance(nb.get("cells"), list):
        raise FormatError(str(path), ["not an nbformat 4 notebook"])
    meta = nb.get("metadata", {}).get(META)
    if not isinstance(meta, dict):
        meta = {}
        problems.append(
            f'the notebook metadata has no {META!r} entry: add {{"{META}": {{"assignment": "{path.stem}"}}}}'
        )
    name = meta.get("assignment", path.stem)
    if name != path.stem:
        problems.append(
            f"metadata {META}.assignment is {name!r} but the file is {path.name}: they must agree"
        )
    title = meta.get("title", name)
    forbid = meta.get("forbid", [])
    if not isinstance(forbid, list) or not all(isinstance(f, str) and _DOTTED.match(f) for f in forbid):
        problems.append(
            f'metadata {META}.forbid must be a list of dotted names like "torch.nn.functional.softmax", got {forbid!r}'
        )
        forbid = []
    tol = meta.get("tolerance", {})
    default_rtol = _number(
        tol.get("rtol", DEFAULT_RTOL), "tolerance.rtol", problems, "notebook metadata", positive=False
    )
    default_atol = _number(
        tol.get("atol", DEFAULT_ATOL), "tolerance.atol", problems, "notebook metadata", positive=False
    )
    default_timeout = _number(
        meta.get("check_timeout", DEFAULT_CHECK_TIMEOUT), "check_timeout", problems, "notebook metadata"
    )

    code_cells = [c for c in nb["cells"] if isinstance(c, dict) and c.get("cell_type") == "code"]
    if not code_cells or cell_source(code_cells[0]).strip() != setup_cell_source().strip():
        problems.append(
            "the first code cell must be the set-up cell (course_lib.tools.notebooks.setup_cell_source())"
        )

    exercises: list[Exercise] = []
    preamble: list[str] = []
    preamble_names: set[str] = set()
    seen_cell_ids: set[str] = set()
    seen_check_ids: set[str] = set()
    pending_checks: list[tuple[Check, ast.Module, str]] = []
    current: Exercise | None = None

    for index, cell in enumerate(nb["cells"]):
        if not isinstance(cell, dict):
            problems.append(f"cell {index}: not a JSON object")
            continue
        cid = cell.get("id")
        where = f"cell {index}" + (f" (id {cid!r})" if cid else "")
        if isinstance(cid, str):
            if cid in seen_cell_ids:
                problems.append(f"{where}: duplicate cell id")
            seen_cell_ids.add(cid)
        tags = _tags(cell)
        cmeta = cell.get("metadata", {}).get(META, {})
        roles = [t for t in tags if t in ROLE_TAGS]
        for t in tags:
            if (
                t not in ROLE_TAGS
                and t not in (GENERATED_TAG,)
                and not t.startswith(("nbval-", "remove-", "remove_", "hide-", "hide_", "course-"))
            ):
                close = difflib.get_close_matches(t, ROLE_TAGS, n=1, cutoff=0.75)
                if close:
                    problems.append(f"{where}: unknown tag {t!r}; did you mean {close[0]!r}?")
        if len(roles) > 1:
            problems.append(f"{where}: a cell has one role, but it is tagged {roles}")
            continue
        role = roles[0] if roles else None
        if role is None:
            if cmeta:
                problems.append(f"{where}: has {META!r} metadata but no role tag (one of {list(ROLE_TAGS)})")
            continue
        if not isinstance(cmeta, dict):
            problems.append(f"{where}: metadata {META!r} must be an object")
            cmeta = {}
        src = cell_source(cell)
        ctype = cell.get("cell_type")

        if role == SOLUTION_ONLY_TAG:
            continue
        if role == EXERCISE_TAG:
            if ctype != "markdown":
                problems.append(
                    f"{where}: an 'exercise' cell is the exercise's markdown header (instructions), not {ctype}"
                )
            eid, etitle, epoints = cmeta.get("id"), cmeta.get("title"), cmeta.get("points")
            if not isinstance(eid, str) or not _ID.match(eid):
                problems.append(
                    f'{where}: exercise needs metadata {META}.id, a short slug like "causal-mask" (got {eid!r})'
                )
                eid = f"<exercise at cell {index}>"
            if any(e.id == eid for e in exercises):
                problems.append(f"{where}: duplicate exercise id {eid!r}")
            if not isinstance(etitle, str) or not etitle.strip():
                problems.append(f"{where}: exercise {eid!r} needs metadata {META}.title")
                etitle = eid
            epoints = _number(epoints, f"exercise {eid!r} {META}.points", problems, where)
            current = Exercise(id=eid, title=etitle, points=epoints or 0)
            exercises.append(current)
            continue
        if ctype != "code":
            problems.append(f"{where}: a {role!r} cell must be a code cell")
            continue
        try:
            tree = ast.parse(src, filename=f"<{role} {cid}>")
        except SyntaxError as exc:
            problems.append(f"{where}: {role} cell does not parse: {exc.msg} (line {exc.lineno})")
            continue
        if role == PREAMBLE_TAG:
            if _uses_course_lib(tree, allow_grading=False):
                problems.append(
                    f"{where}: a preamble cell also runs in the sandbox, where course_lib is not available: don't import it"
                )
            preamble.append(src)
            preamble_names |= _bound_names(tree)
            continue
        if current is None:
            problems.append(
                f"{where}: {role} cell before any exercise header (a markdown cell tagged 'exercise')"
            )
            continue
        if role == ANSWER_TAG:
            if not isinstance(cid, str) or not cid:
                problems.append(
                    f"{where}: answer cells need a cell id (nbformat 4.5): open and save the notebook in Jupyter"
                )
                continue
            if _uses_course_lib(tree, allow_grading=False):
                problems.append(
                    f"{where}: the reference answer imports course_lib; write the answer out (answers may not use course_lib)"
                )
            funcs, classes = _public_functions(tree)
            if classes:
                problems.append(
                    f"{where}: answer defines class(es) {classes}: graded answers are functions (checks call them with "
                    "tensors and numbers and compare the results); make a class private (_Name) or wrap it in a function"
                )
            if not funcs:
                problems.append(
                    f"{where}: answer cell defines no public top-level function for the checks to call"
                )
            stub = cmeta.get("stub")
            if stub is not None and not isinstance(stub, str):
                problems.append(f"{where}: metadata {META}.stub must be a string (the released code)")
                stub = None
            current.answers.append(
                AnswerCell(key=cid, exercise=current.id, source=src, functions=tuple(funcs), stub=stub)
            )
            continue
        # visible or hidden check
        chk_id = cmeta.get("id")
        if not isinstance(chk_id, str) or not _ID.match(chk_id):
            problems.append(f"{where}: check needs metadata {META}.id, a short slug (got {chk_id!r})")
            chk_id = f"<check at cell {index}>"
        if chk_id in seen_check_ids:
            problems.append(f"{where}: duplicate check id {chk_id!r}")
        seen_check_ids.add(chk_id)
        points = _number(
            cmeta.get("points"), f"check {chk_id!r} {META}.points", problems, where, positive=False
        )
        if points is not None and points < 0:
            problems.append(f"{where}: check {chk_id!r} {META}.points must be 0 or more, got {points!r}")
            points = None
        timeout = _number(
            cmeta.get("timeout", default_timeout or DEFAULT_CHECK_TIMEOUT), "timeout", problems, where
        )
        rtol = _number(cmeta.get("rtol", default_rtol or 0.0), "rtol", problems, where, positive=False)
        atol = _number(cmeta.get("atol", default_atol or 0.0), "atol", problems, where, positive=False)
        compare = cmeta.get("compare", True)
        if not isinstance(compare, bool):
            problems.append(f"{where}: metadata {META}.compare must be true or false")
            compare = True
        exact_dtype = cmeta.get("dtype", "kind")
        if exact_dtype not in ("kind", "exact"):
            problems.append(f'{where}: metadata {META}.dtype must be "exact" or "kind"')
        if _uses_course_lib(tree, allow_grading=True):
            problems.append(
                f"{where}: checks may import course_lib.grading helpers only (the student's copy must not hand out the answer)"
            )
        check = Check(
            id=chk_id,
            exercise=current.id,
            hidden=(role == HIDDEN_CHECK_TAG),
            points=points or 0,
            source=src,
            cell_id=cid if isinstance(cid, str) else "",
            timeout=float(timeout or DEFAULT_CHECK_TIMEOUT),
            rtol=float(rtol if rtol is not None else DEFAULT_RTOL),
            atol=float(atol if atol is not None else DEFAULT_ATOL),
            compare=compare,
            exact_dtype=exact_dtype == "exact",
        )
        current.checks.append(check)
        pending_checks.append((check, tree, where))

    all_functions = {f for e in exercises for f in e.functions}
    builtin_names = set(dir(builtins))
    for check, tree, where in pending_checks:
        exercise = next(e for e in exercises if e.id == check.exercise)
        loaded = _loaded_names(tree)
        if exercise.answers and not (loaded & set(exercise.functions)):
            problems.append(
                f"{where}: check {check.id!r} calls none of its exercise's functions {list(exercise.functions)}"
            )
        free = loaded - _bound_names(tree) - builtin_names - preamble_names - all_functions
        if free:
            problems.append(
                f"{where}: check {check.id!r} uses {sorted(free)}, which it does not define: each check runs on its own, "
                "so define its inputs inside it (or in a cell tagged 'preamble')"
            )
    seen_functions: dict[str, str] = {}
    for e in exercises:
        if not e.answers:
            problems.append(f"exercise {e.id!r}: has no answer cell (a code cell tagged 'answer')")
        if not e.checks:
            problems.append(f"exercise {e.id!r}: has no checks (code cells tagged 'check' or 'hidden-check')")
        total = sum(c.points for c in e.checks)
        if e.checks and abs(total - e.points) > 1e-9:
            problems.append(
                f"exercise {e.id!r}: its checks' points add up to {total:g}, but the exercise is worth {e.points:g}"
            )
        for f in e.functions:
            if f in seen_functions and seen_functions[f] != e.id:
                problems.append(
                    f"function {f!r} is defined by the answers of both {seen_functions[f]!r} and {e.id!r}"
                )
            seen_functions[f] = e.id
    if not exercises:
        problems.append("no exercises (markdown cells tagged 'exercise')")
    if problems:
        raise FormatError(str(path), problems)
    raw = raw if raw is not None else json.dumps(nb, sort_keys=True).encode()
    return Assignment(
        name=name,
        title=title,
        path=path,
        digest=hashlib.sha256(raw).hexdigest(),
        exercises=exercises,
        preamble=preamble,
        forbid=tuple(forbid),
        max_points=sum(e.points for e in exercises),
    )


def read_notebook(path: Path | str) -> tuple[dict, bytes]:
    """``(notebook, its bytes)`` of the file ``path``; not JSON: a :class:`FormatError`."""
    raw = Path(path).read_bytes()
    try:
        return json.loads(raw), raw
    except ValueError as exc:
        raise FormatError(str(path), [f"not valid JSON: {exc}"]) from None


def load_assignment(path: Path | str) -> Assignment:
    """Read ``path`` (a solution notebook) and validate it; raises :class:`FormatError`."""
    path = Path(path)
    nb, raw = read_notebook(path)
    return parse_assignment(nb, path, raw=raw)
