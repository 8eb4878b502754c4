"""Study 06_xlnet_tagging (course_lib/studies/xlnet_tagging.py): it shares chapter 5's text,
tokenizer and network, chapter 6's XLNet and chapter 5's masked-LM pretraining and chapter 3's
tagging task; a quick run gives every arm and metric and reproduces its golden run."""

import json

from course_lib.studies import check_golden, one_thread, run_study
from course_lib.studies.ar_ae import SETTINGS as AR_AE
from course_lib.studies.bert import SETTINGS as BERT
from course_lib.studies.xlnet import SETTINGS as XLNET
from course_lib.studies.xlnet_tagging import FAMILIES, QUICK, SETTINGS, TAGGERS


def test_the_study_shares_the_chapters_text_pretraining_and_task():
    for key in ("documents", "names", "tokenizer", "model"):
        assert SETTINGS[key] == AR_AE[key] == XLNET[key], key
    assert SETTINGS["pretrain"]["xlnet"] == XLNET["pretrain"]
    assert SETTINGS["pretrain"]["ae"] == {**AR_AE["pretrain"], **AR_AE["arms"]["ae"]}
    shared = ("batch_size", "lr", "max_len", "row_unit", "steps")  # the same budget for both objectives
    assert {k: SETTINGS["pretrain"]["xlnet"][k] for k in shared} == {
        k: SETTINGS["pretrain"]["ae"][k] for k in shared
    }
    assert all(SETTINGS["tagging"][k] == v for k, v in BERT["tagging"].items() if k != "frozen_lr")


def test_quick_run_writes_every_arm_and_metric(tmp_path):
    with one_thread():  # the golden run's setting
        out = run_study(
            "06_xlnet_tagging", seeds=[0], quick=True, out=tmp_path / "x.json", log=lambda _: None
        )
    results = json.loads(out.read_text())["seeds"]["0"]["results"]
    assert check_golden("06_xlnet_tagging", results=results) == []
    assert set(results) == {*FAMILIES, *TAGGERS, "majority"}
    for family in FAMILIES:
        r = results[family]
        assert r["steps"] == QUICK["pretrain"][family]["steps"]
        assert len(r["curve_steps"]) == len(r["curve_accuracy"]) >= 1
        assert all(0 <= v <= 1 for v in r["curve_accuracy"])
    # about the same network: relative instead of absolute positions (within 5% of the parameters)
    assert abs(results["xlnet"]["parameters"] / results["ae"]["parameters"] - 1) < 0.05
    for name in TAGGERS:
        assert set(results[name]) == {"accuracy", "unseen_accuracy"}
        assert all(0 <= v <= 1 for v in results[name].values())
    assert 0 < results["majority"]["accuracy"] < 1
