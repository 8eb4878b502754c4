"""``course release``: make the students' ``exercises/NN_topic.ipynb`` from ``solutions/NN_topic.ipynb``.

The output is a pure function of the solution notebook (same input, same bytes):

* answer cells become stubs: their imports, and each public function's signature and
  docstring with a body that raises ``NotImplementedError`` (or the cell's explicit
  ``course.stub``);
* hidden checks and ``solution-only`` cells are removed;
* all outputs and execution counts are cleared; cell metadata keeps only tags and the
  ``course`` entry (answer cells get ``course.answer``, the key the grader looks for);
* a note on how the notebook is graded is inserted after the set-up cell.
"""

from __future__ import annotations

import ast
import copy
import json
import re
import sys
from pathlib import Path

from .format import (
    ANSWER_TAG,
    GENERATED_TAG,
    HIDDEN_CHECK_TAG,
    META,
    SOLUTION_ONLY_TAG,
    Assignment,
    FormatError,
    cell_source,
    parse_assignment,
    read_notebook,
)

__all__ = ["make_stub", "release_notebook", "release", "GRADING_NOTE"]

GRADING_NOTE = """\
**How this notebook is graded.** Each exercise has answer cells (tagged `answer`, with a
`raise NotImplementedError`): replace the stubs there with your code, keeping the function
names and signatures. The grader runs the answer cells and the code cells you add (a
helper or an import in a cell of its own), in notebook order; the notebook's own other
cells (set-up, demos, checks) are ignored, and so are the outputs you save. Your
functions may use `torch` and the Python standard library, not `course_lib`{forbid}. The check cells below each answer are the
visible checks: run them to test your work (or run `pytest --nbval-lax` on this
notebook). Each compares your results with the reference solution's on its inputs, as
the grader does, so a visible check passes here exactly when it passes in the grader.
The grader adds hidden checks on inputs you have not seen (other sizes, masks and
padding). Don't change your functions' arguments in place: the checks see it."""


FORBID_TAG = "course-forbid"
FORBID_CELL = """\
# The grader turns these functions off for your answers. This cell turns them off here too,
# so that the checks below give the grader's verdict. (Written by `course release`.)
from course_lib.grading.sandbox_worker import forbid

for name in {names}:
    forbid(name)"""


def _function_stub(node: ast.FunctionDef, lines: list[str], message: str) -> list[str]:
    first = (node.decorator_list[0].lineno if node.decorator_list else node.lineno) - 1
    body0 = node.body[0]
    indent = " " * body0.col_offset
    has_doc = (
        isinstance(body0, ast.Expr)
        and isinstance(getattr(body0, "value", None), ast.Constant)
        and isinstance(body0.value.value, str)
    )
    if body0.lineno == node.lineno:  # one-line def: rebuild the header
        bare = copy.deepcopy(node)
        bare.body = [ast.Pass()]
        header = ast.unparse(bare).splitlines()
        header = [h for h in header if h.strip() != "pass"]
        return header + [f"    raise NotImplementedError({message!r})"]
    out = lines[first : body0.lineno - 1]
    if has_doc:
        out += lines[body0.lineno - 1 : body0.end_lineno]
    out.append(f"{indent}raise NotImplementedError({message!r})")
    return out


def make_stub(source: str, *, exercise_title: str) -> str:
    """The released form of an answer cell: imports, then each public function's
    signature and docstring with a body that raises ``NotImplementedError``."""
    tree = ast.parse(source)
    lines = source.splitlines()
    out = ["# YOUR ANSWER: replace each `raise NotImplementedError(...)` with your code."]
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            out += lines[node.lineno - 1 : node.end_lineno]
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not node.name.startswith("_"):
            if out and out[-1] != "":
                out += ["", ""] if len(out) > 1 else [""]
            message = f"exercise {exercise_title!r}: write {node.name}() here (see the instructions above)"
            out += _function_stub(node, lines, message)
    return "\n".join(out).rstrip()


def _multiline_strings(source: str) -> bool:
    import io
    import tokenize

    try:
        return any(
            tok.type == tokenize.STRING and tok.start[0] != tok.end[0]
            for tok in tokenize.generate_tokens(io.StringIO(source).readline)
        )
    except (tokenize.TokenError, SyntaxError):
        return False


# torch samplers whose numbers depend on the CPU's kernels: the vectorised normal sampler
# (AVX2/AVX-512) and the portable one (ATEN_CPU_CAPABILITY=default) give other floats for
# the same seed, so a visible check drawing its inputs with them would make calls that the
# record shipped with the exercise does not hold on another student's machine.
KERNEL_DEPENDENT_SAMPLERS = frozenset({"randn", "randn_like", "normal", "normal_", "log_normal_", "cauchy_"})


def kernel_dependent_draws(source: str) -> list[str]:
    """Names of the CPU-kernel-dependent samplers (``torch.randn`` ...) that ``source`` calls."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None
            if name in KERNEL_DEPENDENT_SAMPLERS:
                found.add(name)
    return sorted(found)


def expected_values(assignment: Assignment) -> dict[str, str]:
    """Check id -> packed expected values, for every visible check that compares with the
    reference (see :mod:`course_lib.grading.expected`). Raises :class:`FormatError` for a
    visible check that fails with the reference answers or is not deterministic."""
    from .checker import Reference
    from .expected import pack, record_check

    reference = Reference(assignment)
    out, problems = {}, []
    for check in assignment.checks:
        if check.hidden or not check.compare:
            continue
        draws = kernel_dependent_draws(check.source)
        if draws:
            problems.append(
                f"visible check {check.id!r} draws its inputs with {', '.join(draws)}: these give other numbers on "
                "other CPUs (their vectorised kernels differ), so the expected values shipped with the exercise "
                "would not be found on a student's machine. Use inputs that are the same everywhere, e.g. "
                "torch.randint(-8, 9, shape, generator=g) / 4, torch.rand(..., generator=g) or written values"
            )
            continue
        runs = []
        for seed in (1, 2):
            try:
                runs.append(record_check(assignment, reference, check, seed))
            except Exception as exc:
                problems.append(
                    f"visible check {check.id!r} fails with the reference answers: {type(exc).__name__}: {exc}"
                )
                break
        if len(runs) < 2:
            continue
        (calls, conflicts), (calls2, _) = runs
        if conflicts or calls != calls2:
            problems.append(
                f"visible check {check.id!r} makes different calls (or gets different results) on two runs: a visible "
                "check runs the same at home and in the grader, so it may not draw from the global RNG (use "
                "torch.Generator().manual_seed(...)) and the reference answer must be deterministic"
            )
            continue
        functions = list(assignment.exercise(check.exercise).functions)
        record = {
            "check": check.id,
            "functions": functions,
            "rtol": check.rtol,
            "atol": check.atol,
            "calls": calls,
        }
        if check.exact_dtype:  # only then: the records of other checks stay byte-identical
            record["exact_dtype"] = True
        out[check.id] = pack(record)
    if problems:
        raise FormatError(str(assignment.path), problems)
    return out


def _visible_check_source(check, title: str, blob: str | None) -> str:
    """The released form of a visible check: its code inside :class:`~course_lib.grading.checks.visible_check`."""
    lines = [
        f"# Check {check.id!r}: run this cell to test your answer. Each call is compared with the reference",
        "# solution's result on the same inputs (packed below), as the grader does.",
        "from course_lib.grading.checks import visible_check",
        "",
    ]
    if blob is None:
        lines.append(f"with visible_check({check.id!r}, {title!r}, globals()):")
    else:
        lines.append(f"with visible_check({check.id!r}, {title!r}, globals(), expected=(")
        lines += [f"    {blob[i : i + 96]!r}" for i in range(0, len(blob), 96)]
        lines.append(")):")
    body = check.source.rstrip("\n").splitlines()
    lines += ["    " + ln if ln.strip() else "" for ln in body]
    return "\n".join(lines)


def _clean_metadata(cell: dict, extra: dict | None = None) -> dict:
    meta = cell.get("metadata", {})
    out = {}
    if meta.get("tags"):
        out["tags"] = list(meta["tags"])
    course = dict(meta.get(META, {})) if isinstance(meta.get(META), dict) else {}
    course.pop("stub", None)
    if extra:
        course.update(extra)
    if course:
        out[META] = course
    return out


def release_notebook(nb: dict, path: Path | str) -> tuple[dict, Assignment]:
    """Validate the solution notebook ``nb`` and return ``(exercise notebook, assignment)``."""
    assignment = parse_assignment(nb, path)
    answers = {a.key: a for a in assignment.answers}
    titles = {e.id: e.title for e in assignment.exercises}
    visible = {c.cell_id: c for c in assignment.checks if not c.hidden}
    bad = [c.id for c in visible.values() if _multiline_strings(c.source)]
    if bad:
        raise FormatError(
            str(path),
            [
                f"visible check {b!r} has a multi-line string: the release indents the check's code"
                for b in bad
            ],
        )
    blobs = expected_values(assignment)
    cells = []
    setup_seen = False
    for cell in nb["cells"]:
        tags = cell.get("metadata", {}).get("tags", []) or []
        if HIDDEN_CHECK_TAG in tags or SOLUTION_ONLY_TAG in tags or GENERATED_TAG in tags:
            continue
        new = {
            "cell_type": cell["cell_type"],
            "id": cell.get("id"),
            "metadata": _clean_metadata(cell),
            "source": cell_source(cell),
        }
        if new["id"] is None:
            del new["id"]
        if cell["cell_type"] == "code":
            new["execution_count"] = None
            new["outputs"] = []
            if cell.get("id") in visible:
                check = visible[cell["id"]]
                new["source"] = _visible_check_source(check, titles[check.exercise], blobs.get(check.id))
            if ANSWER_TAG in tags:
                a = answers[cell["id"]]
                new["source"] = (
                    a.stub if a.stub is not None else make_stub(a.source, exercise_title=titles[a.exercise])
                )
                new["metadata"] = _clean_metadata(cell, {"answer": a.key, "exercise": a.exercise})
        elif cell["cell_type"] in ("markdown", "raw") and cell.get("attachments"):
            new["attachments"] = copy.deepcopy(cell["attachments"])
        cells.append(new)
        if cell["cell_type"] == "code" and not setup_seen:
            setup_seen = True
            forbid = ""
            if assignment.forbid:
                forbid = ", nor " + ", ".join(f"`{f}`" for f in assignment.forbid)
                forbid += " (the next cell turns them off in this notebook too, as the grader does)"
            cells.append(
                {
                    "cell_type": "markdown",
                    "id": "course-grading-note",
                    "metadata": {"tags": [GENERATED_TAG]},
                    "source": GRADING_NOTE.format(forbid=forbid),
                }
            )
            if assignment.forbid:
                cells.append(
                    {
                        "cell_type": "code",
                        "execution_count": None,
                        "id": "course-forbid",
                        "metadata": {"tags": [GENERATED_TAG, FORBID_TAG]},
                        "outputs": [],
                        "source": FORBID_CELL.format(names=json.dumps(list(assignment.forbid))),
                    }
                )
    meta = nb.get("metadata", {})
    course = {"assignment": assignment.name, "title": assignment.title}
    if assignment.forbid:
        course["forbid"] = list(assignment.forbid)
    new_meta = {META: course}
    if "kernelspec" in meta:
        new_meta["kernelspec"] = meta["kernelspec"]
    lang = meta.get("language_info", {}).get("name")
    if lang:
        new_meta["language_info"] = {"name": lang}
    out = {
        "cells": cells,
        "metadata": new_meta,
        "nbformat": 4,
        "nbformat_minor": max(5, int(nb.get("nbformat_minor", 5))),
    }
    return out, assignment


def dumps_notebook(nb: dict) -> str:
    """Deterministic text, formatted as Jupyter writes it (nbformat: indent 1, sorted keys, line lists)."""
    import nbformat

    node = nbformat.from_dict(nb)
    nbformat.validate(node)
    text = nbformat.writes(node, version=4)
    return text if text.endswith("\n") else text + "\n"


_BLOB = re.compile(r"expected=\(\n((?:    '[A-Za-z0-9+/=]*'\n)+)\)\):")


def _blobs(text: str) -> tuple[str, list[dict]]:
    from .expected import unpack

    found = []

    def take(m):
        found.append(unpack("".join(re.findall(r"'([^']*)'", m.group(1)))))
        return "expected=<packed>):"

    nb = json.loads(text)
    for cell in nb.get("cells", []):
        src = cell_source(cell)
        cell["source"] = _BLOB.sub(take, src)
    return json.dumps(nb, sort_keys=True), found


def _equivalent(current: str, new: str) -> bool:
    """The same release up to the last float digits of the packed expected values (a reference
    computed on another CPU may round differently: float32 results of one matmul differ by a
    few units in the last place between AVX2 and AVX-512 kernels). Two values are the same
    when they agree within a tenth of the check's own tolerances (``atol``/``rtol``, which
    the home verdict uses), and never looser than ``rtol=1e-6, atol=1e-7`` without them."""
    from .sandbox_worker import decode

    try:
        (a, blobs_a), (b, blobs_b) = _blobs(current), _blobs(new)
    except (ValueError, KeyError, TypeError):
        return False
    if a != b or len(blobs_a) != len(blobs_b):
        return False
    from .compare import compare_values

    def same(ex: dict, ey: dict, rtol: float, atol: float) -> bool:
        if "value" not in ex or "value" not in ey:
            return ex == ey
        return (
            compare_values(decode(ex["value"]), decode(ey["value"]), rtol=rtol, atol=atol, hidden=True)
            is None
        )

    for x, y in zip(blobs_a, blobs_b):
        if {k: v for k, v in x.items() if k != "calls"} != {k: v for k, v in y.items() if k != "calls"}:
            return False
        # Calls are keyed by a digest of their arguments. Random inputs drawn with another CPU's
        # kernels (torch.randn's vectorised paths) are other numbers, so their calls cannot be
        # compared here: compare the calls made on the same arguments, and the number of calls.
        if len(x["calls"]) != len(y["calls"]):
            return False
        rtol = max(1e-6, float(x.get("rtol") or 0.0) / 10)
        atol = max(1e-7, float(x.get("atol") or 0.0) / 10)
        for key in set(x["calls"]) & set(y["calls"]):
            if not same(x["calls"][key], y["calls"][key], rtol, atol):
                return False
    return True


def release(solution: Path | str, exercises_dir: Path | str, *, check: bool = False) -> tuple[Path, bool]:
    """Write (or with ``check`` only compare) the exercise notebook; returns ``(path, up_to_date)``.
    ``ValueError`` when the exercise notebook would be the solution notebook itself (an
    ``--exercises`` naming the solutions' folder: its reference answers would become stubs)."""
    solution = Path(solution)
    target = Path(exercises_dir) / solution.name
    if target.resolve() == solution.resolve():
        raise ValueError(
            f"--exercises {exercises_dir} would write the exercise notebook over its solution notebook "
            f"{solution} (the reference answers would become stubs): give the exercises' folder"
        )
    nb, _ = read_notebook(solution)
    exercise_nb, _ = release_notebook(nb, solution)
    text = dumps_notebook(exercise_nb)
    current = target.read_text(encoding="utf-8") if target.exists() else None
    if current == text or (current is not None and _equivalent(current, text)):
        return target, True
    if not check:
        from ..files import atomic_write_text

        atomic_write_text(target, text)  # (an interrupted release leaves the old notebook whole)
    return target, False


def _cmd(args) -> int:
    from ..tools.book import project_root

    try:
        root = project_root()
    except FileNotFoundError:
        root = Path.cwd()
    for option, value in (("--solutions", args.solutions), ("--exercises", args.exercises)):
        if value is not None and not str(value).strip():  # Path("") is the current folder
            print(f"course release: {option} is empty; give a folder", file=sys.stderr)
            return 2
    sol_dir = Path(args.solutions) if args.solutions else root / "solutions"
    ex_dir = Path(args.exercises) if args.exercises else root / "exercises"
    if args.all and not sol_dir.is_dir():
        print(f"course release: --solutions {sol_dir} is not a folder of solution notebooks", file=sys.stderr)
        return 2
    names = list(args.names)
    if args.all:
        names += sorted(p.stem for p in sol_dir.glob("*.ipynb"))
    if not names:
        print("course release: name the assignments (e.g. 02_transformer) or pass --all", file=sys.stderr)
        return 2
    from ..files import check_output_path

    try:
        check_output_path(ex_dir, "--exercises", folder=True)
    except ValueError as exc:
        print(f"course release: {exc}", file=sys.stderr)
        return 2
    status = 0
    for name in dict.fromkeys(names):
        path = Path(name)
        if path.suffix != ".ipynb" or not path.exists():
            path = sol_dir / f"{Path(name).stem}.ipynb"
        if not path.exists():
            print(f"course release: no solution notebook {path}", file=sys.stderr)
            status = 1
            continue
        try:
            target, fresh = release(path, ex_dir, check=args.check)
        except FormatError as exc:
            print(str(exc), file=sys.stderr)
            status = 1
            continue
        except ValueError as exc:
            print(f"course release: {exc}", file=sys.stderr)
            return 2
        if args.check:
            print(f"{target}: {'up to date' if fresh else 'OUT OF DATE (run course release)'}")
            status |= 0 if fresh else 1
        else:
            print(f"{target}: {'unchanged' if fresh else 'written'}")
    return status


def register(sub) -> None:
    p = sub.add_parser("release", help="generate the students' exercise notebooks from the solutions")
    p.add_argument("names", nargs="*", help="assignments (02_transformer) or solution notebooks")
    p.add_argument("--all", action="store_true", help="every notebook in the solutions folder")
    p.add_argument(
        "--check", action="store_true", help="write nothing; exit 1 if an exercise notebook is out of date"
    )
    p.add_argument("--solutions", help="folder of solution notebooks (default: solutions/)")
    p.add_argument("--exercises", help="folder for the exercise notebooks (default: exercises/)")
    p.set_defaults(func=_cmd)
