"""The practitioner's command table (issue 34): every `course` command a practitioner would type,
on real text none of the course's authors wrote (Python's standard-library docstrings and the
copyright files of /usr/share/doc), plus nasty inputs, with ``--steps 10``; each command's
seconds, exit status and last line of output, written as a Markdown table.

    python benchmarks/practitioner_run.py WORKDIR benchmarks/practitioner_table.md

Nothing in the table is typed: it is this script's output.
"""

from __future__ import annotations

import ast
import base64
import os
import platform
import subprocess
import sys
import sysconfig
import tarfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def build_corpus(folder: Path, limit: int = 3_000_000) -> int:
    """Docstrings of the standard library's modules (one document per module) and
    /usr/share/doc copyright files, as .txt files; returns the bytes written."""
    folder.mkdir(parents=True, exist_ok=True)
    total = 0
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    with open(folder / "stdlib_docstrings.txt", "w", encoding="utf-8") as out:
        for path in sorted(stdlib.glob("*.py")):
            try:
                tree = ast.parse(path.read_text(encoding="utf-8"))
            except (SyntaxError, UnicodeDecodeError):
                continue
            docs = [
                ast.get_docstring(n)
                for n in ast.walk(tree)
                if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            ]
            text = "\n".join(" ".join(d.split()) for d in docs if d and len(d) > 40)
            if text:
                out.write(text + "\n\n")
                total += len(text) + 2
            if total > limit // 2:
                break
    with open(folder / "copyright_files.txt", "w", encoding="utf-8") as out:
        for path in sorted(Path("/usr/share/doc").glob("*/copyright")):
            try:
                text = path.read_text(encoding="utf-8")
            except (UnicodeDecodeError, OSError):
                continue
            out.write(text.strip() + "\n\n")
            total += len(text)
            if total > limit:
                break
    return total


def nasty_inputs(work: Path) -> dict[str, Path]:
    nasty = work / "nasty"
    nasty.mkdir(parents=True, exist_ok=True)
    blob = nasty / "base64.txt"  # 5 MB without whitespace
    blob.write_text(base64.b64encode(os.urandom(3_750_000)).decode())
    archive = nasty / "archive.txt"  # a tar archive renamed .txt
    with tarfile.open(archive, "w") as tar:
        tar.add(str(ROOT / "README.md"), arcname="README.md")
    bad_toml = nasty / "bad.toml"
    bad_toml.write_text('steps = "ten"\nbatch-size = 32.5\n')
    bad_json = nasty / "bad.json"
    bad_json.write_text('{"lr": "fast"}')
    yaml = nasty / "run.yaml"
    yaml.write_text("steps: 10\n")
    a_file = nasty / "a_file"
    a_file.write_text("not a folder\n")
    clf = nasty / "labels.tsv"  # a real classification file: which file a paragraph comes from
    texts = (work / "text" / "copyright_files.txt").read_text(encoding="utf-8").split("\n\n")
    docs = (work / "text" / "stdlib_docstrings.txt").read_text(encoding="utf-8").split("\n\n")
    rows = [f"licence\t{' '.join(t.split())[:300]}" for t in texts[:150] if t.strip()]
    rows += [f"docstring\t{' '.join(t.split())[:300]}" for t in docs[:150] if t.strip()]
    clf.write_text("\n".join(rows) + "\n")
    broken = nasty / "broken.tsv"
    broken.write_text("licence the label has no tab\n")
    conll = nasty / "tags.conll"  # tag: is the word capitalised
    sentences = [" ".join(t.split()).split()[:12] for t in docs[:120] if t.strip()]
    conll.write_text(
        "\n\n".join(
            "\n".join(f"{w}\t{'CAP' if w[:1].isupper() else 'LOW'}" for w in s) for s in sentences if s
        )
        + "\n"
    )
    return {
        "blob": blob,
        "archive": archive,
        "bad_toml": bad_toml,
        "bad_json": bad_json,
        "yaml": yaml,
        "a_file": a_file,
        "clf": clf,
        "broken": broken,
        "conll": conll,
    }


def commands(work: Path, n: dict[str, Path]) -> list[str]:
    text, runs = work / "text", work / "runs"
    s = "--steps 10"
    t = f"course train {{}} --data {text} {s} --out {runs}/{{}}"
    return [
        *(t.format(o, o) for o in ("elmo", "bert", "roberta", "albert", "causal", "xlnet", "transfo-xl")),
        f"course train distill --teacher {runs}/bert --data {text} {s} --out {runs}/distill",
        f"course train bert --data {text} {s} --batch-size 16 --dropout 0 --mask-rate 0.2 --heldout 0.1 "
        f"--out {runs}/bert-options",
        f"course train bert --data {text} --steps 20 --batch-size 16 --dropout 0 --mask-rate 0.2 "
        f"--heldout 0.1 --out {runs}/bert-options --force-resume",
        f"course train bert --data {text} {s} --batch-size 16 --dropout 0.2 --mask-rate 0.2 --heldout 0.1 "
        f"--out {runs}/bert-options --resume",
        f"course train bert --data {text} {s} --batch-size 16 --out {runs}/bert-options --resume --lr 0.01",
        f"course train bert --data {text} {s} --out {runs}/fresh --resume",
        f"course export {runs}/bert {runs}/bert-hf",
        f"course export {runs}/roberta {runs}/roberta-hf",
        f"course export {runs}/elmo {runs}/elmo-hf",
        f"course eval {runs}/bert --data {text}/copyright_files.txt --max-rows 64",
        f"course eval {runs}/causal --data {text}/copyright_files.txt --max-rows 64",
        f"course eval {runs}/xlnet --data {text}/copyright_files.txt --max-rows 64",
        f"course eval {runs}/elmo --data {text}/copyright_files.txt --max-rows 512",
        f"course eval {runs}/transfo-xl --data {text}/copyright_files.txt --max-rows 64",
        f"course finetune {runs}/bert --task classify --train {n['clf']} --out {runs}/bert-clf --steps 10",
        f"course finetune {runs}/roberta --task tag --train {n['conll']} --out {runs}/roberta-tag --steps 10",
        f"course finetune {runs}/albert --task classify --train {n['clf']} --out {runs}/albert-clf "
        "--steps 10",
        f"course finetune {runs}/albert --task tag --train {n['conll']} --out {runs}/albert-tag --steps 10",
        f"course finetune {runs}/bert --task classify --train {n['broken']} --out {runs}/x",
        f"course finetune {runs}/xlnet --task classify --train {n['clf']} --out {runs}/x",
        f"course train bert --data {n['blob']} {s} --pair-task none --out {runs}/blob",
        f"course train bert --data {n['archive']} {s} --out {runs}/archive",
        f"course train bert --config {n['bad_toml']} --out {runs}/x",
        f"course train bert --config {n['bad_json']} --out {runs}/x",
        f"course train bert --config {n['yaml']} --out {runs}/x",
        f"course train bert --data {text} {s} --device gpu0 --out {runs}/x",
        f"course train bert --data {text} {s} --device cuda --out {runs}/x",
        f"course train bert --data {text} {s} --out {n['a_file']}",
        f"course train bert --data {text} {s} --dropout 1.5 --out {runs}/x",
        f"course train xlnet --data {text} {s} --mask-rate 0.2 --out {runs}/x",
        f"course train bert --data {text} {s} --encoding klingon --out {runs}/x",
        f"course pretrain-bert --text {text} {s} --out {runs}/x",
    ]


def run(command: str, work: Path) -> tuple[float, int, str]:
    argv = command.split()
    assert argv[0] == "course"
    env = dict(os.environ, COURSE_PROGRESS="0", PYTHONPATH=str(ROOT))
    t0 = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "course_lib.cli", *argv[1:]],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    seconds = time.perf_counter() - t0
    lines = [ln for ln in (done.stdout + "\n" + done.stderr).splitlines() if ln.strip()]
    tb = "Traceback" in done.stderr
    last = ("TRACEBACK: " if tb else "") + (lines[-1] if lines else "")
    if done.stdout.lstrip().startswith("{"):  # course eval / finetune: the scores, on one line
        import json

        scores = json.loads(done.stdout)
        keep = {k: v for k, v in scores.items() if isinstance(v, float) or k in ("objective", "tokens")}
        last = json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in keep.items()})
    return seconds, done.returncode, last


def main() -> int:
    work, out = Path(sys.argv[1]), Path(sys.argv[2])
    size = build_corpus(work / "text")
    n = nasty_inputs(work)
    rows = []
    for command in commands(work, n):
        seconds, rc, last = run(command, work)
        shown = command.replace(str(work) + "/", "")
        rows.append((shown, seconds, rc, last.replace(str(work) + "/", "").replace("|", "\\|")[:220]))
        print(f"{seconds:6.1f}s rc {rc}  {shown}\n        {rows[-1][3]}", flush=True)
    load = os.getloadavg()
    head = (
        "<!-- written by benchmarks/practitioner_run.py; do not edit -->\n"
        "# The practitioner's command table\n\n"
        f"Real text none of the course's authors wrote: {size / 1e6:.1f} MB of Python "
        f"{platform.python_version()} standard-library docstrings and /usr/share/doc copyright files, "
        "plus nasty inputs (a 5 MB file of base64 without whitespace, a tar archive renamed .txt, "
        "config files with type errors and an unknown format, a bad --device, --out naming a file, "
        "a resume with a changed setting). Every training command takes `--steps 10`. "
        f"Machine: {platform.machine()}, {os.cpu_count()} cores shared with other jobs "
        f"(load average {load[0]:.1f} at the end), "
        f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}; "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}. text/ = the text folder, runs/ the outputs, "
        "nasty/ the nasty inputs (paths are shown relative to the work folder); the last line is "
        "stdout's or stderr's last non-empty line.\n\n"
        "| command | seconds | rc | last line |\n|---|---:|---:|---|\n"
    )
    body = "\n".join(f"| `{c}` | {s:.1f} | {rc} | {last} |" for c, s, rc, last in rows)
    out.write_text(head + body + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
