"""The ``course release`` and ``course grade`` subcommands."""

from __future__ import annotations

import argparse
import sys

from . import release as _release

__all__ = ["register"]


# grade_files's options that the command line gives under the same names
_GRADE_OPTIONS = (
    "assignment",
    "jobs",
    "timeout",
    "check_timeout",
    "solutions",
    "sandbox",
    "format",
    "resume",
)


def _grade_cmd(args) -> int:
    from .grade import GradeError, grade_files
    from .sandbox import SandboxLimits

    limits = SandboxLimits()
    if args.memory_mb:
        limits.memory_mb = args.memory_mb
    if args.grader_memory_mb:
        limits.grader_memory_mb = args.grader_memory_mb
    if args.check_memory_mb:
        limits.check_memory_mb = args.check_memory_mb
    try:
        options = {name: getattr(args, name) for name in _GRADE_OPTIONS}
        rows = grade_files(args.submissions, args.out, limits=limits, **options)
    except GradeError as exc:
        print(f"course grade: {exc}", file=sys.stderr)
        return 1
    graded = sum(r["status"] == "graded" for r in rows)
    print(f"graded {graded} of {len(rows)} submission(s); results in {args.out}/grades.csv")
    return 0


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be positive, got {text}")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text}")
    return value


def register(sub) -> None:
    _release.register(sub)
    p = sub.add_parser(
        "grade",
        help="grade submitted exercise notebooks",
        description="Grade submitted notebooks against the instructor's solutions/NN_topic.ipynb. Writes "
        "DIR/<stem>/report.{json,md} as each submission is graded and DIR/grades.csv at the end (also "
        "after Ctrl-C, listing what was not graded); exits 0 when every submission got a row.",
    )
    p.add_argument("submissions", nargs="+", metavar="SUBMISSION.ipynb")
    p.add_argument("--out", required=True, metavar="DIR", help="folder for grades.csv and the reports")
    p.add_argument("--assignment", metavar="NN_topic", help="default: read from each notebook's metadata")
    p.add_argument(
        "--jobs",
        type=_positive_int,
        default=1,
        metavar="N",
        help="submissions graded in parallel (default 1)",
    )
    p.add_argument(
        "--timeout",
        type=_positive_float,
        default=300.0,
        metavar="SECONDS",
        help="wall time per submission (default 300)",
    )
    p.add_argument(
        "--check-timeout",
        type=_positive_float,
        default=None,
        metavar="SECONDS",
        help="cap on each check's wall time (default: the solution's, 10 s)",
    )
    p.add_argument(
        "--memory-mb",
        type=_positive_int,
        default=None,
        help="address-space limit of the student's process (default 2048)",
    )
    p.add_argument(
        "--grader-memory-mb",
        type=_positive_int,
        default=None,
        help="address-space limit of each checker process, where checks run on the student's values (default 2048)",
    )
    p.add_argument(
        "--check-memory-mb",
        type=_positive_int,
        default=None,
        help="memory one check's own code may add to its checker while it works on a student's values (default 512)",
    )
    p.add_argument(
        "--solutions",
        metavar="DIR",
        help="folder of solution notebooks (default: solutions/ of the course checkout)",
    )
    p.add_argument(
        "--sandbox",
        choices=["auto", "bwrap", "none"],
        default=None,
        help="auto (default; also $COURSE_GRADER_SANDBOX): bubblewrap when it works",
    )
    p.add_argument(
        "--format",
        choices=["course", "gradescope"],
        default="course",
        help="gradescope: also write each submission's results.json in Gradescope's autograder format",
    )
    p.add_argument(
        "--resume",
        action="store_true",
        help="keep the reports already in DIR of submissions graded from the same file under the same "
        "grading (solution, course_lib, limits) and grade only the others, e.g. after Ctrl-C",
    )
    p.set_defaults(func=_grade_cmd)
