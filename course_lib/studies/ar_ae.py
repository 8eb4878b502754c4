"""Study ``05_ar_ae``: chapter 5's autoregressive vs autoencoding models over three seeds.

For each seed, on chapter 5's text (the chapter 3 documents plus sentences with two-word
city names, so that each city is seen often) and one tokenizer, three pretrainings of the
same network (4 layers, hidden 128) with the same budget (steps, batch, blocks of 64 tokens):

* ``ae``: a masked LM (BERT's objective, dynamic masking, MLM only on full-sentence blocks);
* ``ar``: a left-to-right LM (the same network with causal attention, next-token loss);
* ``ar_r2l``: a right-to-left LM (the same, trained on every block reversed).

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
from dataclasses import replace
from typing import Any

import torch

from ..analysis.ar_ae import (
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
from ..data import load_documents
from ..data.tasks import agreement_pairs, name_documents, name_sentences, two_word_cities
from ..data.tokenizers import special_ids
from ..device import get_device
from ..objectives.pairs import collate, reverse_sequences
from ..recipes.bert import (
    bert_config,
    evaluate_causal_lm,
    pretrain_bert,
    pretraining_examples,
    split_documents,
    train_tokenizer,
)
from . import Study, register_study

SETTINGS: dict[str, Any] = dict(
    documents=dict(n_docs=2100, seed=0, heldout=0.05),
    names=dict(train=4000, train_seed=1, heldout=400, heldout_seed=2),
    tokenizer=dict(kind="wordpiece", vocab_size=4000),
    model=dict(size="small", num_hidden_layers=4),
    pretrain=dict(steps=800, batch_size=32, lr=1e-3, max_len=64),
    arms={
        "ae": dict(causal=False, masking="dynamic"),
        "ar": dict(causal=True, direction="left_to_right"),
        "ar_r2l": dict(causal=True, direction="right_to_left"),
    },
    cloze=dict(sentences=300, min_words=5),
    likelihood=dict(sentences=200, agreement_pairs=300, agreement_seed=5),
    generation=dict(prompts=40, prompt_words=2, tokens=10, temperature=1.0, shown=5),
    discrepancy=dict(blocks=256, mask_share=0.15),
)
QUICK: dict[str, Any] = dict(
    SETTINGS,
    documents=dict(n_docs=200, seed=0, heldout=0.2),
    names=dict(train=200, train_seed=1, heldout=40, heldout_seed=2),
    tokenizer=dict(kind="wordpiece", vocab_size=1500),
    model=dict(size="tiny", num_hidden_layers=2),
    pretrain=dict(steps=3, batch_size=8, lr=1e-3, max_len=64),
    cloze=dict(sentences=10, min_words=5),
    likelihood=dict(sentences=8, agreement_pairs=6, agreement_seed=5),
    generation=dict(prompts=4, prompt_words=2, tokens=3, temperature=1.0, shown=2),
    discrepancy=dict(blocks=8, mask_share=0.15),
)


def chapter_text(s: dict[str, Any]) -> tuple[list, list, list[str]]:
    """``(training documents, held-out documents, held-out sentences with a city)`` of the
    settings ``s``: the chapter 3 documents plus documents of name sentences."""
    documents = load_documents(n_docs=s["documents"]["n_docs"], seed=s["documents"]["seed"])
    train_docs, held_docs = split_documents(documents, s["documents"]["heldout"])
    n = s["names"]
    train_docs = list(train_docs) + name_documents(n["train"], seed=n["train_seed"])
    held_names = [x.text for x in name_sentences(n["heldout"], seed=n["heldout_seed"])]
    return train_docs, held_docs, held_names


def _encode(tokenizer, texts: list[str]) -> dict[str, torch.Tensor]:
    return collate(
        [{"input_ids": tokenizer.encode(t).ids} for t in texts], pad_id=special_ids(tokenizer)["pad"]
    )


def _accuracy(log_probs: torch.Tensor, target: torch.Tensor) -> float:
    return float((log_probs.argmax(-1) == target).float().mean())


def _cloze(models: dict, batch: dict, positions: torch.Tensor, mask_id: int) -> dict[str, float]:
    """Top-1 accuracy of the token at each ``(row, column)`` of ``positions`` by each model
    and by the product of the two causal LMs."""
    ids, att = batch["input_ids"], batch["attention_mask"]
    target = ids[positions[:, 0], positions[:, 1]]
    lp = {
        "ae": cloze_log_probs(models["ae"], ids, positions, attention_mask=att, mask_token_id=mask_id),
        "ar": cloze_log_probs(models["ar"], ids, positions, attention_mask=att),
        "ar_r2l": cloze_log_probs(
            models["ar_r2l"], ids, positions, attention_mask=att, direction="right_to_left"
        ),
    }
    lp["product"] = product_of_experts(lp["ar"], lp["ar_r2l"])
    return {name: _accuracy(v, target) for name, v in lp.items()}


def run(seed: int, quick: bool = False) -> dict[str, Any]:
    s = QUICK if quick else SETTINGS
    device = get_device()
    train_docs, held_docs, held_names = chapter_text(s)
    tokenizer = train_tokenizer(train_docs, **s["tokenizer"])
    sp = special_ids(tokenizer)
    specials = [sp["pad"], sp["unk"], sp["cls"], sp["sep"], sp["mask"]]
    p = s["pretrain"]
    m = s["model"]
    config = replace(
        bert_config(m["size"], vocab_size=tokenizer.get_vocab_size(), max_len=p["max_len"], pad_id=sp["pad"]),
        num_hidden_layers=m["num_hidden_layers"],
    )
    models = {}
    out: dict[str, Any] = {}
    for name, arm in s["arms"].items():
        model, _, _ = pretrain_bert(
            config,
            train_docs,
            tokenizer=tokenizer,
            heldout=held_docs,
            pair_task=None,
            device=device,
            seed=seed,
            progress=False,
            **arm,
            **p,
        )
        models[name] = model
        out[name] = {"parameters": model.num_parameters()}
    mask_id = sp["mask"]

    # held-out blocks (the training layout): perplexity of both causal LMs
    stream = pretraining_examples(held_docs, tokenizer, max_len=p["max_len"], pair_task=None, seed=seed + 1)
    for name, blocks in (("ar", stream), ("ar_r2l", reverse_sequences(stream))):
        e = evaluate_causal_lm(models[name], blocks)
        out[name].update(
            lm_loss=e["lm_loss"], lm_accuracy=e["lm_accuracy"], perplexity=math.exp(e["lm_loss"])
        )

    # 1. the independence assumption: both tokens of a two-word city hidden
    pairs = name_pairs(tokenizer, two_word_cities())
    out["names"] = {
        "cities": [" ".join(n) for n in pairs.names],
        "rows": len(pairs.rows),
        "cols": len(pairs.cols),
    }
    for name in ("ae", "ar"):
        r = name_joints(
            models[name], tokenizer, held_names, pairs, mask_token_id=mask_id if name == "ae" else None
        )
        for k in ("inconsistent_mass", "top_is_name", "top_is_right", "grid_mass", "n"):
            out["names"][f"{name}_{k}"] = r[k]

    # 2. bidirectional context: one token hidden
    city = _encode(tokenizer, held_names)
    found = [
        (row, hit[0])
        for row, ids in enumerate(city["input_ids"].tolist())
        if (hit := find_name(ids, pairs)) is not None
    ]
    first = torch.tensor(found)
    out["cloze_city_first"] = _cloze(models, city, first, mask_id)
    out["cloze_city_second"] = _cloze(models, city, first + torch.tensor([0, 1]), mask_id)
    out["cloze_city_first"]["n"] = out["cloze_city_second"]["n"] = len(found)
    c = s["cloze"]
    sentences = [x.text for d in held_docs for x in d.sentences if len(x) >= c["min_words"]][: c["sentences"]]
    batch = _encode(tokenizer, sentences)
    lengths = batch["attention_mask"].sum(1)
    every = torch.tensor([(r, t) for r in range(len(sentences)) for t in range(1, int(lengths[r]) - 1)])
    out["cloze_words"] = _cloze(models, batch, every, mask_id)
    out["cloze_words"]["n"] = len(every)

    # 3. likelihoods: PLL vs log-likelihood on the same words, agreement minimal pairs
    q = s["likelihood"]
    b = _encode(tokenizer, sentences[: q["sentences"]])
    words = b["attention_mask"].sum(1) - 2  # the tokens between [CLS] and [SEP]
    pll = pseudo_log_likelihood(
        models["ae"], b["input_ids"], b["attention_mask"], mask_token_id=mask_id, special_ids=specials
    )
    ll = next_token_log_probs(models["ar"], b["input_ids"], b["attention_mask"])  # column t - 1: token t
    ll_words = ll[:, :-1] * (torch.arange(ll.size(1) - 1)[None] < words[:, None])  # not [SEP]
    n_words = int(words.sum())
    out["likelihood"] = {
        "ae_pll_per_token": float(pll.sum()) / n_words,
        "ar_log_likelihood_per_token": float(ll_words.sum()) / n_words,
        "n_tokens": n_words,
    }
    agreement = agreement_pairs(q["agreement_pairs"], seed=q["agreement_seed"], shuffle=False)
    a = _encode(tokenizer, [t for t, _ in agreement])
    scores = {
        "ae": pseudo_log_likelihood(
            models["ae"], a["input_ids"], a["attention_mask"], mask_token_id=mask_id, special_ids=specials
        ),
        "ar": next_token_log_probs(models["ar"], a["input_ids"], a["attention_mask"]).sum(-1),
        "ar_r2l": next_token_log_probs(models["ar_r2l"], **reverse_sequences(a)).sum(-1),
    }
    labels = torch.tensor([y for _, y in agreement])
    good, bad = labels == 1, labels == 0
    out["agreement"] = {k: float((v[good] > v[bad]).float().mean()) for k, v in scores.items()}
    out["agreement"]["n_pairs"] = int(good.sum())

    # 4. generation: sampled continuations of held-out prompts
    g = s["generation"]
    prompts = []
    for text in sentences:
        ids = tokenizer.encode(" ".join(text.split()[: g["prompt_words"]])).ids[:-1]  # [CLS] w1 w2 (no [SEP])
        if len(ids) == 1 + g["prompt_words"] and ids not in prompts:
            prompts.append(ids)
        if len(prompts) == g["prompts"]:
            break
    x = torch.tensor(prompts)
    gen = torch.Generator().manual_seed(1000 * seed)
    ar_ids = sample_causal(
        models["ar"], x, g["tokens"], temperature=g["temperature"], generator=gen, banned_ids=specials
    )
    k = x.size(1)
    filled = torch.cat(
        [x, torch.full((len(prompts), g["tokens"]), mask_id), torch.full((len(prompts), 1), sp["sep"])], 1
    )
    texts = {"ar": [tokenizer.decode(r[k:].tolist()) for r in ar_ids]}
    generated = {"ar": ar_ids}
    for i, order in enumerate(("left_to_right", "most_confident"), 1):
        gen = torch.Generator().manual_seed(1000 * seed + i)
        ae_ids = fill_masks(
            models["ae"],
            filled,
            list(range(k, k + g["tokens"])),
            mask_token_id=mask_id,
            order=order,
            temperature=g["temperature"],
            generator=gen,
            banned_ids=specials,
        )
        texts[f"ae_{order}"] = [tokenizer.decode(r[k : k + g["tokens"]].tolist()) for r in ae_ids]
        generated[f"ae_{order}"] = ae_ids[:, : k + g["tokens"]]
    out["generation"] = {
        "prompts": [tokenizer.decode(p[1:]) for p in prompts[: g["shown"]]],
        "n": len(prompts),
    }
    # each continuation judged by both models, over the tokens after [CLS] (the prompts are the
    # same for every generator; each judge favours text like its own)
    for name, t in texts.items():
        ids = generated[name]
        r = {**generation_statistics(t), "examples": t[: g["shown"]]}
        r["ar_log_likelihood_per_token"] = float(next_token_log_probs(models["ar"], ids).mean())
        r["ae_pll_per_token"] = float(
            pseudo_log_likelihood(models["ae"], ids, mask_token_id=mask_id, special_ids=specials).sum()
            / (ids.numel() - ids.size(0))
        )
        out[f"generation_{name}"] = r

    # 5. the [MASK] discrepancy
    d = s["discrepancy"]
    r = mask_discrepancy(
        models["ae"],
        stream["input_ids"][: d["blocks"]],
        attention_mask=stream["attention_mask"][: d["blocks"]],
        mask_token_id=mask_id,
        special_ids=specials,
        mask_share=d["mask_share"],
        generator=torch.Generator().manual_seed(seed),
    )
    out["discrepancy"] = {
        k: r[k] for k in ("cosine", "l2_distance", "top1_changed", "n_compared", "n_masked")
    }
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
