"""RoBERTa: position ids, parity with Hugging Face, the length limit, left padding."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
import torch

from course_lib.models.bert import BertConfig
from course_lib.models.roberta import (
    RobertaConfig,
    RobertaForMaskedLM,
    RobertaForSequenceClassification,
    RobertaModel,
    roberta_position_ids,
)

transformers = pytest.importorskip("transformers")

TOL = 1e-5
PAD = 1
TINY = dict(
    vocab_size=99,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=37,
    max_position_embeddings=22,  # 20 tokens + padding_idx + 1
    type_vocab_size=1,
    pad_token_id=PAD,
    layer_norm_eps=1e-5,
)


def hf_config(attn="eager", **overrides):
    return transformers.RobertaConfig(**{**TINY, **overrides}, attn_implementation=attn)


def make_batch(seed=0):
    """<s> ... </s> with right padding (pad id 1) in two rows and left padding in one."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, 99, (4, 12), generator=g)
    ids[:, 0] = 0
    mask = torch.ones_like(ids)
    mask[1, 8:] = 0
    mask[2, 4:] = 0
    mask[3, :5] = 0  # left padding
    ids = ids.masked_fill(mask == 0, PAD)
    return {"input_ids": ids, "attention_mask": mask}


def maxdiff(a, b):
    return (a - b).abs().max().item()


def test_position_ids_match_hf_and_skip_padding():
    from transformers.models.roberta.modeling_roberta import RobertaEmbeddings as HFEmb

    ids = make_batch()["input_ids"]
    ours = roberta_position_ids(ids, PAD)
    assert torch.equal(ours, HFEmb.create_position_ids_from_input_ids(ids, PAD))
    assert ours[0].tolist() == list(range(2, 14))  # real tokens count from padding_idx + 1
    assert (ours[ids == PAD] == PAD).all()
    assert ours[3, 5:].tolist() == list(range(2, 9))  # left padding does not shift positions


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
@pytest.mark.parametrize("act", ["gelu", "relu"])
def test_masked_lm_parity(attn, act):
    torch.manual_seed(1)
    hf = transformers.RobertaForMaskedLM(hf_config(attn, hidden_act=act)).eval()
    ours = RobertaForMaskedLM.from_hf(hf)
    assert isinstance(ours.config, RobertaConfig)
    batch = make_batch()
    labels = torch.where(batch["attention_mask"].bool(), batch["input_ids"], -100)
    eager = attn == "eager"
    with torch.no_grad():
        ref = hf(**batch, labels=labels, output_attentions=eager, output_hidden_states=True)
        out = ours(**batch, labels=labels, output_attentions=eager, output_hidden_states=True)
    assert maxdiff(out.logits, ref.logits) <= TOL  # with relu layers the head still uses GELU
    assert abs(out.loss.item() - ref.loss.item()) <= TOL
    for a, b in zip(out.hidden_states, ref.hidden_states, strict=True):
        assert maxdiff(a, b) <= TOL
    if eager:
        for a, b in zip(out.attentions, ref.attentions, strict=True):
            assert maxdiff(a, b) <= TOL


def test_base_model_and_classifier_parity():
    torch.manual_seed(2)
    hf = transformers.RobertaModel(hf_config("eager", type_vocab_size=2)).eval()
    ours = RobertaModel.from_hf(hf)
    batch = make_batch(seed=1)
    batch["token_type_ids"] = (torch.arange(12) >= 6).long().expand(4, 12).clone()
    with torch.no_grad():
        ref, out = hf(**batch), ours(**batch)
    assert maxdiff(out.last_hidden_state, ref.last_hidden_state) <= TOL
    assert maxdiff(out.pooler_output, ref.pooler_output) <= TOL

    torch.manual_seed(3)
    hfc = transformers.RobertaForSequenceClassification(hf_config("sdpa", num_labels=3)).eval()
    clf = RobertaForSequenceClassification.from_hf(hfc)
    labels = torch.tensor([0, 1, 2, 1])
    with torch.no_grad():
        ref, out = hfc(**make_batch(seed=2), labels=labels), clf(**make_batch(seed=2), labels=labels)
    assert maxdiff(out.logits, ref.logits) <= TOL
    assert abs(out.loss.item() - ref.loss.item()) <= TOL


def test_left_padding_leaves_real_tokens_unchanged():
    """Positions skip padding, so a left-padded sequence encodes exactly like the bare one."""
    model = RobertaModel(RobertaConfig(**TINY)).eval()
    ids = torch.randint(3, 99, (1, 8))
    padded = torch.cat([torch.full((1, 3), PAD), ids], 1)
    with torch.no_grad():
        alone = model(ids).last_hidden_state
        left = model(padded, attention_mask=(padded != PAD).long()).last_hidden_state
    assert maxdiff(left[:, 3:], alone) <= TOL


def test_length_limit_counts_the_reserved_positions():
    config = RobertaConfig(**TINY)
    assert config.max_len == 20
    model = RobertaModel(config)
    model(torch.full((1, 20), 5))
    with pytest.raises(ValueError, match="max_position_embeddings=22"):
        model(torch.full((1, 21), 5))


def test_config_defaults_are_roberta_base():
    c = RobertaConfig()
    assert (c.vocab_size, c.max_position_embeddings, c.type_vocab_size, c.pad_token_id, c.max_len) == (
        50265,
        514,
        1,
        1,
        512,
    )
    with torch.device("meta"):
        assert RobertaModel(c).num_parameters() == 124_645_632
    with pytest.raises(TypeError, match="RobertaConfig"):
        RobertaModel(BertConfig(**{k: v for k, v in TINY.items()}))


def test_mlm_decoder_tied_and_untied_from_hf():
    torch.manual_seed(4)
    hf = transformers.RobertaForMaskedLM(hf_config(tie_word_embeddings=False)).eval()
    ours = RobertaForMaskedLM.from_hf(hf)
    assert ours.mlm_head.decoder.weight is not ours.roberta.embeddings.word_embeddings.weight
    batch = make_batch(seed=5)
    with torch.no_grad():
        assert maxdiff(ours(**batch).logits, hf(**batch).logits) <= TOL
    tied = RobertaForMaskedLM(RobertaConfig(**TINY))
    assert tied.mlm_head.decoder.weight is tied.roberta.embeddings.word_embeddings.weight


def test_bert_and_roberta_configs_refuse_each_other():
    with pytest.raises(ValueError, match="RobertaConfig"):
        BertConfig.from_hf(hf_config())
    with pytest.raises(ValueError, match="BertConfig"):
        RobertaConfig.from_hf(transformers.BertConfig(**{k: v for k, v in TINY.items()}))
