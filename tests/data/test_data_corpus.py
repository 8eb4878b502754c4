"""Properties of the generated corpus: valid gold trees, every phenomenon, determinism, tree utilities."""

import subprocess
import sys
from collections import deque

import numpy as np
import pytest

from course_lib.data import corpus as C
from course_lib.data.lexicon import TOPICS, load_lexicon
from course_lib.data.words import word_tokenize


@pytest.fixture(scope="module")
def sentences():
    return C.generate_corpus(4000, seed=123)


@pytest.fixture(scope="module")
def documents():
    return C.generate_documents(300, seed=7)


def _number_sets():
    lex = load_lexicon()
    sg = {n.lemma for n in lex.nouns if n.plural}
    pl = {n.plural for n in lex.nouns if n.plural}
    return sg - pl, pl - sg


def test_every_gold_tree_is_valid(sentences, documents):
    all_sents = sentences + [s for d in documents for s in d.sentences]
    for s in all_sents:
        n = len(s.tokens)
        assert len(s.pos) == len(s.heads) == len(s.deprels) == n
        C.validate_tree(s.heads, n_tokens=n)
        assert [r for r in s.deprels].count("root") == 1
        assert s.deprels[s.heads.index(-1)] == "root"
        assert set(s.pos) <= set(C.UPOS_TAGS)
        assert set(s.deprels) <= set(C.DEPRELS)
        assert C.is_projective(s.heads)
        assert s.pos[-1] == "PUNCT" and s.tokens[-1] == "."
        assert all((p == "PUNCT") == (r == "punct") for p, r in zip(s.pos, s.deprels))
        assert s.tokens[0][0].isupper()


def test_text_round_trips_through_the_word_tokenizer(sentences):
    for s in sentences:
        assert word_tokenize(s.text) == list(s.tokens)


def test_every_phenomenon_occurs(sentences):
    freq = C.corpus_stats(sentences)["phenomena"]
    for p in C.PHENOMENA:
        assert freq[p] > 0.01, (p, freq[p])


def test_same_seed_same_corpus_and_different_seed_different():
    a = C.generate_corpus(300, seed=5)
    assert a == C.generate_corpus(300, seed=5)
    assert a != C.generate_corpus(300, seed=6)
    assert C.generate_documents(20, seed=5) == C.generate_documents(20, seed=5)


def test_corpus_does_not_depend_on_the_process_hash_seed():
    code = (
        "import hashlib; from course_lib.data.corpus import generate_corpus, generate_documents;"
        "t = '\\n'.join(s.text + str(s.heads) for s in generate_corpus(500, seed=1));"
        "t += '\\n'.join(d.text for d in generate_documents(30, seed=1));"
        "print(hashlib.sha256(t.encode()).hexdigest())"
    )
    outs = {
        subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            check=True,
            env={"PYTHONHASHSEED": seed, "PATH": ""},
        ).stdout
        for seed in ("1", "2")
    }
    assert len(outs) == 1


def test_agreement_records_match_the_subject_number(sentences):
    singular, plural = _number_sets()
    sg_forms = {"is", "was", "has", "does"} | {v.s3 for v in load_lexicon().verbs}
    pl_forms = {"are", "were", "have", "do"} | {v.lemma for v in load_lexicon().verbs}
    checked = attractors = 0
    for s in sentences:
        for subj, verb, att in s.agreement:
            assert s.pos[subj] in ("NOUN", "PROPN") and s.pos[verb] in ("AUX", "VERB")
            word = s.tokens[subj]
            if word in singular or s.pos[subj] == "PROPN":
                assert s.tokens[verb].lower() in sg_forms, s.text
                checked += 1
            elif word in plural:
                assert s.tokens[verb].lower() in pl_forms, s.text
                checked += 1
            if att >= 0:
                assert min(subj, verb) < att < max(subj, verb) and s.pos[att] in ("NOUN", "PROPN")
                attractors += s.tokens[att] in plural if word in singular else s.tokens[att] in singular
    assert checked > 1000 and attractors > 100


def test_jam_senses_pronouns_and_names_are_annotated(sentences):
    jam_senses = set()
    for s in sentences:
        for i, sense in s.senses:
            assert s.pos[i] == "NOUN"
            if s.tokens[i].lower() == "jam":
                jam_senses.add(sense)
        for pron, ante in s.coref:
            assert s.pos[pron] == "PRON" and s.pos[ante] in ("NOUN", "PROPN") and ante < pron
        for a, b in s.names:
            assert b - a >= 2 and all(p == "PROPN" for p in s.pos[a:b])
            assert all(s.heads[k] == a and s.deprels[k] == "flat" for k in range(a + 1, b))
    assert jam_senses == {"traffic", "fruit"}
    texts = " ".join(s.text for s in sentences)
    assert "traffic jam" in texts and "because it was too" in texts
    lex = load_lexicon()
    assert "Harry Potter" in lex.characters and ("New York", "the United States") in lex.places
    assert any(s.text.startswith("New York is a") for s in C.generate_corpus(3000, seed=0, kind="name"))


def test_documents_keep_one_topic_and_follow_a_protagonist(documents):
    lex = load_lexicon()
    topics_of: dict[str, set] = {}
    for n in lex.nouns:
        topics_of.setdefault(n.lemma, set()).add(n.topic)
        if n.plural:
            topics_of.setdefault(n.plural, set()).add(n.topic)
    on_topic = total = 0
    for d in documents:
        assert 3 <= len(d) <= 8 and d.topic in TOPICS
        assert all(s.topic == d.topic for s in d.sentences)
        first = d.sentences[0]
        assert first.pos[0] == "PROPN"  # the protagonist is introduced by name
        for s in d.sentences:
            for t, p in zip(s.tokens, s.pos):
                if p == "NOUN" and t.lower() in topics_of:
                    total += 1
                    on_topic += d.topic in topics_of[t.lower()]
    assert on_topic / total > 0.6  # random topics would give about 1/12


def test_lexicon_has_thousands_of_words():
    lex = load_lexicon()
    assert len(lex.words()) > 3000
    assert len(lex.senses) >= 10 and "jam" in lex.senses
    used_tags = {t for v in lex.verbs for f in v.frames for t in f.subj + f.obj}
    assert used_tags <= set(lex.nouns_by_tag)
    eat = next(v for v in lex.verbs if v.lemma == "eat")
    assert (eat.s3, eat.past, eat.participle, eat.gerund) == ("eats", "ate", "eaten", "eating")


def _bfs_distances(heads):
    n = len(heads)
    adj = [[] for _ in range(n)]
    for i, h in enumerate(heads):
        if h >= 0:
            adj[i].append(h)
            adj[h].append(i)
    out = np.zeros((n, n), dtype=int)
    for s in range(n):
        dist = [-1] * n
        dist[s] = 0
        q = deque([s])
        while q:
            u = q.popleft()
            for v in adj[u]:
                if dist[v] < 0:
                    dist[v] = dist[u] + 1
                    q.append(v)
        out[s] = dist
    return out


def test_tree_distances_and_depths_match_brute_force(sentences):
    for s in sentences[:300]:
        d = C.tree_distances(s.heads)
        np.testing.assert_array_equal(d, _bfs_distances(s.heads))
        depth = C.tree_depths(s.heads)
        root = s.heads.index(-1)
        np.testing.assert_array_equal(depth, d[root])
        for i, h in enumerate(s.heads):
            if h >= 0:
                assert depth[i] == depth[h] + 1


@pytest.mark.parametrize(
    "heads, message",
    [
        ([1, -1, -1], "exactly one root"),
        ([1, 2, 0, -1], "cycle"),
        ([-1, 5], "outside"),
        ([-1, 1], "its own head"),
        ([], "empty"),
    ],
)
def test_validate_tree_rejects_non_trees(heads, message):
    with pytest.raises(ValueError, match=message):
        C.validate_tree(heads)
    assert not C.is_valid_tree(heads)


def test_conllu_export(sentences):
    text = C.to_conllu(sentences[:3])
    rows = [line.split("\t") for line in text.splitlines() if line and not line.startswith("#")]
    assert len(rows) == sum(len(s) for s in sentences[:3])
    assert sum(r[6] == "0" for r in rows) == 3  # one root per sentence, 1-based heads


def test_bad_arguments_raise_clear_errors():
    with pytest.raises(ValueError, match="n_sentences"):
        C.generate_corpus(-1)
    with pytest.raises(ValueError, match="unknown topics"):
        C.generate_corpus(3, topics=["cooking"])
    with pytest.raises(ValueError, match="unknown sentence kind"):
        C.generate_corpus(3, kind="poem")
    with pytest.raises(ValueError, match="sentences must be"):
        C.generate_documents(3, sentences=(4, 2))
