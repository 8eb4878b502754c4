"""One verdict: every exercise's visible checks at home and in the grader, on the same notebooks.

    python benchmarks/grading_agreement.py [--chapters 02_transformer ...] [--sandbox auto|none]
                                           [--check-timeout SECONDS] [--jobs N]

For each chapter it writes, from the released exercise notebook, submissions in the styles
students write them:

* ``honest``: the reference answers in the answer cells;
* ``course_lib``: the first exercise's answer imports course_lib (which the grader cannot)
  and calls it from a wrapper around the reference function;
* ``copied_cell``: the stub left in place and a copy of the answer cell below it (Jupyter's
  copy keeps the answer marker) holding the answer;
* ``helper_cells``: the stub left in place, a helper in a new cell and the answer in another
  new cell below the stub;
* ``top_cell``: a helper (an import and a constant) in a new cell above the first exercise,
  which the first answer uses;
* ``slow_demo``: a correct answer cell that ends with a demo slower than the answer-cell
  limit.

"At home" runs each notebook as a student's kernel does (every code cell in order, in one
namespace, in a fresh Python process; a failed cell does not stop the rest, as
``pytest --nbval-lax``), and records whether each visible check cell raised. "In the grader"
runs ``course grade`` on the same files. The script prints one line per submission and every
disagreement, and exits 1 if there is one.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

HOME_RUNNER = r"""
import json, linecache, sys, traceback
nb = json.load(open(sys.argv[1]))
ns = {"__name__": "__main__"}
verdicts = {}
for cell in nb["cells"]:
    if cell.get("cell_type") != "code":
        continue
    src = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
    tags = cell.get("metadata", {}).get("tags", [])
    name = "<cell %s>" % cell.get("id")
    linecache.cache[name] = (len(src), None, src.splitlines(True), name)  # as IPython does
    try:
        exec(compile(src, name, "exec"), ns)
        ok = True
    except Exception:
        ok = False
    if "check" in tags:
        verdicts[cell["metadata"]["course"]["id"]] = ok
print("VERDICTS " + json.dumps(verdicts))
"""


def _source(cell: dict) -> str:
    return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]


def _answers(solution: Path) -> dict[str, str]:
    nb = json.loads(solution.read_text())
    return {c["id"]: _source(c) for c in nb["cells"] if "answer" in c.get("metadata", {}).get("tags", [])}


def _public_functions(source: str) -> list[str]:
    import ast

    return [
        n.name
        for n in ast.parse(source).body
        if isinstance(n, ast.FunctionDef) and not n.name.startswith("_")
    ]


def _code_cell(cid: str, source: str, metadata: dict | None = None) -> dict:
    return {
        "cell_type": "code",
        "id": cid,
        "metadata": metadata or {},
        "source": source,
        "outputs": [],
        "execution_count": None,
    }


def submissions(chapter: str, folder: Path, demo_seconds: float) -> dict[str, Path]:
    """The six styles for ``chapter`` (name -> notebook path)."""
    exercise = json.loads((ROOT / "exercises" / f"{chapter}.ipynb").read_text())
    answers = _answers(ROOT / "solutions" / f"{chapter}.ipynb")
    first = next(iter(answers))
    fname = _public_functions(answers[first])[0]

    def with_answers(nb: dict, sources: dict[str, str]) -> dict:
        nb = copy.deepcopy(nb)
        for cell in nb["cells"]:
            if cell.get("id") in sources:
                cell["source"] = sources[cell["id"]]
        return nb

    def insert_after(nb: dict, key: str, cells: list[dict]) -> dict:
        i = next(i for i, c in enumerate(nb["cells"]) if c.get("id") == key)
        nb["cells"][i + 1 : i + 1] = cells
        return nb

    others = {k: v for k, v in answers.items() if k != first}
    stub_meta = next(c for c in exercise["cells"] if c.get("id") == first)["metadata"]
    wrapper = (
        f"import course_lib.grading.format as _course_helpers\n\n{answers[first]}\n\n"
        f"_reference_{fname} = {fname}\n\n\ndef {fname}(*args, **kwargs):\n"
        f"    assert _course_helpers.META\n    return _reference_{fname}(*args, **kwargs)\n"
    )
    uses_top = (
        f"{answers[first]}\n\n_plain_{fname} = {fname}\n\n\ndef {fname}(*args, **kwargs):\n"
        f"    assert _top_math.pi > 3 and _TOP_READY\n    return _plain_{fname}(*args, **kwargs)\n"
    )
    made = {
        "honest": with_answers(exercise, answers),
        "course_lib": with_answers(exercise, {**answers, first: wrapper}),
        "copied_cell": insert_after(
            with_answers(exercise, others),
            first,
            [_code_cell("copied-answer", answers[first], copy.deepcopy(stub_meta))],
        ),
        "helper_cells": insert_after(
            with_answers(exercise, others),
            first,
            [
                _code_cell("my-helper", "def _my_helper():\n    return 1\n"),
                _code_cell("my-answer", answers[first]),
            ],
        ),
        "top_cell": insert_after(
            with_answers(exercise, {**answers, first: uses_top}),
            "preamble",
            [_code_cell("my-imports", "import math as _top_math\n\n_TOP_READY = True\n")],
        ),
        "slow_demo": with_answers(
            exercise,
            {
                **answers,
                first: answers[first] + f"\n\nimport time\nprint('demo')\ntime.sleep({demo_seconds})\n",
            },
        ),
    }
    out = {}
    for name, nb in made.items():
        path = folder / f"{chapter}__{name}.ipynb"
        path.write_text(json.dumps(nb, indent=1))
        out[name] = path
    return out


def home_verdicts(path: Path) -> dict[str, bool]:
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
        "OMP_NUM_THREADS": "1",
    }
    proc = subprocess.run(
        [sys.executable, "-c", HOME_RUNNER, str(path)],
        capture_output=True,
        text=True,
        env=env,
        cwd=path.parent,
        timeout=900,
    )
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("VERDICTS ")), None)
    if line is None:
        raise RuntimeError(f"the home run of {path.name} did not finish: {proc.stderr[-1500:]}")
    return json.loads(line[len("VERDICTS ") :])


def grader_verdicts(
    paths: list[Path], out: Path, sandbox: str | None, check_timeout: float | None, jobs: int
) -> dict[Path, dict[str, bool]]:
    from course_lib.grading.grade import grade_files, report_folders

    grade_files(
        [str(p) for p in paths],
        out,
        sandbox=sandbox,
        check_timeout=check_timeout,
        jobs=jobs,
        log=lambda m: None,
    )
    result = {}
    for p, folder in zip(paths, report_folders([str(p) for p in paths])):
        rep = json.loads((out / folder / "report.json").read_text())
        # a check whose points were withheld ("gated": passed on its published inputs, but the
        # exercise's functions worked on no input drawn for the submission) counts as failed:
        # every style here is a working answer, whose points must not be withheld
        result[p] = {c["id"]: c["passed"] for c in rep.get("checks", []) if not c["hidden"]}
        gated = sorted(c["id"] for c in rep.get("checks", []) if c.get("gated"))
        if gated:
            result[p]["<points withheld>"] = ", ".join(gated)
    return result


def run(
    chapters: list[str],
    sandbox: str | None = None,
    check_timeout: float | None = None,
    jobs: int = 1,
    log=print,
) -> list[str]:
    """Disagreements (empty: every visible check gave the same verdict at home and in the grader)."""
    from course_lib.grading.checker import ANSWER_CELL_TIMEOUT

    answer_limit = ANSWER_CELL_TIMEOUT if check_timeout is None else min(ANSWER_CELL_TIMEOUT, check_timeout)
    problems: list[str] = []
    with tempfile.TemporaryDirectory(prefix="agreement-") as tmp:
        folder = Path(tmp)
        subs: dict[tuple[str, str], Path] = {}
        for chapter in chapters:
            for name, path in submissions(chapter, folder, answer_limit + 1).items():
                subs[(chapter, name)] = path
        start = time.monotonic()
        graded = grader_verdicts(list(subs.values()), folder / "out", sandbox, check_timeout, jobs)
        log(f"graded {len(subs)} submissions in {time.monotonic() - start:.0f} s")
        n_checks = 0
        for (chapter, name), path in subs.items():
            home = home_verdicts(path)
            grader = graded[path]
            n_checks += len(home)
            differ = sorted(k for k in set(home) | set(grader) if home.get(k) != grader.get(k))
            passed = sum(home.values())
            log(
                f"{chapter} {name}: {passed}/{len(home)} visible checks pass at home; "
                + ("same in the grader" if not differ else f"DIFFER: {differ}")
            )
            for k in differ:
                problems.append(f"{chapter} {name} {k}: at home {home.get(k)}, in the grader {grader.get(k)}")
        log(
            f"{len(subs)} submissions, {n_checks} visible-check verdicts compared, "
            f"{len(problems)} disagreement(s)"
        )
    return problems


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--chapters", nargs="*", default=None, help="default: every solutions/*.ipynb")
    p.add_argument("--sandbox", choices=["auto", "bwrap", "none"], default=None)
    p.add_argument("--check-timeout", type=float, default=None)
    p.add_argument("--jobs", type=int, default=2)
    args = p.parse_args(argv)
    chapters = args.chapters or sorted(x.stem for x in (ROOT / "solutions").glob("*.ipynb"))
    problems = run(chapters, args.sandbox, args.check_timeout, args.jobs)
    for msg in problems:
        print("disagreement:", msg)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
