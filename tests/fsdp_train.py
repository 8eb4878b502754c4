"""Worker for tests/test_distributed.py: FSDP2 (``fully_shard``) on the loss-module wrapper
the training loop gives DDP (``torchrun --nproc_per_node N tests/fsdp_train.py OUT``).

Each encoder layer is sharded, then the wrapper itself (the rest: embeddings, head): every
process holds 1/N of the parameters, gradients and AdamW moments, and gathers a layer's
weights just before using it. With one process the same script trains without sharding,
the reference. The batches are those of tests/ddp_train.py (every token a target, dropout
off). Rank 0 writes the loss curve, the full parameters and the share of them it held.
"""

from __future__ import annotations

import os
import sys

import torch

from course_lib.models.bert import BertConfig, BertForMaskedLM
from course_lib.recipes.common import init_distributed
from course_lib.train_parallel import LossModule, shard_batch

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
total = sum(p.numel() for p in model.parameters())


def loss_fn(m, batch):
    return m(input_ids=batch["input_ids"], labels=batch["labels"]).loss


wrapper = LossModule(model, model, loss_fn)
if world > 1:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh("cpu", (world,))
    for layer in model.bert.encoder.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(wrapper, mesh=mesh)
held = sum(p.to_local().numel() if hasattr(p, "to_local") else p.numel() for p in wrapper.parameters())
optimizer = torch.optim.AdamW(wrapper.parameters(), lr=3e-3, weight_decay=0.0)


def batch_at(step: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(1000 + step)
    ids = torch.randint(5, 50, (8, 12), generator=g)
    return {"input_ids": ids, "labels": ids.roll(1, dims=1)}


losses = []
for step in range(6):
    loss = wrapper(shard_batch(batch_at(step), rank, world))
    loss.backward()  # FSDP2 reduce-scatters the gradients (their mean over processes)
    optimizer.step()
    optimizer.zero_grad()
    record = loss.detach().clone()
    if world > 1:
        torch.distributed.all_reduce(record)
        record /= world
    losses.append(record.item())
full = {
    k: (v.full_tensor() if hasattr(v, "full_tensor") else v).clone() for k, v in model.state_dict().items()
}
if rank == 0:
    torch.save(
        {"loss": losses, "params": full, "held": held / total, "world": world},
        os.path.join(sys.argv[1], "fsdp.pt"),
    )
if world > 1:
    torch.distributed.destroy_process_group()
