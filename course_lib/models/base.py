"""What the model families share: parameter counting, a body with heads, a tied LM head.

:class:`CountsParameters` gives every model ``num_parameters``; :class:`WithBody` is the
shape of every model that wraps a body (BERT's task models, XLNet's and Transformer-XL's LM
heads); :class:`TiedLMHeadModel` is a body with a language-model head whose matrix is the
word embedding table (XLNet, Transformer-XL).
"""

from __future__ import annotations

import torch
from torch import nn

from ..nn.init import init_weights
from ..nn.parameters import count_parameters

__all__ = ["CountsParameters", "WithBody", "TiedLMHeadModel"]


class CountsParameters:
    """``num_parameters``: distinct parameters (tied or shared ones counted once)."""

    def num_parameters(self, *, exclude_embeddings: bool = False) -> int:
        """Number of distinct parameters (tied or shared ones counted once); ``exclude_embeddings``
        leaves out every embedding table."""
        return count_parameters(self, exclude_embeddings=exclude_embeddings)


class WithBody(CountsParameters):
    """What every model with a body at ``base_attr`` shares (BERT's task models, XLNet's and
    Transformer-XL's LM heads): ``base`` (the body), ``device`` and ``num_parameters``."""

    base_attr: str

    @property
    def base(self) -> nn.Module:
        return getattr(self, self.base_attr)

    @property
    def device(self) -> torch.device:
        return self.base.device


class TiedLMHeadModel(WithBody, nn.Module):
    """A body (``body_class(config)`` at ``transformer``, Hugging Face's name) with a language-
    model head ``lm_head``: a ``Linear(d_model, vocab_size)`` with a bias whose matrix is the
    body's word embedding matrix when ``config.tie_word_embeddings`` (XLNet, Transformer-XL)."""

    body_class: type
    base_attr = "transformer"
    std_field = "initializer_range"  # the config's std of the initialisation (Transformer-XL: init_std)

    def __init__(self, config):
        super().__init__()
        self.config = config
        self.transformer = self.body_class(config)
        self.lm_head = nn.Linear(config.d_model, config.vocab_size)
        init_weights(self.lm_head, getattr(config, self.std_field))
        self.tie_weights()

    def tie_weights(self) -> None:
        """Share the head's matrix with the word embeddings (when the config says so)."""
        if self.config.tie_word_embeddings:
            self.lm_head.weight = self.transformer.word_embedding.weight
