"""The feature-based taggers of finetune_tagger (features="last" | "scalar_mix" | "top_bilstm"):
"last" is the tagger it always was (the same losses as before the option existed), the mix
weights learn while the encoder stays exactly frozen, the BiLSTM reads only the real tokens,
the linear layer starts where the fine-tuned tagger's does, and bad combinations are refused."""

from __future__ import annotations

import math

import pytest
import torch

from course_lib.device import seed_everything
from course_lib.models.bert import BertForTokenClassification, BertModel
from course_lib.recipes.bert import bert_config
from course_lib.recipes.finetune import (
    FEATURES,
    ScalarMixTagger,
    TopLayersBiLSTMTagger,
    finetune_tagger,
    start_model,
    tagging_accuracy,
)

# finetune_tagger's losses on this set-up, recorded before the features option existed
# (x86, torch 2.13, one thread): features="last" must keep them
LOSSES_BEFORE = {
    True: [1.1125686168670654, 1.126556396484375, 1.0826292037963867, 1.123741626739502],
    False: [1.1085200309753418, 1.1048743724822998, 1.0271012783050537, 1.065117359161377],
}


@pytest.fixture(scope="module")
def body(tok):
    seed_everything(7)
    return BertModel(bert_config("tiny", vocab_size=tok.get_vocab_size(), max_len=32))


def _tag(body, tok, items, **kw):
    kw = dict(num_labels=3, steps=4, batch_size=4, lr=1e-2, device="cpu", progress=False) | kw
    return finetune_tagger(body, tok, items, **kw)


@pytest.mark.parametrize("frozen", [True, False])
def test_last_layer_tagger_is_unchanged(body, tok, mod3_items, frozen):
    prev = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        tagger, h = _tag(body, tok, mod3_items, freeze_body=frozen, eval_items=mod3_items[:5])
    finally:
        torch.set_num_threads(prev)
    assert type(tagger) is BertForTokenClassification
    assert all(math.isclose(a, b, rel_tol=1e-5) for a, b in zip(h.loss, LOSSES_BEFORE[frozen], strict=True))
    _, again = _tag(body, tok, mod3_items, freeze_body=frozen, features="last")
    assert again.loss == _tag(body, tok, mod3_items, freeze_body=frozen)[1].loss


def test_scalar_mix_learns_its_weights_and_keeps_the_encoder_frozen(body, tok, mod3_items):
    tagger, h = _tag(
        body, tok, mod3_items, freeze_body=True, features="scalar_mix", steps=8, eval_items=mod3_items[:8]
    )
    assert isinstance(tagger, ScalarMixTagger)
    mix = tagger.scalar_mix
    assert mix.mixture_size == body.config.num_hidden_layers + 1  # embeddings' output + every layer
    w = mix.weights.detach()
    assert math.isclose(float(w.sum()), 1.0, rel_tol=1e-6)
    assert float((w - 1 / mix.mixture_size).abs().max()) > 1e-3  # moved from uniform
    assert mix.gamma.item() != 1.0
    start = dict(body.named_parameters())
    for name, p in tagger.bert.named_parameters():
        assert torch.equal(p, start[name]), name
        assert not p.requires_grad, name
    # it evaluates through the same path as every tagger
    assert h.evals["accuracy"][-1] == tagging_accuracy(tagger, tok, mod3_items[:8])["accuracy"]
    # the output mixes the hidden states as ScalarMix says, and the tagger's linear layer reads it
    enc = {k: v[:2] for k, v in _inputs(tok, mod3_items).items()}
    with torch.no_grad():
        hidden = tagger.bert(**enc, output_hidden_states=True).hidden_states
        want = tagger.classifier(mix.gamma * sum(wj * hj for wj, hj in zip(w, hidden, strict=True)))
        got = tagger(enc["input_ids"], enc["attention_mask"], enc["token_type_ids"]).logits
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def _inputs(tok, items):
    from course_lib.objectives import tagging_inputs

    words, tags = zip(*items)
    enc = tagging_inputs(tok, [list(w) for w in words], [list(t) for t in tags], max_len=32)
    return {k: enc[k] for k in ("input_ids", "attention_mask", "token_type_ids")}


def test_bilstm_reads_the_real_tokens_only_and_trains_only_its_head(body, tok, mod3_items):
    tagger, _ = _tag(body, tok, mod3_items, freeze_body=True, features="top_bilstm")
    assert isinstance(tagger, TopLayersBiLSTMTagger)
    assert tagger.top == min(4, body.config.num_hidden_layers + 1)
    assert tagger.lstm.input_size == tagger.top * body.config.hidden_size
    start = dict(body.named_parameters())
    assert all(torch.equal(p, start[name]) for name, p in tagger.bert.named_parameters())
    # a sentence alone and inside a padded batch: the same logits on its tokens
    enc = _inputs(tok, mod3_items)
    n = enc["attention_mask"].sum(1)
    short = int(n.argmin())
    assert int(n[short]) < enc["input_ids"].size(1)  # it is padded in the batch
    with torch.no_grad():
        batch = tagger(enc["input_ids"], enc["attention_mask"], enc["token_type_ids"]).logits[short]
        k = int(n[short])
        alone = tagger(
            *(enc[x][short : short + 1, :k] for x in ("input_ids", "attention_mask", "token_type_ids"))
        )
    torch.testing.assert_close(batch[:k], alone.logits[0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("tagger_class", [ScalarMixTagger, TopLayersBiLSTMTagger])
def test_feature_taggers_start_with_the_fine_tuned_taggers_linear_layer(body, tagger_class):
    changes = dict(num_labels=5)
    plain, _ = start_model(body, BertForTokenClassification, 3, "cpu", **changes)
    feat, _ = start_model(body, tagger_class, 3, "cpu", **changes)
    assert torch.equal(plain.classifier.weight, feat.classifier.weight)
    assert torch.equal(plain.classifier.bias, feat.classifier.bias)


@pytest.mark.parametrize("tagger_class", [ScalarMixTagger, TopLayersBiLSTMTagger])
def test_feature_taggers_return_hidden_states_only_when_asked(body, tok, mod3_items, tagger_class):
    tagger, _ = start_model(body, tagger_class, 3, "cpu", num_labels=3)
    tagger.eval()
    enc = {k: v[:3] for k, v in _inputs(tok, mod3_items).items()}
    ids, mask, types = enc["input_ids"], enc["attention_mask"], enc["token_type_ids"]
    with torch.no_grad():
        plain = tagger(ids, mask, types)
        asked = tagger(ids, mask, types, output_hidden_states=True)
        hidden = tagger.bert(ids, mask, types, output_hidden_states=True).hidden_states
        want = tagger.classifier(tagger.combine(hidden, mask))
        unmasked = tagger(ids)  # no attention mask: every position is a real token
        all_real = tagger(ids, torch.ones_like(ids))
    assert plain.hidden_states is None and plain.attentions is None
    assert len(asked.hidden_states) == body.config.num_hidden_layers + 1
    for a, b in zip(asked.hidden_states, hidden, strict=True):
        torch.testing.assert_close(a, b)
    torch.testing.assert_close(plain.logits, asked.logits)
    torch.testing.assert_close(plain.logits, want, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(unmasked.logits, all_real.logits)


def test_bad_feature_options_are_refused(body, tok, mod3_items):
    assert FEATURES == ("last", "scalar_mix", "top_bilstm")
    with pytest.raises(ValueError, match="features must be one of"):
        _tag(body, tok, mod3_items, freeze_body=True, features="concat")
    for f in ("scalar_mix", "top_bilstm"):
        with pytest.raises(ValueError, match="needs freeze_body=True"):
            _tag(body, tok, mod3_items, features=f)
    from course_lib.models.xlnet import XLNetConfig

    xlnet = XLNetConfig(vocab_size=tok.get_vocab_size(), d_model=32, n_layer=2, n_head=2, d_inner=64)
    with pytest.raises(TypeError, match="builds on BERT's tagger; an XLNet start takes features='last' only"):
        _tag(xlnet, tok, mod3_items, freeze_body=True, features="scalar_mix")
