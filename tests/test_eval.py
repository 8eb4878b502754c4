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
    ref = evaluate_mlm(bert, _rows(folders["bert"], docs, tok, None, bert), make_masker(tok), seed=3)
    assert ours["mlm_loss"] == pytest.approx(ref["mlm_loss"], abs=1e-5)
    assert ours["mlm_accuracy"] == pytest.approx(ref["mlm_accuracy"], abs=1e-9)

    causal, tok = load_pretrained(folders["causal"])
    ours = evaluate_folder(folders["causal"], str(held), progress=False)
    ref = evaluate_causal_lm(causal, _rows(folders["causal"], docs, tok, None, causal))
    assert ours["lm_loss"] == pytest.approx(ref["lm_loss"], abs=1e-5)

    xlnet, tok = load_pretrained(folders["xlnet"])
    ours = evaluate_folder(folders["xlnet"], str(held), seed=1, progress=False)
    ref = evaluate_plm(xlnet, _rows(folders["xlnet"], docs, tok, None, xlnet), seed=1)
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
    (tmp_path / "m" / "config.json").write_text('{"architecture": "BigramCounter"}')
    assert main(["eval", str(tmp_path / "m"), "--data", "x.txt"]) == 2
    assert main(["eval", str(tmp_path / "nothing"), "--data", "x.txt"]) == 2
    (tmp_path / "e").mkdir()  # an ELMo folder without its weights
    (tmp_path / "e" / "config.json").write_text('{"architecture": "ElmoLanguageModel"}')
    assert main(["eval", str(tmp_path / "e"), "--data", "x.txt"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3 and "BigramCounter" in err[0] and "not a model folder" in err[1]
    assert "model.safetensors is missing" in err[2] and "course train elmo" in err[2]


def test_text_with_nothing_to_score_is_refused_not_a_perfect_perplexity(models, tmp_path, capsys):
    """Chinese text for an English WordPiece model is all [UNK], which the masked LM never
    predicts: zero scored tokens used to print loss 0 and perplexity 1 (and the causal LM and
    XLNet scored predicting [UNK] from [UNK]). Now one line, exit 2, no JSON; control: the
    English held-out text scores. A --json path that is a folder is one
    line too, before any scoring."""
    folders, held = models
    zh = tmp_path / "zh.txt"
    zh.write_text("今天天气很好。我们去公园散步吧。\n\n猫坐在垫子上。狗在院子里跑。\n", encoding="utf-8")
    out = tmp_path / "scores.json"
    capsys.readouterr()
    for kind in ("bert", "causal", "xlnet"):  # every tokenised model: its scores would measure nothing
        assert main(["eval", str(folders[kind]), "--data", str(zh), "--json", str(out)]) == 2
        err = capsys.readouterr().err.strip()
        assert "of the text's tokens are unknown to the model's tokenizer" in err, err
        assert len(err.splitlines()) == 1 and not out.exists()
    from course_lib.evaluate import _require_scored  # the masked LM's own guard behind it

    with pytest.raises(ValueError, match="no masked-LM position of the text could be scored"):
        _require_scored(0, "masked-LM")
    assert main(["eval", str(folders["bert"]), "--data", str(held), "--max-rows", "2"]) == 0
    assert json.loads(capsys.readouterr().out)["tokens"] > 0
    for other in ("causal", "xlnet"):  # --pll is the masked LM's: refused, not silently ignored
        assert main(["eval", str(folders[other]), "--data", str(held), "--pll"]) == 2
        err = capsys.readouterr().err.strip()
        assert "--pll: the pseudo-log-likelihood" in err and len(err.splitlines()) == 1, err
    assert main(["eval", str(folders["bert"]), "--data", str(held), "--json", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert "--json" in err and "is a folder; give a file" in err and len(err.splitlines()) == 1


@pytest.fixture(scope="module")
def own_scorers(tmp_path_factory):
    """An ELMo and a Transformer-XL trained for a few steps, and held-out text."""
    root = tmp_path_factory.mktemp("own")
    from course_lib.data import load_documents

    held = root / "held.txt"
    held.write_text("\n\n".join(d.text for d in load_documents(None, n_docs=30, seed=5)) + "\n")
    for objective in ("elmo", "transfo-xl"):
        argv = ["train", objective, "--data", "generated", "--size", "tiny", "--steps", "3"]
        assert main([*argv, "--out", str(root / objective)]) == 0
    return root, held


def test_eval_scores_elmo_as_its_recipe_does(own_scorers):
    """Both directions' losses over every held-out sentence, each batch weighted by its
    predictions (the batch size does not change them), equal to the recipe's evaluate_lm on
    the whole set at once; perplexity is exp of the directions' mean, as course train reports."""
    from course_lib.data.text_files import load_sentences
    from course_lib.recipes.elmo import ElmoLMData, evaluate_lm, load_pretrained_elmo

    root, held = own_scorers
    small = evaluate_folder(root / "elmo", str(held), batch_size=7, progress=False)
    large = evaluate_folder(root / "elmo", str(held), batch_size=4096, progress=False)
    model, vocab = load_pretrained_elmo(root / "elmo")
    sentences = load_sentences(str(held))
    table = ElmoLMData(sentences, vocab, max_len=64)
    ref = evaluate_lm(model, table.batch(range(len(sentences))), prefix=False)
    assert small["rows"] == len(sentences) and small["objective"] == "biLM"
    for key in ("forward_loss", "backward_loss"):
        assert small[key] == pytest.approx(ref[key], abs=1e-5)
        assert large[key] == pytest.approx(ref[key], abs=1e-5)
    assert small["forward_loss"] != pytest.approx(small["backward_loss"], abs=1e-6)  # two real directions
    mean = (small["forward_loss"] + small["backward_loss"]) / 2
    assert small["perplexity"] == pytest.approx(float(torch.tensor(mean).exp()), rel=1e-6)


def test_eval_scores_transformer_xl_with_and_without_memory(own_scorers, capsys):
    from course_lib.data.text_files import load_documents
    from course_lib.recipes.common import load_pretrained
    from course_lib.recipes.transfo_xl import evaluate_transfo_xl, stream_rows, token_stream

    root, held = own_scorers
    model, tok = load_pretrained(root / "transfo-xl")
    rows = stream_rows(token_stream(load_documents(str(held)), tok), 32 * 4)  # the training's rows
    ref = evaluate_transfo_xl(model, rows, segment_len=32)
    ours = evaluate_folder(root / "transfo-xl", str(held), batch_size=3, progress=False)
    assert ours["rows"] == rows.size(0) and ours["mem_len"] == model.config.mem_len == 32
    assert ours["lm_loss"] == pytest.approx(ref["lm_loss"], abs=1e-5)
    assert ours["lm_loss_no_memory"] == pytest.approx(ref["lm_loss_no_memory"], abs=1e-5)
    assert ours["lm_loss"] != ours["lm_loss_no_memory"]  # the memory is really carried
    assert ours["perplexity"] == pytest.approx(float(torch.tensor(ours["lm_loss"]).exp()), rel=1e-6)
    # the command: JSON on stdout, a progress bar on stderr
    capsys.readouterr()
    assert main(["eval", str(root / "transfo-xl"), "--data", str(held), "--batch-size", "4"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["lm_loss"] == pytest.approx(ours["lm_loss"], abs=1e-5)
    (root / "tiny.txt").write_text("Too short.\n")
    assert main(["eval", str(root / "transfo-xl"), "--data", str(root / "tiny.txt")]) == 2
    err = capsys.readouterr().err.strip()
    assert "fewer tokens than one row of 128" in err and len(err.splitlines()) == 1


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


def test_a_damaged_model_folder_is_one_line_naming_the_file(models, tmp_path, capsys):
    """A truncated model.safetensors, another model's weights, and a config.json that is not
    JSON: each is one line naming the file, from `course eval` and from `load_pretrained` (a
    ValueError, not the safetensors or JSON parser's own error). Control: the intact folder."""
    import shutil

    from course_lib.recipes.common import load_pretrained

    folders, held = models
    cases = {}
    for name, damage in (
        (
            "truncated",
            lambda f: (f / "model.safetensors").write_bytes((f / "model.safetensors").read_bytes()[:1000]),
        ),
        ("other", lambda f: shutil.copy(folders["xlnet"] / "model.safetensors", f / "model.safetensors")),
        ("badjson", lambda f: (f / "config.json").write_text("{not json")),
    ):
        folder = tmp_path / name
        shutil.copytree(folders["bert"], folder)
        damage(folder)
        cases[name] = folder
    capsys.readouterr()
    for name, folder in cases.items():
        named = "config.json is not valid JSON" if name == "badjson" else "model.safetensors: cannot load"
        with pytest.raises(ValueError, match=named):
            load_pretrained(folder)
        assert main(["eval", str(folder), "--data", str(held), "--max-rows", "2"]) == 2
        err = capsys.readouterr().err.strip()
        assert named in err and len(err.splitlines()) == 1, err
    load_pretrained(folders["bert"])  # control


def test_a_fine_tuned_or_elmo_folder_is_pointed_where_it_belongs(models, tmp_path, capsys):
    """`course eval` on a `course finetune` folder says what it holds (not "unknown architecture"),
    and `load_pretrained` on an ELMo folder names ELMo's loader (not "tokenizer.json is missing")."""
    import shutil

    from course_lib.recipes.common import load_pretrained

    folders, held = models
    tuned = tmp_path / "tuned"
    shutil.copytree(folders["bert"], tuned)
    (tuned / "labels.json").write_text('{"labels": ["neg", "pos"]}')
    capsys.readouterr()
    assert main(["eval", str(tuned), "--data", str(held)]) == 2
    err = capsys.readouterr().err.strip()
    assert "holds a fine-tuned" in err and "metrics.json" in err and len(err.splitlines()) == 1, err
    elmo = tmp_path / "elmo"
    elmo.mkdir()
    (elmo / "config.json").write_text('{"architecture": "ElmoLanguageModel"}')
    with pytest.raises(ValueError, match="load_pretrained_elmo"):
        load_pretrained(elmo)


def test_a_hugging_face_folder_given_to_a_course_command_is_named_as_such(tmp_path, capsys):
    """A practitioner's review: an exported folder given back to `course eval`, `finetune`,
    `export` or as a distillation teacher said "unknown BertConfig fields [...26 names]", even
    for XLNet. Now one line naming it a Hugging Face folder."""
    hf = tmp_path / "hf-xlnet"
    hf.mkdir()
    (hf / "config.json").write_text(
        json.dumps({"model_type": "xlnet", "architectures": ["XLNetLMHeadModel"]})
    )
    (hf / "model.safetensors").write_bytes(b"")
    (tmp_path / "t.txt").write_text("Some text here. More text there.\n")
    (tmp_path / "c.tsv").write_text("pos\tgood\nneg\tbad\n" * 4)
    capsys.readouterr()
    for argv in (
        ["eval", str(hf), "--data", str(tmp_path / "t.txt")],
        [
            "finetune",
            str(hf),
            "--task",
            "classify",
            "--train",
            str(tmp_path / "c.tsv"),
            "--out",
            str(tmp_path / "f"),
        ],
        ["export", str(hf), str(tmp_path / "e")],
        ["train", "distill", "--teacher", str(hf), "--data", "generated", "--out", str(tmp_path / "d")],
    ):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err.strip()
        assert "is a Hugging Face model folder (model_type 'xlnet'" in err and len(err.splitlines()) == 1, err


def test_a_distilled_student_is_scored_within_its_positions(models, tmp_path, capsys):
    """A practitioner's review: a student distilled from a teacher of 64 positions records no
    max_len, so eval built rows of 128 tokens and failed ("input (max_position_embeddings)
    length 128 exceeds ..."). The default now stays within the model's positions; a --max-len
    beyond them is one line naming both."""
    folders, held = models
    teacher = tmp_path / "teacher"
    assert main(["train", "bert", *TRAIN, "--max-len", "32", "--out", str(teacher)]) == 0
    student = tmp_path / "student"
    argv = ["train", "distill", "--teacher", str(teacher), "--data", "generated", "--n-docs", "40"]
    assert main([*argv, "--layers", "1", "--steps", "2", "--batch-size", "8", "--out", str(student)]) == 0
    capsys.readouterr()
    assert main(["eval", str(student), "--data", str(held), "--max-rows", "4"]) == 0
    assert json.loads(capsys.readouterr().out)["tokens"] > 0
    assert main(["eval", str(student), "--data", str(held), "--max-len", "100"]) == 2
    err = capsys.readouterr().err.strip()
    assert "--max-len 100 is longer than the 32 positions the model has" in err and len(err.splitlines()) == 1
