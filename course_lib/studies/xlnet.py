"""Study ``06_xlnet``: chapter 6's permutation language model over three seeds.

The same text, tokenizer, network shape, rows and seeds as study ``05_ar_ae`` (chapter 5's
text: the chapter 3 documents plus sentences with two-word city names; 2 layers, hidden 128;
one sentence per row, 64 rows a step), so that chapter 6 can set XLNet beside chapter 5's
masked LM and left-to-right LM seed by seed. Two pretrainings of an XLNet with the
permutation LM (``K = 6``: the last sixth of each order is predicted, about as many tokens as
a masked LM's 15%):

* ``xlnet``: 800 steps (the budget of chapter 5's ``ae``, ``ar`` and ``ar_r2l``);
* ``xlnet_long``: 6,400 steps (the budget of chapter 5's ``ae_long``).

Each logs its held-out permutation-LM accuracy at ``curve_points`` points. Then, on held-out
text:

* **two-word cities, jointly**: both tokens of a city predicted last, the first then the
  second (the chain rule, with context on both sides): mass on pairs that are no city, and
  the top pair (chapter 5 measured the same for the masked LM and the left-to-right LM);
* **one hidden token**: the first word of a city, its second word and every word of held-out
  sentences, each predicted last given every other token (chapter 5's cloze);
* **the position problem**: the two tokens of a city, each predicted *from the same context*
  (every other token): how often the query stream gets both right, how different its two
  distributions are, and what one distribution for both positions (a standard softmax over a
  representation of the context alone) would score; the same for two random words of
  held-out sentences;
* **one sequence, several orders**: the held-out rows' log-likelihood under the left-to-right,
  the right-to-left and random orders (per token, every step after the first: the tokens
  chapter 5's causal LMs score on the same rows), and how far the orders disagree.

No wall-clock times are stored.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch

from ..analysis.ar_ae import find_name, name_joints, name_pairs
from ..analysis.xlnet import plm_cloze_log_probs, plm_target_log_probs, same_context_log_probs
from ..data.tasks import two_word_cities
from ..device import get_device
from ..objectives import trim_padding
from ..objectives.permutation import factorised_step_log_probs, sample_orders
from ..objectives.pretraining import pretraining_examples
from ..recipes.xlnet import pretrain_xlnet, xlnet_config
from . import Study, pretrain_arms, register_study
from .ar_ae import QUICK as AR_AE_QUICK
from .ar_ae import SETTINGS as AR_AE
from .ar_ae import chapter_text, chapter_text_and_tokenizer, cloze_positions, encode_ids, name_joint_records

SETTINGS: dict[str, Any] = dict(
    documents=AR_AE["documents"],
    names=AR_AE["names"],
    tokenizer=AR_AE["tokenizer"],
    model=AR_AE["model"],
    pretrain=dict(steps=800, batch_size=64, lr=1e-3, max_len=64, row_unit="sentence", K=6),
    arms={"xlnet": {}, "xlnet_long": dict(steps=6400)},
    curve_points=8,
    examples=AR_AE["examples"],
    cloze=AR_AE["cloze"],
    position=dict(sentences=300, min_words=5, seed=7),
    orders=dict(rows=None, random_orders=4, seed=11),  # rows=None: every held-out row,
)
QUICK: dict[str, Any] = dict(
    SETTINGS,
    documents=AR_AE_QUICK["documents"],
    names=AR_AE_QUICK["names"],
    tokenizer=AR_AE_QUICK["tokenizer"],
    model=AR_AE_QUICK["model"],
    pretrain=dict(SETTINGS["pretrain"], steps=3, batch_size=8),
    arms={"xlnet": {}, "xlnet_long": dict(steps=6)},
    curve_points=2,
    cloze=AR_AE_QUICK["cloze"],
    position=dict(SETTINGS["position"], sentences=10),
    orders=dict(rows=10, random_orders=2, seed=11),
)
ARMS = ("xlnet", "xlnet_long")


def _accuracy(log_probs: torch.Tensor, target: torch.Tensor) -> float:
    return float((log_probs.argmax(-1).cpu() == target.cpu()).float().mean())


def _position_problem(model, ids: torch.Tensor, att: torch.Tensor, pairs: torch.Tensor) -> dict[str, float]:
    """The two targets of each ``(row, i, j)`` of ``pairs``, each from the same context: the
    query stream's accuracy at each, both right, the mean total-variation distance between
    its two distributions, and what one distribution for both positions scores."""
    lp_i, lp_j = (x.cpu() for x in same_context_log_probs(model, ids, pairs, attention_mask=att))
    x_i = ids[pairs[:, 0], pairs[:, 1]]
    x_j = ids[pairs[:, 0], pairs[:, 2]]
    right_i = lp_i.argmax(-1) == x_i
    right_j = lp_j.argmax(-1) == x_j
    tv = 0.5 * (lp_i.exp() - lp_j.exp()).abs().sum(-1)
    # one distribution for both positions, as a standard softmax over h(context) must give:
    # the better of the two query distributions used for both, and the ceiling of any single
    # distribution (both right only where the two tokens are the same)
    one_i = (lp_i.argmax(-1) == x_i) & (lp_i.argmax(-1) == x_j)
    one_j = (lp_j.argmax(-1) == x_i) & (lp_j.argmax(-1) == x_j)
    return {
        "accuracy_i": float(right_i.float().mean()),
        "accuracy_j": float(right_j.float().mean()),
        "both_right": float((right_i & right_j).float().mean()),
        "total_variation": float(tv.mean()),
        "one_distribution_both_right": max(float(one_i.float().mean()), float(one_j.float().mean())),
        "one_distribution_ceiling": float((x_i == x_j).float().mean()),
        "n": int(pairs.size(0)),
    }


def run(seed: int, quick: bool = False) -> dict[str, Any]:
    s = QUICK if quick else SETTINGS
    device = get_device()
    train_docs, held_docs, held_names, tokenizer, sp = chapter_text_and_tokenizer(s)
    p = s["pretrain"]
    m = s["model"]
    config = replace(
        xlnet_config(m["size"], vocab_size=tokenizer.get_vocab_size(), pad_id=sp["pad"]),
        n_layer=m["num_hidden_layers"],
    )
    models, arms = pretrain_arms(
        pretrain_xlnet,
        train_docs,
        s["arms"],
        p,
        config_of=lambda arm: config,
        curves_of=lambda arm: {"curve_accuracy": "plm_accuracy", "curve_loss": "plm_loss"},
        curve_points=s["curve_points"],
        tokenizer=tokenizer,
        heldout=held_docs,
        device=device,
        seed=seed,
    )
    out: dict[str, Any] = dict(arms)

    # 1. two-word cities, jointly (the chain rule with both sides as context)
    pairs = name_pairs(tokenizer, two_word_cities())
    out["names"] = {"cities": [" ".join(n) for n in pairs.names]}
    name_joint_records(out, models, ARMS, tokenizer, held_names, s["examples"], pairs)

    # 2. one hidden token, given every other token
    city, first, _, batch, every = cloze_positions(tokenizer, held_names, pairs, held_docs, s["cloze"])
    second = first + torch.tensor([0, 1])
    for key, data, where in (
        ("cloze_city_first", city, first),
        ("cloze_city_second", city, second),
        ("cloze_words", batch, every),
    ):
        ids, att = data["input_ids"], data["attention_mask"]
        target = ids[where[:, 0], where[:, 1]]
        out[key] = {
            name: _accuracy(plm_cloze_log_probs(models[name], ids, where, attention_mask=att), target)
            for name in ARMS
        }
        out[key]["n"] = len(where)

    # 3. the position problem: two targets after the same context
    city_pairs = torch.cat([first, first[:, 1:] + 1], 1)  # (row, first word, second word)
    q = s["position"]
    g = torch.Generator().manual_seed(q["seed"])
    words = [x.text for d in held_docs for x in d.sentences if len(x) >= q["min_words"]][: q["sentences"]]
    wb = encode_ids(tokenizer, words)
    n_tokens = wb["attention_mask"].sum(1)
    word_pairs = []
    for r in range(len(words)):
        i, j = (1 + torch.randperm(int(n_tokens[r]) - 2, generator=g)[:2]).tolist()  # not [CLS]/[SEP]
        word_pairs.append((r, i, j))
    word_pairs = torch.tensor(word_pairs)
    for name in ARMS:
        out[f"position_cities_{name}"] = _position_problem(
            models[name], city["input_ids"], city["attention_mask"], city_pairs
        )
        out[f"position_words_{name}"] = _position_problem(
            models[name], wb["input_ids"], wb["attention_mask"], word_pairs
        )
    # the query stream at the first and at the second word of a city, same context: how much
    # of its mass lies on first words and on second words of cities
    firsts = torch.tensor(sorted(set(pairs.rows)))
    seconds = torch.tensor(sorted(set(pairs.cols)))
    lp_first, lp_second = same_context_log_probs(
        models["xlnet_long"], city["input_ids"], city_pairs, attention_mask=city["attention_mask"]
    )
    p_first, p_second = lp_first.exp().cpu(), lp_second.exp().cpu()
    out["position_mass"] = {
        "at_first_on_first_words": float(p_first[:, firsts].sum(-1).mean()),
        "at_first_on_second_words": float(p_first[:, seconds].sum(-1).mean()),
        "at_second_on_first_words": float(p_second[:, firsts].sum(-1).mean()),
        "at_second_on_second_words": float(p_second[:, seconds].sum(-1).mean()),
    }

    # 4. one sequence, several orders: the likelihood of held-out rows under the left-to-right
    # order, the right-to-left order and random orders (every step after the first, the tokens
    # a causal LM scores: comparable with chapter 5's lm_loss on the same rows)
    o = s["orders"]
    rows = pretraining_examples(
        held_docs, tokenizer, max_len=p["max_len"], pair_task=None, row_unit=p["row_unit"], seed=seed + 1
    )
    rows = trim_padding({k: v[: o["rows"]] for k, v in rows.items()})  # (v[:None] is all of v)
    ids, att = rows["input_ids"], rows["attention_mask"]
    n = att.sum(1)
    steps = torch.arange(ids.size(1))[None]
    l2r = torch.where(steps < n[:, None], steps, -1)
    r2l = torch.where(steps < n[:, None], n[:, None] - 1 - steps, -1)
    g = torch.Generator().manual_seed(o["seed"])
    scored = (steps >= 1) & (steps < n[:, None])  # every step after the first
    for name in ARMS:
        per_order = {}
        with torch.no_grad():
            models[name].eval()
            for label, order in (("left_to_right", l2r), ("right_to_left", r2l)):
                lp = factorised_step_log_probs(models[name], ids, order).cpu()
                per_order[label] = lp
            randoms = [
                factorised_step_log_probs(models[name], ids, sample_orders(att, g)).cpu()
                for _ in range(o["random_orders"])
            ]
        nll = {k: float(-(v * scored).sum() / scored.sum()) for k, v in per_order.items()}
        nll["random"] = sum(float(-(v * scored).sum() / scored.sum()) for v in randoms) / len(randoms)
        totals = torch.stack([v.sum(-1) for v in (*per_order.values(), *randoms)])  # [orders, rows]
        nll["order_spread_nats"] = float((totals.max(0).values - totals.min(0).values).mean())
        nll["n_tokens"] = int(scored.sum())
        out[f"orders_{name}"] = nll
    return out


STUDY = register_study(
    Study(
        name="06_xlnet",
        description="XLNet's permutation LM on chapter 5's text and network: joints of two-word names, "
        "one hidden token, the position problem",
        settings={"full": SETTINGS, "quick": QUICK},
        run=run,
        extra_sources=(
            chapter_text,
            chapter_text_and_tokenizer,
            encode_ids,
            name_pairs,
            find_name,
            name_joints,
            plm_target_log_probs,
            plm_cloze_log_probs,
            same_context_log_probs,
            factorised_step_log_probs,
        ),
    )
)
