"""all-MiniLM-L6-v2 in course_lib: same outputs as transformers and sentence-transformers
(offline), and the chapter's attention and contextual-similarity helpers."""

import os

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

import pytest
import torch

from course_lib.analysis import head_scores, word_attention
from course_lib.data import find_word
from course_lib.data.minilm import minilm_dir
from course_lib.data.tokenizers import encode_texts
from course_lib.pretrained import (
    contextual_similarity,
    load_minilm,
    mean_pool,
    sentence_embeddings,
    word_vectors,
)

TOL = 1e-5
TIRED = "The animal didn't cross the street because it was too tired"
WIDE = "The animal didn't cross the street because it was too wide"
TEXTS = [
    "A man is playing a guitar.",
    TIRED,
    "Tokenization splits unbelievably long words into pieces.",
    "I spread strawberry jam on my toast, then we sat in a traffic jam for an hour on the way to work.",
]


@pytest.fixture(scope="module")
def minilm():
    return load_minilm()


def test_loads_as_a_course_bert(minilm):
    model, tok = minilm
    c = model.config
    assert (c.num_hidden_layers, c.hidden_size, c.num_attention_heads, c.intermediate_size) == (
        6,
        384,
        12,
        1536,
    )
    assert c.vocab_size == 30522
    assert model.num_parameters() == 22_713_216
    assert not model.training
    assert tok.token_to_id("[MASK]") == 103


def test_matches_transformers_bert_on_pairs_with_padding(minilm):
    transformers = pytest.importorskip("transformers")
    model, tok = minilm
    hf = transformers.BertModel.from_pretrained(str(minilm_dir()), attn_implementation="eager").eval()
    batch = encode_texts(tok, TEXTS, ["Is it a question?", "No.", "Yes, a second segment here.", "jam"])
    assert (batch["attention_mask"] == 0).any() and (batch["token_type_ids"] == 1).any()
    with torch.no_grad():
        ref = hf(**batch, output_attentions=True)
        out = model(**batch, output_attentions=True)
    assert (out.last_hidden_state - ref.last_hidden_state).abs().max() <= TOL
    assert (out.pooler_output - ref.pooler_output).abs().max() <= TOL
    for a, b in zip(out.attentions, ref.attentions, strict=True):
        assert (a - b).abs().max() <= TOL


def test_sentence_embeddings_match_sentence_transformers(minilm):
    st_mod = pytest.importorskip("sentence_transformers")
    model, tok = minilm
    st = st_mod.SentenceTransformer(str(minilm_dir()), device="cpu")
    ref = st.encode(TEXTS, convert_to_tensor=True, batch_size=8)
    ours = sentence_embeddings(model, tok, TEXTS)
    assert ours.shape == (4, 384)
    assert (ours - ref.cpu()).abs().max() <= TOL
    assert torch.allclose(ours.norm(dim=-1), torch.ones(4), atol=1e-6)


def test_mean_pool_ignores_padding():
    h = torch.randn(2, 5, 3)
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])
    pooled = mean_pool(h, mask)
    assert torch.allclose(pooled[0], h[0, :3].mean(0)) and torch.allclose(pooled[1], h[1].mean(0))


def test_word_attention_rows_and_the_it_animal_heads(minilm):
    model, tok = minilm
    wa = word_attention(model, tok, TIRED, "it")
    assert wa.tokens[wa.source[0]] == "it"
    assert wa.weights.shape == (6, 12, len(wa.tokens))
    assert torch.allclose(wa.weights.sum(-1), torch.ones(6, 12), atol=1e-5)
    tired = head_scores(model, tok, TIRED, "it", "animal")
    wide = head_scores(model, tok, WIDE, "it", "animal")
    assert tired.shape == (6, 12)
    # in this model some head sends most of "it"'s attention to "animal" when the animal is
    # tired, and that link weakens when the adjective fits the street
    assert tired.max() > 0.5
    assert tired.max() > wide.max()


def test_contextual_similarity_separates_the_two_jams(minilm):
    model, tok = minilm
    toast = "I spread strawberry jam on my toast."
    fruit = "She made raspberry jam from the garden fruit."
    traffic = "We were stuck in a traffic jam for an hour."
    same_sense = contextual_similarity(model, tok, toast, fruit, "jam")
    other_sense = contextual_similarity(model, tok, toast, traffic, "jam")
    assert same_sense.shape == (7,)
    assert same_sense[-1] > other_sense[-1]
    # two occurrences inside one sentence
    both = TEXTS[3]
    v0 = word_vectors(model, tok, both, "jam", occurrence=0)
    v1 = word_vectors(model, tok, both, "jam", occurrence=1)
    assert not torch.allclose(v0[-1], v1[-1])


def test_find_word_handles_word_pieces_and_missing_words(minilm):
    _, tok = minilm
    text = "Tokenization splits unbelievably long words."
    enc = tok.encode(text)
    pieces = find_word(enc, text, "unbelievably")
    assert len(pieces) > 1 and "".join(enc.tokens[i].lstrip("#") for i in pieces) == "unbelievably"
    with pytest.raises(ValueError, match="occurs 0 time"):
        find_word(enc, text, "jam")


def test_encode_texts_truncates_like_sentence_transformers(minilm):
    _, tok = minilm
    batch = encode_texts(tok, ["word " * 400], max_len=256)
    assert batch["input_ids"].shape == (1, 256)
    assert batch["input_ids"][0, -1].item() == tok.token_to_id("[SEP]")
