"""The course's text data: a generated corpus with gold trees, tokenizers, user text, real vocabularies.

* :mod:`~course_lib.data.corpus`: English sentences and documents from a probabilistic
  grammar, with POS tags, dependency trees (0-based heads, -1 = root) and phenomenon labels;
  tree distances and depths for probing.
* :mod:`~course_lib.data.chars`: ELMo's character codec (word <-> 50 character ids).
* :mod:`~course_lib.data.tokenizers`: word ids, WordPiece and byte-level BPE (Hugging Face
  ``tokenizers``), a teaching BPE.
* :mod:`~course_lib.data.tasks`: agreement acceptability, word senses (*jam*), Winograd
  pronoun pairs, multi-token names, NSP / SOP pairs.
* :mod:`~course_lib.data.seq2seq`: sequence-to-sequence tasks generated in code (reversal).
* :mod:`~course_lib.data.text_files`: the same objects from your own text files.
* :mod:`~course_lib.data.documents`: documents as the pretraining recipes read them (a
  tokenizer trained on them, token ids per sentence, segments, a held-out split).
* :mod:`~course_lib.data.minilm`: the real all-MiniLM-L6-v2 vocabulary and tokenizer.
"""

from .chars import elmo_char_ids
from .corpus import (
    DEPRELS,
    PHENOMENA,
    UPOS_TAGS,
    CorpusConfig,
    Document,
    Sentence,
    corpus_stats,
    generate_corpus,
    generate_documents,
    is_projective,
    is_valid_tree,
    to_conllu,
    tree_depths,
    tree_distances,
    validate_tree,
)
from .lexicon import TOPICS, load_lexicon
from .minilm import minilm_config, minilm_dir, minilm_special_ids, minilm_tokenizer, minilm_vocab
from .tasks import (
    agreement_examples,
    agreement_pairs,
    name_sentences,
    pronoun_pairs,
    sense_examples,
    sense_words,
    topic_pairs,
)
from .text_files import load_documents, load_sentences, read_text_files, source_fingerprint
from .tokenizers import (
    BERT_SPECIALS,
    ROBERTA_SPECIALS,
    WordVocab,
    bpe_segment,
    encode_texts,
    find_word,
    learn_bpe,
    pad_batch,
    special_ids,
    train_byte_bpe,
    train_wordpiece,
)
from .words import detokenize, split_sentences, word_tokenize

__all__ = [
    "DEPRELS",
    "PHENOMENA",
    "UPOS_TAGS",
    "TOPICS",
    "CorpusConfig",
    "Document",
    "Sentence",
    "corpus_stats",
    "generate_corpus",
    "generate_documents",
    "is_projective",
    "is_valid_tree",
    "to_conllu",
    "tree_depths",
    "tree_distances",
    "validate_tree",
    "load_lexicon",
    "minilm_config",
    "minilm_dir",
    "minilm_special_ids",
    "minilm_tokenizer",
    "minilm_vocab",
    "agreement_examples",
    "agreement_pairs",
    "name_sentences",
    "pronoun_pairs",
    "sense_examples",
    "sense_words",
    "topic_pairs",
    "load_documents",
    "load_sentences",
    "read_text_files",
    "source_fingerprint",
    "BERT_SPECIALS",
    "ROBERTA_SPECIALS",
    "WordVocab",
    "bpe_segment",
    "elmo_char_ids",
    "encode_texts",
    "find_word",
    "learn_bpe",
    "pad_batch",
    "special_ids",
    "train_byte_bpe",
    "train_wordpiece",
    "detokenize",
    "split_sentences",
    "word_tokenize",
]
