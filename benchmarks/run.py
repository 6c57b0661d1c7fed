"""Training-step benchmark: eager PyTorch, torch.compile and ORTModule side by side.

One process times every runner of a model round-robin, one step each in turn (the order
rotating every round), so that load from elsewhere on the machine hits all runners alike. A
step is the model's forward with its loss, backward, an AdamW step (lr 1e-4; the same
torch.optim.AdamW for every runner unless --adamw best) and zero_grad on one fixed batch;
after the warm-up rounds the median of --steps steps is reported. Models are listed in benchmarks/_models.py.

Reported per model and runner:
- ms/step, and ORTModule's speed relative to eager and to torch.compile;
- achieved GFLOP/s: model FLOPs (3x the forward's GEMM/convolution FLOPs, counted by
  FlopCounterMode) per step time, and the share of the machine's SGEMM ceiling (the best
  float32 GFLOP/s over a few shapes of torch.mm and, on the CPU, of the engine's own GEMM,
  measured at the same thread count before the first model and again after each, the best
  kept: a loaded machine lowers it less);
- peak memory: each runner runs again in a child process of its own (one process's resident
  set mixes all runners: PyTorch's and glibc's caches keep memory of one runner resident for
  the next), which reports its peak resident set over --memory-steps steady-state steps
  (VmHWM, reset after --memory-warmup steps) minus its resident set before the first step,
  taken after the runner has trained a tiny model for two steps (which loads the runner's
  libraries, most of which export and Inductor import on first use, and runs torch's
  thread pool): gradients, optimizer state, activations, caches and what export or
  compilation of this model left; in parentheses the peak over the first steps (export or
  compilation included); after "+", what the libraries took once (the tiny model's run,
  the same for every model). For ORTModule also the engine allocator's peak over the timed
  steps of the main run;
- first-call latency: the first step; for ORTModule split into trace (torch.export), ONNX
  lowering and engine build; torch.compile's uses Inductor's on-disk cache as it finds it
  (an earlier run of the same model makes it shorter);
- --autocast bf16|fp16: every runner's forward and loss under torch.autocast(device, dtype)
  (fp16 with a torch.amp.GradScaler per runner, whose step and update are part of the step);
- eager's products (CPU): eager trains up to 5 more steps under torch.profiler for the self
  time of its matrix products and convolutions per step; its median step over that time is
  the speed-up over eager that a step with products as fast as eager's and nothing else
  reaches;
- ORTModule framework time: after the timed rounds, ORTModule runs --steps more steps with the
  engine's op profiler on; framework time is the step's time minus the time inside the
  engine's op steps (an op step is its shape rule, output allocation and kernel), as a median
  over steps, for the whole step and for forward+backward alone (without the optimizer).

A runner that fails (a model the engine cannot run, --device cuda without a GPU) gets a row
saying why; the others go on. Exit status 1 when an eager or ORTModule runner failed.

    python benchmarks/run.py                       # all models, all runners
    python benchmarks/run.py --models bert gpt2 --runners eager ortmodule --steps 30
    python benchmarks/run.py --quick --models mlp  # a smoke run of a few seconds
    python benchmarks/run.py --device cuda         # BERT-base, GPT-2-small, ResNet-50 on a GPU
    python benchmarks/run.py --device cuda --autocast bf16  # mixed precision, every runner
    python benchmarks/run.py --device cuda --tf32 off       # float32 products and convolutions
    python benchmarks/run.py --write               # also writes benchmarks/RESULTS.md
                                                   # (after each model, then the whole)
    python benchmarks/run.py --models gpt2-124m --steps 3 --write \
        --output benchmarks/results/gpt2-124m.md   # a model of real size, in its own file
    python benchmarks/run.py --sequence-sweep 512 1024 2048 4096 8192 --steps 3 --warmup 2 \
        --write --output benchmarks/results/sequence_sweep.md
                                                   # gpt2 at growing sequence lengths
    ORTMODULE_CPU_ISA=avx2 ATEN_CPU_CAPABILITY=avx2 python benchmarks/run.py --write
                                                   # AVX2 kernels on both sides: RESULTS_AVX2.md
"""

from __future__ import annotations

import argparse
import copy
import gc
import json
import shlex
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

# This checkout's ortmodule (and tests/), not whichever one the environment has installed.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _models import (
    GPU_WORKLOADS,
    NAMED_ONLY,
    SWEEP_SEQUENCES,
    WORKLOADS,
    loss_of,
    set_gpt2_124m_shape,
    training_flops,
)
from _report import Machine, ModelResult, render, results_name

RUNNERS = ("eager", "compile", "ortmodule")
RESULTS_DIR = Path(__file__).resolve().parent
RESULT_PREFIX = "RESULT "
ORTMODULE_STAGES = ("trace", "lowering", "build")


@dataclass
class Runner:
    name: str
    model: torch.nn.Module | None = None
    optimizer: torch.optim.Optimizer | None = None
    error: str = ""
    first_call_s: float = 0.0
    stages: dict[str, float] = field(default_factory=dict)  # ORTModule's first-call stages
    times: list[float] = field(default_factory=list)
    autocast: torch.dtype | None = None  # --autocast
    scaler: torch.amp.GradScaler | None = None  # float16 autocast


AUTOCAST_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def loss_and_backward(runner: Runner, batch: dict[str, torch.Tensor],
                      device: torch.device) -> torch.Tensor:
    """The forward and loss (under autocast when asked) and backward; returns the loss."""
    assert runner.model is not None
    with torch.autocast(device.type, dtype=runner.autocast or torch.float32,
                        enabled=runner.autocast is not None):
        loss = loss_of(runner.model(**batch))
    (runner.scaler.scale(loss) if runner.scaler else loss).backward()
    return loss


def short_error(error: BaseException) -> str:
    """One table cell: the exception type and the first two lines of its message."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    message = f"{type(error).__name__}: {' / '.join(lines[:2])}"
    return message if len(message) <= 240 else message[:237] + "..."


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def check_device(device: torch.device) -> None:
    if device.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("--device cuda but torch.cuda.is_available() is False (this torch "
                           f"build is {torch.__version__}); run on a GPU machine or use cpu")


def wrap(model: torch.nn.Module, runner: str) -> torch.nn.Module:
    if runner == "ortmodule":
        from ortmodule import ORTModule

        return ORTModule(model)
    if runner == "compile":
        return torch.compile(model)
    return model


def make_optimizer(model: torch.nn.Module, adamw: str, runner: str = "eager"
                   ) -> torch.optim.Optimizer:
    """--adamw best: each runner's fastest AdamW, all with one arithmetic: torch's fused=True
    for eager and torch.compile, ortmodule.optim.FusedAdamW(match_torch_sqrt=False) for
    ORTModule (the IEEE square root in one pass over memory, as fused=True; equal to it within
    a few ulps, see benchmarks/bench_optim.py)."""
    if adamw == "best" and runner == "ortmodule":
        from ortmodule.optim import FusedAdamW

        return FusedAdamW(model.parameters(), lr=1e-4, match_torch_sqrt=False)
    options = {"foreach": True} if adamw == "foreach" else {"fused": True} \
        if adamw in ("fused", "best") else {}
    return torch.optim.AdamW(model.parameters(), lr=1e-4, **options)


def train_step(runner: Runner, batch: dict[str, torch.Tensor], device: torch.device) -> float:
    assert runner.model is not None and runner.optimizer is not None
    synchronize(device)
    start = time.perf_counter()
    loss = loss_and_backward(runner, batch, device)
    if runner.scaler:
        runner.scaler.step(runner.optimizer)
        runner.scaler.update()
    else:
        runner.optimizer.step()
    runner.optimizer.zero_grad()
    synchronize(device)
    elapsed = time.perf_counter() - start
    if not torch.isfinite(loss.detach()).item():
        raise RuntimeError(f"non-finite loss {loss.item()}")
    return elapsed


def forward_backward(runner: Runner, batch: dict[str, torch.Tensor],
                     device: torch.device) -> float:
    synchronize(device)
    start = time.perf_counter()
    loss_and_backward(runner, batch, device)
    synchronize(device)
    return time.perf_counter() - start


def start_runner(name: str, base: torch.nn.Module, batch: dict[str, torch.Tensor],
                 device: torch.device, adamw: str, autocast: str | None = None) -> Runner:
    """Builds the runner and times its first step (export, compilation, first allocations)."""
    runner = Runner(name, autocast=AUTOCAST_DTYPES[autocast] if autocast else None)
    if runner.autocast == torch.float16:
        runner.scaler = torch.amp.GradScaler(device.type)
    try:
        check_device(device)
        runner.model = wrap(copy.deepcopy(base).to(device), name)
        runner.optimizer = make_optimizer(runner.model, adamw, name)
        runner.first_call_s = train_step(runner, batch, device)
        if name == "ortmodule":
            entries = [e for es in runner.model._cache.values() for e in es]
            runner.stages = {k: sum(e.seconds.get(k, 0.0) for e in entries)
                             for k in ORTMODULE_STAGES}
    except Exception as error:  # noqa: BLE001 (reported in the table; the others go on)
        runner.error = short_error(error)
        runner.model = runner.optimizer = None
    return runner


def round_robin(runners: list[Runner], batch: dict[str, torch.Tensor], device: torch.device,
                rounds: int, record: bool) -> None:
    for round_index in range(rounds):
        live = [r for r in runners if not r.error]
        if not live:
            return
        shift = round_index % len(live)
        for runner in live[shift:] + live[:shift]:
            try:
                elapsed = train_step(runner, batch, device)
            except Exception as error:  # noqa: BLE001 (reported in the table)
                runner.error = short_error(error)
                runner.model = runner.optimizer = None
                continue
            if record:
                runner.times.append(elapsed)


def framework_times(runner: Runner, batch: dict[str, torch.Tensor], device: torch.device,
                    steps: int) -> dict[str, float]:
    """Median µs per step outside the engine's op steps: whole step, forward+backward alone."""
    from ortmodule import _C

    assert runner.model is not None and runner.optimizer is not None
    full, alone, kernels = [], [], []
    _C.set_profiling(True)
    try:
        _C.profile_snapshot(reset=True)
        for _ in range(steps):
            elapsed = train_step(runner, batch, device)
            op_seconds = sum(s for _, s in _C.profile_snapshot(reset=True).values())
            full.append(elapsed - op_seconds)
            kernels.append(op_seconds)
        for _ in range(steps):
            elapsed = forward_backward(runner, batch, device)
            op_seconds = sum(s for _, s in _C.profile_snapshot(reset=True).values())
            runner.optimizer.zero_grad()
            alone.append(elapsed - op_seconds)
    finally:
        _C.set_profiling(False)
    return {"step_us": 1e6 * statistics.median(full),
            "fwd_bwd_us": 1e6 * statistics.median(alone),
            "op_ms": 1e3 * statistics.median(kernels)}


# The ATen ops whose self time is a product: matrix products and convolutions (the BLAS's and
# oneDNN's kernels); attention inside SDPA's fused kernel is not among them.
PRODUCT_OPS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::addbmm",
               "aten::mkldnn_convolution", "aten::convolution_backward")


def product_ms(runner: Runner, batch: dict[str, torch.Tensor], device: torch.device,
               steps: int) -> float:
    """The self time of eager's products (PRODUCT_OPS) per step, over `steps` steps under
    torch.profiler. ORTModule running the same products at eager's speed, with nothing else
    taking time, would be eager's step / this faster than eager: the bound that a faster step
    outside the products cannot pass."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            train_step(runner, batch, device)
    products_us = sum(e.self_cpu_time_total for e in prof.key_averages() if e.key in PRODUCT_OPS)
    return 1e-3 * products_us / steps


def measure_model(args: argparse.Namespace, model_name: str) -> ModelResult:
    device = torch.device(args.device)
    workload = WORKLOADS[model_name]
    result = ModelResult(model_name, workload.description)
    base = workload.build().train()
    batch = workload.batch()
    try:
        result.train_gflop = training_flops(copy.deepcopy(base), batch) / 1e9
    except Exception as error:  # noqa: BLE001 (GFLOP/s columns stay empty)
        result.notes.append(f"FLOP count failed: {short_error(error)}")
    if device.type != "cpu" and torch.cuda.is_available():
        batch = {k: v.to(device) for k, v in batch.items()}
    runners = []
    for name in args.runners:
        print(f"  {model_name} / {name}: first step ...", file=sys.stderr, flush=True)
        runners.append(start_runner(name, base, batch, device, args.adamw, args.autocast))
    round_robin(runners, batch, device, args.warmup - 1, record=False)
    engine_peak = None
    ort = next((r for r in runners if r.name == "ortmodule" and not r.error), None)
    if ort is not None:
        from ortmodule import _C

        _C.allocator_reset_peak()
    print(f"  {model_name}: {args.steps} timed rounds ...", file=sys.stderr, flush=True)
    round_robin(runners, batch, device, args.steps, record=True)
    if ort is not None and not ort.error:
        engine_peak = _C.allocator_stats()["peak_allocated_bytes"] / 2**20
        try:
            result.framework = framework_times(ort, batch, device, args.steps)
        except Exception as error:  # noqa: BLE001 (reported in the notes)
            result.notes.append(f"framework time failed: {short_error(error)}")
    eager = next((r for r in runners if r.name == "eager" and not r.error), None)
    if eager is not None and device.type == "cpu":
        try:
            result.eager_products_ms = product_ms(eager, batch, device, min(args.steps, 5))
        except Exception as error:  # noqa: BLE001 (reported in the notes)
            result.notes.append(f"eager product profile failed: {short_error(error)}")
    for runner in runners:
        row: dict[str, Any] = {"error": runner.error} if runner.error else {
            "median_ms": 1e3 * statistics.median(runner.times),
            "first_call_s": runner.first_call_s, "stages": runner.stages}
        if runner.name == "ortmodule" and engine_peak is not None:
            row["engine_peak_mib"] = engine_peak
        result.runners[runner.name] = row
    del runners, ort
    gc.collect()
    if args.memory:
        for name in args.runners:
            if "error" in result.runners[name]:
                continue
            print(f"  {model_name} / {name}: peak memory (child process) ...", file=sys.stderr,
                  flush=True)
            result.runners[name].update(memory_in_child(args, model_name, name))
    return result


# ---- peak memory, one runner per child process ----

def proc_status_kib(field_name: str) -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field_name + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{field_name} missing from /proc/self/status")


def reset_peak_rss() -> None:
    """Sets VmHWM to the current VmRSS (Linux 4.0 and later)."""
    with open("/proc/self/clear_refs", "w") as clear_refs:
        clear_refs.write("5")


def settle_process(runner: str) -> None:
    """Pays the one-time costs of the process that do not depend on the model before the
    baseline: the runner's libraries, loaded by training a tiny model through the runner
    (ORTModule's export and engine, Inductor's compiler: both import much of what they use
    on first use), torch's thread pool, autograd and optimizer code."""
    tiny = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.GELU(), torch.nn.LayerNorm(64),
                               torch.nn.Dropout(0.1), torch.nn.Linear(64, 8))
    model = wrap(tiny, runner)
    optimizer = torch.optim.AdamW(model.parameters())
    for _ in range(2):
        torch.nn.functional.cross_entropy(model(torch.randn(16, 64)),
                                          torch.randint(0, 8, (16,))).backward()
        optimizer.step()
        optimizer.zero_grad()


def memory_child(args: argparse.Namespace) -> dict[str, Any]:
    """Runs in the child: one model and runner, warm-up, then steady-state steps."""
    model_name, runner_name = args.memory_child
    device = torch.device(args.device)
    workload = WORKLOADS[model_name]
    base = workload.build().train()
    batch = {k: v.to(device) for k, v in workload.batch().items()}
    if device.type == "cuda":
        return cuda_memory_child(args, runner_name, base, batch, device)
    gc.collect()
    rss_unsettled_kib = proc_status_kib("VmRSS")
    settle_process(runner_name)
    gc.collect()
    rss_before_kib = proc_status_kib("VmRSS")
    runner = start_runner(runner_name, base, batch, device, args.adamw, args.autocast)
    if runner.error:
        return {"memory_error": runner.error}
    for _ in range(args.warmup - 1):
        train_step(runner, batch, device)
    first_calls_kib = proc_status_kib("VmHWM")
    reset_peak_rss()
    for _ in range(args.memory_steps):
        train_step(runner, batch, device)
    return {"peak_rss_growth_mib": (proc_status_kib("VmHWM") - rss_before_kib) / 1024,
            "first_call_rss_growth_mib": (first_calls_kib - rss_before_kib) / 1024,
            "libraries_rss_mib": (rss_before_kib - rss_unsettled_kib) / 1024}


def cuda_memory_child(args: argparse.Namespace, runner_name: str, base: torch.nn.Module,
                      batch: dict[str, torch.Tensor], device: torch.device) -> dict[str, Any]:
    torch.cuda.reset_peak_memory_stats(device)
    before = torch.cuda.memory_allocated(device)
    runner = start_runner(runner_name, base, batch, device, args.adamw, args.autocast)
    if runner.error:
        return {"memory_error": runner.error}
    for _ in range(args.warmup - 1):
        train_step(runner, batch, device)
    torch.cuda.reset_peak_memory_stats(device)
    for _ in range(args.memory_steps):
        train_step(runner, batch, device)
    return {"peak_rss_growth_mib": (torch.cuda.max_memory_allocated(device) - before) / 2**20}


def memory_in_child(args: argparse.Namespace, model_name: str, runner: str) -> dict[str, Any]:
    command = [sys.executable, str(Path(__file__).resolve()), "--memory-child", model_name,
               runner, "--device", args.device, "--warmup", str(args.memory_warmup),
               "--memory-steps", str(args.memory_steps), "--adamw", args.adamw]
    if args.threads:
        command += ["--threads", str(args.threads)]
    if args.autocast:
        command += ["--autocast", args.autocast]
    command += ["--tf32", args.tf32]
    command += ["--gpt2-124m-shape", *map(str, args.gpt2_124m_shape)]
    try:
        done = subprocess.run(command, check=False, capture_output=True, text=True,
                              timeout=args.timeout)
    except subprocess.TimeoutExpired:
        return {"memory_error": f"child timed out after {args.timeout} s"}
    for line in reversed(done.stdout.splitlines()):
        if line.startswith(RESULT_PREFIX):
            return json.loads(line[len(RESULT_PREFIX):])
    last = (done.stderr.strip().splitlines() or ["no output"])[-1]
    return {"memory_error": f"child exited with status {done.returncode}: {last}"}


# ---- the machine ----

def engine_matmul(m: int, k: int, n: int) -> Callable[[torch.Tensor, torch.Tensor], None]:
    """One MatMul node through the engine (its CPU GEMM: torch's BLAS or the packed one)."""
    import onnx
    from onnx import helper

    from ortmodule import _C

    infos = [helper.make_tensor_value_info("a", onnx.TensorProto.FLOAT, [m, k]),
             helper.make_tensor_value_info("b", onnx.TensorProto.FLOAT, [k, n])]
    out = helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [m, n])
    graph = helper.make_graph([helper.make_node("MatMul", ["a", "b"], ["y"])], "mm", infos, [out])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    program = _C.Program(model.SerializeToString(), [], ["a", "b"])

    def run(a: torch.Tensor, b: torch.Tensor) -> None:
        with torch.no_grad():
            _C.run(program, [a, b])

    return run


def sgemm_gflops(device: torch.device, quick: bool) -> dict[str, float]:
    """Best float32 GFLOP/s per GEMM and shape (M x K x N) at the current thread count: torch.mm
    and, on the CPU, the engine's GEMM (which may not be torch's BLAS: runtime/cpu_gemm.h)."""
    shapes = [(1024, 1024, 1024), (1024, 256, 1024), (1024, 1024, 256)]
    repeats, calls = (2, 2) if quick else (7, 5)
    best: dict[str, float] = {}
    for m, k, n in shapes:
        a = torch.randn(m, k, device=device)
        b = torch.randn(k, n, device=device)
        out = torch.empty(m, n, device=device)
        gemms = {"torch.mm": lambda a, b, out=out: torch.mm(a, b, out=out)}
        if device.type == "cpu":
            gemms["engine"] = engine_matmul(m, k, n)
        for name, gemm in gemms.items():
            gemm(a, b)
            times = []
            for _ in range(repeats):
                synchronize(device)
                start = time.perf_counter()
                for _ in range(calls):
                    gemm(a, b)
                synchronize(device)
                times.append((time.perf_counter() - start) / calls)
            best[f"{name} {m}x{k}x{n}"] = 2.0 * m * n * k / min(times) / 1e9
    return best


def machine(args: argparse.Namespace) -> Machine:
    device = torch.device(args.device)
    sgemm: dict[str, float] = {}
    error = ""
    try:
        check_device(device)
        sgemm = sgemm_gflops(device, args.quick)
    except Exception as e:  # noqa: BLE001 (the GFLOP/s shares stay empty)
        error = short_error(e)
    return Machine.describe(args.device, sgemm, error)


def remeasure_sgemm(args: argparse.Namespace, host: Machine) -> None:
    """Keeps the best GFLOP/s per shape: the ceiling is what the machine can do."""
    if host.sgemm:
        again = sgemm_gflops(torch.device(args.device), args.quick)
        host.sgemm = {shape: max(g, again[shape]) for shape, g in host.sgemm.items()}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", choices=list(WORKLOADS), default=None,
                        help="default: the small models on cpu, the full-size ones "
                        f"({', '.join(GPU_WORKLOADS)}) on cuda")
    parser.add_argument("--runners", nargs="+", choices=RUNNERS, default=list(RUNNERS))
    parser.add_argument("--steps", type=int, default=None, help="timed rounds (default 20)")
    parser.add_argument("--warmup", type=int, default=None,
                        help="rounds before timing, the first step included (default 3)")
    parser.add_argument("--memory-warmup", type=int, default=None,
                        help="steps of each memory child before its peak is reset (default 2)")
    parser.add_argument("--memory-steps", type=int, default=None,
                        help="steady-state steps of each memory child (default 3)")
    parser.add_argument("--no-memory", dest="memory", action="store_false",
                        help="skip the peak-memory child processes")
    parser.add_argument("--threads", type=int, default=0, help="torch.set_num_threads")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--adamw", default="default",
                        choices=["default", "foreach", "fused", "best"],
                        help="torch.optim.AdamW implementation for every runner; best: "
                        "fused=True for eager and compile, ortmodule.optim.FusedAdamW for "
                        "ORTModule")
    parser.add_argument("--autocast", default=None, choices=list(AUTOCAST_DTYPES),
                        help="mixed precision: every runner's forward under torch.autocast "
                        "(fp16 with a GradScaler)")
    parser.add_argument("--tf32", default="torch", choices=["torch", "off", "on"],
                        help="--device cuda: TF32 for float32 products and convolutions, for "
                        "every runner (torch.backends.cuda.matmul.allow_tf32 and "
                        "torch.backends.cudnn.allow_tf32); torch: as torch has them (its "
                        "defaults: products off, convolutions on)")
    parser.add_argument("--gpt2-124m-shape", nargs=2, type=int, default=[1024, 2],
                        metavar=("SEQUENCE", "BATCH"),
                        help="gpt2-124m's sequence length and batch (default 1024 2)")
    parser.add_argument("--sequence-sweep", nargs="*", type=int, default=None, metavar="S",
                        help="run gpt2 at these sequence lengths, batch 1, eager attention "
                        f"(the gpt2-seqS models; S in {', '.join(map(str, SWEEP_SEQUENCES))}; "
                        "default 512 1024 2048 4096) instead of --models, and report how "
                        "each runner's time and peak memory grow with S")
    parser.add_argument("--quick", action="store_true",
                        help="smoke run: 3 steps, 1 warm-up, short SGEMM measurement")
    parser.add_argument("--timeout", type=int, default=1200, help="seconds per memory child")
    parser.add_argument("--note", default="", help="a line for the header (e.g. machine load)")
    parser.add_argument("--write", action="store_true",
                        help="also write the results file of what ran: RESULTS.md (the engine's "
                        "AVX-512 kernels), RESULTS_AVX2.md (ORTMODULE_CPU_ISA=avx2 or an AVX2 "
                        "CPU), RESULTS_CUDA.md (--device cuda)")
    parser.add_argument("--output", type=Path, default=None,
                        help="with --write: the file to write instead of the ISA's results file "
                        "(a model measured on its own, as benchmarks/results/gpt2-124m.md)")
    parser.add_argument("--memory-child", nargs=2, metavar=("MODEL", "RUNNER"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    quick = args.quick
    if args.sequence_sweep is not None:
        if args.models is not None:
            parser.error("--sequence-sweep chooses the models: leave out --models")
        sequences = args.sequence_sweep or [s for s in SWEEP_SEQUENCES if s <= 4096]
        unknown = sorted(set(sequences) - set(SWEEP_SEQUENCES))
        if unknown:
            parser.error(f"--sequence-sweep {unknown}: the sweep's sequences are "
                         f"{', '.join(map(str, SWEEP_SEQUENCES))}")
        args.models = [f"gpt2-seq{s}" for s in sorted(set(sequences))]
    if args.models is None:
        args.models = list(GPU_WORKLOADS) if args.device == "cuda" else \
            [name for name in WORKLOADS if name not in GPU_WORKLOADS + NAMED_ONLY]
    args.steps = args.steps if args.steps is not None else 3 if quick else 20
    args.warmup = args.warmup if args.warmup is not None else 1 if quick else 3
    args.memory_warmup = (args.memory_warmup if args.memory_warmup is not None
                          else 1 if quick else 2)
    args.memory_steps = (args.memory_steps if args.memory_steps is not None
                         else 1 if quick else 3)
    if min(args.steps, args.warmup, args.memory_warmup, args.memory_steps) < 1:
        parser.error("--steps, --warmup, --memory-warmup and --memory-steps must be at least 1")
    try:
        set_gpt2_124m_shape(*args.gpt2_124m_shape)
    except ValueError as error:
        parser.error(str(error))
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.tf32 != "torch":
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = args.tf32 == "on"
    if args.memory_child:
        try:
            result = memory_child(args)
        except Exception as error:  # noqa: BLE001 (reported in the parent's table)
            result = {"memory_error": short_error(error)}
        print(RESULT_PREFIX + json.dumps(result), flush=True)
        return 0
    print("measuring the SGEMM ceiling ...", file=sys.stderr, flush=True)
    host = machine(args)
    command = shlex.join(["python", "benchmarks/run.py", *(sys.argv[1:] if argv is None
                                                          else argv)])
    results_file = args.output or RESULTS_DIR / results_name(args.device)
    results = []
    for model_name in args.models:
        print(f"{model_name}:", file=sys.stderr, flush=True)
        results.append(measure_model(args, model_name))
        remeasure_sgemm(args, host)
        host.finish()
        if args.write and len(results) < len(args.models):  # an interrupted run keeps these
            results_file.write_text(render(host, results, args, command,
                                           pending=args.models[len(results):]))
    table = render(host, results, args, command)
    print(table)
    if args.write:
        results_file.write_text(table)
        print(f"wrote {results_file}", file=sys.stderr)
    failed = [(r.name, name) for r in results for name, row in r.runners.items()
              if "error" in row and name != "compile"]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
