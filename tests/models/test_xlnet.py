"""XLNet: parity with Hugging Face on shared random weights (plain input, padding, segments,
perm_mask with target_mapping, memory across segments, the token classifier), what each
stream may see, the relative shift, configuration and the interop contract."""

import copy
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
import torch
import torch.nn.functional as F

import course_lib
from course_lib.models.xlnet import (
    XLNetConfig,
    XLNetForTokenClassification,
    XLNetLMHeadModel,
    XLNetModel,
    XLNetTaskConfig,
    rel_shift,
)

transformers = pytest.importorskip("transformers")

TOL = 1e-5
V = 50
TINY = dict(vocab_size=V, d_model=32, n_layer=2, n_head=4, d_inner=48)


def assert_close(a, b, what: str) -> float:
    """Max |a - b| <= TOL (both float32); returns the difference."""
    assert a.shape == b.shape, f"{what}: shapes {tuple(a.shape)} != {tuple(b.shape)}"
    diff = (a - b).abs().max().item()
    assert diff <= TOL, f"{what}: max abs difference {diff:.3g} > {TOL}"
    return diff


def assert_all_close(xs, ys, what: str) -> None:
    assert len(xs) == len(ys), f"{what}: {len(xs)} != {len(ys)} tensors"
    for i, (x, y) in enumerate(zip(xs, ys)):
        if isinstance(x, tuple):
            assert_all_close(x, y, f"{what}[{i}]")
        else:
            assert_close(x, y, f"{what}[{i}]")


def randomize_(model, seed: int) -> None:
    """Every parameter N(0, 0.1), LayerNorm weights 1 + N(0, 0.1): every tensor matters and
    no two are alike (a swapped name would show)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g) * 0.1
            p.copy_(1 + noise if name.endswith("layer_norm.weight") else noise)


def pair(head: bool = False, seed: int = 0, **overrides):
    """A random-weight ``transformers`` XLNet and ours copied from it, both in eval mode."""
    config = transformers.XLNetConfig(**{**TINY, **overrides})
    hf = (transformers.XLNetLMHeadModel if head else transformers.XLNetModel)(config).eval()
    randomize_(hf, seed)
    ours = (XLNetLMHeadModel if head else XLNetModel).from_hf(hf)
    assert not ours.training
    return hf, ours


def ids(batch: int, n: int, seed: int) -> torch.Tensor:
    return torch.randint(0, V, (batch, n), generator=torch.Generator().manual_seed(seed))


def order_masks(batch: int, n: int, n_predict: int, seed: int):
    """XLNet's pretraining masks for a random factorisation order per row, the last
    ``n_predict`` tokens of each order being the targets.

    ``perm_mask[b, i, j] = 1`` when ``j`` is a target not before ``i`` in the order (a
    non-target sees every non-target, a target the non-targets and the earlier targets, not
    itself). Returns ``(perm_mask, target_mapping, targets [batch, n_predict], rank)``.
    """
    g = torch.Generator().manual_seed(seed)
    order = torch.stack([torch.randperm(n, generator=g) for _ in range(batch)])  # step -> position
    rank = torch.empty_like(order).scatter_(1, order, torch.arange(n).expand(batch, n).clone())
    is_target = rank >= n - n_predict
    perm_mask = (is_target[:, None, :] & (rank[:, None, :] >= rank[:, :, None])).float()
    targets = order[:, n - n_predict :]
    return perm_mask, F.one_hot(targets, n).float(), targets, rank


# ---------------------------------------------------------------------------------------
# Parity with Hugging Face
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("overrides", [{}, {"clamp_len": 3}], ids=["plain", "clamp_len"])
@torch.no_grad()
def test_plain_input_parity_with_mems_hidden_states_and_attentions(overrides):
    hf, ours = pair(seed=1, **overrides)
    x = ids(3, 9, seed=1)
    kw = dict(output_hidden_states=True, output_attentions=True)
    theirs, mine = hf(input_ids=x, **kw), ours(input_ids=x, **kw)
    assert_close(mine.last_hidden_state, theirs.last_hidden_state, "last_hidden_state")
    assert_all_close(mine.mems, theirs.mems, "mems")
    assert_all_close(mine.hidden_states, theirs.hidden_states, "hidden_states")
    assert_all_close(mine.attentions, theirs.attentions, "attentions")


@torch.no_grad()
def test_padding_parity_attention_mask_and_input_mask():
    hf, ours = pair(seed=2)
    x = ids(3, 10, seed=2)
    mask = torch.ones(3, 10, dtype=torch.long)
    mask[0, :4] = 0  # left padding (XLNet's tokenizer pads on the left)
    mask[1, 7:] = 0  # right padding
    theirs = hf(input_ids=x, attention_mask=mask)
    mine = ours(input_ids=x, attention_mask=mask)
    assert_close(mine.last_hidden_state, theirs.last_hidden_state, "padded last_hidden_state")
    assert_all_close(mine.mems, theirs.mems, "padded mems")
    via_input_mask = ours(input_ids=x, input_mask=1 - mask)
    assert torch.equal(via_input_mask.last_hidden_state, mine.last_hidden_state)
    unpadded = ours(input_ids=x)  # the mask is not ignored
    assert (unpadded.last_hidden_state - mine.last_hidden_state).abs().max() > 1e-3


@torch.no_grad()
def test_token_type_ids_parity_two_segments():
    hf, ours = pair(seed=3)
    x = ids(2, 11, seed=3)
    types = torch.zeros(2, 11, dtype=torch.long)
    types[:, 5:] = 1  # sentence B
    types[0, -1] = 2  # XLNet's <cls>, last, has its own segment id
    theirs = hf(input_ids=x, token_type_ids=types)
    mine = ours(input_ids=x, token_type_ids=types)
    assert_close(mine.last_hidden_state, theirs.last_hidden_state, "segments last_hidden_state")
    one_segment = ours(input_ids=x)  # the segment term is not ignored
    assert (one_segment.last_hidden_state - mine.last_hidden_state).abs().max() > 1e-3


@torch.no_grad()
def test_perm_mask_and_target_mapping_parity_query_stream_and_lm_logits():
    x = ids(3, 10, seed=4)
    perm_mask, target_mapping, targets, _ = order_masks(3, 10, 3, seed=4)
    mask = torch.ones(3, 10, dtype=torch.long)
    mask[2, :2] = 0
    kw = dict(perm_mask=perm_mask, target_mapping=target_mapping, attention_mask=mask)

    hf, ours = pair(seed=4)
    theirs = hf(input_ids=x, output_attentions=True, **kw)
    mine = ours(input_ids=x, output_attentions=True, **kw)
    assert mine.last_hidden_state.shape == (3, 3, TINY["d_model"])  # the query stream at the targets
    assert_close(mine.last_hidden_state, theirs.last_hidden_state, "query stream")
    assert_all_close(mine.mems, theirs.mems, "mems")
    assert_all_close(mine.attentions, theirs.attentions, "attentions (content, query)")

    hf, ours = pair(head=True, seed=5)
    labels = x.gather(1, targets)
    labels[0, 1] = -100
    theirs = hf(input_ids=x, labels=labels, **kw)
    mine = ours(input_ids=x, labels=labels, **kw)
    assert mine.logits.shape == (3, 3, V)
    assert_close(mine.logits, theirs.logits, "LM logits")
    assert_close(mine.loss, theirs.loss, "LM loss")


def _two_segments(model, first, second, **kw_second):
    out1 = model(input_ids=first, use_mems=True)
    out2 = model(input_ids=second, mems=out1.mems, use_mems=True, **kw_second)
    return out1, out2


MEMORY_CONFIGS = [
    dict(mem_len=5),  # shorter than a segment: the memory is truncated
    dict(mem_len=None),  # keep every state
    dict(mem_len=0),  # Hugging Face's 0 keeps every state too (ours: None, translated by from_hf)
    dict(mem_len=4, reuse_len=3),  # only the first 3 tokens of a segment enter the memory
]


@pytest.mark.parametrize("overrides", MEMORY_CONFIGS, ids=["mem_len5", "unbounded", "hf_zero", "reuse_len"])
@torch.no_grad()
def test_memory_parity_across_two_segments(overrides):
    hf, ours = pair(seed=6, **overrides)
    first, second = ids(2, 7, seed=6), ids(2, 6, seed=7)
    theirs1, theirs2 = _two_segments(hf, first, second)
    mine1, mine2 = _two_segments(ours, first, second)
    assert_all_close(mine1.mems, theirs1.mems, "mems after segment 1")
    assert mine1.mems[0].shape[0] == theirs1.mems[0].shape[0]
    assert_close(mine2.last_hidden_state, theirs2.last_hidden_state, "segment 2 last_hidden_state")
    assert_all_close(mine2.mems, theirs2.mems, "mems after segment 2")
    # the same layout: Hugging Face's memory feeds ours
    crossed = ours(input_ids=second, mems=theirs1.mems, use_mems=True)
    assert_close(crossed.last_hidden_state, theirs2.last_hidden_state, "segment 2 on Hugging Face's mems")
    # the memory is used
    alone = ours(input_ids=second)
    assert (alone.last_hidden_state - mine2.last_hidden_state).abs().max() > 1e-3


@torch.no_grad()
def test_mem_len_zero_is_no_memory_as_in_transformer_xl_and_translates_to_hugging_face():
    from course_lib.models.hf import xlnet_config_to_hf

    assert XLNetConfig.from_hf(transformers.XLNetConfig(**TINY, mem_len=0)).mem_len is None
    config = XLNetConfig(**TINY, mem_len=0)
    x = ids(2, 5, seed=1)
    assert XLNetModel(config).eval()(input_ids=x, use_mems=True).mems is None
    assert XLNetModel(config).train()(input_ids=x, use_mems=True).mems is None
    hf_values = xlnet_config_to_hf(config.to_dict())
    assert [hf_values[k] for k in ("mem_len", "use_mems_eval", "use_mems_train")] == [None, False, False]
    hf = transformers.XLNetModel(transformers.XLNetConfig(**hf_values)).eval()
    assert hf(input_ids=x).mems is None and hf.train()(input_ids=x).mems is None
    assert xlnet_config_to_hf(XLNetConfig(**TINY, mem_len=None).to_dict())["mem_len"] is None
    assert xlnet_config_to_hf(XLNetConfig(**TINY, mem_len=7).to_dict())["mem_len"] == 7


@torch.no_grad()
def test_memory_parity_with_masks_segments_and_targets_on_the_second_segment():
    hf, ours = pair(head=True, seed=8, mem_len=6)
    first, second = ids(2, 7, seed=8), ids(2, 8, seed=9)
    perm_mask, target_mapping, _, _ = order_masks(2, 8, 2, seed=9)
    mask = torch.ones(2, 8, dtype=torch.long)
    mask[1, :2] = 0
    types = (torch.arange(8) >= 4).long().expand(2, 8)
    kw = dict(perm_mask=perm_mask, target_mapping=target_mapping, attention_mask=mask, token_type_ids=types)
    theirs1, theirs2 = _two_segments(hf, first, second, **kw)
    mine1, mine2 = _two_segments(ours, first, second, **kw)
    assert_all_close(mine1.mems, theirs1.mems, "mems after segment 1")
    assert_close(mine2.logits, theirs2.logits, "segment 2 LM logits")
    assert_all_close(mine2.mems, theirs2.mems, "mems after segment 2")


BI_DATA_CONFIGS = [dict(mem_len=6), dict(mem_len=6, clamp_len=3)]


@pytest.mark.parametrize("overrides", BI_DATA_CONFIGS, ids=["bi_data", "bi_data_clamp_len"])
@torch.no_grad()
def test_bi_data_parity_with_padding_segments_targets_and_memory(overrides):
    """bi_data: forward distances for the first half of the batch, negated ones for the second
    (Hugging Face's ``relative_positional_encoding``), on every input the other tests use."""
    hf, ours = pair(head=True, seed=13, bi_data=True, **overrides)
    assert ours.config.bi_data and ours.config.clamp_len == overrides.get("clamp_len", -1)
    b = 4
    first, second = ids(b, 7, seed=13), ids(b, 8, seed=14)
    perm_mask, target_mapping, _, _ = order_masks(b, 8, 3, seed=14)
    mask = torch.ones(b, 8, dtype=torch.long)
    mask[1, :2] = 0  # left padding in the forward half
    mask[3, 6:] = 0  # right padding in the backward half
    types = (torch.arange(8) >= 4).long().expand(b, 8)
    kw = dict(perm_mask=perm_mask, target_mapping=target_mapping, attention_mask=mask, token_type_ids=types)
    out = dict(output_hidden_states=True, output_attentions=True)
    theirs1, theirs2 = _two_segments(hf, first, second, **kw, **out)
    mine1, mine2 = _two_segments(ours, first, second, **kw, **out)
    assert_all_close(mine1.mems, theirs1.mems, "bi_data mems after segment 1")
    assert_close(mine2.logits, theirs2.logits, "bi_data segment 2 LM logits")
    assert_all_close(mine2.mems, theirs2.mems, "bi_data mems after segment 2")
    assert_all_close(mine2.hidden_states, theirs2.hidden_states, "bi_data hidden_states")
    assert_all_close(mine2.attentions, theirs2.attentions, "bi_data attentions")
    # the backward half is read differently, the forward half exactly as without bi_data
    plain = XLNetLMHeadModel(XLNetConfig(**{**ours.config.to_dict(), "bi_data": False})).eval()
    plain.load_state_dict(ours.state_dict())
    _, plain2 = _two_segments(plain, first, second, **kw)
    assert_close(plain2.logits[:2], mine2.logits[:2], "the forward half as without bi_data")
    assert (plain2.logits[2:] - mine2.logits[2:]).abs().amax(dim=(1, 2)).min() > 1e-3


@torch.no_grad()
def test_bi_data_backward_half_is_the_forward_model_on_reversed_rows():
    """Without memory, reversed tokens (masks, segments, targets reversed too) read with negated
    distances give every key its true side: the backward half computes what the forward model
    computes on the rows before reversal."""
    _, ours = pair(head=True, seed=15, bi_data=True)
    plain = XLNetLMHeadModel(XLNetConfig(**{**ours.config.to_dict(), "bi_data": False})).eval()
    plain.load_state_dict(ours.state_dict())
    n = 9
    x = ids(2, n, seed=15)
    perm_mask, target_mapping, _, _ = order_masks(2, n, 3, seed=15)
    mask = torch.ones(2, n, dtype=torch.long)
    mask[1, :3] = 0
    types = (torch.arange(n) >= 5).long().expand(2, n)
    kw = dict(perm_mask=perm_mask, target_mapping=target_mapping, attention_mask=mask, token_type_ids=types)
    flipped = dict(
        perm_mask=perm_mask.flip(1, 2),
        target_mapping=target_mapping.flip(2),
        attention_mask=mask.flip(1),
        token_type_ids=types.flip(1),
    )
    both = {k: torch.cat([v, flipped[k]]) for k, v in kw.items()}
    mine = ours(input_ids=torch.cat([x, x.flip(1)]), use_mems=False, **both)
    forward = plain(input_ids=x, use_mems=False, **kw)
    assert_close(mine.logits[:2], forward.logits, "forward half")
    assert_close(mine.logits[2:], forward.logits, "backward half on reversed rows")
    # the content stream, position by position, reversed back
    both_rows = torch.cat([x, x.flip(1)])
    h_bi = ours.transformer(both_rows, attention_mask=both["attention_mask"]).last_hidden_state
    h_fw = plain.transformer(x, attention_mask=mask).last_hidden_state
    assert_close(h_bi[2:].flip(1), h_fw, "content stream of the backward half")
    # control: the reversed rows read with forward distances are not the same
    wrong = plain(input_ids=x.flip(1), use_mems=False, **flipped)
    assert (wrong.logits - forward.logits).abs().max() > 1e-3


def test_bi_data_refuses_an_odd_batch_in_one_line():
    _, ours = pair(seed=16, bi_data=True)
    with pytest.raises(ValueError, match="even batch size") as err:
        ours(input_ids=ids(3, 5, seed=16))
    assert "\n" not in str(err.value)
    assert ours(input_ids=ids(2, 5, seed=16)).last_hidden_state.shape == (2, 5, TINY["d_model"])


# ---------------------------------------------------------------------------------------
# What each stream may see (our model alone)
# ---------------------------------------------------------------------------------------


def _perturb(x: torch.Tensor, where: torch.Tensor, seed: int) -> torch.Tensor:
    """``x`` with a different token wherever ``where`` is True."""
    shift = torch.randint(1, V, x.shape, generator=torch.Generator().manual_seed(seed))
    return torch.where(where, (x + shift) % V, x)


@torch.no_grad()
def test_content_stream_never_depends_on_tokens_perm_mask_hides():
    _, ours = pair(seed=10)
    n = 8
    x = ids(1, n, seed=10).expand(n, n)  # row i tests position i
    perm_mask, _, _, rank = order_masks(1, n, n, seed=10)  # every token a target: a full order
    perm_mask, rank = perm_mask.expand(n, n, n), rank[0]
    hidden_from_row = rank[None, :] > rank[:, None]  # [i, j]: j after i in the order
    assert hidden_from_row.any(dim=1).sum() == n - 1
    pos = torch.arange(n)
    base = ours(input_ids=x, perm_mask=perm_mask).last_hidden_state[pos, pos]
    hidden = ours(input_ids=_perturb(x, hidden_from_row, 1), perm_mask=perm_mask).last_hidden_state[pos, pos]
    assert torch.equal(hidden, base)
    # control: the tokens it sees do change it (every position but the first of the order)
    seen = (rank[None, :] < rank[:, None]) | torch.eye(n, dtype=torch.bool)
    changed = ours(input_ids=_perturb(x, seen, 2), perm_mask=perm_mask).last_hidden_state[pos, pos]
    assert ((changed - base).abs().amax(dim=-1) > 1e-4).all()


@torch.no_grad()
def test_query_stream_never_depends_on_its_own_token():
    _, ours = pair(seed=11)
    n = 8
    x = ids(1, n, seed=11).expand(n, n)
    perm_mask, _, _, rank = order_masks(1, n, n, seed=11)
    perm_mask, rank = perm_mask.expand(n, n, n), rank[0]
    target_mapping = torch.eye(n).expand(n, n, n)  # predict every position, in position order
    kw = dict(perm_mask=perm_mask, target_mapping=target_mapping)
    pos = torch.arange(n)
    own = torch.eye(n, dtype=torch.bool)

    def streams(tokens):
        g = ours(input_ids=tokens, **kw).last_hidden_state[pos, pos]
        h = ours(input_ids=tokens, perm_mask=perm_mask).last_hidden_state[pos, pos]
        return g, h

    g, h = streams(x)
    g_own, h_own = streams(_perturb(x, own, 3))
    assert torch.equal(g_own, g)  # the query stream at a target: blind to its own token
    assert ((h_own - h).abs().amax(dim=-1) > 1e-4).all()  # the content stream is not
    g_later, _ = streams(_perturb(x, rank[None, :] >= rank[:, None], 4))  # itself and every later token
    assert torch.equal(g_later, g)


# ---------------------------------------------------------------------------------------
# Pieces, configuration, interop contract
# ---------------------------------------------------------------------------------------


def test_rel_shift_reads_row_i_shifted_by_q_len_minus_i():
    q_len, k_len = 4, 7
    raw = torch.randn(2, 3, q_len, k_len + q_len)
    i = torch.arange(q_len)[:, None]
    j = torch.arange(k_len)[None, :]
    expected = raw.gather(-1, (j + q_len - i).expand(2, 3, q_len, k_len))
    assert torch.equal(rel_shift(raw, k_len), expected)


def test_config_from_hf_and_refused_options():
    hf_config = transformers.XLNetConfig(**TINY, mem_len=None, clamp_len=7, ff_activation="gelu_new")
    c = XLNetConfig.from_hf(hf_config)
    assert (c.d_model, c.n_layer, c.n_head, c.d_inner, c.d_head) == (32, 2, 4, 48, 8)
    assert (c.mem_len, c.clamp_len, c.ff_activation) == (None, 7, "gelu_new")
    for course_name in ("n_heads", "n_layers", "d_ff", "hidden_size", "num_hidden_layers"):  # one vocabulary
        assert not hasattr(c, course_name), course_name
    assert XLNetConfig(**c.to_dict()) == c
    assert XLNetConfig.from_hf(hf_config.to_dict()) == c
    with pytest.raises(ValueError, match="attn_type"):
        XLNetConfig.from_hf(transformers.XLNetConfig(**TINY, attn_type="uni"))
    assert XLNetConfig.from_hf(transformers.XLNetConfig(**TINY, bi_data=True)).bi_data
    with pytest.raises(ValueError, match="bert"):
        XLNetConfig.from_hf({"model_type": "bert"})
    with pytest.raises(ValueError, match="divisible"):
        XLNetConfig(d_model=30, n_head=4)


def test_interop_contract_exports_parameters_mems_modes_and_input_checks():
    assert course_lib.XLNetConfig is XLNetConfig
    assert course_lib.XLNetModel is XLNetModel
    assert course_lib.XLNetLMHeadModel is XLNetLMHeadModel
    hf, ours = pair(head=True, seed=12)
    assert ours.num_parameters() == hf.num_parameters()
    assert ours.num_parameters(exclude_embeddings=True) == hf.num_parameters(exclude_embeddings=True)
    assert ours.lm_head.weight is ours.transformer.word_embedding.weight
    x = ids(2, 5, seed=12)
    assert ours(input_ids=x).mems is not None  # eval: use_mems_eval
    assert ours(input_ids=x, use_mems=False).mems is None
    ours.train()
    out = ours(input_ids=x, use_mems=True)
    assert all(not m.requires_grad for m in out.mems)  # detached
    assert out.logits.requires_grad
    assert ours(input_ids=x).mems is None  # training: use_mems_train
    with pytest.raises(ValueError, match="not both"):
        ours(input_ids=x, attention_mask=torch.ones_like(x), input_mask=torch.zeros_like(x))
    with pytest.raises(ValueError, match="perm_mask"):
        ours(input_ids=x, perm_mask=torch.zeros(2, 5, 4))
    with pytest.raises(ValueError, match="vocab_size"):
        ours(input_ids=x + V)
    with pytest.raises(ValueError, match="one tensor per layer"):
        ours(input_ids=x, mems=out.mems[:1])


# ---------------------------------------------------------------------------------------
# The token classifier (fine-tuning)
# ---------------------------------------------------------------------------------------


def tagger_pair(seed: int, num_labels: int = 5):
    """A random-weight ``transformers.XLNetForTokenClassification`` and ours copied from it (eval)."""
    hf = transformers.XLNetForTokenClassification(transformers.XLNetConfig(**TINY, num_labels=num_labels))
    randomize_(hf.eval(), seed)
    return hf, XLNetForTokenClassification.from_hf(hf)


def tagging_batch(seed: int, num_labels: int = 5):
    """Padded inputs (left and right), two segments and labels with -100 (padding, first and
    some inner positions)."""
    x = ids(3, 10, seed=seed)
    mask = torch.ones(3, 10, dtype=torch.long)
    mask[0, :3] = 0  # left padding
    mask[1, 7:] = 0  # right padding
    types = torch.zeros(3, 10, dtype=torch.long)
    types[:, 6:] = 1  # sentence B
    labels = torch.randint(0, num_labels, (3, 10), generator=torch.Generator().manual_seed(seed))
    labels[mask == 0] = -100
    labels[:, 0] = -100
    labels[2, 4:6] = -100
    return dict(input_ids=x, attention_mask=mask, token_type_ids=types), labels


@torch.no_grad()
def test_token_classifier_parity_with_padding_segments_and_ignored_labels():
    hf, ours = tagger_pair(seed=20)
    assert isinstance(ours.config, XLNetTaskConfig) and ours.config.num_labels == 5
    assert ours.num_parameters() == hf.num_parameters()
    inputs, labels = tagging_batch(seed=20)
    kw = dict(output_hidden_states=True, output_attentions=True)
    theirs, mine = hf(**inputs, labels=labels, **kw), ours(**inputs, labels=labels, **kw)
    assert_close(mine.logits, theirs.logits, "tagger logits")
    assert_close(mine.loss, theirs.loss, "tagger loss")
    assert_all_close(mine.mems, theirs.mems, "tagger mems")
    assert_all_close(mine.hidden_states, theirs.hidden_states, "tagger hidden_states")
    assert_all_close(mine.attentions, theirs.attentions, "tagger attentions")
    # the loss is the mean over the labelled positions only
    kept = labels != -100
    assert torch.allclose(mine.loss, F.cross_entropy(mine.logits[kept], labels[kept]), atol=1e-6)
    assert ours(**inputs).loss is None
    with pytest.raises(ValueError, match="labels must be"):
        ours(**inputs, labels=labels[:, :4])


@torch.no_grad()
def test_token_classifier_exports_to_hugging_face_names():
    """Ours -> Hugging Face: the exported state dict loads into a fresh transformers tagger
    (strict) and gives the same logits."""
    from course_lib.export import hf_state_dict

    _, ours = tagger_pair(seed=21, num_labels=3)
    ours.classifier.bias.normal_()  # not zero: a lost bias would show
    fresh = transformers.XLNetForTokenClassification(transformers.XLNetConfig(**TINY, num_labels=3)).eval()
    fresh.load_state_dict(hf_state_dict(ours), strict=True)
    inputs, _ = tagging_batch(seed=21, num_labels=3)
    assert_close(ours(**inputs).logits, fresh(**inputs).logits, "exported tagger logits")


@torch.no_grad()
def test_load_body_copies_a_pretrained_xlnet_exactly(tmp_path):
    """Fine-tuning's start: our tagger on a pretrained XLNetLMHeadModel's body equals Hugging
    Face's XLNetForTokenClassification.from_pretrained of that LM (same new classifier)."""
    hf_lm, lm = pair(head=True, seed=22)
    tagger = XLNetForTokenClassification(XLNetTaskConfig(**lm.config.to_dict(), num_labels=4)).eval()
    tagger.load_body(lm.transformer)
    body, start = tagger.transformer.state_dict(), lm.transformer.state_dict()
    assert body.keys() == start.keys() and all(torch.equal(body[k], start[k]) for k in body)
    hf_lm.save_pretrained(tmp_path)
    hf_tagger = transformers.XLNetForTokenClassification.from_pretrained(tmp_path, num_labels=4).eval()
    tagger.classifier.load_state_dict(hf_tagger.classifier.state_dict())
    inputs, _ = tagging_batch(seed=22, num_labels=4)
    assert_close(tagger(**inputs).logits, hf_tagger(**inputs).logits, "tagger on the pretrained body")
    other = XLNetModel(XLNetConfig(**{**TINY, "n_layer": 1}))
    with pytest.raises(ValueError, match="does not fit"):
        tagger.load_body(other)


def test_token_classifier_config_and_interop_contract():
    assert course_lib.XLNetForTokenClassification is XLNetForTokenClassification
    assert course_lib.XLNetTaskConfig is XLNetTaskConfig
    plain = XLNetConfig(**TINY)
    tagger = XLNetForTokenClassification(plain)  # a pretraining config: the task fields' defaults
    assert isinstance(tagger.config, XLNetTaskConfig) and tagger.config.num_labels == 2
    assert tagger.config.classifier_dropout is None and tagger.dropout.p == 0.0
    c = XLNetTaskConfig(**TINY, num_labels=7, classifier_dropout=0.2)
    assert XLNetTaskConfig(**c.to_dict()) == c
    assert XLNetForTokenClassification(c).dropout.p == 0.2
    hf_config = transformers.XLNetConfig(**TINY, num_labels=7)
    assert XLNetTaskConfig.from_hf(hf_config).num_labels == 7
    # the pretraining config (its to_dict keys cached runs) has no task fields
    assert "num_labels" not in XLNetConfig(**TINY).to_dict()
    with pytest.raises(ValueError, match="num_labels"):
        XLNetTaskConfig(**TINY, num_labels=0)
    with pytest.raises(TypeError, match="XLNetConfig"):
        XLNetForTokenClassification(course_lib.BertConfig())
    x = ids(2, 5, seed=23)
    tagger.train()
    assert tagger(x).mems is None and tagger.eval()(x).mems is not None  # XLNet's use_mems_* defaults


def test_last_content_stream_is_skipped_with_the_same_numbers_and_random_draws():
    """With target_mapping nothing reads the last layer's content stream: it is not computed
    (its Q projection runs once, for the query stream), yet the loss, every gradient and the
    random state after a training step on the CPU equal those of the full computation (hidden
    states asked for); eval outputs are equal too. Misuse of content=False is refused."""
    from course_lib.tools.bench_models import BenchShape, build_pair, make_batch

    shape = BenchShape(batch=4, seq=16, layers=3, hidden=32, heads=4, vocab=100)
    model, _ = build_pair("xlnet", shape)
    batch = make_batch("xlnet", shape)
    calls = []
    model.transformer.layers[-1].attention.w_q.register_forward_hook(lambda *a: calls.append(1))

    def step(hidden):
        m = copy.deepcopy(model).train()
        torch.manual_seed(3)
        out = m(**batch, output_hidden_states=hidden)
        out.loss.backward()
        grads = {n: p.grad for n, p in m.named_parameters() if p.grad is not None}
        return out.loss.detach(), grads, torch.get_rng_state()

    calls.clear()
    skipped = step(False)
    assert len(calls) == 1  # the copies carry the hook: the query stream's projection only
    full = step(True)
    assert len(calls) == 3
    assert torch.equal(skipped[0], full[0]) and torch.equal(skipped[2], full[2])
    assert skipped[1].keys() == full[1].keys()
    assert all(torch.equal(skipped[1][k], full[1][k]) for k in full[1])
    model.eval()
    calls.clear()
    with torch.no_grad():
        lean = model(**batch).logits
        assert len(calls) == 1  # the query stream's only
        whole = model(**batch, output_hidden_states=True).logits
        assert len(calls) == 3
    assert torch.equal(lean, whole)
    layer = model.transformer.layers[0]
    h = torch.randn(2, 5, 32)
    with pytest.raises(ValueError, match="content=False needs the query stream"):
        layer.attention(h, None, pos_emb=torch.randn(10, 32), content=False)


def test_draw_dropout_takes_what_dropout_takes():
    from course_lib.nn.feedforward import draw_dropout

    for dtype in (torch.float32, torch.bfloat16):
        torch.manual_seed(0)
        F.dropout(torch.ones(3, 7, dtype=dtype), p=0.2)
        after_dropout = torch.rand(4)
        torch.manual_seed(0)
        draw_dropout(0.2, True, (3, 7), torch.device("cpu"))
        assert torch.equal(torch.rand(4), after_dropout)
    torch.manual_seed(0)
    expected = torch.rand(4)
    for p, training in ((0.0, True), (0.2, False), (1.0, True)):  # dropout draws nothing here
        torch.manual_seed(0)
        draw_dropout(p, training, (3, 7), torch.device("cpu"))
        assert torch.equal(torch.rand(4), expected)
