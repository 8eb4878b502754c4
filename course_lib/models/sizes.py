r"""Where BERT's and ALBERT's parameters live: counted by formula, and measured on a model.

Notation: :math:`V` vocabulary, :math:`P` positions, :math:`T` token types, :math:`E` the
width of the embedding tables (:math:`E = H` in BERT, ``embedding_size`` in ALBERT),
:math:`H` hidden size, :math:`I` feed-forward size, :math:`L` layers. Every linear map has a
bias and every LayerNorm of width :math:`d` has :math:`2d` parameters.

**Embeddings.** Three tables and a LayerNorm; ALBERT adds the projection :math:`E \to H`
(the factorisation, counted here although Hugging Face keeps it in the encoder):

.. math::

    N_{emb} = (V + P + T)\,E + 2E \;\big[+\; E H + H \text{ in ALBERT}\big]

**One attention sub-layer** (:math:`W_Q, W_K, W_V, W_O` and its LayerNorm) and **one
feed-forward sub-layer** (:math:`W_1, W_2` and its LayerNorm):

.. math::

    N_{att} = 4(H^2 + H) + 2H = 4H^2 + 6H, \qquad
    N_{ffn} = (HI + I) + (IH + H) + 2H = 2HI + I + 3H

The encoder holds :math:`n_{att}` distinct attention and :math:`n_{ffn}` distinct
feed-forward sub-layers; sharing is what makes these smaller than :math:`L`:

============================  ======================  ======================
model                         :math:`n_{att}`          :math:`n_{ffn}`
============================  ======================  ======================
BERT, ALBERT ``"none"``       :math:`L`               :math:`L`
ALBERT ``"all"``              :math:`G \cdot K`       :math:`G \cdot K`
ALBERT ``"attention"``        1                       :math:`L`
ALBERT ``"ffn"``              :math:`L`               1
============================  ======================  ======================

with :math:`G` = ``num_hidden_groups`` and :math:`K` = ``inner_group_num`` (Hugging Face's
grouping; ALBERT's published models have :math:`G = K = 1`: one layer's weights, applied
:math:`L` times). So :math:`N_{attention} = n_{att} N_{att}` and :math:`N_{ffn} = n_{ffn} N_{ffn}`.

**Pooler** :math:`N_{pool} = H^2 + H`. **Heads**: the masked-LM head maps :math:`H \to E`, a
LayerNorm(:math:`E`), and a decoder :math:`E \to V` tied to the word embeddings (no new
weights) with its own bias; the sentence-pair head (NSP in BERT, SOP in ALBERT) is
:math:`H \to 2`:

.. math::

    N_{mlm} = HE + E + 2E + V \;\big[+\; VE \text{ if not tied}\big], \qquad N_{pair} = 2H + 2

Example, ALBERT-base (:math:`V = 30000, E = 128, H = 768, L = 12, I = 3072`, ``"all"``):
:math:`3{,}906{,}048 + 99{,}072` (embeddings) :math:`+ 2{,}363{,}904` (attention)
:math:`+ 4{,}723{,}968` (FFN) :math:`+ 590{,}592` (pooler) :math:`= 11{,}683{,}584`, the
paper's "12M". BERT-base with :math:`V = 30522` is 109,482,240; its 12 layers hold
:math:`12 \times 7{,}087{,}872 = 85{,}054{,}464` of them.

:func:`parameter_breakdown` computes these from a config; :func:`measured_breakdown` sorts a
built model's distinct parameters (a tied or shared tensor once) into the same parts by
name, so the two can be compared; :func:`millions` writes a count as the papers do.
"""

from __future__ import annotations

from torch import nn

from .bert import BertConfig

__all__ = [
    "PARTS",
    "HEADS",
    "parameter_breakdown",
    "sublayer_counts",
    "measured_breakdown",
    "millions",
]

PARTS = ("embeddings", "attention", "ffn", "pooler", "heads")  # the keys, besides "total"
HEADS = (None, "mlm", "pretraining")  # no heads; masked-LM head; masked-LM + NSP/SOP


def _is_albert(config: BertConfig) -> bool:
    from .albert import AlbertConfig  # lazily: ALBERT builds on BERT, not the other way round

    return isinstance(config, AlbertConfig)


def sublayer_counts(config: BertConfig) -> tuple[int, int]:
    """``(n_att, n_ffn)``: how many distinct attention and feed-forward sub-layers the encoder
    holds (each is applied at least once; with sharing, several times)."""
    if not isinstance(config, BertConfig):
        raise TypeError(f"expected a BertConfig or an AlbertConfig, got {type(config).__name__}")
    n_layers = config.num_hidden_layers
    if not _is_albert(config):
        return n_layers, n_layers
    from .albert import SHARING_MODES  # lazily, as in _is_albert

    sharing = config.sharing
    if sharing not in SHARING_MODES:
        raise ValueError(f"unknown sharing {sharing!r}; choose one of {SHARING_MODES}")
    groups, inner = config.num_hidden_groups, config.inner_group_num
    if sharing != "all" and (groups, inner) != (1, 1):
        raise ValueError(
            f"sharing={sharing!r} takes num_hidden_groups=1 and inner_group_num=1, got {groups} and {inner}"
        )
    if sharing == "all":
        return groups * inner, groups * inner
    if sharing == "attention":
        return 1, n_layers
    if sharing == "ffn":
        return n_layers, 1
    return n_layers, n_layers


def parameter_breakdown(
    config: BertConfig, *, pooler: bool = True, heads: str | None = None
) -> dict[str, int]:
    r"""Parameters of a BERT or ALBERT by part, from the formulas of this module's docstring.

    Args:
        config: a :class:`~course_lib.models.bert.BertConfig` (RoBERTa's too) or an
            :class:`~course_lib.models.albert.AlbertConfig`.
        pooler: whether the body has its pooler (``BertModel(config, add_pooling_layer=...)``;
            ``BertForMaskedLM`` has none).
        heads: ``None`` (the body alone), ``"mlm"`` (``BertForMaskedLM``) or ``"pretraining"``
            (``BertForPreTraining`` / ``AlbertForPreTraining``: masked-LM + NSP/SOP, which
            reads the pooler).

    Returns ``{"embeddings", "attention", "ffn", "pooler", "heads", "total"}`` counts (the
    ALBERT projection :math:`E \to H` is in ``"embeddings"``).
    """
    if heads not in HEADS:
        raise ValueError(f"heads must be one of {HEADS}, got {heads!r}")
    if heads == "pretraining" and not pooler:
        raise ValueError("the pretraining heads read the pooler's output: pooler=False does not fit them")
    n_att, n_ffn = sublayer_counts(config)  # checks the config's type and sharing
    c = config
    V, P, T = c.vocab_size, c.max_position_embeddings, c.type_vocab_size
    E, H, Ifn = c.embedding_width, c.hidden_size, c.intermediate_size

    embeddings = (V + P + T) * E + 2 * E
    if _is_albert(c):
        embeddings += E * H + H  # embedding_hidden_mapping_in: the factorisation
    attention = 4 * (H * H + H) + 2 * H
    ffn = (H * Ifn + Ifn) + (Ifn * H + H) + 2 * H
    head_count = 0
    if heads is not None:
        head_count = H * E + E + 2 * E + V  # transform, LayerNorm(E), decoder bias
        if not c.tie_word_embeddings:
            head_count += V * E  # an untied decoder matrix
        if heads == "pretraining":
            head_count += 2 * H + 2  # NSP (BERT) / SOP (ALBERT)
    parts = {
        "embeddings": embeddings,
        "attention": n_att * attention,
        "ffn": n_ffn * ffn,
        "pooler": H * H + H if pooler else 0,
        "heads": head_count,
    }
    return {**parts, "total": sum(parts.values())}


# ---------------------------------------------------------------------------------------
# Measuring a built model
# ---------------------------------------------------------------------------------------

_BODIES = ("bert", "albert", "roberta")  # the attribute a task model keeps its body under
_HEAD_MODULES = ("mlm_head", "nsp_head", "sop_head", "classifier")
_ENCODER_PARTS = {"attention": "attention", "attention_norm": "attention", "ffn": "ffn", "ffn_norm": "ffn"}


def _part_of(name: str) -> str:
    """The part a parameter belongs to, from its (course_lib) name."""
    first, _, rest = name.partition(".")
    body = rest if first in _BODIES else name
    if first in _HEAD_MODULES:
        return "heads"
    if body.startswith(("embeddings.", "encoder.embedding_hidden_mapping_in.")):
        return "embeddings"
    if body.startswith("pooler."):
        return "pooler"
    if body.startswith("encoder."):
        for segment in body.split(".")[1:]:
            if segment in _ENCODER_PARTS:
                return _ENCODER_PARTS[segment]
            if not (segment.isdigit() or segment in ("layers", "groups")):
                break
    raise ValueError(
        f"cannot place parameter {name!r}: measured_breakdown knows course_lib's BERT-family names "
        "(embeddings.*, encoder.embedding_hidden_mapping_in.*, encoder.layers.<k>.{attention, "
        f"attention_norm, ffn, ffn_norm}}.*, pooler.*, heads {_HEAD_MODULES}, bodies under {_BODIES})"
    )


def measured_breakdown(model: nn.Module) -> dict[str, int]:
    """A built model's distinct parameters by part (the keys of :func:`parameter_breakdown`).

    Each tensor counts once, under its first name: the MLM decoder tied to the word
    embeddings counts in ``"embeddings"``, an ALBERT layer shared by all :math:`L` layers
    once. ``"total"`` therefore equals ``model.num_parameters()``. Works on course_lib's
    BERT, RoBERTa and ALBERT bodies and task models; any other name is an error.
    """
    parts = dict.fromkeys(PARTS, 0)
    for name, p in model.named_parameters():  # remove_duplicate=True: shared tensors once
        parts[_part_of(name)] += p.numel()
    return {**parts, "total": sum(parts.values())}


def millions(n: int, digits: int = 0) -> str:
    """A count as papers write it: ``millions(11_683_584) == "12M"``,
    ``millions(11_683_584, 2) == "11.68M"``."""
    if n < 0:
        raise ValueError(f"a parameter count is not negative, got {n}")
    if digits < 0:
        raise ValueError(f"digits must be 0 or more, got {digits}")
    return f"{n / 1e6:.{digits}f}M"
