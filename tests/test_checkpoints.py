"""Checkpoints: atomic saves, strict loads, and the train-once cache."""

import json
import random

import numpy as np
import pytest
import torch
from torch import nn

import course_lib.checkpoints as ck
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
