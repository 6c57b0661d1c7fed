"""First-call latency of ORTModule per exporter: the trace (torch.export), the ONNX
lowering, the engine's build and the first training step (forward + backward), on the
workloads of benchmarks/_models.py.

The exporters alternate within one process, round after round, so both see the same load
and the same warm caches (the very first export of a process also pays for imports, so a
warm-up call runs first and is not counted). Prints the median of each stage per exporter,
the median time of the steps after the first ("next": both lowerings should run equally
fast) and the ratio of the first-call totals.

  python benchmarks/bench_first_call.py --models bert gpt2 mlp --exporters fx dynamo --rounds 3
  python benchmarks/bench_first_call.py --models bert gpt2 --autocast bf16
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import torch
from _models import WORKLOADS, loss_of

from ortmodule import DebugOptions, ORTModule

STAGES = ("trace", "lowering", "build", "step", "total", "next")


AUTOCAST = {"bf16": torch.bfloat16, "fp16": torch.float16}


def _region(autocast: str | None) -> contextlib.AbstractContextManager:
    if autocast is None:
        return contextlib.nullcontext()
    return torch.autocast("cpu", dtype=AUTOCAST[autocast])


def first_call(name: str, exporter: str, steady: int = 0,
               autocast: str | None = None) -> dict[str, float]:
    workload = WORKLOADS[name]
    model = workload.build()
    batch = workload.batch()
    ort = ORTModule(model, DebugOptions(exporter=exporter))
    start = time.perf_counter()
    with _region(autocast):
        out = ort(**batch)
    loss_of(out).backward()
    total = time.perf_counter() - start
    entry = next(e for entries in ort._cache.values() for e in entries)
    seconds = {k: entry.seconds.get(k, 0.0) for k in ("trace", "lowering", "build")}
    seconds["step"] = total - sum(seconds.values())
    seconds["total"] = total
    # Later steps on the same graph: the lowerings must not differ in step time.
    later = []
    for _ in range(steady):
        start = time.perf_counter()
        with _region(autocast):
            out = ort(**batch)
        loss_of(out).backward()
        later.append(time.perf_counter() - start)
    seconds["next"] = statistics.median(later) if later else float("nan")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=["bert", "gpt2", "mlp"],
                        choices=sorted(WORKLOADS))
    parser.add_argument("--exporters", nargs="+", default=["fx", "dynamo"])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steady", type=int, default=3,
                        help="later steps timed per first call (median shown as 'next')")
    parser.add_argument("--autocast", choices=sorted(AUTOCAST), default=None,
                        help="every call under torch.autocast('cpu') with this dtype")
    args = parser.parse_args()
    torch.manual_seed(0)
    for exporter in args.exporters:  # warm-up: imports and first-use costs of each path
        first_call("mlp", exporter, autocast=args.autocast)
    load = os.getloadavg()[0]
    print(f"# {os.cpu_count()} CPUs, load average {load:.1f} at start, "
          f"torch {torch.__version__}, {args.rounds} rounds, autocast {args.autocast}")
    results: dict[tuple[str, str], list[dict[str, float]]] = {}
    for r in range(args.rounds):
        for name in args.models:
            order = args.exporters if r % 2 == 0 else list(reversed(args.exporters))
            for exporter in order:
                results.setdefault((name, exporter), []).append(
                    first_call(name, exporter, args.steady, args.autocast))
    print(f"{'model':8} {'exporter':9} " + " ".join(f"{s:>9}" for s in STAGES))
    for name in args.models:
        totals = {}
        for exporter in args.exporters:
            runs = results[(name, exporter)]
            medians = {s: statistics.median(r[s] for r in runs) for s in STAGES}
            totals[exporter] = medians["total"]
            print(f"{name:8} {exporter:9} " + " ".join(f"{medians[s]:9.2f}" for s in STAGES))
        if len(args.exporters) == 2:
            a, b = args.exporters
            print(f"{name:8} total {a}/{b} = {totals[a] / totals[b]:.2f}")
    print(f"# load average {os.getloadavg()[0]:.1f} at end")


if __name__ == "__main__":
    main()
