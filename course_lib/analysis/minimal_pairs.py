r"""Minimal pairs: which of two sentences that differ in a few tokens a masked LM prefers.

:func:`minimal_pair_preference` scores each pair without any fine-tuning: the differing
positions are masked in one shared input and the two fillings' log-probabilities compared
(Goldberg 2019's test of subject-verb agreement, generalised). Chapter 3 runs it on word-order
pairs (:func:`word_order_pairs`) and agreement pairs
(:func:`~course_lib.data.agreement_pairs`).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from ..data import detokenize, special_ids
from ..train import model_device

__all__ = ["minimal_pair_preference", "word_order_pairs", "labelled_pairs"]


@torch.no_grad()
def minimal_pair_preference(
    model: nn.Module, tokenizer, pairs: Sequence[tuple[str, str]], *, batch_size: int = 256
) -> tuple[float, int]:
    r"""How often a masked LM prefers the first member of each minimal pair: ``(share, n_used)``.

    Both sentences are tokenized; where they have the same length, the positions :math:`D`
    where they differ are masked in one shared input, and the pair counts as preferred when
    :math:`\sum_{d \in D} \log p(x^{good}_d \mid \tilde x) > \sum_{d \in D} \log p(x^{bad}_d \mid \tilde x)`
    (Goldberg 2019's test of agreement, generalised). Pairs whose tokenizations differ in
    length are skipped; ``n_used`` says how many were scored.
    """
    mask_id = special_ids(tokenizer)["mask"]
    good_ids, bad_ids, masked = [], [], []
    for good, bad in pairs:
        g, b = tokenizer.encode(good).ids, tokenizer.encode(bad).ids
        if len(g) != len(b) or g == b:
            continue
        g, b = torch.tensor(g), torch.tensor(b)
        good_ids.append(g)
        bad_ids.append(b)
        masked.append(torch.where(g != b, mask_id, g))
    if not masked:
        raise ValueError("no pair has two tokenizations of equal length that differ: nothing to score")
    device = model_device(model)
    was_training = model.training
    model.eval()
    wins = 0
    for i in range(0, len(masked), batch_size):
        sl = slice(i, i + batch_size)
        lengths = torch.tensor([len(x) for x in masked[sl]])
        pad = torch.nn.utils.rnn.pad_sequence
        x = pad(masked[sl], batch_first=True, padding_value=special_ids(tokenizer)["pad"])
        attn = (torch.arange(x.size(1))[None, :] < lengths[:, None]).long()
        logits = model(input_ids=x.to(device), attention_mask=attn.to(device)).mlm_logits
        logp = torch.log_softmax(logits.float(), -1).cpu()
        g = pad(good_ids[sl], batch_first=True)
        b = pad(bad_ids[sl], batch_first=True)
        diff = (g != b) & attn.bool()
        score_g = (logp.gather(-1, g[..., None])[..., 0] * diff).sum(1)
        score_b = (logp.gather(-1, b[..., None])[..., 0] * diff).sum(1)
        wins += int((score_g > score_b).sum())
    model.train(was_training)
    return wins / len(masked), len(masked)


def word_order_pairs(sentences: Sequence[Any], *, seed: int = 0) -> list[tuple[str, str]]:
    """``(original, corrupted)`` minimal pairs: two adjacent words of each sentence swapped.

    ``sentences``: Sentence objects or token lists (the final punctuation mark stays in
    place; sentences with fewer than three words before it are skipped). A word-order
    acceptability task in the spirit of CoLA, built from any text.
    """
    rng = random.Random(seed)
    out = []
    for s in sentences:
        toks = list(s.tokens if hasattr(s, "tokens") else s)
        body, end = (toks[:-1], toks[-1:]) if toks and not any(c.isalnum() for c in toks[-1]) else (toks, [])
        candidates = [i for i in range(len(body) - 1) if body[i].lower() != body[i + 1].lower()]
        if len(body) < 3 or not candidates:
            continue
        i = rng.choice(candidates)
        bad = body[:i] + [body[i + 1], body[i]] + body[i + 2 :]
        out.append((detokenize(body + end), detokenize(bad + end)))
    return out


def labelled_pairs(pairs: Sequence[tuple[str, str]], *, seed: int = 0) -> list[tuple[str, int]]:
    """Minimal pairs -> shuffled ``(text, label)`` items: 1 for the first member, 0 for the second."""
    items = [(good, 1) for good, _ in pairs] + [(bad, 0) for _, bad in pairs]
    random.Random(seed).shuffle(items)
    return items
