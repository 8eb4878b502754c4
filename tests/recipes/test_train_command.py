"""``course train OBJECTIVE``: every objective, its presets, config files and the loop options."""

from __future__ import annotations

import json
import sys

import pytest
import torch

from course_lib.cli import build_parser, main
from course_lib.recipes.train_command import OBJECTIVES


def _parse(*argv: str):
    return build_parser().parse_args(list(argv))


@pytest.mark.parametrize("objective", sorted(OBJECTIVES))
def test_every_objective_has_the_loop_options(objective):
    extra = ["--teacher", "t"] if objective == "distill" else []
    args = _parse(
        "train", objective, "--out", "o", "--accumulate", "4", "--precision", "bf16", "--resume", *extra
    )
    assert args.objective == objective and args.accumulate == 4 and args.precision == "bf16" and args.resume
    for dest, value in OBJECTIVES[objective][2].items():
        assert getattr(args, dest) == value


def test_presets_are_the_papers_settings():
    roberta = _parse("train", "roberta", "--out", "o")
    assert (roberta.pair_task, roberta.tokenizer, roberta.masking) == ("none", "byte-bpe", "dynamic")
    albert = _parse("train", "albert", "--out", "o")
    assert (albert.pair_task, albert.architecture) == ("sop", "AlbertForPreTraining")
    assert _parse("train", "causal", "--out", "o").causal == "left-to-right"
    assert _parse("train", "bert", "--out", "o", "--data", "x.txt").text == "x.txt"
    # the command line's default is the API's: BERT masks once (pretrain_bert(masking="static"))
    import inspect

    from course_lib.recipes.bert import pretrain_bert

    assert _parse("train", "bert", "--out", "o").masking == "static"
    assert inspect.signature(pretrain_bert).parameters["masking"].default == "static"


def test_unknown_objective_is_refused(capsys):
    with pytest.raises(SystemExit):
        _parse("train", "gpt5", "--out", "o")
    assert "invalid choice: 'gpt5'" in capsys.readouterr().err


@pytest.mark.parametrize("suffix", [".json", ".toml"])
def test_a_config_file_gives_values_and_the_command_line_wins(tmp_path, suffix, monkeypatch):
    values = {"steps": 3, "batch-size": 4, "size": "tiny", "n_docs": 40, "data": "generated", "max-len": 32}
    config = tmp_path / f"run{suffix}"
    if suffix == ".json":
        config.write_text(json.dumps(values))
    else:
        config.write_text("\n".join(f"{k} = {json.dumps(v)}" for k, v in values.items()))
    out = tmp_path / "m"
    argv = [
        "train",
        "roberta",
        "--config",
        str(config),
        "--out",
        str(out),
        "--steps",
        "2",
        "--vocab-size",
        "300",
    ]
    monkeypatch.setattr(sys, "argv", ["course", *argv])
    monkeypatch.setenv("COURSE_PROGRESS", "0")
    assert main(argv) == 0
    meta = json.loads((out / "model.json").read_text())
    assert (
        meta["recipe"]["steps"] == 2
        and meta["recipe"]["batch_size"] == 4
        and meta["recipe"]["size"] == "tiny"
    )
    assert len(meta["history"]["loss"]) == 2 and (out / "logs").is_dir()


def test_a_bad_config_names_the_problem(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"stepz": 3}))
    assert main(["train", "bert", "--config", str(bad), "--out", str(tmp_path / "o")]) == 2
    assert "unknown option 'stepz'" in capsys.readouterr().err
    bad.write_text(json.dumps({"masking": "sometimes"}))
    assert main(["train", "bert", "--config", str(bad), "--out", str(tmp_path / "o")]) == 2
    assert "masking must be one of" in capsys.readouterr().err
    bad.write_text("{not json")
    assert main(["train", "bert", "--config", str(bad), "--out", str(tmp_path / "o")]) == 2
    assert "not valid JSON" in capsys.readouterr().err
    assert main(["train", "bert", "--config", str(tmp_path / "nope.json"), "--out", str(tmp_path / "o")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main(["train", "bert", "--config", str(tmp_path), "--out", str(tmp_path / "o")]) == 2
    assert "is a folder; give a .toml or .json file" in capsys.readouterr().err


@pytest.mark.parametrize(
    "objective, extra",
    [
        ("elmo", ["--size", "tiny"]),
        ("xlnet", ["--size", "tiny"]),
        ("transfo-xl", ["--size", "tiny"]),
    ],
)
def test_other_objectives_train_with_accumulation(tmp_path, objective, extra, monkeypatch):
    monkeypatch.setenv("COURSE_PROGRESS", "0")
    out = tmp_path / objective
    code = main(
        [
            "train",
            objective,
            "--data",
            "generated",
            "--out",
            str(out),
            "--steps",
            "2",
            "--accumulate",
            "2",
            *extra,
        ]
    )
    assert code == 0
    meta = json.loads((out / "model.json").read_text())
    assert len(meta["history"]["loss"]) == 2 and meta["recipe"]["accumulate"] == 2


def test_course_train_is_the_only_training_command(capsys):
    for command in ("pretrain-bert", "train-elmo", "pretrain-xlnet", "pretrain-transfo-xl", "distill"):
        with pytest.raises(SystemExit):
            _parse(command, "--out", "o")
        assert "invalid choice" in capsys.readouterr().err
    from course_lib.recipes import train_command

    assert "_given_on_command_line" not in vars(train_command)  # the config goes through set_defaults


def test_a_config_file_can_change_a_preset_and_the_command_line_wins_over_it(tmp_path, monkeypatch):
    """The file's values are the parser's defaults (over the objective's presets); the command
    line is parsed over them."""
    import course_lib.recipes.bert_command as bert

    seen = {}
    monkeypatch.setattr(
        bert, "pretrain_bert", lambda *a, **k: seen.update(k) or (_ for _ in ()).throw(ValueError("stop"))
    )
    config = tmp_path / "run.toml"
    config.write_text('pair-task = "none"\nsteps = 7\nmask-rate = 0.3\ndata = "generated"\nn-docs = 40\n')
    argv = ["train", "bert", "--config", str(config), "--out", str(tmp_path / "o"), "--steps", "5"]
    assert main(argv) == 2  # (the spy stops the run once it has the arguments)
    assert seen["pair_task"] is None and seen["steps"] == 5 and seen["mlm_probability"] == 0.3


def test_out_and_teacher_may_come_from_the_config_file_and_are_required(tmp_path, capsys):
    """``out`` (and distill's ``teacher``) are options like the others: a --config file may give
    them (the command line still wins); given nowhere, one line naming what is missing."""
    config = tmp_path / "run.toml"
    out = tmp_path / "from-config"
    config.write_text(f'out = "{out}"\nsteps = 2\nsize = "tiny"\nbatch-size = 4\nn-docs = 20\n')
    assert main(["train", "bert", "--config", str(config)]) == 0
    assert json.loads((out / "model.json").read_text())["history"]["steps"] == [0, 1]
    capsys.readouterr()
    for argv, named in (
        (["train", "bert", "--steps", "2"], "course train bert: --out is required"),
        (["train", "distill", "--out", str(tmp_path / "d")], "course train distill: --teacher is required"),
        (["train", "distill"], "--out and --teacher are required"),
    ):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert named in err and len(err.splitlines()) == 1, err


def test_albert_and_distill_train_and_a_distill_run_resumes(tmp_path, monkeypatch):
    """ALBERT through `course train albert`; then a two-stage distillation (TinyBERT's layer
    losses first) of it, killed in its second stage and resumed: the same student."""
    monkeypatch.setenv("COURSE_PROGRESS", "0")
    teacher = tmp_path / "albert"
    common = ["--data", "generated", "--n-docs", "60", "--batch-size", "8"]
    assert main(["train", "albert", *common, "--out", str(teacher), "--size", "tiny", "--steps", "3"]) == 0
    assert json.loads((teacher / "config.json").read_text())["architecture"] == "AlbertForPreTraining"

    bert = tmp_path / "bert"
    assert main(["train", "bert", *common, "--out", str(bert), "--size", "tiny", "--steps", "3"]) == 0
    distill = ["train", "distill", "--teacher", str(bert), *common, "--steps", "6", "--layers", "1"]
    distill += ["--method", "tinybert", "--first-steps", "3", "--checkpoint-every", "1"]
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    assert main([*distill, "--out", str(whole)]) == 0
    stages = sorted(p.name for p in (whole / "checkpoints").iterdir())
    assert len(stages) == 2, stages

    import course_lib.train as train

    real_fit, calls = train.fit, {"n": 0}

    def dies_in_stage_two(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 2:  # the second stage: stop after its first step's state is written
            loss_fn = args[2]

            def loss(model, batch, seen=[0]):
                seen[0] += 1
                if seen[0] > 2:
                    raise KeyboardInterrupt
                return loss_fn(model, batch)

            args = (*args[:2], loss, *args[3:])
        return real_fit(*args, **kwargs)

    monkeypatch.setattr("course_lib.recipes.distill.fit", dies_in_stage_two)
    assert main([*distill, "--out", str(killed)]) == 130  # Ctrl-C: one line, exit status 130
    monkeypatch.setattr("course_lib.recipes.distill.fit", real_fit)
    assert main([*distill, "--out", str(killed), "--resume"]) == 0
    from safetensors.torch import load_file

    a, b = load_file(whole / "model.safetensors"), load_file(killed / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize(
    "values, named",
    [
        ({"batch-size": 32.5}, "batch-size = 32.5"),
        ({"lr": "fast"}, "lr = 'fast'"),
        ({"steps": -3}, "must be positive"),
        ({"eval-every": 0}, "must be positive"),
        ({"resume": "no"}, "resume must be true or false, got 'no'"),
        ({"steps": [1, 2]}, "must be a single value"),
    ],
)
def test_config_values_are_checked_like_the_command_line_before_any_data_work(
    tmp_path, capsys, monkeypatch, values, named
):
    """One schema: the options' own types and ranges; the error comes before data preparation."""
    import course_lib.data.text_files as text_files

    def no_data(*a, **k):
        raise AssertionError("the data was read before the config was checked")

    monkeypatch.setattr(text_files, "find_text_files", no_data)
    bad = tmp_path / "bad.toml"
    bad.write_text("\n".join(f"{k} = {json.dumps(v)}" for k, v in values.items()))
    assert main(["train", "bert", "--config", str(bad), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert named in err and len(err.splitlines()) == 1, err


def test_config_values_given_as_strings_convert_as_on_the_command_line(tmp_path):
    from course_lib.recipes.train_command import read_config

    parser = build_parser()
    train = parser._subparsers._group_actions[0].choices["train"]
    bert = train._subparsers._group_actions[0].choices["bert"]
    path = tmp_path / "run.cfg"  # no known suffix: read by content
    path.write_text('steps = "30"\nlr = "1e-3"\nresume = false\n')
    assert read_config(path, bert) == {"steps": 30, "lr": 1e-3, "resume": False}
    path.write_text('{"steps": 30}')
    assert read_config(path, bert) == {"steps": 30}
    path.write_text("steps: 30\n")
    with pytest.raises(ValueError, match="not JSON or TOML"):
        read_config(path, bert)


def test_a_distillation_without_held_out_text_says_so_not_nan(tmp_path, capsys):
    teacher = tmp_path / "teacher"
    common = ["--data", "generated", "--n-docs", "20", "--batch-size", "4", "--steps", "2"]
    assert main(["train", "bert", *common, "--size", "tiny", "--out", str(teacher)]) == 0
    for heldout, said in (
        ("0", "no held-out text, so no held-out accuracy"),
        ("0.5", "held-out masked-LM accuracy 0."),
    ):
        capsys.readouterr()
        out = tmp_path / f"student{heldout}"
        argv = [
            "train",
            "distill",
            "--teacher",
            str(teacher),
            *common,
            "--heldout",
            heldout,
            "--out",
            str(out),
        ]
        assert main(argv) == 0
        printed = capsys.readouterr().out
        assert said in printed and "nan" not in printed, printed
