r"""What a permutation language model can be asked: any token (or tokens) given any context.

A trained XLNet (:class:`~course_lib.models.xlnet.XLNetLMHeadModel`) predicts the targets of
a factorisation order from the query stream (:mod:`course_lib.objectives.permutation`). Put
the tokens to score *last* in the order and every other real token before them, and one
forward pass gives

.. math::

    p\big(x_{t_1} \mid x_{\bar T}\big),\;
    p\big(x_{t_2} \mid x_{\bar T}, x_{t_1}\big),\; \dots

with :math:`\bar T` the tokens that are not targets (they see each other in both directions,
as XLNet's non-targets do). That is all chapter 6 needs:

* :func:`plm_target_log_probs`, the primitive: log-probabilities of each row's targets in that
  order (one call);
* :func:`plm_cloze_log_probs`: one hidden token given both sides, like a masked LM's cloze but
  with no ``[MASK]`` in the input;
* :func:`plm_pair_joint`: two tokens by the chain rule,
  :math:`p(a \text{ at } i \mid \cdot)\,p(b \text{ at } j \mid \cdot, a)`, the joint BERT's
  independence assumption cannot give (:func:`~course_lib.analysis.ar_ae.pair_joint` calls it
  for a permutation LM);
* :func:`same_context_log_probs`: the **position problem** of §2.3. Two targets after the
  *same* context: the query stream knows where each target sits, so the two predictions
  differ; a standard softmax over :math:`h_\theta(x_{z_{<t}})` (a representation of the
  context alone) would give both the same distribution.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from ..models.xlnet import XLNetLMHeadModel
from ..objectives.permutation import permutation_masks
from ..train import evaluating, model_device

__all__ = [
    "is_permutation_lm",
    "context_then_targets",
    "plm_target_log_probs",
    "plm_cloze_log_probs",
    "plm_pair_joint",
    "same_context_log_probs",
]


def is_permutation_lm(model: nn.Module) -> bool:
    """Whether ``model`` is an XLNet LM (course_lib's or Hugging Face's ``XLNetLMHeadModel``)."""
    return isinstance(model, XLNetLMHeadModel) or type(model).__name__ == "XLNetLMHeadModel"


def context_then_targets(attention_mask: Tensor, targets: Tensor) -> Tensor:
    """``[batch, seq_len]`` factorisation orders: each row's real positions that are not in
    ``targets`` (in position order), then ``targets[b]`` in the given order, then ``-1`` for
    padding. ``targets`` ``[batch, P]`` holds distinct real positions of each row."""
    real = attention_mask.bool()
    b, n = real.shape
    if targets.dim() != 2 or targets.size(0) != b:
        raise ValueError(f"targets must be [batch={b}, P] positions, got shape {tuple(targets.shape)}")
    p = targets.size(1)
    if p == 0:
        raise ValueError("give at least one target per row")
    if bool(((targets < 0) | (targets >= n)).any()):
        raise ValueError(f"targets must be positions in [0, {n}), got {targets.tolist()}")
    if not bool(real.gather(1, targets).all()):
        raise ValueError("a target is a padding position: targets must be real tokens")
    if p > 1 and bool((targets.sort(1).values.diff(dim=1) == 0).any()):
        raise ValueError(f"a row lists the same target twice: {targets.tolist()}")
    is_target = torch.zeros_like(real).scatter_(1, targets, True)
    pos = torch.arange(n, device=targets.device).expand(b, n)
    rank = torch.zeros_like(pos).scatter_(1, targets, torch.arange(p, device=targets.device).expand(b, p))
    # sort keys: context by position, then the targets in their given order, then padding
    key = torch.where(is_target, n + rank, torch.where(real, pos, 2 * n + pos))
    order = key.argsort(1)
    return torch.where(pos < real.sum(1, keepdim=True), order, -1)


@torch.no_grad()
def plm_target_log_probs(
    model: nn.Module,
    input_ids: Tensor,
    targets: Tensor | Sequence[Sequence[int]],
    *,
    attention_mask: Tensor | None = None,
    token_type_ids: Tensor | None = None,
) -> Tensor:
    r"""``[batch, P, vocab]`` log-probabilities of each row's targets, predicted last in the
    order and in the given order: target ``k`` of row ``b`` given every real token that is not
    a target of the row, and the targets before it (one forward pass, eval mode).

    ``targets`` ``[batch, P]``: distinct real positions per row (the same count in every row).
    """
    if not is_permutation_lm(model):
        raise ValueError(
            f"plm_target_log_probs needs a permutation LM (XLNetLMHeadModel), got {type(model).__name__}"
        )
    device = model_device(model)
    ids = input_ids.to(device)
    if ids.dim() != 2:
        raise ValueError(f"input_ids must be [batch, seq_len], got shape {tuple(ids.shape)}")
    att = torch.ones_like(ids) if attention_mask is None else attention_mask.to(device)
    if att.shape != ids.shape:
        raise ValueError(
            f"attention_mask must have input_ids' shape {tuple(ids.shape)}, got {tuple(att.shape)}"
        )
    t = torch.as_tensor(targets, dtype=torch.long, device=device)
    order = context_then_targets(att, t)
    masks = permutation_masks(order, n_predict=t.size(1))
    kwargs = {} if token_type_ids is None else {"token_type_ids": token_type_ids.to(device)}
    with evaluating(model):
        out = model(
            ids,
            attention_mask=att,
            perm_mask=masks.perm_mask,
            target_mapping=masks.target_mapping,
            **kwargs,
        )
    logits = out.logits
    return torch.log_softmax(logits.to(torch.promote_types(logits.dtype, torch.float32)), -1)


def plm_cloze_log_probs(
    model: nn.Module, input_ids: Tensor, positions: Tensor, *, attention_mask: Tensor | None = None
) -> Tensor:
    """``[n, vocab]``: for each ``(row, column)`` of ``positions`` ``[n, 2]``, the
    log-probabilities of the token there given every other real token of its row (the same
    question as :func:`~course_lib.analysis.ar_ae.cloze_log_probs` asks a masked LM, with no
    ``[MASK]`` in the input)."""
    positions = torch.as_tensor(positions, dtype=torch.long)
    if positions.dim() != 2 or positions.size(1) != 2:
        raise ValueError(f"positions must be [n, 2] (row, column) pairs, got shape {tuple(positions.shape)}")
    rows = positions[:, 0]
    ids = input_ids[rows]
    att = None if attention_mask is None else attention_mask[rows]
    return plm_target_log_probs(model, ids, positions[:, 1:], attention_mask=att)[:, 0]


def plm_pair_joint(
    model: nn.Module,
    input_ids: Tensor,
    positions: tuple[int, int],
    candidates_i: Sequence[int],
    candidates_j: Sequence[int],
    *,
    attention_mask: Tensor | None = None,
) -> Tensor:
    r"""``[len(candidates_i), len(candidates_j)]``: the permutation LM's
    :math:`p(x_i = a \mid x_{\setminus ij})\; p(x_j = b \mid x_{\setminus ij}, x_i = a)`, the
    two positions predicted last (``i`` first), every other token of the one sequence as
    context. The chain rule, like a causal LM's, but with context on both sides: over the full
    vocabulary the grid sums to 1. One forward pass over ``len(candidates_i)`` rows (row ``a``
    has ``a`` at ``i``; the query stream of ``i`` never sees it, so the first factor is the
    same in every row)."""
    ids = input_ids.reshape(1, -1)
    att = torch.ones_like(ids) if attention_mask is None else attention_mask.reshape(1, -1)
    i, j = (int(p) for p in positions)
    ci = torch.as_tensor(list(candidates_i), dtype=torch.long)
    cj = torch.as_tensor(list(candidates_j), dtype=torch.long)
    if ci.numel() == 0 or cj.numel() == 0:
        raise ValueError("give at least one candidate for each position")
    k = ci.numel()
    x = ids.expand(k, -1).clone()
    x[:, i] = ci
    targets = torch.tensor([[i, j]]).expand(k, -1)
    lp = plm_target_log_probs(model, x, targets, attention_mask=att.expand(k, -1)).cpu()
    first = lp[torch.arange(k), 0, ci]  # log p(a | context): one value per row (the same context)
    second = lp[:, 1][:, cj]  # [k, len(cj)]: log p(b | context, a)
    return (first[:, None] + second).exp()


def same_context_log_probs(
    model: nn.Module,
    input_ids: Tensor,
    pairs: Tensor | Sequence[tuple[int, int, int]],
    *,
    attention_mask: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    r"""The position problem: for each ``(row, i, j)`` of ``pairs``, the log-probabilities
    ``[n, vocab]`` of the token at ``i`` and of the token at ``j``, each given the *same*
    context (every real token of the row but ``i`` and ``j``). They come from two orders that
    share that context and differ in the next position (``..., i, j`` and ``..., j, i``; only
    the first target of each is read). Returns ``(log p(x_i | context), log p(x_j | context))``.
    """
    pairs = torch.as_tensor(pairs, dtype=torch.long)
    if pairs.dim() != 2 or pairs.size(1) != 3:
        raise ValueError(f"pairs must be [n, 3] (row, i, j) triples, got shape {tuple(pairs.shape)}")
    if bool((pairs[:, 1] == pairs[:, 2]).any()):
        raise ValueError("each pair needs two different positions i != j")
    rows = pairs[:, 0].repeat(2)
    targets = torch.cat([pairs[:, 1:], pairs[:, [2, 1]]], 0)
    att = None if attention_mask is None else attention_mask[rows]
    lp = plm_target_log_probs(model, input_ids[rows], targets, attention_mask=att)[:, 0]
    n = pairs.size(0)
    return lp[:n], lp[n:]
