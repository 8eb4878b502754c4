"""``course export MODEL_DIR OUT_DIR``: a model trained by ``course train`` (or fine-tuned by
``course finetune``) as a Hugging Face folder, so that it leaves the course.

The folder holds what ``transformers`` reads: ``config.json`` with ``model_type`` and
``architectures``, ``model.safetensors`` in Hugging Face's parameter names (through the
name maps of :mod:`course_lib.models.hf`, the same ones ``from_hf`` reads with), and the
tokenizer (``tokenizer.json`` with ``tokenizer_config.json`` and ``special_tokens_map.json``
naming the special tokens). Then::

    AutoModelForMaskedLM.from_pretrained(folder)        # bert, roberta, albert
    AutoModelForCausalLM.from_pretrained(folder)        # causal (BertLMHeadModel)
    XLNetLMHeadModel.from_pretrained(folder)            # xlnet
    AutoTokenizer.from_pretrained(folder)
    pipeline("fill-mask", model=folder)                 # the masked LMs
    AutoModelForSequenceClassification / AutoModelForTokenClassification   # course finetune's
    pipeline("text-classification" / "token-classification", model=folder)  # (id2label: labels.json)

give the course model's logits; the tokenizer returns ``token_type_ids`` too (a pair's second
sentence is segment 1, as in training). A right-to-left causal LM (``course train causal
--causal right-to-left``) records ``course_reading_direction`` in ``config.json``: it reads
reversed sequences. ``OUT_DIR`` must be new, empty or an earlier export (which is replaced):
a folder holding anything else is refused, never overwritten. ``course train roberta``
trains a BERT network on byte-level BPE (the course's RoBERTa objective), so it is exported
as a BERT model with that tokenizer.
Files get the user's usual mode (umask), not the 0600 of a temporary file.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import torch
from torch import nn

from .checkpoints import saved_recipe
from .models.hf import xlnet_config_to_hf

__all__ = ["EXPORTABLE", "export_model", "hf_state_dict", "hf_config", "hf_tokenizer", "register", "main"]

# our architecture -> (transformers config class, model_type, exported architecture)
EXPORTABLE: dict[str, tuple[str, str, str]] = {
    "BertForPreTraining": ("BertConfig", "bert", "BertForPreTraining"),
    "BertForMaskedLM": ("BertConfig", "bert", "BertForMaskedLM"),
    "BertLMHeadModel": ("BertConfig", "bert", "BertLMHeadModel"),
    "AlbertForPreTraining": ("AlbertConfig", "albert", "AlbertForPreTraining"),
    "AlbertForMaskedLM": ("AlbertConfig", "albert", "AlbertForMaskedLM"),
    "XLNetLMHeadModel": ("XLNetConfig", "xlnet", "XLNetLMHeadModel"),
    # fine-tuned by `course finetune` (labels.json names the classes: config.json's id2label)
    "BertForSequenceClassification": ("BertConfig", "bert", "BertForSequenceClassification"),
    "BertForTokenClassification": ("BertConfig", "bert", "BertForTokenClassification"),
    "AlbertForSequenceClassification": ("AlbertConfig", "albert", "AlbertForSequenceClassification"),
    "XLNetForTokenClassification": ("XLNetConfig", "xlnet", "XLNetForTokenClassification"),
}


def _load(folder: Path) -> nn.Module:
    from .recipes.common import load_model  # (registers the transformer families)

    if (folder / "labels.json").is_file():  # a `course finetune` folder
        from .recipes.finetune_command import load_finetuned

        return load_finetuned(folder, device="cpu")[0]
    model, _ = load_model(
        folder, ("tokenizer.json",), "course train", default_architecture="BertForPreTraining", device="cpu"
    )
    return model


def hf_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """``model``'s parameters under Hugging Face's names (XLNet's attention projections in
    their ``[d_model, heads, d_head]`` layout); a parameter without a name is an error."""
    names = model.hf_names()
    state = model.state_dict()
    params = {k for k, _ in model.named_parameters(remove_duplicate=False)}
    unnamed = sorted(k for k in params if k not in names)
    if unnamed:
        raise ValueError(f"no Hugging Face name for {unnamed[:5]}: this model cannot be exported")
    out: dict[str, torch.Tensor] = {}
    xlnet = type(model).__name__.startswith("XLNet")
    for ours, theirs in names.items():
        t = state[ours].detach().cpu()
        if xlnet and theirs.rsplit(".", 1)[-1] in ("q", "k", "v", "r", "o") and ".rel_attn." in theirs:
            c = model.config
            heads, d_head = c.n_head, c.d_model // c.n_head
            t = t.t() if theirs.endswith(("q", "k", "v", "r")) else t  # ours [h*dh, d]; o: [d, h*dh]
            t = t.reshape(c.d_model, heads, d_head)
        out[theirs] = t.clone().contiguous()
    # Hugging Face keeps the decoder's bias twice (tied to the head's bias); write both
    for key in list(out):
        for head_bias, decoder_bias in (
            ("cls.predictions.bias", "cls.predictions.decoder.bias"),
            ("predictions.bias", "predictions.decoder.bias"),
        ):
            if key == head_bias and decoder_bias not in out:
                out[decoder_bias] = out[key].clone()
    return out


def hf_config(model: nn.Module, tokenizer: dict[str, Any]) -> Any:
    """The ``transformers`` configuration of ``model`` (``model_type``, ``architectures``,
    the special tokens' ids)."""
    import transformers

    architecture = type(model).__name__
    config_class, _, exported = EXPORTABLE[architecture]
    values = dict(model.config.to_dict())
    values.pop("architecture", None)
    if exported.startswith("XLNet"):
        if exported == "XLNetLMHeadModel":
            values.pop("num_labels", None)
        values = xlnet_config_to_hf(values)  # the course's mem_len=0 is no memory
    config = getattr(transformers, config_class)(**values)
    config.architectures = [exported]
    ids = {t["content"]: t["id"] for t in tokenizer.get("added_tokens", [])}
    specials = _special_tokens(tokenizer)
    for name in ("pad", "bos", "eos", "sep", "cls", "mask", "unk"):
        token = specials.get(f"{name}_token")
        if token in ids and hasattr(config, f"{name}_token_id"):
            setattr(config, f"{name}_token_id", ids[token])
    if architecture == "BertLMHeadModel":
        config.is_decoder = True
    return config


def hf_tokenizer(tokenizer: dict[str, Any]) -> dict[str, Any]:
    """The tokenizer (``tokenizer.json``'s content) as Hugging Face ships RoBERTa's: its
    ``<mask>`` (byte-level BPE's mask token) takes the space before it (``lstrip``), so
    ``"The cat <mask> on the mat."`` puts no lone space token before the mask and the predicted
    word carries its own leading space, as the model saw words in training. A WordPiece
    tokenizer's ``[MASK]`` is left as it is (spaces are not tokens there)."""
    out = json.loads(json.dumps(tokenizer))
    for token in out.get("added_tokens", []):
        if token.get("content") == "<mask>":
            token["lstrip"] = True
    return out


def causal_tokenizer(tokenizer: dict[str, Any], specials: dict[str, str]) -> dict[str, Any]:
    """The tokenizer of an exported causal LM: a text alone reads as the model's training rows
    begin, ``[CLS] text`` (``<s> text`` for byte-level BPE), with no end marker after the
    prompt, so that a generation continues it; a pair stays as the course encodes it."""
    from tokenizers import Tokenizer, processors

    tok = Tokenizer.from_str(json.dumps(tokenizer))
    cls, sep = specials["cls_token"], specials["sep_token"]
    ids = [(cls, tok.token_to_id(cls)), (sep, tok.token_to_id(sep))]
    pair = f"{cls} $A {sep} $B:1 {sep}:1" if cls == "[CLS]" else f"{cls} $A {sep} {sep} $B {sep}"
    tok.post_processor = processors.TemplateProcessing(single=f"{cls} $A", pair=pair, special_tokens=ids)
    return json.loads(tok.to_str())


def _special_tokens(tokenizer: dict[str, Any]) -> dict[str, str]:
    added = [t["content"] for t in tokenizer.get("added_tokens", []) if t.get("special")]
    out: dict[str, str] = {}
    for kind, candidates in {
        "pad_token": ("[PAD]", "<pad>"),
        "unk_token": ("[UNK]", "<unk>"),
        "cls_token": ("[CLS]", "<s>", "<cls>"),
        "sep_token": ("[SEP]", "</s>", "<sep>"),
        "mask_token": ("[MASK]", "<mask>"),
        "bos_token": ("<s>", "[CLS]"),
        "eos_token": ("</s>", "[SEP]"),
    }.items():
        token = next((c for c in candidates if c in added), None)
        if token is not None:
            out[kind] = token
    return out


def _is_export(folder: Path) -> bool:
    """Whether ``folder`` holds an earlier export (which a new one may replace): a
    ``transformers`` config (``model_type``) and no course model record (``model.json``)."""
    try:
        config = json.loads((folder / "config.json").read_text())
    except (OSError, ValueError):
        return False
    return isinstance(config, dict) and "model_type" in config and not (folder / "model.json").exists()


def reading_direction(folder: Path) -> str:
    """``"right-to-left"`` for a causal LM trained on reversed text (``course train causal
    --causal right-to-left``, recorded in the folder's ``model.json``), else
    ``"left-to-right"``."""
    try:
        recipe = saved_recipe(folder)
    except ValueError:
        return "left-to-right"
    return "right-to-left" if recipe.get("causal") == "right-to-left" else "left-to-right"


def usage_hint(architecture: str, direction: str = "left-to-right") -> str:
    """How to use an exported folder in ``transformers`` (the export command prints it)."""
    if architecture == "BertLMHeadModel":
        hint = (
            "AutoModelForCausalLM.from_pretrained / pipeline('text-generation', model=...), called with "
            "add_special_tokens=True so that a prompt starts as the training rows did ([CLS] or <s>)"
        )
        if direction == "right-to-left":
            hint += (
                "; this model reads right to left (trained on reversed sequences): reverse each "
                "sequence's tokens before feeding it and its output after (config.json: "
                "course_reading_direction)"
            )
        return hint
    if architecture.endswith("ForSequenceClassification"):
        return (
            "AutoModelForSequenceClassification.from_pretrained / pipeline('text-classification', model=...)"
        )
    if architecture.endswith("ForTokenClassification"):
        return "AutoModelForTokenClassification.from_pretrained / pipeline('token-classification', model=...)"
    if architecture.startswith("XLNet"):
        return "XLNetLMHeadModel.from_pretrained (perm_mask and target_mapping choose what it predicts)"
    return "AutoModelForMaskedLM.from_pretrained / pipeline('fill-mask', model=...)"


def export_model(source: str | Path, out: str | Path) -> Path:
    """Write the Hugging Face folder ``out`` for the model folder ``source`` (written by
    ``course train``); returns ``out``. ``ValueError`` for a model transformers has no class
    for (ELMo, Transformer-XL's course variant) or a folder that is not a model's."""
    from safetensors.torch import save_file

    from .files import atomic_write_text, check_output_path, write_atomically

    source, out = Path(source), Path(out)
    if not (source / "config.json").is_file():
        raise FileNotFoundError(f"{source} is not a model folder written by `course train` (no config.json)")
    from .recipes.common import saved_architecture
    from .recipes.registry import with_article

    architecture = saved_architecture(source)  # a ValueError naming the file when it is not JSON
    if architecture not in EXPORTABLE:
        raise ValueError(
            f"{source} holds {with_article(architecture)}: course export writes the models of `course "
            f"train` and `course finetune` that transformers loads ({', '.join(sorted(EXPORTABLE))})"
        )
    check_output_path(out, "OUT_DIR", folder=True)
    if out.resolve() == source.resolve():
        raise ValueError("the export folder must differ from the model folder")
    if out.is_dir() and any(out.iterdir()) and not _is_export(out):
        raise ValueError(
            f"OUT_DIR {out} is not empty and holds no earlier export (its files would be mixed "
            "with the export's, or a model there overwritten): give a new or empty folder"
        )
    model = _load(source)
    tokenizer = json.loads((source / "tokenizer.json").read_text())
    config = hf_config(model, tokenizer)
    direction = reading_direction(source)
    if direction != "left-to-right":  # recorded, so that the folder says how to feed it
        config.course_reading_direction = direction
    if (source / "labels.json").is_file():  # the task's label names, as pipelines show them
        labels = json.loads((source / "labels.json").read_text())["labels"]
        config.id2label = dict(enumerate(labels))
        config.label2id = {name: i for i, name in enumerate(labels)}
    state = hf_state_dict(model)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "config.json", config.to_json_string())
    write_atomically(out / "model.safetensors", lambda tmp: save_file(state, tmp, metadata={"format": "pt"}))
    specials = _special_tokens(tokenizer)
    max_len = getattr(model.config, "max_position_embeddings", None) or 512
    tokenizer_config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": int(max_len),
        "clean_up_tokenization_spaces": False,
        # the segment ids the tokenizer's post-processor writes (B of a pair is segment 1):
        # without this name a fast tokenizer drops them, and a pair reads as one segment
        "model_input_names": ["input_ids", "token_type_ids", "attention_mask"],
        **specials,
    }
    if architecture == "BertLMHeadModel":  # a generator: prompts without an end marker, padded on the left
        tokenizer = causal_tokenizer(tokenizer, specials)
        tokenizer_config["padding_side"] = "left"
    atomic_write_text(out / "tokenizer.json", json.dumps(hf_tokenizer(tokenizer), ensure_ascii=False))
    atomic_write_text(out / "tokenizer_config.json", json.dumps(tokenizer_config, indent=1))
    atomic_write_text(out / "special_tokens_map.json", json.dumps(specials, indent=1))
    return out


def _cmd(args: argparse.Namespace) -> int:
    try:
        out = export_model(args.model, args.out)
    except (ValueError, FileNotFoundError) as exc:
        print(f"course export: {exc}", file=sys.stderr)
        return 2
    architecture = json.loads((out / "config.json").read_text())["architectures"][0]
    hint = usage_hint(architecture, reading_direction(Path(args.model)))
    print(f"exported to {out.resolve()} (transformers: AutoTokenizer.from_pretrained; {hint})")
    return 0


def register(sub: Any) -> None:
    p = sub.add_parser(
        "export",
        help="write a model trained by `course train` or `course finetune` as a Hugging Face folder",
        description=__doc__.split("\n\n")[0],
    )
    p.add_argument(
        "model", metavar="MODEL_DIR", help="a folder written by `course train` or `course finetune`"
    )
    p.add_argument("out", metavar="OUT_DIR", help="the Hugging Face folder to write")
    p.set_defaults(func=_cmd)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="course")
    sub = parser.add_subparsers(dest="command")
    register(sub)
    args = parser.parse_args(["export", *(sys.argv[1:] if argv is None else argv)])
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
