"""Chapter 3's graded exercises: the solution notebook's format, its release, agreement of
the reference answers with course_lib, and `course grade` on full, empty, partial and
rewritten submissions (exact points)."""

from __future__ import annotations

import pytest
import torch
from grading_fixtures.chapters import Chapter, answer_sources, forbid_rule_tests

from course_lib.grading.format import load_assignment

CHAPTER = Chapter("03_bert")
SOLUTION, EXERCISE = CHAPTER.solution, CHAPTER.exercise
reference = CHAPTER.reference  # the preamble and the reference answers, executed
MASK, EMB, PACK, LOSS = "masking-answer", "embeddings-answer", "packing-answer", "mlm-loss-answer"
CHECKS = {
    "masking": ["masking-basics", "masking-statistics", "masking-fresh", "masking-uniform"],
    "embeddings": ["embeddings-small", "embeddings-sizes", "embeddings-sum"],
    "packing": ["packing-small", "packing-random", "packing-edges"],
    "mlm-loss": ["mlm-loss-small", "mlm-loss-random", "mlm-loss-edges"],
}
ALL_CHECKS = [c for cs in CHECKS.values() for c in cs]


# --- format and release ----------------------------------------------------------------------


def test_solution_notebook_is_valid_and_released():
    a = load_assignment(SOLUTION)
    assert a.name == "03_bert" and a.max_points == 13
    assert [e.id for e in a.exercises] == ["masking", "embeddings", "packing", "mlm-loss"]
    assert [c.id for c in a.checks] == ALL_CHECKS
    assert sum(c.hidden for c in a.checks) == 8
    CHAPTER.assert_released()
    assert "raise NotImplementedError" in EXERCISE.read_text()


# --- the reference answers agree with course_lib ---------------------------------------------


def test_reference_masking_matches_course_lib_statistics():
    from course_lib.objectives import KEPT, MASKED, RANDOM, mask_tokens

    ref = reference()["mask_tokens"]
    torch.manual_seed(0)
    ids = torch.randint(5, 2000, (300, 400))
    inputs, labels = ref(ids, 2000, 4, [0, 1, 2, 3])
    chosen = labels != -100
    ours = {"masked": (inputs == 4) & chosen, "kept": (inputs == ids) & chosen}
    c_inputs, c_labels, actions = mask_tokens(
        ids,
        vocab_size=2000,
        mask_token_id=4,
        special_ids=[0, 1, 2, 3],
        generator=torch.Generator().manual_seed(0),
        return_actions=True,
    )
    c_chosen = actions > 0
    assert torch.equal(c_labels[c_chosen], ids[c_chosen])
    for mine, code in [(ours["masked"], MASKED), (ours["kept"], KEPT)]:
        assert abs(mine.sum() / chosen.sum() - (actions == code).sum() / c_chosen.sum()) < 0.01
    assert abs(chosen.float().mean() - c_chosen.float().mean()) < 0.003
    assert (actions == RANDOM).any()


def test_reference_embeddings_match_bert_embeddings():
    from course_lib.models.bert import BertConfig, BertEmbeddings

    emb = BertEmbeddings(
        BertConfig(
            vocab_size=50,
            hidden_size=16,
            num_attention_heads=2,
            num_hidden_layers=1,
            intermediate_size=64,
            max_position_embeddings=12,
            hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0,
        )
    ).eval()
    ids, types = torch.randint(50, (3, 12)), torch.randint(2, (3, 12))
    ours = reference()["bert_embeddings"](
        ids,
        types,
        emb.word_embeddings.weight,
        emb.position_embeddings.weight,
        emb.token_type_embeddings.weight,
        emb.norm.weight,
        emb.norm.bias,
    )
    torch.testing.assert_close(ours, emb(ids, types), atol=1e-5, rtol=1e-5)


def test_reference_packing_matches_course_lib():
    from course_lib.objectives import pack_pair

    ref = reference()["pack_pair"]
    g = torch.Generator().manual_seed(0)
    for _ in range(200):
        a = torch.randint(5, 99, (int(torch.randint(1, 30, (), generator=g)),), generator=g).tolist()
        b = torch.randint(5, 99, (int(torch.randint(1, 30, (), generator=g)),), generator=g).tolist()
        max_len = int(torch.randint(5, 70, (), generator=g))
        ids, types = ref(a, b, max_len, 2, 3)
        packed = pack_pair(a, b, max_len, cls_id=2, sep_id=3)
        assert ids == packed["input_ids"].tolist() and types == packed["token_type_ids"].tolist()


# --- grading submissions ------------------------------------------------------------------------

PARTIAL = {
    # random replacements drawn from the whole vocabulary, specials included (masking-uniform's
    # 40-id vocabulary catches it for certain; masking-fresh's vocabulary of up to 3,000 ids only
    # by chance: it passed under other seeds), and a 3-d batch comes back 2-d (masking-fresh
    # catches that for certain): fails the two hidden checks under any seed
    MASK: """
def mask_tokens(input_ids, vocab_size, mask_id, special_ids, mlm_probability=0.15):
    input_ids = input_ids.reshape(input_ids.shape[0], -1)
    special = torch.isin(input_ids, torch.tensor(list(special_ids) + [mask_id]))
    chosen = (torch.rand(input_ids.shape) < mlm_probability) & ~special
    u = torch.rand(input_ids.shape)
    inputs = input_ids.clone()
    inputs[chosen & (u < 0.8)] = mask_id
    rnd = chosen & (u >= 0.8) & (u < 0.9)
    inputs[rnd] = torch.randint(vocab_size, input_ids.shape, dtype=input_ids.dtype)[rnd]
    return inputs, torch.where(chosen, input_ids, torch.full_like(input_ids, -100))
""",
    # only two segments: fails the hidden check with three
    EMB: """
def bert_embeddings(input_ids, token_type_ids, word_table, position_table, segment_table, gamma, beta, eps=1e-12):
    n = input_ids.shape[1]
    if n > position_table.shape[0]:
        raise ValueError("too long")
    if token_type_ids is None:
        token_type_ids = torch.zeros_like(input_ids)
    seg = torch.where(token_type_ids[..., None] == 1, segment_table[1], segment_table[0])
    x = word_table[input_ids] + position_table[:n] + seg
    return torch.nn.functional.layer_norm(x, x.shape[-1:], gamma, beta, eps)
""",
    # the first [SEP] gets segment 1: every check of the exercise fails
    PACK: """
def pack_pair(tokens_a, tokens_b, max_len, cls_id, sep_id):
    if max_len < 5:
        raise ValueError("too short")
    a, b = list(tokens_a), list(tokens_b)
    while len(a) + len(b) > max_len - 3:
        (a if len(a) > len(b) else b).pop()
    return [cls_id] + a + [sep_id] + b + [sep_id], [0] * (len(a) + 1) + [1] * (len(b) + 2)
""",
}
PARTIAL[LOSS] = """
def mlm_loss(logits, labels):
    flat, y = logits.reshape(-1, logits.shape[-1]), labels.reshape(-1)
    keep = y != -100
    log_probs = torch.log(torch.softmax(flat[keep], dim=-1))  # -inf for large logits; nan with no label
    return -log_probs.gather(1, y[keep][:, None]).mean()
"""
PARTIAL_FAILS = {
    "masking-fresh",
    "masking-uniform",
    "embeddings-sum",
    *CHECKS["packing"],
    "mlm-loss-small",
    "mlm-loss-edges",
}

REWRITTEN = {
    MASK: '''
import numpy as np

def mask_tokens(input_ids, vocab_size, mask_id, special_ids, mlm_probability=0.15):
    """A categorical draw per chosen token, written with torch.multinomial."""
    banned = set(int(s) for s in special_ids) | {int(mask_id)}
    ordinary = torch.tensor([i for i in range(vocab_size) if i not in banned])
    flat = input_ids.reshape(-1)
    eligible = torch.tensor([int(t) not in banned for t in flat.tolist()], dtype=torch.bool)
    chosen = torch.bernoulli(torch.full(flat.shape, float(mlm_probability))).bool() & eligible
    outcome = torch.multinomial(torch.tensor([0.8, 0.1, 0.1]), flat.numel(), replacement=True)
    out = flat.clone()
    out[chosen & (outcome == 0)] = mask_id
    swap = chosen & (outcome == 1)
    out[swap] = ordinary[torch.randint(len(ordinary), (int(swap.sum()),))].to(out.dtype)
    labels = flat.clone()
    labels[~chosen] = -100
    return out.reshape(input_ids.shape), labels.reshape(input_ids.shape)
''',
    EMB: """
def bert_embeddings(input_ids, token_type_ids, word_table, position_table, segment_table, gamma, beta, eps=1e-12):
    batch, n = input_ids.shape
    if n > len(position_table):
        raise ValueError(f"{n} > {len(position_table)}")
    types = torch.zeros_like(input_ids) if token_type_ids is None else token_type_ids
    x = torch.nn.functional.embedding(input_ids, word_table)
    x = x + torch.nn.functional.embedding(torch.arange(n).expand(batch, n), position_table)
    x = x + torch.nn.functional.embedding(types, segment_table)
    return torch.nn.functional.layer_norm(x, (x.shape[-1],), gamma, beta, eps)
""",
    PACK: """
def pack_pair(tokens_a, tokens_b, max_len, cls_id, sep_id):
    budget = max_len - 3
    if budget < 2:
        raise ValueError(f"max_len={max_len} is too small")
    la, lb = len(tokens_a), len(tokens_b)
    if la + lb > budget:  # closed form of "trim the longer one, B on ties"
        la_new = min(la, max(budget - lb, (budget + 1) // 2))
        lb = min(lb, budget - la_new)
        la = la_new
    ids = [cls_id, *tokens_a[:la], sep_id, *tokens_b[:lb], sep_id]
    return ids, [0 if i < la + 2 else 1 for i in range(len(ids))]
""",
}


REWRITTEN[LOSS] = """
def mlm_loss(logits, labels):
    z, y = logits.reshape(-1, logits.shape[-1]), labels.reshape(-1)
    rows = torch.nonzero(y != -100).flatten()
    if rows.numel() == 0:
        return torch.zeros((), dtype=logits.dtype)
    z = z[rows]
    picked = z[torch.arange(len(rows)), y[rows]]
    return (torch.logsumexp(z, dim=-1) - picked).sum() / len(rows)
"""


def test_reference_mlm_loss_matches_cross_entropy():
    import torch

    mlm_loss = reference()["mlm_loss"]
    g = torch.Generator().manual_seed(3)
    for shape in [(2, 7, 11), (5, 4), (1, 1, 3)]:
        logits = torch.randn(*shape, generator=g) * 5
        labels = torch.randint(0, shape[-1], shape[:-1], generator=g)
        labels[torch.rand(shape[:-1], generator=g) < 0.5] = -100
        labels.view(-1)[0] = 1
        expected = torch.nn.functional.cross_entropy(
            logits.reshape(-1, shape[-1]), labels.reshape(-1), ignore_index=-100
        )
        torch.testing.assert_close(mlm_loss(logits, labels), expected)
    zero = mlm_loss(torch.randn(2, 3, 4), torch.full((2, 3), -100))
    assert zero.dim() == 0 and float(zero) == 0.0


# the reference's masking, but an error for ids that are not [batch, seq]: the hidden check on a
# 3-d batch fails, and its message says that the function raised (not that the check misread a result)
MASK_RAISES_ON_3D = (
    answer_sources(CHAPTER.solution)[MASK].replace("def mask_tokens(", "def _mask_tokens_2d(", 1)
    + """


def mask_tokens(input_ids, *args, **kwargs):
    if input_ids.dim() != 2:
        raise ValueError("input_ids must be [batch, seq]")
    return _mask_tokens_2d(input_ids, *args, **kwargs)
"""
)
GAMING = {
    "masking_raises_on_3d": (
        {MASK: MASK_RAISES_ON_3D},
        {"masking-basics", "masking-statistics", "masking-uniform"},
    )
}


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    return CHAPTER.grade_cases(tmp_path_factory, PARTIAL, REWRITTEN, {PACK: REWRITTEN[PACK]}, GAMING)


def test_a_function_that_raises_is_reported_as_raising(graded):
    message = {c["id"]: c["message"] for c in graded["masking_raises_on_3d"][1]["checks"]}["masking-fresh"]
    assert (
        "mask_tokens raised ValueError on a 3-d batch" in message and "what your code returned" not in message
    ), message


@pytest.mark.parametrize(
    "name, points, failing",
    [
        ("solution", 13, set()),
        ("stub", 0, set(ALL_CHECKS)),
        ("partial", 5, PARTIAL_FAILS),
        ("rewritten", 13, set()),
        ("one_exercise", 3, set(CHECKS["masking"] + CHECKS["embeddings"] + CHECKS["mlm-loss"])),
        ("masking_raises_on_3d", 3, set(ALL_CHECKS) - GAMING["masking_raises_on_3d"][1]),
    ],
)
def test_exact_points(graded, name, points, failing):
    CHAPTER.assert_points(graded, name, points, failing, ALL_CHECKS, 13)


# --- the rules: every alias of course_lib's (and other libraries') versions is turned off ----

MUST_FORBID = (
    "torch.nn.functional.cross_entropy",
    "torch._C._nn.cross_entropy_loss",
    "course_lib.models.bert.masked_lm_loss",
    "course_lib.models.xlnet.masked_lm_loss",
    "course_lib.objectives.pack_pair",
)
COURSE_LIB_ROUTES = {  # name -> (answer cell, an answer that hands the job to a forbidden function, its visible check)
    "xlnet_masked_lm_loss": (
        "mlm-loss-answer",
        "from course_lib.models.xlnet import masked_lm_loss\n\ndef mlm_loss(logits, labels):\n    return masked_lm_loss(logits, labels)\n",
        "mlm-loss-small",
    ),
    "c_kernel_loss": (
        "mlm-loss-answer",
        "import torch\n\ndef mlm_loss(logits, labels):\n    loss = torch._C._nn.cross_entropy_loss(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), None, 1, -100, 0.0)\n    return torch.nan_to_num(loss, nan=0.0)\n",
        "mlm-loss-small",
    ),
}


(
    test_forbid_list_covers_every_alias_and_the_texts_follow_the_metadata,
    test_a_forbidden_route_fails_at_home_as_in_the_grader,
) = forbid_rule_tests(CHAPTER, MUST_FORBID, COURSE_LIB_ROUTES)
