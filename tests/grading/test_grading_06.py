"""Chapter 6's graded exercises (XLNet and Transformer-XL): the solution notebook's format, its
release, agreement of the reference answers with course_lib, and `course grade` on full,
empty, partial, rewritten, gaming and mistaken submissions (exact points), with the visible
checks giving the same verdict at home as in the grader."""

from __future__ import annotations

import json
import re

import pytest
import torch
from grading_fixtures.chapters import Chapter, answer_sources, cell_source, forbid_rule_tests, tagged_cells

from course_lib.grading.format import load_assignment

CHAPTER = Chapter("06_xlnet")
SOLUTION, EXERCISE = CHAPTER.solution, CHAPTER.exercise
reference = CHAPTER.reference  # the preamble and the reference answers, executed
PERM, SHIFT, MEM, REACH = "perm-mask-answer", "rel-shift-answer", "memory-answer", "reach-answer"
CHECKS = {
    "perm-mask": ["perm-small", "perm-random", "perm-invariants"],
    "rel-shift": ["shift-small", "shift-memory-random", "shift-no-memory"],
    "memory": ["memory-small", "memory-stream", "memory-short", "memory-inputs"],
    "reach": ["reach-small", "reach-random"],
}
ALL_CHECKS = [c for cs in CHECKS.values() for c in cs]
VISIBLE = ["perm-small", "shift-small", "memory-small", "reach-small"]
FORBID = (  # course_lib's own versions: the grader cannot import them, and at home they fail too
    "course_lib.objectives.permutation.permutation_masks",
    "course_lib.objectives.permutation.order_ranks",
    "course_lib.models.xlnet.rel_shift",
)


# --- format and release ----------------------------------------------------------------------


def test_solution_notebook_is_valid_and_released():
    a = load_assignment(SOLUTION)
    assert a.name == "06_xlnet" and a.title == "Chapter 6: XLNet and Transformer-XL" and a.max_points == 11
    assert [e.id for e in a.exercises] == list(CHECKS)
    assert [e.points for e in a.exercises] == [3, 3, 2, 3]
    assert [c.id for c in a.checks] == ALL_CHECKS
    assert [c.id for c in a.checks if not c.hidden] == VISIBLE and sum(c.hidden for c in a.checks) == 8
    # exercise 3 (three bugs in three lines) is worth 2: memory-small shows every rule for 0 points
    assert {c.id: c.points for c in a.checks if c.points != 1} == {
        "reach-random": 2,
        "memory-small": 0,
        "memory-stream": 0,
    }
    assert set(FORBID) <= set(a.forbid)
    assert [e.functions for e in a.exercises] == [
        ("perm_mask_from_order",),
        ("rel_shift",),
        ("update_memory",),
        ("farthest_context",),
    ]
    CHAPTER.assert_released()
    ex = json.loads(EXERCISE.read_text())
    stubs = [cell_source(c) for c in tagged_cells(ex, "answer")]
    assert [s.count("    raise NotImplementedError(") for s in stubs] == [1, 1, 1, 1]
    assert not tagged_cells(ex, "hidden-check") and not tagged_cells(ex, "solution-only")
    assert "Instructor notes" not in EXERCISE.read_text()
    assert ex["metadata"]["course"]["forbid"] == list(a.forbid) and tagged_cells(ex, "course-forbid")


# --- the reference answers agree with course_lib ---------------------------------------------


def test_reference_perm_mask_matches_permutation_masks():
    from course_lib.objectives.permutation import order_context, permutation_masks, sample_orders

    ours = reference()["perm_mask_from_order"]
    g = torch.Generator().manual_seed(0)
    for lengths in ([5, 3, 0, 1, 5], [1], [12, 7, 12, 2], [0, 3]):
        order = sample_orders(torch.tensor(lengths), g)
        got = ours(order)
        assert got.dtype == torch.float32 and got.shape == (len(lengths), order.shape[1], order.shape[1])
        assert torch.equal(got, permutation_masks(order).perm_mask)
    for _ in range(30):  # padding anywhere (an attention mask), rows without any real token
        mask = (torch.rand(4, 9, generator=g) < 0.6).long()
        order = sample_orders(mask, g)
        assert torch.equal(ours(order), permutation_masks(order).perm_mask)
    paper = [2, 1, 3, 0]  # 3 -> 2 -> 4 -> 1: each row sees the order's context of its position
    grid = ours(torch.tensor([paper]))[0]
    for position in range(4):
        assert sorted(torch.nonzero(grid[position] == 0).flatten().tolist()) == sorted(
            order_context(paper, position)
        )


def test_reference_perm_mask_gives_the_models_query_and_content_masks():
    """Fed to XLNetModel.attention_masks (with the padding as attention_mask and a memory),
    the mask is the query stream's visibility; the content stream adds each position itself."""
    from course_lib.models.xlnet import XLNetModel
    from course_lib.objectives.permutation import order_ranks, sample_orders

    ours = reference()["perm_mask_from_order"]
    g = torch.Generator().manual_seed(1)
    order = sample_orders((torch.rand(3, 7, generator=g) < 0.7).long(), g)
    perm = ours(order)
    real = (order_ranks(order) >= 0).long()
    ids = torch.zeros(3, 7, dtype=torch.long)
    for mem_len in (0, 2):
        content, query = XLNetModel.attention_masks(ids, mem_len, real, None, perm)
        assert bool(query[:, 0, :, :mem_len].all()) and bool(
            content[:, 0, :, :mem_len].all()
        )  # memory: visible
        assert torch.equal(query[:, 0, :, mem_len:], perm == 0)
        assert torch.equal(content[:, 0, :, mem_len:], (perm == 0) | torch.eye(7, dtype=torch.bool))


def test_reference_rel_shift_matches_course_lib():
    from course_lib.models.xlnet import rel_shift, relative_distances

    ours = reference()["rel_shift"]
    g = torch.Generator().manual_seed(2)
    for lead, q_len, mem_len in [
        ((), 1, 0),
        ((), 4, 0),
        ((2,), 3, 5),
        ((2, 3), 7, 2),
        ((1, 4), 16, 16),
        ((3,), 1, 9),
    ]:
        k_len = mem_len + q_len
        scores = torch.rand(*lead, q_len, k_len + q_len, generator=g)
        got = ours(scores, k_len)
        assert got.shape == (*lead, q_len, k_len) and torch.equal(got, rel_shift(scores, k_len))
        assert torch.equal(ours(scores.double(), k_len), rel_shift(scores.double(), k_len))
    for q_len, mem_len in [(3, 2), (5, 0), (1, 4)]:  # scores by distance -> the distance M + i - j by key
        k_len = mem_len + q_len
        shifted = ours(relative_distances(q_len, k_len).repeat(q_len, 1), k_len)
        i, j = torch.arange(q_len)[:, None], torch.arange(k_len)[None, :]
        assert torch.equal(shifted, (mem_len + i - j).float())


def test_reference_update_memory_matches_xlnet_mems():
    """Over three segments, the mems an XLNetModel (training mode, so its states carry a graph)
    returns are update_memory of each layer's input states, time-first and detached."""
    from course_lib.models.xlnet import XLNetConfig, XLNetModel

    ours = reference()["update_memory"]
    torch.manual_seed(0)
    config = XLNetConfig(vocab_size=50, d_model=16, n_layer=2, n_head=2, d_inner=32, dropout=0.0, mem_len=5)
    model = XLNetModel(config).train()
    mems = None
    for seq in (4, 3, 6):  # not yet full, full, a segment longer than the memory
        out = model(torch.randint(50, (2, seq)), mems=mems, use_mems=True, output_hidden_states=True)
        for layer in range(config.n_layer):
            states = out.hidden_states[layer].transpose(0, 1)  # the layer's input, time-first
            assert states.requires_grad
            expected = ours(None if mems is None else mems[layer], states, config.mem_len)
            assert expected.requires_grad is False and expected.grad_fn is None
            assert expected.shape == out.mems[layer].shape and torch.equal(expected, out.mems[layer])
        mems = out.mems
    assert [m.shape[0] for m in mems] == [5, 5]
    # mem_len = 0 is no memory, here and in course_lib's XLNet (Transformer-XL's meaning; Hugging
    # Face's XLNetModel keeps every state for 0, which course_lib.models.hf translates to None)
    h = torch.randn(3, 2, 16)
    assert ours(None, h, 0) is None and ours(mems[0], h, 0) is None
    model0 = XLNetModel(
        XLNetConfig(vocab_size=50, d_model=16, n_layer=1, n_head=2, d_inner=32, mem_len=0)
    ).eval()
    assert model0(torch.randint(50, (2, 3)), use_mems=True).mems is None


# --- grading submissions ------------------------------------------------------------------------

PARTIAL = {
    # the ranks by argsort: right for rows without padding, wrong once -1 entries sort first
    PERM: """
def perm_mask_from_order(order):
    ranks = order.argsort(dim=1)  # the step of each position (when every position is in the order)
    return (ranks[:, None, :] >= ranks[:, :, None]).float()
""",
    # the reshaping trick with the memory forgotten: q_len keys instead of k_len
    SHIFT: """
def rel_shift(scores, k_len):
    *lead, q_len, width = scores.shape
    x = scores.reshape(*lead, width, q_len)[..., 1:, :]
    return x.reshape(*lead, q_len, width - 1)[..., :q_len]
""",
    # x[-0:] is all of x: mem_len = 0 keeps everything instead of no memory
    MEM: """
def update_memory(mems, hidden, mem_len):
    states = hidden if mems is None else torch.cat([mems, hidden], dim=0)
    return states[-mem_len:].detach()
""",
}
PARTIAL_FAILS = {
    "perm-small",
    "perm-random",
    "shift-small",
    "shift-memory-random",
    "memory-small",
    "memory-short",
}

REWRITTEN = {
    REACH: """
def farthest_context(position, n_layers, seg_len, mem_len):
    args = {"position": (position, 0), "n_layers": (n_layers, 1), "seg_len": (seg_len, 1), "mem_len": (mem_len, 0)}
    for name, (value, low) in args.items():
        if type(value) is not int or value < low:
            raise ValueError(f"{name}: an int >= {low}")
    if n_layers == 0:
        return position
    first_key = max(0, position - position % seg_len - mem_len)  # the oldest memory state of the segment
    return farthest_context(first_key, n_layers - 1, seg_len, mem_len) if n_layers > 1 else first_key
""",
    PERM: '''
import sys


def perm_mask_from_order(order):
    """Ranks by a loop over the order, the mask by broadcasting."""
    batch, length = order.shape
    rank = torch.full((batch, length), length, dtype=torch.long)  # padding: "after everything"
    for b in range(batch):
        for t in range(length):
            p = int(order[b, t])
            if p >= 0:
                rank[b, p] = t
    padding = rank == length
    hidden = rank[:, None, :] >= rank[:, :, None]
    hidden = hidden | padding[:, :, None] | padding[:, None, :]
    print("mask of", tuple(order.shape), file=sys.stderr)
    return hidden.to(torch.float32)
''',
    SHIFT: '''
def rel_shift(scores, k_len):
    """One row at a time: accepted, the checks compare values."""
    q_len = scores.shape[-2]
    rows = [scores[..., i, q_len - i:q_len - i + k_len] for i in range(q_len)]
    return torch.stack(rows, dim=-2)
''',
    MEM: '''
def update_memory(mems, hidden, mem_len):
    """Hugging Face's Transformer-XL style: begin and end indices, under no_grad, a copy."""
    if not mem_len:
        return None
    with torch.no_grad():
        cat = hidden if mems is None else torch.cat((mems, hidden))
        end = cat.size(0)
        beg = max(0, end - mem_len)
        return cat[beg:end].clone()
''',
}


def _lookup_perm() -> str:
    """A student who printed the visible check's masks and returns them from a table (keyed by
    the order), and all-ones masks for every other order."""
    ref = reference()["perm_mask_from_order"]
    seen = {}

    def recording(order):
        out = ref(order)
        seen[repr(order.tolist())] = out.tolist()
        return out

    check = next(
        c
        for c in tagged_cells(json.loads(SOLUTION.read_text()), "check")
        if c["metadata"]["course"]["id"] == "perm-small"
    )
    ns = {**reference(), "perm_mask_from_order": recording}
    exec(compile(cell_source(check), "<perm-small>", "exec"), ns)
    assert len(seen) >= 5
    return f"""
_SEEN = {seen!r}


def perm_mask_from_order(order):
    key = repr(order.tolist())
    if key in _SEEN:
        return torch.tensor(_SEEN[key], dtype=torch.float32)
    return torch.ones(order.shape[0], order.shape[1], order.shape[1])
"""


def _copied_expected_shift() -> str:
    """A student who unpacks the expected values shipped in the released visible check and
    answers each recorded call from them (the grader's digest of the arguments, written out
    again without course_lib), and zeros for every other input."""
    ex = json.loads(EXERCISE.read_text())
    cell = next(c for c in tagged_cells(ex, "check") if c["metadata"]["course"]["id"] == "shift-small")
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


def rel_shift(scores, k_len):
    args = [_encode(scores), {{"t": "int", "v": int(k_len)}}]
    text = json.dumps([args, []], sort_keys=True, separators=(",", ":"))
    entry = _CALLS.get(hashlib.sha256(text.encode()).hexdigest()[:24])
    if entry is None:
        return torch.zeros(*scores.shape[:-1], k_len, dtype=scores.dtype)
    value = entry["value"]
    data = bytearray(base64.b64decode(value["data"]))
    return torch.frombuffer(data, dtype=getattr(torch, value["dtype"])).reshape(value["shape"]).clone()
"""


GAMING = {
    # hard-codes the visible check's results: nothing (a visible point needs a working function)
    "perm_lookup": ({PERM: _lookup_perm()}, set()),
    # reads the expected values packed into the released visible check: nothing, likewise
    "shift_copied_expected": ({SHIFT: _copied_expected_shift()}, set()),
    # constants: nothing
    "constants": (
        {
            PERM: """
def perm_mask_from_order(order):
    return torch.ones(order.shape[0], order.shape[1], order.shape[1])  # everything hidden
""",
            SHIFT: """
def rel_shift(scores, k_len):
    return torch.zeros(*scores.shape[:-1], k_len, dtype=scores.dtype)
""",
            MEM: """
def update_memory(mems, hidden, mem_len):
    return hidden.detach()
""",
        },
        set(),
    ),
    # course_lib's own functions: not importable in the grader, turned off at home: nothing
    "course_lib": (
        {
            PERM: """
from course_lib.objectives.permutation import permutation_masks


def perm_mask_from_order(order):
    return permutation_masks(order).perm_mask
""",
            SHIFT: """
from course_lib.models.xlnet import rel_shift as _library_shift


def rel_shift(scores, k_len):
    return _library_shift(scores, k_len)
""",
        },
        set(),
    ),
}

# the colleague's transcription that exercise 3 shows: three bugs (the batch axis, x[-0:], no
# detach), each of which costs a hidden point on its own; together: 0 of 2
COLLEAGUE = """
def update_memory(mems, hidden, mem_len):
    states = hidden if mems is None else torch.cat([mems, hidden], dim=1)
    return states[-mem_len:]
"""

MISTAKES = {
    "memory_colleague": ({MEM: COLLEAGUE}, set()),
    # one bug fixed at a time: each remaining one still costs its point
    "memory_colleague_axis_fixed": ({MEM: COLLEAGUE.replace("dim=1", "dim=0")}, {"memory-stream"}),
    "memory_colleague_axis_and_detach_fixed": (
        {MEM: COLLEAGUE.replace("dim=1", "dim=0").replace("[-mem_len:]", "[-mem_len:].detach()")},
        {"memory-stream", "memory-inputs"},
    ),
    # the batch axis concatenated (runs without error only when m == seq): both hidden points lost
    "memory_batch_axis": (
        {
            MEM: COLLEAGUE.replace(
                "return states[-mem_len:]", "return states[-mem_len:].detach() if mem_len else None"
            )
        },
        set(),
    ),
    # the content stream's mask (the diagonal cleared): a query would see the token it predicts
    "content_stream_mask": (
        {
            PERM: REWRITTEN[PERM].replace(
                "hidden = rank[:, None, :] >= rank[:, :, None]",
                "hidden = rank[:, None, :] > rank[:, :, None]",
            )
        },
        set(),
    ),
    # each row shifted by i instead of q_len - i
    "mirrored_shift": (
        {
            SHIFT: """
def rel_shift(scores, k_len):
    q_len = scores.shape[-2]
    rows, keys = torch.arange(q_len)[:, None], torch.arange(k_len)[None, :]
    return scores.gather(-1, (keys + rows).expand(*scores.shape[:-1], k_len))
"""
        },
        set(),
    ),
    # the first mem_len states kept instead of the last: right only while nothing has to leave,
    # and every check makes a state leave
    "memory_oldest_kept": (
        {
            MEM: """
def update_memory(mems, hidden, mem_len):
    if mem_len == 0:
        return None
    states = hidden if mems is None else torch.cat([mems, hidden], dim=0)
    return states[:mem_len].detach()
"""
        },
        set(),
    ),
    # a ring buffer written in place once the memory is full: right values, but the caller's
    # old memory changes under it
    "memory_in_place": (
        {
            MEM: """
def update_memory(mems, hidden, mem_len):
    if mem_len == 0:
        return None
    if mems is None or mems.shape[0] != mem_len or hidden.shape[0] >= mem_len:
        states = hidden if mems is None else torch.cat([mems, hidden], dim=0)
        return states[-mem_len:].detach()
    s = hidden.shape[0]
    with torch.no_grad():
        mems[:-s] = mems[s:].clone()
        mems[-s:] = hidden
    return mems
"""
        },
        {"memory-stream", "memory-short"},
    ),
    # no .detach(): right values, but the memory still requires grad. Tensors cross the wire
    # with their requires_grad flag, so the visible check and memory-inputs (which pass states
    # that require grad) fail it, at home as in the grader: memory-inputs' point (1 of 2) lost
    "memory_not_detached": (
        {
            MEM: """
def update_memory(mems, hidden, mem_len):
    if mem_len == 0:
        return None
    states = hidden if mems is None else torch.cat([mems, hidden], dim=0)
    return states[-mem_len:]
"""
        },
        {"memory-stream", "memory-short"},
    ),
    # "detaches" the caller's states in place: the memory does not require grad, but hidden no
    # longer does either (the sandbox reports the flag changed, the check's hidden changes too)
    "memory_detaches_hidden": (
        {
            MEM: """
def update_memory(mems, hidden, mem_len):
    if mem_len == 0:
        return None
    hidden.detach_()
    states = hidden if mems is None else torch.cat([mems, hidden], dim=0)
    return states[-mem_len:]
"""
        },
        {"memory-small", "memory-stream", "memory-short"},
    ),
}


def _checked(body):
    return (
        "def farthest_context(position, n_layers, seg_len, mem_len):\n"
        "    if min(position, n_layers - 1, seg_len - 1, mem_len) < 0 or not all(\n"
        "            type(v) is int for v in (position, n_layers, seg_len, mem_len)):\n"
        "        raise ValueError('bad arguments')\n" + body
    )


REACH_MISTAKES = {  # readings of "O(N x L)" that skip the reasoning about segments: 0 of 3 each
    # position - L * mem_len: each layer reaches mem_len further back from the query itself
    "reach_from_the_query": ({REACH: _checked("    return max(0, position - n_layers * mem_len)\n")}, set()),
    # the segment's start once, then L memories: forgets that each memory state sits in an older segment
    "reach_one_segment_start": (
        {REACH: _checked("    return max(0, position // seg_len * seg_len - n_layers * mem_len)\n")},
        set(),
    ),
    # one previous segment per layer, whatever mem_len
    "reach_segment_per_layer": (
        {
            REACH: _checked(
                "    return max(0, (position // seg_len - n_layers) * seg_len) if mem_len else position // seg_len * seg_len\n"
            )
        },
        set(),
    ),
}


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    return CHAPTER.grade_cases(
        tmp_path_factory, PARTIAL, REWRITTEN, {MEM: REWRITTEN[MEM]}, {**GAMING, **MISTAKES, **REACH_MISTAKES}
    )


WEIGHT = {"reach-random": 2, "memory-small": 0, "memory-stream": 0}
EXPECTED = [
    ("solution", 11, set()),
    ("stub", 0, set(ALL_CHECKS)),
    ("partial", 6, PARTIAL_FAILS),
    ("rewritten", 11, set()),
    ("one_exercise", 2, set(ALL_CHECKS) - set(CHECKS["memory"])),
] + [
    (name, sum(WEIGHT.get(c, 1) for c in passing), set(ALL_CHECKS) - passing)
    for name, (_, passing) in {**GAMING, **MISTAKES, **REACH_MISTAKES}.items()
]


@pytest.mark.parametrize("name, points, failing", EXPECTED, ids=[e[0] for e in EXPECTED])
def test_exact_points(graded, name, points, failing):
    CHAPTER.assert_points(graded, name, points, failing, ALL_CHECKS, 11)


def test_gaming_gets_at_most_the_visible_points(graded):
    """A lookup table, the shipped expected values, constants or course_lib's own functions
    earn no more than one check of an exercise: the hidden checks compare with the reference
    on inputs the submission has not seen, and course_lib cannot be imported by answers."""
    for name in GAMING:
        _, rep, _ = graded[name]
        assert rep["points"] <= 1, name
    course_lib_answers = {a["cell"]: a["status"] for a in graded["course_lib"][1]["answers"]}
    assert "course_lib" in course_lib_answers[PERM] and "course_lib" in course_lib_answers[SHIFT]
    for name in ("perm_lookup", "shift_copied_expected", "constants"):
        for c in graded[name][1]["checks"]:  # hidden checks' messages show no expected values
            if c["hidden"]:
                assert "expected" not in c["message"], c["message"]


def test_visible_checks_give_the_grader_verdict_at_home(graded):
    CHAPTER.assert_home_verdicts(graded)
    # course_lib's own functions fail at home as in the grader (the released course-forbid cell)
    home = CHAPTER.home_verdicts(answer_sources(graded["course_lib"][2]))
    assert not home["perm-small"] and not home["shift-small"]
    from course_lib.models.xlnet import rel_shift  # and are back afterwards

    assert rel_shift(torch.arange(4.0).reshape(1, 4), 3).tolist() == [[1.0, 2.0, 3.0]]


def test_a_memory_that_requires_grad_is_explained(graded):
    """The feedback says why the undetached memory fails (the visible check's own message and
    the hidden check's assert message), and why the in-place detach of hidden does."""
    checks = {c["id"]: c for c in graded["memory_not_detached"][1]["checks"]}
    for check in ("memory-small", "memory-inputs"):
        assert "the new memory requires grad: detach it (.detach())" in checks[check]["message"], checks[
            check
        ]["message"]
    message = {c["id"]: c["message"] for c in graded["memory_detaches_hidden"][1]["checks"]}["memory-inputs"]
    assert "detached hidden in place" in message, message


# --- the rules: every alias of course_lib's (and other libraries') versions is turned off ----

MUST_FORBID = (
    "course_lib.nn.relative.rel_shift",
    "course_lib.nn.rel_shift",
    "course_lib.nn.update_memory",
    "course_lib.models.xlnet.rel_shift",
    "transformers.models.xlnet.modeling_xlnet.XLNetRelativeAttention.rel_shift_bnij",
)
COURSE_LIB_ROUTES = {  # name -> (answer cell, an answer that hands the job to a forbidden function, its visible check)
    "relative_rel_shift": (
        "rel-shift-answer",
        "from course_lib.nn.relative import rel_shift as _shift\n\ndef rel_shift(scores, k_len):\n    return _shift(scores, k_len)\n",
        "shift-small",
    ),
    "nn_update_memory": (
        "memory-answer",
        "from course_lib.nn import update_memory as _update\n\ndef update_memory(mems, hidden, mem_len):\n    return _update(mems, hidden, mem_len, seq_dim=0)\n",
        "memory-small",
    ),
    "transformers_rel_shift_bnij": (
        "rel-shift-answer",
        "from transformers.models.xlnet.modeling_xlnet import XLNetRelativeAttention\n\ndef rel_shift(scores, k_len):\n    x = scores.reshape(-1, 1, *scores.shape[-2:])\n    return XLNetRelativeAttention.rel_shift_bnij(x, klen=k_len).reshape(*scores.shape[:-1], k_len)\n",
        "shift-small",
    ),
}


(
    test_forbid_list_covers_every_alias_and_the_texts_follow_the_metadata,
    test_a_forbidden_route_fails_at_home_as_in_the_grader,
) = forbid_rule_tests(CHAPTER, MUST_FORBID, COURSE_LIB_ROUTES)


def test_reference_reach_matches_a_transformer_xl():
    """Measured: change one token of a stream read segment by segment by course_lib's
    Transformer-XL (float64, memories fed back), and the first top-layer state at `position`
    that changes is the reference's answer (the exact-zero changes come from the masks)."""
    from course_lib.models.transfo_xl import TransfoXLConfig, TransfoXLModel

    ours = reference()["farthest_context"]
    for position, n_layers, seg_len, mem_len in [
        (23, 3, 4, 4),
        (23, 3, 4, 1),
        (9, 3, 3, 1),
        (13, 2, 5, 0),
        (17, 2, 4, 3),
    ]:
        torch.manual_seed(0)
        config = TransfoXLConfig(
            vocab_size=50, d_model=16, n_head=2, n_layer=n_layers, d_inner=32, mem_len=mem_len, dropout=0.0
        )
        model = TransfoXLModel(config).eval().double()
        n_segments = position // seg_len + 1
        ids = torch.randint(50, (1, seg_len * n_segments))

        def top(ids):
            mems, outs = None, []
            for s in range(n_segments):
                out = model(ids[:, s * seg_len : (s + 1) * seg_len], mems=mems)
                mems, outs = out.mems, outs + [out.last_hidden_state]
            return torch.cat(outs, 1)[0, position]

        with torch.no_grad():
            base = top(ids)
            changed = [
                q
                for q in range(position + 1)
                if not torch.equal(
                    top(ids.index_put((torch.tensor([0]), torch.tensor([q])), (ids[0, q] + 1) % 50)), base
                )
            ]
        assert min(changed) == ours(position, n_layers, seg_len, mem_len), (
            position,
            n_layers,
            seg_len,
            mem_len,
        )
