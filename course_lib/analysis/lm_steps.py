"""The checks and steps every scoring and generation routine of :mod:`course_lib.analysis`
shares: which kind of LM a model is, checked token ids and right-padded batches on the model's
device, the model's LM logits, and the choice of the next token (greedy or sampled)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from ..nn.checks import check_token_batch
from ..train import model_device

__all__ = [
    "is_causal",
    "need_causal",
    "need_masked",
    "vocab_id",
    "ids_list",
    "lm_batch",
    "lm_logits",
    "next_tokens",
    "ban_tokens",
]


def is_causal(model: nn.Module) -> bool:
    """Whether ``model`` is a left-to-right LM (``config.is_decoder``), not a masked one."""
    return bool(getattr(model.config, "is_decoder", False))


def need_causal(model: nn.Module, what: str) -> None:
    if not is_causal(model):
        raise ValueError(
            f"{what} needs a left-to-right (causal) LM, config.is_decoder=True, e.g. BertLMHeadModel; "
            f"got a masked LM ({type(model).__name__}): use pseudo_log_likelihood / fill_masks for it"
        )


def need_masked(model: nn.Module, what: str) -> None:
    if is_causal(model):
        raise ValueError(
            f"{what} needs a masked LM (e.g. BertForMaskedLM); got a left-to-right LM "
            f"({type(model).__name__}, config.is_decoder=True): use sequence_log_likelihood / "
            "sample_causal for it"
        )


def vocab_id(model: nn.Module, token_id: int | None, name: str) -> int:
    if token_id is None:
        raise ValueError(f"{name} is required for a masked LM (the id of [MASK])")
    size = model.config.vocab_size
    if not 0 <= int(token_id) < size:
        raise ValueError(f"{name}={token_id} must lie in [0, vocab_size={size})")
    return int(token_id)


def ids_list(model: nn.Module, ids: Sequence[int], name: str, *, allow_empty: bool = False) -> list[int]:
    ids = [int(i) for i in ids]
    if not ids and not allow_empty:
        raise ValueError(f"{name} is empty: give at least one token id")
    size = model.config.vocab_size
    bad = [i for i in ids if not 0 <= i < size]
    if bad:
        raise ValueError(f"{name} holds ids outside [0, vocab_size={size}): {bad[:5]}")
    return ids


def lm_batch(
    model: nn.Module, input_ids: Tensor, attention_mask: Tensor | None, *, single: bool = False
) -> tuple[Tensor, Tensor, Tensor]:
    """Checked ``(input_ids [B, T], attention_mask [B, T] long, lengths [B])`` on the model's
    device. ``single``: one sequence, ``[T]`` or ``[1, T]``."""
    if not isinstance(input_ids, Tensor):
        raise ValueError(f"input_ids must be a tensor of token ids, got {type(input_ids).__name__}")
    if input_ids.dim() == 1 and single:
        input_ids = input_ids[None]
        attention_mask = None if attention_mask is None else attention_mask.reshape(1, -1)
    check_token_batch(input_ids)
    if single and input_ids.size(0) != 1:
        raise ValueError(f"give one sequence ([seq_len] or [1, seq_len]), got shape {tuple(input_ids.shape)}")
    if input_ids.numel() == 0:
        raise ValueError(f"input_ids is empty (shape {tuple(input_ids.shape)})")
    if attention_mask is None:
        attention_mask = torch.ones_like(input_ids)
    if attention_mask.shape != input_ids.shape:
        raise ValueError(
            f"attention_mask must have the shape of input_ids {tuple(input_ids.shape)} "
            f"(1 = real token, 0 = padding), got {tuple(attention_mask.shape)}"
        )
    if not ((attention_mask == 0) | (attention_mask == 1)).all():
        raise ValueError("attention_mask must hold only 1 (real token) and 0 (padding)")
    real = attention_mask.bool()
    if not real[:, 0].all() or (real[:, 1:] & ~real[:, :-1]).any():
        raise ValueError(
            "attention_mask must be right-padded: in every row the real tokens (1) come first, "
            "the padding (0) after them, and the first token is real"
        )
    device = model_device(model)
    return input_ids.to(device), attention_mask.long().to(device), real.sum(1).to(device)


def lm_logits(model: nn.Module, **inputs: Tensor) -> Tensor:
    """``[batch, seq, vocab]`` float logits: a causal LM's next-token logits (position ``t``
    scores token ``t + 1``) or a masked LM's logits (position ``t`` scores token ``t``)."""
    out = model(**inputs)
    return (out.logits if is_causal(model) else out.mlm_logits).float()


def next_tokens(
    logits: Tensor, *, temperature: float = 0.0, generator: torch.Generator | None = None
) -> Tensor:
    r"""One token per row of ``logits`` ``[rows, vocab]``: the most likely one
    (``temperature=0``) or a sample from :math:`\mathrm{softmax}(\text{logits} / \tau)`.

    Set a banned token's logit to ``-inf`` before the call. Sampling runs on the CPU, so a
    seeded CPU ``generator`` gives the same tokens whatever device the model is on.
    """
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0 (0 = greedy), got {temperature}")
    if temperature == 0:
        return logits.argmax(-1)
    probs = torch.softmax(logits.float().cpu() / temperature, -1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1).to(logits.device)


def ban_tokens(scores: Tensor, banned: Sequence[int], *, fill: float = float("-inf")) -> Tensor:
    """``scores`` with the ``banned`` token ids' entries (last axis) set to ``fill``, in place."""
    if banned:
        scores[..., list(banned)] = fill
    return scores
