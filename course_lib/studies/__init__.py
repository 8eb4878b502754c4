"""Studies: experiments repeated over several seeds, run once by a command, loaded by chapters.

A chapter trains one seed of each experiment live, which is enough to *show* it. To know
whether an effect is real, the same experiment has to be repeated with other seeds and the
spread compared with the effect; some arms (a second pretraining objective, a baseline
model) are also too slow to train inside a chapter's three-minute budget. A *study* does
that work outside the chapter:

* a study is registered here with its settings and a function ``run(seed, quick)`` that
  returns ``{arm: {metric: number, ...}, ...}`` (plus, optionally, small lists of texts);
* ``course study run NAME`` runs every seed and writes ``course_lib/studies/results/NAME.json``
  (after each seed, so a killed run keeps the seeds it finished); the file ships with the
  package, so a chapter opened on Colab finds it too;
* a chapter calls :func:`load_study`, which refuses a result file written by different
  settings or different study code (the file records a hash of both), so a chapter never
  shows numbers of an experiment that no longer exists;
* :meth:`StudyResults.table` prints every seed, the mean and the range; the chapter's
  claims about a study say "in every seed" or compare an effect with the spread.

The results file is the output of a run, like a chapter's stored outputs: re-run the study
after changing it (the test suite fails on a stale file, and runs every study in a quick
mode to show it still works).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import platform
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ..files import atomic_write_text
from ..hashing import code_hash

__all__ = [
    "Study",
    "StudyResults",
    "register_study",
    "get_study",
    "study_names",
    "spec_hash",
    "golden_path",
    "golden_run",
    "one_thread",
    "write_golden",
    "check_golden",
    "restamp",
    "run_study",
    "load_study",
    "results_path",
    "pretrain_arms",
    "text_and_tokenizer",
    "finetune_each",
    "register",
]

_STUDIES: dict[str, Study] = {}
_MODULES = (
    "course_lib.studies.bert",
    "course_lib.studies.roberta_batch",
    "course_lib.studies.feature_based",
    "course_lib.studies.elmo",
    "course_lib.studies.albert",
    "course_lib.studies.albert_shapes",
    "course_lib.studies.ar_ae",
    "course_lib.studies.generation",
    "course_lib.studies.xlnet",
    "course_lib.studies.xlnet_tagging",
    "course_lib.studies.transfo_xl",
    "course_lib.studies.distill",
    "course_lib.studies.two_layer_student",
)


@dataclass(frozen=True)
class Study:
    """One experiment over several seeds.

    ``run(seed, quick)`` returns ``{arm: {metric: value}}``; values are numbers, or lists of
    numbers/strings (e.g. generated texts). ``quick=True`` runs a tiny version for tests.
    """

    name: str  # the result file's name, by convention the chapter's ("03_bert")
    description: str
    settings: Mapping[str, Any]
    run: Callable[[int, bool], dict[str, dict[str, Any]]]
    seeds: tuple[int, ...] = (0, 1, 2)
    extra_sources: tuple[Callable[..., Any], ...] = field(default=())


def register_study(study: Study) -> Study:
    if study.name in _STUDIES and _STUDIES[study.name].run is not study.run:
        raise ValueError(f"a study named {study.name!r} is already registered")
    _STUDIES[study.name] = study
    return study


def _load_modules() -> None:
    import importlib

    for m in _MODULES:
        importlib.import_module(m)


def study_names() -> list[str]:
    _load_modules()
    return sorted(_STUDIES)


def get_study(name: str) -> Study:
    _load_modules()
    if name not in _STUDIES:
        raise KeyError(f"no study named {name!r}; the studies are: {', '.join(sorted(_STUDIES)) or 'none'}")
    return _STUDIES[name]


def spec_hash(study: Study) -> str:
    """A hash of the study's settings and of the code of the module that defines it (and of
    ``extra_sources``), read from the syntax tree (:func:`course_lib.hashing.code_hash`):
    changing a setting or a computation makes the stored results stale; a comment, a
    docstring, an import or a moved function does not. The library code the study calls is
    covered by its golden run instead (:func:`check_golden`)."""
    module = sys.modules[study.run.__module__]
    parts = [json.dumps(study.settings, sort_keys=True, default=str), code_hash(module, *study.extra_sources)]
    return hashlib.sha256("\x00".join(parts).encode()).hexdigest()[:16]


def pretrain_arms(
    pretrain: Callable[..., Any],
    documents: Sequence[Any],
    arms: Mapping[str, Mapping[str, Any]],
    common: Mapping[str, Any],
    *,
    config_of: Callable[[Mapping[str, Any]], Any],
    curves_of: Callable[[Mapping[str, Any]], Mapping[str, str]],
    curve_points: int,
    **kwargs: Any,
) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """One model per arm of a study: ``pretrain(config_of(arm), documents, **kwargs, **common,
    **arm)``, evaluated ``curve_points`` times along the way. Returns ``(models, records)``,
    a record holding the parameters, the steps, the evaluation steps and each learning curve
    ``curves_of(arm)`` names (record key -> the evaluation's name in the history)."""
    models: dict[str, Any] = {}
    out: dict[str, dict[str, Any]] = {}
    for name, arm in arms.items():
        settings = {**common, **arm}
        model, _, history = pretrain(
            config_of(arm),
            documents,
            progress=False,
            eval_every=max(1, settings["steps"] // curve_points),
            **kwargs,
            **settings,
        )
        models[name] = model
        out[name] = {
            "parameters": model.num_parameters(),
            "steps": settings["steps"],
            "curve_steps": list(history.eval_steps),
        }
        for key, metric in curves_of(arm).items():
            out[name][key] = list(history.evals[metric])
    return models, out


def text_and_tokenizer(settings: Mapping[str, Any]) -> tuple[list, list, Any]:
    """``(training documents, held-out documents, tokenizer)``: the generated corpus split by
    ``settings["documents"]`` (:func:`~course_lib.data.documents.split_corpus`) and a tokenizer
    trained on the training documents with ``settings["tokenizer"]``."""
    from ..data.documents import split_corpus, train_tokenizer

    train_docs, held_docs = split_corpus(**settings["documents"])
    return train_docs, held_docs, train_tokenizer(train_docs, **settings["tokenizer"])


def finetune_each(
    finetune: Callable[..., Any],
    starts: Mapping[str, tuple[Any, bool, float]],
    items: Sequence[Any],
    settings: Mapping[str, Any],
    *,
    tokenizer: Any,
    seed: int,
    device: Any,
    **kwargs: Any,
) -> dict[str, Any]:
    """Fine-tune from each start (name -> ``(model or config, freeze the body, learning rate)``)
    with ``finetune`` (:func:`~course_lib.recipes.finetune.finetune_tagger` or
    ``finetune_classifier``) on ``items`` (read with ``tokenizer``) for ``settings["steps"]``
    steps of ``settings["batch_size"]``; returns each run's history. A study that fine-tunes
    several times binds its ``tokenizer``, ``seed`` and ``device`` once (``functools.partial``)."""
    histories = {}
    for name, (begin, frozen, lr) in starts.items():
        _, histories[name] = finetune(
            begin,
            tokenizer,
            items,
            steps=settings["steps"],
            batch_size=settings["batch_size"],
            lr=lr,
            seed=seed,
            device=device,
            freeze_body=frozen,
            progress=False,
            **kwargs,
        )
    return histories


RESULTS = Path(__file__).resolve().parent / "results"
GOLDEN = Path(__file__).resolve().parent / "golden"
# A golden run is the study's quick run, seed 0, on one thread. Different CPU kernels and
# thread counts change a trained number's last digits; a change to what the library computes
# moves it by far more. The tolerance sits between the two (relative, per number).
# Measured between AVX2 and portable kernels on the seven studies: at most 4e-6 relative, or
# 4e-6 absolute on numbers that are differences of nearly equal terms. Wall-clock timings
# ("seconds") are not compared.
GOLDEN_RTOL = 1e-3
GOLDEN_ATOL = 1e-5


def results_path(name: str, root: Path | str | None = None) -> Path:
    """Where study ``name``'s results are stored (``root``: another results folder)."""
    return Path(RESULTS if root is None else root) / f"{name}.json"


def _check_json(value: Any, where: str) -> None:
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return
    if isinstance(value, (int, float)):
        if not math.isfinite(value):
            raise ValueError(f"{where}: {value} is not a finite number")
        return
    if isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            _check_json(v, f"{where}[{i}]")
        return
    raise TypeError(
        f"{where}: a study result must hold numbers, strings or lists, got {type(value).__name__}"
    )


def _write_atomic(path: Path, data: Mapping[str, Any]) -> None:
    """A results or golden file: sorted JSON, written with the one atomic writer."""
    atomic_write_text(path, json.dumps(data, indent=1, sort_keys=True) + "\n")


def golden_path(name: str, root: Path | str | None = None) -> Path:
    return Path(root if root is not None else GOLDEN) / f"{name}.json"


@contextlib.contextmanager
def one_thread():
    """Run the block with torch on one thread (the golden runs' setting), then restore."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def golden_run(name: str) -> dict[str, dict[str, Any]]:
    """Study ``name``'s quick run with seed 0 on one thread: every library function the study
    calls, at a tiny size, for a few steps."""
    study = get_study(name)
    with one_thread():
        return study.run(0, True)


def write_golden(
    name: str, *, root: Path | str | None = None, results: Mapping[str, Any] | None = None
) -> Path:
    """Store the golden run of ``name`` (run it unless ``results`` are given)."""
    results = golden_run(name) if results is None else results
    path = golden_path(name, root)
    path.parent.mkdir(parents=True, exist_ok=True)
    _write_atomic(path, {"study": name, "spec_hash": spec_hash(get_study(name)), "results": results})
    return path


def _differences(stored: Any, new: Any, where: str, out: list[str]) -> None:
    if isinstance(stored, Mapping) and isinstance(new, Mapping):
        for key in sorted(set(stored) | set(new)):
            if key == "seconds" or str(key).endswith("_seconds"):
                continue  # a timing, not a result
            if key not in stored or key not in new:
                out.append(f"{where}.{key}: {'missing now' if key not in new else 'new'}")
            else:
                _differences(stored[key], new[key], f"{where}.{key}", out)
    elif isinstance(stored, list) and isinstance(new, list):
        if len(stored) != len(new):
            out.append(f"{where}: {len(stored)} values stored, {len(new)} now")
        for i, (a, b) in enumerate(zip(stored, new)):
            _differences(a, b, f"{where}[{i}]", out)
    elif isinstance(stored, (int, float)) and isinstance(new, (int, float)) and not isinstance(stored, bool):
        if not math.isclose(stored, new, rel_tol=GOLDEN_RTOL, abs_tol=GOLDEN_ATOL):
            out.append(f"{where}: {stored!r} stored, {new!r} now")
    elif stored != new:
        out.append(f"{where}: {stored!r} stored, {new!r} now")


def check_golden(
    name: str, *, root: Path | str | None = None, results: Mapping[str, Any] | None = None
) -> list[str]:
    """Compare a fresh golden run of ``name`` (or ``results``) with the stored one.

    Returns the differences, one line each (empty: the library computes what it computed when
    the study's results were made, so they stay valid). Raises if no golden run is stored.
    """
    path = golden_path(name, root)
    if not path.exists():
        raise FileNotFoundError(
            f"no golden run for study {name!r} at {path}: run `course study golden {name}`"
        )
    stored = json.loads(path.read_text())["results"]
    out: list[str] = []
    _differences(stored, golden_run(name) if results is None else results, name, out)
    return out


def restamp(name: str, *, root: Path | str | None = None, golden_root: Path | str | None = None) -> Path:
    """Mark study ``name``'s stored results as current without re-running them, after checking
    that the library still computes what it did (its golden run reproduces). Use it after a
    change that :func:`spec_hash` sees but that changes no number (a refactoring)."""
    study = get_study(name)
    diffs = check_golden(name, root=golden_root)
    if diffs:
        shown = "; ".join(diffs[:5]) + (f"; and {len(diffs) - 5} more" if len(diffs) > 5 else "")
        raise ValueError(
            f"study {name!r}: the golden run changed ({shown}), so its stored results may be stale: "
            f"re-run it with `course study run {name}`"
        )
    path = results_path(name, root)
    data = json.loads(path.read_text())
    if data.get("quick"):
        raise ValueError(f"{path} holds a quick test run: run `course study run {name}`")
    data["spec_hash"] = spec_hash(study)
    _write_atomic(path, data)
    golden = json.loads(golden_path(name, golden_root).read_text())
    golden["spec_hash"] = data["spec_hash"]
    _write_atomic(golden_path(name, golden_root), golden)
    return path


def _check_target(path: Path, name: str, quick: bool) -> None:
    """``ValueError`` before any seed runs when writing ``path`` would destroy something: a
    file that is not results of study ``name``, or its full results under a ``quick`` test run
    (the default path is the stored results every chapter loads)."""
    from ..files import check_output_path

    if not str(path).strip():
        raise ValueError("--out is empty; give a results file")
    check_output_path(path, "--out", folder=False)
    if not path.exists():
        return
    try:
        old = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError):
        old = None
    if not isinstance(old, dict) or old.get("study") != name:
        held = (
            f"the results of study {old['study']}"
            if isinstance(old, dict) and "study" in old
            else "another file"
        )
        raise ValueError(f"--out {path} holds {held}, not {name}'s results: give a new path")
    if quick and not old.get("quick", False):
        raise ValueError(
            f"--out {path} holds {name}'s full results; a --quick test run would replace them: "
            "give --out a new path"
        )


def run_study(
    name: str,
    *,
    seeds: Sequence[int] | None = None,
    quick: bool = False,
    out: Path | str | None = None,
    log: Callable[[str], None] = print,
) -> Path:
    """Run study ``name`` for each seed and write its results file (after every seed)."""
    study = get_study(name)
    if os.environ.get("COURSE_SEED_OFFSET", "0").strip() not in ("", "0"):
        raise ValueError(
            "COURSE_SEED_OFFSET is set: it would shift the seeds inside the study without the results "
            "file knowing; a study chooses its own seeds (--seeds), so unset it"
        )
    seeds = tuple(study.seeds if seeds is None else seeds)
    bad = [s for s in seeds if not 0 <= s < 2**63]
    if bad:
        raise ValueError(f"--seeds: {bad[0]} is not a seed (0 to 2**63 - 1)")
    path = Path(out) if out is not None else results_path(name)
    _check_target(path, name, quick)
    data: dict[str, Any] = {
        "study": name,
        "description": study.description,
        "spec_hash": spec_hash(study),
        "quick": quick,
        "settings": dict(study.settings),
        "seeds": {},
        "environment": {
            "torch": torch.__version__,
            "python": platform.python_version(),
            "machine": platform.machine(),
            "threads": torch.get_num_threads(),
        },
    }
    for seed in seeds:
        t0 = time.perf_counter()
        result = study.run(seed, quick)
        for arm, metrics in result.items():
            for metric, value in metrics.items():
                _check_json(value, f"{name} seed {seed} {arm}.{metric}")
        data["seeds"][str(seed)] = {"results": result, "seconds": round(time.perf_counter() - t0, 1)}
        # keep the other seeds of a file written by the same study (runs of single seeds in parallel)
        try:
            old = json.loads(path.read_text()) if path.exists() else {}
        except json.JSONDecodeError:
            old = {}
        if old.get("spec_hash") == data["spec_hash"] and old.get("quick") == quick:
            data["seeds"] = {**old.get("seeds", {}), **data["seeds"]}
        _write_atomic(path, data)
        log(f"{name}: seed {seed} done in {time.perf_counter() - t0:.0f} s -> {path}")
    if not quick and out is None:
        # the library as it was when these results were made, for later checks (restamp)
        log(f"{name}: golden run -> {write_golden(name)}")
    return path


class StudyResults:
    """A loaded results file: ``values(arm, metric)`` lists one value per seed."""

    def __init__(self, data: Mapping[str, Any]):
        self.data = data
        self.name: str = data["study"]
        self.seeds: list[int] = sorted(int(s) for s in data["seeds"])
        self.results: dict[int, dict[str, dict[str, Any]]] = {
            int(s): v["results"] for s, v in data["seeds"].items()
        }

    @property
    def settings(self) -> Mapping[str, Any]:
        return self.data["settings"]

    def arms(self) -> list[str]:
        return list(self.results[self.seeds[0]])

    def values(self, arm: str, metric: str) -> list[Any]:
        out = []
        for s in self.seeds:
            if arm not in self.results[s] or metric not in self.results[s][arm]:
                raise KeyError(f"study {self.name!r}, seed {s}: no {arm!r}.{metric!r}")
            out.append(self.results[s][arm][metric])
        return out

    def differences(self, arm_a: str, arm_b: str, metric: str) -> list[float]:
        """Per seed, ``a - b`` (the arms of one seed share data, masks and initial weights)."""
        return [a - b for a, b in zip(self.values(arm_a, metric), self.values(arm_b, metric))]

    def table(
        self,
        rows: Sequence[tuple[str, str]] | None = None,
        *,
        digits: int = 3,
        labels: Mapping[str, str] | None = None,
    ) -> str:
        """Every seed, the mean and the range, one row per ``(arm, metric)``."""
        if rows is None:
            rows = [
                (a, m)
                for a in self.arms()
                for m, v in self.results[self.seeds[0]][a].items()
                if isinstance(v, (int, float))
            ]
        labels = dict(labels or {})
        names = [labels.get(f"{a}.{m}", labels.get(a, a) + " " + m) for a, m in rows]
        w = max(len(n) for n in names)
        head = (
            f"{'':<{w}} "
            + " ".join(f"{'seed ' + str(s):>9}" for s in self.seeds)
            + f" {'mean':>9} {'range':>9}"
        )
        lines = [head]
        for name, (a, m) in zip(names, rows):
            v = [float(x) for x in self.values(a, m)]
            cells = " ".join(f"{x:>9.{digits}f}" for x in v)
            lines.append(f"{name:<{w}} {cells} {sum(v) / len(v):>9.{digits}f} {max(v) - min(v):>9.{digits}f}")
        return "\n".join(lines)


def load_study(name: str, *, root: Path | str | None = None, allow_quick: bool = False) -> StudyResults:
    """The stored results of study ``name``; an error if they are missing, stale or from a
    quick run (which only tests that the study works)."""
    path = results_path(name, root)
    rerun = f"run `course study run {name}` (or `python -m course_lib.studies run {name}`)"
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist: {rerun}")
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"{path} is not valid JSON ({e}): {rerun}") from None
    study = get_study(name)
    if data.get("spec_hash") != spec_hash(study):
        raise ValueError(
            f"{path} was written by other settings or other code of study {name!r} "
            f"(hash {data.get('spec_hash')}, the study's is now {spec_hash(study)}): {rerun}; if the "
            f"change cannot change a number, `course study restamp {name}` checks that with the golden "
            "run and keeps them"
        )
    if data.get("quick") and not allow_quick:
        raise ValueError(f"{path} holds a quick test run, not the study's results: {rerun}")
    if not data.get("seeds"):
        raise ValueError(f"{path} holds no finished seed: {rerun}")
    return StudyResults(data)


def _cmd(args) -> int:
    if args.action == "list":
        for n in study_names():
            print(f"{n}: {get_study(n).description}")
        return 0
    if args.action in ("run", "golden", "restamp") and not args.name:
        print(f"course study {args.action}: name a study (`course study list`)", file=sys.stderr)
        return 2
    if args.name and args.name not in study_names():
        print(
            f"course study {args.action}: no study named {args.name!r}; "
            f"the studies are: {', '.join(study_names())}",
            file=sys.stderr,
        )
        return 2
    if args.action == "run":
        try:
            run_study(args.name, seeds=args.seeds, quick=args.quick, out=args.out)
        except ValueError as e:
            print(f"course study run: {e}", file=sys.stderr)
            return 2
        return 0
    if args.action == "golden":
        print(write_golden(args.name))
        return 0
    names = [args.name] if args.name else study_names()
    failed = 0
    for n in names:
        try:
            if args.action == "restamp":
                print(f"{n}: golden run reproduces; results re-stamped ({restamp(n)})")
                continue
            diffs = check_golden(n)
        except (ValueError, FileNotFoundError) as e:
            print(f"{n}: {e}")
            failed += 1
            continue
        stored = _stored_status(n)
        if diffs:
            failed += 1
            print(f"{n}: golden run CHANGED ({len(diffs)} numbers): re-run the study; first: {diffs[0]}")
        else:
            print(f"{n}: golden run reproduces; stored results {stored}")
            failed += stored.startswith("STALE")
    return 1 if failed else 0


def _stored_status(name: str) -> str:
    """``current``, ``STALE ...`` or ``not run yet ...`` (a registered study whose results file
    does not exist yet: nothing stale to report, and no chapter can load it)."""
    if not results_path(name).exists():
        return f"not run yet (course study run {name})"
    return "current" if _is_current(name) else "STALE (settings or study code changed)"


def _is_current(name: str) -> bool:
    try:
        load_study(name)
    except ValueError:
        return False
    return True


def _add_arguments(p) -> None:
    p.add_argument(
        "action",
        choices=["run", "list", "check", "restamp", "golden"],
        help="run a study; list them; check that the library still reproduces each study's golden run; "
        "restamp a study's results after a change that keeps its golden run; golden: store the golden run",
    )
    p.add_argument("name", nargs="?", help="the study (see `list`; check: default every study)")
    p.add_argument("--seeds", type=int, nargs="+", help="seeds to run (default: the study's)")
    p.add_argument("--quick", action="store_true", help="a tiny run that only tests the study works")
    p.add_argument("--out", help="results file (default course_lib/studies/results/NAME.json)")


def register(sub) -> None:
    p = sub.add_parser("study", help="run an experiment over several seeds; chapters load its results")
    _add_arguments(p)

    def cmd(args) -> int:
        if args.action in ("run", "restamp", "golden") and not args.name:
            p.error(f"`{args.action}` needs the study's name")
        return _cmd(args)

    p.set_defaults(func=cmd)
