r"""``course bench``: one pretraining step of course_lib's models against Hugging Face's.

What is measured, in one run on one device (``--device``, default
:func:`course_lib.device.get_device`):

1. **A pair per model.** For ``bert`` (:class:`~course_lib.models.bert.BertForPreTraining`),
   ``albert`` (:class:`~course_lib.models.albert.AlbertForPreTraining`) and ``xlnet``
   (:class:`~course_lib.models.xlnet.XLNetLMHeadModel`), a ``transformers`` model of the same
   name and size is built with random weights (Hugging Face's SDPA attention where it has one)
   and course_lib's model is copied from it with ``from_hf``: the same weights on both sides.
   Before anything is timed, both compute the loss and the logits of the benchmark batch in
   eval mode (float32); the largest absolute difference is printed, and a difference above
   ``1e-4`` stops the run (:class:`ParityError`): a fast model that computes something else
   would be no result. The **gradients** are compared too (:func:`check_gradients`: forward
   and backward in eval mode, every parameter's gradient within ``1e-3`` of its tensor's
   largest entry): a fast backward pass that computes something else is no result either.
2. **A training step** = forward with labels, backward, ``AdamW.step()``, ``zero_grad()``, in
   training mode (dropout on, as in pretraining). course_lib's step is the one its training
   code runs (:data:`COURSE_STEP_OPTIONS`): BERT's and ALBERT's MLM head only at the labelled
   positions (``masked_only=True``, as ``pretraining_loss`` trains; the same loss and gradients,
   checked); Hugging Face's models compute the logits at every position. BERT: masked-LM labels on 15% of the
   positions (those replaced by a mask id) plus a next-sentence label; ALBERT the same with a
   sentence-order label; XLNet its own objective: a random factorisation order per sequence,
   the last 15% of each order predicted from the two-stream attention (``perm_mask`` and
   ``target_mapping``, labels ``[batch, num_predict]``). Both sides get the same tensors.
   After two warm-up steps each, the steps alternate (course, HF, matmul peak, course, HF,
   peak, ...) so that a change of machine load hits all three alike; the **median** seconds
   per step is reported with its spread (interquartile range and min-max of each side, and
   the interquartile range of the paired per-round ratios), tokens per second
   (``batch * seq / step``) and the ratio course / HF of the medians (below 1: course_lib is
   faster). ``--dtype bf16`` runs the forward pass of both under ``torch.autocast``.
3. **Achieved FLOP/s.** :func:`training_flops` counts the matrix-product FLOPs of a step
   analytically (the formula is in its docstring; it agrees with
   :class:`torch.utils.flop_counter.FlopCounterMode`, see :func:`count_flops`), divided by the
   measured step time. :func:`matmul_peak` measures what the device reaches on large square
   matrix products (best of several) once before the models are built, and
   :func:`time_interleaved` times a call of such products between every pair of steps: each
   side's FLOP/s is printed as a fraction of the median of *those* interleaved peaks, which
   ran under the same load as the steps.
   The same FLOP count is used for both sides: it is the work of the algorithm, not of either
   implementation (Hugging Face's XLNet, for one, projects the relative encodings once per
   sequence where one projection per batch suffices; that extra work is not counted).
4. **Output** (:func:`describe_run`): one line naming the machine (CPU,
   :func:`course_lib.device.describe_device`, torch and transformers versions, threads, date),
   the CPU, its thread count and the load average before and after, the shape, the matmul
   peak, the parity checks, then a Markdown table; ``--json PATH`` also writes every number
   (and every step time) as JSON, ``--markdown PATH`` the printed report as Markdown (the
   training appendix includes the one in ``book/generated/bench.md``, never a typed table).

On a machine that other work keeps busy the step times scatter (the JSON keeps every one);
compare ratios from one run, not times across runs. Times are measurements, never
assertions: the test suite runs this on tiny sizes and checks only that it runs, that the
two sides agree and that the FLOP formula is right.

    course bench [--batch 16] [--seq 128] [--layers 4] [--hidden 256] [--heads 4]
                 [--repeats 10] [--models bert,albert,xlnet] [--threads N]
                 [--device cpu] [--dtype fp32|bf16] [--json PATH] [--markdown PATH]
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import json
import math
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch
from torch import Tensor, nn

from ..checkpoints import atomic_write_text
from ..device import describe_device, get_device
from ..models.albert import AlbertConfig, AlbertForPreTraining
from ..models.bert import BertConfig, BertForPreTraining
from ..models.xlnet import XLNetConfig, XLNetLMHeadModel

__all__ = [
    "MODELS",
    "DTYPES",
    "PARITY_TOL",
    "ParityError",
    "BenchShape",
    "build_pair",
    "make_batch",
    "check_parity",
    "check_gradients",
    "spread",
    "load_average",
    "training_flops",
    "count_flops",
    "matmul_peak",
    "time_interleaved",
    "run",
    "format_table",
    "describe_run",
    "machine_line",
    "register",
    "main",
]

MODELS = ("bert", "albert", "xlnet")
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
PARITY_TOL = 1e-4  # max |course - HF| of the loss and of the logits (float32, eval mode)
FLOOR_FRACTION = 1e-4  # a gradient tensor's scale is at least this share of the model's largest entry
GRAD_TOL = 1e-3  # max |g_course - g_hf| / max |g_hf| over every parameter tensor (float32, eval mode)
MASK_FRACTION = 0.15  # share of positions with an MLM label / of XLNet's order that is predicted
MASK_ID = 4  # the id that replaces the masked positions (any id of the vocabulary would do)
FIRST_ID = 5  # random token ids are drawn from [FIRST_ID, vocab): the ids below are "special"
GENERATED_NOTE = "<!-- generated by `course bench --markdown`: do not edit, run it again -->\n\n"
# how course_lib's training step calls each model: BERT's and ALBERT's MLM loss runs the head
# at the labelled positions only (course_lib.objectives.losses.pretraining_loss; the same loss and
# gradients, tested); Hugging Face's models have no such option
COURSE_STEP_OPTIONS: dict[str, dict[str, Any]] = {
    "bert": {"masked_only": True},
    "albert": {"masked_only": True},
}
WARMUP = 2  # untimed steps per side (the first step also allocates AdamW's state)


class ParityError(RuntimeError):
    """course_lib's model and Hugging Face's disagree on the benchmark batch."""


@dataclass(frozen=True)
class BenchShape:
    """The size of the benchmarked models and of the batch."""

    batch: int = 16
    seq: int = 128
    layers: int = 4
    hidden: int = 256
    heads: int = 4
    intermediate: int | None = None  # None: 4 * hidden
    vocab: int = 8000

    @property
    def d_ff(self) -> int:
        return 4 * self.hidden if self.intermediate is None else self.intermediate

    @property
    def tokens(self) -> int:
        return self.batch * self.seq

    @property
    def num_predict(self) -> int:
        """Targets per sequence: the masked positions (BERT, ALBERT) or XLNet's predicted tokens."""
        return max(1, round(MASK_FRACTION * self.seq))

    def validate(self) -> None:
        for name in ("batch", "seq", "layers", "hidden", "heads", "vocab", "d_ff"):
            if getattr(self, name) < 1:
                raise ValueError(f"--{name} must be positive, got {getattr(self, name)}")
        if self.hidden % self.heads:
            raise ValueError(f"--hidden {self.hidden} must be divisible by --heads {self.heads}")
        if self.hidden % 2:
            raise ValueError(f"--hidden {self.hidden} must be even (XLNet's sinusoids)")
        if self.seq < 2:
            raise ValueError(f"--seq must be at least 2 (two segments), got {self.seq}")
        if self.vocab <= FIRST_ID:
            raise ValueError(f"the vocabulary must hold more than {FIRST_ID} ids, got {self.vocab}")


# ---------------------------------------------------------------------------------------
# The pairs and the batch
# ---------------------------------------------------------------------------------------


def _hf_config(name: str, shape: BenchShape) -> Any:
    import transformers

    s = shape
    encoder = dict(  # what BERT's and ALBERT's configurations share
        vocab_size=s.vocab,
        hidden_size=s.hidden,
        num_hidden_layers=s.layers,
        num_attention_heads=s.heads,
        intermediate_size=s.d_ff,
        max_position_embeddings=max(512, s.seq),
        attn_implementation="sdpa",
    )
    if name == "bert":
        return transformers.BertConfig(**encoder)
    if name == "albert":
        # E < H: the factorisation is measured (128 at H = 256)
        return transformers.AlbertConfig(embedding_size=max(8, s.hidden // 2), **encoder)
    if name == "xlnet":
        return transformers.XLNetConfig(
            vocab_size=s.vocab, d_model=s.hidden, n_layer=s.layers, n_head=s.heads, d_inner=s.d_ff
        )
    raise ValueError(f"unknown model {name!r}; choose from {', '.join(MODELS)}")


def build_pair(name: str, shape: BenchShape, *, seed: int = 0) -> tuple[nn.Module, nn.Module]:
    """``(course_lib model, transformers model)`` of ``name`` with the same random weights (CPU).

    The ``transformers`` model is initialised by its own code (seeded), course_lib's copied
    from it with ``from_hf``; both are returned in training mode.
    """
    import transformers

    hf_cls, ours_cls = {
        "bert": (transformers.BertForPreTraining, BertForPreTraining),
        "albert": (transformers.AlbertForPreTraining, AlbertForPreTraining),
        "xlnet": (transformers.XLNetLMHeadModel, XLNetLMHeadModel),
    }[name]
    config = _hf_config(name, shape)
    torch.manual_seed(seed)
    hf = hf_cls(config)
    ours = ours_cls.from_hf(hf)
    n_ours, n_hf = _num_params(ours), _num_params(hf)
    if n_ours != n_hf:
        raise ParityError(f"{name}: course_lib has {n_ours:,} parameters, Hugging Face {n_hf:,}")
    return ours.train(), hf.train()


def _num_params(model: nn.Module) -> int:
    """Parameters counted once (tied matrices once)."""
    return sum(p.numel() for p in model.parameters())


def make_batch(name: str, shape: BenchShape, *, seed: int = 0) -> dict[str, Tensor]:
    """The keyword arguments of one pretraining step of ``name`` (CPU tensors, both sides take them).

    BERT / ALBERT: ``input_ids`` with ``num_predict`` positions per row replaced by
    ``MASK_ID``, two segments (``token_type_ids``), ``labels`` (the original ids there, -100
    elsewhere) and the NSP / SOP label. XLNet: ``input_ids``, a random factorisation order per
    row whose last ``num_predict`` positions are the targets: ``perm_mask`` ``[b, s, s]``
    (``perm_mask[b, i, j] = 1``: position ``i`` may not see ``j``; a target is hidden from
    itself and every position not after it in the order), ``target_mapping`` ``[b, P, s]``
    and ``labels`` ``[b, P]``.
    """
    g = torch.Generator().manual_seed(seed)
    b, s, k = shape.batch, shape.seq, shape.num_predict
    ids = torch.randint(FIRST_ID, shape.vocab, (b, s), generator=g)
    order = torch.rand(b, s, generator=g).argsort(dim=1)  # step -> position, per row
    if name in ("bert", "albert"):
        chosen = torch.zeros(b, s, dtype=torch.bool).scatter_(1, order[:, :k], True)
        pair_label = torch.randint(0, 2, (b,), generator=g)
        return {
            "input_ids": ids.masked_fill(chosen, MASK_ID),
            "attention_mask": torch.ones(b, s, dtype=torch.long),
            "token_type_ids": (torch.arange(s) >= s // 2).long().expand(b, s).contiguous(),
            "labels": ids.masked_fill(~chosen, -100),
            ("next_sentence_label" if name == "bert" else "sentence_order_label"): pair_label,
        }
    if name == "xlnet":
        rank = torch.empty_like(order).scatter_(1, order, torch.arange(s).expand(b, s).contiguous())
        is_target = rank >= s - k
        perm_mask = (is_target[:, None, :] & (rank[:, None, :] >= rank[:, :, None])).float()
        targets = order[:, s - k :]  # [b, P]: positions of the predicted tokens
        return {
            "input_ids": ids,
            "perm_mask": perm_mask,
            "target_mapping": nn.functional.one_hot(targets, s).float(),
            "labels": ids.gather(1, targets),
        }
    raise ValueError(f"unknown model {name!r}; choose from {', '.join(MODELS)}")


def _logits(out: Any) -> list[Tensor]:
    names = ("prediction_logits", "seq_relationship_logits", "sop_logits", "logits")
    return [getattr(out, n) for n in names if getattr(out, n, None) is not None]


def check_parity(
    name: str, ours: nn.Module, hf: nn.Module, batch: Mapping[str, Tensor], *, tol: float = PARITY_TOL
) -> dict[str, float]:
    """Max |course - HF| of the loss and of every logits tensor on ``batch`` (eval mode, float32).

    Raises :class:`ParityError` when either exceeds ``tol``; the models are left in training
    mode.
    """
    ours.eval()
    hf.eval()
    try:
        with torch.no_grad():
            a, b = ours(**batch), hf(**batch)
    finally:
        ours.train()
        hf.train()
    loss = (a.loss.float() - b.loss.float()).abs().item()
    pairs = list(zip(_logits(a), _logits(b), strict=True))
    if not pairs:
        raise ParityError(f"{name}: no logits to compare")
    logits = max((x.float() - y.float()).abs().max().item() for x, y in pairs)
    diffs = {"loss": loss, "logits": logits}
    bad = {k: v for k, v in diffs.items() if not v <= tol}  # NaN is bad too
    if bad:
        raise ParityError(
            f"{name}: course_lib and Hugging Face disagree: "
            + ", ".join(f"max |diff| of the {k} {v:.3g}" for k, v in bad.items())
            + f" > {tol:g}"
        )
    return diffs


def check_gradients(
    name: str,
    ours: nn.Module,
    hf: nn.Module,
    batch: Mapping[str, Tensor],
    *,
    tol: float = GRAD_TOL,
    **options: Any,
) -> float:
    """Largest relative difference of course_lib's and Hugging Face's parameter gradients.

    Both run forward and backward on ``batch`` in eval mode (float32, no dropout), course_lib
    with ``options`` (its training step's, :data:`COURSE_STEP_OPTIONS`). Hugging
    Face's gradients are then mapped onto course_lib's parameter names by the same code that
    copied the weights: a copy of the HF model whose *weights are its gradients* is loaded with
    ``from_hf`` (the name maps, transposes and fused projections are linear, so they map
    gradients as they map weights). Per tensor, ``max |g_course - g_hf| / max |g_hf|`` (the
    denominator at least ``1e-4`` of the largest gradient entry of the model); the largest over
    all tensors is returned, :class:`ParityError` when it exceeds ``tol``.
    Gradients are cleared again and the models left in training mode.
    """
    import copy

    ours.eval()
    hf.eval()
    try:
        ours.zero_grad(set_to_none=True)
        hf.zero_grad(set_to_none=True)
        loss_ours = ours(**batch, **options).loss  # course_lib's step, as timed (COURSE_STEP_OPTIONS)
        loss_hf = hf(**batch).loss
        loss_diff = (loss_ours.detach().float() - loss_hf.detach().float()).abs().item()
        if not loss_diff <= PARITY_TOL:
            raise ParityError(
                f"{name}: the training step's losses differ by {loss_diff:.3g} (> {PARITY_TOL:g})"
            )
        loss_ours.backward()
        loss_hf.backward()
        as_weights = copy.deepcopy(hf).cpu()
        with torch.no_grad():  # parameters() yields a tied matrix once, in the same order on both
            for p, q in zip(as_weights.parameters(), hf.parameters(), strict=True):
                p.copy_(q.grad if q.grad is not None else torch.zeros_like(q))
                p.grad = None
        mapped = dict(type(ours).from_hf(as_weights).named_parameters())
        # a gradient that is zero in exact arithmetic (a key's bias: softmax ignores a shift) is
        # rounding noise on both sides: it is measured against a floor, not its own size
        floor = FLOOR_FRACTION * max(t.abs().max().item() for t in mapped.values())
        worst, where = 0.0, ""
        for pname, p in ours.named_parameters():
            g = p.grad if p.grad is not None else torch.zeros_like(p)
            ref = mapped[pname].to(g.device)
            diff = (g - ref).abs().max().item()
            rel = diff / max(ref.abs().max().item(), floor, 1e-30)
            if not rel <= worst:  # NaN too
                worst, where = rel, pname
    finally:
        ours.zero_grad(set_to_none=True)
        hf.zero_grad(set_to_none=True)
        ours.train()
        hf.train()
    if not worst <= tol:
        raise ParityError(
            f"{name}: course_lib's and Hugging Face's gradients disagree: {where} differs by "
            f"{worst:.3g} of its largest entry (> {tol:g})"
        )
    return worst


# ---------------------------------------------------------------------------------------
# FLOPs
# ---------------------------------------------------------------------------------------


def training_flops(
    config: BertConfig | XLNetConfig, batch: int, seq: int, *, num_predict: int | None = None
) -> int:
    r"""Matrix-product FLOPs of one training step (forward + backward) of a pretraining model.

    A product with :math:`m` multiply-adds costs :math:`2m` FLOPs forward and :math:`4m`
    backward (one product for the gradient of each input), :math:`6m` in all; :math:`4m` when
    one input is a constant (the relative sinusoids, XLNet's ``target_mapping``), whose
    gradient is not computed. Elementwise work (softmax, LayerNorm, GELU, dropout, the
    optimizer) and embedding look-ups are not counted, as in
    :class:`torch.utils.flop_counter.FlopCounterMode`. With :math:`N = b s` tokens,
    :math:`h` the hidden width, :math:`f` the feed-forward width, :math:`L` the layers,
    :math:`V` the vocabulary:

    * **BERT** (``BertForPreTraining``; the MLM head at the :math:`P` labelled positions per
      sequence, as course_lib's training step computes it, ``masked_only=True`` as in
      :func:`course_lib.objectives.losses.pretraining_loss`: the loss needs no other logits. Hugging
      Face computes the head at every position; that extra work is not counted, as its
      XLNet's is not)

      .. math::

         6NL(4h^2 + 2hf) + 6bP(h^2 + hV) + 12\,b\,L\,s^2 h + 6b(h^2 + 2h)

      (Q, K, V, O and the feed-forward network per layer; the MLM transform and decoder;
      :math:`QK^\top` and :math:`AV`, :math:`2s^2h` multiply-adds per layer and sequence; the
      pooler and the NSP head on [CLS]).
    * **ALBERT**: the same with the embedding projection :math:`E \to h` and the MLM head
      :math:`h \to E \to V`; sharing saves parameters, not work, so all :math:`L` layers
      count (times ``inner_group_num``):

      .. math::

         6N\big[Eh + L'(4h^2 + 2hf)\big] + 6bP(hE + EV) + 12\,b\,L' s^2 h + 6b(h^2 + 2h)

    * **XLNet** (``XLNetLMHeadModel`` with ``target_mapping``, :math:`P` = ``num_predict``
      targets per sequence). A content-stream layer is BERT's with the relative position
      term, :math:`(q + v)^\top W_r r` against :math:`2s` encodings, which makes :math:`4s^2h`
      multiply-adds of attention per sequence: :math:`C = 6N(4h^2 + 2hf) + 24\,b\,s^2h`. A
      query-stream layer runs Q, O and the feed-forward network at the :math:`P` targets, the
      same attention at all :math:`s` positions where ``target_mapping`` places the queries,
      and the two products with ``target_mapping`` (a constant input, :math:`bPsh` each):
      :math:`Q = 6bP(2h^2 + 2hf) + 24\,b\,s^2h + 8\,bPsh`. Each layer also projects the
      :math:`2s` sinusoids by :math:`W_r`, once per batch (a constant input): :math:`R = 8sh^2`.
      The loss reads the query stream only, so the last layer's content stream gets a
      backward pass only through K and V (which the query stream reads); its Q, O,
      feed-forward network and attention run forward only. With the tied LM head at the
      targets:

      .. math::

         L(Q + R) + (L - 1)\,C + \big[12Nh^2 + 2N(2h^2 + 2hf) + 8\,b\,s^2h\big] + 6\,bPhV

    Measured by :func:`count_flops` the formula is exact where attention runs through
    ``bmm``; FlopCounterMode counts a flash-attention backward as five products (it recomputes
    the scores) where this formula counts four (a percent or so at the test's sizes). Hugging
    Face's XLNet does more (:math:`W_r` once per sequence) than counted here.

    Without ``num_predict`` 15% of the positions are labelled or predicted (as in ``course bench``).
    """
    b, s = batch, seq
    n = b * s
    if isinstance(config, BertConfig):  # AlbertConfig too
        h, f, v = config.hidden_size, config.intermediate_size, config.vocab_size
        layers = config.num_hidden_layers
        per_token = layers * (4 * h * h + 2 * h * f)
        p = max(1, round(MASK_FRACTION * s)) if num_predict is None else num_predict
        if isinstance(config, AlbertConfig):
            e = config.embedding_size
            layers *= config.inner_group_num
            per_token = e * h + layers * (4 * h * h + 2 * h * f)
            head = h * e + e * v
        else:
            head = h * h + h * v
        mlm = 6 * b * p * head  # the MLM head at the labelled positions only
        return 6 * n * per_token + mlm + 12 * b * layers * s * s * h + 6 * b * (h * h + 2 * h)
    if isinstance(config, XLNetConfig):
        h, f, v, layers = config.d_model, config.d_inner, config.vocab_size, config.n_layer
        p = max(1, round(MASK_FRACTION * s)) if num_predict is None else num_predict
        content = 6 * n * (4 * h * h + 2 * h * f) + 24 * b * s * s * h
        query = 6 * b * p * (2 * h * h + 2 * h * f) + 24 * b * s * s * h + 8 * b * p * s * h
        positions = 8 * s * h * h
        last_content = 12 * n * h * h + 2 * n * (2 * h * h + 2 * h * f) + 8 * b * s * s * h
        return layers * (query + positions) + (layers - 1) * content + last_content + 6 * b * p * h * v
    raise TypeError(f"no FLOP formula for a {type(config).__name__}")


def _cpu_sdpa_formulas() -> dict[Any, Callable[..., int]]:
    """FlopCounterMode formulas for the CPU flash-attention kernels (torch counts the GPU ones only)."""
    from torch.utils import flop_counter

    aten = torch.ops.aten
    out: dict[Any, Callable[..., int]] = {}
    fwd = getattr(aten, "_scaled_dot_product_flash_attention_for_cpu", None)
    bwd = getattr(aten, "_scaled_dot_product_flash_attention_for_cpu_backward", None)

    def forward(query: Any, key: Any, value: Any, *args: Any, **kwargs: Any) -> int:
        return flop_counter.sdpa_flop_count(query, key, value)

    def backward(grad_out: Any, query: Any, key: Any, value: Any, *args: Any, **kwargs: Any) -> int:
        return flop_counter.sdpa_backward_flop_count(grad_out, query, key, value)

    if fwd is not None:
        out[fwd] = forward  # FlopCounterMode passes shapes in place of tensors
    if bwd is not None:
        out[bwd] = backward
    return out


def count_flops(fn: Callable[[], Any]) -> int:
    """Matrix-product FLOPs that ``fn()`` runs, by :class:`~torch.utils.flop_counter.FlopCounterMode`
    (with formulas for the CPU attention kernels, which it does not count by itself)."""
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False, custom_mapping=_cpu_sdpa_formulas()) as counter:
        fn()
    return int(counter.get_total_flops())


# ---------------------------------------------------------------------------------------
# Timing
# ---------------------------------------------------------------------------------------


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def matmul_peak(
    device: torch.device | str,
    dtype: torch.dtype = torch.float32,
    n: int = 2048,
    *,
    repeats: int = 5,
    min_time: float = 0.05,
) -> float:
    """FLOP/s of ``n x n`` by ``n x n`` matrix products on ``device``: ``2 n^3 / t``, best of ``repeats``.

    After an untimed warm-up product, one product is timed to choose how many run back to
    back in each timed call (enough for about ``min_time`` seconds, at most 1000: one product
    of a small ``n`` is too short to time); the best per-product time of ``repeats`` calls
    gives the peak.
    """
    device = torch.device(device)
    g = torch.Generator(device="cpu").manual_seed(0)
    a = torch.randn(n, n, generator=g).to(device=device, dtype=dtype)
    b = torch.randn(n, n, generator=g).to(device=device, dtype=dtype)
    out = torch.empty(n, n, device=device, dtype=dtype)

    def timed(count: int) -> float:
        _sync(device)
        t0 = time.perf_counter()
        for _ in range(count):
            torch.mm(a, b, out=out)
        _sync(device)
        return (time.perf_counter() - t0) / count

    timed(1)  # warm-up
    inner = min(1000, max(1, math.ceil(min_time / max(timed(1), 1e-9))))
    best = min(timed(inner) for _ in range(repeats))
    return 2.0 * n**3 / best


def spread(times: Sequence[float]) -> dict[str, float]:
    """Median, quartiles, minimum and maximum of ``times``."""
    ts = sorted(times)
    if len(ts) >= 2:
        q1, _, q3 = statistics.quantiles(ts, n=4, method="inclusive")
    else:
        q1 = q3 = ts[0]
    return {"median": statistics.median(ts), "q1": q1, "q3": q3, "min": ts[0], "max": ts[-1]}


def load_average() -> tuple[float, float, float] | None:
    """The 1-, 5- and 15-minute load averages (None where the OS has none)."""
    try:
        return tuple(round(x, 2) for x in os.getloadavg())  # type: ignore[return-value]
    except (AttributeError, OSError):
        return None


def _peak_call(
    device: torch.device, dtype: torch.dtype, n: int, min_time: float = 0.05
) -> tuple[Callable[[], None], int]:
    """A call of back-to-back ``n x n`` products (about ``min_time`` seconds) and its count:
    the matmul peak, timed between the training steps."""
    g = torch.Generator(device="cpu").manual_seed(0)
    a = torch.randn(n, n, generator=g).to(device=device, dtype=dtype)
    b = torch.randn(n, n, generator=g).to(device=device, dtype=dtype)
    out = torch.empty(n, n, device=device, dtype=dtype)
    torch.mm(a, b, out=out)
    _sync(device)
    t0 = time.perf_counter()
    torch.mm(a, b, out=out)
    _sync(device)
    inner = min(1000, max(1, math.ceil(min_time / max(time.perf_counter() - t0, 1e-9))))

    def call() -> None:
        for _ in range(inner):
            torch.mm(a, b, out=out)

    return call, inner


def time_interleaved(
    fns: Sequence[Callable[[], Any]],
    repeats: int,
    *,
    warmup: int = WARMUP,
    device: torch.device | None = None,
) -> list[list[float]]:
    """Seconds of each call of each function, the functions alternating (A, B, A, B, ...).

    ``warmup`` untimed rounds first; the device is synchronised around every timed call.
    Returns one list of ``repeats`` times per function.
    """
    device = torch.device("cpu") if device is None else device
    for _ in range(warmup):
        for fn in fns:
            fn()
    _sync(device)
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(repeats):
        for fn, ts in zip(fns, times):
            t0 = time.perf_counter()
            fn()
            _sync(device)
            ts.append(time.perf_counter() - t0)
    return times


def _train_step(
    model: nn.Module, batch: Mapping[str, Tensor], autocast: Callable[[], Any], **options: Any
) -> Callable[[], None]:
    """A closure running one step: forward with labels, backward, ``AdamW.step()``, ``zero_grad()``."""
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def step() -> None:
        with autocast():
            loss = model(**batch, **options).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


# ---------------------------------------------------------------------------------------
# The run
# ---------------------------------------------------------------------------------------


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_line(device: torch.device, dtype: str) -> str:
    """One line naming the machine, the software, the threads and the date."""
    import transformers

    return (
        f"{platform.node() or 'machine'}: {_cpu_name()} ({os.cpu_count()} CPUs), {describe_device(device)}, "
        f"transformers {transformers.__version__}, bench dtype {dtype}, "
        f"{_dt.datetime.now().astimezone().isoformat(timespec='seconds')}"
    )


def run(
    shape: BenchShape,
    *,
    models: Sequence[str] = MODELS,
    repeats: int = 10,
    device: torch.device | str = "cpu",
    dtype: str = "fp32",
    peak_n: int = 2048,
    log: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Build, check and time every model of ``models``; return every number (see the module docstring)."""
    import transformers

    device = torch.device(device)
    log = log or (lambda msg: None)
    torch_dtype = DTYPES[dtype]
    if dtype == "bf16":

        def autocast() -> Any:
            return torch.autocast(device_type=device.type, dtype=torch.bfloat16)

    else:
        autocast = contextlib.nullcontext
    load_before = load_average()
    peak = matmul_peak(device, torch_dtype, peak_n)
    log(f"matmul peak ({dtype}, n={peak_n}): {peak / 1e9:,.1f} GFLOP/s")
    peak_fn, peak_inner = _peak_call(device, torch_dtype, peak_n)
    peak_flops = 2.0 * peak_n**3 * peak_inner
    rows = []
    for name in models:
        ours, hf = build_pair(name, shape)
        ours.to(device)
        hf.to(device)
        batch = {k: v.to(device) for k, v in make_batch(name, shape).items()}
        diffs = check_parity(name, ours, hf, batch)
        loss_diff, logits_diff = diffs["loss"], diffs["logits"]
        log(f"{name}: parity max |diff| loss {loss_diff:.1e}, logits {logits_diff:.1e} (<= {PARITY_TOL:g})")
        options = COURSE_STEP_OPTIONS.get(name, {})
        grad_diff = check_gradients(name, ours, hf, batch, **options)
        diffs["gradients_relative"] = grad_diff
        log(
            f"{name}: gradients agree within {grad_diff:.1e} of each tensor's largest entry (<= {GRAD_TOL:g})"
        )
        flops = training_flops(ours.config, shape.batch, shape.seq, num_predict=shape.num_predict)
        # course, HF, matmul peak, course, HF, peak, ...: all three under the same load
        t_ours, t_hf, t_peak = time_interleaved(
            [_train_step(ours, batch, autocast, **options), _train_step(hf, batch, autocast), peak_fn],
            repeats,
            device=device,
        )
        m_ours, m_hf = statistics.median(t_ours), statistics.median(t_hf)
        peaks = [peak_flops / t for t in t_peak]
        peak_here = statistics.median(peaks)
        paired = [a / b for a, b in zip(t_ours, t_hf)]
        rows.append(
            {
                "model": name,
                "params": _num_params(ours),
                "course_s": m_ours,
                "hf_s": m_hf,
                "ratio": m_ours / m_hf,
                "tokens_per_s_course": shape.tokens / m_ours,
                "tokens_per_s_hf": shape.tokens / m_hf,
                "flops_per_step": flops,
                "flops_per_s_course": flops / m_ours,
                "flops_per_s_hf": flops / m_hf,
                "peak_fraction_course": flops / m_ours / peak_here,
                "peak_fraction_hf": flops / m_hf / peak_here,
                "peak_flops_per_s": peak_here,
                "peak_spread_flops_per_s": spread(peaks),
                "course_spread_s": spread(t_ours),
                "hf_spread_s": spread(t_hf),
                "ratio_spread": spread(paired),
                "parity_max_abs_diff": diffs,
                "course_times_s": t_ours,
                "hf_times_s": t_hf,
            }
        )
        log(f"{name}: course {m_ours * 1e3:.1f} ms/step, HF {m_hf * 1e3:.1f} ms/step")
        del ours, hf, batch
    return {
        "machine": machine_line(device, dtype),
        "date": _dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        "device": str(device),
        "dtype": dtype,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "threads": torch.get_num_threads(),
        "shape": {**asdict(shape), "intermediate": shape.d_ff, "num_predict": shape.num_predict},
        "repeats": repeats,
        "warmup": WARMUP,
        "matmul_peak_flops_per_s": peak,
        "matmul_peak_n": peak_n,
        "load_average_before": load_before,
        "load_average_after": load_average(),
        "cpu": _cpu_name(),
        "cpu_count": os.cpu_count(),
        "models": rows,
    }


def _range(sp: Mapping[str, float], lo: str, hi: str, scale: float, spec: str = ".1f") -> str:
    return f"{sp[lo] * scale:{spec}}-{sp[hi] * scale:{spec}}"


def format_table(result: Mapping[str, Any]) -> str:
    """The Markdown table of :func:`run`'s result."""
    head = [
        "model",
        "params",
        "course ms/step",
        "HF ms/step",
        "ratio course/HF",
        "tokens/s course",
        "tokens/s HF",
        "GFLOP/s course",
        "GFLOP/s HF",
        "% of peak course",
        "% of peak HF",
        "course ms IQR",
        "HF ms IQR",
        "course ms min-max",
        "HF ms min-max",
        "ratio IQR (paired steps)",
        "peak GFLOP/s (interleaved)",
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(["---"] + ["---:"] * (len(head) - 1)) + "|"]
    for r in result["models"]:
        cells = [
            r["model"],
            f"{r['params']:,}",
            f"{r['course_s'] * 1e3:.1f}",
            f"{r['hf_s'] * 1e3:.1f}",
            f"{r['ratio']:.2f}",
            f"{r['tokens_per_s_course']:,.0f}",
            f"{r['tokens_per_s_hf']:,.0f}",
            f"{r['flops_per_s_course'] / 1e9:,.1f}",
            f"{r['flops_per_s_hf'] / 1e9:,.1f}",
            f"{100 * r['peak_fraction_course']:.1f}",
            f"{100 * r['peak_fraction_hf']:.1f}",
            _range(r["course_spread_s"], "q1", "q3", 1e3),
            _range(r["hf_spread_s"], "q1", "q3", 1e3),
            _range(r["course_spread_s"], "min", "max", 1e3),
            _range(r["hf_spread_s"], "min", "max", 1e3),
            _range(r["ratio_spread"], "q1", "q3", 1.0, ".2f"),
            f"{r['peak_flops_per_s'] / 1e9:,.1f}",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def describe_run(result: Mapping[str, Any]) -> str:
    """The machine, threads, load, shape, peak and parity lines, then the table (Markdown)."""
    s = result["shape"]
    load = lambda la: "n/a" if la is None else " / ".join(f"{x:.2f}" for x in la)  # noqa: E731
    lines = [
        result["machine"],
        "",
        f"CPU: {result.get('cpu', '')}, {result.get('cpu_count')} CPUs, {result['threads']} torch threads; "
        f"load average (1/5/15 min) {load(result.get('load_average_before'))} before, "
        f"{load(result.get('load_average_after'))} after.",
        "",
        f"batch {s['batch']} x seq {s['seq']}, {s['layers']} layers, hidden {s['hidden']}, "
        f"{s['heads']} heads, "
        f"intermediate {s['intermediate']}, vocab {s['vocab']}; median of {result['repeats']} steps per side "
        f"after {result['warmup']} warm-up, interleaved with each other and with a matmul peak call "
        f"({result['dtype']}, n={result['matmul_peak_n']}; {result['matmul_peak_flops_per_s'] / 1e9:,.1f} "
        "GFLOP/s measured alone before).",
        "",
        "parity before timing (max |diff| loss / logits / relative gradients): "
        + ", ".join(
            f"{r['model']} {r['parity_max_abs_diff']['loss']:.1e} / {r['parity_max_abs_diff']['logits']:.1e}"
            f" / {r['parity_max_abs_diff'].get('gradients_relative', float('nan')):.1e}"
            for r in result["models"]
        ),
        "",
        format_table(result),
    ]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------------------


def _parse_models(text: str) -> list[str]:
    names = [m.strip().lower() for m in text.split(",") if m.strip()]
    unknown = [m for m in names if m not in MODELS]
    if unknown or not names:
        what = ", ".join(repr(m) for m in unknown) if unknown else "none"
        raise ValueError(f"unknown model(s) in --models: {what}; choose from {', '.join(MODELS)}")
    return list(dict.fromkeys(names))


def _cmd(args: argparse.Namespace) -> int:
    def fail(msg: str) -> int:
        print(f"course bench: {msg}", file=sys.stderr)
        return 2

    try:
        models = _parse_models(args.models)
        shape = BenchShape(
            batch=args.batch,
            seq=args.seq,
            layers=args.layers,
            hidden=args.hidden,
            heads=args.heads,
            intermediate=args.intermediate,
            vocab=args.vocab,
        )
        shape.validate()
        if args.repeats < 1:
            raise ValueError(f"--repeats must be positive, got {args.repeats}")
        if args.peak_n < 1:
            raise ValueError(f"--peak-n must be positive, got {args.peak_n}")
        if args.threads is not None and args.threads < 1:
            raise ValueError(f"--threads must be positive, got {args.threads}")
        try:
            device = get_device(args.device)
        except RuntimeError as e:  # torch.device("nonsense")
            raise ValueError(f"--device {args.device!r}: {e}") from None
        if args.dtype == "bf16" and device.type == "cuda" and not torch.cuda.is_bf16_supported():
            raise ValueError(f"--dtype bf16: {torch.cuda.get_device_name(device)} does not support bfloat16")
    except ValueError as e:
        return fail(str(e))
    try:
        import transformers  # noqa: F401
    except ImportError:
        return fail("needs the transformers package (pip install 'course-lib[test]')")
    if args.threads is not None:
        torch.set_num_threads(args.threads)

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    try:
        result = run(
            shape,
            models=models,
            repeats=args.repeats,
            device=device,
            dtype=args.dtype,
            peak_n=args.peak_n,
            log=None if args.quiet else log,
        )
    except ParityError as e:
        return fail(str(e))
    print(describe_run(result))
    if args.json is not None:
        atomic_write_text(args.json, json.dumps(result, indent=1) + "\n")
    if args.markdown is not None:
        atomic_write_text(args.markdown, GENERATED_NOTE + describe_run(result) + "\n")
    return 0


def _add_arguments(p: argparse.ArgumentParser) -> None:
    d = BenchShape()
    p.add_argument("--batch", type=int, default=d.batch, help=f"sequences per step (default {d.batch})")
    p.add_argument("--seq", type=int, default=d.seq, help=f"tokens per sequence (default {d.seq})")
    p.add_argument("--layers", type=int, default=d.layers, help=f"layers (default {d.layers})")
    p.add_argument("--hidden", type=int, default=d.hidden, help=f"hidden width (default {d.hidden})")
    p.add_argument("--heads", type=int, default=d.heads, help=f"attention heads (default {d.heads})")
    p.add_argument("--intermediate", type=int, default=None, help="feed-forward width (default 4 x hidden)")
    p.add_argument("--vocab", type=int, default=d.vocab, help=f"vocabulary size (default {d.vocab})")
    p.add_argument("--repeats", type=int, default=10, help="timed steps per side (default 10)")
    p.add_argument(
        "--models", default=",".join(MODELS), help=f"comma-separated, from {','.join(MODELS)} (default all)"
    )
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    p.add_argument(
        "--device", default=None, help="cpu, cuda, cuda:1, mps (default: course_lib.device.get_device)"
    )
    p.add_argument(
        "--dtype", choices=sorted(DTYPES), default="fp32", help="bf16: torch.autocast on both sides"
    )
    p.add_argument("--peak-n", type=int, default=2048, help="matrix size of the matmul peak (default 2048)")
    p.add_argument("--json", default=None, metavar="PATH", help="also write every number as JSON to PATH")
    p.add_argument(
        "--markdown",
        default=None,
        metavar="PATH",
        help="also write the machine, load, parity and table as Markdown to PATH (the appendix includes one)",
    )
    p.add_argument("-q", "--quiet", action="store_true", help="no progress lines on stderr")


def register(sub: Any) -> None:
    doc = __doc__ or ""
    p = sub.add_parser(
        "bench",
        help="time a pretraining step of BERT, ALBERT and XLNet against Hugging Face's",
        description=doc.split("\n\n")[0].replace("``", "") + " Same weights (checked), median of "
        "interleaved steps, achieved FLOP/s against the matmul peak.",
    )
    _add_arguments(p)
    p.set_defaults(func=_cmd)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="course bench", description=(__doc__ or "").splitlines()[0])
    _add_arguments(parser)
    return _cmd(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
