"""Compare a student's value with the reference's, in the grader, with tolerances.

Tensors must have the same shape and the same kind of dtype (bool, integer or floating:
any float precision is accepted, the values are compared in float64 with
``|student - reference| <= atol + rtol * |reference|``, NaN equal to NaN). Lists and tuples
are interchangeable; dicts need the same keys; numbers are compared like tensors.

For hidden checks the message says what is wrong but shows no expected value: not the
expected shape, not the size of the error.
"""

from __future__ import annotations

import math

__all__ = ["compare_values"]


def _kind(t) -> str:
    if t.dtype.is_floating_point:
        return "floating"
    if t.dtype.is_complex:
        return "complex"
    return "bool" if str(t.dtype) == "torch.bool" else "integer"


def _fmt_index(idx) -> str:
    return "(" + ", ".join(str(int(i)) for i in idx) + ")"


def compare_values(
    ref, stu, *, rtol: float, atol: float, hidden: bool, where: str = "the result", exact_dtype: bool = False
) -> str | None:
    """``None`` when ``stu`` matches ``ref``; else a message for the student. Tensors' dtypes
    are compared by kind (floating, integer, bool), exactly with ``exact_dtype`` (a check whose
    instructions name the dtype: metadata ``"dtype": "exact"``)."""
    import torch

    if isinstance(ref, torch.Tensor):
        if not isinstance(stu, torch.Tensor):
            return f"{where} is a {type(stu).__name__}, but should be a torch.Tensor"
        if tuple(stu.shape) != tuple(ref.shape):
            if hidden:
                return f"{where} has shape {list(stu.shape)}, which is wrong for these inputs"
            return f"{where} has shape {list(stu.shape)}, expected {list(ref.shape)}"
        rk, sk = _kind(ref), _kind(stu)
        if rk != sk:
            return f"{where} has dtype {str(stu.dtype).replace('torch.', '')} ({sk}), but should be a {rk} tensor"
        if exact_dtype and stu.dtype != ref.dtype:
            return f"{where} has dtype {str(stu.dtype).replace('torch.', '')}, but should be {str(ref.dtype).replace('torch.', '')} (the instructions name it)"
        if rk == "floating":
            r, s = ref.detach().double(), stu.detach().double()
            close = torch.isclose(s, r, rtol=rtol, atol=atol, equal_nan=True)
            if bool(close.all()):
                return None
            bad_nan = (s.isnan() & ~r.isnan()) | (s.isinf() & r.isfinite())
            if bool(bad_nan.any()):
                what = "NaN" if bool(s.isnan()[bad_nan].any()) else "inf"
                return f"{where} contains {what} at {int(bad_nan.sum())} of {r.numel()} positions where it should be finite"
            if hidden:
                return f"{where} has wrong values (compared with rtol={rtol:g}, atol={atol:g})"
            bad = ~close
            err = (s - r).abs().masked_fill(~bad, 0).nan_to_num(nan=math.inf)
            flat = int(err.argmax())
            idx = torch.unravel_index(torch.tensor(flat), r.shape) if r.dim() else ()
            got, exp = s.reshape(-1)[flat].item(), r.reshape(-1)[flat].item()
            return (
                f"{where} has wrong values at {int(bad.sum())} of {r.numel()} positions; the largest error is at "
                f"index {_fmt_index(idx)}: got {got:.6g}, expected {exp:.6g} (rtol={rtol:g}, atol={atol:g})"
            )
        # integers are compared as int64, never cast to the student's dtype: a uint8 result
        # must not turn the reference's -100 into 156
        bad = stu.to(torch.int64) != ref.to(torch.int64)
        if not bool(bad.any()):
            return None
        if hidden:
            return f"{where} has wrong values"
        first = torch.nonzero(bad)[0].tolist() if bad.dim() else []
        got = stu[tuple(first)].item() if first else stu.item()
        exp = ref[tuple(first)].item() if first else ref.item()
        return f"{where} has wrong values at {int(bad.sum())} of {ref.numel()} positions; first at index {_fmt_index(first)}: got {got}, expected {exp}"
    if isinstance(ref, (list, tuple)):
        if not isinstance(stu, (list, tuple)):
            if hidden:
                return f"{where} is a {type(stu).__name__}, but should be a list or tuple"
            return f"{where} is a {type(stu).__name__}, but should be a {type(ref).__name__} of {len(ref)}"
        if len(stu) != len(ref):
            if hidden:
                return f"{where} has {len(stu)} items, which is wrong for these inputs"
            return f"{where} has {len(stu)} items, but should have {len(ref)}"
        for i, (r, s) in enumerate(zip(ref, stu)):
            msg = compare_values(
                r, s, rtol=rtol, atol=atol, hidden=hidden, where=f"{where}[{i}]", exact_dtype=exact_dtype
            )
            if msg:
                return msg
        return None
    if isinstance(ref, dict):
        if not isinstance(stu, dict):
            return f"{where} is a {type(stu).__name__}, but should be a dict"
        if set(stu) != set(ref):
            missing, extra = sorted(set(ref) - set(stu)), sorted(set(stu) - set(ref))
            if hidden:
                return f"{where} has the wrong keys ({len(missing)} missing, {len(extra)} unexpected)"
            return f"{where} has the wrong keys (missing {missing}, unexpected {extra})"
        for k in ref:
            msg = compare_values(
                ref[k],
                stu[k],
                rtol=rtol,
                atol=atol,
                hidden=hidden,
                where=f"{where}[{k!r}]",
                exact_dtype=exact_dtype,
            )
            if msg:
                return msg
        return None
    if ref is None:
        return None if stu is None else f"{where} is a {type(stu).__name__}, but should be None"
    if isinstance(ref, bool):
        if not isinstance(stu, bool):
            return f"{where} is a {type(stu).__name__}, but should be a bool"
        return (
            None if stu == ref else (f"{where} is wrong" if hidden else f"{where} is {stu}, expected {ref}")
        )
    if isinstance(ref, (int, float)):
        if isinstance(stu, bool) or not isinstance(stu, (int, float)):
            return f"{where} is a {type(stu).__name__}, but should be a number"
        if isinstance(ref, int) and isinstance(stu, int):
            ok = stu == ref
        else:
            ok = (math.isnan(ref) and math.isnan(stu)) or abs(stu - ref) <= atol + rtol * abs(ref)
        return None if ok else (f"{where} is wrong" if hidden else f"{where} is {stu!r}, expected {ref!r}")
    if isinstance(ref, str):
        if not isinstance(stu, str):
            return f"{where} is a {type(stu).__name__}, but should be a str"
        return (
            None
            if stu == ref
            else (f"{where} is wrong" if hidden else f"{where} is {stu!r}, expected {ref!r}")
        )
    import torch as _torch

    if isinstance(ref, _torch.dtype):
        return (
            None
            if stu == ref
            else (f"{where} is the wrong dtype" if hidden else f"{where} is {stu}, expected {ref}")
        )
    raise TypeError(f"the reference returned a {type(ref).__name__}, which the grader cannot compare")
