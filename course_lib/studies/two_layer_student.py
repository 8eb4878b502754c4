"""Study ``07_two_layer_student``: chapter 7's FitNets and TinyBERT with a student of two layers
(issue 31), beside the same arms with study ``07_distillation``'s one-layer student.

Study ``07_distillation``'s student has one layer, so FitNets' hint and TinyBERT's layer map are
degenerate: there is no *middle* of a one-layer student to guide, and TinyBERT's map sends its
only layer to the teacher's last. This study reuses that study's set-up unchanged
(:func:`~course_lib.studies.distill.chapter_setup`: chapter 3's BERT, the teacher tagger
fine-tuned with the study's seed, the 100 tagged sentences, the test sentences and the transfer
set of 1,000 untagged sentences; :func:`~course_lib.studies.distill.student_arms` with its
distillation settings) and trains the arms ``scratch``, ``kd``, ``kd_hints`` and ``tinybert``
twice per seed, with two students of width 64 and 4 heads:

* ``*_L1``: one layer (study ``07_distillation``'s student). FitNets' hint: student layer 1 <-
  teacher layer 1; TinyBERT's uniform map: student layer 1 <- teacher layer 2.
* ``*_L2``: two layers, as many as the teacher. FitNets' default hint
  (:func:`~course_lib.recipes.distill.distill_tagger`'s ``guided_layer``/``hint_layer``: the middle
  layer, rounded up) is student layer 1 <- teacher layer 1, so the hint stage trains the
  embeddings and the first layer only, and the second layer is left to ``kd``; TinyBERT's uniform
  map (:func:`~course_lib.objectives.distillation.uniform_layer_map`) is 1 -> 1, 2 -> 2, plus the
  embeddings (0 -> 0).

Both students of a seed share the teacher, the data and the seed, so the comparison of one and
two layers is paired. Metrics (:func:`~course_lib.studies.distill.distilled_scores`): tagging
accuracy, accuracy on words absent from the tagged sentences, agreement with the teacher's tags,
parameters; ``teacher`` holds the teacher's. The ``*_L1`` arms repeat ``07_distillation``'s
arms of the same names with the same settings. No wall-clock times are stored.
"""

from __future__ import annotations

from typing import Any

from ..analysis.distill import tag_agreement
from ..device import get_device
from . import Study, register_study
from . import distill as _distill
from .distill import QUICK as DISTILL_QUICK
from .distill import SETTINGS as DISTILL
from .distill import chapter_setup, distilled_scores, student_arms, teacher_scores

ARMS = ("scratch", "kd", "kd_hints", "tinybert")
_SHARED = ("size", "documents", "tokenizer", "pretrain", "tagging", "distill", "first_steps", "transfer")

SETTINGS: dict[str, Any] = dict(
    {k: DISTILL[k] for k in _SHARED},
    students={"L1": DISTILL["student"], "L2": dict(DISTILL["student"], layers=2)},
    arms=ARMS,
)
QUICK: dict[str, Any] = dict(
    {k: DISTILL_QUICK[k] for k in _SHARED},
    students={"L1": DISTILL_QUICK["student"], "L2": dict(DISTILL_QUICK["student"], layers=2)},
    arms=ARMS,
)


def run(seed: int, quick: bool = False) -> dict[str, Any]:
    s = QUICK if quick else SETTINGS
    setup = chapter_setup(s, seed, get_device())
    teacher = setup["teacher"]
    out: dict[str, Any] = {"teacher": teacher_scores(setup)}
    for name, student in s["students"].items():
        for arm, d in student_arms(setup, {**s, "student": student}, seed, arms=s["arms"]).items():
            out[f"{arm}_{name}"] = distilled_scores(d, teacher, setup)
    return out


STUDY = register_study(
    Study(
        name="07_two_layer_student",
        description="chapter 7's scratch / KD / FitNets hints / TinyBERT with a two-layer student "
        "(non-degenerate hint and layer map) beside the one-layer student, same teacher and seeds",
        settings={"full": SETTINGS, "quick": QUICK},
        run=run,
        extra_sources=(
            chapter_setup,
            _distill.chapter3_bert,
            _distill.teacher_tagger,
            student_arms,
            distilled_scores,
            teacher_scores,
            tag_agreement,
        ),
    )
)
