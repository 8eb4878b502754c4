"""Writing files so that a kill mid-write never leaves a half-written one: the one atomic writer.

Every file the course writes for a user to keep (trained models and their training states,
study results, metrics logs, exports, grading reports, benchmark tables) goes through
:func:`write_atomically`: the content is written to a temporary file beside the target, given the
mode the user's umask gives new files, and renamed onto the target in one step. A reader sees
the old file or the new one, never a mixture, and a killed writer leaves no temporary file.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path

__all__ = ["write_atomically", "atomic_write_text"]


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_atomically(path: Path | str, write: Callable[[str], None]) -> Path:
    """``write(temporary name)`` next to ``path``, then an atomic rename onto ``path``: a kill
    during the write leaves the previous file whole (and no temporary file behind)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        write(tmp)
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600: give the file the user's usual mode
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def atomic_write_text(path: Path | str, text: str) -> Path:
    """Write ``text`` (UTF-8, exactly as given: no newline translation) to ``path`` atomically."""
    return write_atomically(path, lambda tmp: Path(tmp).write_text(text, encoding="utf-8", newline=""))
