"""``ortmodule.profile``: what the engine spent a window of training steps on.

    with ortmodule.profile() as report:
        for _ in range(10):
            loss = model(x, y); loss.backward(); opt.step()
    print(report)            # a table
    report.to_json()         # the same numbers as JSON

The numbers are those the engine keeps while profiling is on (``_C.set_profiling``): kernel
time per op type (forward and backward apart), the executor's and the torch boundary's time
around them, plus what building each new graph took (capture, lowering, build) and the
memory counters. The phases are exclusive, so they add up to the engine's share of the
window; ``outside_seconds`` is the rest (eager PyTorch code, the optimizer, autograd's own
bookkeeping, Python).
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar

import torch

from ortmodule import _C
from ortmodule._report_table import format_report

# Op types that run on PyTorch (bridge nodes), reported apart from the native ops.
BRIDGE_OPS = frozenset({"TorchCall", "TorchCallGrad"})


@dataclass
class OpStat:
    calls: int
    seconds: float


@dataclass
class GraphRecord:
    """One graph built inside the window (or, for the first-run log, at all)."""

    index: int  # the module's graph count after this one was built
    module: str  # class name of the wrapped module
    reason: str  # why a new graph was built (first call, new input dtype, ...)
    exporter: str
    inputs: list[str]  # "name: dtype[sizes]" per graph input fed from the call
    seconds: dict[str, float]  # trace (capture), lowering, build
    nodes: dict[str, dict[str, int]]  # {"forward"|"backward": {op_type: count}}
    bridged: list[str]  # forward's nodes that run on PyTorch
    passes: list[str]  # graph passes that changed the graph, with node counts
    graph_breaks: list[Any]  # what the entry records of graph breaks (empty: none)

    def native_nodes(self) -> int:
        return sum(
            n for part in self.nodes.values() for op, n in part.items() if op not in BRIDGE_OPS
        )

    def bridged_nodes(self) -> int:
        return sum(n for part in self.nodes.values() for op, n in part.items() if op in BRIDGE_OPS)


def graph_record(entry: Any, index: int, module: str, tensors: list[torch.Tensor]) -> GraphRecord:
    """The record of a freshly built ``_Entry`` (``tensors``: the call's flattened inputs)."""
    program = entry.program
    inputs: list[str] = []
    nodes: dict[str, dict[str, int]] = {"forward": {}, "backward": {}}
    bridged: list[str] = []
    passes: list[str] = []
    if program is not None:
        for name, feed in zip(program.input_names, entry.feeds):
            if feed[0] == "input":
                t = tensors[feed[1]]
                dtype = str(t.dtype).removeprefix("torch.")
                inputs.append(f"{name}: {dtype}[{', '.join(str(s) for s in t.shape)}]")
        nodes = {part: dict(counts) for part, counts in program.node_counts.items()}
        bridged = list(program.bridged_nodes)
        passes = [
            f"{name} ({before} -> {after} nodes)"
            for name, before, after, changed in program.passes
            if changed
        ]
    return GraphRecord(
        index,
        module,
        getattr(entry, "build_reason", "") or "",
        entry.exporter,
        inputs,
        dict(entry.seconds),
        nodes,
        bridged,
        passes,
        list(getattr(entry, "graph_breaks", None) or ()),
    )


class _PeakWindow:
    """A peak of live bytes over a window, from one counter that every window shares: a
    window opened inside another restarts the counter, so the outer one keeps the peak it
    had seen by then as its floor."""

    _open: ClassVar[list[_PeakWindow]] = []

    def __init__(self, read: Any, restart: Any) -> None:
        self._read, self._restart = read, restart
        for outer in _PeakWindow._open:
            outer.floor = max(outer.floor, read())
        self.floor = 0
        restart()
        _PeakWindow._open.append(self)

    def close(self) -> int:
        _PeakWindow._open.remove(self)
        return max(self.floor, self._read())


def _engine_peak_window() -> _PeakWindow:
    return _PeakWindow(
        lambda: _C.allocator_stats()["window_peak_bytes"], _C.allocator_reset_window_peak
    )


def _cuda_in_use() -> bool:
    return torch.cuda.is_available() and torch.cuda.is_initialized()


def memory_now() -> dict[str, int]:
    """Engine allocator (host memory) and, where CUDA is in use, torch's CUDA allocator
    (the engine's device memory comes from it)."""
    stats = _C.allocator_stats()
    out = {
        "engine_allocated_bytes": stats["allocated_bytes"],
        "engine_cached_bytes": stats["cached_bytes"],
    }
    if _cuda_in_use():
        out["cuda_allocated_bytes"] = torch.cuda.memory_allocated()
        out["cuda_reserved_bytes"] = torch.cuda.memory_reserved()
    return out


_OP_PHASES = (
    ("forward", "executor.forward", "boundary.forward"),
    ("backward", "executor.backward", "boundary.backward"),
)


@dataclass
class ProfileReport:
    """What a ``profile()`` window measured; filled in when the window closes."""

    wall_seconds: float = 0.0  # the window, as time.perf_counter measured it
    forward_runs: int = 0  # engine forward runs
    # Kernel time per op type.
    forward_ops: dict[str, OpStat] = field(default_factory=dict)
    backward_ops: dict[str, OpStat] = field(default_factory=dict)
    # Exclusive engine phases (seconds): capture, lowering, build (new graphs),
    # forward/backward kernels, executor (shape rules, allocation, bookkeeping around the
    # kernels), boundary (torch <-> engine tensors, autograd nodes), call (the ORTModule
    # call's own work: argument checks, cache key, results).
    phases: dict[str, float] = field(default_factory=dict)
    memory: dict[str, int] = field(default_factory=dict)  # current and peak bytes
    graphs: list[GraphRecord] = field(default_factory=list)  # graphs built in the window
    # GEMM calls by shape: {"NN 64x256x784": (calls, seconds, flops)} (CPU products).
    gemm: dict[str, tuple[int, float, float]] = field(default_factory=dict)

    @property
    def engine_seconds(self) -> float:
        """Sum of the phases: the window's time spent in ortmodule."""
        return sum(self.phases.values())

    @property
    def outside_seconds(self) -> float:
        """The window's time outside ortmodule (eager code, optimizer, autograd, Python)."""
        return self.wall_seconds - self.engine_seconds

    @property
    def framework_seconds(self) -> float:
        """Engine time that is not kernels nor graph building (per-step overhead)."""
        return sum(
            v
            for k, v in self.phases.items()
            if k.endswith((".executor", ".boundary")) or k == "call"
        )

    @property
    def bridged_ops(self) -> dict[str, OpStat]:
        """Bridge nodes' time (ops run on PyTorch), forward and backward."""
        out = {f"forward {op}": s for op, s in self.forward_ops.items() if op in BRIDGE_OPS}
        out.update({f"backward {op}": s for op, s in self.backward_ops.items() if op in BRIDGE_OPS})
        return out

    @property
    def graph_breaks(self) -> list[Any]:
        return [b for g in self.graphs for b in g.graph_breaks]

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["forward_ops"] = {k: asdict(v) for k, v in self.forward_ops.items()}
        d["backward_ops"] = {k: asdict(v) for k, v in self.backward_ops.items()}
        d["gemm"] = {
            k: {"calls": c, "seconds": s, "flops": f} for k, (c, s, f) in self.gemm.items()
        }
        d["engine_seconds"] = self.engine_seconds
        d["framework_seconds"] = self.framework_seconds
        d["outside_seconds"] = self.outside_seconds
        d["graph_breaks"] = [str(b) for b in self.graph_breaks]
        for g in d["graphs"]:
            g["graph_breaks"] = [str(b) for b in g["graph_breaks"]]
        return d

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    def __str__(self) -> str:
        return format_report(self)


class profile:
    """Profiles every ORTModule call inside the ``with`` block; the ``ProfileReport`` it
    yields is filled in when the block ends. Turns the engine's op timing on for the
    window (a clock read around every kernel: a profiled step runs a little slower than an
    unprofiled one). Windows do not nest. On CUDA, kernel times are host-side (kernels
    run asynchronously: the time lands on whatever op waits for them); torch.profiler shows
    device times of the same ops (docs/profiling.md)."""

    _open: ClassVar[profile | None] = None

    def __init__(self) -> None:
        self.report = ProfileReport()
        self._start = 0.0
        self._engine_peak: _PeakWindow | None = None
        self._cuda_peak: _PeakWindow | None = None

    def __enter__(self) -> ProfileReport:
        if profile._open is not None:
            raise RuntimeError(
                "ortmodule.profile windows do not nest: close the open one before opening another"
            )
        profile._open = self
        for snapshot in (_C.op_profile_snapshot, _C.phase_snapshot, _C.gemm_profile_snapshot):
            snapshot(reset=True)
        self._engine_peak = _engine_peak_window()
        if _cuda_in_use():
            self._cuda_peak = _PeakWindow(
                torch.cuda.max_memory_allocated, torch.cuda.reset_peak_memory_stats
            )
        _C.set_profiling(True)
        self._start = time.perf_counter()
        return self.report

    def __exit__(self, *exc: object) -> None:
        if _cuda_in_use():
            torch.cuda.synchronize()
        wall = time.perf_counter() - self._start
        _C.set_profiling(False)
        profile._open = None
        r = self.report
        r.wall_seconds = wall
        ops = _C.op_profile_snapshot(reset=True)
        r.forward_ops = {k: OpStat(*v) for k, v in sorted(ops["forward"].items())}
        r.backward_ops = {k: OpStat(*v) for k, v in sorted(ops["backward"].items())}
        phase = {k: v for k, v in _C.phase_snapshot(reset=True).items()}
        r.forward_runs = phase.get("boundary.forward", (0, 0.0))[0]
        r.gemm = {k: tuple(v) for k, v in _C.gemm_profile_snapshot(reset=True).items()}
        phases: dict[str, float] = {}
        for stage in ("trace", "lowering", "build"):
            phases[stage] = sum(g.seconds.get(stage, 0.0) for g in r.graphs)
        for part, executor, boundary in _OP_PHASES:
            ops_part = r.forward_ops if part == "forward" else r.backward_ops
            kernels = sum(s.seconds for s in ops_part.values())
            in_executor = phase.get(executor, (0, 0.0))[1]
            in_boundary = phase.get(boundary, (0, 0.0))[1]
            phases[f"{part}.kernels"] = kernels
            phases[f"{part}.executor"] = in_executor - kernels
            phases[f"{part}.boundary"] = in_boundary - in_executor
        phases["call"] = phase.get("boundary.call", (0, 0.0))[1]
        r.phases = phases
        r.memory = memory_now()
        assert self._engine_peak is not None
        r.memory["engine_peak_bytes"] = self._engine_peak.close()
        if self._cuda_peak is not None:
            r.memory["cuda_peak_bytes"] = self._cuda_peak.close()


def graph_built(record: GraphRecord) -> None:
    """Called by ORTModule for every new graph: the open window, if any, reports it."""
    if profile._open is not None:
        profile._open.report.graphs.append(record)
