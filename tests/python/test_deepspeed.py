"""DeepSpeed ZeRO over ORTModule on the CPU (gloo), next to the same DeepSpeed run over the
plain module: `deepspeed.initialize(model=ORTModule(model), ...)`. Stages 1 and 2 partition
optimizer state (and gradients) and leave every parameter whole on every rank, so the engine
reads them as it does without DeepSpeed; their gradients reach DeepSpeed's reduction through
autograd. Stage 3 partitions the parameters themselves and gathers them in hooks around each
submodule, which the engine never calls: refused.

Two gloo processes are started once; each runs every scenario and reports back.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.multiprocessing as mp
from torch import nn

from ortmodule import ORTModule

WORLD = 2
STEPS = 20
RTOL, ATOL = 1e-5, 1e-6


def _net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Linear(4, 32), nn.Tanh(), nn.Linear(32, 32), nn.Tanh(), nn.Linear(32, 2)
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _batch(rank: int, step: int) -> torch.Tensor:
    return torch.randn(6, 4, generator=torch.Generator().manual_seed(100 * step + rank))


def _config(stage: int) -> dict[str, Any]:
    return {
        "train_micro_batch_size_per_gpu": 6,
        "gradient_accumulation_steps": 1,
        "zero_optimization": {"stage": stage},
        # A torch.optim.AdamW passed in: DeepSpeed's own Adam is a compiled op.
        "zero_allow_untested_optimizer": True,
        "steps_per_print": 10**9,
        "wall_clock_breakdown": False,
    }


def _train(stage: int, wrap: bool, rank: int) -> dict[str, Any]:
    import deepspeed

    model = _net()
    if wrap:
        model = ORTModule(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
    engine, optimizer, _, _ = deepspeed.initialize(
        model=model, optimizer=optimizer, config=_config(stage)
    )
    losses = []
    for step in range(STEPS):
        loss = engine(_batch(rank, step)).square().mean()
        engine.backward(loss)
        engine.step()
        losses.append(loss.detach().clone())
    state = {k: v.detach().clone() for k, v in engine.module.state_dict().items()}
    inner = optimizer.optimizer  # the AdamW over this rank's flat fp32 partition
    optimizer_bytes = sum(
        v.numel() * v.element_size()
        for s in inner.state.values()
        for v in s.values()
        if isinstance(v, torch.Tensor) and v.dim() > 0
    )
    param_bytes = sum(p.numel() * p.element_size() for p in engine.module.parameters())
    return {
        "losses": torch.stack(losses),
        "state": state,
        "optimizer_bytes": optimizer_bytes,
        "param_bytes": param_bytes,
    }


def _zero3_refusal(rank: int) -> str:
    import deepspeed

    model = ORTModule(_net())
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
    try:
        engine, _, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, config=_config(3))
        engine(_batch(rank, 0))
    except Exception as e:  # noqa: BLE001 - the report carries the message to the test
        return f"{type(e).__name__}: {e}"
    return "no error"


def _worker(rank: int, port: int, results: dict) -> None:
    os.environ.update(
        {
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
            "RANK": str(rank),
            "LOCAL_RANK": str(rank),
            "WORLD_SIZE": str(WORLD),
            "LOCAL_WORLD_SIZE": str(WORLD),
            "DS_ACCELERATOR": "cpu",
        }
    )
    torch.set_num_threads(1)
    import deepspeed

    deepspeed.init_distributed(dist_backend="gloo")
    try:
        report: dict[str, Any] = {}
        for stage in (1, 2):
            report[stage] = {kind: _train(stage, kind == "ort", rank) for kind in ("eager", "ort")}
        report["zero3"] = _zero3_refusal(rank)
        results[rank] = report
    finally:
        torch.distributed.destroy_process_group()


@pytest.fixture(scope="module")
def reports() -> dict[int, dict[str, Any]]:
    ctx = mp.get_context("spawn")
    with ctx.Manager() as manager:
        results = manager.dict()
        mp.start_processes(
            _worker, args=(_free_port(), results), nprocs=WORLD, join=True, start_method="spawn"
        )
        return dict(results)


@pytest.mark.slow
@pytest.mark.parametrize("stage", [1, 2])
def test_zero_over_ortmodule_matches_zero_over_plain_module(reports: dict, stage: int) -> None:
    for rank in range(WORLD):
        report = reports[rank][stage]
        torch.testing.assert_close(
            report["ort"]["losses"], report["eager"]["losses"], rtol=RTOL, atol=ATOL
        )
        for name, value in report["eager"]["state"].items():
            torch.testing.assert_close(
                report["ort"]["state"][name],
                value,
                rtol=RTOL,
                atol=ATOL,
                msg=lambda m, name=name, rank=rank: f"rank {rank} {name}: {m}",
            )
    # Every rank holds the same whole parameters.
    for name, value in reports[0][stage]["ort"]["state"].items():
        torch.testing.assert_close(reports[1][stage]["ort"]["state"][name], value, rtol=0, atol=0)


@pytest.mark.slow
@pytest.mark.parametrize("stage", [1, 2])
def test_each_rank_keeps_half_of_the_optimizer_state(reports: dict, stage: int) -> None:
    for rank in range(WORLD):
        report = reports[rank][stage]["ort"]
        # AdamW keeps two float32 moments per parameter element; each rank holds its half.
        share = report["optimizer_bytes"] / (2 * report["param_bytes"])
        assert abs(share - 1 / WORLD) < 0.05, (rank, stage, share)


@pytest.mark.slow
def test_zero3_is_refused_naming_stages_1_and_2(reports: dict) -> None:
    for rank in range(WORLD):
        message = reports[rank]["zero3"]
        assert "ZeRO stage 3" in message and "stage 1 or 2" in message, message


# ---- ORTTrainer with deepspeed=<config dict> ----


def _trainer_worker(rank: int, port: int, out: str, results: dict) -> None:
    import transformers as tf

    from tests.python.test_trainer import _train

    os.environ.update(
        {
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
            "RANK": str(rank),
            "LOCAL_RANK": str(rank),
            "WORLD_SIZE": str(WORLD),
            "LOCAL_WORLD_SIZE": str(WORLD),
            "DS_ACCELERATOR": "cpu",
        }
    )
    torch.set_num_threads(1)
    config = {
        "zero_optimization": {"stage": 2},
        "train_micro_batch_size_per_gpu": "auto",
        "gradient_accumulation_steps": "auto",
        "zero_allow_untested_optimizer": True,
    }
    report: dict[str, Any] = {}
    for kind in ("eager", "ort"):
        trainer, losses = _train(
            "gpt2",
            Path(out) / kind,
            ort=kind == "ort",
            max_steps=4,
            deepspeed=config,
            ddp_backend="gloo",
        )
        wrapped = trainer.model_wrapped
        trainer.save_model(str(Path(out) / kind / "saved"))
        report[kind] = {
            "losses": losses,
            "wrapping": (type(wrapped).__name__, type(getattr(wrapped, "module", None)).__name__),
            "state": {k: v.clone() for k, v in trainer.model.state_dict().items()},
        }
    torch.distributed.barrier()  # rank 0 has written the saved model
    reloaded = tf.GPT2LMHeadModel.from_pretrained(str(Path(out) / "ort" / "saved"))
    report["reloaded"] = {k: v.clone() for k, v in reloaded.state_dict().items()}
    results[rank] = report
    torch.distributed.destroy_process_group()


@pytest.mark.slow
def test_ort_trainer_with_deepspeed_matches_trainer_and_saves_a_plain_checkpoint(
    tmp_path: Path,
) -> None:
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
        ort, eager = reports[rank]["ort"], reports[rank]["eager"]
        assert ort["wrapping"] == ("DeepSpeedEngine", "ORTModule")
        assert eager["wrapping"][0] == "DeepSpeedEngine"
        assert len(ort["losses"]) == 4 and ort["losses"][0] != ort["losses"][-1]
        torch.testing.assert_close(
            torch.tensor(ort["losses"]), torch.tensor(eager["losses"]), rtol=1e-3, atol=0.0
        )
        for name, value in eager["state"].items():
            torch.testing.assert_close(ort["state"][name], value, rtol=1e-3, atol=1e-5, msg=name)
        # What was saved is the trained model, and it loads in plain transformers.
        for name, value in reports[rank]["reloaded"].items():
            torch.testing.assert_close(value, ort["state"][name], rtol=0, atol=0, msg=name)


def test_zero3_in_trainer_arguments_is_refused(tmp_path: Path) -> None:
    from ortmodule.trainer import ORTTrainingArguments

    with pytest.raises(ValueError, match="ZeRO stage 3.*stage 1 or 2"):
        ORTTrainingArguments(
            output_dir=str(tmp_path),
            use_cpu=True,
            report_to=[],
            deepspeed={"zero_optimization": {"stage": 3}},
        )
