r"""Masked-language-model masking: which tokens the model must fill in, static or dynamic.

**Masking.** Each non-special token is chosen independently with probability
:math:`p = 0.15`. Each chosen token then gets *one* categorical draw:

.. math::

    a \sim \mathrm{Categorical}(0.8, 0.1, 0.1) \quad\to\quad
    \texttt{[MASK]},\ \text{a random non-special token},\ \text{unchanged}.

One draw per token makes the split exactly 80/10/10 in expectation; deciding "random" and
"keep" with two independent coins gives about 81/9/10. The label is the original id at
chosen positions and ``-100`` (ignored by the loss) elsewhere. The 10% "unchanged" and
10% "random" keep the model from learning that only ``[MASK]`` positions matter, since
fine-tuning inputs never contain ``[MASK]``.

**Static vs dynamic masking.** BERT masked each sequence once while preprocessing (static;
its data was duplicated 10 times with 10 different masks: ``static_copies=10``). RoBERTa
draws a new mask every time a sequence is seen (dynamic). :class:`MaskedLMData` does both:
the mask of epoch :math:`e` is version :math:`e \bmod c` for static masking with :math:`c`
copies, and version :math:`e` for dynamic masking.

No Python loop runs over tokens: masking is three tensor draws.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

import torch
from torch import Tensor

from ..models.bert import IGNORE_INDEX

__all__ = [
    "IGNORE_INDEX",
    "MLM_PROBABILITY",
    "MASKED",
    "RANDOM",
    "KEPT",
    "as_generator",
    "mask_tokens",
    "MLMMasker",
    "MaskedLMData",
]

#: BERT's share of tokens chosen for prediction: the one place the course states it
MLM_PROBABILITY = 0.15

# what happened to a chosen token (``mask_tokens(..., return_actions=True)``); 0 = not chosen
MASKED, RANDOM, KEPT = 1, 2, 3


def as_generator(rng: Any) -> torch.Generator:
    """A ``torch.Generator`` from a seed, a torch generator, a numpy generator or None."""
    if isinstance(rng, torch.Generator):
        return rng
    g = torch.Generator()
    if rng is None:
        g.seed()
    elif isinstance(rng, int):
        g.manual_seed(rng)
    elif hasattr(rng, "integers"):  # numpy.random.Generator
        g.manual_seed(int(rng.integers(0, 2**63 - 1)))
    elif hasattr(rng, "getrandbits"):  # random.Random
        g.manual_seed(rng.getrandbits(63))
    else:
        raise TypeError(
            f"rng must be an int seed, a torch/numpy Generator or random.Random, got {type(rng).__name__}"
        )
    return g


def _as_id_tensor(ids: Any) -> Tensor:
    t = ids if isinstance(ids, Tensor) else torch.as_tensor(list(ids), dtype=torch.long)
    return t.to(torch.long).reshape(-1)


def mask_tokens(
    input_ids: Tensor,
    *,
    vocab_size: int,
    mask_token_id: int,
    special_ids: Sequence[int] | Tensor | None = None,
    special_mask: Tensor | None = None,
    mlm_probability: float = MLM_PROBABILITY,
    mask_replace_prob: float = 0.8,
    random_replace_prob: float = 0.1,
    generator: torch.Generator | None = None,
    return_actions: bool = False,
) -> tuple[Tensor, Tensor] | tuple[Tensor, Tensor, Tensor]:
    r"""BERT's masking of a batch of ids: returns ``(inputs, labels)`` (and ``actions``).

    Args:
        input_ids: ``[..., seq_len]`` token ids (not modified).
        vocab_size: size of the vocabulary (random replacements come from ``[0, vocab_size)``).
        mask_token_id: id of ``[MASK]``; never chosen and never a random replacement.
        special_ids: ids never chosen and never drawn as replacements ([CLS], [SEP], [PAD], ...).
        special_mask: boolean, same shape as ``input_ids``: extra positions never chosen.
            At least one of ``special_ids`` / ``special_mask`` must be given (``special_ids=()``
            makes every ordinary token eligible).
        mlm_probability: chance that an eligible token is chosen (0.15).
        mask_replace_prob, random_replace_prob: the categorical split of chosen tokens
            (0.8 -> ``[MASK]``, 0.1 -> random token, the rest unchanged).
        generator: a ``torch.Generator`` for reproducible masks.
        return_actions: also return ``actions``: 0 not chosen, :data:`MASKED`,
            :data:`RANDOM`, :data:`KEPT`.

    ``labels`` holds the original id where a token was chosen and ``-100`` elsewhere.
    """
    if special_ids is None and special_mask is None:
        raise ValueError(
            "say which tokens are special (special_ids=[cls, sep, pad, ...] and/or special_mask); "
            "special_ids=() allows every token"
        )
    if not 0.0 <= mlm_probability <= 1.0:
        raise ValueError(f"mlm_probability must lie in [0, 1], got {mlm_probability}")
    if (
        mask_replace_prob < 0
        or random_replace_prob < 0
        or mask_replace_prob + random_replace_prob > 1.0 + 1e-12
    ):
        raise ValueError(
            f"mask_replace_prob={mask_replace_prob} and random_replace_prob={random_replace_prob} must be "
            "non-negative and sum to at most 1 (the rest stays unchanged)"
        )
    if not 0 <= mask_token_id < vocab_size:
        raise ValueError(f"mask_token_id={mask_token_id} must lie in [0, vocab_size={vocab_size})")
    device = input_ids.device
    specials = torch.unique(
        torch.cat(
            [_as_id_tensor(special_ids if special_ids is not None else []), torch.tensor([mask_token_id])]
        )
    )
    eligible = ~torch.isin(input_ids, specials.to(device))
    if special_mask is not None:
        if special_mask.shape != input_ids.shape:
            raise ValueError(
                f"special_mask must have the shape of input_ids {tuple(input_ids.shape)}, got "
                f"{tuple(special_mask.shape)}"
            )
        eligible &= ~special_mask.to(device=device, dtype=torch.bool)
    # ordinary tokens that may replace a chosen one
    vocab = torch.arange(vocab_size)
    candidates = vocab[~torch.isin(vocab, specials)]
    if candidates.numel() == 0:
        raise ValueError("every id in the vocabulary is special: nothing to draw random replacements from")

    gdev = generator.device if generator is not None else device
    shape = input_ids.shape
    chosen = (torch.rand(shape, generator=generator, device=gdev).to(device) < mlm_probability) & eligible
    u = torch.rand(shape, generator=generator, device=gdev).to(device)  # the one categorical draw
    pick = torch.randint(candidates.numel(), shape, generator=generator, device=gdev).to(device)
    action = torch.where(
        u < mask_replace_prob, MASKED, torch.where(u < mask_replace_prob + random_replace_prob, RANDOM, KEPT)
    )
    action = torch.where(chosen, action, 0)

    inputs = torch.where(action == MASKED, mask_token_id, input_ids)
    inputs = torch.where(action == RANDOM, candidates.to(device)[pick], inputs)
    labels = torch.where(chosen, input_ids, IGNORE_INDEX)
    if return_actions:
        return inputs, labels, action
    return inputs, labels


@dataclass
class MLMMasker:
    """The masking recipe in one object: ``masker(input_ids, generator=g) -> (inputs, labels)``."""

    vocab_size: int  # size of the vocabulary
    mask_token_id: int  # id of [MASK]
    special_ids: tuple[int, ...] = ()  # ids never chosen nor drawn: [CLS], [SEP], [PAD], [UNK], ...
    mlm_probability: float = MLM_PROBABILITY  # share of tokens chosen
    mask_replace_prob: float = 0.8  # chosen -> [MASK]
    random_replace_prob: float = 0.1  # chosen -> random ordinary token (the rest stay unchanged)

    def __post_init__(self):
        self.special_ids = tuple(int(i) for i in self.special_ids)
        # validate once, on a dummy input
        mask_tokens(
            torch.zeros(1, 1, dtype=torch.long), **self._kwargs(), generator=torch.Generator().manual_seed(0)
        )

    def _kwargs(self) -> dict:
        """Every field, as :func:`mask_tokens`'s keyword arguments (they share their names)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def __call__(
        self,
        input_ids: Tensor,
        *,
        generator: torch.Generator | None = None,
        special_mask: Tensor | None = None,
        return_actions: bool = False,
    ):
        return mask_tokens(
            input_ids,
            **self._kwargs(),
            special_mask=special_mask,
            generator=generator,
            return_actions=return_actions,
        )


# ---------------------------------------------------------------------------------------
# Static and dynamic masking of a whole data set
# ---------------------------------------------------------------------------------------


class MaskedLMData:
    """Packed examples plus a masking policy; iterate over it for batches (one pass = one epoch).

    Args:
        examples: dict of ``[n, seq_len]`` tensors (``input_ids`` and optionally
            ``token_type_ids``, ``attention_mask``) and ``[n]`` tensors (e.g.
            ``next_sentence_label``), as returned by :func:`pack_pairs` / :func:`pack_stream`.
        masker: the :class:`MLMMasker` (its ``special_ids`` must include the padding id).
        masking: ``"static"`` (BERT: masks drawn once, reused every epoch), ``"dynamic"``
            (RoBERTa: a new mask every epoch) or ``"none"`` (a left-to-right language model:
            the inputs unmasked, every real token a label; the model shifts them).
        static_copies: with static masking, how many differently masked copies cycle
            (BERT duplicated its data 10 times).
        batch_size, shuffle, drop_last: batching of each pass.
        seed: seeds both the masks (version ``v`` uses seed ``(seed, v)``) and the shuffling.

    ``data.epoch_view(e)`` returns the whole masked dataset of epoch ``e``: what the batches
    of that epoch are cut from. Batches are dicts with ``input_ids`` (masked), ``labels`` and
    the other example fields, ready for ``model(**batch)`` and
    :func:`~course_lib.objectives.losses.pretraining_loss`.
    """

    def __init__(
        self,
        examples: Mapping[str, Tensor],
        *,
        masker: MLMMasker,
        masking: str = "dynamic",
        static_copies: int = 1,
        batch_size: int = 32,
        shuffle: bool = True,
        drop_last: bool = False,
        seed: int = 0,
    ):
        if masking not in ("static", "dynamic", "none"):
            raise ValueError(
                f"masking must be 'static' (BERT), 'dynamic' (RoBERTa) or 'none' (causal LM), got {masking!r}"
            )
        if static_copies < 1:
            raise ValueError(f"static_copies must be at least 1, got {static_copies}")
        if batch_size < 1:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        if "input_ids" not in examples:
            raise ValueError("examples need an 'input_ids' tensor [n, seq_len]")
        n = examples["input_ids"].size(0)
        for k, v in examples.items():
            if v.size(0) != n:
                raise ValueError(f"examples[{k!r}] has {v.size(0)} rows, input_ids has {n}")
        self.examples = dict(examples)
        self.masker = masker
        self.masking = masking
        self.static_copies = static_copies
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.drop_last = drop_last
        self.seed = seed
        self.epoch = 0  # the next pass
        self._cache: dict[int, tuple[Tensor, Tensor]] = {}

    def __len__(self) -> int:
        """Batches per epoch."""
        n = self.examples["input_ids"].size(0)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def mask_version(self, epoch: int) -> int:
        return epoch % self.static_copies if self.masking == "static" else epoch

    def _masked(self, version: int) -> tuple[Tensor, Tensor]:
        if version in self._cache:
            return self._cache[version]
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + version)
        ids = self.examples["input_ids"]
        special = None
        if "attention_mask" in self.examples:
            special = self.examples["attention_mask"] == 0  # padding is never chosen, whatever its id
        out = self.masker(ids, generator=g, special_mask=special)
        if self.masking == "static":
            self._cache[version] = out
        return out

    def epoch_view(self, epoch: int) -> dict[str, Tensor]:
        """All examples with the masks of ``epoch`` (``input_ids`` masked, plus ``labels``)."""
        view = dict(self.examples)
        if self.masking == "none":
            ids = view["input_ids"]
            real = view.get("attention_mask", torch.ones_like(ids)).bool()
            view["labels"] = ids.masked_fill(~real, -100)
            return view
        view["input_ids"], view["labels"] = self._masked(self.mask_version(epoch))
        return view

    def batches(self, epoch: int) -> Iterator[dict[str, Tensor]]:
        """The batches of one epoch (shuffled with seed ``(seed, epoch)`` when ``shuffle``)."""
        view = self.epoch_view(epoch)
        n = view["input_ids"].size(0)
        order = (
            torch.randperm(n, generator=torch.Generator().manual_seed(self.seed + 7919 * (epoch + 1)))
            if self.shuffle
            else torch.arange(n)
        )
        stop = n - n % self.batch_size if self.drop_last else n
        for i in range(0, stop, self.batch_size):
            sel = order[i : i + self.batch_size]
            yield {k: v[sel] for k, v in view.items()}

    def __iter__(self) -> Iterator[dict[str, Tensor]]:
        epoch = self.epoch
        self.epoch += 1
        return self.batches(epoch)
