"""Chapter 5's graded exercises (AR vs AE): the solution notebook's format, its release,
agreement of the reference answers with course_lib, and `course grade` on full, empty,
partial, rewritten and gaming submissions (exact points), with the visible checks giving
the same verdict at home as in the grader."""

from __future__ import annotations

import json
import re
from dataclasses import replace

import pytest
import torch
from grading_fixtures.chapters import Chapter, answer_sources, cell_source, forbid_rule_tests, tagged_cells

from course_lib.grading.format import load_assignment

CHAPTER = Chapter("05_ar_ae")
SOLUTION, EXERCISE = CHAPTER.solution, CHAPTER.exercise
reference = CHAPTER.reference  # the preamble and the reference answers, executed
AR, MLM, PAIR = "ar-likelihood-answer", "masked-lm-loss-answer", "pair-joint-answer"
CHECKS = {
    "ar-likelihood": ["ar-small", "ar-random", "ar-edges"],
    "masked-lm-loss": ["mlm-small", "mlm-random", "mlm-edges"],
    "pair-joint": ["pair-small", "pair-joint-random", "pair-mass-random", "pair-edges"],
}
ALL_CHECKS = [c for cs in CHECKS.values() for c in cs]
VISIBLE = ["ar-small", "mlm-small", "pair-small"]
FORBID = ("torch.nn.functional.cross_entropy", "torch.nn.functional.nll_loss")
MASK = 4  # the tiny models' [MASK] id
TINY = dict(
    vocab_size=40,
    hidden_size=16,
    num_hidden_layers=2,
    num_attention_heads=2,
    intermediate_size=32,
    max_position_embeddings=32,
    initializer_range=0.2,
)


# --- format and release ----------------------------------------------------------------------


def test_solution_notebook_is_valid_and_released():
    a = load_assignment(SOLUTION)
    assert (
        a.name == "05_ar_ae" and a.title == "Chapter 5: autoregressive vs autoencoding" and a.max_points == 10
    )
    assert [e.id for e in a.exercises] == list(CHECKS)
    assert [e.points for e in a.exercises] == [3, 3, 4]
    assert [c.id for c in a.checks] == ALL_CHECKS
    assert [c.id for c in a.checks if not c.hidden] == VISIBLE and sum(c.hidden for c in a.checks) == 7
    assert all(c.points == 1 for c in a.checks)
    assert set(FORBID) <= set(a.forbid)  # as in chapter 3: the losses are the exercise
    assert [e.functions for e in a.exercises] == [
        ("ar_log_likelihood",),
        ("masked_lm_loss",),
        ("independent_pair_joint", "inconsistent_mass"),
    ]
    CHAPTER.assert_released()
    ex = json.loads(EXERCISE.read_text())
    stubs = [cell_source(c) for c in tagged_cells(ex, "answer")]
    assert [s.count("    raise NotImplementedError(") for s in stubs] == [1, 1, 2]
    assert not tagged_cells(ex, "hidden-check") and not tagged_cells(ex, "solution-only")
    assert "Instructor notes" not in EXERCISE.read_text()


# --- the reference answers agree with course_lib ---------------------------------------------


def _padded_batch(vocab: int, lengths=(9, 6, 4, 1)) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(5, vocab, (len(lengths), max(lengths)), generator=g)
    att = (torch.arange(max(lengths)) < torch.tensor(lengths)[:, None]).long()
    return ids.masked_fill(att == 0, 0), att


def test_reference_ar_log_likelihood_matches_sequence_log_likelihood():
    from course_lib.analysis.ar_ae import sequence_log_likelihood
    from course_lib.models.bert import BertConfig, BertLMHeadModel

    torch.manual_seed(0)
    model = BertLMHeadModel(replace(BertConfig(**TINY), is_decoder=True)).eval()
    ours = reference()["ar_log_likelihood"]
    ids, att = _padded_batch(40)
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=att).logits
    expected = sequence_log_likelihood(model, ids, att)
    got = ours(logits, ids, att)
    assert got.shape == (4,) and float(got[3]) == 0.0  # one real token: nothing predicted
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ours(logits, ids, att.bool()), expected, rtol=1e-5, atol=1e-5)
    with torch.no_grad():
        full = model(input_ids=ids).logits
    torch.testing.assert_close(ours(full, ids), sequence_log_likelihood(model, ids), rtol=1e-5, atol=1e-5)


def test_reference_masked_lm_loss_matches_bert_masked_lm_loss():
    from course_lib.models.bert import masked_lm_loss

    ours = reference()["masked_lm_loss"]
    g = torch.Generator().manual_seed(3)
    for shape in [(2, 7, 11), (1, 1, 5), (4, 12, 60)]:
        logits = torch.randn(shape, generator=g) * 3
        ids = torch.randint(shape[-1], shape[:2], generator=g)
        m = torch.rand(shape[:2], generator=g) < 0.3
        m.view(-1)[0] = True
        labels = ids.masked_fill(~m, -100)
        torch.testing.assert_close(ours(logits, ids, m), masked_lm_loss(logits, labels), rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(
            ours(logits, ids, m.long()), masked_lm_loss(logits, labels), rtol=1e-5, atol=1e-6
        )
    # nothing masked: 0, as the training loss (and chapter 3's mlm_loss): one rule in the course
    assert float(masked_lm_loss(logits, torch.full_like(ids, -100))) == 0.0
    nothing = ours(logits, ids, torch.zeros_like(m))
    assert nothing.dim() == 0 and float(nothing) == 0.0 and nothing.dtype == logits.dtype


def test_reference_pair_joint_matches_pair_joint_on_a_masked_lm():
    from course_lib.analysis.ar_ae import normalise_grid, pair_joint
    from course_lib.models.bert import BertConfig, BertForMaskedLM

    torch.manual_seed(0)
    model = BertForMaskedLM(BertConfig(**TINY)).eval()
    ours = reference()["independent_pair_joint"]
    ids, _ = _padded_batch(40, lengths=(9,))
    for (i, j), ci, cj in [
        ((2, 3), [5, 9, 17], [6, 30]),
        ((1, 7), [8], [8, 8, 21, 39]),
        ((4, 5), list(range(5, 40)), [11]),
    ]:
        x = ids.clone()
        x[0, [i, j]] = MASK
        with torch.no_grad():
            logp = torch.log_softmax(model(input_ids=x).mlm_logits[0], -1)
        expected = normalise_grid(pair_joint(model, ids[0], (i, j), ci, cj, mask_token_id=MASK))
        torch.testing.assert_close(ours(logp[i], logp[j], ci, cj), expected, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(ours(logp[i] + 7, logp[j] - 2, ci, cj), expected, rtol=1e-5, atol=1e-6)


def test_reference_inconsistent_mass_matches_course_lib():
    from course_lib.analysis.ar_ae import inconsistent_mass

    ours = reference()["inconsistent_mass"]
    g = torch.Generator().manual_seed(5)
    for _ in range(30):
        rows, cols = (int(torch.randint(1, 7, (), generator=g)) for _ in range(2))
        grid = torch.rand(rows, cols, generator=g) * (torch.rand(rows, cols, generator=g) < 0.8) + 1e-3
        n = int(torch.randint(0, rows * cols + 2, (), generator=g))
        pairs = list(
            zip(
                torch.randint(rows, (n,), generator=g).tolist(),
                torch.randint(cols, (n,), generator=g).tolist(),
            )
        )
        got = ours(grid, pairs)
        assert isinstance(got, float) and got == pytest.approx(
            inconsistent_mass(grid, set(pairs)), rel=1e-6, abs=1e-7
        )
        assert ours(grid, set(pairs)) == got
    city = torch.tensor([[4.0, 2.0], [2.0, 1.0]])  # New/Los x York/Angeles, p_i = p_j = (2/3, 1/3)
    assert ours(city, {(0, 0), (1, 1)}) == pytest.approx(4 / 9) == inconsistent_mass(city, {(0, 0), (1, 1)})
    for bad_grid, bad_pairs in [(city, [(2, 3)]), (city, [(-1, 0)]), (torch.zeros(2, 2), [(0, 0)])]:
        for fn in (ours, inconsistent_mass):
            with pytest.raises(ValueError):
                fn(bad_grid, bad_pairs)


# --- grading submissions ------------------------------------------------------------------------

PARTIAL = {
    # log(softmax(...)) instead of log_softmax: -inf for unlikely tokens under large logits
    AR: """
def ar_log_likelihood(logits, input_ids, attention_mask=None):
    if attention_mask is None:
        attention_mask = torch.ones_like(input_ids)
    p = torch.softmax(logits[:, :-1], dim=-1).gather(-1, input_ids[:, 1:, None]).squeeze(-1)
    return torch.where(attention_mask[:, 1:].bool(), torch.log(p), torch.zeros_like(p)).sum(-1)
""",
    # nothing masked gives the mean of nothing, NaN, instead of 0
    MLM: """
def masked_lm_loss(logits, original_ids, mask_indicator):
    m = mask_indicator.bool()
    logp = torch.log_softmax(logits, dim=-1).gather(-1, original_ids[..., None]).squeeze(-1)
    return -logp[m].mean()
""",
    # the product in probability space: right, until every candidate is very unlikely (0 / 0)
    PAIR: """
def independent_pair_joint(log_p_i, log_p_j, candidates_i, candidates_j):
    if not candidates_i or not candidates_j:
        raise ValueError("empty candidate list")
    grid = torch.outer(log_p_i[candidates_i].exp(), log_p_j[candidates_j].exp())
    return grid / grid.sum()


def inconsistent_mass(grid, consistent):
    ok = torch.zeros_like(grid, dtype=torch.bool)
    for r, c in consistent:
        if not (0 <= r < grid.shape[0] and 0 <= c < grid.shape[1]):
            raise ValueError("pair outside the grid")
        ok[r, c] = True
    if float(grid.sum()) <= 0:
        raise ValueError("empty grid")
    return float(grid[~ok].sum() / grid.sum())
""",
}
PARTIAL_FAILS = {"ar-edges", "mlm-small", "mlm-edges", "pair-edges"}

REWRITTEN = {
    AR: '''
import torch.nn.functional as F

def ar_log_likelihood(logits, input_ids, attention_mask=None):
    """One time step at a time."""
    batch, seq, _ = logits.shape
    mask = torch.ones(batch, seq) if attention_mask is None else attention_mask
    total = torch.zeros(batch, dtype=logits.dtype)
    rows = torch.arange(batch)
    for t in range(1, seq):
        step = F.log_softmax(logits[:, t - 1], dim=-1)[rows, input_ids[:, t]]
        total = total + torch.where(mask[:, t] != 0, step, torch.zeros_like(step))
    return total
''',
    MLM: """
def masked_lm_loss(logits, original_ids, mask_indicator):
    m = mask_indicator.reshape(-1) != 0
    if not bool(m.any()):
        return logits.new_zeros(())  # nothing masked: 0
    z = logits.reshape(-1, logits.shape[-1])[m]
    y = original_ids.reshape(-1)[m]
    nll = torch.logsumexp(z, dim=-1) - z[torch.arange(len(y)), y]
    return nll.mean()
""",
    PAIR: '''
def independent_pair_joint(log_p_i, log_p_j, candidates_i, candidates_j):
    """Each marginal renormalised over its candidates, then their outer product: the same grid."""
    if len(candidates_i) * len(candidates_j) == 0:
        raise ValueError("no candidates")
    q_i = torch.softmax(log_p_i[list(candidates_i)], 0)
    q_j = torch.softmax(log_p_j[list(candidates_j)], 0)
    return q_i[:, None] * q_j[None, :]


def inconsistent_mass(grid, consistent):
    rows, cols = grid.shape
    pairs = {(int(r), int(c)) for r, c in consistent}
    if any(not (0 <= r < rows and 0 <= c < cols) for r, c in pairs):
        raise ValueError(f"pairs must index a {rows} x {cols} grid")
    total = float(grid.double().sum())
    if total <= 0:
        raise ValueError("no mass")
    return (total - sum(float(grid[r, c]) for r, c in pairs)) / total
''',
}


def _lookup_ar() -> str:
    """A student who printed the visible check's results and returns them from a table (keyed
    by the inputs), and zeros for every other input."""
    ref = reference()["ar_log_likelihood"]
    seen = {}

    def recording(logits, input_ids, attention_mask=None):
        out = ref(logits, input_ids, attention_mask)
        seen[_key(logits, input_ids, attention_mask)] = out.tolist()
        return out

    check = next(
        c
        for c in tagged_cells(json.loads(SOLUTION.read_text()), "check")
        if c["metadata"]["course"]["id"] == "ar-small"
    )
    ns = {**reference(), "ar_log_likelihood": recording}
    exec(compile(cell_source(check), "<ar-small>", "exec"), ns)
    assert len(seen) >= 5
    return f"""
_SEEN = {seen!r}


def _key(logits, input_ids, attention_mask):
    mask = None if attention_mask is None else attention_mask.tolist()
    return repr((tuple(logits.shape), round(float(logits.double().sum()), 3), input_ids.tolist(), mask))


def ar_log_likelihood(logits, input_ids, attention_mask=None):
    key = _key(logits, input_ids, attention_mask)
    if key in _SEEN:
        return torch.tensor(_SEEN[key], dtype=logits.dtype)
    return torch.zeros(logits.shape[0], dtype=logits.dtype)
"""


def _key(logits, input_ids, attention_mask):
    mask = None if attention_mask is None else attention_mask.tolist()
    return repr((tuple(logits.shape), round(float(logits.double().sum()), 3), input_ids.tolist(), mask))


def _copied_expected_mlm() -> str:
    """A student who unpacks the expected values shipped in the released visible check and
    answers each recorded call from them (the grader's digest of the arguments, written out
    again without course_lib), and a constant for every other input."""
    ex = json.loads(EXERCISE.read_text())
    cell = next(c for c in tagged_cells(ex, "check") if c["metadata"]["course"]["id"] == "mlm-small")
    blob = "".join(re.findall(r"    '([A-Za-z0-9+/=]*)'\n", cell_source(cell) + "\n"))
    assert len(blob) > 100
    return f"""
import base64
import hashlib
import json
import zlib

_CALLS = json.loads(zlib.decompress(base64.b64decode({blob!r})))["calls"]


def _encode(t):
    raw = bytes(t.detach().contiguous().reshape(-1).view(torch.uint8).tolist())
    return {{"t": "tensor", "dtype": str(t.dtype).replace("torch.", ""), "shape": list(t.shape),
            "data": base64.b64encode(raw).decode("ascii")}}


def masked_lm_loss(logits, original_ids, mask_indicator):
    args = [_encode(logits), _encode(original_ids), _encode(mask_indicator)]
    text = json.dumps([args, []], sort_keys=True, separators=(",", ":"))
    entry = _CALLS.get(hashlib.sha256(text.encode()).hexdigest()[:24])
    if entry is None:
        return torch.tensor(1.0, dtype=logits.dtype)
    if "raises" in entry:
        raise ValueError("nothing masked")
    value = entry["value"]
    data = bytearray(base64.b64decode(value["data"]))
    return torch.frombuffer(data, dtype=getattr(torch, value["dtype"])).reshape(value["shape"]).clone()
"""


GAMING = {
    # hard-codes the visible check's results: nothing (a visible point needs a working function)
    "ar_lookup": ({AR: _lookup_ar()}, set()),
    # reads the expected values packed into the released visible check: nothing, likewise
    "mlm_copied_expected": ({MLM: _copied_expected_mlm()}, set()),
    # constants: nothing
    "constants": (
        {
            AR: """
def ar_log_likelihood(logits, input_ids, attention_mask=None):
    return torch.zeros(logits.shape[0], dtype=logits.dtype)
""",
            MLM: """
def masked_lm_loss(logits, original_ids, mask_indicator):
    return torch.tensor(math.log(logits.shape[-1]), dtype=logits.dtype)  # the uniform guess
""",
            PAIR: """
def independent_pair_joint(log_p_i, log_p_j, candidates_i, candidates_j):
    return torch.full((len(candidates_i), len(candidates_j)), 1.0 / (len(candidates_i) * len(candidates_j)))


def inconsistent_mass(grid, consistent):
    return 0.5
""",
        },
        set(),
    ),
    # right, but with the loss functions the assignment turns off: nothing
    "cross_entropy": (
        {
            AR: """
import torch.nn.functional as F

def ar_log_likelihood(logits, input_ids, attention_mask=None):
    mask = torch.ones_like(input_ids) if attention_mask is None else attention_mask.long()
    labels = input_ids[:, 1:].masked_fill(mask[:, 1:] == 0, -100)
    nll = F.cross_entropy(logits[:, :-1].transpose(1, 2), labels, ignore_index=-100, reduction="none")
    return -nll.sum(-1)
""",
            MLM: """
import torch.nn.functional as F

def masked_lm_loss(logits, original_ids, mask_indicator):
    m = mask_indicator.bool()
    if not bool(m.any()):
        raise ValueError("no position is masked")
    return F.cross_entropy(logits[m], original_ids[m])
""",
        },
        set(),
    ),
    # the tempting mistakes: padding counted in the chain rule (nothing), the product not renormalised
    # over the candidate pairs (only the share of the mass, written right, passes)
    "ar_counts_padding": (
        {
            AR: """
def ar_log_likelihood(logits, input_ids, attention_mask=None):
    logp = torch.log_softmax(logits[:, :-1], dim=-1)
    return logp.gather(-1, input_ids[:, 1:, None]).squeeze(-1).sum(-1)
"""
        },
        set(),
    ),
    "pair_not_renormalised": (
        {PAIR: PARTIAL[PAIR].replace("return grid / grid.sum()", "return grid")},
        {"pair-mass-random"},
    ),
}


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    return CHAPTER.grade_cases(tmp_path_factory, PARTIAL, REWRITTEN, {PAIR: REWRITTEN[PAIR]}, GAMING)


EXPECTED = [
    ("solution", 10, set()),
    ("stub", 0, set(ALL_CHECKS)),
    ("partial", 6, PARTIAL_FAILS),
    ("rewritten", 10, set()),
    ("one_exercise", 4, set(ALL_CHECKS) - set(CHECKS["pair-joint"])),
] + [(name, len(passing), set(ALL_CHECKS) - passing) for name, (_, passing) in GAMING.items()]


@pytest.mark.parametrize("name, points, failing", EXPECTED, ids=[e[0] for e in EXPECTED])
def test_exact_points(graded, name, points, failing):
    CHAPTER.assert_points(graded, name, points, failing, ALL_CHECKS, 10)


def test_gaming_gets_at_most_the_visible_points(graded):
    """A lookup table, the shipped expected values or constants earn no more than one check
    of an exercise: the hidden checks compare with the reference on inputs the submission has
    not seen; forbidden functions earn nothing."""
    for name in GAMING:
        _, rep, _ = graded[name]
        assert rep["points"] <= 1, name
    _, rep, _ = graded["cross_entropy"]
    assert all(
        "may not be used in this assignment" in c["message"]
        for c in rep["checks"]
        if c["exercise"] != "pair-joint"
    )
    for name in ("ar_lookup", "mlm_copied_expected", "constants"):
        for c in graded[name][1]["checks"]:  # hidden checks' messages show no expected values
            if c["hidden"]:
                assert "expected" not in c["message"], c["message"]


def test_visible_checks_give_the_grader_verdict_at_home(graded):
    CHAPTER.assert_home_verdicts(graded)
    # a forbidden function fails at home as in the grader (the released course-forbid cell)
    assert not CHAPTER.home_verdicts(answer_sources(graded["cross_entropy"][2]))["ar-small"]
    assert (
        torch.nn.functional.cross_entropy(torch.zeros(1, 2), torch.tensor([0])) > 0
    )  # and is back afterwards


# --- the rules: every alias of course_lib's (and other libraries') versions is turned off ----

MUST_FORBID = (
    "torch.nn.functional.nll_loss",
    "torch._C._nn.nll_loss_nd",
    "course_lib.models.bert.masked_lm_loss",
    "course_lib.analysis.inconsistent_mass",
)
COURSE_LIB_ROUTES = {  # name -> (answer cell, an answer that hands the job to a forbidden function, its visible check)
    "distill_masked_lm_loss": (
        "masked-lm-loss-answer",
        "import torch\nfrom course_lib.recipes.distill import masked_lm_loss as _mlm\n\ndef masked_lm_loss(logits, original_ids, mask_indicator):\n    return _mlm(logits, torch.where(mask_indicator.bool(), original_ids, -100))\n",
        "mlm-small",
    ),
}


(
    test_forbid_list_covers_every_alias_and_the_texts_follow_the_metadata,
    test_a_forbidden_route_fails_at_home_as_in_the_grader,
) = forbid_rule_tests(CHAPTER, MUST_FORBID, COURSE_LIB_ROUTES)
