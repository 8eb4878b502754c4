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


def _command_parser(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.ArgumentParser:
    """The parser of the (sub)command that ``argv`` names (``course train distill ...``: the
    distill parser), found by following the subcommand names in order."""
    for i, word in enumerate(argv):
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction) and word in action.choices:
                return _command_parser(action.choices[word], argv[i + 1 :])
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        parser = build_parser()
        args, extra = parser.parse_known_args(argv)
        if extra:  # said by the subcommand's own parser, with its usage, not the top level's
            _command_parser(parser, argv).error(f"unrecognized arguments: {' '.join(extra)}")
        args._argv = argv  # (course train re-reads its options over a --config file's values)
        return int(args.func(args) or 0)
    except KeyboardInterrupt:  # Ctrl-C anywhere: one line and the shell's status for SIGINT
        words = argv[:2] if argv[:1] in (["train"], ["study"], ["notebooks"]) else argv[:1]
        print(" ".join(["course", *words]) + ": interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
