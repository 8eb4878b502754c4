"""Study 05_ar_ae (course_lib/studies/ar_ae.py): a quick run gives every arm and metric, the
five models share one network, the committed results hold three seeds of every arm and
metric, and the chapter's text holds the two-word cities."""

import json

import pytest

from course_lib.data.tasks import two_word_cities
from course_lib.studies import check_golden, load_study, one_thread, run_study
from course_lib.studies.ar_ae import MASKED_ARMS, QUICK, SETTINGS, chapter_text

ARMS = set(SETTINGS["arms"])
SCORED = ARMS - {"ae_blocks"}  # (the masked LM on blocks keeps only its learning curve)
CLOZE_COLUMNS = {*MASKED_ARMS, "ar", "ar_r2l", "product", "n"}


def _check(results, settings):
    sections = {"names", "grids", "cloze_city_first", "cloze_city_second", "cloze_words", "likelihood"}
    sections |= {"agreement", "generation", "discrepancy"}
    generators = {"ar"} | {f"{a}_{o}" for a in MASKED_ARMS for o in ("left_to_right", "most_confident")}
    assert set(results) == ARMS | sections | {f"generation_{g}" for g in generators}
    # one network: every arm has the same parameters; the long masked LM trains 8 times longer
    assert len({results[a]["parameters"] for a in ARMS}) == 1
    assert {a: results[a]["steps"] for a in ARMS} == {
        a: settings["arms"][a].get("steps", settings["pretrain"]["steps"]) for a in ARMS
    }
    for a in ARMS:
        assert len(results[a]["curve_steps"]) == len(results[a]["curve_accuracy"]) >= 1
        assert all(0 <= v <= 1 for v in results[a]["curve_accuracy"])
    for a in ("ar", "ar_r2l"):
        assert results[a]["perplexity"] == pytest.approx(2.718281828 ** results[a]["lm_loss"], rel=1e-6)
    for section in ("cloze_city_first", "cloze_city_second", "cloze_words"):
        assert set(results[section]) == CLOZE_COLUMNS
        assert all(0 <= results[section][c] <= 1 for c in CLOZE_COLUMNS - {"n"})
    names = results["names"]
    for a in (*MASKED_ARMS, "ar"):
        assert 0 <= names[f"{a}_top_is_right"] <= names[f"{a}_top_is_name"] <= 1
        assert 0 <= names[f"{a}_inconsistent_mass"] <= 1 and names[f"{a}_n"] >= 1
        for grid in results["grids"][a]:  # normalised grids of rows x columns
            assert len(grid) == len(names["row_words"]) and len(grid[0]) == len(names["col_words"])
            assert sum(map(sum, grid)) == pytest.approx(1.0, abs=1e-5)
    assert set(results["agreement"]) == SCORED | {"n_pairs"}
    for g in generators:
        r = results[f"generation_{g}"]
        assert (
            len(r["examples"]) == settings["generation"]["shown"]
            or len(r["examples"]) == results["generation"]["n"]
        )
        assert r["ar_log_likelihood_per_token"] < 0 and r["ae_pll_per_token"] < 0
    for a in MASKED_ARMS:
        assert -1 <= results["discrepancy"][f"{a}_cosine"] <= 1
        assert 0 <= results["discrepancy"][f"{a}_top1_changed"] <= 1


def test_quick_run_writes_every_arm_and_metric(tmp_path):
    with one_thread():  # the golden run's setting
        out = run_study("05_ar_ae", seeds=[0], quick=True, out=tmp_path / "x.json", log=lambda _: None)
    # the library still computes what it computed when the stored results were made
    assert check_golden("05_ar_ae", results=json.loads(out.read_text())["seeds"]["0"]["results"]) == []
    data = json.loads(out.read_text())
    assert data["quick"] is True
    _check(data["seeds"]["0"]["results"], QUICK)
    (tmp_path / "05_ar_ae.json").write_text(out.read_text())
    with pytest.raises(ValueError, match="quick"):
        load_study("05_ar_ae", root=tmp_path)


def test_committed_results_hold_three_seeds_of_every_arm_and_metric():
    study = load_study("05_ar_ae")  # refuses results of another spec or a quick run
    assert study.seeds == [0, 1, 2]
    for seed in study.seeds:
        _check(study.results[seed], SETTINGS)


def test_the_chapter_text_names_every_two_word_city_often():
    train_docs, held_docs, held_names = chapter_text(SETTINGS)
    text = " ".join(" ".join(d) if isinstance(d, list) else d.text for d in train_docs)
    counts = {f"{a} {b}": text.count(f"{a} {b}") for a, b in two_word_cities()}
    assert min(counts.values()) >= 5, counts  # the documents alone name most cities 0-6 times
    assert len(held_names) == SETTINGS["names"]["heldout"] and held_docs
