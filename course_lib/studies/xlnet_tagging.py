"""Study ``06_xlnet_tagging``: XLNet vs BERT fine-tuned on one downstream toy task, over three
seeds (issue 31 §5).

Per seed, on chapter 5's text and tokenizer and with chapter 5's network (2 layers, hidden 128,
one sentence per row, 64 rows a step, 800 steps), two pretrainings of the same size and budget:

* ``xlnet``: chapter 6's permutation LM (study ``06_xlnet``'s arm ``xlnet``, ``K = 6``);
* ``ae``: chapter 5's masked LM (study ``05_ar_ae``'s arm ``ae``: BERT's objective, dynamic
  masking, MLM only).

Each logs its held-out accuracy (permutation-LM / masked-token) at ``curve_points`` points: the
positive control that both learned something. Then chapter 3's tagging task (part-of-speech
tags of generated sentences, 100 labelled sentences, 150 steps; study ``03_bert``'s settings)
is fine-tuned from each pretrained model and from a random-weights start of each network
(:func:`~course_lib.recipes.finetune.finetune_tagger`: the same seed, new layer and batch
order for all four), recording the held-out ``accuracy`` and ``unseen_accuracy`` (the words
never seen labelled). ``majority`` is the share of the most frequent tag in the test set: what
a tagger that reads nothing reaches.

What it can show: whether the pretraining gain (pretrained minus random start, per family)
differs between the two objectives by more than the seeds' spread. The random starts are the
control that the two networks themselves (absolute vs relative positions) tag equally well
without pretraining. No wall-clock times are stored.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ..data.tasks import pos_tagging_task
from ..device import get_device
from ..recipes.bert import bert_config, pretrain_bert
from ..recipes.finetune import finetune_tagger
from ..recipes.xlnet import pretrain_xlnet, xlnet_config
from . import Study, finetune_each, pretrain_arms, register_study
from .ar_ae import QUICK as AR_AE_QUICK
from .ar_ae import SETTINGS as AR_AE
from .ar_ae import chapter_text, chapter_text_and_tokenizer
from .bert import QUICK as BERT_QUICK
from .bert import SETTINGS as BERT
from .xlnet import QUICK as XLNET_QUICK
from .xlnet import SETTINGS as XLNET

SETTINGS: dict[str, Any] = dict(
    documents=AR_AE["documents"],
    names=AR_AE["names"],
    tokenizer=AR_AE["tokenizer"],
    model=AR_AE["model"],
    pretrain={"xlnet": XLNET["pretrain"], "ae": {**AR_AE["pretrain"], **AR_AE["arms"]["ae"]}},
    curve_points=8,  # as studies 05_ar_ae and 06_xlnet
    tagging={k: v for k, v in BERT["tagging"].items() if k != "frozen_lr"},
)
QUICK: dict[str, Any] = dict(
    SETTINGS,
    documents=AR_AE_QUICK["documents"],
    names=AR_AE_QUICK["names"],
    tokenizer=AR_AE_QUICK["tokenizer"],
    model=AR_AE_QUICK["model"],
    pretrain={
        "xlnet": XLNET_QUICK["pretrain"],
        "ae": {**AR_AE_QUICK["pretrain"], **AR_AE_QUICK["arms"]["ae"]},
    },
    curve_points=2,
    tagging={k: v for k, v in BERT_QUICK["tagging"].items() if k != "frozen_lr"},
)
FAMILIES = ("xlnet", "ae")
TAGGERS = ("tag_xlnet_finetuned", "tag_xlnet_random", "tag_mlm_finetuned", "tag_mlm_random")


def run(seed: int, quick: bool = False) -> dict[str, Any]:
    s = QUICK if quick else SETTINGS
    device = get_device()
    train_docs, held_docs, _, tokenizer, sp = chapter_text_and_tokenizer(s)
    m, p = s["model"], s["pretrain"]
    vocab = tokenizer.get_vocab_size()
    xl_config = replace(
        xlnet_config(m["size"], vocab_size=vocab, pad_id=sp["pad"]), n_layer=m["num_hidden_layers"]
    )
    ae_config = replace(
        bert_config(m["size"], vocab_size=vocab, max_len=p["ae"]["max_len"], pad_id=sp["pad"]),
        num_hidden_layers=m["num_hidden_layers"],
    )
    common = dict(
        curve_points=s["curve_points"], tokenizer=tokenizer, heldout=held_docs, device=device, seed=seed
    )
    # family -> (recipe, config, the held-out accuracy it logs, its own options)
    families = {
        "xlnet": (pretrain_xlnet, xl_config, "plm_accuracy", {}),
        "ae": (pretrain_bert, ae_config, "mlm_accuracy", {"pair_task": None}),
    }
    pretrained, out = {}, {}
    for name, (recipe, config, curve, options) in families.items():
        models, records = pretrain_arms(
            recipe,
            train_docs,
            {name: {}},
            p[name],
            config_of=lambda arm, config=config: config,
            curves_of=lambda arm, curve=curve: {"curve_accuracy": curve},
            **common,
            **options,
        )
        pretrained.update(models)
        out.update(records)

    t = s["tagging"]
    tagset, items, evals = pos_tagging_task(t["train"], t["test"])
    starts = {
        "tag_xlnet_finetuned": (pretrained["xlnet"], False, t["lr"]),
        "tag_xlnet_random": (xl_config, False, t["lr"]),
        "tag_mlm_finetuned": (pretrained["ae"], False, t["lr"]),
        "tag_mlm_random": (ae_config, False, t["lr"]),
    }
    tagged = finetune_each(
        finetune_tagger,
        starts,
        items,
        t,
        tokenizer=tokenizer,
        seed=seed,
        device=device,
        num_labels=len(tagset),
        eval_items=evals,
    )
    for name, h in tagged.items():
        out[name] = {"accuracy": h.evals["accuracy"][-1], "unseen_accuracy": h.evals["unseen_accuracy"][-1]}
    tags = [y for _, ys in evals for y in ys]
    out["majority"] = {"accuracy": max(tags.count(y) for y in set(tags)) / len(tags)}
    return out


STUDY = register_study(
    Study(
        name="06_xlnet_tagging",
        description="XLNet (permutation LM) vs chapter 5's masked LM, same network and budget, each "
        "fine-tuned as a POS tagger from 100 sentences, with a random-weights start of each",
        settings={"full": SETTINGS, "quick": QUICK},
        run=run,
        extra_sources=(chapter_text, chapter_text_and_tokenizer, pos_tagging_task),
    )
)
