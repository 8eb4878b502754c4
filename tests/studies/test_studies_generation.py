"""Study 05_generation (course_lib/studies/generation.py): a quick run gives every generator at
every temperature and both controls with every judge, and reproduces the golden run; the
references really continue their prompts; the committed results hold three seeds."""

import json

from course_lib.studies import check_golden, load_study, one_thread, run_study
from course_lib.studies.ar_ae import FILL_ORDERS, MASKED_ARMS
from course_lib.studies.generation import QUICK, SETTINGS, prompts_and_references

NAME = "05_generation"
JUDGES = (
    "grammatical_share",
    "distinct_2",
    "distinct_3",
    "repeat_share",
    "full_stop_share",
    "ar_log_likelihood_per_token",
    "ae_pll_per_token",
)


def _check(results, settings):
    generators = ["ar"] + [f"{a}_{o}" for a in MASKED_ARMS for o in FILL_ORDERS]
    keys = ["control_reference", "control_shuffled"]
    keys += [f"t{t:g}_{g}" for t in settings["generation"]["temperatures"] for g in generators]
    for key in keys:
        r = results[key]
        for j in JUDGES:
            assert j in r, (key, j)
        assert 0 <= r["grammatical_share"] <= 1 and 0 < r["distinct_2"] <= 1
        assert r["ar_log_likelihood_per_token"] < 0 and r["ae_pll_per_token"] < 0
    assert results["generation"]["n"] <= settings["generation"]["prompts"]
    for arm in ("ar", "ae", "ae_long"):
        assert len(results[arm]["curve_steps"]) == len(results[arm]["curve_accuracy"]) >= 1


def test_quick_run_writes_every_generator_temperature_and_control(tmp_path):
    with one_thread():  # the golden run's setting
        out = run_study(NAME, seeds=[0], quick=True, out=tmp_path / "x.json", log=lambda _: None)
    results = json.loads(out.read_text())["seeds"]["0"]["results"]
    assert check_golden(NAME, results=results) == []
    _check(results, QUICK)


def test_references_continue_their_prompts():
    from course_lib.studies.ar_ae import chapter_text_and_tokenizer

    _, held_docs, _, tokenizer, _ = chapter_text_and_tokenizer(QUICK)
    g = dict(QUICK["generation"], prompts=20)
    prompts, references = prompts_and_references(tokenizer, held_docs, g)
    k = prompts.size(1)
    assert k == 1 + g["prompt_words"] and references.size(1) == k + g["tokens"]
    assert (references[:, :k] == prompts).all()
    assert len({tuple(p) for p in prompts.tolist()}) == len(prompts)  # each prompt once


def test_committed_results_hold_three_seeds():
    study = load_study(NAME)
    assert study.seeds == [0, 1, 2]
    for seed in study.seeds:
        _check(study.results[seed], SETTINGS)
