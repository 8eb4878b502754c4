"""Study 04_albert_shapes (course_lib/studies/albert_shapes.py): a quick run gives every arm and
metric and reproduces the golden run; the SOP cue control removes the cue it names; the stored
seeds (when run) are current and complete."""

import json

import pytest

from course_lib.data.lexicon import load_lexicon
from course_lib.studies import check_golden, load_study, one_thread, results_path, run_study
from course_lib.studies.albert_shapes import QUICK, SETTINGS, normalise_people

ARMS = set(SETTINGS["arms"])
METRICS = {
    "parameters",
    "mlm_accuracy",
    "mlm_loss",
    "sop_accuracy",
    "sop_accuracy_normalised",
    "curve_steps",
    "curve_accuracy",
}


def _check(results, steps, every):
    assert set(results) == ARMS | {"cue"}
    assert set(results["cue"]) == {"rule_original", "rule_normalised"}
    for arm in ARMS:
        r = results[arm]
        assert set(r) == METRICS, arm
        assert all(0.0 <= r[m] <= 1.0 for m in METRICS if "accuracy" in m and m != "curve_accuracy")
        assert r["curve_steps"] == list(range(every, steps + 1, every))[: len(r["curve_accuracy"])]
    p = {arm: results[arm]["parameters"] for arm in ARMS}
    # a narrower table and more sharing each remove parameters; attention-only and FFN-only lie between
    assert p["e32_all"] < p["e64_all"] < p["e128_all"] and p["e64_none"] < p["e128_none"]
    assert p["e64_all"] < p["e64_attention"] < p["e64_none"] and p["e64_all"] < p["e64_ffn"] < p["e64_none"]
    assert p["e64_attention"] != p["e64_ffn"]
    assert p["wide_albert"] < p["wide_bert"]


def test_normalise_people_removes_names_and_pronouns_and_keeps_the_rest():
    lex = load_lexicon()
    name = lex.female_names[0]
    out = normalise_people([f"{name} sees the dog. She feeds her cat and herself.", "The dog barks."], {name})
    assert out == ["Sam sees the dog. It feeds its cat and itself.", "The dog barks."]


@pytest.mark.slow
def test_quick_run_writes_every_arm_and_metric_and_reproduces_the_golden_run(tmp_path):
    with one_thread():
        out = run_study(
            "04_albert_shapes", seeds=[0], quick=True, out=tmp_path / "x.json", log=lambda _: None
        )
    results = json.loads(out.read_text())["seeds"]["0"]["results"]
    assert check_golden("04_albert_shapes", results=results) == []
    _check(results, QUICK["pretrain"]["steps"], QUICK["eval_every"])


def test_stored_seeds_are_current_and_complete():
    if not results_path("04_albert_shapes").exists():
        pytest.skip("study 04_albert_shapes has not been run yet (about 65 CPU-minutes a seed)")
    study = load_study("04_albert_shapes")  # refuses results of another spec or a quick run
    assert set(study.seeds) <= {0, 1, 2} and study.seeds
    for seed in study.seeds:
        _check(study.results[seed], SETTINGS["pretrain"]["steps"], SETTINGS["eval_every"])
