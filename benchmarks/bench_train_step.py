"""Time one training step with ORTModule, eager PyTorch and torch.compile, side by side.

A step is forward, cross-entropy loss, backward, SGD step (lr 0.01, momentum 0.9) and zero_grad,
on one fixed random batch of 64. Models:

  mlp    Linear 784-512-512-10 with ReLU, input [64, 784]: GEMM-bound.
  cnn    the CNN of examples/train_digits_cnn.py (Conv-BN-ReLU-MaxPool x2, Dropout, Linear),
         16/32 channels, input [64, 1, 8, 8]: small kernels, so per-op overhead dominates.
  cnn28  the same architecture with 32/64 channels on [64, 1, 28, 28]: convolution-bound.

Each (model, runner) pair runs in its own subprocess, so peak memory and one-time costs
(export, graph build, compilation) are measured in isolation. The first step is timed on its
own; after the warm-up steps the median over --steps steps is reported. Peak RSS growth is the
process's peak resident set (VmHWM) at the end minus its resident set (VmRSS) just before the
first step, i.e. everything the runner allocates for export, compilation, planning and
activations. torch.compile uses the default backend and compiles the module; the optimizer step
stays eager in every runner.

    python benchmarks/bench_train_step.py                    # all models, all runners
    python benchmarks/bench_train_step.py --threads 4 --write
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import torch
from torch import nn

# The example's model (examples/digits_cnn.py imports only torch, so the eager and compile
# runners never import ortmodule).
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
from digits_cnn import DigitsCNN

MODELS = ("mlp", "cnn", "cnn28")
RUNNERS = ("ortmodule", "eager", "compile")
BATCH_SIZE = 64
RESULT_PREFIX = "RESULT "
RESULTS_FILE = Path(__file__).resolve().parent / "results" / "train_step.md"

Result = dict[str, Any]  # median_ms, first_step_s, peak_rss_growth_mib, threads; or error


def make_model(name: str) -> tuple[nn.Module, torch.Tensor]:
    """Returns the model and one input batch."""
    if name == "mlp":
        model: nn.Module = nn.Sequential(
            nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10)
        )
        return model, torch.randn(BATCH_SIZE, 784)
    if name == "cnn":
        return DigitsCNN(channels=16, image_size=8), torch.randn(BATCH_SIZE, 1, 8, 8)
    if name == "cnn28":
        return DigitsCNN(channels=32, image_size=28), torch.randn(BATCH_SIZE, 1, 28, 28)
    raise ValueError(f"unknown model {name!r}")


def wrap(model: nn.Module, runner: str) -> nn.Module:
    if runner == "ortmodule":
        from ortmodule import ORTModule

        return ORTModule(model)
    if runner == "compile":
        return torch.compile(model)
    return model


def proc_status_kib(field: str) -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{field} missing from /proc/self/status")


def measure(model_name: str, runner: str, steps: int, warmup: int) -> Result:
    """Runs in the child process: one (model, runner) pair."""
    torch.manual_seed(0)
    model, x = make_model(model_name)
    y = torch.randint(0, 10, (BATCH_SIZE,))
    loss_fn = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    model = wrap(model, runner)
    model.train()

    def step() -> float:
        start = time.perf_counter()
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        elapsed = time.perf_counter() - start
        if not torch.isfinite(loss):
            raise RuntimeError(f"non-finite loss {loss.item()}")
        return elapsed

    gc.collect()
    rss_before_kib = proc_status_kib("VmRSS")
    first_step_s = step()
    for _ in range(warmup - 1):
        step()
    times = [step() for _ in range(steps)]
    return {
        "median_ms": 1000.0 * statistics.median(times),
        "first_step_s": first_step_s,
        "peak_rss_growth_mib": (proc_status_kib("VmHWM") - rss_before_kib) / 1024.0,
        "threads": torch.get_num_threads(),
    }


def run_child(args: argparse.Namespace, model_name: str, runner: str) -> Result:
    command = [sys.executable, __file__, "--runner", runner, "--models", model_name]
    command += ["--steps", str(args.steps), "--warmup", str(args.warmup)]
    if args.threads is not None:
        command += ["--threads", str(args.threads)]
    try:
        done = subprocess.run(
            command, check=False, capture_output=True, text=True, timeout=args.timeout
        )
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {args.timeout} s"}
    for line in reversed(done.stdout.splitlines()):
        if line.startswith(RESULT_PREFIX):
            return json.loads(line[len(RESULT_PREFIX) :])
    stderr_lines = done.stderr.strip().splitlines() or ["no output"]
    return {"error": f"exited with status {done.returncode}: {stderr_lines[-1]}"}


def short_error(error: BaseException) -> str:
    """One table cell: the exception type and the first two lines of its message."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    message = f"{type(error).__name__}: {' / '.join(lines[:2])}"
    return message if len(message) <= 200 else message[:197] + "..."


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def render(args: argparse.Namespace, results: dict[tuple[str, str], Result]) -> str:
    threads = {r["threads"] for r in results.values() if "threads" in r}
    lines = [
        "# Training step: ortmodule vs eager PyTorch vs torch.compile",
        "",
        f"- date: {datetime.now(UTC):%Y-%m-%d %H:%M} UTC",
        f"- torch {torch.__version__}, Python {platform.python_version()}, {cpu_name()}",
        f"- threads: {', '.join(map(str, sorted(threads))) or 'n/a'}; batch {BATCH_SIZE}",
        f"- warm-up {args.warmup} steps (the first timed on its own), median of {args.steps}",
        "- command: `python benchmarks/bench_train_step.py " + " ".join(sys.argv[1:]) + "`",
        "- models and method: see the docstring of benchmarks/bench_train_step.py",
        "",
        "| model | runner | median ms/step | vs eager | first step (s) | peak RSS growth (MiB) |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for (model_name, runner), result in results.items():
        if "error" in result:
            error = str(result["error"]).replace("|", "\\|")
            lines.append(f"| {model_name} | {runner} | failed: {error} | | | |")
            continue
        eager = results.get((model_name, "eager"), {})
        ratio = f"{eager['median_ms'] / result['median_ms']:.2f}x" if "median_ms" in eager else "-"
        lines.append(
            f"| {model_name} | {runner} | {result['median_ms']:.3f} | {ratio} | "
            f"{result['first_step_s']:.3f} | {result['peak_rss_growth_mib']:.1f} |"
        )
    lines += ["", "vs eager = eager time / runner time; above 1.00x the runner is faster.", ""]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", choices=MODELS, default=list(MODELS))
    parser.add_argument("--runners", nargs="+", choices=RUNNERS, default=list(RUNNERS))
    parser.add_argument("--steps", type=int, default=50, help="timed steps (median reported)")
    parser.add_argument("--warmup", type=int, default=10, help="untimed steps, first included")
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads")
    parser.add_argument("--timeout", type=int, default=900, help="seconds per model and runner")
    parser.add_argument("--write", action="store_true", help=f"also write {RESULTS_FILE.name}")
    parser.add_argument("--runner", choices=RUNNERS, help=argparse.SUPPRESS)  # child mode
    args = parser.parse_args()
    if args.steps < 1 or args.warmup < 1:
        parser.error("--steps and --warmup must be at least 1")

    if args.runner is not None:
        if args.threads is not None:
            torch.set_num_threads(args.threads)
        try:
            result = measure(args.models[0], args.runner, args.steps, args.warmup)
        except Exception as error:  # noqa: BLE001 - reported in the table (torch.compile fails)
            result = {"error": short_error(error)}
        print(RESULT_PREFIX + json.dumps(result), flush=True)
        return 0

    results: dict[tuple[str, str], Result] = {}
    for model_name in args.models:
        for runner in args.runners:
            print(f"running {model_name} / {runner} ...", file=sys.stderr, flush=True)
            results[(model_name, runner)] = run_child(args, model_name, runner)
    table = render(args, results)
    print(table)
    if args.write:
        RESULTS_FILE.parent.mkdir(parents=True, exist_ok=True)
        RESULTS_FILE.write_text(table)
        print(f"wrote {RESULTS_FILE}", file=sys.stderr)
    # A torch.compile failure is a finding to report; ortmodule or eager failing is an error.
    failed = [key for key, result in results.items() if "error" in result and key[1] != "compile"]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
