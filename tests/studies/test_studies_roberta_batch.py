"""Study 03_roberta_batch (course_lib/studies/roberta_batch.py): a quick run gives every arm and
metric, every arm reads the same number of sequences on one network, and the committed results
hold three seeds."""

import json

import pytest

from course_lib.studies import check_golden, load_study, one_thread, run_study
from course_lib.studies.roberta_batch import ARMS, QUICK, SETTINGS, arm_settings

NAME = "03_roberta_batch"


def _check(results, settings):
    assert set(results) == set(ARMS)
    assert len({results[a]["parameters"] for a in ARMS}) == 1  # one network
    n = settings["pretrain"]["sequences"]
    for a in ARMS:
        r = results[a]
        assert r["steps"] * r["batch_size"] == n  # equal sequences, whatever the batch
        assert r["batch_size"] == settings["arms"][a]["batch_size"] and r["lr"] == settings["arms"][a]["lr"]
        assert len(r["curve_steps"]) == len(r["curve_loss"]) == len(r["curve_accuracy"]) >= 1
        assert r["curve_sequences"] == [(s + 1) * r["batch_size"] for s in r["curve_steps"]]
        assert r["curve_sequences"][-1] == n  # the last evaluation is the end of training
        assert r["mlm_loss"] > 0 and 0 <= r["mlm_accuracy"] <= 1 and 0 <= r["nsp_accuracy"] <= 1
    # the big batches take a quarter of the small batch's steps, at lr x1, x2, x4
    small = results["small"]
    assert all(results[a]["steps"] * 4 == small["steps"] for a in ARMS if a != "small")
    assert [results[a]["lr"] / small["lr"] for a in ("big_lr1", "big_lr2", "big_lr4")] == [1, 2, 4]


def test_arms_read_equal_sequences_and_refuse_a_partial_batch():
    arms = arm_settings(SETTINGS)
    steps = {a: arms[a]["steps"] for a in ARMS}
    assert steps == {"small": 800, "big_lr1": 200, "big_lr2": 200, "big_lr4": 200}
    with pytest.raises(ValueError, match="whole number of batches"):
        arm_settings({**SETTINGS, "pretrain": {**SETTINGS["pretrain"], "sequences": 100}})


def test_quick_run_writes_every_arm_and_metric(tmp_path):
    with one_thread():  # the golden run's setting
        out = run_study(NAME, seeds=[0], quick=True, out=tmp_path / "x.json", log=lambda _: None)
    # the library still computes what it computed when the stored results were made
    assert check_golden(NAME, results=json.loads(out.read_text())["seeds"]["0"]["results"]) == []
    data = json.loads(out.read_text())
    assert data["quick"] is True
    _check(data["seeds"]["0"]["results"], QUICK)


def test_committed_results_hold_three_seeds_of_every_arm_and_metric():
    study = load_study(NAME)
    assert study.seeds == [0, 1, 2]
    for seed in study.seeds:
        _check(study.results[seed], SETTINGS)
