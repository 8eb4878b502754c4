"""Study ``06_transfo_xl``: chapter 6's Transformer-XL memory over three seeds.

The chapter's tokenizer (chapter 5's text) and documents: the generated documents as one long
stream (``[SEP]`` between documents), cut into rows of 4 segments of 32 tokens. Two
pretrainings of the same network (2 layers, hidden 128), the same steps, rows and seed:

* ``memory``: Transformer-XL, each row read segment by segment with a memory of 32 states per
  layer carried from one segment to the next (the gradient stops at the memory);
* ``no_memory``: the same network with no memory (``mem_len=0``): every segment read on its
  own, a Transformer on fixed-length segments with relative positions (the baseline).

Then, on the held-out stream (rows of 16 segments):

* **loss by position in the segment**: the mean next-token loss of the token at each position
  0..31 of its segment, for the memory model with its memory, the same model without memory,
  and the baseline: without memory the first positions of a segment have almost no context;
* **loss against the context the memory gives**: the memory model evaluated with memories of
  0 to 128 states (longer than in training, as the paper evaluates);
* the held-out loss of each model, with and without memory.

No wall-clock times are stored (the chapter times cached against recomputed evaluation live).
"""

from __future__ import annotations

from typing import Any

import torch

from ..data.documents import split_corpus, train_tokenizer
from ..device import get_device
from ..models.transfo_xl import segment_token_nll, segmented_nll
from ..recipes.transfo_xl import pretrain_transfo_xl, stream_rows, token_stream, transfo_xl_config
from . import Study, pretrain_arms, register_study
from .ar_ae import QUICK as AR_AE_QUICK
from .ar_ae import SETTINGS as AR_AE
from .ar_ae import chapter_text

SETTINGS: dict[str, Any] = dict(
    text=dict(documents=AR_AE["documents"], names=AR_AE["names"]),  # chapter 5's text: the tokenizer
    tokenizer=AR_AE["tokenizer"],
    model=dict(size="small"),
    pretrain=dict(steps=800, batch_size=32, lr=1e-3, segment_len=32, segments_per_row=4),
    arms={"memory": dict(mem_len=32), "no_memory": dict(mem_len=0)},
    curve_points=4,
    evaluation=dict(segments_per_row=16, memories=(0, 8, 16, 32, 64, 128)),
)
QUICK: dict[str, Any] = dict(
    SETTINGS,
    text=dict(documents=AR_AE_QUICK["documents"], names=AR_AE_QUICK["names"]),
    tokenizer=AR_AE_QUICK["tokenizer"],
    model=dict(size="tiny"),
    pretrain=dict(steps=3, batch_size=4, lr=1e-3, segment_len=8, segments_per_row=3),
    arms={"memory": dict(mem_len=8), "no_memory": dict(mem_len=0)},
    curve_points=1,
    evaluation=dict(segments_per_row=4, memories=(0, 8, 16)),
)
ARMS = ("memory", "no_memory")


def _by_position(nll: torch.Tensor, segment_len: int) -> list[float]:
    """Mean loss of the predicted token at each position of its segment: entry ``t`` of
    ``nll`` predicts token ``t + 1``, at position ``(t + 1) % segment_len``."""
    positions = (torch.arange(1, nll.size(1) + 1) % segment_len).expand_as(nll)
    return [float(nll[positions == k].mean()) for k in range(segment_len)]


def run(seed: int, quick: bool = False) -> dict[str, Any]:
    s = QUICK if quick else SETTINGS
    device = get_device()
    tokenizer_docs, _, _ = chapter_text(s["text"])
    tokenizer = train_tokenizer(tokenizer_docs, **s["tokenizer"])
    train_docs, held_docs = split_corpus(**s["text"]["documents"])
    p = s["pretrain"]
    seg = p["segment_len"]
    e = s["evaluation"]
    held = stream_rows(token_stream(held_docs, tokenizer), seg * e["segments_per_row"])
    models, out = pretrain_arms(
        pretrain_transfo_xl,
        train_docs,
        s["arms"],
        p,
        config_of=lambda arm: transfo_xl_config(
            s["model"]["size"], vocab_size=tokenizer.get_vocab_size(), mem_len=arm["mem_len"]
        ),
        curves_of=lambda arm: {"curve_loss": "lm_loss"},
        curve_points=s["curve_points"],
        tokenizer=tokenizer,
        heldout=held_docs,
        device=device,
        seed=seed,
    )
    x = held.to(device)
    runs = {
        "memory_with_memory": segmented_nll(models["memory"], x, seg, s["arms"]["memory"]["mem_len"]).cpu(),
        "memory_without_memory": segmented_nll(models["memory"], x, seg, 0).cpu(),
        "no_memory": segmented_nll(models["no_memory"], x, seg, 0).cpu(),
    }
    out["by_position"] = {k: _by_position(v, seg) for k, v in runs.items()}
    out["heldout"] = {k: float(v.mean()) for k, v in runs.items()}
    out["heldout"]["n_tokens"] = int(runs["no_memory"].numel())
    out["by_memory"] = {
        "memories": list(e["memories"]),
        "loss": [float(segmented_nll(models["memory"], x, seg, m).mean()) for m in e["memories"]],
    }
    return out


STUDY = register_study(
    Study(
        name="06_transfo_xl",
        description="Transformer-XL with and without memory on one network: loss by position in the segment "
        "and against the memory's length",
        settings={"full": SETTINGS, "quick": QUICK},
        run=run,
        extra_sources=(chapter_text, token_stream, stream_rows, segment_token_nll, segmented_nll),
    )
)
