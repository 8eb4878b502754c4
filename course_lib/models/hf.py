r"""Hugging Face interop of the BERT family and XLNet, in one place.

The model files (:mod:`~course_lib.models.bert`, :mod:`~course_lib.models.roberta`,
:mod:`~course_lib.models.albert`, :mod:`~course_lib.models.xlnet`) hold the
papers' networks; everything that exists only so that they meet ``transformers`` lives here:

* **configuration**: the config dataclasses use Hugging Face's field names and no others;
  :class:`HFConfig` adds ``max_len`` (the longest input, derived) and :meth:`HFConfig.from_hf`
  (a ``transformers`` config or a ``config.json`` dict, with the options we do not implement
  refused);
  :func:`xlnet_config_from_hf` and :func:`xlnet_config_to_hf` translate XLNet's, whose
  ``mem_len`` means something else in Hugging Face's code (0 keeps every state there, no
  state in the course, as in Transformer-XL);
* **output records** with Hugging Face's field names (``last_hidden_state``,
  ``prediction_logits``, ``logits``, ...), indexable like theirs, and ONE accessor for the
  masked-LM logits of any masked-LM model: ``out.mlm_logits``;
* **name maps**: our parameter names -> theirs (:func:`bert_body_names` for the body, a
  table of head names per task model, ``HEADS_*`` below; :func:`xlnet_hf_names` for XLNet,
  whose attention projections also change layout, :func:`xlnet_state_dict_to_ours`);
* **checked loading**: :func:`load_hf_state_dict` copies a state dict through a name map
  and fails on any missing, unused or mis-shaped tensor; :class:`HFBody` and
  :class:`HFWithHeads` give the models their ``from_hf`` methods.

Nothing here imports a model module: the models import this one.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from ..nn.feedforward import ACTIVATIONS

__all__ = [
    "HFConfig",
    "ModelOutput",
    "BertModelOutput",
    "BertForPreTrainingOutput",
    "MaskedLMOutput",
    "SequenceClassifierOutput",
    "TokenClassifierOutput",
    "linear_names",
    "embedding_names",
    "layer_names",
    "BERT_LAYER_NAMES",
    "bert_body_names",
    "load_hf_state_dict",
    "HFBody",
    "HFWithHeads",
    "HEADS_BERT_MLM",
    "HEADS_BERT_PRETRAINING",
    "HEADS_CLASSIFIER",
    "HEADS_ROBERTA_MLM",
    "HEADS_ROBERTA_CLASSIFIER",
    "AlbertForPreTrainingOutput",
    "ALBERT_LAYER_NAMES",
    "albert_body_names",
    "HEADS_ALBERT_MLM",
    "HEADS_ALBERT_PRETRAINING",
    "XLNetModelOutput",
    "XLNetLMHeadModelOutput",
    "XLNetForTokenClassificationOutput",
    "xlnet_config_from_hf",
    "xlnet_config_to_hf",
    "xlnet_hf_names",
    "xlnet_state_dict_to_ours",
]


# ---------------------------------------------------------------------------------------
# Configuration: the course's names, and translation from a transformers config
# ---------------------------------------------------------------------------------------


class HFConfig:
    """Mixin of the BERT-family config dataclasses (whose fields carry Hugging Face's names).

    Adds ``max_len``, the longest input (derived: RoBERTa reserves positions), and
    :meth:`from_hf`.
    """

    # RoBERTa-style position ids (set by RobertaConfig); not a field
    _roberta_positions: ClassVar[bool] = False
    # the Hugging Face model family this config describes ("bert", "roberta", "albert")
    _family: ClassVar[str] = "bert"

    @property
    def max_len(self) -> int:
        """Longest input the model accepts (RoBERTa subtracts its reserved positions)."""
        return self.max_position_embeddings

    @classmethod
    def from_hf(cls, hf_config: Any):
        """The same configuration as a ``transformers`` config (object or ``config.json`` dict).

        Raises ``ValueError`` for options this implementation does not have (decoder mode,
        cross-attention, relative position embeddings, an unknown activation).
        """
        d = hf_config if isinstance(hf_config, Mapping) else hf_config.to_dict()
        model_type = d.get("model_type")
        if model_type is not None:
            family = next((f for f in ("albert", "roberta") if f in model_type), "bert")
            if family != cls._family:
                use = {
                    "bert": "BertConfig / Bert*",
                    "roberta": "RobertaConfig / Roberta*",
                    "albert": "AlbertConfig / Albert*",
                }
                raise ValueError(
                    f"a {model_type!r} config describes a {family} model, not a {cls._family} one: "
                    f"use {use[family]}.from_hf"
                )
        if d.get("add_cross_attention"):
            raise ValueError("course_lib's BERT has no cross-attention: add_cross_attention is not supported")
        pos = d.get("position_embedding_type", "absolute")
        if pos not in (None, "absolute"):
            raise ValueError(f"position_embedding_type={pos!r} is not supported (only 'absolute')")
        act = d.get("hidden_act", "gelu")
        if not isinstance(act, str) or act not in ACTIVATIONS:
            raise ValueError(f"hidden_act={act!r} is not supported; choose one of {sorted(ACTIVATIONS)}")
        names = {f.name for f in fields(cls)}
        kwargs = {k: d[k] for k in names if k in d and d[k] is not None}
        if "pad_token_id" not in kwargs:
            kwargs["pad_token_id"] = 0
        if "id2label" in d and d["id2label"]:
            kwargs["num_labels"] = len(d["id2label"])
        if "classifier_dropout" in d:
            kwargs["classifier_dropout"] = d["classifier_dropout"]
        return cls(**kwargs)

    def to_dict(self) -> dict:
        return asdict(self)


# ---------------------------------------------------------------------------------------
# Outputs: dataclasses with Hugging Face field names
# ---------------------------------------------------------------------------------------


@dataclass
class ModelOutput:
    """Base of the output records: fields by name (``out.logits``, ``out["logits"]``) or by
    position over the fields that are set (``out[0]``, ``hidden, pooled = out``), as with
    Hugging Face outputs (whose iteration yields keys; ours yields values)."""

    def to_tuple(self) -> tuple:
        return tuple(getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None)

    def keys(self) -> list[str]:
        return [f.name for f in fields(self) if getattr(self, f.name) is not None]

    def __getitem__(self, key: str | int | slice):
        if isinstance(key, str):
            if key not in {f.name for f in fields(self)}:
                raise KeyError(key)
            return getattr(self, key)
        return self.to_tuple()[key]

    def __iter__(self) -> Iterator:
        return iter(self.to_tuple())

    def __len__(self) -> int:
        return len(self.to_tuple())


@dataclass
class BertModelOutput(ModelOutput):
    last_hidden_state: Tensor  # [batch, seq_len, d_model]
    pooler_output: Tensor | None = None  # [batch, d_model]: tanh(W h_[CLS] + b)
    hidden_states: tuple[Tensor, ...] | None = None  # embeddings + every layer, with output_hidden_states
    attentions: tuple[Tensor, ...] | None = None  # per layer [batch, heads, seq, seq], with output_attentions


@dataclass
class BertForPreTrainingOutput(ModelOutput):
    loss: Tensor | None = None  # MLM + NSP (each when its labels are given)
    prediction_logits: Tensor | None = None  # [batch, seq_len, vocab_size]
    seq_relationship_logits: Tensor | None = None  # [batch, 2]: 0 = B follows A, 1 = B is random
    hidden_states: tuple[Tensor, ...] | None = None
    attentions: tuple[Tensor, ...] | None = None
    mlm_loss: Tensor | None = None  # the two parts of the loss, for logging
    nsp_loss: Tensor | None = None

    @property
    def mlm_logits(self) -> Tensor | None:
        """The masked-LM logits (``prediction_logits``): the same accessor as :class:`MaskedLMOutput`'s."""
        return self.prediction_logits


@dataclass
class AlbertForPreTrainingOutput(ModelOutput):
    loss: Tensor | None = None  # MLM + SOP (each when its labels are given)
    prediction_logits: Tensor | None = None  # [batch, seq_len, vocab_size]
    sop_logits: Tensor | None = None  # [batch, 2]: 0 = A, B in order, 1 = swapped
    hidden_states: tuple[Tensor, ...] | None = None
    attentions: tuple[Tensor, ...] | None = None
    mlm_loss: Tensor | None = None
    sop_loss: Tensor | None = None

    @property
    def mlm_logits(self) -> Tensor | None:
        return self.prediction_logits


@dataclass
class MaskedLMOutput(ModelOutput):
    loss: Tensor | None = None
    logits: Tensor | None = None  # [batch, seq_len, vocab_size]
    hidden_states: tuple[Tensor, ...] | None = None
    attentions: tuple[Tensor, ...] | None = None

    @property
    def mlm_logits(self) -> Tensor | None:
        """The masked-LM logits (``logits``): read them as ``out.mlm_logits`` from any masked-LM model."""
        return self.logits


@dataclass
class SequenceClassifierOutput(ModelOutput):
    loss: Tensor | None = None
    logits: Tensor | None = None  # [batch, num_labels]
    hidden_states: tuple[Tensor, ...] | None = None
    attentions: tuple[Tensor, ...] | None = None


@dataclass
class TokenClassifierOutput(ModelOutput):
    loss: Tensor | None = None
    logits: Tensor | None = None  # [batch, seq_len, num_labels]
    hidden_states: tuple[Tensor, ...] | None = None
    attentions: tuple[Tensor, ...] | None = None


# ---------------------------------------------------------------------------------------
# Name maps: our parameter names -> Hugging Face's
# ---------------------------------------------------------------------------------------


def linear_names(ours: str, theirs: str) -> dict[str, str]:
    """The weight and bias of one linear (or LayerNorm) layer."""
    return {f"{ours}.weight": f"{theirs}.weight", f"{ours}.bias": f"{theirs}.bias"}


# One encoder layer's sub-layers, per family: our name -> Hugging Face's, each inside its layer.
BERT_LAYER_NAMES = {
    "attention.w_q": "attention.self.query",
    "attention.w_k": "attention.self.key",
    "attention.w_v": "attention.self.value",
    "attention.w_o": "attention.output.dense",
    "attention_norm": "attention.output.LayerNorm",
    "ffn.linear1": "intermediate.dense",
    "ffn.linear2": "output.dense",
    "ffn_norm": "output.LayerNorm",
}
ALBERT_LAYER_NAMES = {
    "attention.w_q": "attention.query",
    "attention.w_k": "attention.key",
    "attention.w_v": "attention.value",
    "attention.w_o": "attention.dense",
    "attention_norm": "attention.LayerNorm",
    "ffn.linear1": "ffn",
    "ffn.linear2": "ffn_output",
    "ffn_norm": "full_layer_layer_norm",
}


def _prefixes(ours: str, theirs: str) -> tuple[str, str]:
    return (f"{ours}." if ours else ""), (f"{theirs}." if theirs else "")


def embedding_names(o: str, t: str) -> dict[str, str]:
    """The three embedding tables and their LayerNorm (``o``, ``t``: prefixes, ``""`` or ending in ``.``)."""
    return {
        f"{o}embeddings.word_embeddings.weight": f"{t}embeddings.word_embeddings.weight",
        f"{o}embeddings.position_embeddings.weight": f"{t}embeddings.position_embeddings.weight",
        f"{o}embeddings.token_type_embeddings.weight": f"{t}embeddings.token_type_embeddings.weight",
        **linear_names(f"{o}embeddings.norm", f"{t}embeddings.LayerNorm"),
    }


def layer_names(ours: str, theirs: str, sublayers: Mapping[str, str]) -> dict[str, str]:
    """One encoder layer, ours at path ``ours`` and theirs at ``theirs``: the weight and bias of
    each sub-layer of the family's table (:data:`BERT_LAYER_NAMES`, :data:`ALBERT_LAYER_NAMES`)."""
    names: dict[str, str] = {}
    for mine, hf in sublayers.items():
        names.update(linear_names(f"{ours}.{mine}", f"{theirs}.{hf}"))
    return names


def bert_body_names(config, ours: str, theirs: str, *, pooler: bool) -> dict[str, str]:
    """Our parameter name -> Hugging Face's, for the embeddings, the encoder and the pooler."""
    o, t = _prefixes(ours, theirs)
    names = embedding_names(o, t)
    for i in range(config.num_hidden_layers):
        names.update(layer_names(f"{o}encoder.layers.{i}", f"{t}encoder.layer.{i}", BERT_LAYER_NAMES))
    if pooler:
        names.update(linear_names(f"{o}pooler.dense", f"{t}pooler.dense"))
    return names


def albert_body_names(config, ours: str, theirs: str, *, pooler: bool) -> dict[str, str]:
    """:func:`bert_body_names` for ALBERT: the projection, Hugging Face's layer groups
    (our distinct layer ``k`` is their group ``k // inner_group_num``, inner layer
    ``k % inner_group_num``) and the bare ``pooler`` Linear. Only ``sharing="all"`` has
    Hugging Face names (it is the only mode ``transformers`` has)."""
    if config.sharing != "all":
        raise ValueError(
            f"sharing={config.sharing!r} has no Hugging Face counterpart (transformers shares whole "
            "layers only, sharing='all' with groups)"
        )
    o, t = _prefixes(ours, theirs)
    names = embedding_names(o, t)
    projection = "encoder.embedding_hidden_mapping_in"  # E -> H, the same name in both
    names.update(linear_names(f"{o}{projection}", f"{t}{projection}"))
    inner = config.inner_group_num
    for k in range(config.num_hidden_groups * inner):
        hf = f"{t}encoder.albert_layer_groups.{k // inner}.albert_layers.{k % inner}"
        names.update(layer_names(f"{o}encoder.layers.{k}", hf, ALBERT_LAYER_NAMES))
    if pooler:
        names.update(linear_names(f"{o}pooler.dense", f"{t}pooler"))
    return names


# Task heads: our module path -> Hugging Face's (a tied decoder maps to the word embeddings).
HEADS_BERT_MLM = {
    "mlm_head.dense": "cls.predictions.transform.dense",
    "mlm_head.norm": "cls.predictions.transform.LayerNorm",
    "mlm_head.bias": "cls.predictions.bias",
    "mlm_head.decoder": "cls.predictions.decoder",
}
HEADS_BERT_PRETRAINING = {**HEADS_BERT_MLM, "nsp_head": "cls.seq_relationship"}
HEADS_CLASSIFIER = {"classifier": "classifier"}
HEADS_ROBERTA_MLM = {
    "mlm_head.dense": "lm_head.dense",
    "mlm_head.norm": "lm_head.layer_norm",
    "mlm_head.bias": "lm_head.bias",
    "mlm_head.decoder": "lm_head.decoder",
}
HEADS_ROBERTA_CLASSIFIER = {"dense": "classifier.dense", "out_proj": "classifier.out_proj"}
HEADS_ALBERT_MLM = {
    "mlm_head.dense": "predictions.dense",
    "mlm_head.norm": "predictions.LayerNorm",
    "mlm_head.bias": "predictions.bias",
    "mlm_head.decoder": "predictions.decoder",
}
HEADS_ALBERT_PRETRAINING = {**HEADS_ALBERT_MLM, "sop_head": "sop_classifier.classifier"}


def head_names(model: nn.Module, heads: Mapping[str, str], body: Mapping[str, str]) -> dict[str, str]:
    """Hugging Face names of ``model``'s head parameters, given the body's names.

    A parameter that *is* a body parameter (a tied MLM decoder) takes the body's name; the
    others are renamed by the longest module path of ``heads`` that contains them.
    """
    params = list(model.named_parameters(remove_duplicate=False))
    tied = {}
    for name, p in params:
        if name in body:
            tied.setdefault(id(p), body[name])
    names = {}
    for name, p in params:
        if name in body:
            continue
        if id(p) in tied:
            names[name] = tied[id(p)]
            continue
        for ours in sorted(heads, key=len, reverse=True):
            if name == ours or name.startswith(ours + "."):
                names[name] = heads[ours] + name[len(ours) :]
                break
    return names


# ---------------------------------------------------------------------------------------
# Checked loading, and the from_hf methods of the models
# ---------------------------------------------------------------------------------------


_IGNORABLE_SUFFIXES = ("position_ids", "token_type_ids", "predictions.decoder.bias", "lm_head.decoder.bias")


@torch.no_grad()
def load_hf_state_dict(model: nn.Module, state_dict: Mapping[str, Tensor], names: Mapping[str, str]) -> None:
    """Copy ``state_dict`` (Hugging Face names) into ``model`` through ``names`` (ours -> theirs).

    Every parameter of ``model`` must be found (a tied decoder may fall back to the word
    embeddings) with the same shape, and every Hugging Face tensor must be used (apart from
    buffers and tied copies); otherwise a ``ValueError`` lists what did not match.
    """
    own = dict(model.named_parameters(remove_duplicate=False))
    missing, bad_shape, used = [], [], set()
    for ours, param in own.items():
        theirs = names.get(ours)
        if theirs is None:
            missing.append(f"{ours} (no mapping)")
            continue
        src = state_dict.get(theirs)
        if src is None:
            missing.append(f"{ours} <- {theirs}")
            continue
        if tuple(src.shape) != tuple(param.shape):
            bad_shape.append(f"{ours} {tuple(param.shape)} <- {theirs} {tuple(src.shape)}")
            continue
        param.copy_(src.to(dtype=param.dtype, device=param.device))
        used.add(theirs)
    unexpected = [k for k in state_dict if k not in used and not k.endswith(_IGNORABLE_SUFFIXES)]
    # a tied copy (e.g. the MLM decoder's weight = the word embeddings) is not "unused"
    used_tensors = [state_dict[k] for k in used]
    unexpected = [
        k
        for k in unexpected
        if not any(
            u.shape == state_dict[k].shape
            and (u.data_ptr() == state_dict[k].data_ptr() or torch.equal(u, state_dict[k]))
            for u in used_tensors
        )
    ]
    if missing or bad_shape or unexpected:
        raise ValueError(
            "the Hugging Face weights do not match this model:"
            + (f"\n  missing: {missing}" if missing else "")
            + (f"\n  shape mismatch: {bad_shape}" if bad_shape else "")
            + (f"\n  unused: {unexpected}" if unexpected else "")
        )


class HFBody:
    """``from_hf`` for a bare encoder (``BertModel``, ``RobertaModel``)."""

    config_class: ClassVar[type]

    @staticmethod
    def body_names(config, ours: str, theirs: str, *, pooler: bool) -> dict[str, str]:
        """The body's name map (:func:`bert_body_names`; ALBERT has its own)."""
        return bert_body_names(config, ours, theirs, pooler=pooler)

    def hf_names(self, prefix: str = "") -> dict[str, str]:
        """Our parameter names -> the Hugging Face ``BertModel`` names (with ``prefix``, e.g. ``"bert"``)."""
        return self.body_names(self.config, "", prefix, pooler=self.pooler is not None)

    @classmethod
    def from_hf_state_dict(
        cls, state_dict: Mapping[str, Tensor], config, *, add_pooling_layer: bool | None = None
    ):
        """Build from a Hugging Face ``BertModel`` state dict (keys with or without a ``bert.`` prefix)."""
        first = next(iter(k for k in state_dict if k.endswith("embeddings.word_embeddings.weight")), None)
        if first is None:
            raise ValueError("no embeddings.word_embeddings.weight in the state dict: not a BERT checkpoint")
        prefix = first[: -len("embeddings.word_embeddings.weight")].rstrip(".")
        p = f"{prefix}." if prefix else ""
        sd = {k: v for k, v in state_dict.items() if k.startswith(p)}
        if add_pooling_layer is None:
            add_pooling_layer = f"{p}pooler.dense.weight" in sd
        model = cls(config, add_pooling_layer=add_pooling_layer)
        load_hf_state_dict(model, sd, model.hf_names(prefix))
        return model.eval()

    @classmethod
    def from_hf(cls, hf_model: nn.Module):
        """The same configuration and weights as a ``transformers`` model.

        Accepts the bare model (``BertModel``) or any model with a base model inside
        (``BertForMaskedLM`` etc.): the encoder (and pooler, if it has one) is copied.
        Returned in eval mode.
        """
        config = cls.config_class.from_hf(hf_model.config)
        base = getattr(hf_model, "base_model", hf_model)
        sd = dict(base.state_dict())
        return cls.from_hf_state_dict(sd, config, add_pooling_layer=getattr(base, "pooler", None) is not None)


class HFWithHeads:
    """``hf_names`` and ``from_hf`` for a body with task heads (``Bert*For*``, ``Roberta*For*``).

    The model names its body attribute (``base_attr``, also the Hugging Face prefix), whether
    the body keeps its pooler, and its heads' Hugging Face names (``hf_heads``).
    """

    config_class: ClassVar[type]
    model_class: ClassVar[type]
    base_attr: ClassVar[str]
    add_pooling_layer: ClassVar[bool]
    hf_heads: ClassVar[Mapping[str, str]] = {}

    def hf_names(self) -> dict[str, str]:
        """Our parameter names -> the Hugging Face names (body and heads)."""
        body = self.model_class.body_names(
            self.config, self.base_attr, self.base_attr, pooler=self.add_pooling_layer
        )
        return {**body, **head_names(self, self.hf_heads, body)}

    @classmethod
    def from_hf(cls, hf_model: nn.Module):
        """Copy the ``transformers`` model of the same name (configuration and weights); eval mode."""
        model = cls(cls.config_class.from_hf(hf_model.config))
        load_hf_state_dict(model, dict(hf_model.state_dict()), model.hf_names())
        return model.eval()


# ---------------------------------------------------------------------------------------
# XLNet: outputs, names and the attention projections' layout
# ---------------------------------------------------------------------------------------


@dataclass
class XLNetModelOutput(ModelOutput):
    last_hidden_state: Tensor  # [batch, seq_len, d_model]; [batch, num_predict, d_model] with target_mapping
    mems: tuple[Tensor, ...] | None = None  # per layer [mem_len, batch, d_model]: feed back as `mems`
    hidden_states: tuple[Tensor, ...] | None = None  # every layer's input, then the output (h, g pairs)
    attentions: tuple[Any, ...] | None = None  # per layer [batch, heads, seq, keys] (a pair with g)


@dataclass
class XLNetLMHeadModelOutput(ModelOutput):
    loss: Tensor | None = None
    logits: Tensor | None = None  # [batch, num_predict or seq_len, vocab_size]
    mems: tuple[Tensor, ...] | None = None
    hidden_states: tuple[Tensor, ...] | None = None
    attentions: tuple[Any, ...] | None = None


@dataclass
class XLNetForTokenClassificationOutput(ModelOutput):
    loss: Tensor | None = None
    logits: Tensor | None = None  # [batch, seq_len, num_labels]
    mems: tuple[Tensor, ...] | None = None
    hidden_states: tuple[Tensor, ...] | None = None
    attentions: tuple[Any, ...] | None = None


def xlnet_config_from_hf(hf_config: Any, names: set[str]) -> dict[str, Any]:
    """The keyword arguments of the course's ``XLNetConfig`` (fields ``names``) for a
    ``transformers.XLNetConfig`` (object or ``config.json`` dict).

    Hugging Face's ``mem_len`` of 0 or None keeps every state (its ``cache_mem``): the course's
    None; the course's 0 (no memory) has no Hugging Face spelling but ``use_mems_* = False``.
    Raises ``ValueError`` for another model family and for a ``d_head`` other than ``d_model /
    n_head`` (the options not implemented are refused by the config itself).
    """
    d = hf_config if isinstance(hf_config, Mapping) else hf_config.to_dict()
    model_type = d.get("model_type")
    if model_type is not None and model_type != "xlnet":
        raise ValueError(f"a {model_type!r} config does not describe an XLNet model")
    if d.get("d_head") is not None and "d_model" in d and "n_head" in d:
        if d["d_head"] != d["d_model"] // d["n_head"]:
            raise ValueError(f"d_head={d['d_head']} must be d_model / n_head = {d['d_model'] // d['n_head']}")
    nullable = {"mem_len", "reuse_len"}  # None means something for these two
    kwargs = {k: d[k] for k in names if k in d and (d[k] is not None or k in nullable)}
    if "mem_len" in kwargs and not kwargs["mem_len"]:
        kwargs["mem_len"] = None  # 0 keeps everything in Hugging Face's XLNet
    if "num_labels" in names and d.get("id2label"):  # a task model's config (Hugging Face: a property)
        kwargs["num_labels"] = len(d["id2label"])
    return kwargs


def xlnet_config_to_hf(values: Mapping[str, Any]) -> dict[str, Any]:
    """The course's XLNet config (``to_dict()``) as ``transformers.XLNetConfig`` keyword
    arguments: ``mem_len=0`` (no memory) becomes ``mem_len=None`` with ``use_mems_eval`` and
    ``use_mems_train`` False (Hugging Face's 0 would keep every state); None stays None."""
    out = dict(values)
    if out.get("mem_len") == 0:
        out.update(mem_len=None, use_mems_eval=False, use_mems_train=False)
    return out


# one layer: our name -> Hugging Face's, inside the layer
_XLNET_LINEARS = {
    "attention_norm": "rel_attn.layer_norm",
    "ffn.linear1": "ff.layer_1",
    "ffn.linear2": "ff.layer_2",
    "ffn_norm": "ff.layer_norm",
}
_XLNET_PROJECTIONS = {"w_q": "q", "w_k": "k", "w_v": "v", "w_r": "r", "w_o": "o"}
_XLNET_VECTORS = ("r_w_bias", "r_r_bias", "r_s_bias", "seg_embed")


def xlnet_hf_names(config: Any, ours: str = "", theirs: str = "") -> dict[str, str]:
    """Our parameter names -> Hugging Face's, for :class:`~course_lib.models.xlnet.XLNetModel` at ``ours`` and
    ``transformers.XLNetModel`` at ``theirs`` (prefixes, ``""`` for none)."""
    o = f"{ours}." if ours else ""
    t = f"{theirs}." if theirs else ""
    names = {f"{o}word_embedding.weight": f"{t}word_embedding.weight", f"{o}mask_emb": f"{t}mask_emb"}
    for i in range(config.n_layer):
        mine, hf = f"{o}layers.{i}", f"{t}layer.{i}"
        for a, b in _XLNET_LINEARS.items():
            names.update(linear_names(f"{mine}.{a}", f"{hf}.{b}"))
        for a, b in _XLNET_PROJECTIONS.items():
            names[f"{mine}.attention.{a}.weight"] = f"{hf}.rel_attn.{b}"
        for a in _XLNET_VECTORS:
            names[f"{mine}.attention.{a}"] = f"{hf}.rel_attn.{a}"
    return names


def xlnet_state_dict_to_ours(state_dict: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """A Hugging Face XLNet state dict (names kept) with its attention projections in our layout.

    Hugging Face's ``q, k, v, r`` are ``[d_model, heads, d_head]`` (input first): our
    ``nn.Linear`` weight ``[heads * d_head, d_model]`` is their transpose; ``o`` maps back,
    ``[d_model, heads * d_head]`` as it is.
    """
    out = {}
    for name, t in state_dict.items():
        module, _, leaf = name.rpartition(".")
        if module.endswith("rel_attn") and leaf in ("q", "k", "v", "r"):
            t = t.reshape(t.size(0), -1).t()
        elif module.endswith("rel_attn") and leaf == "o":
            t = t.reshape(t.size(0), -1)
        out[name] = t
    return out
