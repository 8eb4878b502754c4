"""Notebook housekeeping: the Colab set-up cell, and stored outputs only where nbval checks them.

Chapter notebooks are committed without outputs, except the cells tagged
``nbval-check-output``: nbval (lax mode) compares those cells' fresh output with the stored
one, so their output must be in the file. ``course notebooks refresh PATH...`` executes a
notebook and stores exactly those outputs; ``course notebooks check PATH...`` verifies that
a notebook follows the rules (used by the test suite). ``course notebooks setup`` rewrites the
set-up cell of every chapter, solution and exercise notebook from ``_config.yml``'s
repository URL: publishing the course means editing that one line and running it.

Chapters follow three more rules, so that they hold on every machine (the full text is in
:mod:`course_lib.claims`): an exact output check only where the output is identical
everywhere (a checked cell that prints a decimal is also tagged ``deterministic``); every
measured claim an assertion (``claim(...)`` in a cell tagged ``remove-cell``); every measured
number in the prose glued from the run (a decimal or a percentage typed in markdown must be
listed in ``metadata.course.paper_figures``). :func:`check_chapter` enforces them.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import nbformat

__all__ = [
    "CHECK_TAG",
    "SETUP_TAG",
    "repository_url",
    "setup_cell_source",
    "is_checked",
    "strip_unchecked_outputs",
    "execute_notebook",
    "refresh",
    "check_notebook",
    "check_chapter",
    "course_notebooks",
    "rewrite_setup_cells",
    "compare_executed",
    "prose_numbers",
    "register",
]

CHECK_TAG = "nbval-check-output"
DETERMINISTIC_TAG = "deterministic"  # a checked cell whose printed decimals are the same on every machine
CLAIM_TAG = "remove-cell"  # executed and tested, left out of the page: where claims live
SETUP_TAG = "course-setup"
_DEFAULT_URL = "https://github.com/your-org/pretrained-lm-course"


def repository_url(root: Path | None = None) -> str:
    """The repository URL, read from ``_config.yml`` (the one place it is set)."""
    from .book import project_root

    try:
        text = (project_root(root) / "_config.yml").read_text()
    except FileNotFoundError:
        return _DEFAULT_URL
    m = re.search(r"^repository:\s*\n(?:[ \t].*\n)*?[ \t]+url:\s*(\S+)", text, re.M)
    return m.group(1) if m else _DEFAULT_URL


def setup_cell_source(url: str | None = None) -> str:
    """The first code cell of every notebook: install course_lib where it is missing (Colab)."""
    url = url or repository_url()
    return (
        "# Set-up: on Colab (or anywhere course_lib is missing) install it from the repository.\n"
        "try:\n"
        "    import course_lib\n"
        "except ImportError:\n"
        "    import subprocess, sys\n"
        f'    subprocess.check_call([sys.executable, "-m", "pip", "install", "-q", "git+{url}"])\n'
        "    import course_lib"
    )


def is_checked(cell) -> bool:
    tags = cell.get("metadata", {}).get("tags", [])
    return cell.get("cell_type") == "code" and (
        CHECK_TAG in tags or "NBVAL_CHECK_OUTPUT" in cell.get("source", "")
    )


def strip_unchecked_outputs(nb) -> None:
    """Drop outputs and execution counts from every code cell that nbval does not check."""
    for cell in nb.cells:
        cell.metadata.pop("execution", None)  # nbclient's timestamps
        if cell.cell_type != "code":
            continue
        if is_checked(cell):
            # widget views cannot be compared: keep text only
            for out in cell.outputs:
                if "data" in out:
                    out["data"] = {k: v for k, v in out["data"].items() if k == "text/plain"}
            continue
        cell.outputs = []
        cell.execution_count = None
    nb.metadata.pop("widgets", None)


def execute_notebook(path: Path, *, timeout: int = 900):
    """Run a notebook in its own folder with the current Python; return the executed notebook."""
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    env_backup = os.environ.get("PYDEVD_DISABLE_FILE_VALIDATION")
    strict_backup = os.environ.get("COURSE_STRICT_CLAIMS")
    os.environ["PYDEVD_DISABLE_FILE_VALIDATION"] = "1"
    os.environ.setdefault("COURSE_STRICT_CLAIMS", "1")  # a failed claim is an error here, not a notice
    try:
        NotebookClient(
            nb, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}
        ).execute()
    finally:
        if env_backup is None:
            os.environ.pop("PYDEVD_DISABLE_FILE_VALIDATION", None)
        if strict_backup is None:
            os.environ.pop("COURSE_STRICT_CLAIMS", None)
    return nb


# What nbval leaves out of a comparison (its defaults without nbdime): metadata, images and
# widget views (their model ids are random).
_NOT_COMPARED = frozenset(
    {
        "metadata",
        "traceback",
        "prompt_number",
        "output_type",
        "name",
        "execution_count",
        "application/vnd.jupyter.widget-view+json",
        "image/png",
        "image/jpeg",
    }
)


def _comparable(outputs) -> dict[str, list]:
    """Outputs flattened as nbval compares them: streams of one name merged, then each output
    key (and each MIME type of ``data``) mapped to the list of its values, in order."""
    from collections import defaultdict

    from nbval.plugin import coalesce_streams, transform_streams_for_comparison

    flat: dict[str, list] = defaultdict(list)
    copies = [nbformat.from_dict(o) for o in outputs]  # coalesce_streams edits what it merges
    for out in transform_streams_for_comparison(coalesce_streams(copies)):
        for key, value in out.items():
            if key in _NOT_COMPARED:
                continue
            if key == "data":
                for mime, text in value.items():
                    if mime not in _NOT_COMPARED:
                        flat[mime].append(text)
            else:
                flat[key].append(value)
    return dict(flat)


def compare_executed(source, executed) -> list[str]:
    """``pytest --nbval-lax``'s verdict on a notebook that has already been executed (the book
    build's copy in the Jupyter cache), so that a chapter runs once per test session: every
    cell must run without an error, and every checked cell's fresh output must equal the
    output stored in ``source``, compared as nbval compares (streams merged; metadata,
    images and widget views left out). Returns the problems, one per cell."""
    problems = []
    code = [c for c in source.cells if c.cell_type == "code"]
    done = [c for c in executed.cells if c.cell_type == "code"]
    if [c.source for c in code] != [c.source for c in done]:
        return ["the executed copy is of other code than the notebook (rebuild the book)"]
    for number, (cell, ran) in enumerate(zip(code, done), start=1):
        first_line = cell.source.strip().splitlines()[0][:60] if cell.source.strip() else "empty"
        where = f"code cell {number} ({first_line})"
        errors = [o for o in ran.get("outputs", []) if o.get("output_type") == "error"]
        if errors:
            problems.append(f"{where} raised {errors[0].get('ename')}: {errors[0].get('evalue')}")
            continue
        if not is_checked(cell):
            continue
        want, got = _comparable(cell.get("outputs", [])), _comparable(ran.get("outputs", []))
        if want != got:
            lines = [f"{where}: output differs from the stored one"]
            for key in sorted(set(want) | set(got)):
                if want.get(key) != got.get(key):
                    lines.append(f"  {key}: stored {want.get(key)!r}")
                    lines.append(f"  {' ' * len(key)}  fresh  {got.get(key)!r}")
            problems.append("\n".join(lines))
    return problems


def refresh(path: Path | str) -> None:
    """Execute ``path`` and store the outputs of its checked cells only."""
    path = Path(path)
    nb = execute_notebook(path)
    strip_unchecked_outputs(nb)
    nbformat.write(nb, path)


def check_notebook(path: Path | str, url: str | None = None) -> list[str]:
    """Problems with a committed notebook (empty list = fine)."""
    path = Path(path)
    nb = nbformat.read(path, as_version=4)
    problems = []
    code = [c for c in nb.cells if c.cell_type == "code"]
    if not code or code[0].source.strip() != setup_cell_source(url).strip():
        problems.append(
            f"{path.name}: the first code cell must be the set-up cell "
            "(course_lib.tools.notebooks.setup_cell_source())"
        )
    for i, cell in enumerate(code):
        if not is_checked(cell) and (cell.outputs or cell.execution_count is not None):
            problems.append(f"{path.name}: code cell {i} stores outputs but is not tagged {CHECK_TAG!r}")
        if is_checked(cell) and not cell.outputs:
            problems.append(f"{path.name}: code cell {i} is tagged {CHECK_TAG!r} but has no stored output")
    if "widgets" in nb.metadata:
        problems.append(f"{path.name}: stores widget state (run `course notebooks refresh`)")
    return problems


# Numbers in a checked output that a different kernel could change: decimals and percentages.
_OUTPUT_DECIMAL = re.compile(r"(?<![\w.])\d+\.\d+(?:e[+-]?\d+)?|(?<![\w.])\d+%")
# In prose: a decimal (0.88, 65.5%) or a percentage (50%) ...
_PROSE_NUMBER = re.compile(r"(?<![\w.,])\d+\.\d+%?(?![\w.]*\d)|(?<![\w.,])\d+%")
# ... outside what is not prose: glue roles, code, math, headings, section references, links.
_NOT_PROSE = [
    re.compile(r"\{glue(?::\w+)?\}`[^`]*`"),
    re.compile(r"```.*?```", re.S),
    re.compile(r"`[^`]*`"),
    re.compile(r"\$\$.*?\$\$", re.S),
    re.compile(r"\$[^$]*\$"),
    re.compile(r"^#+ .*$", re.M),
    re.compile(r"(?:§|[Ss]ections? |[Cc]hapters? )\d+(?:\.\d+)*"),
    re.compile(r"\]\([^)]*\)"),
]
_GLUE_REF = re.compile(r"\{glue(?::\w+)?\}`([^`:]+)")
_GLUE_DEF = re.compile(r"""(?:\bglue\(\s*|\bglue_as\s*=\s*)(?:f?)["']([^"']+)["']""")


def prose_numbers(markdown: str) -> list[str]:
    """Decimals and percentages typed in a markdown text (glue roles, code and math excluded)."""
    for pattern in _NOT_PROSE:
        markdown = pattern.sub(" ", markdown)
    return _PROSE_NUMBER.findall(markdown)


def check_chapter(path: Path | str, url: str | None = None) -> list[str]:
    """:func:`check_notebook` plus the every-machine rules for chapters (empty list = fine)."""
    path = Path(path)
    problems = check_notebook(path, url)
    nb = nbformat.read(path, as_version=4)
    allowed = set(nb.metadata.get("course", {}).get("paper_figures", []))
    glued = {m for c in nb.cells if c.cell_type == "code" for m in _GLUE_DEF.findall(c.source)}
    n_claims = 0
    code_index = -1
    for i, cell in enumerate(nb.cells):
        tags = cell.get("metadata", {}).get("tags", [])
        if cell.cell_type == "markdown":
            typed = [n for n in prose_numbers(cell.source) if n not in allowed]
            if typed:
                problems.append(
                    f"{path.name}: markdown cell {i} types measured-looking numbers by hand: "
                    f"{', '.join(typed[:6])} (glue them from the run, or list paper figures in "
                    "metadata.course.paper_figures)"
                )
            for key in _GLUE_REF.findall(cell.source):
                if key not in glued:
                    problems.append(
                        f"{path.name}: markdown cell {i} uses {{glue}} {key!r}, which no code cell glues"
                    )
            continue
        if cell.cell_type != "code":
            continue
        code_index += 1
        if re.search(r"\bclaim\(", cell.source):
            n_claims += len(re.findall(r"\bclaim\(", cell.source))
            if CLAIM_TAG not in tags:
                problems.append(
                    f"{path.name}: code cell {code_index} makes claims but is not tagged {CLAIM_TAG!r}"
                )
            if is_checked(cell):
                problems.append(
                    f"{path.name}: code cell {code_index} makes claims and is also output-checked"
                )
        if is_checked(cell) and DETERMINISTIC_TAG not in tags:
            text = "".join(o.get("text", "") or o.get("data", {}).get("text/plain", "") for o in cell.outputs)
            found = _OUTPUT_DECIMAL.findall(text)
            if found:
                problems.append(
                    f"{path.name}: code cell {code_index} is output-checked and prints decimals "
                    f"({', '.join(found[:4])}): tag it {DETERMINISTIC_TAG!r} if they are identical on "
                    "every machine, else stop checking its output and assert a claim instead"
                )
    if n_claims == 0:
        problems.append(f"{path.name}: no claim(...) checks what the chapter measures")
    return problems


def course_notebooks(root: Path | None = None) -> list[Path]:
    """Every notebook with a set-up cell: the chapters (book/), the solutions and the exercises."""
    from .book import project_root

    top = project_root(root)
    return sorted(p for d in ("book", "solutions", "exercises") for p in (top / d).glob("*.ipynb"))


def rewrite_setup_cells(
    paths: list[Path] | None = None, url: str | None = None, *, dry_run: bool = False
) -> tuple[list[Path], list[str]]:
    """Set every notebook's set-up cell (its first code cell, which starts ``# Set-up:``) to
    :func:`setup_cell_source` for ``url`` (default: ``_config.yml``'s repository URL).
    Returns ``(changed files, problems)``; nothing else in a file changes (the JSON is written
    as nbformat writes it). With ``dry_run``, only reports what would change."""
    import json

    paths = list(paths) if paths else course_notebooks()
    source = setup_cell_source(url)
    changed, problems = [], []
    for path in paths:
        path = Path(path)
        try:
            raw = path.read_text(encoding="utf-8")
            nb = json.loads(raw)
        except (OSError, ValueError) as exc:
            problems.append(f"{path}: cannot read the notebook ({exc})")
            continue
        code = [c for c in nb.get("cells", []) if c.get("cell_type") == "code"]
        first = (
            "".join(code[0]["source"])
            if code and isinstance(code[0].get("source"), list)
            else (code[0].get("source", "") if code else "")
        )
        if not code or not first.lstrip().startswith("# Set-up:"):
            problems.append(
                f"{path}: its first code cell is not a set-up cell (it must start with '# Set-up:')"
            )
            continue
        if first == source:
            continue
        code[0]["source"] = source.splitlines(True)
        changed.append(path)
        if not dry_run:
            path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return changed, problems


def _setup_cmd(args) -> int:
    url = args.url or repository_url()
    changed, problems = rewrite_setup_cells(args.paths or None, url, dry_run=args.check)
    for p in problems:
        print(p)
    verb = "would change" if args.check else "rewrote"
    for p in changed:
        print(f"{verb} the set-up cell of {p}")
    print(f"{len(changed)} notebook(s) {'out of date' if args.check else 'rewritten'} for {url}")
    return 1 if problems or (args.check and changed) else 0


def _cmd(args) -> int:
    if args.action == "setup":
        return _setup_cmd(args)
    if not args.paths:
        print(f"course notebooks {args.action}: give the notebooks to {args.action}")
        return 2
    status = 0
    for p in args.paths:
        path = Path(p)
        if not path.is_file() or path.suffix != ".ipynb":
            what = "does not exist" if not path.exists() else "is not a notebook (.ipynb) file"
            print(f"course notebooks {args.action}: {p} {what}", file=sys.stderr)
            status = 2
            continue
        try:
            nbformat.read(str(path), as_version=4)
        except Exception as exc:  # not JSON, not a notebook
            print(
                f"course notebooks {args.action}: {p} is not a readable notebook ({type(exc).__name__})",
                file=sys.stderr,
            )
            status = 2
            continue
        if args.action == "refresh":
            print(f"executing {p} ...", flush=True)
            try:
                refresh(p)
            except Exception as exc:  # a cell that raises: the stored file is left as it was
                import re

                text = re.sub(r"\x1b\[[0-9;]*m", "", str(exc)).strip()  # (the kernel's terminal colours)
                first = text.splitlines()[-1][:200] if text else type(exc).__name__
                print(
                    f"course notebooks refresh: {p}: a cell failed ({first}); the file is unchanged",
                    file=sys.stderr,
                )
                status = 1
                continue
        problems = check_chapter(p) if args.chapter else check_notebook(p)
        for msg in problems:
            print(msg)
        status |= bool(problems)
    return status


def register(sub) -> None:
    p = sub.add_parser(
        "notebooks",
        help="refresh or check the stored outputs of chapter notebooks; rewrite their set-up cells",
        description="refresh/check PATH...: the stored outputs and rules of notebooks. setup [PATH...]: "
        "rewrite the set-up (Colab install) cell of every chapter, solution and exercise notebook "
        "(or of PATH...) from "
        "_config.yml's repository url (or --url); with --check, only report which are out of date.",
    )
    p.add_argument("action", choices=["refresh", "check", "setup"])
    p.add_argument("paths", nargs="*", type=Path)
    p.add_argument(
        "--chapter", action="store_true", help="also apply the chapter rules (claims, glued numbers)"
    )
    p.add_argument(
        "--url", help="setup: the repository URL to install from (default: _config.yml's repository url)"
    )
    p.add_argument(
        "--check", action="store_true", help="setup: change nothing, exit 1 if a set-up cell is out of date"
    )
    p.set_defaults(func=_cmd)
