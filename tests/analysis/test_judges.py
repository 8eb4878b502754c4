"""course_lib/analysis/judges.py: the grammar judge accepts what the corpus generator writes and
rejects what it cannot write (a hand-made grammar, then the real generator: held-out documents
pass, the same words shuffled fail); distinct-n; the words of decoded text."""

import random

import pytest

from course_lib.analysis.judges import GrammarJudge, distinct_n, text_words, word_class
from course_lib.data.corpus import Sentence, generate_documents


def _s(text, tags):
    return Sentence(tokens=tuple(text.split()), pos=tuple(tags.split()))


def _judge(n=3):
    docs = [
        [_s("the cat eats fish .", "DET NOUN VERB NOUN PUNCT"), _s("she is happy .", "PRON AUX ADJ PUNCT")],
        [_s("the dogs eat bread .", "DET NOUN VERB NOUN PUNCT")],
        [_s("a dog did n't sleep .", "DET NOUN AUX PART VERB PUNCT")],
    ]
    return GrammarJudge.from_sentences(docs, lambda w: [w.lower()], n=n)


def test_text_words_lowers_splits_punctuation_and_rejoins_contractions():
    assert text_words("She didn ' t go, Bob.") == ["she", "did", "n't", "go", ",", "bob", "."]
    assert text_words("I can't") == ["i", "ca", "n't"]  # as the generator's tokens (ca n't)
    assert text_words("") == []


def test_word_classes_keep_function_words_and_read_content_words_by_ending():
    assert word_class("DET", "the") == "DET" and word_class("DET", "an") == "an"
    assert word_class("AUX", "is") == "is" and word_class("PUNCT", ".") == "."
    assert word_class("ADP", "near") == "ADP"
    assert word_class("NOUN", "cats") == "NOUN:s" and word_class("VERB", "walked") == "VERB:ed"
    assert word_class("VERB", "eat") == "VERB:" and word_class("VERB", "eating") == "VERB:ing"


def test_the_judge_accepts_the_generators_patterns_with_other_words_and_rejects_the_rest():
    judge = _judge()
    assert judge.accepts(["the", "cat", "eats", "fish", "."])
    assert judge.accepts(["the", "dog", "eats", "bread", "."])  # new words, the same classes
    assert judge.accepts(["the", "cat", "eats", "fish", ".", "she", "is"])  # across a sentence boundary
    assert judge.accepts(["she", "is", "happy"])  # every sentence may also start a text
    assert judge.accepts(["a", "dog", "did", "n't", "sleep"])
    assert not judge.accepts(["the", "cats", "eats"])  # agreement: NOUN:s VERB:s never written
    assert not judge.accepts(["cat", "the", "eats"])  # word order
    assert not judge.accepts(["the", "cat", "purrs"])  # a word the generator never wrote
    assert not judge.accepts(["fish", "the"])  # no text starts with a noun
    assert judge.grammatical_share([["the", "cat"], ["cat", "the"]]) == 0.5
    assert judge.known("fish") and not judge.known("purrs")


def test_bigram_judge_is_looser_than_the_trigram_judge():
    assert _judge(2).accepts(["a", "dog", "eats", "fish"])  # every pair of classes was written
    assert not _judge(3).accepts(["a", "dog", "eats", "fish"])  # (a, NOUN, VERB:s) never was
    with pytest.raises(ValueError, match="at least 2"):
        GrammarJudge({}, frozenset(), 1)


def test_the_judge_refuses_untagged_text_and_empty_input():
    with pytest.raises(ValueError, match="tagged"):
        GrammarJudge.from_sentences([[Sentence(tokens=("a", "b"))]], lambda w: [w])
    with pytest.raises(ValueError, match="at least one"):
        _judge().grammatical_share([])


@pytest.mark.slow
def test_on_the_real_generator_held_out_documents_pass_and_their_shuffles_fail():
    judge = GrammarJudge.from_sentences(
        [d.sentences for d in generate_documents(4000, seed=11)], lambda w: text_words(w), n=3
    )
    held = [text_words(d.text) for d in generate_documents(200, seed=12)]
    texts = [w[:12] for w in held if len(w) >= 12]
    rng = random.Random(0)
    shuffled = [w[:2] + rng.sample(w[2:], len(w) - 2) for w in texts]
    assert judge.grammatical_share(texts) >= 0.85  # the judge's false negatives at this sample size
    assert judge.grammatical_share(shuffled) <= 0.1


def test_distinct_n():
    assert distinct_n([["a", "b", "a", "b"]], 2) == pytest.approx(2 / 3)
    assert distinct_n([["a", "b"], ["a", "b"]], 1) == 0.5
    with pytest.raises(ValueError, match="positive"):
        distinct_n([["a"]], 0)
    with pytest.raises(ValueError, match="no 3-gram"):
        distinct_n([["a", "b"]], 3)
