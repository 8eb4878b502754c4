r"""XLNet's permutation widget: pick a factorisation order, see what each stream may attend to.

XLNet (chapter 6) predicts the tokens of a sentence in a random order :math:`z` without
moving them: only the attention masks follow the order. For a position :math:`i` that comes
at step :math:`\rho(i)` of the order,

* its **content stream** :math:`h_i` may attend to every :math:`j` with
  :math:`\rho(j) \le \rho(i)`: the positions before it in the order, **and itself**;
* its **query stream** :math:`g_i`, the one that predicts :math:`x_i`, may attend to the
  :math:`j` with :math:`\rho(j) < \rho(i)`, **never itself**;

and the sentence's probability under the order is the product of the steps'
conditionals :math:`\prod_t p(x_{z_t} \mid x_{z_{<t}})`. With the paper's 4-token order
3 -> 2 -> 4 -> 1, token 3 is predicted from nothing, 2 from {3}, 4 from {3, 2}, 1 from
{3, 2, 4}.

Nothing here re-derives a mask: :func:`permutation_view` takes ``perm_mask`` from
:func:`~course_lib.objectives.permutation.permutation_masks` and turns it into the two grids
with :meth:`XLNetModel.attention_masks <course_lib.models.xlnet.XLNetModel.attention_masks>`,
the function the model itself runs; the contexts come from
:func:`~course_lib.objectives.permutation.order_context`. :func:`factorised_probabilities`
makes the one model call that :func:`~course_lib.objectives.permutation.factorised_log_prob`
makes, and keeps each step's term instead of only their sum.

Positions are 0-based in code, as everywhere in the library; the widget's text box, its
axes and its table count from 1, as the paper does (``one_based=True`` in
:func:`permutation_view` and :func:`check_order` reads an order that way).
:func:`plot_permutation_masks` draws a view as a figure; :class:`PermutationWidget` shows it
in a widget whose masks and table are computed in the page (``js/permutation.js``, the same
rules as :func:`permutation_view`, checked against it in a browser test), so it responds in
the HTML book without a kernel.
"""

from __future__ import annotations

import html
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from ..models.xlnet import XLNetModel
from ..objectives.permutation import (
    factorised_step_log_probs,
    order_context,
    order_ranks,
    permutation_masks,
    sample_orders,
)
from ..train import evaluating

__all__ = [
    "PAPER_ORDER",
    "PermutationView",
    "FactorisedProbabilities",
    "check_order",
    "from_one_based",
    "parse_order",
    "permutation_view",
    "factorised_probabilities",
    "plot_permutation_masks",
    "PermutationWidget",
    "permutation_widget",
]

PAPER_ORDER = (3, 2, 4, 1)  # the XLNet paper's example order over 4 tokens, 1-based (Figure 1)

# the cells of the plotted grids
HIDDEN, VISIBLE, ITSELF, NO_QUERY = 0, 1, 2, 3
_CELL_COLOURS = {HIDDEN: "#f2f2f2", VISIBLE: "#3b7dd8", ITSELF: "#f0a030", NO_QUERY: "#c8c8c8"}
_CELL_NAMES = {
    HIDDEN: "hidden",
    VISIBLE: "may attend (before it in the order)",
    ITSELF: "itself (content stream only)",
    NO_QUERY: "no query stream (not predicted)",
}


# ---------------------------------------------------------------------------------------
# Orders
# ---------------------------------------------------------------------------------------


def _positions(items: list[int]) -> str:
    return ", ".join(str(p) for p in items)


def check_order(order: Sequence[int] | Tensor, n: int, *, one_based: bool = False) -> list[int]:
    """``order`` as a list of 0-based positions, after checking that it lists each of the ``n``
    positions exactly once.

    ``one_based=True`` reads the order as the paper writes it (3 -> 2 -> 4 -> 1 over 4 tokens);
    the error messages then count from 1 as well. Raises ``ValueError`` naming what is wrong:
    positions out of range, repeated or left out.
    """
    if n < 1:
        raise ValueError("a factorisation order needs at least one token")
    items = order.tolist() if isinstance(order, Tensor) else list(order)
    base = 1 if one_based else 0
    counting = "counted from 1" if one_based else "counted from 0"
    for p in items:
        if isinstance(p, bool) or not isinstance(p, (int, np.integer)):
            raise ValueError(f"an order lists positions (whole numbers), got {p!r}")
    items = [int(p) for p in items]
    if not items:
        raise ValueError(f"the order is empty: list each of the {n} positions once")
    outside = sorted({p for p in items if not base <= p < n + base})
    if outside:
        raise ValueError(
            f"position{'s' if len(outside) > 1 else ''} {_positions(outside)} out of range: "
            f"a {n}-token sentence has positions {base}..{n - 1 + base} ({counting})"
        )
    problems = []
    repeated = sorted({p for p in items if items.count(p) > 1})
    if repeated:
        many = len(repeated) > 1
        problems.append(
            f"position{'s' if many else ''} {_positions(repeated)} appear{'' if many else 's'} more than once"
        )
    missing = sorted(set(range(base, n + base)) - set(items))
    if missing:
        problems.append(
            f"the order leaves out position{'s' if len(missing) > 1 else ''} {_positions(missing)}"
        )
    if problems:
        raise ValueError(f"{'; '.join(problems)}: an order lists each of the {n} positions once ({counting})")
    return [p - base for p in items]


def from_one_based(order: Sequence[int] | Tensor) -> list[int]:
    """The paper's 1-based order (e.g. :data:`PAPER_ORDER`, 3 -> 2 -> 4 -> 1) as the library's
    0-based positions ([2, 1, 3, 0]); checked as :func:`check_order` checks it."""
    items = order.tolist() if isinstance(order, Tensor) else list(order)
    return check_order(items, len(items), one_based=True)


def parse_order(text: str, n: int, *, one_based: bool = True) -> list[int]:
    """An order typed as in the widget's text box ("3 2 4 1", "3, 2, 4, 1" or "3 -> 2 -> 4 -> 1";
    1-based unless ``one_based=False``) as 0-based positions; ``ValueError`` if it is not one."""
    parts = [p for p in re.split(r"[\s,;]+|->|→", text.strip()) if p]
    if not parts:
        raise ValueError(f"type an order, e.g. {' '.join(str(i + 1) for i in range(n))}")
    items = []
    for p in parts:
        try:
            items.append(int(p))
        except ValueError:
            raise ValueError(f"{p!r} is not a position: type whole numbers, e.g. 3 2 4 1") from None
    return check_order(items, n, one_based=one_based)


# ---------------------------------------------------------------------------------------
# What each stream sees
# ---------------------------------------------------------------------------------------


@dataclass
class PermutationView:
    """What :func:`permutation_view` returns for one sentence and one order (0-based throughout)."""

    tokens: list[str]
    order: list[int]  # order[t]: the position predicted at step t
    content: np.ndarray  # bool [T, T]: content[i, j], h_i may attend to x_j (itself included)
    query: np.ndarray  # bool [T, T]: query[i, j], g_i may attend to x_j; all False where i is no target
    context: list[list[int] | None]  # per position: the positions it is predicted from, in the order
    step: list[int]  # per position: the step at which it comes
    is_target: list[bool]  # per position: predicted (every position without n_predict)
    n_predict: int | None = None

    @property
    def n(self) -> int:
        return len(self.tokens)

    def label(self, i: int) -> str:
        """Position ``i`` as the widget shows it: counted from 1, with its token."""
        return f"{i + 1} {self.tokens[i]}"

    def _rows(self, probs: FactorisedProbabilities | None) -> list[tuple[int, str, str, str]]:
        if probs is not None and list(probs.order) != list(self.order):
            raise ValueError(f"the probabilities are for the order {probs.order}, the view for {self.order}")
        by_position = probs.by_position() if probs is not None else {}
        rows = []
        for t, i in enumerate(self.order):
            ctx = self.context[i]
            if ctx is None:
                seen, p = "(not predicted: context for the targets)", ""
            else:
                seen = " ".join(self.tokens[j] for j in ctx) if ctx else "(nothing)"
                p = f"{by_position[i]:.4f}" if i in by_position else ""
            rows.append((t + 1, self.label(i), seen, p))
        return rows

    def _summary(self, probs: FactorisedProbabilities | None) -> str:
        z = " -> ".join(str(i + 1) for i in self.order)
        text = f"order {z} (positions counted from 1)"
        if probs is not None:
            text += f"; p(sentence) under this order = {probs.product:.4g} (log {probs.log_prob:.4f})"
        return text

    def to_text(self, probs: FactorisedProbabilities | None = None) -> str:
        """A plain-text table, one row per step: the position predicted, what it is predicted
        from and (with ``probs`` from :func:`factorised_probabilities`) its probability."""
        rows = self._rows(probs)
        width = max(len(r[1]) for r in rows)
        column = f"  {'probability':>11}" if probs is not None else ""
        lines = [f"{'step':>4}  {'predicts':<{width}}{column}  from"]
        for t, who, seen, p in rows:
            cell = f"  {p:>11}" if probs is not None else ""
            lines.append(f"{t:>4}  {who:<{width}}{cell}  {seen}")
        lines.append(self._summary(probs))
        return "\n".join(lines)

    def to_html(self, probs: FactorisedProbabilities | None = None) -> str:
        """The table of :meth:`to_text` as HTML (what the widget shows)."""
        head = "<tr><th>step</th><th>predicts</th><th>from</th>" + (
            "<th>probability</th></tr>" if probs is not None else "</tr>"
        )
        body = []
        for t, who, seen, p in self._rows(probs):
            cells = [str(t), html.escape(who), html.escape(seen)] + ([p] if probs is not None else [])
            body.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
        return (
            f"<table style='font-family:monospace;font-size:12px'>{head}{''.join(body)}</table>"
            f"<p>{html.escape(self._summary(probs))}</p>"
        )


def _tokens(tokens: Sequence[str] | str) -> list[str]:
    items = tokens.split() if isinstance(tokens, str) else [str(t) for t in tokens]
    if not items:
        raise ValueError("give the sentence's tokens: the list is empty")
    return items


def permutation_view(
    tokens: Sequence[str] | str,
    order: Sequence[int] | Tensor,
    *,
    n_predict: int | None = None,
    one_based: bool = False,
) -> PermutationView:
    """What each position's two streams may attend to under one factorisation order.

    Args:
        tokens: the sentence's tokens (a string is split on white space).
        order: the positions in the order they are predicted, each once: 0-based, or counted
            from 1 with ``one_based=True`` (``permutation_view("a b c d", PAPER_ORDER,
            one_based=True)``).
        n_predict: partial prediction: only the last ``n_predict`` positions of the order are
            targets (the others are context that sees itself and the other context tokens);
            default every position.

    The grids are the model's own: ``perm_mask`` from :func:`permutation_masks`, then
    :meth:`XLNetModel.attention_masks`. A non-target has no query stream (the model runs
    ``g`` only at the targets of ``target_mapping``), so its ``query`` row is all False and
    its ``context`` None. Raises ``ValueError`` when ``order`` is not an order of the tokens.
    """
    toks = _tokens(tokens)
    n = len(toks)
    positions = check_order(order, n, one_based=one_based)
    o = torch.tensor([positions])
    masks = permutation_masks(o, n_predict=n_predict)
    content, query = XLNetModel.attention_masks(torch.zeros_like(o), 0, None, None, masks.perm_mask)
    is_target = masks.is_target[0]
    content = content[0, 0].numpy().copy()
    query = (query[0, 0] & is_target[:, None]).numpy().copy()  # the query stream runs at targets only
    targets = is_target.tolist()
    return PermutationView(
        tokens=toks,
        order=positions,
        content=content,
        query=query,
        context=[order_context(positions, i) if targets[i] else None for i in range(n)],
        step=order_ranks(o)[0].tolist(),
        is_target=targets,
        n_predict=n_predict,
    )


# ---------------------------------------------------------------------------------------
# Probabilities under an order
# ---------------------------------------------------------------------------------------


@dataclass
class FactorisedProbabilities:
    r"""Each step's :math:`\log p(x_{z_t} \mid x_{z_{<t}})` for one sequence and one order."""

    order: list[int]  # 0-based positions, in the order they are predicted
    log_probs: Tensor  # [T] float: the log-probability of step t's token, in the order's steps

    @property
    def probabilities(self) -> list[float]:
        """Each step's probability, in the order's steps."""
        return self.log_probs.exp().tolist()

    @property
    def log_prob(self) -> float:
        """The sequence's log-probability under the order: the sum of the steps' terms."""
        return float(self.log_probs.sum())

    @property
    def product(self) -> float:
        """The sequence's probability under the order: the product of the steps' terms."""
        return math.exp(self.log_prob)

    def by_position(self) -> dict[int, float]:
        """``{position: probability}`` (0-based positions)."""
        return dict(zip(self.order, self.probabilities))


@torch.no_grad()
def factorised_probabilities(
    model: Any,
    ids: Sequence[int] | Tensor,
    order: Sequence[int] | Tensor,
    *,
    one_based: bool = False,
) -> FactorisedProbabilities:
    r"""Each step's :math:`p(x_{z_t} \mid x_{z_{<t}})` of a sentence under ``order``, in one call.

    ``model``: an :class:`~course_lib.models.xlnet.XLNetLMHeadModel`; ``ids``: the sentence's
    ``[T]`` token ids; ``order`` as in :func:`permutation_view`. The steps are
    :func:`~course_lib.objectives.permutation.factorised_step_log_probs` (every token a target),
    so their log terms sum to :func:`~course_lib.objectives.permutation.factorised_log_prob`;
    here the model runs in eval mode without gradients (its mode is restored). With Hugging
    Face's XLNet the first step attends to every token (see :mod:`course_lib.models.xlnet`)
    and is not a proper probability.
    """
    x = torch.as_tensor(ids).long()
    if x.dim() != 1:
        raise ValueError(f"ids must be one sentence's [T] token ids, got shape {tuple(x.shape)}")
    positions = check_order(order, x.numel(), one_based=one_based)
    device = next(model.parameters()).device
    with evaluating(model):
        logp = factorised_step_log_probs(model, x.to(device), torch.tensor(positions, device=device))
    return FactorisedProbabilities(order=positions, log_probs=logp.cpu())


# ---------------------------------------------------------------------------------------
# Plot
# ---------------------------------------------------------------------------------------


def _codes(view: PermutationView) -> tuple[np.ndarray, np.ndarray]:
    """The two grids as cell codes (HIDDEN, VISIBLE, ITSELF, NO_QUERY)."""
    eye = np.eye(view.n, dtype=bool)
    content = np.where(view.content, VISIBLE, HIDDEN)
    content[eye & view.content] = ITSELF
    query = np.where(view.query, VISIBLE, HIDDEN)
    query[~np.asarray(view.is_target, dtype=bool)] = NO_QUERY
    return content, query


def plot_permutation_masks(view: PermutationView, ax: Any = None, *, sort_by_order: bool = False):
    """The content-stream and query-stream grids of a :class:`PermutationView`, side by side
    with one legend; returns the figure.

    Rows are the attending positions, columns the tokens attended to, both labelled with the
    position (from 1) and its token. ``sort_by_order=True`` puts rows and columns in the
    order's sequence: the query stream is then the strictly lower triangle and the content
    stream the lower triangle with its diagonal. ``ax``: two axes to draw into (default: a new
    figure). Needs no kernel, so the built book shows it as a plain image.
    """
    import matplotlib.pyplot as plt
    from matplotlib.colors import ListedColormap
    from matplotlib.patches import Patch

    if ax is None:
        side = 0.45 * view.n + 1.6
        fig, axes = plt.subplots(1, 2, figsize=(2 * side + 0.8, side + 1.2))
    else:
        axes = list(ax)
        if len(axes) != 2:
            raise ValueError(f"plot_permutation_masks draws two grids: give two axes, got {len(axes)}")
        fig = axes[0].figure
    idx = list(view.order) if sort_by_order else list(range(view.n))
    labels = [view.label(i) for i in idx]
    cmap = ListedColormap([_CELL_COLOURS[c] for c in (HIDDEN, VISIBLE, ITSELF, NO_QUERY)])
    content, query = _codes(view)
    titles = ("content stream $h_i$: sees itself", "query stream $g_i$: predicts $x_i$, never sees it")
    for a, grid, title in zip(axes, (content, query), titles):
        a.imshow(grid[np.ix_(idx, idx)], cmap=cmap, vmin=-0.5, vmax=3.5, aspect="equal")
        a.set_xticks(range(view.n), labels, rotation=90)
        a.set_yticks(range(view.n), labels)
        a.set_xticks(np.arange(-0.5, view.n), minor=True)
        a.set_yticks(np.arange(-0.5, view.n), minor=True)
        a.grid(which="minor", color="white", linewidth=1.5)
        a.tick_params(which="minor", length=0)
        a.set_xlabel("attends to (j)")
        a.set_ylabel("position (i)")
        a.set_title(title, fontsize=10)
    shown = {int(c) for c in np.unique(np.concatenate([content.ravel(), query.ravel()]))} | {HIDDEN, VISIBLE}
    names = dict(_CELL_NAMES)
    if not all(view.is_target):  # partial prediction: the context tokens also see later context tokens
        names[VISIBLE] = "may attend"
    handles = [Patch(facecolor=_CELL_COLOURS[c], edgecolor="#999", label=names[c]) for c in sorted(shown)]
    z = " → ".join(str(i + 1) for i in view.order)
    extra = "" if view.n_predict is None else f", last {view.n_predict} predicted"
    fig.suptitle(f"order {z}{extra}" + (" (rows and columns in the order)" if sort_by_order else ""))
    fig.legend(handles=handles, loc="lower center", ncol=len(handles), fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    return fig


# ---------------------------------------------------------------------------------------
# Widget
# ---------------------------------------------------------------------------------------


class PermutationWidget:
    """Pick or sample a factorisation order of a sentence and see both streams' masks.

    Args:
        tokens: the sentence's tokens (a string is split on white space).
        model, ids: an :class:`~course_lib.models.xlnet.XLNetLMHeadModel` and the sentence's
            token ids (one per token); with them the table shows each step's probability.
        order: the starting order: a string as typed in the widget ("3 2 4 1", counted from 1)
            or a sequence of 0-based positions; default: one sampled with ``seed``.
        seed: the seed of the first sampled order; each "sample" moves to the next seed.

    ``set_order`` (an order as typed or as positions), ``sample`` and ``left_to_right``
    return the new :class:`PermutationView` (also kept in ``.last``, the probabilities in
    ``.probs``); a bad order raises ``ValueError`` and keeps the previous one. ``widget()``
    shows a text box and buttons over the two grids and the table; a bad order there shows
    the message instead.
    """

    def __init__(
        self,
        tokens: Sequence[str] | str,
        *,
        model: Any = None,
        ids: Sequence[int] | Tensor | None = None,
        order: str | Sequence[int] | Tensor | None = None,
        seed: int = 0,
    ):
        self.tokens = _tokens(tokens)
        if (model is None) != (ids is None):
            raise ValueError("give the model and the sentence's ids together (or neither)")
        if ids is not None:
            ids = torch.as_tensor(ids).long()
            if tuple(ids.shape) != (len(self.tokens),):
                raise ValueError(
                    f"give one id per token: {len(self.tokens)} tokens, ids of shape {tuple(ids.shape)}"
                )
        self.model = model
        self.ids = ids
        self.seed = int(seed)
        self.last: PermutationView | None = None
        self.probs: FactorisedProbabilities | None = None
        self.draws = 0
        if order is None:
            self._show(self._sampled())
        else:
            self.set_order(order)

    @property
    def n(self) -> int:
        return len(self.tokens)

    def _sampled(self) -> list[int]:
        return sample_orders([self.n], self.seed)[0].tolist()

    def _show(self, positions: list[int]) -> PermutationView:
        view = permutation_view(self.tokens, positions)
        probs = None if self.model is None else factorised_probabilities(self.model, self.ids, view.order)
        self.last, self.probs = view, probs
        self.draws += 1
        return view

    def set_order(self, order: str | Sequence[int] | Tensor) -> PermutationView:
        """A given order: a string as typed (counted from 1) or 0-based positions."""
        if isinstance(order, str):
            positions = parse_order(order, self.n)
        else:
            positions = check_order(order, self.n)
        return self._show(positions)

    def sample(self) -> PermutationView:
        """A new uniformly random order (:func:`sample_orders` with the next seed)."""
        self.seed += 1
        return self._show(self._sampled())

    def left_to_right(self) -> PermutationView:
        """The order 1 -> 2 -> ... -> T: a left-to-right language model's masks."""
        return self._show(list(range(self.n)))

    @property
    def order_text(self) -> str:
        """The current order as the text box shows it (counted from 1)."""
        return " ".join(str(i + 1) for i in self.last.order)

    def figure(self, *, sort_by_order: bool = False):
        """The two grids of the current order (:func:`plot_permutation_masks`)."""
        return plot_permutation_masks(self.last, sort_by_order=sort_by_order)

    def table_html(self) -> str:
        return self.last.to_html(self.probs)

    def front_data(self, n_samples: int = 16) -> dict:
        """What the page's front end needs (JSON): the tokens, the current order, the next
        ``n_samples`` sampled orders (what "sample" shows, seed after seed) and, with a model,
        each step's log-probability for those orders and left to right (keyed by the 0-based
        order joined with spaces). The masks and the table are computed in the page."""
        samples = [sample_orders([self.n], self.seed + k)[0].tolist() for k in range(1, n_samples + 1)]
        data = {"tokens": self.tokens, "order": list(self.last.order), "samples": samples}
        data["has_model"] = self.model is not None
        data["log_probs"] = {}
        if self.model is not None:
            for order in [list(self.last.order), list(range(self.n)), *samples]:
                key = " ".join(map(str, order))
                if key not in data["log_probs"]:
                    logp = factorised_probabilities(self.model, self.ids, order).log_probs
                    data["log_probs"][key] = [float(x) for x in logp]
        return data

    def _answer(self, request: dict) -> dict | None:
        """The kernel's answer to the page asking for an order it does not hold."""
        if self.model is None:
            return None
        order = check_order(request.get("order", []), self.n)
        return {
            "log_probs": [float(x) for x in factorised_probabilities(self.model, self.ids, order).log_probs]
        }

    def widget(self, n_samples: int = 16):
        """Order text box, "sample" and "left to right" buttons and a "sort by the order" box
        over the two grids and the table: an anywidget that stays live in the HTML book
        (:mod:`course_lib.widgets.front`); with a kernel it also computes the probabilities
        of orders that were not precomputed."""
        from .front import live_widget

        return live_widget("permutation", self.front_data(n_samples), self._answer)


def permutation_widget(
    tokens: Sequence[str] | str,
    *,
    model: Any = None,
    ids: Sequence[int] | Tensor | None = None,
    order: str | Sequence[int] | Tensor | None = None,
    seed: int = 0,
):
    """The widget of a :class:`PermutationWidget`:
    ``permutation_widget("New York is a city".split(), order="3 2 4 1 5")``."""
    return PermutationWidget(tokens, model=model, ids=ids, order=order, seed=seed).widget()
