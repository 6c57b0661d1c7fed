"""Text forms of the profile report and of the first-run graph block (plain tables)."""

from __future__ import annotations

from typing import Any

# The records formatted here (profiling.OpStat, GraphRecord, ProfileReport) are typed Any: the
# report imports this module, not the other way round.
OpStat = GraphRecord = ProfileReport = Any

# The phases in the order a step runs them, with their printed names.
PHASE_LABELS = (
    ("trace", "capture (torch.export)"),
    ("lowering", "lowering to ONNX"),
    ("build", "engine build"),
    ("call", "ORTModule call"),
    ("forward.boundary", "forward boundary"),
    ("forward.executor", "forward executor"),
    ("forward.kernels", "forward kernels"),
    ("backward.boundary", "backward boundary"),
    ("backward.executor", "backward executor"),
    ("backward.kernels", "backward kernels"),
)


def mib(n: float) -> str:
    return f"{n / 2**20:.2f} MiB"


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3f} ms"


def _table(header: tuple[str, ...], rows: list[tuple[Any, ...]]) -> list[str]:
    cells = [tuple(str(c) for c in header)] + [tuple(str(c) for c in r) for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]

    def line(r: tuple[str, ...]) -> str:
        return "  ".join(
            c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))
        ).rstrip()

    return [line(cells[0]), "  ".join("-" * w for w in widths)] + [line(r) for r in cells[1:]]


def _op_rows(ops: dict[str, OpStat], total: float) -> list[tuple[Any, ...]]:
    ranked = sorted(ops.items(), key=lambda kv: -kv[1].seconds)
    return [
        (
            op,
            s.calls,
            ms(s.seconds),
            ms(s.seconds / max(s.calls, 1)),
            f"{100 * s.seconds / total:.1f}%" if total > 0 else "-",
        )
        for op, s in ranked
    ]


def format_graph(g: GraphRecord) -> list[str]:
    """The lines of one graph's block (first-run log and report)."""
    native, bridged = g.native_nodes(), g.bridged_nodes()
    fwd, bwd = sum(g.nodes["forward"].values()), sum(g.nodes["backward"].values())
    lines = [
        f"graph #{g.index} of {g.module}: {g.reason or 'built'} (exporter {g.exporter})",
        f"  inputs: {'; '.join(g.inputs) or '-'}",
        f"  nodes: {fwd} forward, {bwd} backward; {native} native, {bridged} bridged",
    ]
    for part in ("forward", "backward"):
        counts = g.nodes[part]
        if counts:
            top = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
            lines.append(f"  {part} ops: " + ", ".join(f"{op} x{n}" for op, n in top))
    lines.append(f"  passes that fired: {', '.join(g.passes) or '-'}")
    lines.append(f"  bridged ops (run on PyTorch): {', '.join(g.bridged) or '-'}")
    if g.graph_breaks:
        lines.append(f"  graph breaks: {'; '.join(str(b) for b in g.graph_breaks)}")
    stages = [
        f"{name} {ms(g.seconds[k])}"
        for k, name in (("trace", "capture"), ("lowering", "lowering"), ("build", "build"))
        if k in g.seconds
    ]
    lines.append(f"  phase times: {', '.join(stages) or '-'}")
    return lines


def format_report(r: ProfileReport) -> str:
    head = (
        f"ortmodule profile: {r.forward_runs} forward runs in {ms(r.wall_seconds)} "
        f"(engine {ms(r.engine_seconds)}, outside the engine {ms(r.outside_seconds)})"
    )
    lines = [head, ""]
    rows = [
        (
            label,
            ms(r.phases.get(key, 0.0)),
            f"{100 * r.phases.get(key, 0.0) / r.wall_seconds:.1f}%" if r.wall_seconds else "-",
        )
        for key, label in PHASE_LABELS
    ]
    rows.append(
        (
            "outside the engine",
            ms(r.outside_seconds),
            f"{100 * r.outside_seconds / r.wall_seconds:.1f}%" if r.wall_seconds else "-",
        )
    )
    lines += _table(("phase", "time", "of wall"), rows)
    runs = max(r.forward_runs, 1)
    lines.append(f"framework overhead per forward run: {ms(r.framework_seconds / runs)}")
    for part, ops in (("forward", r.forward_ops), ("backward", r.backward_ops)):
        if not ops:
            continue
        total = sum(s.seconds for s in ops.values())
        lines += ["", f"{part} ops (kernel time)"]
        lines += _table(("op", "calls", "total", "per call", "share"), _op_rows(ops, total))
    if r.bridged_ops:
        lines += [
            "",
            "bridged ops (run on PyTorch): "
            + ", ".join(f"{k} {s.calls} calls {ms(s.seconds)}" for k, s in r.bridged_ops.items()),
        ]
    m = r.memory
    lines += [
        "",
        "memory: engine allocator "
        + mib(m.get("engine_allocated_bytes", 0))
        + " allocated, "
        + mib(m.get("engine_peak_bytes", 0))
        + " peak in the window, "
        + mib(m.get("engine_cached_bytes", 0))
        + " cached",
    ]
    if "cuda_allocated_bytes" in m:
        lines.append(
            f"        CUDA {mib(m['cuda_allocated_bytes'])} allocated, "
            f"{mib(m.get('cuda_peak_bytes', 0))} peak in the window, "
            f"{mib(m['cuda_reserved_bytes'])} reserved"
        )
    lines += ["", f"graphs built in the window: {len(r.graphs)}"]
    for g in r.graphs:
        lines += format_graph(g)
    breaks = r.graph_breaks
    lines.append(f"graph breaks: {len(breaks)}")
    return "\n".join(lines)
