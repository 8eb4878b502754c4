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
with other seeds. ``COURSE_PRECISION=bf16`` (:mod:`course_lib.device`) trains every chapter
under bf16 autocast on the CPU, the code path a GPU takes (``make test-bf16``; the bands
script's ``-bf16`` setting): a band must hold under a GPU's numerics too.

**Strict in the tests, a notice for the reader.** A claim that fails raises
:class:`ClaimError` (an ``AssertionError``) in the test suite, nbval, the book build, the
bands and tooling runs and CI: there a failed claim is a bug to fix. In a reader's Jupyter or
Colab kernel it shows a visible notice instead (the claim, the value measured on this machine,
the band, where the band came from, what may differ on this machine) and the chapter goes on:
a reader whose GPU or CPU pushes a trained number out of a band measured on CPU float32 is
told, not stopped. :func:`strict_claims` decides, in this order:

1. ``COURSE_STRICT_CLAIMS=1`` (or ``true``/``yes``) -> strict; ``0`` (``false``/``no``) -> notice.
   ``make`` exports ``1`` for every target, ``tests/conftest.py`` sets it for every kernel the
   test suite starts (nbval, the book build), ``course book`` and
   :func:`course_lib.tools.notebooks.execute_notebook` set it for the kernels they start.
2. ``CI`` set (GitHub Actions, GitLab and most CI services set ``CI=true``) -> strict.
3. Otherwise strict unless the code runs in an interactive IPython shell (a Jupyter or Colab
   kernel): a plain script or an in-process test raises.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from .device import autocast_dtype, get_device, seed_offset

__all__ = ["ClaimError", "ClaimNotice", "claim", "glue", "seed_offset", "current_setting", "strict_claims"]

LOG_ENV = "COURSE_CLAIMS_LOG"
RECORD_ONLY_ENV = "COURSE_CLAIMS_RECORD_ONLY"
CHAPTER_ENV = "COURSE_CLAIMS_CHAPTER"
STRICT_ENV = "COURSE_STRICT_CLAIMS"

# what every band in the chapters was measured on (benchmarks/claim_bands.py): the reference a
# reader's notice compares this machine with
BANDS_MEASURED_ON = {
    "device": "cpu",
    "precision": "float32",
    "cpu_capability": ("DEFAULT", "AVX2", "AVX512"),
    "threads": (1, 2),
    "torch": "2.13",
}
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


class ClaimError(AssertionError):
    """A chapter's claim that the run does not support."""


def current_setting() -> dict[str, Any]:
    """What decides a run's last digits: kernels, threads, seed offset, device, precision."""
    import torch

    device = get_device()
    dtype = autocast_dtype(device)
    return {
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "threads": torch.get_num_threads(),
        "seed_offset": seed_offset(),
        "device": device.type,
        "precision": "float32" if dtype is None else str(dtype).replace("torch.", ""),
        "torch": torch.__version__.split("+")[0],
    }


def _in_interactive_kernel() -> bool:
    """True inside an IPython shell (Jupyter, Colab, the IPython REPL)."""
    import sys

    ipython = sys.modules.get("IPython")
    if ipython is None:
        return False
    try:
        return ipython.get_ipython() is not None
    except Exception:  # an unusual IPython install: treat as not interactive (strict)
        return False


def strict_claims() -> bool:
    """Whether a failed claim raises (tests, builds, CI, scripts) or shows a notice (a reader's
    kernel); the rule is in the module docstring."""
    raw = os.environ.get(STRICT_ENV, "").strip().lower()
    if raw in _TRUE:
        return True
    if raw in _FALSE:
        return False
    if raw:
        raise ValueError(f"{STRICT_ENV} must be 1 or 0, got {raw!r}")
    if os.environ.get("CI", "").strip().lower() not in ("", *_FALSE):
        return True
    return not _in_interactive_kernel()


def _what_may_differ(setting: dict[str, Any]) -> list[str]:
    ref = BANDS_MEASURED_ON
    out = []
    if setting["device"] != ref["device"]:
        out.append(f"this run uses a {setting['device']} device; the band was measured on a CPU")
    if setting["precision"] != ref["precision"]:
        out.append(
            f"this run trains in {setting['precision']} (autocast); the band was measured in float32, "
            "and bf16 rounds every matrix product to about 3 significant digits"
        )
    if setting["cpu_capability"] not in ref["cpu_capability"]:
        out.append(f"this CPU's kernels ({setting['cpu_capability']}) are not among those measured")
    if setting["threads"] not in ref["threads"]:
        out.append(f"{setting['threads']} CPU threads sum in another order than the 1 and 2 threads measured")
    if setting["torch"] != ref["torch"] and not setting["torch"].startswith(ref["torch"] + "."):
        out.append(f"torch {setting['torch']}; the band was measured with torch {ref['torch']}")
    if setting["seed_offset"]:
        out.append(f"COURSE_SEED_OFFSET={setting['seed_offset']} trains with other seeds")
    out.append(
        "an edit to a cell above, or a model loaded from an older cache, changes the measured value too"
    )
    return out


class ClaimNotice:
    """The notice a reader's kernel shows for a failed claim (rich in Jupyter, text elsewhere)."""

    def __init__(self, statement: str, value: float, band: str, evidence: str, setting: dict[str, Any]):
        self.statement, self.value, self.band, self.evidence = statement, value, band, evidence
        self.setting = setting
        self.differences = _what_may_differ(setting)

    def _machine(self) -> str:
        s = self.setting
        return (
            f"{s['device']}, {s['precision']}, CPU kernels {s['cpu_capability']}, {s['threads']} threads, "
            f"torch {s['torch']}"
        )

    def __str__(self) -> str:
        lines = [
            f"Note: on this machine the chapter's claim {self.statement!r} does not hold.",
            f"  measured here: {self.value:.6g}; the chapter's band: {self.band}",
            f"  band from: {self.evidence} (CPU float32; benchmarks/claim_bands.md)",
            f"  this machine: {self._machine()}",
            "  what may differ here:",
            *(f"    - {d}" for d in self.differences),
            "  The chapter goes on; the sentence of the prose that rests on this number may not hold "
            "for this run. (In the test suite this is an error.)",
        ]
        return "\n".join(lines)

    __repr__ = __str__

    def _repr_html_(self) -> str:
        from html import escape

        items = "".join(f"<li>{escape(d)}</li>" for d in self.differences)
        return (
            '<div class="course-claim-notice" style="border-left:4px solid #d98c00;background:#fff8e6;'
            'padding:0.5em 1em;margin:0.5em 0;color:#222">'
            "<b>Note: on this machine the chapter's claim "
            f"&ldquo;{escape(self.statement)}&rdquo; does not hold.</b>"
            f"<br>Measured here: <code>{self.value:.6g}</code>; "
            f"the chapter's band: <code>{escape(self.band)}</code>."
            f"<br>Band from: {escape(self.evidence)} (CPU float32; <code>benchmarks/claim_bands.md</code>)."
            f"<br>This machine: {escape(self._machine())}.<br>What may differ here:<ul>{items}</ul>"
            "The chapter goes on; the sentence of the prose that rests on this number may not hold for "
            "this run. (In the test suite this is an error.)</div>"
        )


def _show_notice(notice: ClaimNotice) -> None:
    if _in_interactive_kernel():
        from IPython.display import display

        display(notice)  # the rich notice in Jupyter and Colab, its text in a terminal IPython
    else:  # a notice forced outside IPython (COURSE_STRICT_CLAIMS=0 in a script)
        import sys

        print(notice, file=sys.stderr)


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
    control: str | None = None,
) -> float:
    """Assert that ``low <= value <= high``; the failure message names the claim and the band.

    ``statement`` is the sentence the chapter's prose makes, ``value`` the measured number
    that supports it (for a comparison, the difference or the ratio: "A beats B by at least
    0.05" is ``claim(..., a - b, low=0.05)``), ``evidence`` says where the band comes from
    (seeds, kernels and thread counts measured, e.g. ``"seeds 0-2 x {avx2, default} kernels:
    0.11-0.16"``). ``glue_as`` also glues the value for the prose (an integer as an integer).
    Returns the value.

    ``control`` names the positive control of a negative claim ("no effect", "stays at
    chance"): the statement of an earlier claim of the same run showing that the same
    measurement does see an effect of that size. It must have been asserted, and have held,
    before this claim; otherwise this claim fails too (a negative claim whose control is
    missing or broken could not have failed). See CONTRIBUTING.md, rule 4.
    """
    if low is None and high is None:
        raise ValueError(f"claim {statement!r} needs a band: give low, high or both")
    if not evidence or not evidence.strip():
        raise ValueError(f"claim {statement!r}: say where its band comes from (evidence=...)")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise TypeError(
            f"claim {statement!r}: the measured value must be a number, got {type(value).__name__}"
        ) from None
    if control is not None and control not in _HELD:
        raise ValueError(
            f"claim {statement!r}: its control {control!r} has not been asserted before it in this run"
        )
    ok = not math.isnan(number) and (low is None or number >= low) and (high is None or number <= high)
    band = f"[{_fmt(low) if low is not None else '-inf'}, {_fmt(high)}]"
    if control is not None and not _HELD[control]:
        ok = False
        evidence = f"{evidence}; its positive control {control!r} did not hold"
    _HELD[statement] = ok
    _record(statement, number, low, high, ok, evidence)
    if glue_as is not None:
        glue(glue_as, _integral(value) if _integral(value) is not None else number)
    if not ok and os.environ.get(RECORD_ONLY_ENV, "") not in ("1", "true", "yes"):
        if strict_claims():
            raise ClaimError(
                f"the run does not support the chapter's claim {statement!r}: measured {number:.6g}, "
                f"expected within {band} (band from: {evidence})"
            )
        _show_notice(ClaimNotice(statement, number, band, evidence, current_setting()))
    return number


# every claim asserted in this process: statement -> whether it held (controls look here)
_HELD: dict[str, bool] = {}


def _integral(value: Any) -> int | None:
    """``value`` as an int when it is an integer (Python, NumPy or a 0-d integer tensor)."""
    import numbers

    if isinstance(value, bool):
        return int(value)
    if isinstance(value, numbers.Integral):
        return int(value)
    dtype = getattr(value, "dtype", None)
    if dtype is not None and getattr(value, "ndim", 1) == 0:
        kind = getattr(dtype, "kind", None)  # numpy
        if kind in ("i", "u", "b") or (kind is None and not getattr(dtype, "is_floating_point", True)):
            return int(value)
    return None


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
