"""Helpers for check cells. They behave the same in a student's notebook and in the grader.

>>> from course_lib.grading.checks import raises
>>> with raises(ValueError):
...     int("not a number")
"""

from __future__ import annotations

from contextlib import contextmanager

__all__ = ["raises"]


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
