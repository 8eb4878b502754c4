"""The training loop every chapter and every ``course train`` run uses.

``fit(model, batches, loss_fn, steps=...)`` moves each batch to the model's device, runs the
forward pass under a precision policy, steps AdamW with warm-up and a cosine (or linear) decay,
clips gradients, records the loss after every step and calls an evaluation hook every
``eval_every`` steps. A tqdm bar (a widget in a notebook, text in a terminal) shows progress.

The loop knows nothing about models: ``loss_fn(model, batch)`` returns the loss tensor, or
``(loss, {"metric": value, ...})`` to log more numbers.

For long runs the same loop also does (all off by default, so a chapter's run is unchanged):

* **gradient accumulation** (``accumulate=k``): k micro-batches per optimiser step, each loss
  divided by k, so the step's gradient is the mean over the k micro-batches;
* **mixed precision** (``precision``): ``"auto"`` (bf16 autocast on a capable GPU, float32
  elsewhere), ``"fp32"``, ``"bf16"`` (autocast) or ``"fp16"`` (autocast + a gradient scaler);
* **checkpoints and exact resume** (``checkpoint=DIR``, ``checkpoint_every=N``,
  ``resume=True``): the model, the optimiser, the gradient scaler, the history, the step and
  every random state are written atomically every N steps and at the end. A resumed run
  draws and drops the batches the stopped run had used (so a batch source's own state, a
  shuffled order or a private generator, is where it was), puts the random states back and
  continues, so a run killed at any step and resumed ends with the same parameters as one
  never interrupted (bit for bit on CPU; ``tests/test_resume.py`` kills a real run to check
  it). Exact for any batch source whose batches depend only on the order of drawing and the
  random state (the course's data all do); a finished ``fit`` is loaded, its batches drawn;
* **data parallelism** under ``torchrun``: when ``torch.distributed`` is initialised with
  more than one process, the loop wraps a module whose ``forward`` is the objective's loss
  (``loss_fn(model, batch)``, so losses that call submodules and heads directly work) in
  torch's ``DistributedDataParallel``: rank 0's parameters are broadcast, every rank takes
  its equal slice of each (global) batch, and the gradients are averaged by DDP's bucketed
  all-reduce while backward runs (``no_sync`` for all but the last micro-batch of an
  accumulated step). Rank 0 alone writes checkpoints and logs; a checkpoint resumes on any
  number of processes;
* a **metrics log** (``log_csv``; TensorBoard too with ``tensorboard=DIR`` when installed);
* **clear failures**: a non-finite loss stops the run naming the step, and running out of
  memory names the batch size to try instead.

:func:`training_run` sets these for every ``fit`` inside it, which is how the ``course``
commands pass ``--accumulate``, ``--precision``, ``--checkpoint-dir``... to recipes that call
``fit`` deep inside (each ``fit`` call of a run gets its own checkpoint folder and log).
"""

from __future__ import annotations

import contextvars
import json
import math
import os
import re
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
from torch import nn

from .device import autocast
from .train_log import MetricsLog
from .train_parallel import LossModule, agree, average, distributed_info, first_rows, shard_batch
from .train_state import (
    ResumeMismatch,
    Termination,
    batch_hash,
    check_resume,
    current_resume_check,
    holder_states,
    keep_copy,
    loss_state_holders,
    model_signature,
    replay,
    set_holder_states,
)

__all__ = [
    "History",
    "evaluating",
    "fit",
    "to_device",
    "warmup_cosine",
    "warmup_linear",
    "model_device",
    "RunOptions",
    "training_run",
    "current_run",
    "PRECISIONS",
    "SCHEDULES",
    "current_step",
    "loop_overrides",
    "set_dropout",
    "progress_enabled",
]


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


def warmup_linear(step: int, *, total: int, warmup: int, floor: float = 0.0) -> float:
    """Learning-rate multiplier: linear warm-up over ``warmup`` steps, then linear decay to ``floor``."""
    if warmup > 0 and step < warmup:
        return (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    return floor + (1.0 - floor) * (1.0 - progress)


def _constant(step: int, *, total: int, warmup: int, floor: float = 0.0) -> float:
    return (step + 1) / warmup if warmup > 0 and step < warmup else 1.0


SCHEDULES: dict[str, Callable[..., float]] = {
    "cosine": warmup_cosine,
    "linear": warmup_linear,
    "constant": _constant,
}
PRECISIONS = ("auto", "fp32", "bf16", "fp16")


@dataclass(frozen=True)
class RunOptions:
    """How ``fit`` runs, beyond what a recipe decides (see the module docstring).

    ``checkpoint_dir``/``log_dir`` are folders: the k-th ``fit`` of a :func:`training_run`
    writes to ``<dir>/<k>-<desc>/`` and ``<dir>/<k>-<desc>.csv``.
    """

    accumulate: int = 1
    precision: str = "auto"
    schedule: str = "cosine"
    checkpoint_dir: str | None = None
    checkpoint_every: int | None = None
    resume: bool = False
    log_dir: str | None = None
    tensorboard: str | None = None
    compile: bool = False

    def __post_init__(self) -> None:
        if self.accumulate < 1:
            raise ValueError(f"accumulate must be at least 1, got {self.accumulate}")
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {PRECISIONS}, got {self.precision!r}")
        if self.schedule not in SCHEDULES:
            raise ValueError(f"schedule must be one of {sorted(SCHEDULES)}, got {self.schedule!r}")
        if self.checkpoint_every is not None and self.checkpoint_every < 1:
            raise ValueError(f"checkpoint_every must be positive, got {self.checkpoint_every}")
        if self.resume and not self.checkpoint_dir:
            raise ValueError("resume needs a checkpoint folder (checkpoint_dir / --checkpoint-dir)")


@dataclass
class _Run:
    options: RunOptions
    fits: int = 0  # fit calls so far: names the next one's folder


_CURRENT: contextvars.ContextVar[_Run | None] = contextvars.ContextVar("course_training_run", default=None)


@contextmanager
def training_run(options: RunOptions | None = None, **changes: Any) -> Iterator[RunOptions]:
    """Every ``fit`` inside runs with ``options`` (a :class:`RunOptions`, with ``changes``
    applied); the k-th ``fit`` checkpoints to ``<checkpoint_dir>/<k>-<desc>``."""
    opts = replace(options or RunOptions(), **changes)
    token = _CURRENT.set(_Run(opts))
    try:
        yield opts
    finally:
        _CURRENT.reset(token)


def current_run() -> RunOptions:
    """The options of the enclosing :func:`training_run` (the defaults outside one)."""
    run = _CURRENT.get()
    return run.options if run is not None else RunOptions()


_STEP: contextvars.ContextVar[int | None] = contextvars.ContextVar("course_fit_step", default=None)


def current_step() -> int | None:
    """The optimiser step (0-based, within the running ``fit``) whose micro-batches the loss is
    computing; ``None`` outside ``fit``. A loss with a schedule of its own (distillation's
    soft/hard weight) reads it instead of counting its calls, so the schedule follows optimiser
    steps under ``accumulate`` and continues where it was after a resume."""
    return _STEP.get()


@dataclass(frozen=True)
class _Overrides:
    warmup: int | None = None
    weight_decay: float | None = None
    grad_clip: float | None = None  # 0: no clipping
    keep_last: int | None = None
    dropout: float | None = None


_OVERRIDES: contextvars.ContextVar[_Overrides] = contextvars.ContextVar(
    "course_overrides", default=_Overrides()
)


@contextmanager
def loop_overrides(
    *,
    warmup: int | None = None,
    weight_decay: float | None = None,
    grad_clip: float | None = None,
    keep_last: int | None = None,
    dropout: float | None = None,
) -> Iterator[None]:
    """Every ``fit`` inside uses these instead of the recipe's values (``None``: the recipe's):
    warm-up steps, AdamW weight decay, the gradient-norm clip (``0``: none), how many
    earlier training states to keep beside the latest (``state-<step>.pt``; default none), and
    every dropout probability of the trained model (:func:`set_dropout`)."""
    for name, v in (("warmup", warmup), ("weight_decay", weight_decay), ("grad_clip", grad_clip)):
        if v is not None and v < 0:
            raise ValueError(f"{name} must be >= 0, got {v}")
    if keep_last is not None and keep_last < 1:
        raise ValueError(f"keep_last must be positive, got {keep_last}")
    if dropout is not None and not 0.0 <= dropout < 1.0:
        raise ValueError(f"dropout must be in [0, 1), got {dropout}")
    token = _OVERRIDES.set(_Overrides(warmup, weight_decay, grad_clip, keep_last, dropout))
    try:
        yield
    finally:
        _OVERRIDES.reset(token)


# the configuration fields that hold a dropout probability (BERT/ALBERT/RoBERTa: Hugging Face's
# names; XLNet, Transformer-XL, ELMo: ``dropout``, ``dropatt``)
DROPOUT_FIELDS = (
    "hidden_dropout_prob",
    "attention_probs_dropout_prob",
    "classifier_dropout_prob",
    "dropout",
    "dropatt",
)


def set_dropout(model: nn.Module, p: float) -> nn.Module:
    """Every dropout of the networks ``model`` trains set to ``p``, as a network built from
    its configuration with each dropout field (:data:`DROPOUT_FIELDS`) set to ``p`` has them:
    the configuration is changed (a saved ``config.json`` records ``p``), and the probability
    of each ``nn.Dropout`` and attention module is copied from such a network built on the meta
    device (so a dropout the architecture does not have, e.g. between BERT's feed-forward
    matrices, stays off). Networks without a trainable parameter (a frozen teacher) are left
    alone. Returns ``model``."""
    if not 0.0 <= p < 1.0:
        raise ValueError(f"dropout must be in [0, 1), got {p}")
    done: list[str] = []
    for prefix, module in model.named_modules():
        config = getattr(module, "config", None)
        names = [n for n in DROPOUT_FIELDS if isinstance(getattr(config, n, None), float)]
        if not names or any(prefix.startswith(d + ".") or d == "" for d in done):
            continue
        if not any(q.requires_grad for q in module.parameters()):
            continue
        for name in names:
            object.__setattr__(config, name, p)
        with torch.device("meta"):
            fresh = type(module)(config)
        rates = dict(fresh.named_modules())
        for name, sub in module.named_modules():
            twin = rates.get(name)
            if isinstance(sub, nn.Dropout) and isinstance(twin, nn.Dropout):
                sub.p = twin.p
            elif isinstance(getattr(sub, "dropout", None), float) and twin is not None:
                sub.dropout = float(twin.dropout)
        done.append(prefix)
    if not done:
        raise ValueError(f"{type(model).__name__} has no configuration with a dropout to set")
    return model


def progress_enabled(progress: bool | None = None) -> bool:
    """Whether to show a progress bar: ``progress`` when given, else what ``COURSE_PROGRESS``
    says (on unless it is ``0``, ``false``, ``no`` or ``off``)."""
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
    progress: bool | None = None,
    desc: str = "training",
    accumulate: int | None = None,
    precision: str | None = None,
    schedule: str | None = None,
    checkpoint: str | Path | None = None,
    checkpoint_every: int | None = None,
    resume: bool | None = None,
    log_csv: str | Path | None = None,
) -> History:
    """Train ``model`` for ``steps`` optimiser steps and return the :class:`History`.

    Args:
        batches: an iterable of batches (re-iterated as epochs until ``steps`` is reached), or
            a function ``step -> batch`` that draws fresh data every step (with
            ``accumulate=k`` it is called k times a step, with consecutive numbers).
        loss_fn: ``(model, batch) -> loss`` or ``(loss, {"name": value})``; the batch is
            already on the model's device.
        warmup: warm-up steps (default 5% of ``steps``), followed by the ``schedule``'s decay
            (cosine by default, or linear, or constant) to ``min_lr_ratio * lr``.
        eval_fn: called as ``eval_fn(model)`` in eval mode under ``torch.no_grad`` every
            ``eval_every`` steps and at the end; returns a dict of numbers.
        accumulate, precision, schedule: see the module docstring; ``None`` takes the
            enclosing :func:`training_run`'s value (1, ``"auto"``, ``"cosine"`` outside one).
        checkpoint: a folder for this run's training state (``None``: the enclosing
            ``training_run``'s ``checkpoint_dir``/``<k>-<desc>``, or no checkpoints);
            written every ``checkpoint_every`` steps (default: only at the end) and at the end.
        resume: continue from the state in ``checkpoint`` when there is one (a finished
            run is loaded, not trained again).
        log_csv: a CSV file getting one row per step (step, loss, lr, metrics, evaluations).
    """
    if steps <= 0:
        raise ValueError(f"steps must be positive, got {steps}")
    run = _CURRENT.get()
    opts = run.options if run is not None else RunOptions()
    index = 0
    if run is not None:
        run.fits += 1
        index = run.fits
    accumulate = opts.accumulate if accumulate is None else accumulate
    precision = opts.precision if precision is None else precision
    schedule = opts.schedule if schedule is None else schedule
    resume = opts.resume if resume is None else resume
    checkpoint_every = opts.checkpoint_every if checkpoint_every is None else checkpoint_every
    stage = f"{index}-{re.sub(r'[^A-Za-z0-9]+', '-', desc).strip('-') or 'fit'}"
    if checkpoint is None and opts.checkpoint_dir:
        checkpoint = Path(opts.checkpoint_dir) / stage
    if log_csv is None and opts.log_dir:
        log_csv = Path(opts.log_dir) / f"{stage}.csv"
    RunOptions(accumulate=accumulate, precision=precision, schedule=schedule)  # validates them
    if resume and checkpoint is None:
        raise ValueError("resume needs a checkpoint folder")
    rank, world = distributed_info()
    main_process = rank == 0
    device = model_device(model)
    history = history or History()
    start_step = history.steps[-1] + 1 if history.steps else 0
    overrides = _OVERRIDES.get()
    if overrides.warmup is not None:
        warmup = overrides.warmup
    if overrides.weight_decay is not None:
        weight_decay = overrides.weight_decay
    if overrides.grad_clip is not None:
        grad_clip = overrides.grad_clip or None
    if overrides.dropout is not None:
        set_dropout(model, overrides.dropout)
    warmup = max(1, steps // 20) if warmup is None else warmup
    if optimizer is None:
        decay, no_decay = [], []
        for name, p in model.named_parameters():
            if not p.requires_grad:
                continue
            (decay if p.dim() >= 2 else no_decay).append(p)
        groups = [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
        fused = device.type == "cuda"  # one kernel for the whole update on a GPU
        optimizer = torch.optim.AdamW(groups, lr=lr, **({"fused": True} if fused else {}))
    for g in optimizer.param_groups:
        g.setdefault("initial_lr", g["lr"])
    base_lrs = [g["initial_lr"] for g in optimizer.param_groups]
    scaler = torch.amp.GradScaler(device.type) if precision == "fp16" else None
    lr_scale = SCHEDULES[schedule]

    done = 0  # optimiser steps of this call already taken (restored on resume)
    rng = None
    state_file = Path(checkpoint) / "state.pt" if checkpoint is not None else None
    holders = loss_state_holders(loss_fn) if state_file is not None else []
    check = current_resume_check()
    # what defines this run: recorded in its state, compared when it resumes
    settings: dict[str, Any] = {
        "--steps": steps,
        "--lr": lr,
        "--accumulate": accumulate,
        "--precision": precision,
        "--schedule": schedule,
        "--warmup": warmup,
        "--weight-decay": weight_decay,
        "--grad-clip": grad_clip,
        "minimum learning-rate ratio": min_lr_ratio,
    }
    if check is not None:
        settings.update(check.settings)
    settings = json.loads(json.dumps(settings, default=str))
    signature = model_signature(model) if state_file is not None else ""
    first_batch: str | None = None
    extra: dict[str, Any] = {}
    if resume and state_file is not None and state_file.exists():
        from .checkpoints import load_train_state

        def vet(state: Mapping[str, Any]) -> None:
            check_resume(state, settings, signature, steps, state_file, force=bool(check and check.force))

        done, restored, rng, extra = load_train_state(
            state_file, model, optimizer, scaler, steps=steps, check=vet
        )
        history.__dict__.update(History.from_dict(restored).__dict__)

    def run_eval(step: int) -> None:
        if eval_fn is None:
            return
        was_training = model.training
        model.eval()
        with torch.no_grad():
            values = eval_fn(model)
        model.train(was_training)
        history.log_eval(step, values)
        log.write_evals(history)  # as it happens: a long run's evaluations are visible at once

    saved_at = [done]  # the step of the state on disk (kept as a copy before it is replaced)

    def save_state(finished: bool) -> None:
        if state_file is None:
            return
        if main_process:
            from .checkpoints import save_train_state

            if overrides.keep_last:
                keep_copy(state_file, saved_at[0], overrides.keep_last)
            saved_at[0] = done
            save_train_state(
                state_file,
                model,
                optimizer,
                scaler,
                done=done,
                steps=steps,
                history=history,
                finished=finished,
                extra={
                    "settings": json.dumps(settings),
                    "model": signature,
                    "first_batch": first_batch,
                    "loss_state": holder_states(holders),
                },
            )
        if world > 1:
            torch.distributed.barrier()

    log = MetricsLog(log_csv if main_process else None, opts.tensorboard if main_process else None, stage)
    if done:
        log.truncate_after(history.steps[-1])

    from tqdm.auto import tqdm

    bar = tqdm(
        total=steps,
        initial=done,
        desc=desc,
        disable=not (progress_enabled(progress) and main_process),
        mininterval=0.5,
        leave=True,
    )
    model.train()
    t0 = time.perf_counter()
    step = start_step + done - 1
    it = _batch_iterator(batches)
    if done:  # replay the batches drawn before the stop, then put the random states back
        from .checkpoints import set_rng_state

        first_batch = replay(it, done * accumulate)
        saved_first = extra.get("first_batch")
        if saved_first and first_batch and saved_first != first_batch and not (check and check.force):
            raise ResumeMismatch(
                f"cannot resume from {state_file}: the first batch differs from the saved run's "
                "(other data, tokenizer, batching or seed); use the same options, or another --checkpoint-dir"
            )
        set_rng_state(rng)
        set_holder_states(holders, extra.get("loss_state"))
    if done >= steps:  # a finished run: its final state is already loaded
        bar.close()
        log.close()
        model.eval()
        return history
    forward = model
    if opts.compile:
        forward = torch.compile(model)
    sync_every = _SYNC_EVERY.get(device.type, 10)
    pending: list[tuple[int, Any, dict[str, Any], float]] = []  # steps not yet read back from the device

    def flush() -> None:
        """Read the pending steps' losses back (one synchronisation) into the history and the log."""
        if not pending:
            return
        losses = [v for _, v, _, _ in pending]
        if isinstance(losses[0], torch.Tensor):
            losses = torch.stack(losses).tolist()
        for (s, _, metrics, lr_now), value in zip(pending, losses):
            if not math.isfinite(value):
                pending.clear()
                raise FloatingPointError(
                    f"loss became {value} at step {s} ({desc}); lower the learning rate"
                    + (" or use --precision bf16/fp32" if precision == "fp16" else "")
                )
            history.steps.append(s)
            history.loss.append(value)
            history.lr.append(lr_now)
            for k, v in metrics.items():
                history.metrics.setdefault(k, []).append(float(v))
            log.write(history)
        pending.clear()

    ddp = None
    if world > 1:
        # torch's DistributedDataParallel around a module whose forward is the objective's loss
        # (course losses call submodules and heads directly): rank 0's weights are broadcast
        # when it is built, and the gradients are averaged in buckets while backward runs
        ddp = torch.nn.parallel.DistributedDataParallel(
            LossModule(model, forward, loss_fn),
            device_ids=[device.index] if device.type == "cuda" else None,
            find_unused_parameters=True,  # heads a batch does not use (a pair task, a hint layer)
        )

    def compute_loss(batch: Any, sync: bool) -> Any:
        if ddp is None:
            return loss_fn(forward, batch)
        if sync:
            return ddp(batch)
        with ddp.no_sync():  # accumulate locally; the last micro-batch's backward all-reduces
            return ddp(batch)

    termination = Termination() if state_file is not None else None
    if termination is not None:
        termination.__enter__()
    try:
        for i in range(done, steps):
            step = start_step + i
            scale = lr_scale(i, total=steps, warmup=warmup, floor=min_lr_ratio)
            for g, base in zip(optimizer.param_groups, base_lrs):
                g["lr"] = base * scale
            step_loss: Any = 0.0
            step_metrics: dict[str, Any] = {}
            exhausted = False
            optimizer.zero_grad(set_to_none=True)
            for micro in range(accumulate):
                try:
                    batch = next(it)
                except StopIteration:
                    exhausted = True
                    break
                if first_batch is None and state_file is not None:
                    first_batch = batch_hash(batch)
                batch = to_device(shard_batch(batch, rank, world), device)
                try:
                    step_token = _STEP.set(i)
                    try:
                        with _precision_context(device, precision):
                            out = compute_loss(batch, sync=micro == accumulate - 1)
                    finally:
                        _STEP.reset(step_token)
                    loss, metrics = out if isinstance(out, tuple) else (out, {})
                    if sync_every == 1 and not torch.isfinite(loss):
                        raise FloatingPointError(
                            f"loss became {loss.item()} at step {step} ({desc}); lower the learning rate"
                            + (" or use --precision bf16/fp32" if precision == "fp16" else "")
                        )
                    scaled = loss / accumulate if accumulate > 1 else loss
                    if ddp is not None and micro < accumulate - 1:
                        with ddp.no_sync():
                            (scaler.scale(scaled) if scaler is not None else scaled).backward()
                    else:
                        (scaler.scale(scaled) if scaler is not None else scaled).backward()
                except torch.OutOfMemoryError as e:
                    raise _out_of_memory(e, batch, step, accumulate) from e
                if sync_every == 1:
                    step_loss += loss.item() / accumulate
                else:  # stays on the device until the next flush: no synchronisation here
                    step_loss = step_loss + loss.detach().float() / accumulate
                for k, v in metrics.items():
                    v = v.detach().float() if isinstance(v, torch.Tensor) else float(v)
                    step_metrics[k] = step_metrics.get(k, 0.0) + v / accumulate
            if exhausted:
                break
            if world > 1:  # the gradients are averaged already (DDP); the loss for the record
                step_loss = average(step_loss, world, device)
            if scaler is not None:
                scaler.unscale_(optimizer)
            if grad_clip is not None:
                torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
            if scaler is not None:
                scaler.step(optimizer)
                scaler.update()
            else:
                optimizer.step()
            pending.append((step, step_loss, step_metrics, optimizer.param_groups[0]["lr"]))
            done = i + 1
            bar.update(1)
            evaluate = bool(eval_every and (i + 1) % eval_every == 0 and i + 1 < steps)
            save = bool(checkpoint_every and done % checkpoint_every == 0 and done < steps)
            if len(pending) >= sync_every or evaluate or save or done == steps or i % 10 == 0:
                flush()
            if history.loss and (i % 10 == 0 or len(pending) == 0):
                bar.set_postfix(loss=f"{history.loss[-1]:.4f}", refresh=False)
            if evaluate:
                run_eval(step)
            if save:
                save_state(finished=False)
            if termination is not None and agree(termination.requested, world, device) and done < steps:
                flush()
                save_state(finished=False)
                raise SystemExit(
                    f"stopped by SIGTERM after step {done} of {steps} ({desc}); the training state is "
                    f"saved in {state_file.parent}: run the same command with --resume to continue"
                )
        flush()
        bar.set_postfix_str(f"loss={history.loss[-1]:.4f}" + (", evaluating..." if eval_fn else ""))
        run_eval(step)
        save_state(finished=True)
    finally:
        if termination is not None:
            termination.__exit__()
        bar.close()
        log.close()
        history.seconds += time.perf_counter() - t0
        model.eval()
    return history


# steps between reading the loss back from the device: every step on a CPU (where reading is
# free), every 10 on a GPU, so the host queues work ahead instead of waiting each step
_SYNC_EVERY: dict[str, int] = {"cpu": 1}


def _precision_context(device: torch.device, precision: str):
    if precision == "auto":
        return autocast(device)
    if precision == "fp32":
        return autocast(device, enabled=False)
    dtype = torch.bfloat16 if precision == "bf16" else torch.float16
    return torch.autocast(device_type=device.type, dtype=dtype)


def _out_of_memory(error: Exception, batch: Any, step: int, accumulate: int) -> RuntimeError:
    rows = first_rows(batch) or 0
    half = max(1, rows // 2)
    return RuntimeError(
        f"out of memory at step {step} with a (per-process) batch of {rows} rows: try --batch-size {half} "
        f"--accumulate {accumulate * 2} (the same examples per step in smaller pieces), a shorter --max-len "
        f"or --precision bf16 ({error})"
    )
