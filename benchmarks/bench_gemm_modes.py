"""CPU GEMM modes side by side: one ORTModule per ORTMODULE_CPU_GEMM mode (and eager), one process.

Each round trains every runner one step (forward with loss, backward, torch's fused AdamW,
zero_grad) in a rotating order, switching the mode (`_C.set_cpu_gemm`) before each ORTModule
step: the runner that follows eager pays for what eager's step evicted from the caches, so a
fixed order would favour some mode. Reported: the median step of each runner after the warm-up
rounds and its speed relative to eager. The modes pick what runs the float32 products and
whether the convolutions drive the packed micro-kernel (docs/api.md, ORTMODULE_CPU_GEMM).

    python benchmarks/bench_gemm_modes.py --model cnn
    python benchmarks/bench_gemm_modes.py --model resnet --steps 15 --modes blas auto
    ORTMODULE_CPU_ISA=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 python benchmarks/bench_gemm_modes.py
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _models import WORKLOADS, loss_of

from ortmodule import _C, ORTModule


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="cnn", choices=sorted(WORKLOADS))
    parser.add_argument("--modes", nargs="+", default=["blas", "auto", "packed"],
                        choices=["auto", "blas", "packed"])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    workload = WORKLOADS[args.model]
    batch = workload.batch()
    runners: dict[str, tuple[torch.nn.Module, torch.optim.Optimizer, str | None]] = {}
    eager = workload.build()
    runners["eager"] = (eager, torch.optim.AdamW(eager.parameters(), lr=1e-4, fused=True), None)
    for mode in args.modes:
        model = ORTModule(workload.build())
        runners[mode] = (model, torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True), mode)
    times: dict[str, list[float]] = {name: [] for name in runners}
    names = list(runners)
    for step in range(args.warmup + args.steps):
        shift = step % len(names)
        for name in names[shift:] + names[:shift]:
            model, optimizer, mode = runners[name]
            if mode is not None:
                _C.set_cpu_gemm(mode)
            start = time.perf_counter()
            loss_of(model(**batch)).backward()
            optimizer.step()
            optimizer.zero_grad()
            if step >= args.warmup:
                times[name].append(time.perf_counter() - start)
    _C.set_cpu_gemm("auto")
    print(f"{workload.description}; {args.threads} threads, engine ISA {_C.cpu_isa()}, "
          f"auto: {_C.cpu_gemm_reason()}; median of {args.steps} steps")
    eager_ms = statistics.median(times["eager"]) * 1e3
    print("| runner | ms/step | vs eager |")
    print("|---|---:|---:|")
    for name, samples in times.items():
        ms = statistics.median(samples) * 1e3
        print(f"| {name} | {ms:.2f} | {eager_ms / ms:.2f}x |")


if __name__ == "__main__":
    main()
