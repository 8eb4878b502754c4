"""Study ``03_bert``: chapter 3's experiments over three seeds, with the arms a chapter cannot afford.

For each seed, on the chapter's text, tokenizer and model size:

* four pretrainings of the same network with the same budget: BERT's recipe (MLM + NSP on
  single-sentence pairs, as in the chapter), NSP on *segments* of consecutive sentences (as
  in the paper), MLM only on full-sentence blocks (RoBERTa's way), and a left-to-right LM
  (``BertLMHeadModel``: the same network with causal attention and the next-token loss);
* one hidden word per held-out sentence with one side hidden, by ``[MASK]`` and by the
  attention mask, for the masked LM, and from the left only for the left-to-right LM;
* greedy generation from the chapter's prompts by both;
* static against dynamic masking (the chapter's continued pretraining);
* tagging from 100 labelled sentences: fine-tuned, feature-based (frozen encoder, a linear
  layer trained on top) and from random weights;
* a sentence-pair task (do two sentences from different documents share a topic?) with
  ``BertForSequenceClassification``: from each pretrained model and from random weights.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from ..analysis.cloze import generate_greedy, generation_statistics, hidden_word_accuracy
from ..data import topic_pairs
from ..data.documents import segment_documents
from ..data.tasks import pos_tagging_task
from ..device import get_device
from ..objectives.pretraining import evaluate_causal_lm, evaluate_mlm, make_masker, pretraining_examples
from ..recipes.bert import bert_config, pretrain_bert
from ..recipes.finetune import finetune_classifier, finetune_tagger
from . import Study, finetune_each, register_study, text_and_tokenizer

SETTINGS: dict[str, Any] = dict(
    documents=dict(n_docs=2100, seed=0, heldout=0.05),
    tokenizer=dict(kind="wordpiece", vocab_size=4000),
    pretrain=dict(steps=800, batch_size=64, lr=2e-3, max_len=64),
    masking=dict(steps=200, batch_size=32, lr=1e-3, documents=300, eval_every=100),
    tagging=dict(train=(100, 200), test=(500, 201), steps=150, batch_size=16, lr=1e-3, frozen_lr=1e-2),
    pair_task=dict(train=400, test=1000, steps=150, batch_size=32, lr=1e-3, frozen_lr=1e-2),
    generation=dict(prompts=("The chef", "Afterwards she", "The old dog"), tokens=10),
    hidden_word=dict(min_words=5),
)
QUICK: dict[str, Any] = dict(
    SETTINGS,
    documents=dict(SETTINGS["documents"], n_docs=200, heldout=0.2),
    tokenizer=dict(SETTINGS["tokenizer"], vocab_size=300),
    pretrain=dict(SETTINGS["pretrain"], steps=3, batch_size=8),
    masking=dict(SETTINGS["masking"], steps=2, batch_size=8, documents=30, eval_every=1),
    tagging=dict(SETTINGS["tagging"], train=(10, 200), test=(10, 201), steps=2, batch_size=4),
    pair_task=dict(SETTINGS["pair_task"], train=16, test=16, steps=2, batch_size=4),
    generation=dict(prompts=("The chef",), tokens=3),
)


# the chapter's BERT: MLM + NSP on single-sentence pairs, static masking (arm "mlm_nsp")
MAIN_ARM: dict[str, Any] = dict(masking="static", pair_task="nsp")


def pretraining_options(s: dict[str, Any], tokenizer, held_docs, device, seed: int) -> dict[str, Any]:
    """What every pretraining of this study shares: its tokenizer, held-out documents, device,
    seed and the ``pretrain`` settings (with :data:`MAIN_ARM`: the chapter's BERT)."""
    p = s["pretrain"]
    return dict(tokenizer=tokenizer, heldout=held_docs, device=device, seed=seed, progress=False, **p)


def run(seed: int, quick: bool = False) -> dict[str, dict[str, Any]]:
    s = QUICK if quick else SETTINGS
    device = get_device()
    train_docs, held_docs, tokenizer = text_and_tokenizer(s)
    masker = make_masker(tokenizer)
    p = s["pretrain"]
    config = bert_config("small", vocab_size=tokenizer.get_vocab_size(), max_len=p["max_len"])
    common = pretraining_options(s, tokenizer, held_docs, device, seed)
    held = {
        "pairs": pretraining_examples(
            held_docs, tokenizer, max_len=p["max_len"], pair_task="nsp", seed=seed + 1
        ),
        "segments": pretraining_examples(
            held_docs, tokenizer, max_len=p["max_len"], pair_task="nsp", nsp_unit="segment", seed=seed + 1
        ),
        "stream": pretraining_examples(
            held_docs, tokenizer, max_len=p["max_len"], pair_task=None, seed=seed + 1
        ),
    }
    models = {
        "mlm_nsp": pretrain_bert(config, train_docs, **MAIN_ARM, **common),
        "nsp_segments": pretrain_bert(
            config, train_docs, masking="static", pair_task="nsp", nsp_unit="segment", **common
        ),
        "mlm_only": pretrain_bert(config, train_docs, masking="static", pair_task=None, **common),
        "causal": pretrain_bert(config, train_docs, pair_task=None, causal=True, **common),
    }
    out: dict[str, dict[str, Any]] = {}
    for name, (model, _, history) in models.items():
        r: dict[str, Any] = {"seconds": history.seconds}
        if name == "causal":
            r.update(evaluate_causal_lm(model, held["stream"]))
        else:
            for data in ("pairs", "stream"):
                e = evaluate_mlm(model, held[data], masker, seed=seed)
                r[f"mlm_accuracy_{data}"], r[f"mlm_loss_{data}"] = e["mlm_accuracy"], e["mlm_loss"]
            if name != "mlm_only":
                for data in ("pairs", "segments"):
                    r[f"nsp_accuracy_{data}"] = evaluate_mlm(model, held[data], masker, seed=seed)[
                        "nsp_accuracy"
                    ]
        out[name] = r

    # one hidden word, one side hidden; generation
    sentences = [x.text for d in held_docs for x in d.sentences if len(x) >= s["hidden_word"]["min_words"]]
    g = s["generation"]
    for name in ("mlm_nsp", "causal"):
        model = models[name].model
        for hide in ("mask", "attention") if name != "causal" else ("attention",):
            for side, acc in hidden_word_accuracy(model, tokenizer, sentences, hide=hide, seed=0).items():
                out[name]["left context only" if name == "causal" else f"{side} ({hide})"] = acc
        texts = [generate_greedy(model, tokenizer, q, g["tokens"])[len(q) :].strip() for q in g["prompts"]]
        out[name]["generated"] = texts
        out[name].update(generation_statistics(texts))

    # static vs dynamic masking: continued pretraining of the chapter's BERT
    m = s["masking"]
    bert = models["mlm_nsp"].model
    start = evaluate_mlm(bert, held["pairs"], masker, seed=seed)
    out["masking_start"] = {"mlm_loss": start["mlm_loss"], "mlm_accuracy": start["mlm_accuracy"]}
    continued = {**common, **{k: m[k] for k in ("steps", "batch_size", "lr", "eval_every")}}
    for masking in ("static", "dynamic"):
        _, _, h = pretrain_bert(config, train_docs[: m["documents"]], masking=masking, init=bert, **continued)
        out[f"masking_{masking}"] = {
            "train_loss_last50": sum(h.loss[-50:]) / len(h.loss[-50:]),
            "mlm_loss": h.evals["mlm_loss"][-1],
            "mlm_accuracy": h.evals["mlm_accuracy"][-1],
        }

    finetune = partial(finetune_each, tokenizer=tokenizer, seed=seed, device=device)

    # tagging from 100 labelled sentences
    t = s["tagging"]
    tagset, items, evals = pos_tagging_task(t["train"], t["test"])
    runs = {
        "tag_finetuned": (bert, False, t["lr"]),
        "tag_frozen": (bert, True, t["frozen_lr"]),
        "tag_mlm_only_finetuned": (models["mlm_only"].model, False, t["lr"]),
        "tag_random": (bert.config, False, t["lr"]),
    }
    tagged = finetune(finetune_tagger, runs, items, t, num_labels=len(tagset), eval_items=evals)
    for name, h in tagged.items():
        out[name] = {"accuracy": h.evals["accuracy"][-1], "unseen_accuracy": h.evals["unseen_accuracy"][-1]}

    # a sentence-pair task: same topic or not (training and test pairs from different documents)
    q = s["pair_task"]
    train_items = [((a, b), y) for a, b, y in topic_pairs(held_docs[0::2], q["train"], seed=seed)]
    test_items = [((a, b), y) for a, b, y in topic_pairs(held_docs[1::2], q["test"], seed=seed + 1000)]
    starts = {
        "pair_mlm_nsp": (bert, False, q["lr"]),
        "pair_mlm_nsp_frozen": (bert, True, q["frozen_lr"]),
        "pair_nsp_segments": (models["nsp_segments"].model, False, q["lr"]),
        "pair_mlm_only": (models["mlm_only"].model, False, q["lr"]),
        "pair_random": (bert.config, False, q["lr"]),
    }
    paired = finetune(finetune_classifier, starts, train_items, q, eval_items=test_items)
    for name, h in paired.items():
        out[name] = {"accuracy": h.evals["accuracy"][-1]}
    return out


STUDY = register_study(
    Study(
        name="03_bert",
        description="chapter 3 over three seeds: NSP on segments, MLM only, a left-to-right LM, "
        "one side hidden, generation, static vs dynamic masking, feature-based vs fine-tuned tagging, "
        "a sentence-pair task",
        settings={"full": SETTINGS, "quick": QUICK},
        run=run,
        # the functions written for this study (a change to them makes its results stale too)
        extra_sources=(
            hidden_word_accuracy,
            generate_greedy,
            generation_statistics,
            topic_pairs,
            segment_documents,
        ),
    )
)
