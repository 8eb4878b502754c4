"""benchmarks/claim_bands.py: the table of every claim under every setting."""

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def load_script():
    spec = importlib.util.spec_from_file_location("claim_bands", ROOT / "benchmarks" / "claim_bands.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_summary_lists_each_claim_under_each_setting_and_flags_values_outside_the_band(tmp_path):
    bands = load_script()
    rows = [
        {
            "chapter": "01_elmo",
            "claim": "a beats b",
            "setting": "s0",
            "value": 0.12,
            "low": 0.05,
            "high": None,
            "seed_offset": 0,
        },
        {
            "chapter": "01_elmo",
            "claim": "a beats b",
            "setting": "s1",
            "value": 0.09,
            "low": 0.05,
            "high": None,
            "seed_offset": 1,
        },
        {
            "chapter": "02_transformer",
            "claim": "small",
            "setting": "s0",
            "value": 0.3,
            "low": None,
            "high": 0.2,
            "seed_offset": 0,
        },
    ]
    log = tmp_path / "claims.jsonl"
    log.write_text("".join(json.dumps(r) + "\n" for r in rows))
    table = bands.summarise(log)
    lines = {line.split(" | ")[1]: line for line in table.splitlines() if line.startswith("| 0")}
    assert "| 0.12 | 0.09 | 0.09 to 0.12 | yes |" in lines["a beats b"]
    assert "[-inf, 0.2]" in lines["small"] and lines["small"].endswith("| **NO** |")
    assert set(bands.GRID[0][1:]) <= {"avx2", "default", "1", "2", "0"}


def test_the_grid_has_a_bf16_setting_and_runs_it_under_bf16_autocast(tmp_path, monkeypatch):
    bands = load_script()
    bf16 = [g for g in bands.GRID if len(g) > 4 and g[4] == "bf16"]
    assert bf16 and bf16[0][0].endswith("-bf16")
    monkeypatch.setattr(bands, "OUT", tmp_path)
    seen = {}

    def fake_run(cmd, env, **kw):
        seen[env["COURSE_CLAIMS_SETTING"]] = (env["COURSE_PRECISION"], env["COURSE_CACHE"])
        return type("P", (), {"returncode": 0, "stdout": "", "stderr": ""})()

    monkeypatch.setattr(bands.subprocess, "run", fake_run)
    chapter = tmp_path / "02_x.ipynb"
    bands.run_one(chapter, bf16[0])
    bands.run_one(chapter, bands.GRID[0])
    assert seen[bf16[0][0]][0] == "bf16" and seen[bands.GRID[0][0]][0] == "auto"
    assert seen[bf16[0][0]][1] != seen[bands.GRID[0][0]][1]  # each setting its own model cache


def test_a_new_setting_measured_alone_is_merged_into_the_committed_table(tmp_path):
    bands = load_script()
    committed = bands.summarise([], "")  # an empty table to start from
    first = tmp_path / "a.jsonl"
    first.write_text(
        "".join(
            json.dumps({"chapter": ch, "claim": c, "setting": "s0", "value": v, "low": 0.0, "high": None})
            + "\n"
            for ch, c, v in (
                ("01_elmo", "kept", 0.5),
                ("01_elmo", "dropped", 0.4),
                ("02_transformer", "other", 0.3),
            )
        )
    )
    committed = bands.summarise(first, committed)
    # later, chapter 1 alone under a new setting: it no longer makes the claim "dropped"
    second = tmp_path / "b.jsonl"
    second.write_text(
        json.dumps(
            {
                "chapter": "01_elmo",
                "claim": "kept",
                "setting": "s0-bf16",
                "value": -0.1,
                "low": 0.0,
                "high": None,
            }
        )
        + "\n"
    )
    table = bands.summarise(second, committed)
    rows = bands.read_table(table)
    assert rows[("01_elmo", "kept")]["values"] == {"s0": 0.5, "s0-bf16": -0.1}
    assert ("01_elmo", "dropped") not in rows
    assert rows[("02_transformer", "other")]["values"] == {"s0": 0.3}  # a chapter not measured keeps its rows
    line = next(x for x in table.splitlines() if "| kept |" in x)
    assert line.endswith("| **NO** |")  # the merged values are checked against the band
    assert table.splitlines()[4].split(" | ")[3:5] == ["s0", "s0-bf16"]  # bf16 settings last


def test_machine_independent_claims_drop_committed_values_and_ok_reads_the_shown_digits(tmp_path):
    bands = load_script()
    exact = "stored study X, 3 seeds: identical on every machine"
    old = tmp_path / "old.jsonl"
    old.write_text(
        "".join(
            json.dumps(
                {
                    "chapter": "03_bert",
                    "claim": c,
                    "setting": "s0",
                    "value": v,
                    "low": lo,
                    "high": None,
                    "evidence": exact,
                }
            )
            + "\n"
            for c, v, lo in (("study claim", 0.01, 0.0), ("count", 1181184.0, 1181184.0))
        )
    )
    committed = bands.summarise(old, "")
    new = tmp_path / "new.jsonl"
    new.write_text(
        json.dumps(
            {
                "chapter": "03_bert",
                "claim": "study claim",
                "setting": "s0-bf16",
                "value": 0.07,
                "low": 0.05,
                "high": None,
                "evidence": exact,
            }
        )
        + "\n"
    )
    rows = bands.read_table(bands.summarise(new, committed))
    assert rows[("03_bert", "study claim")]["values"] == {
        "s0-bf16": 0.07
    }  # the stale 0.01 is not carried over
    # an exact count read back from the table (four digits) still passes its exact band
    assert bands.summarise(old, "").splitlines()[-1].endswith("| yes |")
    assert bands.summarise([], committed).splitlines()[-1].endswith("| yes |")
