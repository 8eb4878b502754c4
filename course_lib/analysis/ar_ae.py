r"""Autoregressive (AR) vs autoencoding (AE) language models: the two weaknesses of BERT that
XLNet (Yang et al., 2019) sets out to fix, measured on the course's models.

An **autoregressive** LM (:class:`~course_lib.models.bert.BertLMHeadModel`: the BERT network
with causal self-attention) factorises the probability of a text by the chain rule, exactly:

.. math::

    \log p(x) = \sum_{t=1}^{T} \log p(x_t \mid x_{<t}).

An **autoencoding** LM (BERT, :class:`~course_lib.models.bert.BertForMaskedLM`) replaces the
positions with :math:`m_t = 1` by ``[MASK]``, giving the corrupted input :math:`\hat x`, and
maximises

.. math::

    \log p(\bar x \mid \hat x) \;\approx\; \sum_{t=1}^{T} m_t \log p(x_t \mid \hat x),

with :math:`\bar x` the masked tokens. The :math:`\approx` is the first weakness, the
**independence assumption**: for two masked positions :math:`i \ne j` BERT predicts each from
:math:`\hat x` alone,

.. math::

    p(x_i = a,\, x_j = b \mid \hat x) \;\approx\; p(x_i = a \mid \hat x)\; p(x_j = b \mid \hat x),

an outer product of two distributions, which cannot put its mass on "New York" and "Los
Angeles" without also putting it on "New Angeles" (:func:`pair_joint`,
:func:`inconsistent_mass`). The AR model has no such gap,
:math:`p(a, b \mid x_{<i}) = p(a \mid x_{<i})\, p(b \mid x_{<j})` with :math:`a` in the
context of the second factor, but it sees only the left context. The second weakness is the
**pretrain/fine-tune discrepancy**: ``[MASK]`` stands at about 12% of the positions of every
pretraining input (80% of the 15% chosen) and never in fine-tuning data
(:func:`mask_discrepancy`).

What is here:

* :func:`next_token_log_probs`, :func:`sequence_log_likelihood`, :func:`perplexity`: the
  chain rule of an AR model (the perplexity is ``exp(lm_loss)`` of
  :func:`~course_lib.objectives.pretraining.evaluate_causal_lm`, the recipes' held-out metric;
  computed here from the chain rule, and the tests check that the two agree).
* :func:`pseudo_log_likelihood` (Salazar et al., 2020): a masked LM's stand-in for
  :math:`\log p(x)`, :math:`\mathrm{PLL}(x) = \sum_t \log p(x_t \mid x_{\setminus t})`, each
  token masked alone. It is *not* a normalised log-probability.
* :func:`pair_joint`, :func:`normalise_grid`, :func:`inconsistent_mass`: the joint of two
  positions under either model.
* :func:`fill_masks` (generation from a masked LM by iterative mask filling) and
  :func:`sample_causal` (left-to-right sampling); both choose tokens with :func:`next_tokens`.
* :func:`mask_discrepancy`: how much ``[MASK]`` in the input moves the other tokens' vectors.

Every function runs the model in eval mode under ``torch.no_grad()``, restores its training
mode, and returns tensors on the CPU. Inputs are ``[batch, seq_len]`` token ids, padded on
the right (``attention_mask``: 1 = real token, 0 = padding).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..objectives.masking import MLM_PROBABILITY
from ..objectives.pairs import reverse_sequences
from ..train import evaluating
from .lm_steps import (
    ban_tokens,
    ids_list,
    is_causal,
    lm_batch,
    lm_logits,
    need_causal,
    need_masked,
    next_tokens,
    vocab_id,
)
from .xlnet import is_permutation_lm, plm_pair_joint

__all__ = [
    "next_token_log_probs",
    "sequence_log_likelihood",
    "perplexity",
    "pseudo_log_likelihood",
    "pair_joint",
    "normalise_grid",
    "inconsistent_mass",
    "next_tokens",
    "fill_masks",
    "sample_causal",
    "mask_discrepancy",
    "cloze_log_probs",
    "product_of_experts",
    "NamePairs",
    "name_pairs",
    "find_name",
    "name_joints",
    "FILL_ORDERS",
    "DIRECTIONS",
]

FILL_ORDERS = ("left_to_right", "most_confident")
DIRECTIONS = ("left_to_right", "right_to_left")  # a causal LM's reading order (recipes: CAUSAL_DIRECTIONS)


# ---------------------------------------------------------------------------------------
# 1. The AR model's chain rule
# ---------------------------------------------------------------------------------------


def next_token_log_probs(
    causal_model: nn.Module, input_ids: Tensor, attention_mask: Tensor | None = None
) -> Tensor:
    r"""``[batch, seq_len - 1]``: column ``t - 1`` holds :math:`\log p(x_t \mid x_{<t})` for
    ``t = 1 .. seq_len - 1``, and 0 where :math:`x_t` is padding. One forward pass."""
    need_causal(causal_model, "next_token_log_probs")
    ids, att, _ = lm_batch(causal_model, input_ids, attention_mask)
    with evaluating(causal_model):
        logp = torch.log_softmax(lm_logits(causal_model, input_ids=ids, attention_mask=att)[:, :-1], -1)
    # the logits at t - 1 score the token at t
    picked = logp.gather(-1, ids[:, 1:, None]).squeeze(-1)
    return (picked * att[:, 1:]).cpu()


def sequence_log_likelihood(
    causal_model: nn.Module, input_ids: Tensor, attention_mask: Tensor | None = None
) -> Tensor:
    r"""``[batch]``: :math:`\sum_{t \ge 1} \log p(x_t \mid x_{<t})` over each sequence's real
    tokens after the first (the first token, e.g. ``[CLS]``, is given, not predicted)."""
    return next_token_log_probs(causal_model, input_ids, attention_mask).sum(-1)


def perplexity(causal_model: nn.Module, input_ids: Tensor, attention_mask: Tensor | None = None) -> float:
    r""":math:`\exp\big(-\frac{1}{N}\sum \log p(x_t \mid x_{<t})\big)` over the :math:`N` real
    tokens after the first of every sequence in the batch (a per-token mean over the whole
    batch, not a mean of per-sequence perplexities): ``exp(lm_loss)`` of
    :func:`~course_lib.objectives.pretraining.evaluate_causal_lm`."""
    need_causal(causal_model, "perplexity")
    _, _, lengths = lm_batch(causal_model, input_ids, attention_mask)
    n_predicted = int((lengths - 1).sum())
    if n_predicted == 0:
        raise ValueError("no token to predict: every sequence has a single real token")
    total = next_token_log_probs(causal_model, input_ids, attention_mask).double().sum()
    return math.exp(-float(total) / n_predicted)


# ---------------------------------------------------------------------------------------
# 2. The AE model's stand-in: pseudo-log-likelihood
# ---------------------------------------------------------------------------------------


def pseudo_log_likelihood(
    mlm_model: nn.Module,
    input_ids: Tensor,
    attention_mask: Tensor | None = None,
    *,
    mask_token_id: int,
    special_ids: Sequence[int] = (),
    chunk_size: int = 256,
) -> Tensor:
    r"""``[batch]``: :math:`\mathrm{PLL}(x) = \sum_{t} \log p(x_t \mid x_{\setminus t})`
    (Salazar et al., 2020) over the real tokens that are not in ``special_ids`` (nor
    ``[MASK]`` itself): each is replaced by ``[MASK]`` alone and the log-probability of the
    true token read there.

    The copies (one per scored token of every sequence) run as batches of ``chunk_size`` rows;
    a sequence with no scored token gets 0.
    """
    need_masked(mlm_model, "pseudo_log_likelihood")
    mask_token_id = vocab_id(mlm_model, mask_token_id, "mask_token_id")
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be positive, got {chunk_size}")
    ids, att, _ = lm_batch(mlm_model, input_ids, attention_mask)
    skip = torch.tensor([*ids_list(mlm_model, special_ids, "special_ids", allow_empty=True), mask_token_id])
    scored = att.bool() & ~torch.isin(ids, skip.to(ids.device))
    rows, cols = scored.nonzero(as_tuple=True)  # one masked copy per (sequence, position)
    total = torch.zeros(ids.size(0), device=ids.device)
    for r, c, log_probs in _masked_copies(mlm_model, ids, att, rows, cols, mask_token_id, chunk_size):
        total.index_add_(0, r, log_probs[torch.arange(r.numel(), device=ids.device), ids[r, c]])
    return total.cpu()


def _masked_copies(
    model: nn.Module,
    ids: Tensor,
    att: Tensor,
    rows: Tensor,
    cols: Tensor,
    mask_token_id: int,
    chunk_size: int,
) -> Iterator[tuple[Tensor, Tensor, Tensor]]:
    """For each ``(row, column)`` pair, a copy of the row with that one token ``[MASK]``, run in
    batches of ``chunk_size`` copies (eval mode, no gradients): yields ``(rows, columns,
    [copies, vocab] log-probabilities at the masked position)`` per batch."""
    with evaluating(model):
        for start in range(0, rows.numel(), chunk_size):
            r, c = rows[start : start + chunk_size], cols[start : start + chunk_size]
            n = torch.arange(r.numel(), device=ids.device)
            x = ids[r].clone()
            x[n, c] = mask_token_id
            yield r, c, torch.log_softmax(lm_logits(model, input_ids=x, attention_mask=att[r])[n, c], -1)


# ---------------------------------------------------------------------------------------
# 3. The joint of two positions
# ---------------------------------------------------------------------------------------


def pair_joint(
    model: nn.Module,
    input_ids: Tensor,
    positions: tuple[int, int],
    candidates_i: Sequence[int],
    candidates_j: Sequence[int],
    *,
    mask_token_id: int | None = None,
    attention_mask: Tensor | None = None,
    token_type_ids: Tensor | None = None,
    include_between: bool = False,
) -> Tensor:
    r"""``[len(candidates_i), len(candidates_j)]``: the model's probability of token
    ``candidates_i[a]`` at position ``i`` together with ``candidates_j[b]`` at ``j`` (``i < j``),
    every other token of the one sequence ``input_ids`` kept as given. Probabilities are over
    the full vocabulary (not renormalised over the grid: :func:`normalise_grid`).

    * **Masked LM** (needs ``mask_token_id``): ``i`` and ``j`` both become ``[MASK]`` in one
      forward pass and the grid is the outer product
      :math:`p(x_i = a \mid \hat x)\, p(x_j = b \mid \hat x)`: BERT's independence
      assumption. Over the full vocabulary it sums to 1.
    * **Causal LM** (``mask_token_id`` is not used): the exact chain rule,
      :math:`p(x_i = a \mid x_{<i})\; p(x_j = b \mid x_{<i}, a, x_{i+1..j-1})`, in one batched
      forward pass over the ``len(candidates_i)`` sequences with ``a`` at ``i``. Only the left
      context counts; the tokens between ``i`` and ``j`` are context of the second factor,
      their own probability is not a factor, so over the full vocabulary the grid sums to 1.
      ``include_between=True`` multiplies in :math:`\prod_{i<k<j} p(x_k \mid x_{<k})` (with
      ``a`` at ``i``): the grid is then the probability of the whole span :math:`x_i .. x_j`
      given :math:`x_{<i}`, and :func:`normalise_grid` of the full-vocabulary grid is
      :math:`p(a, b \mid x_{<i}, x_{i+1..j-1})`. Position ``i`` must be at least 1 (the
      first token is given, never predicted). For adjacent positions both are the same.
    * **Permutation LM** (XLNet, :func:`~course_lib.analysis.xlnet.plm_pair_joint`): the
      chain rule again, :math:`p(x_i = a \mid x_{\setminus ij})\, p(x_j = b \mid
      x_{\setminus ij}, a)`, but every other token, on both sides, is context; the two
      positions come last in the factorisation order. Sums to 1 over the full vocabulary.
    """
    ids, att, lengths = lm_batch(model, input_ids, attention_mask, single=True)
    if len(positions) != 2:
        raise ValueError(f"positions must be two positions (i, j), got {positions!r}")
    i, j = (int(p) for p in positions)
    n = int(lengths[0])
    if not 0 <= i < j < n:
        raise ValueError(
            f"positions must satisfy 0 <= i < j < {n} (the real tokens), got (i, j) = ({i}, {j})"
        )
    ci = torch.tensor(ids_list(model, candidates_i, "candidates_i"), device=ids.device)
    cj = torch.tensor(ids_list(model, candidates_j, "candidates_j"), device=ids.device)
    if token_type_ids is not None:
        token_type_ids = token_type_ids.reshape(ids.shape).to(ids.device)
    if is_permutation_lm(model):  # XLNet: the chain rule with both sides as context
        return plm_pair_joint(model, ids[0, :n], (i, j), ci.tolist(), cj.tolist())
    if not is_causal(model):
        x = ids.clone()
        x[0, [i, j]] = vocab_id(model, mask_token_id, "mask_token_id")
        with evaluating(model):
            logits = lm_logits(model, input_ids=x, attention_mask=att, token_type_ids=token_type_ids)
        p = torch.softmax(logits[0, [i, j]], -1)
        return (p[0, ci][:, None] * p[1, cj][None, :]).cpu()
    if i < 1:
        raise ValueError("position i must be >= 1 for a causal LM: the first token is given, never predicted")
    k = ci.numel()
    x = ids.expand(k, -1).clone()
    x[:, i] = ci  # one variant per candidate a; what stands at j does not matter (it is scored)
    tt = None if token_type_ids is None else token_type_ids.expand(k, -1)
    with evaluating(model):
        logp = torch.log_softmax(
            lm_logits(model, input_ids=x, attention_mask=att.expand(k, -1), token_type_ids=tt), -1
        )
    first = logp[:, i - 1, ci].diagonal()  # [k]: log p(a | x_<i); the same context in every row
    second = logp[:, j - 1, cj]  # [k, len(cj)]: log p(b | x_<i, a, x_i+1..j-1)
    if include_between and j > i + 1:
        between = torch.arange(i + 1, j, device=ids.device)
        first = first + logp[:, between - 1].gather(-1, x[:, between, None]).squeeze(-1).sum(-1)
    return (first[:, None] + second).exp().cpu()


def normalise_grid(joint: Tensor) -> Tensor:
    """The grid divided by its sum: a distribution over the candidate pairs."""
    if joint.dim() != 2 or joint.numel() == 0:
        raise ValueError(f"joint must be a non-empty [len(ci), len(cj)] grid, got shape {tuple(joint.shape)}")
    if (joint < 0).any():
        raise ValueError("joint holds negative entries: it must be probabilities")
    total = joint.sum()
    if total <= 0:
        raise ValueError("joint sums to 0: nothing to normalise")
    return joint / total


def inconsistent_mass(joint: Tensor, consistent_pairs: set[tuple[int, int]] | Tensor) -> float:
    """The share of the grid's probability on pairs that are *not* consistent.

    ``consistent_pairs``: a set of ``(row, column)`` indices into ``joint`` (the index of the
    candidate in ``candidates_i`` and in ``candidates_j``, not token ids), or a boolean grid
    of ``joint``'s shape, True where the pair is consistent. E.g. with candidates ``["New",
    "Los"]`` and ``["York", "Angeles"]`` the consistent pairs are ``{(0, 0), (1, 1)}`` and the
    result is the share on "New Angeles" and "Los York". ``joint`` need not be normalised.
    """
    grid = normalise_grid(joint)
    if isinstance(consistent_pairs, Tensor):
        if consistent_pairs.dtype != torch.bool or consistent_pairs.shape != joint.shape:
            raise ValueError(
                f"a consistent_pairs grid must be boolean with joint's shape {tuple(joint.shape)}, "
                f"got {consistent_pairs.dtype} {tuple(consistent_pairs.shape)}"
            )
        ok = consistent_pairs.to(grid.device)
    else:
        ok = torch.zeros_like(grid, dtype=torch.bool)
        rows, cols = grid.shape
        for pair in consistent_pairs:
            a, b = pair
            if not (0 <= a < rows and 0 <= b < cols):
                raise ValueError(
                    f"consistent pair {pair!r} lies outside the grid of {rows} x {cols} "
                    "(pairs are (row, column) indices into joint, not token ids)"
                )
            ok[a, b] = True
    return float(grid[~ok].sum())


# ---------------------------------------------------------------------------------------
# 4. Generation: iterative mask filling and left-to-right sampling
# ---------------------------------------------------------------------------------------


def fill_masks(
    mlm_model: nn.Module,
    input_ids: Tensor,
    positions: Sequence[int],
    *,
    mask_token_id: int,
    order: str = "left_to_right",
    temperature: float = 0.0,
    generator: torch.Generator | None = None,
    attention_mask: Tensor | None = None,
    banned_ids: Sequence[int] = (),
    return_order: bool = False,
) -> Tensor | tuple[Tensor, Tensor]:
    r"""Generate from a masked LM: every position in ``positions`` becomes ``[MASK]``, then
    one is filled per step, in each sequence of the batch, until none is left.

    ``order``: ``"left_to_right"`` fills the leftmost masked position;
    ``"most_confident"`` the one whose most likely allowed token has the highest probability
    (the model's softmax, temperature 1) given the current input, which may differ from row
    to row. The token is chosen by :func:`next_tokens` (``temperature=0``: the most likely;
    otherwise sampled with ``generator``); ``[MASK]`` and ``banned_ids`` are never chosen.

    Returns the filled ids (the shape of ``input_ids``, ``[seq_len]`` or ``[batch, seq_len]``,
    on the CPU); with ``return_order=True`` also ``[batch, len(positions)]``: the positions
    in the order they were filled.
    """
    need_masked(mlm_model, "fill_masks")
    if order not in FILL_ORDERS:
        raise ValueError(f"order must be one of {FILL_ORDERS}, got {order!r}")
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0 (0 = greedy), got {temperature}")
    mask_token_id = vocab_id(mlm_model, mask_token_id, "mask_token_id")
    banned = sorted({*ids_list(mlm_model, banned_ids, "banned_ids", allow_empty=True), mask_token_id})
    one = input_ids.dim() == 1
    if one:
        input_ids = input_ids[None]
        attention_mask = None if attention_mask is None else attention_mask.reshape(1, -1)
    ids, att, lengths = lm_batch(mlm_model, input_ids, attention_mask)
    pos = sorted(int(p) for p in positions)
    if not pos:
        raise ValueError("positions is empty: give at least one position to fill")
    if len(set(pos)) != len(pos):
        raise ValueError(f"positions must be distinct, got {list(positions)}")
    shortest = int(lengths.min())
    if pos[0] < 0 or pos[-1] >= shortest:
        raise ValueError(
            f"positions must lie in [0, {shortest}) (the real tokens of the shortest sequence), got {pos}"
        )
    where = torch.tensor(pos, device=ids.device)
    batch = torch.arange(ids.size(0), device=ids.device)
    x = ids.clone()
    x[:, where] = mask_token_id
    left = torch.ones(ids.size(0), len(pos), dtype=torch.bool, device=ids.device)
    filled_in = []
    with evaluating(mlm_model):
        for _ in pos:
            logits = lm_logits(mlm_model, input_ids=x, attention_mask=att)[:, where]  # [B, R, V]
            if order == "left_to_right":
                pick = left.int().argmax(1)  # the first position still masked
            else:
                allowed = ban_tokens(torch.softmax(logits, -1), banned, fill=0.0)  # p of the choosable tokens
                pick = allowed.amax(-1).masked_fill(~left, -1.0).argmax(1)
            chosen = ban_tokens(logits[batch, pick], banned)
            x[batch, where[pick]] = next_tokens(chosen, temperature=temperature, generator=generator)
            left[batch, pick] = False
            filled_in.append(where[pick])
    out = x.cpu()[0] if one else x.cpu()
    return (out, torch.stack(filled_in, 1).cpu()) if return_order else out


def sample_causal(
    causal_model: nn.Module,
    prompt_ids: Tensor,
    n_tokens: int,
    *,
    temperature: float = 1.0,
    generator: torch.Generator | None = None,
    eos_token_id: int | None = None,
    banned_ids: Sequence[int] = (),
) -> Tensor:
    r"""Continue each prompt by up to ``n_tokens`` tokens, drawn one at a time from
    :math:`p(x_t \mid x_{<t})` by :func:`next_tokens` (``temperature=0``: greedy, the rule of
    :func:`~course_lib.analysis.cloze.generate_greedy` when the specials are banned).

    ``prompt_ids``: ``[seq_len]`` or ``[batch, seq_len]`` (prompts of one length, no padding).
    With ``eos_token_id`` a sequence that has written it continues with ``eos_token_id``
    only, and sampling stops once every sequence has. Returns prompt and continuation
    (the shape of the input plus the new columns) on the CPU.
    """
    need_causal(causal_model, "sample_causal")
    if n_tokens < 1:
        raise ValueError(f"n_tokens must be positive, got {n_tokens}")
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0 (0 = greedy), got {temperature}")
    one = isinstance(prompt_ids, Tensor) and prompt_ids.dim() == 1
    x, _, _ = lm_batch(causal_model, prompt_ids[None] if one else prompt_ids, None)
    limit = causal_model.config.max_position_embeddings
    if x.size(1) + n_tokens > limit:
        raise ValueError(
            f"prompt length {x.size(1)} + n_tokens {n_tokens} exceeds the model's "
            f"max_position_embeddings={limit}"
        )
    banned = ids_list(causal_model, banned_ids, "banned_ids", allow_empty=True)
    if eos_token_id is not None:
        eos_token_id = vocab_id(causal_model, eos_token_id, "eos_token_id")
    done = torch.zeros(x.size(0), dtype=torch.bool, device=x.device)
    with evaluating(causal_model):
        for _ in range(n_tokens):
            logits = ban_tokens(lm_logits(causal_model, input_ids=x)[:, -1], banned)
            token = next_tokens(logits, temperature=temperature, generator=generator)
            if eos_token_id is not None:
                token = token.masked_fill(done, eos_token_id)
                done |= token == eos_token_id
            x = torch.cat([x, token[:, None]], 1)
            if eos_token_id is not None and bool(done.all()):
                break
    return x.cpu()[0] if one else x.cpu()


# ---------------------------------------------------------------------------------------
# 5. The [MASK] discrepancy
# ---------------------------------------------------------------------------------------


def mask_discrepancy(
    mlm_model: nn.Module,
    input_ids: Tensor,
    *,
    mask_token_id: int,
    special_ids: Sequence[int] = (),
    mask_share: float = MLM_PROBABILITY,
    generator: torch.Generator | None = None,
    attention_mask: Tensor | None = None,
) -> dict[str, float | int | Tensor]:
    r"""How much ``[MASK]`` elsewhere in the input moves the vectors of the tokens that stay.

    In each sequence the candidates are the real tokens not in ``special_ids`` (nor
    ``[MASK]``); ``round(mask_share * n)`` of its ``n`` candidates, drawn uniformly with
    ``generator`` and at most ``n - 1``, become ``[MASK]`` (only ``[MASK]``: no random or kept
    tokens as in BERT's 80/10/10). The model reads the clean input (what fine-tuning sees)
    and the masked one (what pretraining sees). At every candidate that was *not* masked,
    the final layer's vectors :math:`h` (the encoder's output, before the LM head) of the two
    runs are compared:

    * ``cosine``: mean of :math:`\cos(h^{clean}_t, h^{masked}_t)`,
    * ``l2_distance``: mean of :math:`\lVert h^{clean}_t - h^{masked}_t \rVert_2`,
    * ``top1_changed``: share of those positions whose most likely token under the LM head
      differs between the two runs,

    each a mean over all compared positions of the batch, and the same per sequence in
    ``cosine_per_sequence``, ``l2_distance_per_sequence``, ``top1_changed_per_sequence``
    (``[batch]``, NaN for a sequence with nothing compared); ``n_compared`` and ``n_masked``
    count positions, and ``masked`` (``[batch, seq_len]``, bool) marks the masked ones.
    Specials and padding are neither masked nor compared.
    """
    need_masked(mlm_model, "mask_discrepancy")
    if not 0.0 <= mask_share < 1.0:
        raise ValueError(f"mask_share must lie in [0, 1), got {mask_share}")
    mask_token_id = vocab_id(mlm_model, mask_token_id, "mask_token_id")
    ids, att, _ = lm_batch(mlm_model, input_ids, attention_mask)
    skip = torch.tensor([*ids_list(mlm_model, special_ids, "special_ids", allow_empty=True), mask_token_id])
    candidate = (att.bool() & ~torch.isin(ids, skip.to(ids.device))).cpu()
    n = candidate.sum(1)
    k = torch.minimum(torch.round(n * mask_share).long(), (n - 1).clamp(min=0))
    # a uniform random subset of k candidates per row: the k smallest of random keys
    keys = torch.rand(ids.shape, generator=generator).masked_fill(~candidate, 2.0)
    rank = keys.argsort(1).argsort(1)
    masked = (candidate & (rank < k[:, None])).to(ids.device)
    compared = candidate.to(ids.device) & ~masked
    if not bool(compared.any()):
        raise ValueError("no token to compare: every sequence lacks a real, non-special token")
    with evaluating(mlm_model):
        runs = []
        for x in (ids, ids.masked_fill(masked, mask_token_id)):
            out = mlm_model(input_ids=x, attention_mask=att, output_hidden_states=True)
            runs.append((out.hidden_states[-1].float(), out.mlm_logits.argmax(-1)))
    (h_clean, top_clean), (h_masked, top_masked) = runs
    cos = F.cosine_similarity(h_clean, h_masked, dim=-1)
    dist = (h_clean - h_masked).norm(dim=-1)
    changed = (top_clean != top_masked).float()
    w = compared.float()
    per_seq = w.sum(1)

    def per_sequence(v: Tensor) -> Tensor:
        return ((v * w).sum(1) / per_seq).cpu()  # NaN where nothing is compared (0 / 0)

    total = w.sum()
    return {
        "cosine": float((cos * w).sum() / total),
        "l2_distance": float((dist * w).sum() / total),
        "top1_changed": float((changed * w).sum() / total),
        "cosine_per_sequence": per_sequence(cos),
        "l2_distance_per_sequence": per_sequence(dist),
        "top1_changed_per_sequence": per_sequence(changed),
        "n_compared": int(total),
        "n_masked": int(masked.sum()),
        "masked": masked.cpu(),
    }


# ---------------------------------------------------------------------------------------
# 6. One hidden token: which context can each model use?
# ---------------------------------------------------------------------------------------


def cloze_log_probs(
    model: nn.Module,
    input_ids: Tensor,
    positions: Sequence[tuple[int, int]] | Tensor,
    *,
    attention_mask: Tensor | None = None,
    mask_token_id: int | None = None,
    direction: str = "left_to_right",
    chunk_size: int = 256,
) -> Tensor:
    r"""``[n, vocab]``: the model's log-probabilities for the token at each of the ``n``
    ``positions`` (``(row, column)`` pairs into ``input_ids``), from the context it can use.

    * **Masked LM** (needs ``mask_token_id``): that one position becomes ``[MASK]``, every
      other token stays: :math:`\log p(x_t \mid x_{\setminus t})`, both sides (one masked
      copy of the row per position, run in batches of ``chunk_size``).
    * **Causal LM**, ``direction="left_to_right"``: :math:`\log p(x_t \mid x_{<t})` from the
      logits at ``t - 1`` (``t >= 1``); what stands at ``t`` and after it is never read.
    * **Causal LM**, ``direction="right_to_left"`` (a model trained on reversed rows,
      ``pretrain_bert(causal=True, direction="right_to_left")``): each row's real tokens are
      reversed (:func:`~course_lib.objectives.pairs.reverse_sequences`) and the model
      predicts :math:`\log p(x_t \mid x_{>t})`; ``t`` must not be the row's last real token.
    """
    ids, att, lengths = lm_batch(model, input_ids, attention_mask)
    pos = torch.as_tensor(positions, dtype=torch.long).reshape(-1, 2).to(ids.device)
    if pos.numel() == 0:
        raise ValueError("positions is empty: give at least one (row, column) pair")
    r, c = pos[:, 0], pos[:, 1]
    if bool(((r < 0) | (r >= ids.size(0))).any()):
        raise ValueError(f"a row of positions lies outside the batch of {ids.size(0)} sequences")
    if bool(((c < 0) | (c >= lengths[r.clamp(0, ids.size(0) - 1)])).any()):
        raise ValueError("a column of positions is not a real token of its row (padding or beyond the row)")
    if not is_causal(model):
        mask_token_id = vocab_id(model, mask_token_id, "mask_token_id")
        if chunk_size < 1:
            raise ValueError(f"chunk_size must be positive, got {chunk_size}")
        chunks = _masked_copies(model, ids, att, r, c, mask_token_id, chunk_size)
        return torch.cat([log_probs for _, _, log_probs in chunks]).cpu()
    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be one of {DIRECTIONS}, got {direction!r}")
    if direction == "right_to_left":
        ids = reverse_sequences({"input_ids": ids, "attention_mask": att})["input_ids"]
        c = lengths[r] - 1 - c  # the same token's column in the reversed row
    if bool((c < 1).any()):
        side = "first" if direction == "left_to_right" else "last"
        raise ValueError(
            f"a causal LM reading {direction} cannot predict a row's {side} token: it has no context"
        )
    rows = torch.unique(r)
    with evaluating(model):
        logits = lm_logits(model, input_ids=ids[rows], attention_mask=att[rows])
    where = torch.searchsorted(rows, r.contiguous())
    return torch.log_softmax(logits[where, c - 1], -1).cpu()


def product_of_experts(*log_probs: Tensor) -> Tensor:
    r"""The normalised product of distributions given as log-probabilities over the last
    axis: :math:`\log \mathrm{softmax}\big(\sum_k \log p_k\big)`.

    With a left-to-right and a right-to-left LM's one-sided predictions for the same token,
    this is a *shallow* use of both sides: each model read only its own side, in every layer,
    and the two meet only in this last multiplication (as ELMo's two LMs meet only where their
    top vectors are concatenated). BERT's layers mix both sides from the first one.
    """
    if len(log_probs) < 2:
        raise ValueError("product_of_experts needs at least two distributions")
    shape = log_probs[0].shape
    if any(lp.shape != shape for lp in log_probs):
        raise ValueError(
            f"the distributions must have one shape, got {[tuple(lp.shape) for lp in log_probs]}"
        )
    return torch.log_softmax(torch.stack(log_probs).sum(0), -1)


# ---------------------------------------------------------------------------------------
# 7. Two-token names: the candidate grid and the joint of both models over it
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class NamePairs:
    """The candidate grid of two-token names for :func:`pair_joint`.

    ``rows`` / ``cols``: token ids of the names' first / second words (each once, in order of
    first appearance), ``row_words`` / ``col_words`` the words; ``consistent``: the
    ``(row, column)`` cells that are real names; ``names``: ``(first, second)`` words of each
    name kept (both words single tokens of the tokenizer), ``cells[k]`` its cell.
    """

    rows: list[int]
    cols: list[int]
    row_words: list[str]
    col_words: list[str]
    names: list[tuple[str, str]]
    cells: list[tuple[int, int]]

    @property
    def consistent(self) -> set[tuple[int, int]]:
        return set(self.cells)


def _single_token(tokenizer, word: str) -> int | None:
    ids = tokenizer.encode(word, add_special_tokens=False).ids
    return ids[0] if len(ids) == 1 else None


def name_pairs(tokenizer, names: Sequence[tuple[str, str]]) -> NamePairs:
    """The grid of :class:`NamePairs` for ``names`` (``(first, second)`` words, e.g.
    :func:`~course_lib.data.tasks.two_word_cities`), keeping the names whose two words are
    each one token of ``tokenizer``."""
    rows: list[int] = []
    cols: list[int] = []
    row_words: list[str] = []
    col_words: list[str] = []
    kept: list[tuple[str, str]] = []
    cells: list[tuple[int, int]] = []
    for first, second in names:
        a, b = _single_token(tokenizer, first), _single_token(tokenizer, second)
        if a is None or b is None:
            continue
        if a not in rows:
            rows.append(a)
            row_words.append(first)
        if b not in cols:
            cols.append(b)
            col_words.append(second)
        cell = (rows.index(a), cols.index(b))
        if cell not in cells:
            kept.append((first, second))
            cells.append(cell)
    if not cells:
        raise ValueError("no name has both words as single tokens of this tokenizer")
    return NamePairs(rows, cols, row_words, col_words, kept, cells)


def find_name(input_ids: Sequence[int], pairs: NamePairs) -> tuple[int, int] | None:
    """``(position, k)`` of the first two adjacent tokens of ``input_ids`` that form name ``k``
    of ``pairs``, or ``None``."""
    ids = [int(i) for i in input_ids]
    wanted = {(pairs.rows[r], pairs.cols[c]): k for k, (r, c) in enumerate(pairs.cells)}
    for t in range(len(ids) - 1):
        k = wanted.get((ids[t], ids[t + 1]))
        if k is not None:
            return t, k
    return None


def name_joints(
    model: nn.Module, tokenizer, texts: Sequence[str], pairs: NamePairs, *, mask_token_id: int | None = None
) -> dict[str, float | int | list]:
    r"""The joint of the two tokens of a name in each of ``texts``, over the grid of
    ``pairs``, by :func:`pair_joint` (a masked LM: both tokens masked, the outer product; a
    causal LM: the chain rule from the left context), and what it says:

    * ``inconsistent_mass``: mean over texts of the share of the grid's mass on pairs that
      are no name (:func:`inconsistent_mass`),
    * ``top_is_name``: share of texts whose most likely cell is a name,
    * ``top_is_right``: share whose most likely cell is the text's own name,
    * ``grid_mass``: mean of the grid's total probability (how much of the model's joint over
      the whole vocabulary the grid holds),
    * ``grids`` (normalised, one per text), ``names`` (the index of each text's name),
      ``n`` texts scored. Texts without a name of ``pairs`` are skipped.
    """
    consistent = pairs.consistent
    grids, which, incons, top_name, top_right, mass = [], [], [], [], [], []
    for text in texts:
        ids = tokenizer.encode(text).ids
        found = find_name(ids, pairs)
        if found is None:
            continue
        t, k = found
        joint = pair_joint(
            model, torch.tensor(ids), (t, t + 1), pairs.rows, pairs.cols, mask_token_id=mask_token_id
        )
        grid = normalise_grid(joint)
        top = divmod(int(grid.argmax()), grid.size(1))
        grids.append(grid)
        which.append(k)
        incons.append(inconsistent_mass(joint, consistent))
        top_name.append(top in consistent)
        top_right.append(top == pairs.cells[k])
        mass.append(float(joint.sum()))
    n = len(grids)
    if n == 0:
        raise ValueError("no text holds a name of the grid")
    return {
        "inconsistent_mass": sum(incons) / n,
        "top_is_name": sum(top_name) / n,
        "top_is_right": sum(top_right) / n,
        "grid_mass": sum(mass) / n,
        "per_text_inconsistent_mass": incons,
        "grids": grids,
        "names": which,
        "n": n,
    }
