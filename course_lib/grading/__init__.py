r"""Graded exercises: one solution notebook per chapter, a released student copy, and a grader.

Three commands::

    course release --all                        # solutions/NN_topic.ipynb -> exercises/NN_topic.ipynb
    pytest --nbval-lax exercises/NN_topic.ipynb # a student's self-check (visible checks only)
    course grade SUB.ipynb ... --out DIR [--assignment NN_topic] [--jobs N] [--timeout SECONDS]

The format
==========

``solutions/NN_topic.ipynb`` is the single source. It is an ordinary notebook (nbformat 4.5,
so every cell has an ``id``) whose first code cell is the set-up cell
(:func:`course_lib.tools.notebooks.setup_cell_source`), with this notebook metadata::

    "course": {
      "assignment": "NN_topic",              # must equal the file name
      "title": "Chapter N: ...",
      "forbid": ["torch.nn.functional.scaled_dot_product_attention"],  # optional
      "check_timeout": 10,                   # optional: seconds per check (default 10)
      "tolerance": {"rtol": 1e-5, "atol": 1e-5}  # optional defaults for comparisons
    }

A cell's role is its **tag** (one per cell); its settings are in the cell metadata under
``course``:

``exercise`` (markdown)
    Starts an exercise: the instructions. Metadata ``{"id": "causal-mask", "title": "The
    causal mask", "points": 2}``. Every cell up to the next ``exercise`` cell belongs to it.
``answer`` (code)
    The reference answer. It defines one or more public top-level **functions**: those
    names are what the checks call and what the student must write. Private helpers
    (``_name``) are allowed; public classes are not (checks exchange tensors, numbers,
    strings, lists, tuples and dicts with the student's code, not objects). The cell id is
    the key by which the grader finds the student's version, so keep it stable. ``course
    release`` turns the cell into a stub (imports, then each public function's signature
    and docstring with ``raise NotImplementedError``); metadata ``{"stub": "..."}`` gives
    the released code explicitly instead. Answers may not import ``course_lib``.
``check`` (code)
    A visible check: students see it and run it in their notebook. Metadata ``{"id":
    "causal-mask-small", "points": 1}``, optionally ``"rtol"``, ``"atol"``, ``"timeout"``
    (seconds), ``"compare": false`` and ``"dtype": "exact"`` (tensors must have the
    reference's dtype, not only its kind: for checks whose instructions name the dtype).
``hidden-check`` (code)
    Like ``check``, but removed from the students' copy.
``preamble`` (code)
    Imports and helpers the answers and checks rely on (e.g. ``import torch``). It is
    released, runs in the student's sandbox before their answers and in the grader before
    each check. It may not import ``course_lib``.
``solution-only`` (any)
    Removed from the students' copy (instructor notes, solution demos).

Untagged cells (explanations, demos) are released unchanged, without outputs, and never
run by the grader. The points of an exercise must equal the sum of its checks' points.

How a check is graded
---------------------

The grader takes **only the answer cells** out of a submission (by cell id, or by the
``course.answer`` marker the release adds to each answer cell's metadata) and runs them,
after the preamble, in a sandboxed process. Then, for each check cell *of the solution
notebook*, in the grader's own process:

* the check's code runs in a fresh namespace holding the preamble's names; the functions
  of the check's exercise are bound to proxies of the student's functions, the functions
  of the other exercises to the reference answers;
* every call of a proxy sends its arguments to the sandbox as data, receives the
  student's return value as data, calls the reference answer on the same arguments, and
  compares the two (tensors: same shape and kind of dtype, values within ``rtol``/
  ``atol``; exceptions: the student must raise the reference's exception type). A
  difference fails the check with a message that shows no expected values for hidden
  checks. With ``"compare": false`` only the check's own asserts decide;
* the check's asserts then run on the student's values, in the grader;
* the check passes when its code finishes. Global RNGs (torch, random, numpy) are seeded
  per check from the solution file, the submitted answer code and the check id: hidden
  checks that draw inputs with ``torch.randn``/``torch.randint`` get fresh inputs for
  every submission, and the same ones when it is graded again.
* a visible check's points count only when its exercise's functions also gave the
  reference's results on inputs drawn for the submission (a call in a hidden check whose
  inputs change with the seed, or such a hidden check passed): a lookup table of the
  visible checks' published inputs earns nothing. Each exercise therefore needs a hidden
  check that draws its inputs from the global RNGs. What the student's code prints during
  hidden checks is not shown (it could show their fixed inputs);
* a check's own code and the reference answers may add at most ``check_memory_mb`` (512)
  to the checker's memory while they work on the student's values.

Arguments the student's function changes in place come back with its result and are
changed the same way in the check's objects. Tensors cross with their ``requires_grad``
flag (floating point only; never their graph): an argument that requires grad reaches the
student's function as a leaf that requires grad, and a check can assert that a result does
not (``not out.requires_grad``: the answer detached it). A visible check gives the same verdict in
the student's notebook: ``course release`` runs it against the reference answers, packs
the reference's result for each call into the released cell, and
:class:`~course_lib.grading.checks.visible_check` compares each call at home as the
grader does (see :mod:`.expected`); a visible check with ``compare`` must therefore be
deterministic (random inputs from a ``torch.Generator`` with a fixed seed). A check may
be worth 0 points (a visible check for learning, its points on a hidden mirror).

A check therefore needs no expected values: write it as a normal test of the function's
behaviour on several inputs (sizes, masks, padding, error cases), with asserts that make
sense in the student's notebook too. Each check runs on its own: define its inputs inside
it (``course release`` reports any name a check uses but does not define). Students see
the message of a failed assert (``assert cond, "message"``) of hidden checks too, but not
the code: write messages that explain the requirement, not the expected values.

How to write an exercise (the short guide)
------------------------------------------

1. Add a markdown cell with the instructions; tag it ``exercise``; metadata
   ``"course": {"id": ..., "title": ..., "points": N}``.
2. Add a code cell with your answer, tagged ``answer``: a function with a docstring (the
   docstring is released; the body is not).
3. Add visible checks (tag ``check``) that a student can learn from, and hidden checks
   (tag ``hidden-check``) on fresh random inputs and edge cases; give each an id and
   points adding up to N. To test that a call raises, use
   :func:`course_lib.grading.checks.raises`.
4. Run the notebook (``pytest --nbval-lax solutions/NN_topic.ipynb``), then ``course
   release NN_topic``: it validates the format and writes ``exercises/NN_topic.ipynb``.
5. ``course grade solutions/NN_topic.ipynb exercises/NN_topic.ipynb --out /tmp/g`` must
   give full marks and zero.

``course release`` fails with a message naming the cell for: a missing or malformed id,
title or points; duplicate exercise, check or cell ids; an answer or check outside an
exercise; an exercise without answer or without checks; points that do not add up; an
answer without a public function, or with a public class; a check that calls none of
its exercise's functions or uses undefined names; ``course_lib`` imported by an answer,
a preamble or a check (checks may import ``course_lib.grading``); a tag that looks like
a misspelt role.

The modules: :mod:`.format` (reading and validating), :mod:`.release`, :mod:`.grade`
(the ``course grade`` batch), :mod:`.checker` (runs the checks) and :mod:`.student_calls` (a
student's function in a check), :mod:`.sandbox` (the worker pool), :mod:`.sandbox_setup` (its
mode and bubblewrap command), :mod:`.sandbox_worker` (the student's process) and
:mod:`.sandbox_hardening` (the limits it sets on itself), :mod:`.wire` and ``response.schema.json``
(what crosses back), :mod:`.compare`, :mod:`.report`, :mod:`.checks` (helpers for check
cells). The threat model is in ``book/appendix_grading.md``.
"""

from .format import Assignment, FormatError, load_assignment
from .grade import GradeError, grade_files

__all__ = ["Assignment", "FormatError", "GradeError", "grade_files", "load_assignment"]
