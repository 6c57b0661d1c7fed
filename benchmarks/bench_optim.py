"""Optimizer step time: ortmodule.optim.FusedAdamW / FusedSGD vs torch.optim on the same parameters.

Parameter sets: a BERT-small encoder (transformers BertModel, hidden 256, 4 layers, 4 heads,
intermediate 1024) and an MLP 784-512-512-10. Each runner owns a copy of the parameters with
the same fixed random gradients; the runners are timed alternately, step by step, in this one
process, and the median of --steps steps (after --warmup) is reported. The last column checks
that the fused optimizer's parameters equal torch foreach's after all steps (bitwise: 0).
"IEEE sqrt" is FusedAdamW(match_torch_sqrt=False), equal to torch fused=True instead.

    python benchmarks/bench_optim.py [--steps 30] [--warmup 3] [--threads 2]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout
from ortmodule.optim import FusedAdamW, FusedSGD

OptimizerFactory = Callable[[list[torch.Tensor]], torch.optim.Optimizer]


def bert_small() -> nn.Module:
    from transformers import BertConfig, BertModel

    config = BertConfig(hidden_size=256, num_hidden_layers=4, num_attention_heads=4,
                        intermediate_size=1024)  # fmt: skip
    return BertModel(config)


def mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                         nn.Linear(512, 10))  # fmt: skip


ADAMW = {"lr": 1e-3, "weight_decay": 1e-2}
SGD = {"lr": 1e-2, "momentum": 0.9, "weight_decay": 1e-4}

RUNNERS: dict[str, dict[str, OptimizerFactory]] = {
    "AdamW": {
        "ortmodule FusedAdamW": lambda p: FusedAdamW(p, **ADAMW),
        "ortmodule FusedAdamW IEEE sqrt": lambda p: FusedAdamW(p, match_torch_sqrt=False, **ADAMW),
        "torch foreach=False": lambda p: torch.optim.AdamW(p, foreach=False, **ADAMW),
        "torch foreach=True": lambda p: torch.optim.AdamW(p, foreach=True, **ADAMW),
        "torch fused=True": lambda p: torch.optim.AdamW(p, fused=True, **ADAMW),
    },
    "SGD momentum": {
        "ortmodule FusedSGD": lambda p: FusedSGD(p, **SGD),
        "torch foreach=False": lambda p: torch.optim.SGD(p, foreach=False, **SGD),
        "torch foreach=True": lambda p: torch.optim.SGD(p, foreach=True, **SGD),
        "torch fused=True": lambda p: torch.optim.SGD(p, fused=True, **SGD),
    },
}
REFERENCE = "torch foreach=True"


def copies_with_grads(model: nn.Module, seed: int) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    params = []
    for p in model.parameters():
        q = p.detach().clone().requires_grad_()
        q.grad = torch.randn(q.shape, generator=gen) * 1e-2
        params.append(q)
    return params


def bench(model: nn.Module, runners: dict[str, OptimizerFactory], steps: int,
          warmup: int) -> dict[str, tuple[float, float]]:  # fmt: skip
    """Median step time (ms) per runner, and the max |difference| to the reference's params."""
    params = {name: copies_with_grads(model, seed=0) for name in runners}
    optimizers = {name: make(params[name]) for name, make in runners.items()}
    times: dict[str, list[float]] = {name: [] for name in runners}
    for step in range(warmup + steps):
        for name, opt in optimizers.items():
            t0 = time.perf_counter()
            opt.step()
            elapsed = time.perf_counter() - t0
            if step >= warmup:
                times[name].append(elapsed * 1e3)
    result = {}
    for name in runners:
        diff = max(
            (a - b).abs().max().item() if a.numel() else 0.0
            for a, b in zip(params[name], params[REFERENCE])
        )
        result[name] = (statistics.median(times[name]), diff)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    models = {"BERT-small": bert_small(), "MLP 784-512-512-10": mlp()}
    print(f"torch {torch.__version__}, {args.threads} threads, CPU capability "
          f"{torch.backends.cpu.get_cpu_capability()}, median of {args.steps} steps")  # fmt: skip
    print()
    print("| parameters | optimizer | runner | ms/step | speed-up vs foreach=True | max abs diff to foreach=True |")
    print("|---|---|---|---:|---:|---:|")
    for model_name, model in models.items():
        count = sum(p.numel() for p in model.parameters())
        tensors = len(list(model.parameters()))
        label = f"{model_name} ({count / 1e6:.2f}M in {tensors} tensors)"
        for optimizer_name, runners in RUNNERS.items():
            result = bench(model, runners, args.steps, args.warmup)
            reference_ms = result[REFERENCE][0]
            for name, (ms, diff) in result.items():
                print(f"| {label} | {optimizer_name} | {name} | {ms:.2f} | "
                      f"{reference_ms / ms:.2f}x | {diff:.3g} |")  # fmt: skip


if __name__ == "__main__":
    main()
