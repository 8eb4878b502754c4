"""A failed claim: an error in the tests, CI and builds; a visible notice in a reader's kernel."""

import nbformat
import pytest

from course_lib import claims
from course_lib.claims import ClaimError, ClaimNotice, claim, current_setting, strict_claims


@pytest.fixture
def reader_env(monkeypatch):
    """The environment of a reader's machine: none of the variables the test runners set."""
    for name in ("COURSE_STRICT_CLAIMS", "CI", "COURSE_CLAIMS_RECORD_ONLY", "COURSE_CLAIMS_LOG"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_the_suite_is_strict():
    # conftest.py sets it for this process and every kernel the suite starts
    assert strict_claims()
    with pytest.raises(ClaimError, match="measured 0.01"):
        claim("a beats b", 0.01, low=0.05, evidence="3 seeds")


def test_strictness_rules(reader_env, monkeypatch):
    # a plain script or an in-process test (no IPython shell) is strict
    assert strict_claims()
    monkeypatch.setattr(claims, "_in_interactive_kernel", lambda: True)
    assert not strict_claims()  # a reader's kernel
    monkeypatch.setenv("CI", "true")
    assert strict_claims()  # CI services set CI=true
    monkeypatch.setenv("CI", "false")
    assert not strict_claims()
    monkeypatch.setenv("COURSE_STRICT_CLAIMS", "1")
    assert strict_claims()
    monkeypatch.setenv("COURSE_STRICT_CLAIMS", "0")
    monkeypatch.setattr(claims, "_in_interactive_kernel", lambda: False)
    assert not strict_claims()
    monkeypatch.setenv("COURSE_STRICT_CLAIMS", "maybe")
    with pytest.raises(ValueError, match="COURSE_STRICT_CLAIMS must be 1 or 0, got 'maybe'"):
        strict_claims()


def test_a_lenient_claim_shows_the_notice_and_returns_the_value(reader_env, capsys):
    reader_env.setenv("COURSE_STRICT_CLAIMS", "0")
    assert claim("pretrained beats random", 0.01, low=0.05, evidence="seeds 0-2: 0.11-0.16") == 0.01
    err = capsys.readouterr().err  # no IPython shell here: the notice goes to stderr
    for part in (
        "'pretrained beats random' does not hold",
        "measured here: 0.01",
        "[0.05, inf]",
        "seeds 0-2: 0.11-0.16",
        "this machine: cpu",
        "what may differ here",
        "The chapter goes on",
    ):
        assert part in err, part
    # a claim that holds says nothing
    claim("holds", 0.5, low=0.0, evidence="x")
    assert capsys.readouterr().err == ""


def test_the_notice_names_what_differs_from_where_the_bands_were_measured():
    base = current_setting() | {
        "device": "cpu",
        "precision": "float32",
        "cpu_capability": "AVX2",
        "threads": 2,
        "torch": "2.13.0",
        "seed_offset": 0,
    }
    assert len(ClaimNotice("c", 1.0, "[0, 0.5]", "e", base).differences) == 1  # only the generic line
    gpu = base | {"device": "cuda", "precision": "bfloat16", "threads": 8, "torch": "2.14.1"}
    notice = ClaimNotice("the loss falls", 1.0, "[0, 0.5]", "seeds 0-2", gpu)
    text = "\n".join(notice.differences)
    for part in ("cuda device", "bfloat16", "8 CPU threads", "torch 2.14.1"):
        assert part in text, part
    html = notice._repr_html_()
    assert "the loss falls" in html and "seeds 0-2" in html and "<li>" in html


def _run(nb):
    from nbclient import NotebookClient

    NotebookClient(nb, timeout=120, kernel_name="python3").execute()
    return nb


NOTEBOOK_CELLS = [
    "from course_lib.claims import claim",
    'claim("the probe beats chance", 0.1, low=0.5, evidence="seeds 0-4 x 3 kernel sets: 0.71-0.78")',
    'print("the chapter went on")',
]


def test_in_a_readers_kernel_a_failed_claim_is_a_notice_and_the_chapter_goes_on(reader_env):
    nb = _run(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in NOTEBOOK_CELLS]))
    notice = nb.cells[1].outputs
    assert notice[0]["output_type"] == "display_data"  # then the value claim() returns
    assert "the probe beats chance" in notice[0]["data"]["text/html"]
    assert "measured here: 0.1;" in notice[0]["data"]["text/plain"]
    assert "0.71-0.78" in notice[0]["data"]["text/plain"]
    assert nb.cells[2].outputs[0]["text"] == "the chapter went on\n"


def test_in_a_kernel_the_test_runners_start_a_failed_claim_is_an_error(reader_env):
    from nbclient.exceptions import CellExecutionError

    reader_env.setenv("COURSE_STRICT_CLAIMS", "1")  # what make, conftest.py, nbval and the build set
    with pytest.raises(CellExecutionError, match="ClaimError"):
        _run(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in NOTEBOOK_CELLS]))
