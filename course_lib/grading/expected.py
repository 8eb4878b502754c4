"""Expected values for the visible checks: the same verdict at home as in the grader.

In the grader every call a check makes to a student's function is compared with the
reference answer on the same arguments. A student who runs the visible checks at home has
no reference answer, so without help a check whose own asserts miss a mistake would pass at
home and fail in the grader. ``course release`` therefore runs each visible check (with
``compare``) against the reference answers, records every call (a digest of the arguments
-> the reference's result, or the exception type it raised) and ships that record, packed,
in the released check cell. At home :class:`~course_lib.grading.checks.visible_check`
compares each call with the record, with the check's tolerances and the grader's own
:func:`~course_lib.grading.compare.compare_values`: the same comparison on the same
inputs, so the same verdict.

A visible check with ``compare`` must therefore be deterministic: ``course release`` runs
it twice with different global seeds and refuses it when the calls or results differ (use
``torch.Generator().manual_seed(...)`` for random inputs in visible checks), and its inputs
must be the same numbers on every CPU: ``torch.randn`` and the other normal samplers have
vectorised kernels that draw other floats under other instruction sets, so the release
refuses them (``torch.randint``, ``torch.rand`` and written values are exact everywhere;
``tests/grading/test_grading_visible.py`` records the checks under ``ATEN_CPU_CAPABILITY=default``
and compares). The record
only covers the visible checks' fixed inputs; hidden checks draw fresh inputs in the
grader and are never shipped.
"""

from __future__ import annotations

import base64
import hashlib
import json
import zlib

from .sandbox_worker import WireError, decode, encode

__all__ = ["call_key", "pack", "unpack", "record_check", "Recorder"]

VERSION = 1


def call_key(enc_args: list, enc_kwargs: list) -> str:
    """A digest of a call's encoded arguments (keyword arguments in any order)."""
    text = json.dumps(
        [enc_args, sorted(enc_kwargs, key=lambda kv: kv[0])], sort_keys=True, separators=(",", ":")
    )
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def pack(record: dict) -> str:
    text = json.dumps({"version": VERSION, **record}, sort_keys=True, separators=(",", ":"))
    return base64.b64encode(zlib.compress(text.encode(), 9)).decode("ascii")


def unpack(blob: str) -> dict:
    data = json.loads(zlib.decompress(base64.b64decode("".join(blob.split()))))
    if data.get("version") != VERSION:
        raise ValueError(
            f"expected values of version {data.get('version')!r}; this course_lib reads version {VERSION}"
        )
    return data


class Recorder:
    """Stands for a reference function while a visible check is recorded."""

    def __init__(self, name: str, fn, calls: dict, conflicts: list):
        self.__name__ = name
        self._fn, self._calls, self._conflicts = fn, calls, conflicts

    def __call__(self, *args, **kwargs):
        try:
            enc_args = [encode(a) for a in args]
            enc_kwargs = [[k, encode(v)] for k, v in kwargs.items()]
        except WireError as exc:
            raise TypeError(f"a check passed an argument the grader cannot send: {exc}") from None
        key = call_key(enc_args, enc_kwargs)
        try:
            value = self._fn(*[decode(a) for a in enc_args], **{k: decode(v) for k, v in enc_kwargs})
        except Exception as exc:
            entry = {"raises": [c.__name__ for c in type(exc).__mro__]}
            self._store(key, entry)
            raise
        entry = {"value": encode(value)}
        self._store(key, entry)
        return decode(entry["value"])

    def _store(self, key: str, entry: dict) -> None:
        if key in self._calls and self._calls[key] != entry:
            self._conflicts.append(self.__name__)
        self._calls[key] = entry


def record_check(assignment, reference, check, seed: int) -> tuple[dict, list[str]]:
    """Run a visible check against the reference answers; ``(calls, conflicts)``."""
    import random

    import torch

    calls: dict = {}
    conflicts: list[str] = []
    ns = dict(reference.base)
    for exercise in assignment.exercises:
        for name in exercise.functions:
            fn = reference.functions[name]
            ns[name] = Recorder(name, fn, calls, conflicts) if exercise.id == check.exercise else fn
    random.seed(seed)
    torch.manual_seed(seed)
    exec(compile(check.source, f"<check {check.id}>", "exec"), ns)
    return calls, conflicts
