r"""Knowledge distillation: the losses that teach a small student from a large teacher.

**Soft targets** (Hinton, Vinyals and Dean, 2015). A teacher's logits :math:`z^t` softened at
temperature :math:`T`, :math:`p^t_T = \mathrm{softmax}(z^t / T)`, carry its ranking of the
wrong answers ("dark knowledge"). The student matches them with its own softened
:math:`p^s_T = \mathrm{softmax}(z^s / T)`:

.. math::

    \mathcal{L}_{soft} = T^2\, \mathrm{KL}\big(p^t_T \,\|\, p^s_T\big)
    = T^2 \sum_k p^t_{T,k} \big(\log p^t_{T,k} - \log p^s_{T,k}\big).

The gradient of the KL term with respect to the student's logits is
:math:`(p^s_T - p^t_T) / T`, and for large :math:`T` about :math:`(z^s - z^t) / (N T^2)`: it
shrinks as :math:`1/T^2`. The factor :math:`T^2` keeps the soft loss's gradients on the scale
of the hard loss's when the temperature changes (:func:`kd_loss`, ``scale_by_t2``). With the
true labels the student minimises

.. math::

    \mathcal{L} = \alpha\, \mathcal{L}_{soft} + (1 - \alpha)\, \mathrm{CE}(y, \mathrm{softmax}(z^s)),

and :func:`soft_weight` moves :math:`\alpha` from mostly soft targets early in training to
mostly hard labels late (a linear or cosine schedule).

**Hints** (FitNets, Romero et al., 2015). A student layer (the *guided* layer) learns to
predict a teacher layer (the *hint*) through a regressor when their widths differ:
:math:`\mathcal{L}_{hint} = \tfrac{1}{2}\lVert u_h(x) - r(v_g(x))\rVert^2`, averaged here over
the elements (:func:`hint_loss`; :class:`HintRegressor` is :math:`r`).

**TinyBERT** (Jiao et al., 2020). A student of :math:`M` layers learns from a teacher of
:math:`N` layers through a layer mapping :math:`n = g(m)` (:func:`uniform_layer_map`:
:math:`g(m) = m \cdot N / M`, with 0 the embeddings) and one loss per kind of layer:

* embeddings: :math:`\mathrm{MSE}(E^S W_e, E^T)`;
* hidden states: :math:`\mathrm{MSE}(H^S_m W_h, H^T_{g(m)})` (:func:`hidden_loss`);
* attention: :math:`\frac{1}{h}\sum_i \mathrm{MSE}(A^S_i, A^T_i)` on the *unnormalised* scores
  (:func:`attention_loss`, masked positions excluded);
* prediction layer: the soft cross-entropy :math:`-\sum_k p^t_{T,k} \log p^s_{T,k}`
  (:func:`soft_cross_entropy`).

Every function takes tensors, so any teacher/student pair of the course (or of Hugging Face)
fits; nothing here runs a model.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = [
    "softened",
    "kd_loss",
    "soft_cross_entropy",
    "distillation_loss",
    "KDLoss",
    "soft_weight",
    "HintRegressor",
    "hint_loss",
    "uniform_layer_map",
    "hidden_loss",
    "attention_loss",
]


def _check_temperature(temperature: float) -> None:
    if not temperature > 0:
        raise ValueError(f"temperature must be positive, got {temperature}")


def _check_logits(student: Tensor, teacher: Tensor) -> None:
    if student.shape != teacher.shape:
        raise ValueError(
            f"student logits {tuple(student.shape)} and teacher logits {tuple(teacher.shape)} "
            "must have one shape"
        )


def softened(logits: Tensor, temperature: float = 1.0) -> Tensor:
    """:math:`\\mathrm{softmax}(z / T)` over the last axis (in at least float32)."""
    _check_temperature(temperature)
    return torch.softmax(logits.to(torch.promote_types(logits.dtype, torch.float32)) / temperature, dim=-1)


def kd_loss(
    student_logits: Tensor, teacher_logits: Tensor, temperature: float = 1.0, *, scale_by_t2: bool = True
) -> Tensor:
    r"""Hinton's soft-target loss: :math:`T^2\,\mathrm{KL}(p^t_T \| p^s_T)`, summed over the classes
    and averaged over every other axis (the rows). ``scale_by_t2=False`` leaves out the
    :math:`T^2` (the gradient then shrinks as :math:`1/T^2`). The teacher gets no gradient."""
    _check_logits(student_logits, teacher_logits)
    _check_temperature(temperature)
    dtype = torch.promote_types(student_logits.dtype, torch.float32)
    log_ps = torch.log_softmax(student_logits.to(dtype) / temperature, dim=-1)
    log_pt = torch.log_softmax(teacher_logits.detach().to(dtype) / temperature, dim=-1)
    kl = (log_pt.exp() * (log_pt - log_ps)).sum(-1).mean()
    return kl * temperature**2 if scale_by_t2 else kl


def soft_cross_entropy(student_logits: Tensor, teacher_logits: Tensor, temperature: float = 1.0) -> Tensor:
    r"""TinyBERT's prediction-layer loss: :math:`-\sum_k p^t_{T,k} \log p^s_{T,k}`, averaged over the
    rows (the KL divergence plus the teacher's entropy, which has no gradient)."""
    _check_logits(student_logits, teacher_logits)
    _check_temperature(temperature)
    dtype = torch.promote_types(student_logits.dtype, torch.float32)
    log_ps = torch.log_softmax(student_logits.to(dtype) / temperature, dim=-1)
    pt = torch.softmax(teacher_logits.detach().to(dtype) / temperature, dim=-1)
    return -(pt * log_ps).sum(-1).mean()


def distillation_loss(
    student_logits: Tensor,
    teacher_logits: Tensor,
    labels: Tensor | None,
    *,
    temperature: float = 2.0,
    alpha: float = 0.5,
    ignore_index: int = -100,
) -> tuple[Tensor, dict[str, float]]:
    r""":math:`\alpha\, \mathcal{L}_{soft} + (1 - \alpha)\, \mathrm{CE}(y, z^s)` and its parts
    (``soft``, ``hard``). ``labels`` may be ``None`` (then ``alpha`` must be 1: soft targets
    only); rows labelled ``ignore_index`` count in the soft loss only."""
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must be in [0, 1], got {alpha}")
    soft = kd_loss(student_logits, teacher_logits, temperature)
    if labels is None:
        if alpha != 1.0:
            raise ValueError(f"without labels only the soft loss exists: alpha must be 1, got {alpha}")
        return soft, {"soft": soft.item(), "hard": float("nan")}
    if labels.shape != student_logits.shape[:-1]:
        raise ValueError(
            f"labels {tuple(labels.shape)} must match the logits' rows {tuple(student_logits.shape[:-1])}"
        )
    flat = student_logits.reshape(-1, student_logits.size(-1))
    hard = F.cross_entropy(
        flat.to(torch.promote_types(flat.dtype, torch.float32)), labels.reshape(-1), ignore_index=ignore_index
    )
    return alpha * soft + (1 - alpha) * hard, {"soft": soft.item(), "hard": hard.item()}


def soft_weight(
    step: int, total: int, *, start: float = 0.9, end: float = 0.1, schedule: str = "linear"
) -> float:
    """The weight :math:`\\alpha` of the soft targets at ``step`` of ``total``: from ``start``
    (mostly soft targets early) to ``end`` (mostly hard labels late), ``"linear"``,
    ``"cosine"`` or ``"constant"`` (``start`` throughout)."""
    if total < 1 or not 0 <= step < total:
        raise ValueError(f"step must lie in [0, total) with total >= 1, got step={step}, total={total}")
    for name, v in (("start", start), ("end", end)):
        if not 0.0 <= v <= 1.0:
            raise ValueError(f"{name} must be in [0, 1], got {v}")
    frac = step / max(total - 1, 1)
    if schedule == "constant":
        return start
    if schedule == "linear":
        return start + (end - start) * frac
    if schedule == "cosine":
        return end + (start - end) * 0.5 * (1 + math.cos(math.pi * frac))
    raise ValueError(f"schedule must be 'linear', 'cosine' or 'constant', got {schedule!r}")


class HintRegressor(nn.Module):
    """FitNets' regressor :math:`r`: maps the student's guided layer to the teacher's hint
    width (a linear map; the identity when the widths agree and ``always=False``)."""

    def __init__(self, student_width: int, teacher_width: int, *, always: bool = False):
        super().__init__()
        if student_width < 1 or teacher_width < 1:
            raise ValueError(f"widths must be positive, got {student_width} and {teacher_width}")
        self.proj = (
            nn.Linear(student_width, teacher_width)
            if always or student_width != teacher_width
            else nn.Identity()
        )

    def forward(self, guided: Tensor) -> Tensor:
        return self.proj(guided)


def hint_loss(
    guided: Tensor, hint: Tensor, regressor: nn.Module | None = None, *, mask: Tensor | None = None
) -> Tensor:
    r"""FitNets' hint loss :math:`\tfrac{1}{2}\lVert u_h - r(v_g)\rVert^2`, averaged over the
    elements (and over the real positions with ``mask`` ``[..., seq]``, 1 = real). The hint
    (the teacher's layer) gets no gradient."""
    pred = regressor(guided) if regressor is not None else guided
    if pred.shape != hint.shape:
        raise ValueError(
            f"the guided layer maps to {tuple(pred.shape)} but the hint is {tuple(hint.shape)}: "
            "give a HintRegressor(student_width, teacher_width)"
        )
    sq = 0.5 * (pred - hint.detach()) ** 2
    if mask is None:
        return sq.mean()
    m = mask.to(sq.dtype)[..., None].expand_as(sq)
    return (sq * m).sum() / m.sum().clamp(min=1)


def uniform_layer_map(student_layers: int, teacher_layers: int) -> list[int]:
    """TinyBERT's uniform mapping :math:`g(m) = m \\cdot N / M`: for each student layer ``m``
    (1..M) the teacher layer it learns from (1..N); layer 0 (the embeddings) maps to 0,
    which is left out of the list. ``ValueError`` when N is not a multiple of M."""
    if student_layers < 1 or teacher_layers < 1:
        raise ValueError(f"layer counts must be positive, got {student_layers} and {teacher_layers}")
    if teacher_layers % student_layers:
        raise ValueError(
            f"the uniform mapping needs teacher_layers ({teacher_layers}) to be a multiple of "
            f"student_layers ({student_layers})"
        )
    k = teacher_layers // student_layers
    return [m * k for m in range(1, student_layers + 1)]


def hidden_loss(
    student_hidden: Tensor, teacher_hidden: Tensor, projection: nn.Module | None = None
) -> Tensor:
    """TinyBERT's hidden-state (and embedding) loss :math:`\\mathrm{MSE}(H^S W_h, H^T)`; the teacher
    gets no gradient."""
    pred = projection(student_hidden) if projection is not None else student_hidden
    if pred.shape != teacher_hidden.shape:
        raise ValueError(
            f"student states map to {tuple(pred.shape)}, teacher states are {tuple(teacher_hidden.shape)}: "
            "give a projection to the teacher's width"
        )
    return F.mse_loss(pred, teacher_hidden.detach())


def attention_loss(
    student_scores: Tensor, teacher_scores: Tensor, attention_mask: Tensor | None = None
) -> Tensor:
    r"""TinyBERT's attention loss: :math:`\frac{1}{h}\sum_i \mathrm{MSE}(A^S_i, A^T_i)` over the
    heads of the *unnormalised* scores ``[batch, heads, q, k]`` (student and teacher with the
    same number of heads), over the real keys and queries only when ``attention_mask``
    ``[batch, seq]`` (1 = real) is given (masked scores are :math:`-\infty` or huge and would
    swamp the loss)."""
    if student_scores.shape != teacher_scores.shape:
        raise ValueError(
            f"student scores {tuple(student_scores.shape)} and teacher scores {tuple(teacher_scores.shape)} "
            "must have one shape (the same number of heads)"
        )
    diff = (student_scores - teacher_scores.detach()) ** 2
    if attention_mask is None:
        return diff.mean()
    m = attention_mask.bool()
    pair = (m[:, None, :, None] & m[:, None, None, :]).expand_as(diff)
    return torch.where(pair, diff, 0.0).sum() / pair.sum().clamp(min=1)


class KDLoss:
    r"""``loss_fn`` for :func:`course_lib.train.fit` that distils ``teacher`` into the model
    being trained: the teacher runs in eval mode without gradients on the same batch, and the
    loss is :func:`distillation_loss` of the two models' logits (``logits(model, batch)``,
    default ``model(**inputs).logits`` on the batch without ``labels``) with the batch's
    ``labels`` (or none). The weight of the soft targets follows :func:`soft_weight` over
    ``total_steps`` optimiser steps of ``fit`` (calls outside it; ``alpha_start`` ->
    ``alpha_end``; ``schedule="constant"`` keeps ``alpha_start``). Metrics: ``soft``, ``hard``, ``alpha``.
    """

    def __init__(
        self,
        teacher: nn.Module,
        *,
        temperature: float = 2.0,
        total_steps: int = 1,
        alpha_start: float = 0.9,
        alpha_end: float = 0.1,
        schedule: str = "linear",
        logits=None,
    ):
        _check_temperature(temperature)
        soft_weight(0, max(total_steps, 1), start=alpha_start, end=alpha_end, schedule=schedule)  # checks
        self.teacher = teacher
        self.temperature = temperature
        self.total_steps = max(total_steps, 1)
        self.alpha_start, self.alpha_end, self.schedule = alpha_start, alpha_end, schedule
        self.logits = logits or (
            lambda m, batch: m(**{k: v for k, v in batch.items() if k != "labels"}).logits
        )
        self.step = 0

    def state_dict(self) -> dict[str, int]:
        """The schedule's position (saved in :func:`~course_lib.train.fit`'s training state)."""
        return {"step": self.step}

    def load_state_dict(self, state: Mapping[str, int]) -> None:
        self.step = int(state["step"])

    def __call__(self, model: nn.Module, batch) -> tuple[Tensor, dict[str, float]]:
        from ..train import current_step

        inside = current_step()  # fit's optimiser step: right under accumulation and resume
        if inside is not None:
            self.step = inside
        alpha = soft_weight(
            min(self.step, self.total_steps - 1),
            self.total_steps,
            start=self.alpha_start,
            end=self.alpha_end,
            schedule=self.schedule,
        )
        self.step += 1
        was_training = self.teacher.training
        self.teacher.eval()
        try:
            with torch.no_grad():
                teacher_logits = self.logits(self.teacher, batch)
        finally:
            self.teacher.train(was_training)
        labels = batch.get("labels")
        if labels is None:
            loss, parts = distillation_loss(
                self.logits(model, batch), teacher_logits, None, temperature=self.temperature, alpha=1.0
            )
            alpha = 1.0
        else:
            loss, parts = distillation_loss(
                self.logits(model, batch), teacher_logits, labels, temperature=self.temperature, alpha=alpha
            )
        return loss, {**parts, "alpha": alpha}
