"""Graded exercises (placeholder docstring; written below)."""
