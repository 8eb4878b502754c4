"""Study ``03_roberta_batch``: RoBERTa's bigger batches at an equal number of training sequences.

RoBERTa (Liu et al. 2019, Table 3) trained BERT-base for the same number of passes over the
data with batches of 256 sequences for 1M steps, 2K for 125K steps and 8K for 31K steps,
raising the learning rate with the batch (1e-4, 7e-4, 1e-3): held-out perplexity 3.99, 3.68,
3.77. The claim is not only that a big batch's gradient is less noisy (§3.12 measures that)
but that, with a larger learning rate, it reaches the same loss in far fewer optimiser steps.

For each seed, chapter 3's text, tokenizer (WordPiece, 4K), model (2 layers, hidden 128) and
recipe (MLM + NSP on single-sentence pairs of up to 64 tokens, AdamW, 5% warm-up, cosine
decay), with RoBERTa's dynamic masking, four pretrainings that all read the same number of
training sequences (``pretrain.sequences``, about 2.9 epochs of the pairs):

* ``small``: batches of 32 for 800 steps at lr 1e-3 (chapter 3's 2e-3 at 64, by the linear
  rule), the baseline;
* ``big_lr1``: batches of 128 for 200 steps at the same lr 1e-3 (no scaling);
* ``big_lr2``: the same at lr 2e-3 (the square-root rule: ×√4);
* ``big_lr4``: the same at lr 4e-3 (the linear rule: ×4).

The warm-up is 5% of each run's steps, so every arm warms up over the same 1,280 sequences.
Each arm is evaluated on the held-out pairs 8 times along the way (the same fixed masks:
learning curves against steps and, times the batch, against sequences seen) and at the end
with ``mask_draws`` draws of the masking (held-out MLM loss and accuracy, their mean).

Cost per seed: about 3 CPU-minutes on one thread (x86, torch 2.13; the four pretrainings read
102,400 sequences of up to 64 tokens together): the 3 seeds took about 9.5 CPU-minutes in one
process, 489, 492 and 707 s of wall clock on a shared, loaded 2-core machine.
``course study run 03_roberta_batch --seeds 0 1 2`` (it also stores the golden run).
"""

from __future__ import annotations

from typing import Any

from ..data.documents import split_corpus, train_tokenizer
from ..device import get_device
from ..objectives.pretraining import evaluate_mlm, make_masker, pretraining_examples
from ..recipes.bert import bert_config, pretrain_bert
from . import Study, pretrain_arms, register_study
from .bert import QUICK as BERT_QUICK
from .bert import SETTINGS as BERT


def batch_arms(*, small: int, big: int, lr: float) -> dict[str, dict[str, Any]]:
    """The arms: the small batch at ``lr``; the big one (4x) at ``lr`` times 1, 2 (square-root
    rule) and 4 (linear rule)."""
    return {"small": dict(batch_size=small, lr=lr)} | {
        f"big_lr{k}": dict(batch_size=big, lr=lr * k) for k in (1, 2, 4)
    }


SETTINGS: dict[str, Any] = dict(
    documents=BERT["documents"],  # chapter 3's text and tokenizer
    tokenizer=BERT["tokenizer"],
    model=dict(size="small"),
    pretrain=dict(max_len=BERT["pretrain"]["max_len"], masking="dynamic", pair_task="nsp", sequences=25_600),
    arms=batch_arms(small=32, big=128, lr=1e-3),
    curve_points=8,
    mask_draws=4,
)
QUICK: dict[str, Any] = dict(
    SETTINGS,
    documents=BERT_QUICK["documents"],
    tokenizer=BERT_QUICK["tokenizer"],
    model=dict(size="tiny"),
    pretrain=dict(SETTINGS["pretrain"], sequences=32),
    arms=batch_arms(small=4, big=16, lr=1e-3),
    curve_points=2,
    mask_draws=2,
)
ARMS = ("small", "big_lr1", "big_lr2", "big_lr4")


def arm_settings(s: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each arm's batch size, learning rate and steps: ``sequences // batch_size`` steps."""
    n = s["pretrain"]["sequences"]
    out = {}
    for name, arm in s["arms"].items():
        if n % arm["batch_size"]:
            raise ValueError(f"{n} sequences are not a whole number of batches of {arm['batch_size']}")
        out[name] = dict(arm, steps=n // arm["batch_size"])
    return out


def run(seed: int, quick: bool = False) -> dict[str, dict[str, Any]]:
    s = QUICK if quick else SETTINGS
    device = get_device()
    train_docs, held_docs = split_corpus(**s["documents"])
    tokenizer = train_tokenizer(train_docs, **s["tokenizer"])
    p = {k: v for k, v in s["pretrain"].items() if k != "sequences"}
    config = bert_config(s["model"]["size"], vocab_size=tokenizer.get_vocab_size(), max_len=p["max_len"])
    arms = arm_settings(s)
    models, out = pretrain_arms(
        pretrain_bert,
        train_docs,
        arms,
        p,
        config_of=lambda arm: config,
        curves_of=lambda arm: {"curve_loss": "mlm_loss", "curve_accuracy": "mlm_accuracy"},
        curve_points=s["curve_points"],
        tokenizer=tokenizer,
        heldout=held_docs,
        device=device,
        seed=seed,
    )
    held = pretraining_examples(
        held_docs, tokenizer, max_len=p["max_len"], pair_task=p["pair_task"], seed=seed + 1
    )
    masker = make_masker(tokenizer)
    for name, model in models.items():
        draws = [evaluate_mlm(model, held, masker, seed=seed * 1000 + k) for k in range(s["mask_draws"])]
        r = out[name]
        r["batch_size"] = arms[name]["batch_size"]
        r["lr"] = arms[name]["lr"]
        # an evaluation at step index i follows i + 1 optimiser steps
        r["curve_sequences"] = [(step + 1) * r["batch_size"] for step in r["curve_steps"]]
        for metric in ("mlm_loss", "mlm_accuracy", "nsp_accuracy"):
            r[metric] = sum(d[metric] for d in draws) / len(draws)
        r["held_sequences"] = int(held["input_ids"].size(0))
    return out


STUDY = register_study(
    Study(
        name="03_roberta_batch",
        description="RoBERTa's bigger batches at equal sequences: batch 32 for 800 steps "
        "vs 128 for 200 steps at lr x1, x2 (square root) and x4 (linear)",
        settings={"full": SETTINGS, "quick": QUICK},
        run=run,
        extra_sources=(arm_settings, batch_arms),
    )
)
