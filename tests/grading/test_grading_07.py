"""Chapter 7's graded exercises (knowledge distillation): the solution notebook's format, its
release, agreement of the reference answers with course_lib.objectives.distillation, and
`course grade` on full, empty, partial, rewritten, gaming and mistaken submissions (exact
points), with the visible checks giving the same verdict at home as in the grader."""

from __future__ import annotations

import json
import re

import pytest
import torch
from grading_fixtures.chapters import Chapter, answer_sources, cell_source, forbid_rule_tests, tagged_cells

from course_lib.grading.format import load_assignment

CHAPTER = Chapter("07_distillation")
SOLUTION, EXERCISE = CHAPTER.solution, CHAPTER.exercise
reference = CHAPTER.reference  # the preamble and the reference answers, executed
KD, ATTN, LIMIT, TEMP = "kd-loss-answer", "attention-loss-answer", "kd-limit-answer", "temperature-answer"
CHECKS = {
    "kd-loss": ["kd-small", "kd-habits", "kd-random", "kd-gradient", "kd-teacher", "kd-large"],
    "attention-loss": ["attn-small", "attn-masked", "attn-no-mask"],
    "kd-limit": ["limit-small", "limit-random"],
    "temperature": ["temp-small", "temp-random"],
}
ALL_CHECKS = [c for cs in CHECKS.values() for c in cs]
# kd-habits (0) shows at home what kd-teacher and kd-large grade
WEIGHT = {"kd-habits": 0, "limit-random": 2, "temp-random": 2}
VISIBLE = ["kd-small", "kd-habits", "attn-small", "limit-small", "temp-small"]
FORBID = tuple(  # course_lib's own versions: the grader cannot import them, and at home they fail too
    f"course_lib.objectives.distillation.{name}"
    for name in (
        "kd_loss",
        "soft_cross_entropy",
        "distillation_loss",
        "softened",
        "attention_loss",
        "hidden_loss",
        "hint_loss",
        "uniform_layer_map",
    )
)


# --- format and release ----------------------------------------------------------------------


def test_solution_notebook_is_valid_and_released():
    a = load_assignment(SOLUTION)
    assert (
        a.name == "07_distillation" and a.title == "Chapter 7: knowledge distillation" and a.max_points == 14
    )
    assert [e.id for e in a.exercises] == list(CHECKS)
    assert [e.points for e in a.exercises] == [5, 3, 3, 3]
    assert [c.id for c in a.checks] == ALL_CHECKS
    assert [c.id for c in a.checks if not c.hidden] == VISIBLE and sum(c.hidden for c in a.checks) == 8
    # kd-habits is worth 0: it shows at home what kd-teacher and kd-large grade
    assert {c.id: c.points for c in a.checks if c.points != 1} == WEIGHT
    assert set(FORBID) <= set(a.forbid)
    assert [e.functions for e in a.exercises] == [
        ("kd_loss",),
        ("attention_loss",),
        ("kd_high_temperature_limit",),
        ("temperature_for_entropy",),
    ]
    CHAPTER.assert_released()
    ex = json.loads(EXERCISE.read_text())
    stubs = [cell_source(c) for c in tagged_cells(ex, "answer")]
    assert [s.count("    raise NotImplementedError(") for s in stubs] == [1, 1, 1, 1]
    assert not tagged_cells(ex, "hidden-check") and not tagged_cells(ex, "solution-only")
    assert "Instructor notes" not in EXERCISE.read_text()
    assert ex["metadata"]["course"]["forbid"] == list(a.forbid) and tagged_cells(ex, "course-forbid")
    # the choice about torch's kl_div is stated to the students
    assert "`torch.nn.functional.kl_div` is allowed" in EXERCISE.read_text()


def test_every_forbidden_name_exists_in_course_lib():
    """A misspelt name would turn nothing off: each one names a function of the module."""
    import course_lib.objectives.distillation as distillation

    for dotted in FORBID:
        assert callable(getattr(distillation, dotted.rsplit(".", 1)[1]))


# --- the reference answers agree with course_lib ---------------------------------------------


def test_reference_kd_loss_matches_course_lib():
    from course_lib.objectives import distillation

    ours = reference()["kd_loss"]
    g = torch.Generator().manual_seed(0)
    for shape in [(5, 7), (2, 3, 4), (1, 2), (4, 1, 6), (2, 2, 2, 3)]:
        for temperature in (0.5, 1.0, 2.0, 5.5):
            for dtype in (torch.float32, torch.float64):
                zs = (torch.randn(*shape, generator=g, dtype=dtype) * 3).requires_grad_()
                zt = torch.randn(*shape, generator=g, dtype=dtype) * 3
                got, want = ours(zs, zt, temperature), distillation.kd_loss(zs, zt, temperature)
                assert got.shape == () and got.dtype == dtype
                assert torch.allclose(got, want, rtol=1e-6, atol=1e-7)
                (g_ours,) = torch.autograd.grad(got, zs)
                (g_lib,) = torch.autograd.grad(want, zs)
                assert torch.allclose(g_ours, g_lib, rtol=1e-6, atol=1e-8)
                # the gradient kd-gradient expects: T (p_s - p_t) / rows
                rows = zs.numel() // shape[-1]
                by_formula = (
                    temperature
                    * (torch.softmax(zs / temperature, -1) - torch.softmax(zt / temperature, -1))
                    / rows
                )
                assert torch.allclose(g_ours, by_formula.detach(), rtol=1e-5, atol=1e-7)
    teacher = torch.randn(3, 4, requires_grad=True)
    assert not ours(torch.randn(3, 4), teacher, 2.0).requires_grad
    big_s, big_t = torch.randn(4, 10, generator=g) * 1000, torch.randn(4, 10, generator=g) * 1000
    big = ours(big_s, big_t, 1.0)
    assert torch.isfinite(big) and torch.allclose(big, distillation.kd_loss(big_s, big_t, 1.0), rtol=1e-6)
    naive = (
        (torch.softmax(big_t, -1) * (torch.softmax(big_t, -1).log() - torch.softmax(big_s, -1).log()))
        .sum(-1)
        .mean()
    )
    assert not torch.isfinite(naive)  # what kd-large catches


def test_reference_attention_loss_matches_course_lib():
    from course_lib.objectives.distillation import attention_loss

    ours = reference()["attention_loss"]
    g = torch.Generator().manual_seed(1)
    for _ in range(20):
        batch, heads, seq = (
            int(torch.randint(1, 5, (), generator=g)),
            int(torch.randint(1, 4, (), generator=g)),
            int(torch.randint(1, 9, (), generator=g)),
        )
        s, t = (
            torch.randn(batch, heads, seq, seq, generator=g),
            torch.randn(batch, heads, seq, seq, generator=g),
        )
        mask = (torch.rand(batch, seq, generator=g) < 0.6).long()
        mask[0, 0] = 1
        t = t.masked_fill(~mask.bool()[:, None, None, :], -10000.0)
        for m in (None, mask, mask.bool(), torch.ones(batch, seq, dtype=torch.long)):
            assert torch.allclose(ours(s, t, m), attention_loss(s, t, m), rtol=1e-6, atol=1e-6)
    assert (
        float(ours(s, t, torch.zeros(batch, seq, dtype=torch.long)))
        == 0.0
        == float(attention_loss(s, t, torch.zeros(batch, seq)))
    )


def test_reference_limit_matches_course_lib_kd_loss():
    """Exercise 3's closed form is the limit of course_lib's kd_loss: at T = 10, 100, 1000, 10000
    (float64) the relative gap shrinks about tenfold per step, like 1/T, for logits that are
    not zero-meaned, of 2-d and 3-d shape; and it is symmetric and shift-invariant per row."""
    from course_lib.objectives.distillation import kd_loss

    ours = reference()["kd_high_temperature_limit"]
    g = torch.Generator().manual_seed(0)
    for shape, scale in [((4, 3), 1.0), ((2, 5, 17), 3.0), ((6, 50), 0.3), ((1, 2), 2.0)]:
        s = torch.randn(shape, generator=g, dtype=torch.float64) * scale + 5.0
        t = torch.randn(shape, generator=g, dtype=torch.float64) * scale
        limit = float(ours(s, t))
        gaps = [abs(float(kd_loss(s, t, T)) - limit) / limit for T in (10.0, 100.0, 1000.0, 10000.0)]
        assert gaps[-1] < 1e-3 and gaps[-1] < gaps[-2] / 5, (shape, gaps)
        assert torch.isclose(ours(t, s), ours(s, t)) and torch.isclose(ours(s + 7.0, t), ours(s, t))
    one_class = torch.randn(3, 1, generator=g, dtype=torch.float64)
    assert float(ours(one_class, -one_class)) == 0.0 == float(kd_loss(one_class, -one_class, 100.0))


# --- grading submissions ------------------------------------------------------------------------

KD_NO_T2 = """
def kd_loss(student_logits, teacher_logits, temperature=1.0):
    log_ps = torch.log_softmax(student_logits / temperature, dim=-1)
    log_pt = torch.log_softmax(teacher_logits.detach() / temperature, dim=-1)
    return (log_pt.exp() * (log_pt - log_ps)).sum(-1).mean()  # the T^2 factor forgotten
"""

ATTN_MASK_IGNORED = """
def attention_loss(student_scores, teacher_scores, attention_mask=None):
    return ((student_scores - teacher_scores.detach()) ** 2).mean()  # padding counted too
"""

LIMIT_NO_C = """
def kd_high_temperature_limit(student_logits, teacher_logits):
    d = teacher_logits - student_logits
    d = d - d.mean(dim=-1, keepdim=True)
    return 0.5 * (d * d).sum(-1).mean()  # the 1/C of the uniform distribution forgotten
"""

PARTIAL = {KD: KD_NO_T2, ATTN: ATTN_MASK_IGNORED, LIMIT: LIMIT_NO_C}
PARTIAL_FAILS = {
    "kd-small",
    "kd-random",
    "kd-gradient",
    "attn-small",
    "attn-masked",
    "limit-small",
    "limit-random",
}

REWRITTEN = {
    TEMP: '''
import math


def temperature_for_entropy(logits, entropy):
    """Bisection on T itself, the bracket grown tenfold, the entropy in nats from log-probabilities."""
    if logits.ndim != 1 or len(logits) < 2 or not torch.is_floating_point(logits):
        raise ValueError("a 1-d float tensor of logits")
    z = logits.to(torch.float64)
    ties = int((z == z.max()).sum())
    if ties == len(z) or entropy <= math.log(ties) or entropy >= math.log(len(z)):
        raise ValueError("no temperature gives this entropy")

    def h(t):
        logp = torch.log_softmax(z / t, 0)
        return -float(torch.dot(logp.exp(), logp))

    lo, hi = 1e-3, 1e3
    while h(lo) > entropy:
        lo /= 10
    while h(hi) < entropy:
        hi *= 10
    while hi - lo > 1e-12 * hi:
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if h(mid) < entropy else (lo, mid)
    return (lo + hi) / 2
''',
    KD: '''
import sys

import torch.nn.functional as F


def kd_loss(student_logits, teacher_logits, temperature=1.0):
    """torch's kl_div with log-probabilities on both sides, summed and divided by the rows."""
    classes = student_logits.shape[-1]
    with torch.no_grad():
        log_pt = F.log_softmax(teacher_logits.reshape(-1, classes) / temperature, dim=-1)
    log_ps = F.log_softmax(student_logits.reshape(-1, classes) / temperature, dim=-1)
    kl = F.kl_div(log_ps, log_pt, reduction="sum", log_target=True) / log_ps.shape[0]
    print("kd at T =", temperature, file=sys.stderr)
    return kl * temperature * temperature
''',
    ATTN: '''
def attention_loss(student_scores, teacher_scores, attention_mask=None):
    """The real pairs picked out one example at a time (masked_select), then one mean."""
    if attention_mask is None:
        return torch.nn.functional.mse_loss(student_scores, teacher_scores.detach())
    parts = []
    for b in range(student_scores.shape[0]):
        real = attention_mask[b] != 0
        pair = real[:, None] & real[None, :]
        s, t = student_scores[b], teacher_scores[b].detach()
        parts.append((s.masked_select(pair) - t.masked_select(pair)) ** 2)
    return torch.cat(parts).mean()
''',
    LIMIT: """
import torch.nn.functional as F


def kd_high_temperature_limit(student_logits, teacher_logits):
    # half the variance (over the classes) of the log-probability difference, averaged over the rows
    diff = F.log_softmax(teacher_logits, -1) - F.log_softmax(student_logits, -1)  # a shift per row: same variance
    return diff.var(dim=-1, correction=0).flatten().mean() / 2
""",
}


def _lookup_kd() -> str:
    """A student who printed the visible checks' results and returns them from a table (keyed by
    the inputs, with a zero times the student's logits so that the result requires grad when
    they do), and zero for every other input."""
    ref = reference()["kd_loss"]
    seen = {}

    def recording(student, teacher, temperature):
        out = ref(student, teacher, temperature)
        seen[repr((student.tolist(), teacher.tolist(), temperature))] = float(out.detach())
        return out

    sol = json.loads(SOLUTION.read_text())
    for check in tagged_cells(sol, "check"):
        if check["metadata"]["course"]["id"] in ("kd-small", "kd-habits"):
            ns = {**reference(), "kd_loss": recording}
            exec(compile(cell_source(check), "<kd check>", "exec"), ns)
    assert len(seen) >= 8
    return f"""
_SEEN = {seen!r}


def kd_loss(student_logits, teacher_logits, temperature=1.0):
    key = repr((student_logits.tolist(), teacher_logits.tolist(), temperature))
    value = _SEEN.get(key, 0.0)
    return torch.tensor(value, dtype=student_logits.dtype) + 0.0 * student_logits.sum()
"""


def _copied_expected_attention() -> str:
    """A student who unpacks the expected values shipped in the released visible check and
    answers each recorded call from them (the grader's digest of the arguments, written out
    again without course_lib), and zero for every other input."""
    ex = json.loads(EXERCISE.read_text())
    cell = next(c for c in tagged_cells(ex, "check") if c["metadata"]["course"]["id"] == "attn-small")
    blob = "".join(re.findall(r"    '([A-Za-z0-9+/=]*)'\n", cell_source(cell) + "\n"))
    assert len(blob) > 100
    return f"""
import base64
import hashlib
import json
import zlib

_CALLS = json.loads(zlib.decompress(base64.b64decode({blob!r})))["calls"]


def _encode(t):
    if t is None:
        return {{"t": "none"}}
    raw = bytes(t.detach().contiguous().reshape(-1).view(torch.uint8).tolist())
    return {{"t": "tensor", "dtype": str(t.dtype).replace("torch.", ""), "shape": list(t.shape),
            "data": base64.b64encode(raw).decode("ascii")}}


def attention_loss(*args):
    text = json.dumps([[_encode(a) for a in args], []], sort_keys=True, separators=(",", ":"))
    entry = _CALLS.get(hashlib.sha256(text.encode()).hexdigest()[:24])
    if entry is None:
        return torch.zeros((), dtype=args[0].dtype)
    value = entry["value"]
    data = bytearray(base64.b64decode(value["data"]))
    return torch.frombuffer(data, dtype=getattr(torch, value["dtype"])).reshape(value["shape"]).clone()
"""


GAMING = {
    # hard-codes the visible checks' results: nothing (a visible point needs a working function;
    # kd-habits passes, worth 0)
    "kd_lookup": ({KD: _lookup_kd()}, {"kd-habits"}),
    # reads the expected values packed into the released visible check: nothing, likewise
    "attention_copied_expected": ({ATTN: _copied_expected_attention()}, set()),
    # constants: nothing
    "constants": (
        {
            KD: """
def kd_loss(student_logits, teacher_logits, temperature=1.0):
    return torch.zeros(()) + 0.0 * student_logits.sum()
""",
            ATTN: """
def attention_loss(student_scores, teacher_scores, attention_mask=None):
    return torch.zeros(())
""",
            LIMIT: """
def kd_high_temperature_limit(student_logits, teacher_logits):
    return torch.zeros((), dtype=student_logits.dtype)
""",
        },
        set(),
    ),
    # course_lib's own functions: not importable in the grader, turned off at home: nothing
    "course_lib": (
        {
            KD: """
from course_lib.objectives.distillation import kd_loss as _library_kd


def kd_loss(student_logits, teacher_logits, temperature=1.0):
    return _library_kd(student_logits, teacher_logits, temperature)
""",
            ATTN: """
import course_lib.objectives.distillation as _distillation


def attention_loss(student_scores, teacher_scores, attention_mask=None):
    return _distillation.attention_loss(student_scores, teacher_scores, attention_mask)
""",
            LIMIT: """
def kd_high_temperature_limit(student_logits, teacher_logits):
    from course_lib.objectives.distillation import kd_loss as library_kd

    return library_kd(student_logits.double(), teacher_logits.double(), 1e5).to(student_logits.dtype)
""",
        },
        set(),
    ),
}

KD_CHECKS, ATTN_CHECKS = set(CHECKS["kd-loss"]), set(CHECKS["attention-loss"])
MISTAKES = {
    # no T^2: the value and the gradient are off by T^2 at every T != 1; the checks at T = 1
    # (a detached teacher, large logits) still pass: 2 of 5
    "kd_forgot_t2": ({KD: KD_NO_T2}, {"kd-habits", "kd-teacher", "kd-large"}),
    # KL(p_student || p_teacher): another loss, wrong everywhere: 0 of 5
    "kd_reversed": (
        {
            KD: """
def kd_loss(student_logits, teacher_logits, temperature=1.0):
    log_ps = torch.log_softmax(student_logits / temperature, dim=-1)
    log_pt = torch.log_softmax(teacher_logits.detach() / temperature, dim=-1)
    return temperature**2 * (log_ps.exp() * (log_ps - log_pt)).sum(-1).mean()
"""
        },
        set(),
    ),
    # log of softmax: right for moderate logits, nan at logits of size 1000: 4 of 5
    "kd_naive_log_softmax": (
        {
            KD: """
def kd_loss(student_logits, teacher_logits, temperature=1.0):
    ps = torch.softmax(student_logits / temperature, dim=-1)
    pt = torch.softmax(teacher_logits.detach() / temperature, dim=-1)
    return temperature**2 * (pt * (torch.log(pt) - torch.log(ps))).sum(-1).mean()
"""
        },
        KD_CHECKS - {"kd-large", "kd-habits"},
    ),
    # no .detach() of the teacher: right values, but the gradient reaches the teacher (the
    # result's requires_grad flag crosses the wire): 4 of 5
    "kd_teacher_not_detached": (
        {
            KD: """
def kd_loss(student_logits, teacher_logits, temperature=1.0):
    log_ps = torch.log_softmax(student_logits / temperature, dim=-1)
    log_pt = torch.log_softmax(teacher_logits / temperature, dim=-1)
    return temperature**2 * (log_pt.exp() * (log_pt - log_ps)).sum(-1).mean()
"""
        },
        KD_CHECKS - {"kd-teacher", "kd-habits"},
    ),
    # "detaches" the caller's teacher in place: the result is right, the caller's teacher no
    # longer requires grad (the flag of an argument changed in place comes back): 4 of 5
    "kd_teacher_detached_in_place": (
        {
            KD: """
def kd_loss(student_logits, teacher_logits, temperature=1.0):
    teacher_logits.detach_()
    log_ps = torch.log_softmax(student_logits / temperature, dim=-1)
    log_pt = torch.log_softmax(teacher_logits / temperature, dim=-1)
    return temperature**2 * (log_pt.exp() * (log_pt - log_ps)).sum(-1).mean()
"""
        },
        KD_CHECKS - {"kd-teacher"},
    ),
    # the loss as a new tensor from .item(): right values, no gradient for the student: 4 of 5
    "kd_student_detached": (
        {
            KD: """
def kd_loss(student_logits, teacher_logits, temperature=1.0):
    log_ps = torch.log_softmax(student_logits / temperature, dim=-1)
    log_pt = torch.log_softmax(teacher_logits.detach() / temperature, dim=-1)
    loss = temperature**2 * (log_pt.exp() * (log_pt - log_ps)).sum(-1).mean()
    return torch.tensor(loss.item(), dtype=student_logits.dtype)
"""
        },
        KD_CHECKS - {"kd-gradient", "kd-habits"},
    ),
    # kl_div's "batchmean" divides by the first dimension only: right for [rows, classes], wrong
    # for [batch, seq, classes] (kd-small and kd-random have such logits): 3 of 5
    "kd_kl_div_batchmean": (
        {
            KD: """
import torch.nn.functional as F


def kd_loss(student_logits, teacher_logits, temperature=1.0):
    log_ps = F.log_softmax(student_logits / temperature, dim=-1)
    log_pt = F.log_softmax(teacher_logits.detach() / temperature, dim=-1)
    return F.kl_div(log_ps, log_pt, reduction="batchmean", log_target=True) * temperature**2
"""
        },
        KD_CHECKS - {"kd-small", "kd-random"},
    ),
    # the mean over every score, padding included: only the unmasked check passes: 1 of 3
    "attn_mask_ignored": ({ATTN: ATTN_MASK_IGNORED}, {"attn-no-mask"}),
    # padded keys left out, padded queries' rows counted: 1 of 3
    "attn_keys_only": (
        {
            ATTN: """
def attention_loss(student_scores, teacher_scores, attention_mask=None):
    squared = (student_scores - teacher_scores.detach()) ** 2
    if attention_mask is None:
        return squared.mean()
    keys = attention_mask.bool()[:, None, None, :].expand_as(squared)
    return squared[keys].mean()
"""
        },
        {"attn-no-mask"},
    ),
    # one mean per example, then the mean of those: short examples weigh too much: 1 of 3
    "attn_per_example": (
        {
            ATTN: """
def attention_loss(student_scores, teacher_scores, attention_mask=None):
    squared = (student_scores - teacher_scores.detach()) ** 2
    if attention_mask is None:
        return squared.mean()
    real = attention_mask.bool()
    pairs = (real[:, None, :, None] & real[:, None, None, :]).expand_as(squared)
    per_example = (squared * pairs).sum((1, 2, 3)) / pairs.sum((1, 2, 3))
    return per_example.mean()
"""
        },
        {"attn-no-mask"},
    ),
    # the padding multiplied by a 0/1 mask: inf * 0 = nan when padded scores are huge: 2 of 3
    "attn_mask_multiplied": (
        {
            ATTN: """
def attention_loss(student_scores, teacher_scores, attention_mask=None):
    squared = (student_scores - teacher_scores.detach()) ** 2
    if attention_mask is None:
        return squared.mean()
    real = attention_mask.float()
    pairs = (real[:, None, :, None] * real[:, None, None, :]).expand_as(squared)
    return (squared * pairs).sum() / pairs.sum()
"""
        },
        {"attn-small", "attn-no-mask"},
    ),
    # Hinton's 1/2 (z - v)^2 without centring (he assumes zero-meaned logits): 0 of 3
    "limit_uncentred": (
        {
            LIMIT: """
def kd_high_temperature_limit(student_logits, teacher_logits):
    d = teacher_logits - student_logits
    return 0.5 * (d * d).mean(dim=-1).mean()
"""
        },
        set(),
    ),
    # the 1/C of the uniform distribution forgotten: 0 of 3
    "limit_no_1_over_c": ({LIMIT: LIMIT_NO_C}, set()),
    # measured instead of derived: kd_loss at T = 1e5 in float64 (at best 1e-6 relative): 0 of 3
    "limit_numeric_large_t": (
        {
            LIMIT: """
def kd_high_temperature_limit(student_logits, teacher_logits):
    t = 1e5
    log_ps = torch.log_softmax(student_logits.double() / t, dim=-1)
    log_pt = torch.log_softmax(teacher_logits.double() / t, dim=-1)
    return (t**2 * (log_pt.exp() * (log_pt - log_ps)).sum(-1).mean()).to(student_logits.dtype)
"""
        },
        set(),
    ),
}


TEMP_MISTAKES = {  # on the stub: the other exercises score nothing
    # the right bisection, but no ValueError for targets no temperature reaches: 0 of 3
    "temp_never_raises": (
        {
            TEMP: """
import math


def temperature_for_entropy(logits, entropy):
    z = logits.double()

    def h(t):
        logp = torch.log_softmax(z / t, 0)
        return float(-(logp.exp() * logp).sum())

    lo, hi = 1e-6, 1e6
    for _ in range(200):
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if h(mid) < entropy else (lo, mid)
    return math.sqrt(lo * hi)
"""
        },
        set(),
    ),
    # the entropy as the log of a float32 softmax: -inf * 0 = nan once the logits are large: 0 of 3
    "temp_log_of_softmax": (
        {
            TEMP: """
import math


def temperature_for_entropy(logits, entropy):
    top = logits.max()
    ties = int((logits == top).sum())
    if ties == len(logits) or not math.log(ties) < entropy < math.log(len(logits)):
        raise ValueError("unreachable")

    def h(t):
        p = torch.softmax(logits.float() / t, 0)
        return float(-(p * torch.log(p)).sum())

    lo, hi = 1e-6, 1e6
    for _ in range(200):
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if h(mid) < entropy else (lo, mid)
    return math.sqrt(lo * hi)
"""
        },
        set(),
    ),
}


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    return CHAPTER.grade_cases(
        tmp_path_factory, PARTIAL, REWRITTEN, {ATTN: REWRITTEN[ATTN]}, {**GAMING, **MISTAKES, **TEMP_MISTAKES}
    )


EXPECTED = [
    ("solution", 14, set()),
    ("stub", 0, set(ALL_CHECKS)),
    ("partial", 6, PARTIAL_FAILS),
    ("rewritten", 14, set()),
    ("one_exercise", 3, set(ALL_CHECKS) - ATTN_CHECKS),
] + [
    (name, sum(WEIGHT.get(c, 1) for c in passing), set(ALL_CHECKS) - passing)
    for name, (_, passing) in {**GAMING, **MISTAKES, **TEMP_MISTAKES}.items()
]


@pytest.mark.parametrize("name, points, failing", EXPECTED, ids=[e[0] for e in EXPECTED])
def test_exact_points(graded, name, points, failing):
    CHAPTER.assert_points(graded, name, points, failing, ALL_CHECKS, 14)


def test_the_point_table():
    """The points each kind of submission gets, written out (test_exact_points checks them)."""
    table = {name: points for name, points, _ in EXPECTED}
    assert table == {
        "solution": 14,
        "stub": 0,
        "partial": 6,
        "rewritten": 14,
        "one_exercise": 3,
        "kd_lookup": 0,
        "attention_copied_expected": 0,
        "constants": 0,
        "course_lib": 0,
        "kd_forgot_t2": 2,
        "kd_reversed": 0,
        "kd_naive_log_softmax": 4,
        "kd_teacher_not_detached": 4,
        "kd_teacher_detached_in_place": 4,
        "kd_student_detached": 4,
        "kd_kl_div_batchmean": 3,
        "attn_mask_ignored": 1,
        "attn_keys_only": 1,
        "attn_per_example": 1,
        "attn_mask_multiplied": 2,
        "limit_uncentred": 0,
        "limit_no_1_over_c": 0,
        "limit_numeric_large_t": 0,
        "temp_never_raises": 0,
        "temp_log_of_softmax": 0,
    }


def test_gaming_gets_at_most_the_visible_points(graded):
    """A lookup table, the shipped expected values, hard-coded answers, constants or course_lib's
    own functions earn no more than the visible check of an exercise: the hidden checks compare
    with the reference on inputs the submission has not seen, and course_lib cannot be imported
    by answers."""
    for name in GAMING:
        _, rep, _ = graded[name]
        assert rep["points"] <= 1, name
    statuses = {a["cell"]: a["status"] for a in graded["course_lib"][1]["answers"]}
    assert "course_lib" in statuses[KD] and "course_lib" in statuses[ATTN]
    for name in ("kd_lookup", "attention_copied_expected", "constants"):
        for c in graded[name][1]["checks"]:  # hidden checks' messages show no expected values
            if c["hidden"]:
                assert "expected" not in c["message"], c["message"]


def test_visible_checks_give_the_grader_verdict_at_home(graded):
    CHAPTER.assert_home_verdicts(graded)
    # course_lib's own functions fail at home as in the grader (the released course-forbid cell)
    home = CHAPTER.home_verdicts(answer_sources(graded["course_lib"][2]))
    assert not home["kd-small"] and not home["attn-small"] and not home["limit-small"]
    from course_lib.objectives.distillation import kd_loss, uniform_layer_map  # and are back afterwards

    assert uniform_layer_map(2, 4) == [2, 4] and float(kd_loss(torch.zeros(1, 2), torch.zeros(1, 2))) == 0.0


def test_failures_are_explained(graded):
    """The feedback says why: the teacher's gradient, the student's missing gradient, the nan
    of a naive log of softmax, the in-place detach, the floats of the layer map."""

    def message(name, check):
        return {c["id"]: c["message"] for c in graded[name][1]["checks"]}[check]

    for check in ("kd-teacher", "kd-habits"):
        assert "detach them (.detach())" in message("kd_teacher_not_detached", check)
    assert "detached the caller's teacher logits in place" in message(
        "kd_teacher_detached_in_place", "kd-teacher"
    )
    for check in ("kd-gradient", "kd-habits"):
        assert "carries no gradient to the student's logits" in message("kd_student_detached", check)
    for check in ("kd-large", "kd-habits"):
        assert "NaN" in message("kd_naive_log_softmax", check)
    # the limit: the visible check names the wrong value; the hidden one says what differs, not the value
    for name in ("limit_uncentred", "limit_no_1_over_c", "limit_numeric_large_t"):
        assert "wrong values" in message(name, "limit-small")
        assert "wrong values" in message(name, "limit-random") and "expected" not in message(
            name, "limit-random"
        )
    assert "wrong values" in message("kd_forgot_t2", "kd-gradient")


# --- the rules: every alias of course_lib's (and other libraries') versions is turned off ----

MUST_FORBID = (
    "course_lib.objectives.distillation.kd_loss",
    "course_lib.recipes.distill.kd_loss",
    "course_lib.widgets.temperature.softened",
)
COURSE_LIB_ROUTES = {  # name -> (answer cell, an answer that hands the job to a forbidden function, its visible check)
    "recipes_kd_loss": (
        "kd-loss-answer",
        "from course_lib.recipes.distill import kd_loss as _kd\n\ndef kd_loss(student_logits, teacher_logits, temperature=1.0):\n    return _kd(student_logits, teacher_logits, temperature)\n",
        "kd-small",
    ),
}


(
    test_forbid_list_covers_every_alias_and_the_texts_follow_the_metadata,
    test_a_forbidden_route_fails_at_home_as_in_the_grader,
) = forbid_rule_tests(CHAPTER, MUST_FORBID, COURSE_LIB_ROUTES)
