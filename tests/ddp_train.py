"""Worker for tests/test_distributed.py: trains a small BERT masked LM with ``fit`` on one or
more processes (``torchrun --nproc_per_node N tests/ddp_train.py OUT [--crash-at K] [--resume]``).

Each step's global batch of 8 rows comes from the step number alone; every token is a target,
so each process's slice carries the same weight and the mean over processes equals the mean
over the whole batch. Dropout is off: the processes' dropout masks could not match one
process's. Rank 0 writes the loss curve and the final parameters to OUT.
"""

from __future__ import annotations

import argparse
import os
import sys

import torch

from course_lib.models.bert import BertConfig, BertForMaskedLM
from course_lib.recipes.common import init_distributed
from course_lib.train import fit

ap = argparse.ArgumentParser()
ap.add_argument("out")
ap.add_argument("--crash-at", type=int, default=None)
ap.add_argument("--resume", action="store_true")
ap.add_argument("--steps", type=int, default=8)
ap.add_argument("--accumulate", type=int, default=1)
args = ap.parse_args()

# count the DistributedDataParallel wrappers fit builds (the loop must use torch's DDP)
wrapped = []
_DDP = torch.nn.parallel.DistributedDataParallel


class _CountingDDP(_DDP):
    def __init__(self, *a, **k):
        wrapped.append(type(a[0]).__name__)
        super().__init__(*a, **k)


torch.nn.parallel.DistributedDataParallel = _CountingDDP

torch.set_num_threads(1)
device, rank, world = init_distributed(torch.device("cpu"))
torch.manual_seed(0)
config = BertConfig(
    vocab_size=50,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=2,
    intermediate_size=64,
    max_position_embeddings=16,
    hidden_dropout_prob=0.0,
    attention_probs_dropout_prob=0.0,
)
model = BertForMaskedLM(config)


def batch_at(step: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(1000 + step)
    ids = torch.randint(5, 50, (8, 12), generator=g)
    return {"input_ids": ids, "labels": ids.roll(1, dims=1)}


def loss_fn(m, batch):
    calls["n"] += 1
    if args.crash_at is not None and calls["n"] > args.crash_at:
        os._exit(17)  # every process dies at the same step, as in a lost machine
    return m(input_ids=batch["input_ids"], labels=batch["labels"]).loss


calls = {"n": 0}
history = fit(
    model,
    batch_at,
    loss_fn,
    steps=args.steps,
    lr=3e-3,
    progress=False,
    checkpoint=os.path.join(args.out, "ckpt"),
    checkpoint_every=2,
    resume=args.resume,
    accumulate=args.accumulate,
)
if rank == 0:
    torch.save(
        {
            "loss": history.loss,
            "params": {k: v.clone() for k, v in model.state_dict().items()},
            "world": world,
            "ddp": wrapped,
        },
        os.path.join(args.out, "result.pt"),
    )
if world > 1:
    torch.distributed.destroy_process_group()
sys.exit(0)
