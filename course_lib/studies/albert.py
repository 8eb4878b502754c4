"""Study ``04_albert``: chapter 4's pretrainings over three seeds.

For each seed, on the chapter's text and tokenizer, seven pretrainings of a 4-layer model
(hidden 128) with the same budget (steps, batch, dynamic masking, inputs of 64 tokens):

* **architecture** (all with MLM + SOP on segment pairs): BERT's shape in ALBERT's code
  (E = H = 128, no sharing), a narrow table only (E = 32), sharing only (E = H, all layers
  shared) and both (ALBERT: E = 32, shared);
* **objectives** (on BERT's shape, the arm that leaves the masked LM's unigram plateau within
  this budget): MLM + NSP, MLM + SOP (the first arm above) and MLM alone on full-sentence
  blocks (RoBERTa's input, the same tokens per step; an ``AlbertForMaskedLM``: no pooler and
  no pair head);
* **dropout** (ALBERT v2 has none): the shared E = H arm again, with dropout 0.1.

Each model is scored on held-out documents: masked-token accuracy and loss (on segment
pairs, and on blocks), and its sentence-pair head on *both* tasks, NSP pairs and SOP pairs
(the paper's Table 5 design), and how far each layer moves the token vectors (L2 distance and
cosine between a layer's input and output, the paper's Figure 1). Then each objective's
encoder, and a random one, is fine-tuned with a fresh classifier on 400 labelled pairs (units
of two sentences) of two tasks ("is B in its original order after A?" and "does B continue
A?"), from training documents, and scored on the pairs of the held-out documents: does what
[CLS] learned in pretraining transfer?

No wall-clock times are stored: they depend on the machine and on whatever else runs beside
the study. Cost is compared where it is exact, in the chapter (parameters, FLOPs).
"""

from __future__ import annotations

from functools import partial
from typing import Any

from ..analysis.layers import layer_transitions
from ..device import get_device
from ..models.albert import AlbertConfig, AlbertForMaskedLM, AlbertForPreTraining
from ..models.sizes import parameter_breakdown
from ..objectives.pairs import text_pairs
from ..objectives.pretraining import evaluate_mlm, make_masker, pretraining_examples
from ..recipes.bert import pretrain_bert
from ..recipes.finetune import finetune_classifier
from . import Study, finetune_each, register_study, text_and_tokenizer

SETTINGS: dict[str, Any] = dict(
    documents=dict(n_docs=2100, seed=0, heldout=0.05),
    tokenizer=dict(kind="wordpiece", vocab_size=4000),
    model=dict(hidden_size=128, num_hidden_layers=4, num_attention_heads=4, intermediate_size=512),
    pretrain=dict(steps=800, batch_size=32, lr=1e-3, max_len=64, masking="dynamic", nsp_unit="segment"),
    arms={
        "albert": dict(sharing="all", embedding_size=32, pair_task="sop"),
        "not_shared": dict(sharing="none", embedding_size=32, pair_task="sop"),
        "e_equals_h": dict(sharing="all", embedding_size=128, pair_task="sop"),
        "bert_shape": dict(sharing="none", embedding_size=128, pair_task="sop"),
        "bert_shape_nsp": dict(sharing="none", embedding_size=128, pair_task="nsp"),
        "bert_shape_mlm_only": dict(sharing="none", embedding_size=128, pair_task=None),
        "e_equals_h_dropout": dict(sharing="all", embedding_size=128, pair_task="sop", dropout=0.1),
    },
    transfer=dict(
        train=400,
        sentences_per_unit=2,
        steps=150,
        batch_size=32,
        lr=1e-3,
        starts=("bert_shape", "bert_shape_nsp", "bert_shape_mlm_only"),
    ),
)
QUICK: dict[str, Any] = dict(
    SETTINGS,
    documents=dict(SETTINGS["documents"], n_docs=200, heldout=0.2),
    tokenizer=dict(SETTINGS["tokenizer"], vocab_size=300),
    model=dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64),
    pretrain=dict(SETTINGS["pretrain"], steps=3, batch_size=8),
    transfer=dict(SETTINGS["transfer"], train=16, steps=2, batch_size=4),
)


def run(seed: int, quick: bool = False) -> dict[str, dict[str, Any]]:
    s = QUICK if quick else SETTINGS
    device = get_device()
    train_docs, held_docs, tokenizer = text_and_tokenizer(s)
    masker = make_masker(tokenizer)
    p = dict(s["pretrain"])
    max_len, unit = p["max_len"], p["nsp_unit"]
    held = {
        task: pretraining_examples(
            held_docs, tokenizer, max_len=max_len, pair_task=task, nsp_unit=unit, seed=seed + 1
        )
        for task in ("nsp", "sop", None)
    }
    out: dict[str, dict[str, Any]] = {}
    models = {}
    for name, arm in s["arms"].items():
        config = AlbertConfig(
            vocab_size=tokenizer.get_vocab_size(),
            max_position_embeddings=max_len,
            embedding_size=arm["embedding_size"],
            sharing=arm["sharing"],
            hidden_dropout_prob=arm.get("dropout", 0.0),
            attention_probs_dropout_prob=arm.get("dropout", 0.0),
            **s["model"],
        )
        model, _, _ = pretrain_bert(
            config,
            train_docs,
            tokenizer=tokenizer,
            heldout=held_docs,
            model_class=AlbertForPreTraining if arm["pair_task"] else AlbertForMaskedLM,
            pair_task=arm["pair_task"],
            device=device,
            seed=seed,
            progress=False,
            **p,
        )
        models[name] = model
        r: dict[str, Any] = {"parameters": model.num_parameters()}
        r["embedding_parameters"] = parameter_breakdown(config)["embeddings"]
        for task, key in (("sop", "pairs"), (None, "blocks")):
            e = evaluate_mlm(model, held[task], masker, seed=seed)
            r[f"mlm_accuracy_{key}"], r[f"mlm_loss_{key}"] = e["mlm_accuracy"], e["mlm_loss"]
        transitions = layer_transitions(model, held["sop"])  # the paper's Figure 1
        r["layer_l2"], r["layer_cosine"] = transitions["l2"], transitions["cosine"]
        if arm["pair_task"] is not None:  # the pair head on both tasks
            r["nsp_accuracy"] = evaluate_mlm(model, held["nsp"], masker, seed=seed)["nsp_accuracy"]
            r["sop_accuracy"] = evaluate_mlm(model, held["sop"], masker, seed=seed)["sop_accuracy"]
        out[name] = r

    # does [CLS] transfer? fine-tune each objective's encoder (and a random one) on two pair tasks:
    # training pairs from training documents (their text was pretrained on, their labels never),
    # test pairs from the held-out documents
    t = s["transfer"]
    finetune = partial(finetune_each, tokenizer=tokenizer, seed=seed, device=device)
    for task in ("sop", "nsp"):
        pairs = partial(text_pairs, pair_task=task, sentences_per_unit=t["sentences_per_unit"])
        train_items = [((a, b), y) for a, b, y in pairs(train_docs, seed=seed)][: t["train"]]
        test_items = [((a, b), y) for a, b, y in pairs(held_docs, seed=seed + 1)]
        if len(train_items) < t["train"] or not test_items:
            raise ValueError(
                f"too few {task} pairs: {len(train_items)} to train on, {len(test_items)} to test on"
            )
        starts: dict[str, Any] = {name: (models[name], False, t["lr"]) for name in t["starts"]}
        starts["random"] = (models["bert_shape"].config, False, t["lr"])
        histories = finetune(finetune_classifier, starts, train_items, t, eval_items=test_items)
        for name, h in histories.items():
            out.setdefault(f"transfer_{task}", {})[name] = h.evals["accuracy"][-1]
    return out


register_study(
    Study(
        name="04_albert",
        description="ALBERT: factorisation, sharing, SOP vs NSP vs MLM only, dropout (7 pretrainings a seed)",
        settings={"full": SETTINGS, "quick": QUICK},
        run=run,
    )
)
