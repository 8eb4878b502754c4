"""Hashes of *what code does*, not of how its text looks.

A stored study (three seeds, up to an hour each) and a cached model are valid as long as the
code that produced them computes the same thing. Hashing the raw source text would make them
stale at every comment, docstring, import line or moved function. :func:`code_hash` hashes the
code's syntax tree instead, with those left out:

- comments and formatting (the tree has none);
- docstrings (a string literal that is the first statement of a module, class or function);
- ``import`` statements (an import changes nothing by itself; code that *uses* the imported
  name is hashed where it uses it);
- the order of the functions and classes of a module or class body (moving a function is not
  a change; other statements keep their order, because their order can matter).

What it keeps is everything that can change a result: every expression, constant, default,
statement order inside a function, and the names of what is called. A call into another
module is not followed: the code *behind* an imported name is covered by that module's own
hash (:mod:`course_lib.checkpoints` hashes every training module this way) or, for studies, by
the golden runs (:mod:`course_lib.studies`).

Data and model files are hashed as bytes, with their names (:func:`files_hash`).
"""

from __future__ import annotations

import ast
import hashlib
import inspect
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType
from typing import Any

__all__ = ["code_hash", "normalised_source", "source_of"]

_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def source_of(obj: Any) -> str:
    """The source text of a module, class, function, a path to a ``.py`` file, or a string of code."""
    if isinstance(obj, Path):
        return obj.read_text(encoding="utf-8")
    if isinstance(obj, str):
        return obj
    if isinstance(obj, ModuleType) or inspect.isclass(obj) or inspect.isroutine(obj):
        return inspect.getsource(obj)
    raise TypeError(
        f"cannot hash the code of a {type(obj).__name__}: give a module, class, function, path or source"
    )


def _strip(body: list[ast.stmt]) -> list[ast.stmt]:
    """A body without its docstring and imports, its definitions sorted by name (recursively)."""
    out: list[ast.stmt] = []
    for i, node in enumerate(body):
        if (
            i == 0
            and isinstance(node, ast.Expr)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            continue  # docstring
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        if isinstance(node, _DEFS):
            node.body = _strip(node.body) or [ast.Pass()]
        elif hasattr(node, "body") and isinstance(node.body, list):
            # if/for/while/with/try blocks: strip imports inside them, keep the order
            for field in ("body", "orelse", "finalbody"):
                block = getattr(node, field, None)
                if isinstance(block, list) and block:
                    setattr(node, field, [n for n in _strip_keep_order(block)] or [ast.Pass()])
        out.append(node)
    others = [n for n in out if not isinstance(n, _DEFS)]
    defs = sorted((n for n in out if isinstance(n, _DEFS)), key=lambda n: n.name)
    return others + defs


def _strip_keep_order(body: list[ast.stmt]) -> Iterable[ast.stmt]:
    for node in body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        if isinstance(node, _DEFS):
            node.body = _strip(node.body) or [ast.Pass()]
        yield node


def normalised_source(obj: Any) -> str:
    """The code of ``obj`` as a canonical dump of its syntax tree (see the module docstring)."""
    import textwrap

    tree = ast.parse(textwrap.dedent(source_of(obj)))
    tree.body = _strip(tree.body)
    return ast.dump(tree, annotate_fields=True, include_attributes=False)


def code_hash(*objs: Any) -> str:
    """SHA-256 (hex) over the normalised code of each object, in the order given."""
    h = hashlib.sha256()
    for obj in objs:
        h.update(normalised_source(obj).encode())
        h.update(b"\x00")
    return h.hexdigest()


def files_hash(files: Iterable[tuple[str, Path]]) -> str:
    """SHA-256 (hex) over each ``(name, path)`` in order: the name, then the file's bytes (read
    in 1 MiB blocks, so a large weights file is never held in memory). What a cache key or a
    resume check needs to notice a text or model changed on disk."""
    h = hashlib.sha256()
    for name, path in files:
        h.update(name.encode())
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest()


def library_hash() -> str:
    """:func:`files_hash` of course_lib's own files (code and data: ``.py``, ``.js``,
    ``.json``, ``.tsv``), named by their path inside the package: what changes when the
    library does (the book rebuilds its pages; the grader does not reuse earlier reports)."""
    here = Path(__file__).resolve().parent
    return files_hash(
        (str(path.relative_to(here)), path)
        for path in sorted(here.rglob("*"))
        if path.suffix in {".py", ".js", ".json", ".tsv"} and "__pycache__" not in path.parts
    )
