"""Parameter counts by part: the formulas (course_lib.models.sizes) against the published
figures (/work/shared/REFERENCE.md, measured there on random-init models), against our
built models part by part, and against Hugging Face's; then the parameter-counter widget's
logic and callbacks, without a browser."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import pytest
import torch
from torch import nn

from course_lib.models.albert import (
    AlbertConfig,
    AlbertForMaskedLM,
    AlbertForPreTraining,
    AlbertModel,
)
from course_lib.models.bert import BertConfig, BertForMaskedLM, BertForPreTraining, BertModel
from course_lib.models.roberta import RobertaConfig, RobertaForMaskedLM, RobertaModel
from course_lib.models.sizes import (
    PARTS,
    measured_breakdown,
    millions,
    parameter_breakdown,
    sublayer_counts,
)
from course_lib.widgets import ParameterCounter, SizeReport, plot_breakdown, size_config
from course_lib.widgets.parameters import PRESETS


def bert(size: str, **kw) -> BertConfig:
    h, layers = {"base": (768, 12), "large": (1024, 24)}[size]
    return BertConfig(
        hidden_size=h, num_hidden_layers=layers, num_attention_heads=h // 64, intermediate_size=4 * h, **kw
    )


def albert(h: int, layers: int, **kw) -> AlbertConfig:
    return AlbertConfig(
        hidden_size=h, num_hidden_layers=layers, num_attention_heads=h // 64, intermediate_size=4 * h, **kw
    )


ALBERT_SIZES = {"base": (768, 12), "large": (1024, 24), "xlarge": (2048, 24), "xxlarge": (4096, 12)}


def total(config, **kw) -> int:
    return parameter_breakdown(config, **kw)["total"]


# --- the formulas against the published figures ---------------------------------------------------


def test_bert_published_counts():
    # REFERENCE.md [measured], V = 30522: BertModel / without pooler / BertForPreTraining
    assert (total(bert("base")), total(bert("base"), pooler=False)) == (109_482_240, 108_891_648)
    assert total(bert("base"), heads="pretraining") == 110_106_428
    assert (total(bert("large")), total(bert("large"), pooler=False)) == (335_141_888, 334_092_288)
    assert total(bert("large"), heads="pretraining") == 336_226_108
    parts = parameter_breakdown(bert("base"), heads="pretraining")
    assert parts["embeddings"] == 23_837_184
    assert (parts["attention"] + parts["ffn"]) // 12 == 7_087_872  # one encoder layer
    assert parts["pooler"] == 590_592
    assert parts["heads"] == 590_592 + 1_536 + 30_522 + 1_538  # transform, LayerNorm, bias, NSP
    assert parts["total"] == sum(parts[p] for p in PARTS)
    # the paper's 108M / 334M: no pooler, V = 30000
    assert millions(total(bert("base", vocab_size=30000), pooler=False)) == "108M"
    assert millions(total(bert("base", vocab_size=30000), pooler=False), 2) == "108.49M"
    assert millions(total(bert("large", vocab_size=30000), pooler=False), 2) == "333.56M"


@pytest.mark.parametrize(
    "size, with_pooler, without_pooler, paper",
    [
        ("base", 11_683_584, 11_092_992, "12M"),
        ("large", 17_683_968, 16_634_368, "18M"),
        ("xlarge", 58_724_864, 54_528_512, "59M"),  # the paper says 60M: see REFERENCE.md
        ("xxlarge", 222_595_584, 205_814_272, "223M"),  # the paper says 235M
    ],
)
def test_albert_published_counts(size, with_pooler, without_pooler, paper):
    cfg = albert(*ALBERT_SIZES[size])  # V = 30000, E = 128 are AlbertConfig's defaults
    assert (cfg.vocab_size, cfg.embedding_size) == (30000, 128)
    assert total(cfg) == with_pooler
    assert total(cfg, pooler=False) == without_pooler
    assert millions(with_pooler) == paper
    h = cfg.hidden_size
    assert parameter_breakdown(cfg)["embeddings"] == 3_906_048 + 128 * h + h  # tables + projection


def test_albert_sharing_ablation_at_e128():
    # REFERENCE.md: formula counts with pooler at E = 128 (ALBERT-base); the paper's 12/64/38/89M
    got = {s: millions(total(AlbertConfig(sharing=s)), 2) for s in ("all", "attention", "ffn", "none")}
    assert got == {"all": "11.68M", "attention": "63.65M", "ffn": "37.69M", "none": "89.65M"}
    assert {s: millions(total(AlbertConfig(sharing=s))) for s in got} == {
        "all": "12M",
        "attention": "64M",
        "ffn": "38M",
        "none": "90M",  # the paper's 89M is the count without the pooler:
    }
    assert millions(total(AlbertConfig(sharing="none"), pooler=False), 2) == "89.06M"


def test_sublayer_counts():
    assert sublayer_counts(BertConfig(num_hidden_layers=5)) == (5, 5)
    assert sublayer_counts(AlbertConfig(num_hidden_layers=6)) == (1, 1)
    assert sublayer_counts(AlbertConfig(num_hidden_layers=6, num_hidden_groups=3, inner_group_num=2)) == (
        6,
        6,
    )
    assert sublayer_counts(AlbertConfig(num_hidden_layers=6, sharing="attention")) == (1, 6)
    assert sublayer_counts(AlbertConfig(num_hidden_layers=6, sharing="ffn")) == (6, 1)
    assert sublayer_counts(AlbertConfig(num_hidden_layers=6, sharing="none")) == (6, 6)


def test_albert_none_is_bert_plus_the_factorisation():
    """With E = H and no sharing, ALBERT is BERT plus the E -> H projection."""
    a = parameter_breakdown(AlbertConfig(embedding_size=768, sharing="none", vocab_size=30522))
    b = parameter_breakdown(BertConfig(vocab_size=30522))
    assert a["total"] - b["total"] == 768 * 768 + 768
    assert {p: a[p] for p in PARTS if p != "embeddings"} == {p: b[p] for p in PARTS if p != "embeddings"}


# --- formula == measured == num_parameters() on built models -----------------------------------------


def small_bert(**kw) -> BertConfig:
    return BertConfig(
        vocab_size=97,
        hidden_size=32,
        num_attention_heads=4,
        num_hidden_layers=3,
        intermediate_size=48,
        max_position_embeddings=20,
        **kw,
    )


def small_albert(**kw) -> AlbertConfig:
    sizes = dict(
        vocab_size=97,
        embedding_size=12,
        hidden_size=32,
        num_attention_heads=4,
        num_hidden_layers=4,
        intermediate_size=48,
        max_position_embeddings=20,
    )
    return AlbertConfig(**{**sizes, **kw})


def check(model: nn.Module, **formula_kw) -> dict[str, int]:
    measured = measured_breakdown(model)
    assert measured == parameter_breakdown(model.config, **formula_kw), type(model).__name__
    assert measured["total"] == model.num_parameters()
    return measured


@pytest.mark.parametrize("tied", [True, False])
def test_bert_models_measured(tied):
    torch.manual_seed(0)
    cfg = small_bert(tie_word_embeddings=tied)
    check(BertModel(cfg))
    check(BertModel(cfg, add_pooling_layer=False), pooler=False)
    parts = check(BertForPreTraining(cfg), heads="pretraining")
    check(BertForMaskedLM(cfg), pooler=False, heads="mlm")
    assert parts["heads"] == (32 * 32 + 32) + 2 * 32 + 97 + (0 if tied else 97 * 32) + (2 * 32 + 2)


def test_roberta_models_measured():
    cfg = RobertaConfig(
        vocab_size=101,
        hidden_size=32,
        num_attention_heads=4,
        num_hidden_layers=2,
        intermediate_size=40,
        max_position_embeddings=18,
    )
    check(RobertaModel(cfg, add_pooling_layer=False), pooler=False)
    check(RobertaForMaskedLM(cfg), pooler=False, heads="mlm")


ALBERT_CASES = [
    dict(sharing="all"),
    dict(sharing="all", num_hidden_groups=2),
    dict(sharing="all", inner_group_num=3),
    dict(sharing="all", num_hidden_groups=2, inner_group_num=2),
    dict(sharing="all", num_hidden_groups=3),  # 3 groups for 4 layers: int(i / (4 / 3)) = 0, 0, 1, 2
    dict(sharing="all", num_hidden_groups=4),  # G = L: no sharing
    dict(sharing="attention"),
    dict(sharing="ffn"),
    dict(sharing="none"),
]


@pytest.mark.parametrize("embedding_size", [12, 32], ids=["E<H", "E=H"])
@pytest.mark.parametrize("case", ALBERT_CASES, ids=lambda c: "-".join(f"{v}" for v in c.values()))
def test_albert_models_measured(case, embedding_size):
    torch.manual_seed(0)
    cfg = small_albert(embedding_size=embedding_size, **case)
    parts = check(AlbertModel(cfg))
    check(AlbertModel(cfg, add_pooling_layer=False), pooler=False)
    check(AlbertForPreTraining(cfg), heads="pretraining")
    check(AlbertForMaskedLM(cfg), pooler=False, heads="mlm")
    # the projection counts even when E == H, and sharing keeps one copy per distinct sub-layer
    h, e = 32, embedding_size
    assert parts["embeddings"] == (97 + 20 + 2) * e + 2 * e + e * h + h
    n_att, n_ffn = sublayer_counts(cfg)
    assert parts["attention"] == n_att * (4 * h * h + 6 * h)
    assert parts["ffn"] == n_ffn * (2 * h * 48 + 48 + 3 * h)


def test_hugging_face_counts_agree():
    transformers = pytest.importorskip("transformers")
    sizes = dict(
        vocab_size=97,
        embedding_size=12,
        hidden_size=32,
        num_attention_heads=4,
        num_hidden_layers=4,
        intermediate_size=48,
        max_position_embeddings=20,
    )
    for groups, inner in [(1, 1), (2, 1), (2, 3)]:
        grouping = dict(num_hidden_groups=groups, inner_group_num=inner)
        theirs = transformers.AlbertConfig(**sizes, **grouping)
        ours = AlbertConfig(**sizes, **grouping)
        assert transformers.AlbertModel(theirs).num_parameters() == total(ours)
        assert transformers.AlbertModel(theirs, add_pooling_layer=False).num_parameters() == total(
            ours, pooler=False
        )
        assert transformers.AlbertForPreTraining(theirs).num_parameters() == total(ours, heads="pretraining")
        assert transformers.AlbertForMaskedLM(theirs).num_parameters() == total(
            ours, pooler=False, heads="mlm"
        )
    bert_sizes = {k: v for k, v in sizes.items() if k != "embedding_size"}
    theirs = transformers.BertConfig(**bert_sizes)
    ours = BertConfig(**bert_sizes)
    assert transformers.BertModel(theirs).num_parameters() == total(ours)
    assert transformers.BertForPreTraining(theirs).num_parameters() == total(ours, heads="pretraining")


def test_shared_tensors_count_once():
    cfg = small_albert(sharing="attention")
    model = AlbertModel(cfg)
    layers = model.encoder.layers
    assert all(layer.attention is layers[0].attention for layer in layers)
    # counted by tensor, not by name: four layers, one attention sub-layer
    assert measured_breakdown(model)["attention"] == 4 * 32 * 32 + 6 * 32
    assert sum(p.numel() for _, p in model.named_parameters(remove_duplicate=False)) > model.num_parameters()


# --- bad inputs -------------------------------------------------------------------------------------


def test_bad_inputs_give_clear_errors():
    with pytest.raises(ValueError, match="heads must be one of"):
        parameter_breakdown(BertConfig(), heads="nsp")
    with pytest.raises(ValueError, match="read the pooler"):
        parameter_breakdown(BertConfig(), pooler=False, heads="pretraining")
    with pytest.raises(TypeError, match="BertConfig or an AlbertConfig"):
        parameter_breakdown({"hidden_size": 768})
    cfg = AlbertConfig()
    cfg.sharing = "layers"  # configs are mutable: the formula checks again
    with pytest.raises(ValueError, match="unknown sharing"):
        parameter_breakdown(cfg)
    with pytest.raises(ValueError, match="cannot place parameter 'extra.weight'"):
        wrapped = nn.Module()
        wrapped.add_module("extra", nn.Linear(2, 2))
        measured_breakdown(wrapped)
    model = BertModel(small_bert())
    model.encoder.add_module("adapter", nn.Linear(2, 2))
    outer = nn.Module()
    outer.add_module("bert", model)
    with pytest.raises(ValueError, match="cannot place parameter 'bert.encoder.adapter"):
        measured_breakdown(outer)
    with pytest.raises(ValueError, match="not negative"):
        millions(-1)
    with pytest.raises(ValueError, match="digits"):
        millions(10, -1)


def test_measured_breakdown_refuses_hugging_face_names():
    transformers = pytest.importorskip("transformers")
    hf = transformers.AlbertModel(
        transformers.AlbertConfig(
            hidden_size=32,
            num_attention_heads=4,
            intermediate_size=48,
            embedding_size=12,
            vocab_size=50,
            num_hidden_layers=2,
        )
    )
    with pytest.raises(ValueError, match="cannot place parameter"):
        measured_breakdown(hf)


def test_millions():
    assert millions(11_683_584) == "12M" and millions(11_683_584, 2) == "11.68M"
    assert millions(0) == "0M" and millions(222_595_584, 1) == "222.6M"


# --- the widget's logic -------------------------------------------------------------------------------


def test_size_config_builds_the_right_config():
    cfg = size_config(
        "ALBERT", hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, intermediate_size=4096
    )
    assert isinstance(cfg, AlbertConfig) and total(cfg) == 17_683_968
    cfg = size_config("BERT", vocab_size=30522, embedding_size=5, sharing="ignored")
    assert type(cfg) is BertConfig and cfg.embedding_width == 768 and total(cfg) == 109_482_240
    cfg = size_config("ALBERT", num_hidden_layers=4, num_hidden_groups=2, inner_group_num=2)
    assert sublayer_counts(cfg) == (4, 4)


@pytest.mark.parametrize(
    "settings, message",
    [
        (
            dict(hidden_size=770),
            r"hidden_size=770 is not divisible by num_attention_heads=12.*try 11 heads or 14",
        ),
        (dict(num_attention_heads=0), "num_attention_heads must be a positive whole number, got 0"),
        (dict(num_attention_heads=-3), "num_attention_heads must be a positive whole number"),
        (dict(vocab_size=2.5), "vocab_size must be a positive whole number, got 2.5"),
        (dict(embedding_size=True), "embedding_size must be a positive whole number"),
        (dict(num_hidden_layers=0), "num_hidden_layers must be a positive whole number"),
        (dict(sharing="layers"), "sharing must be one of"),
        (dict(model="GPT"), "model must be one of"),
        (dict(sharing="ffn", num_hidden_groups=2), "num_hidden_groups=1"),
    ],
)
def test_size_config_rejects_bad_settings(settings, message):
    with pytest.raises(ValueError, match=message):
        size_config(**settings)


def test_presets_give_the_published_counts():
    published = {
        "BERT-base": 109_482_240,
        "BERT-large": 335_141_888,
        "ALBERT-base": 11_683_584,
        "ALBERT-large": 17_683_968,
        "ALBERT-xlarge": 58_724_864,
        "ALBERT-xxlarge": 222_595_584,
    }
    assert set(PRESETS) == set(published)
    counter = ParameterCounter()
    for name, n in published.items():
        assert counter.use_preset(name).total == n
        assert ParameterCounter(name).report().total == n


def test_counter_update_and_report():
    counter = ParameterCounter()  # ALBERT-base
    report = counter.report()
    assert isinstance(report, SizeReport) and report.total == 11_683_584
    # the comparison bar: the BERT with the same V, H, L, I (V = 30000 here)
    assert report.reference == parameter_breakdown(bert("base", vocab_size=30000))
    rows = report.rows()
    assert [r[0] for r in rows] == [*PARTS, "total"]
    assert sum(r[1] for r in rows[:-1]) == rows[-1][1] == report.total
    assert abs(sum(r[2] for r in rows[:-1]) - 1) < 1e-12
    text = report.to_text()
    assert "attention (1 distinct for 12 layers)" in text and "11,683,584" in text and "10.7%" in text
    assert report.to_html().startswith("<table") and "same-size BERT" in report.to_html()

    r = counter.update(sharing="none")
    assert (
        r.total == 3_906_048 + 99_072 + 12 * 7_087_872 + 590_592 == 89_650_176
        and counter.last is r
        and counter.settings["sharing"] == "none"
    )
    r = counter.update(heads="pretraining")
    assert r.breakdown["heads"] == 768 * 128 + 3 * 128 + 30000 + 2 * 768 + 2
    assert (
        r.reference["heads"]
        == parameter_breakdown(bert("base", vocab_size=30000), heads="pretraining")["heads"]
    )
    r = counter.update(model="BERT", vocab_size=30522, heads=None)
    assert r.total == 109_482_240 and r.reference is None and "same-size" not in r.to_text()

    before = dict(counter.settings), counter.pooler, counter.heads
    for bad in (
        dict(hidden_size=770),
        dict(num_hidden_layers=0),
        dict(pooler=False, heads="pretraining"),
        dict(heads="nsp"),
        dict(colour="red"),
    ):
        with pytest.raises(ValueError):
            counter.update(**bad)
        assert (counter.settings, counter.pooler, counter.heads) == before, "a bad update changes nothing"
    with pytest.raises(ValueError, match="unknown preset"):
        ParameterCounter("GPT-2")


def test_plot_breakdown():
    counter = ParameterCounter()
    fig = counter.draw()
    ax = fig.axes[0]
    assert len(ax.patches) == 2 * len(PARTS) and counter.draws == 1
    assert [t.get_text() for t in ax.get_yticklabels()] == [
        "ALBERT (E=128, sharing all)",
        "BERT, same V, H, L, I",
    ]
    widths = sum(p.get_width() for p in ax.patches[: len(PARTS)])
    assert abs(widths - 11.683584) < 1e-9
    plt.close(fig)
    fig = plot_breakdown({"BERT-base": parameter_breakdown(bert("base"))})
    assert len(fig.axes[0].patches) == len(PARTS)
    plt.close(fig)
    with pytest.raises(ValueError, match="at least one"):
        plot_breakdown({})


# --- the widget (its page logic is checked in a browser: tests/widgets/test_widget_pages.py) -------------


def test_counter_widget_carries_what_the_page_counts_from():
    pytest.importorskip("anywidget")
    counter = ParameterCounter("ALBERT-base", heads="mlm")
    data = counter.widget().data
    assert data["presets"] == PRESETS and data["settings"] == counter.settings and data["heads"] == "mlm"
    assert data["fixed"] == {
        "max_position_embeddings": 512,
        "type_vocab_size": 2,
        "num_hidden_groups": 1,
        "inner_group_num": 1,
        "tie_word_embeddings": True,
    }
