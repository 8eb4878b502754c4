"""A resume refuses what it cannot continue: every setting that defines a run is recorded in
its training state, and a resume with one changed exits non-zero with one line naming it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from course_lib.cli import main

BASE = ["--data", "generated", "--size", "tiny", "--n-docs", "40", "--batch-size", "8", "--steps", "6"]


def _train(out: Path, *extra: str) -> int:
    return main(["train", "bert", *BASE, "--out", str(out), *extra])  # the final state is kept by default


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("run")
    assert _train(out) == 0
    return out


@pytest.mark.parametrize(
    "change,named",
    [
        (["--batch-size", "4"], "--batch-size 8 (saved) vs 4 (now)"),
        (["--lr", "0.01"], "--lr"),
        (["--seed", "3"], "--seed 0 (saved) vs 3 (now)"),
        (["--n-docs", "41"], "--n-docs 40 (saved) vs 41 (now)"),
        (["--precision", "fp32"], "--precision auto (saved) vs fp32 (now)"),
        (["--accumulate", "2"], "--accumulate 1 (saved) vs 2 (now)"),
        (["--schedule", "linear"], "--schedule cosine (saved) vs linear (now)"),
        (["--vocab-size", "300"], "--vocab-size"),
        (["--size", "small"], "another shape"),
        (["--steps", "8"], "--steps 6 (saved) vs 8 (now)"),
        (["--dropout", "0"], "--dropout"),
        (["--mask-rate", "0.3"], "--mask-rate 0.15 (saved) vs 0.3 (now)"),
        (["--heldout", "0.1"], "--heldout 0.05 (saved) vs 0.1 (now)"),
    ],
)
def test_a_resume_with_a_changed_setting_is_refused_naming_it(run, change, named, capsys):
    capsys.readouterr()
    assert _train(run, "--resume", *change) == 2
    err = capsys.readouterr().err.strip()
    assert named in err and "cannot resume" in err
    assert len(err.splitlines()) == 1, err


def test_a_resume_with_other_data_is_refused(run, tmp_path, capsys):
    text = tmp_path / "t.txt"
    text.write_text("\n\n".join("A sentence of other text. Another one here." * 20 for _ in range(20)))
    capsys.readouterr()
    args = ["train", "bert", *BASE[2:], "--data", str(text), "--out", str(run), "--resume"]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert "--data generated (saved) vs files:" in err and len(err.splitlines()) == 1


def test_force_resume_continues_a_finished_run_for_more_steps(run, tmp_path, capsys):
    import shutil

    copy = tmp_path / "more"
    shutil.copytree(run, copy)
    assert _train(copy, "--force-resume", "--steps", "9") == 0
    history = json.loads((copy / "model.json").read_text())["history"]
    first = json.loads((run / "model.json").read_text())["history"]
    assert history["steps"] == list(range(9)) and history["loss"][:6] == first["loss"]


def test_resume_without_a_state_says_so(tmp_path, capsys):
    assert _train(tmp_path / "new", "--resume") == 2
    err = capsys.readouterr().err
    assert "no training state" in err and len(err.strip().splitlines()) == 1


def test_resume_refuses_another_objectives_states_and_out_refuses_another_model(run, tmp_path, capsys):
    """A folder holding a BERT run: ``train roberta --resume`` there found no RoBERTa state and
    used to start afresh over the BERT, silently; now both the resume and a plain run into that
    folder are one line, and the folder is untouched. Control: ``train bert --resume`` in a copy
    is accepted (a finished run, loaded)."""
    import shutil

    copy = tmp_path / "bert-folder"
    shutil.copytree(run, copy)
    before = (copy / "model.safetensors").read_bytes()
    roberta = ["train", "roberta", *BASE, "--out", str(copy)]
    capsys.readouterr()
    for extra, needle in (
        (["--resume"], "are of `course train bert`, not of this `course train roberta` run"),
        ([], "holds a model trained by `course train bert`; training roberta there"),
    ):
        assert main([*roberta, *extra]) == 2
        err = capsys.readouterr().err.strip()
        assert needle in err and len(err.splitlines()) == 1, err
    assert (copy / "model.safetensors").read_bytes() == before
    assert _train(copy, "--resume") == 0


def test_a_distillation_resume_refuses_a_teacher_retrained_in_place(tmp_path, capsys):
    """The teacher is recorded by its files, not its path: retraining it in place between the
    stop and the resume is refused, naming --teacher. Control: the same teacher resumes."""
    teacher, student = tmp_path / "teacher", tmp_path / "student"
    assert _train(teacher) == 0
    distill = ["train", "distill", "--data", "generated", "--n-docs", "40", "--batch-size", "8"]
    distill += ["--steps", "4", "--layers", "1", "--teacher", str(teacher), "--out", str(student)]
    assert main(distill) == 0
    assert main([*distill, "--resume"]) == 0  # control: the finished run, same teacher
    assert _train(teacher, "--seed", "1") == 0  # retrained in place: other weights, same path
    capsys.readouterr()
    assert main([*distill, "--resume"]) == 2
    err = capsys.readouterr().err.strip()
    assert "cannot resume" in err and "--teacher files sha256:" in err and len(err.splitlines()) == 1, err


def test_out_names_what_a_folder_holds_from_its_records(tmp_path):
    """``--out``'s refusal says what the folder holds, read from its model record (model.json)
    or its config.json; a new folder, or one with only other files, holds nothing."""
    from course_lib.recipes.train_command import _folder_holds

    assert _folder_holds(tmp_path) is None
    (tmp_path / "notes.txt").write_text("mine")
    assert _folder_holds(tmp_path) is None
    (tmp_path / "config.json").write_text("{}")
    assert _folder_holds(tmp_path) == "a config.json of something else"
    record = {"architecture": "BertForSequenceClassification", "recipe": {"command": "course finetune"}}
    (tmp_path / "model.json").write_text(json.dumps(record))
    assert _folder_holds(tmp_path) == "a BertForSequenceClassification written by `course finetune`"
    (tmp_path / "model.json").write_text(json.dumps({"recipe": {"command": "train", "objective": "xlnet"}}))
    assert _folder_holds(tmp_path) == "a model trained by `course train xlnet`"
    (tmp_path / "model.json").write_text("{broken")
    assert _folder_holds(tmp_path) == "a model record (model.json) that is not readable"
