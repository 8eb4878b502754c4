"""What :func:`course_lib.train.fit` saves to resume exactly, and the checks a resume passes.

The loop (:mod:`course_lib.train`) calls these: the random sources and counters a loss owns
(part of the training state), a hash of the first batch and of the model's shape (checked
again when a run resumes), the replay of the batches a stopped run had drawn, the refusal of
a state whose settings differ (:class:`ResumeMismatch`, :func:`resume_settings`), the kept
copies of earlier states (``keep_last``) and the SIGTERM notice that saves the state and
stops. The files themselves are written by :func:`course_lib.checkpoints.save_train_state`.
"""

from __future__ import annotations

import contextvars
import json
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

__all__ = [
    "ResumeMismatch",
    "ResumeCheck",
    "resume_settings",
    "current_resume_check",
    "Termination",
    "loss_state_holders",
    "holder_states",
    "set_holder_states",
    "batch_hash",
    "model_signature",
    "replay",
    "check_resume",
    "keep_copy",
]


class ResumeMismatch(ValueError):
    """A resume whose settings differ from the saved run's (the message names each one)."""


@dataclass(frozen=True)
class ResumeCheck:
    settings: Mapping[str, Any]
    force: bool


_RESUME_CHECK: contextvars.ContextVar[ResumeCheck | None] = contextvars.ContextVar(
    "course_resume_check", default=None
)


@contextmanager
def resume_settings(settings: Mapping[str, Any], *, force: bool = False) -> Iterator[None]:
    """Every ``fit`` inside records ``settings`` (name -> JSON-safe value: the command's options
    that define the run) in its training state, and a resume refuses a state whose recorded
    settings differ (a :class:`ResumeMismatch` naming each one); ``force=True`` accepts the
    differences (e.g. more ``--steps`` to continue a finished run), except a model of another
    shape, which cannot be loaded."""
    token = _RESUME_CHECK.set(ResumeCheck(dict(settings), force))
    try:
        yield
    finally:
        _RESUME_CHECK.reset(token)


def current_resume_check() -> ResumeCheck | None:
    """The settings of the enclosing :func:`resume_settings` (``None`` outside one)."""
    return _RESUME_CHECK.get()


class Termination:
    """SIGTERM (a preemptible machine's notice) during ``fit``: noted, and the loop saves its
    state after the current step and exits."""

    def __init__(self) -> None:
        self.requested = False
        self.previous: Any = None

    def __enter__(self) -> Termination:
        import signal
        import threading

        if threading.current_thread() is threading.main_thread():
            self.previous = signal.signal(signal.SIGTERM, self._note)
        return self

    def _note(self, signum: int, frame: Any) -> None:
        self.requested = True

    def __exit__(self, *exc: Any) -> None:
        import signal

        if self.previous is not None:
            signal.signal(signal.SIGTERM, self.previous)


def loss_state_holders(loss_fn: Any) -> list[Any]:
    """The random sources and counters a loss owns, which belong in the training state: the
    ``torch.Generator`` objects among a ``functools.partial``'s arguments (XLNet's order
    generator), and the loss itself (or the partial's function) when it has
    ``state_dict``/``load_state_dict``."""
    import functools

    holders: list[Any] = []
    fn = loss_fn
    while isinstance(fn, functools.partial):
        for v in [*fn.args, *fn.keywords.values()]:
            if isinstance(v, torch.Generator):
                holders.append(v)
        fn = fn.func
    for obj in (loss_fn, fn):
        if hasattr(obj, "state_dict") and hasattr(obj, "load_state_dict") and obj not in holders:
            holders.append(obj)
    return holders


def holder_states(holders: list[Any]) -> list[Any]:
    return [h.get_state() if isinstance(h, torch.Generator) else h.state_dict() for h in holders]


def set_holder_states(holders: list[Any], states: list[Any] | None) -> None:
    if states is None:
        return
    if len(states) != len(holders):
        raise ResumeMismatch(
            f"the saved state holds {len(states)} loss-owned random sources or counters, this loss has "
            f"{len(holders)}: not the same objective"
        )
    for h, st in zip(holders, states):
        if isinstance(h, torch.Generator):
            h.set_state(st)
        else:
            h.load_state_dict(st)


def batch_hash(batch: Any) -> str:
    """A short hash of a batch's tensors (and other values): the data, tokenizer and batching
    of a run, checked again when it resumes."""
    import hashlib

    h = hashlib.sha256()

    def walk(b: Any) -> None:
        if isinstance(b, torch.Tensor):
            t = b.detach().cpu().contiguous()
            h.update(f"{tuple(t.shape)}{t.dtype}".encode())
            h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
        elif isinstance(b, Mapping):
            for k in sorted(b, key=str):
                h.update(str(k).encode())
                walk(b[k])
        elif isinstance(b, (list, tuple)):
            for v in b:
                walk(v)
        else:
            h.update(repr(b).encode())

    walk(batch)
    return h.hexdigest()[:16]


def model_signature(model: nn.Module) -> str:
    import hashlib

    text = ";".join(f"{k}:{tuple(v.shape)}" for k, v in model.state_dict().items())
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def replay(it: Iterator, n: int) -> str | None:
    """Draw and drop ``n`` batches: a resumed run's stream (and any state the batch source
    keeps, such as a shuffled order or a private generator shared with a later ``fit``)
    reaches where the stopped run was. Returns the hash of the first batch (checked against
    the saved run's)."""
    first = None
    for k in range(n):
        try:
            batch = next(it)
        except StopIteration:
            return first
        if k == 0:
            first = batch_hash(batch)
    return first


def check_resume(
    state: Mapping[str, Any],
    settings: Mapping[str, Any],
    signature: str,
    steps: int,
    state_file: Path,
    *,
    force: bool,
) -> None:
    """Refuse (:class:`ResumeMismatch`, one line naming each differing setting) a saved state
    this run cannot continue; ``force`` accepts all differences but the model's shape."""
    extra = state.get("extra") or {}
    saved = json.loads(extra["settings"]) if extra.get("settings") else {"--steps": state.get("steps")}
    differ = []

    def show(v: Any) -> str:
        return "default" if v is None else str(v)

    for name in dict.fromkeys([*saved, *settings]):
        if name in saved and name in settings and saved[name] != settings[name]:
            differ.append(f"{name} {show(saved[name])} (saved) vs {show(settings[name])} (now)")
        elif (name in saved) != (name in settings) and name != "--steps":
            value = saved.get(name, settings.get(name))
            differ.append(f"{name} {'only in the saved run' if name in saved else 'only now'} ({value})")
    if extra.get("model") and signature and extra["model"] != signature:
        raise ResumeMismatch(
            f"cannot resume from {state_file}: the model has another shape (--size, --vocab-size, "
            f"--max-len or the configuration differ)"
            + (f"; also {', '.join(differ)}" if differ else "")
            + "; use the run's options, or another --checkpoint-dir"
        )
    if differ and not force:
        raise ResumeMismatch(
            f"cannot resume from {state_file}: {', '.join(differ)}; use the run's options, "
            "--force-resume to continue anyway (e.g. more --steps after a finished run), "
            "or another --checkpoint-dir"
        )


def keep_copy(state_file: Path, previous: int, keep: int) -> None:
    """Before ``state_file`` (of step ``previous``) is replaced, keep it as
    ``state-<step>.pt`` and remove all but the newest ``keep`` such copies."""
    if state_file.exists() and previous > 0:
        copy = state_file.with_name(f"state-{previous:08d}.pt")
        copy.unlink(missing_ok=True)
        try:
            os.link(state_file, copy)  # the latest state is replaced by a rename: the link keeps it
        except OSError:
            import shutil

            shutil.copyfile(state_file, copy)
    copies = sorted(state_file.parent.glob("state-*.pt"))
    for old in copies[: max(0, len(copies) - keep)]:
        old.unlink(missing_ok=True)
