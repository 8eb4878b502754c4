"""Packaging: the supported Python versions parse the library, and the wheel carries its data."""

import ast
import re
from pathlib import Path

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    tomllib = pytest.importorskip("tomli")

ROOT = Path(__file__).resolve().parents[1]


def test_library_parses_as_python_3_10():
    """requires-python says 3.10: no newer syntax (except*, PEP 695 generics, ...) may creep in."""
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert meta["project"]["requires-python"] == ">=3.10"
    for path in sorted((ROOT / "course_lib").rglob("*.py")):
        ast.parse(path.read_text(), filename=str(path), feature_version=(3, 10))


def test_package_data_covers_every_data_file():
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    patterns = meta["tool"]["setuptools"]["package-data"]["course_lib"]
    lib = ROOT / "course_lib"
    data = [p.relative_to(lib) for p in lib.rglob("*") if p.is_file() and p.suffix not in {".py", ".pyc"}]
    assert data, "expected data files (lexicon, schemas)"
    for f in data:
        assert any(Path(f).match(pat) for pat in patterns), f"{f} would be missing from the wheel"


def test_console_script_and_torch_pin_agree_with_the_makefile():
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert meta["project"]["scripts"]["course"] == "course_lib.cli:main"
    torch_req = next(d for d in meta["project"]["dependencies"] if d.startswith("torch"))
    pinned = re.search(r"TORCH_SPEC \?= torch==([\d.]+)", (ROOT / "Makefile").read_text()).group(1)
    low = re.search(r">=([\d.]+)", torch_req).group(1)
    assert tuple(map(int, pinned.split("."))) >= tuple(map(int, low.split(".")))
