"""Study ``07_distillation``: chapter 7's students over three seeds.

The teacher is chapter 3's BERT (its text, tokenizer, network and 800 pretraining steps, seed
0, the same for every seed) fine-tuned as a part-of-speech tagger on chapter 3's 100 tagged
sentences (seed = the study's seed). Every student has one layer of width 64 with 4 heads
(:func:`~course_lib.recipes.distill.student_config`) unless its arm says otherwise, sees the
same 100 tagged sentences and, except ``scratch``, a *transfer set* of untagged sentences
from the pretraining text, tagged by the teacher alone. Arms (:func:`student_arms`):

* ``scratch``: the true tags only (no teacher, no transfer set);
* ``teacher_labels``: the teacher's argmax tags on the transfer set (pseudo-labels);
* ``kd``: Hinton's soft targets at T = 2, the soft weight from 0.9 to 0.1;
* ``kd_hints``: FitNets: the student's layer learns the teacher's first layer through a
  regressor, then ``kd``;
* ``tinybert``: TinyBERT's task distillation: embeddings, hidden states and attention
  scores by the uniform layer map, then the soft cross-entropy;
* ``tinybert_general``: the same, from a student first distilled on plain text from the
  pretrained (not fine-tuned) BERT (TinyBERT's general distillation);
* ``joint``: teacher and student trained together from the pretrained body (Apprentice);
* ``distilbert_init``: a student of the teacher's width with the teacher's embeddings and
  first layer copied (DistilBERT's initialisation), then ``kd``; ``kd_wide``: the same shape
  from random weights, then ``kd``.

``kd_weak_teacher``: ``kd`` from a weaker teacher (``weak_teacher``: the same tagger trained
from random weights) against ``kd`` from the pretrained one. Sweeps, each against its
baseline: the transfer set's size with the teacher's argmax tags and with its soft targets;
the temperature; a constant soft weight against the schedule.
Metrics: tagging accuracy, accuracy on words absent from the tagged sentences, agreement
with the teacher's tags, parameters. No wall-clock times are stored (the chapter measures
them live).
"""

from __future__ import annotations

from typing import Any

from ..analysis.distill import tag_agreement
from ..data.tasks import pos_tagging_task
from ..device import get_device
from ..models.bert import BertForTokenClassification, init_from_teacher
from ..recipes.bert import bert_config, pretrain_bert
from ..recipes.distill import distill_pretrained, distill_tagger, student_config
from ..recipes.finetune import finetune_tagger, tagging_accuracy
from . import Study, register_study, text_and_tokenizer

SETTINGS: dict[str, Any] = dict(
    size="small",
    documents=dict(n_docs=2100, seed=0, heldout=0.05),  # chapter 3's text, tokenizer and BERT
    tokenizer=dict(kind="wordpiece", vocab_size=4000),
    pretrain=dict(
        steps=800,
        batch_size=64,
        lr=2e-3,
        max_len=64,
        seed=0,
        masking="static",
        pair_task="nsp",
        eval_every=200,
        cache_name="ch03-bert-static",
    ),
    tagging=dict(train=(100, 200), test=(500, 201), steps=150, batch_size=16, lr=1e-3),
    student=dict(layers=1, hidden=64, heads=4),
    distill=dict(steps=300, batch_size=32, lr=2e-3, temperature=2.0),
    first_steps=100,
    general=dict(documents=400, first_steps=300, batch_size=32, lr=2e-3),
    transfer=1000,
    sweep=dict(sizes=(100, 300, 1000), temperatures=(1.0, 2.0, 4.0, 8.0), transfer=300),
)
QUICK: dict[str, Any] = dict(
    SETTINGS,
    size="tiny",
    documents=dict(n_docs=60, seed=0, heldout=0.1),
    tokenizer=dict(kind="wordpiece", vocab_size=300),
    pretrain=dict(SETTINGS["pretrain"], steps=3, batch_size=8, max_len=32, eval_every=None, cache_name=None),
    tagging=dict(SETTINGS["tagging"], train=(10, 200), test=(10, 201), steps=3, batch_size=4),
    student=dict(layers=1, hidden=16, heads=2),
    distill=dict(SETTINGS["distill"], steps=3, batch_size=4),
    first_steps=2,
    general=dict(SETTINGS["general"], documents=20, first_steps=2, batch_size=4),
    transfer=20,
    sweep=dict(sizes=(5, 10), temperatures=(1.0, 4.0), transfer=10),
)
ARMS = (
    "scratch",
    "teacher_labels",
    "kd",
    "kd_hints",
    "tinybert",
    "tinybert_general",
    "joint",
    "distilbert_init",
    "kd_wide",
)


def chapter3_bert(s: dict[str, Any], device=None) -> tuple[Any, Any, list]:
    """``(bert, tokenizer, training documents)``: chapter 3's WordPiece tokenizer and pretrained
    BERT, from chapter 3's text (``s["documents"]``, ``s["tokenizer"]``, ``s["size"]``,
    ``s["pretrain"]``: this study's settings; chapter 8's probes start from the same BERT),
    loaded from the course cache when chapter 3, 7 or 8 trained it."""
    train_docs, held_docs, tokenizer = text_and_tokenizer(s)
    p = dict(s["pretrain"])
    config = bert_config(
        s["size"],
        vocab_size=tokenizer.get_vocab_size(),
        max_len=p["max_len"],
        pad_id=tokenizer.token_to_id("[PAD]"),
    )
    bert, _, _ = pretrain_bert(
        config, train_docs, tokenizer=tokenizer, heldout=held_docs, device=device, progress=False, **p
    )
    return bert, tokenizer, train_docs


def teacher_tagger(start, tokenizer, items, evals, num_labels: int, t: dict[str, Any], seed: int, device):
    """``(tagger, history)``: a tagger fine-tuned from ``start`` (a pretrained BERT, or a config
    for random weights) with the tagging settings ``t``: the teacher, and the weaker teacher."""
    return finetune_tagger(
        start,
        tokenizer,
        items,
        num_labels=num_labels,
        eval_items=evals,
        seed=seed,
        steps=t["steps"],
        batch_size=t["batch_size"],
        lr=t["lr"],
        device=device,
        progress=False,
    )


def chapter_setup(s: dict[str, Any], seed: int, device=None) -> dict[str, Any]:
    """Chapter 3's text, tokenizer and BERT, the tagging task (tagged, test and transfer
    sentences) and the teacher tagger fine-tuned with ``seed``: what the chapter and the study
    start from."""
    bert, tokenizer, train_docs = chapter3_bert(s, device)
    t = s["tagging"]
    tagset, items, evals = pos_tagging_task(t["train"], t["test"])
    pool = [sent.tokens for doc in train_docs for sent in doc.sentences]
    teacher, history = teacher_tagger(bert, tokenizer, items, evals, len(tagset), t, seed, device)
    return dict(
        train_docs=train_docs,
        tokenizer=tokenizer,
        bert=bert,
        tagset=tagset,
        items=items,
        evals=evals,
        pool=pool,
        teacher=teacher,
        teacher_history=history,
    )


def student_arms(setup: dict[str, Any], s: dict[str, Any], seed: int, arms=ARMS) -> dict[str, Any]:
    """``{arm: Distilled}`` for the chosen ``arms`` (see the module's docstring)."""
    teacher, tokenizer, items, evals = setup["teacher"], setup["tokenizer"], setup["items"], setup["evals"]
    transfer = setup["pool"][: s["transfer"]]
    small = student_config(teacher.config, **s["student"])
    wide = student_config(teacher.config, layers=s["student"]["layers"])
    common = dict(eval_items=evals, seed=seed, progress=False, **s["distill"])
    first = s["first_steps"]
    out: dict[str, Any] = {}
    for arm in arms:
        if arm == "scratch":
            out[arm] = distill_tagger(teacher, small, tokenizer, items, (), method="hard", **common)
        elif arm in ("teacher_labels", "kd"):
            out[arm] = distill_tagger(teacher, small, tokenizer, items, transfer, method=arm, **common)
        elif arm == "kd_hints":
            out[arm] = distill_tagger(
                teacher, small, tokenizer, items, transfer, method="hints", first_steps=first, **common
            )
        elif arm == "tinybert":
            out[arm] = distill_tagger(
                teacher, small, tokenizer, items, transfer, method="tinybert", first_steps=first, **common
            )
        elif arm == "tinybert_general":
            g = s["general"]
            general = distill_pretrained(
                setup["bert"],
                setup["train_docs"][: g["documents"]],
                tokenizer,
                small,
                method="tinybert",
                steps=0,
                first_steps=g["first_steps"],
                batch_size=g["batch_size"],
                lr=g["lr"],
                heldout=None,
                seed=seed,
                progress=False,
            )
            out[arm] = distill_tagger(
                teacher,
                general.student,
                tokenizer,
                items,
                transfer,
                method="tinybert",
                first_steps=first,
                **common,
            )
        elif arm == "joint":
            start = BertForTokenClassification.from_pretrained_body(
                setup["bert"].bert, num_labels=len(setup["tagset"])
            )
            out[arm] = distill_tagger(start, small, tokenizer, items, transfer, method="joint", **common)
        elif arm == "distilbert_init":
            student = BertForTokenClassification(wide)
            init_from_teacher(student.bert, teacher.bert, [0])
            out[arm] = distill_tagger(teacher, student, tokenizer, items, transfer, method="kd", **common)
        elif arm == "kd_wide":
            out[arm] = distill_tagger(teacher, wide, tokenizer, items, transfer, method="kd", **common)
        else:
            raise ValueError(f"unknown arm {arm!r}; the arms are {ARMS}")
    return out


def distilled_scores(d, teacher, setup) -> dict[str, Any]:
    """A student's result numbers: its tagging accuracy and unseen-word accuracy at the end of
    training, its agreement with ``teacher``'s tags on the test sentences and its parameters
    (``d``: a :class:`~course_lib.recipes.distill.Distilled`; ``setup``: :func:`chapter_setup`'s)."""
    sentences = [words for words, _ in setup["evals"]]
    return dict(
        accuracy=d.history.evals["accuracy"][-1],
        unseen_accuracy=d.history.evals["unseen_accuracy"][-1],
        agreement=tag_agreement(d.student, teacher, setup["tokenizer"], sentences),
        parameters=d.student.num_parameters(),
    )


def teacher_scores(setup: dict[str, Any]) -> dict[str, Any]:
    """The teacher's record, in the students' fields (it agrees with itself everywhere)."""
    h = setup["teacher_history"]
    return dict(
        accuracy=h.evals["accuracy"][-1],
        unseen_accuracy=h.evals["unseen_accuracy"][-1],
        agreement=1.0,
        parameters=setup["teacher"].num_parameters(),
    )


def run(seed: int, quick: bool = False) -> dict[str, Any]:
    s = QUICK if quick else SETTINGS
    device = get_device()
    setup = chapter_setup(s, seed, device)
    teacher, tokenizer, items, evals = setup["teacher"], setup["tokenizer"], setup["items"], setup["evals"]
    out: dict[str, Any] = {"teacher": teacher_scores(setup)}
    for arm, d in student_arms(setup, s, seed).items():
        out[arm] = distilled_scores(d, teacher if arm != "joint" else d.teacher, setup)
        if arm == "joint":
            sentences = [w for w, _ in evals]
            out[arm]["teacher_accuracy"] = tagging_accuracy(d.teacher, tokenizer, evals)["accuracy"]
            out[arm]["agreement_with_fixed_teacher"] = tag_agreement(d.student, teacher, tokenizer, sentences)
    small = student_config(teacher.config, **s["student"])
    common = dict(eval_items=evals, seed=seed, progress=False, **s["distill"])
    # a weaker teacher: the same tagger trained from random weights, then the same KD
    weak, wh = teacher_tagger(
        setup["bert"].config, tokenizer, items, evals, len(setup["tagset"]), s["tagging"], seed, device
    )
    d = distill_tagger(weak, small, tokenizer, items, setup["pool"][: s["transfer"]], method="kd", **common)
    out["weak_teacher"] = dict(
        accuracy=wh.evals["accuracy"][-1],
        unseen_accuracy=wh.evals["unseen_accuracy"][-1],
        agreement=1.0,
        parameters=weak.num_parameters(),
    )
    out["kd_weak_teacher"] = distilled_scores(d, weak, setup)
    w = s["sweep"]
    sweep: dict[str, list[float]] = {"sizes": list(w["sizes"])}
    for n in w["sizes"]:
        for method in ("teacher_labels", "kd"):
            d = distill_tagger(teacher, small, tokenizer, items, setup["pool"][:n], method=method, **common)
            sweep.setdefault(method, []).append(d.history.evals["accuracy"][-1])
            sweep.setdefault(f"{method}_unseen", []).append(d.history.evals["unseen_accuracy"][-1])
    out["transfer_sweep"] = sweep
    transfer = setup["pool"][: w["transfer"]]
    temps: dict[str, list[float]] = {"temperatures": list(w["temperatures"])}
    for T in w["temperatures"]:
        d = distill_tagger(
            teacher, small, tokenizer, items, transfer, method="kd", **{**common, "temperature": T}
        )
        temps.setdefault("accuracy", []).append(d.history.evals["accuracy"][-1])
        temps.setdefault("unseen_accuracy", []).append(d.history.evals["unseen_accuracy"][-1])
    out["temperature_sweep"] = temps
    for name, alpha in (("schedule", (0.9, 0.1)), ("constant", (0.5, 0.5))):
        d = distill_tagger(teacher, small, tokenizer, items, transfer, method="kd", alpha=alpha, **common)
        out[f"alpha_{name}"] = dict(
            accuracy=d.history.evals["accuracy"][-1], unseen_accuracy=d.history.evals["unseen_accuracy"][-1]
        )
    return out


STUDY = register_study(
    Study(
        name="07_distillation",
        description="chapter 7 over three seeds: a tagger distilled from chapter 3's BERT by scratch / "
        "teacher labels / KD / hints / TinyBERT (task, general + task) / joint / DistilBERT init, "
        "transfer-set size and temperature sweeps, the soft-weight schedule",
        settings={"full": SETTINGS, "quick": QUICK},
        run=run,
        extra_sources=(tag_agreement,),
    )
)
