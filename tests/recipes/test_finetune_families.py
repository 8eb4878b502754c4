"""course_lib.recipes.finetune across model families: the start's family chooses the tagger
(BERT's or XLNet's), both fine-tune and evaluate the same way, freeze_body keeps XLNet's body
bit-identical, and a start of no family is a clear error."""

from __future__ import annotations

import pytest
import torch

from course_lib.models.albert import AlbertConfig, AlbertForMaskedLM
from course_lib.models.bert import BertConfig, BertForMaskedLM, BertForTokenClassification
from course_lib.models.transfo_xl import TransfoXLConfig, TransfoXLLMHeadModel
from course_lib.models.xlnet import (
    XLNetConfig,
    XLNetForTokenClassification,
    XLNetLMHeadModel,
    XLNetTaskConfig,
)
from course_lib.recipes.common import load_pretrained, save_pretrained
from course_lib.recipes.finetune import (
    RELATIVE_MAX_LEN,
    family_of,
    finetune_classifier,
    finetune_tagger,
    input_length,
    start_model,
    tagging_accuracy,
)
from course_lib.recipes.finetune_command import register_task_models

V = 300  # the conftest tokenizer's vocabulary
BERT = BertConfig(
    vocab_size=V,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=2,
    intermediate_size=64,
    max_position_embeddings=64,
)
XLNET = XLNetConfig(vocab_size=V, d_model=32, n_layer=2, n_head=2, d_inner=64)
RUN = dict(num_labels=2, steps=30, batch_size=8, lr=3e-3, device="cpu", progress=False)


def _pretrained(family: str):
    """A 'pretrained' start of the family (random weights: the recipe only copies them)."""
    torch.manual_seed(1)
    return (BertForMaskedLM(BERT) if family == "bert" else XLNetLMHeadModel(XLNET)).eval()


@pytest.mark.parametrize("family", ["bert", "xlnet"])
def test_finetune_tagger_fine_tunes_both_families_the_same_way(family, tok, noun_task):
    start = _pretrained(family)
    train, test = noun_task(32, 0), noun_task(12, 1)
    tagger, history = finetune_tagger(start, tok, train, eval_items=test, eval_every=15, **RUN)
    expected = BertForTokenClassification if family == "bert" else XLNetForTokenClassification
    assert type(tagger) is expected and not tagger.training
    first, last = sum(history.loss[:5]) / 5, sum(history.loss[-5:]) / 5
    assert last < first - 0.1, (first, last)
    scores = tagging_accuracy(tagger, tok, test, known_words={w for ws, _ in train for w in ws})
    assert history.evals["accuracy"][-1] == scores["accuracy"] > 0.8
    assert history.evals["unseen_accuracy"][-1] == scores["unseen_accuracy"]


def test_an_xlnet_start_copies_the_body_and_shares_the_new_layer_with_a_random_start():
    lm = _pretrained("xlnet")
    assert family_of(lm).name == family_of(lm.transformer).name == family_of(XLNET).name == "XLNet"
    for start in (lm, lm.transformer):
        model, body = start_model(start, XLNetForTokenClassification, 0, "cpu", num_labels=3)
        assert body is lm.transformer and isinstance(model.config, XLNetTaskConfig)
        assert model.config.num_labels == 3 and model.config.d_model == XLNET.d_model
        mine, theirs = model.transformer.state_dict(), lm.transformer.state_dict()
        assert all(torch.equal(mine[k], theirs[k]) for k in theirs)
    scratch, none = start_model(XLNET, XLNetForTokenClassification, 0, "cpu", num_labels=3)
    assert none is None and torch.equal(scratch.classifier.weight, model.classifier.weight)
    assert not torch.equal(scratch.transformer.word_embedding.weight, lm.transformer.word_embedding.weight)
    assert input_length(model.config) == RELATIVE_MAX_LEN and input_length(BERT) == BERT.max_len


def test_freeze_body_keeps_xlnet_body_bit_identical(tok, noun_task):
    lm = _pretrained("xlnet")
    before = {k: v.clone() for k, v in lm.transformer.state_dict().items()}
    tagger, history = finetune_tagger(lm, tok, noun_task(16, 2), freeze_body=True, **{**RUN, "steps": 8})
    c = tagger.config
    assert c.dropout == 0.0 and c.classifier_dropout == XLNET.dropout and tagger.dropout.p == XLNET.dropout
    body = tagger.transformer.state_dict()
    assert all(torch.equal(body[k], before[k]) for k in before)
    assert all(torch.equal(v, before[k]) for k, v in lm.transformer.state_dict().items())  # start untouched
    trained, _ = start_model(lm, XLNetForTokenClassification, 0, "cpu", num_labels=2)
    assert not torch.equal(tagger.classifier.weight, trained.classifier.weight)  # the head did train
    assert len(history.loss) == 8


def test_a_start_of_no_family_is_a_clear_error(tok, noun_task):
    items = noun_task(4, 3)
    transfo = TransfoXLLMHeadModel(TransfoXLConfig(vocab_size=V, d_model=16, n_layer=1, n_head=2, d_head=8))
    for bad in (transfo, torch.nn.Linear(2, 2), "bert", TransfoXLConfig()):
        with pytest.raises(TypeError, match="fine-tuning starts from"):
            finetune_tagger(bad, tok, items, **RUN)
    albert = AlbertForMaskedLM(
        AlbertConfig(
            vocab_size=V,
            hidden_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            intermediate_size=64,
            embedding_size=16,
        )
    )
    with pytest.raises(TypeError, match="no ALBERT tagger"):
        finetune_tagger(albert, tok, items, **RUN)
    with pytest.raises(TypeError, match="no XLNet classifier"):
        finetune_classifier(_pretrained("xlnet"), tok, [("a cat", 0), ("the dog", 1)], steps=1)
    with pytest.raises(TypeError, match="starts from a XLNetModel body"):
        start_model(_pretrained("bert"), XLNetForTokenClassification, 0, "cpu")


def test_an_xlnet_tagger_saves_and_loads(tok, tmp_path, noun_task):
    register_task_models()
    tagger, _ = finetune_tagger(XLNET, tok, noun_task(8, 4), **{**RUN, "steps": 2})
    save_pretrained(tmp_path / "t", tagger, tok, metadata={"note": "test"})
    loaded, _ = load_pretrained(tmp_path / "t")
    assert type(loaded) is XLNetForTokenClassification and loaded.config == tagger.config
    items = noun_task(4, 5)
    assert tagging_accuracy(loaded, tok, items) == tagging_accuracy(tagger, tok, items)
