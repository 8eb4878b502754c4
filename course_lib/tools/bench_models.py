r"""What ``course bench`` measures with: the model pairs, the batch, the parity checks and the FLOP count.

:func:`build_pair` builds a ``transformers`` model of a :class:`BenchShape` with random
weights and course_lib's model copied from it (``from_hf``); :func:`make_batch` is one
pretraining batch for both (MLM + a sentence-pair label, or XLNet's permutation targets);
:func:`check_parity` and :func:`check_gradients` refuse a pair whose loss, logits or
gradients differ (:class:`ParityError`); :func:`training_flops` counts a step's matrix-product
FLOPs analytically and :func:`count_flops` with torch's ``FlopCounterMode``, to check the
formula. The runner and the report are in :mod:`course_lib.tools.bench`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from ..models.albert import AlbertConfig, AlbertForPreTraining
from ..models.bert import BertConfig, BertForPreTraining
from ..models.xlnet import XLNetConfig, XLNetLMHeadModel
from ..objectives.masking import MLM_PROBABILITY

__all__ = [
    "MODELS",
    "PARITY_TOL",
    "GRAD_TOL",
    "MASK_ID",
    "COURSE_STEP_OPTIONS",
    "ParityError",
    "BenchShape",
    "build_pair",
    "num_params",
    "make_batch",
    "check_parity",
    "check_gradients",
    "training_flops",
    "count_flops",
]

MODELS = ("bert", "albert", "xlnet")


PARITY_TOL = 1e-4  # max |course - HF| of the loss and of the logits (float32, eval mode)


FLOOR_FRACTION = 1e-4  # a gradient tensor's scale is at least this share of the model's largest entry


GRAD_TOL = 1e-3  # max |g_course - g_hf| / max |g_hf| over every parameter tensor (float32, eval mode)


MASK_FRACTION = MLM_PROBABILITY  # share of positions with an MLM label / of XLNet's order that is predicted


MASK_ID = 4  # the id that replaces the masked positions (any id of the vocabulary would do)


FIRST_ID = 5  # random token ids are drawn from [FIRST_ID, vocab): the ids below are "special"


# how course_lib's training step calls each model: BERT's and ALBERT's MLM loss runs the head
# at the labelled positions only (course_lib.objectives.losses.pretraining_loss; the same loss and
# gradients, tested); Hugging Face's models have no such option
COURSE_STEP_OPTIONS: dict[str, dict[str, Any]] = {
    "bert": {"masked_only": True},
    "albert": {"masked_only": True},
}


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
    dropout: float | None = None  # every dropout rate of both models; None: the configurations' own

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
                option = "--intermediate" if name == "d_ff" else f"--{name}"  # the option that sets it
                raise ValueError(f"{option} must be positive, got {getattr(self, name)}")
        if self.hidden % self.heads:
            raise ValueError(f"--hidden {self.hidden} must be divisible by --heads {self.heads}")
        if self.hidden % 2:
            raise ValueError(f"--hidden {self.hidden} must be even (XLNet's sinusoids)")
        if self.seq < 2:
            raise ValueError(f"--seq must be at least 2 (two segments), got {self.seq}")
        if self.dropout is not None and not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"--dropout must be in [0, 1), got {self.dropout}")
        if self.vocab <= FIRST_ID:
            raise ValueError(f"the vocabulary must hold more than {FIRST_ID} ids, got {self.vocab}")


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
    if s.dropout is not None:  # otherwise BERT's 0.1, ALBERT v2's 0 (0.1 before its SOP head), XLNet's 0.1
        encoder.update(hidden_dropout_prob=s.dropout, attention_probs_dropout_prob=s.dropout)
    if name == "bert":
        return transformers.BertConfig(**encoder)
    if name == "albert":
        # E < H: the factorisation is measured (128 at H = 256)
        extra = {} if s.dropout is None else {"classifier_dropout_prob": s.dropout}
        return transformers.AlbertConfig(embedding_size=max(8, s.hidden // 2), **encoder, **extra)
    if name == "xlnet":
        extra = {} if s.dropout is None else {"dropout": s.dropout}
        return transformers.XLNetConfig(
            vocab_size=s.vocab, d_model=s.hidden, n_layer=s.layers, n_head=s.heads, d_inner=s.d_ff, **extra
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
    n_ours, n_hf = num_params(ours), num_params(hf)
    if n_ours != n_hf:
        raise ParityError(f"{name}: course_lib has {n_ours:,} parameters, Hugging Face {n_hf:,}")
    return ours.train(), hf.train()


def num_params(model: nn.Module) -> int:
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
      The loss reads the query stream only, so of the last layer's content stream course_lib
      computes only K and V (which the query stream reads; forward and backward): its Q, O,
      feed-forward network and attention are skipped (Hugging Face runs them forward, work
      not counted here). With the tied LM head at the targets:

      .. math::

         L(Q + R) + (L - 1)\,C + 12Nh^2 + 6\,bPhV

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
        last_content = 12 * n * h * h  # K and V only: nothing reads the rest (XLNetModel skips it)
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
