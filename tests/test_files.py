"""course_lib.files: the one atomic writer every saved file goes through."""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

import pytest

from course_lib.files import atomic_write_text, write_atomically

ROOT = Path(__file__).resolve().parents[1] / "course_lib"


def test_text_is_written_exactly_and_replaces_the_old_file(tmp_path):
    path = tmp_path / "sub" / "a.csv"
    atomic_write_text(path, "old\n")
    atomic_write_text(path, "step,loss\r\n1,2.5\r\n")  # csv's line ends survive: no newline translation
    assert path.read_bytes() == b"step,loss\r\n1,2.5\r\n"
    assert [p.name for p in path.parent.iterdir()] == ["a.csv"]  # no temporary file left


def test_a_failed_write_keeps_the_previous_file_whole_and_leaves_nothing_behind(tmp_path):
    path = tmp_path / "results.json"
    atomic_write_text(path, '{"seed": 0}\n')

    def half_then_crash(tmp: str) -> None:
        Path(tmp).write_text('{"seed": ')
        raise KeyboardInterrupt  # a kill while writing

    with pytest.raises(KeyboardInterrupt):
        write_atomically(path, half_then_crash)
    assert path.read_text() == '{"seed": 0}\n'
    assert [p.name for p in tmp_path.iterdir()] == ["results.json"]


def test_files_get_the_mode_the_users_umask_gives(tmp_path):
    old = os.umask(0o027)
    try:
        path = atomic_write_text(tmp_path / "shared.txt", "x")
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o640


def test_no_module_renames_files_into_place_by_itself():
    """Every atomic replace goes through files.py; the book build's vendored assets are
    folders (extracted to a temporary folder, renamed into place), which the writer does not do."""
    allowed = {"files.py", "tools/book.py"}
    found = {
        str(p.relative_to(ROOT))
        for p in ROOT.rglob("*.py")
        if re.search(r"os\.replace\(|os\.rename\(|\.rename\(|\.replace\(tmp", p.read_text())
    }
    assert found <= allowed, f"write through course_lib.files instead: {sorted(found - allowed)}"


def test_a_killed_writers_leftover_is_removed_by_the_next_write_and_a_live_one_is_not(tmp_path):
    """SIGKILL leaves ``.NAME.*.tmp`` behind (no handler runs); the next write of NAME removes
    a leftover untouched for STALE_SECONDS, and leaves a fresh one (a writer still at work)."""
    from course_lib.files import STALE_SECONDS

    path = tmp_path / "state.pt"
    stale, live, other = (
        tmp_path / ".state.pt.abc.tmp",
        tmp_path / ".state.pt.def.tmp",
        tmp_path / ".x.pt.1.tmp",
    )
    for p in (stale, live, other):
        p.write_text("half")
    old = stale.stat().st_mtime - STALE_SECONDS - 5
    os.utime(stale, (old, old))
    os.utime(other, (old, old))
    atomic_write_text(path, "whole")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [".state.pt.def.tmp", ".x.pt.1.tmp", "state.pt"]
    )


def test_an_output_path_under_a_file_or_of_the_wrong_kind_is_one_error(tmp_path):
    from course_lib.files import check_output_path

    (tmp_path / "afile").write_text("x")
    (tmp_path / "adir").mkdir()
    with pytest.raises(ValueError, match=r"--out .*afile/sub/deeper: .*afile is a file, so no folder"):
        check_output_path(tmp_path / "afile" / "sub" / "deeper", "--out", folder=True)
    with pytest.raises(ValueError, match="--out .* is a file; give a folder"):
        check_output_path(tmp_path / "afile", "--out", folder=True)
    with pytest.raises(ValueError, match="--json .* is a folder; give a file"):
        check_output_path(tmp_path / "adir", "--json", folder=False)
    # what can be written passes: new paths, an existing folder, an existing file to replace
    check_output_path(tmp_path / "new" / "deeper", "--out", folder=True)
    check_output_path(tmp_path / "adir", "--out", folder=True)
    check_output_path(tmp_path / "afile", "--json", folder=False)
