"""Tokenizer round trips: words, ELMo characters, WordPiece, byte-level BPE, the teaching BPE, MiniLM."""

import json
from collections import Counter

import pytest
import torch

from course_lib.data import minilm
from course_lib.data.chars import elmo_char_ids
from course_lib.data.corpus import generate_corpus
from course_lib.data.tokenizers import (
    BERT_SPECIALS,
    ROBERTA_SPECIALS,
    WordVocab,
    bpe_segment,
    encode_texts,
    learn_bpe,
    pad_batch,
    special_ids,
    train_byte_bpe,
    train_wordpiece,
    unknown_id,
)


@pytest.fixture(scope="module")
def corpus():
    return generate_corpus(2000, seed=11)


@pytest.fixture(scope="module")
def wordpiece(corpus):
    return train_wordpiece(corpus, vocab_size=1200)


@pytest.fixture(scope="module")
def byte_bpe(corpus):
    return train_byte_bpe(corpus, vocab_size=1200)


def test_word_vocab_round_trip_and_batches(corpus):
    vocab = WordVocab.build(corpus)
    assert vocab.itos[:4] == ["<pad>", "<unk>", "<S>", "</S>"]
    assert (vocab.pad_id, vocab.unk_id, vocab.bos_id, vocab.eos_id) == (0, 1, 2, 3)
    for s in corpus[:200]:
        assert vocab.decode(vocab.encode(s.tokens)) == list(s.tokens)
    assert vocab.encode(["zyzzyva"]) == [vocab.unk_id]
    # ids do not depend on the order of the corpus
    assert WordVocab.build(list(reversed(corpus))).itos == vocab.itos
    ids, mask = vocab.batch(corpus[:5], add_bos_eos=True)
    lengths = [len(s) + 2 for s in corpus[:5]]
    assert ids.shape == (5, max(lengths)) and ids.dtype == torch.long and mask.dtype == torch.bool
    assert mask.sum(1).tolist() == lengths
    assert (ids[:, 0] == vocab.bos_id).all() and (ids[~mask] == vocab.pad_id).all()
    assert ids[0, lengths[0] - 1] == vocab.eos_id
    small = WordVocab.build(corpus, max_size=50)
    assert len(small) == 50
    assert WordVocab.from_dict(vocab.to_dict()).itos == vocab.itos


def test_word_vocab_lowercase_and_errors(corpus):
    vocab = WordVocab.build(corpus, lowercase=True)
    assert "The" in vocab and vocab.encode(["The"]) == vocab.encode(["the"])
    with pytest.raises(ValueError, match="max_size"):
        WordVocab.build(corpus, max_size=3)
    with pytest.raises(ValueError, match="word_tokenize"):
        WordVocab.build(["a plain string"])


def test_elmo_char_ids_follow_allennlp():
    chars, mask = elmo_char_ids([["a", "Ü"], ["dog"]])
    assert chars.shape == (2, 4, 50) and chars.dtype == torch.long
    assert mask.tolist() == [[True, True, True, True], [True, True, True, False]]
    pad = 261
    # <S>: begin-of-word 259, bos 257, end-of-word 260, then padding 261 (all +1)
    assert chars[0, 0, :4].tolist() == [259, 257, 260, pad] and (chars[0, 0, 4:] == pad).all()
    assert chars[0, 3, :3].tolist() == [259, 258, 260]  # </S>
    assert chars[0, 1, :3].tolist() == [259, ord("a") + 1, 260]
    assert chars[0, 2, :4].tolist() == [259, 0xC3 + 1, 0x9C + 1, 260]  # utf-8 bytes of Ü
    assert (chars[1, 3] == 0).all()  # a padded token is all zeros
    assert int(chars.max()) < 262
    long_word = "x" * 80
    c, _ = elmo_char_ids([[long_word]], add_bos_eos=False)
    assert c[0, 0, 0] == 259 and (c[0, 0, 1:49] == ord("x") + 1).all() and c[0, 0, 49] == 260


def test_wordpiece_specials_round_trip_and_pairs(wordpiece, corpus):
    assert [wordpiece.token_to_id(t) for t in BERT_SPECIALS] == [0, 1, 2, 3, 4]
    assert wordpiece.get_vocab_size() <= 1200
    for s in corpus[:300]:
        enc = wordpiece.encode(s.text)
        assert enc.tokens[0] == "[CLS]" and enc.tokens[-1] == "[SEP]"
        decoded = wordpiece.decode(enc.ids)
        # WordPiece keeps every character but not all spaces ("wouldn't" decodes as "wouldn ' t")
        assert decoded.split() == s.text.lower().split() or "'" in s.text
        assert "".join(decoded.split()) == "".join(s.text.lower().split())
    enc = wordpiece.encode("There is a traffic jam.", "New York is a city.")
    sep = enc.tokens.index("[SEP]")
    assert enc.type_ids[: sep + 1] == [0] * (sep + 1) and set(enc.type_ids[sep + 1 :]) == {1}
    assert enc.tokens[-1] == "[SEP]"
    assert any(t.startswith("##") for t in wordpiece.get_vocab())  # it learned subwords


def test_byte_bpe_round_trips_any_text(byte_bpe, corpus):
    assert [byte_bpe.token_to_id(t) for t in ROBERTA_SPECIALS] == [0, 1, 2, 3, 4]
    for s in corpus[:300]:
        enc = byte_bpe.encode(s.text)
        assert enc.tokens[0] == "<s>" and enc.tokens[-1] == "</s>"
        assert byte_bpe.decode(enc.ids) == s.text
    odd = "Zoë's café costs 3€ 🙂 — naïve?"
    enc = byte_bpe.encode(odd)
    assert byte_bpe.decode(enc.ids) == odd and byte_bpe.token_to_id("<unk>") not in enc.ids
    pair = byte_bpe.encode("A dog.", "A cat.")
    assert pair.tokens.count("</s>") == 3 and pair.tokens[0] == "<s>"


def test_training_is_deterministic(corpus):
    assert (
        train_wordpiece(corpus[:500], vocab_size=600).get_vocab()
        == train_wordpiece(corpus[:500], vocab_size=600).get_vocab()
    )
    a, b = train_byte_bpe(corpus[:500], vocab_size=600), train_byte_bpe(corpus[:500], vocab_size=600)
    assert a.to_str() == b.to_str()


def test_teaching_bpe_learns_the_library_merges(corpus):
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    texts = [s.text.lower() for s in corpus[:600]]
    counts = Counter(w for t in texts for w in t.split())
    alphabet = {c for w in counts for c in w}
    n_merges = 120
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.train_from_iterator(
        texts,
        trainers.BpeTrainer(
            vocab_size=len(alphabet) + n_merges, min_frequency=0, show_progress=False, special_tokens=[]
        ),
    )
    lib = [
        tuple(m) if isinstance(m, list) else tuple(m.split(" "))
        for m in json.loads(tok.to_str())["model"]["merges"]
    ]
    ours = learn_bpe(dict(counts), n_merges)
    assert ours == lib
    for w in sorted(counts)[:200]:
        assert bpe_segment(w, ours) == tok.encode(w).tokens


def test_pad_batch_and_encode_texts(wordpiece, byte_bpe):
    ids, mask = pad_batch([[5, 6, 7], [8]], pad_id=1, max_len=2)
    assert ids.tolist() == [[5, 6], [8, 1]] and mask.tolist() == [[True, True], [True, False]]
    with pytest.raises(ValueError, match="at least one"):
        pad_batch([], pad_id=0)
    batch = encode_texts(
        wordpiece, ["The dog ate the jam.", "A cat."], ["It was sweet.", "It slept."], max_len=8
    )
    assert batch["input_ids"].shape[1] <= 8
    assert batch["input_ids"][0, 0] == 2 and (batch["input_ids"][~batch["attention_mask"]] == 0).all()
    assert batch["token_type_ids"].max() == 1
    rb = encode_texts(byte_bpe, ["A dog.", "A much longer sentence about a cat."])
    assert (rb["input_ids"][~rb["attention_mask"]] == 1).all()  # RoBERTa pads with 1
    assert special_ids(byte_bpe) == {"pad": 1, "unk": 3, "cls": 0, "sep": 2, "mask": 4}
    assert special_ids(wordpiece) == {"pad": 0, "unk": 1, "cls": 2, "sep": 3, "mask": 4}
    # encode_texts leaves the tokenizer without truncation
    assert len(wordpiece.encode(" ".join(["dog"] * 50)).ids) == 52
    # max_len=None: no truncation; a number keeps the final [SEP]
    long = " ".join(["dog"] * 200)
    assert encode_texts(wordpiece, [long], max_len=None)["input_ids"].shape == (1, 202)
    cut = encode_texts(wordpiece, [long], max_len=16)["input_ids"]
    assert cut.shape == (1, 16) and cut[0, -1] == 3


def test_bad_tokenizer_arguments():
    with pytest.raises(ValueError, match="vocab_size"):
        train_wordpiece(["a b"], vocab_size=10)
    with pytest.raises(ValueError, match="vocab_size"):
        train_byte_bpe(["a b"], vocab_size=100)
    with pytest.raises(ValueError, match="at least one text"):
        train_wordpiece([], vocab_size=100)
    with pytest.raises(ValueError, match="num_merges"):
        learn_bpe({"ab": 1}, -1)


def test_minilm_vocabulary_reads_the_corpus(corpus):
    vocab = minilm.minilm_vocab()
    assert len(vocab) == 30522 and minilm.minilm_special_ids() == {
        "pad": 0,
        "unk": 100,
        "cls": 101,
        "sep": 102,
        "mask": 103,
    }
    tok = minilm.minilm_tokenizer()
    assert special_ids(tok) == minilm.minilm_special_ids()
    ids = [i for s in corpus[:300] for i in tok.encode(s.text).ids]
    assert ids.count(100) / len(ids) < 0.001  # real English: the corpus is almost free of [UNK]
    enc = tok.encode("There is a traffic jam, so I began to eat my apple jam.")
    assert enc.tokens[:6] == ["[CLS]", "there", "is", "a", "traffic", "jam"]
    assert all(vocab[t] == i for t, i in zip(enc.tokens, enc.ids))


def test_the_unknown_token_is_the_models_own(wordpiece, byte_bpe):
    """WordPiece names ``[UNK]`` and gives it to text outside its vocabulary; byte-level BPE
    has an ``<unk>`` entry among its specials but never needs it, so it has no unknown id."""
    unk = unknown_id(wordpiece)
    assert unk == special_ids(wordpiece)["unk"] and unk in wordpiece.encode("猫坐在垫子上").ids
    assert unknown_id(byte_bpe) is None and special_ids(byte_bpe)["unk"] is not None
    assert special_ids(byte_bpe)["unk"] not in byte_bpe.encode("猫坐在垫子上 🙂").ids
