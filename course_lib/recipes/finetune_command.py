"""``course finetune MODEL_DIR --task classify|tag --train FILE --out DIR``: fine-tune a model
trained by ``course train`` (bert, roberta, albert; a ``course train distill`` student too;
xlnet for ``--task tag`` only) on a labelled file, as chapter 3 does, with the library's own
fine-tuning recipes (:func:`~course_lib.recipes.finetune.finetune_classifier`: a classifier on
the pooled ``[CLS]`` vector; :func:`~course_lib.recipes.finetune.finetune_tagger`: one tag per
word, read at its first piece; the start's family chooses the task model,
:data:`~course_lib.recipes.finetune.FAMILIES`: the course has no ALBERT tagger and no XLNet
classifier).

Files (UTF-8; blank lines and lines starting with ``#`` are skipped in a TSV file):

* ``--task classify``: one example per line, ``label<TAB>text``, or
  ``label<TAB>text_a<TAB>text_b`` for a sentence-pair task (``[CLS] a [SEP] b [SEP]``);
* ``--task tag``: CoNLL-style, one word per line, ``word<TAB>tag`` (or separated by spaces),
  a blank line between sentences.

Labels and tags are names; their ids follow sorted order and are stored in the model folder
(``labels.json``, and ``id2label`` in ``config.json``'s record ``model.json``). Held-out
accuracy on ``--eval FILE``, or on every k-th example of ``--train`` held back
(``--heldout F``, default 0.1). The output folder holds the fine-tuned model in the
library's format (:func:`load_finetuned` reads it back: ``(model, tokenizer, labels)``), and
the metrics as JSON (``metrics.json``, also printed on stdout). Bad input is one line and
exit status 2.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

__all__ = [
    "read_classification_file",
    "read_tagging_file",
    "finetune_folder",
    "load_finetuned",
    "register_task_models",
    "register",
]

TASKS = ("classify", "tag")


@dataclass
class Labelled:
    """The examples of a labelled file and the label names (ids in this order)."""

    items: list[tuple[Any, int]]
    labels: list[str]


def _read_lines(path: str | Path) -> list[str]:
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist" if not path.exists() else f"{path} is not a file")
    try:
        return path.read_text(encoding="utf-8-sig").splitlines()  # -sig: a byte-order mark is dropped
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: not UTF-8 text (byte {e.start}); convert it to UTF-8") from None


def read_classification_file(path: str | Path, labels: list[str] | None = None) -> Labelled:
    """``label<TAB>text`` or ``label<TAB>text_a<TAB>text_b`` lines; ``labels``: the names
    known already (those of the training file, for a held-out file)."""
    raw: list[tuple[str, Any]] = []
    gaps = 0  # blank lines between examples: CoNLL's sentence breaks
    for number, line in enumerate(_read_lines(path), 1):
        if not line.strip() or line.startswith("#"):
            gaps += bool(raw) and not line.strip()
            continue
        fields = line.split("\t")
        if len(fields) not in (2, 3) or not all(f.strip() for f in fields):
            raise ValueError(
                f"{path}:{number}: expected 'label<TAB>text' or 'label<TAB>text_a<TAB>text_b', "
                f"got {len(fields)} field(s): {line[:80]!r}"
            )
        label = fields[0].strip()
        text = fields[1].strip() if len(fields) == 2 else (fields[1].strip(), fields[2].strip())
        raw.append((text, label))
    if not raw:
        raise ValueError(f"{path}: no examples (expected 'label<TAB>text' lines)")
    if len({isinstance(t, tuple) for t, _ in raw}) > 1:
        raise ValueError(f"{path}: some lines hold one text and some a pair; use one kind per file")
    if gaps and all(isinstance(t, str) and len(t.split()) == 1 for t, _ in raw):
        raise ValueError(
            f"{path}: every text is one word and blank lines separate groups of lines: this looks "
            "like a tagging file (word<TAB>tag); fine-tune a tagger with --task tag"
        )
    return _ids(path, raw, labels)


def read_tagging_file(path: str | Path, labels: list[str] | None = None) -> Labelled:
    """CoNLL-style: ``word<TAB>tag`` (or ``word tag``) per line, a blank line between sentences."""
    raw: list[tuple[Any, Any]] = []
    words: list[str] = []
    tags: list[str] = []
    for number, line in enumerate([*_read_lines(path), ""], 1):
        if not line.strip():
            if words:
                raw.append((words, tags))
                words, tags = [], []
            continue
        fields = line.split("\t") if "\t" in line else line.split()
        if len(fields) != 2 or not fields[0].strip() or not fields[1].strip():
            raise ValueError(
                f"{path}:{number}: expected 'word<TAB>tag' (a blank line between sentences), "
                f"got {line[:80]!r}"
            )
        if len(fields[1].split()) > 1:
            raise ValueError(
                f"{path}:{number}: the tag {fields[1].strip()[:40]!r} has spaces; tags are single names, "
                "so this looks like a 'label<TAB>text' file: fine-tune a classifier with --task classify"
            )
        words.append(fields[0].strip())
        tags.append(fields[1].strip())
    if not raw:
        raise ValueError(f"{path}: no sentences (expected 'word<TAB>tag' lines)")
    names = labels if labels is not None else sorted({t for _, ts in raw for t in ts})
    index = {name: i for i, name in enumerate(names)}
    items = []
    for k, (ws, ts) in enumerate(raw):
        unknown = [t for t in ts if t not in index]
        if unknown:
            raise ValueError(
                f"{path}: sentence {k + 1} has tag {unknown[0]!r}, not in the training file's {names}"
            )
        items.append((ws, [index[t] for t in ts]))
    return Labelled(items, list(names))


def _ids(path: str | Path, raw: list[tuple[Any, str]], labels: list[str] | None) -> Labelled:
    names = labels if labels is not None else sorted({y for _, y in raw})
    index = {name: i for i, name in enumerate(names)}
    for k, (_, y) in enumerate(raw):
        if y not in index:
            raise ValueError(f"{path}: example {k + 1} has label {y!r}, not in the training file's {names}")
    return Labelled([(t, index[y]) for t, y in raw], list(names))


def _split(items: list, heldout: float) -> tuple[list, list]:
    """Every k-th item held back (k = round(1 / heldout)), the rest for training."""
    if heldout <= 0:
        return items, []
    k = max(2, round(1 / heldout))
    return [x for i, x in enumerate(items) if i % k != k - 1], [
        x for i, x in enumerate(items) if i % k == k - 1
    ]


def _load_start(model_dir: Path, device: torch.device, task: str) -> tuple[nn.Module, Any]:
    """The pretrained model and tokenizer of ``model_dir`` when it is a masked LM
    (:func:`~course_lib.recipes.common.is_masked_lm`) or XLNet's permutation LM and its family
    has a model for ``task`` (:data:`~course_lib.recipes.finetune.FAMILIES`: BERT for either
    task, ALBERT for ``classify``, XLNet for ``tag``); ``ValueError`` with one line for anything
    else (a left-to-right LM, an already fine-tuned model), before any training."""
    from ..models.xlnet import XLNetLMHeadModel
    from .common import MODEL_CLASSES, is_masked_lm, load_pretrained, saved_architecture
    from .finetune import FAMILIES
    from .registry import with_article

    architecture = saved_architecture(model_dir)
    kinds = {"classify": ("classifier", "sentence classifier"), "tag": ("tagger", "tagger")}
    cls = MODEL_CLASSES.get(architecture)
    # the rule: a masked LM, or XLNet's permutation LM; chapter 5's left-to-right BERT
    # (BertLMHeadModel) has a BertConfig but is neither
    start = cls is not None and (is_masked_lm(architecture) or issubclass(cls, XLNetLMHeadModel))
    family = next((f for f in FAMILIES if start and issubclass(cls.config_class, f.config_class)), None)
    if family is None:
        raise ValueError(
            f"{model_dir} holds {with_article(architecture)}: course finetune starts from a masked LM "
            "trained by `course train bert`, `roberta`, `albert` (or a `distill` student), or, for "
            "--task tag, from `course train xlnet`"
        )
    field, noun = kinds[task]
    if getattr(family, field) is None:  # one rule for every family, read from FAMILIES
        able = " or ".join(f.name for f in FAMILIES if getattr(f, field) is not None)
        other = [t for t, (k, _) in kinds.items() if getattr(family, k) is not None]
        raise ValueError(
            f"{model_dir} holds {with_article(architecture)}: the course has no {family.name} {noun}, so "
            f"--task {task} starts from a {able} model"
            + (f"; {with_article(family.name)} model fine-tunes with --task {other[0]}" if other else "")
        )
    return load_pretrained(model_dir, device=device)


def _earlier_finetune_task(folder: Path) -> str | None:
    """The ``--task`` of the fine-tune a folder holds (its ``model.json``), else None."""
    from ..checkpoints import saved_recipe

    try:
        recipe = saved_recipe(folder)
    except ValueError:
        return None
    return recipe.get("task") if recipe.get("command") == "course finetune" else None


def finetune_folder(
    model_dir: str | Path,
    task: str,
    train: str | Path,
    out: str | Path,
    *,
    eval_file: str | Path | None = None,
    heldout: float = 0.1,
    steps: int = 300,
    batch_size: int = 16,
    lr: float = 1e-4,
    dropout: float | None = None,
    seed: int = 0,
    freeze_body: bool = False,
    device: str | None = None,
    progress: bool | None = None,
) -> dict[str, Any]:
    """Fine-tune the model of ``model_dir`` on the labelled file ``train`` (module docstring),
    save it to ``out`` and return the metrics (also ``out/metrics.json``). ``ValueError`` /
    ``FileNotFoundError`` with one line for what it cannot do."""
    from ..device import get_device
    from ..files import atomic_write_text
    from .common import save_pretrained
    from .finetune import (
        classification_accuracy,
        finetune_classifier,
        finetune_tagger,
        tagging_accuracy,
    )

    if task not in TASKS:
        raise ValueError(f"--task must be one of {TASKS}, got {task!r}")
    model_dir, out = Path(model_dir), Path(out)
    from ..files import check_output_path

    check_output_path(out, "--out", folder=True)
    if out.is_dir() and any(out.iterdir()):
        earlier = _earlier_finetune_task(out)
        if earlier != task:
            held = f"a --task {earlier} fine-tune" if earlier else "files that are not an earlier fine-tune"
            raise ValueError(
                f"--out {out} holds {held}; a --task {task} fine-tune would overwrite or mix with them: "
                "give a new or empty folder (an earlier --task "
                f"{task} fine-tune's folder is replaced)"
            )
    if out.resolve() == model_dir.resolve():
        raise ValueError("--out must differ from the pretrained model's folder")
    if not 0.0 <= heldout <= 0.5:
        raise ValueError(
            f"--heldout must be in [0, 0.5] (every k-th example is held out, k = round(1/F) >= 2), "
            f"got {heldout}"
        )
    read = read_classification_file if task == "classify" else read_tagging_file
    data = read(train)
    if len(data.labels) < 2:
        raise ValueError(
            f"{train}: only one {'label' if task == 'classify' else 'tag'} ({data.labels[0]!r}); need two"
        )
    if eval_file is not None:
        train_items, eval_items = data.items, read(eval_file, data.labels).items
    else:
        train_items, eval_items = _split(data.items, heldout)
    if not train_items:
        raise ValueError(f"{train}: no examples left to train on")
    dev = get_device(device)
    start, tokenizer = _load_start(model_dir, dev, task)
    register_task_models()  # so that the library loads the fine-tuned folder by its architecture
    options = dict(
        steps=steps,
        batch_size=batch_size,
        lr=lr,
        num_labels=len(data.labels),
        dropout=dropout,
        eval_items=eval_items or None,
        seed=seed,
        device=dev,
        progress=progress,
        freeze_body=freeze_body,
    )
    t0 = time.perf_counter()
    # (a family without the task's model was refused by _load_start, before any training)
    if task == "classify":
        model, history = finetune_classifier(start, tokenizer, train_items, **options)
    else:
        model, history = finetune_tagger(start, tokenizer, train_items, **options)
    seconds = time.perf_counter() - t0
    metrics: dict[str, Any] = {
        "model": str(model_dir),
        "task": task,
        "architecture": type(model).__name__,
        "labels": data.labels,
        "train_examples": len(train_items),
        "heldout_examples": len(eval_items),
        "heldout_from": _heldout_from(eval_file, heldout, bool(eval_items)),
        "steps": steps,
        "final_train_loss": history.loss[-1],
        "seconds": round(seconds, 2),
    }
    if eval_items:
        if task == "classify":
            metrics["heldout_accuracy"] = classification_accuracy(model, tokenizer, eval_items)
        else:
            # over every word, as the baseline: a word with no piece (or cut off) counts as wrong
            scores = tagging_accuracy(model, tokenizer, eval_items)
            metrics["heldout_accuracy"] = scores["accuracy"] * scores["tagged_share"]
        # the majority baseline: what a model that learned nothing from the text reaches
        flat = [y for _, y in eval_items] if task == "classify" else [t for _, ts in eval_items for t in ts]
        metrics["majority_baseline"] = max(flat.count(c) for c in set(flat)) / len(flat)
    metadata = {
        "recipe": {"command": "course finetune", "task": task, "start": str(model_dir), **_jsonable(options)},
        "labels": data.labels,
        "history": history.to_dict(),
        "metrics": metrics,
    }
    save_pretrained(out, model, tokenizer, metadata=metadata)
    atomic_write_text(out / "labels.json", json.dumps({"task": task, "labels": data.labels}, indent=1))
    atomic_write_text(out / "metrics.json", json.dumps(metrics, indent=1))
    return metrics


def register_task_models() -> None:
    """Make the fine-tuning recipes' task models (every family's classifier and tagger,
    :data:`~course_lib.recipes.finetune.FAMILIES`) known to the recipes' save and load."""
    from .common import register_model
    from .finetune import FAMILIES

    for family in FAMILIES:
        for cls in (family.classifier, family.tagger):
            if cls is not None:
                register_model(cls)


def _heldout_from(eval_file: str | Path | None, heldout: float, any_held: bool) -> str | None:
    if eval_file is not None:
        return str(eval_file)
    return f"--train, every k-th example (k = {max(2, round(1 / heldout))})" if any_held else None


def _jsonable(options: dict[str, Any]) -> dict[str, Any]:
    return {
        k: v if isinstance(v, (int, float, str, bool, type(None))) else str(v)
        for k, v in options.items()
        if k != "eval_items"
    }


def load_finetuned(
    folder: str | Path, *, device: torch.device | str | None = None
) -> tuple[nn.Module, Any, list]:
    """``(model in eval mode, tokenizer, label names)`` of a folder written by ``course finetune``."""
    from tokenizers import Tokenizer

    from .common import load_model

    register_task_models()
    folder = Path(folder)
    if not (folder / "labels.json").is_file():
        raise FileNotFoundError(
            f"{folder / 'labels.json'} is missing: not a folder written by `course finetune`"
        )
    model, folder = load_model(
        folder,
        ("tokenizer.json",),
        "course finetune",
        default_architecture="BertForSequenceClassification",
        device=device,
    )
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    return model, tokenizer, json.loads((folder / "labels.json").read_text())["labels"]


# finetune_folder's options that the command line gives under the same names
_OPTIONS = ("heldout", "steps", "batch_size", "lr", "dropout", "seed", "freeze_body", "device")


def _cmd(args: argparse.Namespace) -> int:
    from ..train import progress_enabled
    from .train_command import check_run_arguments

    progress = progress_enabled()
    try:
        check_run_arguments(args)  # --device and --out as course train checks them
        options = {name: getattr(args, name) for name in _OPTIONS}
        metrics = finetune_folder(
            args.model, args.task, args.train, args.out, eval_file=args.eval, progress=progress, **options
        )
    except (ValueError, FileNotFoundError) as exc:
        print(f"course finetune: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(metrics, indent=1))
    print(
        f"saved to {Path(args.out).resolve()} (load with course_lib.recipes.finetune_command.load_finetuned)",
        file=sys.stderr,
    )
    return 0


def register(sub: Any) -> None:
    from .common import positive
    from .train_command import fraction

    p = sub.add_parser(
        "finetune",
        help="fine-tune a model trained by `course train` as a classifier or a tagger on a labelled file",
        description=__doc__.split("\n\n")[0].replace("\n", " "),
    )
    p.add_argument(
        "model",
        metavar="MODEL_DIR",
        help="a folder written by `course train bert|roberta|albert` (or `xlnet`, for --task tag)",
    )
    p.add_argument("--task", choices=TASKS, required=True, help="classify: label<TAB>text; tag: word<TAB>tag")
    p.add_argument("--train", required=True, metavar="FILE", help="the labelled training file")
    p.add_argument(
        "--eval", default=None, metavar="FILE", help="a held-out labelled file (default: --heldout)"
    )
    p.add_argument(
        "--heldout",
        type=fraction(zero=True, most=0.5),
        default=0.1,
        metavar="F",
        help="without --eval: hold back every k-th example, k = 1/F (default 0.1; 0: none)",
    )
    p.add_argument("--out", required=True, metavar="DIR", help="folder for the fine-tuned model")
    p.add_argument("--steps", type=positive(int), default=300, help="optimiser steps (default 300)")
    p.add_argument("--batch-size", type=positive(int), default=16, help="examples per step (default 16)")
    p.add_argument("--lr", type=positive(float), default=1e-4, help="peak learning rate (default 1e-4)")
    p.add_argument(
        "--dropout", type=fraction(zero=True), default=None, metavar="P", help="dropout before the new layer"
    )
    p.add_argument("--seed", type=int, default=0, help="the new layer's weights and the batch order")
    p.add_argument(
        "--freeze-body", action="store_true", help="train only the new layer (feature-based, ELMo's way)"
    )
    p.add_argument("--device", default=None, help="cpu, cuda, cuda:1, mps")
    p.set_defaults(func=_cmd)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="course")
    sub = parser.add_subparsers(dest="command")
    register(sub)
    args = parser.parse_args(["finetune", *(sys.argv[1:] if argv is None else argv)])
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
