"""The ``course`` command. Each subcommand lives in its own module, which exposes
``register(subparsers)``; add a module to ``SUBCOMMAND_MODULES`` to add a subcommand."""

from __future__ import annotations

import argparse
import importlib
import sys

SUBCOMMAND_MODULES = [
    "course_lib.book",
    "course_lib.notebooks",
    "course_lib.grading.cli",
    "course_lib.recipes.bert_command",
    "course_lib.recipes.elmo",
    "course_lib.recipes.xlnet",
    "course_lib.recipes.transfo_xl",
    "course_lib.recipes.distill",
    "course_lib.recipes.train_command",
    "course_lib.export",
    "course_lib.evaluate",
    "course_lib.bench",
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
    parser = build_parser()
    args = parser.parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
