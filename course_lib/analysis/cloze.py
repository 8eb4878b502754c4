r"""What a language model can fill in: one hidden word with one side of its context taken away,
and text written one token at a time.

* :func:`hidden_word_accuracy`: a masked LM sees the sentence with one word replaced by
  ``[MASK]``, with both sides visible or one side hidden. A side is hidden either by
  replacing its words with ``[MASK]`` (the length stays, but a run of ``[MASK]``\ s is an
  input the model never saw in training) or by the attention mask (those positions are
  simply not attended to, as if they were padding). A left-to-right model
  (``config.is_decoder``) reads only the left side by construction: it predicts the word
  from the positions before it.
* :func:`generate_greedy`: a left-to-right model writes the most likely next token; a masked
  LM is made to do the same by appending ``[MASK]`` and filling it, one token at a time.
* :func:`top_predictions`: the most probable tokens a masked LM puts at chosen positions.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

import torch
from torch import Tensor, nn

from ..data.tokenizers import special_ids
from ..objectives.pretraining import mlm_logits
from ..train import model_device

__all__ = [
    "SIDES",
    "hidden_word_accuracy",
    "generate_greedy",
    "generation_statistics",
    "is_causal",
    "top_predictions",
]

SIDES = ("both sides visible", "right side hidden", "left side hidden")


def is_causal(model: nn.Module) -> bool:
    """Whether ``model`` is a left-to-right LM (its config says ``is_decoder``)."""
    return bool(getattr(model.config, "is_decoder", False))


# the spelling the functions below call: studies hash those functions' code (03_bert's extra
# sources), so the call sites keep it and the public name is an alias, not a rename
_is_causal = is_causal


def _logits(model: nn.Module, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
    out = model(input_ids=input_ids, attention_mask=attention_mask)
    return out.logits if _is_causal(model) else out.mlm_logits


@torch.no_grad()
def hidden_word_accuracy(
    model: nn.Module, tokenizer, sentences: Sequence[str], *, hide: str = "mask", seed: int = 0
) -> dict[str, float]:
    """Top-1 accuracy on one hidden word per sentence (a random position among ``1 .. len-3``
    of the encoded sentence: not ``[CLS]``, the final "." or ``[SEP]``), for each of :data:`SIDES`.

    ``hide``: ``"mask"`` (the hidden side's tokens become ``[MASK]``) or ``"attention"``
    (they are left out of attention; ``[CLS]`` and the final ``[SEP]`` stay visible either
    way). For a left-to-right model only ``"right side hidden"`` is defined (its own way of
    reading) and returned.
    """
    if hide not in ("mask", "attention"):
        raise ValueError(f"hide must be 'mask' or 'attention', got {hide!r}")
    if not sentences:
        raise ValueError("hidden_word_accuracy needs at least one sentence")
    ids_of = special_ids(tokenizer)
    device = model_device(model)
    g = torch.Generator().manual_seed(seed)
    encoded = [e.ids for e in tokenizer.encode_batch(list(sentences))]
    if min(len(e) for e in encoded) < 4:
        raise ValueError("every sentence needs at least two tokens besides [CLS] and [SEP]")
    where = [int(torch.randint(1, len(ids) - 2, (), generator=g)) for ids in encoded]
    targets = torch.tensor([ids[p] for ids, p in zip(encoded, where)])
    m = ids_of["mask"]
    sides = ("right side hidden",) if _is_causal(model) else SIDES
    result = {}
    for side in sides:
        seqs, visible = [], []
        for ids, p in zip(encoded, where):
            n = len(ids)
            keep = [True] * n
            if side == "right side hidden":
                keep[p + 1 : n - 1] = [False] * (n - 2 - p)
            elif side == "left side hidden":
                keep[1:p] = [False] * (p - 1)
            x = list(ids)
            if not _is_causal(model):
                x[p] = m
                if hide == "mask":
                    x = [t if k else m for t, k in zip(x, keep)]
                    keep = [True] * n
            seqs.append(torch.tensor(x))
            visible.append(torch.tensor(keep))
        x = nn.utils.rnn.pad_sequence(seqs, batch_first=True, padding_value=ids_of["pad"]).to(device)
        att = nn.utils.rnn.pad_sequence(visible, batch_first=True, padding_value=False).long().to(device)
        if _is_causal(model):
            att = (x != ids_of["pad"]).long()  # it never looks right anyway
        logits = _logits(model, x, att)
        read_at = torch.tensor(where) - (1 if _is_causal(model) else 0)  # a causal LM predicts t from t-1
        pred = logits[torch.arange(len(seqs)), read_at.to(device)].argmax(-1).cpu()
        result[side] = (pred == targets).float().mean().item()
    return result


@torch.no_grad()
def generate_greedy(model: nn.Module, tokenizer, prompt: str, n_tokens: int) -> str:
    """Continue ``prompt`` by ``n_tokens`` tokens, each the most likely one (special tokens
    excluded). A left-to-right model reads ``[CLS] prompt`` and scores the next token; a
    masked LM reads ``[CLS] prompt [MASK] [SEP]`` and fills the ``[MASK]``."""
    if n_tokens < 1:
        raise ValueError(f"n_tokens must be positive, got {n_tokens}")
    ids_of = special_ids(tokenizer)
    device = model_device(model)
    x = tokenizer.encode(prompt).ids[:-1]  # drop the final [SEP]
    banned = sorted(set(ids_of.values()))
    for _ in range(n_tokens):
        if _is_causal(model):
            inputs = torch.tensor([x], device=device)
            logits = model(input_ids=inputs).logits[0, -1]
        else:
            inputs = torch.tensor([x + [ids_of["mask"], ids_of["sep"]]], device=device)
            logits = model(input_ids=inputs).mlm_logits[0, len(x)]
        logits[banned] = float("-inf")
        x.append(int(logits.argmax()))
    return tokenizer.decode(x[1:])


def generation_statistics(continuations: Sequence[str]) -> dict[str, float]:
    """Simple measures of generated text, cut into words and punctuation marks:
    ``full_stop_share`` (tokens that are "."), ``distinct_share`` (distinct tokens per
    continuation / tokens) and ``repeat_share`` (tokens equal to the one just before)."""
    words = [re.findall(r"\w+|[^\w\s]", c) for c in continuations]
    total = sum(len(w) for w in words)
    if total == 0:
        raise ValueError("the continuations hold no words")
    return {
        "full_stop_share": sum(w.count(".") for w in words) / total,
        "distinct_share": sum(len(set(w)) for w in words) / total,
        "repeat_share": sum(sum(a == b for a, b in zip(w, w[1:])) for w in words) / total,
    }


@torch.no_grad()
def top_predictions(
    model: nn.Module,
    tokenizer,
    inputs: Mapping[str, Tensor],
    positions: Sequence[int],
    *,
    k: int = 5,
    row: int = 0,
) -> list[list[tuple[str, float]]]:
    """The ``k`` most probable tokens (with probabilities) at each of ``positions`` of row ``row``."""
    device = model_device(model)
    kwargs = {
        key: v[row : row + 1].to(device)
        for key, v in inputs.items()
        if key in ("input_ids", "attention_mask", "token_type_ids")
    }
    was_training = model.training
    model.eval()
    logits = mlm_logits(model, **kwargs)[0]
    model.train(was_training)
    out = []
    for pos in positions:
        p = torch.softmax(logits[pos].float(), -1)
        top = p.topk(k)
        out.append([(tokenizer.id_to_token(int(i)), float(v)) for v, i in zip(top.values, top.indices)])
    return out
