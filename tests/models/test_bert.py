"""BERT in course_lib: parity with Hugging Face transformers (every output, every activation),
the interop contract, configuration, heads and losses."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
import torch

import course_lib
from course_lib.models.bert import (
    BertConfig,
    BertForMaskedLM,
    BertForPreTraining,
    BertForSequenceClassification,
    BertForTokenClassification,
    BertLMHeadModel,
    BertModel,
    masked_lm_loss,
)
from course_lib.nn import ACTIVATIONS

transformers = pytest.importorskip("transformers")
from transformers.activations import ACT2FN  # noqa: E402

TOL = 1e-5
TINY = dict(
    vocab_size=99,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=37,
    max_position_embeddings=20,
    type_vocab_size=2,
)
# every activation name a BERT config may carry that both libraries know
HF_ACTIVATIONS = sorted(a for a in ACTIVATIONS if a in ACT2FN)


def hf_config(attn="eager", **overrides):
    kw = {**TINY, **overrides}
    return transformers.BertConfig(**kw, attn_implementation=attn)


def make_batch(seed=0, batch=4, seq=13, vocab=99):
    """Ids with padding (three different lengths) and sentence-pair token types."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, vocab, (batch, seq), generator=g)
    lengths = torch.tensor([seq, seq - 4, 5, 3][:batch])
    attention_mask = (torch.arange(seq)[None, :] < lengths[:, None]).long()
    ids = ids * attention_mask  # pad id 0
    split = (lengths // 2)[:, None]
    token_type_ids = ((torch.arange(seq)[None, :] >= split) & attention_mask.bool()).long()
    return {"input_ids": ids, "attention_mask": attention_mask, "token_type_ids": token_type_ids}


def maxdiff(a, b):
    return (a - b).abs().max().item()


def seeded(cls, config, seed=1):
    torch.manual_seed(seed)
    return cls(config).eval()


def test_contract_names_are_exported():
    for name in ["BertModel", "BertForPreTraining", "BertForMaskedLM", "RobertaModel", "RobertaForMaskedLM"]:
        cls = getattr(course_lib, name)
        assert callable(getattr(cls, "from_hf"))
    assert course_lib.BertConfig is BertConfig


@pytest.mark.parametrize("act", HF_ACTIVATIONS)
def test_pretraining_parity_every_activation(act):
    """hidden states of every layer, pooler, MLM and NSP logits and every layer's attention weights."""
    hf = seeded(transformers.BertForPreTraining, hf_config(hidden_act=act))
    ours = BertForPreTraining.from_hf(hf)
    assert not ours.training
    batch = make_batch()
    with torch.no_grad():
        ref = hf(**batch, output_attentions=True, output_hidden_states=True)
        out = ours(**batch, output_attentions=True, output_hidden_states=True)
        ref_base = hf.bert(**batch)
        out_base = ours.bert(**batch)
    assert maxdiff(out.prediction_logits, ref.prediction_logits) <= TOL
    assert maxdiff(out.seq_relationship_logits, ref.seq_relationship_logits) <= TOL
    assert maxdiff(out_base.last_hidden_state, ref_base.last_hidden_state) <= TOL
    assert maxdiff(out_base.pooler_output, ref_base.pooler_output) <= TOL
    assert len(out.hidden_states) == len(ref.hidden_states) == TINY["num_hidden_layers"] + 1
    for a, b in zip(out.hidden_states, ref.hidden_states):
        assert maxdiff(a, b) <= TOL
    assert len(out.attentions) == len(ref.attentions) == TINY["num_hidden_layers"]
    for a, b in zip(out.attentions, ref.attentions):
        assert a.shape == b.shape == (4, TINY["num_attention_heads"], 13, 13)
        assert maxdiff(a, b) <= TOL


@pytest.mark.parametrize("act", ["gelu", "gelu_new", "relu"])
def test_sdpa_reference_parity(act):
    """Hugging Face's SDPA path against ours (SDPA too when no weights are asked for)."""
    hf = seeded(transformers.BertForPreTraining, hf_config("sdpa", hidden_act=act))
    ours = BertForPreTraining.from_hf(hf)
    batch = make_batch(seed=3)
    with torch.no_grad():
        ref, out = hf(**batch, output_hidden_states=True), ours(**batch, output_hidden_states=True)
    assert maxdiff(out.prediction_logits, ref.prediction_logits) <= TOL
    assert maxdiff(out.seq_relationship_logits, ref.seq_relationship_logits) <= TOL
    for a, b in zip(out.hidden_states, ref.hidden_states):
        assert maxdiff(a, b) <= TOL


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_bert_model_parity_with_and_without_pooler(attn):
    for pool in (True, False):
        torch.manual_seed(2)
        hf = transformers.BertModel(hf_config(attn), add_pooling_layer=pool).eval()
        ours = BertModel.from_hf(hf)
        assert (ours.pooler is not None) == pool
        batch = make_batch(seed=4)
        with torch.no_grad():
            ref = hf(**batch, output_attentions=attn == "eager")
            out = ours(**batch, output_attentions=attn == "eager")
        assert maxdiff(out.last_hidden_state, ref.last_hidden_state) <= TOL
        if pool:
            assert maxdiff(out.pooler_output, ref.pooler_output) <= TOL
        else:
            assert out.pooler_output is None
        if attn == "eager":
            for a, b in zip(out.attentions, ref.attentions):
                assert maxdiff(a, b) <= TOL


def test_masked_lm_parity_and_loss():
    hf = seeded(transformers.BertForMaskedLM, hf_config("eager"))
    ours = BertForMaskedLM.from_hf(hf)
    batch = make_batch(seed=5)
    labels = torch.full_like(batch["input_ids"], -100)
    labels[:, 1:4] = batch["input_ids"][:, 1:4]
    with torch.no_grad():
        ref = hf(**batch, labels=labels, output_attentions=True)
        out = ours(**batch, labels=labels, output_attentions=True)
    assert maxdiff(out.logits, ref.logits) <= TOL
    assert abs(out.loss.item() - ref.loss.item()) <= TOL
    for a, b in zip(out.attentions, ref.attentions):
        assert maxdiff(a, b) <= TOL


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_causal_lm_parity_loss_and_attention(attn):
    """BertLMHeadModel (is_decoder=True): logits, shifted loss and attention weights equal
    Hugging Face's on shared random weights, with padding and token types."""
    hf = seeded(transformers.BertLMHeadModel, hf_config(attn, is_decoder=True))
    ours = BertLMHeadModel.from_hf(hf)
    assert ours.config.is_decoder and ours.num_parameters() == sum(p.numel() for p in hf.parameters())
    batch = make_batch(seed=8)
    labels = batch["input_ids"].masked_fill(batch["attention_mask"] == 0, -100)
    with torch.no_grad():
        ref = hf(**batch, labels=labels, output_attentions=attn == "eager")
        out = ours(**batch, labels=labels, output_attentions=attn == "eager")
    real = batch["attention_mask"].bool()
    assert maxdiff(out.logits[real], ref.logits[real]) <= TOL
    assert abs(out.loss.item() - ref.loss.item()) <= TOL
    if attn == "eager":
        for a, b in zip(out.attentions, ref.attentions):
            assert maxdiff(a, b) <= TOL
            assert a.triu(diagonal=1).abs().max().item() == 0.0  # nothing attends to a later position


def test_causal_lm_never_sees_the_future():
    """Changing the tokens after position t leaves every output up to t exactly unchanged
    (SDPA path and explicit path), while the bidirectional model's outputs move."""
    torch.manual_seed(0)
    causal = BertLMHeadModel(BertConfig(**TINY, is_decoder=True)).eval()
    masked = BertForMaskedLM(BertConfig(**TINY)).eval()
    ids = torch.randint(1, 99, (3, 12))
    later = ids.clone()
    later[:, 7:] = torch.randint(1, 99, (3, 5))
    with torch.no_grad():
        for kw in ({}, {"output_attentions": True}):
            a, b = causal(ids, **kw).logits, causal(later, **kw).logits
            assert torch.equal(a[:, :7], b[:, :7])
            assert (a[:, 7:] - b[:, 7:]).abs().max() > 1e-3
        assert (masked(ids).logits[:, :7] - masked(later).logits[:, :7]).abs().max() > 1e-3
    with pytest.raises(ValueError, match="is_decoder"):
        BertLMHeadModel(BertConfig(**TINY))


def test_pretraining_loss_matches_hf():
    hf = seeded(transformers.BertForPreTraining, hf_config("sdpa"))
    ours = BertForPreTraining.from_hf(hf)
    batch = make_batch(seed=6)
    labels = torch.where(torch.rand(batch["input_ids"].shape) < 0.3, batch["input_ids"], -100)
    labels[:, 1] = batch["input_ids"][:, 1]
    nsp = torch.tensor([0, 1, 1, 0])
    with torch.no_grad():
        ref = hf(**batch, labels=labels, next_sentence_label=nsp)
        out = ours(**batch, labels=labels, next_sentence_label=nsp)
    assert abs(out.loss.item() - ref.loss.item()) <= TOL
    assert abs((out.mlm_loss + out.nsp_loss).item() - out.loss.item()) <= 1e-6


@pytest.mark.parametrize("num_labels", [1, 3])
def test_sequence_classification_parity(num_labels):
    hf = seeded(transformers.BertForSequenceClassification, hf_config("sdpa", num_labels=num_labels))
    ours = BertForSequenceClassification.from_hf(hf)
    assert ours.config.num_labels == num_labels
    batch = make_batch(seed=7)
    labels = torch.tensor([0.5, -1.0, 2.0, 0.0]) if num_labels == 1 else torch.tensor([0, 2, 1, 2])
    with torch.no_grad():
        ref = hf(**batch, labels=labels)
        out = ours(**batch, labels=labels)
    assert out.logits.shape == (4, num_labels)
    assert maxdiff(out.logits, ref.logits) <= TOL
    assert abs(out.loss.item() - ref.loss.item()) <= TOL


def test_token_classification_parity():
    """Tagging head on every token: logits and the loss with -100 at padding and at some
    word pieces (the paper's "first piece of each word" recipe)."""
    hf = seeded(transformers.BertForTokenClassification, hf_config("sdpa", num_labels=5))
    ours = BertForTokenClassification.from_hf(hf)
    assert ours.bert.pooler is None and ours.num_parameters() == sum(p.numel() for p in hf.parameters())
    batch = make_batch(seed=9)
    g = torch.Generator().manual_seed(0)
    labels = torch.randint(0, 5, batch["input_ids"].shape, generator=g)
    labels[batch["attention_mask"] == 0] = -100
    labels[:, 1::3] = -100
    with torch.no_grad():
        ref = hf(**batch, labels=labels)
        out = ours(**batch, labels=labels)
    assert out.logits.shape == (4, 13, 5)
    assert maxdiff(out.logits, ref.logits) <= TOL
    assert abs(out.loss.item() - ref.loss.item()) <= TOL
    with pytest.raises(ValueError, match="labels must be"):
        ours(**batch, labels=labels[:, :5])


def test_untied_decoder_is_copied_separately():
    hf = seeded(transformers.BertForMaskedLM, hf_config(tie_word_embeddings=False))
    assert (
        hf.cls.predictions.decoder.weight.data_ptr() != hf.bert.embeddings.word_embeddings.weight.data_ptr()
    )
    ours = BertForMaskedLM.from_hf(hf)
    assert ours.mlm_head.decoder.weight is not ours.bert.embeddings.word_embeddings.weight
    batch = make_batch(seed=8)
    with torch.no_grad():
        assert maxdiff(ours(**batch).logits, hf(**batch).logits) <= TOL


def test_mlm_decoder_tied_to_input_embeddings_with_own_bias():
    model = BertForPreTraining(BertConfig(**TINY))
    assert model.mlm_head.decoder.weight is model.bert.embeddings.word_embeddings.weight
    assert model.mlm_head.decoder.bias is None and model.mlm_head.bias.shape == (TINY["vocab_size"],)
    # the tied matrix is counted once
    untied = BertForPreTraining(BertConfig(**TINY, tie_word_embeddings=False))
    assert untied.num_parameters() - model.num_parameters() == TINY["vocab_size"] * TINY["hidden_size"]


def test_parameter_counts_match_the_reference_table():
    with torch.device("meta"):
        base = BertModel(BertConfig())
        pre = BertForPreTraining(BertConfig())
        large = BertModel(
            BertConfig(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, intermediate_size=4096)
        )
        no_pool = BertModel(BertConfig(), add_pooling_layer=False)
    assert base.num_parameters() == 109_482_240
    assert no_pool.num_parameters() == 108_891_648
    assert pre.num_parameters() == 110_106_428
    assert large.num_parameters() == 335_141_888


def test_outputs_have_hf_names_and_index_like_hf():
    model = BertModel(BertConfig(**TINY)).eval()
    batch = make_batch()
    out = model(**batch)
    assert out[0] is out.last_hidden_state is out["last_hidden_state"]
    assert out[1] is out.pooler_output
    assert out.keys() == ["last_hidden_state", "pooler_output"]
    hidden, pooled = out
    assert hidden.shape == (4, 13, 32) and pooled.shape == (4, 32)
    with pytest.raises(KeyError):
        out["logits"]


def test_positional_arguments_follow_hf_order():
    model = BertModel(BertConfig(**TINY)).eval()
    b = make_batch()
    a = model(b["input_ids"], b["attention_mask"], b["token_type_ids"]).last_hidden_state
    k = model(
        input_ids=b["input_ids"], attention_mask=b["attention_mask"], token_type_ids=b["token_type_ids"]
    ).last_hidden_state
    assert torch.equal(a, k)


def test_padding_gets_zero_attention_and_does_not_change_real_tokens():
    model = BertModel(BertConfig(**TINY)).eval()
    ids = torch.randint(1, 99, (1, 7))
    padded = torch.cat([ids, torch.zeros(1, 4, dtype=torch.long)], 1)
    mask = (padded != 0).long()
    with torch.no_grad():
        alone = model(ids).last_hidden_state
        out = model(padded, attention_mask=mask, output_attentions=True)
    assert maxdiff(out.last_hidden_state[:, :7], alone) <= TOL
    for w in out.attentions:
        assert w[..., 7:].abs().max() == 0


def test_over_long_input_names_the_position_limit():
    model = BertModel(BertConfig(**TINY))
    with pytest.raises(ValueError, match="max_position_embeddings"):
        model(torch.ones(1, 21, dtype=torch.long))
    model(torch.ones(1, 20, dtype=torch.long))  # exactly the limit is fine


def test_bad_inputs_raise_clear_errors():
    model = BertModel(BertConfig(**TINY))
    ids = torch.ones(2, 5, dtype=torch.long)
    with pytest.raises(ValueError, match="type_vocab_size"):
        model(ids, token_type_ids=torch.full_like(ids, 2))
    with pytest.raises(ValueError, match="vocab_size"):
        model(torch.full_like(ids, 99))
    with pytest.raises(ValueError, match="attention_mask"):
        model(ids, attention_mask=torch.ones(2, 4))
    with pytest.raises(ValueError, match=r"\[batch, seq_len\]"):
        model(torch.ones(5, dtype=torch.long))
    with pytest.raises(ValueError, match="divisible"):
        BertConfig(hidden_size=30, num_attention_heads=4)
    with pytest.raises(ValueError, match="unknown activation"):
        BertConfig(hidden_act="swiglu")


def test_config_has_one_vocabulary_and_from_hf():
    c = BertConfig(
        vocab_size=99,
        hidden_size=32,
        num_attention_heads=4,
        num_hidden_layers=2,
        intermediate_size=128,
        max_position_embeddings=64,
    )
    assert (c.max_len, c.pad_token_id) == (64, 0)  # max_len: the longest input (derived)
    for course_name in ("d_model", "n_heads", "d_head", "n_layers", "d_ff", "pad_id", "from_course"):
        assert not hasattr(c, course_name), course_name
    hfc = hf_config(hidden_act="gelu_new", layer_norm_eps=1e-7, num_labels=5)
    c2 = BertConfig.from_hf(hfc)
    assert (c2.hidden_act, c2.layer_norm_eps, c2.num_labels, c2.intermediate_size) == (
        "gelu_new",
        1e-7,
        5,
        37,
    )
    assert BertConfig.from_hf(hfc.to_dict()) == c2
    assert BertConfig.from_hf({**hfc.to_dict(), "is_decoder": True}).is_decoder
    with pytest.raises(ValueError, match="cross-attention"):
        BertConfig.from_hf({**hfc.to_dict(), "is_decoder": True, "add_cross_attention": True})
    with pytest.raises(ValueError, match="position_embedding_type"):
        BertConfig.from_hf({**hfc.to_dict(), "position_embedding_type": "relative_key"})


def test_mismatched_weights_are_reported():
    hf = seeded(transformers.BertModel, hf_config())
    sd = dict(hf.state_dict())
    del sd["encoder.layer.1.output.dense.weight"]
    with pytest.raises(ValueError, match="missing"):
        BertModel.from_hf_state_dict(sd, BertConfig(**TINY))
    with pytest.raises(ValueError, match="shape"):
        BertModel.from_hf_state_dict(hf.state_dict(), BertConfig(**{**TINY, "intermediate_size": 40}))


def test_masked_lm_loss_with_nothing_masked_is_zero_not_nan():
    logits = torch.randn(2, 5, 11, requires_grad=True)
    loss = masked_lm_loss(logits, torch.full((2, 5), -100))
    assert loss.item() == 0.0
    loss.backward()


def test_dropout_only_in_training_and_grads_reach_every_parameter():
    model = BertForPreTraining(BertConfig(**TINY))
    batch = make_batch()
    labels = batch["input_ids"].masked_fill(batch["attention_mask"] == 0, -100)
    model.train()
    a = model(**batch).prediction_logits
    b = model(**batch).prediction_logits
    assert maxdiff(a, b) > 0
    model.eval()
    assert torch.equal(model(**batch).prediction_logits, model(**batch).prediction_logits)
    model.train()
    model(**batch, labels=labels, next_sentence_label=torch.tensor([0, 1, 0, 1])).loss.backward()
    for name, p in model.named_parameters():
        assert p.grad is not None, name


def test_classifier_from_pretrained_body_keeps_the_encoder():
    body = BertModel(BertConfig(**TINY)).eval()
    clf = BertForSequenceClassification.from_pretrained_body(body, num_labels=4).eval()
    batch = make_batch()
    with torch.no_grad():
        assert torch.equal(clf.bert(**batch).last_hidden_state, body(**batch).last_hidden_state)
        assert clf(**batch).logits.shape == (4, 4)


@pytest.mark.parametrize("cls", [BertForPreTraining, BertForMaskedLM])
def test_masked_only_gives_the_same_loss_and_the_masked_rows(cls):
    model = cls(BertConfig(**TINY)).eval()
    batch = make_batch(seed=9)
    labels = torch.where(torch.rand(batch["input_ids"].shape) < 0.3, batch["input_ids"], -100)
    labels[0, 2] = 7
    full = model(**batch, labels=labels)
    sparse = model(**batch, labels=labels, masked_only=True)
    logits_full, logits_sparse = full.mlm_logits, sparse.mlm_logits  # one accessor for every MLM model
    chosen = labels != -100
    assert logits_sparse.shape == (int(chosen.sum()), TINY["vocab_size"])
    assert maxdiff(logits_sparse, logits_full[chosen]) <= TOL
    assert abs(full.loss.item() - sparse.loss.item()) <= TOL
    with pytest.raises(ValueError, match="needs labels"):
        model(**batch, masked_only=True)


def test_mlm_logits_is_the_one_accessor_of_masked_lm_outputs():
    batch = make_batch(seed=2)
    pre, mlm = BertForPreTraining(BertConfig(**TINY)).eval(), BertForMaskedLM(BertConfig(**TINY)).eval()
    out_pre, out_mlm = pre(**batch), mlm(**batch)
    assert out_pre.mlm_logits is out_pre.prediction_logits and out_mlm.mlm_logits is out_mlm.logits
    assert "mlm_logits" not in out_pre.keys() and len(out_mlm) == 1  # not a field: HF's records are unchanged


def test_forward_checks_inputs_in_one_function():
    from course_lib.models.bert import check_inputs

    c = BertConfig(**TINY)
    ids = torch.ones(2, 5, dtype=torch.long)
    check_inputs(c, ids, torch.ones(2, 5), torch.zeros_like(ids), torch.arange(5)[None])
    with pytest.raises(ValueError, match=r"position ids must lie in \[0, max_position_embeddings=20\)"):
        check_inputs(c, ids, position_ids=torch.full_like(ids, 20))
    with pytest.raises(ValueError, match="token_type_ids must have the shape"):
        check_inputs(c, ids, token_type_ids=torch.zeros(2, 4, dtype=torch.long))
    with pytest.raises(ValueError, match="position ids"):
        BertModel(c)(ids, position_ids=torch.full_like(ids, -1))


def test_torch_compile_sees_one_graph_with_padding_and_without():
    """`course train --compile`: no data-dependent branch breaks the graph (fullgraph=True
    raises on a break), and the compiled model computes what the eager one does."""
    from course_lib.models.bert import BertConfig, BertForMaskedLM

    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=100,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=16,
    )
    model = BertForMaskedLM(config).eval()
    compiled = torch.compile(model, backend="eager", fullgraph=True)
    ids = torch.randint(5, 100, (2, 10))
    padded = torch.ones_like(ids)
    padded[1, 7:] = 0
    for mask in (padded, torch.ones_like(ids)):
        torch.testing.assert_close(
            compiled(ids, attention_mask=mask).logits, model(ids, attention_mask=mask).logits
        )
    torch._dynamo.reset()
