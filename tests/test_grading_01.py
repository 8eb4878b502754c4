"""Chapter 1's graded exercises: full marks for the solution, zero for the released stub,
exactly the earned points for a partly correct submission, full marks for correct answers
written differently; and the reference answers agree with course_lib's ELMo."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import torch
from grading_fixtures.chapters import Chapter, forbid_rule_tests

from course_lib.cli import main as course_main
from course_lib.grading.format import load_assignment

CHAPTER = Chapter("01_elmo")
SOLUTION = CHAPTER.solution

CHECK_POINTS = {  # check id -> points (every check of 01_elmo is worth 1)
    "char-ids-small": 1,
    "char-ids-edge-cases": 1,
    "highway-small": 1,
    "highway-shapes": 1,
    "scalar-mix-basic": 1,
    "scalar-mix-layer-norm": 1,
    "scalar-mix-shapes": 1,
    "scalar-mix-layer-norm-random": 1,
    "bilm-targets-small": 1,
    "bilm-targets-random": 1,
    "bilm-loss-random": 1,
}

# Correct answers, written differently from the reference (loops, einsum, boolean indexing).
ALTERNATIVE = {
    "char-ids-answer": """
def char_ids(word, max_chars=50):
    if max_chars < 3 or not word:
        raise ValueError("bad input")
    special = {"<S>": [256], "</S>": [257]}
    data = special.get(word)
    if data is None:
        data = [b for b in word.encode("utf-8")]
        del data[max_chars - 2:]
    out = [259]
    for b in data:
        out.append(b + 1)
    out.append(260)
    while len(out) < max_chars:
        out.append(261)
    return out
""",
    "highway-answer": """
def highway(x, weight, bias):
    d = x.shape[-1]
    a = torch.nn.functional.linear(x, weight[:d], bias[:d])
    g = 1 / (1 + torch.exp(-torch.nn.functional.linear(x, weight[d:], bias[d:])))
    return x + (1 - g) * (a.clamp(min=0) - x)
""",
    "scalar-mix-answer": """
def scalar_mix(layers, w, gamma, mask=None, do_layer_norm=False):
    if do_layer_norm and mask is None:
        raise ValueError("need a mask")
    parts = []
    for j in range(layers.shape[0]):
        h = layers[j]
        if do_layer_norm:
            real = h[mask]
            h = (h - real.mean()) / torch.sqrt(real.var(unbiased=False) + 1e-12)
        parts.append(h)
    weights = torch.exp(w - w.max())
    weights = weights / weights.sum()
    out = gamma * torch.einsum("l,lbsd->bsd", weights, torch.stack(parts))
    if mask is not None:
        out = torch.where(mask[..., None], out, torch.zeros((), dtype=out.dtype))
    return out
""",
    "bilm-targets-answer": """
def lm_targets(word_ids, mask):
    batch, seq = word_ids.shape
    forward = torch.full((batch, seq), -100, dtype=word_ids.dtype)
    backward = torch.full((batch, seq), -100, dtype=word_ids.dtype)
    for b in range(batch):
        for t in range(seq):
            if t + 1 < seq and mask[b, t] and mask[b, t + 1]:
                forward[b, t] = word_ids[b, t + 1]
            if t >= 1 and mask[b, t] and mask[b, t - 1]:
                backward[b, t] = word_ids[b, t - 1]
    return forward, backward


def bilm_loss(forward_logits, backward_logits, word_ids, mask):
    forward, backward = lm_targets(word_ids, mask)
    losses = []
    for logits, targets in ((forward_logits, forward), (backward_logits, backward)):
        keep = targets != -100
        logp = torch.log_softmax(logits[keep], dim=-1)
        losses.append(-logp.gather(1, targets[keep][:, None]).mean())
    return torch.stack(losses)
""",
}

# Partly correct: the scalar mix ignores do_layer_norm (loses its two layer-norm checks), the
# highway swaps transform and gate (loses both highway checks); everything else is right.
PARTIAL = {
    "scalar-mix-answer": """
def scalar_mix(layers, w, gamma, mask=None, do_layer_norm=False):
    out = gamma * (torch.softmax(w, 0)[:, None, None, None] * layers).sum(0)
    if mask is not None:
        out = out * mask[..., None]
    return out
""",
    "highway-answer": """
def highway(x, weight, bias):
    gate, transform = (x @ weight.T + bias).chunk(2, dim=-1)
    g = torch.sigmoid(gate)
    return g * x + (1 - g) * torch.relu(transform)
""",
}
PARTIAL_FAILS = {"scalar-mix-layer-norm", "scalar-mix-layer-norm-random", "highway-small", "highway-shapes"}


def test_assignment_format():
    a = load_assignment(SOLUTION)
    assert a.name == "01_elmo" and a.max_points == sum(CHECK_POINTS.values()) == 11
    assert [e.id for e in a.exercises] == ["char-ids", "highway", "scalar-mix", "bilm-targets"]
    assert {c.id: c.points for c in a.checks} == CHECK_POINTS
    assert a.exercise("bilm-targets").functions == ("lm_targets", "bilm_loss")


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """One `course grade` batch: the solution, the stub, a partly correct and an alternative submission."""
    folder = tmp_path_factory.mktemp("subs01")
    subs = [
        CHAPTER.submission(folder, "solution", {}),
        CHAPTER.submission(folder, "stub", {}, base="stub"),
        CHAPTER.submission(folder, "partial", PARTIAL),
        CHAPTER.submission(folder, "alternative", ALTERNATIVE, base="stub"),
    ]
    out = folder / "out"
    code = course_main(
        ["grade", *map(str, subs), "--out", str(out), "--assignment", "01_elmo", "--jobs", "2"]
    )
    assert code == 0
    with open(out / "grades.csv", newline="") as fh:
        rows = {Path(r["submission"]).stem: r for r in csv.DictReader(fh)}
    reports = {}
    for rep in out.glob("*/report.json"):
        data = json.loads(rep.read_text())
        reports[Path(data["submission"]).stem] = data
    return rows, reports


def _failed(reports, name) -> set[str]:
    return {c["id"] for c in reports[name]["checks"] if not c["passed"]}


def test_solution_full_marks_stub_zero(graded):
    rows, reports = graded
    assert rows["solution"]["points"] == rows["solution"]["max_points"] == "11", reports["solution"]["checks"]
    assert rows["stub"]["points"] == "0" and rows["stub"]["status"] == "graded"


def test_partly_correct_submission_gets_exactly_its_points(graded):
    rows, reports = graded
    assert _failed(reports, "partial") == PARTIAL_FAILS
    expected = sum(p for c, p in CHECK_POINTS.items() if c not in PARTIAL_FAILS)
    assert int(rows["partial"]["points"]) == expected == 7


def test_correct_answers_written_differently_get_full_marks(graded):
    rows, reports = graded
    assert _failed(reports, "alternative") == set(), reports["alternative"]["checks"]
    assert rows["alternative"]["points"] == "11"


# --- the reference answers agree with course_lib -------------------------------------------


@pytest.fixture(scope="module")
def reference():
    return CHAPTER.reference()


def test_reference_answers_agree_with_course_lib(reference):
    from course_lib.models.elmo import (
        ElmoConfig,
        ElmoLanguageModel,
        Highway,
        ScalarMix,
        word_to_char_ids,
        words_to_char_ids,
    )

    for word in ["jam", "<S>", "</S>", "Café", "x" * 70]:
        assert reference["char_ids"](word) == word_to_char_ids(word)
        assert reference["char_ids"](word, 7) == word_to_char_ids(word, max_chars=7)

    torch.manual_seed(0)
    hw = Highway(6, n_layers=1)
    x = torch.randn(3, 4, 6)
    with torch.no_grad():
        torch.testing.assert_close(reference["highway"](x, hw.layers[0].weight, hw.layers[0].bias), hw(x))

    layers = torch.randn(3, 2, 5, 4)
    mask = torch.tensor([[True] * 5, [True, True, False, False, False]])
    for norm in (False, True):
        mix = ScalarMix(3, do_layer_norm=norm, initial_scalar_parameters=[0.3, -1.0, 0.5])
        with torch.no_grad():
            mix.gamma.fill_(1.7)
            expected = mix(layers, mask) * mask[..., None]
        got = reference["scalar_mix"](layers, mix.scalar_parameters.detach(), 1.7, mask, do_layer_norm=norm)
        torch.testing.assert_close(got, expected)

    cfg = ElmoConfig(
        char_embed_dim=8,
        filters=((1, 4), (2, 8)),
        projection_dim=16,
        lstm_cell_dim=32,
        dropout=0.0,
        vocab_size=30,
    )
    lm = ElmoLanguageModel(cfg).eval()
    ids, mask = words_to_char_ids([["a", "b", "c"], ["d", "e"]], add_sentence_boundaries=True)
    word_ids = torch.randint(4, 30, mask.shape) * mask
    with torch.no_grad():
        fwd, bwd, _, _ = lm.lm_logits(ids, mask)  # aligned with the word they predict
        ours = lm.lm_loss(ids, word_ids, mask)
    made_at = (
        torch.cat([fwd[:, 1:], fwd[:, :1]], 1),
        torch.cat([bwd[:, -1:], bwd[:, :-1]], 1),
    )  # aligned with where they are made
    got = reference["bilm_loss"](*made_at, word_ids, mask)
    torch.testing.assert_close(got, torch.stack([ours.forward, ours.backward]))


# --- the rules: every alias of course_lib's (and other libraries') versions is turned off ----

MUST_FORBID = (
    "course_lib.data.chars.word_to_char_ids",
    "course_lib.models.elmo.word_to_char_ids",
    "course_lib.models.elmo.ScalarMix",
    "course_lib.analysis.normalise_layers",
)
COURSE_LIB_ROUTES = {  # name -> (answer cell, an answer that hands the job to a forbidden function, its visible check)
    "elmo_word_to_char_ids": (
        "char-ids-answer",
        "from course_lib.models.elmo import word_to_char_ids\n\ndef char_ids(word, max_chars=50):\n    return word_to_char_ids(word, max_chars=max_chars)\n",
        "char-ids-small",
    ),
}


(
    test_forbid_list_covers_every_alias_and_the_texts_follow_the_metadata,
    test_a_forbidden_route_fails_at_home_as_in_the_grader,
) = forbid_rule_tests(CHAPTER, MUST_FORBID, COURSE_LIB_ROUTES)
