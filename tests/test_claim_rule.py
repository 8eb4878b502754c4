"""CONTRIBUTING rule 4: a claim that cannot fail is not a claim.

Unit tests of ``claim(..., control=...)``, and a ratchet over the chapters: a negative claim
(a one-sided upper bound on a "no effect"/"at chance"/"no better than" statement) names its
positive control, or has a two-sided band. The claims that do neither yet are listed in
``book/claims_without_control.json``; the list may only shrink.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from course_lib import claims
from course_lib.claims import ClaimError, claim
from course_lib.tools.claim_inventory import chapter_claims

ROOT = Path(__file__).resolve().parents[1]
ALLOWED = ROOT / "book" / "claims_without_control.json"


def test_a_negative_claim_fails_when_its_control_is_missing_or_broken():
    claim("rule4: the positive arm moves", 0.3, low=0.1, evidence="test")
    assert (
        claim(
            "rule4: the negative arm does not move",
            0.01,
            high=0.02,
            evidence="test",
            control="rule4: the positive arm moves",
        )
        == 0.01
    )
    with pytest.raises(ValueError, match="has not been asserted before it"):
        claim("rule4: orphan", 0.0, high=0.02, evidence="test", control="rule4: a claim never made")
    with pytest.raises(ClaimError):
        claim("rule4: a broken control", 0.0, low=0.1, evidence="test")
    with pytest.raises(ClaimError, match="its positive control 'rule4: a broken control' did not hold"):
        claim(
            "rule4: negative with a broken control",
            0.0,
            high=0.02,
            evidence="test",
            control="rule4: a broken control",
        )


def test_counts_are_glued_as_integers(monkeypatch):
    import numpy as np
    import torch

    glued = {}
    monkeypatch.setattr(claims, "glue", lambda name, value: glued.__setitem__(name, value))
    claim("rule4: a count", torch.tensor(9), low=1, evidence="test", glue_as="n")
    claim("rule4: a numpy count", np.int64(2), low=1, evidence="test", glue_as="m")
    claim("rule4: a share", 0.25, low=0.1, evidence="test", glue_as="s")
    assert glued == {"n": 9, "m": 2, "s": 0.25}
    assert isinstance(glued["n"], int) and isinstance(glued["m"], int)


def uncontrolled():
    out = []
    for c in chapter_claims():
        if c.negative and not c.control:
            out.append(f"{c.chapter}: {c.statement}")
    return sorted(set(out))


def test_negative_claims_have_a_positive_control_or_a_two_sided_band():
    allowed = set(json.loads(ALLOWED.read_text()))
    now = set(uncontrolled())
    new = sorted(now - allowed)
    assert not new, (
        "negative claims without a positive control (claim(..., control=...)) or a two-sided band:\n"
        + "\n".join(new)
    )
    gone = sorted(allowed - now)
    assert not gone, (
        f"these claims have a control now or are gone: remove them from {ALLOWED.name}:\n" + "\n".join(gone)
    )


def test_the_ratchet_sees_claims():
    found = list(chapter_claims())
    assert len(found) > 200
    assert any(c.control for c in found)
