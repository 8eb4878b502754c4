r"""Tokenizers for every chapter: words, characters (ELMo), WordPiece (BERT), byte-level BPE (RoBERTa).

* :class:`WordVocab`: a word-level vocabulary with ``<pad>=0, <unk>=1, <S>=2, </S>=3``
  (``<S>``/``</S>`` are the sentence boundary tokens of ELMo), batched into id tensors and
  boolean masks (True = a real token).
* ELMo's character ids live in :mod:`course_lib.data.chars`. Every token becomes 50 ids in
  ``0..261``: ``[begin-of-word, utf-8 bytes..., end-of-word, padding...] + 1``; 0 is kept for
  padded positions, so a whole padded token is 50 zeros. The sentence boundaries ``<S>`` and
  ``</S>`` are the single "characters" 256 and 257 between the word markers.
* :func:`train_wordpiece` and :func:`train_byte_bpe`: the Hugging Face ``tokenizers``
  library trained on the corpus, with BERT's ``[PAD] [UNK] [CLS] [SEP] [MASK]`` and RoBERTa's
  ``<s> <pad> </s> <unk> <mask>`` specials and their ``[CLS] A [SEP] B [SEP]`` /
  ``<s> A </s></s> B </s>`` templates.
* :func:`learn_bpe` / :func:`bpe_segment`: a short teaching implementation of BPE training
  (Sennrich et al. 2016), merge by merge; the test suite checks that it learns exactly the
  merges of the library's trainer.

BPE learns merges greedily: starting from characters, repeatedly count every adjacent pair
of symbols over the corpus, weighted by word frequency,

.. math:: (a, b)^\ast = \arg\max_{(a, b)} \sum_{w} \mathrm{count}(w)\, \#\{(a, b) \in w\},

and replace every occurrence of the winner by the new symbol :math:`ab`. Ties go to the
pair of symbols created first (the library orders symbols by id: characters by code point,
then merges in order).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterable, Sequence

import numpy as np
import torch

__all__ = [
    "WordVocab",
    "BERT_SPECIALS",
    "ROBERTA_SPECIALS",
    "train_wordpiece",
    "train_byte_bpe",
    "special_ids",
    "pad_batch",
    "encode_texts",
    "find_word",
    "learn_bpe",
    "bpe_segment",
    "as_texts",
]

BERT_SPECIALS: tuple[str, ...] = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")  # ids 0..4
ROBERTA_SPECIALS: tuple[str, ...] = (
    "<s>",
    "<pad>",
    "</s>",
    "<unk>",
    "<mask>",
)  # ids 0..4, pad = 1 as in RoBERTa


def as_texts(items) -> list[str]:
    """Strings from strings, :class:`~course_lib.data.corpus.Sentence` or ``Document`` objects."""
    out = []
    for it in items:
        if isinstance(it, str):
            out.append(it)
        elif hasattr(it, "text"):
            out.append(it.text)
        else:
            raise ValueError(f"expected str, Sentence or Document, got {type(it).__name__}")
    return out


def token_lists(items) -> list[Sequence[str]]:
    out = []
    for it in items:
        if isinstance(it, str):
            raise ValueError(
                "expected token sequences (or Sentence objects), got a str: split it with word_tokenize first"
            )
        out.append(it.tokens if hasattr(it, "tokens") else it)
    return out


# --------------------------------------------------------------------------- words


class WordVocab:
    """Word-level vocabulary: ``<pad>`` 0, ``<unk>`` 1, ``<S>`` 2, ``</S>`` 3, then words."""

    PAD, UNK, BOS, EOS = "<pad>", "<unk>", "<S>", "</S>"
    SPECIALS = (PAD, UNK, BOS, EOS)

    def __init__(self, words: Iterable[str], *, lowercase: bool = False) -> None:
        self.lowercase = lowercase
        self.itos: list[str] = list(self.SPECIALS)
        for w in words:
            if w not in self.SPECIALS:
                self.itos.append(w)
        self.stoi = {w: i for i, w in enumerate(self.itos)}
        if len(self.stoi) != len(self.itos):
            raise ValueError("WordVocab: duplicate words")

    @classmethod
    def build(
        cls, sentences, *, min_count: int = 1, max_size: int | None = None, lowercase: bool = False
    ) -> "WordVocab":
        """Vocabulary of the words in ``sentences`` (Sentence objects or token lists), most frequent first.

        Ties in frequency are broken alphabetically, so the ids do not depend on the order of
        the corpus. ``max_size`` counts the 4 specials.
        """
        if min_count < 1:
            raise ValueError(f"min_count must be >= 1, got {min_count}")
        if max_size is not None and max_size <= len(cls.SPECIALS):
            raise ValueError(f"max_size must exceed the {len(cls.SPECIALS)} special tokens, got {max_size}")
        counts: Counter[str] = Counter()
        for toks in token_lists(sentences):
            counts.update(t.lower() for t in toks) if lowercase else counts.update(toks)
        words = sorted((w for w, c in counts.items() if c >= min_count), key=lambda w: (-counts[w], w))
        if max_size is not None:
            words = words[: max_size - len(cls.SPECIALS)]
        return cls(words, lowercase=lowercase)

    def __len__(self) -> int:
        return len(self.itos)

    def __contains__(self, word: str) -> bool:
        return (word.lower() if self.lowercase else word) in self.stoi

    pad_id, unk_id, bos_id, eos_id = 0, 1, 2, 3

    def encode(self, tokens: Sequence[str], *, add_bos_eos: bool = False) -> list[int]:
        get, unk = self.stoi.get, self.unk_id
        if self.lowercase:
            ids = [get(t.lower(), unk) for t in tokens]
        else:
            ids = [get(t, unk) for t in tokens]
        return [self.bos_id, *ids, self.eos_id] if add_bos_eos else ids

    def decode(self, ids: Iterable[int], *, skip_specials: bool = True) -> list[str]:
        out = []
        for i in ids:
            i = int(i)
            if skip_specials and i < len(self.SPECIALS):
                continue
            out.append(self.itos[i])
        return out

    def batch(
        self,
        sentences,
        *,
        add_bos_eos: bool = False,
        max_len: int | None = None,
        device: torch.device | str | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Ids ``[B, T]`` (padded with 0) and mask ``[B, T]`` (True = real token).

        For a bidirectional LM with ``add_bos_eos=True``: the forward LM reads ``ids[:, :-1]``
        and predicts ``ids[:, 1:]``; the backward LM reads ``ids[:, 1:]`` and predicts
        ``ids[:, :-1]`` (both under ``mask[:, 1:] & mask[:, :-1]``).
        """
        seqs = [self.encode(t, add_bos_eos=add_bos_eos) for t in token_lists(sentences)]
        return pad_batch(seqs, pad_id=self.pad_id, max_len=max_len, device=device)

    def to_dict(self) -> dict:
        return {"itos": self.itos, "lowercase": self.lowercase}

    @classmethod
    def from_dict(cls, d: dict) -> "WordVocab":
        return cls(d["itos"][len(cls.SPECIALS) :], lowercase=d.get("lowercase", False))


def pad_batch(
    seqs: Sequence[Sequence[int]],
    *,
    pad_id: int,
    max_len: int | None = None,
    device: torch.device | str | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad integer sequences: ``(ids [B, T] long, mask [B, T] bool)``; truncates at ``max_len``."""
    if len(seqs) == 0:
        raise ValueError("pad_batch needs at least one sequence")
    if max_len is not None and max_len < 1:
        raise ValueError(f"max_len must be >= 1, got {max_len}")
    lengths = np.array([len(s) for s in seqs])
    T = int(lengths.max()) if max_len is None else min(int(lengths.max()), max_len)
    T = max(T, 1)
    ids = np.full((len(seqs), T), pad_id, dtype=np.int64)
    for i, s in enumerate(seqs):
        n = min(len(s), T)
        ids[i, :n] = s[:n]
    mask = np.arange(T)[None, :] < np.minimum(lengths, T)[:, None]
    return torch.from_numpy(ids).to(device), torch.from_numpy(mask).to(device)


# --------------------------------------------------------------------------- subword tokenizers (HF)


_CONT_OFFSET = 0xF0000  # continuation characters are mapped into the supplementary private use area


def train_wordpiece(
    texts, *, vocab_size: int = 4000, lowercase: bool = True, min_frequency: int = 2, verbose: bool = False
):
    """A BERT-style WordPiece tokenizer trained on ``texts`` (str, Sentence or Document items).

    Specials ``[PAD]=0 [UNK]=1 [CLS]=2 [SEP]=3 [MASK]=4``; BERT normalisation (lower-casing
    and accent stripping when ``lowercase``), BERT pre-tokenisation (whitespace and
    punctuation), ``##`` continuation prefix; encodes one text as ``[CLS] A [SEP]`` and a pair
    as ``[CLS] A [SEP] B [SEP]`` with token types 0/1. Returns a ``tokenizers.Tokenizer``.

    The vocabulary is learned exactly like the library's ``WordPieceTrainer`` (BPE merges
    over characters, with non-initial characters as separate ``##`` symbols), but
    reproducibly: that trainer numbers the ``##`` symbols in hash-map order, which changes
    how ties are broken from one run to the next. Here the library's deterministic BPE
    trainer runs on words whose non-initial characters are mapped to distinct private-use
    characters, and the result is mapped back to ``##`` pieces. Words with characters
    outside the Basic Multilingual Plane (emoji) are left out of training.
    """
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

    _check_vocab_size(vocab_size)
    texts = as_texts(texts)
    if not texts:
        raise ValueError("train_wordpiece needs at least one text")
    t0 = time.perf_counter()
    normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=True, strip_accents=lowercase, lowercase=lowercase
    )
    pre = pre_tokenizers.BertPreTokenizer()
    memo: dict[str, str] = {}

    def mark(word: str) -> str:
        if not word.isprintable() or max(word) >= "\U00010000":
            return ""
        return word[0] + "".join(chr(ord(c) + _CONT_OFFSET) for c in word[1:])

    def marked_words():
        # normalising and splitting chunks of texts at once gives the same words (both steps
        # treat a newline like any whitespace) and saves the per-call overhead
        for k in range(0, len(texts), 1000):
            out = []
            for w, _ in pre.pre_tokenize_str(normalizer.normalize_str("\n".join(texts[k : k + 1000]))):
                m = memo.get(w)
                if m is None:
                    m = memo[w] = mark(w)
                out.append(m)
            yield " ".join(out)

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=list(BERT_SPECIALS),
        show_progress=False,
    )
    bpe.train_from_iterator(marked_words(), trainer=trainer)

    def unmark(piece: str) -> str:
        if ord(piece[0]) >= _CONT_OFFSET:
            return "##" + "".join(chr(ord(c) - _CONT_OFFSET) for c in piece)
        return piece[0] + "".join(chr(ord(c) - _CONT_OFFSET) for c in piece[1:])

    learned = sorted(bpe.get_vocab().items(), key=lambda kv: kv[1])
    vocab = {tok if tok in BERT_SPECIALS else unmark(tok): i for tok, i in learned}
    tok = Tokenizer(models.WordPiece(vocab=vocab, unk_token="[UNK]", max_input_chars_per_word=100))
    tok.normalizer = normalizer
    tok.pre_tokenizer = pre
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])],
    )
    tok.decoder = decoders.WordPiece(prefix="##")
    tok.add_special_tokens(list(BERT_SPECIALS))
    if verbose:
        print(
            f"WordPiece: {tok.get_vocab_size()} tokens from {len(texts)} texts in "
            f"{time.perf_counter() - t0:.2f} s"
        )
    return tok


def train_byte_bpe(
    texts,
    *,
    vocab_size: int = 4000,
    min_frequency: int = 2,
    add_prefix_space: bool = False,
    verbose: bool = False,
):
    """A RoBERTa-style byte-level BPE tokenizer trained on ``texts``.

    Specials ``<s>=0 <pad>=1 </s>=2 <unk>=3 <mask>=4`` (pad 1 as in RoBERTa); the 256 byte
    symbols are always in the vocabulary, so no text is ever unknown; a space is part of the
    following token (``Ġ``). Encodes ``<s> A </s>`` and ``<s> A </s></s> B </s>``.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    _check_vocab_size(vocab_size, minimum=256 + len(ROBERTA_SPECIALS) + 1)
    texts = as_texts(texts)
    if not texts:
        raise ValueError("train_byte_bpe needs at least one text")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=add_prefix_space)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=list(ROBERTA_SPECIALS),
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    t0 = time.perf_counter()
    tok.train_from_iterator(texts, trainer=trainer, length=len(texts))
    tok.post_processor = processors.RobertaProcessing(
        ("</s>", tok.token_to_id("</s>")),
        ("<s>", tok.token_to_id("<s>")),
        trim_offsets=True,
        add_prefix_space=add_prefix_space,
    )
    tok.decoder = decoders.ByteLevel()
    if verbose:
        print(
            f"byte-level BPE: {tok.get_vocab_size()} tokens from {len(texts)} texts in "
            f"{time.perf_counter() - t0:.2f} s"
        )
    return tok


def _check_vocab_size(vocab_size: int, minimum: int = 32) -> None:
    if not isinstance(vocab_size, int) or vocab_size < minimum:
        raise ValueError(f"vocab_size must be an int >= {minimum}, got {vocab_size!r}")


def special_ids(tokenizer) -> dict[str, int]:
    """``{"pad", "unk", "cls", "sep", "mask"}`` ids of a BERT- or RoBERTa-style tokenizer
    (RoBERTa's ``<s>``/``</s>`` play the roles of ``[CLS]``/``[SEP]``)."""
    for names in (BERT_SPECIALS, ROBERTA_SPECIALS):
        ids = [tokenizer.token_to_id(n) for n in names]
        if all(i is not None for i in ids):
            if names == BERT_SPECIALS:
                pad, unk, cls, sep, mask = ids
            else:
                cls, pad, sep, unk, mask = ids
            return {"pad": pad, "unk": unk, "cls": cls, "sep": sep, "mask": mask}
    raise ValueError(
        "tokenizer has neither BERT ([PAD] [UNK] [CLS] [SEP] [MASK]) nor RoBERTa "
        "(<s> <pad> </s> <unk> <mask>) special tokens"
    )


def unknown_id(tokenizer) -> int | None:
    """The id a ``tokenizers`` tokenizer gives text it cannot encode (its model's unknown token,
    e.g. WordPiece's ``[UNK]``); None when it has none (byte-level BPE encodes every text)."""
    token = getattr(tokenizer.model, "unk_token", None)
    return tokenizer.token_to_id(token) if token else None


def encode_texts(
    tokenizer, texts, pairs=None, *, max_len: int | None = 128, device: torch.device | str | None = None
) -> dict[str, torch.Tensor]:
    """Encode texts (or text pairs) with specials, truncate to ``max_len`` (``None``: no
    truncation; the final ``[SEP]`` is kept, as sentence-transformers truncates) and pad: the
    course's one text-to-batch encoder.

    Returns ``input_ids`` ``[B, T]``, ``attention_mask`` ``[B, T]`` (bool, True = real token)
    and ``token_type_ids`` ``[B, T]`` (0 for the first segment, 1 for the second).
    """
    texts = as_texts(texts)
    if not texts:
        raise ValueError("encode_texts needs at least one text")
    if max_len is not None and max_len < 4:
        raise ValueError(f"max_len must be >= 4 (room for specials), got {max_len}")
    pad = special_ids(tokenizer)["pad"]
    if max_len is not None:
        tokenizer.enable_truncation(max_len)
    try:
        if pairs is None:
            encs = tokenizer.encode_batch(texts)
        else:
            pairs = as_texts(pairs)
            if len(pairs) != len(texts):
                raise ValueError(f"{len(texts)} texts but {len(pairs)} pairs")
            encs = tokenizer.encode_batch(list(zip(texts, pairs)))
    finally:
        tokenizer.no_truncation()
    ids, mask = pad_batch([e.ids for e in encs], pad_id=pad, device=device)
    types, _ = pad_batch([e.type_ids for e in encs], pad_id=0, device=device)
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}


# --------------------------------------------------------------------------- teaching BPE


def find_word(encoding, text: str, word: str, *, occurrence: int = 0) -> list[int]:
    """Token positions of the ``occurrence``-th time ``word`` (case-insensitive) appears in ``text``.

    ``encoding`` is the ``tokenizers.Encoding`` of ``text``; a word split into several
    WordPieces gives several positions.
    """
    positions: dict[int, list[int]] = {}
    for pos, w in enumerate(encoding.word_ids):
        if w is not None and encoding.sequence_ids[pos] == 0:
            positions.setdefault(w, []).append(pos)
    matches = []
    for w, toks in positions.items():
        start, end = encoding.offsets[toks[0]][0], encoding.offsets[toks[-1]][1]
        if text[start:end].lower() == word.lower():
            matches.append(toks)
    if len(matches) <= occurrence:
        raise ValueError(
            f"{word!r} occurs {len(matches)} time(s) in {text!r}; occurrence={occurrence} asked for"
        )
    return matches[occurrence]


def learn_bpe(
    word_counts: dict[str, int], num_merges: int, *, min_frequency: int = 0
) -> list[tuple[str, str]]:
    """Learn up to ``num_merges`` BPE merges from ``{word: count}``, the textbook way.

    Every round recounts all adjacent symbol pairs (weighted by word counts) and merges the
    most frequent one everywhere, left to right. Ties go to the pair whose symbols have the
    smallest ids, symbols being numbered like the library does: characters in code-point
    order, then each merge result as it is created. Stops early when no pair occurs
    ``max(min_frequency, 1)`` times.
    """
    if num_merges < 0:
        raise ValueError(f"num_merges must be >= 0, got {num_merges}")
    words = sorted(word_counts)
    symbol_id = {c: i for i, c in enumerate(sorted({c for w in words for c in w}))}
    segs = [list(w) for w in words]
    counts = [word_counts[w] for w in words]
    merges: list[tuple[str, str]] = []
    for _ in range(num_merges):
        pair_counts: Counter[tuple[str, str]] = Counter()
        for seg, c in zip(segs, counts):
            for a, b in zip(seg, seg[1:]):
                pair_counts[(a, b)] += c
        if not pair_counts:
            break
        best = min(pair_counts, key=lambda p: (-pair_counts[p], symbol_id[p[0]], symbol_id[p[1]]))
        if pair_counts[best] < max(min_frequency, 1):
            break
        a, b = best
        new = a + b
        merges.append(best)
        if new not in symbol_id:
            symbol_id[new] = len(symbol_id)
        for k, seg in enumerate(segs):
            if len(seg) < 2:
                continue
            out, i = [], 0
            while i < len(seg):
                if i + 1 < len(seg) and seg[i] == a and seg[i + 1] == b:
                    out.append(new)
                    i += 2
                else:
                    out.append(seg[i])
                    i += 1
            segs[k] = out
    return merges


def bpe_segment(word: str, merges: Sequence[tuple[str, str]]) -> list[str]:
    """Split ``word`` by applying the learned merges in their order of priority."""
    rank = {m: i for i, m in enumerate(merges)}
    seg = list(word)
    while len(seg) > 1:
        pairs = [(rank.get((a, b), len(rank)), i) for i, (a, b) in enumerate(zip(seg, seg[1:]))]
        r, i = min(pairs)
        if r == len(rank):
            break
        seg[i : i + 2] = [seg[i] + seg[i + 1]]
    return seg
