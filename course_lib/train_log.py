"""The metrics log of :func:`course_lib.train.fit` (``log_csv``; TensorBoard with ``tensorboard=DIR``).

One CSV row per step, the evaluations in a ``-evals.csv`` beside it (rewritten as they
come), and scalars for TensorBoard when it is installed; a resumed run first drops the rows
of the steps it will take again.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import TYPE_CHECKING

from .files import atomic_write_text

if TYPE_CHECKING:
    from .train import History

__all__ = ["MetricsLog"]


def _csv_text(rows: list[list]) -> str:
    buf = io.StringIO(newline="")
    csv.writer(buf).writerows(rows)
    return buf.getvalue()


class MetricsLog:
    """One CSV row per step (and TensorBoard scalars when asked and installed)."""

    def __init__(self, path: str | Path | None, tensorboard: str | None, stage: str) -> None:
        self.path = Path(path) if path is not None else None
        self.rows_written = 0
        self.tb = None
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self.tb = SummaryWriter(str(Path(tensorboard) / stage))
            except ImportError:
                import warnings

                warnings.warn(
                    "tensorboard is not installed: pip install tensorboard (the CSV log is still written)"
                )
        self.columns: list[str] | None = None

    def truncate_after(self, last_step: int) -> None:
        """Drop rows of steps after ``last_step`` (a resumed run writes them again)."""
        if self.path is None or not self.path.exists():
            return
        with self.path.open(newline="") as f:
            rows = list(csv.reader(f))
        if not rows:
            return
        kept = [rows[0]] + [r for r in rows[1:] if r and int(r[1]) <= last_step]
        self.columns = rows[0]
        atomic_write_text(self.path, _csv_text(kept))

    def write(self, history: History) -> None:
        step, loss, lr = history.steps[-1], history.loss[-1], history.lr[-1]
        metrics = {k: v[-1] for k, v in history.metrics.items()}
        if self.tb is not None:
            self.tb.add_scalar("loss", loss, step)
            self.tb.add_scalar("lr", lr, step)
            for k, v in metrics.items():
                self.tb.add_scalar(k, v, step)
        if self.path is None:
            return
        if self.columns is None:
            self.columns = ["kind", "step", "loss", "lr", *sorted(metrics)]
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("w", newline="") as f:
                csv.writer(f).writerow(self.columns)
        row = {"kind": "train", "step": step, "loss": f"{loss:.6g}", "lr": f"{lr:.6g}"}
        row.update({k: f"{v:.6g}" for k, v in metrics.items()})
        with self.path.open("a", newline="") as f:
            csv.writer(f).writerow([row.get(c, "") for c in self.columns])

    def write_evals(self, history: History) -> None:
        if not history.eval_steps:
            return
        if self.tb is not None:
            for k, values in history.evals.items():
                self.tb.add_scalar(f"eval/{k}", values[-1], history.eval_steps[-1])
        if self.path is None:
            return
        evals_path = self.path.with_name(self.path.stem + "-evals.csv")
        names = sorted(history.evals)
        rows = [["step", *names]] + [
            [s, *(f"{history.evals[n][j]:.6g}" if j < len(history.evals[n]) else "" for n in names)]
            for j, s in enumerate(history.eval_steps)
        ]
        atomic_write_text(evals_path, _csv_text(rows))

    def close(self) -> None:
        if self.tb is not None:
            self.tb.close()
