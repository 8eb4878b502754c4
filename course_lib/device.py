"""Device choice, mixed precision and seeding, shared by every chapter.

* :func:`get_device` picks CUDA, then Apple MPS, then CPU. The environment variable
  ``COURSE_DEVICE`` (``cpu``, ``cuda``, ``cuda:1``, ``mps``) overrides the choice.
* :func:`autocast` is the course's mixed-precision policy: bfloat16 autocast on a GPU that
  supports it, plain float32 everywhere else (CPU runs stay exact and reproducible).
  ``COURSE_PRECISION`` overrides it: ``bf16`` runs every chapter under bf16 autocast on any
  device, the CPU included (``torch.autocast("cpu", dtype=torch.bfloat16)``: the same code
  path as CUDA, which is how the claims are checked under a GPU's numerics without a GPU);
  ``fp32`` turns autocast off everywhere (a GPU run then matches the CPU bands' precision);
  ``auto`` (or unset) is the policy above. Checkpoint cache keys include the precision, so a
  bf16 model never replaces a float32 one.
* :func:`seed_everything` seeds Python, NumPy and torch and asks torch for deterministic
  kernels, which makes CPU runs bit-reproducible.
"""

from __future__ import annotations

import contextlib
import os
import random

import numpy as np
import torch

SEED_OFFSET_ENV = "COURSE_SEED_OFFSET"


def seed_offset() -> int:
    """The shift ``COURSE_SEED_OFFSET`` applies to every seed (0 when unset): how the claim bands
    (benchmarks/claim_bands.py) run a chapter with other seeds."""
    raw = os.environ.get(SEED_OFFSET_ENV, "").strip()
    if not raw:
        return 0
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"{SEED_OFFSET_ENV} must be a whole number, got {raw!r}") from None


__all__ = [
    "get_device",
    "autocast",
    "autocast_dtype",
    "precision",
    "seed_everything",
    "seed_offset",
    "describe_device",
]

ENV_VAR = "COURSE_DEVICE"
PRECISION_ENV = "COURSE_PRECISION"
PRECISIONS = ("auto", "fp32", "bf16")


def precision() -> str:
    """The precision policy ``COURSE_PRECISION`` asks for: ``auto`` (unset), ``fp32`` or ``bf16``."""
    raw = os.environ.get(PRECISION_ENV, "").strip().lower() or "auto"
    if raw not in PRECISIONS:
        raise ValueError(f"{PRECISION_ENV} must be one of {', '.join(PRECISIONS)}, got {raw!r}")
    return raw


def _mps_available() -> bool:
    backend = getattr(torch.backends, "mps", None)
    return bool(backend is not None and backend.is_available())


def get_device(prefer: str | None = None, *, option: str | None = None) -> torch.device:
    """Return the device the course should run on.

    Order: the ``prefer`` argument, then ``$COURSE_DEVICE``, then CUDA, Apple MPS, CPU.
    Asking for a device that is not available raises ``ValueError`` naming it.
    """
    choice = prefer or os.environ.get(ENV_VAR, "").strip()
    if choice:
        # name where the choice came from: the argument (a command's --device), or the environment
        # (``option``: the command-line option that gave ``prefer``, e.g. "--device")
        source = (
            (f"{option} {choice!r}" if option else f"device={choice!r}")
            if prefer
            else f"{ENV_VAR}={choice!r}"
        )
        try:
            device = torch.device(choice)
        except (RuntimeError, ValueError):
            raise ValueError(f"{source} is not a device: use cpu, cuda, cuda:1 or mps") from None
        if device.type not in ("cpu", "cuda", "mps"):
            raise ValueError(f"{source}: the course runs on cpu, cuda or mps")
        if device.type == "cuda" and not torch.cuda.is_available():
            raise ValueError(f"{source} asks for CUDA, but torch sees no CUDA device")
        if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
            raise ValueError(f"{source}: only {torch.cuda.device_count()} CUDA device(s) are visible")
        if device.type == "mps" and not _mps_available():
            raise ValueError(f"{source} asks for MPS, but it is not available")
        return device
    if torch.cuda.is_available():
        return torch.device("cuda")
    if _mps_available():
        return torch.device("mps")
    return torch.device("cpu")


def autocast_dtype(device: torch.device | str) -> torch.dtype | None:
    """The reduced-precision dtype the course uses on ``device``, or None for float32.

    bf16 on a GPU that supports it, float32 elsewhere; ``COURSE_PRECISION=bf16`` gives bf16 on
    every device (the CPU included), ``COURSE_PRECISION=fp32`` float32 on every device.
    """
    device = torch.device(device)
    policy = precision()
    if policy == "fp32":
        return None
    if policy == "bf16":
        return torch.bfloat16
    if device.type == "cuda" and torch.cuda.is_bf16_supported():
        return torch.bfloat16
    return None


def autocast(device: torch.device | str, enabled: bool = True):
    """Context manager: bf16 autocast where :func:`autocast_dtype` says so, a no-op otherwise."""
    device = torch.device(device)
    dtype = autocast_dtype(device)
    if not enabled or dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)


def seed_everything(seed: int = 0, deterministic: bool = True) -> torch.Generator:
    """Seed Python, NumPy and torch (all devices); return a CPU generator with that seed.

    With ``deterministic=True`` torch uses deterministic algorithms where they exist
    (``warn_only`` so that a GPU op without one still runs), which makes CPU runs
    bit-for-bit reproducible. ``COURSE_SEED_OFFSET=k`` adds ``k`` to every seed (to measure a
    chapter's claims over other seeds; see :mod:`course_lib.claims`).
    """
    seed = seed + seed_offset()
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(seed)
    if deterministic:
        torch.use_deterministic_algorithms(True, warn_only=True)
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        if hasattr(torch.backends, "cudnn"):
            torch.backends.cudnn.benchmark = False
    return torch.Generator().manual_seed(seed)


def describe_device(device: torch.device | str | None = None) -> str:
    """One line for a notebook: which device, which precision, how many CPU threads."""
    device = torch.device(device) if device is not None else get_device()
    dtype = autocast_dtype(device)
    precision = "bf16 autocast" if dtype is not None else "float32"
    name = device.type
    if device.type == "cuda":
        name = f"cuda ({torch.cuda.get_device_name(device)})"
    threads = torch.get_num_threads()
    return f"device: {name}, precision: {precision}, torch {torch.__version__}, {threads} CPU threads"
