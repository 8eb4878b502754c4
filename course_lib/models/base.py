"""What the model families share: parameter counting, a body with heads, a tied LM head.

:class:`CountsParameters` gives every model ``num_parameters``; :class:`WithBody` is the
shape of every model that wraps a body (BERT's task models, XLNet's tagger, XLNet's and
Transformer-XL's LM heads); :class:`TiedLMHeadModel` is a body with a language-model head whose matrix is the
word embedding table (XLNet, Transformer-XL).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

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
    """What every model with a body at ``base_attr`` shares (BERT's task models, XLNet's
    tagger, XLNet's and Transformer-XL's LM heads): ``base`` (the body), ``device``,
    ``num_parameters`` and :meth:`load_body` (a fine-tuning model's start)."""

    base_attr: str
    optional_body_keys: tuple[str, ...] = ()  # prefixes of body weights a start may lack (BERT: "pooler.")

    @property
    def base(self) -> nn.Module:
        return getattr(self, self.base_attr)

    def load_body(self, body: nn.Module) -> None:
        """Copy a pretrained body's weights into this model's (the fine-tuning start). Weights
        under ``optional_body_keys`` are copied when both have them; any other mismatch is an
        error."""
        result = self.base.load_state_dict(body.state_dict(), strict=False)
        bad = [
            k
            for k in (*result.missing_keys, *result.unexpected_keys)
            if not k.startswith(self.optional_body_keys)
        ]
        if bad:
            raise ValueError(f"the body does not fit this model: {bad[:5]}")

    @property
    def device(self) -> torch.device:
        return self.base.device


class TiedLMHeadModel(WithBody, nn.Module):
    """A body (``body_class(config)`` at ``transformer``, Hugging Face's name) with a language-
    model head ``lm_head``: a ``Linear(d_model, vocab_size)`` with a bias whose matrix is the
    body's word embedding matrix when ``config.tie_word_embeddings`` (XLNet, Transformer-XL).

    A subclass's ``forward`` runs the body on its own arguments and hands the body's output to
    :meth:`head_output`, which applies the head and ``loss_fn`` (XLNet: the masked-LM loss over
    the targets; Transformer-XL: the next-token loss) and fills ``output_class``.
    """

    body_class: type
    output_class: type  # the output record: loss, logits, and the body's mems, hidden states, attentions
    loss_fn: Callable[[Tensor, Tensor], Tensor]  # (logits, labels) -> mean loss; a staticmethod
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

    def head_output(self, out: Any, labels: Tensor | None) -> Any:
        """``output_class`` from the body's output ``out``: the head's logits on
        ``out.last_hidden_state``, the loss when ``labels`` are given, and the body's ``mems``,
        ``hidden_states`` and ``attentions``."""
        logits = self.lm_head(out.last_hidden_state)
        return self.output_class(
            loss=self.loss_fn(logits, labels) if labels is not None else None,
            logits=logits,
            mems=out.mems,
            hidden_states=out.hidden_states,
            attentions=out.attentions,
        )
