"""What every recipe shares: the registry of model classes (:mod:`.registry`), the checks and
the cached training run of a recipe, the skeleton of its command line (``course <command>``: options, run,
report), the metadata stored with a trained model, and saving and loading a model folder by
its registered class. Used by every recipe.

**The registry** (:mod:`course_lib.recipes.registry`, imported here). A recipe builds,
saves and loads models by class *name*:
:func:`register_model` makes a class known (``MODEL_CLASSES[name] = cls``), a saved folder
records the name (``"architecture"`` in ``config.json``) and :func:`registered_class` turns it
back into the class, whose ``config_class`` rebuilds the configuration. A new model family
(ALBERT next) registers its classes and every recipe that takes a ``model_class`` trains,
saves and loads it; nothing is copied and no recipe names a class. :func:`save_model` and
:func:`load_model` are the one way a recipe writes and reads a model folder.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, NamedTuple

import torch
from tokenizers import Tokenizer
from torch import nn

from ..checkpoints import load_checkpoint, save_checkpoint, train_or_load
from ..data import load_documents
from ..data.documents import sentence_texts
from ..device import get_device, seed_everything
from ..files import atomic_write_text
from ..train import PRECISIONS, SCHEDULES, History, RunOptions, training_run
from .registry import (
    MASKED_LMS,
    MODEL_CLASSES,
    architecture_of,
    is_masked_lm,
    register_model,
    registered_class,
)

__all__ = [
    "MODEL_CLASSES",
    "register_model",
    "registered_class",
    "MASKED_LMS",
    "is_masked_lm",
    "architecture_of",
    "require_positive",
    "fingerprint",
    "train_cached",
    "positive",
    "add_text_and_out",
    "add_run_options",
    "add_trainer_options",
    "run_options",
    "init_distributed",
    "TrainingOptions",
    "training_arguments",
    "document_arguments",
    "add_recipe_command",
    "run_recipe",
    "run_metadata",
    "save_folder",
    "require_files",
    "saved_architecture",
    "save_model",
    "load_model",
    "module_main",
    "SIZES",
    "BERT_NAMES",
    "XL_NAMES",
    "sized",
    "DEFAULT_LR",
    "PRETRAINING_OPTIONS",
    "documents_fingerprint",
    "tokenizer_fingerprint",
    "weights_fingerprint",
    "data_spec",
    "PretrainedModel",
    "RecipeInputs",
    "new_model",
    "train_pretrained",
    "save_pretrained",
    "run_document_recipe",
    "pretraining_summary",
    "load_pretrained",
]


def require_positive(**values: int) -> None:
    """``ValueError`` naming the first of ``values`` (name -> number) that is below 1."""
    for name, value in values.items():
        if value < 1:
            raise ValueError(f"{name} must be positive, got {value}")


def fingerprint(parts: Iterable[bytes]) -> str:
    """A short hash (16 hex digits of SHA-256) of ``parts`` in order: the recipes' cache keys
    of texts, tokenizers and weights."""
    h = hashlib.sha256()
    for part in parts:
        h.update(part)
    return h.hexdigest()[:16]


def train_cached(
    cache_name: str | None,
    model: nn.Module,
    spec: Callable[[], Mapping[str, Any]],
    train: Callable[[nn.Module], History],
) -> History:
    """``train(model)``, or, with a ``cache_name``, :func:`~course_lib.checkpoints.train_or_load`
    keyed by ``spec()`` (built only then: it may hash the data). Leaves ``model`` in eval mode."""
    history = train(model) if cache_name is None else train_or_load(cache_name, model, spec(), train)
    model.eval()
    return history


def positive(kind: type) -> Callable[[str], Any]:
    """An argparse ``type`` that parses with ``kind`` and rejects values that are not > 0."""

    def parse(text: str):
        value = kind(text)
        if not value > 0:
            raise argparse.ArgumentTypeError(f"must be positive, got {text}")
        return value

    return parse


def add_text_and_out(p: argparse.ArgumentParser, *, out_help: str) -> None:
    """``--text`` (files, folder or glob; default ``$COURSE_TEXT``, else generated) and ``--out``."""
    p.add_argument(
        "--text",
        default=None,
        metavar="PATH_OR_GLOB",
        help="text files: a file, a folder of *.txt, or a quoted glob "
        "(default: $COURSE_TEXT, else the generated corpus)",
    )
    # required, checked after a --config file is read (which may give it as `out`)
    p.add_argument("--out", default=None, metavar="DIR", help=out_help + " (required)")


def add_run_options(p: argparse.ArgumentParser, *, seed: int = 0) -> None:
    """``--eval-every``, ``--device`` and ``--seed``."""
    p.add_argument(
        "--eval-every",
        type=positive(int),
        default=None,
        help="held-out evaluation every N steps (default: at the end)",
    )
    p.add_argument(
        "--device",
        default=None,
        help="cpu, cuda, cuda:1, mps (default: $COURSE_DEVICE, else the best available)",
    )
    p.add_argument("--seed", type=int, default=seed)
    add_trainer_options(p)


def add_trainer_options(p: argparse.ArgumentParser) -> None:
    """The options of the training loop itself (:class:`~course_lib.train.RunOptions`):
    accumulation, precision, schedule, checkpoints and resume, logs."""
    g = p.add_argument_group("training loop")
    g.add_argument(
        "--accumulate",
        type=positive(int),
        default=1,
        metavar="K",
        help="micro-batches per optimiser step (gradient accumulation; default 1)",
    )
    g.add_argument(
        "--precision",
        choices=list(PRECISIONS),
        default="auto",
        help="auto: bf16 autocast on a capable GPU, fp32 elsewhere (default); bf16/fp16 autocast "
        "(fp16 with a gradient scaler); fp32",
    )
    g.add_argument("--schedule", choices=sorted(SCHEDULES), default="cosine", help="decay after warm-up")
    g.add_argument(
        "--checkpoint-every",
        type=positive(int),
        default=None,
        metavar="N",
        help="write the training state every N steps (to --checkpoint-dir)",
    )
    g.add_argument(
        "--checkpoint-dir",
        default=None,
        metavar="DIR",
        help="training states for --resume (default: OUT/checkpoints when --checkpoint-every or --resume)",
    )
    g.add_argument(
        "--resume",
        action="store_true",
        help="continue a killed run from its last training state (same options); ends as if never stopped",
    )
    g.add_argument("--log-dir", default=None, metavar="DIR", help="per-step CSV metrics (default: OUT/logs)")
    g.add_argument(
        "--tensorboard", default=None, metavar="DIR", help="also log to TensorBoard (needs tensorboard)"
    )
    g.add_argument("--compile", action="store_true", help="torch.compile the model's forward pass")


def run_options(args: argparse.Namespace) -> RunOptions:
    """The :class:`~course_lib.train.RunOptions` of a command line (see :func:`add_trainer_options`)."""
    out = Path(args.out)
    checkpoint_dir = getattr(args, "checkpoint_dir", None)
    if checkpoint_dir is None and (getattr(args, "checkpoint_every", None) or getattr(args, "resume", False)):
        checkpoint_dir = str(out / "checkpoints")
    return RunOptions(
        accumulate=getattr(args, "accumulate", 1),
        precision=getattr(args, "precision", "auto"),
        schedule=getattr(args, "schedule", "cosine"),
        checkpoint_dir=checkpoint_dir,
        checkpoint_every=getattr(args, "checkpoint_every", None),
        resume=getattr(args, "resume", False),
        log_dir=getattr(args, "log_dir", None) or str(out / "logs"),
        tensorboard=getattr(args, "tensorboard", None),
        compile=getattr(args, "compile", False),
    )


def init_distributed(device: torch.device) -> tuple[torch.device, int, int]:
    """Under ``torchrun`` (``WORLD_SIZE`` > 1): join the process group (NCCL on GPUs, gloo on
    CPUs) and give this process its GPU. Returns ``(device, rank, world size)``."""
    import os

    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return device, 0, 1
    import torch.distributed as dist

    if not dist.is_initialized():
        dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")
    if device.type == "cuda":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
    return device, dist.get_rank(), dist.get_world_size()


@dataclass(frozen=True)
class TrainingOptions:
    """The defaults and wording of the options every recipe command has: ``--steps``,
    ``--size``, ``--batch-size``, ``--lr``, ``--max-len`` and ``--vocab-size`` (and the
    default ``--seed``); :func:`training_arguments` hands them to the recipe."""

    sizes: Sequence[str] | None  # the names of --size (None: the command has no --size)
    size_help: str | None
    steps: int
    batch_size: int
    batch_unit: str  # what a step's batch counts: "sequences", "sentences"
    max_len: int | None  # None: no --max-len (nor --vocab-size below)
    max_len_help: str | None  # "tokens per sequence", ...
    vocab_size: int | None
    vocab_help: str | None  # "tokenizer vocabulary", ...
    size: str = "small"
    seed: int = 0

    def add_to(self, p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--steps", type=positive(int), default=self.steps, help=f"optimiser steps (default {self.steps})"
        )
        if self.sizes is not None:
            p.add_argument("--size", choices=list(self.sizes), default=self.size, help=self.size_help)
        p.add_argument(
            "--batch-size",
            type=positive(int),
            default=self.batch_size,
            help=f"{self.batch_unit} per step (default {self.batch_size})",
        )
        p.add_argument(
            "--lr",
            type=positive(float),
            default=None,
            help="peak learning rate" + (" (default depends on --size)" if self.sizes is not None else ""),
        )
        if self.max_len is not None:
            p.add_argument(
                "--max-len",
                type=positive(int),
                default=self.max_len,
                help=f"{self.max_len_help} (default {self.max_len})",
            )
        if self.vocab_size is None:
            return
        p.add_argument(
            "--vocab-size",
            type=positive(int),
            default=self.vocab_size,
            help=f"{self.vocab_help} (default {self.vocab_size})",
        )


def training_arguments(args: argparse.Namespace) -> dict[str, Any]:
    """The recipe's keyword arguments from the options every recipe command has
    (:class:`TrainingOptions` and :func:`add_run_options`): ``steps``, ``batch_size``, ``lr``,
    ``max_len``, ``vocab_size``, ``eval_every`` and ``seed``."""
    names = ("steps", "batch_size", "lr", "max_len", "vocab_size", "eval_every", "seed")
    return {name: getattr(args, name) for name in names if hasattr(args, name)}


def document_arguments(args: argparse.Namespace) -> dict[str, Any]:
    """:func:`training_arguments` and what every recipe that trains on documents reads from its
    command line: ``tokenizer_kind`` (``--tokenizer``) and ``heldout`` (``--heldout``; 0: none)."""
    heldout = getattr(args, "heldout", 0.05) or None
    return {**training_arguments(args), "tokenizer_kind": args.tokenizer, "heldout": heldout}


def add_recipe_command(
    sub: Any,
    command: str,
    *,
    help: str,
    description: str,
    out_help: str,
    training: TrainingOptions,
    options: Callable[[argparse.ArgumentParser], None],
    run: Callable[[argparse.Namespace], int],
) -> argparse.ArgumentParser:
    """Add ``course <command>`` to the subparsers ``sub``: ``--text`` and ``--out``, the
    ``training`` options, the recipe's own ``options(parser)``, then ``--eval-every``,
    ``--device`` and ``--seed``; ``run(args)`` runs it (usually through :func:`run_recipe`)."""
    p = sub.add_parser(command, help=help, description=description)
    add_text_and_out(p, out_help=out_help)
    training.add_to(p)
    options(p)
    add_run_options(p, seed=training.seed)
    p.set_defaults(func=run)
    return p


def run_recipe(
    args: argparse.Namespace,
    command: str,
    *,
    read_text: Callable[[], Any],
    train: Callable[[Any, torch.device], tuple[nn.Module, Any, History]],
    save: Callable[..., Path],
    summary: Callable[[nn.Module, Any, History, torch.device, float], str],
    held_back: str,
    loader: str,
    heldout_note: Callable[[Mapping[str, float]], str] | None = None,
) -> int:
    """The run of every ``course <command>``: pick the device, ``read_text()``, ``train(text,
    device) -> (model, tokenizer or vocabulary, history)`` (timed), save it with
    :func:`run_metadata` and print ``summary(...)``, the held-out evaluation (plus
    ``heldout_note(evals)``) and where the model went (``loader`` reads it back). A
    ``ValueError`` or ``FileNotFoundError`` before the training ends is printed as
    ``course <command>: ...`` and returns 2; success returns 0."""
    try:
        device, rank, world = init_distributed(get_device(args.device))
        options = run_options(args)
        text = read_text()
        t0 = time.perf_counter()
        with training_run(options):
            model, extra, history = train(text, device)
    except (ValueError, FileNotFoundError, FloatingPointError) as exc:
        print(f"{getattr(args, '_prog', None) or 'course ' + command}: {exc}", file=sys.stderr)
        return 2
    except RuntimeError as exc:
        if "out of memory" not in str(exc):
            raise
        print(f"{getattr(args, '_prog', None) or 'course ' + command}: {exc}", file=sys.stderr)
        return 3
    seconds = time.perf_counter() - t0
    if rank != 0:  # rank 0 saves and reports
        return 0
    metadata, evals = run_metadata(args, history, seconds, device)
    metadata["processes"] = world
    save(args.out, model, extra, metadata=metadata)
    print(summary(model, extra, history, device, seconds))
    if evals:
        note = heldout_note(evals) if heldout_note is not None else ""
        print("held-out: " + ", ".join(f"{k} {v:.3f}" for k, v in evals.items()) + note)
    else:
        why = (
            "--heldout 0"
            if getattr(args, "heldout", None) == 0
            else "every 20th document is held out and both sides need at least two: in text files blank "
            "lines separate documents"
            if held_back == "documents"
            else f"too few {held_back} to hold some back"
        )
        print(f"held-out: none ({why})")
    print(f"saved to {Path(args.out).resolve()} (load with {loader})")
    return 0


def run_document_recipe(
    args: argparse.Namespace,
    command: str,
    *,
    train: Callable[[list, torch.device], tuple[nn.Module, Any, History]],
    summary: Callable[[nn.Module, Any, History, torch.device, float], str],
) -> int:
    """:func:`run_recipe` of a recipe that trains on documents (``--text``, else ``--n-docs``
    generated ones) and saves with :func:`save_pretrained` (read back by :func:`load_pretrained`)."""
    return run_recipe(
        args,
        command,
        read_text=lambda: load_documents(args.text, n_docs=args.n_docs, seed=args.seed),
        train=train,
        save=save_pretrained,
        summary=summary,
        held_back="documents",
        loader="course_lib.recipes.common.load_pretrained",
    )


def pretraining_summary(
    what: str,
    model: nn.Module,
    tokenizer: Any,
    history: History,
    device: torch.device,
    seconds: float,
    *,
    vocabulary_note: str = "",
    objective: str = "",
) -> str:
    """The line a pretraining command prints: ``pretrained a <what> (<parameters>, vocabulary
    <size><vocabulary_note>)<objective> for <steps> on <device> in <seconds>; final training loss``."""
    return (
        f"pretrained a {what} ({model.num_parameters() / 1e6:.1f}M parameters, vocabulary "
        f"{tokenizer.get_vocab_size()}{vocabulary_note}){objective} for {len(history.loss)} steps on "
        f"{device.type} in {seconds:.0f} s; final training loss {history.loss[-1]:.3f}"
    )


def run_metadata(
    args: argparse.Namespace, history: History, seconds: float, device: torch.device
) -> tuple[dict[str, Any], dict[str, float]]:
    """``(metadata to store with the model, last held-out evaluation)`` of a command-line run."""
    evals = {k: v[-1] for k, v in history.evals.items()}
    metadata = {
        "recipe": {k: v for k, v in vars(args).items() if k != "func"},
        "text": args.text or "generated corpus",
        "history": history.to_dict(),
        "heldout": evals,
        "seconds": seconds,
        "device": str(device),
        "torch": torch.__version__,
    }
    return metadata, evals


def save_folder(
    out_dir: Path | str, model: nn.Module, metadata: Mapping[str, Any], texts: Mapping[str, str]
) -> Path:
    """Write ``model.safetensors`` (+ ``model.json`` with ``metadata``) and each of ``texts``
    (file name -> content) into ``out_dir``, each atomically: an interrupted save leaves the
    previous files whole. Returns the folder."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    save_checkpoint(out / "model.safetensors", model, dict(metadata))
    for name, text in texts.items():
        atomic_write_text(out / name, text)
    return out


def require_files(path: Path | str, names: tuple[str, ...], command: str) -> Path:
    """The folder, after checking that it holds every file of ``names`` (else a
    ``FileNotFoundError`` that names the missing file and the command that writes them)."""
    folder = Path(path)
    for name in names:
        if not (folder / name).is_file():
            raise FileNotFoundError(f"{folder / name} is missing: not a folder written by `{command}`")
    return folder


def save_model(
    out_dir: Path | str,
    model: nn.Module,
    texts: Mapping[str, str],
    *,
    metadata: Mapping[str, Any] | None = None,
) -> Path:
    """Write a model folder: ``config.json`` (the registered ``"architecture"`` and the
    configuration), ``model.safetensors`` (+ ``model.json``: ``metadata`` and the architecture)
    and each of ``texts`` (file name -> content, e.g. the tokenizer), each atomically.
    :func:`load_model` reads it back. Returns the folder."""
    architecture = architecture_of(model)
    config = {"architecture": architecture, **model.config.to_dict()}
    texts = {"config.json": json.dumps(config, indent=1), **texts}
    return save_folder(out_dir, model, {"architecture": architecture, **dict(metadata or {})}, texts)


def saved_architecture(folder: Path | str) -> str:
    """The registered class name that a model folder's ``config.json`` records
    (``"BertForPreTraining"`` when it names none, as in older folders), read without loading
    the model: ``FileNotFoundError`` when the folder has no ``config.json``, ``ValueError``
    when it is not JSON."""
    config = Path(folder) / "config.json"
    if not config.is_file():
        raise FileNotFoundError(f"{folder} is not a model folder written by `course train` (no config.json)")
    try:
        record = json.loads(config.read_text())
    except ValueError:
        raise ValueError(f"{config} is not valid JSON") from None
    _refuse_hf_config(Path(folder), record)
    return (
        record.get("architecture", "BertForPreTraining") if isinstance(record, dict) else "BertForPreTraining"
    )


def _refuse_hf_config(folder: Path, config: Any) -> None:
    """``ValueError`` for a Hugging Face model folder (``model_type`` and no course
    ``architecture``: what ``course export`` writes), which course commands do not read."""
    if isinstance(config, dict) and "model_type" in config and "architecture" not in config:
        raise ValueError(
            f"{folder} is a Hugging Face model folder (model_type {config['model_type']!r}, as `course "
            "export` writes): give the folder `course train` wrote, or load this one with transformers"
        )


def load_model(
    path: Path | str,
    files: tuple[str, ...],
    command: str,
    *,
    default_architecture: str,
    expected: type[nn.Module] = nn.Module,
    device: torch.device | str | None = None,
) -> tuple[nn.Module, Path]:
    """Read the model of a folder written by :func:`save_model`: ``(model in eval mode, folder)``.

    The folder must also hold ``files`` (else a ``FileNotFoundError`` naming ``command``, the
    command that writes such folders). The class is the registered one named in
    ``config.json`` (``default_architecture`` when it names none, as in older folders) and
    must be a subclass of ``expected``; unknown configuration fields are an error.
    """
    folder = require_files(path, ("config.json", "model.safetensors", *files), command)
    try:
        config = json.loads((folder / "config.json").read_text())
    except (ValueError, UnicodeDecodeError):
        raise ValueError(f"{folder / 'config.json'} is not valid JSON") from None
    if not isinstance(config, dict):
        raise ValueError(f"{folder / 'config.json'}: expected a JSON object of configuration fields")
    _refuse_hf_config(folder, config)
    architecture = config.pop("architecture", default_architecture)
    try:
        cls = registered_class(architecture)
    except ValueError as e:
        raise ValueError(f"{folder / 'config.json'}: {e}") from None
    if not issubclass(cls, expected):
        raise ValueError(
            f"{folder / 'config.json'}: architecture {architecture!r} is not a kind of {expected.__name__}"
        )
    unknown = sorted(set(config) - {f.name for f in fields(cls.config_class)})
    if unknown:
        raise ValueError(f"{folder / 'config.json'}: unknown {cls.config_class.__name__} fields {unknown}")
    model = cls(cls.config_class(**config))
    if device is not None:
        model = model.to(device)
    load_checkpoint(folder / "model.safetensors", model)
    return model.eval(), folder


def module_main(register: Callable[[Any], None], command: str, module: str, argv: list[str] | None) -> int:
    """``python -m <module> ...``: ``course train OBJECTIVE ...`` for the module's objective
    (the recipe named ``command``: ``bert`` for the BERT recipe), the only training command."""
    from .train_command import OBJECTIVES
    from .train_command import main as train_main

    objective = next(name for name, spec in OBJECTIVES.items() if spec[0] == module)
    return train_main([objective, *(sys.argv[1:] if argv is None else argv)])


# ---------------------------------------------------------------------------------------
# Model sizes, fingerprints of a run's inputs, pretrained-model folders
# ---------------------------------------------------------------------------------------


# Model shapes by name (the papers' symbols: d_model, heads, layers, d_ff); :func:`sized` gives
# them in a config's field names. "small" is the chapter's model; "base-like" is BERT-base's shape.
SIZES: dict[str, dict[str, int]] = {
    "tiny": dict(d_model=32, n_heads=2, n_layers=2, d_ff=64),  # tests: milliseconds per step
    "small": dict(d_model=128, n_heads=4, n_layers=2, d_ff=512),  # the chapter, on a CPU
    "medium": dict(d_model=256, n_heads=4, n_layers=6, d_ff=1024),  # a laptop GPU, minutes
    "base-like": dict(d_model=768, n_heads=12, n_layers=12, d_ff=3072),  # BERT-base: a real GPU, hours
}

# The shape's fields in each family's configs (Hugging Face's names): BERT, RoBERTa, ALBERT ...
BERT_NAMES = {
    "d_model": "hidden_size",
    "n_heads": "num_attention_heads",
    "n_layers": "num_hidden_layers",
    "d_ff": "intermediate_size",
}
# ... and XLNet, Transformer-XL
XL_NAMES = {"d_model": "d_model", "n_heads": "n_head", "n_layers": "n_layer", "d_ff": "d_inner"}


def sized(size: str, names: Mapping[str, str]) -> dict[str, int]:
    """The shape called ``size`` in :data:`SIZES` (``ValueError`` for an unknown name) under a
    config's field names (``names``: shape field -> config field, e.g. :data:`XL_NAMES`)."""
    if size not in SIZES:
        raise ValueError(f"unknown size {size!r}; choose one of {sorted(SIZES)}")
    return {names[k]: v for k, v in SIZES[size].items()}


DEFAULT_LR = {"tiny": 3e-3, "small": 1e-3, "medium": 5e-4, "base-like": 1e-4}  # peak Adam learning rates

# the defaults of the transformer pretraining commands (course train bert, xlnet, transfo-xl)
PRETRAINING_OPTIONS = TrainingOptions(
    sizes=sorted(SIZES),
    size_help="model shape (default small; the same shapes as pretrain-bert)",
    steps=2000,
    batch_size=64,
    batch_unit="sequences",
    max_len=128,
    max_len_help="tokens per sequence",
    vocab_size=8000,
    vocab_help="tokenizer vocabulary",
)


def documents_fingerprint(documents: Sequence[Any]) -> str:
    """A short hash of the documents' sentences (changes when the training text changes)."""
    return fingerprint(part for d in documents for part in ("\n".join(sentence_texts(d)).encode(), b"\x00"))


def tokenizer_fingerprint(tokenizer) -> str:
    return fingerprint([tokenizer.to_str().encode()])


def weights_fingerprint(model: nn.Module) -> str:
    """A short hash of a model's weights (e.g. to key a fine-tuning run on the pretrained body)."""
    return fingerprint(
        part
        for name, t in sorted(model.state_dict().items())
        for part in (name.encode(), t.detach().float().cpu().contiguous().numpy().tobytes())
    )


def data_spec(
    train_docs: Sequence[Any], held_docs: Sequence[Any], tokenizer, init: nn.Module | None
) -> dict[str, Any]:
    """The part of a recipe's cache key that every recipe shares: fingerprints of the training
    and held-out documents, of the tokenizer and of the starting weights."""
    return dict(
        documents=documents_fingerprint(train_docs),
        heldout=documents_fingerprint(held_docs) if held_docs else None,
        tokenizer=tokenizer_fingerprint(tokenizer),
        init=weights_fingerprint(init) if init is not None else None,
    )


class PretrainedModel(NamedTuple):
    """What a pretraining recipe returns (unpacks as ``model, tokenizer, history``):
    :func:`~course_lib.recipes.bert.pretrain_bert`, ``pretrain_xlnet``, ``pretrain_transfo_xl``."""

    model: nn.Module  # the trained model of the recipe's (registered) class; eval mode
    tokenizer: Any  # the tokenizers.Tokenizer the model reads
    history: History  # losses per step; evals["mlm_accuracy"] etc. on held-out documents


class RecipeInputs(NamedTuple):
    """What a pretraining recipe trains on besides its options (the data part of its cache
    key, :func:`data_spec`)."""

    train_docs: Sequence[Any]
    held_docs: Sequence[Any]
    tokenizer: Any
    init: nn.Module | None  # the model to start from (continued pretraining), or None


def new_model(
    model_class: type[nn.Module], config: Any, *, seed: int, device: torch.device, init: nn.Module | None
) -> nn.Module:
    """A recipe's model to train: ``model_class(config)`` on ``device``, its weights drawn after
    seeding everything with ``seed``, or copied from ``init`` (a model of the same class and
    configuration; it is not modified)."""
    seed_everything(seed)
    model = model_class(config).to(device)
    if init is not None:
        if type(init) is not type(model) or init.config.to_dict() != config.to_dict():
            name = model_class.__name__
            raise ValueError(
                f"init must be {'an' if name[0] in 'AEIOU' else 'a'} {name} with the same configuration as "
                "the model to train"
            )
        model.load_state_dict(init.state_dict())
    return model


def train_pretrained(
    recipe: str,
    model: nn.Module,
    train: Callable[[nn.Module], History],
    options: Mapping[str, Any],
    inputs: RecipeInputs,
    *,
    cache_name: str | None,
) -> PretrainedModel:
    """The end of every pretraining recipe: ``train(model)``, through :func:`train_cached` with a
    ``cache_name``, keyed by the recipe's name, the model's configuration, ``options`` (every
    option that decides the model, listed unconditionally) and the data (:func:`data_spec` of
    ``inputs``); returns ``(model, tokenizer, history)``."""

    def spec() -> dict[str, Any]:
        return {"recipe": recipe, "config": model.config.to_dict(), **options, **data_spec(*inputs)}

    history = train_cached(cache_name, model, spec, train)
    return PretrainedModel(model, inputs.tokenizer, history)


def save_pretrained(
    out_dir: Path | str, model: nn.Module, tokenizer, *, metadata: Mapping[str, Any] | None = None
) -> Path:
    """Write ``model.safetensors`` (+ ``model.json``), ``config.json`` and ``tokenizer.json``
    into ``out_dir``, each atomically. Returns the folder."""
    return save_model(out_dir, model, {"tokenizer.json": tokenizer.to_str()}, metadata=metadata)


def load_pretrained(
    path: Path | str,
    *,
    expected: type[nn.Module] = nn.Module,
    device: torch.device | str | None = None,
) -> tuple[nn.Module, Any]:
    """``(model in eval mode, tokenizer)`` of a folder written by :func:`save_pretrained` (``course
    train``): the class is the registered one its ``config.json`` names (:func:`load_model`;
    ``BertForPreTraining`` when it names none) and must be a kind of ``expected``, plus
    ``tokenizer.json``. An ELMo folder (a vocabulary, no tokenizer) is pointed to its loader."""
    if (Path(path) / "config.json").is_file() and saved_architecture(path) == "ElmoLanguageModel":
        raise ValueError(
            f"{path} holds an ELMo biLM (a word vocabulary, no tokenizer.json): load it with "
            "course_lib.recipes.elmo.load_pretrained_elmo"
        )
    model, folder = load_model(
        path,
        ("tokenizer.json",),
        "course train",
        default_architecture="BertForPreTraining",
        expected=expected,
        device=device,
    )
    return model, Tokenizer.from_file(str(folder / "tokenizer.json"))
