"""course_lib.hashing: a study or a cached model stays valid through edits that compute nothing new."""

import importlib.util
import sys
import textwrap

import pytest

from course_lib.hashing import code_hash
from course_lib.studies import Study, spec_hash

BASE = '''
"""A study module."""
import math

from torch import nn

RATE = 0.15


def helper(x):
    """Twice x."""
    return 2 * x  # doubled


class Model:
    def first(self):
        return 1

    def second(self):
        return helper(RATE)


def run(seed, quick):
    return {"arm": {"value": helper(seed) + math.pi}}
'''

SAME = [
    # a docstring edited, a comment changed, formatting
    BASE.replace('"""Twice x."""', '"""Two times x, documented at length."""').replace("# doubled", "# x2"),
    BASE.replace("    return 2 * x  # doubled", "    return (\n        2 * x\n    )"),
    # an import added, removed or moved
    BASE.replace("import math\n", "import math\nimport os\n"),
    BASE.replace("from torch import nn\n", ""),
    # a function moved (module level and inside a class)
    BASE.replace('def helper(x):\n    """Twice x."""\n    return 2 * x  # doubled\n\n\n', "")
    + "\n\ndef helper(x):\n    return 2 * x\n",
    BASE.replace(
        "    def first(self):\n        return 1\n\n    def second(self):\n        return helper(RATE)\n",
        "    def second(self):\n        return helper(RATE)\n\n    def first(self):\n        return 1\n",
    ),
]

CHANGED = [
    BASE.replace("RATE = 0.15", "RATE = 0.2"),  # a setting
    BASE.replace("return 2 * x", "return 3 * x"),  # a computation
    BASE.replace("helper(seed) + math.pi", "helper(seed + 1) + math.pi"),
    BASE.replace("        return 1\n", "        return 2\n"),
    BASE.replace("def run(seed, quick):", "def run(seed, quick=False):"),  # a default
]


@pytest.mark.parametrize("i", range(len(SAME)))
def test_edits_that_compute_nothing_new_keep_the_hash(i):
    assert code_hash(textwrap.dedent(SAME[i])) == code_hash(BASE)


@pytest.mark.parametrize("i", range(len(CHANGED)))
def test_a_changed_setting_or_computation_changes_the_hash(i):
    assert code_hash(CHANGED[i]) != code_hash(BASE)


def _study_from(source: str, tmp_path, name: str) -> Study:
    path = tmp_path / f"{name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return Study(name="toy", description="toy", settings={"steps": 10}, run=module.run)


def test_a_study_keeps_its_spec_hash_through_a_refactoring_and_loses_it_on_a_change(tmp_path):
    base = spec_hash(_study_from(BASE, tmp_path, "toy_study_base"))
    assert spec_hash(_study_from(SAME[0], tmp_path, "toy_study_doc")) == base
    assert spec_hash(_study_from(SAME[4], tmp_path, "toy_study_moved")) == base
    assert spec_hash(_study_from(CHANGED[1], tmp_path, "toy_study_changed")) != base
    changed_settings = _study_from(BASE, tmp_path, "toy_study_settings")
    changed_settings = Study(name="toy", description="toy", settings={"steps": 11}, run=changed_settings.run)
    assert spec_hash(changed_settings) != base


def test_functions_and_modules_are_hashed_from_their_source():
    import course_lib.hashing as module

    assert code_hash(module) == code_hash(module.__file__ and open(module.__file__).read())
    assert code_hash(code_hash) != code_hash(module)
    with pytest.raises(TypeError, match="cannot hash the code of a int"):
        code_hash(3)


def test_files_hash_is_the_names_and_bytes_in_order(tmp_path):
    """One pass over names and contents: a renamed, edited or reordered file changes it, and a
    file larger than one read block hashes as if read whole."""
    import hashlib

    from course_lib.hashing import files_hash

    (tmp_path / "a").write_bytes(b"x" * (3 << 20) + b"tail")
    (tmp_path / "b").write_text("hello")
    pairs = [("a", tmp_path / "a"), ("b", tmp_path / "b")]
    whole = hashlib.sha256(b"a" + (tmp_path / "a").read_bytes() + b"b" + b"hello").hexdigest()
    assert files_hash(pairs) == whole
    assert files_hash(pairs[::-1]) != whole and files_hash([("A", tmp_path / "a"), pairs[1]]) != whole
    (tmp_path / "b").write_text("hellO")
    assert files_hash(pairs) != whole
