"""The library's layers and which way imports go (parsed with ast, nothing imported).

    0  device, train (+ train_state, train_parallel, train_log), checkpoints, files, claims, hashing
                                                 shared utilities
    1  nn/          building blocks             data/   text, tokenizers, ELMo's codec
    2  models/      one file per family, models/hf.py for Hugging Face interop
    3  objectives/  masking, pairs, losses
    4  recipes/, analysis/, pretrained          recipes; probes, layer vectors, minimal pairs
    5  widgets/, viz, studies/                  what the chapters show; multi-seed experiments
    6  tools/ (book, notebooks, bench), cli, export, evaluate, grading/, the package's __init__
       the course's tooling, on top: it may import anything, no ML floor imports it

A module may import any lower layer and its own layer, never a higher one; inside a layer,
nn and data know nothing of each other, nor do recipes and analysis.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "course_lib"

LAYERS = {
    "device": 0,
    "train": 0,
    "train_state": 0,
    "train_parallel": 0,
    "train_log": 0,
    "checkpoints": 0,
    "files": 0,
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
    "tools": 6,
    "cli": 6,
    "export": 6,
    "evaluate": 6,
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


# the ML floors: the library proper, which must not reach up into the build tooling
ML_FLOORS = {"device", "train", "train_state", "train_parallel", "train_log", "checkpoints", "files"}
ML_FLOORS |= {"claims", "hashing", "nn", "data", "models", "objectives"}
ML_FLOORS |= {"recipes", "analysis", "pretrained", "widgets", "viz", "studies"}


def test_the_ml_floors_import_no_tool():
    assert ML_FLOORS < set(LAYERS) and all(LAYERS[p] < LAYERS["tools"] for p in ML_FLOORS)
    wrong = [
        f"{path.relative_to(ROOT.parent)}:{line} imports {target}"
        for path in sorted(ROOT.rglob("*.py"))
        if _package_of(_module_name(path)) in ML_FLOORS
        for line, target in _imports(path)
        if _package_of(target) == "tools"
    ]
    assert not wrong, "the library imports the tooling:\n" + "\n".join(wrong)


def test_no_tool_is_left_among_the_ml_floors():
    """book, notebooks and bench live in course_lib/tools/, with no shim left at the top."""
    for name in ("book", "notebooks", "bench"):
        assert (ROOT / "tools" / f"{name}.py").exists()
        assert not (ROOT / f"{name}.py").exists() and not (ROOT / name).exists()


def test_the_checker_sees_relative_and_absolute_imports():
    found = dict((t, n) for n, t in _imports(ROOT / "models" / "bert.py"))
    assert "course_lib.nn.attention" in found and "course_lib.models.hf" in found
    assert "course_lib.objectives" in {t for _, t in _imports(ROOT / "widgets" / "masking.py")}


def _module_level_graph() -> dict[str, set[str]]:
    """module -> the course_lib modules it imports at module level (not inside a function), with
    ``from package import name`` resolved to the submodule when ``name`` is one."""
    modules = {_module_name(p).removesuffix(".__init__"): p for p in ROOT.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(), str(path))
        top = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
        top += [
            n
            for stmt in tree.body
            if isinstance(stmt, (ast.If, ast.Try))
            for n in ast.walk(stmt)
            if isinstance(n, (ast.Import, ast.ImportFrom))
        ]
        lines = {n.lineno for n in top if not _type_checking_only(tree, n)}
        edges = set()
        for line, target in _imports(path):
            if line not in lines:
                continue
            edges.add(
                target
                if target in modules
                else target.rsplit(".", 1)[0]
                if target.rsplit(".", 1)[0] in modules
                else target
            )
        # `from .x import y`: also the submodule x.y when y is a module
        for node in top:
            if isinstance(node, ast.ImportFrom) and node.lineno in lines:
                for line, target in _imports(path):
                    if line == node.lineno:
                        edges |= {f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in modules}
        graph[name] = {e for e in edges if e in modules and e != name}
    return graph


def _type_checking_only(tree: ast.Module, node: ast.AST) -> bool:
    for stmt in tree.body:
        if isinstance(stmt, ast.If) and "TYPE_CHECKING" in ast.unparse(stmt.test):
            if any(n is node for n in ast.walk(stmt)):
                return True
    return False


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected component with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_module_level_import_circle_anywhere():
    """A package's ``__init__`` re-exporting its modules is not a circle unless a module imports
    the package back at module level."""
    assert _cycles(_module_level_graph()) == []


def test_the_circle_finder_finds_a_circle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    graph = _module_level_graph()
    assert "course_lib.device" in graph["course_lib.claims"]  # module-level edges are seen
    assert "course_lib.checkpoints" not in graph["course_lib.train"]  # imports inside functions are not


# Cross-module imports of underscore names inside course_lib/models and course_lib/nn, which the
# models/nn redesign is removing; the list empties when it lands. Nothing else may be added here.
MODELS_NN_PRIVATE_IMPORTS: set[tuple[str, str, str]] = set()  # none left


def _private_imports(path: Path) -> list[tuple[int, str, str]]:
    """(line, module, name) for every ``from <course_lib module> import _name`` in ``path`` (dunder
    names such as ``__version__`` are public)."""
    out = []
    targets = dict(_imports(path))  # line -> resolved module
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.lineno in targets:
            for alias in node.names:
                if alias.name.startswith("_") and not alias.name.startswith("__"):
                    module = _resolve_from(path, node)
                    out.append((node.lineno, module, alias.name))
    return out


def _resolve_from(path: Path, node: ast.ImportFrom) -> str:
    rel = path.relative_to(ROOT.parent).with_suffix("")
    package = list(rel.parts)[:-1]
    if not node.level:
        return node.module or ""
    base = package[: len(package) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def test_no_module_imports_another_modules_private_name():
    found = set()
    for path in sorted(ROOT.rglob("*.py")):
        me = _module_name(path).removesuffix(".__init__")
        for _, module, name in _private_imports(path):
            if module != me:  # a package's own __init__ importing from itself is not across modules
                found.add((str(path.relative_to(ROOT)), module, name))
    allowed = MODELS_NN_PRIVATE_IMPORTS
    assert all(p.startswith(("models/", "nn/")) for p, _, _ in MODELS_NN_PRIVATE_IMPORTS)
    assert found - allowed == set(), "imports of another module's private name:\n" + "\n".join(
        f"{p}: from {m} import {n}" for p, m, n in sorted(found - allowed)
    )
    gone = allowed - found
    assert not gone, f"allowed but no longer imported (remove from the list): {sorted(gone)}"


def test_the_private_import_check_sees_one(tmp_path, monkeypatch):
    """A positive control on a made-up package: the check resolves relative imports to their
    module and sees the underscore name; an alias to a private local name is not private."""
    assert _private_imports(ROOT / "analysis" / "ar_ae.py") == []  # is_causal as _is_causal
    fake = tmp_path / "course_lib"
    (fake / "pkg").mkdir(parents=True)
    (fake / "pkg" / "a.py").write_text("from .b import _hidden, shown\nfrom ..c import d as _d\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", fake)
    assert _private_imports(fake / "pkg" / "a.py") == [(1, "course_lib.pkg.b", "_hidden")]


TESTS = Path(__file__).resolve().parent
FIXTURE_DIRS = {"grading_fixtures"}  # shared fixtures, not tests of a package


def test_the_tests_mirror_the_package_tree():
    """tests/<package>/ holds the tests of course_lib/<package>/; the top level, those of the
    top-level modules (and the fixtures beside conftest.py)."""
    packages = {p.parent.name for p in ROOT.glob("*/__init__.py")}
    folders = {p.name for p in TESTS.iterdir() if p.is_dir() and not p.name.startswith((".", "_"))}
    folders -= FIXTURE_DIRS
    assert folders <= packages, f"test folders without a course_lib package: {sorted(folders - packages)}"
    assert all(list(TESTS.joinpath(f).glob("test_*.py")) for f in folders), "an empty test folder"
    assert not list(TESTS.glob("*/*/test_*.py")), "tests nested deeper than tests/<package>/"


# one exception: data/corpus.py, whose bulk is the generated corpus's word lists and templates
LONG_MODULES_ALLOWED = {"data/corpus.py"}
MAX_MODULE_LINES = 800


def test_no_module_is_longer_than_800_lines():
    """A module past 800 lines holds several ideas: split it along its seam."""
    long = {}
    for path in sorted(ROOT.rglob("*.py")):
        lines = len(path.read_text().splitlines())
        if lines > MAX_MODULE_LINES:
            long[str(path.relative_to(ROOT))] = lines
    assert set(long) <= LONG_MODULES_ALLOWED, f"modules over {MAX_MODULE_LINES} lines: {long}"
    assert set(LONG_MODULES_ALLOWED) <= set(long), "allowed but no longer long (remove from the list)"
