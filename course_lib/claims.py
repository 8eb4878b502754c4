"""Claims and glued numbers: how a chapter says only what its run shows, on every machine.

A number a chapter *measures* (a loss, an accuracy, a cosine) differs in its last digits from
one machine to the next: another CPU picks other SIMD kernels, another thread count sums in
another order, a GPU computes in bf16. So a chapter follows three rules.

1. **Exact output checks only where the output is identical everywhere.** nbval compares the
   stored output of a cell tagged ``nbval-check-output``: shapes, parameter counts, counts of
   generated data, hand-worked examples. A checked cell that prints a decimal number is also
   tagged ``deterministic``: its author states that the printed digits cannot change with the
   kernels, and ``make test-portable`` (other kernels, one thread, fresh models) checks it.
   Trained numbers are never compared exactly.
2. **Every measured claim is an assertion.** What the prose draws from a measurement ("the
   pretrained tagger beats the random one on unseen words") is checked right after the
   measurement by :func:`claim`, in a cell tagged ``remove-cell`` (executed by the book build
   and by nbval, left out of the page). A claim has a band or a margin wide enough for other
   seeds, kernels, thread counts and GPUs, and tight enough that a broken model fails it. The
   band's provenance is the ``evidence`` argument; ``benchmarks/claim_bands.py`` re-measures
   every claim of every chapter under several seeds and kernel settings.
3. **Numbers in the prose come from the run.** A measured number in markdown is written
   ``{glue:text}`name:.3f``` and glued from the code with :func:`glue`, so text and output agree
   wherever the book is built. A decimal or a percentage typed by hand in a chapter's markdown
   fails the notebook hygiene test unless it is listed in the notebook's
   ``metadata.course.paper_figures`` (numbers quoted from papers and settings, not measured).

Measuring bands: with ``COURSE_CLAIMS_LOG=path`` every claim appends one JSON line (the
chapter, the claim, the value, the band, the setting) to ``path``; with
``COURSE_CLAIMS_RECORD_ONLY=1`` a claim that fails is recorded instead of raised, so one run
collects every value. ``COURSE_SEED_OFFSET=k`` shifts every :func:`~course_lib.seed_everything`
seed by ``k`` (and the model cache keys with it), which is how the band script runs a chapter
with other seeds.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

__all__ = ["ClaimError", "claim", "glue", "seed_offset", "current_setting"]

LOG_ENV = "COURSE_CLAIMS_LOG"
RECORD_ONLY_ENV = "COURSE_CLAIMS_RECORD_ONLY"
CHAPTER_ENV = "COURSE_CLAIMS_CHAPTER"
SEED_OFFSET_ENV = "COURSE_SEED_OFFSET"


class ClaimError(AssertionError):
    """A chapter's claim that the run does not support."""


def seed_offset() -> int:
    """The shift ``COURSE_SEED_OFFSET`` applies to every seed (0 when unset)."""
    raw = os.environ.get(SEED_OFFSET_ENV, "").strip()
    if not raw:
        return 0
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"{SEED_OFFSET_ENV} must be a whole number, got {raw!r}") from None


def current_setting() -> dict[str, Any]:
    """What decides a run's last digits: kernels, threads, seed offset, device."""
    import torch

    from .device import get_device

    return {
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "threads": torch.get_num_threads(),
        "seed_offset": seed_offset(),
        "device": get_device().type,
        "torch": torch.__version__.split("+")[0],
    }


def _fmt(x: float | None) -> str:
    if x is None:
        return "inf"
    return f"{x:.4g}"


def claim(
    statement: str,
    value: Any,
    *,
    low: float | None = None,
    high: float | None = None,
    evidence: str,
    glue_as: str | None = None,
) -> float:
    """Assert that ``low <= value <= high``; the failure message names the claim and the band.

    ``statement`` is the sentence the chapter's prose makes, ``value`` the measured number
    that supports it (for a comparison, the difference or the ratio: "A beats B by at least
    0.05" is ``claim(..., a - b, low=0.05)``), ``evidence`` says where the band comes from
    (seeds, kernels and thread counts measured, e.g. ``"seeds 0-2 x {avx2, default} kernels:
    0.11-0.16"``). ``glue_as`` also glues the value for the prose. Returns the value.
    """
    if low is None and high is None:
        raise ValueError(f"claim {statement!r} needs a band: give low, high or both")
    if not evidence or not evidence.strip():
        raise ValueError(f"claim {statement!r}: say where its band comes from (evidence=...)")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise TypeError(f"claim {statement!r}: the measured value must be a number, got {type(value).__name__}") from None
    ok = not math.isnan(number) and (low is None or number >= low) and (high is None or number <= high)
    band = f"[{_fmt(low) if low is not None else '-inf'}, {_fmt(high)}]"
    _record(statement, number, low, high, ok, evidence)
    if glue_as is not None:
        glue(glue_as, number)
    if not ok and os.environ.get(RECORD_ONLY_ENV, "") not in ("1", "true", "yes"):
        raise ClaimError(
            f"the run does not support the chapter's claim {statement!r}: measured {number:.6g}, "
            f"expected within {band} (band from: {evidence})"
        )
    return number


def _record(statement, value, low, high, ok, evidence) -> None:
    path = os.environ.get(LOG_ENV, "").strip()
    if not path:
        return
    row = {
        "chapter": os.environ.get(CHAPTER_ENV, ""),
        "setting": os.environ.get("COURSE_CLAIMS_SETTING", ""),
        "claim": statement,
        "value": value,
        "low": low,
        "high": high,
        "ok": ok,
        "evidence": evidence,
        **current_setting(),
    }
    with Path(path).open("a", encoding="utf-8") as f:
        f.write(json.dumps(row) + "\n")


def glue(name: str, value: Any) -> Any:
    """Make ``value`` available to the chapter's prose as ``{glue:text}`name:FORMAT```.

    Uses myst-nb's ``glue`` (Jupyter Book) where it is installed; in a plain Jupyter or Colab
    session without it, it does nothing (the prose then shows the role, not the number).
    Numbers are glued as plain Python floats or ints, so any format spec applies.
    """
    try:
        from myst_nb import glue as _myst_glue
    except ImportError:  # not building the book
        return value
    if hasattr(value, "item"):
        value = value.item()
    _myst_glue(name, value, display=False)
    return value
