"""ortmodule.profile: its numbers against the counters the engine keeps and against the wall
time of the profiled steps; the reasons graphs are built; bridged ops; the JSON and table
forms; torch.profiler events of engine ops; the first-run INFO block and
ORTMODULE_PRINT_MEMORY_STATS."""

from __future__ import annotations

import json
import logging
import time

import pytest
import torch
from torch import nn

import ortmodule
from ortmodule import _C, DebugOptions, LogLevel, ORTModule, _first_run


class MLP(nn.Module):
    def __init__(self, width: int = 32) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.fc1 = nn.Linear(16, width)
        self.fc2 = nn.Linear(width, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.fc1(x)))


class LossMLP(nn.Module):
    """Forward returns the loss: a step is one engine forward and one engine backward."""

    def __init__(self, width: int) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.fc1 = nn.Linear(width, width)
        self.fc2 = nn.Linear(width, width)
        self.fc3 = nn.Linear(width, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc3(torch.tanh(self.fc2(torch.relu(self.fc1(x))))).square().mean()


def _entries(model: ORTModule) -> list:
    return [e for v in model._cache.values() for e in v]


def test_report_matches_engine_counters() -> None:
    model = ORTModule(MLP())
    x = torch.randn(8, 16)
    model(x).sum().backward()  # builds the graph outside the window
    steps = 3
    with ortmodule.profile() as report:
        for _ in range(steps):
            model(x).sum().backward()
    (entry,) = _entries(model)
    counts = entry.program.node_counts
    assert report.forward_runs == steps
    assert report.graphs == []  # no graph built inside the window
    assert report.forward_ops and report.backward_ops
    # Every timed op ran once per step for each of its plan steps (shape-cached steps, which
    # later runs skip, run fewer times).
    for part, ops in (("forward", report.forward_ops), ("backward", report.backward_ops)):
        for op, stat in ops.items():
            assert stat.calls <= steps * counts[part][op], (part, op)
            assert stat.seconds >= 0
    heaviest = max(report.forward_ops, key=lambda op: report.forward_ops[op].seconds)
    assert report.forward_ops[heaviest].calls == steps * counts["forward"][heaviest]
    # The phases are exclusive: kernels inside the executor inside the boundary.
    for key in (
        "forward.kernels",
        "forward.executor",
        "forward.boundary",
        "backward.kernels",
        "backward.executor",
        "backward.boundary",
        "call",
    ):
        assert report.phases[key] >= 0, key
    assert report.phases["forward.kernels"] == pytest.approx(
        sum(s.seconds for s in report.forward_ops.values())
    )
    # Memory: what forward keeps for backward was live inside the window.
    stash = entry.program.stash_bytes
    assert stash > 0
    assert report.memory["engine_peak_bytes"] >= stash
    assert report.memory["engine_peak_bytes"] >= report.memory["engine_allocated_bytes"]
    assert report.memory["engine_allocated_bytes"] == _C.allocator_stats()["allocated_bytes"]
    # The window leaves profiling off and the benchmarks' peak counter alone.
    assert model(x).sum().item() == pytest.approx(MLP()(x).sum().item(), rel=1e-5)


def test_window_peak_leaves_the_allocator_peak_alone() -> None:
    _C.allocator_reset_peak()
    model = ORTModule(MLP(width=256))
    x = torch.randn(64, 16)
    model(x).sum().backward()
    peak = _C.allocator_stats()["peak_allocated_bytes"]
    with ortmodule.profile() as report:
        model(x).sum().backward()
    assert _C.allocator_stats()["peak_allocated_bytes"] >= peak
    assert 0 < report.memory["engine_peak_bytes"] <= _C.allocator_stats()["peak_allocated_bytes"]


def test_windows_do_not_nest() -> None:
    outer = ortmodule.profile()
    with outer, pytest.raises(RuntimeError, match="do not nest"), ortmodule.profile():
        pass


@pytest.mark.slow
def test_report_sums_to_the_measured_step_time() -> None:
    # Steps of tens of milliseconds (about 13 GFLOP each): what the engine does not time
    # (autograd's own bookkeeping, the Python loop, a few hundred µs at most) stays far below
    # 10% of them, on a fast machine too.
    model = ORTModule(LossMLP(width=1024))
    x = torch.randn(2048, 1024)
    for _ in range(2):
        model(x).backward()
        model.zero_grad(set_to_none=True)
    with ortmodule.profile() as report:
        start = time.perf_counter()
        for _ in range(6):
            model(x).backward()
            model.zero_grad(set_to_none=True)
        measured = time.perf_counter() - start
    assert report.forward_runs == 6
    assert report.engine_seconds == pytest.approx(measured, rel=0.10)
    assert report.wall_seconds >= measured
    kernels = report.phases["forward.kernels"] + report.phases["backward.kernels"]
    assert kernels > 0.5 * report.engine_seconds  # the work is in the kernels


def test_graphs_and_why_they_were_built() -> None:
    model = ORTModule(MLP())
    x = torch.randn(8, 16)
    with ortmodule.profile() as report:
        model(x).sum().backward()
        model(x).sum().backward()  # the same graph
        model.eval()
        with torch.no_grad():
            model(x)
        model.train()
        with torch.no_grad():
            model(x)
        model(x.unsqueeze(0)).sum().backward()
    reasons = [g.reason for g in report.graphs]
    assert len(report.graphs) == 4 == len(_entries(model))
    assert reasons[0] == "first call"
    # Under no_grad nothing requires grad: the grad mode switch alone, not a parameter change.
    assert reasons[1] == "training/eval switch (now eval), grad mode switch"
    assert reasons[2] == "training/eval switch (now training)"
    assert reasons[3] == "new input dtype, rank, device or requires_grad"
    first = report.graphs[0]
    assert first.index == 1 and first.module == "MLP"
    assert first.inputs == ["input_0: float32[8, 16]"]  # the graph input, the call's first tensor
    assert set(first.seconds) >= {"trace", "lowering", "build"}
    assert first.nodes == _entries(model)[0].program.node_counts
    assert first.native_nodes() == sum(sum(c.values()) for c in first.nodes.values())
    assert first.bridged == [] and first.graph_breaks == []
    assert any(p.startswith("gradient_building") for p in first.passes)
    assert report.phases["build"] == pytest.approx(sum(g.seconds["build"] for g in report.graphs))
    # Inference graphs have no backward.
    assert report.graphs[1].nodes["backward"] == {}


def test_bridged_ops_are_reported() -> None:
    class Eigenvectors(nn.Module):
        """linalg.eigh's eigenvectors stay on PyTorch (their signs are LAPACK's)."""

        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(3, 3)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = self.fc(x)
            w, q = torch.linalg.eigh(h + h.mT)
            return ((q * w.unsqueeze(-2)) @ q.mT).sum()

    model = ORTModule(Eigenvectors())
    x = torch.randn(4, 3, 3)
    with ortmodule.profile() as report:
        for _ in range(2):
            model(x).backward()
    (graph,) = report.graphs
    assert graph.bridged and graph.bridged_nodes() >= 1
    assert report.bridged_ops["forward TorchCall"].calls == 2 * graph.nodes["forward"]["TorchCall"]
    assert report.bridged_ops["backward TorchCallGrad"].calls >= 2
    assert "bridged ops (run on PyTorch)" in str(report)


def test_json_and_table_forms() -> None:
    model = ORTModule(MLP())
    x = torch.randn(8, 16)
    with ortmodule.profile() as report:
        for _ in range(2):
            model(x).sum().backward()
    data = json.loads(report.to_json())
    assert data == json.loads(json.dumps(report.to_dict()))
    assert data["forward_runs"] == 2
    assert data["phases"] == pytest.approx(report.phases)
    assert data["engine_seconds"] == pytest.approx(sum(report.phases.values()))
    assert data["forward_ops"].keys() == report.forward_ops.keys()
    assert data["graphs"][0]["reason"] == "first call"
    text = str(report)
    assert text.startswith("ortmodule profile: 2 forward runs")
    for heading in (
        "phase",
        "forward ops (kernel time)",
        "backward ops (kernel time)",
        "memory: engine allocator",
        "graphs built in the window: 1",
        "graph breaks: 0",
    ):
        assert heading in text, heading
    for op in report.forward_ops:
        assert op in text


def test_torch_profiler_shows_engine_ops(tmp_path: object) -> None:
    from torch.profiler import ProfilerActivity, record_function

    model = ORTModule(MLP())
    x = torch.randn(8, 16)
    model(x).sum().backward()
    (entry,) = _entries(model)
    graph = _C.load_onnx(entry.program.training_graph_onnx())
    names = {name for _, _, name in graph["nodes"]}
    with (
        torch.profiler.profile(activities=[ProfilerActivity.CPU]) as prof,
        record_function("train_step"),
    ):
        model(x).sum().backward()
    path = tmp_path / "trace.json"  # type: ignore[operator]
    prof.export_chrome_trace(str(path))
    events = [e for e in json.loads(path.read_text())["traceEvents"] if e.get("ph") == "X"]
    (step,) = [e for e in events if e["name"] == "train_step"]
    ops = [
        e
        for e in events
        if e["name"].startswith("ortmodule::")
        and e["name"] not in ("ortmodule::forward",)
        and " (" in e["name"]
    ]
    steps = sum(sum(c.values()) for c in entry.program.node_counts.values())
    assert len(ops) >= steps - 4  # shape-cached forward steps are not run again
    for e in ops:
        op_type, node = e["name"][len("ortmodule::") :].split(" (", 1)
        assert node[:-1] in names, e["name"]
        assert (
            op_type in entry.program.node_counts["forward"]
            or op_type in entry.program.node_counts["backward"]
        )
        assert 0 <= e["dur"] <= step["dur"]
        assert step["ts"] <= e["ts"] and e["ts"] + e["dur"] <= step["ts"] + step["dur"] + 1
    backward_types = set(entry.program.node_counts["backward"])
    assert any(e["name"][len("ortmodule::") :].split(" (")[0] in backward_types for e in ops)
    assert any(e["name"] == "ortmodule::forward" for e in events)


def test_op_events_can_be_switched_off() -> None:
    # What benchmarks/bench_op_events.py compares: with the hooks removed a trace has no
    # engine op events (the step's own events stay), and the results are the same.
    assert _C.op_events_enabled()
    model = ORTModule(MLP())
    x = torch.randn(8, 16)
    traced = {}
    for enabled in (False, True):
        _C.set_op_events(enabled)
        try:
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
                out = model(x)
                out.sum().backward()
        finally:
            _C.set_op_events(True)
        names = [e.name for e in prof.events()]
        traced[enabled] = out
        engine_ops = [n for n in names if n.startswith("ortmodule::") and " (" in n]
        assert bool(engine_ops) == enabled, names
        assert "ortmodule::forward" in names
    torch.testing.assert_close(traced[False], traced[True], rtol=0, atol=0)


def test_first_run_block_at_info(caplog: pytest.LogCaptureFixture) -> None:
    model = ORTModule(MLP(), DebugOptions(log_level=LogLevel.INFO))
    x = torch.randn(8, 16)
    with caplog.at_level(logging.INFO, logger="ortmodule"):
        model(x).sum().backward()
        model(x).sum().backward()  # no block for a graph already built
        model.eval()
        model(x)
    blocks = [r.getMessage() for r in caplog.records if r.getMessage().startswith("graph #")]
    assert len(blocks) == 2
    first = blocks[0]
    (entry, _) = _entries(model)
    counts = entry.program.node_counts
    assert first.startswith("graph #1 of MLP: first call")
    assert "inputs: input_0: float32[8, 16]" in first
    fwd, bwd = sum(counts["forward"].values()), sum(counts["backward"].values())
    assert f"nodes: {fwd} forward, {bwd} backward; {fwd + bwd} native, 0 bridged" in first
    assert "passes that fired: gradient_building" in first
    assert "bridged ops (run on PyTorch): -" in first
    assert "phase times: capture" in first and "first forward" in first
    stash = entry.program.stash_bytes
    assert f"memory plan: {stash / 2**20:.2f} MiB of activations kept for backward" in first
    assert blocks[1].startswith("graph #2 of MLP: training/eval switch (now eval)")


def test_first_run_block_from_the_environment(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ORTMODULE_LOG_LEVEL", "INFO")
    model = ORTModule(MLP())
    with caplog.at_level(logging.INFO, logger="ortmodule"):
        model(torch.randn(8, 16))
    assert any(r.getMessage().startswith("graph #1 of MLP: first call") for r in caplog.records)
    logging.getLogger("ortmodule").setLevel(logging.WARNING)


def test_print_memory_stats(capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORTMODULE_PRINT_MEMORY_STATS", "1")
    try:
        model = ORTModule(MLP(width=512))
        x = torch.randn(64, 16)
        capsys.readouterr()
        for _ in range(2):
            loss = model(x).sum()
            after_forward = _C.allocator_stats()["allocated_bytes"]
            loss.backward()
    finally:
        _first_run.print_memory_stats(False)
    lines = capsys.readouterr().out.splitlines()
    lines = [line for line in lines if line.startswith("ortmodule memory")]
    assert [line.split(" | ")[1:3] for line in lines] == [
        ["run 1", "after forward "],
        ["run 1", "after backward"],
        ["run 2", "after forward "],
        ["run 2", "after backward"],
    ]
    stash = _entries(model)[0].program.stash_bytes
    allocated = float(lines[2].split("engine allocated ")[1].split(" MiB")[0])
    assert allocated == pytest.approx(after_forward / 2**20, abs=0.01)
    assert allocated * 2**20 >= stash - 0.01 * 2**20
    peak = float(lines[3].split("peak ")[1].split(" MiB")[0])
    assert peak * 2**20 >= stash - 0.01 * 2**20
    # Removed: later runs print nothing.
    model(x).sum().backward()
    assert "ortmodule memory" not in capsys.readouterr().out


def test_print_memory_stats_is_validated(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORTMODULE_PRINT_MEMORY_STATS", "yes")
    with pytest.raises(ValueError, match="ORTMODULE_PRINT_MEMORY_STATS='yes' must be 0 or 1"):
        DebugOptions.from_env()
    with pytest.raises(TypeError, match="print_memory_stats must be a bool"):
        DebugOptions(print_memory_stats=1)  # type: ignore[arg-type]
