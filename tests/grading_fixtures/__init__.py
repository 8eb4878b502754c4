"""Submissions for the grader's tests: honest, partial and adversarial (see cases.py)."""
