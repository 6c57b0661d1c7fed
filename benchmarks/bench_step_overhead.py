"""Step-overhead lab: where an ORTModule training step spends its time outside the kernels.

A step is ``out = model(x)`` then ``out.backward(grad)`` with a fixed output gradient, so
nothing but ORTModule runs (no loss, no optimizer). Models:

  mlp     Linear 784-512-512-10 with ReLU, batch 64 (GEMM-bound)
  tiny    Linear 16-16-4 with ReLU, batch 8 (kernels negligible: the step is all overhead)

Each step is split into

  forward   python    the call outside the engine run (nn.Module.__call__, ORTModule._run, the
                      StepCall check or the cache key, feeds, unflatten)
            boundary  the engine run around the executor (torch <-> engine tensors, autograd node)
            executor  executor.forward minus its kernels (shape rules, allocation, bookkeeping)
            kernels   the op profiler's kernel time
  backward  autograd  out.backward minus the engine's backward nodes (autograd engine, AccumulateGrad)
            boundary  the backward nodes minus executor (output grads in, gradients out)
            executor  executor backward stages minus their kernels
            kernels

The split needs the profiler (``_C.set_profiling``), which itself costs a little per op, so the
un-profiled step is timed too; the framework time reported is the un-profiled step minus the
kernel time. Profiled and un-profiled steps alternate; each part is summarized over --steps
steps by --stat (on a loaded machine a step is often preempted, and the median of a whole
step can be far above the sum of its parts' medians: use --stat p10 or min there).

    python benchmarks/bench_step_overhead.py                 # both models
    python benchmarks/bench_step_overhead.py --models tiny --steps 2000

--memory instead compares the peak memory of one BERT-small training step (4 layers, hidden
256, 4 heads, intermediate 1024, sequence 128, batch 8; forward with loss, backward) with eager
PyTorch: eager's is the peak of malloc's bytes in use (mallinfo2, sampled around every ATen op,
backward included) above the level before the step; ORTModule's the engine allocator's peak above
its level before the step, split into what forward leaves for backward (stash and outputs) and
the transient rest. Gradients count on both sides (they are allocated during the step).
"""

from __future__ import annotations

import argparse
import copy
import ctypes
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout
import ortmodule
from ortmodule import _C, ORTModule

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _models import WithCrossEntropy

MODELS = {
    "mlp": (lambda: nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                                  nn.Linear(512, 10)), (64, 784)),
    "tiny": (lambda: nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 4)), (8, 16)),
    # benchmarks/run.py's MLP: the loss inside the module, labels as a second input, backward
    # from the scalar loss
    "mlp-loss": (lambda: WithCrossEntropy(MODELS["mlp"][0]()), (64, 784)),
}


def _seconds(snapshot: dict[str, tuple[int, float]], key: str | None = None) -> float:
    if key is not None:
        return snapshot.get(key, (0, 0.0))[1]
    return sum(seconds for _, seconds in snapshot.values())


STATS = {
    "median": statistics.median,
    "min": min,
    "p10": lambda values: sorted(values)[len(values) // 10],
}


def measure(name: str, steps: int, warmup: int, stat: str) -> dict[str, float]:
    """µs per part of one step, summarized by `stat` (see the module docstring)."""
    torch.manual_seed(0)
    build, shape = MODELS[name]
    model = ORTModule(build())
    inputs: tuple[torch.Tensor, ...] = (torch.randn(*shape),)
    if name.endswith("-loss"):
        inputs += (torch.randint(0, 10, (shape[0],)),)
    first = model(*inputs)
    grad = torch.randn_like(first) if first.dim() else None
    has_phases = hasattr(_C, "phase_snapshot")
    parts: dict[str, list[float]] = {}

    def record(part: str, seconds: float) -> None:
        parts.setdefault(part, []).append(seconds * 1e6)

    def step(profiled: bool) -> None:
        _C.set_profiling(profiled)
        start = time.perf_counter()
        out = model(*inputs)
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
        if not has_phases:
            return
        forward_run = _seconds(forward_phases, "boundary.forward")
        record("forward python", middle - start - forward_run)
        forward_executor = _seconds(forward_phases, "executor.forward")
        backward_executor = _seconds(backward_phases, "executor.backward")
        backward_nodes = _seconds(backward_phases, "boundary.backward")
        record("forward boundary", forward_run - forward_executor)
        record("forward executor", forward_executor - _seconds(forward_ops))
        record("backward autograd", end - resume - backward_nodes)
        record("backward boundary", backward_nodes - backward_executor)
        record("backward executor", backward_executor - _seconds(backward_ops))

    for _ in range(warmup):
        step(False)
    _C.profile_snapshot(reset=True)
    if has_phases:
        _C.phase_snapshot(reset=True)
    for _ in range(steps):
        step(False)
        step(True)
    result = {part: STATS[stat](values) for part, values in parts.items()}
    result["framework"] = result["step"] - result["kernels"]
    return result


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]


def _malloc_in_use() -> Callable[[], int]:
    libc = ctypes.CDLL("libc.so.6")
    libc.mallinfo2.restype = _MallInfo2

    def in_use() -> int:
        info = libc.mallinfo2()
        return info.uordblks + info.hblkhd

    return in_use


class _PeakMalloc(TorchDispatchMode):
    """Samples malloc's bytes in use before and after every ATen op."""

    def __init__(self) -> None:
        super().__init__()
        self.in_use = _malloc_in_use()
        self.base = self.in_use()
        self.peak = self.base

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.peak = max(self.peak, self.in_use())
        out = func(*args, **(kwargs or {}))
        self.peak = max(self.peak, self.in_use())
        return out


def measure_memory() -> None:
    import transformers

    transformers.logging.set_verbosity_error()
    torch.manual_seed(0)
    config = transformers.BertConfig(
        vocab_size=1000, hidden_size=256, num_hidden_layers=4, num_attention_heads=4,
        intermediate_size=1024, max_position_embeddings=256, num_labels=3,
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, attn_implementation="eager")
    model = transformers.BertForSequenceClassification(config).train()
    ids = torch.randint(0, 1000, (8, 128))
    batch = {"input_ids": ids, "attention_mask": torch.ones(8, 128, dtype=torch.long),
             "labels": torch.randint(0, 3, (8,))}
    mib = 1 / (1 << 20)

    eager = copy.deepcopy(model)
    for _ in range(2):
        eager(**batch).loss.backward()
        eager.zero_grad(set_to_none=True)
    with _PeakMalloc() as peak:
        eager(**batch).loss.backward()
    eager_peak = (peak.peak - peak.base) * mib

    ort = ORTModule(copy.deepcopy(model))
    for _ in range(2):
        ort(**batch).loss.backward()
        ort.zero_grad(set_to_none=True)
    before = _C.allocator_stats()["allocated_bytes"]
    _C.allocator_reset_peak()
    loss = ort(**batch).loss
    after_forward = _C.allocator_stats()["allocated_bytes"]
    forward_peak = _C.allocator_stats()["peak_allocated_bytes"]
    loss.backward()
    stats = _C.allocator_stats()
    ort_peak = (stats["peak_allocated_bytes"] - before) * mib
    print("BERT-small training step, peak memory above the level before the step (MiB)")
    print(f"  eager (malloc in use)          {eager_peak:8.1f}")
    print(f"  ORTModule (engine allocator)   {ort_peak:8.1f}   {ort_peak / eager_peak:.2f}x eager")
    print(f"    kept by forward for backward {(after_forward - before) * mib:8.1f}")
    print(f"    peak during forward          {(forward_peak - before) * mib:8.1f}")
    print(f"    gradients after backward     {(stats['allocated_bytes'] - before) * mib:8.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--stat", default="median", choices=list(STATS))
    parser.add_argument("--memory", action="store_true", help="BERT-small peak memory instead")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.memory:
        measure_memory()
        return
    print(f"ortmodule from {ortmodule.__file__}, {torch.get_num_threads()} threads, "
          f"{args.stat} of {args.steps} steps (µs)")
    order = ["step", "forward", "backward", "kernels", "framework", "profiled step",
             "forward python", "forward boundary", "forward executor", "forward kernels",
             "backward autograd", "backward boundary", "backward executor", "backward kernels"]
    results = {name: measure(name, args.steps, args.warmup, args.stat) for name in args.models}
    print(f"{'part':34s}" + "".join(f"{name:>10s}" for name in args.models))
    for part in order:
        if all(part in results[name] for name in args.models):
            print(f"{part:34s}" + "".join(f"{results[name][part]:10.1f}" for name in args.models))


if __name__ == "__main__":
    main()
