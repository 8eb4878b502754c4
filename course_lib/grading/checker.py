"""The checker: runs the instructor's checks against one submission at a time.

A checker is a trusted process (``python -m course_lib.grading.checker``) started by
``course grade``; it imports torch once and then grades the submissions it is sent, one
at a time, as JSON lines on stdin/stdout. For each submission it

1. starts a :class:`~course_lib.grading.sandbox.Sandbox` and runs in it the instructor's
   preamble cells and the submission's answer cells (nothing else from the submission);
2. runs each check cell of the solution notebook *here*, in a fresh namespace where the
   exercise's function names are bound to :class:`~course_lib.grading.student_calls.StudentFunction` proxies;
3. a proxy call sends the arguments (plain data) to the sandbox, gets the student's result
   back (plain data, schema-checked), computes the reference answer on the same
   arguments here, and compares the two with the check's tolerances; any difference
   fails the check. The check's own asserts then run on the student's values, here.

A check passes when its code finishes without an exception. Hidden checks draw their inputs
from the global RNGs, seeded from the solution file, the submission's answers and the
check id: fresh for every submission, and the same when it is graded again. A visible
check's points count only when its exercise's functions also matched the reference on such
drawn inputs (:mod:`course_lib.grading.gate`), and a check may add at most
``SandboxLimits.check_memory_mb`` to this process's memory (:class:`_memory_budget`).
"""

from __future__ import annotations

import builtins
import hashlib
import json
import math
import os
import random
import re
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

from .format import Assignment, Check, load_assignment
from .gate import proven_exercises, unproven_exercises, withhold_unproven_visible_points
from .sandbox import OUTPUT_KEEP, Sandbox, SandboxLimits, SandboxLost, become_subreaper
from .student_calls import CheckFailure, Lost, StudentFunction, clip
from .wire import ProtocolError, encode_for_sandbox, to_python

__all__ = [
    "ANSWER_CELL_TIMEOUT",
    "GraderFailure",
    "PREFLIGHT_ANSWER",
    "preflight",
    "Reference",
    "grade_answers",
    "seeds_for",
    "main",
]

MAX_SANDBOX_STARTS = 25  # student processes per submission (a crash costs a fork from the zygote)
MAX_TIMEOUTS_PER_EXERCISE = 2  # after this many timeouts an exercise's remaining checks are not run
START_TIMEOUT = 120.0
# Seconds each answer cell (and each cell a student added inside an exercise) may run when the
# grader runs it. At the limit the cell is interrupted (KeyboardInterrupt, as Jupyter's stop
# button): what it defined before that point is kept, the rest of the cell is not run.
ANSWER_CELL_TIMEOUT = 30.0
INTERRUPT_GRACE = 3.0  # seconds an interrupted cell has to stop before its process is killed
CHECK_GRACE = 2.0  # seconds past a check's limit before its own code is stopped


class _alarm_at:
    """Raise :class:`_CheckOutOfTime` in this (main) thread at ``when`` (time.monotonic)."""

    def __init__(self, when: float):
        self.when = when
        self.armed = False

    def __enter__(self):
        import signal
        import threading

        if threading.current_thread() is threading.main_thread() and hasattr(signal, "setitimer"):
            self.old = signal.signal(signal.SIGALRM, _out_of_time)
            signal.setitimer(signal.ITIMER_REAL, max(self.when - time.monotonic(), 0.001))
            self.armed = True
        return self

    def __exit__(self, *exc):
        if self.armed:
            import signal

            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, self.old)
        return False


class GraderFailure(RuntimeError):
    """The grader could not grade this submission (not the student's doing): the sandbox did
    not start, or the instructor's preamble failed in it. The submission gets an error row."""


class Reference:
    """The solution's preamble and reference answers, executed once in this process."""

    def __init__(self, assignment: Assignment):
        self.assignment = assignment
        self.base: dict = {"__name__": "__check__", "__builtins__": builtins}
        for i, src in enumerate(assignment.preamble):
            exec(compile(src, f"<preamble {i}>", "exec"), self.base)
        ns = dict(self.base)
        for answer in assignment.answers:
            exec(compile(answer.source, f"<reference {answer.key}>", "exec"), ns)
        self.functions = {name: ns[name] for e in assignment.exercises for name in e.functions}
        self._fresh: dict | None = None

    def fresh_inputs(self) -> dict[str, tuple[bool, frozenset]]:
        """For each check: ``(fresh, fixed)``. ``fresh``: the check calls its exercise's
        functions on inputs drawn from the per-submission seed (and the reference returns a
        value for some of them), so no student can know those inputs in advance; ``fixed``:
        the keys (:func:`.expected.call_key`) of its calls that are the same whatever the seed.
        Found once, by running the check on the reference answers under two seeds."""
        if self._fresh is None:
            from .expected import record_check

            out: dict[str, tuple[bool, frozenset]] = {}
            for check in self.assignment.checks:
                try:
                    with _alarm_at(time.monotonic() + 4 * check.timeout + 10):
                        runs = [record_check(self.assignment, self, check, seed)[0] for seed in (1, 2)]
                except (Exception, _CheckOutOfTime):
                    continue  # a check that cannot run on the reference here vouches for nothing
                fixed = frozenset(set(runs[0]) & set(runs[1]))
                fresh = any("value" in e and k not in fixed for r in runs for k, e in r.items())
                out[check.id] = (fresh, fixed)
            self._fresh = out
        return self._fresh


def seeds_for(assignment: Assignment, answers: dict, cells: list[dict] | None = None) -> dict[str, int]:
    """One seed per check, from the solution file, the check id and all the submitted code
    that runs: the answer cells and the cells the student added (``cells``' helpers). A table
    of looked-up results in an added cell changes the drawn inputs as it grows, as it would in
    an answer cell."""
    added = [c.get("source") for c in cells or [] if c.get("helper")]
    code = {"answers": answers, "added": added} if added else answers  # (no added cells: as before)
    fingerprint = hashlib.sha256(json.dumps(code, sort_keys=True).encode()).hexdigest()
    out = {}
    for check in assignment.checks:
        h = hashlib.sha256(f"{assignment.digest}:{fingerprint}:{check.id}".encode()).digest()
        out[check.id] = int.from_bytes(h[:8], "little") & (2**63 - 1)
    return out


def _seed_everything(seed: int) -> None:
    import torch

    random.seed(seed)
    torch.manual_seed(seed)
    np = sys.modules.get("numpy")
    if np is not None:
        np.random.seed(seed % 2**32)


_MAGIC = re.compile(r"^\s*[%!]|=\s*[%!]", re.M)


def _ipython_to_python(source: str) -> str:
    """Turn IPython syntax (``%magic``, ``!cmd``) into Python, as a notebook kernel would."""
    if not _MAGIC.search(source):
        return source
    first, _, rest = source.lstrip("\n").partition("\n")
    if re.match(r"%%(time|timeit|capture|prun)\b", first):  # these cell magics just run the cell
        return _ipython_to_python(rest)
    try:
        from IPython.core.inputtransformer2 import TransformerManager

        return TransformerManager().transform_cell(source)
    except Exception:
        return source


@dataclass
class _AnswerState:
    key: str
    exercise: str
    found: bool
    source: str | None
    status: str = "not run"  # "ok" | "missing" | "raised ..." | "timed out" | "crashed ..."
    output: str = ""
    poisoned: bool = False  # crashed or hung the sandbox: skipped on restarts
    helper: bool = False  # a cell the student added inside the exercise (run as in the notebook)
    note: str = ""  # e.g. which of several cells marked as this answer was graded


@dataclass
class _Run:
    """The state of grading one submission."""

    assignment: Assignment
    reference: Reference
    mode: str
    limits: SandboxLimits
    answers: dict[str, _AnswerState]
    deadline: float
    answer_timeout: float
    sandbox: Sandbox | None = None
    starts: int = 0
    warnings: list[str] = field(default_factory=list)
    call_output: list[str] = field(default_factory=list)
    dropped: int = 0
    timeouts: dict[str, int] = field(default_factory=dict)
    preamble_ran: bool = False  # in a first student process: later failures are not the grader's
    answered_in_check: bool = False  # the student process answered a call of the current check
    current_check: str | None = None
    spawned_for: str | None = None  # the check during which the current student process started
    # check id -> [compared calls on inputs drawn for this submission (see :func:`fresh_inputs`),
    # how many the student's functions got right, digests of those results]: the evidence that
    # a visible check's points need (:mod:`course_lib.grading.gate`)
    tally: dict = field(default_factory=dict)
    fixed: dict = field(default_factory=dict)  # exercise -> the inputs its checks make on every run
    probing: bool = False  # re-running failed checks only to count (the calls answer as the reference)

    def ensure_sandbox(self) -> None:
        """A student process with the preamble and the answer cells run: fork a fresh one from
        the zygote when the last one crashed or hung, start a new sandbox when needed."""
        while self.sandbox is None or not self.sandbox.child_alive:
            if self.starts >= MAX_SANDBOX_STARTS:
                raise Lost(
                    SandboxLost(
                        "start", f"not run: the student process was restarted {MAX_SANDBOX_STARTS} times"
                    )
                )
            if time.monotonic() >= self.deadline:
                raise Lost(SandboxLost("timeout", "not run: the submission's time limit was reached"))
            self.starts += 1
            self.spawned_for = self.current_check
            deadline = min(time.monotonic() + START_TIMEOUT, self.deadline)
            box = self.sandbox
            fresh = box is None or not box.alive
            try:
                if not fresh:
                    box.spawn(deadline)
                else:
                    if box is not None:
                        box.kill()
                    box = self.sandbox = Sandbox(self.mode, self.limits, self.assignment.forbid)
                    box.start(deadline)
            except SandboxLost as exc:
                self.drop_sandbox()
                if exc.kind == "timeout" and deadline >= self.deadline:
                    raise Lost(
                        SandboxLost("timeout", "not run: the submission's time limit was reached")
                    ) from None
                if not fresh:  # a fork from the zygote failed: what the last student process left behind
                    raise Lost(exc) from None
                raise GraderFailure(exc.reason) from None
            for w in box.warnings:
                if w not in self.warnings:
                    self.warnings.append(w)
            try:
                for i, src in enumerate(self.assignment.preamble):
                    out = box.request(
                        {"op": "exec", "key": f"preamble-{i}", "source": src}, self._answer_deadline()
                    )
                    if not out.ok:
                        self.drop_sandbox()
                        if self.preamble_ran:  # it ran before: what changed is the student's doing
                            raise Lost(
                                SandboxLost(
                                    "exit",
                                    f"the student process was broken before your code ran ({out.error['type']})",
                                )
                            )
                        raise GraderFailure(
                            f"the instructor's preamble cell failed in the sandbox: {out.error['type']}: {out.error['message']}"
                        )
            except SandboxLost as exc:  # the preamble itself timed out or crashed
                self.drop_sandbox()
                if self.preamble_ran:  # e.g. a process left behind by the student's code ate the time
                    raise Lost(
                        SandboxLost(exc.kind, f"the student process did not get ready ({exc.reason})")
                    ) from None
                raise GraderFailure(
                    f"the instructor's preamble cell did not run in the sandbox: {exc.reason}"
                ) from None
            self.preamble_ran = True
            for state in self.answers.values():
                if not state.found or state.poisoned:
                    continue
                try:
                    out = box.request(
                        {"op": "exec", "key": state.key, "source": state.source},
                        self._answer_deadline(),
                        interrupt_grace=INTERRUPT_GRACE,
                    )
                except SandboxLost as exc:
                    state.poisoned = True
                    state.status = (
                        f"ran past the answer-cell limit of {self.answer_timeout:g} s and did not stop when interrupted "
                        "(the cell is skipped)"
                        if exc.kind == "timeout"
                        else f"stopped the student process while running: {exc.reason} (the cell is skipped)"
                    )
                    state.output, _ = box.take_output()
                    break  # the student process is gone: fork a new one without this cell
                if state.status == "not run":
                    state.output = out.output
                    if out.interrupted:
                        state.status = (
                            f"interrupted after the answer-cell limit of {self.answer_timeout:g} s: what the cell defined "
                            "before that point is kept, the rest of it did not run (move slow demos out of answer cells)"
                        )
                    else:
                        state.status = (
                            "ok"
                            if out.ok
                            else f"raised {out.error['type']}: {clip(out.error['message'], 500)}"
                        )
                    if not out.ok and not out.interrupted and out.error.get("traceback"):
                        state.output += ("\n" if state.output else "") + clip(out.error["traceback"], 4000)

    def _answer_deadline(self) -> float:
        return min(time.monotonic() + self.answer_timeout, self.deadline)

    def drop_sandbox(self) -> None:
        if self.sandbox is not None:
            self.sandbox.kill()
            self.sandbox = None

    def answer_note(self, exercise: str) -> str:
        notes = []
        for s in self.answers.values():
            if s.exercise != exercise:
                continue
            if not s.found:
                notes.append(
                    f"answer cell {s.key!r} is missing from your notebook (only answer cells are graded)"
                )
            elif s.status != "ok":
                notes.append(f"answer cell {s.key!r} {s.status}")
        return "; ".join(notes)


def _assert_message(exc: AssertionError, check: Check) -> str:
    msg = str(exc).strip()
    if check.hidden:
        return "a hidden check failed" + (f": {clip(msg, 500)}" if msg else "")
    line = ""
    for frame in reversed(traceback.extract_tb(exc.__traceback__)):
        if frame.filename == f"<check {check.id}>":
            lines = check.source.splitlines()
            if 0 < frame.lineno <= len(lines):
                line = lines[frame.lineno - 1].strip()
            break
    text = "assertion failed" + (f": {line}" if line else "")
    return text + (f" ({clip(msg, 500)})" if msg else "")


class _CheckOutOfTime(BaseException):
    """The check's own code (or a reference answer) ran past the check's limit."""


def _out_of_time(signum, frame):
    raise _CheckOutOfTime()


_ALLOC_FAILED = re.compile(r"can't allocate memory|not enough memory|std::bad_alloc|Cannot allocate memory")


def _out_of_memory(run: _Run) -> str:
    budget = run.limits.check_memory_mb
    share = (
        f"a check may use {budget} MB of the grader's memory" if budget else "the grader's memory is limited"
    )
    return (
        f"the check ran out of memory working on what your code returned ({share}): look for values far larger than the instructions allow, e.g. an id far above the "
        "vocabulary, or a shape with a 1 where a size is expected (it broadcasts into a huge tensor)"
    )


class _memory_budget:
    """Lower this process's address-space limit to what it uses now plus ``megabytes`` while
    a check runs (restored after): values a student's code chose cannot make the check's own
    code or the reference answers allocate more; the allocation fails that check only."""

    def __init__(self, megabytes: int | None):
        self.megabytes, self.old = megabytes, None

    def __enter__(self):
        if not self.megabytes:
            return self
        try:
            import resource

            with open("/proc/self/status") as fh:
                used = next(int(ln.split()[1]) * 1024 for ln in fh if ln.startswith("VmSize:"))
            soft, hard = resource.getrlimit(resource.RLIMIT_AS)
            limit = used + int(self.megabytes) * 2**20
            for cap in (soft, hard):
                if cap != resource.RLIM_INFINITY:
                    limit = min(limit, cap)
            resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
            self.old = (soft, hard)
        except (OSError, ValueError, StopIteration, ImportError):
            self.old = None
        return self

    def __exit__(self, *exc):
        if self.old is not None:
            import resource

            try:
                resource.setrlimit(resource.RLIMIT_AS, self.old)
            except (OSError, ValueError):
                pass
        return False


def _run_check(run: _Run, check: Check, seed: int, check_timeout: float | None) -> dict:
    limit = check.timeout if check_timeout is None else min(check.timeout, check_timeout)
    deadline = [run.deadline]
    run.call_output, run.dropped = [], 0
    run.answered_in_check = False
    run.current_check = check.id
    assignment, ref = run.assignment, run.reference
    ns = dict(ref.base)
    check_obj = check
    if check_timeout is not None and check_timeout < check.timeout:
        from dataclasses import replace

        check_obj = replace(check, timeout=limit)
    for exercise in assignment.exercises:
        for name in exercise.functions:
            if exercise.id == check.exercise:
                ns[name] = StudentFunction(run, check_obj, name, ref.functions[name], deadline)
            else:
                ns[name] = ref.functions[name]
    _seed_everything(seed)
    passed, message = False, ""
    try:
        if time.monotonic() >= run.deadline:
            raise Lost(SandboxLost("timeout", "not run: the submission's time limit was reached"))
        if run.timeouts.get(check.exercise, 0) >= MAX_TIMEOUTS_PER_EXERCISE:
            raise CheckFailure(
                f"not run: your code for this exercise ran out of time in {MAX_TIMEOUTS_PER_EXERCISE} checks (see the checks above)"
            )
        run.ensure_sandbox()
        deadline[0] = min(
            time.monotonic() + limit, run.deadline
        )  # starting the sandbox is not the check's time
        # the whole check -- its own code, the reference answers, the student's calls -- ends
        # at the check's deadline (plus the grace a response is read in): a value the
        # student's code returned or changed cannot make the check's own loops run longer
        with _alarm_at(deadline[0] + CHECK_GRACE), _memory_budget(run.limits.check_memory_mb):
            exec(compile(check.source, f"<check {check.id}>", "exec"), ns)
        passed, message = True, "passed"
    except _CheckOutOfTime:
        run.drop_sandbox()  # a request may have been cut off midway: the next check starts afresh
        if check.points > 0:
            run.timeouts[check.exercise] = run.timeouts.get(check.exercise, 0) + 1
        message = (
            f"the check ran out of time ({limit:g} s per check, the check's own work on your results included): "
            "look for results (or arguments changed in place) much larger than the instructions ask for"
        )
    except CheckFailure as exc:
        message = str(exc)
    except Lost as exc:
        message = exc.lost.reason
    except AssertionError as exc:
        message = _assert_message(exc, check)
    except GraderFailure:
        raise
    except MemoryError:
        message = _out_of_memory(run)
    except Exception as exc:
        if isinstance(exc, RuntimeError) and _ALLOC_FAILED.search(str(exc)):
            message = _out_of_memory(run)
        elif getattr(exc, "__course_raised_by_student__", False):  # the student's function raised: say so
            message = clip(str(exc), 1000)
        elif check.hidden:  # its message would describe the check's own computation (sizes, values)
            message = (
                f"the hidden check stopped with {type(exc).__name__} while using what your code returned "
                "(its details are not shown: compare the shapes, dtypes and types your function returns with the instructions)"
            )
        else:
            message = f"the check stopped with {type(exc).__name__}: {clip(str(exc), 500)}"
    output, dropped = "".join(run.call_output), run.dropped
    if check.hidden and (output or dropped):
        # what the student's code printed while a hidden check called it could be the check's
        # inputs (fixed edge cases included): it is never shown, only how much there was
        size = len(output.encode(errors="replace")) + dropped
        output, dropped = (
            f"[{size} bytes of output during this hidden check, not shown: it could show the check's inputs]",
            0,
        )
    if len(output) > OUTPUT_KEEP:
        dropped += len(output.encode()) - OUTPUT_KEEP
        output = output[:OUTPUT_KEEP]
    if dropped:
        output += f"\n[... {dropped} more bytes of output not kept]"
    return {
        "id": check.id,
        "exercise": check.exercise,
        "hidden": check.hidden,
        "points": check.points if passed else 0,
        "max_points": check.points,
        "passed": passed,
        "message": clip(message),
        "output": output,
    }


def grade_answers(
    assignment: Assignment,
    reference: Reference,
    answers: dict[str, str | None],
    *,
    mode: str,
    limits: SandboxLimits | None = None,
    timeout: float = 300.0,
    check_timeout: float | None = None,
    cells: list[dict] | None = None,
    notes: dict[str, str] | None = None,
) -> dict:
    """Grade one submission's answer cells (``answers``: answer key -> source, None when
    missing). ``cells`` (optional): the answer cells and the cells the student added inside
    an exercise, in notebook order (see :meth:`.grade.Submission.answer_plan`); they run in
    that order, each as its own cell, as in the notebook."""
    fresh = reference.fresh_inputs()  # once per assignment, before this submission's clock starts
    start = time.monotonic()
    states: dict[str, _AnswerState] = {}
    keys = {a.key: a.exercise for a in assignment.answers}
    for item in cells or []:
        key, src = item.get("key"), item.get("source")
        if not isinstance(key, str) or not isinstance(src, str) or key in states:
            continue
        if item.get("helper"):
            if key in keys:
                continue
            states[key] = _AnswerState(
                key, str(item.get("exercise")), True, _ipython_to_python(src), helper=True
            )
        elif key in keys and answers.get(key) is not None:
            states[key] = _AnswerState(key, keys[key], True, _ipython_to_python(answers[key]))
    for a in assignment.answers:
        if a.key in states:
            continue
        src = answers.get(a.key)
        found = src is not None
        states[a.key] = _AnswerState(
            a.key,
            a.exercise,
            found,
            _ipython_to_python(src) if found else None,
            "not run" if found else "missing",
        )
    for key, note in (notes or {}).items():
        if key in states and isinstance(note, str):
            states[key].note = note[:500]
    answer_timeout = ANSWER_CELL_TIMEOUT if check_timeout is None else min(ANSWER_CELL_TIMEOUT, check_timeout)
    run = _Run(
        assignment, reference, mode, limits or SandboxLimits(), states, start + timeout, answer_timeout
    )
    seeds = seeds_for(assignment, answers, cells)
    results = []
    try:
        for check in assignment.checks:
            results.append(_run_check(run, check, seeds[check.id], check_timeout))
        _probe_unproven_exercises(run, results, fresh, seeds, check_timeout)
    finally:
        run.drop_sandbox()
    proven = proven_exercises(assignment, run.tally, results, fresh)
    withhold_unproven_visible_points(assignment, results, fresh, proven)
    return {
        "points": sum(r["points"] for r in results),
        "max_points": assignment.max_points,
        "checks": results,
        "answers": [
            {
                "cell": s.key,
                "exercise": s.exercise,
                "found": s.found,
                "status": s.status,
                "output": s.output,
                **({"helper": True} if s.helper else {}),
                **({"note": s.note} if s.note else {}),
            }
            for s in states.values()
        ],
        "warnings": run.warnings,
        "sandbox_starts": run.starts,
    }


def _probe_unproven_exercises(
    run: _Run, results: list[dict], fresh: dict, seeds: dict, check_timeout: float | None
) -> None:
    """A check stops at its first wrong call, so an answer wrong on one edge case that a hidden
    check tries first shows only that wrong call, though it gets most drawn inputs right (and
    passes the visible checks at home). For each exercise whose visible points would be
    withheld, re-run its failed checks on drawn inputs (same seeds, same inputs) in probe mode:
    each call is counted, right or wrong, and then answered as the reference would, so the
    check makes all its calls; the re-run's count replaces the first run's. Verdicts and
    messages stay those of the real run. A lookup table of published results gets no drawn
    call right (published inputs never count, even when drawn)."""
    proven = proven_exercises(run.assignment, run.tally, results, fresh)
    unproven = unproven_exercises(run.assignment, results, fresh, proven)
    failed = {r["id"] for r in results if not r["passed"]}
    run.probing = True
    try:
        for check in run.assignment.checks:
            if check.exercise in unproven and check.id in failed and fresh.get(check.id, (False,))[0]:
                run.tally.pop(check.id, None)
                _run_check(run, check, seeds[check.id], check_timeout)
    finally:
        run.probing = False


PREFLIGHT_ANSWER = (
    "import math\nimport torch\nimport torch.nn.functional as F\n\n\n"
    "def course_preflight(x):\n    return F.softmax(torch.as_tensor(x, dtype=torch.float64), dim=-1) * math.e\n"
)


def preflight(mode: str, limits: SandboxLimits, timeout: float = START_TIMEOUT) -> str | None:
    """Run a known-good answer through a fresh sandbox exactly as a submission's would run
    (the worker, Python, torch, the unprivileged user, an exec and a call): None when it
    works, else why not -- then the batch grades nothing instead of giving every student 0."""
    import torch

    from .sandbox_setup import is_root, needed_dirs, python_paths, unreadable_for_others

    box = Sandbox(mode, limits, ())
    deadline = time.monotonic() + timeout
    problem = None
    try:
        box.start(deadline)
        out = box.request({"op": "exec", "key": "preflight", "source": PREFLIGHT_ANSWER}, deadline)
        if not out.ok:
            problem = f"a known-good answer cell failed in it ({out.error['type']}: {clip(out.error['message'], 300)})"
        else:
            arg = [1.0, 2.0, 3.0]
            out = box.request(
                {"op": "call", "name": "course_preflight", "args": [encode_for_sandbox(arg)], "kwargs": []},
                deadline,
            )
            expected = torch.softmax(torch.tensor(arg, dtype=torch.float64), dim=-1) * math.e
            if not out.ok:
                problem = f"a known-good function raised in it ({out.error['type']}: {clip(out.error['message'], 300)})"
            else:
                value = to_python(out.value)
                if not (
                    isinstance(value, torch.Tensor)
                    and value.shape == expected.shape
                    and torch.allclose(value, expected)
                ):
                    problem = "a known-good function returned a wrong value from it"
    except (SandboxLost, ProtocolError, ValueError, TypeError) as exc:
        problem = str(getattr(exc, "reason", exc))
    finally:
        box.kill()
    if problem is None:
        return None
    hint = ""
    blocked = None
    if is_root():
        blocked = unreadable_for_others(bound=needed_dirs(python_paths()) if mode == "bwrap" else None)
    if blocked:
        hint = (
            f"; the likely cause: student code runs as a fresh unprivileged user, which cannot enter {blocked} on the way "
            f"to this Python ({sys.executable}): install Python and the course where other users can read them "
            "(not under a mode-700 home folder), or `chmod o+x` that folder, or run the grader as an ordinary user"
        )
    return f"the sandbox ({mode}) cannot run a known-good answer: {problem}{hint}"


def _limit_own_memory(megabytes: int | None) -> None:
    """Bound this process's address space (soft limit; children may set their own): check
    code runs here on values a student's code chose, and must not be able to make the grader
    allocate gigabytes (a huge id fed to ``bincount``, a broadcast). An allocation over the
    limit fails the check that made it (MemoryError or RuntimeError), not the batch."""
    if not megabytes:
        return
    try:
        import resource

        with open("/proc/self/status") as fh:
            used = next(int(ln.split()[1]) * 1024 for ln in fh if ln.startswith("VmSize:"))
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        limit = max(int(megabytes) * 2**20, used + 512 * 2**20)
        if hard != resource.RLIM_INFINITY:
            limit = min(limit, hard)
        resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    except (OSError, ValueError, StopIteration, ImportError):
        pass


def main() -> int:
    """JSON lines on stdin/stdout: ``{"op": "grade", ...}`` -> ``{"ok": true, "result": {...}}``."""
    proto_out = os.fdopen(os.dup(1), "w")
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)  # prints from check code must not mix with the protocol
    sys.stdout = open(os.devnull, "w")
    become_subreaper()
    import torch

    torch.set_num_threads(1)
    cache: dict[tuple[str, str], tuple[Assignment, Reference]] = {}
    for line in sys.stdin:
        try:
            req = json.loads(line)
        except ValueError:
            continue
        if req.get("op") == "exit":
            break
        if req.get("op") == "preflight":
            try:
                problem = preflight(req["mode"], SandboxLimits(**req.get("limits", {})))
                reply = {"ok": problem is None, "error": problem}
            except Exception as exc:
                reply = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
            proto_out.write(json.dumps(reply) + "\n")
            proto_out.flush()
            continue
        try:
            path = str(Path(req["solution"]).resolve())
            assignment = load_assignment(path)
            key = (path, assignment.digest)
            if key not in cache:
                cache[key] = (assignment, Reference(assignment))
            assignment, reference = cache[key]
            limits = SandboxLimits(**req.get("limits", {}))
            _limit_own_memory(limits.grader_memory_mb)
            result = grade_answers(
                assignment,
                reference,
                req["answers"],
                mode=req["mode"],
                limits=limits,
                timeout=float(req["timeout"]),
                check_timeout=req.get("check_timeout"),
                cells=req.get("cells"),
                notes=req.get("notes"),
            )
            reply = {"ok": True, "result": result}
        except Exception as exc:
            reply = {
                "ok": False,
                "error": f"{type(exc).__name__}: {exc}",
                "traceback": traceback.format_exc()[-4000:],
            }
        proto_out.write(json.dumps(reply) + "\n")
        proto_out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
