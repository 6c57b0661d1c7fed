"""The markdown report of benchmarks/run.py: machine line, per-model table, ORTModule
framework time and the performance targets."""

from __future__ import annotations

import argparse
import os
import platform
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import torch

Row = dict[str, Any]  # one runner of one model: median_ms, first_call_s, ... or error
SWEEP_PREFIX = "gpt2-seq"  # run.py --sequence-sweep's models: gpt2-seqS


def cpu_name() -> str:
    """The model name, with the family and model numbers (which name the core generation
    where the model name does not, e.g. a bare "AMD EPYC")."""
    fields: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                key, _, value = line.partition(":")
                fields.setdefault(key.strip(), value.strip())
                if not line.strip():
                    break
    except OSError:
        pass
    name = fields.get("model name") or platform.processor() or "unknown CPU"
    if "cpu family" in fields and "model" in fields:
        name += f" (family {fields['cpu family']}, model {fields['model']})"
    return name


def load_average() -> str:
    try:
        return " / ".join(f"{x:.1f}" for x in os.getloadavg())
    except OSError:
        return "n/a"


def tf32_settings() -> str:
    """torch's TF32 switches: eager, torch.compile and ORTModule (cuBLAS products, cuDNN
    convolutions through torch) all follow them."""
    on = {True: "on", False: "off"}
    return (f"TF32 for float32 products {on[torch.backends.cuda.matmul.allow_tf32]} "
            f"(torch.backends.cuda.matmul.allow_tf32), for convolutions "
            f"{on[torch.backends.cudnn.allow_tf32]} (torch.backends.cudnn.allow_tf32)")


def isa_line() -> str:
    """Which vector instructions ran: the engine's kernels (``_C.cpu_isa``, chosen from the CPU
    or by ORTMODULE_CPU_ISA) and torch's (ATEN_CPU_CAPABILITY); the CPU's widest is beside."""
    from ortmodule import _C

    widest = next((name for name in ("amx", "avx512bf16", "avx512", "avx2")
                   if _C.cpu_isa_supported(name)), "baseline")
    return (f"engine kernels {_C.cpu_isa()}, torch kernels "
            f"{torch.backends.cpu.get_cpu_capability().lower()} (the CPU has up to {widest})")


def results_name(device: str) -> str:
    """One results file per machine kind: RESULTS.md for AVX-512 kernels (the engine's; amx is
    avx512bf16 with AMX's bfloat16 GEMM), then
    RESULTS_AVX2.md, RESULTS_BASELINE.md, and RESULTS_CUDA.md on a GPU."""
    from ortmodule import _C

    if device == "cuda":
        return "RESULTS_CUDA.md"
    isa = _C.cpu_isa()
    return "RESULTS.md" if isa.startswith("avx512") or isa == "amx" else f"RESULTS_{isa.upper()}.md"


@dataclass
class Machine:
    device: str
    cpu: str
    cores: int
    threads: int
    sgemm: dict[str, float]  # shape -> best GFLOP/s
    sgemm_error: str
    load_at_start: str
    load_at_end: str = ""
    date: str = ""
    engine_gemm: str = ""  # what runs the engine's CPU GEMMs, and why (_C.cpu_gemm_reason)
    cuda_math: str = ""  # torch's TF32 switches, which every runner follows on a GPU
    isa: str = ""  # the engine's vector kernels (_C.cpu_isa) and torch's (its CPU capability)

    @classmethod
    def describe(cls, device: str, sgemm: dict[str, float], sgemm_error: str) -> Machine:
        from ortmodule import _C

        return cls(device, cpu_name(), os.cpu_count() or 0, torch.get_num_threads(), sgemm,
                   sgemm_error, load_average(), date=f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC",
                   engine_gemm=_C.cpu_gemm_reason() if device == "cpu" else "",
                   cuda_math=tf32_settings() if device == "cuda" else "",
                   isa=isa_line())

    def finish(self) -> None:
        self.load_at_end = load_average()

    @property
    def ceiling(self) -> float | None:
        return max(self.sgemm.values()) if self.sgemm else None


@dataclass
class ModelResult:
    name: str
    description: str
    train_gflop: float | None = None  # model FLOPs of one training step, in GFLOP
    runners: dict[str, Row] = field(default_factory=dict)
    framework: dict[str, float] = field(default_factory=dict)  # ORTModule: step_us, ...
    # eager's products under torch.profiler (CPU), ms per step (run.py's product_ms)
    eager_products_ms: float | None = None
    notes: list[str] = field(default_factory=list)

    def ms(self, runner: str) -> float | None:
        return self.runners.get(runner, {}).get("median_ms")


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _ratio(base: float | None, value: float | None) -> str:
    return f"{base / value:.2f}x" if base and value else "-"


def _runner_row(model: ModelResult, runner: str, row: Row, ceiling: float | None) -> str:
    if "error" in row:
        return f"| {model.name} | {runner} | failed: {_cell(row['error'])} |" + " |" * 8
    ms = row["median_ms"]
    gflops = model.train_gflop / (ms / 1e3) if model.train_gflop else None
    share = f"{100 * gflops / ceiling:.0f}%" if gflops and ceiling else "-"
    if "memory_error" in row:
        memory = f"failed: {_cell(row['memory_error'])}"
    elif "peak_rss_growth_mib" in row:
        first = row.get("first_call_rss_growth_mib")
        libraries = row.get("libraries_rss_mib")
        memory = (f"{row['peak_rss_growth_mib']:.0f}" + (f" ({first:.0f})" if first else "")
                  + (f" +{libraries:.0f}" if libraries is not None else ""))
    else:
        memory = "-"
    engine = f"{row['engine_peak_mib']:.0f}" if "engine_peak_mib" in row else "-"
    first_call = f"{row['first_call_s']:.2f}"
    if row.get("stages"):
        first_call += " (" + " / ".join(f"{s:.2f}" for s in row["stages"].values()) + ")"
    return (f"| {model.name} | {runner} | {ms:.2f} | {_ratio(model.ms('eager'), ms)} | "
            f"{_ratio(model.ms('compile'), ms)} | {f'{gflops:.1f}' if gflops else '-'} | "
            f"{share} | {memory} | {engine} | {first_call} |")


@dataclass(frozen=True)
class Target:
    name: str
    goal: float
    higher_is_better: bool
    value: Callable[[dict[str, ModelResult], Machine], float | None]
    unit: str = "x"


def _speedup(model: str, over: str) -> Callable[[dict[str, ModelResult], Machine], float | None]:
    def value(results: dict[str, ModelResult], _: Machine) -> float | None:
        result = results.get(model)
        if result is None or not result.ms("ortmodule") or not result.ms(over):
            return None
        return result.ms(over) / result.ms("ortmodule")
    return value


def _ceiling_share(model: str) -> Callable[[dict[str, ModelResult], Machine], float | None]:
    """The whole ORTModule step's model GFLOP/s as a share of the machine's SGEMM ceiling."""
    def value(results: dict[str, ModelResult], host: Machine) -> float | None:
        result = results.get(model)
        if result is None or not result.train_gflop or not result.ms("ortmodule") \
                or not host.ceiling:
            return None
        return 100 * result.train_gflop / (result.ms("ortmodule") / 1e3) / host.ceiling
    return value


def _memory(model: str) -> Callable[[dict[str, ModelResult], Machine], float | None]:
    """ORTModule's steady peak RSS growth over eager's."""
    def value(results: dict[str, ModelResult], _: Machine) -> float | None:
        result = results.get(model)
        if result is None:
            return None
        ort = result.runners.get("ortmodule", {}).get("peak_rss_growth_mib")
        eager = result.runners.get("eager", {}).get("peak_rss_growth_mib")
        return ort / eager if ort is not None and eager else None
    return value


def _first_call(model: str) -> Callable[[dict[str, ModelResult], Machine], float | None]:
    def value(results: dict[str, ModelResult], _: Machine) -> float | None:
        result = results.get(model)
        return result.runners.get("ortmodule", {}).get("first_call_s") if result else None
    return value


def _peak(results: dict[str, ModelResult], name: str, runner: str) -> float | None:
    result = results.get(name)
    return result.runners.get(runner, {}).get("peak_rss_growth_mib") if result else None


def _doubling_growth(length: int, runner: str
                     ) -> Callable[[dict[str, ModelResult], Machine], float | None]:
    """The sweep's steady peak RSS growth at S over that at S/2."""
    def value(results: dict[str, ModelResult], _: Machine) -> float | None:
        now = _peak(results, f"{SWEEP_PREFIX}{length}", runner)
        half = _peak(results, f"{SWEEP_PREFIX}{length // 2}", runner)
        return now / half if now is not None and half else None
    return value


def _mlp_framework(results: dict[str, ModelResult], _: Machine) -> float | None:
    mlp = results.get("mlp")
    return mlp.framework.get("fwd_bwd_us") if mlp else None


def _transformer_targets(label: str, model: str) -> tuple[Target, ...]:
    return (Target(f"{label}: ORTModule vs eager", 1.5, True, _speedup(model, "eager")),
            Target(f"{label}: ORTModule vs torch.compile", 1.3, True, _speedup(model, "compile")),
            Target(f"{label}: ORTModule share of the SGEMM ceiling", 70.0, True,
                   _ceiling_share(model), "%"))


TARGETS = (
    *(target for label, model in (("BERT-small", "bert"), ("GPT-2-small", "gpt2"),
                                  ("Llama-small", "llama"))
      for target in _transformer_targets(label, model)),
    Target("CNN: ORTModule vs eager", 2.0, True, _speedup("cnn", "eager")),
    Target("MLP: ORTModule vs eager", 1.3, True, _speedup("mlp", "eager")),
    Target("MLP: ORTModule share of the SGEMM ceiling", 70.0, True, _ceiling_share("mlp"), "%"),
    Target("ResNet 64x64 b16: ORTModule vs eager", 1.5, True, _speedup("resnet", "eager")),
    Target("BERT-small: ORTModule peak RSS growth / eager's", 0.8, False, _memory("bert")),
    Target("BERT-small: ORTModule first call", 2.0, False, _first_call("bert"), " s"),
    Target("GPT-2-124M: ORTModule vs eager", 1.3, True, _speedup("gpt2-124m", "eager")),
    Target("GPT-2-124M: ORTModule peak RSS growth / eager's", 0.6, False,
           _memory("gpt2-124m")),
    Target("GPT-2-124M: ORTModule first call", 5.0, False, _first_call("gpt2-124m"), " s"),
    Target("MLP: ORTModule framework time (forward+backward)", 30.0, False, _mlp_framework,
           " µs"),
    Target("GPT-2-small seq 4096: ORTModule vs eager", 1.0, True, _speedup("gpt2-seq4096", "eager")),
    Target("GPT-2-small seq 4096: ORTModule peak RSS growth / that at seq 2048 (linear: 2)",
           2.0, False, _doubling_growth(4096, "ortmodule")),
)


def _target_line(target: Target, results: dict[str, ModelResult], host: Machine) -> str:
    sign = ">=" if target.higher_is_better else "<="
    goal = f"{sign} {target.goal:g}{target.unit}"
    value = target.value(results, host)
    if value is None:
        return f"| {target.name} | {goal} | not measured | - |"
    met = value >= target.goal if target.higher_is_better else value <= target.goal
    if met:
        status = "met"
    elif value <= 0:
        status = "not met"
    else:
        factor = target.goal / value if target.higher_is_better else value / target.goal
        status = f"not met: {factor:.3g}x " + ("to go" if target.higher_is_better else "over")
    return f"| {target.name} | {goal} | {value:.2f}{target.unit} | {status} |"


def _products_section(results: list[ModelResult]) -> list[str]:
    """Eager's time in its products (matrix products, convolutions) and the speed-up over eager
    that ORTModule could reach with the same products at eager's speed and nothing else."""
    rows = [m for m in results if m.eager_products_ms and m.ms("eager")]
    if not rows:
        return []
    lines = ["", "## Eager's products: the bound at eager's product speed", "",
             ("Eager's matrix products and convolutions (the self time of aten::mm, addmm, "
              "bmm, baddbmm, addbmm, mkldnn_convolution, convolution_backward under "
              "torch.profiler, per step) against its median step of the timed rounds. Bound: "
              "that step over the products' time, the speed-up over eager of a step whose "
              "products run exactly as fast as eager's and whose every other op and the "
              "optimizer take no time; beyond it only faster products go."), "",
             ("| model | eager ms/step | eager products ms/step | share | bound | "
              "ORTModule vs eager |"), "|---|---:|---:|---:|---:|---:|"]
    for m in rows:
        products, eager, ort = m.eager_products_ms, m.ms("eager"), m.ms("ortmodule")
        lines.append(f"| {m.name} | {eager:.2f} | {products:.2f} | {products / eager:.0%} | "
                     f"{eager / products:.2f}x | {_ratio(eager, ort)} |")
    return lines


def _sweep_section(results: list[ModelResult]) -> list[str]:
    """run.py --sequence-sweep: per sequence length, each runner's time and steady peak RSS
    growth, and how that memory grows when S doubles: the peak at S over the peak at S/2 (at
    most 2 where memory is linear in S, with or without a part that does not grow; towards 4
    where it is quadratic)."""
    sweep = sorted((int(m.name[len(SWEEP_PREFIX):]), m) for m in results
                   if m.name.startswith(SWEEP_PREFIX) and m.name[len(SWEEP_PREFIX):].isdigit())
    if not sweep:
        return []
    runners = [r for r in ("eager", "compile", "ortmodule")
               if any(r in m.runners for _, m in sweep)]

    def memory(m: ModelResult, runner: str) -> float | None:
        return m.runners.get(runner, {}).get("peak_rss_growth_mib")

    def cell(value: float | None, digits: int = 0) -> str:
        return "-" if value is None else f"{value:.{digits}f}"

    header = ["S", *(f"{r} ms" for r in runners), "ORTModule vs eager",
              *(f"{r} peak MiB" for r in runners), "engine peak MiB",
              *(f"{r} peak / peak at S/2" for r in runners)]
    lines = ["", "## Sequence sweep", "",
             ("gpt2 (4x256, 4 heads, vocab 4096, eager attention) on one sequence of S tokens. "
              "Peak MiB: steady peak RSS growth (see the main table); peak / peak at S/2: at "
              "most 2 where memory grows linearly with S, towards 4 where it grows with S². "
              "A cell is empty where its runner failed (the main table says why)."), "",
             "| " + " | ".join(header) + " |", "|" + "---:|" * len(header)]
    for i, (length, m) in enumerate(sweep):
        growth = []
        for r in runners:
            value = None
            if i >= 1 and sweep[i - 1][0] * 2 == length:
                now, half = memory(m, r), memory(sweep[i - 1][1], r)
                if now is not None and half:
                    value = now / half
            growth.append(cell(value, 2))
        engine = m.runners.get("ortmodule", {}).get("engine_peak_mib")
        lines.append("| " + " | ".join([
            str(length), *(cell(m.ms(r), 1) for r in runners),
            _ratio(m.ms("eager"), m.ms("ortmodule")), *(cell(memory(m, r)) for r in runners),
            cell(engine), *growth]) + " |")
    return lines


def render(host: Machine, results: list[ModelResult], args: argparse.Namespace,
           command: str, pending: list[str] | None = None) -> str:
    ceiling = host.ceiling
    sgemm = ", ".join(f"{shape} {g:.0f}" for shape, g in host.sgemm.items()) or (
        f"not measured ({host.sgemm_error})")
    lines = [
        "# Training step: eager PyTorch vs torch.compile vs ORTModule",
        "",
        (f"- machine: {host.cpu}, {host.cores} cores, {host.threads} threads, device "
        f"{host.device}; torch {torch.__version__}, Python {platform.python_version()}; "
        f"SGEMM ceiling {f'{ceiling:.0f} GFLOP/s' if ceiling else 'n/a'} "
        f"(float32 best GFLOP/s of torch.mm and the engine's GEMM, MxKxN: {sgemm}"
        f"{'; engine GEMM: ' + host.engine_gemm if host.engine_gemm else ''})"
        f"{'; ' + host.cuda_math if host.cuda_math else ''}"
        f"{'; ISA: ' + host.isa if host.isa and host.device == 'cpu' else ''}"),
        f"- load average (1/5/15 min) at start {host.load_at_start}, at end "
        f"{host.load_at_end}" + (f"; {args.note}" if args.note else ""),
        (f"- {host.date}; round-robin over runners, {args.warmup} warm-up rounds (the first "
        f"step timed as first call), median of {args.steps} steps; AdamW ({args.adamw})"
        + (f"; torch.autocast {args.autocast}" if getattr(args, "autocast", None) else "")),
        f"- command: `{command}`; method: see the docstring of benchmarks/run.py",
        *([f"- partial: the run has not measured {', '.join(pending)} yet"] if pending else []),
        "",
        ("| model | runner | ms/step | vs eager | vs compile | GFLOP/s | % of SGEMM | "
        "peak RSS growth MiB, steady (first calls) +libraries once | engine peak MiB | "
        "first call s (trace / lowering / build) |"),
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for model in results:
        for runner, row in model.runners.items():
            lines.append(_runner_row(model, runner, row, ceiling))
    lines += ["", ("vs eager / vs compile: that runner's time over this row's time (above 1.00x "
              "this row is faster). GFLOP/s: model FLOPs (3x forward GEMM/conv FLOPs) per "
              "second."), "", "## Models", ""]
    for model in results:
        gflop = f"{model.train_gflop:.2f} GFLOP/step" if model.train_gflop else "FLOPs n/a"
        lines.append(f"- {model.name}: {model.description}; {gflop}"
                     + "".join(f"; {_cell(n)}" for n in model.notes))
    framework = [m for m in results if m.framework]
    if framework:
        lines += ["", "## ORTModule framework time", "",
                  ("Time per step outside the engine's op steps (median, profiler on); the "
                   "whole step includes the torch.optim.AdamW step, which runs outside the "
                   "engine."), "",
                  ("| model | engine op time ms/step | framework µs, whole step | "
                  "framework µs, forward+backward |"), "|---|---:|---:|---:|"]
        for m in framework:
            f = m.framework
            lines.append(f"| {m.name} | {f['op_ms']:.2f} | {f['step_us']:.0f} | "
                         f"{f['fwd_bwd_us']:.0f} |")
    lines += _products_section(results)
    lines += _sweep_section(results)
    by_name = {m.name: m for m in results}
    lines += ["", "## Targets", "", "| target | goal | measured | status |", "|---|---|---:|---|"]
    lines += [_target_line(t, by_name, host) for t in TARGETS]
    return "\n".join(lines) + "\n"
