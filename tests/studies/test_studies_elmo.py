"""Study 01_elmo (course_lib/studies/elmo.py): a quick run works, the committed results are current,
and the pieces it is built from (the first-token task, the two readers, chapter 1's probes)."""

import json

import pytest
import torch

from course_lib.analysis.word_probes import tag_lookup
from course_lib.data import UPOS_TAGS
from course_lib.studies import check_golden, load_study, one_thread, run_study
from course_lib.studies.elmo import (
    SETTINGS,
    LSTMReader,
    TransformerReader,
    first_token_task,
)

LAYER_METRICS = {"pos_all", "pos_ambiguous", "sense_all", "sense_jam"}
DISTANCES = SETTINGS["long_range"]["distances"]


def _check_arms(results):
    arms = {"bilm", "lookup", "layer0", "layer1", "layer2", "lstm", "transformer", "lstm_longer"}
    assert set(results) == arms
    for j in range(3):
        assert set(results[f"layer{j}"]) == LAYER_METRICS
    assert set(results["lookup"]) == {"pos_all", "pos_ambiguous"}
    for arm in ("lstm", "transformer"):
        assert set(results[arm]) == {f"acc_d{d}" for d in DISTANCES} | {"parameters"}
    assert set(results["lstm_longer"]) == {f"acc_d{SETTINGS['lstm_longer']['distance']}", "steps"}
    for arm, metrics in results.items():
        for metric, value in metrics.items():
            if metric.startswith(("pos_", "sense_", "acc_")):
                assert 0.0 <= value <= 1.0, (arm, metric, value)


def test_quick_run_writes_every_arm_and_metric(tmp_path):
    with one_thread():  # the golden run's setting
        out = run_study("01_elmo", seeds=[0], quick=True, out=tmp_path / "x.json", log=lambda _: None)
    # the library still computes what it computed when the stored results were made
    assert check_golden("01_elmo", results=json.loads(out.read_text())["seeds"]["0"]["results"]) == []
    data = json.loads(out.read_text())
    assert data["quick"] is True and list(data["seeds"]) == ["0"]
    results = data["seeds"]["0"]["results"]
    _check_arms(results)
    # the two readers have about the same number of weights (within 5%)
    lstm, transformer = results["lstm"]["parameters"], results["transformer"]["parameters"]
    assert abs(lstm - transformer) / lstm < 0.05
    (tmp_path / "01_elmo.json").write_text(out.read_text())
    with pytest.raises(ValueError, match="quick"):  # a quick run is never shown as the study's results
        load_study("01_elmo", root=tmp_path)


def test_committed_results_are_current_and_hold_three_seeds():
    study = load_study("01_elmo")  # raises if the settings or the study's code changed since the run
    assert study.seeds == [0, 1, 2]
    for seed in study.seeds:
        _check_arms(study.results[seed])
    table = study.table([("layer1", "pos_ambiguous"), ("lstm", f"acc_d{DISTANCES[-1]}")])
    assert table.count("\n") == 2 and "mean" in table


def test_first_token_task():
    x, y = first_token_task(500, 16, n_symbols=7, seed=3)
    assert x.shape == (500, 17) and y.shape == (500,)
    assert torch.equal(y, x[:, 0])
    assert int(x.min()) == 0 and int(x.max()) == 6  # every symbol, none outside
    again, _ = first_token_task(500, 16, n_symbols=7, seed=3)
    other, _ = first_token_task(500, 16, n_symbols=7, seed=4)
    assert torch.equal(x, again) and not torch.equal(x, other)
    # the distractors carry no information about the label
    assert (x[:, 1:] == y[:, None]).float().mean().item() == pytest.approx(1 / 7, abs=0.02)
    with pytest.raises(ValueError):
        first_token_task(10, 0)
    with pytest.raises(ValueError):
        first_token_task(10, 4, n_symbols=1)


def test_readers_answer_at_the_last_position():
    torch.manual_seed(0)
    x, _ = first_token_task(8, 5, seed=0)
    for model in (LSTMReader(10, 16), TransformerReader(10, 16, 2, 32, max_len=6)):
        model.eval()
        logits = model(x)
        assert logits.shape == (8, 10)
        # the LSTM reads left to right; the encoder's last position reads every position
        changed = x.clone()
        changed[:, 0] = (changed[:, 0] + 1) % 10
        assert not torch.allclose(model(changed), logits)


def test_tag_lookup_finds_the_ambiguous_words():
    tag = UPOS_TAGS.index
    train_words = ["that", "that", "that", "dog", "runs", "to", "to"]
    train_tags = torch.tensor(
        [tag("PRON"), tag("DET"), tag("DET"), tag("NOUN"), tag("VERB"), tag("ADP"), tag("PART")]
    )
    lookup, ambiguous = tag_lookup(train_words, train_tags, ["that", "dog", "zebra", "to", "runs"])
    assert ambiguous.tolist() == [True, False, False, True, False]
    assert lookup[:3].tolist() == [tag("DET"), tag("NOUN"), tag("NOUN")]  # most frequent; unseen -> NOUN
    assert lookup[4].item() == tag("VERB")
