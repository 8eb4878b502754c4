"""course_lib.studies: experiments over seeds, run by a command, loaded by chapters, refused when stale."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

import course_lib.studies as study_module
from course_lib.cli import main as course_main
from course_lib.studies import (
    Study,
    StudyResults,
    check_golden,
    get_study,
    golden_path,
    load_study,
    one_thread,
    register_study,
    restamp,
    results_path,
    run_study,
    spec_hash,
    study_names,
    write_golden,
)


def _toy_run(seed: int, quick: bool = False):
    return {"a": {"x": seed + 0.5, "texts": ["one", "two"]}, "b": {"x": 2.0 * seed}}


def _toy_run_changed(seed: int, quick: bool = False):
    return {"a": {"x": seed + 0.6, "texts": ["one", "two"]}, "b": {"x": 2.0 * seed}}


TOY = register_study(Study(name="toy", description="a test study", settings={"k": 1}, run=_toy_run))


def test_run_writes_every_seed_and_merges_runs_of_single_seeds(tmp_path):
    out = tmp_path / "toy.json"
    run_study("toy", seeds=[0, 1], out=out, log=lambda _: None)
    run_study("toy", seeds=[2], out=out, log=lambda _: None)
    data = json.loads(out.read_text())
    assert sorted(data["seeds"]) == ["0", "1", "2"] and data["spec_hash"] == spec_hash(TOY)
    r = load_study("toy", root=tmp_path)
    assert r.seeds == [0, 1, 2] and r.values("a", "x") == [0.5, 1.5, 2.5]
    assert r.differences("a", "b", "x") == [0.5, -0.5, -1.5]
    table = r.table([("a", "x"), ("b", "x")], labels={"a": "arm a"})
    assert "seed 2" in table and "arm a x" in table and "mean" in table
    assert table.splitlines()[1].split()[-2:] == ["1.500", "2.000"]  # mean and range
    with pytest.raises(KeyError, match="no 'a'.'y'"):
        r.values("a", "y")


def test_a_stale_quick_missing_or_broken_file_is_refused_with_the_command_to_run(tmp_path):
    with pytest.raises(FileNotFoundError, match="course study run toy"):
        load_study("toy", root=tmp_path)
    out = results_path("toy", tmp_path)
    run_study("toy", seeds=[0], out=out, quick=True, log=lambda _: None)
    with pytest.raises(ValueError, match="quick test run"):
        load_study("toy", root=tmp_path)
    assert load_study("toy", root=tmp_path, allow_quick=True).seeds == [0]
    data = json.loads(out.read_text())
    data["quick"] = False
    data["spec_hash"] = "0" * 16
    out.write_text(json.dumps(data))
    with pytest.raises(ValueError, match="other settings or other code"):
        load_study("toy", root=tmp_path)
    out.write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        load_study("toy", root=tmp_path)


def test_restamp_keeps_results_only_when_the_golden_run_reproduces(tmp_path, monkeypatch):
    """A refactoring that spec_hash sees (a changed study module) but that computes the same
    numbers keeps the stored results; one that changes a number names the study to re-run."""
    gold = tmp_path / "golden"
    run_study("toy", seeds=[0, 1], out=results_path("toy", tmp_path), log=lambda _: None)
    write_golden("toy", root=gold)
    study = get_study("toy")
    assert check_golden("toy", root=gold) == []
    # the study's code changed (stale hash) but it computes the same: restamp keeps the results
    data = json.loads(results_path("toy", tmp_path).read_text())
    data["spec_hash"] = "0" * 16
    results_path("toy", tmp_path).write_text(json.dumps(data))
    with pytest.raises(ValueError, match="course study restamp toy"):
        load_study("toy", root=tmp_path)
    restamp("toy", root=tmp_path, golden_root=gold)
    assert load_study("toy", root=tmp_path).values("a", "x") == [0.5, 1.5]
    # the library now computes something else: the golden run differs, restamp refuses
    monkeypatch.setattr(study_module, "get_study", lambda name: replace(study, run=_toy_run_changed))
    diffs = check_golden("toy", root=gold)
    assert diffs == ["toy.a.x: 0.5 stored, 0.6 now"]
    data["spec_hash"] = "0" * 16
    results_path("toy", tmp_path).write_text(json.dumps(data))
    with pytest.raises(ValueError, match="golden run changed .*re-run it"):
        restamp("toy", root=tmp_path, golden_root=gold)
    # rounding-level differences and timings are not changes
    stored = json.loads((gold / "toy.json").read_text())["results"]
    assert (
        check_golden("toy", root=gold, results={**stored, "a": {**stored["a"], "x": 0.5 * (1 + 1e-6)}}) == []
    )
    assert check_golden("toy", root=gold, results={**stored, "b": {**stored["b"], "seconds": 9.0}}) == []
    with pytest.raises(FileNotFoundError, match="course study golden toy"):
        check_golden("toy", root=tmp_path / "none")


def test_every_study_has_a_golden_run_stored_with_the_package():
    for name in study_names():
        if name in ("toy", "bad"):
            continue
        data = json.loads(golden_path(name).read_text())
        assert data["study"] == name and data["results"], name


def test_results_must_be_finite_numbers_strings_or_lists(tmp_path):
    def bad(seed, quick):
        return {"a": {"x": float("nan")}}

    register_study(Study(name="bad", description="", settings={}, run=bad))
    with pytest.raises(ValueError, match="finite"):
        run_study("bad", seeds=[0], out=tmp_path / "b.json", log=lambda _: None)
    assert not (tmp_path / "b.json").exists()


def test_unknown_study_and_the_command_line(tmp_path, capsys):
    with pytest.raises(KeyError, match="no study named 'nope'"):
        get_study("nope")
    assert "03_bert" in study_names()
    assert course_main(["study", "list"]) == 0
    assert "03_bert" in capsys.readouterr().out
    assert course_main(["study", "run", "toy", "--seeds", "3", "--out", str(tmp_path / "t.json")]) == 0
    assert json.loads((tmp_path / "t.json").read_text())["seeds"]["3"]["results"]["b"]["x"] == 6.0


def test_a_run_never_replaces_full_results_or_foreign_files(tmp_path, capsys):
    """`course study run NAME --quick` used to overwrite NAME's stored full results (the
    default --out), which the chapter then refused to load; and any file at --out. Now refused
    before any seed runs, one line; controls: a new path, more seeds of the same full run and a
    quick run over a quick one are written."""
    full, quick = tmp_path / "full.json", tmp_path / "quick.json"
    run_study("toy", seeds=[0], out=full, log=lambda _: None)
    run_study("toy", seeds=[0], out=quick, quick=True, log=lambda _: None)
    before = full.read_bytes()
    (tmp_path / "notes.txt").write_text("mine")
    (tmp_path / "adir").mkdir()
    capsys.readouterr()
    for out, extra, said in (
        (full, ["--quick"], "holds toy's full results; a --quick test run would replace them"),
        (tmp_path / "notes.txt", [], "holds another file, not toy's results"),
        (tmp_path / "adir", [], "is a folder; give a file"),
        (tmp_path / "notes.txt" / "x.json", [], "notes.txt is a file"),
        (tmp_path / "n.json", ["--seeds", str(2**64)], "is not a seed"),
    ):
        assert course_main(["study", "run", "toy", *extra, "--out", str(out)]) == 2
        err = capsys.readouterr().err.strip()
        assert said in err and len(err.splitlines()) == 1, err
    assert full.read_bytes() == before and (tmp_path / "notes.txt").read_text() == "mine"
    for name in ("nope",):  # an unknown study: one line for each action that takes a name
        for action in ("run", "golden", "restamp", "check"):
            assert course_main(["study", action, name]) == 2
            err = capsys.readouterr().err.strip()
            assert "no study named 'nope'" in err and len(err.splitlines()) == 1, err
    assert course_main(["study", "run", "toy", "--seeds", "1", "--out", str(full)]) == 0  # more seeds
    assert sorted(json.loads(full.read_text())["seeds"]) == ["0", "1"]
    assert course_main(["study", "run", "toy", "--quick", "--out", str(quick)]) == 0


def test_chapter_3_study_runs_in_quick_mode(tmp_path):
    """The whole study at toy size: every arm and metric the chapter reads is produced."""
    with one_thread():  # the golden run's setting
        out = run_study("03_bert", seeds=[0], quick=True, out=tmp_path / "q.json", log=lambda _: None)
    # the library still computes what it computed when the stored results were made
    assert check_golden("03_bert", results=json.loads(out.read_text())["seeds"]["0"]["results"]) == []
    quick = StudyResults(json.loads(out.read_text()))
    stored = load_study("03_bert")
    for arm in stored.arms():
        assert set(quick.results[0][arm]) == set(stored.results[stored.seeds[0]][arm]), arm


def test_chapter_3_results_are_current_and_hold_three_seeds():
    r = load_study("03_bert")
    assert r.seeds == [0, 1, 2]
    assert not r.data["quick"]


def test_check_reports_a_study_not_run_yet_without_failing(tmp_path, monkeypatch):
    """`course study check` on a registered study whose results file does not exist yet says so
    (with the command to run) instead of a traceback; once run, it is current."""
    monkeypatch.setattr(study_module, "RESULTS", tmp_path)
    assert study_module._stored_status("toy") == "not run yet (course study run toy)"
    run_study("toy", seeds=[0], out=results_path("toy"), log=lambda _: None)
    assert study_module._stored_status("toy") == "current"
