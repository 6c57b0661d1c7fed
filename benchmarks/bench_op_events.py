"""Cost of the torch.profiler op events while no profiler runs.

Every engine op opens an ``at::RecordFunction`` when torch.profiler listens; while none does,
the op costs the hook's ``at::hasCallbacks()`` check. This times training steps with the
hooks installed (the default) and removed (``_C.set_op_events(False)``), alternating blocks
of steps (one step each by default, so that a loaded machine's drift hits both alike), and
reports the median step of each and the difference per executed op, of the medians and of
the 10th percentiles. The tiny
model (Linear 16-16-4, batch 8) has negligible kernels, so the step is all per-op overhead;
the mlp (Linear 784-512-512-10, batch 64) is a GEMM-bound step.

    python benchmarks/bench_op_events.py                 # both models
    python benchmarks/bench_op_events.py --steps 4000 --models tiny
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout
import ortmodule
from ortmodule import _C, ORTModule

MODELS = {"tiny": (16, 16, 4, 8), "mlp": (784, 512, 10, 64)}


def build(name: str) -> tuple[ORTModule, torch.Tensor]:
    inp, hidden, out, batch = MODELS[name]
    torch.manual_seed(0)
    layers = (
        [
            nn.Linear(inp, hidden),
            nn.ReLU(),
            nn.Linear(hidden, hidden),
            nn.ReLU(),
            nn.Linear(hidden, out),
        ]
        if name == "mlp"
        else [nn.Linear(inp, hidden), nn.ReLU(), nn.Linear(hidden, out)]
    )
    return ORTModule(nn.Sequential(*layers)), torch.randn(batch, inp)


def ops_per_step(model: ORTModule, x: torch.Tensor) -> int:
    with ortmodule.profile() as report:
        model(x).sum().backward()
    return sum(s.calls for part in (report.forward_ops, report.backward_ops) for s in part.values())


def measure(name: str, steps: int, block: int) -> dict[str, float]:
    model, x = build(name)
    for _ in range(20):
        model(x).sum().backward()
    ops = ops_per_step(model, x)
    times: dict[bool, list[float]] = {True: [], False: []}
    for i in range(2 * steps // block):
        on = i % 2 == 0
        _C.set_op_events(on)
        for _ in range(block):
            start = time.perf_counter()
            model(x).sum().backward()
            times[on].append(time.perf_counter() - start)
    _C.set_op_events(True)
    on, off = statistics.median(times[True]), statistics.median(times[False])
    p10_on = statistics.quantiles(times[True], n=10)[0]
    p10_off = statistics.quantiles(times[False], n=10)[0]
    return {
        "ops": ops,
        "on_us": on * 1e6,
        "off_us": off * 1e6,
        "per_op_ns": (on - off) / ops * 1e9,
        "p10_per_op_ns": (p10_on - p10_off) / ops * 1e9,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--steps", type=int, default=2000, help="steps per setting")
    parser.add_argument("--block", type=int, default=1, help="steps per alternation")
    args = parser.parse_args()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    print(
        f"{'model':6s} {'ops/step':>8s} {'hooks on (us)':>14s} {'hooks off (us)':>15s} "
        f"{'diff/op (ns)':>13s} {'p10 diff/op (ns)':>17s}"
    )
    for name in args.models:
        r = measure(name, args.steps, args.block)
        print(
            f"{name:6s} {r['ops']:8d} {r['on_us']:14.1f} {r['off_us']:15.1f} {r['per_op_ns']:13.1f} {r['p10_per_op_ns']:17.1f}"
        )


if __name__ == "__main__":
    main()
