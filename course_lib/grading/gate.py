"""Visible points need a working function: the rule that a published check's points count
only when the exercise's functions also work on inputs drawn for the submission.

A visible check's inputs are in the student's notebook, so a function that only looks up
their results would pass it. The checker counts every compared call on a drawn input
(:class:`~course_lib.grading.student_calls.StudentFunction`), re-runs failed checks in probe
mode to count the calls after a first wrong one (``checker._probe_unproven_exercises``), and
then withholds the visible points of the exercises this module finds unproven.
"""

from __future__ import annotations

from .format import Assignment

__all__ = ["proven_exercises", "unproven_exercises", "withhold_unproven_visible_points"]


def proven_exercises(assignment: Assignment, tally: dict, results: list[dict], fresh: dict) -> set[str]:
    """The exercises whose functions work on inputs drawn for this submission: one of their
    checks on drawn inputs passed, or they gave the reference's result on drawn calls with
    two different results (so that a constant fallback for unknown inputs does not count;
    ``tally``: check id -> [drawn calls, matched, digests of the matched results], counted by
    :class:`~course_lib.grading.student_calls.StudentFunction`, which leaves out every input
    that a check of the exercise makes on every run: the published ones above all)."""
    proven = {r["exercise"] for r in results if r["passed"] and fresh.get(r["id"], (False,))[0]}
    per_exercise: dict[str, list] = {}
    for check in assignment.checks:
        if check.id in tally:
            calls, matches, seen = tally[check.id]
            total = per_exercise.setdefault(check.exercise, [0, 0, set()])
            total[0], total[1], total[2] = total[0] + calls, total[1] + matches, total[2] | seen
    return proven | {ex for ex, (calls, matches, seen) in per_exercise.items() if len(seen) >= 2}


def unproven_exercises(assignment: Assignment, results: list[dict], fresh: dict, proven: set) -> set[str]:
    """The exercises whose visible points the rule below withholds: a visible check with
    points passed, the exercise has checks on drawn inputs, and it is not ``proven``."""
    gated = {c.exercise for c in assignment.checks if fresh.get(c.id, (False,))[0]}
    return {
        r["exercise"]
        for r in results
        if not r["hidden"] and r["passed"] and r["max_points"] > 0 and r["exercise"] in gated
    } - proven


def withhold_unproven_visible_points(
    assignment: Assignment, results: list[dict], fresh: dict, proven: set
) -> None:
    """A visible check's inputs are published: a function that only looks up the results
    for them would pass it. Its points therefore count only when the exercise's functions
    also gave the reference's results on inputs drawn for this submission (``proven``, see
    :func:`proven_exercises`: compared calls on such inputs with two different results, or a
    whole check on such inputs passed: e.g. chapter 3's masking statistics, a visible check of a random
    function on drawn inputs). Exercises without checks on drawn inputs keep their visible
    points as they are. A check that stopped at a wrong call was re-run first to count the
    calls after it (``checker._probe_unproven_exercises``)."""
    unproven = unproven_exercises(assignment, results, fresh, proven)
    for r in results:
        if not r["hidden"] and r["passed"] and r["max_points"] > 0 and r["exercise"] in unproven:
            r.update(
                passed=False,
                points=0,
                gated=True,  # passed on its published inputs (as at home); its points were withheld
                message=(
                    "this check's published inputs give the right results, but your functions for this exercise "
                    "did not give the right results on the inputs drawn for your submission (by the hidden checks): "
                    "a visible check's points need a function that works on any input, not only on the check's "
                    "(see the hidden checks' messages)"
                ),
            )
