r"""Pretraining XLNet with the permutation language model: the recipe chapter 6 runs and
``course train xlnet`` runs.

The data are BERT's (:func:`~course_lib.objectives.pretraining.pretraining_examples` without a pair
task: one sentence per row by default, or full-sentence blocks), the tokenizer is trained the
same way, and the loop is the shared :func:`~course_lib.train.fit`; only the objective differs
(Yang et al., 2019, §2.2-2.3, :mod:`course_lib.objectives.permutation`). Every step draws a
new factorisation order per row and predicts the last :math:`\lfloor T/K \rfloor` tokens of it
(partial prediction, ``K = 6`` by default) from the query stream:

.. math::

    \mathcal{L} = -\frac{1}{|\mathcal{T}|}\sum_{t \in \mathcal{T}}
    \log p_\theta\big(x_{z_t} \mid x_{z_{<t}}\big),

with :math:`\mathcal{T}` the targets of the batch. No ``[MASK]`` token enters the input and
nothing is masked in the data: the order lives in ``perm_mask`` and ``target_mapping``. The
held-out evaluation draws its orders from a fixed seed, so two models are scored on the same
orders.

Command line::

    course train xlnet --text 'PATH or GLOB' --steps N --out DIR [--device cuda] [--size small]
        [--K 6 | --n-predict N] [--row-unit sentence|block]

writes ``DIR/model.safetensors`` (+ ``model.json``), ``DIR/config.json`` and
``DIR/tokenizer.json``; :func:`~course_lib.recipes.common.load_pretrained` reads them back.

Not here (see the chapter's "paper vs ours"): XLNet's two-segment inputs with memory during
pretraining, the reversed rows of ``bi_data`` and SentencePiece. Span-based targets are
:func:`~course_lib.objectives.permutation.plm_loss`'s ``targets="span"`` (not a recipe
option here), and the model's ``bi_data`` reads half a batch backwards.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from dataclasses import replace
from functools import partial
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..data import load_documents, special_ids
from ..data.documents import split_documents, train_tokenizer
from ..device import get_device
from ..models.bert import IGNORE_INDEX
from ..models.xlnet import XLNetConfig, XLNetLMHeadModel
from ..objectives import trim_padding
from ..objectives.permutation import plm_batch, plm_loss
from ..objectives.pretraining import ROW_UNITS, pretraining_data, pretraining_examples
from ..train import History, evaluating, fit, model_device
from .common import (
    DEFAULT_LR,
    PRETRAINING_OPTIONS,
    XL_NAMES,
    PretrainedModel,
    RecipeInputs,
    add_recipe_command,
    document_arguments,
    module_main,
    new_model,
    positive,
    pretraining_summary,
    require_positive,
    run_document_recipe,
    sized,
    train_pretrained,
)

__all__ = [
    "xlnet_config",
    "evaluate_plm",
    "pretrain_xlnet",
    "register",
    "main",
]

DEFAULT_K = 6  # the paper's partial prediction: the last 1/K of each order are targets


def xlnet_config(size: str, *, vocab_size: int, pad_id: int, dropout: float = 0.1) -> XLNetConfig:
    """An :class:`~course_lib.models.xlnet.XLNetConfig` of the shape called ``size`` in
    :data:`~course_lib.recipes.common.SIZES` (the same shapes as the BERT recipe, so the two
    objectives train the same amount of network). Relative positions need no maximum length;
    no memory is kept (the recipe trains on single segments)."""
    return XLNetConfig(
        vocab_size=vocab_size,
        **sized(size, XL_NAMES),
        dropout=dropout,
        pad_token_id=pad_id,
        use_mems_eval=False,
    )


def _check_targets(K: float | None, n_predict: int | None) -> None:
    if K is not None and n_predict is not None:
        raise ValueError(f"give K or n_predict, not both (got K={K}, n_predict={n_predict})")
    if K is not None and not K >= 1:
        raise ValueError(f"K must be at least 1 (K=1: every token is a target), got {K}")
    if n_predict is not None and n_predict < 1:
        raise ValueError(f"n_predict must be positive, got {n_predict}")


@torch.no_grad()
def evaluate_plm(
    model: nn.Module,
    examples: Mapping[str, Tensor],
    *,
    K: float | None = None,
    n_predict: int | None = None,
    seed: int = 0,
    batch_size: int = 256,
) -> dict[str, float]:
    """A permutation LM on held-out ``examples`` (unmasked rows): ``plm_loss`` (mean
    cross-entropy of the targets, nats) and ``plm_accuracy`` (top-1), with one random order per
    row drawn from ``seed`` (the same orders for every model) and the targets chosen by ``K``
    or ``n_predict`` as in training (default ``K = 6``; ``K=1``: every token, the order's whole
    log-likelihood)."""
    if K is None and n_predict is None:
        K = DEFAULT_K
    _check_targets(K, n_predict)
    device = model_device(model)
    g = torch.Generator().manual_seed(seed)
    loss_sum, correct, total = 0.0, 0, 0
    with evaluating(model):
        for i in range(0, examples["input_ids"].size(0), batch_size):
            fields = ("input_ids", "attention_mask", "token_type_ids")
            batch = trim_padding({k: v[i : i + batch_size] for k, v in examples.items() if k in fields})
            batch = {
                **batch,
                **plm_batch(
                    batch["input_ids"], batch.get("attention_mask"), K=K, n_predict=n_predict, generator=g
                ),
            }
            batch = {k: v.to(device) for k, v in batch.items()}
            labels = batch.pop("labels")
            batch.pop("target_mask")
            logits = model(**batch).logits.float()
            real = labels != IGNORE_INDEX
            loss_sum += F.cross_entropy(logits[real], labels[real], reduction="sum").item()
            correct += int((logits[real].argmax(-1) == labels[real]).sum())
            total += int(real.sum())
    return {"plm_loss": loss_sum / max(total, 1), "plm_accuracy": correct / max(total, 1)}


def pretrain_xlnet(
    config: XLNetConfig | str = "small",
    documents: Sequence[Any] | None = None,
    *,
    steps: int = 1000,
    batch_size: int = 64,
    lr: float | None = None,
    K: float | None = None,
    n_predict: int | None = None,
    row_unit: str = "sentence",
    max_len: int = 128,
    tokenizer: Any = None,
    tokenizer_kind: str = "wordpiece",
    vocab_size: int = 4000,
    heldout: Sequence[Any] | float | None = 0.05,
    eval_every: int | None = None,
    init: nn.Module | None = None,
    seed: int = 0,
    device: torch.device | str | None = None,
    cache_name: str | None = None,
    progress: bool | None = None,
) -> PretrainedModel:
    """Pretrain an :class:`~course_lib.models.xlnet.XLNetLMHeadModel` from scratch with the
    permutation LM on ``documents``; returns ``(model, tokenizer, history)``.

    Args:
        config: an :class:`XLNetConfig` or a size name of :data:`~course_lib.recipes.common.SIZES`
            (:func:`xlnet_config`); its ``vocab_size`` and ``pad_token_id`` are set from the
            tokenizer.
        documents: Document objects or lists of sentence strings; ``None`` reads
            :func:`~course_lib.data.load_documents`.
        steps, batch_size, lr: as :func:`~course_lib.recipes.bert.pretrain_bert` (the same
            default learning rates per size).
        K, n_predict: the targets of each order: its last ``floor(T / K)`` tokens (default
            ``K = 6``) or its last ``n_predict``; ``K=1`` predicts every token.
        row_unit: ``"sentence"`` (one sentence per row, the default: chapter 5 found that a
            small model learns far faster so) or ``"block"`` (full-sentence blocks of
            ``max_len`` tokens).
        tokenizer, tokenizer_kind, vocab_size, heldout, eval_every, init, seed, device,
            cache_name, progress: as :func:`~course_lib.recipes.bert.pretrain_bert`. Held-out
            ``plm_loss`` and ``plm_accuracy`` (:func:`evaluate_plm`, fixed orders).
    """
    device = get_device() if device is None else torch.device(device)
    documents = list(load_documents() if documents is None else documents)
    if not documents:
        raise ValueError("pretrain_xlnet got no documents")
    require_positive(steps=steps, batch_size=batch_size)
    if K is None and n_predict is None:
        K = DEFAULT_K
    _check_targets(K, n_predict)
    if row_unit not in ROW_UNITS:
        raise ValueError(f"row_unit must be one of {ROW_UNITS}, got {row_unit!r}")
    if max_len < 4:
        raise ValueError(f"max_len={max_len} is too short for [CLS] sentence [SEP]; use at least 4")
    train_docs, held_docs = split_documents(documents, heldout)
    if tokenizer is None:
        tokenizer = train_tokenizer(train_docs, kind=tokenizer_kind, vocab_size=vocab_size)
    ids = special_ids(tokenizer)
    size = config if isinstance(config, str) else None
    if size is not None:
        config = xlnet_config(size, vocab_size=tokenizer.get_vocab_size(), pad_id=ids["pad"])
    elif isinstance(config, XLNetConfig):
        config = replace(config, vocab_size=tokenizer.get_vocab_size(), pad_token_id=ids["pad"])
    else:
        raise TypeError(f"config must be an XLNetConfig or a size name, got {type(config).__name__}")
    if lr is None:
        lr = DEFAULT_LR.get(size or "", 1e-3)

    rows = dict(max_len=max_len, pair_task=None, row_unit=row_unit)
    examples = pretraining_examples(train_docs, tokenizer, **rows, seed=seed)
    if examples["input_ids"].size(0) < batch_size:
        raise ValueError(
            f"the training text gives only {examples['input_ids'].size(0)} sequences, fewer than "
            f"batch_size={batch_size}; give more text or a smaller batch size"
        )
    data = pretraining_data(examples, tokenizer, masking="none", batch_size=batch_size, seed=seed)
    held = pretraining_examples(held_docs, tokenizer, **rows, seed=seed + 1) if held_docs else None

    eval_fn = None  # the held-out evaluation (none without held-out documents)
    if held is not None:
        eval_fn = partial(evaluate_plm, examples=held, K=K, n_predict=n_predict, seed=seed)

    model = new_model(XLNetLMHeadModel, config, seed=seed, device=device, init=init)

    def train(m: nn.Module) -> History:
        orders = torch.Generator().manual_seed(seed + 104729)  # the training orders, reproducible
        return fit(
            m,
            data,
            partial(plm_loss, K=K, n_predict=n_predict, generator=orders),
            steps=steps,
            lr=lr,
            eval_fn=eval_fn,
            eval_every=eval_every,
            progress=progress,
            desc="XLNet pretraining (permutation LM)",
        )

    loop = dict(steps=steps, batch_size=batch_size, lr=lr, seed=seed, eval_every=eval_every)
    options = dict(K=K, n_predict=n_predict, row_unit=row_unit, max_len=max_len, **loop)
    inputs = RecipeInputs(train_docs, held_docs, tokenizer, init)
    return train_pretrained("pretrain_xlnet", model, train, options, inputs, cache_name=cache_name)


# ---------------------------------------------------------------------------------------
# Command line: course train xlnet
# ---------------------------------------------------------------------------------------


def _cmd(args: argparse.Namespace) -> int:
    def train(documents: list, device: torch.device) -> PretrainedModel:
        return pretrain_xlnet(
            args.size,
            documents,
            K=args.K,
            n_predict=args.n_predict,
            row_unit=args.row_unit,
            device=device,
            **document_arguments(args),
        )

    def summary(model: nn.Module, tokenizer, history: History, device: torch.device, seconds: float) -> str:
        what, objective = f"{args.size} XLNet", " with the permutation LM"
        return pretraining_summary(what, model, tokenizer, history, device, seconds, objective=objective)

    return run_document_recipe(args, "pretrain-xlnet", train=train, summary=summary)


def _options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--tokenizer", choices=["wordpiece", "byte-bpe"], default="wordpiece", help="default wordpiece"
    )
    targets = p.add_mutually_exclusive_group()
    targets.add_argument(
        "--K",
        type=positive(float),
        default=None,
        help=f"predict the last 1/K of each factorisation order (default {DEFAULT_K}, the paper's; 1: all)",
    )
    targets.add_argument(
        "--n-predict",
        type=positive(int),
        default=None,
        help="predict the last N tokens of each order instead",
    )
    p.add_argument(
        "--row-unit",
        choices=list(ROW_UNITS),
        default="sentence",
        help="one sentence per row (default) or full-sentence blocks of --max-len tokens",
    )
    p.add_argument(
        "--n-docs", type=positive(int), default=2000, help="generated documents when no --text is given"
    )


def register(sub) -> None:
    """Add ``course train xlnet`` to the ``course`` command."""
    add_recipe_command(
        sub,
        "pretrain-xlnet",
        help="pretrain an XLNet with the permutation language model on your text or the generated corpus",
        description="Pretrain an XLNet from scratch with the course's recipe (course_lib.recipes.xlnet) "
        "and save model.safetensors, config.json and tokenizer.json in --out. Documents are separated by "
        "blank lines.",
        out_help="folder for the model, its config and tokenizer",
        training=PRETRAINING_OPTIONS,
        options=_options,
        run=_cmd,
    )


def main(argv: list[str] | None = None) -> int:
    """``python -m course_lib.recipes.xlnet ...``: the same as ``course train xlnet ...``."""
    return module_main(register, "pretrain-xlnet", "course_lib.recipes.xlnet", argv)


if __name__ == "__main__":
    sys.exit(main())
