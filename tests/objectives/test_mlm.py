"""The MLM/NSP data pipeline: masking statistics, static vs dynamic masks, NSP balance,
packing against a brute-force reference, collation, and the loss used with fit()."""

import math
import random

import pytest
import torch

from course_lib.models.bert import BertConfig, BertForMaskedLM, BertForPreTraining
from course_lib.objectives import (
    KEPT,
    MASKED,
    RANDOM,
    MaskedLMData,
    MLMMasker,
    collate,
    make_nsp_pairs,
    mask_tokens,
    pack_pair,
    pack_pairs,
    pack_sentences,
    pack_stream,
    pretraining_loss,
    trim_padding,
    truncate_pair_lengths,
)
from course_lib.train import fit

PAD, CLS, SEP, MASK, UNK = 0, 1, 2, 3, 4
SPECIALS = (PAD, CLS, SEP, MASK, UNK)
V = 200


def five_sigma(p, n):
    """Five standard deviations of a binomial proportion: a false alarm has odds ~1 in 3.5 million."""
    return 5 * math.sqrt(p * (1 - p) / n)


def synthetic_batch(n=8000, seq=128, seed=0):
    """[CLS] tokens [SEP] [PAD]... with random lengths; ordinary ids 5..V-1 (some [UNK]s too)."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, V, (n, seq), generator=g)
    ids[torch.rand(n, seq, generator=g) < 0.01] = UNK
    lengths = torch.randint(8, seq + 1, (n,), generator=g)
    cols = torch.arange(seq)[None, :]
    ids[:, 0] = CLS
    ids[torch.arange(n), lengths - 1] = SEP
    ids[cols >= lengths[:, None]] = PAD
    return ids


@pytest.fixture(scope="module")
def masked_sample():
    ids = synthetic_batch()
    g = torch.Generator().manual_seed(1)
    inputs, labels, actions = mask_tokens(
        ids, vocab_size=V, mask_token_id=MASK, special_ids=SPECIALS, generator=g, return_actions=True
    )
    return ids, inputs, labels, actions


def test_chosen_fraction_is_15_percent_of_ordinary_tokens(masked_sample):
    ids, _, labels, _ = masked_sample
    eligible = ~torch.isin(ids, torch.tensor(SPECIALS))
    chosen = labels != -100
    n = int(eligible.sum())
    frac = chosen.sum().item() / n
    assert abs(frac - 0.15) < five_sigma(0.15, n), frac


def test_special_and_padding_tokens_are_never_chosen(masked_sample):
    ids, inputs, labels, _ = masked_sample
    special = torch.isin(ids, torch.tensor(SPECIALS))
    assert special.sum() > 100_000  # the sample really contains padding and specials
    assert (labels[special] == -100).all()
    assert torch.equal(inputs[special], ids[special])


def test_split_is_80_10_10_with_one_draw_per_chosen_token(masked_sample):
    """A two-coin scheme (81/9/10) is 0.01 off on 'random': more than the 5-sigma band here."""
    ids, inputs, labels, actions = masked_sample
    chosen = labels != -100
    n = int(chosen.sum())
    assert n > 70_000  # 5 sigma on "random" is then 0.0054 < 0.01
    assert torch.equal(labels[chosen], ids[chosen])  # labels are the original ids
    # read the outcome from the data itself, then check it agrees with the reported actions
    masked = chosen & (inputs == MASK)
    changed = chosen & (inputs != ids) & (inputs != MASK)
    assert torch.equal(masked, actions == MASKED)
    assert (actions[changed] == RANDOM).all()
    assert (inputs[actions == KEPT] == ids[actions == KEPT]).all()
    for code, p in ((MASKED, 0.8), (RANDOM, 0.1), (KEPT, 0.1)):
        frac = (actions[chosen] == code).sum().item() / n
        assert abs(frac - p) < five_sigma(p, n), (code, frac)
    assert (actions[~chosen] == 0).all()


def test_random_replacements_are_uniform_over_ordinary_tokens(masked_sample):
    _, inputs, _, actions = masked_sample
    drawn = inputs[actions == RANDOM]
    counts = torch.bincount(drawn, minlength=V).double()
    assert counts[list(SPECIALS)].sum() == 0  # never [MASK], [PAD], [CLS], [SEP], [UNK]
    ordinary = counts[5:]
    expected = drawn.numel() / ordinary.numel()
    chi2 = ((ordinary - expected) ** 2 / expected).sum().item()
    df = ordinary.numel() - 1
    assert chi2 < df + 5 * math.sqrt(2 * df), chi2
    assert (ordinary > 0).all()


def test_masking_is_reproducible_and_validates_its_arguments():
    ids = synthetic_batch(n=8, seq=32)
    kw = dict(vocab_size=V, mask_token_id=MASK, special_ids=SPECIALS)
    a = mask_tokens(ids, **kw, generator=torch.Generator().manual_seed(5))
    b = mask_tokens(ids, **kw, generator=torch.Generator().manual_seed(5))
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    with pytest.raises(ValueError, match="special"):
        mask_tokens(ids, vocab_size=V, mask_token_id=MASK)
    with pytest.raises(ValueError, match="sum to at most 1"):
        mask_tokens(ids, **kw, mask_replace_prob=0.95, random_replace_prob=0.1)
    with pytest.raises(ValueError, match="mask_token_id"):
        mask_tokens(ids, vocab_size=V, mask_token_id=V, special_ids=SPECIALS)
    # special_mask adds positions that are never chosen, whatever their id
    protect = torch.zeros_like(ids, dtype=torch.bool)
    protect[:, :10] = True
    _, labels = mask_tokens(ids, **kw, special_mask=protect, mlm_probability=1.0)
    assert (labels[:, :10] == -100).all() and (
        labels[:, 10:][~torch.isin(ids[:, 10:], torch.tensor(SPECIALS))] != -100
    ).all()


def packed_examples(n=64, seq=24, seed=0):
    ids = synthetic_batch(n=n, seq=seq, seed=seed)
    return {
        "input_ids": ids,
        "attention_mask": (ids != PAD).long(),
        "token_type_ids": torch.zeros_like(ids),
        "next_sentence_label": torch.randint(0, 2, (n,)),
    }


MASKER = MLMMasker(vocab_size=V, mask_token_id=MASK, special_ids=SPECIALS)


def masks_seen_in_epoch(data):
    """Iterate one epoch; return the masked inputs re-sorted to the original order."""
    rows = {}
    originals = data.examples["input_ids"]
    for batch in data:
        for row_in, row_lab in zip(batch["input_ids"], batch["labels"]):
            orig = torch.where(row_lab != -100, row_lab, row_in)
            idx = int(torch.nonzero((originals == orig).all(1))[0])
            rows[idx] = row_in
    return torch.stack([rows[i] for i in range(len(rows))])


def test_static_masks_repeat_across_epochs_and_dynamic_ones_do_not():
    ex = packed_examples()
    static = MaskedLMData(ex, masker=MASKER, masking="static", batch_size=16, seed=3)
    dynamic = MaskedLMData(ex, masker=MASKER, masking="dynamic", batch_size=16, seed=3)
    s0, s1 = masks_seen_in_epoch(static), masks_seen_in_epoch(static)
    d0, d1 = masks_seen_in_epoch(dynamic), masks_seen_in_epoch(dynamic)
    assert torch.equal(s0, s1)
    differs = (d0 != d1).any(1)
    assert differs.float().mean() > 0.9  # nearly every sequence gets a new mask
    # batches are reshuffled every epoch in both cases
    assert not torch.equal(next(iter(static))["input_ids"], next(iter(static))["input_ids"])


def test_static_copies_cycle_like_berts_duplicated_data():
    data = MaskedLMData(packed_examples(), masker=MASKER, masking="static", static_copies=3, seed=1)
    views = [data.epoch_view(e)["input_ids"] for e in range(4)]
    assert torch.equal(views[0], views[3])
    assert not torch.equal(views[0], views[1]) and not torch.equal(views[1], views[2])


def test_masked_lm_data_never_masks_padding_even_if_pad_is_not_listed():
    ex = packed_examples()
    masker = MLMMasker(vocab_size=V, mask_token_id=MASK, special_ids=(CLS, SEP), mlm_probability=0.9)
    view = MaskedLMData(ex, masker=masker, masking="dynamic").epoch_view(0)
    pad = ex["attention_mask"] == 0
    assert (view["labels"][pad] == -100).all() and (view["input_ids"][pad] == PAD).all()
    assert set(view) == {"input_ids", "labels", "attention_mask", "token_type_ids", "next_sentence_label"}


def test_masked_lm_data_validates():
    ex = packed_examples()
    with pytest.raises(ValueError, match="static"):
        MaskedLMData(ex, masker=MASKER, masking="sometimes")
    with pytest.raises(ValueError, match="rows"):
        MaskedLMData({**ex, "next_sentence_label": torch.zeros(3)}, masker=MASKER)


def nsp_corpus(n_docs=2000, seed=0):
    """Documents of 2-9 sentences; each sentence carries its own (doc, index) code."""
    rng = random.Random(seed)
    docs = []
    for d in range(n_docs):
        docs.append(
            [
                [10_000 + d * 10 + i] + [rng.randrange(5, V) for _ in range(rng.randrange(1, 6))]
                for i in range(rng.randrange(2, 10))
            ]
        )
    return docs


def test_nsp_pairs_are_balanced_and_correct():
    docs = nsp_corpus()
    pairs = make_nsp_pairs(docs, torch.Generator().manual_seed(0))
    n = len(pairs.a)
    assert n == sum(len(d) - 1 for d in docs)
    frac = pairs.label.float().mean().item()
    assert abs(frac - 0.5) < five_sigma(0.5, n), frac
    code_a = torch.tensor([s[0] for s in pairs.a]) - 10_000
    code_b = torch.tensor([s[0] for s in pairs.b]) - 10_000
    doc_a, doc_b = code_a // 10, code_b // 10
    true_next = pairs.label == 0
    assert torch.equal(code_b[true_next], code_a[true_next] + 1)  # the actual next sentence
    assert (doc_b[~true_next] != doc_a[~true_next]).all()  # random B always from another document


def test_nsp_pairs_accept_several_rng_kinds_and_validate():
    import numpy as np

    docs = nsp_corpus(n_docs=20)
    a = make_nsp_pairs(docs, 7)
    b = make_nsp_pairs(docs, 7)
    assert torch.equal(a.label, b.label) and a.b == b.b
    make_nsp_pairs(docs, np.random.default_rng(0))
    make_nsp_pairs(docs, random.Random(0))
    with pytest.raises(ValueError, match="2 non-empty documents"):
        make_nsp_pairs(docs[:1], 0)


def truncate_reference(a, b, budget):
    """BERT's truncate_seq_pair, one token at a time."""
    a, b = list(a), list(b)
    while len(a) + len(b) > budget:
        (a if len(a) > len(b) else b).pop()
    return a, b


def test_pack_pairs_matches_a_brute_force_reference():
    rng = random.Random(0)
    for max_len in (5, 6, 11, 16, 40):
        a_list = [[rng.randrange(5, V) for _ in range(rng.randrange(1, 30))] for _ in range(50)]
        b_list = [[rng.randrange(5, V) for _ in range(rng.randrange(1, 30))] for _ in range(50)]
        out = pack_pairs(a_list, b_list, max_len, cls_id=CLS, sep_id=SEP, pad_id=PAD)
        width = out["input_ids"].size(1)
        assert width <= max_len
        for i, (a, b) in enumerate(zip(a_list, b_list)):
            ta, tb = truncate_reference(a, b, max_len - 3)
            ids = [CLS, *ta, SEP, *tb, SEP]
            types = [0] * (len(ta) + 2) + [1] * (len(tb) + 1)
            pad = width - len(ids)
            assert out["input_ids"][i].tolist() == ids + [PAD] * pad
            assert out["token_type_ids"][i].tolist() == types + [0] * pad
            assert out["attention_mask"][i].tolist() == [1] * len(ids) + [0] * pad


def test_truncation_lengths_exhaustively():
    for budget in range(1, 12):
        la, lb = torch.meshgrid(torch.arange(13), torch.arange(13), indexing="ij")
        na, nb = truncate_pair_lengths(la.flatten(), lb.flatten(), budget)
        for x, y, p, q in zip(la.flatten().tolist(), lb.flatten().tolist(), na.tolist(), nb.tolist()):
            ra, rb = truncate_reference(range(x), range(y), budget)
            assert (p, q) == (len(ra), len(rb)), (budget, x, y)


def test_single_segments_and_pack_pair():
    out = pack_pairs([[7, 8, 9], [10]], None, 4, cls_id=CLS, sep_id=SEP)
    assert out["input_ids"].tolist() == [[CLS, 7, 8, SEP], [CLS, 10, SEP, PAD]]
    one = pack_pair([7, 8], [9, 10, 11], 16, cls_id=CLS, sep_id=SEP)
    assert one["input_ids"].tolist() == [CLS, 7, 8, SEP, 9, 10, 11, SEP]
    assert one["token_type_ids"].tolist() == [0, 0, 0, 0, 1, 1, 1, 1]
    with pytest.raises(ValueError, match="max_len"):
        pack_pairs([[5]], [[6]], 4, cls_id=CLS, sep_id=SEP)


def test_pack_stream_keeps_every_token_in_order():
    seqs = [list(range(5 + i, 5 + i + n)) for i, n in enumerate([3, 7, 1, 12, 4])]
    out = pack_stream(seqs, 8, cls_id=CLS, sep_id=SEP, pad_id=PAD, separator_id=UNK)
    ids, mask = out["input_ids"], out["attention_mask"]
    assert ids.shape[1] == 8 and (ids[:, 0] == CLS).all()
    body = [t for row, m in zip(ids.tolist(), mask.tolist()) for t, k in zip(row[1:], m[1:]) if k][:]
    stream = [t for s in seqs for t in s + [UNK]]
    assert [t for t in body if t != SEP] == stream
    assert (mask.sum(1)[:-1] == 8).all()


def test_pack_sentences_gives_one_row_per_sentence():
    seqs = [[5, 6, 7], [], [8], list(range(9, 20))]
    out = pack_sentences(seqs, 8, cls_id=CLS, sep_id=SEP, pad_id=PAD)
    ids, mask = out["input_ids"].tolist(), out["attention_mask"].tolist()
    assert ids == [
        [CLS, 5, 6, 7, SEP, PAD, PAD, PAD],
        [CLS, 8, SEP, PAD, PAD, PAD, PAD, PAD],
        [CLS, 9, 10, 11, 12, 13, 14, SEP],  # cut to max_len
    ]
    assert mask == [[int(t != PAD) for t in row] for row in ids]
    assert out["token_type_ids"].eq(0).all()
    with pytest.raises(ValueError, match="no tokens"):
        pack_sentences([[]], 8, cls_id=CLS, sep_id=SEP)


def test_pretraining_examples_row_unit(docs, tok):
    from course_lib.data.documents import tokenize_documents
    from course_lib.objectives.pretraining import pretraining_examples

    sentences = [s for d in tokenize_documents(docs[:5], tok) for s in d]
    rows = pretraining_examples(docs[:5], tok, max_len=64, pair_task=None, row_unit="sentence")
    assert rows["input_ids"].size(0) == len(sentences)  # one row per sentence, in order
    for row, n, s in zip(rows["input_ids"].tolist(), rows["attention_mask"].sum(1).tolist(), sentences):
        assert row[:n] == [tok.token_to_id("[CLS]"), *s[:62], tok.token_to_id("[SEP]")]
    with pytest.raises(ValueError, match="row_unit"):
        pretraining_examples(docs, tok, max_len=16, pair_task="nsp", row_unit="sentence")
    with pytest.raises(ValueError, match="row_unit"):
        pretraining_examples(docs, tok, max_len=16, pair_task=None, row_unit="page")


def test_collate_pads_each_field_with_its_own_value():
    batch = collate(
        [
            {
                "input_ids": [1, 5, 6, 2],
                "token_type_ids": [0, 0, 1, 1],
                "labels": [-100, 5, -100, -100],
                "next_sentence_label": 1,
            },
            {
                "input_ids": [1, 7, 2],
                "token_type_ids": [0, 0, 0],
                "labels": [-100, -100, 7],
                "next_sentence_label": 0,
            },
        ],
        pad_id=PAD,
    )
    assert batch["input_ids"].tolist() == [[1, 5, 6, 2], [1, 7, 2, PAD]]
    assert batch["labels"][1, 3] == -100 and batch["token_type_ids"][1, 3] == 0
    assert batch["attention_mask"].tolist() == [[1, 1, 1, 1], [1, 1, 1, 0]]
    assert batch["next_sentence_label"].tolist() == [1, 0]


def test_pretraining_with_fit_lowers_the_loss():
    """A tiny BERT learns something (MLM + NSP) in a few dozen steps with course_lib.train.fit."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a 32-wide model: one thread is fastest on a shared machine
    try:
        torch.manual_seed(0)
        # each sequence repeats one token, so a masked token is readable from its neighbours
        g = torch.Generator().manual_seed(0)
        tok = torch.randint(5, 32, (256, 1), generator=g)
        ids = torch.cat([torch.full((256, 1), CLS), tok.repeat(1, 12), torch.full((256, 1), SEP)], 1)
        ex = {
            "input_ids": ids,
            "attention_mask": torch.ones_like(ids),
            "token_type_ids": torch.zeros_like(ids),
            "next_sentence_label": torch.randint(0, 2, (256,), generator=g),
        }
        data = MaskedLMData(
            ex,
            masker=MLMMasker(vocab_size=32, mask_token_id=MASK, special_ids=SPECIALS),
            batch_size=32,
            seed=0,
        )
        config = BertConfig(
            vocab_size=32,
            hidden_size=32,
            num_attention_heads=4,
            num_hidden_layers=2,
            intermediate_size=128,
            max_position_embeddings=32,
            hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0,
        )
        model = BertForPreTraining(config)
        hist = fit(model, data, pretraining_loss, steps=60, lr=3e-3, progress=False)
    finally:
        torch.set_num_threads(threads)
    assert {"mlm_loss", "nsp_loss", "mlm_accuracy", "nsp_accuracy"} <= set(hist.metrics)
    first = sum(hist.metrics["mlm_loss"][:5]) / 5
    last = sum(hist.metrics["mlm_loss"][-5:]) / 5
    assert last < first - 0.4, (first, last)
    accuracy = sum(hist.metrics["mlm_accuracy"][-10:]) / 10
    assert accuracy > 0.3, accuracy  # chance is 1/27
    # RoBERTa-style: the same loss on a model without NSP head ignores the batch's NSP labels
    mlm_model = BertForMaskedLM(config)
    assert BertForPreTraining.pair_objective == "nsp" and mlm_model.pair_objective is None
    loss, metrics = pretraining_loss(mlm_model, next(iter(data)))
    assert loss.ndim == 0 and "nsp_loss" not in metrics


def test_pretraining_loss_trims_all_padding_columns_first():
    config = BertConfig(
        vocab_size=32,
        hidden_size=16,
        num_attention_heads=2,
        num_hidden_layers=1,
        intermediate_size=64,
        max_position_embeddings=16,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    model = BertForMaskedLM(config).eval()
    ids = torch.tensor([[CLS, 7, 8, 9, SEP, PAD, PAD, PAD], [CLS, 10, 11, SEP, PAD, PAD, PAD, PAD]])
    mask = (ids != PAD).long()
    labels = torch.where(ids == 8, ids, -100)
    batch = {"input_ids": ids, "attention_mask": mask, "labels": labels}
    trimmed = trim_padding(batch)
    assert trimmed["input_ids"].shape == (2, 5)
    with torch.no_grad():
        assert pretraining_loss(model, batch)[0].item() == pretraining_loss(model, trimmed)[0].item()
