"""The post-LN layer that BERT's, Transformer-XL's and XLNet's layers extend."""

import torch
import torch.nn.functional as F

from course_lib.models.bert import BertConfig, BertLayer
from course_lib.models.transfo_xl import TransfoXLConfig, TransfoXLLayer
from course_lib.models.xlnet import XLNetConfig, XLNetLayer
from course_lib.nn import FeedForward, MultiHeadAttention, PostLNLayer


def test_sublayers_is_the_post_ln_formula():
    torch.manual_seed(0)
    layer = PostLNLayer(
        MultiHeadAttention(8, 2), FeedForward(8, 16, activation="gelu"), dropout=0.1, eps=1e-6
    )
    layer.eval()
    x, a = torch.randn(2, 5, 8), torch.randn(2, 5, 8)
    n1, n2 = layer.attention_norm, layer.ffn_norm
    mid = F.layer_norm(x + a, (8,), n1.weight, n1.bias, 1e-6)
    want = F.layer_norm(mid + layer.ffn(mid), (8,), n2.weight, n2.bias, 1e-6)
    torch.testing.assert_close(layer.sublayers(x, a), want)


def test_model_layers_keep_their_parameter_names():
    layers = [
        BertLayer(
            BertConfig(
                vocab_size=50, hidden_size=8, num_hidden_layers=1, num_attention_heads=2, intermediate_size=16
            )
        ),
        TransfoXLLayer(TransfoXLConfig(vocab_size=50, d_model=8, n_head=2, n_layer=1, d_inner=16)),
        XLNetLayer(XLNetConfig(vocab_size=50, d_model=8, n_layer=1, n_head=2, d_inner=16)),
    ]
    for layer in layers:
        assert isinstance(layer, PostLNLayer)
        names = [n for n, _ in layer.named_children()]
        assert names == ["attention", "attention_norm", "ffn", "ffn_norm", "dropout"]


def test_drop_in_place_overwrites_on_the_cpu_only():
    """On the CPU the dropout writes into its input (same draws and values as dropout(x));
    elsewhere (a GPU's fused kernel has no in-place form; the meta device stands in) it returns
    a new tensor."""
    from course_lib.nn.feedforward import drop_in_place

    dropout = torch.nn.Dropout(0.3).train()
    x = torch.randn(4, 8)
    torch.manual_seed(1)
    expected = dropout(x.clone())
    torch.manual_seed(1)
    out = drop_in_place(dropout, x)
    assert out is x and torch.equal(out, expected)
    meta = torch.empty(4, 8, device="meta")
    assert drop_in_place(dropout, meta) is not meta
    assert drop_in_place(dropout.eval(), x) is x
