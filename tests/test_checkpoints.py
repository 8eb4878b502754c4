"""Checkpoints: atomic saves, strict loads, and the train-once cache."""

import json
import random
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

import course_lib.checkpoints as ck
from course_lib.hashing import code_hash
from course_lib.train import History


@pytest.fixture()
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("COURSE_CACHE", str(tmp_path))
    monkeypatch.delenv("COURSE_RETRAIN", raising=False)
    return tmp_path


class Tied(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(5, 3)
        self.out = nn.Linear(3, 5)
        self.out.weight = self.emb.weight


def test_save_and_load_round_trip_with_tied_weights(tmp_path):
    a, b = Tied(), Tied()
    ck.save_checkpoint(tmp_path / "m.safetensors", a, {"note": "hi"})
    meta = ck.load_checkpoint(tmp_path / "m.safetensors", b)
    assert meta == {"note": "hi"}
    assert torch.equal(a.emb.weight, b.emb.weight) and b.out.weight is b.emb.weight
    with pytest.raises(FileNotFoundError):
        ck.load_checkpoint(tmp_path / "missing.safetensors", b)


def test_a_model_record_is_read_without_the_weights_and_a_bad_one_is_named(tmp_path):
    ck.save_checkpoint(tmp_path / "model.safetensors", Tied(), {"recipe": {"command": "train", "max_len": 9}})
    assert ck.saved_recipe(tmp_path) == {"command": "train", "max_len": 9}
    assert ck.read_metadata(tmp_path / "model.safetensors")["recipe"]["max_len"] == 9
    assert ck.saved_recipe(tmp_path / "nowhere") == {} and ck.read_metadata(tmp_path / "x.safetensors") == {}
    (tmp_path / "model.json").write_text('{"recipe": [1, 2]}')
    assert ck.saved_recipe(tmp_path) == {}  # a record without a recipe object
    for bad in ("{not json", "[1, 2]", b"\xff\xfe"):
        if isinstance(bad, bytes):
            (tmp_path / "model.json").write_bytes(bad)
        else:
            (tmp_path / "model.json").write_text(bad)
        with pytest.raises(ValueError, match="model.json is not a readable model record"):
            ck.saved_recipe(tmp_path)
        with pytest.raises(ValueError, match="model.json"):
            ck.load_checkpoint(tmp_path / "model.safetensors", Tied())


def test_a_crash_while_saving_keeps_the_old_checkpoint(tmp_path, monkeypatch):
    path = tmp_path / "m.safetensors"
    good = Tied()
    ck.save_checkpoint(path, good)
    before = path.read_bytes()

    def crash(model, filename, **kw):
        open(filename, "wb").write(b"partial")
        raise KeyboardInterrupt("killed mid-write")

    monkeypatch.setattr(ck, "save_model", crash)
    with pytest.raises(KeyboardInterrupt):
        ck.save_checkpoint(path, Tied())
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.json", "m.safetensors"]  # no temp files left


def _trainer(calls):
    def train(model):
        calls.append(1)
        torch.manual_seed(7)
        with torch.no_grad():
            model.weight.normal_()
        torch.rand(3)  # training consumes random numbers
        random.random()
        np.random.rand()
        h = History()
        h.loss = [1.0, 0.5]
        h.steps = [0, 1]
        return h

    return train


def test_train_or_load_trains_once_and_restores_the_rng(cache):
    calls = []
    m1 = nn.Linear(2, 2)
    h1 = ck.train_or_load("toy", m1, {"a": 1}, _trainer(calls))
    after_train = (torch.rand(2), random.random(), np.random.rand())
    m2 = nn.Linear(2, 2)
    h2 = ck.train_or_load("toy", m2, {"a": 1}, _trainer(calls))
    after_load = (torch.rand(2), random.random(), np.random.rand())
    assert calls == [1]
    assert h1.loaded is False and h2.loaded is True and h2.loss == [1.0, 0.5]
    assert torch.equal(m1.weight, m2.weight)
    assert torch.equal(after_train[0], after_load[0]) and after_train[1:] == after_load[1:]
    ck.train_or_load("toy", nn.Linear(2, 2), {"a": 2}, _trainer(calls))  # another spec: trains
    assert calls == [1, 1]


def test_corrupt_or_forced_entries_are_retrained(cache, monkeypatch):
    calls = []
    ck.train_or_load("toy", nn.Linear(2, 2), {"a": 1}, _trainer(calls))
    (weights,) = cache.glob("toy-*.safetensors")
    weights.write_bytes(b"garbage")
    ck.train_or_load("toy", nn.Linear(2, 2), {"a": 1}, _trainer(calls))
    assert calls == [1, 1]
    monkeypatch.setenv("COURSE_RETRAIN", "1")
    ck.train_or_load("toy", nn.Linear(2, 2), {"a": 1}, _trainer(calls))
    assert calls == [1, 1, 1]
    meta = json.loads(weights.with_suffix(".json").read_text())
    assert meta["spec"] == {"a": 1} and "rng" in meta


def test_cache_key_depends_on_spec_and_code():
    k1 = ck.cache_key("x", {"lr": 1e-3})
    assert k1 == ck.cache_key("x", {"lr": 1e-3})
    assert k1 != ck.cache_key("x", {"lr": 2e-3})
    assert k1.startswith("x-") and ck.cache_key("a b/c", {}).startswith("a_b_c-")


def test_the_fingerprint_ignores_what_the_program_has_imported():
    """Chapter 7 (distillation and analysis loaded) must get chapter 3's cache key."""
    import subprocess
    import sys

    code = (
        "import importlib, sys; import course_lib.checkpoints as ck; a = ck.source_fingerprint(); "
        "[importlib.import_module(m) for m in sys.argv[1:]]; print(a == ck.source_fingerprint(), a)"
    )
    runs = []
    for modules in (
        [],
        ["course_lib.recipes.bert"],
        ["course_lib.recipes.distill", "course_lib.analysis", "course_lib.viz"],
    ):
        out = subprocess.run(
            [sys.executable, "-c", code, *modules], capture_output=True, text=True, check=True
        )
        same, fp = out.stdout.split()
        assert same == "True", modules
        runs.append(fp)
    assert len(set(runs)) == 1 and runs[0] == ck.source_fingerprint()


def test_every_module_a_recipe_imports_is_fingerprinted():
    """Importing every recipe loads only files the fingerprint covers (else a change there would
    keep a stale model)."""
    import subprocess
    import sys

    code = (
        "import pkgutil, importlib, sys, course_lib.recipes as r\n"
        "for m in pkgutil.iter_modules(r.__path__): importlib.import_module('course_lib.recipes.' + m.name)\n"
        "print('\\n'.join(sorted({m.__file__ for n, m in list(sys.modules.items()) "
        "if n.startswith('course_lib') and getattr(m, '__file__', None)})))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = {Path(line).resolve() for line in out.stdout.split()}
    covered = set(ck.training_source_files())
    root = Path(ck.__file__).resolve().parent
    assert loaded - covered <= {root / "__init__.py"}, sorted(map(str, loaded - covered))
    assert len(loaded) > 20


def test_the_fingerprint_follows_training_code_only(tmp_path, monkeypatch):
    """A copy of the library: editing a model changes the fingerprint, editing analysis does not."""
    import shutil

    root = Path(ck.__file__).resolve().parent
    copy = tmp_path / "course_lib"
    shutil.copytree(root, copy, ignore=shutil.ignore_patterns("__pycache__", "studies"))
    monkeypatch.setattr(ck, "__file__", str(copy / "checkpoints.py"))
    ck._file_code.cache_clear()
    base = ck.source_fingerprint()
    assert base == _fingerprint_of(root)
    (copy / "analysis" / "heads.py").write_text((copy / "analysis" / "heads.py").read_text() + "\n# note\n")
    ck._file_code.cache_clear()
    assert ck.source_fingerprint() == base
    bert = (copy / "models" / "bert.py").read_text()
    # a comment, a docstring or an import in a model computes nothing new: the cache stays
    (copy / "models" / "bert.py").write_text(bert.replace('"""', '"""Edited. ', 1) + "\nimport os  # note\n")
    ck._file_code.cache_clear()
    assert ck.source_fingerprint() == base
    # a changed computation does not
    assert "0.02" in bert
    (copy / "models" / "bert.py").write_text(bert.replace("0.02", "0.03", 1))
    ck._file_code.cache_clear()
    assert ck.source_fingerprint() != base
    ck._file_code.cache_clear()


def _fingerprint_of(root):
    import hashlib

    files = []
    for entry in ck.TRAINING_SOURCES:
        path = root / entry
        files += list(path.rglob("*.py")) if path.is_dir() else [path]
    h = hashlib.sha256()
    for f in sorted(files):
        h.update(f.relative_to(root).as_posix().encode())
        h.update(code_hash(f).encode())
    return h.hexdigest()
