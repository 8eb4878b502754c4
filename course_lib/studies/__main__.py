"""``python -m course_lib.studies run NAME``: the same as ``course study run NAME``."""

import sys

from course_lib.cli import main

if __name__ == "__main__":
    sys.exit(main(["study", *sys.argv[1:]]))
