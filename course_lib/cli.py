"""The ``course`` command. Each subcommand lives in its own module, which exposes
``register(subparsers)``; add a module to ``SUBCOMMAND_MODULES`` to add a subcommand."""

from __future__ import annotations

import argparse
import importlib
import sys

SUBCOMMAND_MODULES = [
    "course_lib.tools.book",
    "course_lib.tools.notebooks",
    "course_lib.grading.cli",
    "course_lib.recipes.train_command",  # course train OBJECTIVE: every recipe's command
    "course_lib.recipes.finetune_command",
    "course_lib.export",
    "course_lib.evaluate",
    "course_lib.tools.bench",
    "course_lib.studies",
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="course", description="Tools for the pretrained-language-models course."
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in SUBCOMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        args._argv = argv  # (course train re-reads its options over a --config file's values)
        return int(args.func(args) or 0)
    except KeyboardInterrupt:  # Ctrl-C anywhere: one line and the shell's status for SIGINT
        words = argv[:2] if argv[:1] in (["train"], ["study"], ["notebooks"]) else argv[:1]
        print(" ".join(["course", *words]) + ": interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
