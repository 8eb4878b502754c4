"""Saving, loading and caching trained models (safetensors + JSON, written atomically).

Chapters train their models with :func:`train_or_load`: the first run trains and stores the
weights and the training history under a key that hashes everything that decides the
result (the training spec, the source of course_lib's training layers, the torch version and
the device type); later runs with the same key load them instead of training again, in any
chapter: chapter 7 loads the BERT chapter 3 trained. So a reader's
second run, and the test suite's second execution of a chapter after the book build, take
seconds, and the stored result is exactly what the code produces.

* cache folder: ``$COURSE_CACHE``, else ``~/.cache/course_lib``;
* ``COURSE_RETRAIN=1`` ignores the cache (and overwrites it).

Files are written to a temporary name and renamed into place, so a run killed mid-write
never leaves a truncated checkpoint behind, and a corrupt file is retrained, not trusted.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import random
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_model, save_model
from torch import nn

from .device import autocast_dtype, seed_offset
from .files import atomic_write_text, write_atomically
from .hashing import code_hash
from .train import History, model_device

__all__ = [
    "cache_dir",
    "source_fingerprint",
    "training_source_files",
    "TRAINING_SOURCES",
    "cache_key",
    "save_checkpoint",
    "load_checkpoint",
    "train_or_load",
    "rng_state",
    "set_rng_state",
    "save_train_state",
    "load_train_state",
]


def cache_dir() -> Path:
    root = os.environ.get("COURSE_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "course_lib")
    path = Path(root)
    path.mkdir(parents=True, exist_ok=True)
    return path


# The layers whose code decides what a training run produces: the recipes and everything
# below them (tests/test_layout.py holds the layer map; tests/test_checkpoints.py checks that
# importing every recipe loads nothing outside this list). Analysis, widgets, studies,
# notebooks and the grader only read trained models, so a change there keeps the cache.
TRAINING_SOURCES = (
    "checkpoints.py",
    "device.py",
    "files.py",
    "hashing.py",
    "train.py",
    "train_log.py",
    "train_parallel.py",
    "train_state.py",
    "nn",
    "data",
    "models",
    "objectives",
    "recipes",
)


def training_source_files() -> list[Path]:
    """The course_lib source files :func:`source_fingerprint` hashes, sorted."""
    root = Path(__file__).resolve().parent
    files: set[Path] = set()
    for entry in TRAINING_SOURCES:
        path = root / entry
        files.update(path.rglob("*.py") if path.is_dir() else [path])
    return sorted(files)


def source_fingerprint() -> str:
    """SHA-256 over the code of the training layers (:data:`TRAINING_SOURCES`), read from each
    file's syntax tree (:func:`course_lib.hashing.code_hash`).

    The same in every program, whatever it has imported: chapter 7 asking for chapter 3's
    BERT gets chapter 3's cached copy. A change to any training code invalidates every
    cached model; a change to analysis, plots, widgets or the grader invalidates none.
    """
    root = Path(__file__).resolve().parent
    h = hashlib.sha256()
    for path in training_source_files():
        h.update(str(path.relative_to(root).as_posix()).encode())
        h.update(_file_code(path))
    return h.hexdigest()


@functools.lru_cache(maxsize=None)
def _file_code(path: Path) -> bytes:
    # the code, not the text: a comment, a docstring, an import or a moved function keeps the
    # cache (course_lib.hashing)
    return code_hash(path).encode()


def cache_key(name: str, spec: Mapping[str, Any], device: torch.device | str = "cpu") -> str:
    """A file-name-safe key: ``name-<hash of spec, sources, torch version, device type, seed
    offset and, under autocast, the precision>``."""
    fields = {
        "spec": spec,
        "source": source_fingerprint(),
        "torch": torch.__version__.split("+")[0],
        "device": torch.device(device).type,
        "seed_offset": seed_offset(),
    }
    dtype = autocast_dtype(device)
    if dtype is not None:  # a model trained under autocast (COURSE_PRECISION, a GPU) keys apart;
        fields["precision"] = str(dtype)  # float32 keys stay what they were
    payload = json.dumps(fields, sort_keys=True, default=str)
    safe = "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in name)
    return f"{safe}-{hashlib.sha256(payload.encode()).hexdigest()[:16]}"


def save_checkpoint(path: Path | str, model: nn.Module, metadata: Mapping[str, Any] | None = None) -> Path:
    """Save ``model``'s weights to ``path`` (.safetensors) and ``metadata`` to ``path``.json, atomically."""
    path = write_atomically(path, lambda tmp: save_model(model, tmp))
    atomic_write_text(path.with_suffix(".json"), json.dumps(dict(metadata or {}), indent=1, default=str))
    return path


def load_checkpoint(path: Path | str, model: nn.Module) -> dict[str, Any]:
    """Load weights saved by :func:`save_checkpoint` into ``model`` (strict); return the metadata."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no checkpoint at {path}")
    from safetensors import SafetensorError

    try:
        missing, unexpected = load_model(model, path, strict=True, device=str(model_device(model)))
    except (RuntimeError, SafetensorError) as exc:  # a truncated or corrupt file, or another model's
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ValueError(
            f"{path}: cannot load these weights into a {type(model).__name__} ({first}); "
            "the file is damaged or holds another model's weights"
        ) from None
    return read_metadata(path)


def read_metadata(path: Path | str) -> dict[str, Any]:
    """The metadata :func:`save_checkpoint` wrote beside the checkpoint ``path`` (its ``.json``
    record), read without loading the weights: ``{}`` when there is none, a ``ValueError``
    naming the file when it is not a readable JSON object."""
    meta_path = Path(path).with_suffix(".json")
    try:
        meta = json.loads(meta_path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:  # unreadable, not UTF-8 or not JSON
        raise ValueError(f"{meta_path} is not a readable model record ({type(exc).__name__})") from None
    if not isinstance(meta, dict):
        raise ValueError(f"{meta_path} is not a readable model record (not a JSON object)")
    return meta


def saved_recipe(folder: Path | str) -> dict[str, Any]:
    """The recipe (command, objective, task, settings) that a model folder's record
    (``model.json``, beside ``model.safetensors``) holds: ``{}`` when it records none;
    ``ValueError`` as :func:`read_metadata` when the record is not readable."""
    recipe = read_metadata(Path(folder) / "model.safetensors").get("recipe")
    return recipe if isinstance(recipe, dict) else {}


def rng_state() -> dict[str, Any]:
    """The global random states (Python, NumPy, torch CPU and CUDA) as JSON-safe data."""
    version, internal, gauss = random.getstate()
    np_state = np.random.get_state()
    state = {
        "python": [version, list(internal), gauss],
        "numpy": [np_state[0], np_state[1].tolist(), int(np_state[2]), int(np_state[3]), float(np_state[4])],
        "torch": torch.get_rng_state().tolist(),
    }
    if torch.cuda.is_available():
        state["cuda"] = [s.tolist() for s in torch.cuda.get_rng_state_all()]
    return state


def set_rng_state(state: Mapping[str, Any]) -> None:
    """Restore what :func:`rng_state` returned."""
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    name, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((name, np.array(keys, dtype=np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(torch.tensor(state["torch"], dtype=torch.uint8))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([torch.tensor(s, dtype=torch.uint8) for s in state["cuda"]])


def train_or_load(
    name: str,
    model: nn.Module,
    spec: Mapping[str, Any],
    train: Callable[[nn.Module], History],
    *,
    extra: Callable[[nn.Module], Mapping[str, Any]] | None = None,
) -> History:
    """Train ``model`` with ``train(model)`` unless a cached result for the same ``spec`` exists.

    ``spec`` must hold everything that determines the result besides course_lib's code
    (sizes, seeds, steps, learning rate, data settings). The global random state after
    training is stored too and restored on a load, so the code after this call sees the same
    random numbers either way. Returns the training
    :class:`~course_lib.train.History`; ``history.loaded`` tells whether it came from the cache.
    """
    device = model_device(model)
    key = cache_key(name, spec, device)
    path = cache_dir() / f"{key}.safetensors"
    if path.exists() and os.environ.get("COURSE_RETRAIN", "0") in ("0", "", "false"):
        try:
            meta = load_checkpoint(path, model)
            history = History.from_dict(meta.get("history", {}))
            if "rng" in meta:  # continue with the random state training left behind
                set_rng_state(meta["rng"])
            history.loaded = True  # type: ignore[attr-defined]
            model.eval()
            return history
        except Exception:  # corrupt or incompatible file: train again and overwrite it
            pass
    history = train(model)
    meta = {
        "name": name,
        "spec": spec,
        "history": history.to_dict(),
        "torch": torch.__version__,
        "rng": rng_state(),
    }
    if extra is not None:
        meta["extra"] = dict(extra(model))
    save_checkpoint(path, model, meta)
    history.loaded = False  # type: ignore[attr-defined]
    model.eval()
    return history


def save_train_state(
    path: Path | str,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scaler: Any,
    *,
    done: int,
    steps: int,
    history: History,
    finished: bool,
    extra: Mapping[str, Any] | None = None,
) -> Path:
    """Write what :func:`~course_lib.train.fit` needs to resume exactly: the weights, the
    optimiser and gradient-scaler states, the steps done of ``steps``, the history and every
    random state. Written to a temporary file and renamed, so a kill during the write leaves
    the previous state whole."""
    state = {
        "format": 1,
        "done": done,
        "steps": steps,
        "finished": finished,
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "scaler": scaler.state_dict() if scaler is not None else None,
        "history": json.dumps(history.to_dict()),
        "rng": json.dumps(rng_state()),
        "torch": str(torch.__version__),
        "extra": dict(extra or {}),
    }
    return write_atomically(path, lambda tmp: torch.save(state, tmp))


def load_train_state(
    path: Path | str,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scaler: Any,
    *,
    steps: int,
    check: Callable[[Mapping[str, Any]], None] | None = None,
) -> tuple[int, dict[str, Any], dict[str, Any], dict[str, Any]]:
    """Load a :func:`save_train_state` file into ``model``, ``optimizer`` and ``scaler``;
    return ``(steps done, history as a dict, random states, the extra data saved with it)``.
    ``check(state)``, when given, vets the raw state before anything is loaded (and replaces
    the check of ``steps``); without it a file of a run with another number of ``steps`` (its
    learning-rate schedule differs) is a ``ValueError``. An unreadable file is named."""
    path = Path(path)
    try:
        state = torch.load(path, map_location=model_device(model), weights_only=True)
    except Exception as e:
        raise ValueError(f"{path}: not a readable training state ({e}); delete it to start afresh") from e
    if check is not None:
        check(state)
    elif state.get("steps") != steps:
        raise ValueError(
            f"{path} is the state of a run of {state.get('steps')} steps, this run has {steps}: "
            "resume with the same --steps, or use another --checkpoint-dir"
        )
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    if scaler is not None and state.get("scaler") is not None:
        scaler.load_state_dict(state["scaler"])
    return (
        int(state["done"]),
        json.loads(state["history"]),
        json.loads(state["rng"]),
        dict(state.get("extra") or {}),
    )
