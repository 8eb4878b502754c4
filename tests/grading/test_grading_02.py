"""Chapter 2's graded exercises (the Transformer): the rules of the released notebook. The
grading of full, partial and gaming submissions of this chapter is tested in test_grading.py
and test_grading_attacks.py (chapter 2 is the format's worked example)."""

from __future__ import annotations

from grading_fixtures.chapters import Chapter, forbid_rule_tests

from course_lib.grading.format import load_assignment

CHAPTER = Chapter("02_transformer")


def test_solution_notebook_is_valid_and_released():
    a = load_assignment(CHAPTER.solution)
    assert a.name == "02_transformer" and a.max_points == 12
    assert [e.points for e in a.exercises] == [2, 3, 5, 2]
    CHAPTER.assert_released()


# --- the rules: every alias of course_lib's (and other libraries') versions is turned off ----

MUST_FORBID = (
    "torch.nn.functional.scaled_dot_product_attention",
    "torch._C._nn.scaled_dot_product_attention",
    "course_lib.nn.causal_mask",
    "course_lib.nn.attention.causal_mask",
    "course_lib.nn.MultiHeadAttention",
)
COURSE_LIB_ROUTES = {  # name -> (answer cell, an answer that hands the job to a forbidden function, its visible check)
    "nn_causal_mask": (
        "causal-mask-answer",
        'from course_lib.nn import causal_mask as _cm\n\ndef causal_mask(length, key_length=None):\n    if key_length is not None and key_length < length:\n        raise ValueError("key_length < length")\n    return _cm(length, key_length=key_length)\n',
        "causal-mask-small",
    ),
}


(
    test_forbid_list_covers_every_alias_and_the_texts_follow_the_metadata,
    test_a_forbidden_route_fails_at_home_as_in_the_grader,
) = forbid_rule_tests(CHAPTER, MUST_FORBID, COURSE_LIB_ROUTES)


def test_the_appendix_table_follows_every_assignments_metadata():
    """book/appendix_grading.md's per-chapter table (exercises, points, visible points) is the
    solution notebooks' metadata, for every chapter, and each exercise notebook's introduction
    states the same counts, rules and limits (so the texts cannot drift from the assignments)."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    text = (root / "book" / "appendix_grading.md").read_text()
    rows = {
        m[0]: (int(m[1]), float(m[2]), float(m[3]))
        for m in re.findall(r"^\| (\d\d_\w+) \| (\d+) \| (\d+) \| (\d+) \|", text, re.M)
    }
    names = sorted(p.stem for p in (root / "solutions").glob("*.ipynb"))
    assert sorted(rows) == names
    for name in names:
        a = load_assignment(root / "solutions" / f"{name}.ipynb")
        visible = sum(c.points for c in a.checks if not c.hidden)
        assert rows[name] == (len(a.exercises), a.max_points, visible), name
        Chapter(name).assert_texts()


# --- exercises that teach: the snippets the texts give are what they claim to be ------------


def _text(cell_id: str) -> str:
    import json

    nb = json.loads(CHAPTER.exercise.read_text())
    return next("".join(c["source"]) for c in nb["cells"] if c.get("id") == cell_id)


def _snippets(cell_id: str) -> dict:
    """The functions in the released exercise text's code blocks, executed."""
    import math
    import re

    import torch

    ns = {"math": math, "torch": torch}
    for block in re.findall(r"```python\n(.*?)```", _text(cell_id), re.S):
        exec(block, ns)
    return ns


def test_exercise_texts_give_a_loop_and_a_bug_not_the_answer():
    """Exercise 2 gives the paper's double loop, which is the reference's (and course_lib's)
    table; exercise 4 gives a split that round-trips exactly and still puts other tokens'
    features into a head (the bug to find); exercise 1 leaves the cache's offset to derive."""
    import torch

    from course_lib.nn import sinusoidal_table

    ref = CHAPTER.reference()
    loop = _snippets("ex-positional")["sinusoidal_encoding_loop"]
    for max_len, d_model in [(1, 2), (37, 10), (300, 16)]:
        torch.testing.assert_close(loop(max_len, d_model), ref["sinusoidal_encoding"](max_len, d_model))
        torch.testing.assert_close(loop(max_len, d_model), sinusoidal_table(max_len, d_model).float())
    v0 = _snippets("ex-heads")
    x = torch.arange(2 * 5 * 12, dtype=torch.float32).reshape(2, 5, 12)
    assert torch.equal(v0["merge_heads_v0"](v0["split_heads_v0"](x, 4)), x)
    assert v0["split_heads_v0"](x, 4).shape == ref["split_heads"](x, 4).shape
    assert not torch.equal(v0["split_heads_v0"](x, 4), ref["split_heads"](x, 4))
    causal = " ".join(_text("ex-causal-mask").split())
    assert "key_length - length" not in causal and "work out" in causal


# Mistakes a student makes on the reworked exercises: the check ids each must fail (its
# exercise's other checks pass) and messages that show no expected value.
MISTAKES_02 = {
    "v0_split_submitted": (
        "heads-answer",
        "def split_heads(x, n_heads):\n    b, n, d = x.shape\n    if d % n_heads:\n        raise ValueError('d_model % n_heads')\n"
        "    return x.reshape(b, n_heads, n, d // n_heads)\n\n\ndef merge_heads(x):\n    b, h, n, d_head = x.shape\n"
        "    return x.reshape(b, n, h * d_head)\n",
        {"heads-small", "heads-sizes"},
    ),
    "mask_without_the_cache_offset": (
        "causal-mask-answer",
        "def causal_mask(length, key_length=None):\n    key_length = length if key_length is None else key_length\n"
        "    if key_length < length:\n        raise ValueError('key_length < length')\n"
        "    return torch.ones(length, key_length, dtype=torch.bool).tril()\n",
        {"causal-mask-small", "causal-mask-sizes"},
    ),
    "sines_then_cosines_not_interleaved": (
        "positional-encoding-answer",
        "def sinusoidal_encoding(max_len, d_model):\n    if d_model % 2:\n        raise ValueError('odd d_model')\n"
        "    pos = torch.arange(max_len, dtype=torch.float64)[:, None]\n"
        "    angle = pos / 10000 ** (torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)\n"
        "    return torch.cat([angle.sin(), angle.cos()], dim=1).float()\n",
        {"positional-encoding-small", "positional-encoding-sizes", "positional-encoding-odd"},
    ),
}
# Correct answers to the reworked exercises, written in other ways than the reference.
HONEST_02 = {
    "causal-mask-answer": "def causal_mask(length, key_length=None):\n    if key_length is None:\n        key_length = length\n"
    "    if key_length < length:\n        raise ValueError('the queries are some of the keys')\n"
    "    return torch.ones(length, key_length, dtype=torch.bool).tril(diagonal=key_length - length)\n",
    "positional-encoding-answer": "def sinusoidal_encoding(max_len, d_model):\n    if d_model % 2 == 1:\n        raise ValueError('d_model must be even')\n"
    "    inv = 1.0 / (10000.0 ** (torch.arange(d_model // 2, dtype=torch.float64) * 2 / d_model))\n"
    "    angle = torch.outer(torch.arange(max_len, dtype=torch.float64), inv)\n"
    "    return torch.stack([angle.sin(), angle.cos()], dim=-1).reshape(max_len, d_model).to(torch.float32)\n",
    "heads-answer": "def split_heads(x, n_heads):\n    if x.shape[-1] % n_heads != 0:\n        raise ValueError('not divisible')\n"
    "    return torch.stack(x.chunk(n_heads, dim=-1), dim=1)\n\n\ndef merge_heads(x):\n"
    "    return torch.cat(x.unbind(1), dim=-1)\n",
}


def test_reworked_exercises_grade_honest_answers_full_and_mistakes_exactly(tmp_path):
    import csv
    import json
    from pathlib import Path

    from course_lib.cli import main as course_main

    subs = [CHAPTER.submission(tmp_path, "honest", HONEST_02)]
    subs += [CHAPTER.submission(tmp_path, name, {cell: src}) for name, (cell, src, _) in MISTAKES_02.items()]
    out = tmp_path / "out"
    code = course_main(
        ["grade", *map(str, subs), "--out", str(out), "--assignment", "02_transformer", "--jobs", "2"]
    )
    assert code == 0
    with open(out / "grades.csv", newline="") as fh:
        rows = {Path(r["submission"]).stem: r for r in csv.DictReader(fh)}
    reports = {
        Path(d["submission"]).stem: d for d in (json.loads(p.read_text()) for p in out.glob("*/report.json"))
    }
    assert rows["honest"]["points"] == "12", reports["honest"]["checks"]
    for name, (_, _, fails) in MISTAKES_02.items():
        failed = {c["id"] for c in reports[name]["checks"] if not c["passed"]}
        assert failed == fails, (name, failed)
        assert int(rows[name]["points"]) == 12 - len(fails)
        for c in reports[name]["checks"]:
            if c["hidden"] and not c["passed"]:
                assert "tensor(" not in c["message"] and "expected" not in c["message"].lower(), c["message"]
