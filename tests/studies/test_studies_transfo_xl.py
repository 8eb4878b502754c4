"""Study 06_transfo_xl (course_lib/studies/transfo_xl.py): a quick run gives every arm and
metric, the two arms share one network, and the committed results hold three seeds."""

import json

from course_lib.studies import check_golden, load_study, one_thread, run_study
from course_lib.studies.transfo_xl import ARMS, QUICK, SETTINGS

RUNS = {"memory_with_memory", "memory_without_memory", "no_memory"}


def _check(results, settings):
    assert set(results) == set(ARMS) | {"by_position", "heldout", "by_memory"}
    assert len({results[a]["parameters"] for a in ARMS}) == 1  # one network, with and without memory
    for a in ARMS:
        r = results[a]
        assert r["steps"] == settings["pretrain"]["steps"]
        assert len(r["curve_steps"]) == len(r["curve_loss"]) >= 1
    seg = settings["pretrain"]["segment_len"]
    assert set(results["by_position"]) == RUNS and all(len(v) == seg for v in results["by_position"].values())
    assert set(results["heldout"]) == RUNS | {"n_tokens"} and results["heldout"]["n_tokens"] > 0
    assert all(v > 0 for k, v in results["heldout"].items())
    memories = list(settings["evaluation"]["memories"])
    assert results["by_memory"]["memories"] == memories and len(results["by_memory"]["loss"]) == len(memories)
    # no memory at evaluation is the memory model read without memory
    assert results["by_memory"]["loss"][memories.index(0)] == results["heldout"]["memory_without_memory"]


def test_quick_run_writes_every_arm_and_metric(tmp_path):
    with one_thread():  # the golden run's setting
        out = run_study("06_transfo_xl", seeds=[0], quick=True, out=tmp_path / "x.json", log=lambda _: None)
    # the library still computes what it computed when the stored results were made
    assert check_golden("06_transfo_xl", results=json.loads(out.read_text())["seeds"]["0"]["results"]) == []
    data = json.loads(out.read_text())
    assert data["quick"] is True
    _check(data["seeds"]["0"]["results"], QUICK)


def test_committed_results_hold_three_seeds_of_every_arm_and_metric():
    study = load_study("06_transfo_xl")
    assert study.seeds == [0, 1, 2]
    for seed in study.seeds:
        _check(study.results[seed], SETTINGS)
