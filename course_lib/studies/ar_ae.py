"""Study ``05_ar_ae``: chapter 5's autoregressive vs autoencoding models over three seeds.

For each seed, on chapter 5's text (the chapter 3 documents plus sentences with two-word
city names, so that each city is seen often) and one tokenizer, four pretrainings of the
same network (2 layers, hidden 128, one sentence per row, 64 rows a step):

* ``ae``: a masked LM (BERT's objective, dynamic masking, MLM only), 800 steps;
* ``ae_long``: the same, 6,400 steps. A masked LM scores about 15% of the tokens, a causal LM
  all of them: this arm has about as many scored tokens as the causal LMs (equal steps and
  equal training signal are both "the same budget", and they differ by a factor of 8);
* ``ar``: a left-to-right LM (the same network with causal attention, next-token loss), 800
  steps;
* ``ar_r2l``: a right-to-left LM (the same, trained on every row reversed), 800 steps;
* ``ae_blocks``: the masked LM of ``ae`` on RoBERTa's full-sentence blocks of 64 tokens (32 a
  step) instead of sentences, 800 steps: only its learning curve is kept.

Each run logs its held-out accuracy at ``curve_points`` points (masked-token accuracy for the
masked LMs, next-token accuracy for the causal LMs).

Then, on held-out text:

* **the independence assumption**: both tokens of a two-word city hidden; the masked LM's
  joint (an outer product) and the left-to-right LM's (the chain rule) over the grid of
  first words x second words: mass on pairs that are no city, and the top pair;
* **bidirectional context**: one token hidden, predicted by the masked LM (both sides), by
  each causal LM (one side) and by the product of the two causal LMs (a shallow use of both
  sides): the first word of a city (its right neighbour decides it), the second word, and
  every word of held-out sentences;
* **likelihoods**: held-out perplexity of both causal LMs, the masked LM's pseudo-log-
  likelihood per token beside the left-to-right LM's log-likelihood on the same words, and
  subject-verb agreement minimal pairs scored by each;
* **generation**: continuations of held-out prompts, sampled at temperature 1 from the
  left-to-right LM and by iterative mask filling from the masked LM, with simple statistics;
* **the [MASK] discrepancy**: how far 15% of ``[MASK]`` moves the masked LM's vectors of the
  tokens that stay (what pretraining shows it vs what fine-tuning shows it).

No wall-clock times are stored (they depend on the machine and on what runs beside it).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import torch

from ..analysis.ar_ae import (
    FILL_ORDERS,
    cloze_log_probs,
    fill_masks,
    find_name,
    mask_discrepancy,
    name_joints,
    name_pairs,
    next_token_log_probs,
    product_of_experts,
    pseudo_log_likelihood,
    sample_causal,
)
from ..analysis.cloze import generation_statistics
from ..data.documents import split_corpus, train_tokenizer
from ..data.tasks import agreement_pairs, name_documents, name_sentences, two_word_cities
from ..data.tokenizers import special_ids
from ..device import get_device
from ..objectives.pairs import collate, reverse_sequences
from ..objectives.pretraining import evaluate_causal_lm, pretraining_examples
from ..recipes.bert import bert_config, pretrain_bert
from . import Study, pretrain_arms, register_study

SETTINGS: dict[str, Any] = dict(
    documents=dict(n_docs=2100, seed=0, heldout=0.05),
    names=dict(train=4000, train_seed=1, heldout=400, heldout_seed=2),
    tokenizer=dict(kind="wordpiece", vocab_size=4000),
    model=dict(size="small", num_hidden_layers=2),
    # one sentence per row: on 64-token blocks this masked LM stays on the unigram plateau
    # (every [MASK] attends over the whole block; see the chapter)
    pretrain=dict(steps=800, batch_size=64, lr=1e-3, max_len=64, row_unit="sentence"),
    arms={
        "ae": dict(causal=False, masking="dynamic"),
        # the masked LM scores about 15% of the tokens; 6,400 steps give it about as many
        # scored tokens as the causal LMs get in 800
        "ae_long": dict(causal=False, masking="dynamic", steps=6400),
        "ar": dict(causal=True, direction="left_to_right"),
        "ar_r2l": dict(causal=True, direction="right_to_left"),
        "ae_blocks": dict(causal=False, masking="dynamic", row_unit="block", batch_size=32),
    },
    curve_points=8,
    examples=(
        "New York is a big city in the United States.",
        "Los Angeles is a city in the United States.",
        "She flew to San Diego.",
    ),
    cloze=dict(sentences=300, min_words=5),
    likelihood=dict(sentences=200, agreement_pairs=300, agreement_seed=5),
    generation=dict(prompts=40, prompt_words=2, tokens=10, temperature=1.0, shown=5),
    discrepancy=dict(rows=256, mask_share=0.15),
)
QUICK: dict[str, Any] = dict(
    SETTINGS,
    documents=dict(SETTINGS["documents"], n_docs=200, heldout=0.2),
    names=dict(SETTINGS["names"], train=200, heldout=40),
    tokenizer=dict(SETTINGS["tokenizer"], vocab_size=1500),
    model=dict(SETTINGS["model"], size="tiny"),
    pretrain=dict(SETTINGS["pretrain"], steps=3, batch_size=8),
    arms={
        **SETTINGS["arms"],
        "ae_long": dict(causal=False, masking="dynamic", steps=6),
        "ae_blocks": dict(causal=False, masking="dynamic", row_unit="block", batch_size=8),
    },
    curve_points=2,
    cloze=dict(SETTINGS["cloze"], sentences=10),
    likelihood=dict(sentences=8, agreement_pairs=6, agreement_seed=5),
    generation=dict(prompts=4, prompt_words=2, tokens=3, temperature=1.0, shown=2),
    discrepancy=dict(rows=8, mask_share=0.15),
)
MASKED_ARMS = ("ae", "ae_long")


def _special_list(sp: dict[str, int]) -> list[int]:
    """The special ids a generator never emits and a judge never scores: pad, unk, cls, sep, mask."""
    return [sp[name] for name in ("pad", "unk", "cls", "sep", "mask")]


def chapter_text(s: dict[str, Any]) -> tuple[list, list, list[str]]:
    """``(training documents, held-out documents, held-out sentences with a city)`` of the
    settings ``s``: the chapter 3 documents plus documents of name sentences."""
    train_docs, held_docs = split_corpus(**s["documents"])
    n = s["names"]
    train_docs = list(train_docs) + name_documents(n["train"], seed=n["train_seed"])
    held_names = [x.text for x in name_sentences(n["heldout"], seed=n["heldout_seed"])]
    return train_docs, held_docs, held_names


def chapter_text_and_tokenizer(s: dict[str, Any]) -> tuple[list, list, list[str], Any, dict[str, int]]:
    """:func:`chapter_text` of ``s``, the chapter's tokenizer trained on its training documents and
    that tokenizer's special ids: the start of chapters 5's and 6's studies."""
    train_docs, held_docs, held_names = chapter_text(s)
    tokenizer = train_tokenizer(train_docs, **s["tokenizer"])
    return train_docs, held_docs, held_names, tokenizer, special_ids(tokenizer)


def encode_ids(tokenizer, texts: list[str]) -> dict[str, torch.Tensor]:
    """``texts`` as one padded batch (``input_ids``, ``attention_mask``), no truncation; chapter 6's
    XLNet study encodes its probes with it too."""
    return collate(
        [{"input_ids": tokenizer.encode(t).ids} for t in texts], pad_id=special_ids(tokenizer)["pad"]
    )


def name_joint_records(
    out: dict[str, Any],
    models: dict,
    arms: Sequence[str],
    tokenizer,
    held_names: list[str],
    examples,
    pairs,
    **kwargs_of,
) -> None:
    """The joints of the two-word names (:func:`~course_lib.analysis.ar_ae.name_joints`) by each
    of ``arms`` into ``out["names"]`` (on the held-out sentences) and ``out["grids"]`` (on the
    ``examples``); ``kwargs_of[arm]``, when given, are that arm's options. Chapter 6's XLNet
    study records its arms the same way."""
    out["grids"] = {"sentences": list(examples)}
    for name in arms:
        kwargs = kwargs_of.get(name, {})
        r = name_joints(models[name], tokenizer, held_names, pairs, **kwargs)
        for k in ("inconsistent_mass", "top_is_name", "top_is_right", "grid_mass", "n"):
            out["names"][f"{name}_{k}"] = r[k]
        grids = name_joints(models[name], tokenizer, list(examples), pairs, **kwargs)
        out["grids"][name] = [g.tolist() for g in grids["grids"]]
        out["grids"][f"{name}_inconsistent_mass"] = grids["per_text_inconsistent_mass"]


def cloze_positions(tokenizer, held_names: list[str], pairs, held_docs, c: dict[str, Any]):
    """What the one-hidden-token tests hide: ``(city batch, (row, first word) of each city,
    sentence batch, every (row, position) between [CLS] and [SEP])``, the sentences being the
    first ``c["sentences"]`` held-out ones of at least ``c["min_words"]`` words."""
    city = encode_ids(tokenizer, held_names)
    found = [
        (row, hit[0])
        for row, ids in enumerate(city["input_ids"].tolist())
        if (hit := find_name(ids, pairs)) is not None
    ]
    sentences = [x.text for d in held_docs for x in d.sentences if len(x) >= c["min_words"]][: c["sentences"]]
    batch = encode_ids(tokenizer, sentences)
    lengths = batch["attention_mask"].sum(1)
    every = torch.tensor([(r, t) for r in range(len(sentences)) for t in range(1, int(lengths[r]) - 1)])
    return city, torch.tensor(found), sentences, batch, every


def _accuracy(log_probs: torch.Tensor, target: torch.Tensor) -> float:
    return float((log_probs.argmax(-1) == target).float().mean())


def _cloze(models: dict, batch: dict, positions: torch.Tensor, mask_id: int) -> dict[str, float]:
    """Top-1 accuracy of the token at each ``(row, column)`` of ``positions`` by each model
    and by the product of the two causal LMs."""
    ids, att = batch["input_ids"], batch["attention_mask"]
    target = ids[positions[:, 0], positions[:, 1]]
    lp = {
        name: cloze_log_probs(models[name], ids, positions, attention_mask=att, mask_token_id=mask_id)
        for name in MASKED_ARMS
    }
    lp["ar"] = cloze_log_probs(models["ar"], ids, positions, attention_mask=att)
    lp["ar_r2l"] = cloze_log_probs(
        models["ar_r2l"], ids, positions, attention_mask=att, direction="right_to_left"
    )
    lp["product"] = product_of_experts(lp["ar"], lp["ar_r2l"])
    return {name: _accuracy(v, target) for name, v in lp.items()}


def generate_continuations(
    models: dict, prompts: torch.Tensor, n_tokens: int, temperature: float, seed: int, sp: dict[str, int]
) -> dict[str, torch.Tensor]:
    """``n_tokens`` tokens after each of ``prompts`` (``[CLS] w1 w2 ...``, one length, no
    ``[SEP]``) by each generator: ``"ar"`` samples from the left-to-right LM; each masked arm
    fills ``[MASK]`` tokens placed before a final ``[SEP]``, left to right (``"<arm>_left_to_right"``)
    or most confident first (``"<arm>_most_confident"``; Wang and Cho, 2019). Each generator draws
    from its own torch generator of ``seed`` (the same at every ``temperature``); the special
    tokens are never written. Returns prompt + continuation ids per generator."""
    specials = _special_list(sp)
    n, k = prompts.shape
    generated = {
        "ar": sample_causal(
            models["ar"],
            prompts,
            n_tokens,
            temperature=temperature,
            generator=torch.Generator().manual_seed(1000 * seed),
            banned_ids=specials,
        )
    }
    blank = torch.cat([prompts, torch.full((n, n_tokens), sp["mask"]), torch.full((n, 1), sp["sep"])], 1)
    for i, (name, order) in enumerate(((a, o) for a in MASKED_ARMS for o in FILL_ORDERS), 1):
        filled = fill_masks(
            models[name],
            blank,
            list(range(k, k + n_tokens)),
            mask_token_id=sp["mask"],
            order=order,
            temperature=temperature,
            generator=torch.Generator().manual_seed(1000 * seed + i),
            banned_ids=specials,
        )
        generated[f"{name}_{order}"] = filled[:, : k + n_tokens]
    return generated


def model_judges(models: dict, ids: torch.Tensor, sp: dict[str, int]) -> dict[str, float]:
    """Texts ``ids`` (``[CLS]`` + prompt + continuation, no padding) judged by the left-to-right
    LM (log-likelihood per token) and by the longer-trained masked LM (PLL per token), over the
    tokens after ``[CLS]``. Each judge favours text like its own."""
    specials = _special_list(sp)
    pll = pseudo_log_likelihood(models["ae_long"], ids, mask_token_id=sp["mask"], special_ids=specials)
    return {
        "ar_log_likelihood_per_token": float(next_token_log_probs(models["ar"], ids).mean()),
        "ae_pll_per_token": float(pll.sum() / (ids.numel() - ids.size(0))),
    }


def pretrain_chapter_models(s: dict[str, Any], seed: int, arm_names: Sequence[str] | None = None):
    """Chapter 5's text and tokenizer of the settings ``s`` and its networks pretrained by each
    of ``arm_names`` (default: every arm of ``s``) with ``seed``: ``(models, arm records,
    (training documents, held-out documents, held-out sentences with a city), tokenizer,
    special ids)``. Study ``05_generation`` trains its generators the same way."""
    device = get_device()
    train_docs, held_docs, held_names, tokenizer, sp = chapter_text_and_tokenizer(s)
    p = s["pretrain"]
    m = s["model"]
    config = replace(
        bert_config(m["size"], vocab_size=tokenizer.get_vocab_size(), max_len=p["max_len"], pad_id=sp["pad"]),
        num_hidden_layers=m["num_hidden_layers"],
    )
    arms_settings = s["arms"] if arm_names is None else {k: s["arms"][k] for k in arm_names}
    models, arms = pretrain_arms(
        pretrain_bert,
        train_docs,
        arms_settings,
        p,
        config_of=lambda arm: config,
        curves_of=lambda arm: {"curve_accuracy": "lm_accuracy" if arm["causal"] else "mlm_accuracy"},
        curve_points=s["curve_points"],
        tokenizer=tokenizer,
        heldout=held_docs,
        pair_task=None,
        device=device,
        seed=seed,
    )
    return models, arms, (train_docs, held_docs, held_names), tokenizer, sp


def run(seed: int, quick: bool = False) -> dict[str, Any]:
    s = QUICK if quick else SETTINGS
    models, arms, (_, held_docs, held_names), tokenizer, sp = pretrain_chapter_models(s, seed)
    specials = _special_list(sp)
    mask_id = sp["mask"]
    p = s["pretrain"]
    out: dict[str, Any] = dict(arms)

    # held-out rows (the training layout): perplexity of both causal LMs
    stream = pretraining_examples(
        held_docs, tokenizer, max_len=p["max_len"], pair_task=None, row_unit=p["row_unit"], seed=seed + 1
    )
    for name, rows in (("ar", stream), ("ar_r2l", reverse_sequences(stream))):
        e = evaluate_causal_lm(models[name], rows)
        out[name].update(
            lm_loss=e["lm_loss"], lm_accuracy=e["lm_accuracy"], perplexity=math.exp(e["lm_loss"])
        )

    # 1. the independence assumption: both tokens of a two-word city hidden
    pairs = name_pairs(tokenizer, two_word_cities())
    out["names"] = {
        "cities": [" ".join(n) for n in pairs.names],
        "row_words": pairs.row_words,
        "col_words": pairs.col_words,
        "cells": [list(c) for c in pairs.cells],
    }
    arms = (*MASKED_ARMS, "ar")
    options = {name: dict(mask_token_id=mask_id if name in MASKED_ARMS else None) for name in arms}
    name_joint_records(out, models, arms, tokenizer, held_names, s["examples"], pairs, **options)

    # 2. bidirectional context: one token hidden
    city, first, sentences, batch, every = cloze_positions(
        tokenizer, held_names, pairs, held_docs, s["cloze"]
    )
    out["cloze_city_first"] = _cloze(models, city, first, mask_id)
    out["cloze_city_second"] = _cloze(models, city, first + torch.tensor([0, 1]), mask_id)
    out["cloze_city_first"]["n"] = out["cloze_city_second"]["n"] = len(first)
    out["cloze_words"] = _cloze(models, batch, every, mask_id)
    out["cloze_words"]["n"] = len(every)

    # 3. likelihoods: PLL vs log-likelihood on the same words, agreement minimal pairs
    q = s["likelihood"]
    b = encode_ids(tokenizer, sentences[: q["sentences"]])
    words = b["attention_mask"].sum(1) - 2  # the tokens between [CLS] and [SEP]
    n_words = int(words.sum())
    ll = next_token_log_probs(models["ar"], b["input_ids"], b["attention_mask"])  # column t - 1: token t
    ll_words = ll[:, :-1] * (torch.arange(ll.size(1) - 1)[None] < words[:, None])  # not [SEP]
    out["likelihood"] = {"ar_log_likelihood_per_token": float(ll_words.sum()) / n_words, "n_tokens": n_words}
    agreement = agreement_pairs(q["agreement_pairs"], seed=q["agreement_seed"], shuffle=False)
    a = encode_ids(tokenizer, [t for t, _ in agreement])
    scores = {
        "ar": next_token_log_probs(models["ar"], a["input_ids"], a["attention_mask"]).sum(-1),
        "ar_r2l": next_token_log_probs(models["ar_r2l"], **reverse_sequences(a)).sum(-1),
    }
    for name in MASKED_ARMS:
        pll = pseudo_log_likelihood(
            models[name], b["input_ids"], b["attention_mask"], mask_token_id=mask_id, special_ids=specials
        )
        out["likelihood"][f"{name}_pll_per_token"] = float(pll.sum()) / n_words
        scores[name] = pseudo_log_likelihood(
            models[name], a["input_ids"], a["attention_mask"], mask_token_id=mask_id, special_ids=specials
        )
    labels = torch.tensor([y for _, y in agreement])
    good, bad = labels == 1, labels == 0
    out["agreement"] = {k: float((v[good] > v[bad]).float().mean()) for k, v in scores.items()}
    out["agreement"]["n_pairs"] = int(good.sum())

    # 4. generation: sampled continuations of held-out prompts
    g = s["generation"]
    prompts: list[list[int]] = []
    for text in sentences:
        ids = tokenizer.encode(" ".join(text.split()[: g["prompt_words"]])).ids[:-1]  # [CLS] w1 w2 (no [SEP])
        if len(ids) == 1 + g["prompt_words"] and ids not in prompts:
            prompts.append(ids)
        if len(prompts) == g["prompts"]:
            break
    x = torch.tensor(prompts)
    k = x.size(1)
    generated = generate_continuations(models, x, g["tokens"], g["temperature"], seed, sp)
    out["generation"] = {
        "prompts": [tokenizer.decode(q[1:]) for q in prompts[: g["shown"]]],
        "n": len(prompts),
    }
    for name, ids in generated.items():
        texts = [tokenizer.decode(r[k:].tolist()) for r in ids]
        r = {**generation_statistics(texts), "examples": texts[: g["shown"]]}
        out[f"generation_{name}"] = {**r, **model_judges(models, ids, sp)}

    # 5. the [MASK] discrepancy
    d = s["discrepancy"]
    out["discrepancy"] = {}
    for name in MASKED_ARMS:
        r = mask_discrepancy(
            models[name],
            stream["input_ids"][: d["rows"]],
            attention_mask=stream["attention_mask"][: d["rows"]],
            mask_token_id=mask_id,
            special_ids=specials,
            mask_share=d["mask_share"],
            generator=torch.Generator().manual_seed(seed),
        )
        for key in ("cosine", "l2_distance", "top1_changed", "n_compared", "n_masked"):
            out["discrepancy"][f"{name}_{key}"] = r[key]
    return out


STUDY = register_study(
    Study(
        name="05_ar_ae",
        description="AR vs AE: a masked LM, a left-to-right and a right-to-left LM of one size and budget; "
        "joints of two-word names, one hidden token, likelihoods, generation, the [MASK] discrepancy",
        settings={"full": SETTINGS, "quick": QUICK},
        run=run,
        extra_sources=(
            name_documents,
            two_word_cities,
            name_pairs,
            find_name,
            name_joints,
            cloze_log_probs,
            product_of_experts,
        ),
    )
)
