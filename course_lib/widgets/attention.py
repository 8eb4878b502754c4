r"""Attention explorer: pick a kind of attention, a layer, a head and a softmax temperature.

Temperature acts on the weights the model produced: since
:math:`\mathrm{softmax}(s / T) = \mathrm{softmax}(\log \mathrm{softmax}(s) / T)`, re-normalising
:math:`w^{1/T}` over the same row gives exactly the weights the scores would have had at
temperature ``T``. ``T < 1`` sharpens the distribution towards its arg-max, ``T > 1``
flattens it towards uniform; masked keys (weight 0) stay at 0.

:func:`bert_attention` turns a BERT's attention weights for one or more sentences into the
explorer's input (one "kind" per sentence), so picking a layer and a head shows that head's
map over the tokens (:func:`bert_attention_explorer`); :func:`transformer_attention` does the
same for the encoder-decoder Transformer.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import torch
from torch import Tensor

from ..models.bert import body_of
from ..viz import plot_attention, to_numpy

__all__ = [
    "apply_temperature",
    "AttentionExplorer",
    "transformer_attention",
    "bert_attention",
    "bert_attention_explorer",
]


def apply_temperature(weights, temperature: float) -> np.ndarray:
    """Re-normalise attention rows as if the scores had been divided by ``temperature``."""
    if not temperature > 0:
        raise ValueError(f"temperature must be positive, got {temperature}")
    w = to_numpy(weights).astype(np.float64)
    with np.errstate(divide="ignore"):
        logw = np.log(w) / temperature
    top = np.max(logw, axis=-1, keepdims=True)
    top = np.where(np.isfinite(top), top, 0.0)
    e = np.exp(logw - top)
    z = e.sum(axis=-1, keepdims=True)
    return np.divide(e, z, out=np.zeros_like(e), where=z > 0)


@torch.no_grad()
def transformer_attention(model, src, tgt, index: int = 0) -> dict[str, list[torch.Tensor]]:
    """Attention weights of an encoder-decoder :class:`~course_lib.models.transformer.Transformer`
    for example ``index``: ``{kind: [layer -> [heads, query, key]]}`` with real tokens only."""
    was_training = model.training
    model.eval()
    _, w = model(src, tgt, return_weights=True)
    model.train(was_training)
    pad = model.config.pad_id
    ns = int((src[index] != pad).sum())
    nt = int((tgt[index] != pad).sum())
    return {
        "encoder self-attention": [x[index, :, :ns, :ns].cpu() for x in w["encoder"]],
        "decoder self-attention": [x[index, :, :nt, :nt].cpu() for x in w["decoder_self"]],
        "encoder-decoder attention": [x[index, :, :nt, :ns].cpu() for x in w["decoder_cross"]],
    }


class AttentionExplorer:
    """Browse attention maps.

    Args:
        weights: ``{kind: [one [heads, query, key] tensor per layer]}``.
        labels: ``{kind: (key_labels, query_labels)}`` (token strings for the axes).
    """

    def __init__(
        self, weights: Mapping[str, Sequence], labels: Mapping[str, tuple[Sequence[str], Sequence[str]]]
    ):
        if not weights:
            raise ValueError("AttentionExplorer needs at least one kind of attention")
        self.weights = {k: [to_numpy(x) for x in v] for k, v in weights.items()}
        for kind, layers in self.weights.items():
            if not layers or any(x.ndim != 3 for x in layers):
                raise ValueError(f"{kind!r}: expected a list of [heads, query, key] arrays, one per layer")
        missing = set(self.weights) - set(labels)
        if missing:
            raise ValueError(f"no axis labels for {sorted(missing)}")
        self.labels = {k: (list(labels[k][0]), list(labels[k][1])) for k in self.weights}
        self.kinds = list(self.weights)
        self.n_layers = {k: len(v) for k, v in self.weights.items()}
        self.n_heads = {k: v[0].shape[0] for k, v in self.weights.items()}
        self.last: np.ndarray | None = None  # the matrix shown most recently
        self.draws = 0

    def matrix(self, kind: str, layer: int, head: int, temperature: float = 1.0) -> np.ndarray:
        """The ``[query, key]`` matrix for a kind, layer and head at a temperature."""
        if kind not in self.weights:
            raise ValueError(f"unknown kind {kind!r}; choose one of {self.kinds}")
        if not 0 <= layer < self.n_layers[kind]:
            raise ValueError(f"layer {layer} out of range 0..{self.n_layers[kind] - 1}")
        if not 0 <= head < self.n_heads[kind]:
            raise ValueError(f"head {head} out of range 0..{self.n_heads[kind] - 1}")
        return apply_temperature(self.weights[kind][layer][head], temperature)

    def draw(self, kind: str, layer: int, head: int, temperature: float = 1.0):
        """Plot one map; returns the matplotlib figure."""
        import matplotlib.pyplot as plt

        m = self.matrix(kind, layer, head, temperature)
        self.last = m
        self.draws += 1
        xl, yl = self.labels[kind]
        fig, ax = plt.subplots(figsize=(0.32 * len(xl) + 2.4, 0.32 * len(yl) + 1.4))
        plot_attention(m, xl, yl, ax=ax, title=f"{kind}, layer {layer}, head {head}, T = {temperature:.2g}")
        fig.tight_layout()
        return fig

    def front_data(self, kind: str | None = None, digits: int = 4) -> dict:
        """What the page draws from: every kind's weights (rounded to ``digits`` decimals),
        its axis labels and the starting kind; the temperature is applied in the page."""
        kind = kind or self.kinds[0]
        if kind not in self.weights:
            raise ValueError(f"unknown kind {kind!r}; choose one of {self.kinds}")
        return {
            "kinds": self.kinds,
            "kind": kind,
            "labels": {k: [list(map(str, v[0])), list(map(str, v[1]))] for k, v in self.labels.items()},
            "weights": {
                k: [np.round(x.astype(np.float64), digits).tolist() for x in layers]
                for k, layers in self.weights.items()
            },
        }

    def widget(self, kind: str | None = None):
        """Kind, layer, head and temperature controls over the map: an anywidget that draws
        :meth:`matrix` in the page from the weights in its state (no kernel needed)."""
        from .front import live_widget

        return live_widget("attention", self.front_data(kind))


@torch.no_grad()
def bert_attention(
    model, tokenizer, sentences: str | Sequence[str] | Mapping[str, str]
) -> tuple[dict[str, list[Tensor]], dict[str, tuple[list[str], list[str]]]]:
    """Attention weights of a BERT for each sentence, in :class:`AttentionExplorer`'s format.

    ``sentences``: one text, a list of texts, or ``{name: text}``. A text may be a pair
    ``"first sentence ||| second sentence"`` (encoded as ``[CLS] A [SEP] B [SEP]``).
    Returns ``(weights, labels)``: ``weights[name]`` is a list with one ``[heads, tokens,
    tokens]`` tensor per layer; ``labels[name]`` is ``(tokens, tokens)``.
    """
    if isinstance(sentences, str):
        sentences = [sentences]
    named = dict(sentences) if isinstance(sentences, Mapping) else {s: s for s in sentences}
    if not named:
        raise ValueError("bert_attention needs at least one sentence")
    body = body_of(model)
    device = body.device
    was_training = body.training
    body.eval()
    weights, labels = {}, {}
    for name, text in named.items():
        parts = [p.strip() for p in text.split("|||")]
        if len(parts) > 2 or not all(parts):
            raise ValueError(f"{text!r}: give one sentence or a pair 'A ||| B'")
        enc = tokenizer.encode(*parts)
        ids = torch.tensor([enc.ids], device=device)
        types = torch.tensor([enc.type_ids], device=device)
        if body.config.type_vocab_size == 1:
            types = torch.zeros_like(types)
        out = body(ids, token_type_ids=types, output_attentions=True)
        weights[name] = [a[0].float().cpu() for a in out.attentions]
        labels[name] = (list(enc.tokens), list(enc.tokens))
    body.train(was_training)
    return weights, labels


def bert_attention_explorer(
    model, tokenizer, sentences: str | Sequence[str] | Mapping[str, str]
) -> AttentionExplorer:
    """An :class:`AttentionExplorer` over a BERT's self-attention, one entry per sentence:
    ``bert_attention_explorer(model, tok, {"tired": s1, "wide": s2}).widget()``."""
    weights, labels = bert_attention(model, tokenizer, sentences)
    return AttentionExplorer(weights, labels)
