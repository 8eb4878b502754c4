r"""A topic-matcher: how far the *topic* of two segments goes towards a sentence-pair task.

A random second segment (NSP's negative) usually comes from a document on another topic, so a
model can solve much of NSP by matching topics. :class:`TopicMatcher` is that shortcut and
nothing else, as a baseline for a pair head: a naive-Bayes classifier that counts, over the
training documents, how often each token occurs under each topic (the generated corpus knows
every document's topic), gives each segment its most likely topic

.. math:: \hat t(S) = \arg\max_t \sum_{w \in S} \log p(t \mid w),

and answers "B does not belong after A" (label 1: a random B for NSP, a swapped pair for SOP)
when :math:`\hat t(A) \ne \hat t(B)`. On SOP pairs both segments come from one document, so it
can only guess.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import Tensor

from ..data import special_ids
from ..objectives.losses import PAIR_LABELS, data_pair_task

__all__ = ["TopicMatcher"]


class TopicMatcher:
    """Naive-Bayes topics of segments, fitted on ``documents`` (each with a ``topic``)."""

    def __init__(self, documents: Sequence[Any], tokenizer: Any):
        self.topics: list[str] = sorted({d.topic for d in documents if getattr(d, "topic", None) is not None})
        if not self.topics:
            raise ValueError(
                "TopicMatcher needs documents that carry a topic (the course's generated corpus does; "
                "your own text does not)"
            )
        vocab = tokenizer.get_vocab_size()
        counts = torch.ones(len(self.topics), vocab)  # add-one smoothing
        for d in documents:
            if getattr(d, "topic", None) is None:
                continue
            ids = [i for e in tokenizer.encode_batch([s.text for s in d.sentences]) for i in e.ids]
            row = self.topics.index(d.topic)
            counts[row] += torch.bincount(torch.tensor(ids, dtype=torch.long), minlength=vocab)
        self.log_p_topic = (counts / counts.sum(0)).log()  # log p(topic | token): [topics, vocab]
        self.specials = torch.tensor(sorted(set(special_ids(tokenizer).values())))

    def segment_topics(self, examples: Mapping[str, Tensor]) -> tuple[Tensor, Tensor]:
        """The most likely topic index of segment A and of segment B of each pair (``input_ids``,
        ``attention_mask``, ``token_type_ids``: 0 for A, 1 for B)."""
        ids = examples["input_ids"]
        real = examples["attention_mask"].bool() & ~torch.isin(ids, self.specials)
        per_token = self.log_p_topic[:, ids]  # [topics, pairs, seq]
        segment = examples["token_type_ids"]
        topic_a = (per_token * (real & (segment == 0))).sum(-1).argmax(0)
        topic_b = (per_token * (real & (segment == 1))).sum(-1).argmax(0)
        return topic_a, topic_b

    def predict(self, examples: Mapping[str, Tensor]) -> Tensor:
        """1 where the two segments get different topics ("B does not belong after A"), else 0."""
        topic_a, topic_b = self.segment_topics(examples)
        return (topic_a != topic_b).long()

    def accuracy(self, examples: Mapping[str, Tensor]) -> float:
        """Accuracy on the pair task whose labels ``examples`` hold (NSP or SOP)."""
        task = data_pair_task(examples)
        if task is None:
            raise ValueError(f"examples hold no sentence-pair labels (one of {sorted(PAIR_LABELS.values())})")
        return float((self.predict(examples) == examples[PAIR_LABELS[task]]).float().mean())
