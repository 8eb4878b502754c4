"""Helpers for check cells. They behave the same in a student's notebook and in the grader.

>>> from course_lib.grading.checks import raises
>>> with raises(ValueError):
...     int("not a number")
"""

from __future__ import annotations

from contextlib import contextmanager

__all__ = ["course_lib_use", "raises", "visible_check"]


@contextmanager
def raises(exc_type: type[BaseException] | tuple[type[BaseException], ...], match: str | None = None):
    """Fail (AssertionError) unless the block raises ``exc_type``; ``match`` is a substring of the message.

    In the grader, when the reference and the student's function both raise this type, the
    reference's exception arrives here; when only the reference raises, the check already
    failed with a message saying so.
    """
    names = exc_type.__name__ if isinstance(exc_type, type) else " or ".join(t.__name__ for t in exc_type)
    try:
        yield
    except exc_type as exc:
        if match is not None and match not in str(exc):
            raise AssertionError(f"expected a {names} mentioning {match!r}, got: {exc}") from None
        return
    raise AssertionError(f"expected {names} to be raised")


def course_lib_use(fn, _seen: set | None = None) -> str | None:
    """How a student's function uses ``course_lib`` (which the grader's sandbox cannot import),
    or None: an ``import course_lib...`` in its code, or a name it uses that is bound to a
    ``course_lib`` module, function or class (any alias), also through the helpers it calls.
    The check helpers (``course_lib.grading.checks``) are allowed, as in the grader."""
    import types

    seen = _seen if _seen is not None else set()
    code = getattr(fn, "__code__", None)
    if not isinstance(code, types.CodeType) or id(fn) in seen:
        return None
    seen.add(id(fn))

    def names(co):
        yield from co.co_names
        for const in co.co_consts:
            if isinstance(const, types.CodeType):
                yield from names(const)

    def from_course_lib(obj) -> str | None:
        mod = obj.__name__ if isinstance(obj, types.ModuleType) else getattr(obj, "__module__", None)
        if isinstance(mod, str) and (mod == "course_lib" or mod.startswith("course_lib.")):
            if not mod.startswith(("course_lib.grading.checks", "course_lib.grading.sandbox_worker")):
                return mod  # (sandbox_worker: the stubs that turn forbidden functions off, as in the grader)
        return None

    # the cell that defined it (IPython keeps each cell's source in linecache): a top-level
    # import of course_lib above the function stops that cell in the grader before it is defined
    import linecache
    import re

    for line in linecache.getlines(code.co_filename)[: max(code.co_firstlineno - 1, 0)]:
        m = re.match(r"(?:from\s+(course_lib[\w.]*)\s+import\b|import\s+(course_lib[\w.]*))", line)
        if m and not (m.group(1) or m.group(2)).startswith("course_lib.grading.checks"):
            return f"is defined in a cell that imports {m.group(1) or m.group(2)} above it"

    env = dict(getattr(fn, "__globals__", {}) or {})
    for cell in getattr(fn, "__closure__", None) or ():
        try:
            env[f"<closure {len(env)}>"] = cell.cell_contents
        except ValueError:
            pass
    wanted = set(names(code)) | {k for k in env if k.startswith("<closure")}
    for n in sorted(wanted):
        if (
            (n == "course_lib" or n.startswith("course_lib."))
            and n not in env
            and not n.startswith("course_lib.grading.checks")
        ):
            return f"imports {n}"
        if n not in env:
            continue
        obj = env[n]
        mod = from_course_lib(obj)
        if mod:
            return f"uses {n} from {mod}"
        obj = getattr(
            obj, "__course_student_function__", obj
        )  # another check's wrapper around a student function
        if isinstance(obj, types.FunctionType) and not str(getattr(obj, "__module__", "")).startswith(
            "course_lib."
        ):
            found = course_lib_use(obj, seen)
            if found:
                return found
    return None


class visible_check:
    """The frame of a released visible check cell (``course release`` writes it)::

        with visible_check("causal-mask-small", "The causal mask", globals(), expected="..."):
            ...  # the check's code

    While the block runs, each function of the exercise in ``namespace`` is wrapped: every
    call whose arguments the instructor's check made when the notebook was released is
    compared with the reference solution's result on them (``expected``, packed by
    :mod:`course_lib.grading.expected`), exactly as the grader compares it; the result
    comes back as the plain data the grader would see. A failure names the check and its
    exercise. The functions are restored when the block ends.
    """

    def __init__(self, check_id: str, title: str, namespace: dict, expected: str | None = None):
        self.check_id, self.title, self.namespace = check_id, title, namespace
        self.record = None
        if expected is not None:
            from .expected import unpack

            self.record = unpack(expected)
        self._saved: dict = {}
        self.unrecorded = 0

    def __enter__(self):
        if self.record is None:  # no recorded calls: check the notebook functions the check's code names
            import sys
            import types

            for n in sys._getframe(1).f_code.co_names:
                fn = getattr(self.namespace.get(n), "__course_student_function__", self.namespace.get(n))
                if isinstance(fn, types.FunctionType) and fn.__module__ == self.namespace.get(
                    "__name__", "__main__"
                ):
                    used = course_lib_use(fn)
                    if used:
                        raise AssertionError(
                            f"check {self.check_id!r} of exercise {self.title!r} failed: {n} {used}: graded answers "
                            "cannot use course_lib (only course_lib.grading.checks), so this check fails in the grader"
                        )
            return self
        for name in self.record["functions"]:
            fn = self.namespace.get(name)
            if fn is None:
                continue  # the check's own call raises the NameError
            fn = getattr(fn, "__course_student_function__", fn)  # a cell re-run after a failure
            self._saved[name] = self.namespace[name]
            self.namespace[name] = self._wrap(name, fn)
        return self

    def __exit__(self, exc_type, exc, tb):
        for name, fn in self._saved.items():
            self.namespace[name] = fn
        self._saved = {}
        if self.unrecorded and exc is None:
            print(
                f"note: {self.unrecorded} call(s) in check {self.check_id!r} had inputs that the shipped expected "
                "values do not cover; only the check's own asserts judged them (the grader compares them too)"
            )
        if isinstance(exc, Exception):
            note = f"check {self.check_id!r} of exercise {self.title!r} failed"
            if isinstance(exc, AssertionError):
                exc.args = (f"{note}: {exc}" if str(exc) else note,) + tuple(exc.args[1:])
            elif hasattr(exc, "add_note"):
                exc.add_note(note)
        return False

    def _wrap(self, name: str, fn):
        import functools

        from .compare import compare_values
        from .expected import call_key
        from .sandbox_worker import WireError, decode, encode

        calls, rtol, atol = self.record["calls"], self.record["rtol"], self.record["atol"]

        def describe(args, kwargs) -> str:
            parts = [_short(a) for a in args] + [f"{k}={_short(v)}" for k, v in kwargs.items()]
            return f"{name}({', '.join(parts)})"

        used = course_lib_use(fn)

        @functools.wraps(fn)
        def checked(*args, **kwargs):
            if used:  # the grader's sandbox has no course_lib: this answer fails there
                raise AssertionError(
                    f"{name} {used}: graded answers cannot use course_lib (only course_lib.grading.checks), "
                    "so this check fails in the grader; write it with torch and the standard library"
                )
            try:
                key = call_key([encode(a) for a in args], [[k, encode(v)] for k, v in kwargs.items()])
            except WireError:
                key = None
            expected = calls.get(key)
            if expected is None:
                self.unrecorded += 1
            try:
                result = fn(*args, **kwargs)
            except Exception as exc:
                if expected is None:
                    raise
                if "raises" not in expected:  # the grader fails the check here, whatever the check catches
                    raise AssertionError(
                        f"{describe(args, kwargs)} raised {type(exc).__name__}: {exc}"
                    ) from exc
                if expected["raises"][0] not in [c.__name__ for c in type(exc).__mro__]:
                    raise AssertionError(
                        f"{describe(args, kwargs)} raised {type(exc).__name__}: {exc} (it should raise {expected['raises'][0]})"
                    ) from exc
                raise
            if expected is None:
                return result
            if "raises" in expected:
                raise AssertionError(
                    f"{describe(args, kwargs)} returned a value, but should raise {expected['raises'][0]}"
                )
            try:
                value = decode(encode(result))
            except WireError as exc:
                raise AssertionError(f"{name} returned {exc}, which the grader cannot compare") from None
            msg = compare_values(
                decode(expected["value"]),
                value,
                rtol=rtol,
                atol=atol,
                hidden=False,
                exact_dtype=bool(self.record.get("exact_dtype")),
            )
            if msg:
                raise AssertionError(f"{describe(args, kwargs)}: {msg}")
            return value

        checked.__course_student_function__ = fn
        return checked


def _short(value) -> str:
    try:
        import torch

        if isinstance(value, torch.Tensor):
            grad = " requiring grad" if value.requires_grad else ""
            return f"{str(value.dtype).replace('torch.', '')}[{', '.join(map(str, value.shape))}]{grad}"
    except ImportError:  # pragma: no cover
        pass
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
