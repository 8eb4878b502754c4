"""Visible checks give the same verdict at home as in the grader (issue 11, item 12), and a
failing visible check names itself (item 14).

For every chapter, wrong answers made from the reference answers (every result perturbed;
errors swallowed) and a per-token LayerNorm in the scalar mix (the mistake the instructions
warn about) are run twice: "at home", as a student's notebook runs them (the released
preamble, the answers, then each released visible check cell, in this process), and by
`course grade` in its sandbox. For every visible check the two verdicts must agree."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from grading_fixtures.chapters import forbidden_at_home

from course_lib.grading.format import load_assignment
from course_lib.grading.sandbox_setup import bwrap_status

ROOT = Path(__file__).resolve().parents[2]
CHAPTERS = [
    "01_elmo",
    "02_transformer",
    "03_bert",
    "04_albert",
    "05_ar_ae",
    "06_xlnet",
    "07_distillation",
    "08_probing",
]
SANDBOX = "bwrap" if bwrap_status()[0] else "none"

PERTURB = """

def _perturb(v):
    if isinstance(v, torch.Tensor):
        if v.dtype == torch.bool:
            return ~v
        if v.dtype.is_floating_point:
            return v + 0.01 * (1 + v.abs())
        return v + 1
    if isinstance(v, tuple):
        return tuple(_perturb(x) for x in v)
    if isinstance(v, list):
        return [_perturb(x) for x in v] if v and not isinstance(v[0], int) else v[:-1] + [v[-1] + 1] if v else [0]
    if isinstance(v, bool):
        return not v
    if isinstance(v, (int, float)):
        return v + 1
    return v
"""

WRAP_PERTURB = """

_orig_{f} = {f}


def {f}(*args, **kwargs):
    return _perturb(_orig_{f}(*args, **kwargs))
"""

WRAP_NO_RAISE = """

_orig_{f} = {f}


def {f}(*args, **kwargs):
    try:
        return _orig_{f}(*args, **kwargs)
    except Exception:
        return None
"""

PER_TOKEN_NORM = """
def scalar_mix(layers, w, gamma, mask=None, do_layer_norm=False):
    if do_layer_norm:  # normalises each token on its own: the mistake the instructions warn about
        if mask is None:
            raise ValueError("do_layer_norm needs the mask")
        mean = layers.mean(-1, keepdim=True)
        var = layers.var(-1, unbiased=False, keepdim=True)
        layers = (layers - mean) / torch.sqrt(var + 1e-12)
    s = torch.softmax(w, dim=0)
    out = gamma * (s[:, None, None, None] * layers).sum(dim=0)
    if mask is not None:
        out = out * mask[..., None].to(out.dtype)
    return out
"""


def _cells(nb, tag):
    return [c for c in nb["cells"] if tag in c["metadata"].get("tags", [])]


def _src(cell) -> str:
    return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]


def variants(chapter: str) -> dict[str, dict[str, str]]:
    """Variant name -> answer cell id -> source."""
    asg = load_assignment(ROOT / "solutions" / f"{chapter}.ipynb")
    out: dict[str, dict[str, str]] = {"reference": {}, "perturbed": {}, "no_raise": {}}
    for a in asg.answers:
        out["reference"][a.key] = a.source
        out["perturbed"][a.key] = a.source + PERTURB + "".join(WRAP_PERTURB.format(f=f) for f in a.functions)
        out["no_raise"][a.key] = a.source + "".join(WRAP_NO_RAISE.format(f=f) for f in a.functions)
    if chapter == "01_elmo":
        out["per_token_norm"] = dict(out["reference"], **{"scalar-mix-answer": PER_TOKEN_NORM})
    return out


def home_verdicts(chapter: str, answers: dict[str, str]) -> dict[str, tuple[bool, str]]:
    """Run the released notebook's preamble, the answers and the visible check cells, as
    Jupyter would (one namespace, in order): check id -> (passed, message)."""
    import torch

    nb = json.loads((ROOT / "exercises" / f"{chapter}.ipynb").read_text())
    ns: dict = {"__name__": "__main__"}
    out = {}
    with forbidden_at_home(nb, ns):  # the released cell that turns off the forbidden functions
        for cell in _cells(nb, "preamble"):
            exec(compile(_src(cell), "<preamble>", "exec"), ns)
        for cell in _cells(nb, "answer"):
            exec(compile(answers[cell["id"]], f"<answer {cell['id']}>", "exec"), ns)
        for i, cell in enumerate(_cells(nb, "check")):
            torch.manual_seed(1000 + i)
            try:
                exec(compile(_src(cell), f"<check cell {i}>", "exec"), ns)
                out[cell["metadata"]["course"]["id"]] = (True, "")
            except Exception as exc:
                out[cell["metadata"]["course"]["id"]] = (False, f"{type(exc).__name__}: {exc}")
    return out


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    folder = tmp_path_factory.mktemp("visible")
    out = tmp_path_factory.mktemp("visible-grades")
    subs = {}
    for chapter in CHAPTERS:
        for name, answers in variants(chapter).items():
            if name == "reference":
                continue
            nb = json.loads((ROOT / "exercises" / f"{chapter}.ipynb").read_text())
            for cell in nb["cells"]:
                if cell.get("id") in answers:
                    cell["source"] = answers[cell["id"]]
            path = folder / f"{chapter}__{name}.ipynb"
            path.write_text(json.dumps(nb))
            subs[(chapter, name)] = path
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
        "--check-timeout",
        "5",
        "--sandbox",
        SANDBOX,
    ]
    start = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    print(
        f"\n{len(subs)} wrong-answer submissions graded ({SANDBOX}, --jobs 2) in {time.monotonic() - start:.1f} s"
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    with open(out / "grades.csv", newline="") as fh:
        rows = {Path(r["submission"]).stem: r for r in csv.DictReader(fh)}
    result = {}
    for (chapter, name), path in subs.items():
        assert rows[path.stem]["status"] == "graded", rows[path.stem]
        rep = json.loads((out / path.stem / "report.json").read_text())
        result[(chapter, name)] = {
            c["id"]: (c["passed"], c["message"]) for c in rep["checks"] if not c["hidden"]
        }
    return result


# (no function of chapter 6 raises on the visible checks' inputs, so its "no_raise" variant is the
# reference answer itself: not a wrong answer to catch)
CASES = [
    (ch, name)
    for ch in CHAPTERS
    for name in variants(ch)
    if name != "reference" and (ch, name) != ("06_xlnet", "no_raise")
]


@pytest.mark.parametrize("chapter, name", CASES, ids=[f"{c}-{n}" for c, n in CASES])
def test_home_verdict_equals_graded_verdict(graded, chapter, name):
    home = home_verdicts(chapter, variants(chapter)[name])
    grader = graded[(chapter, name)]
    assert set(home) == set(grader)
    differ = {c: (home[c], grader[c]) for c in home if home[c][0] != grader[c][0]}
    assert not differ, differ
    assert not all(ok for ok, _ in home.values()), "a wrong answer passed every visible check"


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_reference_answers_pass_every_visible_check_at_home(chapter):
    home = home_verdicts(chapter, variants(chapter)["reference"])
    assert all(ok for ok, _ in home.values()), home


def test_per_token_layer_norm_fails_at_home_as_in_the_grader(graded):
    home = home_verdicts("01_elmo", variants("01_elmo")["per_token_norm"])
    assert (
        home["scalar-mix-layer-norm"][0] is False
        and graded[("01_elmo", "per_token_norm")]["scalar-mix-layer-norm"][0] is False
    )
    assert "wrong values" in home["scalar-mix-layer-norm"][1]


def test_a_failing_visible_check_names_itself():
    """Item 14: the failure (what pytest --nbval-lax prints) carries the check's id and exercise."""
    home = home_verdicts("02_transformer", variants("02_transformer")["perturbed"])
    ok, message = home["causal-mask-small"]
    assert not ok and "check 'causal-mask-small' of exercise 'The causal mask' failed" in message, message
    stub = {k: "def _nothing():\n    pass\n" for k in variants("02_transformer")["reference"]}
    ok, message = home_verdicts("02_transformer", stub)["heads-small"]
    assert not ok and message.startswith("NameError"), message


RECORD_KEYS = """
import json, sys
from course_lib.grading.expected import unpack
from course_lib.grading.format import load_assignment
from course_lib.grading.release import expected_values
out = {}
for path in sys.argv[1:]:
    for check, blob in expected_values(load_assignment(path)).items():
        out[check] = sorted(unpack(blob)["calls"])
print(json.dumps(out))
"""


def test_visible_checks_make_the_same_calls_on_other_cpu_kernels():
    """The expected values shipped with a visible check are keyed by a digest of each call's
    arguments. Recorded under PyTorch's portable kernels (another machine, simulated), every
    check must make exactly the calls it makes here, or a student elsewhere would find no
    record and get a home verdict that the grader does not give."""
    paths = [str(ROOT / "solutions" / f"{ch}.ipynb") for ch in CHAPTERS]
    keys = {}
    for kernels in ("default", None):
        env = {k: v for k, v in os.environ.items() if k != "ATEN_CPU_CAPABILITY"}
        if kernels:
            env["ATEN_CPU_CAPABILITY"] = kernels
        run = subprocess.run(
            [sys.executable, "-c", RECORD_KEYS, *paths], env=env, capture_output=True, text=True, timeout=300
        )
        assert run.returncode == 0, run.stderr[-2000:]
        keys[kernels] = json.loads(run.stdout)
    assert keys["default"].keys() == keys[None].keys() and len(keys[None]) >= 8
    differ = [c for c in keys[None] if keys["default"][c] != keys[None][c]]
    assert not differ, f"visible checks whose calls depend on the CPU's kernels: {differ}"


def test_home_and_grader_agree_on_every_style_of_submission():
    """benchmarks/grading_agreement.py on chapter 2 (the full run covers every chapter): the
    honest answers, an answer using course_lib, a copied answer cell, helper cells, a helper
    cell above the first exercise and a slow demo give every visible check the same verdict at
    home and in the grader."""
    import importlib.util

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "grading_agreement.py"
    spec = importlib.util.spec_from_file_location("grading_agreement", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    lines = []
    problems = module.run(["02_transformer"], check_timeout=5, jobs=2, log=lines.append)
    assert problems == [], "\n".join(lines + problems)
    assert lines[-1].startswith("6 submissions, 30 visible-check verdicts compared, 0 disagreement(s)"), lines
    assert any("course_lib: 4/5 visible checks pass at home; same in the grader" in ln for ln in lines), lines
