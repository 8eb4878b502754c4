r"""Layer vectors: what each layer of a trained model says about each word.

:func:`layer_vectors` runs ELMo's biLM over sentences and returns every layer's vector for
every word: the input of the probes (:mod:`course_lib.analysis.probes`) and of the
layer-by-layer comparisons of chapter 1.

:func:`layer_transitions` measures how much each layer of a BERT-family encoder changes the
vectors that pass through it (the ALBERT paper's Figure 1): the mean L2 distance and cosine
similarity between each real token's vector entering a layer and leaving it.

:func:`encoder_word_vectors` and :func:`encoder_word_attentions` do for a BERT-family encoder
(a course model or a Hugging Face one, e.g. all-MiniLM-L6-v2) what :func:`layer_vectors` does
for ELMo, at the level of words: a word split into several WordPieces gets the **mean** of its
pieces' vectors; in attention maps a word's row is the mean of its pieces' rows and a column the
**sum** of its pieces' columns (Clark et al., 2019), with ``[CLS]`` and ``[SEP]`` left out, so a
row sums to the attention paid to the sentence's words (the structural probes and the head
analysis of chapter 8).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..data.chars import words_to_char_ids
from ..data.tokenizers import token_lists
from ..models.elmo import ElmoLanguageModel
from ..objectives.tagging import tagging_inputs
from ..train import model_device

__all__ = ["encoder_word_attentions", "encoder_word_vectors", "layer_transitions", "layer_vectors"]


@torch.no_grad()
def layer_vectors(
    model: ElmoLanguageModel,
    sentences: Sequence[Any],
    *,
    add_sentence_boundaries: bool = True,
    batch_size: int = 256,
) -> list[Tensor]:
    """Every layer's vector for every word: one ``[n_layers + 1, len(sentence), 2 * projection_dim]``
    tensor per sentence, on the CPU, in float32 (boundary tokens removed again).

    Layer 0 is the context-free char-CNN vector ``[x; x]``; layer :math:`j \\ge 1` is
    ``[forward_j; backward_j]``. Sentences are run with ``<S>``/``</S>`` as in training.
    """
    was_training = model.training
    model.eval()
    device = model_device(model)
    toks = [list(t) for t in token_lists(sentences)]
    order = sorted(range(len(toks)), key=lambda i: len(toks[i]))  # similar lengths together: less padding
    out: list[Tensor | None] = [None] * len(toks)
    off = 1 if add_sentence_boundaries else 0
    for i in range(0, len(order), batch_size):
        idx = order[i : i + batch_size]
        ids, mask = words_to_char_ids(
            [toks[j] for j in idx],
            add_sentence_boundaries=add_sentence_boundaries,
            max_chars=model.config.max_chars_per_token,
            device=device,
        )
        layers = model(ids, mask).float().cpu()
        for row, j in enumerate(idx):
            out[j] = layers[:, row, off : off + len(toks[j])]
    model.train(was_training)
    return out  # type: ignore[return-value]


@torch.no_grad()
def layer_transitions(
    model: nn.Module, examples: dict[str, Tensor], *, batch_size: int = 256
) -> dict[str, list[float]]:
    """How much each layer of a BERT-family encoder moves the token vectors.

    For layer :math:`l = 1, \\dots, L`, with :math:`h_{l-1}` the vector of a token entering it
    and :math:`h_l` leaving it, the means over every real (unpadded) token of ``examples``
    (``input_ids``, ``attention_mask``, optional ``token_type_ids``) of
    :math:`\\lVert h_l - h_{l-1} \\rVert_2` (``"l2"``) and :math:`\\cos(h_{l-1}, h_l)`
    (``"cosine"``): one value per layer, in eval mode. For ALBERT, :math:`h_0` is the
    embedding after its projection to the hidden width.
    """
    from ..models.bert import body_of

    body = body_of(model)
    was_training = body.training
    body.eval()
    device = model_device(body)
    l2: Tensor | None = None
    cosine: Tensor | None = None
    tokens = 0
    for i in range(0, examples["input_ids"].size(0), batch_size):
        sl = slice(i, i + batch_size)
        mask = examples["attention_mask"][sl].to(device)
        types = examples.get("token_type_ids")
        out = body(
            examples["input_ids"][sl].to(device),
            attention_mask=mask,
            token_type_ids=types[sl].to(device) if types is not None else None,
            output_hidden_states=True,
        )
        h = torch.stack(out.hidden_states).float()[:, mask.bool()]  # [L + 1, real tokens, H]
        before, after = h[:-1], h[1:]
        batch_l2 = (after - before).norm(dim=-1).sum(-1)
        batch_cos = F.cosine_similarity(before, after, dim=-1).sum(-1)
        l2 = batch_l2 if l2 is None else l2 + batch_l2
        cosine = batch_cos if cosine is None else cosine + batch_cos
        tokens += int(mask.sum())
    body.train(was_training)
    if l2 is None or cosine is None or tokens == 0:
        raise ValueError("layer_transitions needs at least one example with a real token")
    return {"l2": (l2 / tokens).tolist(), "cosine": (cosine / tokens).tolist()}


def _encoder(model: nn.Module) -> nn.Module:
    """A course BERT-family body (``body_of``), or a Hugging Face model's ``base_model``."""
    from ..models.bert import body_of

    try:
        return body_of(model)
    except TypeError:
        base = getattr(model, "base_model", None)
        if isinstance(base, nn.Module):
            return base
        raise TypeError(
            f"expected a course BERT-family model or a Hugging Face encoder, got {type(model).__name__}"
        ) from None


@torch.no_grad()
def _word_states(
    model: nn.Module,
    tokenizer,
    words: Sequence[Sequence[str]],
    *,
    attentions: bool,
    batch_size: int,
    max_len: int,
) -> list[Tensor]:
    body = _encoder(model)
    was_training = body.training
    body.eval()
    device = next(body.parameters()).device
    out: list[Tensor] = []
    try:
        for start in range(0, len(words), batch_size):
            chunk = [list(w) for w in words[start : start + batch_size]]
            if any(not w for w in chunk):
                raise ValueError(
                    f"sentence {start + next(i for i, w in enumerate(chunk) if not w)} has no words"
                )
            enc = tagging_inputs(tokenizer, chunk, max_len=max_len, piece_words=True)
            piece_word = enc["piece_word"]
            for k, w in enumerate(chunk):
                if int(piece_word[k].max()) != len(w) - 1:
                    raise ValueError(
                        f"sentence {start + k} ({len(w)} words) does not fit in max_len={max_len} word pieces"
                    )
            res = body(
                input_ids=enc["input_ids"].to(device),
                attention_mask=enc["attention_mask"].to(device),
                token_type_ids=enc["token_type_ids"].to(device),
                output_hidden_states=not attentions,
                output_attentions=attentions,
            )
            W = max(len(w) for w in chunk)
            onehot = (piece_word.unsqueeze(1) == torch.arange(W).view(1, W, 1)).float()  # [B, W, T]
            mean = onehot / onehot.sum(-1, keepdim=True).clamp(min=1)
            if attentions:
                att = torch.stack([a.float().cpu() for a in res.attentions])  # [L, B, heads, T, T]
                pooled = torch.einsum("bwt,lbhts,bvs->blhwv", mean, att, onehot)
            else:
                hid = torch.stack([h.float().cpu() for h in res.hidden_states])  # [L + 1, B, T, H]
                pooled = torch.einsum("bwt,lbth->blwh", mean, hid)
            for k, w in enumerate(chunk):
                n = len(w)
                out.append(pooled[k, :, :, :n, :n] if attentions else pooled[k, :, :n])
    finally:
        body.train(was_training)
    return out


def encoder_word_vectors(
    model: nn.Module, tokenizer, words: Sequence[Sequence[str]], *, batch_size: int = 32, max_len: int = 512
) -> list[Tensor]:
    """Every layer's vector for every word of every sentence (given as words): one
    ``[n_layers + 1, n_words, hidden]`` tensor per sentence, on the CPU, in float32; layer 0 is
    the embedding output. A word's vector is the mean over its WordPieces.

    ``model``: a course BERT-family model or task model, or a Hugging Face encoder (its
    ``base_model`` is run). A sentence that does not fit in ``max_len`` pieces is an error.
    """
    return _word_states(model, tokenizer, words, attentions=False, batch_size=batch_size, max_len=max_len)


def encoder_word_attentions(
    model: nn.Module, tokenizer, words: Sequence[Sequence[str]], *, batch_size: int = 32, max_len: int = 512
) -> list[Tensor]:
    """Word-to-word attention in every layer and head: one ``[n_layers, n_heads, n_words,
    n_words]`` tensor per sentence (row = the attending word: the mean over its pieces' rows;
    column = the attended word: the sum over its pieces' columns; ``[CLS]``/``[SEP]`` left out).

    A Hugging Face model must return attention weights (load it with
    ``attn_implementation="eager"``).
    """
    return _word_states(model, tokenizer, words, attentions=True, batch_size=batch_size, max_len=max_len)
