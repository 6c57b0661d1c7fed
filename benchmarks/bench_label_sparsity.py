"""What label sparsity wins (DebugOptions.label_sparsity): eager PyTorch, torch.compile and
ORTModule with label sparsity off ("never") and on ("auto") on training steps whose loss
ignores most rows, timed side by side in one process (round-robin, one step each in turn, so
machine noise hits every runner alike), plus the engine allocator's peak of both ORTModule
variants.

Workloads (benchmarks/_models.py): bert-mlm (15% of the tokens labelled) and gpt2-sft (the
last quarter of each sequence labelled), each as the model itself (which also returns its
logits) and as `LossOnly` (the call returns the loss alone). The engine gathers the kept rows
before the head in both; where the model returns its logits it copies the head, which forward then runs
for every row too (its backward for every row is skipped: nobody differentiates the logits).
Before timing, every runner's first loss is checked against eager's.

    python benchmarks/bench_label_sparsity.py --steps 10
    python benchmarks/bench_label_sparsity.py --models gpt2-sft --no-compile
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time
from collections.abc import Callable

import torch
from _models import WORKLOADS, LossOnly, loss_of

from ortmodule import _C, DebugOptions, ORTModule


def make_step(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> Callable[[], float]:
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def step() -> float:
        loss = loss_of(model(**batch))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.item()

    return step


def variants(name: str) -> list[tuple[str, torch.nn.Module]]:
    """(label, model): the workload's LossOnly model and the Hugging Face model inside it."""
    loss_only = WORKLOADS[name].build()
    assert isinstance(loss_only, LossOnly)
    return [(f"{name} (loss alone)", loss_only), (f"{name} (loss and logits)", loss_only.model)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=["bert-mlm", "gpt2-sft"],
                        choices=["bert-mlm", "gpt2-sft"])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--no-compile", action="store_true", help="leave torch.compile out")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"{args.threads} threads; median of {args.steps} steps after {args.warmup} warm-up "
          f"rounds, round-robin over runners")
    print("| workload | runner | ms/step | vs eager | vs ORTModule never | engine peak MiB |")
    print("|---|---|---:|---:|---:|---:|")
    for name in args.models:
        batch = WORKLOADS[name].batch()
        density = (batch["labels"] != -100).float().mean().item()
        for label, model in variants(name):
            runners: dict[str, Callable[[], float]] = {"eager": make_step(copy.deepcopy(model),
                                                                          batch)}
            if not args.no_compile:
                runners["compile"] = make_step(torch.compile(copy.deepcopy(model)), batch)
            for mode in ("never", "auto"):
                ort = ORTModule(copy.deepcopy(model),
                                debug_options=DebugOptions(label_sparsity=mode))
                runners[f"ortmodule {mode}"] = make_step(ort, batch)
            first = {r: step() for r, step in runners.items()}
            for r, loss in first.items():
                if abs(loss - first["eager"]) > 1e-4 * max(1.0, abs(first["eager"])):
                    raise SystemExit(f"{label}: {r}'s first loss {loss} differs from eager's "
                                     f"{first['eager']}")
            times: dict[str, list[float]] = {r: [] for r in runners}
            peaks: dict[str, float] = {}
            order = list(runners)
            for round_ in range(args.warmup + args.steps):
                for r in order:
                    if r.startswith("ortmodule"):
                        _C.allocator_reset_peak()
                    start = time.perf_counter()
                    runners[r]()
                    elapsed = time.perf_counter() - start
                    if r.startswith("ortmodule"):
                        peak = _C.allocator_stats()["peak_allocated_bytes"] / 2**20
                        peaks[r] = max(peaks.get(r, 0.0), peak)
                    if round_ >= args.warmup:
                        times[r].append(elapsed)
                order = order[1:] + order[:1]
            median = {r: statistics.median(t) * 1e3 for r, t in times.items()}
            for r in runners:
                peak = f"{peaks[r]:.0f}" if r in peaks else "-"
                print(f"| {label}, {density:.0%} labelled | {r} | {median[r]:.1f} | "
                      f"{median['eager'] / median[r]:.2f}x | "
                      f"{median['ortmodule never'] / median[r]:.2f}x | {peak} |")


if __name__ == "__main__":
    main()
