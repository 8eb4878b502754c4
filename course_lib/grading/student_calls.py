"""A student's function as the checks see it: :class:`StudentFunction`, and what crosses the sandbox with each call.

A check calls ``f(...)`` as in the notebook; the grader sends the call to the student's
process, compares the answer with the reference answer's on the same inputs, applies the
student's in-place changes of the arguments to the check's own objects (refusing a change of
shape, dtype, length or type the reference did not make), keeps arguments that are one
object one object in the sandbox (:func:`argument_aliases`) and tells a released stub's
``NotImplementedError`` from any other (:func:`is_stub_message`).
"""

from __future__ import annotations

import builtins
import hashlib
import inspect
import re
from typing import Any

from .compare import compare_values
from .format import Check
from .sandbox import SandboxLost
from .sandbox_worker import apply_aliases, decode
from .wire import ProtocolError, describe, encode_for_sandbox, to_python

__all__ = [
    "MESSAGE_LIMIT",
    "CheckFailure",
    "Lost",
    "clip",
    "StudentFunction",
    "informative",
    "digest",
    "mutate_in_place",
    "is_stub_message",
    "argument_aliases",
    "apply_mutations",
]


MESSAGE_LIMIT = 2000


class CheckFailure(BaseException):
    """A check failed because of the student's code (BaseException: no ``except Exception`` swallows it)."""


class Lost(BaseException):
    def __init__(self, lost: SandboxLost):
        super().__init__(lost.reason)
        self.lost = lost


def clip(text: str, limit: int = MESSAGE_LIMIT) -> str:
    text = str(text)
    return text if len(text) <= limit else text[:limit] + f" ... [{len(text) - limit} more characters]"


class StudentFunction:
    """Stands for a student's function inside a check: call -> sandbox, compare with the reference."""

    def __init__(self, run: Any, check: Check, name: str, reference, deadline: list[float]):
        self._run, self._check, self._name, self._reference, self._deadline = (
            run,
            check,
            name,
            reference,
            deadline,
        )
        self.__name__ = name

    def _describe_call(self, args, kwargs) -> str:
        try:
            bound = inspect.signature(self._reference).bind(*args, **kwargs)
            parts = [
                f"{k}={describe(v) if not self._show(v) else repr(v)}" for k, v in bound.arguments.items()
            ]
        except (TypeError, ValueError):
            parts = [describe(a) for a in args] + [f"{k}={describe(v)}" for k, v in kwargs.items()]
        return f"{self._name}({', '.join(parts)})"

    def _show(self, v) -> bool:
        """Scalars of visible checks are shown; of hidden checks only their type."""
        return not self._check.hidden and (v is None or isinstance(v, (bool, int, float, str)))

    def __call__(self, *args, **kwargs):
        run, check = self._run, self._check
        enc_args = [encode_for_sandbox(a) for a in args]
        enc_kwargs = [[k, encode_for_sandbox(v)] for k, v in kwargs.items()]
        ref_exc = ref_value = None
        aliases = argument_aliases(args, kwargs)
        ref_args, ref_kwargs = [decode(a) for a in enc_args], {k: decode(v) for k, v in enc_kwargs}
        apply_aliases(ref_args, ref_kwargs, aliases)
        try:
            ref_value = self._reference(*ref_args, **ref_kwargs)
        except Exception as exc:
            ref_exc = exc
        call = self._describe_call(args, kwargs)
        for attempt in range(2):
            run.ensure_sandbox()
            try:
                req = {"op": "call", "name": self._name, "args": enc_args, "kwargs": enc_kwargs}
                if aliases:
                    req["aliases"] = aliases
                outcome = run.sandbox.request(req, self._deadline[0])
                break
            except SandboxLost as exc:  # the student process is gone; the next check forks a new one
                out, dropped = run.sandbox.take_output() if run.sandbox else ("", 0)
                run.call_output.append(out)
                run.dropped += dropped
                if exc.kind == "exit" and exc.before_request:
                    # it ended after its last answer, before it read this call
                    if (
                        run.answered_in_check
                    ):  # ... between two calls of this check: it was serving this check
                        raise CheckFailure(
                            f"{call}: the process running your code ended after answering the previous call ({exc.reason})"
                        ) from None
                    if (
                        attempt == 0
                    ):  # ... after the previous check was done: a fresh process answers this call
                        continue
                if exc.kind == "exit" and attempt == 0 and run.spawned_for != check.id:
                    # it ended while answering, in a process started for an earlier check (whose calls
                    # may have left something behind that ended it): a fresh process answers this call
                    continue
                self._lost(exc, call)
        run.answered_in_check = True
        run.call_output.append(outcome.output)
        run.dropped += outcome.output_dropped
        if run.probing:
            return self._probe(outcome, enc_args, enc_kwargs, ref_value, ref_exc)
        if outcome.mutated:
            apply_mutations(args, kwargs, outcome.mutated, call, ref_args, ref_kwargs, hidden=check.hidden)
        if not outcome.ok:
            self._tally(enc_args, enc_kwargs, ref_value, ref_exc, matched=False)
            err = outcome.error
            if ref_exc is not None and check.compare and type(ref_exc).__name__ in err["mro"]:
                raise ref_exc
            if err["type"] == "NameError" and err["message"] == f"your answer does not define {self._name!r}":
                note = run.answer_note(check.exercise)
                raise CheckFailure(
                    f"your answer does not define {self._name}" + (f" ({note})" if note else "")
                )
            if err["type"] == "NotImplementedError" and is_stub_message(err["message"], self._name):
                raise CheckFailure(f"{self._name} is not implemented yet (it raised NotImplementedError)")
            if err["type"] == "ForbiddenCall":
                raise CheckFailure(f"{call}: {clip(err['message'], 300)}")
            detail = clip(err["message"], 500)
            tb = err.get("traceback") or ""
            if 'File "' in tb:  # the student's frames: where it went wrong
                run.call_output.append(clip(tb, 4000))
            if ref_exc is not None:
                raise CheckFailure(
                    f"{call} raised {err['type']}: {detail} (it should raise {type(ref_exc).__name__})"
                )
            if not check.compare:
                for name in err["mro"]:
                    cls = getattr(builtins, name, None)
                    if isinstance(cls, type) and issubclass(cls, Exception):
                        exc = cls(f"{call} raised {err['type']}: {detail}")
                        exc.__course_raised_by_student__ = True  # uncaught, the check reports it as raised
                        raise exc
            raise CheckFailure(f"{call} raised {err['type']}: {detail}")
        try:
            value = to_python(outcome.value)
        except (ProtocolError, ValueError, TypeError) as exc:
            self._tally(enc_args, enc_kwargs, ref_value, ref_exc, matched=False)
            raise CheckFailure(f"{call} returned data the grader cannot read ({exc})") from None
        if check.compare:
            if ref_exc is not None:
                raise CheckFailure(
                    f"{call} returned {describe(value)}, but should raise {type(ref_exc).__name__}"
                )
            msg = compare_values(
                ref_value,
                value,
                rtol=check.rtol,
                atol=check.atol,
                hidden=check.hidden,
                exact_dtype=check.exact_dtype,
            )
            self._tally(enc_args, enc_kwargs, ref_value, ref_exc, matched=not msg)
            if msg:
                raise CheckFailure(f"{call}: {msg}")
        return value

    def _tally(self, enc_args, enc_kwargs, ref_value, ref_exc, *, matched: bool) -> None:
        """Count a compared call whose input was drawn for this submission (not one that any
        check of the exercise makes on every run, such as a visible check's published inputs)
        and whose reference result is informative, and whether the
        student's result matched (``run.tally``: check id -> [such calls, matched, digests of
        the matched results]): the evidence of a working function that a visible check's
        points need (:mod:`course_lib.grading.gate`)."""
        check, run = self._check, self._run
        every = run.reference.fresh_inputs()
        if ref_exc is not None or not check.compare or not every.get(check.id, (False,))[0]:
            return
        from .expected import call_key

        if check.exercise not in run.fixed:  # the inputs some check of the exercise always makes
            ids = {c.id for c in run.assignment.checks if c.exercise == check.exercise}
            run.fixed[check.exercise] = frozenset().union(*(every[i][1] for i in ids if i in every))
        if call_key(enc_args, enc_kwargs) in run.fixed[check.exercise] or not informative(ref_value):
            return
        calls, matches, seen = self._run.tally.setdefault(check.id, [0, 0, set()])
        if matched:  # a constant fallback matches only calls that share one result
            seen.add(digest(ref_value))
        self._run.tally[check.id] = [calls + 1, matches + matched, seen]

    def _probe(self, outcome, enc_args, enc_kwargs, ref_value, ref_exc):
        """A call while the grader probes (``run.probing``: it re-runs a failed check on drawn
        inputs only to count the calls the student's function gets right, its verdict
        unchanged): count this one, then answer as the reference does, so that the check goes
        on to its later calls instead of stopping at the first wrong one."""
        check = self._check
        matched = False
        if outcome.ok and ref_exc is None and check.compare:
            try:
                value = to_python(outcome.value)
            except (ProtocolError, ValueError, TypeError):
                pass
            else:
                kinds = {"rtol": check.rtol, "atol": check.atol, "exact_dtype": check.exact_dtype}
                matched = not compare_values(ref_value, value, hidden=True, **kinds)
        self._tally(enc_args, enc_kwargs, ref_value, ref_exc, matched=matched)
        if ref_exc is not None:
            raise ref_exc
        return ref_value

    def _lost(self, exc: SandboxLost, call: str):
        run, check = self._run, self._check
        if exc.kind == "timeout":
            if check.points > 0:  # a 0-point check (for learning) never uses up the exercise's timeouts
                run.timeouts[check.exercise] = run.timeouts.get(check.exercise, 0) + 1
            if self._deadline[0] >= run.deadline:
                raise CheckFailure(
                    f"{call} did not finish before the submission's time limit was reached"
                ) from None
            raise CheckFailure(
                f"{call} did not finish within the time limit ({self._limit_text()})"
            ) from None
        raise CheckFailure(f"{call}: {exc.reason}") from None

    def _limit_text(self) -> str:
        return f"{self._check.timeout:g} s per check"


def _leaves(value):
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (list, tuple)):
        for v in value:
            yield from _leaves(v)
    else:
        yield value


def informative(value) -> bool:
    """Whether a reference result says something about the inputs: not empty, not None, not
    all one value (zeros, a single 0 or False); what a constant fallback could return."""
    import torch

    numbers, other = [], False
    for leaf in _leaves(value):
        if isinstance(leaf, torch.Tensor):
            flat = leaf.detach().reshape(-1)
            if flat.numel() > 1 and bool((flat != flat[0]).any()):
                return True
            if flat.numel() >= 1:
                numbers.append(float(flat[0]))
        elif isinstance(leaf, (bool, int, float)):
            numbers.append(float(leaf))
        elif isinstance(leaf, str) and leaf:
            other = True
    if other or len(set(numbers)) > 1:
        return True
    return len(numbers) == 1 and numbers[0] != 0.0


def digest(value) -> str:
    """A short fingerprint of a reference result (two results with the same one are the same)."""
    import torch

    h = hashlib.sha256()
    for leaf in _leaves(value):
        if isinstance(leaf, torch.Tensor):
            t = leaf.detach().contiguous()
            h.update(f"{t.dtype}{tuple(t.shape)}".encode())
            h.update(t.numpy().tobytes() if t.dtype != torch.bfloat16 else t.float().numpy().tobytes())
        else:
            h.update(repr(leaf).encode())
        h.update(b"|")
    return h.hexdigest()[:16]


def mutate_in_place(orig, new) -> None:
    """Make the check's own argument ``orig`` equal ``new`` (how the student's call left its
    copy), keeping the object: the check sees the change as it would in the notebook."""
    import torch

    if isinstance(orig, torch.Tensor):
        if isinstance(new, torch.Tensor) and new.dtype == orig.dtype:
            with torch.no_grad():
                if new.shape == orig.shape:
                    orig.copy_(new)
                else:
                    orig.set_(new.clone())
            if (
                orig.is_leaf and orig.requires_grad != new.requires_grad
            ):  # e.g. requires_grad_(False) on an argument
                orig.requires_grad_(new.requires_grad)
    elif isinstance(orig, list) and isinstance(new, (list, tuple)):
        for i in range(min(len(orig), len(new))):
            if isinstance(orig[i], (torch.Tensor, list, dict, tuple)) and type(orig[i]) is type(new[i]):
                mutate_in_place(orig[i], new[i])
            else:
                orig[i] = new[i]
        del orig[len(new) :]
        orig.extend(new[len(orig) :])
    elif isinstance(orig, tuple) and isinstance(new, (list, tuple)) and len(orig) == len(new):
        for o, n in zip(orig, new):
            mutate_in_place(o, n)
    elif isinstance(orig, dict) and isinstance(new, dict):
        for k in list(orig):
            if k not in new:
                del orig[k]
        for k, v in new.items():
            if (
                k in orig
                and isinstance(orig[k], (torch.Tensor, list, dict, tuple))
                and type(orig[k]) is type(v)
            ):
                mutate_in_place(orig[k], v)
            else:
                orig[k] = v


_STUB_MESSAGE = re.compile(r"exercise .*: write (\w+)\(\) here \(see the instructions above\)", re.S)


def is_stub_message(message: str, name: str) -> bool:
    """Whether a NotImplementedError is the released stub's (or a bare one): then the answer
    is "not implemented yet"; any other message (torch's, the student's own) is shown."""
    message = (message or "").strip()
    m = _STUB_MESSAGE.fullmatch(message)
    return not message or (m is not None and m.group(1) == name)


def argument_aliases(args, kwargs) -> list:
    """``[[first, again], ...]``: arguments that are one object (a tensor, list or dict passed
    twice), by index or keyword, so that they stay one object in the sandbox and for the
    reference, as in the notebook."""
    import torch

    seen: dict[int, object] = {}
    out = []
    for key, value in [*enumerate(args), *kwargs.items()]:
        if isinstance(value, (torch.Tensor, list, dict)):
            if id(value) in seen:
                out.append([seen[id(value)], key])
            else:
                seen[id(value)] = key
    return out


def _structure(value):
    """What an in-place change may not alter: types, tensor shapes and dtypes, lengths, keys."""
    import torch

    if isinstance(value, torch.Tensor):
        return ("tensor", tuple(value.shape), value.dtype)
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, tuple(_structure(v) for v in value))
    if isinstance(value, dict):
        return ("dict", tuple((k, _structure(v)) for k, v in value.items()))
    return type(value).__name__


def apply_mutations(
    args, kwargs, mutated, call: str, ref_args=None, ref_kwargs=None, *, hidden: bool = False
) -> None:
    """Apply the student's in-place changes to the check's own arguments. A change of shape,
    dtype, length or type that the reference answer did not make to its copy fails the check:
    the check's own code must never work on inputs the student's code chose."""
    for key, encoded in mutated:
        try:
            new = to_python(encoded)
        except (ProtocolError, ValueError, TypeError) as exc:
            raise CheckFailure(
                f"{call} changed an argument into data the grader cannot read ({exc})"
            ) from None
        if isinstance(key, int) and 0 <= key < len(args):
            orig, ref, name = (
                args[key],
                (ref_args[key] if ref_args is not None and key < len(ref_args) else None),
                f"argument {key + 1}",
            )
        elif isinstance(key, str) and key in kwargs:
            orig, ref, name = kwargs[key], (ref_kwargs or {}).get(key), f"argument {key!r}"
        else:
            continue
        if (
            ref_args is not None
            and _structure(new) != _structure(orig)
            and _structure(new) != _structure(ref)
        ):
            what = "" if hidden else f" (from {describe(orig)} to {describe(new)})"
            raise CheckFailure(
                f"{call} changed the shape, dtype, length or type of its {name} in place{what}; "
                "a function must not change its arguments this way (return a new value instead)"
            )
        mutate_in_place(orig, new)
