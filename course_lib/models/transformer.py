r"""The Transformer of "Attention Is All You Need" (Vaswani et al., 2017).

An encoder stack reads the source; a decoder stack writes the target one token at a time,
attending to its own past (masked self-attention) and to the encoder's output
(encoder-decoder attention). Every sub-layer is wrapped in a residual connection and a
LayerNorm:

* post-LN (the paper): ``x = LayerNorm(x + Dropout(Sublayer(x)))``
* pre-LN (an option, easier to train deep): ``x = x + Dropout(Sublayer(LayerNorm(x)))``

The position-wise feed-forward network is ``FFN(x) = max(0, x W_1 + b_1) W_2 + b_2``.
Batch-first throughout: tensors are ``[batch, length, d_model]``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from ..nn.attention import MultiHeadAttention, padding_mask
from ..nn.feedforward import FeedForward, get_activation
from ..nn.parameters import count_parameters
from ..nn.positional import LearnedPositionalEmbedding, SinusoidalPositionalEncoding

__all__ = [
    "TransformerConfig",
    "EncoderLayer",
    "DecoderLayer",
    "Encoder",
    "Decoder",
    "Transformer",
    "copy_mha_from_torch",
    "copy_from_torch_transformer",
]


@dataclass
class TransformerConfig:
    """Sizes of an encoder-decoder Transformer. Defaults are the paper's base model."""

    src_vocab_size: int = 37000  # source vocabulary
    tgt_vocab_size: int = 37000  # target vocabulary
    d_model: int = 512  # width of every layer
    n_heads: int = 8  # attention heads; d_head = d_model / n_heads
    n_encoder_layers: int = 6
    n_decoder_layers: int = 6
    d_ff: int = 2048  # inner width of the feed-forward network
    dropout: float = 0.1  # on sub-layer outputs and on embeddings + positions
    attention_dropout: float = 0.0  # on attention weights (the paper uses none)
    activation: str = "relu"
    max_len: int = 512  # length of the positional table
    positional: str = "sinusoidal"  # or "learned"
    norm_first: bool = False  # False: post-LN (paper); True: pre-LN
    final_norm: bool | None = None  # LayerNorm after each stack; default: only with pre-LN
    layer_norm_eps: float = 1e-5
    pad_id: int = 0
    tie_embeddings: bool = False  # share target embedding and output projection
    share_embeddings: bool = False  # share source + target embeddings and output projection (paper)

    def __post_init__(self):
        if self.d_model % self.n_heads != 0:
            raise ValueError(f"d_model={self.d_model} must be divisible by n_heads={self.n_heads}")
        if self.positional not in ("sinusoidal", "learned"):
            raise ValueError(f"positional must be 'sinusoidal' or 'learned', got {self.positional!r}")
        get_activation(self.activation)
        if self.share_embeddings and self.src_vocab_size != self.tgt_vocab_size:
            raise ValueError(
                f"share_embeddings needs one vocabulary: src_vocab_size={self.src_vocab_size} != "
                f"tgt_vocab_size={self.tgt_vocab_size}"
            )
        if self.final_norm is None:
            self.final_norm = self.norm_first


class EncoderLayer(nn.Module):
    """Self-attention, then the feed-forward network, each with a residual connection and a
    LayerNorm: post-LN ``x = norm(x + dropout(sublayer(x)))`` (the paper) or pre-LN
    ``x = x + dropout(sublayer(norm(x)))`` (``norm_first``)."""

    def __init__(self, config: TransformerConfig):
        super().__init__()
        c = config
        self.self_attn = MultiHeadAttention(c.d_model, c.n_heads, dropout=c.attention_dropout)
        self.ffn = FeedForward(c.d_model, c.d_ff, dropout=c.dropout, activation=c.activation)
        self.norm_attn = nn.LayerNorm(c.d_model, eps=c.layer_norm_eps)
        self.norm_ffn = nn.LayerNorm(c.d_model, eps=c.layer_norm_eps)
        self.dropout = nn.Dropout(c.dropout)
        self.norm_first = c.norm_first

    def forward(self, x: Tensor, mask: Tensor | None = None, *, return_weights: bool = False):
        if self.norm_first:
            a, weights = self.self_attn(self.norm_attn(x), mask=mask, return_weights=return_weights)
            x = x + self.dropout(a)
            x = x + self.dropout(self.ffn(self.norm_ffn(x)))
        else:
            a, weights = self.self_attn(x, mask=mask, return_weights=return_weights)
            x = self.norm_attn(x + self.dropout(a))
            x = self.norm_ffn(x + self.dropout(self.ffn(x)))
        return x, weights


class DecoderLayer(nn.Module):
    """Masked self-attention, encoder-decoder attention, feed-forward; each with a residual
    connection and a LayerNorm, post-LN or pre-LN as in :class:`EncoderLayer`."""

    def __init__(self, config: TransformerConfig):
        super().__init__()
        c = config
        self.self_attn = MultiHeadAttention(c.d_model, c.n_heads, dropout=c.attention_dropout)
        self.cross_attn = MultiHeadAttention(c.d_model, c.n_heads, dropout=c.attention_dropout)
        self.ffn = FeedForward(c.d_model, c.d_ff, dropout=c.dropout, activation=c.activation)
        self.norm_self = nn.LayerNorm(c.d_model, eps=c.layer_norm_eps)
        self.norm_cross = nn.LayerNorm(c.d_model, eps=c.layer_norm_eps)
        self.norm_ffn = nn.LayerNorm(c.d_model, eps=c.layer_norm_eps)
        self.dropout = nn.Dropout(c.dropout)
        self.norm_first = c.norm_first

    def forward(
        self,
        x: Tensor,
        memory: Tensor,
        self_mask: Tensor | None = None,
        memory_mask: Tensor | None = None,
        *,
        causal: bool = True,
        return_weights: bool = False,
    ):
        if self.norm_first:
            h = self.norm_self(x)
            a, self_w = self.self_attn(h, mask=self_mask, causal=causal, return_weights=return_weights)
            x = x + self.dropout(a)
            h = self.norm_cross(x)
            a, cross_w = self.cross_attn(h, memory, memory, mask=memory_mask, return_weights=return_weights)
            x = x + self.dropout(a)
            x = x + self.dropout(self.ffn(self.norm_ffn(x)))
        else:
            a, self_w = self.self_attn(x, mask=self_mask, causal=causal, return_weights=return_weights)
            x = self.norm_self(x + self.dropout(a))
            a, cross_w = self.cross_attn(x, memory, memory, mask=memory_mask, return_weights=return_weights)
            x = self.norm_cross(x + self.dropout(a))
            x = self.norm_ffn(x + self.dropout(self.ffn(x)))
        return x, self_w, cross_w


class Encoder(nn.Module):
    def __init__(self, config: TransformerConfig):
        super().__init__()
        self.layers = nn.ModuleList(EncoderLayer(config) for _ in range(config.n_encoder_layers))
        self.norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps) if config.final_norm else None

    def forward(self, x: Tensor, mask: Tensor | None = None, *, return_weights: bool = False):
        weights = []
        for layer in self.layers:
            x, w = layer(x, mask, return_weights=return_weights)
            weights.append(w)
        if self.norm is not None:
            x = self.norm(x)
        return x, (weights if return_weights else None)


class Decoder(nn.Module):
    def __init__(self, config: TransformerConfig):
        super().__init__()
        self.layers = nn.ModuleList(DecoderLayer(config) for _ in range(config.n_decoder_layers))
        self.norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps) if config.final_norm else None

    def forward(self, x, memory, self_mask=None, memory_mask=None, *, causal=True, return_weights=False):
        self_ws, cross_ws = [], []
        for layer in self.layers:
            x, sw, cw = layer(x, memory, self_mask, memory_mask, causal=causal, return_weights=return_weights)
            self_ws.append(sw)
            cross_ws.append(cw)
        if self.norm is not None:
            x = self.norm(x)
        return x, ((self_ws, cross_ws) if return_weights else None)


class Transformer(nn.Module):
    """Encoder-decoder Transformer with embeddings, positions and the output projection.

    ``forward(src, tgt)`` returns next-token logits ``[batch, tgt_len, tgt_vocab_size]``
    for teacher forcing; :meth:`greedy_decode` and :meth:`beam_search` generate.
    Padding (``config.pad_id``) in ``src`` and ``tgt`` is masked automatically.
    """

    def __init__(self, config: TransformerConfig):
        super().__init__()
        self.config = c = config
        self.src_embed = nn.Embedding(c.src_vocab_size, c.d_model)
        self.tgt_embed = nn.Embedding(c.tgt_vocab_size, c.d_model)
        pos_cls = SinusoidalPositionalEncoding if c.positional == "sinusoidal" else LearnedPositionalEmbedding
        self.src_pos = pos_cls(c.d_model, c.max_len, dropout=c.dropout)
        self.tgt_pos = pos_cls(c.d_model, c.max_len, dropout=c.dropout)
        self.encoder = Encoder(c)
        self.decoder = Decoder(c)
        self.generator = nn.Linear(c.d_model, c.tgt_vocab_size)
        self.reset_parameters()
        if c.tie_embeddings or c.share_embeddings:
            self.generator.weight = self.tgt_embed.weight
        if c.share_embeddings:
            self.src_embed.weight = self.tgt_embed.weight

    def reset_parameters(self) -> None:
        """Xavier-uniform for matrices (as in the reference implementations), zeros for biases."""
        for name, p in self.named_parameters():
            if p.dim() > 1:
                nn.init.xavier_uniform_(p)
            elif name.endswith("bias"):
                nn.init.zeros_(p)

    @property
    def device(self) -> torch.device:
        return self.generator.weight.device

    def _embed(self, tokens: Tensor, embed: nn.Embedding, pos: nn.Module) -> Tensor:
        # the paper multiplies embeddings by sqrt(d_model) before adding positions
        return pos(embed(tokens) * math.sqrt(self.config.d_model))

    def src_mask(self, src: Tensor) -> Tensor:
        """``[batch, 1, 1, src_len]``: True for real source tokens."""
        return padding_mask(src != self.config.pad_id)

    def encode(self, src: Tensor, *, return_weights: bool = False):
        """Source ids ``[batch, src_len]`` -> memory ``[batch, src_len, d_model]`` (and weights)."""
        x = self._embed(src, self.src_embed, self.src_pos)
        return self.encoder(x, self.src_mask(src), return_weights=return_weights)

    def decode(self, tgt: Tensor, memory: Tensor, src_mask: Tensor, *, return_weights: bool = False):
        """Target ids so far ``[batch, tgt_len]`` -> decoder states (causal + padding masks applied)."""
        y = self._embed(tgt, self.tgt_embed, self.tgt_pos)
        tgt_pad = padding_mask(tgt != self.config.pad_id)
        return self.decoder(y, memory, tgt_pad, src_mask, causal=True, return_weights=return_weights)

    def forward(self, src: Tensor, tgt: Tensor, *, return_weights: bool = False):
        """Logits for every target position; with ``return_weights`` also a dict of attention weights."""
        memory, enc_w = self.encode(src, return_weights=return_weights)
        h, dec_w = self.decode(tgt, memory, self.src_mask(src), return_weights=return_weights)
        logits = self.generator(h)
        if not return_weights:
            return logits
        return logits, {"encoder": enc_w, "decoder_self": dec_w[0], "decoder_cross": dec_w[1]}

    @torch.no_grad()
    def greedy_decode(self, src: Tensor, *, bos_id: int, eos_id: int, max_len: int | None = None) -> Tensor:
        """Pick the most likely next token at each step; stop when every sequence has emitted EOS.

        Returns ``[batch, <= max_len + 1]`` ids starting with BOS; positions after EOS hold ``pad_id``.
        """
        max_len = max_len or self.config.max_len - 1
        memory, _ = self.encode(src)
        smask = self.src_mask(src)
        out = torch.full((src.size(0), 1), bos_id, dtype=torch.long, device=src.device)
        done = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)
        for _ in range(max_len):
            h, _ = self.decode(out, memory, smask)
            nxt = self.generator(h[:, -1]).argmax(-1)
            nxt = nxt.masked_fill(done, self.config.pad_id)
            out = torch.cat([out, nxt[:, None]], dim=1)
            done |= nxt == eos_id
            if bool(done.all()):
                break
        return out

    @torch.no_grad()
    def beam_search(
        self,
        src: Tensor,
        *,
        bos_id: int,
        eos_id: int,
        beam_size: int = 4,
        max_len: int | None = None,
        length_penalty: float = 0.0,
    ) -> Tensor:
        """Beam search, batched over ``src``; returns the best sequence per input (padded with ``pad_id``).

        Scores are summed log-probabilities divided by ``length ** length_penalty``.
        """
        max_len = max_len or self.config.max_len - 1
        b, k, pad = src.size(0), beam_size, self.config.pad_id
        memory, _ = self.encode(src)
        smask = self.src_mask(src)
        memory = memory.repeat_interleave(k, 0)
        smask = smask.repeat_interleave(k, 0)
        seqs = torch.full((b * k, 1), bos_id, dtype=torch.long, device=src.device)
        scores = torch.zeros(b, k, device=src.device)
        scores[:, 1:] = float("-inf")  # all beams start identical: keep one alive
        done = torch.zeros(b * k, dtype=torch.bool, device=src.device)
        for _ in range(max_len):
            h, _ = self.decode(seqs, memory, smask)
            logp = torch.log_softmax(self.generator(h[:, -1]).float(), -1)  # [b*k, V]
            vocab = logp.size(-1)
            # finished beams may only extend with pad, at no cost
            finished = torch.full_like(logp, float("-inf"))
            finished[:, pad] = 0.0
            logp = torch.where(done[:, None], finished, logp)
            cand = (scores.view(b * k, 1) + logp).view(b, k * vocab)
            scores, idx = cand.topk(k, dim=-1)
            beam, tok = idx // vocab, idx % vocab
            base = (torch.arange(b, device=src.device) * k)[:, None]
            sel = (base + beam).view(-1)
            seqs = torch.cat([seqs[sel], tok.view(-1, 1)], dim=1)
            done = done[sel] | (tok.view(-1) == eos_id)
            if bool(done.all()):
                break
        lengths = ((seqs != pad) & (seqs != bos_id)).sum(-1).clamp(min=1).float().view(b, k)
        final = scores / lengths**length_penalty
        best = final.argmax(-1)
        return seqs.view(b, k, -1)[torch.arange(b, device=src.device), best]

    def num_parameters(self, *, embeddings: bool = True) -> int:
        """Distinct parameters (shared ones counted once); ``embeddings=False`` leaves out the tables."""
        tables = () if embeddings else (self.src_embed.weight, self.tgt_embed.weight, self.generator.weight)
        return count_parameters(self, skip=tables)


# ---------------------------------------------------------------------------------------
# Interop with torch.nn: copy weights from the reference implementation (used by the
# parity tests and the chapter's "ours equals PyTorch's" check).
# ---------------------------------------------------------------------------------------


@torch.no_grad()
def copy_mha_from_torch(ours: MultiHeadAttention, ref: nn.MultiheadAttention) -> None:
    """Copy a ``torch.nn.MultiheadAttention`` (packed in-projection) into ours."""
    d = ours.d_model
    if ref.embed_dim != d or ref.num_heads != ours.n_heads:
        raise ValueError(
            f"shape mismatch: ours d_model={d}, heads={ours.n_heads}; ref {ref.embed_dim}, {ref.num_heads}"
        )
    if ref.in_proj_weight is None:
        raise ValueError("only packed in-projections (kdim == vdim == embed_dim) are supported")
    w, b = ref.in_proj_weight, ref.in_proj_bias
    for i, lin in enumerate([ours.w_q, ours.w_k, ours.w_v]):
        lin.weight.copy_(w[i * d : (i + 1) * d])
        if b is not None:
            lin.bias.copy_(b[i * d : (i + 1) * d])
    ours.w_o.weight.copy_(ref.out_proj.weight)
    if ref.out_proj.bias is not None:
        ours.w_o.bias.copy_(ref.out_proj.bias)


@torch.no_grad()
def copy_from_torch_transformer(ours: Transformer, ref: nn.Transformer) -> None:
    """Copy the encoder/decoder stacks of a ``torch.nn.Transformer`` into ours.

    ``torch.nn.Transformer`` has no embeddings or output projection; those stay as they are.
    It always ends each stack with a LayerNorm, so ``ours`` needs ``final_norm=True``.
    """
    if not ours.config.final_norm:
        raise ValueError(
            "torch.nn.Transformer ends each stack with a LayerNorm: build ours with final_norm=True"
        )

    def copy_ln(dst: nn.LayerNorm, src: nn.LayerNorm):
        dst.weight.copy_(src.weight)
        dst.bias.copy_(src.bias)

    def copy_ffn(dst: FeedForward, src):
        dst.linear1.load_state_dict(src.linear1.state_dict())
        dst.linear2.load_state_dict(src.linear2.state_dict())

    if len(ref.encoder.layers) != len(ours.encoder.layers) or len(ref.decoder.layers) != len(
        ours.decoder.layers
    ):
        raise ValueError("number of layers differs between ours and the reference")
    for mine, theirs in zip(ours.encoder.layers, ref.encoder.layers):
        copy_mha_from_torch(mine.self_attn, theirs.self_attn)
        copy_ffn(mine.ffn, theirs)
        copy_ln(mine.norm_attn, theirs.norm1)
        copy_ln(mine.norm_ffn, theirs.norm2)
    for mine, theirs in zip(ours.decoder.layers, ref.decoder.layers):
        copy_mha_from_torch(mine.self_attn, theirs.self_attn)
        copy_mha_from_torch(mine.cross_attn, theirs.multihead_attn)
        copy_ffn(mine.ffn, theirs)
        copy_ln(mine.norm_self, theirs.norm1)
        copy_ln(mine.norm_cross, theirs.norm2)
        copy_ln(mine.norm_ffn, theirs.norm3)
    copy_ln(ours.encoder.norm, ref.encoder.norm)
    copy_ln(ours.decoder.norm, ref.decoder.norm)
