"""Chapter 1's graded exercises: full marks for the solution, zero for the released stub,
exactly the earned points for a partly correct submission, full marks for correct answers
written differently; and the reference answers agree with course_lib's ELMo."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import torch
from grading_fixtures.chapters import Chapter, answer_sources, forbid_rule_tests

from course_lib.cli import main as course_main
from course_lib.grading.format import load_assignment

CHAPTER = Chapter("01_elmo")
SOLUTION = CHAPTER.solution

CHECK_POINTS = {  # check id -> points (every check of 01_elmo is worth 1)
    "char-ids-small": 1,
    "char-ids-edge-cases": 1,
    "reads-small": 1,
    "reads-honest-random": 1,
    "reads-naive-random": 1,
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
    "reads-answer": """
def reads(mask, n_layers, naive=False):
    if type(n_layers) is not int or n_layers < 1:
        raise ValueError("n_layers must be a positive int")
    batch, seq = mask.shape
    out = torch.zeros(n_layers + 1, 2, batch, seq, seq, dtype=torch.bool)
    for b in range(batch):
        n = int(mask[b].sum())  # padding only at the end
        for t in range(n):
            out[0, :, b, t, t] = True
            for layer in range(1, n_layers + 1):
                if naive and layer > 1:
                    out[layer, :, b, t, :n] = True
                else:
                    out[layer, 0, b, t, : t + 1] = True
                    out[layer, 1, b, t, t:n] = True
    return out
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

# Exercise 2 once more, as a propagation through the wiring (boolean matrix products, layer by
# layer), the way a student who does not guess the closed form writes it.
PROPAGATED_READS = """
def reads(mask, n_layers, naive=False):
    if not isinstance(n_layers, int) or isinstance(n_layers, bool) or n_layers < 1:
        raise ValueError(f"n_layers must be a positive int, got {n_layers}")
    m = mask.long()
    real = m[:, :, None] * m[:, None, :]  # [batch, t, u]
    tri = torch.ones(mask.shape[1], mask.shape[1], dtype=torch.long).tril()
    read_fwd, read_bwd = tri * real, tri.T * real  # which inputs (u) the LSTM at t reads
    deps = torch.diag_embed(m)  # layer 0: [batch, t, j]
    fwd, bwd = deps, deps
    layers = [(deps, deps)]
    for layer in range(1, n_layers + 1):
        if naive and layer >= 2:
            both = ((fwd + bwd) > 0).long()
            fwd, bwd = read_fwd @ both, read_bwd @ both
        else:
            fwd, bwd = read_fwd @ fwd, read_bwd @ bwd
        fwd, bwd = (fwd > 0).long(), (bwd > 0).long()
        layers.append((fwd, bwd))
    return torch.stack([torch.stack([f, b]) for f, b in layers]) > 0
"""

# Partly correct: the scalar mix ignores do_layer_norm (loses its two layer-norm checks), reads
# ignores the padding (the visible check's padded row says so at home; loses all three checks);
# everything else is right.
PARTIAL = {
    "scalar-mix-answer": """
def scalar_mix(layers, w, gamma, mask=None, do_layer_norm=False):
    out = gamma * (torch.softmax(w, 0)[:, None, None, None] * layers).sum(0)
    if mask is not None:
        out = out * mask[..., None]
    return out
""",
    "reads-answer": """
def reads(mask, n_layers, naive=False):
    if n_layers < 1:
        raise ValueError("n_layers >= 1")
    batch, seq = mask.shape
    left = torch.ones(seq, seq, dtype=torch.bool).tril()
    own = torch.eye(seq, dtype=torch.bool)
    per_layer = [torch.stack([own, own])]
    for layer in range(1, n_layers + 1):
        every = torch.ones(seq, seq, dtype=torch.bool)
        per_layer.append(torch.stack([every, every]) if naive and layer > 1 else torch.stack([left, left.T]))
    return torch.stack(per_layer)[:, :, None].expand(-1, -1, batch, -1, -1).clone()
""",
}
PARTIAL_FAILS = {
    "reads-small",
    "scalar-mix-layer-norm",
    "scalar-mix-layer-norm-random",
    "reads-honest-random",
    "reads-naive-random",
}

# Misreadings of the wiring (exercise 2), each graded on its own: the check ids it must fail.
READS_MISTAKES = {
    # the naive stack leaks already in layer 1 (it reads layer 0 only, like the honest biLM's)
    "reads_naive_from_layer_1": (
        "if naive and layer >= 2:",
        "if naive and layer >= 1:",
        {"reads-small", "reads-naive-random"},
    ),
    # "one step of leak per layer": the naive forward state at t reads t + layer - 1 at most
    "reads_naive_one_step": (
        "            out.append(torch.stack([real, real]))",
        "            reach = (pos[None, :] <= pos[:, None] + layer - 1) & (pos[None, :] >= pos[:, None] - layer + 1)\n"
        "            out.append(torch.stack([reach & real, reach & real]))",
        {"reads-small", "reads-naive-random"},
    ),
    # the backward LSTM reads from the end of the padded row (padding included; the visible
    # check's padded row is compared with the reference too)
    "reads_backward_from_padding": (
        "backward = up_to_t.T & real",
        "backward = up_to_t.T & mask[:, :, None]",
        {"reads-small", "reads-honest-random", "reads-naive-random"},
    ),
    # the two directions swapped
    "reads_directions_swapped": (
        "out.append(torch.stack([forward, backward]))",
        "out.append(torch.stack([backward, forward]))",
        {"reads-small", "reads-honest-random", "reads-naive-random"},
    ),
}


def test_assignment_format():
    a = load_assignment(SOLUTION)
    assert a.name == "01_elmo" and a.max_points == sum(CHECK_POINTS.values()) == 12
    assert [e.id for e in a.exercises] == ["char-ids", "reads", "scalar-mix", "bilm-targets"]
    assert [e.points for e in a.exercises] == [2, 3, 4, 3]
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
        CHAPTER.submission(folder, "propagated", {"reads-answer": PROPAGATED_READS}),
    ]
    reference_reads = answer_sources(SOLUTION)["reads-answer"]
    for name, (old, new, _) in READS_MISTAKES.items():
        assert old in reference_reads, name
        subs.append(CHAPTER.submission(folder, name, {"reads-answer": reference_reads.replace(old, new)}))
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
    assert rows["solution"]["points"] == rows["solution"]["max_points"] == "12", reports["solution"]["checks"]
    assert rows["stub"]["points"] == "0" and rows["stub"]["status"] == "graded"


def test_partly_correct_submission_gets_exactly_its_points(graded):
    rows, reports = graded
    assert _failed(reports, "partial") == PARTIAL_FAILS
    expected = sum(p for c, p in CHECK_POINTS.items() if c not in PARTIAL_FAILS)
    assert int(rows["partial"]["points"]) == expected == 7


def test_correct_answers_written_differently_get_full_marks(graded):
    rows, reports = graded
    assert _failed(reports, "alternative") == set(), reports["alternative"]["checks"]
    assert rows["alternative"]["points"] == "12"
    assert _failed(reports, "propagated") == set(), reports["propagated"]["checks"]
    assert rows["propagated"]["points"] == "12"


@pytest.mark.parametrize("name", list(READS_MISTAKES))
def test_misreadings_of_the_wiring_lose_their_points(graded, name):
    """Each misreading of the biLM's wiring fails exactly its checks, with messages that show no
    expected value."""
    rows, reports = graded
    fails = READS_MISTAKES[name][2]
    assert _failed(reports, name) == fails
    assert int(rows[name]["points"]) == 12 - sum(CHECK_POINTS[c] for c in fails)
    for c in reports[name]["checks"]:
        if c["hidden"] and not c["passed"]:
            assert "True" not in c["message"] and "tensor(" not in c["message"], c["message"]
            assert "differs from following every input" in c["message"] or "wrong values" in c["message"], c[
                "message"
            ]


# --- the reference answers agree with course_lib -------------------------------------------


@pytest.fixture(scope="module")
def reference():
    return CHAPTER.reference()


def test_reference_answers_agree_with_course_lib(reference):
    from course_lib.data.chars import word_to_char_ids, words_to_char_ids
    from course_lib.models.elmo import ElmoConfig, ElmoLanguageModel, ScalarMix

    for word in ["jam", "<S>", "</S>", "Café", "x" * 70]:
        assert reference["char_ids"](word) == word_to_char_ids(word)
        assert reference["char_ids"](word, 7) == word_to_char_ids(word, max_chars=7)

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


def test_reads_is_what_course_libs_bilm_measures(reference):
    """Exercise 2's reference is what a tiny ElmoLanguageModel at its random initialisation
    shows when one word at a time changes (honest and naive stack, 1-3 layers, a padded batch):
    the states that change are exactly those `reads` says depend on the word."""
    from dataclasses import replace

    from course_lib.data.chars import words_to_char_ids
    from course_lib.models.elmo import ElmoConfig, ElmoLanguageModel

    sentences = [["a", "b", "c", "d", "e"], ["f", "g", "h"]]
    ids, mask = words_to_char_ids(sentences)
    other, _ = words_to_char_ids([["zzq"]])
    base_cfg = ElmoConfig(
        char_embed_dim=8,
        filters=((1, 8), (2, 8)),
        projection_dim=16,
        lstm_cell_dim=32,
        dropout=0.0,
        vocab_size=20,
    )

    def states(model, char_ids):  # [n_layers + 1, 2, batch, seq, dim], layer 0 = the token vector
        st = model.encode(char_ids, mask)
        per_layer = [torch.stack([st.token, st.token])]
        per_layer += [torch.stack([f, b]) for f, b in zip(st.forward, st.backward)]
        return torch.stack(per_layer)

    for n_layers in (1, 2, 3):
        for naive in (False, True):
            torch.manual_seed(n_layers)
            model = ElmoLanguageModel(replace(base_cfg, n_layers=n_layers, naive_bidirectional=naive))
            model = model.double().eval()
            measured = torch.zeros(n_layers + 1, 2, *mask.shape, mask.shape[1], dtype=torch.bool)
            with torch.no_grad():
                base = states(model, ids)
                for b in range(mask.shape[0]):
                    for j in range(mask.shape[1]):
                        changed = ids.clone()
                        changed[b, j] = other[0, 0]
                        moved = (states(model, changed) - base).abs().amax(-1)[:, :, b] > 0
                        measured[:, :, b, :, j] = moved
            expected = reference["reads"](mask, n_layers, naive=naive)
            assert torch.equal(measured, expected), (n_layers, naive)
            if naive and n_layers >= 2:  # the chapter's leak: layer 2 reads the word it predicts
                assert measured[2, 0, 0, 0, 1] and not measured[1, 0, 0, 0, 1]


# --- the rules: every alias of course_lib's (and other libraries') versions is turned off ----

MUST_FORBID = (
    "course_lib.data.chars.word_to_char_ids",
    "course_lib.models.elmo.ScalarMix",
    "course_lib.analysis.normalise_layers",
)
COURSE_LIB_ROUTES = {  # name -> (answer cell, an answer that hands the job to a forbidden function, its visible check)
    "elmo_word_to_char_ids": (
        "char-ids-answer",
        "from course_lib.data.chars import word_to_char_ids\n\ndef char_ids(word, max_chars=50):\n    return word_to_char_ids(word, max_chars=max_chars)\n",
        "char-ids-small",
    ),
}


(
    test_forbid_list_covers_every_alias_and_the_texts_follow_the_metadata,
    test_a_forbidden_route_fails_at_home_as_in_the_grader,
) = forbid_rule_tests(CHAPTER, MUST_FORBID, COURSE_LIB_ROUTES)
