"""Chapter 4's graded exercises (ALBERT): the solution notebook's format, its release,
agreement of the reference answers with course_lib, and `course grade` on full, empty,
partial, rewritten and gaming submissions (exact points), with the visible checks giving
the same verdict at home as in the grader."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest
import torch
from grading_fixtures.chapters import Chapter, cell_source, forbid_rule_tests, tagged_cells

from course_lib.grading.format import load_assignment

CHAPTER = Chapter("04_albert")
SOLUTION, EXERCISE = CHAPTER.solution, CHAPTER.exercise
reference = CHAPTER.reference  # the preamble and the reference answers, executed
EMB, SCHED, COUNT, SOP = (
    "factorised-embeddings-answer",
    "layer-schedule-answer",
    "count-parameters-answer",
    "sentence-order-answer",
)
CHECKS = {
    "factorised-embeddings": ["factorised-small", "factorised-sizes", "factorised-width"],
    "layer-schedule": ["schedule-small", "schedule-random", "schedule-edges"],
    "count-parameters": ["count-base", "count-random", "count-published", "count-edges"],
    "sentence-order": ["sop-small", "sop-random", "sop-edges"],
}
ALL_CHECKS = [c for cs in CHECKS.values() for c in cs]
VISIBLE = ["factorised-small", "schedule-small", "count-base", "sop-small"]
MODES = ("all", "attention", "ffn", "none")
ALBERT_BASE = dict(V=30000, E=128, H=768, L=12, I=3072)


def _tiny_albert(**overrides):
    from course_lib.models.albert import AlbertConfig

    sizes = dict(
        vocab_size=61,
        embedding_size=6,
        hidden_size=16,
        num_hidden_layers=3,
        num_attention_heads=2,
        intermediate_size=24,
        max_position_embeddings=20,
    )
    return AlbertConfig(**{**sizes, **overrides})


# --- format and release ----------------------------------------------------------------------


def test_solution_notebook_is_valid_and_released():
    a = load_assignment(SOLUTION)
    assert a.name == "04_albert" and a.title == "Chapter 4: ALBERT" and a.max_points == 12
    assert [e.id for e in a.exercises] == list(CHECKS)
    assert [e.points for e in a.exercises] == [3, 2, 4, 3]
    assert [c.id for c in a.checks] == ALL_CHECKS
    assert [c.id for c in a.checks if not c.hidden] == VISIBLE and sum(c.hidden for c in a.checks) == 9
    # exercise 2 (read the model's loop, predict, find where the integer form differs) is worth 2:
    # its visible check shows the rules for 0 points
    assert {c.id: c.points for c in a.checks if c.points != 1} == {"schedule-small": 0}
    assert set(MUST_FORBID) <= set(a.forbid)  # LayerNorm and linear maps (chapters 3 and 2) stay allowed
    assert [e.functions for e in a.exercises] == [
        ("albert_embeddings",),
        ("layer_schedule",),
        ("count_albert_parameters",),
        ("sentence_order_pairs",),
    ]
    CHAPTER.assert_released()
    ex = json.loads(EXERCISE.read_text())
    stubs = [cell_source(c) for c in tagged_cells(ex, "answer")]
    assert len(stubs) == 4 and all(s.count("    raise NotImplementedError(") == 1 for s in stubs)
    assert not tagged_cells(ex, "hidden-check") and not tagged_cells(ex, "solution-only")
    assert "Instructor notes" not in EXERCISE.read_text()


# --- the reference answers agree with course_lib ---------------------------------------------


@pytest.mark.parametrize("embedding_size, hidden_size", [(6, 16), (16, 8), (8, 8)])
def test_reference_embeddings_match_albert_model(embedding_size, hidden_size):
    from course_lib.models.albert import AlbertModel

    torch.manual_seed(0)
    config = _tiny_albert(embedding_size=embedding_size, hidden_size=hidden_size, type_vocab_size=3)
    model = AlbertModel(config).eval()
    with torch.no_grad():  # non-trivial LayerNorm parameters
        model.embeddings.norm.weight.uniform_(0.5, 1.5)
        model.embeddings.norm.bias.normal_()
    emb, proj = model.embeddings, model.encoder.embedding_hidden_mapping_in
    ours = reference()["albert_embeddings"]
    ids, types = torch.randint(61, (3, 12)), torch.randint(3, (3, 12))
    args = (
        emb.word_embeddings.weight,
        emb.position_embeddings.weight,
        emb.token_type_embeddings.weight,
        emb.norm.weight,
        emb.norm.bias,
        proj.weight,
        proj.bias,
    )
    with torch.no_grad():
        for types_in in (types, None):
            expected = proj(emb(ids, types_in))
            got = ours(ids, types_in, *args, eps=config.layer_norm_eps)
            assert got.shape == (3, 12, hidden_size)
            torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
        with pytest.raises(ValueError):
            ours(torch.randint(61, (1, 21)), None, *args)


def _encoder_schedule(L: int, G: int, K: int) -> tuple[int, ...]:
    from course_lib.models.albert import AlbertEncoder

    config = _tiny_albert(
        embedding_size=4,
        hidden_size=4,
        num_attention_heads=1,
        intermediate_size=4,
        num_hidden_layers=L,
        num_hidden_groups=G,
        inner_group_num=K,
    )
    return AlbertEncoder(config).schedule


def test_reference_schedule_matches_albert_encoder():
    ours = reference()["layer_schedule"]
    cases = [
        (12, 1, 1),
        (4, 2, 1),
        (3, 3, 2),
        (6, 4, 1),
        (5, 2, 3),
        (7, 3, 2),
        (10, 4, 1),
        (12, 5, 2),
        (9, 9, 1),
        (1, 1, 1),
        (1, 1, 3),
        (18, 14, 1),
        (27, 21, 2),
        (36, 28, 1),
    ]
    g = torch.Generator().manual_seed(4)
    for _ in range(25):
        L = int(torch.randint(1, 40, (), generator=g))
        cases.append(
            (L, int(torch.randint(1, L + 1, (), generator=g)), int(torch.randint(1, 4, (), generator=g)))
        )
    assert any(L % G for L, G, _ in cases), "some L not divisible by G"
    for L, G, K in cases:
        steps = ours(L, G, K)
        assert len(steps) == L * K and all(0 <= j < K for _, j in steps)
        assert tuple(group * K + j for group, j in steps) == _encoder_schedule(L, G, K), (L, G, K)
    # the trap the instructions name: the integer rule is not Hugging Face's
    assert _encoder_schedule(18, 14, 1)[9] == 6 and 9 * 14 // 18 == 7
    for L, G, K in [(4, 0, 1), (4, 5, 1), (4, 2, 0), (3, -1, 1), (3, 1, -2)]:
        with pytest.raises(ValueError):
            ours(L, G, K)
        with pytest.raises(ValueError):
            _tiny_albert(num_hidden_layers=L, num_hidden_groups=G, inner_group_num=K)


def test_reference_counts_match_albert_models():
    from course_lib.models.albert import AlbertConfig, AlbertModel

    count = reference()["count_albert_parameters"]
    for sizes in [
        dict(),
        dict(
            embedding_size=20,
            hidden_size=12,
            num_hidden_layers=4,
            type_vocab_size=3,
            max_position_embeddings=7,
            intermediate_size=40,
        ),
    ]:
        config = _tiny_albert(**sizes)
        for mode in MODES:
            model = AlbertModel(replace(config, sharing=mode))
            n = count(
                config.vocab_size,
                config.embedding_size,
                config.hidden_size,
                config.num_hidden_layers,
                config.intermediate_size,
                P=config.max_position_embeddings,
                T=config.type_vocab_size,
                sharing=mode,
            )
            assert isinstance(n, int) and n == model.num_parameters(), (sizes, mode)
    # ALBERT-base v2 (AlbertConfig's defaults): 11,683,584, the paper's "12M"
    assert AlbertModel(AlbertConfig()).num_parameters() == count(**ALBERT_BASE) == 11_683_584
    # the paper's sharing ablation (Table 4, ALBERT-base, E = 128): 89M, 64M, 38M, 12M
    got = {mode: count(**ALBERT_BASE, sharing=mode) for mode in MODES}
    assert got == {"all": 11_683_584, "attention": 63_647_232, "ffn": 37_686_528, "none": 89_650_176}
    with pytest.raises(ValueError):
        count(**ALBERT_BASE, sharing="half")
    with pytest.raises(ValueError):
        AlbertConfig(sharing="half")


def test_reference_sop_pairs_follow_make_sop_pairs_statistics():
    try:
        from course_lib.objectives.pairs import make_sop_pairs
    except ImportError:  # pragma: no cover - added to course_lib alongside chapter 4
        pytest.skip("course_lib.objectives.pairs.make_sop_pairs is not there")
    ours = reference()["sentence_order_pairs"]
    g = torch.Generator().manual_seed(11)
    docs = [
        [
            torch.randint(5, 900, (int(torch.randint(1, 6, (), generator=g)),), generator=g).tolist()
            for _ in range(int(torch.randint(2, 30, (), generator=g)))
        ]
        for _ in range(300)
    ]
    n_pairs = sum(len(d) - 1 for d in docs)

    def adjacent(doc, a, b, label):
        i = next(k for k in range(len(doc) - 1) if (doc[k], doc[k + 1]) in ((a, b), (b, a)))
        return (a, b) == ((doc[i + 1], doc[i]) if label == 1 else (doc[i], doc[i + 1]))

    mine = []
    for k, doc in enumerate(docs):
        pairs = ours(doc, 1000 + k)
        assert len(pairs) == len(doc) - 1
        assert all(adjacent(doc, a, b, y) for a, b, y in pairs), (
            "members are neighbours; the label says their order"
        )
        mine += [y for _, _, y in pairs]
    theirs = make_sop_pairs(docs, rng=torch.Generator().manual_seed(5))
    assert len(theirs.a) == len(mine) == n_pairs  # one pair per adjacent pair of every document
    owner = {}
    for k, doc in enumerate(docs):
        for s in doc:
            owner.setdefault(tuple(s), set()).add(k)
    for a, b, y in zip(theirs.a, theirs.b, theirs.label.tolist()):
        same_doc = owner[tuple(a)] & owner[tuple(b)]
        assert same_doc and any(adjacent(docs[k], a, b, y) for k in same_doc)
    sd = math.sqrt(0.25 / n_pairs)
    for share in (sum(mine) / n_pairs, float(theirs.label.float().mean())):
        assert abs(share - 0.5) < 6 * sd
    assert abs(sum(mine) / n_pairs - float(theirs.label.float().mean())) < 8 * sd
    # one document, many seeds: each pair swapped half of the time, independently of its position
    doc = [[i] for i in range(12)]
    swaps = torch.tensor([[y for _, _, y in ours(doc, s)] for s in range(2000)], dtype=torch.float)
    assert ((swaps.mean(0) - 0.5).abs() < 6 * math.sqrt(0.25 / 2000)).all()
    assert ours([[1]], 0) == [] and ours([], 3) == []


# --- grading submissions ------------------------------------------------------------------------

PARTIAL = {
    # an IndexError, not the ValueError asked for, for a sequence longer than the position table
    EMB: """
def albert_embeddings(input_ids, token_type_ids, word_table, position_table, segment_table, gamma, beta,
                      proj_weight, proj_bias, eps=1e-12):
    n = input_ids.shape[1]
    types = torch.zeros_like(input_ids) if token_type_ids is None else token_type_ids
    x = word_table[input_ids] + position_table[torch.arange(n)] + segment_table[types]
    x = torch.nn.functional.layer_norm(x, x.shape[-1:], gamma, beta, eps)
    return x @ proj_weight.T + proj_bias
""",
    # no check of inner_group_num: [] for 0 layers per group instead of a ValueError
    SCHED: """
def layer_schedule(num_hidden_layers, num_hidden_groups, inner_group_num):
    if not 1 <= num_hidden_groups <= num_hidden_layers:
        raise ValueError("num_hidden_groups out of range")
    return [(int(i / (num_hidden_layers / num_hidden_groups)), j) for i in range(num_hidden_layers)
            for j in range(inner_group_num)]
""",
    # "attention" and "ffn" swapped: right for sharing="all" and for one layer only
    COUNT: """
def count_albert_parameters(V, E, H, L, I, P=512, T=2, sharing="all"):
    n = {"all": (1, 1), "attention": (L, 1), "ffn": (1, L), "none": (L, L)}
    if sharing not in n:
        raise ValueError(sharing)
    att, ffn = n[sharing]
    return (V + P + T) * E + 2 * E + E * H + H + att * (4 * H * H + 6 * H) + ffn * (2 * H * I + I + 3 * H) + H * H + H
""",
    # a document with fewer than two segments raises instead of giving []
    SOP: """
def sentence_order_pairs(segments, seed):
    if len(segments) < 2:
        raise ValueError("need two segments")
    u = torch.rand(len(segments) - 1, generator=torch.Generator().manual_seed(seed))
    return [(list(segments[i + 1]), list(segments[i]), 1) if float(u[i]) < 0.5 else (list(segments[i]), list(segments[i + 1]), 0)
            for i in range(len(segments) - 1)]
""",
}
PARTIAL_FAILS = {
    "factorised-small",
    "factorised-width",
    "schedule-small",
    "schedule-edges",
    "count-base",
    "count-random",
    "sop-small",
    "sop-edges",
}

REWRITTEN = {
    EMB: """
import torch.nn.functional as F

def albert_embeddings(input_ids, token_type_ids, word_table, position_table, segment_table, gamma, beta,
                      proj_weight, proj_bias, eps=1e-12):
    batch, n = input_ids.shape
    if n > len(position_table):
        raise ValueError(f"{n} tokens > {len(position_table)} positions")
    types = torch.zeros_like(input_ids) if token_type_ids is None else token_type_ids
    x = F.embedding(input_ids, word_table) + F.embedding(types, segment_table)
    x = x + F.embedding(torch.arange(n).expand(batch, n), position_table)
    return F.linear(F.layer_norm(x, (x.shape[-1],), gamma, beta, eps), proj_weight, proj_bias)
""",
    SCHED: """
def layer_schedule(num_hidden_layers, num_hidden_groups, inner_group_num):
    L, G, K = num_hidden_layers, num_hidden_groups, inner_group_num
    if G < 1 or G > L:
        raise ValueError(f"num_hidden_groups={G} is not in [1, {L}]")
    if K < 1:
        raise ValueError(f"inner_group_num={K} < 1")
    return [(math.floor(i / (L / G)), j) for i in range(L) for j in range(K)]
""",
    COUNT: '''
def count_albert_parameters(V, E, H, L, I, P=512, T=2, sharing="all"):
    """Every weight's shape, multiplied out."""
    if sharing == "all":
        n_att, n_ffn = 1, 1
    elif sharing == "attention":
        n_att, n_ffn = 1, L
    elif sharing == "ffn":
        n_att, n_ffn = L, 1
    elif sharing == "none":
        n_att, n_ffn = L, L
    else:
        raise ValueError(f"unknown sharing {sharing!r}")
    shapes = [(V, E), (P, E), (T, E), (E,), (E,), (H, E), (H,)]
    shapes += ([(H, H), (H,)] * 4 + [(H,), (H,)]) * n_att
    shapes += [(I, H), (I,), (H, I), (H,), (H,), (H,)] * n_ffn
    shapes += [(H, H), (H,)]
    return sum(math.prod(s) for s in shapes)
''',
    SOP: """
def sentence_order_pairs(segments, seed):
    g = torch.Generator()
    g.manual_seed(seed)
    out = []
    for left, right in zip(segments, segments[1:]):
        if torch.rand((), generator=g).item() < 0.5:
            out.append((list(right), list(left), 1))
        else:
            out.append((list(left), list(right), 0))
    return out
""",
}


def _lookup_schedule() -> str:
    """A student who printed the visible check's results and returns them from a table, with
    one group for every other input."""
    ref = reference()["layer_schedule"]
    seen = {
        args: ref(*args) for args in [(12, 1, 1), (4, 2, 1), (3, 3, 2), (6, 4, 1), (18, 14, 1), (5, 2, 3)]
    }
    return f"""
_SEEN = {seen!r}

def layer_schedule(num_hidden_layers, num_hidden_groups, inner_group_num):
    key = (num_hidden_layers, num_hidden_groups, inner_group_num)
    if key in _SEEN:
        return _SEEN[key]
    if num_hidden_groups < 1 or num_hidden_groups > num_hidden_layers or inner_group_num < 1:
        raise ValueError("out of range")
    return [(0, j) for _ in range(num_hidden_layers) for j in range(inner_group_num)]
"""


GAMING = {
    # hard-codes the visible check's cases: that check passes, but it is worth 0 points (4.2's
    # points are on drawn inputs), so the table earns nothing
    "schedule_lookup": ({SCHED: _lookup_schedule()}, {"schedule-small"}),
    # counts for sharing="all" whatever the mode (and never refuses one): only the published, all-shared sizes
    "count_only_all": (
        {
            COUNT: """
def count_albert_parameters(V, E, H, L, I, P=512, T=2, sharing="all"):
    return (V + P + T) * E + 2 * E + E * H + H + 4 * H * H + 6 * H + 2 * H * I + I + 3 * H + H * H + H
"""
        },
        {"count-published"},
    ),
    # the right structure and statistics (adjacent pairs, labels matching the order, half swapped), but
    # not the draws of the seed: alternates instead
    "sop_alternating": (
        {
            SOP: """
def sentence_order_pairs(segments, seed):
    return [(list(segments[i + 1]), list(segments[i]), 1) if i % 2 else (list(segments[i]), list(segments[i + 1]), 0)
            for i in range(len(segments) - 1)]
"""
        },
        set(),
    ),
    # fair coins, but from the global generator: not the seed's pairs
    "sop_global_rng": (
        {
            SOP: """
def sentence_order_pairs(segments, seed):
    u = torch.rand(max(len(segments) - 1, 0))
    return [(list(segments[i + 1]), list(segments[i]), 1) if u[i] < 0.5 else (list(segments[i]), list(segments[i + 1]), 0)
            for i in range(len(segments) - 1)]
"""
        },
        set(),
    ),
    # the LayerNorm after the projection (over H): the tempting mistake, nothing passes
    "norm_after_projection": (
        {
            EMB: """
def albert_embeddings(input_ids, token_type_ids, word_table, position_table, segment_table, gamma, beta,
                      proj_weight, proj_bias, eps=1e-12):
    n = input_ids.shape[1]
    if n > position_table.shape[0]:
        raise ValueError("too long")
    types = torch.zeros_like(input_ids) if token_type_ids is None else token_type_ids
    x = (word_table[input_ids] + position_table[:n] + segment_table[types]) @ proj_weight.T + proj_bias
    x = (x - x.mean(-1, keepdim=True)) / torch.sqrt(x.var(-1, unbiased=False, keepdim=True) + eps)
    return x * gamma.mean() + beta.mean()
"""
        },
        set(),
    ),
}


MISTAKES = {  # honest mistakes, with the points they keep
    # the reviewer's i // (L // G) (the int layers per group): right only when G divides L: 0 of 2
    "schedule_int_layers_per_group": (
        {
            SCHED: """
def layer_schedule(num_hidden_layers, num_hidden_groups, inner_group_num):
    if not 1 <= num_hidden_groups <= num_hidden_layers:
        raise ValueError("num_hidden_groups out of range")
    if inner_group_num < 1:
        raise ValueError("inner_group_num < 1")
    per_group = num_hidden_layers // num_hidden_groups
    return [(i // per_group, j) for i in range(num_hidden_layers) for j in range(inner_group_num)]
"""
        },
        set(),
    ),
    # a derivation that forgets the embeddings' LayerNorm (2E): off by 2E everywhere: 0 of 4
    "count_embedding_norm_forgotten": (
        {COUNT: REWRITTEN[COUNT].replace("(T, E), (E,), (E,), (H, E)", "(T, E), (H, E)")},
        set(),
    ),
    # the heads counted as separate H x H projections each (12 heads): 0 of 4
    "count_projections_per_head": (
        {
            COUNT: REWRITTEN[COUNT].replace(
                "[(H, H), (H,)] * 4 + [(H,), (H,)]", "[(H, H), (H,)] * 4 * 12 + [(H,), (H,)]"
            )
        },
        set(),
    ),
    # swaps when u_i >= 0.5 (labels consistent with the order): other pairs than the reference's: 0 of 3
    "sop_swaps_when_u_at_least_half": (
        {
            SOP: """
def sentence_order_pairs(segments, seed):
    g = torch.Generator().manual_seed(seed)
    if len(segments) < 2:
        return []
    u = torch.rand(len(segments) - 1, generator=g)
    out = []
    for i in range(len(segments) - 1):
        a, b = list(segments[i]), list(segments[i + 1])
        out.append((a, b, 0) if u[i] < 0.5 else (b, a, 1))
    return out
"""
        },
        set(),
    ),
    # eps ignored (always 1e-12): right unless the sums are small next to eps: 2 of 3
    "embeddings_ignore_eps": (
        {
            EMB: """
import torch.nn.functional as F

def albert_embeddings(input_ids, token_type_ids, word_table, position_table, segment_table, gamma, beta,
                      proj_weight, proj_bias, eps=1e-12):
    n = input_ids.shape[1]
    if n > position_table.shape[0]:
        raise ValueError("too long")
    types = torch.zeros_like(input_ids) if token_type_ids is None else token_type_ids
    x = word_table[input_ids] + position_table[:n] + segment_table[types]
    return F.linear(F.layer_norm(x, (x.shape[-1],), gamma, beta, 1e-12), proj_weight, proj_bias)
"""
        },
        {"factorised-small", "factorised-sizes"},
    ),
}


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    return CHAPTER.grade_cases(
        tmp_path_factory, PARTIAL, REWRITTEN, {COUNT: REWRITTEN[COUNT]}, {**GAMING, **MISTAKES}
    )


EXPECTED = [
    ("solution", 12, set()),
    ("stub", 0, set(ALL_CHECKS)),
    ("partial", 5, PARTIAL_FAILS),
    ("rewritten", 12, set()),
    ("one_exercise", 4, set(ALL_CHECKS) - set(CHECKS["count-parameters"])),
] + [
    (name, sum(c != "schedule-small" for c in passing), set(ALL_CHECKS) - passing)
    for name, (_, passing) in {**GAMING, **MISTAKES}.items()
]


@pytest.mark.parametrize("name, points, failing", EXPECTED, ids=[e[0] for e in EXPECTED])
def test_exact_points(graded, name, points, failing):
    CHAPTER.assert_points(graded, name, points, failing, ALL_CHECKS, 12)


def test_gaming_gets_at_most_the_visible_points(graded):
    """A lookup table or a counter for one mode earns no more than one check of its exercise,
    and answers that ignore the seed earn nothing: the checks compare with the reference on
    inputs the submission has not seen."""
    for name in GAMING:
        _, rep, _ = graded[name]
        assert rep["points"] <= 1, name
    _, rep, _ = graded["sop_alternating"]
    messages = {c["id"]: c["message"] for c in rep["checks"]}
    assert messages["sop-small"].startswith("sentence_order_pairs(segments=list of 5, seed=0): the result")
    for c in rep["checks"]:  # hidden checks' messages show no expected values
        if c["hidden"] and c["exercise"] == "sentence-order":
            assert "expected" not in c["message"], c["message"]


def test_visible_checks_give_the_grader_verdict_at_home(graded):
    CHAPTER.assert_home_verdicts(graded)


# --- the rules: every alias of course_lib's (and other libraries') versions is turned off ----

MUST_FORBID = (
    "course_lib.models.albert.AlbertModel",
    "course_lib.models.albert.AlbertConfig",
    "course_lib.studies.albert.AlbertConfig",
    "course_lib.nn.count_parameters",
    "transformers.AlbertConfig",
)
COURSE_LIB_ROUTES = {  # name -> (answer cell, an answer that hands the job to a forbidden function, its visible check)
    "albert_model_parameters": (
        "count-parameters-answer",
        "def count_albert_parameters(V, E, H, L, I, P=512, T=2, *args, **kwargs):\n    from course_lib.models.albert import AlbertConfig, AlbertModel\n    config = AlbertConfig(vocab_size=V, embedding_size=E, hidden_size=H, num_hidden_layers=L, intermediate_size=I, max_position_embeddings=P, type_vocab_size=T, num_attention_heads=1, num_hidden_groups=1 if kwargs.get('sharing', 'all') == 'all' else L)\n    return sum(p.numel() for p in AlbertModel(config).parameters())\n",
        "count-base",
    ),
    "transformers_albert": (
        "count-parameters-answer",
        "def count_albert_parameters(V, E, H, L, I, P=512, T=2, *args, **kwargs):\n    from transformers import AlbertConfig, AlbertModel\n    config = AlbertConfig(vocab_size=V, embedding_size=E, hidden_size=H, num_hidden_layers=L, intermediate_size=I, max_position_embeddings=P, type_vocab_size=T, num_attention_heads=1, num_hidden_groups=1 if kwargs.get('sharing', 'all') == 'all' else L)\n    return AlbertModel(config).num_parameters()\n",
        "count-base",
    ),
}


def _count_route_works(route, source):
    """The route does the job (for the sharings a model can build: all and none)."""
    ns: dict = {}
    exec(source, ns)  # the route works (for the sharings a model can build: all and none)...
    ours = reference()["count_albert_parameters"]
    for sharing in ("all", "none"):
        args = (30000, 128, 768, 12, 3072)
        assert ns["count_albert_parameters"](*args, sharing=sharing) == ours(*args, sharing=sharing), (
            route,
            sharing,
        )


(
    test_forbid_list_covers_every_alias_and_the_texts_follow_the_metadata,
    test_a_forbidden_route_fails_at_home_as_in_the_grader,
) = forbid_rule_tests(CHAPTER, MUST_FORBID, COURSE_LIB_ROUTES, route_works=_count_route_works)


def test_a_flipped_sentence_order_is_explained(graded):
    """The visible SOP check first tries equal segments, where only the labels can differ: the
    failure names the label of the first wrong pair (not "result[0][0] has 2 items"); the
    check's comment, shown at home, says what the label must be."""
    message = {c["id"]: c["message"] for c in graded["sop_swaps_when_u_at_least_half"][1]["checks"]}[
        "sop-small"
    ]
    assert message.startswith("sentence_order_pairs(segments=list of 5, seed=0): the result[0][2] is 0"), (
        message
    )
    assert "exactly when its draw u_i < 0.5" in cell_source(
        next(
            c
            for c in tagged_cells(json.loads(EXERCISE.read_text()), "check")
            if c["metadata"]["course"]["id"] == "sop-small"
        )
    )
