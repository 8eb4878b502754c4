"""Widget logic, exercised in plain pytest (callbacks run synchronously with the Agg backend)."""

import numpy as np
import pytest
import torch

from course_lib.models.transformer import Transformer, TransformerConfig
from course_lib.widgets import AttentionExplorer, apply_temperature, transformer_attention


def test_temperature_matches_scaling_the_scores():
    scores = torch.randn(3, 5)
    scores[1, 3:] = float("-inf")  # masked keys
    w = torch.softmax(scores, -1)
    for t in (0.25, 1.0, 3.0):
        expected = torch.softmax(scores / t, -1).numpy()
        assert np.abs(apply_temperature(w, t) - expected).max() < 1e-6
    assert (apply_temperature(w, 0.5)[1, 3:] == 0).all()
    assert np.allclose(apply_temperature(np.zeros((2, 3)), 2.0), 0)  # a fully masked row stays zero
    with pytest.raises(ValueError, match="positive"):
        apply_temperature(w, 0)


def small_model():
    torch.manual_seed(0)
    cfg = TransformerConfig(
        src_vocab_size=12,
        tgt_vocab_size=12,
        d_model=16,
        n_heads=2,
        n_encoder_layers=2,
        n_decoder_layers=3,
        d_ff=32,
        dropout=0.0,
        max_len=16,
    )
    return Transformer(cfg).eval()


def test_transformer_attention_drops_padding():
    m = small_model()
    src = torch.tensor([[4, 5, 6, 0, 0]])
    tgt = torch.tensor([[1, 7, 8, 0]])
    w = transformer_attention(m, src, tgt)
    assert w["encoder self-attention"][0].shape == (2, 3, 3)
    assert len(w["decoder self-attention"]) == 3
    assert w["encoder-decoder attention"][2].shape == (2, 3, 3)


def test_explorer_widget_carries_every_map():
    m = small_model()
    src, tgt = torch.tensor([[4, 5, 6, 7]]), torch.tensor([[1, 7, 8]])
    w = transformer_attention(m, src, tgt)
    labels = {
        k: (
            ["a", "b", "c", "d"] if k != "decoder self-attention" else ["<s>", "x", "y"],
            ["a", "b", "c", "d"] if k == "encoder self-attention" else ["<s>", "x", "y"],
        )
        for k in w
    }
    ex = AttentionExplorer(w, labels)
    data = ex.widget(kind="decoder self-attention").data
    assert data["kind"] == "decoder self-attention" and data["kinds"] == list(w)
    for kind, layers in w.items():
        assert len(data["weights"][kind]) == len(layers)
        for layer, x in enumerate(layers):
            assert np.allclose(np.array(data["weights"][kind][layer]), x.numpy(), atol=5e-5)
        assert data["labels"][kind] == [list(labels[kind][0]), list(labels[kind][1])]
    with pytest.raises(ValueError, match="unknown kind"):
        ex.widget(kind="cross")
    # the figure path (no widget) still draws the chosen head
    fig = ex.draw("encoder self-attention", 0, 1, 0.5)
    assert fig.axes and np.allclose(ex.last, apply_temperature(w["encoder self-attention"][0][1], 0.5))


def test_explorer_rejects_bad_input():
    with pytest.raises(ValueError, match="at least one"):
        AttentionExplorer({}, {})
    with pytest.raises(ValueError, match="labels"):
        AttentionExplorer({"a": [np.ones((1, 2, 2))]}, {})
    ex = AttentionExplorer({"a": [np.ones((1, 2, 2)) / 2]}, {"a": (["x", "y"], ["x", "y"])})
    with pytest.raises(ValueError, match="layer 3 out of range"):
        ex.matrix("a", 3, 0)


def test_plot_bilm_draws_both_stacks_and_the_mix():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from course_lib.viz import plot_bilm

    ax = plot_bilm(["<S>", "a", "b", "</S>"], n_layers=2)
    texts = [t.get_text() for t in ax.texts]
    assert sum("overrightarrow" in t for t in texts) == 8 and sum("overleftarrow" in t for t in texts) == 8
    assert sum("char CNN" in t for t in texts) == 4 and sum("gamma" in t for t in texts) == 4
    plt.close(ax.figure)
