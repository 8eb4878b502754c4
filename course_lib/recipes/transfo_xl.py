r"""Pretraining a Transformer-XL language model: the recipe chapter 6 runs and
``course train transfo-xl`` runs.

The text is one long stream: every document's sentences, with ``[SEP]`` between documents
(no ``[CLS]``: nothing is classified), cut into rows of ``segments_per_row`` segments of
``segment_len`` tokens. A step reads a batch of rows segment by segment, carrying each
layer's memory from one segment to the next (Dai et al., 2019, §3.2):

.. math::

    \tilde h^{n-1}_{\tau+1} = \big[\mathrm{SG}(h^{n-1}_{\tau}) \circ h^{n-1}_{\tau+1}\big],

keys and values from :math:`\tilde h`, queries from the segment; the gradient stops at the
memory (``SG``), so a row costs ``segments_per_row`` segment-long forward passes and the
memory still carries information across all of them. The loss is the mean next-token
cross-entropy over every prediction of the row, the last position of a segment predicting
the first token of the next (:func:`~course_lib.models.transfo_xl.segment_token_nll`, the
same function the held-out evaluation runs without gradients). ``mem_len=0`` trains the same
network without memory: every segment on its own, the baseline of the chapter.

Held-out evaluation (:func:`evaluate_transfo_xl`): the held-out stream read the same way,
``lm_loss`` with the memory and ``lm_loss_no_memory`` without, over the same tokens.

Command line::

    course train transfo-xl --text 'PATH or GLOB' --out DIR [--size small] [--steps N]
        [--max-len 32 (tokens per segment)] [--segments-per-row 4] [--mem-len 32] [--device cuda]

writes ``DIR/model.safetensors`` (+ ``model.json``), ``DIR/config.json`` and
``DIR/tokenizer.json``; :func:`~course_lib.recipes.common.load_pretrained` reads them back.

Not here: the paper's adaptive softmax and adaptive inputs (a plain tied softmax instead,
:mod:`course_lib.models.transfo_xl`). Evaluating with a longer memory than in training, as the
paper does, is ``evaluate_transfo_xl(..., mem_len=...)``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from dataclasses import replace
from functools import partial
from typing import Any

import torch
from torch import Tensor, nn

from ..data import load_documents, special_ids
from ..data.documents import split_documents, tokenize_documents, train_tokenizer
from ..device import get_device
from ..models.transfo_xl import TransfoXLConfig, TransfoXLLMHeadModel, segment_token_nll, segmented_nll
from ..train import History, fit, model_device
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
    "transfo_xl_config",
    "token_stream",
    "stream_rows",
    "segment_loss",
    "evaluate_transfo_xl",
    "pretrain_transfo_xl",
    "register",
    "main",
]


def transfo_xl_config(size: str, *, vocab_size: int, mem_len: int, dropout: float = 0.1) -> TransfoXLConfig:
    """A :class:`~course_lib.models.transfo_xl.TransfoXLConfig` of the shape called ``size`` in
    :data:`~course_lib.recipes.common.SIZES` (the course's shapes for every recipe)."""
    return TransfoXLConfig(vocab_size=vocab_size, **sized(size, XL_NAMES), mem_len=mem_len, dropout=dropout)


def token_stream(documents: Sequence[Any], tokenizer) -> Tensor:
    """``[n]`` token ids: every document's sentences in order, ``[SEP]`` after each document."""
    sep = special_ids(tokenizer)["sep"]
    docs = tokenize_documents(documents, tokenizer, running=True)
    ids = [t for doc in docs for t in [*(x for s in doc for x in s), sep]]
    return torch.tensor(ids, dtype=torch.long)


def stream_rows(stream: Tensor, row_len: int) -> Tensor:
    """``[n // row_len, row_len]``: the stream cut into consecutive rows (the tail is dropped)."""
    if row_len < 2:
        raise ValueError(f"a row needs at least 2 tokens, got row_len={row_len}")
    n = stream.numel() // row_len
    return stream[: n * row_len].view(n, row_len)


def segment_loss(model: nn.Module, batch: Mapping[str, Tensor], *, segment_len: int, mem_len: int | None):
    """``loss_fn`` for :func:`~course_lib.train.fit`: the mean next-token cross-entropy of rows
    read segment by segment with memory (:func:`~course_lib.models.transfo_xl.segment_token_nll`)."""
    nll = segment_token_nll(model, batch["input_ids"], segment_len, mem_len)
    return nll.mean(), {}


@torch.no_grad()
def evaluate_transfo_xl(
    model: nn.Module, rows: Tensor, *, segment_len: int, mem_len: int | None = None, batch_size: int = 64
) -> dict[str, float]:
    """Held-out ``lm_loss`` (mean next-token NLL, nats) of ``rows`` read segment by segment with
    a memory of ``mem_len`` states (default the model's), and ``lm_loss_no_memory`` (every
    segment on its own), over the same tokens."""
    device = model_device(model)
    totals = {"lm_loss": 0.0, "lm_loss_no_memory": 0.0}
    count = 0
    for i in range(0, rows.size(0), batch_size):
        x = rows[i : i + batch_size].to(device)
        totals["lm_loss"] += float(segmented_nll(model, x, segment_len, mem_len).sum())
        totals["lm_loss_no_memory"] += float(segmented_nll(model, x, segment_len, 0).sum())
        count += x.size(0) * (x.size(1) - 1)
    return {k: v / max(count, 1) for k, v in totals.items()}


def pretrain_transfo_xl(
    config: TransfoXLConfig | str = "small",
    documents: Sequence[Any] | None = None,
    *,
    steps: int = 1000,
    batch_size: int = 32,
    lr: float | None = None,
    segment_len: int = 32,
    segments_per_row: int = 4,
    mem_len: int | None = None,
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
    """Pretrain a :class:`~course_lib.models.transfo_xl.TransfoXLLMHeadModel` on ``documents``
    with segment-level recurrence; returns ``(model, tokenizer, history)``.

    Args:
        config: a :class:`TransfoXLConfig` or a size name of :data:`~course_lib.recipes.common.SIZES`;
            its ``vocab_size`` and ``mem_len`` are set from the tokenizer and ``mem_len``.
        segment_len, segments_per_row: a row is ``segments_per_row`` consecutive segments of
            ``segment_len`` tokens of the stream, read in order with the memory carried.
        mem_len: states kept per layer (default ``segment_len``; 0: no memory, the baseline).
        steps, batch_size (rows per step), lr, tokenizer, tokenizer_kind, vocab_size, heldout,
            eval_every, init, seed, device, cache_name, progress: as
            :func:`~course_lib.recipes.bert.pretrain_bert`. Held-out ``lm_loss`` and
            ``lm_loss_no_memory`` (:func:`evaluate_transfo_xl`).
    """
    device = get_device() if device is None else torch.device(device)
    documents = list(load_documents() if documents is None else documents)
    if not documents:
        raise ValueError("pretrain_transfo_xl got no documents")
    require_positive(steps=steps, batch_size=batch_size, segments_per_row=segments_per_row)
    if segment_len < 2:
        raise ValueError(f"segment_len must be at least 2, got {segment_len}")
    mem_len = segment_len if mem_len is None else mem_len
    if mem_len < 0:
        raise ValueError(f"mem_len must be >= 0 (0: no memory), got {mem_len}")
    train_docs, held_docs = split_documents(documents, heldout)
    if tokenizer is None:
        tokenizer = train_tokenizer(train_docs, kind=tokenizer_kind, vocab_size=vocab_size)
    size = config if isinstance(config, str) else None
    if size is not None:
        config = transfo_xl_config(size, vocab_size=tokenizer.get_vocab_size(), mem_len=mem_len)
    elif isinstance(config, TransfoXLConfig):
        config = TransfoXLConfig(
            **{**config.to_dict(), "vocab_size": tokenizer.get_vocab_size(), "mem_len": mem_len}
        )
    else:
        raise TypeError(f"config must be a TransfoXLConfig or a size name, got {type(config).__name__}")
    if lr is None:
        lr = DEFAULT_LR.get(size or "", 1e-3)
    row_len = segment_len * segments_per_row
    rows = stream_rows(token_stream(train_docs, tokenizer), row_len)
    if rows.size(0) < batch_size:
        raise ValueError(
            f"the training text gives only {rows.size(0)} rows of {row_len} tokens, fewer than "
            f"batch_size={batch_size}; give more text, a smaller batch size or shorter rows"
        )
    held = stream_rows(token_stream(held_docs, tokenizer), row_len) if held_docs else None
    if held is not None and held.size(0) == 0:
        held = None

    def batches(step: int) -> dict[str, Tensor]:  # a new shuffle of the rows every epoch
        per_epoch = rows.size(0) // batch_size
        epoch, k = divmod(step, per_epoch)
        order = torch.randperm(
            rows.size(0), generator=torch.Generator().manual_seed(seed + 7919 * (epoch + 1))
        )
        return {"input_ids": rows[order[k * batch_size : (k + 1) * batch_size]]}

    eval_fn = None  # the held-out evaluation (none without held-out rows)
    if held is not None:
        eval_fn = partial(evaluate_transfo_xl, rows=held, segment_len=segment_len, mem_len=mem_len)

    model = new_model(TransfoXLLMHeadModel, config, seed=seed, device=device, init=init)

    def train(m: nn.Module) -> History:
        def loss_fn(model: nn.Module, batch: Mapping[str, Tensor]):
            return segment_loss(model, batch, segment_len=segment_len, mem_len=mem_len)

        return fit(
            m,
            batches,
            loss_fn,
            steps=steps,
            lr=lr,
            eval_fn=eval_fn,
            eval_every=eval_every,
            progress=progress,
            desc="Transformer-XL pretraining" + (" (no memory)" if mem_len == 0 else ""),
        )

    loop = dict(steps=steps, batch_size=batch_size, lr=lr, seed=seed, eval_every=eval_every)
    options = dict(segment_len=segment_len, segments_per_row=segments_per_row, **loop)
    inputs = RecipeInputs(train_docs, held_docs, tokenizer, init)
    return train_pretrained("pretrain_transfo_xl", model, train, options, inputs, cache_name=cache_name)


# ---------------------------------------------------------------------------------------
# Command line: course train transfo-xl
# ---------------------------------------------------------------------------------------


def _cmd(args: argparse.Namespace) -> int:
    def train(documents: list, device: torch.device) -> PretrainedModel:
        kwargs = document_arguments(args)
        segment_len = kwargs.pop("max_len")  # --max-len is the segment's length
        return pretrain_transfo_xl(
            args.size,
            documents,
            segment_len=segment_len,
            segments_per_row=args.segments_per_row,
            mem_len=args.mem_len,
            device=device,
            **kwargs,
        )

    def summary(model: nn.Module, tokenizer, history: History, device: torch.device, seconds: float) -> str:
        what, memory = f"{args.size} Transformer-XL", f", memory {model.config.mem_len}"
        return pretraining_summary(what, model, tokenizer, history, device, seconds, vocabulary_note=memory)

    return run_document_recipe(args, "pretrain-transfo-xl", train=train, summary=summary)


def _options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--tokenizer", choices=["wordpiece", "byte-bpe"], default="wordpiece", help="default wordpiece"
    )
    p.add_argument(
        "--segments-per-row",
        type=positive(int),
        default=4,
        help="consecutive segments read with the memory carried, per training row (default 4)",
    )
    p.add_argument(
        "--mem-len",
        type=int,
        default=None,
        help="states kept per layer as memory (default: --max-len, one segment; 0: no memory)",
    )
    p.add_argument(
        "--n-docs", type=positive(int), default=2000, help="generated documents when no --text is given"
    )


def register(sub) -> None:
    """Add ``course train transfo-xl`` to the ``course`` command."""
    add_recipe_command(
        sub,
        "pretrain-transfo-xl",
        help="pretrain a Transformer-XL language model (segment recurrence with memory) on your text or the "
        "generated corpus",
        description="Pretrain a Transformer-XL from scratch with the course's recipe "
        "(course_lib.recipes.transfo_xl) and save model.safetensors, config.json and tokenizer.json "
        "in --out. "
        "Documents are separated by blank lines.",
        out_help="folder for the model, its config and tokenizer",
        training=replace(
            PRETRAINING_OPTIONS,
            batch_size=32,
            batch_unit="rows of segments",
            max_len=32,
            max_len_help="tokens per segment",
        ),
        options=_options,
        run=_cmd,
    )


def main(argv: list[str] | None = None) -> int:
    """``python -m course_lib.recipes.transfo_xl ...``: the same as ``course train transfo-xl ...``."""
    return module_main(register, "pretrain-transfo-xl", "course_lib.recipes.transfo_xl", argv)


if __name__ == "__main__":
    sys.exit(main())
