r"""The post-LN layer around an attention: what BERT, Transformer-XL and XLNet share.

.. math::

    x' = \mathrm{LN}\big(x + \mathrm{Dropout}(\mathrm{Attention}(x))\big), \qquad
    y = \mathrm{LN}\big(x' + \mathrm{Dropout}(\mathrm{FFN}(x'))\big)

(Vaswani et al., 2017, as BERT, Transformer-XL and XLNet use it). :class:`PostLNLayer` holds
the attention and the feed-forward network it is given, the two LayerNorms and the sub-layer
dropout; a model's layer calls its attention with its own arguments and hands the result to
:meth:`PostLNLayer.sublayers`.
"""

from __future__ import annotations

from torch import Tensor, nn

from .attention import MultiHeadAttention
from .feedforward import FeedForward, draw_dropout, drop_in_place

__all__ = ["PostLNLayer"]


class PostLNLayer(nn.Module):
    """``attention``, ``attention_norm``, ``ffn``, ``ffn_norm`` and ``dropout`` (the names the
    Hugging Face name maps use); subclasses define ``forward``.

    Args:
        attention: the layer's attention (its ``d_model`` is the layer's width).
        ffn: the layer's feed-forward network.
        dropout: on each sub-layer's output before the residual connection.
        eps: the LayerNorms' epsilon.
    """

    def __init__(self, attention: MultiHeadAttention, ffn: FeedForward, *, dropout: float, eps: float):
        super().__init__()
        self.attention = attention
        self.attention_norm = nn.LayerNorm(attention.d_model, eps=eps)
        self.ffn = ffn
        self.ffn_norm = nn.LayerNorm(attention.d_model, eps=eps)
        self.dropout = nn.Dropout(dropout)

    def sublayers(self, x: Tensor, attended: Tensor) -> Tensor:
        """The residual connections, LayerNorms and the feed-forward network around the
        attention's output ``attended`` for the input ``x``. ``attended`` is dropped in place
        (:func:`~course_lib.nn.feedforward.drop_in_place`): pass a fresh tensor, as the
        attention's output projection returns."""
        x = self.attention_norm(x + drop_in_place(self.dropout, attended))
        return self.ffn_norm(x + drop_in_place(self.dropout, self.ffn(x)))

    def draw_sublayer_dropouts(self, x: Tensor) -> None:  # returns None: the output not computed
        """Draw the random numbers :meth:`sublayers` draws for an input like ``x`` (the attention
        output's dropout, the feed-forward network's inner one, its output's), computing nothing:
        for a caller that does not read the result (:func:`~course_lib.nn.feedforward.draw_dropout`)."""
        shape, inner = tuple(x.shape), (*x.shape[:-1], self.ffn.linear1.out_features)
        for p, size in ((self.dropout.p, shape), (self.ffn.dropout.p, inner), (self.dropout.p, shape)):
            draw_dropout(p, self.training, size, x.device)
