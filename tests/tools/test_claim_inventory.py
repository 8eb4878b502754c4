"""The claims inventory (benchmarks/claims_inventory.md): every chapter claim with its bounds and
its positive control, generated from the chapters' source and kept current."""

from __future__ import annotations

from course_lib.tools import claim_inventory


def test_the_claims_inventory_is_current():
    """benchmarks/claims_inventory.md lists every claim with its bounds and control."""
    assert claim_inventory.main(["--check"]) == 0, "python -m course_lib.tools.claim_inventory"


def test_the_inventory_classifies_claims():
    neg = claim_inventory.ChapterClaim("x", 0, "stays at chance", None, "0.1", None)
    assert neg.negative and neg.kind == "negative, NO CONTROL"
    controlled = claim_inventory.ChapterClaim("x", 0, "stays at chance", None, "0.1", "c")
    assert controlled.kind == "negative, controlled"
    assert claim_inventory.ChapterClaim("x", 0, "beats", "0.1", "0.9", None).kind == "two-sided band"
    assert claim_inventory.ChapterClaim("x", 0, "beats", "0.1", None, None).kind == "lower bound only"
    assert "NO CONTROL" in claim_inventory.inventory_markdown([neg])
