"""Time training steps of the six transformer-era model families with ORTModule, eager
PyTorch and torch.compile, side by side in one process.

Models are the tiny random configurations of tests/python/hf_zoo.py, widened by --width,
with dropout off. A step is forward (the model computes its loss), backward, an AdamW step and
zero_grad on a fixed batch. For ORTModule the first call is split into its stages: trace
(torch.export), ONNX lowering and engine build. After --warmup steps the median of --steps
steps is reported with its ratio to eager.

    python benchmarks/bench_transformers.py --families bert gpt2 --steps 20
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from ortmodule import ORTModule
from tests.python.hf_zoo import FAMILIES


def step_times(model: torch.nn.Module, batch: dict, steps: int, warmup: int
               ) -> tuple[float, list[float]]:
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    times = []
    for _ in range(warmup + steps + 1):
        start = time.perf_counter()
        model(**batch).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        times.append(time.perf_counter() - start)
    return times[0], times[1 + warmup:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--families", nargs="*", default=list(FAMILIES))
    parser.add_argument("--runners", nargs="*", default=["ortmodule", "eager", "compile"])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--length", type=int, default=32, help="sequence length")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--threads", type=int, default=0)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    import transformers

    transformers.logging.set_verbosity_error()
    print(f"batch {args.batch}, sequence length {args.length}, {torch.get_num_threads()} "
          f"threads, median of {args.steps} steps after {args.warmup} warm-up steps\n")
    print("| model | runner | median ms/step | vs eager | first call (s) | "
          "trace / lowering / build (s) |")
    print("|---|---|---:|---:|---:|---|")
    for name in args.families:
        family = FAMILIES[name]
        torch.manual_seed(0)
        base = family.build(0.0).train()
        length = args.length if family.has_sequence else (16 if name == "vit" else 32)
        batch = family.batch(args.batch, length, 0)
        medians: dict[str, float] = {}
        rows = []
        for runner in args.runners:
            model = copy.deepcopy(base)
            if runner == "ortmodule":
                model = ORTModule(model)
            elif runner == "compile":
                model = torch.compile(model)
            try:
                first, times = step_times(model, batch, args.steps, args.warmup)
            except Exception as e:  # noqa: BLE001 (a failure is reported in the table)
                rows.append(f"| {name} | {runner} | failed: {type(e).__name__}: "
                            f"{str(e).splitlines()[0][:120]} | | | |")
                continue
            medians[runner] = statistics.median(times) * 1e3
            stages = ""
            if runner == "ortmodule":
                entry = next(iter(model._cache.values()))[0]
                stages = " / ".join(f"{entry.seconds.get(k, 0.0):.2f}"
                                    for k in ("trace", "lowering", "build"))
            rows.append((name, runner, medians[runner], first, stages))
        for row in rows:
            if isinstance(row, str):
                print(row)
                continue
            name_, runner, median, first, stages = row
            ratio = medians["eager"] / median if "eager" in medians else float("nan")
            print(f"| {name_} | {runner} | {median:.2f} | {ratio:.2f}x | {first:.2f} | "
                  f"{stages} |")


if __name__ == "__main__":
    main()
