"""``course eval`` and evaluations written while training runs."""

from __future__ import annotations

import csv
import json

import pytest
import torch
from torch import nn

from course_lib.cli import main
from course_lib.evaluate import evaluate_folder
from course_lib.train import fit

TRAIN = ["--data", "generated", "--size", "tiny", "--n-docs", "40", "--batch-size", "8", "--steps", "3"]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("eval")
    held = root / "held.txt"
    held.write_text(
        "\n\n".join(
            "The parser reads the file. It returns a list of values. Each value is checked first."
            for _ in range(30)
        )
    )
    out = {}
    for objective in ("bert", "causal", "xlnet"):
        assert main(["train", objective, *TRAIN, "--out", str(root / objective)]) == 0
        out[objective] = root / objective
    return out, held


def test_eval_agrees_with_the_recipes_own_evaluations(models):
    from course_lib.data.text_files import load_documents
    from course_lib.evaluate import _rows
    from course_lib.objectives.pretraining import evaluate_causal_lm, evaluate_mlm, make_masker
    from course_lib.recipes.common import load_pretrained
    from course_lib.recipes.xlnet import evaluate_plm

    folders, held = models
    docs = load_documents(str(held))
    bert, tok = load_pretrained(folders["bert"])
    ours = evaluate_folder(folders["bert"], str(held), seed=3, progress=False)
    ref = evaluate_mlm(bert, _rows(folders["bert"], docs, tok, None), make_masker(tok), seed=3)
    assert ours["mlm_loss"] == pytest.approx(ref["mlm_loss"], abs=1e-5)
    assert ours["mlm_accuracy"] == pytest.approx(ref["mlm_accuracy"], abs=1e-9)

    causal, tok = load_pretrained(folders["causal"])
    ours = evaluate_folder(folders["causal"], str(held), progress=False)
    ref = evaluate_causal_lm(causal, _rows(folders["causal"], docs, tok, None))
    assert ours["lm_loss"] == pytest.approx(ref["lm_loss"], abs=1e-5)

    xlnet, tok = load_pretrained(folders["xlnet"])
    ours = evaluate_folder(folders["xlnet"], str(held), seed=1, progress=False)
    ref = evaluate_plm(xlnet, _rows(folders["xlnet"], docs, tok, None), seed=1)
    assert ours["plm_loss"] == pytest.approx(ref["plm_loss"], abs=1e-5)


def test_pseudo_log_likelihood_and_json_output(models, tmp_path, capsys):
    folders, held = models
    out = tmp_path / "scores.json"
    args = ["eval", str(folders["bert"]), "--data", str(held), "--pll", "--max-rows", "2", "--json", str(out)]
    assert main(args) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed == json.loads(out.read_text())
    assert printed["rows"] == 2 and printed["pll_per_token"] < 0
    assert printed["pseudo_perplexity"] == pytest.approx(2.718281828 ** -printed["pll_per_token"], rel=1e-6)


def test_eval_refuses_what_it_cannot_score_in_one_line(tmp_path, capsys):
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text('{"architecture": "ElmoLanguageModel"}')
    assert main(["eval", str(tmp_path / "m"), "--data", "x.txt"]) == 2
    assert main(["eval", str(tmp_path / "nothing"), "--data", "x.txt"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and "ElmoLanguageModel" in err[0] and "not a model folder" in err[1]


class _Stop(Exception):
    pass


def test_evaluations_are_written_as_they_happen(tmp_path):
    """A run stopped after its first evaluation has that evaluation in the CSV already."""
    torch.manual_seed(0)
    model = nn.Linear(3, 1)
    calls = {"n": 0}

    def loss(m, batch):
        calls["n"] += 1
        if calls["n"] > 6:
            raise _Stop
        return m(batch).pow(2).mean()

    log = tmp_path / "run.csv"
    with pytest.raises(_Stop):
        fit(
            model,
            lambda step: torch.randn(4, 3),
            loss,
            steps=10,
            progress=False,
            eval_fn=lambda m: {"score": float(m.weight.sum())},
            eval_every=2,
            log_csv=log,
        )
    rows = list(csv.reader((tmp_path / "run-evals.csv").open()))
    assert rows[0] == ["step", "score"] and [int(r[0]) for r in rows[1:]] == [1, 3, 5]
