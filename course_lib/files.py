"""Writing files so that a kill mid-write never leaves a half-written one: the one atomic writer.

Every file the course writes for a user to keep (trained models and their training states,
study results, metrics logs, exports, grading reports, benchmark tables) goes through
:func:`write_atomically`: the content is written to a temporary file beside the target, given the
mode the user's umask gives new files, and renamed onto the target in one step. A reader sees
the old file or the new one, never a mixture. A writer stopped by an exception or Ctrl-C
removes its temporary file; one killed outright (SIGKILL) cannot, and the next write of the
same file removes the leftover (:func:`write_atomically`).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path

__all__ = ["write_atomically", "atomic_write_text", "check_output_path"]


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


# a temporary file untouched this long is a killed writer's leftover, not a live write
STALE_SECONDS = 600


def check_output_path(path: Path | str, option: str, *, folder: bool) -> None:
    """``ValueError`` naming ``option`` when ``path`` cannot be written as a folder
    (``folder=True``) or a file: a part of the path above it is a file, or the path itself is
    the other kind. Commands call it before any work, so the user sees one line, not an
    ``OSError`` from deep inside a run."""
    path = Path(path)
    kind = "folder" if folder else "file"
    if path.exists() and path.is_dir() != folder:
        raise ValueError(f"{option} {path} is a {'file' if folder else 'folder'}; give a {kind}")
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                raise ValueError(f"{option} {path}: {parent} is a file, so no {kind} can be made inside it")
            break


def write_atomically(path: Path | str, write: Callable[[str], None]) -> Path:
    """``write(temporary name)`` next to ``path``, then an atomic rename onto ``path``: a kill
    during the write leaves the previous file whole. An exception removes the temporary file;
    a killed writer's leftover (``.NAME.*.tmp``, untouched for :data:`STALE_SECONDS`) is removed
    by the next write of ``path``."""
    import time

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    for old in path.parent.iterdir():
        if not (old.name.startswith(f".{path.name}.") and old.name.endswith(".tmp")):
            continue
        try:
            if time.time() - old.stat().st_mtime > STALE_SECONDS:
                old.unlink()
        except OSError:  # another writer removed or renamed it meanwhile
            pass
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
