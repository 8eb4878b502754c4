"""The small training loop every chapter reuses.

``fit(model, batches, loss_fn, steps=...)`` moves each batch to the model's device, runs the
forward pass under the course's autocast policy, steps AdamW with warm-up and cosine decay,
clips gradients, records the loss after every step and calls an evaluation hook every
``eval_every`` steps. A tqdm bar (a widget in a notebook, text in a terminal) shows progress.

The loop knows nothing about models: ``loss_fn(model, batch)`` returns the loss tensor, or
``(loss, {"metric": value, ...})`` to log more numbers.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from .device import autocast

__all__ = ["History", "evaluating", "fit", "to_device", "warmup_cosine", "model_device"]


@dataclass
class History:
    """What happened during training: per-step losses and metrics, periodic evaluations."""

    steps: list[int] = field(default_factory=list)
    loss: list[float] = field(default_factory=list)
    lr: list[float] = field(default_factory=list)
    metrics: dict[str, list[float]] = field(default_factory=dict)
    eval_steps: list[int] = field(default_factory=list)
    evals: dict[str, list[float]] = field(default_factory=dict)
    seconds: float = 0.0

    def log_eval(self, step: int, values: Mapping[str, float]) -> None:
        self.eval_steps.append(step)
        for k, v in values.items():
            self.evals.setdefault(k, []).append(float(v))

    def smoothed_loss(self, window: int = 20) -> list[float]:
        """Running mean of the loss over the last ``window`` steps."""
        out, acc = [], 0.0
        for i, v in enumerate(self.loss):
            acc += v
            if i >= window:
                acc -= self.loss[i - window]
            out.append(acc / min(i + 1, window))
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "steps": self.steps,
            "loss": self.loss,
            "lr": self.lr,
            "metrics": self.metrics,
            "eval_steps": self.eval_steps,
            "evals": self.evals,
            "seconds": self.seconds,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> History:
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})

    def plot(self, ax=None, *, title: str | None = None, eval_key: str | None = None, window: int = 20):
        """Learning curve: raw and smoothed training loss, and an evaluation metric on a twin axis."""
        import matplotlib.pyplot as plt

        if ax is None:
            _, ax = plt.subplots(figsize=(6, 3.2))
        ax.plot(self.steps, self.loss, color="tab:blue", alpha=0.25, lw=1, label="loss (per step)")
        ax.plot(
            self.steps, self.smoothed_loss(window), color="tab:blue", lw=2, label=f"loss (mean of {window})"
        )
        ax.set_xlabel("step")
        ax.set_ylabel("training loss")
        ax.set_yscale("log")
        if title:
            ax.set_title(title)
        handles, labels = ax.get_legend_handles_labels()
        if self.evals:
            key = eval_key or next(iter(self.evals))
            ax2 = ax.twinx()
            ax2.plot(self.eval_steps, self.evals[key], "o-", color="tab:orange", label=key)
            ax2.set_ylabel(key)
            h2, l2 = ax2.get_legend_handles_labels()
            handles, labels = handles + h2, labels + l2
        ax.legend(handles, labels, loc="center right", fontsize=8)
        return ax


def model_device(model: nn.Module) -> torch.device:
    """The device of the model's first parameter (or buffer); CPU for an empty module."""
    for t in model.parameters():
        return t.device
    for t in model.buffers():
        return t.device
    return torch.device("cpu")


@contextmanager
def evaluating(model: nn.Module) -> Iterator[None]:
    """Eval mode (no dropout) and no gradients inside; the model's training mode is restored
    afterwards, also when the body raises."""
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            yield
    finally:
        model.train(was_training)


def to_device(batch: Any, device: torch.device) -> Any:
    """Move tensors in (nested) dicts, lists and tuples to ``device``; leave the rest alone."""
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=True)
    if isinstance(batch, Mapping):
        return type(batch)({k: to_device(v, device) for k, v in batch.items()})
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):  # namedtuple
        return type(batch)(*(to_device(v, device) for v in batch))
    if isinstance(batch, (list, tuple)):
        return type(batch)(to_device(v, device) for v in batch)
    return batch


def warmup_cosine(step: int, *, total: int, warmup: int, floor: float = 0.0) -> float:
    """Learning-rate multiplier: linear warm-up over ``warmup`` steps, then cosine decay to ``floor``."""
    if warmup > 0 and step < warmup:
        return (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    return floor + (1.0 - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))


def _progress_enabled(progress: bool | None) -> bool:
    if progress is not None:
        return progress
    return os.environ.get("COURSE_PROGRESS", "1") not in ("0", "false", "no", "off")


def _batch_iterator(batches: Iterable | Callable[[int], Any]) -> Iterator:
    if callable(batches) and not isinstance(batches, Iterable):
        step = 0
        while True:
            yield batches(step)
            step += 1
    while True:
        empty = True
        for b in batches:
            empty = False
            yield b
        if empty:
            raise ValueError("fit: the batch iterable yielded nothing")
        if isinstance(batches, Iterator):  # a one-shot iterator is exhausted: stop
            return


def fit(
    model: nn.Module,
    batches: Iterable | Callable[[int], Any],
    loss_fn: Callable[[nn.Module, Any], Any],
    *,
    steps: int,
    lr: float = 1e-3,
    weight_decay: float = 0.01,
    warmup: int | None = None,
    min_lr_ratio: float = 0.0,
    grad_clip: float | None = 1.0,
    optimizer: torch.optim.Optimizer | None = None,
    eval_fn: Callable[[nn.Module], Mapping[str, float]] | None = None,
    eval_every: int | None = None,
    history: History | None = None,
    mixed_precision: bool = True,
    progress: bool | None = None,
    desc: str = "training",
) -> History:
    """Train ``model`` for ``steps`` optimiser steps and return the :class:`History`.

    Args:
        batches: an iterable of batches (re-iterated as epochs until ``steps`` is reached), or
            a function ``step -> batch`` that draws fresh data every step.
        loss_fn: ``(model, batch) -> loss`` or ``(loss, {"name": value})``; the batch is
            already on the model's device.
        warmup: warm-up steps (default 5% of ``steps``), followed by cosine decay to
            ``min_lr_ratio * lr``.
        eval_fn: called as ``eval_fn(model)`` in eval mode under ``torch.no_grad`` every
            ``eval_every`` steps and at the end; returns a dict of numbers.
        mixed_precision: use the course's autocast policy (bf16 on a capable GPU, float32 on CPU).
    """
    if steps <= 0:
        raise ValueError(f"steps must be positive, got {steps}")
    device = model_device(model)
    history = history or History()
    start_step = history.steps[-1] + 1 if history.steps else 0
    warmup = max(1, steps // 20) if warmup is None else warmup
    if optimizer is None:
        decay, no_decay = [], []
        for name, p in model.named_parameters():
            if not p.requires_grad:
                continue
            (decay if p.dim() >= 2 else no_decay).append(p)
        groups = [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
        optimizer = torch.optim.AdamW(groups, lr=lr)
    for g in optimizer.param_groups:
        g.setdefault("initial_lr", g["lr"])
    base_lrs = [g["initial_lr"] for g in optimizer.param_groups]

    def run_eval(step: int) -> None:
        if eval_fn is None:
            return
        was_training = model.training
        model.eval()
        with torch.no_grad():
            values = eval_fn(model)
        model.train(was_training)
        history.log_eval(step, values)

    from tqdm.auto import tqdm

    bar = tqdm(total=steps, desc=desc, disable=not _progress_enabled(progress), mininterval=0.5, leave=True)
    it = _batch_iterator(batches)
    model.train()
    t0 = time.perf_counter()
    step = start_step
    try:
        for i in range(steps):
            step = start_step + i
            scale = warmup_cosine(i, total=steps, warmup=warmup, floor=min_lr_ratio)
            for g, base in zip(optimizer.param_groups, base_lrs):
                g["lr"] = base * scale
            try:
                batch = next(it)
            except StopIteration:
                break
            batch = to_device(batch, device)
            with autocast(device, enabled=mixed_precision):
                out = loss_fn(model, batch)
            loss, metrics = out if isinstance(out, tuple) else (out, {})
            if not torch.isfinite(loss):
                raise FloatingPointError(f"loss became {loss.item()} at step {step}; lower the learning rate")
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if grad_clip is not None:
                torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
            optimizer.step()
            history.steps.append(step)
            history.loss.append(loss.item())
            history.lr.append(optimizer.param_groups[0]["lr"])
            for k, v in metrics.items():
                history.metrics.setdefault(k, []).append(float(v))
            bar.update(1)
            if i % 10 == 0:
                bar.set_postfix(loss=f"{history.loss[-1]:.4f}", refresh=False)
            if eval_every and (i + 1) % eval_every == 0 and i + 1 < steps:
                run_eval(step)
        run_eval(step)
    finally:
        bar.close()
        history.seconds += time.perf_counter() - t0
        model.eval()
    return history
