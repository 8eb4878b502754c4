"""``course eval MODEL_DIR --data PATH``: how well a model trained by ``course train`` predicts
held-out text, as JSON on stdout (a progress bar on stderr).

* masked LMs (bert, roberta, albert, distill students): ``mlm_accuracy`` and ``mlm_loss`` over
  15 % of the tokens masked once with ``--seed`` (BERT's 80/10/10 rule), ``perplexity`` =
  exp(mlm_loss); with ``--pll`` also the pseudo-log-likelihood (every token masked in turn,
  Salazar et al. 2020): ``pll_per_token`` and ``pseudo_perplexity``;
* the causal BERT: next-token ``lm_loss``, ``lm_accuracy`` and ``perplexity``;
* XLNet: ``plm_loss``, ``plm_accuracy`` and ``perplexity`` over one random factorisation order
  per row (seeded), the last 1/K of each order predicted as in training;
* ELMo's biLM: ``forward_loss`` and ``backward_loss`` (each word from the words before it,
  and from the words after it), ``forward_perplexity``, ``backward_perplexity`` and
  ``perplexity`` = exp of their mean (what ``course train elmo`` reports), over every held-out
  sentence (cut to the training's ``--max-len`` words);
* Transformer-XL: ``lm_loss`` and ``perplexity`` with the memory (rows of the training's
  segments, read segment by segment, the memory carried across them), and
  ``lm_loss_no_memory`` / ``perplexity_no_memory`` with every segment read on its own, over
  the same tokens.

The text is read as ``course train`` reads it (same ``--encoding``, same checks), packed into
rows of the model's training length.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from .checkpoints import saved_recipe

__all__ = ["evaluate_folder", "register", "main"]


def _rows(
    model_dir: Path, documents: list, tokenizer: Any, max_len: int | None, model
) -> dict[str, torch.Tensor]:
    """The held-out rows: ``max_len`` tokens, else the length the model was trained with,
    else 128 or the model's number of positions if lower (a distilled student records none)."""
    from .objectives.pretraining import pretraining_examples

    # the position table's limit (absolute positions: the BERT family); XLNet's are relative
    limit = next((m.max_length() for m in model.modules() if callable(getattr(m, "max_length", None))), None)
    length = int(max_len or saved_recipe(model_dir).get("max_len") or min(128, limit or 128))
    if limit is not None and length > limit:
        raise ValueError(f"--max-len {length} is longer than the {limit} positions the model has")
    return pretraining_examples(documents, tokenizer, max_len=int(length), pair_task=None, row_unit="block")


def _batches(n: int, batch_size: int, desc: str, progress: bool):
    from tqdm.auto import tqdm

    with tqdm(total=n, desc=desc, unit="rows", disable=not progress, file=sys.stderr) as bar:
        for i in range(0, n, batch_size):
            yield slice(i, min(n, i + batch_size))
            bar.update(min(n, i + batch_size) - i)


def _inputs(examples: dict[str, torch.Tensor], sl: slice, device: torch.device) -> dict[str, torch.Tensor]:
    from .objectives.pairs import trim_padding

    fields = ("input_ids", "attention_mask", "token_type_ids")
    batch = trim_padding({k: v[sl] for k, v in examples.items() if k in fields})
    return {k: v.to(device) for k, v in batch.items()}


# above this share of [UNK] among a text's real tokens, eval refuses to score it
MOSTLY_UNKNOWN = 0.5


def _unknown_fraction(tokenizer: Any, examples: dict[str, torch.Tensor]) -> float:
    """The share of the unknown token (``[UNK]``) among the real (non-padding) tokens of
    ``examples``; 0 for a tokenizer without one (byte-level BPE has no unknown tokens)."""
    from .data.tokenizers import unknown_id

    unk = unknown_id(tokenizer)
    if unk is None:
        return 0.0
    real = examples["attention_mask"].bool()
    return float((examples["input_ids"][real] == unk).float().mean()) if real.any() else 0.0


def _require_scored(total: int, what: str) -> None:
    """``ValueError`` when no position of the text was scored: a loss of 0 and a perplexity of
    1 over nothing would read as a perfect model."""
    if total == 0:
        raise ValueError(
            f"no {what} position of the text could be scored (every word unknown to the model's "
            "tokenizer, [UNK], is not predicted): give text in the language the model was trained on"
        )


@torch.no_grad()
def _masked_lm(model, tokenizer, examples, *, seed, batch_size, pll, progress) -> dict[str, float]:
    from .objectives.masking import MLM_PROBABILITY
    from .objectives.pretraining import make_masker

    masker = make_masker(tokenizer, mlm_probability=MLM_PROBABILITY)
    device = next(model.parameters()).device
    special = examples["attention_mask"] == 0
    g = torch.Generator().manual_seed(seed)
    masked, labels = masker(examples["input_ids"], generator=g, special_mask=special)
    loss_sum, correct, total = 0.0, 0, 0
    n = examples["input_ids"].size(0)
    for sl in _batches(n, batch_size, "masked-LM", progress):
        batch = _inputs({**examples, "input_ids": masked}, sl, device)
        width = batch["input_ids"].size(1)
        target = labels[sl, :width].to(device)
        logits = model(**batch).mlm_logits.float()
        chosen = target != -100
        loss_sum += F.cross_entropy(logits[chosen], target[chosen], reduction="sum").item()
        correct += int((logits[chosen].argmax(-1) == target[chosen]).sum())
        total += int(chosen.sum())
    _require_scored(total, "masked-LM")
    out = {"mlm_loss": loss_sum / max(total, 1), "mlm_accuracy": correct / max(total, 1), "tokens": total}
    out["perplexity"] = math.exp(min(out["mlm_loss"], 50.0))
    if pll:
        out.update(_pseudo_log_likelihood(model, tokenizer, examples, batch_size, progress))
    return out


@torch.no_grad()
def _pseudo_log_likelihood(model, tokenizer, examples, batch_size, progress) -> dict[str, float]:
    """Every real, non-special token masked in turn; the sum of log p(true token)."""
    mask_id = tokenizer.token_to_id("[MASK]")
    if mask_id is None:
        mask_id = tokenizer.token_to_id("<mask>")
    specials = {tokenizer.token_to_id(t) for t in ("[CLS]", "[SEP]", "<s>", "</s>", "[PAD]", "<pad>")}
    device = next(model.parameters()).device
    ll, count = 0.0, 0
    n = examples["input_ids"].size(0)
    for sl in _batches(n, 1, "pseudo-log-likelihood", progress):
        row = _inputs(examples, sl, device)
        ids = row["input_ids"][0]
        positions = [
            j for j in range(ids.size(0)) if int(ids[j]) not in specials and bool(row["attention_mask"][0, j])
        ]
        for k in range(0, len(positions), batch_size):
            pos = torch.tensor(positions[k : k + batch_size], device=device)
            copies = {key: v.expand(pos.numel(), -1).clone() for key, v in row.items()}
            copies["input_ids"][torch.arange(pos.numel(), device=device), pos] = mask_id
            logp = model(**copies).mlm_logits.float().log_softmax(-1)
            ll += logp[torch.arange(pos.numel(), device=device), pos, ids[pos]].sum().item()
            count += pos.numel()
    per = ll / max(count, 1)
    return {"pll_per_token": per, "pseudo_perplexity": math.exp(min(-per, 50.0))}


@torch.no_grad()
def _causal_lm(model, examples, *, batch_size, progress) -> dict[str, float]:
    device = next(model.parameters()).device
    loss_sum, correct, total = 0.0, 0, 0
    for sl in _batches(examples["input_ids"].size(0), batch_size, "next-token", progress):
        batch = _inputs(examples, sl, device)
        logits = model(**batch).logits[:, :-1].float()
        target = batch["input_ids"][:, 1:]
        real = batch["attention_mask"][:, 1:].bool()
        loss_sum += F.cross_entropy(logits[real], target[real], reduction="sum").item()
        correct += int((logits[real].argmax(-1) == target[real]).sum())
        total += int(real.sum())
    _require_scored(total, "next-token")
    loss = loss_sum / max(total, 1)
    return {"lm_loss": loss, "lm_accuracy": correct / max(total, 1), "perplexity": math.exp(min(loss, 50.0))}


@torch.no_grad()
def _permutation_lm(model, examples, *, seed, batch_size, progress) -> dict[str, float]:
    from .objectives.permutation import plm_batch
    from .recipes.xlnet import DEFAULT_K

    device = next(model.parameters()).device
    g = torch.Generator().manual_seed(seed)
    loss_sum, correct, total = 0.0, 0, 0
    for sl in _batches(examples["input_ids"].size(0), batch_size, "permutation LM", progress):
        batch = _inputs(examples, sl, device)
        extra = plm_batch(batch["input_ids"].cpu(), batch["attention_mask"].cpu(), K=DEFAULT_K, generator=g)
        batch.update({k: v.to(device) for k, v in extra.items()})
        labels = batch.pop("labels")
        batch.pop("target_mask", None)
        logits = model(**batch).logits.float()
        real = labels != -100
        loss_sum += F.cross_entropy(logits[real], labels[real], reduction="sum").item()
        correct += int((logits[real].argmax(-1) == labels[real]).sum())
        total += int(real.sum())
    _require_scored(total, "permutation-LM")
    loss = loss_sum / max(total, 1)
    return {
        "plm_loss": loss,
        "plm_accuracy": correct / max(total, 1),
        "perplexity": math.exp(min(loss, 50.0)),
    }


@torch.no_grad()
def _elmo(model_dir: Path, data: str, *, batch_size, max_len, max_rows, device, progress) -> dict[str, Any]:
    from .data.text_files import load_sentences
    from .recipes.elmo import ElmoLMData, load_pretrained_elmo

    model, vocab = load_pretrained_elmo(model_dir, device=device)
    sentences = load_sentences(data)
    if max_rows is not None:
        sentences = sentences[:max_rows]
    if not sentences:
        raise ValueError(f"{data}: no sentences to score")
    length = int(max_len or saved_recipe(model_dir).get("max_len") or 64)
    table = ElmoLMData(sentences, vocab, max_len=length)
    sums = {"forward": 0.0, "backward": 0.0}
    count = 0
    n = len(sentences)
    for sl in _batches(n, batch_size, "biLM", progress):
        batch = {k: v.to(device) for k, v in table.batch(range(sl.start, sl.stop)).items()}
        out = model.lm_loss(batch["char_ids"], batch["word_ids"], batch["mask"])
        sums["forward"] += out.forward.item() * out.n_predictions
        sums["backward"] += out.backward.item() * out.n_predictions
        count += out.n_predictions
    forward, backward = sums["forward"] / count, sums["backward"] / count
    return {
        "rows": n,
        "forward_loss": forward,
        "backward_loss": backward,
        "forward_perplexity": math.exp(min(forward, 50.0)),
        "backward_perplexity": math.exp(min(backward, 50.0)),
        "perplexity": math.exp(min((forward + backward) / 2, 50.0)),
        "tokens": count,
    }


@torch.no_grad()
def _transfo_xl(
    model_dir: Path, data: str, *, batch_size, max_len, max_rows, device, progress
) -> dict[str, Any]:
    from .data.text_files import load_documents
    from .models.transfo_xl import TransfoXLLMHeadModel
    from .recipes.common import load_pretrained
    from .recipes.transfo_xl import evaluate_transfo_xl, stream_rows, token_stream

    model, tokenizer = load_pretrained(model_dir, expected=TransfoXLLMHeadModel, device=device)
    recipe = saved_recipe(model_dir)
    segment_len = int(max_len or recipe.get("max_len") or 32)
    per_row = int(recipe.get("segments_per_row") or 4)
    rows = stream_rows(token_stream(load_documents(data), tokenizer), segment_len * per_row)
    if max_rows is not None:
        rows = rows[:max_rows]
    n = int(rows.size(0))
    if n == 0:
        raise ValueError(
            f"{data}: fewer tokens than one row of {segment_len * per_row} "
            f"({per_row} segments of {segment_len})"
        )
    sums = {"lm_loss": 0.0, "lm_loss_no_memory": 0.0}
    count = 0
    for sl in _batches(n, batch_size, "segments with memory", progress):
        part = rows[sl]
        scores = evaluate_transfo_xl(model, part, segment_len=segment_len, batch_size=batch_size)
        tokens = part.size(0) * (part.size(1) - 1)
        for k in sums:
            sums[k] += scores[k] * tokens
        count += tokens
    loss, alone = sums["lm_loss"] / count, sums["lm_loss_no_memory"] / count
    return {
        "rows": n,
        "segment_len": segment_len,
        "mem_len": model.config.mem_len,
        "lm_loss": loss,
        "perplexity": math.exp(min(loss, 50.0)),
        "lm_loss_no_memory": alone,
        "perplexity_no_memory": math.exp(min(alone, 50.0)),
        "tokens": count,
    }


def evaluate_folder(
    model_dir: str | Path,
    data: str,
    *,
    seed: int = 0,
    batch_size: int = 64,
    max_len: int | None = None,
    pll: bool = False,
    max_rows: int | None = None,
    device: str | None = None,
    progress: bool = True,
) -> dict[str, Any]:
    """The held-out scores of the model in ``model_dir`` on the text ``data`` (see the module
    docstring); ``ValueError``/``FileNotFoundError`` with one line for what it cannot do."""
    from .data.text_files import load_documents
    from .device import get_device
    from .recipes.common import load_pretrained, saved_architecture
    from .recipes.registry import with_article

    model_dir = Path(model_dir)
    dev = get_device(device)  # a device that is not one: said before anything is read
    architecture = saved_architecture(model_dir)  # (no config.json, a Hugging Face folder: one line)
    own = {"ElmoLanguageModel": (_elmo, "biLM"), "TransfoXLLMHeadModel": (_transfo_xl, "LM with memory")}
    if (model_dir / "labels.json").is_file():  # a `course finetune` folder: a classifier or tagger
        raise ValueError(
            f"{model_dir} holds a fine-tuned {architecture}: course eval scores the language models "
            "`course train` writes; the fine-tune's held-out accuracy is in its metrics.json"
        )
    if pll:
        from .recipes.common import is_masked_lm

        if not is_masked_lm(architecture):
            raise ValueError(
                f"--pll: the pseudo-log-likelihood masks each token in turn, so it scores masked LMs; "
                f"{model_dir} holds {with_article(architecture)} (drop --pll for its own scores)"
            )
    if architecture in own:
        score, kind = own[architecture]
        scores = score(
            model_dir,
            data,
            batch_size=batch_size,
            max_len=max_len,
            max_rows=max_rows,
            device=dev,
            progress=progress,
        )
        rows = scores.pop("rows")
        return {
            "model": str(model_dir),
            "architecture": architecture,
            "objective": kind,
            "data": data,
            "rows": rows,
            **scores,
        }
    if not architecture.startswith(("Bert", "Albert", "Roberta", "XLNet")):
        raise ValueError(
            f"{model_dir} holds {with_article(architecture)}: course eval scores the BERT family, the "
            "causal BERT, XLNet, ELMo and Transformer-XL"
        )
    model, tokenizer = load_pretrained(model_dir, device=dev)
    documents = load_documents(data)
    examples = _rows(model_dir, documents, tokenizer, max_len, model)
    if max_rows is not None:
        examples = {k: v[:max_rows] for k, v in examples.items()}
    n = int(examples["input_ids"].size(0))
    if n == 0:
        raise ValueError(f"{data}: no rows to score")
    unknown = _unknown_fraction(tokenizer, examples)
    if unknown >= MOSTLY_UNKNOWN:
        raise ValueError(
            f"{data}: {100 * unknown:.0f}% of the text's tokens are unknown to the model's tokenizer "
            "([UNK]): its scores would measure nothing; give text in the language the model was trained on"
        )
    if architecture.startswith("XLNet"):
        scores = _permutation_lm(model, examples, seed=seed, batch_size=batch_size, progress=progress)
        kind = "permutation LM"
    elif getattr(model.config, "is_decoder", False):
        scores = _causal_lm(model, examples, batch_size=batch_size, progress=progress)
        kind = "causal LM"
    else:
        scores = _masked_lm(
            model, tokenizer, examples, seed=seed, batch_size=batch_size, pll=pll, progress=progress
        )
        kind = "masked LM"
    return {
        "model": str(model_dir),
        "architecture": architecture,
        "objective": kind,
        "data": data,
        "rows": n,
        "seed": seed,
        **scores,
    }


def _cmd(args: argparse.Namespace) -> int:
    from .data.text_files import reading_encoding
    from .train import progress_enabled

    progress = progress_enabled()
    try:
        if args.json:
            from .files import check_output_path

            check_output_path(args.json, "--json", folder=False)
        with reading_encoding(args.encoding):
            result = evaluate_folder(
                args.model,
                args.data,
                seed=args.seed,
                batch_size=args.batch_size,
                max_len=args.max_len,
                pll=args.pll,
                max_rows=args.max_rows,
                device=args.device,
                progress=progress,
            )
    except (ValueError, FileNotFoundError) as exc:
        print(f"course eval: {exc}", file=sys.stderr)
        return 2
    text = json.dumps(result, indent=1)
    if args.json:
        from .files import atomic_write_text

        atomic_write_text(args.json, text + "\n")
    print(text)
    return 0


def register(sub: Any) -> None:
    from .recipes.common import positive

    p = sub.add_parser(
        "eval",
        help="score a model trained by `course train` on held-out text (JSON)",
        description=__doc__.split("\n\n")[0],
    )
    p.add_argument("model", metavar="MODEL_DIR", help="a folder written by `course train`")
    p.add_argument(
        "--data", required=True, metavar="PATH_OR_GLOB", help="held-out text: file, folder or glob"
    )
    p.add_argument("--seed", type=int, default=0, help="the masking / order seed (default 0)")
    p.add_argument("--batch-size", type=positive(int), default=64)
    p.add_argument("--max-len", type=positive(int), default=None, help="row length (default: the training's)")
    p.add_argument("--max-rows", type=positive(int), default=None, help="score only the first N rows")
    p.add_argument("--pll", action="store_true", help="masked LMs: also the pseudo-log-likelihood (slow)")
    p.add_argument("--encoding", default=None, help="the text files' encoding (default utf-8)")
    p.add_argument("--device", default=None, help="cpu, cuda, cuda:1, mps")
    p.add_argument("--json", default=None, metavar="FILE", help="also write the JSON to FILE")
    p.set_defaults(func=_cmd)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="course")
    sub = parser.add_subparsers(dest="command")
    register(sub)
    args = parser.parse_args(["eval", *(sys.argv[1:] if argv is None else argv)])
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
