"""Values crossing from the sandbox to the grader: JSON, validated, never pickle.

A response from the sandbox is one line of JSON. :func:`parse_response` rejects it unless
it is small enough, nested shallowly enough, matches ``response.schema.json`` and carries
the id of the request it answers; :func:`to_python` then rebuilds plain values (None,
bool, int, float, str, list, tuple, dict, torch dtypes and dense CPU tensors) and checks
that every tensor's byte count matches its shape and dtype. A tensor may carry
``"grad": true`` (floating-point dtypes only): it is rebuilt as a leaf that requires grad,
so a check can tell a result still attached to a graph from a detached one. No object
from the student's process is ever reconstructed, so nothing it sends can run code or
override ``__eq__`` in the grader.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
from functools import lru_cache
from importlib import resources

from .sandbox_worker import MAX_DEPTH, MAX_ITEMS, TENSOR_DTYPES, WireError, encode

__all__ = [
    "MAX_LINE",
    "ProtocolError",
    "parse_response",
    "validate_response",
    "to_python",
    "encode",
    "describe",
]

MAX_LINE = 96 * 2**20  # bytes in one response line


class ProtocolError(ValueError):
    """A response that is malformed, oversized or out of order."""


@lru_cache(maxsize=1)
def _validator():
    """The JSON schema (``response.schema.json``): documentation, and the reference the tests
    hold :func:`validate_response` to. Grading uses the hand-written validator: jsonschema
    needs about 20 s per MB of small values, which a forged response would turn into grader
    time outside every deadline."""
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


class _Invalid(Exception):
    pass


_INT_MIN, _INT_MAX = -(2**63), 2**63 - 1
_VALUE_KEYS = {
    "none": ({"t"}, set()),
    "bool": ({"t", "v"}, {"v"}),
    "int": ({"t", "v"}, {"v"}),
    "float": ({"t", "v"}, {"v"}),
    "str": ({"t", "v"}, {"v"}),
    "list": ({"t", "items"}, {"items"}),
    "tuple": ({"t", "items"}, {"items"}),
    "dict": ({"t", "items"}, {"items"}),
    "dtype": ({"t", "v"}, {"v"}),
    "tensor": ({"t", "dtype", "shape", "data", "grad"}, {"dtype", "shape", "data"}),  # "grad": optional
}
GRAD_DTYPES = frozenset(d for d in TENSOR_DTYPES if d.startswith(("float", "bfloat", "complex")))
MAX_MUTATED = 64  # arguments a response may report as changed by the call
_MAX_OBJECTS = 4 * MAX_ITEMS + 1000
_MAX_ARRAYS = 4 * MAX_ITEMS + 1000
_MAX_STRINGS = 12 * MAX_ITEMS + 1000
_MAX_NUMBERS = 2 * MAX_ITEMS + 2000  # ints, floats, tensor shapes, the id


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _str(x, limit: int, what: str) -> None:
    if not isinstance(x, str) or len(x) > limit:
        raise _Invalid(f"{what} must be a string of at most {limit} characters")


def _check_value(v, depth: int, budget: list[int]) -> None:
    if depth > MAX_DEPTH + 1:
        raise _Invalid("value nested too deeply")
    if not isinstance(v, dict) or "t" not in v:
        raise _Invalid("a value must be an object with a 't'")
    t = v["t"]
    if not isinstance(t, str) or t not in _VALUE_KEYS:
        raise _Invalid(f"unknown value kind {str(t)[:20]!r}")
    allowed, required = _VALUE_KEYS[t]
    if not set(v) <= allowed or not required <= set(v):
        optional = sorted(allowed - required - {"t"})
        raise _Invalid(
            f"a {t} value must have the keys {sorted(required | {'t'})}"
            + (f" (optionally {optional})" if optional else "")
        )
    if t == "bool" and not isinstance(v["v"], bool):
        raise _Invalid("bool value")
    elif t == "int" and not (_is_int(v["v"]) and _INT_MIN <= v["v"] <= _INT_MAX):
        raise _Invalid("int value")
    elif t == "float":
        x = v["v"]
        if not ((isinstance(x, (int, float)) and not isinstance(x, bool)) or x in ("nan", "inf", "-inf")):
            raise _Invalid("float value")
    elif t == "str":
        _str(v["v"], 100_000, "str value")
    elif t == "dtype" and v["v"] not in TENSOR_DTYPES:
        raise _Invalid("dtype value")
    elif t == "tensor":
        if v["dtype"] not in TENSOR_DTYPES:
            raise _Invalid("tensor dtype")
        shape = v["shape"]
        if (
            not isinstance(shape, list)
            or len(shape) > 8
            or not all(_is_int(s) and 0 <= s <= 2**31 - 1 for s in shape)
        ):
            raise _Invalid("tensor shape")
        _str(v["data"], 100_000_000, "tensor data")
        if "grad" in v:
            if not isinstance(v["grad"], bool):
                raise _Invalid("a tensor's grad must be a boolean")
            if v["grad"] and v["dtype"] not in GRAD_DTYPES:
                raise _Invalid("only a floating-point tensor can require grad")
    elif t in ("list", "tuple", "dict"):
        items = v["items"]
        if not isinstance(items, list) or len(items) > 10_000:
            raise _Invalid(f"{t} items")
        budget[0] -= len(items)
        if budget[0] < 0:
            raise _Invalid(f"more than {MAX_ITEMS} list/tuple/dict entries in one response")
        for item in items:
            if t == "dict":
                if not isinstance(item, list) or len(item) != 2:
                    raise _Invalid("a dict entry must be a [key, value] pair")
                _str(item[0], 1000, "a dict key")
                item = item[1]
            _check_value(item, depth + 1, budget)


def _check_error(e) -> None:
    if (
        not isinstance(e, dict)
        or not {"type", "mro", "message"} <= set(e)
        or not set(e) <= {"type", "mro", "message", "traceback"}
    ):
        raise _Invalid("an error must have type, mro, message (and optionally traceback)")
    _str(e["type"], 200, "error type")
    if not isinstance(e["mro"], list) or len(e["mro"]) > 64:
        raise _Invalid("error mro")
    for m in e["mro"]:
        _str(m, 200, "error mro entry")
    _str(e["message"], 20_000, "error message")
    if "traceback" in e:
        _str(e["traceback"], 50_000, "error traceback")


def validate_response(obj) -> None:
    """Raise :class:`ProtocolError` unless ``obj`` is a response ``response.schema.json`` allows
    (plus a total of :data:`MAX_ITEMS` entries). Linear in the size of the response."""
    try:
        if not isinstance(obj, dict):
            raise _Invalid("a response must be an object")
        extra = set(obj) - {"id", "ok", "value", "error", "warnings", "mutated"}
        if extra:
            raise _Invalid(f"additional properties are not allowed ({sorted(extra)[0][:40]!r})")
        if "id" not in obj or "ok" not in obj:
            raise _Invalid("'id' and 'ok' are required properties")
        if not (_is_int(obj["id"]) and 0 <= obj["id"] <= 1_000_000_000):
            raise _Invalid("id")
        if not isinstance(obj["ok"], bool):
            raise _Invalid("ok")
        budget = [MAX_ITEMS]
        if obj["ok"]:
            if "value" not in obj or "error" in obj:
                raise _Invalid("a successful response has a value and no error")
            _check_value(obj["value"], 0, budget)
        else:
            if "error" not in obj or "value" in obj:
                raise _Invalid("a failed response has an error and no value")
            _check_error(obj["error"])
        if "warnings" in obj:
            w = obj["warnings"]
            if not isinstance(w, list) or len(w) > 20:
                raise _Invalid("warnings")
            for x in w:
                _str(x, 2000, "a warning")
        if "mutated" in obj:
            m = obj["mutated"]
            if not isinstance(m, list) or len(m) > MAX_MUTATED:
                raise _Invalid("mutated")
            for pair in m:
                if (
                    not isinstance(pair, list)
                    or len(pair) != 2
                    or not (_is_int(pair[0]) or isinstance(pair[0], str))
                ):
                    raise _Invalid("a mutated entry must be an [argument index or name, value] pair")
                if isinstance(pair[0], str):
                    _str(pair[0], 200, "an argument name")
                _check_value(pair[1], 0, [MAX_ITEMS])
    except _Invalid as exc:
        raise ProtocolError(f"response does not match the schema: {exc}") from None


def parse_response(line: bytes, expected_id: int) -> dict:
    """Validate one response line; raise :class:`ProtocolError` with the reason."""
    if len(line) > MAX_LINE:
        raise ProtocolError(f"response of {len(line)} bytes (limit {MAX_LINE})")
    # Bound the work before parsing: a valid response holds at most MAX_ITEMS entries, each
    # at most a few JSON objects, arrays and strings; only tensor data (base64) is long.
    # The counts include brackets and quotes inside strings: an upper bound, cheap to take.
    strings = (line.count(b'"') - line.count(b'\\"')) // 2
    literals = line.count(b"null") + line.count(b"true") + line.count(b"false")
    if line.count(b"[") > _MAX_ARRAYS or strings > _MAX_STRINGS or literals > _MAX_STRINGS:
        raise ProtocolError(f"response has too many values (at most {MAX_ITEMS} entries)")
    budget = [_MAX_OBJECTS, _MAX_NUMBERS]

    def on_object(pairs):
        budget[0] -= 1
        if budget[0] < 0:
            raise ValueError("too many objects")
        return dict(pairs)

    def on_number(text, conv):
        budget[1] -= 1
        if budget[1] < 0:
            raise ValueError("too many numbers")
        return conv(text)

    try:
        obj = json.loads(
            line,
            parse_constant=_reject_constant,
            object_pairs_hook=on_object,
            parse_int=lambda t: on_number(t, int),
            parse_float=lambda t: on_number(t, float),
        )
    except (ValueError, RecursionError, MemoryError) as exc:
        raise ProtocolError(f"response is not valid JSON ({type(exc).__name__}: {str(exc)[:60]})") from None
    validate_response(obj)
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
        grad = value.get("grad", False)
        if not isinstance(grad, bool) or (grad and value["dtype"] not in GRAD_DTYPES):
            raise ProtocolError(
                f"a tensor of dtype {value['dtype']} with grad={str(grad)[:20]} (only a floating-point tensor can require grad)"
            )
        shape = value["shape"]
        numel = math.prod(shape)
        itemsize = torch.empty((), dtype=dtype).element_size()
        try:
            raw = base64.b64decode(value["data"], validate=True)
        except (binascii.Error, ValueError):
            raise ProtocolError("tensor data is not base64") from None
        if len(raw) != numel * itemsize:
            raise ProtocolError(
                f"tensor data has {len(raw)} bytes; shape {shape} of {value['dtype']} needs {numel * itemsize}"
            )
        if numel == 0:
            out = torch.empty(shape, dtype=dtype)
        else:
            out = torch.frombuffer(bytearray(raw), dtype=dtype).reshape(shape)
        # detach(): not a view of the buffer for autograd, so it becomes a plain leaf (as decode gives)
        return out.detach().requires_grad_(True) if grad else out
    raise ProtocolError(f"unknown value kind {t!r}")


def describe(value) -> str:
    """A short description of a value that shows no data: ``float32[2, 3]``, ``tuple(2)``, ``int``."""
    import torch

    if isinstance(value, torch.Tensor):
        grad = " requiring grad" if value.requires_grad else ""
        return f"{str(value.dtype).replace('torch.', '')}[{', '.join(map(str, value.shape))}]{grad}"
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
