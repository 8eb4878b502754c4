r"""``course bench``: one pretraining step of course_lib's models against Hugging Face's.

What is measured, in one run on one device (``--device``, default
:func:`course_lib.device.get_device`):

1. **A pair per model.** For ``bert`` (:class:`~course_lib.models.bert.BertForPreTraining`),
   ``albert`` (:class:`~course_lib.models.albert.AlbertForPreTraining`) and ``xlnet``
   (:class:`~course_lib.models.xlnet.XLNetLMHeadModel`), a ``transformers`` model of the same
   name and size is built with random weights (Hugging Face's SDPA attention where it has one)
   and course_lib's model is copied from it with ``from_hf``: the same weights on both sides.
   Before anything is timed, both compute the loss and the logits of the benchmark batch in
   eval mode (float32); the largest absolute difference is printed, and a difference above
   ``1e-4`` stops the run (:class:`ParityError`): a fast model that computes something else
   would be no result. The **gradients** are compared too (:func:`check_gradients`: forward
   and backward in eval mode, every parameter's gradient within ``1e-3`` of its tensor's
   largest entry): a fast backward pass that computes something else is no result either.
2. **A training step** = forward with labels, backward, ``AdamW.step()``, ``zero_grad()``, in
   training mode (dropout on, as in pretraining). course_lib's step is the one its training
   code runs (:data:`COURSE_STEP_OPTIONS`): BERT's and ALBERT's MLM head only at the labelled
   positions (``masked_only=True``, as ``pretraining_loss`` trains; the same loss and gradients,
   checked); Hugging Face's models compute the logits at every position. BERT: masked-LM labels on 15% of the
   positions (those replaced by a mask id) plus a next-sentence label; ALBERT the same with a
   sentence-order label; XLNet its own objective: a random factorisation order per sequence,
   the last 15% of each order predicted from the two-stream attention (``perm_mask`` and
   ``target_mapping``, labels ``[batch, num_predict]``). Both sides get the same tensors.
   After two warm-up steps each, the steps alternate (course, HF, matmul peak, course, HF,
   peak, ...) so that a change of machine load hits all three alike; the **median** seconds
   per step is reported with its spread (interquartile range and min-max of each side, and
   the interquartile range of the paired per-round ratios), tokens per second
   (``batch * seq / step``) and the ratio course / HF of the medians (below 1: course_lib is
   faster). ``--dtype bf16`` runs the forward pass of both under ``torch.autocast``.
   ``--compile`` runs both sides through :func:`torch.compile` (never one side only), after
   the parity checks of the modules as written; each side's first step, which compiles, is
   timed on its own and printed beside the table of the steady state. (Without it the first
   step is timed too, in the JSON: it allocates AdamW's state.)
3. **Achieved FLOP/s.** :func:`training_flops` counts the matrix-product FLOPs of a step
   analytically (the formula is in its docstring; it agrees with
   :class:`torch.utils.flop_counter.FlopCounterMode`, see :func:`count_flops`), divided by the
   measured step time. :func:`matmul_peak` measures what the device reaches on large square
   matrix products (best of several) once before the models are built, and
   :func:`time_interleaved` times a call of such products between every pair of steps: each
   side's FLOP/s is printed as a fraction of the median of *those* interleaved peaks, which
   ran under the same load as the steps. **The bound** beside it: :func:`record_step` records
   every matrix product of one course_lib step (shapes, strides, dtype; forward and
   backward) and :func:`time_replay` replays them alone on fresh tensors. Their time is what
   the step's products cost with nothing around them, and their FLOP/s over the same peak is
   the most of the peak that the step could reach at these shapes, were everything else
   (dropout, softmax, LayerNorm, the optimiser) free. The same for the dropouts' random
   draws (``bernoulli_``, one number per element from PyTorch's generator, which course_lib
   must draw as Hugging Face does to train the same run): their time alone, and the share of
   the peak that the products and the draws together leave reachable. (Products inside a fused attention
   kernel, SDPA without dropout as in ALBERT v2, are no separate calls: they are not replayed,
   and that column counts only the FLOPs it replays.)
   The same FLOP count is used for both sides: it is the work of the algorithm, not of either
   implementation (Hugging Face's XLNet, for one, projects the relative encodings once per
   sequence where one projection per batch suffices; that extra work is not counted).
4. **Output** (:func:`describe_run`): one line naming the machine (CPU,
   :func:`course_lib.device.describe_device`, torch and transformers versions, threads, date),
   the CPU, its thread count and the load average before and after, the shape, the matmul
   peak, the parity checks, then a Markdown table; ``--json PATH`` also writes every number
   (and every step time) as JSON, ``--markdown PATH`` the printed report as Markdown (the
   training appendix includes the one in ``book/generated/bench.md``, never a typed table).

On a machine that other work keeps busy the step times scatter (the JSON keeps every one);
compare ratios from one run, not times across runs. Times are measurements, never
assertions: the test suite runs this on tiny sizes and checks only that it runs, that the
two sides agree and that the FLOP formula is right.

    course bench [--batch 16] [--seq 128] [--layers 4] [--hidden 256] [--heads 4]
                 [--repeats 10] [--models bert,albert,xlnet] [--threads N]
                 [--device cpu] [--dtype fp32|bf16] [--compile] [--json PATH] [--markdown PATH]
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import json
import math
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch
from torch import Tensor, nn

from ..device import describe_device, get_device
from ..files import atomic_write_text
from .bench_models import (
    COURSE_STEP_OPTIONS,
    GRAD_TOL,
    MODELS,
    PARITY_TOL,
    BenchShape,
    ParityError,
    build_pair,
    check_gradients,
    check_parity,
    make_batch,
    num_params,
    training_flops,
)

__all__ = [
    "DTYPES",
    "spread",
    "load_average",
    "matmul_peak",
    "time_interleaved",
    "record_step",
    "time_replay",
    "run",
    "format_table",
    "describe_run",
    "machine_line",
    "register",
    "main",
]

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
GENERATED_NOTE = "<!-- generated by `course bench --markdown`: do not edit, run it again -->\n\n"
WARMUP = 2  # untimed steps per side (the first step also allocates AdamW's state)


# ---------------------------------------------------------------------------------------
# The pairs and the batch
# ---------------------------------------------------------------------------------------


# ---------------------------------------------------------------------------------------
# FLOPs
# ---------------------------------------------------------------------------------------


# ---------------------------------------------------------------------------------------
# Timing
# ---------------------------------------------------------------------------------------


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def matmul_peak(
    device: torch.device | str,
    dtype: torch.dtype = torch.float32,
    n: int = 2048,
    *,
    repeats: int = 5,
    min_time: float = 0.05,
) -> float:
    """FLOP/s of ``n x n`` by ``n x n`` matrix products on ``device``: ``2 n^3 / t``, best of ``repeats``.

    After an untimed warm-up product, one product is timed to choose how many run back to
    back in each timed call (enough for about ``min_time`` seconds, at most 1000: one product
    of a small ``n`` is too short to time); the best per-product time of ``repeats`` calls
    gives the peak.
    """
    device = torch.device(device)
    g = torch.Generator(device="cpu").manual_seed(0)
    a = torch.randn(n, n, generator=g).to(device=device, dtype=dtype)
    b = torch.randn(n, n, generator=g).to(device=device, dtype=dtype)
    out = torch.empty(n, n, device=device, dtype=dtype)

    def timed(count: int) -> float:
        _sync(device)
        t0 = time.perf_counter()
        for _ in range(count):
            torch.mm(a, b, out=out)
        _sync(device)
        return (time.perf_counter() - t0) / count

    timed(1)  # warm-up
    inner = min(1000, max(1, math.ceil(min_time / max(timed(1), 1e-9))))
    best = min(timed(inner) for _ in range(repeats))
    return 2.0 * n**3 / best


def spread(times: Sequence[float]) -> dict[str, float]:
    """Median, quartiles, minimum and maximum of ``times``."""
    ts = sorted(times)
    if len(ts) >= 2:
        q1, _, q3 = statistics.quantiles(ts, n=4, method="inclusive")
    else:
        q1 = q3 = ts[0]
    return {"median": statistics.median(ts), "q1": q1, "q3": q3, "min": ts[0], "max": ts[-1]}


def load_average() -> tuple[float, float, float] | None:
    """The 1-, 5- and 15-minute load averages (None where the OS has none)."""
    try:
        return tuple(round(x, 2) for x in os.getloadavg())  # type: ignore[return-value]
    except (AttributeError, OSError):
        return None


def _peak_call(
    device: torch.device, dtype: torch.dtype, n: int, min_time: float = 0.05
) -> tuple[Callable[[], None], int]:
    """A call of back-to-back ``n x n`` products (about ``min_time`` seconds) and its count:
    the matmul peak, timed between the training steps."""
    g = torch.Generator(device="cpu").manual_seed(0)
    a = torch.randn(n, n, generator=g).to(device=device, dtype=dtype)
    b = torch.randn(n, n, generator=g).to(device=device, dtype=dtype)
    out = torch.empty(n, n, device=device, dtype=dtype)
    torch.mm(a, b, out=out)
    _sync(device)
    t0 = time.perf_counter()
    torch.mm(a, b, out=out)
    _sync(device)
    inner = min(1000, max(1, math.ceil(min_time / max(time.perf_counter() - t0, 1e-9))))

    def call() -> None:
        for _ in range(inner):
            torch.mm(a, b, out=out)

    return call, inner


def time_interleaved(
    fns: Sequence[Callable[[], Any]],
    repeats: int,
    *,
    warmup: int = WARMUP,
    device: torch.device | None = None,
) -> list[list[float]]:
    """Seconds of each call of each function, the functions alternating (A, B, A, B, ...).

    ``warmup`` untimed rounds first; the device is synchronised around every timed call.
    Returns one list of ``repeats`` times per function.
    """
    device = torch.device("cpu") if device is None else device
    for _ in range(warmup):
        for fn in fns:
            fn()
    _sync(device)
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(repeats):
        for fn, ts in zip(fns, times):
            t0 = time.perf_counter()
            fn()
            _sync(device)
            ts.append(time.perf_counter() - t0)
    return times


_GEMM_OPS = ("mm", "addmm", "bmm", "baddbmm")


def _gemm_flops(name: str, shapes: Sequence[tuple[int, ...]]) -> int:
    """2 m k n (times the batch for bmm) of one product; ``shapes`` are the inputs' shapes,
    the added matrix first for ``addmm``/``baddbmm``."""
    a, b = shapes[-2], shapes[-1]
    return 2 * math.prod(a) * b[-1]


def record_step(fn: Callable[[], Any]) -> dict[str, dict[tuple[Any, ...], int]]:
    """What ``fn()`` runs that bounds its speed: every matrix product (``"gemm"``: mm, addmm,
    bmm, baddbmm, forward and backward) and every random draw of a dropout (``"draw"``:
    ``bernoulli_``, one random number per element from PyTorch's generator), each as
    ``(name, shapes, strides, scalars, dtype, device) -> count``, recorded below autograd and
    autocast by a :class:`~torch.utils._python_dispatch.TorchDispatchMode`."""
    from torch.utils._python_dispatch import TorchDispatchMode

    aten = torch.ops.aten
    kinds = {getattr(aten, name).default: ("gemm", name) for name in _GEMM_OPS}
    kinds[aten.bernoulli_.float] = ("draw", "bernoulli_")
    calls: dict[str, dict[tuple[Any, ...], int]] = {"gemm": {}, "draw": {}}

    class Recorder(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            kind = kinds.get(func)
            if kind is not None:
                tensors = [a for a in args if isinstance(a, Tensor)]
                key = (
                    kind[1],
                    tuple(tuple(t.shape) for t in tensors),
                    tuple(t.stride() for t in tensors),
                    tuple(a for a in args if not isinstance(a, Tensor)),
                    tensors[0].dtype,
                    tensors[0].device.type,
                )
                calls[kind[0]][key] = calls[kind[0]].get(key, 0) + 1
            return func(*args, **(kwargs or {}))

    with Recorder():
        fn()
    return calls


def time_replay(
    calls: Mapping[tuple[Any, ...], int], device: torch.device, *, repeats: int = 3
) -> tuple[float, int]:
    """Seconds and matrix-product FLOPs of replaying ``calls`` (from :func:`record_step`)
    alone: every call on fresh random tensors of the recorded shapes, strides and dtype, with
    the recorded scalars (a dropout's probability), as many times as it was recorded. The best
    of ``repeats`` replays: what that work costs with nothing around it."""
    g = torch.Generator(device="cpu").manual_seed(0)
    work = []
    flops = 0
    for (name, shapes, strides, scalars, dtype, _), count in calls.items():
        tensors = []
        for shape, stride in zip(shapes, strides):
            extent = 1 + sum((d - 1) * st for d, st in zip(shape, stride) if d > 0)
            base = torch.randn(extent, generator=g).to(device=device, dtype=dtype)
            tensors.append(base.as_strided(shape, stride))
        if name in _GEMM_OPS:
            flops += count * _gemm_flops(name, shapes)
        op = getattr(torch, name) if hasattr(torch, name) else getattr(Tensor, name)
        work.append((op, (*tensors, *scalars), count))

    def replay() -> None:
        for op, args, count in work:
            for _ in range(count):
                op(*args)

    replay()  # warm-up
    best = math.inf
    for _ in range(repeats):
        _sync(device)
        t0 = time.perf_counter()
        replay()
        _sync(device)
        best = min(best, time.perf_counter() - t0)
    return best, flops


def _train_step(
    model: nn.Module, batch: Mapping[str, Tensor], autocast: Callable[[], Any], **options: Any
) -> Callable[[], None]:
    """A closure running one step: forward with labels, backward, ``AdamW.step()``, ``zero_grad()``."""
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def step() -> None:
        with autocast():
            loss = model(**batch, **options).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


# ---------------------------------------------------------------------------------------
# The run
# ---------------------------------------------------------------------------------------


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_line(device: torch.device, dtype: str) -> str:
    """One line naming the machine, the software, the threads and the date."""
    import transformers

    return (
        f"{platform.node() or 'machine'}: {_cpu_name()} ({os.cpu_count()} CPUs), {describe_device(device)}, "
        f"transformers {transformers.__version__}, bench dtype {dtype}, "
        f"{_dt.datetime.now().astimezone().isoformat(timespec='seconds')}"
    )


def run(
    shape: BenchShape,
    *,
    models: Sequence[str] = MODELS,
    repeats: int = 10,
    device: torch.device | str = "cpu",
    dtype: str = "fp32",
    peak_n: int = 2048,
    compile: bool = False,
    log: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Build, check and time every model of ``models``; return every number (see the module docstring)."""
    import transformers

    device = torch.device(device)
    log = log or (lambda msg: None)
    torch_dtype = DTYPES[dtype]
    if dtype == "bf16":

        def autocast() -> Any:
            return torch.autocast(device_type=device.type, dtype=torch.bfloat16)

    else:
        autocast = contextlib.nullcontext
    load_before = load_average()
    peak = matmul_peak(device, torch_dtype, peak_n)
    log(f"matmul peak ({dtype}, n={peak_n}): {peak / 1e9:,.1f} GFLOP/s")
    peak_fn, peak_inner = _peak_call(device, torch_dtype, peak_n)
    peak_flops = 2.0 * peak_n**3 * peak_inner
    rows = []
    for name in models:
        ours, hf = build_pair(name, shape)
        ours.to(device)
        hf.to(device)
        batch = {k: v.to(device) for k, v in make_batch(name, shape).items()}
        diffs = check_parity(name, ours, hf, batch)
        loss_diff, logits_diff = diffs["loss"], diffs["logits"]
        log(f"{name}: parity max |diff| loss {loss_diff:.1e}, logits {logits_diff:.1e} (<= {PARITY_TOL:g})")
        options = COURSE_STEP_OPTIONS.get(name, {})
        grad_diff = check_gradients(name, ours, hf, batch, **options)
        diffs["gradients_relative"] = grad_diff
        log(
            f"{name}: gradients agree within {grad_diff:.1e} of each tensor's largest entry (<= {GRAD_TOL:g})"
        )
        flops = training_flops(ours.config, shape.batch, shape.seq, num_predict=shape.num_predict)
        # both sides compiled or neither (checked above as written: the same module, transformed)
        run_ours, run_hf = (torch.compile(ours), torch.compile(hf)) if compile else (ours, hf)
        steps = [_train_step(run_ours, batch, autocast, **options), _train_step(run_hf, batch, autocast)]
        first = []  # the first step of each side: AdamW's state, and the compilation with --compile
        for step in steps:
            _sync(device)
            t0 = time.perf_counter()
            step()
            _sync(device)
            first.append(time.perf_counter() - t0)
        # course, HF, matmul peak, course, HF, peak, ...: all three under the same load
        t_ours, t_hf, t_peak = time_interleaved([*steps, peak_fn], repeats, device=device)
        m_ours, m_hf = statistics.median(t_ours), statistics.median(t_hf)
        peaks = [peak_flops / t for t in t_peak]
        peak_here = statistics.median(peaks)
        # the bound: course_lib's step's own matrix products, replayed with nothing around them
        work = record_step(_train_step(ours, batch, autocast, **options))
        gemm_s, gemm_flops = time_replay(work["gemm"], device)
        draw_s, _ = time_replay(work["draw"], device) if work["draw"] else (0.0, 0)
        paired = [a / b for a, b in zip(t_ours, t_hf)]
        rows.append(
            {
                "model": name,
                "params": num_params(ours),
                "course_s": m_ours,
                "hf_s": m_hf,
                "ratio": m_ours / m_hf,
                "tokens_per_s_course": shape.tokens / m_ours,
                "tokens_per_s_hf": shape.tokens / m_hf,
                "flops_per_step": flops,
                "flops_per_s_course": flops / m_ours,
                "flops_per_s_hf": flops / m_hf,
                "peak_fraction_course": flops / m_ours / peak_here,
                "peak_fraction_hf": flops / m_hf / peak_here,
                "peak_flops_per_s": peak_here,
                "first_step_s_course": first[0],
                "first_step_s_hf": first[1],
                "gemm_s_course": gemm_s,
                "gemm_flops_course": gemm_flops,
                "gemm_peak_fraction_course": gemm_flops / gemm_s / peak_here,
                "draw_s_course": draw_s,
                "gemm_draw_peak_fraction_course": gemm_flops / (gemm_s + draw_s) / peak_here,
                "peak_spread_flops_per_s": spread(peaks),
                "course_spread_s": spread(t_ours),
                "hf_spread_s": spread(t_hf),
                "ratio_spread": spread(paired),
                "parity_max_abs_diff": diffs,
                "course_times_s": t_ours,
                "hf_times_s": t_hf,
            }
        )
        log(f"{name}: course {m_ours * 1e3:.1f} ms/step, HF {m_hf * 1e3:.1f} ms/step")
        del ours, hf, batch
    return {
        "machine": machine_line(device, dtype),
        "date": _dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        "device": str(device),
        "dtype": dtype,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "threads": torch.get_num_threads(),
        "shape": {**asdict(shape), "intermediate": shape.d_ff, "num_predict": shape.num_predict},
        "repeats": repeats,
        "compile": compile,
        "warmup": WARMUP,
        "matmul_peak_flops_per_s": peak,
        "matmul_peak_n": peak_n,
        "load_average_before": load_before,
        "load_average_after": load_average(),
        "cpu": _cpu_name(),
        "cpu_count": os.cpu_count(),
        "models": rows,
    }


def _range(sp: Mapping[str, float], lo: str, hi: str, scale: float, spec: str = ".1f") -> str:
    return f"{sp[lo] * scale:{spec}}-{sp[hi] * scale:{spec}}"


def format_table(result: Mapping[str, Any]) -> str:
    """The Markdown table of :func:`run`'s result."""
    head = [
        "model",
        "params",
        "course ms/step",
        "HF ms/step",
        "ratio course/HF",
        "tokens/s course",
        "tokens/s HF",
        "GFLOP/s course",
        "GFLOP/s HF",
        "% of peak course",
        "% of peak HF",
        "course ms in matrix products alone",
        "% of peak, matrix products alone",
        "course ms in dropout draws alone",
        "% of peak, products and draws alone",
        "course ms IQR",
        "HF ms IQR",
        "course ms min-max",
        "HF ms min-max",
        "ratio IQR (paired steps)",
        "peak GFLOP/s (interleaved)",
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(["---"] + ["---:"] * (len(head) - 1)) + "|"]
    for r in result["models"]:
        cells = [
            r["model"],
            f"{r['params']:,}",
            f"{r['course_s'] * 1e3:.1f}",
            f"{r['hf_s'] * 1e3:.1f}",
            f"{r['ratio']:.2f}",
            f"{r['tokens_per_s_course']:,.0f}",
            f"{r['tokens_per_s_hf']:,.0f}",
            f"{r['flops_per_s_course'] / 1e9:,.1f}",
            f"{r['flops_per_s_hf'] / 1e9:,.1f}",
            f"{100 * r['peak_fraction_course']:.1f}",
            f"{100 * r['peak_fraction_hf']:.1f}",
            f"{1e3 * r['gemm_s_course']:.1f}",
            f"{100 * r['gemm_peak_fraction_course']:.1f}",
            f"{1e3 * r['draw_s_course']:.1f}",
            f"{100 * r['gemm_draw_peak_fraction_course']:.1f}",
            _range(r["course_spread_s"], "q1", "q3", 1e3),
            _range(r["hf_spread_s"], "q1", "q3", 1e3),
            _range(r["course_spread_s"], "min", "max", 1e3),
            _range(r["hf_spread_s"], "min", "max", 1e3),
            _range(r["ratio_spread"], "q1", "q3", 1.0, ".2f"),
            f"{r['peak_flops_per_s'] / 1e9:,.1f}",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def describe_run(result: Mapping[str, Any]) -> str:
    """The machine, threads, load, shape, peak and parity lines, then the table (Markdown)."""
    s = result["shape"]
    load = lambda la: "n/a" if la is None else " / ".join(f"{x:.2f}" for x in la)  # noqa: E731
    lines = [
        result["machine"],
        "",
        f"CPU: {result.get('cpu', '')}, {result.get('cpu_count')} CPUs, {result['threads']} torch threads; "
        f"load average (1/5/15 min) {load(result.get('load_average_before'))} before, "
        f"{load(result.get('load_average_after'))} after.",
        "",
        f"batch {s['batch']} x seq {s['seq']}, {s['layers']} layers, hidden {s['hidden']}, "
        f"{s['heads']} heads, "
        f"intermediate {s['intermediate']}, vocab {s['vocab']}, "
        f"dropout {'as configured' if s.get('dropout') is None else s['dropout']}; "
        f"median of {result['repeats']} steps per side "
        f"after {result['warmup']} warm-up, interleaved with each other and with a matmul peak call "
        f"({result['dtype']}, n={result['matmul_peak_n']}; {result['matmul_peak_flops_per_s'] / 1e9:,.1f} "
        "GFLOP/s measured alone before).",
        "",
        *(
            [
                "both sides compiled with torch.compile; the first step, which compiles, took "
                + ", ".join(
                    f"{r['model']} course {r['first_step_s_course']:.1f} s / HF {r['first_step_s_hf']:.1f} s"
                    for r in result["models"]
                )
                + " (the table is the steady state after it).",
                "",
            ]
            if result.get("compile")
            else []
        ),
        "parity before timing (max |diff| loss / logits / relative gradients): "
        + ", ".join(
            f"{r['model']} {r['parity_max_abs_diff']['loss']:.1e} / {r['parity_max_abs_diff']['logits']:.1e}"
            f" / {r['parity_max_abs_diff'].get('gradients_relative', float('nan')):.1e}"
            for r in result["models"]
        ),
        "",
        format_table(result),
    ]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------------------


def _parse_models(text: str) -> list[str]:
    names = [m.strip().lower() for m in text.split(",") if m.strip()]
    unknown = [m for m in names if m not in MODELS]
    if unknown or not names:
        what = ", ".join(repr(m) for m in unknown) if unknown else "none"
        raise ValueError(f"unknown model(s) in --models: {what}; choose from {', '.join(MODELS)}")
    return list(dict.fromkeys(names))


def _cmd(args: argparse.Namespace) -> int:
    def fail(msg: str) -> int:
        print(f"course bench: {msg}", file=sys.stderr)
        return 2

    try:
        models = _parse_models(args.models)
        # the shape's fields are options of the same names (--batch, --seq, ...)
        shape = BenchShape(**{f.name: getattr(args, f.name) for f in fields(BenchShape)})
        shape.validate()
        if args.repeats < 1:
            raise ValueError(f"--repeats must be positive, got {args.repeats}")
        if args.peak_n < 1:
            raise ValueError(f"--peak-n must be positive, got {args.peak_n}")
        if args.threads is not None and args.threads < 1:
            raise ValueError(f"--threads must be positive, got {args.threads}")
        from ..files import check_output_path

        for option, value in (("--json", args.json), ("--markdown", args.markdown)):
            if value is not None:  # checked before the minutes of timing, not after
                if not str(value).strip():
                    raise ValueError(f"{option} is empty; give a file")
                check_output_path(value, option, folder=False)
        if (
            args.json is not None
            and args.markdown is not None
            and Path(args.json).resolve() == Path(args.markdown).resolve()  # (./x and /abs/x alike)
        ):
            raise ValueError("--json and --markdown name the same file; give two")
        device = get_device(args.device, option="--device")  # (a ValueError naming it)
        if args.dtype == "bf16" and device.type == "cuda" and not torch.cuda.is_bf16_supported():
            raise ValueError(f"--dtype bf16: {torch.cuda.get_device_name(device)} does not support bfloat16")
    except ValueError as e:
        return fail(str(e))
    try:
        import transformers  # noqa: F401
    except ImportError:
        return fail("needs the transformers package (pip install 'course-lib[test]')")
    if args.threads is not None:
        torch.set_num_threads(args.threads)

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    try:
        result = run(
            shape,
            models=models,
            repeats=args.repeats,
            device=device,
            dtype=args.dtype,
            peak_n=args.peak_n,
            compile=args.compile,
            log=None if args.quiet else log,
        )
    except ParityError as e:
        return fail(str(e))
    print(describe_run(result))
    if args.json is not None:
        atomic_write_text(args.json, json.dumps(result, indent=1) + "\n")
    if args.markdown is not None:
        atomic_write_text(args.markdown, GENERATED_NOTE + describe_run(result) + "\n")
    return 0


def _add_arguments(p: argparse.ArgumentParser) -> None:
    d = BenchShape()
    p.add_argument("--batch", type=int, default=d.batch, help=f"sequences per step (default {d.batch})")
    p.add_argument("--seq", type=int, default=d.seq, help=f"tokens per sequence (default {d.seq})")
    p.add_argument("--layers", type=int, default=d.layers, help=f"layers (default {d.layers})")
    p.add_argument("--hidden", type=int, default=d.hidden, help=f"hidden width (default {d.hidden})")
    p.add_argument("--heads", type=int, default=d.heads, help=f"attention heads (default {d.heads})")
    p.add_argument("--intermediate", type=int, default=None, help="feed-forward width (default 4 x hidden)")
    p.add_argument("--vocab", type=int, default=d.vocab, help=f"vocabulary size (default {d.vocab})")
    p.add_argument(
        "--dropout",
        type=float,
        default=None,
        help="every dropout rate of both models (default: their configurations', 0.1 for BERT and "
        "XLNet, 0 for ALBERT v2); 0 shows what the dropout's random numbers cost",
    )
    p.add_argument("--repeats", type=int, default=10, help="timed steps per side (default 10)")
    p.add_argument(
        "--models", default=",".join(MODELS), help=f"comma-separated, from {','.join(MODELS)} (default all)"
    )
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    p.add_argument(
        "--device", default=None, help="cpu, cuda, cuda:1, mps (default: course_lib.device.get_device)"
    )
    p.add_argument(
        "--dtype", choices=sorted(DTYPES), default="fp32", help="bf16: torch.autocast on both sides"
    )
    p.add_argument("--peak-n", type=int, default=2048, help="matrix size of the matmul peak (default 2048)")
    p.add_argument(
        "--compile",
        action="store_true",
        help="torch.compile both sides (course_lib and Hugging Face alike); the first step, which "
        "compiles, is reported beside the steady state",
    )
    p.add_argument("--json", default=None, metavar="PATH", help="also write every number as JSON to PATH")
    p.add_argument(
        "--markdown",
        default=None,
        metavar="PATH",
        help="also write the machine, load, parity and table as Markdown to PATH (the appendix includes one)",
    )
    p.add_argument("-q", "--quiet", action="store_true", help="no progress lines on stderr")


def register(sub: Any) -> None:
    doc = __doc__ or ""
    p = sub.add_parser(
        "bench",
        help="time a pretraining step of BERT, ALBERT and XLNet against Hugging Face's",
        description=doc.split("\n\n")[0].replace("``", "") + " Same weights (checked), median of "
        "interleaved steps, achieved FLOP/s against the matmul peak.",
    )
    _add_arguments(p)
    p.set_defaults(func=_cmd)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="course bench", description=(__doc__ or "").splitlines()[0])
    _add_arguments(parser)
    return _cmd(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
