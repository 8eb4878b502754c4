"""Write ``grades.csv``, ``report.json`` and ``report.md``, and name the report folders.

Everything a student's code produced (printed text, exception messages, tracebacks) is
shown in ``report.md`` only inside code blocks whose fence is longer than any run of
backticks in the text, with control characters (terminal escapes, carriage returns)
replaced by visible escapes, so it cannot format, link, or hide anything.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import re
from pathlib import Path

from ..files import atomic_write_text

__all__ = [
    "format_points",
    "clean_text",
    "clean_data",
    "csv_cell",
    "sanitize",
    "code_block",
    "render_markdown",
    "write_atomic",
    "write_report",
    "write_grades_csv",
    "exercise_columns",
    "exercise_summary",
    "gradescope_results",
    "CSV_HEADER",
    "report_folders",
    "earlier_report",
]

CSV_HEADER = ["submission", "assignment", "points", "max_points", "status"]
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_SURROGATE = re.compile(r"[\ud800-\udfff]")
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def clean_text(text) -> str:
    """Any text -> text that encodes as UTF-8: lone surrogates (from a non-UTF-8 file name,
    or a ``"\\ud800"`` escape in JSON a student wrote) become visible ``\\udXXX`` escapes."""
    text = str(text)
    return _SURROGATE.sub(lambda m: f"\\u{ord(m.group(0)):04x}", text)


def clean_data(value):
    """:func:`clean_text` applied to every string (keys too) of a JSON-like value."""
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, dict):
        return {clean_text(k): clean_data(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean_data(v) for v in value]
    return value


def csv_cell(text) -> str:
    """A text cell of grades.csv that a spreadsheet shows as text, never runs as a formula:
    cells starting with ``= + - @``, a tab or a carriage return get a leading apostrophe;
    control characters (a carriage return would end the row for many readers) and line
    breaks are shown as escapes, so every row is one line."""
    text = clean_text(text)
    if text.lstrip(" ").startswith(_FORMULA_START) or text.startswith(
        ("\uff1d", "\uff0b", "\uff0d", "\uff20")
    ):
        text = "'" + text
    return sanitize(text).replace("\n", "\\n")


def format_points(value) -> str:
    value = float(value or 0)
    return str(int(value)) if value.is_integer() else f"{value:g}"


def sanitize(text: str) -> str:
    """Control and bidirectional characters -> ``\\xNN`` / ``\\uNNNN`` escapes; CRLF -> LF."""
    text = clean_text(text).replace("\r\n", "\n")

    def esc(m):
        c = m.group(0)
        return f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}"

    return _CONTROL.sub(esc, text)


def code_block(text: str) -> str:
    text = sanitize(text).rstrip("\n")
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}text\n{text}\n{fence}"


def _inline(text: str) -> str:
    text = sanitize(text).replace("\n", " ")
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    fence = "`" * (longest + 1)
    return f"{fence} {text} {fence}"


_MD_PUNCT = re.compile(r"([\\`*_{}\[\]()#+\-.!|<>&~=\"'])")


def _plain(text: str) -> str:
    """Text shown as text in markdown outside code: every ASCII punctuation character that
    markdown or HTML could read as syntax is backslash-escaped (CommonMark), on one line."""
    return _MD_PUNCT.sub(r"\\\1", sanitize(text).replace("\n", " "))


def write_atomic(path: Path, text: str) -> None:
    """``text`` to ``path`` exactly as given, with the course's one atomic writer."""
    atomic_write_text(path, text)


def render_markdown(report: dict, titles: dict[str, str] | None = None) -> str:
    """The student's feedback: totals, then each exercise's checks, what failed and why."""
    titles = titles or {}
    lines = [f"# Feedback: {_inline(Path(str(report['submission'])).name)}", ""]
    lines.append(f"Assignment: {_inline(report['assignment']) if report['assignment'] else 'unknown'}  ")
    lines.append(f"Score: **{format_points(report['points'])} / {format_points(report['max_points'])}**")
    lines.append("")
    if report["status"] != "graded":
        lines += ["The grader could not grade this file:", "", code_block(report["status"]), ""]
        return "\n".join(lines) + "\n"
    for w in report.get("warnings", []):
        lines += [f"> Note: {_plain(w)}", ""]
    answers = {a["exercise"]: [] for a in report.get("answers", [])}
    for a in report.get("answers", []):
        answers[a["exercise"]].append(a)
    by_exercise: dict[str, list[dict]] = {}
    for c in report["checks"]:
        by_exercise.setdefault(c["exercise"], []).append(c)
    for ex, checks in by_exercise.items():
        got = sum(c["points"] for c in checks)
        total = sum(c["max_points"] for c in checks)
        title = _plain(titles[ex]) if ex in titles else _inline(ex)
        lines += [f"## {title} ({format_points(got)} / {format_points(total)})", ""]
        for a in answers.get(ex, []):
            if a.get("note"):  # e.g. which of several cells marked as this answer was graded
                lines += [f"Answer cell {_inline(a['cell'])}:", "", code_block(a["note"]), ""]
            if a["status"] != "ok":
                lines += [f"Answer cell {_inline(a['cell'])}:", "", code_block(a["status"]), ""]
            if a.get("output"):
                lines += [f"Output of answer cell {_inline(a['cell'])}:", "", code_block(a["output"]), ""]
        for c in checks:
            kind = "hidden check" if c["hidden"] else "check"
            mark = "passed" if c["passed"] else "FAILED"
            lines.append(
                f"- **{mark}**: {kind} {_inline(c['id'])} ({format_points(c['points'])} / {format_points(c['max_points'])})"
            )
            if not c["passed"]:
                lines += ["", code_block(c["message"])]
            if c.get("output"):
                lines += ["", "  What your code printed:", "", code_block(c["output"])]
            lines.append("")
    return "\n".join(lines) + "\n"


def write_report(folder: Path, report: dict, titles: dict[str, str] | None = None) -> None:
    report = clean_data(report)
    write_atomic(
        folder / "report.json", json.dumps(report, indent=1, sort_keys=False, ensure_ascii=False) + "\n"
    )
    write_atomic(folder / "report.md", render_markdown(report, titles))


def exercise_columns(rows: list[dict]) -> list[tuple[str | None, str]]:
    """The gradebook's exercise columns, as ``(assignment, exercise id)`` in the order met:
    one per exercise of every assignment graded in the batch."""
    cols: list[tuple[str | None, str]] = []
    for r in rows:
        for ex in r.get("exercises") or {}:
            if (r["assignment"], ex) not in cols:
                cols.append((r["assignment"], ex))
    return cols


def write_grades_csv(path: Path, rows: list[dict]) -> None:
    """One row per submission: the totals and status, then one column per exercise (its
    points; empty for a row that was not graded or is for another assignment). A batch of
    one assignment names the columns by exercise id, a mixed batch ``assignment:exercise``."""
    cols = exercise_columns(rows)
    mixed = len({a for a, _ in cols}) > 1
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(CSV_HEADER + [csv_cell(f"{a}:{e}" if mixed else e) for a, e in cols])
    for r in rows:
        points = r.get("exercises") or {}
        extra = [format_points(points[e]) if r["assignment"] == a and e in points else "" for a, e in cols]
        writer.writerow(
            [
                csv_cell(r["submission"]),
                csv_cell(r["assignment"] or ""),
                format_points(r["points"]),
                format_points(r["max_points"]),
                csv_cell(r["status"]),
                *extra,
            ]
        )
    write_atomic(path, buf.getvalue())


def exercise_summary(rows: list[dict]) -> list[str]:
    """The class's view, one line per exercise over the graded submissions: mean points, how
    many got full points and how many got zero."""
    lines = []
    for a, e in exercise_columns(rows):
        got = [
            r["exercises"][e]
            for r in rows
            if r["assignment"] == a and r["status"] == "graded" and e in (r.get("exercises") or {})
        ]
        if not got:
            continue
        top = next(
            r["exercise_max"][e] for r in rows if r["assignment"] == a and e in (r.get("exercise_max") or {})
        )
        mean = sum(got) / len(got)
        full = sum(abs(g - top) < 1e-9 for g in got)
        zero = sum(g == 0 for g in got)
        lines.append(
            f"{sanitize(a or '')} {sanitize(e)}: mean {mean:.2f} / {format_points(top)}, full {full} of {len(got)}, zero {zero} of {len(got)}"
        )
    return lines


def gradescope_results(report: dict, titles: dict[str, str] | None = None) -> dict:
    """A submission's ``results.json`` in Gradescope's autograder format: ``score``, and one
    test per check with ``name``, ``score``, ``max_score``, ``output`` (plain text)."""
    report = clean_data(report)
    titles = titles or {}
    tests = []
    for c in report.get("checks", []):
        kind = "hidden check" if c["hidden"] else "check"
        out = "passed" if c["passed"] else sanitize(c["message"])
        if c.get("output"):
            out += "\n\nWhat your code printed:\n" + sanitize(c["output"])
        tests.append(
            {
                "name": f"{titles.get(c['exercise'], c['exercise'])}: {kind} {c['id']}",
                "score": float(c["points"]),
                "max_score": float(c["max_points"]),
                "status": "passed" if c["passed"] else "failed",
                "output": out,
                "output_format": "text",
                "visibility": "visible",
            }
        )
    notes = [sanitize(w) for w in report.get("warnings", [])]
    for a in report.get("answers", []):
        for text in (
            a.get("note"),
            None if a.get("status") in ("ok", None) else f"answer cell {a['cell']}: {a['status']}",
        ):
            if text:
                notes.append(sanitize(text))
    if report["status"] != "graded":
        notes.insert(0, "The grader could not grade this file: " + sanitize(report["status"]))
    return {
        "score": float(report["points"]),
        "output": "\n".join(notes),
        "output_format": "text",
        "visibility": "visible",
        "tests": tests,
    }


RESERVED_NAMES = {"grades.csv"}  # what the output folder holds besides the report folders
_HASHED = re.compile(r"__[0-9a-f]{10}(-[0-9]+)?$")


def _safe_stem(path: str) -> str:
    stem = Path(path).stem
    stem = re.sub(r"[^A-Za-z0-9._-]", "_", stem)[:100]
    if stem.startswith("."):
        stem = "_" + stem[1:]
    return "_" if stem in ("", "_.", "_..") else stem


def _path_hash(path: str) -> str:
    try:
        raw = os.fsencode(str(path))  # the name's bytes on disk (undecodable bytes come back as they were)
    except UnicodeEncodeError:  # a lone surrogate that no file system name decodes to (e.g. "\ud800")
        raw = str(path).encode("utf-8", "surrogatepass")
    return hashlib.sha256(raw).hexdigest()[:10]


def report_folders(paths: list[str]) -> list[str]:
    """One report folder name per submission: unique (also on case-insensitive file systems),
    never a name the output folder already uses (``grades.csv``), and stable: the same path
    gets the same folder in every run, whatever else is in the batch. A file's stem is used
    as it is when no other submission (and no reserved name) maps to it; otherwise a hash of
    the path as given is appended (``x__3f2a9c01b7``)."""
    stems = [_safe_stem(str(p)) for p in paths]
    counts: dict[str, int] = {}
    for s in stems:
        counts[s.lower()] = counts.get(s.lower(), 0) + 1
    out: list[str] = []
    taken: set[str] = set()
    for p, stem in zip(paths, stems):
        plain = counts[stem.lower()] == 1 and stem.lower() not in RESERVED_NAMES and not _HASHED.search(stem)
        name = stem if plain else f"{stem[:80]}__{_path_hash(str(p))}"
        n = 1
        while name.lower() in taken:  # the same path given twice
            n += 1
            name = f"{stem[:80]}__{_path_hash(str(p))}-{n}"
        taken.add(name.lower())
        out.append(name)
    return out


def earlier_report(folder: Path, key: dict) -> dict | None:
    """The report a submission already has in ``folder`` when it was graded from the same
    file under the same grading (``key``) and not in error, else None."""
    try:
        report = json.loads((folder / "report.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(report, dict) or report.get("status") != "graded":
        return None
    if any(report.get(k) != v for k, v in key.items()):
        return None
    needed = ("points", "max_points", "exercises", "exercise_max")
    return report if all(k in report for k in needed) else None
