"""Notebook housekeeping and the book's offline assets."""

import base64
import hashlib
import io
import tarfile

import nbformat
import pytest

from course_lib.tools.book import Asset, _check_integrity, _extract
from course_lib.tools.notebooks import (
    CHECK_TAG,
    check_notebook,
    repository_url,
    setup_cell_source,
    strip_unchecked_outputs,
)


def make_nb(tmp_path, setup=True):
    nb = nbformat.v4.new_notebook()
    cells = [nbformat.v4.new_code_cell(setup_cell_source())] if setup else []
    checked = nbformat.v4.new_code_cell("print(1)", metadata={"tags": [CHECK_TAG]})
    checked.outputs = [nbformat.v4.new_output("stream", text="1\n")]
    checked.execution_count = 2
    loose = nbformat.v4.new_code_cell("print(2)")
    loose.outputs = [nbformat.v4.new_output("stream", text="2\n")]
    loose.execution_count = 3
    nb.cells = cells + [checked, loose]
    path = tmp_path / "nb.ipynb"
    nbformat.write(nb, path)
    return path, nb


def test_check_notebook_flags_stray_outputs_and_missing_setup(tmp_path):
    path, nb = make_nb(tmp_path)
    assert any("not tagged" in p for p in check_notebook(path))
    strip_unchecked_outputs(nb)
    nbformat.write(nb, path)
    assert check_notebook(path) == []
    assert nb.cells[1].outputs and not nb.cells[2].outputs  # the checked output is kept
    (tmp_path / "other").mkdir()
    path2, _ = make_nb(tmp_path / "other", setup=False)
    assert any("set-up cell" in p for p in check_notebook(path2))


def test_setup_cell_installs_from_the_configured_repository():
    url = repository_url()
    assert url.startswith("https://") and f"git+{url}" in setup_cell_source()
    compile(setup_cell_source(), "setup", "exec")


def _tarball(files):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def test_assets_are_checked_and_extracted_safely(tmp_path):
    data = _tarball({"package/dist/a.js": b"x", "package/dist/a.js.map": b"m", "package/other.txt": b"o"})
    integrity = "sha512-" + base64.b64encode(hashlib.sha512(data).digest()).decode()
    _check_integrity(data, integrity, "pkg")
    with pytest.raises(RuntimeError, match="does not match"):
        _check_integrity(data + b"!", integrity, "pkg")
    asset = Asset("pkg", "1.0", integrity, "package/dist/", "pkg", (".map",))
    _extract(data, asset, tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.js"]
    evil = _tarball({"package/dist/../../escape.js": b"x"})
    with pytest.raises(RuntimeError, match="outside"):
        _extract(evil, asset, tmp_path / "sub")


# --- the every-machine rules: claims, glued numbers, exact checks only where exact -------------

import json  # noqa: E402

import torch  # noqa: E402

from course_lib import seed_everything  # noqa: E402
from course_lib.checkpoints import cache_key  # noqa: E402
from course_lib.claims import ClaimError, claim  # noqa: E402
from course_lib.tools.notebooks import check_chapter, prose_numbers  # noqa: E402


def test_claim_passes_inside_its_band_and_names_everything_when_it_fails():
    assert claim("a beats b", 0.12, low=0.05, evidence="3 seeds") == 0.12
    assert claim("small", torch.tensor(0.01), high=0.02, evidence="3 seeds") == pytest.approx(0.01)
    with pytest.raises(ClaimError) as err:
        claim("pretrained beats random on unseen words", 0.01, low=0.05, evidence="seeds 0-2: 0.11-0.16")
    msg = str(err.value)
    assert (
        "pretrained beats random on unseen words" in msg
        and "0.01" in msg
        and "[0.05, inf]" in msg
        and "seeds 0-2" in msg
    )
    with pytest.raises(ClaimError):
        claim("not a number", float("nan"), low=0.0, evidence="x")
    with pytest.raises(ClaimError):
        claim("above the top", 1.5, low=0.0, high=1.0, evidence="x")
    with pytest.raises(ValueError, match="needs a band"):
        claim("no band", 1.0, evidence="x")
    with pytest.raises(ValueError, match="evidence"):
        claim("no evidence", 1.0, low=0.0, evidence=" ")
    with pytest.raises(TypeError, match="number"):
        claim("a list", [1, 2], low=0.0, evidence="x")


def test_claims_are_logged_and_record_only_mode_does_not_raise(tmp_path, monkeypatch):
    log = tmp_path / "claims.jsonl"
    monkeypatch.setenv("COURSE_CLAIMS_LOG", str(log))
    monkeypatch.setenv("COURSE_CLAIMS_CHAPTER", "99_test")
    monkeypatch.setenv("COURSE_CLAIMS_RECORD_ONLY", "1")
    claim("holds", 0.5, low=0.0, high=1.0, evidence="x")
    claim("fails but is recorded", 2.0, high=1.0, evidence="x")
    rows = [json.loads(line) for line in log.read_text().splitlines()]
    assert [(r["claim"], r["ok"], r["chapter"]) for r in rows] == [
        ("holds", True, "99_test"),
        ("fails but is recorded", False, "99_test"),
    ]
    assert {"cpu_capability", "threads", "seed_offset", "device"} <= set(rows[0])


def test_seed_offset_shifts_every_seed_and_the_cache_key(monkeypatch):
    seed_everything(3)
    three = torch.rand(3)
    key = cache_key("model", {"seed": 0})
    monkeypatch.setenv("COURSE_SEED_OFFSET", "2")
    seed_everything(1)
    assert torch.equal(torch.rand(3), three)  # 1 + 2 = 3
    assert (
        cache_key("model", {"seed": 0}) != key
    )  # a model trained with other seeds is never loaded by mistake
    monkeypatch.setenv("COURSE_SEED_OFFSET", "two")
    with pytest.raises(ValueError, match="whole number"):
        seed_everything(0)


def test_prose_numbers_finds_typed_measurements_but_not_references_code_or_math():
    text = (
        "Accuracy 0.92 and 65.5% of pairs; chance is 50%. See §1.5, section 3.10 and chapter 2.3. "
        "$p = 0.5$ and `lr=1e-3 0.1` and {glue:text}`acc:.3f`; 3,723 words, 110M parameters.\n## 1.2 Heading "
        "0.5"
    )
    assert prose_numbers(text) == ["0.92", "65.5%", "50%"]


def _chapter(tmp_path, cells, paper_figures=()):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(setup_cell_source()), *cells]
    nb.metadata["course"] = {"paper_figures": list(paper_figures)}
    path = tmp_path / "ch.ipynb"
    nbformat.write(nb, path)
    return path


def _checked(source, text, tags=()):
    cell = nbformat.v4.new_code_cell(source, metadata={"tags": [CHECK_TAG, *tags]})
    cell.outputs = [nbformat.v4.new_output("stream", text=text)]
    cell.execution_count = 1
    return cell


def test_check_chapter_enforces_claims_glue_and_exact_checks(tmp_path):
    claim_cell = nbformat.v4.new_code_cell(
        'claim("x", acc, low=0.5, evidence=B)\nglue("acc", acc)', metadata={"tags": ["remove-cell"]}
    )
    good = [
        nbformat.v4.new_markdown_cell("Accuracy {glue:text}`acc:.3f`; the paper reports 39.7."),
        _checked("print(shape)", "(2, 3)\n"),
        _checked("print(weights)", "[0.88, 0.12]\n", tags=["deterministic"]),
        claim_cell,
    ]
    assert check_chapter(_chapter(tmp_path, good, ["39.7"])) == []

    problems = check_chapter(_chapter(tmp_path, good))  # 39.7 not allow-listed
    assert len(problems) == 1 and "39.7" in problems[0]

    bad = [
        nbformat.v4.new_markdown_cell("We measured 0.244 and {glue:text}`missing:.2f`."),
        _checked("print(acc)", "accuracy 0.244\n"),
        nbformat.v4.new_code_cell('claim("y", acc, low=0.1, evidence=B)'),
    ]
    problems = " | ".join(check_chapter(_chapter(tmp_path, bad)))
    assert "0.244" in problems and "'missing'" in problems
    assert "prints decimals" in problems and "not tagged 'remove-cell'" in problems

    no_claims = [_checked("print(shape)", "(2, 3)\n")]
    assert any("no claim" in p for p in check_chapter(_chapter(tmp_path, no_claims)))


# --- the nbval verdict on the book build's executed copy (each chapter runs once) --------------


def _nb(*cells):
    nb = nbformat.v4.new_notebook()
    for source, outputs, tags in cells:
        cell = nbformat.v4.new_code_cell(source, metadata={"tags": tags})
        cell.outputs = [nbformat.from_dict(o) for o in outputs]
        nb.cells.append(cell)
    return nb


def _stream(text, name="stdout"):
    return {"output_type": "stream", "name": name, "text": text}


def test_compare_executed_decides_as_nbval_lax():
    from course_lib.tools.notebooks import compare_executed

    stored = _nb(("print(1)", [_stream("1\n2\n")], ["nbval-check-output"]), ("plot()", [], []))
    fresh = _nb(
        ("print(1)", [_stream("1\n"), _stream("2\n")], []),  # the same text, flushed twice
        ("plot()", [{"output_type": "display_data", "data": {"image/png": "abc"}, "metadata": {}}], []),
    )
    assert compare_executed(stored, fresh) == []
    fresh.cells[0].outputs[1]["text"] = "3\n"
    [problem] = compare_executed(stored, fresh)
    assert "code cell 1 (print(1))" in problem and "'1\\n2\\n'" in problem and "'1\\n3\\n'" in problem
    fresh.cells[0].outputs = [_stream("1\n2\n")]
    error = {"output_type": "error", "ename": "AssertionError", "evalue": "claim", "traceback": []}
    fresh.cells[1].outputs = [nbformat.from_dict(error)]
    assert compare_executed(stored, fresh) == ["code cell 2 (plot()) raised AssertionError: claim"]
    stored.cells[1].source = "plot(2)"
    assert "other code" in compare_executed(stored, fresh)[0]


def test_compare_executed_unchecked_cells_may_print_anything_checked_ones_not_an_extra_stream():
    from course_lib.tools.notebooks import compare_executed

    stored = _nb(("f()", [_stream("a\n")], ["nbval-check-output"]), ("g()", [], []))
    fresh = _nb(("f()", [_stream("a\n"), _stream("warn\n", "stderr")], []), ("g()", [_stream("0.123\n")], []))
    [problem] = compare_executed(stored, fresh)
    assert "stderr" in problem


def test_notebooks_and_release_refuse_bad_paths_in_one_line(tmp_path, capsys):
    """A missing path, a file that is not a notebook and a folder: one line each from
    `course notebooks check` (exit 2), as `setup` already did; `course release` refuses an
    --exercises path below a file before writing anything."""
    from course_lib.cli import main as course_main

    (tmp_path / "bad.ipynb").write_text("not json")
    (tmp_path / "folder").mkdir()
    (tmp_path / "afile").write_text("x")
    for path, said in (
        (tmp_path / "missing.ipynb", "does not exist"),
        (tmp_path / "bad.ipynb", "is not a readable notebook"),
        (tmp_path / "folder", "is not a notebook (.ipynb) file"),
    ):
        assert course_main(["notebooks", "check", str(path)]) == 2
        err = capsys.readouterr().err.strip()
        assert said in err and len(err.splitlines()) == 1, err
    target = tmp_path / "afile" / "sub"
    assert course_main(["release", "02_transformer", "--exercises", str(target)]) == 2
    err = capsys.readouterr().err.strip()
    assert "afile is a file" in err and len(err.splitlines()) == 1, err


def test_a_failing_cell_is_named_in_plain_text_and_the_notebook_is_kept(tmp_path, capsys):
    """A review: `course notebooks refresh` named a failing cell with the kernel's terminal
    colours (`\\x1b[31mValueError\\x1b[39m: boom`). Now plain text; the file stays as it was."""
    from course_lib.cli import main

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("raise ValueError('boom')")]
    path = tmp_path / "fail.ipynb"
    nbformat.write(nb, path)
    before = path.read_bytes()
    assert main(["notebooks", "refresh", str(path)]) != 0
    err = capsys.readouterr().err
    assert "a cell failed (ValueError: boom); the file is unchanged" in err and "\x1b" not in err, err
    assert path.read_bytes() == before
