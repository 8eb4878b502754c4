"""Study ``04_albert_shapes``: ALBERT's three design questions at a budget where the factorised
model learns, over three seeds.

Study ``04_albert`` trains its arms for 800 steps: there, both models with a 32-wide token
table stay on the masked LM's unigram plateau, so the factorisation question is left open.
This study doubles the budget (1,600 steps, the sweep below) and asks, on the chapter's text,
tokenizer and 4-layer model (hidden 128, MLM + SOP on segment pairs, dynamic masking, inputs of
64 tokens, no dropout as in ALBERT v2):

* **factorisation at equal steps** (the paper's Table 3): the table's width E in {32, 64, 128}
  with all layers shared, and E in {64, 128} without sharing (E = H = 128 unshared is BERT's
  shape in ALBERT's code);
* **what to share** (the paper's Table 4): with E = 64, all layers, the attention blocks only,
  the feed-forward networks only, nothing;
* **spending the saved parameters on width** (the paper's ALBERT-xxlarge against BERT-large,
  and BERT-xlarge, the widened BERT that got worse): a shared ALBERT of hidden width 256
  (E = 64), whose parameter count is close to the 128-wide BERT shape's, and a BERT shape
  widened to 256 (E = H = 256, unshared). These two train for 800 steps, not 1,600: their
  held-out accuracy is recorded along the way (every 200 steps), so the chapter compares them
  with the BERT shape at equal steps (its curve, up to 800) and reads the wide ALBERT at the
  step where it has spent the 128-wide BERT's 1,600 steps of FLOPs (the FLOP counts are exact
  and computed in the chapter).

Each model is scored on held-out segment pairs: masked-token accuracy and loss, averaged over
``mask_draws`` draws of the 15% masking (one draw covers only ~500 tokens of the held-out
documents), its SOP head's accuracy, and the same head on the pairs with every person's name
and pronoun normalised away (the **SOP cue control**: the generator introduces a person by
name and then refers back by pronoun, so "B starts with *he* and A introduces the name" is a
shortcut to the order; :func:`normalise_people` removes it and a rule that reads only that cue
(:func:`pronoun_cue_accuracy`) shows that it is gone).

The sweep that chose the budget is kept in the results: every arm's held-out accuracy every
200 steps (``curve_steps``, ``curve_accuracy``), next to study ``04_albert``'s 800-step arms.
(Before this study, seed 0 of E = 64 shared reached 0.134 at step 800 of this schedule and
0.153 at 1,600; E = 32 shared is the arm that tells whether the narrowest table catches up.)

Each arm's model is cached under its name and seed, so a run can be stopped and resumed arm by
arm (``COURSE_CACHE``). Cost: about an hour per seed on one thread of a 2-core x86 machine
shared with two other seeds (the results file stores each seed's seconds).
"""

from __future__ import annotations

import re
from typing import Any

import torch

from ..data import load_documents
from ..data.documents import split_documents, train_tokenizer
from ..device import get_device
from ..models.albert import AlbertConfig, AlbertForPreTraining
from ..objectives.pretraining import evaluate_mlm, make_masker, pretraining_examples
from ..recipes.bert import pretrain_bert
from . import Study, register_study

SETTINGS: dict[str, Any] = dict(
    documents=dict(n_docs=2100, seed=0, heldout=0.05),
    tokenizer=dict(kind="wordpiece", vocab_size=4000),
    model=dict(hidden_size=128, num_hidden_layers=4, num_attention_heads=4, intermediate_size=512),
    pretrain=dict(
        steps=1600, batch_size=32, lr=1e-3, max_len=64, masking="dynamic", nsp_unit="segment", pair_task="sop"
    ),
    eval_every=200,
    mask_draws=8,
    arms={
        "e32_all": dict(embedding_size=32, sharing="all"),
        "e64_all": dict(embedding_size=64, sharing="all"),
        "e128_all": dict(embedding_size=128, sharing="all"),
        "e64_none": dict(embedding_size=64, sharing="none"),
        "e128_none": dict(embedding_size=128, sharing="none"),
        "e64_attention": dict(embedding_size=64, sharing="attention"),
        "e64_ffn": dict(embedding_size=64, sharing="ffn"),
        # the two 256-wide arms train for 800 steps: past the point where the wide ALBERT has
        # spent what the 128-wide BERT shape spends in 1,600 (the chapter counts the FLOPs)
        "wide_albert": dict(
            embedding_size=64, sharing="all", hidden_size=256, intermediate_size=1024, steps=800
        ),
        "wide_bert": dict(
            embedding_size=256, sharing="none", hidden_size=256, intermediate_size=1024, steps=800
        ),
    },
)
QUICK: dict[str, Any] = dict(
    SETTINGS,
    documents=dict(n_docs=200, seed=0, heldout=0.2),
    tokenizer=dict(kind="wordpiece", vocab_size=300),
    model=dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64),
    pretrain=dict(SETTINGS["pretrain"], steps=4, batch_size=8),
    eval_every=2,
    mask_draws=2,
    # the same arms at a quarter of the width (E 32/64/128/256 -> 8/16/32/64, H 256 -> 64), the
    # wide ones at half the steps
    arms={
        name: dict(arm, embedding_size=arm["embedding_size"] // 4)
        | ({"hidden_size": 64, "intermediate_size": 128, "steps": 2} if "hidden_size" in arm else {})
        for name, arm in SETTINGS["arms"].items()
    },
)

_PRONOUNS = ("he", "she", "him", "her", "his", "hers", "himself", "herself")


def normalise_people(sentences: list[str], names: set[str]) -> list[str]:
    """Every person's first name and surname, and every third-person singular pronoun, replaced
    by one placeholder each ("Sam"; "it", "its", "itself", which agree with the verb as he and
    she do): who is introduced first and who is referred back to can no longer be read from
    the words."""
    words = {w.lower() for w in names}

    def swap(m: re.Match[str]) -> str:
        w = m.group(0)
        lw = w.lower()
        if lw in words:
            return "Sam"
        out = {"he": "it", "she": "it", "him": "it", "her": "its", "his": "its", "hers": "its"}.get(lw)
        out = out or {"himself": "itself", "herself": "itself"}.get(lw)
        if out is None:
            return w
        return out.capitalize() if w[0].isupper() else out

    return [re.sub(r"[A-Za-z]+", swap, s) for s in sentences]


def pronoun_cue_accuracy(examples: dict[str, torch.Tensor], tokenizer, names: set[str]) -> float:
    """The shortcut alone, as a classifier of SOP pairs: call a pair swapped when its first
    third-person pronoun comes before its first person's name (in a document the name comes
    first and the pronouns refer back to it), in order otherwise (also when the pair has no
    name or no pronoun). Its accuracy on the original pairs shows how much the cue gives away;
    on normalised pairs (:func:`normalise_people`) no name or pronoun is left and it says "in
    order" every time."""

    def ids_of(words: set[str]) -> torch.Tensor:
        found = {tokenizer.token_to_id(v) for w in words for v in (w, w.lower(), w.capitalize())} - {None}
        return torch.tensor(sorted(found), dtype=torch.long)

    x = examples["input_ids"]
    width = torch.arange(x.size(1)).expand_as(x)
    never = x.size(1)
    first_name = torch.where(torch.isin(x, ids_of(names)), width, never).min(1).values
    first_pronoun = torch.where(torch.isin(x, ids_of(set(_PRONOUNS))), width, never).min(1).values
    guess = ((first_pronoun < first_name) & (first_name < never)).long()
    return float((guess == examples["sentence_order_label"]).float().mean())


def run(seed: int, quick: bool = False) -> dict[str, dict[str, Any]]:
    from ..data.lexicon import load_lexicon

    s = QUICK if quick else SETTINGS
    device = get_device()
    documents = load_documents(n_docs=s["documents"]["n_docs"], seed=s["documents"]["seed"])
    train_docs, held_docs = split_documents(documents, s["documents"]["heldout"])
    tokenizer = train_tokenizer(train_docs, **s["tokenizer"])
    masker = make_masker(tokenizer)
    p = dict(s["pretrain"])
    held = pretraining_examples(
        held_docs, tokenizer, max_len=p["max_len"], pair_task="sop", nsp_unit=p["nsp_unit"], seed=seed + 1
    )
    lex = load_lexicon()
    names = set(lex.male_names) | set(lex.female_names) | set(lex.surnames)
    held_normalised = pretraining_examples(
        [normalise_people([x.text for x in d.sentences], names) for d in held_docs],
        tokenizer,
        max_len=p["max_len"],
        pair_task="sop",
        nsp_unit=p["nsp_unit"],
        seed=seed + 1,
    )
    out: dict[str, dict[str, Any]] = {
        "cue": {
            "rule_original": pronoun_cue_accuracy(held, tokenizer, names),
            "rule_normalised": pronoun_cue_accuracy(held_normalised, tokenizer, names),
        }
    }
    for name, arm in s["arms"].items():
        model_kw = dict(s["model"])
        model_kw.update({k: v for k, v in arm.items() if k in ("hidden_size", "intermediate_size")})
        config = AlbertConfig(
            vocab_size=tokenizer.get_vocab_size(),
            max_position_embeddings=p["max_len"],
            embedding_size=arm["embedding_size"],
            sharing=arm["sharing"],
            hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0,
            **model_kw,
        )
        model, _, history = pretrain_bert(
            config,
            train_docs,
            tokenizer=tokenizer,
            heldout=held_docs,
            model_class=AlbertForPreTraining,
            eval_every=s["eval_every"],
            device=device,
            seed=seed,
            progress=False,
            # each arm's model is cached (COURSE_CACHE): a run killed part-way keeps the arms it
            # trained, and a re-run of the same code loads them instead of training them again
            cache_name=f"04_albert_shapes-{name}-seed{seed}{'-quick' if quick else ''}",
            **(p | {k: arm[k] for k in ("steps",) if k in arm}),
        )
        draws = [evaluate_mlm(model, held, masker, seed=seed * 1000 + k) for k in range(s["mask_draws"])]
        r: dict[str, Any] = {
            "parameters": model.num_parameters(),
            "mlm_accuracy": sum(d["mlm_accuracy"] for d in draws) / len(draws),
            "mlm_loss": sum(d["mlm_loss"] for d in draws) / len(draws),
            "sop_accuracy": draws[0]["sop_accuracy"],
            "sop_accuracy_normalised": evaluate_mlm(model, held_normalised, masker, seed=seed)[
                "sop_accuracy"
            ],
            "curve_steps": [int(x) + 1 for x in history.eval_steps],
            "curve_accuracy": [float(x) for x in history.evals["mlm_accuracy"]],
        }
        out[name] = r
    return out


register_study(
    Study(
        name="04_albert_shapes",
        description=(
            "ALBERT at 1,600 steps: factorisation (Table 3), what to share (Table 4), width, "
            "the SOP cue control"
        ),
        settings={"full": SETTINGS, "quick": QUICK},
        run=run,
    )
)
