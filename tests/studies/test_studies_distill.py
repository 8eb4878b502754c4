"""Study 07_distillation (course_lib/studies/distill.py): a quick run gives every arm, sweep and
metric with sane values, and the committed results hold three seeds of each."""

import json

from course_lib.studies import check_golden, load_study, one_thread, run_study
from course_lib.studies.distill import ARMS, QUICK, SETTINGS

MODELS = set(ARMS) | {"teacher", "weak_teacher", "kd_weak_teacher"}


def _check(results, settings):
    assert set(results) == MODELS | {
        "transfer_sweep",
        "temperature_sweep",
        "alpha_schedule",
        "alpha_constant",
    }
    for name in MODELS:
        r = results[name]
        assert 0 <= r["unseen_accuracy"] <= 1 and 0 < r["accuracy"] <= 1 and 0 <= r["agreement"] <= 1
    assert results["teacher"]["agreement"] == 1.0
    small = results["kd"]["parameters"]
    assert all(results[a]["parameters"] == small for a in ARMS if a not in ("distilbert_init", "kd_wide"))
    assert results["distilbert_init"]["parameters"] == results["kd_wide"]["parameters"] > small
    assert (
        results["teacher"]["parameters"]
        == results["weak_teacher"]["parameters"]
        > results["kd_wide"]["parameters"]
    )
    assert (
        0 < results["joint"]["teacher_accuracy"] <= 1
        and 0 <= results["joint"]["agreement_with_fixed_teacher"] <= 1
    )
    w = settings["sweep"]
    sweep = results["transfer_sweep"]
    assert sweep["sizes"] == list(w["sizes"])
    for key in ("teacher_labels", "kd", "teacher_labels_unseen", "kd_unseen"):
        assert len(sweep[key]) == len(w["sizes"])
    temps = results["temperature_sweep"]
    assert temps["temperatures"] == list(w["temperatures"])
    assert len(temps["accuracy"]) == len(temps["unseen_accuracy"]) == len(w["temperatures"])
    # the sweeps' shared settings are one run: the T=2 arm at the sweep's transfer size is the schedule arm
    if w["transfer"] in w["sizes"]:
        i_n = w["sizes"].index(w["transfer"])
        assert sweep["kd"][i_n] == results["alpha_schedule"]["accuracy"]
        if settings["distill"]["temperature"] in w["temperatures"]:
            i_t = w["temperatures"].index(settings["distill"]["temperature"])
            assert temps["accuracy"][i_t] == sweep["kd"][i_n]


def test_quick_run_writes_every_arm_sweep_and_metric(tmp_path):
    with one_thread():  # the golden run's setting
        out = run_study("07_distillation", seeds=[0], quick=True, out=tmp_path / "x.json", log=lambda _: None)
    # the library still computes what it computed when the stored results were made
    assert check_golden("07_distillation", results=json.loads(out.read_text())["seeds"]["0"]["results"]) == []
    data = json.loads(out.read_text())
    assert data["quick"] is True
    _check(data["seeds"]["0"]["results"], QUICK)


def test_committed_results_hold_three_seeds_of_every_arm_and_metric():
    study = load_study("07_distillation")
    assert study.seeds == [0, 1, 2]
    for seed in study.seeds:
        _check(study.results[seed], SETTINGS)
