"""``python -m course_lib.studies run NAME``: the same as ``course study run NAME``."""

import argparse
import sys

from course_lib.studies import add_arguments, command

if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m course_lib.studies")
    add_arguments(parser)
    args = parser.parse_args()
    if args.action == "run" and not args.name:
        parser.error("`run` needs the study's name")
    sys.exit(command(args))
