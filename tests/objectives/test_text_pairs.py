"""Labelled sentence-pair tasks on text (:func:`course_lib.objectives.pairs.text_pairs`): the
same draws as the id-level pretraining pairs, Hugging Face's labels, units of several
sentences, and the errors."""

import pytest
import torch

from course_lib.data.corpus import generate_documents
from course_lib.data.words import word_tokenize
from course_lib.objectives.pairs import make_nsp_pairs, make_sop_pairs, text_pairs


def test_nsp_and_sop_pairs():
    docs = generate_documents(200, seed=4)
    nsp = text_pairs(docs, "nsp", seed=0)
    sop = text_pairs(docs, "sop", seed=0)
    n_adjacent = sum(len(d) - 1 for d in docs)
    assert len(nsp) == len(sop) == n_adjacent
    adjacent = {(a.text, b.text) for d in docs for a, b in zip(d.sentences, d.sentences[1:])}
    for a, b, label in sop:
        assert ((a, b) in adjacent) == (label == 0) and ((b, a) in adjacent) == (label == 1)
    doc_of = {s.text: k for k, d in enumerate(docs) for s in d.sentences}
    for a, b, label in nsp:
        assert (label == 0) == ((a, b) in adjacent)
        if label == 1:
            assert doc_of[a] != doc_of[b]
    assert 0.4 < sum(label for *_, label in nsp) / len(nsp) < 0.6
    for a, _, _ in nsp[:50]:
        assert word_tokenize(a)
    with pytest.raises(ValueError, match="at least 2 non-empty documents"):
        text_pairs(docs[:1], "nsp")


def test_nsp_and_sop_pairs_of_segments():
    docs = generate_documents(100, seed=5)
    k = 3
    units = {
        k2: [" ".join(s.text for s in d.sentences[i : i + k]) for i in range(0, len(d), k)]
        for k2, d in enumerate(docs)
    }
    adjacent = {(a, b) for us in units.values() for a, b in zip(us, us[1:])}
    sop = text_pairs(docs, "sop", seed=1, sentences_per_unit=k)
    nsp = text_pairs(docs, "nsp", seed=1, sentences_per_unit=k)
    assert len(sop) == len(nsp) == len(adjacent) == sum(len(us) - 1 for us in units.values())
    for a, b, label in sop:  # both orders come from one document: only the order differs
        assert ((a, b) in adjacent) == (label == 0) and ((b, a) in adjacent) == (label == 1)
    doc_of = {u: k2 for k2, us in units.items() for u in us}
    for a, b, label in nsp:
        assert (label == 0) == ((a, b) in adjacent)
        if label == 1:
            assert doc_of[a] != doc_of[b]
    assert 0.4 < sum(label for *_, label in sop) / len(sop) < 0.6
    assert text_pairs(docs, "sop", seed=1) != sop  # units of one sentence by default
    with pytest.raises(ValueError, match="integer of at least 1"):
        text_pairs(docs, "sop", sentences_per_unit=0)
    short = [d for d in docs if len(d) <= 4][:3]
    if short:
        with pytest.raises(ValueError, match="more than 4 sentences"):
            text_pairs(short, "sop", sentences_per_unit=4)


@pytest.mark.parametrize("task", ["nsp", "sop"])
def test_text_pairs_draw_what_the_id_pairs_draw(task):
    """One rule: on the same documents and seed, the text task pairs the same units, with the
    same labels, as the pretraining pairs on token ids (units replaced by their index)."""
    docs = generate_documents(60, seed=2)
    name = "random_prob" if task == "nsp" else "swap_prob"
    text = text_pairs(docs, task, seed=7, **{name: 0.3})
    ids, k = [], 0
    for d in docs:
        ids.append([[k + i] for i in range(len(d))])
        k += len(d)
    build = make_nsp_pairs if task == "nsp" else make_sop_pairs
    pairs = build(ids, 7, **{name: 0.3})
    flat = [s.text for d in docs for s in d.sentences]
    assert [(a, b) for a, b, _ in text] == [(flat[a[0]], flat[b[0]]) for a, b in zip(pairs.a, pairs.b)]
    assert [y for *_, y in text] == pairs.label.tolist()
    again, other = (text_pairs(docs, task, seed=k, **{name: 0.3}) for k in (7, 8))
    assert text == again != other
    # documents as lists of sentence strings give the same pairs
    assert text_pairs([[s.text for s in d.sentences] for d in docs], task, seed=7, **{name: 0.3}) == text
    # the default probability is the builders' 0.5
    assert text_pairs(docs, task, seed=7) == text_pairs(docs, task, seed=7, **{name: 0.5})


def test_text_pairs_refuse_bad_arguments():
    docs = generate_documents(20, seed=1)
    with pytest.raises(ValueError, match="pair_task must be one of"):
        text_pairs(docs, "order")
    with pytest.raises(ValueError, match="swap_prob must lie in"):
        text_pairs(docs, "sop", swap_prob=1.5)
    with pytest.raises(ValueError, match="random_prob must lie in"):
        text_pairs(docs, "nsp", random_prob=-0.1)
    with pytest.raises(ValueError, match="swap_prob belongs to the other pair task; pair_task='nsp' takes"):
        text_pairs(docs, "nsp", swap_prob=0.5)
    with pytest.raises(ValueError, match="random_prob belongs to the other pair task"):
        text_pairs(docs, "sop", random_prob=0.5)
    with pytest.raises(ValueError, match="integer of at least 1"):
        text_pairs(docs, "sop", sentences_per_unit=2.0)
    assert torch.is_tensor(make_sop_pairs([[[1], [2]]], 0).label)
