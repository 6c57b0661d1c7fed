"""DistributedDataParallel over ORTModule: gradients reach param.grad through autograd's
AccumulateGrad, so DDP's hooks fire and all-reduce them across ranks."""

from __future__ import annotations

import copy
import os
import socket

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

from ortmodule import ORTModule

WORLD = 2


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))


def _batch(rank: int) -> torch.Tensor:
    return torch.randn(3, 4, generator=torch.Generator().manual_seed(100 + rank))


def _worker(rank: int, port: int, results: dict) -> None:
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    try:
        model = nn.parallel.DistributedDataParallel(ORTModule(_model()))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(2):  # a second step fails if the first reduction never finished
            optimizer.zero_grad()
            model(_batch(rank)).square().sum().backward()
            optimizer.step()
        results[rank] = {k: v.clone() for k, v in model.module.state_dict().items()}
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
def test_ddp_all_reduces_engine_gradients() -> None:
    ctx = mp.get_context("spawn")
    with ctx.Manager() as manager:
        results = manager.dict()
        mp.start_processes(_worker, args=(_free_port(), results), nprocs=WORLD, join=True,
                           start_method="spawn")
        states = dict(results)
    # Eager reference: the average of both ranks' gradients, applied by SGD.
    eager = _model()
    optimizer = torch.optim.SGD(eager.parameters(), lr=0.1)
    for _ in range(2):
        optimizer.zero_grad()
        grads = []
        for rank in range(WORLD):
            replica = copy.deepcopy(eager)
            replica(_batch(rank)).square().sum().backward()
            grads.append([p.grad for p in replica.parameters()])
        for p, *gs in zip(eager.parameters(), *grads):
            p.grad = sum(gs) / WORLD
        optimizer.step()
    for rank in range(WORLD):
        for name, value in eager.state_dict().items():
            torch.testing.assert_close(states[rank][name], value, rtol=1e-5, atol=1e-6)
