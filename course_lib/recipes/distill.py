r"""Distillation recipes: train a small student from a course teacher (chapter 7).

One run loop, :func:`distill`, serves every method the chapter compares; a method is a list
of *stages*, each a loss (from :mod:`course_lib.objectives.distillation`) trained with the
shared :func:`~course_lib.train.fit`:

=================  ==========================================  ===============================
method             stages                                      source
=================  ==========================================  ===============================
``"hard"``         the true labels only (no teacher)           the baseline
``"teacher_labels"`` the teacher's argmax as labels            pseudo-labelling
``"kd"``           :math:`\alpha T^2 \mathrm{KL} + (1-\alpha)` CE,  Hinton et al. 2015
                   :math:`\alpha` from soft to hard
``"hints"``        1. hint loss (student up to its guided      FitNets, Romero et al. 2015
                   layer + regressor), 2. ``"kd"``
``"tinybert"``     1. embeddings + hidden states + attention   TinyBERT, Jiao et al. 2020
                   scores by a layer map, 2. soft CE
``"joint"``        teacher CE + student CE + KD, both trained  Apprentice, Mishra and Marr 2017
=================  ==========================================  ===============================

Any pair of the BERT family works (``BertForTokenClassification``,
``BertForSequenceClassification``, the masked-LM models; ALBERT's too): the student is a
model of the teacher's class, built from a :class:`~course_lib.models.bert.BertConfig`
(:func:`student_config`: fewer layers, a smaller width) or started from a model (e.g. a
DistilBERT-style copy of teacher layers, :func:`~course_lib.models.bert.init_from_teacher`,
or a student distilled on plain text first, TinyBERT's *general distillation*).

The data are rows (a dict of tensors, one row per example): ``input_ids``,
``attention_mask``, ``token_type_ids``, ``labels`` (``-100`` where there is no label: the
*transfer set* of unlabelled text is labelled by the teacher alone) and, for token-level
tasks, ``positions`` (bool ``[n, seq]``: the positions whose outputs the soft loss compares,
a word's first piece for tagging, the masked ones for a masked LM). :func:`distill_tagger`
builds them for tagging, :func:`distill_pretrained` for a masked LM on plain text (the
``course train distill`` command).
"""

from __future__ import annotations

import argparse
import copy
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import torch
from torch import Tensor, nn

from ..data.documents import split_documents
from ..models.bert import (
    IGNORE_INDEX,
    BertConfig,
    BertForTokenClassification,
    body_of,
    masked_lm_loss,
)
from ..objectives import tagging_inputs
from ..objectives.distillation import (
    HintRegressor,
    attention_loss,
    hidden_loss,
    hint_loss,
    kd_loss,
    soft_cross_entropy,
    soft_weight,
    uniform_layer_map,
)
from ..objectives.pretraining import evaluate_mlm, make_masker, pretraining_examples
from ..train import History, current_step, fit, model_device
from .common import (
    TrainingOptions,
    add_recipe_command,
    fingerprint,
    load_pretrained,
    module_main,
    positive,
    require_positive,
    run_document_recipe,
    train_cached,
    training_arguments,
    weights_fingerprint,
)
from .finetune import check_labels, shuffled_batches, split_tagged, start_model, tagging_accuracy

__all__ = [
    "METHODS",
    "States",
    "model_states",
    "student_config",
    "Distiller",
    "Distilled",
    "distill",
    "tagging_rows",
    "distill_tagger",
    "distill_pretrained",
]

# method -> its stages, in order (the first stage of "hints" and "tinybert" prepares the student)
METHODS: dict[str, tuple[str, ...]] = {
    "hard": ("hard",),
    "teacher_labels": ("teacher_labels",),
    "kd": ("kd",),
    "hints": ("hint", "kd"),
    "tinybert": ("intermediate", "prediction"),
    "joint": ("joint",),
}
_NEEDS_STATES = {"hint": "hidden", "intermediate": "scores"}


class States(NamedTuple):
    """What one forward pass gives the losses."""

    logits: Tensor  # [batch, classes] or [batch, seq, classes]
    hidden: (
        tuple[Tensor, ...] | None
    )  # the embeddings (as the first layer sees them), then each layer's output
    scores: tuple[Tensor, ...] | None  # each layer's attention scores before the softmax [batch, heads, q, k]


def model_states(
    model: nn.Module, batch: Mapping[str, Tensor], *, hidden: bool = False, scores: bool = False
) -> States:
    """Run a BERT-family model on ``batch`` and return its logits, and on request its hidden
    states (``hidden[0]`` the embeddings as the first layer receives them, ``hidden[m]`` layer
    ``m``'s output) and each layer's unnormalised attention scores, recomputed from the layer's
    input with its own projections (:meth:`~course_lib.nn.attention.MultiHeadAttention.scores`)."""
    out = model(
        batch["input_ids"],
        batch.get("attention_mask"),
        batch.get("token_type_ids"),
        output_hidden_states=hidden or scores,
    )
    logits = out.mlm_logits if hasattr(type(out), "mlm_logits") else out.logits
    states = tuple(out.hidden_states) if hidden or scores else None
    per_layer = None
    if scores:
        layers = body_of(model).encoder.layer_sequence()
        per_layer = tuple(layer.attention.scores(h) for layer, h in zip(layers, states[:-1]))
    return States(logits, states, per_layer)


def student_config(
    teacher: BertConfig,
    *,
    layers: int | None = None,
    hidden: int | None = None,
    heads: int | None = None,
    intermediate: int | None = None,
) -> BertConfig:
    """The teacher's configuration with fewer layers and/or a smaller width (``intermediate``
    defaults to 4 x ``hidden``, ``heads`` to the teacher's: TinyBERT's attention loss needs the
    same number of heads). Vocabulary, positions and the task's labels stay the teacher's."""
    changes: dict[str, Any] = {}
    if layers is not None:
        changes["num_hidden_layers"] = layers
    if hidden is not None:
        changes["hidden_size"] = hidden
        changes["intermediate_size"] = 4 * hidden if intermediate is None else intermediate
    elif intermediate is not None:
        changes["intermediate_size"] = intermediate
    if heads is not None:
        changes["num_attention_heads"] = heads
    require_positive(**{k: v for k, v in changes.items()})
    width = changes.get("hidden_size", teacher.hidden_size)
    n_heads = changes.get("num_attention_heads", teacher.num_attention_heads)
    if width % n_heads:  # (before the config's own check, which does not say what to do)
        raise ValueError(
            f"the student's width {width} is not divisible by its {n_heads} heads: "
            f"give heads= a divisor of {width}"
        )
    return type(teacher)(**{**teacher.to_dict(), **changes})


class Distiller(nn.Module):
    """The modules one distillation run trains: ``student``, ``proj`` (FitNets' regressor /
    TinyBERT's projection from the student's width to the teacher's: the identity when they
    agree) and, in joint training only, ``teacher`` (otherwise the teacher is held outside
    the parameters, in eval mode, and never changes)."""

    def __init__(self, student: nn.Module, teacher: nn.Module, *, joint: bool = False):
        super().__init__()
        self.student = student
        self.proj = HintRegressor(student.config.hidden_size, teacher.config.hidden_size)
        self.joint = joint
        if joint:
            self.teacher = teacher
        else:
            object.__setattr__(self, "_teacher", teacher)  # not a submodule: not trained, not saved

    @property
    def teacher_model(self) -> nn.Module:
        return self.teacher if self.joint else self._teacher


class Distilled(NamedTuple):
    student: nn.Module
    history: History
    teacher: nn.Module  # the teacher after the run (trained alongside in joint training)


def _rows(logits: Tensor, batch: Mapping[str, Tensor]) -> Tensor:
    """The outputs the soft loss compares: sequence logits as they are; token logits at
    ``batch["positions"]`` (default: the real tokens)."""
    if logits.dim() == 2:
        return logits
    pos = batch.get("positions")
    if pos is None:
        pos = (
            batch["attention_mask"].bool()
            if "attention_mask" in batch
            else torch.ones_like(batch["input_ids"], dtype=torch.bool)
        )
    return logits[pos]


def _hard(logits: Tensor, batch: Mapping[str, Tensor]) -> Tensor:
    """Cross-entropy with the true labels where there are any (0 in a batch without one)."""
    labels = batch.get("labels")
    if labels is None:
        return logits.new_zeros(())
    return masked_lm_loss(logits, labels)


def _check_pair(
    student: nn.Module, teacher: nn.Module, stages: Sequence[str], layer_map: Sequence[int]
) -> None:
    s, t = body_of(student).config, body_of(teacher).config
    if "intermediate" in stages:
        if s.num_attention_heads != t.num_attention_heads:
            raise ValueError(
                "TinyBERT's attention loss compares head by head: the student has "
                f"{s.num_attention_heads} heads, the teacher {t.num_attention_heads}"
            )
    n_s, n_t = len(body_of(student).encoder.layer_sequence()), len(body_of(teacher).encoder.layer_sequence())
    if len(layer_map) != n_s or any(not 1 <= g <= n_t for g in layer_map):
        raise ValueError(
            f"layer_map needs one teacher layer in [1, {n_t}] per student layer ({n_s}), "
            f"got {list(layer_map)}"
        )


def _stage_loss(
    stage: str,
    *,
    steps: int,
    temperature: float,
    alpha: tuple[float, float],
    schedule: str,
    gamma: float,
    layer_map: Sequence[int],
    guided_layer: int,
    hint_layer: int,
) -> Callable[[Distiller, Mapping[str, Tensor]], tuple[Tensor, dict[str, float]]]:
    calls = 0

    def loss_fn(run: Distiller, batch: Mapping[str, Tensor]) -> tuple[Tensor, dict[str, float]]:
        nonlocal calls
        # the schedule follows fit's optimiser step (right under --accumulate and after a resume);
        # counting calls only outside fit
        step, calls = calls, calls + 1
        if current_step() is not None:
            step = current_step()
        need = _NEEDS_STATES.get(stage)
        s = model_states(run.student, batch, hidden=need is not None, scores=need == "scores")
        if stage == "hard":
            loss = _hard(s.logits, batch)
            return loss, {"hard": loss.item()}
        teacher = run.teacher_model
        if stage == "joint":
            t = model_states(teacher, batch)
        else:
            teacher.eval()
            with torch.no_grad():
                t = model_states(teacher, batch, hidden=need is not None, scores=need == "scores")
        if stage == "kd":
            a = soft_weight(min(step, steps - 1), steps, start=alpha[0], end=alpha[1], schedule=schedule)
            soft, hard = (
                kd_loss(_rows(s.logits, batch), _rows(t.logits, batch), temperature),
                _hard(s.logits, batch),
            )
            return a * soft + (1 - a) * hard, {"soft": soft.item(), "hard": hard.item(), "alpha": a}
        if stage == "teacher_labels":
            rows = _rows(s.logits, batch)
            target = _rows(t.logits, batch).argmax(-1)
            if "labels" in batch:  # the true label where there is one
                given = (
                    batch["labels"]
                    if s.logits.dim() == 2
                    else batch["labels"][
                        batch["positions"] if "positions" in batch else batch["attention_mask"].bool()
                    ]
                )
                target = torch.where(given != IGNORE_INDEX, given, target)
            loss = masked_lm_loss(rows, target)
            return loss, {"hard": loss.item()}
        if stage == "prediction":
            loss = soft_cross_entropy(_rows(s.logits, batch), _rows(t.logits, batch), temperature)
            return loss, {"soft": loss.item()}
        if stage == "joint":
            t_hard, s_hard = _hard(t.logits, batch), _hard(s.logits, batch)
            soft = kd_loss(_rows(s.logits, batch), _rows(t.logits, batch), temperature)  # (teacher detached)
            return t_hard + s_hard + gamma * soft, {
                "teacher_hard": t_hard.item(),
                "hard": s_hard.item(),
                "soft": soft.item(),
            }
        mask = batch.get("attention_mask")
        if stage == "hint":
            loss = hint_loss(s.hidden[guided_layer], t.hidden[hint_layer], run.proj, mask=mask)
            return loss, {"hint": loss.item()}
        # intermediate (TinyBERT): embeddings, then per student layer m its teacher layer g(m)
        emb = hidden_loss(s.hidden[0], t.hidden[0], run.proj)
        hid = sum(hidden_loss(s.hidden[m], t.hidden[g], run.proj) for m, g in enumerate(layer_map, 1))
        att = sum(attention_loss(s.scores[m - 1], t.scores[g - 1], mask) for m, g in enumerate(layer_map, 1))
        return emb + hid + att, {
            "embeddings": emb.item(),
            "hidden": float(hid.detach()),
            "attention": float(att.detach()),
        }

    return loss_fn


def _hint_parameters(run: Distiller, guided_layer: int) -> list[nn.Parameter]:
    """FitNets' first stage trains the student up to its guided layer, and the regressor."""
    body = body_of(run.student)
    modules = [body.embeddings, *body.encoder.layer_sequence()[:guided_layer], run.proj]
    if hasattr(body.encoder, "project_in_layer"):  # (ALBERT's embedding projection)
        modules.append(body.encoder.project_in_layer)
    return [p for m in modules for p in m.parameters()]


def _rows_fingerprint(rows: Mapping[str, Tensor] | Callable[[int], Mapping[str, Tensor]]) -> str:
    if callable(rows):
        return getattr(rows, "fingerprint", "callable")
    return fingerprint(
        [k.encode() + v.detach().cpu().contiguous().numpy().tobytes() for k, v in sorted(rows.items())]
    )


def distill(
    teacher: nn.Module,
    student: nn.Module | BertConfig,
    rows: Mapping[str, Tensor] | Callable[[int], Mapping[str, Tensor]],
    *,
    method: str = "kd",
    steps: int,
    first_steps: int = 0,
    batch_size: int = 32,
    lr: float = 1e-3,
    first_lr: float | None = None,
    temperature: float = 2.0,
    alpha: tuple[float, float] = (0.9, 0.1),
    schedule: str = "linear",
    gamma: float = 1.0,
    layer_map: Sequence[int] | None = None,
    guided_layer: int | None = None,
    hint_layer: int | None = None,
    seed: int = 0,
    device: torch.device | str | None = None,
    eval_fn: Callable[[nn.Module], Mapping[str, float]] | None = None,
    eval_every: int | None = None,
    cache_name: str | None = None,
    progress: bool | None = None,
) -> Distilled:
    r"""Train a student of ``teacher``'s class by ``method`` (:data:`METHODS`) on ``rows``.

    Args:
        teacher: a trained BERT-family model (for ``"joint"``: the teacher's *starting*
            point, e.g. a classifier on a pretrained body; it is copied and trained alongside).
        student: a :class:`BertConfig` (random weights from ``seed``; :func:`student_config`)
            or a model whose body the student starts from (its new layers from ``seed``).
        rows: the training rows (see the module's docstring), or a function ``step -> batch``.
        steps: steps of the last stage (the one that trains on the task's outputs);
            ``first_steps``: steps of the first stage of ``"hints"`` and ``"tinybert"``
            (at ``first_lr``, default ``lr``). A stage of 0 steps is skipped (``"tinybert"``
            with ``steps=0`` is TinyBERT's general distillation: the intermediate layers only).
        temperature: :math:`T` of the soft targets (``"kd"``, ``"prediction"``, ``"joint"``).
        alpha, schedule: the soft weight of ``"kd"`` goes from ``alpha[0]`` to ``alpha[1]``
            (:func:`~course_lib.objectives.distillation.soft_weight`).
        gamma: the weight of the soft term in joint training.
        layer_map: TinyBERT's :math:`g(m)` for :math:`m = 1..M` (default
            :func:`~course_lib.objectives.distillation.uniform_layer_map`).
        guided_layer, hint_layer: FitNets' layers (hidden-state indices: 0 the embeddings,
            :math:`m` the output of layer :math:`m`); default the middle (rounded up) of each.
        eval_fn: ``eval_fn(student)`` every ``eval_every`` steps and at the end.
        cache_name: train once and store the student (and regressor, and joint teacher).

    Returns ``(student, history, teacher)``, the student in eval mode; ``history.metrics``
    holds each loss's parts (``soft``, ``hard``, ``alpha``, ``hint``, ``attention``, ...).
    """
    if method not in METHODS:
        raise ValueError(f"method must be one of {sorted(METHODS)}, got {method!r}")
    if steps < 0 or first_steps < 0:
        raise ValueError(f"steps and first_steps must be >= 0, got {steps} and {first_steps}")
    require_positive(batch_size=batch_size)
    first_stage = METHODS[method][0] in ("hint", "intermediate")
    stages = [
        st
        for i, st in enumerate(METHODS[method])
        if (first_steps if first_stage and i == 0 else steps) > 0  # a stage of 0 steps is skipped
    ]
    if not stages:
        raise ValueError(f"nothing to train: steps={steps}, first_steps={first_steps} for method {method!r}")
    device = model_device(teacher) if device is None else torch.device(device)
    teacher_cfg = teacher.config
    changes = {"num_labels": teacher_cfg.num_labels} if hasattr(teacher_cfg, "num_labels") else {}
    start = student
    student_model, _ = start_model(student, type(teacher), seed, device, **changes)
    joint = method == "joint"
    teacher_model = copy.deepcopy(teacher).to(device) if joint else teacher.to(device)
    run = Distiller(student_model, teacher_model, joint=joint).to(device)
    n_s = len(body_of(student_model).encoder.layer_sequence())
    n_t = len(body_of(teacher_model).encoder.layer_sequence())
    layer_map = list(layer_map) if layer_map is not None else uniform_layer_map(n_s, n_t)
    guided_layer = (n_s + 1) // 2 if guided_layer is None else guided_layer
    hint_layer = (n_t + 1) // 2 if hint_layer is None else hint_layer
    if not (0 <= guided_layer <= n_s and 0 <= hint_layer <= n_t):
        raise ValueError(f"guided_layer must lie in [0, {n_s}] and hint_layer in [0, {n_t}]")
    _check_pair(student_model, teacher_model, stages, layer_map)
    batch_at = rows if callable(rows) else shuffled_batches(rows, batch_size, seed)
    options = dict(
        temperature=temperature,
        alpha=alpha,
        schedule=schedule,
        gamma=gamma,
        layer_map=layer_map,
        guided_layer=guided_layer,
        hint_layer=hint_layer,
    )

    def train(r: Distiller) -> History:
        history = History()
        for stage in stages:
            first = stage in ("hint", "intermediate")
            n = first_steps if first else steps
            trainable = None
            if stage == "hint":
                trainable = {id(p) for p in _hint_parameters(r, guided_layer)}
            saved = {name: p.requires_grad for name, p in r.named_parameters()}
            for p in r.parameters():
                p.requires_grad_(trainable is None or id(p) in trainable)
            try:
                fit(
                    r,
                    batch_at,
                    _stage_loss(stage, steps=n, **options),
                    steps=n,
                    lr=(first_lr or lr) if first else lr,
                    eval_fn=(lambda m: eval_fn(m.student)) if eval_fn is not None and not first else None,
                    eval_every=eval_every,
                    history=history,
                    progress=progress,
                    desc=method if stage == method else f"{method}: {stage}",
                )
            finally:
                for name, p in r.named_parameters():
                    p.requires_grad_(saved[name])
        return history

    def spec() -> dict[str, Any]:
        return dict(
            recipe="distill",
            method=method,
            stages=stages,
            teacher=weights_fingerprint(teacher),
            teacher_class=type(teacher).__name__,
            student=weights_fingerprint(start) if isinstance(start, nn.Module) else start.to_dict(),
            rows=_rows_fingerprint(rows),
            steps=steps,
            first_steps=first_steps,
            batch_size=batch_size,
            lr=lr,
            first_lr=first_lr,
            seed=seed,
            eval_every=eval_every,
            **options,
        )

    history = train_cached(cache_name, run, spec, train)
    run.eval()
    return Distilled(run.student, history, run.teacher_model)


# ---------------------------------------------------------------------------------------
# Tagging: a labelled set and a transfer set of unlabelled sentences
# ---------------------------------------------------------------------------------------


def tagging_rows(
    tokenizer,
    labelled: Sequence[tuple[Sequence[str], Sequence[int]]],
    unlabelled: Sequence[Sequence[str]] = (),
    *,
    max_len: int = 128,
) -> dict[str, Tensor]:
    """Rows for :func:`distill` from tagged sentences ``(words, tag ids)`` and untagged ones
    (word lists, labels ``-100``): :func:`~course_lib.objectives.tagging.tagging_inputs` with
    ``positions`` = each word's first piece (where a tag is predicted)."""
    words, tags = split_tagged(labelled, "labelled") if labelled else ([], [])
    extra = [[str(w) for w in ws] for ws in unlabelled]
    if any(not ws for ws in extra) or any(isinstance(ws, str) for ws in unlabelled):
        raise ValueError("unlabelled sentences must be non-empty lists of words")
    if not words and not extra:
        raise ValueError("tagging_rows got no sentences")
    enc = tagging_inputs(
        tokenizer, words + extra, tags + [[IGNORE_INDEX] * len(ws) for ws in extra], max_len=max_len
    )
    enc["positions"] = enc.pop("word_index") >= 0
    return enc


def distill_tagger(
    teacher: nn.Module,
    student: nn.Module | BertConfig,
    tokenizer,
    train_items: Sequence[tuple[Sequence[str], Sequence[int]]],
    transfer: Sequence[Sequence[str]] = (),
    *,
    method: str = "kd",
    eval_items: Sequence[tuple[Sequence[str], Sequence[int]]] | None = None,
    **options: Any,
) -> Distilled:
    """Distil a tagger (``BertForTokenClassification``) into ``student`` on the tagged
    ``train_items`` and the untagged ``transfer`` sentences (their tags come from the
    teacher alone); ``history.evals`` holds ``accuracy`` and ``unseen_accuracy`` on
    ``eval_items`` (unseen: words absent from ``train_items``). ``options`` go to
    :func:`distill`."""
    if not isinstance(teacher, BertForTokenClassification):
        raise TypeError(f"distill_tagger distils a BertForTokenClassification, got {type(teacher).__name__}")
    words, tags = split_tagged(train_items, "train_items")
    check_labels(
        min(t for ts in tags for t in ts),
        max(t for ts in tags for t in ts),
        teacher.config.num_labels,
        "tags",
    )
    known = {w.lower() for ws in words for w in ws}
    rows = tagging_rows(tokenizer, train_items, transfer, max_len=teacher.config.max_len)

    def eval_fn(m: nn.Module) -> dict[str, float]:
        r = tagging_accuracy(m, tokenizer, eval_items, known_words=known)
        return {"accuracy": r["accuracy"], "unseen_accuracy": r["unseen_accuracy"]}

    return distill(teacher, student, rows, method=method, eval_fn=eval_fn if eval_items else None, **options)


# ---------------------------------------------------------------------------------------
# General distillation on plain text: a masked-LM teacher into a smaller masked LM
# ---------------------------------------------------------------------------------------


def _masked_batches(rows: Mapping[str, Tensor], tokenizer, batch_size: int, seed: int, mask: bool):
    """``step -> batch`` of ``rows`` with a fresh 80/10/10 mask each time (``positions`` the
    masked ones, ``labels`` their tokens) or unmasked (``positions`` the real tokens)."""
    base = shuffled_batches(rows, batch_size, seed)
    masker = make_masker(tokenizer)
    gen = torch.Generator().manual_seed(seed + 1)

    def batch_at(step: int) -> dict[str, Tensor]:
        batch = base(step)
        if not mask:
            return {**batch, "positions": batch["attention_mask"].bool()}
        ids, labels = masker(batch["input_ids"], generator=gen)
        return {**batch, "input_ids": ids, "labels": labels, "positions": labels != IGNORE_INDEX}

    batch_at.fingerprint = _rows_fingerprint(rows) + f"-masked{int(mask)}-{batch_size}"  # type: ignore[attr-defined]
    return batch_at


def distill_pretrained(
    teacher: nn.Module,
    documents: Sequence[Any],
    tokenizer,
    student: nn.Module | BertConfig,
    *,
    method: str = "kd",
    steps: int,
    first_steps: int = 0,
    batch_size: int = 32,
    max_len: int | None = None,
    heldout: Sequence[Any] | float | None = 0.05,
    seed: int = 0,
    **options: Any,
) -> Distilled:
    """General distillation on plain text: a masked-LM ``teacher`` (``BertForMaskedLM``,
    ``BertForPreTraining``, ...) into a smaller masked LM of its class, on one sentence per
    row of ``documents``. ``"kd"`` (DistilBERT's soft targets) compares the two models at
    freshly masked positions, with the masked tokens as hard labels; ``"tinybert"`` first
    matches embeddings, hidden states and attention scores on unmasked text (TinyBERT's
    general distillation, ``first_steps``), then the masked-LM outputs (soft CE, ``steps``).
    Held-out masked-LM accuracy of the student is logged (``history.evals``)."""
    if method not in ("kd", "tinybert", "hints", "hard"):
        raise ValueError(
            f"general distillation takes method 'kd', 'tinybert', 'hints' or 'hard', got {method!r}"
        )
    max_len = max_len or teacher.config.max_len
    train_docs, held_docs = split_documents(list(documents), heldout)
    rows = pretraining_examples(train_docs, tokenizer, max_len=max_len, pair_task=None, row_unit="sentence")
    rows = {k: v for k, v in rows.items() if k in ("input_ids", "attention_mask", "token_type_ids")}
    if rows["input_ids"].size(0) < batch_size:
        raise ValueError(
            f"the text gives {rows['input_ids'].size(0)} sentences, fewer than batch_size={batch_size}"
        )
    masked = _masked_batches(rows, tokenizer, batch_size, seed, mask=True)
    plain = _masked_batches(rows, tokenizer, batch_size, seed, mask=False)

    drawn = 0

    def batch_at(step: int) -> dict[str, Tensor]:  # the first stage of tinybert/hints reads unmasked text
        nonlocal drawn  # (each stage's fit counts its steps from 0: count the batches instead)
        drawn += 1
        return plain(step) if drawn <= first_steps and method in ("tinybert", "hints") else masked(step)

    batch_at.fingerprint = masked.fingerprint + f"-first{first_steps}"  # type: ignore[attr-defined]
    held = (
        pretraining_examples(held_docs, tokenizer, max_len=max_len, pair_task=None, row_unit="sentence")
        if held_docs
        else None
    )
    masker = make_masker(tokenizer)

    def eval_fn(m: nn.Module) -> dict[str, float]:
        return {
            k: v
            for k, v in evaluate_mlm(m, held, masker, seed=seed).items()
            if k in ("mlm_loss", "mlm_accuracy")
        }

    return distill(
        teacher,
        student,
        batch_at,
        method=method,
        steps=steps,
        first_steps=first_steps,
        batch_size=batch_size,
        seed=seed,
        eval_fn=eval_fn if held is not None else None,
        **options,
    )


# ---------------------------------------------------------------------------------------
# Command line: course train distill
# ---------------------------------------------------------------------------------------


def _cmd(args: argparse.Namespace) -> int:
    loaded: dict[str, Any] = {}

    def train(documents: list, device: torch.device) -> Distilled:
        teacher, tokenizer = load_pretrained(args.teacher, device=device)
        loaded.update(teacher=teacher, tokenizer=tokenizer)
        config = student_config(
            teacher.config,
            layers=args.layers,
            hidden=args.hidden,
            heads=args.heads,
            intermediate=args.intermediate,
        )
        options = training_arguments(args)
        options["lr"] = options["lr"] or 1e-3
        return distill_pretrained(
            teacher,
            documents,
            tokenizer,
            config,
            method=args.method,
            first_steps=args.first_steps,
            temperature=args.temperature,
            heldout=getattr(args, "heldout", 0.05) or None,  # --heldout 0: none
            device=device,
            **options,
        )

    def summary(model: nn.Module, tokenizer_, history: History, device: torch.device, seconds: float) -> str:
        accuracy = history.evals.get("mlm_accuracy")
        return (
            f"distilled a {loaded['teacher'].num_parameters() / 1e6:.2f}M-parameter teacher into a "
            f"{model.num_parameters() / 1e6:.2f}M-parameter student ({args.method}) for "
            f"{len(history.loss)} steps on {device.type} in {seconds:.0f} s; "
            + (
                f"held-out masked-LM accuracy {accuracy[-1]:.3f}"
                if accuracy
                else "no held-out text, so no held-out accuracy"
            )
        )

    def run_train(documents: list, device: torch.device):
        d = train(documents, device)
        return d.student, loaded["tokenizer"], d.history

    return run_document_recipe(args, "distill", train=run_train, summary=summary)


def _options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--teacher",
        default=None,  # required, checked after a --config file is read (which may give it)
        metavar="FOLDER",
        help="a model folder written by course train bert, roberta or albert (required)",
    )
    p.add_argument(
        "--method",
        choices=["kd", "tinybert", "hints"],
        default="kd",
        help="kd: the teacher's soft masked-LM outputs at masked positions (DistilBERT); tinybert: "
        "embeddings, hidden states and attention scores first (--first-steps), then the outputs; "
        "hints: the middle layer first (FitNets), then kd",
    )
    p.add_argument("--first-steps", type=int, default=0, help="steps of the first stage of tinybert/hints")
    p.add_argument(
        "--layers", type=positive(int), default=None, help="student layers (default the teacher's)"
    )
    p.add_argument("--hidden", type=positive(int), default=None, help="student width (default the teacher's)")
    p.add_argument("--heads", type=positive(int), default=None, help="student heads (default the teacher's)")
    p.add_argument(
        "--intermediate", type=positive(int), default=None, help="student FFN width (default 4 x width)"
    )
    p.add_argument(
        "--temperature", type=float, default=2.0, help="temperature of the soft targets (default 2)"
    )
    p.add_argument(
        "--n-docs", type=positive(int), default=2000, help="generated documents when no --text is given"
    )


def register(sub) -> None:
    """Add ``course train distill`` to the ``course`` command."""
    add_recipe_command(
        sub,
        "distill",
        help="distil a saved course BERT into a smaller student on your text or the generated corpus",
        description="General distillation (course_lib.recipes.distill): a model folder written by "
        "course train bert teaches a student with fewer layers or a smaller width on plain text; the "
        "student is saved like a pretrained BERT (model.safetensors, config.json, tokenizer.json in --out). "
        "Documents are separated by blank lines.",
        out_help="folder for the student, its config and the teacher's tokenizer",
        training=TrainingOptions(
            sizes=None,
            size_help=None,
            steps=1000,
            batch_size=32,
            batch_unit="sentences",
            max_len=None,
            max_len_help=None,
            vocab_size=None,
            vocab_help=None,
        ),
        options=_options,
        run=_cmd,
    )


def main(argv: list[str] | None = None) -> int:
    """``python -m course_lib.recipes.distill ...``: the same as ``course train distill ...``."""
    return module_main(register, "distill", "course_lib.recipes.distill", argv)


if __name__ == "__main__":
    sys.exit(main())
