"""What a distilled tagger learned from its teacher (chapter 7): the word-level tag
distributions of two taggers side by side, how often they agree, the teacher's ranking of
the wrong tags on real words, and a like-for-like inference timing."""

from __future__ import annotations

import time
from collections.abc import Sequence

import torch
from torch import Tensor, nn

from ..objectives import tagging_inputs
from ..train import model_device

__all__ = ["word_logits", "tag_agreement", "inference_seconds"]


@torch.no_grad()
def word_logits(
    model: nn.Module, tokenizer, sentences: Sequence[Sequence[str]], *, batch_size: int = 256
) -> list[Tensor]:
    """One ``[words, tags]`` tensor of logits per sentence, read at each word's first piece
    (where a tagger predicts; eval mode, on the CPU)."""
    device = model_device(model)
    was_training = model.training
    model.eval()
    out: list[Tensor] = []
    try:
        for i in range(0, len(sentences), batch_size):
            chunk = [list(s) for s in sentences[i : i + batch_size]]
            enc = tagging_inputs(tokenizer, chunk, max_len=model.config.max_len)
            logits = model(
                enc["input_ids"].to(device),
                enc["attention_mask"].to(device),
                enc["token_type_ids"].to(device),
            ).logits.cpu()
            for r, words in enumerate(chunk):
                index = enc["word_index"][r]
                keep = index >= 0
                rows = torch.zeros(len(words), logits.size(-1), dtype=logits.dtype)
                rows[index[keep]] = logits[r][keep]
                out.append(rows[: int(keep.sum())] if int(keep.sum()) < len(words) else rows)
    finally:
        model.train(was_training)
    return out


def tag_agreement(a: nn.Module, b: nn.Module, tokenizer, sentences: Sequence[Sequence[str]]) -> float:
    """Share of words to which the two taggers give the same tag (a student's *fidelity* to its
    teacher, whatever the true tags)."""
    same = total = 0
    for x, y in zip(word_logits(a, tokenizer, sentences), word_logits(b, tokenizer, sentences)):
        same += int((x.argmax(-1) == y.argmax(-1)).sum())
        total += x.size(0)
    return same / max(total, 1)


@torch.no_grad()
def inference_seconds(
    model: nn.Module, tokenizer, sentences: Sequence[Sequence[str]], *, repeats: int = 3, batch_size: int = 64
) -> float:
    """Best of ``repeats`` wall-clock seconds to tag ``sentences`` (tokenised once, beforehand)
    in batches of ``batch_size``: a benchmark to compare models in one run, never an assertion."""
    device = model_device(model)
    chunks = [
        {
            k: v.to(device)
            for k, v in tagging_inputs(
                tokenizer, [list(s) for s in sentences[i : i + batch_size]], max_len=model.config.max_len
            ).items()
            if k != "word_index"
        }
        for i in range(0, len(sentences), batch_size)
    ]
    was_training = model.training
    model.eval()
    best = float("inf")
    try:
        for _ in range(repeats):
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            t0 = time.perf_counter()
            for enc in chunks:
                model(enc["input_ids"], enc["attention_mask"], enc["token_type_ids"])
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            best = min(best, time.perf_counter() - t0)
    finally:
        model.train(was_training)
    return best
