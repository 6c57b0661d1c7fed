"""FSDP2 (torch.distributed.fsdp.fully_shard) around ORTModule, next to the same FSDP2 over
the plain modules: fully_shard's pre-forward hook all-gathers each group's parameters and
swaps them in as the modules' parameters, the engine reads them there on every call, and
their gradients reach FSDP2's reduce-scatter through autograd.

Two gloo processes are started once; each runs every scenario and reports back, and the tests
check the reports.
"""

from __future__ import annotations

import copy
import os
import socket
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.multiprocessing as mp
from torch import nn
from torch.distributed.checkpoint.state_dict import get_model_state_dict, set_model_state_dict
from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor import DTensor
from torch.utils.checkpoint import checkpoint

from ortmodule import ORTModule

WORLD = 2
STEPS = 20
RTOL, ATOL = 1e-5, 1e-6
WIDTH = 16


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = nn.Linear(WIDTH, 2 * WIDTH)
        self.down = nn.Linear(2 * WIDTH, WIDTH)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(torch.tanh(self.up(x)))


class Checkpointed(nn.Module):
    """Runs its block under torch.utils.checkpoint (activation checkpointing)."""

    def __init__(self, block: nn.Module) -> None:
        super().__init__()
        self.block = block

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return checkpoint(self.block, x, use_reentrant=False)


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Linear(4, WIDTH)
        self.blocks = nn.ModuleList(Block() for _ in range(3))
        self.head = nn.Linear(WIDTH, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.embed(x)
        for block in self.blocks:
            h = block(h)
        return self.head(h)


def _net() -> Net:
    torch.manual_seed(0)
    return Net()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _batch(rank: int, step: int) -> torch.Tensor:
    return torch.randn(6, 4, generator=torch.Generator().manual_seed(100 * step + rank))


def _loss(model: nn.Module, rank: int, step: int) -> torch.Tensor:
    return model(_batch(rank, step)).float().square().mean()


# ---- compositions: each makes the sharded model from a plain Net, with or without ORTModule ----

Wrap = Callable[[nn.Module], nn.Module]


def _identity(m: nn.Module) -> nn.Module:
    return m


def per_block(wrap: Wrap, **shard: Any) -> Callable[[Net], nn.Module]:
    """fully_shard(wrap(block)) for every block, then fully_shard(root)."""

    def make(net: Net) -> nn.Module:
        for i, block in enumerate(net.blocks):
            net.blocks[i] = fully_shard(wrap(block), **shard)
        return fully_shard(net, **shard)

    return make


def at_root(wrap: Wrap, **shard: Any) -> Callable[[Net], nn.Module]:
    """fully_shard(wrap(net)): one group for every parameter."""
    return lambda net: fully_shard(wrap(net), **shard)


def checkpointed(wrap: Wrap, **shard: Any) -> Callable[[Net], nn.Module]:
    """Activation checkpointing around each fully_shard(wrap(block))."""

    def make(net: Net) -> nn.Module:
        for i, block in enumerate(net.blocks):
            net.blocks[i] = Checkpointed(fully_shard(wrap(block), **shard))
        return fully_shard(net, **shard)

    return make


BF16 = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)

SCENARIOS: dict[str, Callable[[Wrap], Callable[[Net], nn.Module]]] = {
    "per_block": lambda w: per_block(w),
    "per_block_keep_unsharded": lambda w: per_block(w, reshard_after_forward=False),
    "at_root": lambda w: at_root(w),
    "checkpointed": lambda w: checkpointed(w),
    "bf16_params": lambda w: per_block(w, mp_policy=BF16),
}


def _full(model: nn.Module) -> dict[str, torch.Tensor]:
    """Every parameter gathered across ranks."""
    return {
        k: (v.full_tensor() if isinstance(v, DTensor) else v).detach().clone()
        for k, v in model.state_dict().items()
    }


def _local_bytes(tensors: Any) -> int:
    total = 0
    for t in tensors:
        if isinstance(t, torch.Tensor):
            t = t.to_local() if isinstance(t, DTensor) else t
            total += t.numel() * t.element_size()
    return total


def _train(make: Callable[[Net], nn.Module], rank: int, accumulate: bool = False) -> dict:
    model = make(_net())
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
    losses = []
    for step in range(STEPS):
        optimizer.zero_grad()
        if accumulate:  # two micro-batches, gradients reduced after the second only
            model.set_requires_gradient_sync(False)
            _loss(model, rank, 1000 + step).backward()
            model.set_requires_gradient_sync(True)
        loss = _loss(model, rank, step)
        loss.backward()
        optimizer.step()
        losses.append(loss.detach().clone())
    params = list(model.parameters())
    memory = {
        "params": _local_bytes(params),
        "grads": _local_bytes(p.grad for p in params),
        "optimizer": _local_bytes(
            v
            for s in optimizer.state.values()
            for v in s.values()
            if isinstance(v, torch.Tensor) and v.dim() > 0
        ),
    }
    all_dtensors = all(isinstance(p, DTensor) for p in params)
    return {
        "losses": torch.stack(losses),
        "state": _full(model),
        "memory": memory,
        "sharded": all_dtensors,
    }


def _checkpoint_round_trip(rank: int, folder: str) -> dict:
    """Saves an ORTModule+FSDP2 model with torch.distributed.checkpoint after 3 steps, loads
    it into a fresh one, and trains both on: the same losses."""
    make = per_block(ORTModule)
    model = make(_net())
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
    for step in range(3):
        optimizer.zero_grad()
        _loss(model, rank, step).backward()
        optimizer.step()
    dcp.save({"model": get_model_state_dict(model)}, checkpoint_id=folder)
    torch.manual_seed(123)
    fresh = make(Net())  # other initial values than _net()
    state = {"model": get_model_state_dict(fresh)}
    dcp.load(state, checkpoint_id=folder)
    set_model_state_dict(fresh, state["model"])
    loaded = _full(fresh)
    with torch.no_grad():
        after = [_loss(m, rank, 50).detach() for m in (model, fresh)]
    return {"saved": _full(model), "loaded": loaded, "losses_after": after}


def _refusal(rank: int) -> str:
    net = _net()
    for block in net.blocks:
        fully_shard(block)
    model = ORTModule(net)
    try:
        _loss(model, rank, 0)
    except Exception as e:  # noqa: BLE001 - the report carries the message to the test
        return f"{type(e).__name__}: {e}"
    return "no error"


def _worker(rank: int, port: int, folder: str, results: dict) -> None:
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    try:
        report: dict[str, Any] = {}
        for name, scenario in SCENARIOS.items():
            report[name] = {
                kind: _train(scenario(wrap), rank)
                for kind, wrap in (("eager", _identity), ("ort", ORTModule))
            }
        report["accumulate"] = {
            kind: _train(per_block(wrap), rank, accumulate=True)
            for kind, wrap in (("eager", _identity), ("ort", ORTModule))
        }
        report["unsharded"] = _train(lambda net: copy.deepcopy(net), rank)["memory"]
        report["checkpoint"] = _checkpoint_round_trip(rank, folder)
        report["refusal"] = _refusal(rank)
        results[rank] = report
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def reports() -> dict[int, dict[str, Any]]:
    ctx = mp.get_context("spawn")
    with ctx.Manager() as manager, tempfile.TemporaryDirectory() as folder:
        results = manager.dict()
        mp.start_processes(
            _worker,
            args=(_free_port(), folder, results),
            nprocs=WORLD,
            join=True,
            start_method="spawn",
        )
        return dict(results)


def _assert_same(
    actual: dict, expected: dict, what: str, rtol: float = RTOL, atol: float = ATOL
) -> None:
    assert actual.keys() == expected.keys()
    for name, value in expected.items():
        torch.testing.assert_close(
            actual[name],
            value,
            rtol=rtol,
            atol=atol,
            msg=lambda m, name=name: f"{what} {name}: {m}",
        )


def _assert_training_matches(
    report: dict, what: str, rtol: float = RTOL, atol: float = ATOL
) -> None:
    torch.testing.assert_close(
        report["ort"]["losses"],
        report["eager"]["losses"],
        rtol=rtol,
        atol=atol,
        msg=lambda m: f"{what} losses: {m}",
    )
    _assert_same(
        report["ort"]["state"],
        report["eager"]["state"],
        f"{what}, after {STEPS} steps,",
        rtol,
        atol,
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    "scenario", ["per_block", "per_block_keep_unsharded", "at_root", "checkpointed"]
)
def test_fully_shard_of_ortmodule_matches_fully_shard_of_plain_module(
    reports: dict, scenario: str
) -> None:
    for rank in range(WORLD):
        _assert_training_matches(reports[rank][scenario], f"rank {rank}, {scenario}")
        assert reports[rank][scenario]["ort"]["sharded"]
    # Both ranks hold the same model: the gradients were reduced every step.
    _assert_same(
        reports[1][scenario]["ort"]["state"],
        reports[0][scenario]["ort"]["state"],
        "rank 1 vs rank 0,",
    )


@pytest.mark.slow
def test_bf16_parameters_float32_reduction_match_eager_in_bf16(reports: dict) -> None:
    # Both run their matmuls on bfloat16 parameters; the engine and eager round partial sums
    # differently, so the losses agree to bfloat16's precision (8 bits of mantissa). AdamW
    # moves an element by about lr per step whatever its gradient's size, so a gradient near
    # zero that rounds to the other sign moves a parameter by up to 2 * lr: the parameters
    # agree to lr (0.01).
    for rank in range(WORLD):
        report = reports[rank]["bf16_params"]
        torch.testing.assert_close(
            report["ort"]["losses"], report["eager"]["losses"], rtol=2e-2, atol=2e-3
        )
        _assert_same(
            report["ort"]["state"], report["eager"]["state"], f"rank {rank}, bf16", 2e-2, 1e-2
        )
        assert report["ort"]["state"]["blocks.0.up.weight"].dtype == torch.float32


@pytest.mark.slow
def test_gradient_accumulation_without_sync_matches_eager(reports: dict) -> None:
    for rank in range(WORLD):
        _assert_training_matches(reports[rank]["accumulate"], f"rank {rank}, accumulation")


@pytest.mark.slow
def test_each_rank_holds_about_half_of_parameters_gradients_and_optimizer_state(
    reports: dict,
) -> None:
    for rank in range(WORLD):
        unsharded = reports[rank]["unsharded"]
        for scenario in ("per_block", "at_root"):
            sharded = reports[rank][scenario]["ort"]["memory"]
            for part in ("params", "grads", "optimizer"):
                share = sharded[part] / unsharded[part]
                # Dim-0 shards of odd sizes round up on rank 0: close to, not exactly, 1/2.
                assert abs(share - 1 / WORLD) < 0.05, (rank, scenario, part, share)


@pytest.mark.slow
def test_distributed_checkpoint_round_trip(reports: dict) -> None:
    for rank in range(WORLD):
        report = reports[rank]["checkpoint"]
        _assert_same(report["loaded"], report["saved"], f"rank {rank}, loaded", 0, 0)
        torch.testing.assert_close(
            report["losses_after"][1], report["losses_after"][0], rtol=RTOL, atol=ATOL
        )


@pytest.mark.slow
def test_ortmodule_over_fully_sharded_blocks_is_refused_naming_the_supported_form(
    reports: dict,
) -> None:
    for rank in range(WORLD):
        message = reports[rank]["refusal"]
        assert "fully_shard(ORTModule(block))" in message, message


# ---- ORTTrainer with fsdp (FSDP2 through accelerate) ----


def _trainer_worker(rank: int, port: int, out: str, results: dict) -> None:
    from tests.python.test_trainer import _train

    os.environ.update(
        {
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
            "RANK": str(rank),
            "LOCAL_RANK": str(rank),
            "WORLD_SIZE": str(WORLD),
            "LOCAL_WORLD_SIZE": str(WORLD),
        }
    )
    torch.set_num_threads(1)
    fsdp = {
        "fsdp": True,
        "fsdp_config": {"version": 2, "transformer_layer_cls_to_wrap": ["GPT2Block"]},
        "max_steps": 1,
        "ddp_backend": "gloo",
    }
    # transformers.Trainer on a CPU-only machine: accelerate ignores fsdp and runs DDP.
    trainer, _ = _train("gpt2", Path(out) / "eager", ort=False, **fsdp)
    report: dict[str, Any] = {
        "eager_sharded": isinstance(trainer.model, FSDPModule),
        "eager_wrapper": type(trainer.model_wrapped).__name__,
    }
    try:
        _train("gpt2", Path(out) / "ort", ort=True, **fsdp)
        report["ort"] = "no error"
    except ValueError as e:
        report["ort"] = str(e)
    results[rank] = report
    dist.destroy_process_group()


@pytest.mark.slow
def test_ort_trainer_refuses_fsdp_that_accelerate_would_ignore_on_cpu(tmp_path: Path) -> None:
    ctx = mp.get_context("spawn")
    with ctx.Manager() as manager:
        results = manager.dict()
        mp.start_processes(
            _trainer_worker,
            args=(_free_port(), str(tmp_path), results),
            nprocs=WORLD,
            join=True,
            start_method="spawn",
        )
        reports = dict(results)
    for rank in range(WORLD):
        report = reports[rank]
        # What ORTTrainer refuses to do silently: train unsharded under DDP.
        assert not report["eager_sharded"] and report["eager_wrapper"] == "DistributedDataParallel"
        assert "fully_shard(ORTModule(block))" in report["ort"], report["ort"]
        assert "accelerate enables FSDP only on GPU-like devices" in report["ort"]


# ---- one process: what FSDP2's reshard does to a parameter between forward and backward ----


def _resharded_between_forward_and_backward(refill: bool) -> tuple[nn.Module, nn.Module]:
    """Block under ORTModule and eagerly; between forward and backward every parameter's
    storage is freed (resized to 0 bytes, as FSDP2's reshard does) and, with `refill`,
    allocated again (at another address) and filled with the same values (its all-gather)."""
    torch.manual_seed(0)
    eager = Block()
    ort = ORTModule(copy.deepcopy(eager))
    x = torch.randn(5, WIDTH)
    losses = [m(x).square().sum() for m in (eager, ort)]
    for m in (eager, ort):
        for p in m.parameters():
            saved = p.detach().clone()
            storage = p.untyped_storage()
            size = storage.nbytes()
            storage.resize_(0)
            if refill:
                torch.randn(1 << 16)  # the allocator may hand out the old block to another
                storage.resize_(size)
                with torch.no_grad(), torch.autograd._unsafe_preserve_version_counter(p):
                    p.copy_(saved)
    if refill:
        for loss in losses:
            loss.backward()
    else:
        losses[1].backward()
    return eager, ort


def test_backward_reads_parameters_gathered_again_at_a_new_address() -> None:
    eager, ort = _resharded_between_forward_and_backward(refill=True)
    for (name, p), q in zip(eager.named_parameters(), ort.parameters(), strict=True):
        torch.testing.assert_close(q.grad, p.grad, rtol=RTOL, atol=ATOL, msg=name)


def test_backward_refuses_a_parameter_freed_since_forward() -> None:
    with pytest.raises(RuntimeError, match="memory freed since the forward call"):
        _resharded_between_forward_and_backward(refill=False)
