"""Plots shared by the chapters: attention heatmaps, grids of heads and parse trees as arcs."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

__all__ = ["plot_attention", "plot_heads", "plot_bilm", "plot_tree_arcs", "to_numpy", "figure_png"]


def to_numpy(x) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        return x.detach().float().cpu().numpy()
    return np.asarray(x)


def plot_attention(
    weights,
    x_labels: Sequence[str] | None = None,
    y_labels: Sequence[str] | None = None,
    *,
    ax=None,
    title: str | None = None,
    xlabel: str = "key (attended to)",
    ylabel: str = "query (attending)",
    annotate: bool = False,
    cmap: str = "Blues",
    vmax: float | None = 1.0,
):
    """Heatmap of one ``[query, key]`` attention matrix; rows are queries."""
    import matplotlib.pyplot as plt

    w = to_numpy(weights)
    if w.ndim != 2:
        raise ValueError(f"plot_attention needs a [query, key] matrix, got shape {w.shape}")
    if ax is None:
        size = (0.35 * w.shape[1] + 1.6, 0.35 * w.shape[0] + 1.2)
        _, ax = plt.subplots(figsize=(max(size[0], 3), max(size[1], 2.5)))
    im = ax.imshow(w, cmap=cmap, vmin=0.0, vmax=vmax, aspect="auto")
    if x_labels is not None:
        ax.set_xticks(
            range(len(x_labels)), list(x_labels), rotation=90 if max(map(len, x_labels), default=0) > 3 else 0
        )
    if y_labels is not None:
        ax.set_yticks(range(len(y_labels)), list(y_labels))
    if annotate:
        for i in range(w.shape[0]):
            for j in range(w.shape[1]):
                ax.text(
                    j,
                    i,
                    f"{w[i, j]:.2f}",
                    ha="center",
                    va="center",
                    fontsize=7,
                    color="white" if w[i, j] > 0.6 else "black",
                )
    ax.set_xlabel(xlabel, fontsize=8)
    ax.set_ylabel(ylabel, fontsize=8)
    if title:
        ax.set_title(title, fontsize=9)
    ax.figure.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
    return ax


def plot_heads(
    weights,
    x_labels: Sequence[str] | None = None,
    y_labels: Sequence[str] | None = None,
    *,
    title: str | None = None,
    ncols: int | None = None,
):
    """One heatmap per head of a ``[heads, query, key]`` tensor, side by side."""
    import matplotlib.pyplot as plt

    w = to_numpy(weights)
    if w.ndim != 3:
        raise ValueError(f"plot_heads needs [heads, query, key], got shape {w.shape}")
    h = w.shape[0]
    ncols = ncols or h
    nrows = -(-h // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(2.6 * ncols, 2.6 * nrows), squeeze=False)
    for i, ax in enumerate(axes.flat):
        if i >= h:
            ax.axis("off")
            continue
        ax.imshow(w[i], cmap="Blues", vmin=0, vmax=1, aspect="auto")
        ax.set_title(f"head {i}", fontsize=9)
        if x_labels is not None:
            ax.set_xticks(range(len(x_labels)), list(x_labels), fontsize=7)
        else:
            ax.set_xticks([])
        if y_labels is not None and i % ncols == 0:
            ax.set_yticks(range(len(y_labels)), list(y_labels), fontsize=7)
        else:
            ax.set_yticks([])
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


def figure_png(fig, *, dpi: int = 100):
    """A matplotlib figure as an ``IPython.display.Image`` (PNG bytes).

    Widgets display this rather than the figure itself: the PNG shows the same in
    JupyterLab, Colab, nbclient and the widget snapshot of the built book, whatever
    matplotlib backend the kernel uses.
    """
    import io

    from IPython.display import Image

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight")
    return Image(data=buf.getvalue(), format="png")


def plot_bilm(words: Sequence[str] = ("<S>", "traffic", "jam", "</S>"), *, n_layers: int = 2, ax=None):
    """ELMo's biLM as the source draws it: token vectors from the character CNN at the bottom,
    a forward LSTM stack (arrows left to right) and a separate backward stack (right to left)
    above them, and the scalar mix of every layer on top of each word. Returns the axes."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(1.9 * len(words) + 1.5, 4.6))
    step, side = 1.9, 0.35  # distance between words; offset of the two stacks from a word's centre
    box = dict(boxstyle="round,pad=0.3", lw=1)
    arrow = dict(arrowstyle="->", lw=1, color="0.35")
    colours = {"fwd": "#3d85c6", "bwd": "#cc0000", "mix": "#38761d"}
    fills = {"token": "#eeeeee", "fwd": "#cfe2f3", "bwd": "#f4cccc", "mix": "#d9ead3"}
    height = {"fwd": lambda layer: 2 * layer - 1, "bwd": lambda layer: 2 * layer - 0.45}
    top = 2 * n_layers + 0.7

    def label(x, y, text, fill, size=9):
        ax.text(x, y, text, ha="center", va="center", fontsize=size, bbox={**box, "fc": fill})

    def link(start, end, colour="0.35"):
        ax.annotate("", end, start, arrowprops={**arrow, "color": colour})

    for i, word in enumerate(words):
        x = step * i
        ax.text(x, -0.9, word, ha="center", va="center", fontsize=11, fontweight="bold")
        label(x, 0, "char CNN\n$x_k$", fills["token"], size=8)
        link((x, -0.7), (x, -0.3))
        for direction, dx, hat in (("fwd", -side, "overrightarrow"), ("bwd", side, "overleftarrow")):
            below = (x, 0.3)
            for layer in range(1, n_layers + 1):
                y = height[direction](layer)
                label(x + dx, y, f"$\\{hat}{{h}}_{{k,{layer}}}$", fills[direction])
                link(below, (x + dx, y - 0.25))
                if i + 1 < len(words):  # the recurrence: to the next word, or from it
                    if direction == "fwd":
                        link((x - 0.05, y), (x + step - 0.65, y), colours[direction])
                    else:
                        link((x + step + 0.3, y), (x + 0.65, y), colours[direction])
                below = (x + dx, y + 0.3)
        label(x, top, "$\\gamma \\sum_j s_j h_{k,j}$", fills["mix"])
        link((x, height["bwd"](n_layers) + 0.3), (x, top - 0.3))
    margins = [
        (height["fwd"](1), "forward\nLSTMs", "fwd"),
        (height["bwd"](1) + 0.6, "backward\nLSTMs", "bwd"),
        (top, "scalar\nmix", "mix"),
    ]
    for y, text, key in margins:
        ax.text(-1.5, y, text, ha="center", va="center", fontsize=9, color=colours[key])
    ax.set(xlim=(-2.3, step * (len(words) - 1) + 0.9), ylim=(-1.3, top + 0.6))
    ax.axis("off")
    return ax


def plot_tree_arcs(
    words: Sequence[str],
    gold_edges,
    predicted_edges=None,
    *,
    ax=None,
    title: str | None = None,
):
    """A sentence's tree drawn as arcs between its words, in the style of Hewitt and Manning's
    figures: the gold edges above the words (black), the predicted edges (e.g. the minimum
    spanning tree of a probe's distances) below them, solid blue where the edge is also gold
    and dashed red where it is not. Edges are ``(i, j)`` word-index pairs. Returns the axes."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Arc

    n = len(words)
    gold = {(min(i, j), max(i, j)) for i, j in gold_edges}
    pred = None if predicted_edges is None else {(min(i, j), max(i, j)) for i, j in predicted_edges}
    for i, j in gold | (pred or set()):
        if not (0 <= i < n and 0 <= j < n) or i == j:
            raise ValueError(f"edge {(i, j)} does not join two of the {n} words")
    if ax is None:
        _, ax = plt.subplots(figsize=(max(6.0, 0.75 * n), 3.2))
    for k, w in enumerate(words):
        ax.text(k, 0, w, ha="center", va="center", fontsize=9)
    top = 1.0

    def arc(i: int, j: int, up: bool, **kw) -> None:
        nonlocal top
        height = 0.6 + 0.35 * (j - i)
        top = max(top, height / 2 + 0.3)
        y = 0.18 if up else -0.18
        ax.add_patch(
            Arc(((i + j) / 2, y), j - i, height, theta1=0 if up else 180, theta2=180 if up else 360, **kw)
        )

    for i, j in sorted(gold):
        arc(i, j, True, color="black", lw=1.2)
    for i, j in sorted(pred or ()):
        good = (i, j) in gold
        arc(i, j, False, color="tab:blue" if good else "tab:red", lw=1.2, ls="-" if good else "--")
    ax.set_xlim(-0.8, n - 0.2)
    ax.set_ylim(-top if pred is not None else -0.5, top)
    ax.axis("off")
    if title:
        ax.set_title(title, fontsize=10)
    return ax
