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
