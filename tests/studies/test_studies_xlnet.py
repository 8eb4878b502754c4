"""Study 06_xlnet (course_lib/studies/xlnet.py): a quick run gives every arm and metric, the
study shares chapter 5's text, tokenizer and network shape, and the committed results hold
three seeds of every arm and metric."""

import json

import pytest

from course_lib.studies import check_golden, load_study, one_thread, run_study
from course_lib.studies.ar_ae import SETTINGS as AR_AE
from course_lib.studies.xlnet import ARMS, QUICK, SETTINGS

POSITION = {
    "accuracy_i",
    "accuracy_j",
    "both_right",
    "total_variation",
    "one_distribution_both_right",
    "one_distribution_ceiling",
    "n",
}
ORDERS = {"left_to_right", "right_to_left", "random", "order_spread_nats", "n_tokens"}


def _check(results, settings):
    sections = {"names", "grids", "cloze_city_first", "cloze_city_second", "cloze_words", "position_mass"}
    sections |= {f"{p}_{a}" for p in ("position_cities", "position_words", "orders") for a in ARMS}
    assert set(results) == set(ARMS) | sections
    assert len({results[a]["parameters"] for a in ARMS}) == 1
    assert {a: results[a]["steps"] for a in ARMS} == {
        a: settings["arms"][a].get("steps", settings["pretrain"]["steps"]) for a in ARMS
    }
    for a in ARMS:
        r = results[a]
        assert len(r["curve_steps"]) == len(r["curve_accuracy"]) == len(r["curve_loss"]) >= 1
        assert all(0 <= v <= 1 for v in r["curve_accuracy"])
        names = results["names"]
        assert 0 <= names[f"{a}_top_is_right"] <= names[f"{a}_top_is_name"] <= 1
        assert 0 <= names[f"{a}_inconsistent_mass"] <= 1 and names[f"{a}_n"] >= 1
        for grid in results["grids"][a]:
            assert sum(map(sum, grid)) == pytest.approx(1.0, abs=1e-5)
        for section in ("cloze_city_first", "cloze_city_second", "cloze_words"):
            assert 0 <= results[section][a] <= 1 and results[section]["n"] >= 1
        for p in ("position_cities", "position_words"):
            r = results[f"{p}_{a}"]
            assert set(r) == POSITION
            assert r["both_right"] <= min(r["accuracy_i"], r["accuracy_j"])
            assert 0 <= r["total_variation"] <= 1
            # one distribution for both positions never beats its ceiling
            assert r["one_distribution_both_right"] <= r["one_distribution_ceiling"] + 1e-12
        r = results[f"orders_{a}"]
        assert set(r) == ORDERS and r["n_tokens"] >= 1 and r["order_spread_nats"] >= 0
        assert all(r[k] > 0 for k in ("left_to_right", "right_to_left", "random"))
    assert results["position_cities_xlnet"]["one_distribution_ceiling"] == 0  # a city's two words differ
    assert all(0 <= v <= 1 for v in results["position_mass"].values())


def test_the_study_shares_chapter_5s_text_tokenizer_and_network():
    for key in ("documents", "names", "tokenizer", "model", "examples", "cloze"):
        assert SETTINGS[key] == AR_AE[key], key
    shared = ("batch_size", "lr", "max_len", "row_unit", "steps")
    assert {k: SETTINGS["pretrain"][k] for k in shared} == {k: AR_AE["pretrain"][k] for k in shared}
    assert SETTINGS["arms"]["xlnet_long"]["steps"] == AR_AE["arms"]["ae_long"]["steps"]


def test_quick_run_writes_every_arm_and_metric(tmp_path):
    with one_thread():  # the golden run's setting
        out = run_study("06_xlnet", seeds=[0], quick=True, out=tmp_path / "x.json", log=lambda _: None)
    # the library still computes what it computed when the stored results were made
    assert check_golden("06_xlnet", results=json.loads(out.read_text())["seeds"]["0"]["results"]) == []
    data = json.loads(out.read_text())
    assert data["quick"] is True
    _check(data["seeds"]["0"]["results"], QUICK)


def test_committed_results_hold_three_seeds_of_every_arm_and_metric():
    study = load_study("06_xlnet")  # refuses results of another spec or a quick run
    assert study.seeds == [0, 1, 2]
    for seed in study.seeds:
        _check(study.results[seed], SETTINGS)
