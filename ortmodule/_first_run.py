"""What ORTModule reports about a new graph: why it was built, and at INFO one block with
its inputs, nodes, passes, bridged ops, memory and phase times (the first-run report);
plus ``ORTMODULE_PRINT_MEMORY_STATS``' lines after every forward and backward run."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from ortmodule import _C, profiling
from ortmodule._call_key import CallKey
from ortmodule._report_table import format_graph, mib, ms

logger = logging.getLogger("ortmodule")

# CallKey fields, and how a change of each reads in a report.
_KEY_CHANGES = (
    ("training", "training/eval switch"),
    ("grad", "grad mode switch"),
    ("inputs", "new input structure or non-tensor argument values"),
    ("tensors", "new input dtype, rank, device or requires_grad"),
    ("params", "parameter dtype, device or requires_grad changed"),
    ("autocast", "autocast state changed"),
)


def _field(key: CallKey, name: str, other_grad: bool) -> Any:
    """A key field to compare; across a grad mode switch without the requires_grad flags
    (they read False under no_grad: the switch, not a change of their own)."""
    value = getattr(key, name)
    if key.grad == other_grad:
        return value
    if name == "tensors":
        return tuple((t.dtype, t.rank, t.device) for t in value)
    if name == "params":
        return tuple((dtype, device) for dtype, device, _ in value)
    return value


def build_reason(cache: dict, key: CallKey, entries: list | None, dynamic: bool) -> str:
    """Why the call with ``key`` builds a new graph: ``cache`` holds the graphs so far
    (key -> entries), ``entries`` those of ``key`` (none of which accepted the call)."""
    if entries:
        changed = [c for e in entries for c in e.attributes.changed()]
        if changed:
            return "attributes read by forward changed: " + "; ".join(changed[:3])
        if dynamic:
            return "new input sizes: exported again with dynamic sizes"
        return "input sizes outside the graph's shape guards"
    others = [k for k, v in cache.items() if k != key and v]
    if not others:
        return "first call"
    # The closest graph so far (fewest changed fields; the most recently used on ties).
    best: list[str] | None = None
    for other in reversed(others):
        changes = [
            label
            for name, label in _KEY_CHANGES
            if _field(other, name, key.grad) != _field(key, name, other.grad)
        ]
        if best is None or len(changes) < len(best):
            best = changes
    mode = "training" if key.training and key.training[0] else "eval"
    return ", ".join(
        f"{c} (now {mode})" if c == "training/eval switch" else c for c in best or ["new cache key"]
    )


def report_new_graph(module: Any, entry: Any, tensors: list, launch: Callable[[], Any]) -> Any:
    """Runs the first call of a new graph (``launch``), telling an open ``profile`` window
    about the graph and logging its first-run block at INFO."""
    info = logger.isEnabledFor(logging.INFO)
    if not info and profiling.profile._open is None:
        return launch()
    index = sum(len(v) for v in module._cache.values())
    record = profiling.graph_record(entry, index, type(module.module).__name__, tensors)
    profiling.graph_built(record)
    if not info:
        return launch()
    before = profiling.memory_now()
    window = profiling._engine_peak_window()
    start = time.perf_counter()
    try:
        out = launch()
    finally:
        peak = window.close()
    first = time.perf_counter() - start
    after = profiling.memory_now()
    lines = format_graph(record)
    lines[-1] += f", first forward {ms(first)}"
    if entry.program is not None:
        stash = entry.program.stash_bytes
        live = before["engine_allocated_bytes"]
        lines.append(
            f"  memory plan: {mib(max(stash, 0))} of activations kept for backward; first "
            f"forward peak {mib(peak - live)} above the {mib(live)} live before it, "
            f"{mib(after['engine_allocated_bytes'] - live)} still live after it"
        )
        if "cuda_allocated_bytes" in after:
            lines.append(
                f"  CUDA: {mib(after['cuda_allocated_bytes'] - before.get('cuda_allocated_bytes', 0))}"
                " more allocated after the first forward"
            )
    else:
        lines.append(f"  runs in eager PyTorch: {entry.fallback_reason}")
    logger.info("%s", "\n".join(lines))
    return out


class _MemoryPrinter:
    """Prints the engine's memory after every forward and backward run
    (ORTMODULE_PRINT_MEMORY_STATS=1, process-wide once any ORTModule asks for it)."""

    def __init__(self) -> None:
        self.forward_runs = 0
        self.window = profiling._engine_peak_window()

    def __call__(self, phase: str) -> None:
        if phase == "forward":
            self.forward_runs += 1
        peak = self.window.close()
        m = profiling.memory_now()
        line = (
            f"ortmodule memory | run {self.forward_runs} | after {phase:<8} | engine "
            f"allocated {mib(m['engine_allocated_bytes'])}, peak {mib(peak)}, cached "
            f"{mib(m['engine_cached_bytes'])}"
        )
        if "cuda_allocated_bytes" in m:
            import torch

            line += (
                f" | CUDA allocated {mib(m['cuda_allocated_bytes'])}, max allocated "
                f"{mib(torch.cuda.max_memory_allocated())}, reserved "
                f"{mib(m['cuda_reserved_bytes'])}"
            )
        print(line, flush=True)
        self.window = profiling._engine_peak_window()


_printer: list[_MemoryPrinter] = []


def print_memory_stats(enabled: bool) -> None:
    """Installs (or removes) the memory printer."""
    if enabled and not _printer:
        _printer.append(_MemoryPrinter())
        _C.set_step_observer(_printer[0])
    elif not enabled and _printer:
        _C.set_step_observer(None)
        _printer[0].window.close()
        _printer.clear()
