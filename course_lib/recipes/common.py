"""What every recipe shares: the registry of model classes, argument types and options of the
command lines, the metadata stored with a trained model, atomic saving, and a checked loading
of the folder. Used by :mod:`course_lib.recipes.elmo` and :mod:`course_lib.recipes.bert`.

**The registry.** A recipe builds, saves and loads models by class *name*:
:func:`register_model` makes a class known (``MODEL_CLASSES[name] = cls``), a saved folder
records the name (``"architecture"`` in ``config.json``) and :func:`registered_class` turns it
back into the class, whose ``config_class`` rebuilds the configuration. A new model family
(ALBERT next) registers its classes and every recipe that takes a ``model_class`` trains,
saves and loads it; nothing is copied and no recipe names a class.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..checkpoints import atomic_write_text, save_checkpoint
from ..train import History

__all__ = [
    "MODEL_CLASSES",
    "register_model",
    "registered_class",
    "architecture_of",
    "positive",
    "add_text_and_out",
    "add_run_options",
    "run_metadata",
    "save_folder",
    "require_files",
    "module_main",
]

# class name -> class: what the recipes can build, save and load
MODEL_CLASSES: dict[str, type[nn.Module]] = {}


def register_model(cls: type[nn.Module]) -> type[nn.Module]:
    """Make ``cls`` known to the recipes under its name (usable as a class decorator).

    The class needs a ``config_class`` whose ``cls.config_class(**config.to_dict())`` rebuilds
    its configuration. Registering a *different* class under a taken name is an error.
    """
    name = cls.__name__
    if MODEL_CLASSES.get(name, cls) is not cls:
        raise ValueError(f"another class is already registered as {name!r}")
    if not hasattr(cls, "config_class"):
        raise TypeError(f"{name} has no config_class: the recipes could not rebuild its configuration")
    MODEL_CLASSES[name] = cls
    return cls


def registered_class(name: str) -> type[nn.Module]:
    """The registered class called ``name`` (``ValueError`` naming the registered ones otherwise)."""
    try:
        return MODEL_CLASSES[name]
    except KeyError:
        raise ValueError(f"unknown architecture {name!r}; registered: {sorted(MODEL_CLASSES)}") from None


def architecture_of(model: nn.Module) -> str:
    """The registered name of ``model``'s class (``TypeError`` when its class is not registered)."""
    name = type(model).__name__
    if MODEL_CLASSES.get(name) is not type(model):
        raise TypeError(
            f"{name} is not a registered model class (see register_model); registered: "
            f"{sorted(MODEL_CLASSES)}"
        )
    return name


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
    p.add_argument("--out", required=True, metavar="DIR", help=out_help)


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


def module_main(register: Callable[[Any], None], command: str, module: str, argv: list[str] | None) -> int:
    """``python -m <module> ...``: the same as ``course <command> ...``."""
    parser = argparse.ArgumentParser(prog=f"python -m {module}")
    sub = parser.add_subparsers(dest="command")
    register(sub)
    args = parser.parse_args([command, *(sys.argv[1:] if argv is None else argv)])
    return int(args.func(args) or 0)
