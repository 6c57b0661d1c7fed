"""Step-overhead lab: where an ORTModule training step spends its time outside the kernels.

A step is ``out = model(x)`` then ``out.backward(grad)`` with a fixed output gradient, so
nothing but ORTModule runs (no loss, no optimizer). Models:

  mlp     Linear 784-512-512-10 with ReLU, batch 64 (GEMM-bound)
  tiny    Linear 16-16-4 with ReLU, batch 8 (kernels negligible: the step is all overhead)

Each step is split into

  forward   python    ORTModule._run up to and after _C.run (cache key, feeds, unflatten)
            boundary  _C.run around the executor (pybind, torch <-> engine tensors, autograd node)
            executor  executor.forward minus its kernels (shape rules, allocation, bookkeeping)
            kernels   the op profiler's kernel time
  backward  autograd  out.backward minus the engine's backward nodes (autograd engine, AccumulateGrad)
            boundary  the backward nodes minus executor (output grads in, gradients out)
            executor  executor backward stages minus their kernels
            kernels

The split needs the profiler (``_C.set_profiling``), which itself costs a little per op, so the
un-profiled step is timed too; the framework time reported is the un-profiled step minus the
kernel time. Profiled and un-profiled steps alternate, medians over --steps.

    python benchmarks/bench_step_overhead.py                 # both models
    python benchmarks/bench_step_overhead.py --models tiny --steps 2000
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import torch
from torch import nn

import ortmodule
import ortmodule.module as ortmodule_module
from ortmodule import _C, ORTModule

MODELS = {
    "mlp": (lambda: nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                                  nn.Linear(512, 10)), (64, 784)),
    "tiny": (lambda: nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 4)), (8, 16)),
}


class _TimedC:
    """Stands in for ``_C`` inside ortmodule.module and times ``_C.run``."""

    def __init__(self) -> None:
        self.run_seconds = 0.0

    def __getattr__(self, name: str) -> Any:
        return getattr(_C, name)

    def run(self, program: Any, inputs: list[torch.Tensor]) -> Any:
        start = time.perf_counter()
        outputs = _C.run(program, inputs)
        self.run_seconds += time.perf_counter() - start
        return outputs


def _seconds(snapshot: dict[str, tuple[int, float]], key: str | None = None) -> float:
    if key is not None:
        return snapshot.get(key, (0, 0.0))[1]
    return sum(seconds for _, seconds in snapshot.values())


def measure(name: str, steps: int, warmup: int) -> dict[str, float]:
    """Median µs per part of one step (see the module docstring)."""
    torch.manual_seed(0)
    build, shape = MODELS[name]
    model = ORTModule(build())
    x = torch.randn(*shape)
    grad = torch.randn(shape[0], model(x).shape[1])
    timed = _TimedC()
    ortmodule_module._C = timed  # type: ignore[assignment]
    has_phases = hasattr(_C, "phase_snapshot")
    parts: dict[str, list[float]] = {}

    def record(part: str, seconds: float) -> None:
        parts.setdefault(part, []).append(seconds * 1e6)

    def step(profiled: bool) -> None:
        _C.set_profiling(profiled)
        timed.run_seconds = 0.0
        start = time.perf_counter()
        out = model(x)
        middle = time.perf_counter()
        if profiled:  # split per direction, outside the timed parts
            forward_ops = _C.profile_snapshot(reset=True)
            forward_phases = _C.phase_snapshot(reset=True) if has_phases else {}
        resume = time.perf_counter()
        out.backward(grad)
        end = time.perf_counter()
        _C.set_profiling(False)
        for p in model.parameters():
            p.grad = None
        if not profiled:
            record("step", end - start)
            record("forward", middle - start)
            record("backward", end - middle)
            return
        backward_ops = _C.profile_snapshot(reset=True)
        backward_phases = _C.phase_snapshot(reset=True) if has_phases else {}
        record("profiled step", middle - start + end - resume)
        record("kernels", _seconds(forward_ops) + _seconds(backward_ops))
        record("forward kernels", _seconds(forward_ops))
        record("backward kernels", _seconds(backward_ops))
        record("forward python", middle - start - timed.run_seconds)
        if not has_phases:
            return
        forward_executor = _seconds(forward_phases, "executor.forward")
        backward_executor = _seconds(backward_phases, "executor.backward")
        backward_nodes = _seconds(backward_phases, "boundary.backward")
        record("forward boundary", timed.run_seconds - forward_executor)
        record("forward executor", forward_executor - _seconds(forward_ops))
        record("backward autograd", end - resume - backward_nodes)
        record("backward boundary", backward_nodes - backward_executor)
        record("backward executor", backward_executor - _seconds(backward_ops))

    try:
        for _ in range(warmup):
            step(False)
        _C.profile_snapshot(reset=True)
        if has_phases:
            _C.phase_snapshot(reset=True)
        for _ in range(steps):
            step(False)
            step(True)
    finally:
        ortmodule_module._C = _C  # type: ignore[assignment]
    result = {part: statistics.median(values) for part, values in parts.items()}
    result["framework"] = result["step"] - result["kernels"]
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"ortmodule from {ortmodule.__file__}, {torch.get_num_threads()} threads, "
          f"median of {args.steps} steps (µs)")
    order = ["step", "forward", "backward", "kernels", "framework", "profiled step",
             "forward python", "forward boundary", "forward executor", "forward kernels",
             "backward autograd", "backward boundary", "backward executor", "backward kernels"]
    results = {name: measure(name, args.steps, args.warmup) for name in args.models}
    print(f"{'part':34s}" + "".join(f"{name:>10s}" for name in args.models))
    for part in order:
        if all(part in results[name] for name in args.models):
            print(f"{part:34s}" + "".join(f"{results[name][part]:10.1f}" for name in args.models))


if __name__ == "__main__":
    main()
