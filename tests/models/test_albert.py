"""ALBERT: parity with Hugging Face (groupings, E != H, padding, token types, losses), the
sharing modes, configuration checks, dropout, checkpoints."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
import torch

from course_lib.checkpoints import load_checkpoint, save_checkpoint
from course_lib.models.albert import (
    AlbertConfig,
    AlbertForMaskedLM,
    AlbertForPreTraining,
    AlbertForSequenceClassification,
    AlbertModel,
)
from course_lib.models.bert import BertConfig, BertModel

transformers = pytest.importorskip("transformers")

TOL = 1e-5
TINY = dict(
    vocab_size=97,
    embedding_size=12,  # E != H: the factorisation is exercised
    hidden_size=32,
    num_hidden_layers=4,
    num_attention_heads=4,
    intermediate_size=48,
    max_position_embeddings=24,
)
GROUPINGS = [(1, 1), (2, 1), (2, 2), (4, 1), (3, 1)]  # (num_hidden_groups, inner_group_num)


def hf_config(attn="eager", **overrides):
    return transformers.AlbertConfig(**{**TINY, **overrides}, attn_implementation=attn)


def make_batch(seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, 97, (4, 11), generator=g)
    mask = torch.ones_like(ids)
    mask[1, 7:] = 0
    mask[2, 3:] = 0
    ids = ids.masked_fill(mask == 0, 0)
    types = (torch.arange(11) >= 5).long().expand(4, 11).clone() * mask
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}


def maxdiff(a, b):
    return (a - b).abs().max().item()


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
@pytest.mark.parametrize("groups,inner", GROUPINGS)
def test_pretraining_parity_with_losses_hidden_states_and_attentions(attn, groups, inner):
    torch.manual_seed(groups * 10 + inner)
    hf = transformers.AlbertForPreTraining(
        hf_config(attn, num_hidden_groups=groups, inner_group_num=inner)
    ).eval()
    ours = AlbertForPreTraining.from_hf(hf)
    assert isinstance(ours.config, AlbertConfig)
    assert (ours.config.num_hidden_groups, ours.config.inner_group_num) == (groups, inner)
    batch = make_batch(groups + inner)
    labels = torch.full_like(batch["input_ids"], -100)
    labels[:, 1::3] = batch["input_ids"][:, 1::3]
    order = torch.tensor([0, 1, 1, 0])
    eager = attn == "eager"
    with torch.no_grad():
        ref = hf(
            **batch,
            labels=labels,
            sentence_order_label=order,
            output_hidden_states=True,
            output_attentions=eager,
        )
        out = ours(
            **batch,
            labels=labels,
            sentence_order_label=order,
            output_hidden_states=True,
            output_attentions=eager,
        )
    assert maxdiff(out.prediction_logits, ref.prediction_logits) <= TOL
    assert maxdiff(out.sop_logits, ref.sop_logits) <= TOL
    assert abs(out.loss.item() - ref.loss.item()) <= TOL
    assert abs(out.mlm_loss.item() + out.sop_loss.item() - out.loss.item()) <= 1e-6
    # one entry for the projected embeddings, then one per layer *application*
    assert len(out.hidden_states) == len(ref.hidden_states) == 1 + TINY["num_hidden_layers"] * inner
    for a, b in zip(out.hidden_states, ref.hidden_states, strict=True):
        assert maxdiff(a, b) <= TOL
    if eager:
        assert len(out.attentions) == len(ref.attentions)
        for a, b in zip(out.attentions, ref.attentions, strict=True):
            assert maxdiff(a, b) <= TOL
    assert ours.num_parameters() == hf.num_parameters()


def test_parity_is_not_vacuous():
    """A changed weight in one shared layer moves the output well beyond the tolerance."""
    torch.manual_seed(0)
    hf = transformers.AlbertModel(hf_config()).eval()
    ours = AlbertModel.from_hf(hf)
    batch = make_batch()
    with torch.no_grad():
        ours.encoder.layers[0].ffn.linear2.weight.add_(
            0.01 * torch.randn_like(ours.encoder.layers[0].ffn.linear2.weight)
        )
        assert maxdiff(ours(**batch).last_hidden_state, hf(**batch).last_hidden_state) > 100 * TOL


@pytest.mark.parametrize("groups", [1, 2])
def test_base_model_masked_lm_and_classifier_parity(groups):
    torch.manual_seed(5 + groups)
    cfg = dict(num_hidden_groups=groups)
    batch = make_batch(7)
    hf = transformers.AlbertModel(hf_config("sdpa", **cfg)).eval()
    ours = AlbertModel.from_hf(hf)
    with torch.no_grad():
        ref, out = hf(**batch), ours(**batch)
    assert maxdiff(out.last_hidden_state, ref.last_hidden_state) <= TOL
    assert maxdiff(out.pooler_output, ref.pooler_output) <= TOL

    hf = transformers.AlbertForMaskedLM(hf_config("sdpa", **cfg)).eval()
    ours = AlbertForMaskedLM.from_hf(hf)
    assert ours.mlm_head.decoder.weight is ours.albert.embeddings.word_embeddings.weight
    labels = torch.where(batch["attention_mask"].bool(), batch["input_ids"], -100)
    with torch.no_grad():
        ref, out = hf(**batch, labels=labels), ours(**batch, labels=labels)
        masked = ours(**batch, labels=labels, masked_only=True)
    assert maxdiff(out.logits, ref.logits) <= TOL
    assert abs(out.loss.item() - ref.loss.item()) <= TOL
    assert abs(masked.loss.item() - ref.loss.item()) <= TOL

    hf = transformers.AlbertForSequenceClassification(hf_config("eager", num_labels=3, **cfg)).eval()
    ours = AlbertForSequenceClassification.from_hf(hf)
    y = torch.tensor([0, 2, 1, 2])
    with torch.no_grad():
        ref, out = hf(**batch, labels=y), ours(**batch, labels=y)
    assert maxdiff(out.logits, ref.logits) <= TOL
    assert abs(out.loss.item() - ref.loss.item()) <= TOL


def test_schedule_follows_hugging_face_groups():
    # layer i runs group int(i / (L / G)), all of its inner layers
    enc = AlbertModel(
        AlbertConfig(**{**TINY, "num_hidden_layers": 6, "num_hidden_groups": 4, "inner_group_num": 2})
    ).encoder
    groups = [int(i / (6 / 4)) for i in range(6)]
    assert enc.schedule == tuple(g * 2 + j for g in groups for j in range(2))
    assert len(enc.layers) == 8


def test_sharing_modes_share_exactly_the_named_sub_layers():
    counts = {}
    for mode in ("all", "attention", "ffn", "none"):
        model = AlbertModel(AlbertConfig(**TINY, sharing=mode))
        layers = model.encoder.layer_sequence()
        assert len(layers) == TINY["num_hidden_layers"]
        attn_shared = all(layer.attention is layers[0].attention for layer in layers)
        ffn_shared = all(layer.ffn is layers[0].ffn for layer in layers)
        assert attn_shared == (mode in ("all", "attention"))
        assert ffn_shared == (mode in ("all", "ffn"))
        assert all((layer.attention_norm is layers[0].attention_norm) == attn_shared for layer in layers[1:])
        assert all((layer.ffn_norm is layers[0].ffn_norm) == ffn_shared for layer in layers[1:])
        counts[mode] = model.num_parameters()
    one = BertConfig(**{k: v for k, v in TINY.items() if k != "embedding_size"})
    layer = sum(p.numel() for p in BertModel(one).encoder.layers[0].parameters())
    attention = sum(p.numel() for p in BertModel(one).encoder.layers[0].attention.parameters()) + 2 * 32
    L = TINY["num_hidden_layers"]
    assert counts["none"] - counts["all"] == (L - 1) * layer
    assert counts["none"] - counts["attention"] == (L - 1) * attention
    assert counts["none"] - counts["ffn"] == (L - 1) * (layer - attention)


def test_no_sharing_equals_hugging_face_with_one_group_per_layer():
    torch.manual_seed(3)
    L = TINY["num_hidden_layers"]
    hf = transformers.AlbertModel(hf_config(num_hidden_groups=L)).eval()
    grouped = AlbertModel.from_hf(hf)
    none = AlbertModel(AlbertConfig(**TINY, sharing="none")).eval()
    none.load_state_dict(grouped.state_dict())
    batch = make_batch(3)
    with torch.no_grad():
        assert maxdiff(none(**batch).last_hidden_state, hf(**batch).last_hidden_state) <= TOL
    assert none.num_parameters() == hf.num_parameters()


def test_partial_sharing_has_no_hugging_face_names():
    with pytest.raises(ValueError, match="no Hugging Face counterpart"):
        AlbertForPreTraining(AlbertConfig(**TINY, sharing="attention")).hf_names()


def test_computation_is_not_shared():
    """Sharing divides parameters, not work: every mode runs L layers of the same shape."""
    x = make_batch()
    for mode in ("all", "none"):
        model = AlbertModel(AlbertConfig(**TINY, sharing=mode)).eval()
        with torch.no_grad():
            out = model(**x, output_hidden_states=True)
        assert len(out.hidden_states) == 1 + TINY["num_hidden_layers"]


def test_config_checks():
    with pytest.raises(ValueError, match="sharing must be one of"):
        AlbertConfig(**TINY, sharing="half")
    with pytest.raises(ValueError, match="num_hidden_groups"):
        AlbertConfig(**TINY, num_hidden_groups=5)
    with pytest.raises(ValueError, match="inner_group_num"):
        AlbertConfig(**TINY, inner_group_num=0)
    with pytest.raises(ValueError, match="groups are the 'all' mode"):
        AlbertConfig(**TINY, sharing="ffn", num_hidden_groups=2)
    with pytest.raises(ValueError, match="embedding_size"):
        AlbertConfig(**{**TINY, "embedding_size": 0})
    with pytest.raises(ValueError, match="divisible"):
        AlbertConfig(**{**TINY, "num_attention_heads": 5})
    with pytest.raises(TypeError, match="AlbertConfig"):
        AlbertModel(BertConfig())
    with pytest.raises(ValueError, match="AlbertConfig"):
        BertConfig.from_hf(hf_config())
    with pytest.raises(ValueError, match="BertConfig"):
        AlbertConfig.from_hf(transformers.BertConfig(hidden_size=32, num_attention_heads=4))
    with pytest.raises(ValueError, match="input_ids must lie in"):
        AlbertModel(AlbertConfig(**TINY))(torch.tensor([[1, 97]]))


def test_defaults_are_albert_base_v2():
    c = AlbertConfig()
    assert (c.vocab_size, c.embedding_size, c.hidden_size, c.num_hidden_layers) == (30000, 128, 768, 12)
    assert (c.hidden_act, c.hidden_dropout_prob, c.attention_probs_dropout_prob) == ("gelu_new", 0.0, 0.0)
    assert c.embedding_width == 128 and BertConfig().embedding_width == 768


def test_dropout_can_be_switched_on_and_off():
    batch = make_batch()
    off = AlbertForPreTraining(AlbertConfig(**TINY, classifier_dropout_prob=0.0)).train()
    with torch.no_grad():
        assert torch.equal(off(**batch).sop_logits, off(**batch).sop_logits)
    on = AlbertForPreTraining(
        AlbertConfig(**TINY, hidden_dropout_prob=0.3, attention_probs_dropout_prob=0.3)
    ).train()
    with torch.no_grad():
        assert not torch.equal(on(**batch).prediction_logits, on(**batch).prediction_logits)
        on.eval()
        assert torch.equal(on(**batch).prediction_logits, on(**batch).prediction_logits)


@pytest.mark.parametrize("mode", ["all", "attention"])
def test_checkpoint_round_trip_keeps_sharing(tmp_path, mode):
    torch.manual_seed(0)
    model = AlbertForPreTraining(AlbertConfig(**TINY, sharing=mode)).eval()
    save_checkpoint(tmp_path / "m.safetensors", model, {"note": "x"})
    back = AlbertForPreTraining(AlbertConfig(**TINY, sharing=mode)).eval()
    load_checkpoint(tmp_path / "m.safetensors", back)
    batch = make_batch()
    with torch.no_grad():
        assert torch.equal(model(**batch).prediction_logits, back(**batch).prediction_logits)
    layers = back.albert.encoder.layer_sequence()
    assert (layers[1].attention is layers[0].attention) == (mode in ("all", "attention"))


def test_training_step_updates_a_shared_layer_once():
    torch.manual_seed(0)
    model = AlbertForPreTraining(AlbertConfig(**TINY)).train()
    batch = make_batch()
    labels = torch.where(batch["attention_mask"].bool(), batch["input_ids"], -100)
    out = model(**batch, labels=labels, sentence_order_label=torch.tensor([0, 1, 0, 1]))
    out.loss.backward()
    shared = model.albert.encoder.layers[0].ffn.linear1.weight
    assert shared.grad is not None and shared.grad.abs().sum() > 0
    assert len(list(model.parameters())) == len({id(p) for p in model.parameters()})


def test_course_sizes_keep_the_factorisation():
    from course_lib.recipes.bert import bert_config

    small = bert_config("small", vocab_size=100, config_class=AlbertConfig)
    assert isinstance(small, AlbertConfig)
    assert (small.embedding_size, small.hidden_size, small.intermediate_size) == (32, 128, 512)
    assert bert_config("base-like", vocab_size=100, config_class=AlbertConfig).embedding_size == 128
    assert (
        bert_config("tiny", vocab_size=100, config_class=AlbertConfig, embedding_size=64).embedding_size == 64
    )
    assert not hasattr(bert_config("small", vocab_size=100), "embedding_size")
