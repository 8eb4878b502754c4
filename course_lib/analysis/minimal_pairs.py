r"""Minimal pairs: which of two sentences that differ in a few tokens a masked LM prefers.

:func:`minimal_pair_preference` scores each pair without any fine-tuning: the differing
positions are masked in one shared input and the two fillings' log-probabilities compared
(Goldberg 2019's test of subject-verb agreement, generalised). Chapter 3 runs it on word-order
pairs (:func:`~course_lib.recipes.bert.word_order_pairs`) and agreement pairs
(:func:`~course_lib.data.agreement_pairs`).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from ..data import special_ids
from ..train import model_device

__all__ = ["minimal_pair_preference"]


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
