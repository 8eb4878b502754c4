"""course_lib.studies.probing: chapter 8's models and sentences, on tiny settings."""

from __future__ import annotations

import pytest
import torch

from course_lib.studies.distill import QUICK
from course_lib.studies.probing import SETTINGS, chapter_setup

TINY = dict(
    SETTINGS,
    bert={k: QUICK[k] for k in ("size", "documents", "tokenizer", "pretrain")},
    sentences=dict(n=120, seed=801, min_words=5, max_words=30, train=30, test=20),
    coreference=dict(n=600, seed=802, keep=5),
)


def test_chapter_setup_gives_three_encoders_and_sentences_with_trees():
    s = chapter_setup(TINY, seed=0)
    bert, rand, minilm = s["bert"], s["random_bert"], s["minilm"]
    assert not (bert.training or rand.training or minilm.training)
    assert rand.config == bert.config
    assert not torch.equal(rand.embeddings.word_embeddings.weight, bert.embeddings.word_embeddings.weight)
    assert minilm.config.num_hidden_layers == 6 and minilm.config.hidden_size == 384
    assert len(s["train"]) == 30 and len(s["test"]) == 20
    assert all(x.has_tree and 5 <= len(x) <= 30 for x in s["train"] + s["test"])
    assert set(map(id, s["train"])).isdisjoint(map(id, s["test"]))
    assert len(s["coref"]) == 5 and all(x.coref for x in s["coref"])
    # the same seed gives the same untrained network
    again = chapter_setup(TINY, seed=0)["random_bert"]
    assert torch.equal(again.embeddings.word_embeddings.weight, rand.embeddings.word_embeddings.weight)
    with pytest.raises(ValueError, match="only"):
        chapter_setup(dict(TINY, sentences=dict(TINY["sentences"], n=10)), seed=0)
