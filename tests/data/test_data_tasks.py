"""Labelled tasks from the corpus: agreement pairs, jam senses, pronoun pairs, names, NSP/SOP."""

from collections import Counter

import pytest

from course_lib.data import tasks
from course_lib.data.corpus import generate_documents
from course_lib.data.lexicon import load_lexicon
from course_lib.data.words import word_tokenize


def test_agreement_pairs_are_balanced_minimal_pairs():
    ex = tasks.agreement_examples(150, seed=3)
    assert len(ex) == 300
    lex = load_lexicon()
    plural = {n.plural for n in lex.nouns if n.plural}
    for good, bad in zip(ex[::2], ex[1::2]):
        assert (good.label, bad.label) == (1, 0)
        diff = [i for i, (a, b) in enumerate(zip(good.tokens, bad.tokens)) if a != b]
        assert diff == [good.verb]
        assert good.subject < good.attractor < good.verb
        # the distractor has the other number, so the violation agrees with it
        assert (good.tokens[good.subject] in plural) != (good.tokens[good.attractor] in plural)
    pairs = tasks.agreement_pairs(150, seed=3)
    assert Counter(label for _, label in pairs) == {0: 150, 1: 150}
    assert tasks.agreement_pairs(20, seed=3) == tasks.agreement_pairs(20, seed=3)
    assert sorted(pairs) == sorted((e.text, e.label) for e in ex)


def test_jam_sense_examples():
    ex = tasks.sense_examples("jam", n_per_sense=40, seed=1)
    assert Counter(e.sense for e in ex) == {"traffic": 40, "fruit": 40}
    assert all(e.word.lower() == "jam" for e in ex)
    bank = tasks.sense_examples("bank", n_per_sense=10)
    assert Counter(e.sense for e in bank) == {"money": 10, "river": 10}
    assert "jam" in tasks.sense_words()
    with pytest.raises(ValueError, match="not an ambiguous word"):
        tasks.sense_examples("apple")


def test_pronoun_pairs_differ_in_one_adjective():
    for p in tasks.pronoun_pairs(50, seed=2):
        a, b = p.to_subject, p.to_object
        diff = [i for i, (x, y) in enumerate(zip(a.tokens, b.tokens)) if x != y]
        assert len(a) == len(b) and len(diff) == 1 and a.pos[diff[0]] == "ADJ"
        assert a.tokens[p.pronoun] == "it" and a.coref[0][0] == b.coref[0][0] == p.pronoun
        (_, ante_a), (_, ante_b) = a.coref[0], b.coref[0]
        assert a.deprels[ante_a] == "nsubj" and b.deprels[ante_b] in ("obj", "obl")


def test_name_sentences_have_multi_token_names():
    sents = tasks.name_sentences(200, seed=0)
    assert len(sents) == 200 and all(s.names for s in sents)
    names = Counter(" ".join(s.tokens[a:b]) for s in sents for a, b in s.names)
    assert any(n.startswith("New ") for n in names) and any(n.startswith("San ") for n in names)


def test_nsp_and_sop_pairs():
    docs = generate_documents(200, seed=4)
    nsp = tasks.nsp_pairs(docs, seed=0)
    sop = tasks.sop_pairs(docs, seed=0)
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
    with pytest.raises(ValueError, match="two documents"):
        tasks.nsp_pairs(docs[:1])


def test_nsp_and_sop_pairs_of_segments():
    docs = generate_documents(100, seed=5)
    k = 3
    units = {
        k2: [" ".join(s.text for s in d.sentences[i : i + k]) for i in range(0, len(d), k)]
        for k2, d in enumerate(docs)
    }
    adjacent = {(a, b) for us in units.values() for a, b in zip(us, us[1:])}
    sop = tasks.sop_pairs(docs, seed=1, sentences_per_unit=k)
    nsp = tasks.nsp_pairs(docs, seed=1, sentences_per_unit=k)
    assert len(sop) == len(nsp) == len(adjacent) == sum(len(us) - 1 for us in units.values())
    for a, b, label in sop:  # both orders come from one document: only the order differs
        assert ((a, b) in adjacent) == (label == 0) and ((b, a) in adjacent) == (label == 1)
    doc_of = {u: k2 for k2, us in units.items() for u in us}
    for a, b, label in nsp:
        assert (label == 0) == ((a, b) in adjacent)
        if label == 1:
            assert doc_of[a] != doc_of[b]
    assert 0.4 < sum(label for *_, label in sop) / len(sop) < 0.6
    assert tasks.sop_pairs(docs, seed=1) != sop  # units of one sentence by default
    with pytest.raises(ValueError, match="at least 1"):
        tasks.sop_pairs(docs, sentences_per_unit=0)
    short = [d for d in docs if len(d) <= 4][:3]
    if short:
        with pytest.raises(ValueError, match="more than 4 sentences"):
            tasks.sop_pairs(short, sentences_per_unit=4)
