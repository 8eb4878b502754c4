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

    root = Path(__file__).resolve().parents[1]
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
