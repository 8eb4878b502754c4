r"""Masked-language-model pre-training data: pairs, packing, masking, batches and the loss.

Everything works on token ids (lists of ``int`` or tensors), so any tokenizer fits.

**Next-sentence pairs** (BERT). For each sentence A that has a successor in its document,
B is the true next sentence with probability 1/2 (label 0) and otherwise a sentence drawn
uniformly from a *different* document (label 1, Hugging Face's convention).

**Packing.** ``[CLS] A [SEP] B [SEP]``, segment ids 0 for ``[CLS] A [SEP]`` and 1 for
``B [SEP]``, attention mask 1 on real tokens. If the pair is longer than ``max_len`` the
longer segment loses tokens from its end, one at a time (BERT's ``truncate_seq_pair``).
RoBERTa packs full sentences from a stream instead (:func:`pack_stream`).

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

No Python loop runs over tokens: masking is three tensor draws; packing scatters all pairs
at once.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor

from .models.bert import IGNORE_INDEX

__all__ = [
    "IGNORE_INDEX",
    "MASKED",
    "RANDOM",
    "KEPT",
    "MLMMasker",
    "mask_tokens",
    "NSPPairs",
    "make_nsp_pairs",
    "truncate_pair_lengths",
    "pack_pairs",
    "pack_pair",
    "pack_stream",
    "collate",
    "DynamicMaskingCollator",
    "MaskedLMData",
    "pretraining_loss",
    "mlm_loss",
]

# what happened to a chosen token (``mask_tokens(..., return_actions=True)``); 0 = not chosen
MASKED, RANDOM, KEPT = 1, 2, 3


def _generator(rng: Any) -> torch.Generator:
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
        raise TypeError(f"rng must be an int seed, a torch/numpy Generator or random.Random, got {type(rng).__name__}")
    return g


def _as_id_tensor(ids: Any) -> Tensor:
    t = ids if isinstance(ids, Tensor) else torch.as_tensor(list(ids), dtype=torch.long)
    return t.to(torch.long).reshape(-1)


# ---------------------------------------------------------------------------------------
# Masking
# ---------------------------------------------------------------------------------------


def mask_tokens(
    input_ids: Tensor,
    *,
    vocab_size: int,
    mask_token_id: int,
    special_ids: Sequence[int] | Tensor | None = None,
    special_mask: Tensor | None = None,
    mlm_probability: float = 0.15,
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
        raise ValueError("say which tokens are special (special_ids=[cls, sep, pad, ...] and/or special_mask); special_ids=() allows every token")
    if not 0.0 <= mlm_probability <= 1.0:
        raise ValueError(f"mlm_probability must lie in [0, 1], got {mlm_probability}")
    if mask_replace_prob < 0 or random_replace_prob < 0 or mask_replace_prob + random_replace_prob > 1.0 + 1e-12:
        raise ValueError(
            f"mask_replace_prob={mask_replace_prob} and random_replace_prob={random_replace_prob} must be "
            "non-negative and sum to at most 1 (the rest stays unchanged)"
        )
    if not 0 <= mask_token_id < vocab_size:
        raise ValueError(f"mask_token_id={mask_token_id} must lie in [0, vocab_size={vocab_size})")
    device = input_ids.device
    specials = torch.unique(torch.cat([_as_id_tensor(special_ids if special_ids is not None else []), torch.tensor([mask_token_id])]))
    eligible = ~torch.isin(input_ids, specials.to(device))
    if special_mask is not None:
        if special_mask.shape != input_ids.shape:
            raise ValueError(f"special_mask must have the shape of input_ids {tuple(input_ids.shape)}, got {tuple(special_mask.shape)}")
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
    action = torch.where(u < mask_replace_prob, MASKED, torch.where(u < mask_replace_prob + random_replace_prob, RANDOM, KEPT))
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
    mlm_probability: float = 0.15  # share of tokens chosen
    mask_replace_prob: float = 0.8  # chosen -> [MASK]
    random_replace_prob: float = 0.1  # chosen -> random ordinary token (the rest stay unchanged)

    def __post_init__(self):
        self.special_ids = tuple(int(i) for i in self.special_ids)
        # validate once, on a dummy input
        mask_tokens(torch.zeros(1, 1, dtype=torch.long), **self._kwargs(), generator=torch.Generator().manual_seed(0))

    def _kwargs(self) -> dict:
        return dict(
            vocab_size=self.vocab_size,
            mask_token_id=self.mask_token_id,
            special_ids=self.special_ids,
            mlm_probability=self.mlm_probability,
            mask_replace_prob=self.mask_replace_prob,
            random_replace_prob=self.random_replace_prob,
        )

    def __call__(
        self, input_ids: Tensor, *, generator: torch.Generator | None = None, special_mask: Tensor | None = None, return_actions: bool = False
    ):
        return mask_tokens(input_ids, **self._kwargs(), special_mask=special_mask, generator=generator, return_actions=return_actions)


# ---------------------------------------------------------------------------------------
# Next-sentence pairs and packing
# ---------------------------------------------------------------------------------------


class NSPPairs(NamedTuple):
    """Sentence pairs for next-sentence prediction."""

    a: list[list[int]]  # first segments
    b: list[list[int]]  # second segments
    label: Tensor  # [n] long: 0 = B follows A in its document, 1 = B is a random sentence


def make_nsp_pairs(documents: Sequence[Sequence[Sequence[int]]], rng: Any = None, *, random_prob: float = 0.5) -> NSPPairs:
    """One pair per sentence that has a successor: B is the next sentence or (with
    ``random_prob``) a random sentence of another document.

    ``documents``: a list of documents, each a list of sentences, each a list of token ids.
    ``rng``: an int seed, a ``torch.Generator``, a ``numpy.random.Generator`` or
    ``random.Random``. Empty sentences are dropped. Needs at least two non-empty documents.
    """
    g = _generator(rng)
    docs = [[list(s) for s in doc if len(s) > 0] for doc in documents]
    docs = [d for d in docs if d]
    if len(docs) < 2:
        raise ValueError(f"next-sentence pairs need at least 2 non-empty documents (random B comes from another one), got {len(docs)}")
    sentences = [s for d in docs for s in d]
    n_sent = torch.tensor([len(d) for d in docs])
    start = torch.cumsum(n_sent, 0) - n_sent  # index of each document's first sentence
    doc_of = torch.repeat_interleave(torch.arange(len(docs)), n_sent)
    # sentence i can be an A when i + 1 is in the same document
    idx = torch.arange(len(sentences))
    has_next = (idx + 1 < len(sentences)) & (doc_of[(idx + 1).clamp(max=len(sentences) - 1)] == doc_of)
    a_idx = idx[has_next]
    if a_idx.numel() == 0:
        raise ValueError("no document has two sentences: there is no true next sentence to pair")
    n = a_idx.numel()
    is_random = torch.rand(n, generator=g) < random_prob
    # a different document, uniformly: draw from D - 1 and skip A's own document
    d_a = doc_of[a_idx]
    r = torch.randint(len(docs) - 1, (n,), generator=g)
    other = r + (r >= d_a).long()
    rand_sent = start[other] + (torch.rand(n, generator=g) * n_sent[other]).long().clamp(max=n_sent[other] - 1)
    b_idx = torch.where(is_random, rand_sent, a_idx + 1)
    return NSPPairs(
        a=[sentences[i] for i in a_idx.tolist()],
        b=[sentences[i] for i in b_idx.tolist()],
        label=is_random.long(),
    )


def truncate_pair_lengths(len_a: Tensor, len_b: Tensor, budget: int) -> tuple[Tensor, Tensor]:
    """Lengths after BERT's ``truncate_seq_pair``: drop the last token of the longer segment
    (B on ties) until ``len_a + len_b <= budget``. Vectorised over pairs."""
    len_a, len_b = len_a.long(), len_b.long()
    over = len_a + len_b > budget
    half_up = (budget + 1) // 2
    new_a = torch.minimum(len_a, torch.clamp(budget - len_b, min=half_up))
    new_b = torch.minimum(len_b, budget - new_a)
    return torch.where(over, new_a, len_a), torch.where(over, new_b, len_b)


def _flat(seqs: Sequence[Sequence[int]]) -> tuple[Tensor, Tensor]:
    """Concatenated ids and the length of each sequence."""
    lengths = torch.tensor([len(s) for s in seqs], dtype=torch.long)
    flat = torch.tensor(list(itertools.chain.from_iterable(seqs)), dtype=torch.long)
    return flat, lengths


def _scatter_segments(out: Tensor, flat: Tensor, lengths: Tensor, keep: Tensor, col0: Tensor) -> None:
    """Write the first ``keep[i]`` ids of sequence ``i`` into ``out[i, col0[i]:]``."""
    if flat.numel() == 0:
        return
    row = torch.repeat_interleave(torch.arange(lengths.numel()), lengths)
    offset = torch.cumsum(lengths, 0) - lengths
    j = torch.arange(flat.numel()) - offset[row]  # position inside its own sequence
    ok = j < keep[row]
    out[row[ok], (col0[row] + j)[ok]] = flat[ok]


def pack_pairs(
    tokens_a: Sequence[Sequence[int]],
    tokens_b: Sequence[Sequence[int]] | None,
    max_len: int,
    *,
    cls_id: int,
    sep_id: int,
    pad_id: int = 0,
) -> dict[str, Tensor]:
    """``[CLS] A [SEP] B [SEP]`` for many pairs at once (``[CLS] A [SEP]`` when ``tokens_b`` is None).

    Returns ``input_ids``, ``token_type_ids`` and ``attention_mask``, each
    ``[n, width]`` with ``width`` the longest packed pair (at most ``max_len``), right-padded
    with ``pad_id``. Over-long pairs lose tokens from the end of the longer segment.
    """
    n_special = 3 if tokens_b is not None else 2
    if max_len < n_special + (2 if tokens_b is not None else 1):
        raise ValueError(f"max_len={max_len} leaves no room for tokens besides the {n_special} special ones")
    if tokens_b is not None and len(tokens_a) != len(tokens_b):
        raise ValueError(f"tokens_a has {len(tokens_a)} segments but tokens_b has {len(tokens_b)}")
    n = len(tokens_a)
    if n == 0:
        raise ValueError("pack_pairs got no segments")
    flat_a, len_a = _flat(tokens_a)
    if tokens_b is not None:
        flat_b, len_b = _flat(tokens_b)
    else:
        flat_b, len_b = torch.zeros(0, dtype=torch.long), torch.zeros(n, dtype=torch.long)
    keep_a, keep_b = truncate_pair_lengths(len_a, len_b, max_len - n_special)
    total = keep_a + keep_b + n_special
    width = int(total.max()) if n else 0
    ids = torch.full((n, width), pad_id, dtype=torch.long)
    rows = torch.arange(n)
    ids[:, 0] = cls_id
    ids[rows, keep_a + 1] = sep_id
    _scatter_segments(ids, flat_a, len_a, keep_a, torch.ones(n, dtype=torch.long))
    cols = torch.arange(width)[None, :]
    attention_mask = (cols < total[:, None]).long()
    if tokens_b is not None:
        ids[rows, total - 1] = sep_id
        _scatter_segments(ids, flat_b, len_b, keep_b, keep_a + 2)
        token_type_ids = ((cols >= (keep_a + 2)[:, None]) & (cols < total[:, None])).long()
    else:
        token_type_ids = torch.zeros_like(ids)
    return {"input_ids": ids, "token_type_ids": token_type_ids, "attention_mask": attention_mask}


def pack_pair(
    tokens_a: Sequence[int], tokens_b: Sequence[int] | None, max_len: int, *, cls_id: int, sep_id: int
) -> dict[str, Tensor]:
    """One pair: 1-D ``input_ids``, ``token_type_ids``, ``attention_mask`` (no padding)."""
    out = pack_pairs([tokens_a], None if tokens_b is None else [tokens_b], max_len, cls_id=cls_id, sep_id=sep_id)
    return {k: v[0] for k, v in out.items()}


def pack_stream(
    sequences: Sequence[Sequence[int]],
    max_len: int,
    *,
    cls_id: int,
    sep_id: int,
    pad_id: int = 0,
    separator_id: int | None = None,
) -> dict[str, Tensor]:
    """RoBERTa's FULL-SENTENCES packing: concatenate every sequence (with ``separator_id``
    between them, if given), cut the stream into blocks of ``max_len - 2`` and wrap each as
    ``[CLS] block [SEP]``. The last block is right-padded. Returns ``input_ids``,
    ``attention_mask`` and all-zero ``token_type_ids``, ``[n_blocks, max_len]``.
    """
    body = max_len - 2
    if body <= 0:
        raise ValueError(f"max_len={max_len} leaves no room for tokens besides [CLS] and [SEP]")
    if separator_id is not None:
        sequences = [list(s) + [separator_id] for s in sequences]
    flat, _ = _flat(sequences)
    if flat.numel() == 0:
        raise ValueError("pack_stream got no tokens")
    n_blocks = -(-flat.numel() // body)
    n_real = flat.numel()
    blocks = F.pad(flat, (0, n_blocks * body - n_real), value=pad_id).view(n_blocks, body)
    real = F.pad(torch.ones(n_real, dtype=torch.long), (0, n_blocks * body - n_real)).view(n_blocks, body)
    lengths = real.sum(1)
    ids = torch.full((n_blocks, max_len), pad_id, dtype=torch.long)
    ids[:, 0] = cls_id
    ids[:, 1 : body + 1] = blocks
    ids[torch.arange(n_blocks), lengths + 1] = sep_id
    attention_mask = (torch.arange(max_len)[None, :] < (lengths + 2)[:, None]).long()
    return {"input_ids": ids, "token_type_ids": torch.zeros_like(ids), "attention_mask": attention_mask}


# ---------------------------------------------------------------------------------------
# Batches
# ---------------------------------------------------------------------------------------

_PAD_VALUES = {"token_type_ids": 0, "attention_mask": 0, "labels": IGNORE_INDEX}


def collate(examples: Sequence[Mapping[str, Any]], *, pad_id: int = 0) -> dict[str, Tensor]:
    """Stack examples (dicts of 1-D id sequences and scalars) into a right-padded batch.

    ``input_ids`` pad with ``pad_id``, ``token_type_ids`` and ``attention_mask`` with 0,
    ``labels`` with -100; scalars (e.g. ``next_sentence_label``) become a ``[batch]`` tensor.
    A missing ``attention_mask`` is created (1 on every real token).
    """
    if not examples:
        raise ValueError("collate got an empty list")
    keys = list(examples[0])
    out: dict[str, Tensor] = {}
    for k in keys:
        values = [torch.as_tensor(e[k]) for e in examples]
        if values[0].dim() == 0:
            out[k] = torch.stack(values)
            continue
        pad = pad_id if k == "input_ids" else _PAD_VALUES.get(k, 0)
        out[k] = torch.nn.utils.rnn.pad_sequence([v.long() for v in values], batch_first=True, padding_value=pad)
    if "attention_mask" not in out and "input_ids" in out:
        lengths = torch.tensor([len(e["input_ids"]) for e in examples])
        out["attention_mask"] = (torch.arange(out["input_ids"].size(1))[None, :] < lengths[:, None]).long()
    return out


class DynamicMaskingCollator:
    """``collate_fn`` for a ``DataLoader``: pad a batch, then mask it afresh (RoBERTa style).

    Every call draws a new mask from its own generator, so the same sequence gets a
    different mask each time it appears. (With worker processes give each worker its own
    seed, e.g. through ``worker_init_fn``.)
    """

    def __init__(self, masker: MLMMasker, *, pad_id: int = 0, seed: int = 0):
        self.masker = masker
        self.pad_id = pad_id
        self.generator = torch.Generator().manual_seed(seed)

    def __call__(self, examples: Sequence[Mapping[str, Any]]) -> dict[str, Tensor]:
        batch = collate(examples, pad_id=self.pad_id)
        batch["input_ids"], batch["labels"] = self.masker(batch["input_ids"], generator=self.generator)
        return batch


class MaskedLMData:
    """Packed examples plus a masking policy; iterate over it for batches (one pass = one epoch).

    Args:
        examples: dict of ``[n, seq_len]`` tensors (``input_ids`` and optionally
            ``token_type_ids``, ``attention_mask``) and ``[n]`` tensors (e.g.
            ``next_sentence_label``), as returned by :func:`pack_pairs` / :func:`pack_stream`.
        masker: the :class:`MLMMasker` (its ``special_ids`` must include the padding id).
        masking: ``"static"`` (BERT: masks drawn once, reused every epoch) or ``"dynamic"``
            (RoBERTa: a new mask every epoch).
        static_copies: with static masking, how many differently masked copies cycle
            (BERT duplicated its data 10 times).
        batch_size, shuffle, drop_last: batching of each pass.
        seed: seeds both the masks (version ``v`` uses seed ``(seed, v)``) and the shuffling.

    ``data.epoch_view(e)`` returns the whole masked dataset of epoch ``e``: what the batches
    of that epoch are cut from. Batches are dicts with ``input_ids`` (masked), ``labels`` and
    the other example fields, ready for ``model(**batch)`` and :func:`pretraining_loss`.
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
        if masking not in ("static", "dynamic"):
            raise ValueError(f"masking must be 'static' (BERT) or 'dynamic' (RoBERTa), got {masking!r}")
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
        view["input_ids"], view["labels"] = self._masked(self.mask_version(epoch))
        return view

    def batches(self, epoch: int) -> Iterator[dict[str, Tensor]]:
        """The batches of one epoch (shuffled with seed ``(seed, epoch)`` when ``shuffle``)."""
        view = self.epoch_view(epoch)
        n = view["input_ids"].size(0)
        order = torch.randperm(n, generator=torch.Generator().manual_seed(self.seed + 7919 * (epoch + 1))) if self.shuffle else torch.arange(n)
        stop = n - n % self.batch_size if self.drop_last else n
        for i in range(0, stop, self.batch_size):
            sel = order[i : i + self.batch_size]
            yield {k: v[sel] for k, v in view.items()}

    def __iter__(self) -> Iterator[dict[str, Tensor]]:
        epoch = self.epoch
        self.epoch += 1
        return self.batches(epoch)


# ---------------------------------------------------------------------------------------
# Losses for course_lib.train.fit
# ---------------------------------------------------------------------------------------


def pretraining_loss(model: torch.nn.Module, batch: Mapping[str, Tensor], *, masked_only: bool = True) -> tuple[Tensor, dict[str, float]]:
    """``loss_fn`` for :func:`course_lib.train.fit`: MLM (+ NSP when the model and batch have it).

    Works with ``BertForPreTraining`` (MLM + NSP), ``BertForMaskedLM`` and
    ``RobertaForMaskedLM`` (MLM only). Returns ``(loss, metrics)`` with the loss parts and
    the accuracies on masked tokens and next-sentence labels. ``masked_only`` runs the
    vocabulary projection on masked positions only (same loss, less work).
    """
    kwargs = {k: batch[k] for k in ("attention_mask", "token_type_ids") if k in batch}
    labels = batch["labels"]
    nsp_label = batch.get("next_sentence_label")
    has_nsp = hasattr(model, "nsp_head")
    if has_nsp and nsp_label is not None:
        kwargs["next_sentence_label"] = nsp_label
    out = model(batch["input_ids"], labels=labels, masked_only=masked_only, **kwargs)
    metrics: dict[str, float] = {}
    with torch.no_grad():
        logits = out.mlm_logits
        chosen = labels != IGNORE_INDEX
        if bool(chosen.any()):
            predicted = logits.argmax(-1) if masked_only else logits[chosen].argmax(-1)
            metrics["mlm_accuracy"] = (predicted == labels[chosen]).float().mean().item()
        if has_nsp and nsp_label is not None:
            metrics["mlm_loss"] = out.mlm_loss.item()
            metrics["nsp_loss"] = out.nsp_loss.item()
            metrics["nsp_accuracy"] = (out.seq_relationship_logits.argmax(-1) == nsp_label.view(-1)).float().mean().item()
    return out.loss, metrics


def mlm_loss(model: torch.nn.Module, batch: Mapping[str, Tensor]) -> tuple[Tensor, dict[str, float]]:
    """``loss_fn`` for masked-LM-only training (RoBERTa): ignores any next-sentence labels."""
    batch = {k: v for k, v in batch.items() if k != "next_sentence_label"}
    return pretraining_loss(model, batch)
