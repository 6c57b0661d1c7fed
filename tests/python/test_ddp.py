"""DistributedDataParallel over ORTModule, next to DistributedDataParallel over the plain
module: gradients reach param.grad through autograd's AccumulateGrad, so DDP's hooks fire and
all-reduce them across ranks, and they do so while the engine's backward is still running.

Two gloo processes are started once; each runs every scenario and reports back, and the tests
check the reports.
"""

from __future__ import annotations

import copy
import os
import socket
from typing import Any

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel as DDP

from ortmodule import _C, ORTModule

WORLD = 2
STEPS = 20
RTOL, ATOL = 1e-5, 1e-6


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))


def _deep_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 16), nn.Tanh(),
                         nn.Linear(16, 16), nn.Tanh(), nn.Linear(16, 2))


def _batch(rank: int, step: int) -> torch.Tensor:
    return torch.randn(3, 4, generator=torch.Generator().manual_seed(100 * step + rank))


def _loss(model: nn.Module, rank: int, step: int) -> torch.Tensor:
    return model(_batch(rank, step)).square().sum()


def _pair(make: Any = _model, **ddp_args: Any) -> dict[str, DDP]:
    plain = make()
    return {"eager": DDP(copy.deepcopy(plain), **ddp_args), "ort": DDP(ORTModule(plain), **ddp_args)}


def _state(model: DDP) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.module.state_dict().items()}


def _grads(model: DDP) -> dict[str, torch.Tensor]:
    return {k: p.grad.clone() for k, p in model.module.named_parameters()}


def _train_steps(rank: int) -> dict[str, Any]:
    states = {}
    for kind, model in _pair().items():
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for step in range(STEPS):
            optimizer.zero_grad()
            _loss(model, rank, step).backward()
            optimizer.step()
        states[kind] = _state(model)
    return states


def _no_sync(rank: int) -> dict[str, Any]:
    report = {}
    for kind, model in _pair().items():
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        optimizer.zero_grad()
        with model.no_sync():
            _loss(model, rank, 0).backward()
        local = _grads(model)  # this rank's own gradients, not reduced
        _loss(model, rank, 1).backward()
        reduced = _grads(model)
        optimizer.step()
        report[kind] = {"local": local, "reduced": reduced, "state": _state(model)}
    return report


def _overlap(rank: int) -> list[list[tuple[str, int]]]:
    """Per step, the events of backward in order: ("allreduce", engine ops run so far) from a
    DDP comm hook, ("grad", engine ops run so far) when a parameter's gradient is accumulated.
    A tiny bucket cap gives several buckets."""
    model = DDP(ORTModule(_deep_model()), bucket_cap_mb=1e-4)
    events: list[tuple[str, int]] = []

    def ops_run() -> int:
        return sum(calls for calls, _ in _C.profile_snapshot(False).values())

    # Unannotated: DDP checks the annotations' types, which postponed evaluation makes strings.
    def logging_allreduce(state, bucket):
        events.append(("allreduce", ops_run()))
        return default_hooks.allreduce_hook(state, bucket)

    model.register_comm_hook(None, logging_allreduce)
    for p in model.parameters():
        p.register_post_accumulate_grad_hook(lambda p: events.append(("grad", ops_run())))
    steps = []
    _C.set_profiling(True)
    try:
        for step in range(3):  # DDP rebuilds its buckets after the first step
            model.zero_grad()
            loss = _loss(model, rank, step)
            _C.profile_snapshot(True)  # count only backward's ops
            events.clear()
            loss.backward()
            steps.append([*events, ("end", ops_run())])
    finally:
        _C.set_profiling(False)
    return steps


def _worker(rank: int, port: int, results: dict) -> None:
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    try:
        results[rank] = {"steps": _train_steps(rank), "no_sync": _no_sync(rank),
                         "overlap": _overlap(rank)}
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def reports() -> dict[int, dict[str, Any]]:
    ctx = mp.get_context("spawn")
    with ctx.Manager() as manager:
        results = manager.dict()
        mp.start_processes(_worker, args=(_free_port(), results), nprocs=WORLD, join=True,
                           start_method="spawn")
        return dict(results)


def _assert_same(actual: dict, expected: dict, what: str) -> None:
    assert actual.keys() == expected.keys()
    for name, value in expected.items():
        torch.testing.assert_close(actual[name], value, rtol=RTOL, atol=ATOL,
                                   msg=lambda m, name=name: f"{what} {name}: {m}")


@pytest.mark.slow
def test_ddp_training_matches_ddp_of_plain_module(reports: dict) -> None:
    for rank in range(WORLD):
        states = reports[rank]["steps"]
        _assert_same(states["ort"], states["eager"], f"rank {rank}, after {STEPS} steps,")
    # Both ranks hold the same parameters: the gradients were reduced every step.
    _assert_same(reports[1]["steps"]["ort"], reports[0]["steps"]["ort"], "rank 1 vs rank 0,")


@pytest.mark.slow
def test_no_sync_accumulates_locally_then_reduces_like_eager(reports: dict) -> None:
    for rank in range(WORLD):
        report = reports[rank]["no_sync"]
        for key in ("local", "reduced", "state"):
            _assert_same(report["ort"][key], report["eager"][key], f"rank {rank}, {key}")
    # Inside no_sync each rank kept its own gradients.
    local0, local1 = (reports[r]["no_sync"]["ort"]["local"] for r in range(WORLD))
    assert any(not torch.allclose(local0[k], local1[k]) for k in local0)


@pytest.mark.slow
def test_all_reduce_starts_while_engine_backward_runs(reports: dict) -> None:
    for rank in range(WORLD):
        # The first step all-reduces one bucket at the end: DDP then rebuilds its buckets in
        # the order the gradients became ready.
        for step, events in enumerate(reports[rank]["overlap"][1:], start=1):
            kinds = [kind for kind, _ in events]
            where = f"rank {rank}, step {step}: {events}"
            assert kinds.count("allreduce") >= 3, f"expected several buckets; {where}"
            assert kinds.count("grad") == 2 * 4, where
            assert kinds[-1] == "end"
            total_ops = events[-1][1]
            first_allreduce = kinds.index("allreduce")
            last_grad = len(kinds) - 1 - kinds[::-1].index("grad")
            # The first bucket is all-reduced before the last gradient arrives ...
            assert first_allreduce < last_grad, where
            # ... and before the engine has run all of backward's ops.
            assert events[first_allreduce][1] < total_ops, where
            # Gradients arrive as backward produces them, not all at its end.
            grads_before_end = [ops for kind, ops in events if kind == "grad" and ops < total_ops]
            assert len(grads_before_end) >= 6, where
