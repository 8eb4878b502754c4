"""Labelled tasks from the corpus: agreement pairs, jam senses, pronoun pairs, names."""

from collections import Counter

import pytest

from course_lib.data import tasks
from course_lib.data.lexicon import load_lexicon


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
