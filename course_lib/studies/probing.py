"""Chapter 8's starting point: the models it probes and the sentences it probes them on.

* chapter 3's BERT (its text, tokenizer and 800 pretraining steps; loaded from the course
  cache when chapter 3 or 7 trained it, :func:`course_lib.studies.distill.chapter3_bert`);
* the same network with random weights (``seed``), the probes' control;
* all-MiniLM-L6-v2, a real BERT with 6 layers of width 384 (:func:`~course_lib.pretrained.load_minilm`);
* sentences of the course corpus with gold dependency trees, of 5 to 30 words, split into
  the probes' training and test sentences, and Winograd-style sentences with a pronoun and
  its antecedent for the coreference heads.
"""

from __future__ import annotations

from typing import Any

from ..data import generate_corpus
from ..device import seed_everything
from ..models.bert import BertModel, body_of
from ..pretrained import load_minilm
from .distill import SETTINGS as DISTILL_SETTINGS
from .distill import chapter3_bert

SETTINGS: dict[str, Any] = dict(
    bert={k: DISTILL_SETTINGS[k] for k in ("size", "documents", "tokenizer", "pretrain")},
    sentences=dict(n=1200, seed=801, min_words=5, max_words=30, train=600, test=300),
    coreference=dict(n=3000, seed=802, keep=200),
    probe=dict(rank=64, steps=400, batch_size=20, lr=1e-3),
)


def chapter_setup(s: dict[str, Any] = SETTINGS, *, seed: int = 0, device=None) -> dict[str, Any]:
    """``{"bert", "random_bert", "tokenizer", "minilm", "minilm_tokenizer", "train", "test",
    "coref"}``: the three encoders in eval mode and the sentences (``Sentence`` objects with
    gold trees)."""
    bert, tokenizer, _ = chapter3_bert(s["bert"], device=device)
    body = body_of(bert)
    seed_everything(seed)  # COURSE_SEED_OFFSET shifts it
    random_bert = BertModel(body.config).to(body.device).eval()
    minilm, minilm_tokenizer = load_minilm(device=body.device)
    c = s["sentences"]
    sents = [x for x in generate_corpus(c["n"], seed=c["seed"]) if c["min_words"] <= len(x) <= c["max_words"]]
    if len(sents) < c["train"] + c["test"]:
        raise ValueError(f"only {len(sents)} sentences of {c['min_words']}-{c['max_words']} words")
    r = s["coreference"]
    coref = [x for x in generate_corpus(r["n"], seed=r["seed"]) if x.coref][: r["keep"]]
    return dict(
        bert=body.eval(),
        random_bert=random_bert,
        tokenizer=tokenizer,
        minilm=minilm,
        minilm_tokenizer=minilm_tokenizer,
        train=sents[: c["train"]],
        test=sents[c["train"] : c["train"] + c["test"]],
        coref=coref,
    )
