"""The encoder-decoder Transformer: parity with torch.nn.Transformer, masks, decoding, bad input."""

import pytest
import torch
from torch import nn

from course_lib.models.transformer import Transformer, TransformerConfig, copy_from_torch_transformer
from course_lib.nn import SinusoidalPositionalEncoding, sinusoidal_table

TOL = 1e-5


def tiny(**kw):
    base = dict(
        src_vocab_size=23,
        tgt_vocab_size=19,
        d_model=32,
        n_heads=4,
        n_encoder_layers=2,
        n_decoder_layers=2,
        d_ff=64,
        dropout=0.0,
        max_len=16,
    )
    base.update(kw)
    return TransformerConfig(**base)


@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_parity_with_torch_transformer_post_ln(activation):
    cfg = tiny(final_norm=True, activation=activation)
    ours = Transformer(cfg).eval()
    ref = nn.Transformer(
        d_model=32,
        nhead=4,
        num_encoder_layers=2,
        num_decoder_layers=2,
        dim_feedforward=64,
        dropout=0.0,
        activation=activation,
        batch_first=True,
        norm_first=False,
    ).eval()
    copy_from_torch_transformer(ours, ref)
    src = torch.tensor([[5, 6, 7, 8, 9, 3], [4, 4, 2, 0, 0, 0]])  # second row padded (pad_id 0)
    tgt = torch.tensor([[1, 5, 6, 7], [1, 3, 0, 0]])
    x = ours._embed(src, ours.src_embed, ours.src_pos)
    y = ours._embed(tgt, ours.tgt_embed, ours.tgt_pos)
    causal = nn.Transformer.generate_square_subsequent_mask(4)
    torch.backends.mha.set_fastpath_enabled(False)  # compare every position, padded ones too
    try:
        with torch.no_grad():
            ref_out = ref(
                x,
                y,
                tgt_mask=causal.isinf(),
                src_key_padding_mask=src == 0,
                tgt_key_padding_mask=tgt == 0,
                memory_key_padding_mask=src == 0,
                tgt_is_causal=True,
            )
            memory, _ = ours.encode(src)
            out, _ = ours.decode(tgt, memory, ours.src_mask(src))
            ref_mem = ref.encoder(x, src_key_padding_mask=src == 0)
    finally:
        torch.backends.mha.set_fastpath_enabled(True)
    # padded target rows attend to nothing but themselves in the reference too; compare all real rows
    real = tgt != 0
    assert (out - ref_out)[real].abs().max() <= TOL
    assert (memory - ref_mem).abs().max() <= TOL


def test_pre_ln_runs_and_differs_from_post_ln():
    torch.manual_seed(0)
    post = Transformer(tiny()).eval()
    torch.manual_seed(0)
    pre = Transformer(tiny(norm_first=True)).eval()
    assert pre.encoder.norm is not None and post.encoder.norm is None
    src, tgt = torch.randint(1, 23, (2, 5)), torch.randint(1, 19, (2, 4))
    assert pre(src, tgt).shape == post(src, tgt).shape == (2, 4, 19)
    assert not torch.allclose(pre(src, tgt), post(src, tgt))


def test_decoder_is_causal_and_padding_is_ignored():
    m = Transformer(tiny()).eval()
    src = torch.randint(1, 23, (1, 6))
    tgt = torch.randint(1, 19, (1, 5))
    base = m(src, tgt)
    tgt2 = tgt.clone()
    tgt2[0, 3] = (tgt[0, 3] % 18) + 1
    changed = m(src, tgt2)
    assert torch.equal(base[0, :3], changed[0, :3])
    assert not torch.allclose(base[0, 3:], changed[0, 3:])
    # appending padding to the source changes nothing
    padded = torch.cat([src, torch.zeros(1, 3, dtype=torch.long)], 1)
    assert (m(padded, tgt) - base).abs().max() < TOL


def test_attention_weights_are_returned_per_layer():
    m = Transformer(tiny()).eval()
    logits, w = m(torch.randint(1, 23, (2, 6)), torch.randint(1, 19, (2, 4)), return_weights=True)
    assert len(w["encoder"]) == 2 and w["encoder"][0].shape == (2, 4, 6, 6)
    assert w["decoder_self"][1].shape == (2, 4, 4, 4)
    assert w["decoder_cross"][0].shape == (2, 4, 4, 6)
    assert torch.triu(w["decoder_self"][0][0, 0], 1).abs().max() == 0


def test_greedy_and_beam_decoding_shapes_and_agreement():
    m = Transformer(tiny()).eval()
    src = torch.randint(3, 23, (3, 6))
    g = m.greedy_decode(src, bos_id=1, eos_id=2, max_len=7)
    b1 = m.beam_search(src, bos_id=1, eos_id=2, beam_size=1, max_len=7)
    assert g.shape[0] == 3 and (g[:, 0] == 1).all()
    assert torch.equal(g, b1[:, : g.shape[1]])  # beam 1 is greedy
    b4 = m.beam_search(src, bos_id=1, eos_id=2, beam_size=4, max_len=7)
    assert b4.shape[0] == 3


def test_beam_search_finds_higher_likelihood_than_greedy():
    torch.manual_seed(3)
    m = Transformer(tiny()).eval()
    src = torch.randint(3, 23, (8, 6))

    def seq_logprob(seqs):
        logp = torch.log_softmax(m(src, seqs[:, :-1]), -1)
        tok = seqs[:, 1:]
        lp = logp.gather(-1, tok[..., None])[..., 0]
        return (lp * (tok != 0)).sum(-1)

    g = m.greedy_decode(src, bos_id=1, eos_id=2, max_len=5)
    b = m.beam_search(src, bos_id=1, eos_id=2, beam_size=5, max_len=5)
    n = min(g.shape[1], b.shape[1])
    assert (seq_logprob(b[:, :n]) >= seq_logprob(g[:, :n]) - 1e-4).all()


def test_positional_encoding_properties():
    pe = sinusoidal_table(64, 32)
    assert pe.shape == (64, 32)
    assert torch.allclose(pe[0, 0::2], torch.zeros(16)) and torch.allclose(pe[0, 1::2], torch.ones(16))
    assert pe.abs().max() <= 1.0
    # each sin/cos pair has unit norm, so every row has norm sqrt(d/2)
    assert torch.allclose(pe.norm(dim=1), torch.full((64,), 4.0), atol=1e-5)
    # the dot product depends only on the distance ...
    dots = pe @ pe.T
    assert torch.allclose(dots[3, 10], dots[20, 27], atol=1e-4)
    # ... and falls as the distance grows: strictly over the first few steps, on average beyond
    row = sinusoidal_table(200, 128) @ sinusoidal_table(200, 128)[0]
    assert all(row[i] > row[i + 1] for i in range(10))
    assert row[:5].mean() > row[5:20].mean() > row[20:100].mean()
    # PE[pos + k] is a fixed linear (rotation) map of PE[pos]
    k = 5
    inv_freq = 10000.0 ** (-torch.arange(0, 32, 2, dtype=torch.float64) / 32)
    c, s = torch.cos(k * inv_freq), torch.sin(k * inv_freq)
    rot = torch.zeros(32, 32, dtype=torch.float64)
    rot[0::2, 0::2] = torch.diag(c)  # sin(a + b) = sin a cos b + cos a sin b
    rot[1::2, 0::2] = torch.diag(s)
    rot[0::2, 1::2] = torch.diag(-s)  # cos(a + b) = cos a cos b - sin a sin b
    rot[1::2, 1::2] = torch.diag(c)
    assert (pe[:50].double() @ rot - pe[k : 50 + k].double()).abs().max() < 1e-5


def test_too_long_input_names_the_limit():
    m = Transformer(tiny(max_len=8))
    with pytest.raises(ValueError, match="exceeds the maximum of 8 positions"):
        m(torch.ones(1, 9, dtype=torch.long), torch.ones(1, 3, dtype=torch.long))
    enc = SinusoidalPositionalEncoding(8, max_len=4)
    with pytest.raises(ValueError, match="maximum of 4"):
        enc(torch.zeros(1, 5, 8))


def test_config_validation():
    with pytest.raises(ValueError, match="divisible"):
        tiny(d_model=30, n_heads=4)
    with pytest.raises(ValueError, match="activation"):
        tiny(activation="nope")
    with pytest.raises(ValueError, match="positional"):
        tiny(positional="rotary")
    with pytest.raises(ValueError, match="final_norm"):
        copy_from_torch_transformer(Transformer(tiny()), nn.Transformer(32, 4, 2, 2, 64, batch_first=True))


def test_learned_positions_and_tied_embeddings():
    m = Transformer(tiny(positional="learned", tie_embeddings=True))
    assert m.generator.weight is m.tgt_embed.weight
    assert m(torch.randint(1, 19, (2, 5)), torch.randint(1, 19, (2, 3))).shape == (2, 3, 19)


def test_paper_sized_parameter_counts():
    """The stacks match torch.nn.Transformer's 44,140,544 (which adds a final LayerNorm per stack)."""
    paper = Transformer(TransformerConfig(share_embeddings=True))
    stacks = sum(p.numel() for p in [*paper.encoder.parameters(), *paper.decoder.parameters()])
    assert stacks == 44_138_496
    assert stacks + 2 * 2 * 512 == sum(p.numel() for p in nn.Transformer().parameters())
    # one shared 37000 x 512 table (+ the output bias): 63.1M, the paper's "65M"
    assert paper.num_parameters() == 44_138_496 + 37000 * 512 + 37000
    assert paper.src_embed.weight is paper.tgt_embed.weight is paper.generator.weight
    with pytest.raises(ValueError, match="one vocabulary"):
        TransformerConfig(src_vocab_size=10, tgt_vocab_size=11, share_embeddings=True)
