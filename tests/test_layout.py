"""The library's layers and which way imports go (parsed with ast, nothing imported).

    0  device, train, checkpoints, claims, hashing   shared utilities
    1  nn/          building blocks             data/   text, tokenizers, ELMo's codec
    2  models/      one file per family, models/hf.py for Hugging Face interop
    3  objectives/  masking, pairs, losses
    4  recipes/, analysis/, pretrained          recipes; probes, layer vectors, minimal pairs
    5  widgets/, viz, studies/                  what the chapters show; multi-seed experiments
    6  book, notebooks, cli, grading/, the package's __init__    tooling

A module may import any lower layer and its own layer, never a higher one; inside a layer,
nn and data know nothing of each other, nor do recipes and analysis.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "course_lib"

LAYERS = {
    "device": 0,
    "train": 0,
    "checkpoints": 0,
    "claims": 0,
    "hashing": 0,
    "nn": 1,
    "data": 1,
    "models": 2,
    "objectives": 3,
    "recipes": 4,
    "analysis": 4,
    "pretrained": 4,
    "widgets": 5,
    "viz": 5,
    "studies": 5,
    "book": 6,
    "notebooks": 6,
    "cli": 6,
    "bench": 6,
    "grading": 6,
    "__init__": 6,
    "__main__": 6,
}
# packages of one layer that must stay independent of each other
INDEPENDENT = [{"nn", "data"}, {"recipes", "analysis"}]


def _package_of(module: str) -> str:
    """``course_lib.models.bert`` -> ``models``; ``course_lib`` -> ``__init__``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, absolute course_lib module) for every import of the library in ``path``."""
    rel = path.relative_to(ROOT.parent).with_suffix("")
    here = list(rel.parts)
    if here[-1] == "__init__":
        here = here[:-1]
    package = here if path.name == "__init__.py" else here[:-1]
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target == "course_lib" and node.level:  # from . import x / from .. import x
                for alias in node.names:
                    out.append((node.lineno, f"course_lib.{alias.name}"))
                continue
            if target.startswith("course_lib"):
                out.append((node.lineno, target))
        elif isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names if a.name.startswith("course_lib")]
    return out


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT.parent).with_suffix("")
    return ".".join(rel.parts)


def test_every_module_has_a_layer():
    packages = {_package_of(_module_name(p)) for p in ROOT.rglob("*.py")}
    assert packages <= set(LAYERS), sorted(packages - set(LAYERS))


def test_imports_go_down_the_layers():
    wrong = []
    for path in sorted(ROOT.rglob("*.py")):
        me = _package_of(_module_name(path))
        for line, target in _imports(path):
            them = _package_of(target)
            if LAYERS[them] < LAYERS[me]:
                continue
            if LAYERS[them] == LAYERS[me] and {me, them} not in INDEPENDENT:
                continue
            wrong.append(
                f"{path.relative_to(ROOT.parent)}:{line} ({me}, layer {LAYERS[me]}) imports {target} "
                f"({them}, layer {LAYERS[them]})"
            )
    assert not wrong, "imports against the layers:\n" + "\n".join(wrong)


def test_the_checker_sees_relative_and_absolute_imports():
    found = dict((t, n) for n, t in _imports(ROOT / "models" / "bert.py"))
    assert "course_lib.nn.attention" in found and "course_lib.models.hf" in found
    assert "course_lib.objectives" in {t for _, t in _imports(ROOT / "widgets" / "masking.py")}
