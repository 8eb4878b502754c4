r"""Sentence pairs on token ids: next-sentence and sentence-order prediction, packing, batches.

Everything works on token ids (lists of ``int`` or tensors), so any tokenizer fits; the same
two builders also pair units of text (:func:`text_pairs`: the labelled pair *tasks* a model is
fine-tuned on are drawn by the very rule its pretraining pairs were).

**Next-sentence pairs** (BERT). For each sentence A that has a successor in its document,
B is the true next sentence with probability 1/2 (label 0) and otherwise a sentence drawn
uniformly from a *different* document (label 1, Hugging Face's convention).

**Sentence-order pairs** (ALBERT, Lan et al. 2020, §4.2). For each unit (a sentence, or a
segment of consecutive sentences) that has a successor in its document, the pair is the
unit and its successor, in their order with probability 1/2 (label 0) and swapped
otherwise (label 1). Both members always come from the same document, so the topic
cannot tell the classes apart, as it can for NSP's random B: only the order (coherence)
can.

**Packing.** ``[CLS] A [SEP] B [SEP]``, segment ids 0 for ``[CLS] A [SEP]`` and 1 for
``B [SEP]``, attention mask 1 on real tokens. If the pair is longer than ``max_len`` the
longer segment loses tokens from its end, one at a time (BERT's ``truncate_seq_pair``).
RoBERTa packs full sentences from a stream instead (:func:`pack_stream`).

Packing scatters all pairs at once; no Python loop runs over tokens.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor

from ..models.bert import IGNORE_INDEX
from .masking import as_generator

__all__ = [
    "NSPPairs",
    "make_nsp_pairs",
    "SOPPairs",
    "make_sop_pairs",
    "text_pairs",
    "truncate_pair_lengths",
    "pack_pairs",
    "pack_pair",
    "pack_stream",
    "pack_sentences",
    "collate",
    "trim_padding",
    "reverse_sequences",
]


def _non_empty(documents: Sequence[Sequence[Any]]) -> list[list[Any]]:
    """The documents' non-empty units (id lists copied, strings kept), empty documents dropped."""
    docs = [[u if isinstance(u, str) else list(u) for u in doc if len(u) > 0] for doc in documents]
    return [d for d in docs if d]


class NSPPairs(NamedTuple):
    """Sentence pairs for next-sentence prediction."""

    a: list[list[int]]  # first segments
    b: list[list[int]]  # second segments
    label: Tensor  # [n] long: 0 = B follows A in its document, 1 = B is a random sentence


def make_nsp_pairs(
    documents: Sequence[Sequence[Sequence[int]]], rng: Any = None, *, random_prob: float = 0.5
) -> NSPPairs:
    """One pair per sentence that has a successor: B is the next sentence or (with
    ``random_prob``) a random sentence of another document.

    ``documents``: a list of documents, each a list of sentences, each a list of token ids
    (or a string: units of text are paired as they are, :func:`text_pairs`). ``rng``: an int
    seed, a ``torch.Generator``, a ``numpy.random.Generator`` or ``random.Random``. Empty
    sentences are dropped. Needs at least two non-empty documents.
    """
    if not 0.0 <= random_prob <= 1.0:
        raise ValueError(f"random_prob must lie in [0, 1], got {random_prob}")
    g = as_generator(rng)
    docs = _non_empty(documents)
    if len(docs) < 2:
        raise ValueError(
            "next-sentence pairs need at least 2 non-empty documents (random B comes from another one), got "
            f"{len(docs)}"
        )
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
    rand_sent = start[other] + (torch.rand(n, generator=g) * n_sent[other]).long().clamp(
        max=n_sent[other] - 1
    )
    b_idx = torch.where(is_random, rand_sent, a_idx + 1)
    return NSPPairs(
        a=[sentences[i] for i in a_idx.tolist()],
        b=[sentences[i] for i in b_idx.tolist()],
        label=is_random.long(),
    )


class SOPPairs(NamedTuple):
    """Sentence pairs for sentence-order prediction (the same fields as :class:`NSPPairs`)."""

    a: list[list[int]]  # first segments
    b: list[list[int]]  # second segments
    label: Tensor  # [n] long: 0 = A then B as in the document, 1 = swapped (B came first)


def make_sop_pairs(
    documents: Sequence[Sequence[Sequence[int]]], rng: Any = None, *, swap_prob: float = 0.5
) -> SOPPairs:
    """One pair per sentence that has a successor in its document: the sentence and its
    successor, swapped with probability ``swap_prob`` (label 1) or kept in order (label 0).

    ``documents``: a list of documents, each a list of sentences (or segments: any unit),
    each a list of token ids (or a string, :func:`text_pairs`). ``rng``: an int seed, a ``torch.Generator``, a
    ``numpy.random.Generator`` or ``random.Random``. Empty sentences are dropped, so the
    two members of a pair are consecutive among a document's non-empty sentences. Pairs
    come in document order; one uniform draw per pair decides its swap. Needs a
    document with at least two non-empty sentences.
    """
    if not 0.0 <= swap_prob <= 1.0:
        raise ValueError(f"swap_prob must lie in [0, 1], got {swap_prob}")
    g = as_generator(rng)
    docs = _non_empty(documents)
    sentences = [s for d in docs for s in d]
    n_sent = torch.tensor([len(d) for d in docs], dtype=torch.long)
    doc_of = torch.repeat_interleave(torch.arange(len(docs)), n_sent)
    # sentence i is a first member when i + 1 is in the same document
    idx = torch.arange(len(sentences))
    successor = (idx + 1).clamp(max=max(len(sentences) - 1, 0))
    first = idx[(idx + 1 < len(sentences)) & (doc_of[successor] == doc_of)]
    if first.numel() == 0:
        raise ValueError(
            "sentence-order pairs need two consecutive non-empty sentences (or segments) of one document; "
            f"none of the {len(docs)} non-empty documents has two"
        )
    swap = torch.rand(first.numel(), generator=g) < swap_prob
    a_idx = torch.where(swap, first + 1, first)
    b_idx = torch.where(swap, first, first + 1)
    return SOPPairs(
        a=[sentences[i] for i in a_idx.tolist()],
        b=[sentences[i] for i in b_idx.tolist()],
        label=swap.long(),
    )


_PAIR_BUILDERS = {"nsp": ("random_prob", make_nsp_pairs), "sop": ("swap_prob", make_sop_pairs)}


def text_pairs(
    documents: Sequence[Any],
    pair_task: str,
    *,
    seed: int = 0,
    sentences_per_unit: int = 1,
    random_prob: float | None = None,
    swap_prob: float | None = None,
) -> list[tuple[str, str, int]]:
    """A labelled sentence-pair task ``(a, b, label)`` on text, drawn by the pretraining
    pairs' rule: :func:`make_nsp_pairs` (``pair_task="nsp"``, with its ``random_prob``) or
    :func:`make_sop_pairs` (``"sop"``, with its ``swap_prob``; each 0.5 when not given), with
    Hugging Face's labels (0 = the real continuation / the right order, 1 = a random unit /
    swapped). The other task's probability is refused.

    ``documents``: corpus documents (objects with ``.sentences``, each with ``.text``) or
    lists of sentence strings. A unit is ``sentences_per_unit`` consecutive sentences joined
    by a space (the last unit of a document may be shorter): single sentences, or the
    papers' multi-sentence segments. ``seed`` draws the pairs.
    """
    if pair_task not in _PAIR_BUILDERS:
        raise ValueError(f"pair_task must be one of {sorted(_PAIR_BUILDERS)}, got {pair_task!r}")
    if type(sentences_per_unit) is not int or sentences_per_unit < 1:
        raise ValueError(f"sentences_per_unit must be an integer of at least 1, got {sentences_per_unit!r}")
    units = []
    for doc in documents:
        sents = [x.text for x in doc.sentences] if hasattr(doc, "sentences") else [str(x) for x in doc]
        units.append(
            [" ".join(sents[i : i + sentences_per_unit]) for i in range(0, len(sents), sentences_per_unit)]
        )
    if not any(len(us) > 1 for us in units):
        raise ValueError(
            f"pairs of units of {sentences_per_unit} sentence(s) need at least one document with more than "
            f"{sentences_per_unit} sentences"
        )
    name, build = _PAIR_BUILDERS[pair_task]
    given = {"random_prob": random_prob, "swap_prob": swap_prob}
    wrong = [k for k, v in given.items() if k != name and v is not None]
    if wrong:
        raise ValueError(f"{wrong[0]} belongs to the other pair task; pair_task={pair_task!r} takes {name}")
    pairs = build(units, seed, **{name: 0.5 if given[name] is None else given[name]})
    return list(zip(pairs.a, pairs.b, pairs.label.tolist()))


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
    out = pack_pairs(
        [tokens_a], None if tokens_b is None else [tokens_b], max_len, cls_id=cls_id, sep_id=sep_id
    )
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


def pack_sentences(
    sequences: Sequence[Sequence[int]],
    max_len: int,
    *,
    cls_id: int,
    sep_id: int,
    pad_id: int = 0,
) -> dict[str, Tensor]:
    """One row per sequence: ``[CLS] sequence [SEP]``, cut to ``max_len`` and right-padded to
    the longest row. Returns ``input_ids``, ``attention_mask`` and all-zero
    ``token_type_ids``, ``[n_sequences, width]``. Empty sequences are dropped."""
    body = max_len - 2
    if body <= 0:
        raise ValueError(f"max_len={max_len} leaves no room for tokens besides [CLS] and [SEP]")
    rows = [[cls_id, *list(s)[:body], sep_id] for s in sequences if len(s)]
    if not rows:
        raise ValueError("pack_sentences got no tokens")
    width = max(len(r) for r in rows)
    ids = torch.tensor([r + [pad_id] * (width - len(r)) for r in rows], dtype=torch.long)
    lengths = torch.tensor([len(r) for r in rows])
    attention_mask = (torch.arange(width)[None, :] < lengths[:, None]).long()
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
        out[k] = torch.nn.utils.rnn.pad_sequence(
            [v.long() for v in values], batch_first=True, padding_value=pad
        )
    if "attention_mask" not in out and "input_ids" in out:
        lengths = torch.tensor([len(e["input_ids"]) for e in examples])
        out["attention_mask"] = (torch.arange(out["input_ids"].size(1))[None, :] < lengths[:, None]).long()
    return out


def trim_padding(batch: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """Drop the columns that are padding in every row (examples are padded to the longest
    sequence of the whole data set; a batch rarely needs that width)."""
    batch = dict(batch)
    mask = batch.get("attention_mask")
    if mask is None:
        return batch
    width = int(mask.sum(1).max())
    full = mask.size(1)
    return {k: (v[:, :width] if v.dim() == 2 and v.size(1) == full else v) for k, v in batch.items()}


def reverse_sequences(batch: Mapping[str, Tensor]) -> dict[str, Tensor]:
    r"""The batch with each row's real tokens in reverse order, padding kept on the right.

    A left-to-right LM trained on reversed rows is a **right-to-left** LM: it factorises
    :math:`\log p(x) = \sum_t \log p(x_t \mid x_{>t})`, the other order of the product
    rule (ELMo's backward LM, chapter 1). Every field of shape ``[batch, seq_len]``
    (``input_ids``, ``labels``, ``token_type_ids``, ...) is reversed the same way; the
    ``attention_mask`` (1 = real token) says where each row's real tokens end, and it stays
    as it is. ``[CLS] a b c [SEP]`` becomes ``[SEP] c b a [CLS]``. Reversing twice gives the
    batch back.
    """
    batch = dict(batch)
    mask = batch.get("attention_mask")
    if mask is None or mask.dim() != 2:
        raise ValueError("reverse_sequences needs a [batch, seq_len] attention_mask (1 = real token)")
    lengths = mask.long().sum(1)
    if bool(
        (
            mask.long() != (torch.arange(mask.size(1), device=mask.device)[None] < lengths[:, None]).long()
        ).any()
    ):
        raise ValueError("reverse_sequences needs right padding: each row's real tokens first, then padding")
    pos = torch.arange(mask.size(1), device=mask.device)[None, :]
    source = torch.where(pos < lengths[:, None], lengths[:, None] - 1 - pos, pos)  # padding stays
    out = {}
    for k, v in batch.items():
        if k != "attention_mask" and v.dim() == 2 and v.shape == mask.shape:
            out[k] = v.gather(1, source.to(v.device))
        else:
            out[k] = v
    return out
