"""course_lib: pretrained language models built from scratch for the course.

ELMo -> Transformer -> BERT/RoBERTa -> ALBERT -> XLNet/Transformer-XL -> distillation -> probing.
Model classes are imported lazily, so ``import course_lib`` stays fast.
"""

from __future__ import annotations

import importlib

from .checkpoints import load_checkpoint, save_checkpoint, train_or_load
from .device import autocast, describe_device, get_device, seed_everything
from .train import History, fit

__version__ = "0.1.0"

# public name -> module that defines it (imported on first use)
_LAZY = {
    "Transformer": "course_lib.models.transformer",
    "TransformerConfig": "course_lib.models.transformer",
    "MultiHeadAttention": "course_lib.nn.attention",
    "Elmo": "course_lib.models.elmo",
    "ElmoConfig": "course_lib.models.elmo",
    "ElmoLanguageModel": "course_lib.models.elmo",
    "ScalarMix": "course_lib.models.elmo",
    "words_to_char_ids": "course_lib.data.chars",
    "BertConfig": "course_lib.models.bert",
    "BertModel": "course_lib.models.bert",
    "BertForPreTraining": "course_lib.models.bert",
    "BertForMaskedLM": "course_lib.models.bert",
    "BertForSequenceClassification": "course_lib.models.bert",
    "BertForTokenClassification": "course_lib.models.bert",
    "RobertaConfig": "course_lib.models.roberta",
    "RobertaModel": "course_lib.models.roberta",
    "RobertaForMaskedLM": "course_lib.models.roberta",
    "RobertaForSequenceClassification": "course_lib.models.roberta",
    "AlbertConfig": "course_lib.models.albert",
    "AlbertModel": "course_lib.models.albert",
    "AlbertForPreTraining": "course_lib.models.albert",
    "AlbertForMaskedLM": "course_lib.models.albert",
    "AlbertForSequenceClassification": "course_lib.models.albert",
    "XLNetConfig": "course_lib.models.xlnet",
    "XLNetModel": "course_lib.models.xlnet",
    "XLNetLMHeadModel": "course_lib.models.xlnet",
    "XLNetTaskConfig": "course_lib.models.xlnet",
    "XLNetForTokenClassification": "course_lib.models.xlnet",
    "TransfoXLConfig": "course_lib.models.transfo_xl",
    "TransfoXLModel": "course_lib.models.transfo_xl",
    "TransfoXLLMHeadModel": "course_lib.models.transfo_xl",
}

__all__ = [
    "History",
    "autocast",
    "describe_device",
    "fit",
    "get_device",
    "load_checkpoint",
    "save_checkpoint",
    "seed_everything",
    "train_or_load",
    *_LAZY,
]


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'course_lib' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY))
