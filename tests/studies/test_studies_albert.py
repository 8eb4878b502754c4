"""Study 04_albert (course_lib/studies/albert.py): a quick run gives every arm and metric, and
the arms differ only where they should. (Its full results are not committed yet.)"""

import json

import pytest

from course_lib.studies import check_golden, load_study, one_thread, run_study
from course_lib.studies.albert import QUICK, SETTINGS

ARMS = set(SETTINGS["arms"])
PAIR_ARMS = {name for name, arm in SETTINGS["arms"].items() if arm["pair_task"] is not None}
STARTS = set(SETTINGS["transfer"]["starts"]) | {"random"}
MODEL_METRICS = {
    "parameters",
    "embedding_parameters",
    "mlm_accuracy_pairs",
    "mlm_loss_pairs",
    "mlm_accuracy_blocks",
    "mlm_loss_blocks",
    "layer_l2",
    "layer_cosine",
}


def _check(results, layers):
    assert set(results) == ARMS | {"transfer_sop", "transfer_nsp"}
    for arm in ARMS:
        expected = MODEL_METRICS | ({"nsp_accuracy", "sop_accuracy"} if arm in PAIR_ARMS else set())
        assert set(results[arm]) == expected, arm
        for metric in expected:
            if "accuracy" in metric:
                assert 0.0 <= results[arm][metric] <= 1.0
        assert len(results[arm]["layer_l2"]) == len(results[arm]["layer_cosine"]) == layers
        assert all(-1.0 <= c <= 1.0 for c in results[arm]["layer_cosine"]) and all(
            d >= 0 for d in results[arm]["layer_l2"]
        )
    for task in ("sop", "nsp"):
        assert set(results[f"transfer_{task}"]) == STARTS
    # the same shape gives the same count; sharing and a narrow E each remove parameters
    p = {arm: results[arm]["parameters"] for arm in ARMS}
    assert p["bert_shape"] > p["not_shared"] > p["albert"] and p["bert_shape"] > p["e_equals_h"] > p["albert"]
    assert p["bert_shape_nsp"] == p["bert_shape"] > p["bert_shape_mlm_only"]  # MLM-only: no pooler, no head
    assert p["e_equals_h_dropout"] == p["e_equals_h"]  # dropout has no parameters
    assert results["albert"]["embedding_parameters"] < results["e_equals_h"]["embedding_parameters"]


def test_quick_run_writes_every_arm_and_metric(tmp_path):
    with one_thread():  # the golden run's setting
        out = run_study("04_albert", seeds=[0], quick=True, out=tmp_path / "x.json", log=lambda _: None)
    # the library still computes what it computed when the stored results were made
    assert check_golden("04_albert", results=json.loads(out.read_text())["seeds"]["0"]["results"]) == []
    data = json.loads(out.read_text())
    assert data["quick"] is True
    _check(data["seeds"]["0"]["results"], QUICK["model"]["num_hidden_layers"])
    (tmp_path / "04_albert.json").write_text(out.read_text())
    with pytest.raises(ValueError, match="quick"):
        load_study("04_albert", root=tmp_path)


def test_committed_results_hold_three_seeds_of_every_arm_and_metric():
    study = load_study("04_albert")  # refuses results of another spec or a quick run
    assert study.seeds == [0, 1, 2]
    for seed in study.seeds:
        _check(study.results[seed], SETTINGS["model"]["num_hidden_layers"])
