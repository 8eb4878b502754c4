"""``course train OBJECTIVE``: one command that pretrains any of the course's objectives.

Each objective is a recipe (one per model family) with the objective's settings preset
(``course train albert`` = the BERT recipe with ``--pair-task sop --architecture
AlbertForPreTraining``); this module names them and adds the options every objective shares.
It is the only training command: the recipes add their options to it, not commands of their own.

=================  ==============================================  ==============================
objective          what is trained                                 recipe
=================  ==============================================  ==============================
``elmo``           ELMo's biLM (forward + backward LSTM LMs)       :mod:`course_lib.recipes.elmo`
``bert``           BERT: masked LM + next-sentence prediction      :mod:`course_lib.recipes.bert`
``roberta``        RoBERTa: dynamic masked LM on full-sentence     :mod:`course_lib.recipes.bert`
                   blocks, byte-level BPE, no pair task
``albert``         ALBERT: masked LM + sentence-order prediction   :mod:`course_lib.recipes.bert`
``causal``         a left-to-right LM (BertLMHeadModel)            :mod:`course_lib.recipes.bert`
``xlnet``          XLNet: permutation LM, two-stream attention     :mod:`course_lib.recipes.xlnet`
``transfo-xl``     Transformer-XL: segment LM with memory          :mod:`~course_lib.recipes.transfo_xl`
``distill``        a student distilled from a saved course BERT    :mod:`course_lib.recipes.distill`
=================  ==============================================  ==============================

Every objective takes ``--data PATH_OR_GLOB`` (or ``generated``, the course's corpus), the
training-loop options (``--accumulate``, ``--precision``, ``--schedule``,
``--checkpoint-every``, ``--resume``, ``--log-dir``...) and ``--config FILE``: a JSON or TOML
file of option values (names as on the command line, ``-`` or ``_``); options given on the
command line win over the file. Under ``torchrun --nproc_per_node N`` the same command trains
on N processes (see :mod:`course_lib.train`).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..objectives.masking import MLM_PROBABILITY

__all__ = [
    "OBJECTIVES",
    "register",
    "main",
    "read_config",
    "fraction",
    "check_arguments",
    "check_run_arguments",
]

# objective -> (module whose register() adds the recipe command, the command's name, presets, help)
OBJECTIVES: dict[str, tuple[str, str, dict[str, Any], str]] = {
    "elmo": (
        "course_lib.recipes.elmo",
        "train-elmo",
        {},
        "ELMo's biLM: forward and backward LSTM language models",
    ),
    "bert": (
        "course_lib.recipes.bert_command",
        "pretrain-bert",
        {"pair_task": "nsp"},
        "BERT: masked LM + next-sentence prediction",
    ),
    "roberta": (
        "course_lib.recipes.bert_command",
        "pretrain-bert",
        {"pair_task": "none", "tokenizer": "byte-bpe", "masking": "dynamic"},
        "RoBERTa: dynamic masked LM on full-sentence blocks, byte-level BPE, no pair task",
    ),
    "albert": (
        "course_lib.recipes.bert_command",
        "pretrain-bert",
        {"pair_task": "sop", "architecture": "AlbertForPreTraining"},
        "ALBERT: masked LM + sentence-order prediction (factorised embeddings, shared layers)",
    ),
    "causal": (
        "course_lib.recipes.bert_command",
        "pretrain-bert",
        {"causal": "left-to-right"},
        "a left-to-right (autoregressive) language model",
    ),
    "xlnet": ("course_lib.recipes.xlnet", "pretrain-xlnet", {}, "XLNet: permutation language modelling"),
    "transfo-xl": (
        "course_lib.recipes.transfo_xl",
        "pretrain-transfo-xl",
        {},
        "Transformer-XL: segment-level recurrence with relative positions",
    ),
    "distill": (
        "course_lib.recipes.distill",
        "distill",
        {},
        "distil a saved course BERT into a smaller student",
    ),
}


class _Renamed:
    """The subparsers a recipe's ``register`` adds its parser to: it is added under the
    objective's name (the recipe's own command name is only its name in messages)."""

    def __init__(self, sub: Any, name: str, help: str, presets: dict[str, Any]) -> None:
        self.sub, self.name, self.help, self.presets = sub, name, help, presets
        self.parser: argparse.ArgumentParser | None = None

    def add_parser(self, command: str, **kwargs: Any) -> argparse.ArgumentParser:
        kwargs["help"] = self.help
        preset = ", ".join(f"--{k.replace('_', '-')} {v}" for k, v in self.presets.items())
        kwargs["description"] = (
            f"{self.help}." + (f" Presets: {preset}." if preset else "") + " " + kwargs.get("description", "")
        )
        self.parser = self.sub.add_parser(self.name, **kwargs)
        return self.parser


def _parse_file(path: Path, text: str) -> Any:
    """TOML or JSON: by the suffix (``.toml``, ``.json``), else by the content (JSON first)."""
    try:
        import tomllib
    except ImportError:  # Python 3.10
        tomllib = None  # type: ignore[assignment]
    suffix = path.suffix.lower()
    kinds = ["toml"] if suffix == ".toml" else ["json"] if suffix == ".json" else ["json", "toml"]
    errors = []
    for kind in kinds:
        try:
            if kind == "json":
                return json.loads(text)
            if tomllib is None:
                raise ValueError("TOML needs Python 3.11 or later; use JSON")
            return tomllib.loads(text)
        except Exception as e:
            errors.append(f"{kind.upper()}: {str(e).splitlines()[0] if str(e) else type(e).__name__}")
    what = "valid " + kinds[0].upper() if len(kinds) == 1 else "JSON or TOML"
    raise ValueError(f"{path}: not {what} ({'; '.join(errors)})")


def _convert(path: Path, key: str, action: argparse.Action, value: Any) -> Any:
    """``value`` checked and converted exactly as the command line would (the option's
    ``type`` and ``choices``; a flag takes true or false)."""
    flag = "--" + key.lstrip("-").replace("_", "-")
    if action.nargs == 0:  # a flag: store_true / store_false
        if not isinstance(value, bool):
            raise ValueError(f"{path}: {key} must be true or false, got {value!r}")
        return action.const if value else action.default
    if value is None:
        return None
    if isinstance(value, (dict, list)) or (isinstance(value, bool) and action.type is not None):
        raise ValueError(f"{path}: {key} must be a single value (as {flag} takes), got {value!r}")
    if action.type is not None:
        text = repr(value) if isinstance(value, float) else str(value)
        try:
            value = action.type(text)
        except (argparse.ArgumentTypeError, TypeError, ValueError) as e:
            detail = str(e).splitlines()[0] if str(e) else "not a valid value"
            raise ValueError(f"{path}: {key} = {value!r}: {detail} (as {flag} on the command line)") from None
    elif not isinstance(value, str):
        value = str(value)
    if action.choices is not None and value not in action.choices:
        raise ValueError(f"{path}: {key} must be one of {list(action.choices)}, got {value!r}")
    return value


def read_config(path: str | Path, parser: argparse.ArgumentParser) -> dict[str, Any]:
    """Option values from a JSON or TOML file, checked against ``parser``'s options: the same
    types and ranges as on the command line (one schema), an unknown name a ``ValueError``
    listing the known ones. TOML or JSON by suffix, else by content."""
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"config file {path} is a folder; give a .toml or .json file")
    if not path.is_file():
        raise FileNotFoundError(f"config file {path} does not exist")
    try:
        text = path.read_text(encoding="utf-8-sig")  # -sig: a byte-order mark is dropped
    except UnicodeDecodeError:
        raise ValueError(f"{path}: not a text file (JSON or TOML expected)") from None
    data = _parse_file(path, text)
    if not isinstance(data, Mapping):
        raise ValueError(f"{path}: expected a table of option values, got {type(data).__name__}")
    known = {a.dest: a for a in parser._actions if a.dest not in ("help", "config", "func")}
    out = {}
    for key, value in data.items():
        dest = str(key).lstrip("-").replace("-", "_")
        if dest == "data":
            dest = "text"
        if dest not in known:
            names = sorted({k.replace("_", "-") for k in known if not k.startswith("_")} | {"data"})
            raise ValueError(f"{path}: unknown option {key!r}; options: {', '.join(names)}")
        out[dest] = _convert(path, str(key), known[dest], value)
    return out


# options that do not change what a run computes: a resume may change them
_FREE_TO_CHANGE = {
    "out",
    "device",
    "checkpoint_every",
    "checkpoint_dir",
    "resume",
    "force_resume",
    "log_dir",
    "tensorboard",
    "compile",
    "eval_every",
    "config",
    "func",
    "command",
    "keep_last",
    "steps",  # checked by fit itself (more steps continue a finished run with --force-resume)
}


def _teacher_fingerprint(folder: Path) -> str:
    """A hash of a teacher folder's model, configuration and tokenizer files: a resume whose
    teacher was retrained (or replaced) in place since the stop is refused."""
    from ..hashing import files_hash

    names = ("config.json", "model.safetensors", "tokenizer.json", "vocab.json")
    digest = files_hash((name, folder / name) for name in names if (folder / name).is_file())
    return "files sha256:" + digest[:16]


def run_settings(args: argparse.Namespace, objective: str) -> dict[str, Any]:
    """The options that define a run (flag -> value), recorded in its training state: a
    resume with any of them changed is refused (see :func:`course_lib.train_state.resume_settings`).
    ``--data`` is the fingerprint of the text's files (names and contents), ``--teacher`` that
    of the teacher folder's files."""
    from ..data.text_files import source_fingerprint

    settings: dict[str, Any] = {"objective": objective}
    for dest, value in sorted(vars(args).items()):
        if dest.startswith("_") or dest in _FREE_TO_CHANGE:
            continue
        if dest == "text":
            settings["--data"] = source_fingerprint(value)
            continue
        if dest == "teacher" and value is not None:  # the teacher's files, not its path
            settings["--teacher"] = _teacher_fingerprint(Path(value))
            continue
        settings["--" + dest.replace("_", "-")] = (
            value if isinstance(value, (int, float, str, bool)) else (None if value is None else str(value))
        )
    return settings


def check_run_arguments(args: argparse.Namespace) -> None:
    """One-line ``ValueError``s, before any data work, for what would fail later with a
    traceback, in the options every training command shares (``course train`` and ``course
    finetune``): a batch that does not split over the processes, an empty ``--out`` or one
    naming a file (and the log folders), warm-up not below the steps, a device torch does not
    know or does not have."""
    import os
    import warnings

    import torch

    world = int(os.environ.get("WORLD_SIZE", "1") or 1)
    batch = getattr(args, "batch_size", None)
    if world > 1 and isinstance(batch, int) and batch % world:
        raise ValueError(
            f"--batch-size {batch} does not split over {world} processes: use a multiple of {world}"
        )
    from ..files import check_output_path

    if not str(args.out).strip():  # Path("") is the current folder: never what was meant
        raise ValueError("--out is empty; give a folder for the model")
    out = Path(args.out)
    check_output_path(out, "--out", folder=True)
    for option in ("log_dir", "checkpoint_dir", "tensorboard"):
        if getattr(args, option, None):
            check_output_path(getattr(args, option), "--" + option.replace("_", "-"), folder=True)
    warmup, steps = getattr(args, "warmup", None), getattr(args, "steps", None)
    if warmup is not None and steps is not None and warmup >= steps > 0:
        raise ValueError(
            f"--warmup {warmup} is not below --steps {steps}: the learning rate would never reach "
            "its peak (--lr); use fewer warm-up steps"
        )
    choice = getattr(args, "device", None)
    if choice:
        try:
            device = torch.device(choice)
        except (RuntimeError, ValueError):
            raise ValueError(f"--device {choice!r} is not a device: use cpu, cuda, cuda:1 or mps") from None
        if device.type == "cuda" and not torch.cuda.is_available():
            raise ValueError(
                f"--device {choice}: torch sees no CUDA device (torch {torch.__version__}, "
                f"built with CUDA {torch.version.cuda or 'none'}); use --device cpu"
            )
        if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
            raise ValueError(
                f"--device {choice}: only {torch.cuda.device_count()} CUDA device(s) are visible"
            )
        if device.type not in ("cpu", "cuda", "mps"):
            raise ValueError(f"--device {choice!r}: training runs on cpu, cuda or mps")
        if getattr(args, "precision", None) == "fp16" and device.type == "cpu":
            warnings.warn("--precision fp16 on a CPU is slower than fp32 (no fp16 kernels); use fp32 or bf16")


def check_arguments(args: argparse.Namespace, objective: str) -> None:
    """:func:`check_run_arguments`, then what ``course train OBJECTIVE`` adds: an
    ``--architecture`` that is not a masked LM (for bert, roberta, albert), an ``--out``
    holding another model, a distillation teacher that is not a masked-LM folder."""
    check_run_arguments(args)
    architecture = getattr(args, "architecture", None)
    if architecture and objective in MASKED_LM:
        from .common import MASKED_LMS, MODEL_CLASSES, is_masked_lm

        known = ", ".join(c.__name__ for c in MASKED_LMS)
        if architecture not in MODEL_CLASSES:
            raise ValueError(
                f"--architecture: unknown architecture {architecture!r}; `course train {objective}` "
                f"trains one of {known}"
            )
        if not is_masked_lm(architecture):
            raise ValueError(
                f"--architecture {architecture} is not a masked LM: `course train {objective}` trains "
                f"one of {known} ({architecture} has its own objective: see `course train --help`)"
            )
    out = Path(args.out)
    held = _folder_holds(out)
    if held is not None and held != f"a model trained by `course train {objective}`":
        raise ValueError(
            f"--out {out} holds {held}; training {objective} there would mix two models' files: "
            "choose another folder (or delete that one)"
        )
    if objective == "distill" and getattr(args, "teacher", None):
        from .common import is_masked_lm, saved_architecture
        from .registry import with_article

        if (Path(args.teacher) / "config.json").is_file():
            try:
                architecture = saved_architecture(args.teacher)
            except ValueError as e:
                raise ValueError(f"--teacher: {e}") from None
            if not is_masked_lm(architecture):
                raise ValueError(
                    f"--teacher {args.teacher} holds {with_article(architecture)}; distillation needs a "
                    "masked-LM teacher (a folder written by `course train bert`, `roberta` or `albert`)"
                )


def _folder_holds(folder: Path) -> str | None:
    """What model a folder holds, in words (``"a model trained by `course train bert`"``, a
    fine-tuned model, ...), from its ``model.json`` or ``config.json``; None when it holds
    neither (a new or empty folder, or only other files, which training does not touch)."""
    from ..checkpoints import read_metadata, saved_recipe
    from .registry import with_article

    try:
        record = read_metadata(folder / "model.safetensors")
    except ValueError:
        return "a model record (model.json) that is not readable"
    if record:
        recipe = saved_recipe(folder)
        if recipe.get("command") == "train" and recipe.get("objective"):
            return f"a model trained by `course train {recipe['objective']}`"
        command = recipe.get("command", "another command")
        return f"{with_article(record.get('architecture', 'model'))} written by `{command}`"
    return "a config.json of something else" if (folder / "config.json").exists() else None


def _state_objectives(folder: Path) -> dict[str, str | None]:
    """Each training state in ``folder`` (run name -> the objective its settings record, None
    when it records none or cannot be read)."""
    import torch

    found: dict[str, str | None] = {}
    for path in sorted(folder.glob("*/state.pt")):
        try:
            state = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
            found[path.parent.name] = json.loads(state["extra"]["settings"]).get("objective")
        except Exception:  # an unreadable or older state: fit's own checks judge it
            found[path.parent.name] = None
    return found


def _interrupted(args: argparse.Namespace) -> str:
    """The line for a run stopped by Ctrl-C: where its last training state is, if any."""
    folder = Path(getattr(args, "checkpoint_dir", None) or Path(args.out) / "checkpoints")
    every = getattr(args, "checkpoint_every", None)
    states = sorted(folder.glob("*/state.pt"), key=lambda p: p.stat().st_mtime) if folder.is_dir() else []
    if every and states:
        return (
            f"interrupted; the last training state (saved every {every} steps) is in "
            f"{states[-1].parent}: run the same command with --resume to continue from it"
        )
    return (
        "interrupted; no training state of this run was saved"
        + ("" if every else " (--checkpoint-every N saves one every N steps, for --resume)")
        + f"; {args.out} keeps what it held before"
    )


def _resume_refusal(args: argparse.Namespace, objective: str) -> str | None:
    """Why ``--resume`` cannot continue this command's run, or None: no training state at
    all, or only the states of another objective's run (whose resume would silently start
    this one afresh over them)."""
    folder = Path(getattr(args, "checkpoint_dir", None) or Path(args.out) / "checkpoints")
    states = _state_objectives(folder) if folder.is_dir() else {}
    if not states:
        return f"--resume: no training state in {folder} (nothing to resume; drop --resume to start afresh)"
    others = {o for o in states.values() if o is not None}
    if others and objective not in others:
        return (
            f"--resume: the training states in {folder} ({', '.join(states)}) are of "
            f"`course train {', '.join(sorted(others))}`, not of this `course train {objective}` run; "
            "resume with that command, or give another --checkpoint-dir to start afresh"
        )
    return None


def _wrap(run: Any, parser: argparse.ArgumentParser, objective: str) -> Any:
    def cmd(args: argparse.Namespace) -> int:
        from ..data.text_files import reading_encoding
        from ..train import loop_overrides
        from ..train_state import resume_settings

        if getattr(args, "text", None) == "generated":
            args.text = None
        if getattr(args, "config", None):
            try:
                values = read_config(args.config, parser)
            except (ValueError, FileNotFoundError) as exc:
                print(f"course train {objective}: {exc}", file=sys.stderr)
                return 2
            # the file's values become the parser's defaults; the command line is parsed again
            # over them, so what it gives wins
            argv = list(getattr(args, "_argv", None) or sys.argv[1:])
            start = argv.index(objective, argv.index("train") + 1 if "train" in argv else 0) + 1
            parser.set_defaults(**values)
            args = argparse.Namespace(**{**vars(args), **vars(parser.parse_args(argv[start:]))})
            if args.text == "generated":
                args.text = None
        args._prog = f"course train {objective}"
        missing = [
            f"--{name}" for name in ("out", "teacher") if name in vars(args) and getattr(args, name) is None
        ]
        if missing:
            print(
                f"course train {objective}: {' and '.join(missing)} {'is' if len(missing) == 1 else 'are'} "
                "required (on the command line, or as "
                f"{' and '.join(m[2:] for m in missing)} in a --config file)",
                file=sys.stderr,
            )
            return 2
        if getattr(args, "force_resume", False):
            args.resume = True
        if getattr(args, "checkpoint_dir", None) is None and getattr(args, "out", None):
            # every run keeps its final training state, so it can be continued (--force-resume --steps N)
            args.checkpoint_dir = str(Path(args.out) / "checkpoints")
        refusal = _resume_refusal(args, objective) if getattr(args, "resume", False) else None
        if refusal:
            print(f"course train {objective}: {refusal}", file=sys.stderr)
            return 2
        try:
            check_arguments(args, objective)
            settings = run_settings(args, objective)
            with reading_encoding(getattr(args, "encoding", None)):
                pass  # checks the name before any data work
        except (ValueError, FileNotFoundError) as exc:
            print(f"course train {objective}: {exc}", file=sys.stderr)
            return 2
        names = ("warmup", "weight_decay", "grad_clip", "keep_last", "dropout")
        overrides = {k: getattr(args, k, None) for k in names}
        try:
            with resume_settings(settings, force=getattr(args, "force_resume", False)):
                with reading_encoding(getattr(args, "encoding", None)), loop_overrides(**overrides):
                    return run(args)
        except KeyboardInterrupt:  # Ctrl-C: one line saying what is kept, not a traceback
            print(f"course train {objective}: {_interrupted(args)}", file=sys.stderr)
            return 130

    return cmd


def _non_negative(kind: type) -> Any:
    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a valid {kind.__name__}: {text}") from None
        if not value >= 0:
            raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
        return value

    parse.__name__ = kind.__name__
    return parse


def fraction(*, zero: bool, most: float | None = None) -> Any:
    """An argparse ``type``: a number in [0, 1) (``zero``) or (0, 1), or up to ``most``
    (included) when given (``--heldout``: every k-th document, so at most every 2nd)."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text}") from None
        low = (0.0 <= value) if zero else (0.0 < value)
        if most is not None and low and value > most:
            raise argparse.ArgumentTypeError(
                f"must be at most {most} (every k-th one is held out, k = round(1/F) >= 2), got {text}"
            )
        if not low or not value < 1.0:
            raise argparse.ArgumentTypeError(f"must be in {'[0' if zero else '(0'}, 1), got {text}")
        return value

    parse.__name__ = "fraction"
    return parse


# objectives whose inputs are masked (--mask-rate): the BERT family's masked LMs
MASKED_LM = ("bert", "roberta", "albert")


def _regularisation_options(q: argparse.ArgumentParser, objective: str) -> None:
    """``--dropout``, ``--heldout`` and, for the masked LMs, ``--mask-rate``."""
    g = q.add_argument_group("regularisation and evaluation (default: the recipe's)")
    g.add_argument(
        "--dropout",
        type=fraction(zero=True),
        default=None,
        metavar="P",
        help="every dropout probability of the model (hidden, attention, embeddings; recorded in "
        "config.json; default the recipe's: 0.1, ALBERT's hidden and attention 0)",
    )
    held_default = None if objective == "elmo" else 0.05
    g.add_argument(
        "--heldout",
        type=fraction(zero=True, most=None if objective == "elmo" else 0.5),
        default=held_default,
        metavar="F",
        help="the fraction of the text held out for evaluation (0: none; default "
        + ("256 sentences" if objective == "elmo" else "0.05: every 20th document")
        + ")",
    )
    if objective in MASKED_LM:
        g.add_argument(
            "--mask-rate",
            type=fraction(zero=False),
            default=MLM_PROBABILITY,
            metavar="R",
            help="the fraction of tokens chosen for prediction "
            f"(80/10/10 rule; default {MLM_PROBABILITY}, BERT's)",
        )


def register(sub: Any) -> None:
    """Add ``course train OBJECTIVE`` to the ``course`` command."""
    import importlib

    from .common import positive

    p = sub.add_parser(
        "train",
        help="pretrain any of the course's objectives "
        "(elmo, bert, roberta, albert, causal, xlnet, transfo-xl, distill)",
        description=__doc__.split("\n\n")[0] + " " + __doc__.split("\n\n")[1].replace("\n", " "),
    )
    objectives = p.add_subparsers(dest="objective", metavar="OBJECTIVE")
    objectives.required = True
    for objective, (module, command, presets, help) in OBJECTIVES.items():
        renamed = _Renamed(objectives, objective, help, presets)
        importlib.import_module(module).register(renamed)
        q = renamed.parser
        assert q is not None, f"{module}.register added no parser"
        q.add_argument(
            "--data",
            dest="text",
            metavar="PATH_OR_GLOB",
            help="training text: a file, a folder of *.txt, a quoted glob, or 'generated' (= --text)",
        )
        q.add_argument(
            "--config", metavar="FILE", help="a JSON or TOML file of option values (the command line wins)"
        )
        g = q.add_argument_group("optimisation (default: the recipe's)")
        g.add_argument("--warmup", type=_non_negative(int), default=None, metavar="N", help="warm-up steps")
        g.add_argument(
            "--weight-decay", type=_non_negative(float), default=None, metavar="W", help="AdamW weight decay"
        )
        g.add_argument(
            "--grad-clip",
            type=_non_negative(float),
            default=None,
            metavar="NORM",
            help="clip the gradient norm at NORM (0: no clipping; default 1.0)",
        )
        g.add_argument(
            "--keep-last",
            type=positive(int),
            default=None,
            metavar="K",
            help="keep the K previous training states beside the latest (state-<step>.pt)",
        )
        _regularisation_options(q, objective)
        q.add_argument(
            "--encoding",
            default=None,
            metavar="NAME",
            help="the text files' encoding (default utf-8; e.g. latin-1, cp1252, utf-16)",
        )
        q.add_argument(
            "--force-resume",
            action="store_true",
            help="resume although settings differ from the saved run's (e.g. more --steps to continue "
            "a finished run); implies --resume",
        )
        q.set_defaults(**presets)
        q.set_defaults(func=_wrap(q.get_default("func"), q, objective))


def main(argv: list[str] | None = None) -> int:
    """``python -m course_lib.recipes.train_command OBJECTIVE ...`` = ``course train OBJECTIVE ...``."""
    parser = argparse.ArgumentParser(prog="course")
    sub = parser.add_subparsers(dest="command")
    register(sub)
    argv = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(["train", *argv])
    args._argv = ["train", *argv]
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
