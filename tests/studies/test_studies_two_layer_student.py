"""Study 07_two_layer_student (course_lib/studies/two_layer_student.py): it reuses study
07_distillation's set-up, its one-layer arms are 07_distillation's arms of the same names, its
two-layer student has a non-degenerate hint and layer map; a quick run gives every arm and metric
and reproduces its golden run, and the committed results hold three seeds of each."""

import json

import pytest

from course_lib.objectives.distillation import uniform_layer_map
from course_lib.studies import check_golden, golden_path, load_study, one_thread, results_path, run_study
from course_lib.studies.distill import QUICK as DISTILL_QUICK
from course_lib.studies.distill import SETTINGS as DISTILL
from course_lib.studies.two_layer_student import ARMS, QUICK, SETTINGS

NAME = "07_two_layer_student"
MODELS = {"teacher", *(f"{a}_{n}" for a in ARMS for n in ("L1", "L2"))}


def test_the_study_shares_07_distillations_set_up_and_one_layer_student():
    for settings, base in ((SETTINGS, DISTILL), (QUICK, DISTILL_QUICK)):
        for key in (
            "size",
            "documents",
            "tokenizer",
            "pretrain",
            "tagging",
            "distill",
            "first_steps",
            "transfer",
        ):
            assert settings[key] == base[key], key
        assert settings["students"]["L1"] == base["student"]
        assert settings["students"]["L2"] == {**base["student"], "layers": 2}
    assert SETTINGS["students"]["L2"] == dict(layers=2, hidden=64, heads=4)
    assert SETTINGS["pretrain"]["max_len"] and SETTINGS["arms"] == ("scratch", "kd", "kd_hints", "tinybert")
    # the teacher has two layers: the one-layer student's map is degenerate, the two-layer one's is 1->1, 2->2
    assert uniform_layer_map(1, 2) == [2] and uniform_layer_map(2, 2) == [1, 2]


def _check(results):
    assert set(results) == MODELS
    for name in MODELS:
        r = results[name]
        assert set(r) == {"accuracy", "unseen_accuracy", "agreement", "parameters"}
        assert 0 < r["accuracy"] <= 1 and 0 <= r["unseen_accuracy"] <= 1 and 0 <= r["agreement"] <= 1
    assert results["teacher"]["agreement"] == 1.0
    one, two = results["kd_L1"]["parameters"], results["kd_L2"]["parameters"]
    assert all(results[f"{a}_L1"]["parameters"] == one for a in ARMS)
    assert all(results[f"{a}_L2"]["parameters"] == two for a in ARMS)
    assert one < two < results["teacher"]["parameters"]


def test_quick_run_writes_every_arm_and_metric_and_repeats_07_distillations_arms(tmp_path):
    with one_thread():  # the golden run's setting
        out = run_study(NAME, seeds=[0], quick=True, out=tmp_path / "x.json", log=lambda _: None)
    data = json.loads(out.read_text())
    results = data["seeds"]["0"]["results"]
    assert data["quick"] is True and check_golden(NAME, results=results) == []
    _check(results)
    # the one-layer arms are 07_distillation's arms of the same names: the same computation
    stored = json.loads(golden_path("07_distillation").read_text())["results"]
    for arm in ("teacher", *ARMS):
        assert results[arm if arm == "teacher" else f"{arm}_L1"] == stored[arm], arm


@pytest.mark.skipif(not results_path(NAME).exists(), reason="the study has not been run yet")
def test_committed_results_hold_three_seeds_of_every_arm_and_metric():
    study = load_study(NAME)
    assert study.seeds == [0, 1, 2]
    for seed in study.seeds:
        _check(study.results[seed])
    # the one-layer arms reproduce study 07_distillation's stored arms of the same names, number for number
    old = load_study("07_distillation")
    for seed in study.seeds:
        for arm in ("teacher", *ARMS):
            assert study.results[seed][arm if arm == "teacher" else f"{arm}_L1"] == old.results[seed][arm], (
                seed,
                arm,
            )
