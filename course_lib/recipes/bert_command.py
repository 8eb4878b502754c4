"""``course train bert``: the command line of the BERT family's recipe
(:func:`~course_lib.recipes.bert.pretrain_bert`), which ``course train bert``, ``roberta``,
``albert`` and ``causal`` run with their presets (:mod:`course_lib.recipes.train_command`).

Command line::

    course train bert --text 'PATH or GLOB' --steps N --out DIR [--device cuda] [--size small|base-like]
        [--pair-task nsp|sop|none] [--pair-unit sentence|segment] [--architecture CLASS]

writes ``DIR/model.safetensors`` (+ ``model.json`` with the training history),
``DIR/config.json`` and ``DIR/tokenizer.json``;
:func:`~course_lib.recipes.common.load_pretrained` reads them back.
Without ``--text`` (and without ``$COURSE_TEXT``) it trains on the generated corpus.
``--architecture`` names any registered class (:func:`~course_lib.recipes.common.register_model`),
e.g. ``AlbertForPreTraining``; without ``--pair-task`` the
class's own ``pair_objective`` is the pair task.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from typing import Any

import torch
from torch import nn

from ..models.bert import BertForMaskedLM, BertForPreTraining
from ..objectives.masking import MLM_PROBABILITY
from ..objectives.pretraining import ROW_UNITS
from ..train import History
from .bert import pretrain_bert
from .common import (
    PRETRAINING_OPTIONS,
    PretrainedModel,
    add_recipe_command,
    document_arguments,
    module_main,
    positive,
    pretraining_summary,
    registered_class,
    run_document_recipe,
)

__all__ = ["register", "main"]


def _pair_arguments(args: argparse.Namespace) -> dict[str, Any]:
    """``pretrain_bert``'s ``model_class`` and ``pair_task`` from ``--architecture``,
    ``--pair-task`` and ``--no-nsp`` (``pair_task`` only when one of the last two is given;
    otherwise ``pretrain_bert`` takes the architecture's own pair task, or NSP)."""
    out: dict[str, Any] = {}
    if args.architecture is not None:
        out["model_class"] = registered_class(args.architecture)
    if args.no_nsp or (getattr(args, "causal", None) and args.pair_task is None):
        out["pair_task"] = None  # (a causal LM has no pair task)
    elif args.pair_task is not None:
        out["pair_task"] = None if args.pair_task == "none" else args.pair_task
    return out


def _cmd(args: argparse.Namespace) -> int:
    def train(documents: list, device: torch.device) -> PretrainedModel:
        return pretrain_bert(
            args.size,
            documents,
            masking=args.masking,
            static_copies=args.static_copies,
            nsp_unit=args.pair_unit,
            row_unit=args.row_unit,
            causal=args.causal is not None,
            direction=(args.causal or "left-to-right").replace("-", "_"),
            mlm_probability=getattr(args, "mask_rate", None) or MLM_PROBABILITY,
            device=device,
            **_pair_arguments(args),
            **document_arguments(args),
        )

    def summary(model: nn.Module, tokenizer, history: History, device: torch.device, seconds: float) -> str:
        bert = type(model) in (BertForPreTraining, BertForMaskedLM)
        what = f"{args.size} {'BERT' if bert else type(model).__name__}"
        return pretraining_summary(what, model, tokenizer, history, device, seconds)

    return run_document_recipe(args, "pretrain-bert", train=train, summary=summary)


def _options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--tokenizer", choices=["wordpiece", "byte-bpe"], default="wordpiece", help="default wordpiece (BERT)"
    )
    p.add_argument(
        "--masking",
        choices=["static", "dynamic"],
        default="static",
        help="default static, as pretrain_bert and BERT's preprocessing (roberta masks dynamically)",
    )
    p.add_argument(
        "--static-copies",
        type=positive(int),
        default=1,
        help="masked copies for static masking (BERT used 10)",
    )
    pair = p.add_mutually_exclusive_group()
    pair.add_argument(
        "--pair-task",
        choices=["nsp", "sop", "none"],
        default=None,
        help="sentence-pair objective besides the masked LM: nsp (BERT's next sentence), sop (ALBERT's "
        "sentence order; needs a registered SOP model) or none (masked LM only, on full-sentence blocks, "
        "RoBERTa); default: the --architecture's own, else nsp",
    )
    pair.add_argument(
        "--no-nsp", action="store_true", help="masked LM only, on full-sentence blocks (= --pair-task none)"
    )
    p.add_argument(
        "--pair-unit",
        choices=["sentence", "segment"],
        default="sentence",
        help="A and B of a pair are single sentences (default) or segments of consecutive sentences "
        "up to half of --max-len each (as in the BERT and ALBERT papers)",
    )
    p.add_argument(
        "--row-unit",
        choices=list(ROW_UNITS),
        default="block",
        help="without a pair task (--no-nsp, --causal): full-sentence blocks of --max-len tokens "
        "(default, RoBERTa) or one sentence per row",
    )
    p.add_argument(
        "--architecture",
        default=None,
        metavar="CLASS",
        help="registered model class to train, e.g. BertForPreTraining, BertForMaskedLM, "
        "AlbertForPreTraining (default: BertForPreTraining with nsp, BertForMaskedLM with none, the "
        "registered SOP model with sop)",
    )
    p.add_argument(
        "--causal",
        choices=["left-to-right", "right-to-left"],
        default=None,
        help="train the same network as an autoregressive LM instead (BertLMHeadModel: causal attention, "
        "next-token loss, no masking, full-sentence blocks, no pair task) reading in this direction; "
        "stored in model.json's recipe",
    )
    p.add_argument(
        "--n-docs", type=positive(int), default=2000, help="generated documents when no --text is given"
    )


def register(sub) -> None:
    """Add ``course train bert`` to the ``course`` command."""
    add_recipe_command(
        sub,
        "pretrain-bert",
        help="pretrain a BERT (MLM + NSP) or another BERT-family model (e.g. MLM + SOP) on your text "
        "or the generated corpus",
        description="Pretrain a BERT from scratch with the course's recipe (course_lib.recipes.bert) "
        "and save "
        "model.safetensors, config.json and tokenizer.json in --out. Documents are separated by blank lines.",
        out_help="folder for the model, its config and tokenizer",
        training=replace(PRETRAINING_OPTIONS, size_help="model shape (default small; base-like = BERT-base)"),
        options=_options,
        run=_cmd,
    )


def main(argv: list[str] | None = None) -> int:
    """``python -m course_lib.recipes.bert_command ...``: the same as ``course train bert ...``."""
    return module_main(register, "pretrain-bert", "course_lib.recipes.bert_command", argv)


if __name__ == "__main__":
    sys.exit(main())
