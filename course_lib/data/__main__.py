"""``python -m course_lib.data --benchmark``: time the corpus generator; without flags, print sentences."""

from .corpus import main

main()
