"""``python -m course_lib.studies run NAME``: the same as ``course study run NAME``."""

import argparse
import sys

from course_lib.studies import register

if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="course")
    register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["study", *sys.argv[1:]])
    sys.exit(int(args.func(args) or 0))
