"""What the fused language-model head and loss wins (csrc/passes/linear_cross_entropy_fusion.h):
the head of GPT-2-124M alone, `F.cross_entropy(h @ wte.T, labels)` over `rows` token rows of
width 768 and vocabulary 50257 (the tied weight and h are parameters, so backward computes
both gradients), timed for eager PyTorch, ORTModule with graph optimizations off (the unfused
MatMul and SoftmaxCrossEntropyLoss) and ORTModule (fused), round-robin one step each in turn
(machine noise hits every runner alike); plus each ORTModule variant's engine allocator peak
over one steady step and each runner's peak resident-set growth over that step (VmHWM,
reset before it). Before timing, every runner's loss is checked against eager's.

    python benchmarks/bench_linear_cross_entropy.py              # rows 2048 (seq 1024 x 2)
    python benchmarks/bench_linear_cross_entropy.py --rows 512 --vocab 8192 --steps 3
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

from ortmodule import _C, DebugOptions, ORTModule


class TiedHead(nn.Module):
    def __init__(self, rows: int, hidden: int, vocab: int) -> None:
        super().__init__()
        self.h = nn.Parameter(torch.randn(rows, hidden))
        self.wte = nn.Parameter(torch.randn(vocab, hidden) * 0.02)

    def forward(self, labels: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(self.h @ self.wte.T, labels)


def reset_hwm() -> None:
    Path("/proc/self/clear_refs").write_text("5")


def rss_mib(field: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def make_step(model: nn.Module, labels: torch.Tensor) -> Callable[[], float]:
    def step() -> float:
        loss = model(labels)
        loss.backward()
        model.zero_grad(set_to_none=True)
        return loss.item()

    return step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=2048)
    parser.add_argument("--hidden", type=int, default=768)
    parser.add_argument("--vocab", type=int, default=50257)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--threads", type=int, default=0, help="torch.set_num_threads")
    parser.add_argument("--note", default="", help="a line for the header (e.g. machine load)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    base = TiedHead(args.rows, args.hidden, args.vocab)
    labels = torch.randint(0, args.vocab, (args.rows,))
    runners = {
        "eager": copy.deepcopy(base),
        "ortmodule unfused": ORTModule(
            copy.deepcopy(base), debug_options=DebugOptions(graph_optimizations=False)
        ),
        "ortmodule fused": ORTModule(copy.deepcopy(base)),
    }
    steps = {name: make_step(model, labels) for name, model in runners.items()}
    want = steps["eager"]()
    memory: dict[str, tuple[float, float | None]] = {}
    for name, step in steps.items():
        got = step() if name != "eager" else want  # the first call builds the graph
        assert abs(got - want) <= 1e-4 * abs(want), (name, got, want)
        before = rss_mib("VmRSS")
        reset_hwm()
        if name != "eager":
            _C.allocator_reset_peak()
        step()
        engine = _C.allocator_stats()["peak_allocated_bytes"] / 2**20 if name != "eager" else None
        memory[name] = (rss_mib("VmHWM") - before, engine)
    times: dict[str, list[float]] = {name: [] for name in steps}
    for i in range(args.steps):
        order = list(steps)[i % len(steps) :] + list(steps)[: i % len(steps)]
        for name in order:
            start = time.perf_counter()
            steps[name]()
            times[name].append(time.perf_counter() - start)
    logits_mib = args.rows * args.vocab * 4 / 2**20
    print(
        f"head + loss: {args.rows} rows x {args.hidden} -> vocab {args.vocab} (float32 logits "
        f"{logits_mib:.0f} MiB), {torch.get_num_threads()} threads, median of {args.steps} "
        f"steps. {args.note}"
    )
    print("| runner | ms/step | vs eager | peak RSS growth MiB | engine peak MiB |")
    print("|---|---:|---:|---:|---:|")
    eager = statistics.median(times["eager"])
    for name in steps:
        median = statistics.median(times[name])
        rss, engine = memory[name]
        print(
            f"| {name} | {median * 1e3:.0f} | {eager / median:.2f}x | {rss:.0f} | {engine:.0f} |"
            if engine is not None
            else f"| {name} | {median * 1e3:.0f} | {eager / median:.2f}x | {rss:.0f} | - |"
        )


if __name__ == "__main__":
    main()
