"""First-call time of ORTModule with the persistent export cache cold and warm.

Each round runs two fresh processes on one empty cache directory (ORTMODULE_CACHE_DIR): the
first captures the model and stores its graph (cold), the second loads it (warm). Each
process times its first training call (forward + backward, from the ORTModule's first call
until backward returns; the imports and the model's construction are not counted), reports
the stages of its graph (trace, lowering, or cache_load; build) and then times two more steps
(``step``: the faster; ``overhead``: the first call minus it, what the first call costs
beyond a step). Prints the median per column and the warm/cold ratios of the first-call
totals and of the overheads (on a loaded machine the step itself is slow and dominates the
totals).

  python benchmarks/bench_export_cache.py --models bert --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
STAGES = ("trace", "lowering", "cache_load", "build", "total", "step", "overhead")


def child(name: str) -> None:
    sys.path.insert(0, str(HERE))
    from _models import WORKLOADS, loss_of

    from ortmodule import ORTModule, export_cache

    workload = WORKLOADS[name]
    model = workload.build()
    batch = workload.batch()
    ort = ORTModule(model)
    start = time.perf_counter()
    loss_of(ort(**batch)).backward()
    total = time.perf_counter() - start
    steps = []
    for _ in range(2):
        start = time.perf_counter()
        loss_of(ort(**batch)).backward()
        steps.append(time.perf_counter() - start)
    entry = next(e for entries in ort._cache.values() for e in entries)
    stats = export_cache.stats()
    print(
        json.dumps(
            {
                **{k: entry.seconds.get(k, 0.0) for k in STAGES[:4]},
                "total": total,
                "step": min(steps),
                "overhead": total - min(steps),
                "hits": stats["hits"],
                "stores": stats["stores"],
            }
        )
    )


def run_child(name: str, cache: str) -> dict[str, float]:
    env = {**os.environ, "ORTMODULE_CACHE_DIR": cache}
    done = subprocess.run(
        [sys.executable, __file__, "--child", name],
        env=env,
        text=True,
        capture_output=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"the benchmark process for {name} failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=["bert"])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child)
        return
    print(f"| model | cache | {' | '.join(STAGES)} (s, median of {args.rounds}) |")
    print("|---|---|" + "---|" * len(STAGES))
    for name in args.models:
        runs: dict[str, list[dict[str, float]]] = {"cold": [], "warm": []}
        for _ in range(args.rounds):
            with tempfile.TemporaryDirectory() as cache:
                cold = run_child(name, cache)
                warm = run_child(name, cache)
            if (cold["stores"], warm["hits"]) != (1, 1):
                raise RuntimeError(
                    f"{name}: expected one store then one hit, got "
                    f"{cold['stores']} stores and {warm['hits']} hits"
                )
            runs["cold"].append(cold)
            runs["warm"].append(warm)
        medians = {
            kind: {k: statistics.median(r[k] for r in rs) for k in STAGES}
            for kind, rs in runs.items()
        }
        for kind in ("cold", "warm"):
            cells = " | ".join(f"{medians[kind][k]:.3f}" for k in STAGES)
            print(f"| {name} | {kind} | {cells} |")
        ratio = medians["warm"]["total"] / medians["cold"]["total"]
        overhead = medians["warm"]["overhead"] / medians["cold"]["overhead"]
        print(
            f"\n{name}: warm/cold first-call ratio {ratio:.2f}; of the first call's time "
            f"beyond a later step (overhead) {overhead:.2f}"
        )


if __name__ == "__main__":
    main()
