r"""The temperature widget of the distillation chapter: how :math:`\mathrm{softmax}(z / T)` reveals a
teacher's "dark knowledge".

At :math:`T = 1` a confident teacher puts almost all its mass on one answer; the rest, its
ranking of the *wrong* answers (a 2 that looks more like a 3 than a 7), is there but tiny.
Raising :math:`T` flattens the distribution without changing the order of the classes, so the
wrong answers' relative sizes become visible, which is what soft targets pass on to the
student. :func:`softened_view` computes the distributions (with
:func:`~course_lib.objectives.distillation.softened`, the function the loss uses),
:func:`dark_knowledge` lists the teacher's wrong answers in its order,
:func:`plot_softened` draws them without a kernel, and :class:`TemperatureWidget` adds a
slider for :math:`T`.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from ..objectives.distillation import softened

__all__ = ["SoftenedView", "softened_view", "dark_knowledge", "plot_softened", "TemperatureWidget"]


@dataclass
class SoftenedView:
    """One row of logits softened at several temperatures."""

    labels: list[str]  # the classes
    temperatures: list[float]
    probs: np.ndarray  # [len(temperatures), classes]; each row sums to 1
    entropy: np.ndarray  # [len(temperatures)] nats
    true_index: int | None  # the right answer, when known

    def to_html(self) -> str:
        head = "".join(f"<th>{html.escape(x)}</th>" for x in self.labels)
        rows = "".join(
            f"<tr><td>T = {t:g}</td>" + "".join(f"<td>{p:.3f}</td>" for p in row) + f"<td>{h:.2f}</td></tr>"
            for t, row, h in zip(self.temperatures, self.probs, self.entropy)
        )
        return f"<table><tr><th></th>{head}<th>entropy (nats)</th></tr>{rows}</table>"


def _logits(logits: Tensor | Sequence[float], labels: Sequence[str]) -> Tensor:
    z = torch.as_tensor(logits, dtype=torch.float64)
    if z.dim() != 1:
        raise ValueError(f"give one row of logits ([classes]), got shape {tuple(z.shape)}")
    if len(labels) != z.numel():
        raise ValueError(f"{len(labels)} labels for {z.numel()} logits")
    return z


def softened_view(
    logits: Tensor | Sequence[float],
    labels: Sequence[str],
    temperatures: Sequence[float] = (1.0, 2.0, 5.0, 10.0),
    *,
    true_index: int | None = None,
) -> SoftenedView:
    """``logits`` (one row) softened at each of ``temperatures``, with the entropy of each."""
    z = _logits(logits, labels)
    if true_index is not None and not 0 <= true_index < z.numel():
        raise ValueError(f"true_index must lie in [0, {z.numel()}), got {true_index}")
    probs = torch.stack([softened(z, float(t)) for t in temperatures])
    entropy = -(probs * probs.clamp(min=1e-300).log()).sum(-1)
    return SoftenedView(
        list(labels), [float(t) for t in temperatures], probs.numpy(), entropy.numpy(), true_index
    )


def dark_knowledge(
    logits: Tensor | Sequence[float],
    labels: Sequence[str],
    true_index: int,
    *,
    temperature: float = 1.0,
    k: int = 3,
) -> list[tuple[str, float]]:
    """The teacher's ``k`` most likely *wrong* answers, most likely first, with their probability
    at ``temperature`` (the order is the same at every temperature)."""
    z = _logits(logits, labels)
    if not 0 <= true_index < z.numel():
        raise ValueError(f"true_index must lie in [0, {z.numel()}), got {true_index}")
    p = softened(z, temperature)
    order = [int(i) for i in torch.argsort(p, descending=True, stable=True) if int(i) != true_index]
    return [(labels[i], float(p[i])) for i in order[:k]]


def plot_softened(view: SoftenedView, ax=None):
    """Bars of each temperature's distribution (the right answer outlined); returns the figure."""
    import matplotlib.pyplot as plt

    fig, ax = (ax.figure, ax) if ax is not None else plt.subplots(figsize=(7, 3.2))
    n, c = view.probs.shape
    width = 0.8 / n
    x = np.arange(c)
    for i, (t, row) in enumerate(zip(view.temperatures, view.probs)):
        bars = ax.bar(x + i * width - 0.4 + width / 2, row, width, label=f"T = {t:g}")
        if view.true_index is not None:
            bars[view.true_index].set_edgecolor("black")
            bars[view.true_index].set_linewidth(1.2)
    ax.set_xticks(x, view.labels, rotation=45, ha="right", fontsize=8)
    ax.set_ylabel("probability")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


class TemperatureWidget:
    """A slider for :math:`T` over one row of logits: the softened distribution, its entropy and
    the teacher's wrong answers in order. The logic is :meth:`set_temperature` (tested without
    a browser); :meth:`widget` shows it in a widget that computes the same in the page."""

    def __init__(
        self, logits, labels: Sequence[str], *, true_index: int | None = None, temperature: float = 1.0
    ):
        self.logits = _logits(logits, labels)
        self.labels = list(labels)
        self.true_index = true_index
        self.view = self.set_temperature(temperature)

    def set_temperature(self, temperature: float) -> SoftenedView:
        self.temperature = float(temperature)
        self.view = softened_view(self.logits, self.labels, [self.temperature], true_index=self.true_index)
        return self.view

    def summary(self) -> str:
        p = self.view.probs[0]
        top = self.labels[int(p.argmax())]
        text = f"T = {self.temperature:g}: entropy {self.view.entropy[0]:.2f} nats, top answer {top}"
        if self.true_index is not None:
            wrong = dark_knowledge(self.logits, self.labels, self.true_index, temperature=self.temperature)
            text += "; wrong answers in the teacher's order: " + ", ".join(f"{w} {q:.3f}" for w, q in wrong)
        return text

    def front_data(self) -> dict:
        """What the page computes from: the logits, the labels, the right answer, the starting T."""
        return {
            "labels": self.labels,
            "logits": [float(x) for x in self.logits],
            "true_index": self.true_index,
            "temperature": self.temperature,
        }

    def widget(self):
        """A log-scale slider and a box for :math:`T` over the table and the summary: an
        anywidget that computes :meth:`set_temperature`'s view in the page (no kernel needed)."""
        from .front import live_widget

        return live_widget("temperature", self.front_data())
