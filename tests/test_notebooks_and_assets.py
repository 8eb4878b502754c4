"""Notebook housekeeping and the book's offline assets."""

import base64
import hashlib
import io
import tarfile

import nbformat
import pytest

from course_lib.book import Asset, _check_integrity, _extract
from course_lib.notebooks import CHECK_TAG, check_notebook, repository_url, setup_cell_source, strip_unchecked_outputs


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
