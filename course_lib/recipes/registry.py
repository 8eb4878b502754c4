"""The registry of model classes: what the recipes can build, save and load, by class name
(a folder's ``config.json`` records it), and which of them are masked LMs (where fine-tuning
and distillation start). A new model is a model file plus a :func:`register_model` call."""

from __future__ import annotations

from torch import nn

from ..models.albert import AlbertForMaskedLM, AlbertForPreTraining
from ..models.bert import BertForMaskedLM, BertForPreTraining, BertLMHeadModel
from ..models.roberta import RobertaForMaskedLM
from ..models.transfo_xl import TransfoXLLMHeadModel
from ..models.xlnet import XLNetLMHeadModel

__all__ = [
    "MODEL_CLASSES",
    "MASKED_LMS",
    "register_model",
    "is_masked_lm",
    "registered_class",
    "architecture_of",
    "with_article",
]

# class name -> class: what the recipes can build, save and load
MODEL_CLASSES: dict[str, type[nn.Module]] = {}


def register_model(cls: type[nn.Module]) -> type[nn.Module]:
    """Make ``cls`` known to the recipes under its name (usable as a class decorator).

    The class needs a ``config_class`` whose ``cls.config_class(**config.to_dict())`` rebuilds
    its configuration. Registering a *different* class under a taken name is an error.
    """
    name = cls.__name__
    if MODEL_CLASSES.get(name, cls) is not cls:
        raise ValueError(f"another class is already registered as {name!r}")
    if not hasattr(cls, "config_class"):
        raise TypeError(f"{name} has no config_class: the recipes could not rebuild its configuration")
    MODEL_CLASSES[name] = cls
    return cls


# the transformer families the recipes build, save and load (ELMo registers its own class in
# recipes/elmo.py: its folders hold a vocabulary, not a tokenizer)
for _cls in (
    BertForPreTraining,
    BertForMaskedLM,
    BertLMHeadModel,
    RobertaForMaskedLM,
    AlbertForPreTraining,
    AlbertForMaskedLM,
    XLNetLMHeadModel,
    TransfoXLLMHeadModel,
):
    register_model(_cls)
del _cls


# the registered classes pretrained as masked LMs: where fine-tuning and distillation start
# (BertLMHeadModel, XLNet and Transformer-XL are left-to-right or permutation LMs)
MASKED_LMS: tuple[type[nn.Module], ...] = (
    BertForPreTraining,
    BertForMaskedLM,
    RobertaForMaskedLM,
    AlbertForPreTraining,
    AlbertForMaskedLM,
)


def is_masked_lm(architecture: str) -> bool:
    """Whether ``architecture`` (a folder's :func:`saved_architecture`) names a registered
    masked LM (:data:`MASKED_LMS`, or a subclass of one): a start for ``course finetune`` and
    a teacher for ``course train distill``. One rule for both commands, read from the classes,
    not from their names."""
    cls = MODEL_CLASSES.get(architecture)
    return cls is not None and issubclass(cls, MASKED_LMS)


def registered_class(name: str) -> type[nn.Module]:
    """The registered class called ``name`` (``ValueError`` naming the registered ones otherwise)."""
    try:
        return MODEL_CLASSES[name]
    except KeyError:
        raise ValueError(f"unknown architecture {name!r}; registered: {sorted(MODEL_CLASSES)}") from None


def architecture_of(model: nn.Module) -> str:
    """The registered name of ``model``'s class (``TypeError`` when its class is not registered)."""
    name = type(model).__name__
    if MODEL_CLASSES.get(name) is not type(model):
        raise TypeError(
            f"{name} is not a registered model class (see register_model); registered: "
            f"{sorted(MODEL_CLASSES)}"
        )
    return name


def with_article(name: str) -> str:
    """``"a BertForMaskedLM"``, ``"an XLNetLMHeadModel"``, ``"an ALBERT"``: a class or family
    name as the messages say it (by its first letter, as these names are read)."""
    return ("an " if name[:1].upper() in "AEIOUX" else "a ") + name
