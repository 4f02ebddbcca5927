"""Two processes on the gloo backend train a wrapped module under DistributedDataParallel.

Run as ``python _ddp_worker.py OUT.pt``: rank 0 writes the weights after the steps, and
the losses, to ``OUT.pt``. The batch is split between the two ranks; DDP averages the
gradients, so the result equals one process on the whole batch.
"""

from __future__ import annotations

import os
import sys
import warnings

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import graphpass.torch

STEPS = 4


def model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.GELU(), torch.nn.LayerNorm(16),
                               torch.nn.Linear(16, 3))


def batches() -> list[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(1)
    return [(torch.randn(8, 6, generator=generator), torch.randn(8, 3, generator=generator))
            for _ in range(STEPS)]


def _rank(rank: int, out: str, port: str) -> None:
    warnings.filterwarnings("ignore")
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    torch.set_num_threads(1)
    wrapped = torch.nn.parallel.DistributedDataParallel(graphpass.torch.Module(model()))
    optimizer = torch.optim.AdamW(wrapped.parameters(), lr=1e-2)
    losses = []
    for x, y in batches():
        half = slice(rank * 4, rank * 4 + 4)
        loss = ((wrapped(x[half]) - y[half]) ** 2).mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    if rank == 0:
        torch.save({"state": wrapped.module.state_dict(), "losses": losses}, out)
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(_rank, args=(sys.argv[1], sys.argv[2]), nprocs=2, join=True)
