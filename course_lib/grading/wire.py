"""Values crossing from the sandbox to the grader: JSON, validated, never pickle.

A response from the sandbox is one line of JSON. :func:`parse_response` rejects it unless
it is small enough, nested shallowly enough, matches ``response.schema.json`` and carries
the id of the request it answers; :func:`to_python` then rebuilds plain values (None,
bool, int, float, str, list, tuple, dict, torch dtypes and dense CPU tensors) and checks
that every tensor's byte count matches its shape and dtype. No object from the student's
process is ever reconstructed, so nothing it sends can run code or override ``__eq__``
in the grader.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
from functools import lru_cache
from importlib import resources

from .sandbox_worker import MAX_DEPTH, TENSOR_DTYPES, WireError, encode

__all__ = ["MAX_LINE", "ProtocolError", "parse_response", "to_python", "encode", "describe"]

MAX_LINE = 96 * 2**20  # bytes in one response line


class ProtocolError(ValueError):
    """A response that is malformed, oversized or out of order."""


@lru_cache(maxsize=1)
def _validator():
    import jsonschema

    schema = json.loads(resources.files("course_lib.grading").joinpath("response.schema.json").read_text())
    return jsonschema.Draft202012Validator(schema)


def _depth_ok(obj, limit: int) -> bool:
    stack = [(obj, 0)]
    while stack:
        node, depth = stack.pop()
        if depth > limit:
            return False
        if isinstance(node, dict):
            stack.extend((v, depth + 1) for v in node.values())
        elif isinstance(node, list):
            stack.extend((v, depth + 1) for v in node)
    return True


def _reject_constant(name):
    raise ValueError(f"non-standard JSON constant {name}")


def parse_response(line: bytes, expected_id: int) -> dict:
    """Validate one response line; raise :class:`ProtocolError` with the reason."""
    if len(line) > MAX_LINE:
        raise ProtocolError(f"response of {len(line)} bytes (limit {MAX_LINE})")
    try:
        obj = json.loads(line, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as exc:
        raise ProtocolError(f"response is not valid JSON ({type(exc).__name__})") from None
    # each value level is a dict plus a list (plus a pair for dict entries)
    if not _depth_ok(obj, 3 * MAX_DEPTH + 8):
        raise ProtocolError("response nested too deeply")
    try:
        error = next(iter(_validator().iter_errors(obj)), None)
    except RecursionError:
        raise ProtocolError("response nested too deeply") from None
    if error is not None:
        raise ProtocolError(f"response does not match the schema: {error.message[:200]}")
    if obj["id"] != expected_id:
        raise ProtocolError(f"response to request {obj['id']} while waiting for {expected_id}")
    return obj


def to_python(value: dict):
    """A schema-valid value -> Python objects, checking tensor sizes."""
    import torch

    t = value["t"]
    if t == "none":
        return None
    if t in ("bool", "int", "str"):
        return value["v"]
    if t == "float":
        v = value["v"]
        return float(v) if isinstance(v, str) else float(v)
    if t in ("list", "tuple"):
        items = [to_python(v) for v in value["items"]]
        return items if t == "list" else tuple(items)
    if t == "dict":
        out = {}
        for k, v in value["items"]:
            if k in out:
                raise ProtocolError(f"dict key {k!r} sent twice")
            out[k] = to_python(v)
        return out
    if t == "dtype":
        return getattr(torch, value["v"])
    if t == "tensor":
        if value["dtype"] not in TENSOR_DTYPES:
            raise ProtocolError(f"unknown dtype {value['dtype']!r}")
        dtype = getattr(torch, value["dtype"])
        shape = value["shape"]
        numel = math.prod(shape)
        itemsize = torch.empty((), dtype=dtype).element_size()
        try:
            raw = base64.b64decode(value["data"], validate=True)
        except (binascii.Error, ValueError):
            raise ProtocolError("tensor data is not base64") from None
        if len(raw) != numel * itemsize:
            raise ProtocolError(f"tensor data has {len(raw)} bytes; shape {shape} of {value['dtype']} needs {numel * itemsize}")
        if numel == 0:
            return torch.empty(shape, dtype=dtype)
        return torch.frombuffer(bytearray(raw), dtype=dtype).reshape(shape)
    raise ProtocolError(f"unknown value kind {t!r}")


def describe(value) -> str:
    """A short description of a value that shows no data: ``float32[2, 3]``, ``tuple(2)``, ``int``."""
    import torch

    if isinstance(value, torch.Tensor):
        return f"{str(value.dtype).replace('torch.', '')}[{', '.join(map(str, value.shape))}]"
    if isinstance(value, (list, tuple)):
        return f"{type(value).__name__} of {len(value)}"
    if isinstance(value, dict):
        return f"dict of {len(value)}"
    if value is None:
        return "None"
    if isinstance(value, (bool, int, float)):
        return type(value).__name__
    return type(value).__name__


def encode_for_sandbox(value):
    """Encode an argument for the sandbox; an unsupported value is the check author's mistake."""
    try:
        return encode(value)
    except WireError as exc:
        raise TypeError(f"a check passed an argument the sandbox cannot receive: {exc}") from None
