r"""XLNet's permutation language modelling objective: factorisation orders, masks, targets, loss.

XLNet (Yang et al., 2019, §2.2-2.3) maximises, over random factorisation orders :math:`z` of
a sequence's :math:`T` real tokens,

.. math::

    \mathbb{E}_{z}\Big[\sum_{t=c+1}^{T} \log p_\theta\big(x_{z_t} \mid x_{z_{<t}}\big)\Big].

The tokens are **never reordered**: they keep their places and positions, and only the
attention masks follow the order. A factorisation order is stored here as a long tensor
``order`` ``[batch, seq_len]``: ``order[b, t]`` is the position predicted at step ``t`` of row
``b``, and ``-1`` once the row's real tokens are used up; positions that never appear in the
order (padding, wherever it sits) are never seen by anyone and never predicted.

**Masks** (:func:`permutation_masks`). With :math:`\rho(i)` the step at which position
:math:`i` comes, XLNet's ``perm_mask`` (``[batch, T, T]``, ``perm_mask[b, i, j] = 1``: position
``i`` may **not** attend to ``j``) is, for full prediction,

.. math::

    \mathrm{perm\_mask}_{ij} = [\rho(j) \ge \rho(i)],

so the **query stream** of ``i`` (the one that predicts :math:`x_i`) sees exactly the tokens
before it in the order, never its own. The model builds the **content stream**'s mask from
the same ``perm_mask`` with its diagonal cleared: :math:`h_i` sees what :math:`g_i` sees and
itself (Hugging Face: ``non_tgt_mask = -eye``; :meth:`XLNetModel.attention_masks
<course_lib.models.xlnet.XLNetModel.attention_masks>` here), which is why the diagonal must be
*set* for a target: a zero diagonal would let the query stream see the token it predicts.

**Partial prediction** (§2.3). Predicting the first tokens of an order is hard (little
context) and slows training, so only the last :math:`T - c` tokens of each order are targets:
with ``K``, :math:`\lfloor T/K \rfloor` of them (at least one), e.g. 85 of 512 with
:math:`K = 6`, XLNet-large's ``num_predict``; or a fixed ``n_predict`` per row. As in XLNet's
code (``_local_perm``: the non-targets get the smallest index), the :math:`c` non-targets
attend bidirectionally among themselves (and to themselves) and never to a target; a target
sees every non-target and the targets before it in the order:

.. math::

    \mathrm{visible}_{ij} = [\rho(j) < \rho(i)] \;\lor\; [\rho(i) < c \,\land\, \rho(j) < c].

``target_mapping`` (``[batch, P, T]``, one-hot) lists each row's targets in the order of the
factorisation; rows with fewer targets than the widest (``P``) get all-zero rows there,
``target_mask`` 0 and label ``-100`` (XLNet's padding of ``num_predict``).

**Span targets** (:func:`sample_spans`, ``targets="span"`` in :func:`plm_batch` and
:func:`plm_loss`). The last :math:`1/K` of a random order are scattered tokens: of a two-token
name, one is often a target and the other context, which gives it away. XLNet's pretraining
chose its targets as *spans* instead, like SpanBERT (its paper: a span of :math:`n` tokens
within a context of about :math:`nK` tokens): walking along the row, draw a span
length :math:`n \in \{1, \dots, 5\}` with :math:`p(n) \propto 1/n` (the original
``_sample_mask`` in ``data_utils.py``; at most the targets still missing), give it the next
window of :math:`n\,T/c` tokens (:math:`T` real tokens, :math:`c` targets of the row from
:func:`targets_per_row`: about :math:`nK`) and put it at a uniformly random place inside.
The windows tile the row, so every position can be drawn; the original's windows are
:math:`nK` tokens plus the span from the row's start and single tokens complete the count
(the walk stops at the count, which on a row of a few windows leaves its end without
targets). The rare window that rounding leaves too short at the row's end is replaced by
single tokens drawn uniformly. The order then puts every non-target first and every target
after them, in a random order among themselves (the original's ``_local_perm`` gives the
non-targets the smallest index): the whole span is predicted with none of its tokens in the
context, and the masks are the same as for any order whose last tokens are the targets.

**Loss** (:func:`plm_loss`): the LM head on the query stream at the targets, cross-entropy
over the real targets. :func:`factorised_log_prob` scores a whole sequence under one order
(every token a target, all of them in one call), and :func:`order_context` says, for the
chapter's widget, which positions a prediction is conditioned on.

Not here: XLNet's local permutations (``perm_size``), its two-segment data with memory, and
the reversed rows of ``bi_data`` (the model's ``bi_data`` reads the second half of a batch
backwards: :mod:`course_lib.models.xlnet`). The original finds a span's start at a word's
first piece; here every token may start one.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..models.bert import IGNORE_INDEX
from .masking import as_generator

__all__ = [
    "PermutationMasks",
    "sample_orders",
    "order_ranks",
    "targets_per_row",
    "sample_spans",
    "permutation_masks",
    "plm_batch",
    "plm_loss",
    "order_context",
    "factorised_step_log_probs",
    "factorised_log_prob",
]

# the fields a permutation-LM batch gets from :func:`plm_batch`
PLM_FIELDS = ("perm_mask", "target_mapping", "labels", "target_mask")
# how the targets of an order are chosen (:func:`plm_batch`)
TARGET_CHOICES = ("last", "span")
MAX_SPAN = 5  # the original's max_gram


# ---------------------------------------------------------------------------------------
# Orders
# ---------------------------------------------------------------------------------------


def sample_orders(
    lengths_or_mask: Tensor | Sequence[int],
    generator: Any = None,
    *,
    seq_len: int | None = None,
    last: Tensor | None = None,
) -> Tensor:
    """A uniformly random factorisation order per row over its real tokens.

    Args:
        lengths_or_mask: ``[batch]`` lengths (the first ``lengths[b]`` positions are real) or
            an ``[batch, seq_len]`` attention mask (non-zero = real token, padding anywhere).
        generator: a ``torch.Generator`` (or a seed, see
            :func:`~course_lib.objectives.masking.as_generator`); None draws from torch's
            global generator.
        seq_len: the width with lengths (default: the longest row).
        last: boolean ``[batch, seq_len]``: these real positions come after all the others
            (each part in a uniformly random order), e.g. the targets of :func:`sample_spans`.

    Returns ``order`` ``[batch, seq_len]`` (long): row ``b`` starts with a random permutation
    of its real positions and ends with ``-1`` (one entry per padding position). The input
    is not touched: orders say how to *mask*, never how to reorder tokens.
    """
    x = lengths_or_mask if isinstance(lengths_or_mask, Tensor) else torch.as_tensor(lengths_or_mask)
    device = x.device
    if x.dim() == 1:
        lengths = x.long()
        if bool((lengths < 0).any()):
            raise ValueError(f"lengths must be non-negative, got {lengths.tolist()}")
        width = int(lengths.max()) if seq_len is None and lengths.numel() else (seq_len or 0)
        if bool((lengths > width).any()):
            raise ValueError(f"a length exceeds seq_len={width}: {lengths.tolist()}")
        real = torch.arange(width, device=device)[None, :] < lengths[:, None]
    elif x.dim() == 2:
        if seq_len is not None and seq_len != x.size(1):
            raise ValueError(f"seq_len={seq_len} differs from the mask's width {x.size(1)}")
        real = x != 0
    else:
        raise ValueError(f"give [batch] lengths or a [batch, seq_len] mask, got shape {tuple(x.shape)}")
    g = None if generator is None else as_generator(generator)
    gdev = g.device if g is not None else device
    # argsort of iid uniform keys is a uniform permutation (float64: ties practically never);
    # padding gets the largest key, so the real positions come first
    keys = torch.rand(real.shape, generator=g, device=gdev, dtype=torch.float64).to(device)
    if last is None:
        order = keys.masked_fill(~real, 2.0).argsort(dim=1)
    else:
        if tuple(last.shape) != tuple(real.shape):
            raise ValueError(f"last must be [batch, seq_len] = {tuple(real.shape)}, got {tuple(last.shape)}")
        order = (keys + last.to(device).double()).masked_fill(~real, 3.0).argsort(dim=1)
    steps = torch.arange(real.size(1), device=device)[None, :]
    return torch.where(steps < real.sum(1, keepdim=True), order, -1)


def _as_orders(order: Tensor | Sequence[int] | Sequence[Sequence[int]]) -> Tensor:
    """``order`` as a checked ``[batch, seq_len]`` long tensor (a single order becomes batch 1)."""
    o = order if isinstance(order, Tensor) else torch.as_tensor(order)
    o = o.long()
    if o.dim() == 1:
        o = o[None]
    if o.dim() != 2:
        raise ValueError(f"an order is [seq_len] or [batch, seq_len], got shape {tuple(o.shape)}")
    n = o.size(1)
    valid = o >= 0
    if bool((o < -1).any()) or bool((o >= n).any()):
        raise ValueError(f"order entries must be positions in [0, {n}) or -1 (after the real tokens)")
    if bool((valid[:, 1:] & ~valid[:, :-1]).any()):
        raise ValueError("in an order, -1 entries (padding) must all come after the positions")
    seen = torch.zeros(o.size(0), n + 1, dtype=torch.long, device=o.device)
    seen.scatter_add_(1, torch.where(valid, o, n), torch.ones_like(o))
    if bool((seen[:, :n] > 1).any()):
        raise ValueError("an order lists a position twice")
    return o


def order_ranks(order: Tensor | Sequence[int]) -> Tensor:
    r"""``[batch, seq_len]``: the step at which each position comes in its row's order
    (:math:`\rho`), ``-1`` for positions not in the order (padding)."""
    o = _as_orders(order)
    b, n = o.shape
    valid = o >= 0
    steps = torch.arange(n, device=o.device).expand(b, n)
    ranks = torch.full((b, n + 1), -1, dtype=torch.long, device=o.device)
    ranks.scatter_(1, torch.where(valid, o, n), torch.where(valid, steps, -1))
    return ranks[:, :n]


def targets_per_row(
    lengths: Tensor, *, n_predict: int | Tensor | None = None, K: float | None = None
) -> Tensor:
    """How many of a row's ``lengths`` tokens are targets: all of them (neither argument),
    ``min(n_predict, length)``, or ``max(1, floor(length / K))`` (partial prediction; 0 for an
    empty row). ``n_predict`` may be a ``[batch]`` tensor, one count per row (0 allowed)."""
    if n_predict is not None and K is not None:
        raise ValueError("give n_predict (targets per row) or K (1/K of the tokens are targets), not both")
    lengths = lengths.long()
    if isinstance(n_predict, Tensor):
        if tuple(n_predict.shape) != tuple(lengths.shape) or bool((n_predict < 0).any()):
            raise ValueError(f"n_predict per row must be [batch] = {tuple(lengths.shape)} counts >= 0")
        return torch.minimum(lengths, n_predict.to(lengths.device).long())
    if n_predict is not None:
        if n_predict < 1:
            raise ValueError(f"n_predict must be at least 1, got {n_predict}")
        return lengths.clamp(max=int(n_predict))
    if K is not None:
        if K < 1:
            raise ValueError(f"K must be at least 1 (K = 1: every token is a target), got {K}")
        n = torch.floor(lengths.double() / K).long().clamp(min=1)
        return torch.minimum(n, lengths)
    return lengths


def sample_spans(
    lengths_or_mask: Tensor | Sequence[int],
    generator: Any = None,
    *,
    K: float | None = None,
    n_predict: int | None = None,
    max_span: int = MAX_SPAN,
    seq_len: int | None = None,
) -> Tensor:
    r"""Span-based targets, as XLNet's pretraining data chose them (see the module docstring).

    Args:
        lengths_or_mask: ``[batch]`` lengths or an ``[batch, seq_len]`` attention mask, as
            :func:`sample_orders`; spans are runs of consecutive *real* tokens.
        generator: a ``torch.Generator`` or a seed (None: torch's global generator).
        K, n_predict: how many targets per row (:func:`targets_per_row`; default ``K = 6``);
            a span of :math:`n` gets a window of :math:`n` times the row's length over that
            count (about :math:`nK` tokens).
        max_span: the longest span (the original's ``max_gram``, 5).
        seq_len: the width with lengths.

    Returns ``span_ids`` ``[batch, seq_len]`` (long): ``-1`` for non-targets and padding, else
    the index of the target's span in its row (0, 1, ... from left to right, then any single
    tokens that complete the count). A row gets exactly
    :func:`targets_per_row` targets.
    """
    if max_span < 1:
        raise ValueError(f"max_span must be at least 1, got {max_span}")
    if K is None and n_predict is None:
        K = 6
    x = lengths_or_mask if isinstance(lengths_or_mask, Tensor) else torch.as_tensor(lengths_or_mask)
    if x.dim() == 1:
        width = int(x.max()) if seq_len is None and x.numel() else (seq_len or 0)
        if bool((x.long() > width).any()) or bool((x < 0).any()):
            raise ValueError(f"lengths must lie in [0, seq_len={width}]: {x.tolist()}")
        real = torch.arange(width, device=x.device)[None, :] < x.long()[:, None]
    elif x.dim() == 2:
        real = x != 0
    else:
        raise ValueError(f"give [batch] lengths or a [batch, seq_len] mask, got shape {tuple(x.shape)}")
    b, n = real.shape
    lengths = real.sum(1)
    goals = targets_per_row(lengths, n_predict=n_predict, K=K).tolist()
    g = None if generator is None else as_generator(generator)
    draws = torch.rand(b, max(n, 1), 2, generator=g, dtype=torch.float64).tolist()
    fill_keys = torch.rand(b, max(n, 1), generator=g, dtype=torch.float64).tolist()
    weights = [1.0 / k for k in range(1, max_span + 1)]
    cumulative = [sum(weights[: k + 1]) / sum(weights) for k in range(max_span)]
    span_ids = [[-1] * n for _ in range(b)]
    for row, (positions, goal) in enumerate(zip(real.tolist(), goals)):
        where = [i for i, r in enumerate(positions) if r]  # the real positions, in order
        length = len(where)
        per_target = length / goal if goal else 1.0  # about K: the windows tile the row
        ids = [-1] * length
        done = step = span = 0
        cur = 0.0
        while done < goal:
            u_len, u_pos = draws[row][step]
            step += 1
            size = next(k for k, c in enumerate(cumulative, 1) if u_len < c or k == max_span)
            size = min(size, goal - done)
            window = size * per_target
            start, stop = math.floor(cur + 0.5), min(math.floor(cur + window + 0.5), length)
            if stop - start < size:  # rounding at the row's end
                break
            begin = start + math.floor(u_pos * (stop - start - size + 1))
            ids[begin : begin + size] = [span] * size
            span, done, cur = span + 1, done + size, cur + window
        if done < goal:  # single tokens, uniformly among the rest, complete the count
            rest = sorted((fill_keys[row][i], i) for i in range(length) if ids[i] < 0)
            for _, i in rest[: goal - done]:
                ids[i] = span
                span += 1
        for i, v in zip(where, ids):
            span_ids[row][i] = v
    return torch.tensor(span_ids, dtype=torch.long, device=x.device).reshape(b, n)


# ---------------------------------------------------------------------------------------
# Masks and targets
# ---------------------------------------------------------------------------------------


@dataclass
class PermutationMasks:
    """What :func:`permutation_masks` returns (``P``: the most targets of any row)."""

    perm_mask: Tensor  # float [batch, T, T]; 1: position i may not attend to j (query stream)
    target_mapping: Tensor  # float [batch, P, T]; row p one-hot at the p-th target (zeros: no target)
    target_positions: Tensor  # long [batch, P]; the position of each target, -1 where there is none
    target_mask: Tensor  # float [batch, P]; 1 for a real target, 0 for padding targets
    is_target: Tensor  # bool [batch, T]; the positions that are predicted
    labels: Tensor | None = None  # long [batch, P]; the target tokens, -100 at padding targets

    def as_batch(self) -> dict[str, Tensor]:
        """The model's inputs: ``perm_mask``, ``target_mapping``, ``target_mask`` (and ``labels``)."""
        out = {"perm_mask": self.perm_mask, "target_mapping": self.target_mapping}
        out["target_mask"] = self.target_mask
        if self.labels is not None:
            out["labels"] = self.labels
        return out


def permutation_masks(
    order: Tensor | Sequence[int] | Sequence[Sequence[int]],
    *,
    n_predict: int | None = None,
    K: float | None = None,
    input_ids: Tensor | None = None,
) -> PermutationMasks:
    """XLNet's ``perm_mask`` and ``target_mapping`` from factorisation orders (no loops over tokens).

    Args:
        order: ``[batch, seq_len]`` (or one ``[seq_len]`` order) as :func:`sample_orders`
            returns it: positions in the order they are predicted, then ``-1``.
        n_predict, K: partial prediction (see the module docstring): the last ``n_predict``
            tokens of each order (an int, or a ``[batch]`` tensor of counts per row), or the
            last ``max(1, floor(length / K))``, are targets; with neither, every real token is
            (full factorisation).
        input_ids: ``[batch, seq_len]``; when given, ``labels`` holds the target tokens.

    Targets come in ``target_mapping`` in the order of the factorisation. ``perm_mask`` rows of
    padding positions hide everything and its padding columns are 1 in every row; the
    diagonal is 1 at targets and 0 at non-targets (as in XLNet's code: the content stream sees
    itself anyway).
    """
    o = _as_orders(order)
    b, n = o.shape
    dev = o.device
    if isinstance(n_predict, Tensor) and n_predict.dim() == 0:
        n_predict = int(n_predict)
    ranks = order_ranks(o)  # [b, n]
    real = ranks >= 0
    lengths = real.sum(1)
    n_targets = targets_per_row(lengths, n_predict=n_predict, K=K)
    cut = (lengths - n_targets)[:, None]  # steps < cut are the non-targets
    is_target = real & (ranks >= cut)
    context = real & ~is_target
    ri, rj = ranks[:, :, None], ranks[:, None, :]
    visible = (rj < ri) | (context[:, :, None] & context[:, None, :])
    visible &= real[:, :, None] & real[:, None, :]
    perm_mask = (~visible).float()

    width = int(n_targets.max()) if b else 0
    slots = torch.arange(width, device=dev)[None, :]
    has = slots < n_targets[:, None]  # [b, P]
    steps = (cut + slots).clamp(max=max(n - 1, 0))
    positions = torch.where(has, o.gather(1, steps) if width else steps, -1)
    mapping = F.one_hot(positions.clamp(min=0), n).float() * has[..., None].float()
    labels = None
    if input_ids is not None:
        if tuple(input_ids.shape) != (b, n):
            raise ValueError(f"input_ids must be [batch, seq_len] = {(b, n)}, got {tuple(input_ids.shape)}")
        labels = torch.where(has, input_ids.gather(1, positions.clamp(min=0)), IGNORE_INDEX)
    return PermutationMasks(
        perm_mask=perm_mask,
        target_mapping=mapping,
        target_positions=positions,
        target_mask=has.float(),
        is_target=is_target,
        labels=labels,
    )


def order_context(order: Sequence[Any] | Tensor, position: Any) -> list:
    """The positions whose tokens the prediction of ``position`` is conditioned on: those before
    it in ``order``, in the order's sequence (``-1`` entries are padding and ignored).

    With the XLNet paper's 4-token order 3 -> 2 -> 4 -> 1: token 3 sees nothing, 2 sees [3],
    4 sees [3, 2], 1 sees [3, 2, 4]. Positions may be labelled any way (1-based here); this is
    row ``position`` of :func:`permutation_masks`'s query stream (0-based positions).
    """
    items = order.tolist() if isinstance(order, Tensor) else list(order)
    if items and isinstance(items[0], list):
        raise ValueError("order_context takes one order, not a batch")
    items = [p for p in items if p != -1]
    if len(set(items)) != len(items):
        raise ValueError(f"an order lists a position twice: {items}")
    if position not in items:
        raise ValueError(f"position {position!r} is not in the order {items}")
    return items[: items.index(position)]


# ---------------------------------------------------------------------------------------
# Batches, loss, scores
# ---------------------------------------------------------------------------------------


def _drop_padding_columns(batch: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """The batch without the trailing columns that are padding in every row (any padding side)."""
    batch = dict(batch)
    mask = batch.get("attention_mask")
    if mask is None:
        return batch
    used = (mask != 0).any(0).nonzero()
    width = int(used.max()) + 1 if used.numel() else 0
    full = mask.size(1)
    return {k: (v[:, :width] if v.dim() == 2 and v.size(1) == full else v) for k, v in batch.items()}


def plm_batch(
    input_ids: Tensor,
    attention_mask: Tensor | None = None,
    *,
    n_predict: int | None = None,
    K: float | None = None,
    generator: Any = None,
    targets: str = "last",
    max_span: int = MAX_SPAN,
) -> dict[str, Tensor]:
    """One permutation-LM batch: ``input_ids`` (as given, not reordered), ``attention_mask``,
    ``perm_mask``, ``target_mapping``, ``labels`` ``[batch, P]`` and ``target_mask``, for a
    random order per row (:func:`sample_orders`, :func:`permutation_masks`). Without ``n_predict``
    or ``K``, ``K = 6`` (the paper's partial prediction); ``K=1`` makes every token a target.

    ``targets="last"`` (the default) predicts the last tokens of a uniformly random order;
    ``targets="span"`` draws spans of up to ``max_span`` tokens first (:func:`sample_spans`, as
    many targets per row) and an order that puts them after every non-target."""
    if targets not in TARGET_CHOICES:
        raise ValueError(f"targets must be one of {TARGET_CHOICES}, got {targets!r}")
    if n_predict is None and K is None:
        K = 6
    if attention_mask is None:
        attention_mask = torch.ones_like(input_ids)
    if targets == "last":
        order = sample_orders(attention_mask, generator)
        masks = permutation_masks(order, n_predict=n_predict, K=K, input_ids=input_ids)
    else:
        g = None if generator is None else as_generator(generator)  # one stream for both draws
        chosen = sample_spans(attention_mask, g, K=K, n_predict=n_predict, max_span=max_span) >= 0
        order = sample_orders(attention_mask, g, last=chosen)
        masks = permutation_masks(order, n_predict=chosen.sum(1), input_ids=input_ids)
    return {"input_ids": input_ids, "attention_mask": attention_mask, **masks.as_batch()}


def plm_loss(
    model: nn.Module,
    batch: Mapping[str, Tensor],
    *,
    n_predict: int | None = None,
    K: float | None = None,
    generator: Any = None,
    targets: str = "last",
    max_span: int = MAX_SPAN,
) -> tuple[Tensor, dict[str, float]]:
    """``loss_fn`` for :func:`course_lib.train.fit`: XLNet's permutation-LM loss.

    ``model`` is an :class:`~course_lib.models.xlnet.XLNetLMHeadModel` (or Hugging Face's). A
    batch with ``perm_mask``, ``target_mapping`` and ``labels`` ``[batch, P]`` (from
    :func:`plm_batch`) is used as it is; otherwise (``input_ids`` and ``attention_mask``, e.g.
    :class:`~course_lib.objectives.masking.MaskedLMData` with ``masking="none"``, whose
    ``labels`` are replaced) a new order per row is drawn with ``generator`` and the targets
    chosen with ``n_predict`` / ``K`` (default ``K = 6``, as :func:`plm_batch`) and ``targets``
    (``"last"`` or ``"span"``, ``max_span``), after dropping the columns that are padding in
    every row.
    ``token_type_ids`` are passed on. The loss is the mean cross-entropy over the real targets
    (the model's own, on the query stream). Metrics: ``plm_accuracy`` (argmax at the targets).
    """
    if "perm_mask" not in batch:
        batch = _drop_padding_columns({k: v for k, v in batch.items() if k not in PLM_FIELDS})
        batch = {
            **batch,
            **plm_batch(
                batch["input_ids"],
                batch.get("attention_mask"),
                n_predict=n_predict,
                K=K,
                generator=generator,
                targets=targets,
                max_span=max_span,
            ),
        }
    missing = [k for k in ("target_mapping", "labels") if k not in batch]
    if missing:
        raise ValueError(f"a batch with a perm_mask also needs {missing}")
    kwargs = {k: batch[k] for k in ("attention_mask", "token_type_ids") if k in batch}
    labels = batch["labels"]
    out = model(
        batch["input_ids"],
        perm_mask=batch["perm_mask"],
        target_mapping=batch["target_mapping"],
        labels=labels,
        **kwargs,
    )
    with torch.no_grad():
        chosen = labels != IGNORE_INDEX
        correct = (out.logits.argmax(-1) == labels) & chosen
        acc = correct.sum() / chosen.sum().clamp(min=1)
    return out.loss, {"plm_accuracy": acc.item()}


def factorised_step_log_probs(
    model: nn.Module,
    input_ids: Tensor,
    order: Tensor | Sequence[int] | Sequence[Sequence[int]],
    *,
    token_type_ids: Tensor | None = None,
) -> Tensor:
    r"""``[batch, T]``: each step's :math:`\log p(x_{z_t} \mid x_{z_{<t}})` under one
    factorisation order per row, column ``t`` for step ``t`` of the order (0 after a row's real
    tokens), from the query stream, in one call.

    ``input_ids`` ``[batch, seq_len]`` (or one ``[seq_len]`` row: ``[T]`` comes back);
    ``order`` one ``[seq_len]`` order for every row or ``[batch, seq_len]``, ``-1`` after the
    real tokens (positions not in the order are padding and not scored). Every token of the
    order is a target of the call (``target_mapping`` holds them all; ``perm_mask`` gives each
    exactly its predecessors). The model runs in its current mode and with gradients: call
    ``model.eval()`` (and ``torch.no_grad()``) for scores. With course_lib's XLNet the first
    token of the order, which sees no key, gets a zero attention output; Hugging Face's lets it
    attend to every token (see :mod:`course_lib.models.xlnet`), so there the first step is not
    a proper probability.
    """
    single = input_ids.dim() == 1
    ids = input_ids[None] if single else input_ids
    o = _as_orders(order).to(ids.device)
    if o.size(0) == 1 and ids.size(0) > 1:
        o = o.expand(ids.size(0), -1)
    if tuple(o.shape) != tuple(ids.shape):
        raise ValueError(f"order {tuple(o.shape)} does not match input_ids {tuple(ids.shape)}")
    masks = permutation_masks(o, input_ids=ids)
    kwargs = {} if token_type_ids is None else {"token_type_ids": token_type_ids.reshape(ids.shape)}
    out = model(
        ids,
        attention_mask=(order_ranks(o) >= 0).long(),
        perm_mask=masks.perm_mask,
        target_mapping=masks.target_mapping,
        **kwargs,
    )
    logits = out.logits.to(torch.promote_types(out.logits.dtype, torch.float32))
    logp = torch.log_softmax(logits, dim=-1)
    picked = logp.gather(-1, masks.labels.clamp(min=0)[..., None]).squeeze(-1) * masks.target_mask
    return picked[0] if single else picked


def factorised_log_prob(
    model: nn.Module,
    input_ids: Tensor,
    order: Tensor | Sequence[int] | Sequence[Sequence[int]],
    *,
    token_type_ids: Tensor | None = None,
) -> Tensor:
    r""":math:`\sum_t \log p(x_{z_t} \mid x_{z_{<t}})`: a sequence's log-probability under one
    factorisation order, from the query stream: the sum of :func:`factorised_step_log_probs`
    (same arguments; a scalar for one ``[seq_len]`` row, else ``[batch]``)."""
    return factorised_step_log_probs(model, input_ids, order, token_type_ids=token_type_ids).sum(-1)
