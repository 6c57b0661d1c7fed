"""The accuracy minifier (ortmodule.debug): a parity check against eager PyTorch, and where it
fails, the smallest failing subgraph written as a runnable repro.

Wrong results are injected only here, by replacing an op's entry of the fx lowering's
translation table for the duration of a test (``registry.TABLE``): the engine itself stays
correct, and the repro, holding the lowered graph, shows the wrong result in a fresh process.
"""

from __future__ import annotations

import os
import subprocess
import sys

import onnx
import pytest
import torch
from torch import nn

from ortmodule import DebugOptions, ORTModule
from ortmodule.capture.common import OWN_DOMAIN
from ortmodule.capture.fx import registry
from ortmodule.debug import ParityError, check_parity

aten = torch.ops.aten
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RTOL, ATOL = 1e-4, 1e-5


class Net(nn.Module):
    """Linear, ReLU, LayerNorm, Tanh, Sigmoid and arithmetic: 14 ATen nodes."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.norm = nn.LayerNorm(16)
        self.fc2 = nn.Linear(16, 16)
        self.fc3 = nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm(torch.relu(self.fc1(x)))
        h = torch.tanh(self.fc2(h)) * 0.5 + h
        h = torch.sigmoid(h) - h.mean(-1, keepdim=True)
        return self.fc3(h).exp().sum(-1)


def _inputs() -> tuple[Net, torch.Tensor]:
    torch.manual_seed(0)
    return Net(), torch.randn(4, 8)


def _aten_nodes(model: nn.Module, x: torch.Tensor) -> list[str]:
    program = torch.export.export(model, (x,), strict=False)
    return [str(n.target) for n in program.graph.nodes if n.op == "call_function"]


def _sigmoid_for_tanh(lw: object, node: object, x: object) -> str:
    return lw.op("Sigmoid", [lw.tensor(x)])


def _tanh_without_gradient(lw: object, node: object, x: object) -> str:
    return lw.op("StopGradient", [lw.op("Tanh", [lw.tensor(x)])], domain=OWN_DOMAIN)


def _run_repro(path: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ORTMODULE_")}
    env["PYTHONPATH"] = REPO + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run(
        [sys.executable, os.path.join(path, "repro.py")],
        check=False,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )


def test_net_has_more_than_ten_nodes() -> None:
    model, x = _inputs()
    nodes = _aten_nodes(model, x)
    assert len(nodes) >= 10, nodes
    assert nodes.count("aten.tanh.default") == 1


def test_correct_model_reports_parity(tmp_path: str) -> None:
    model, x = _inputs()
    report = check_parity(model, x.requires_grad_(), rtol=RTOL, atol=ATOL, path=tmp_path)
    assert report.ok, str(report)
    assert report.finding is None and report.repro is None
    assert os.listdir(tmp_path) == []
    assert all(p.grad is None for p in model.parameters())  # the model itself is untouched


def test_wrong_forward_isolated_to_its_node(tmp_path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(registry.TABLE, aten.tanh.default, _sigmoid_for_tanh)
    model, x = _inputs()
    report = check_parity(model, x, rtol=RTOL, atol=ATOL, path=tmp_path)
    assert not report.ok
    assert any(m.what == "output 0" for m in report.mismatches), str(report)
    finding = report.finding
    assert finding is not None and finding.alone, str(report)
    assert finding.case.ops == ["aten.tanh.default"]
    assert finding.failing_alone == finding.case.nodes  # no other node differs by itself
    assert "test_minify.py" in finding.case.sources[0]  # the line of torch.tanh in forward
    assert any(m.what.startswith("output of tanh") for m in finding.mismatches)
    # The repro holds exactly the node of the wrong translation, fed eager's value of fc2.
    repro = onnx.load(os.path.join(report.repro, "model.onnx"))
    assert [n.op_type for n in repro.graph.node] == ["Sigmoid"]
    assert [i.name for i in repro.graph.input] == ["linear_1"]
    with open(os.path.join(report.repro, "reference.py")) as f:
        assert "torch.ops.aten.tanh.default" in f.read()
    monkeypatch.undo()  # a fresh process: the engine and the table as shipped
    done = _run_repro(report.repro)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "MISMATCH output of tanh" in done.stdout


def test_wrong_gradient_isolated_to_its_node(
    tmp_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(registry.TABLE, aten.tanh.default, _tanh_without_gradient)
    model, x = _inputs()
    report = check_parity(model, x, rtol=RTOL, atol=ATOL, path=tmp_path)
    assert report.mismatches and all(m.what.startswith("gradient of") for m in report.mismatches), (
        str(report)
    )
    finding = report.finding
    assert finding is not None and finding.alone and finding.case.ops == ["aten.tanh.default"]
    assert [m.what for m in finding.mismatches] == ["gradient of linear_1"]
    monkeypatch.undo()
    done = _run_repro(report.repro)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "MISMATCH gradient of linear_1" in done.stdout
    assert "MISMATCH output" not in done.stdout


class Chain(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.tanh(x)
        for _ in range(12):
            x = x * 0.9
        return x.sum(-1)


def test_difference_that_grows_over_nodes_isolated_to_a_window(
    tmp_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Each product is 1e-5 relative off: below rtol=4.5e-5 alone, above it after five.
    correct = registry.TABLE[aten.mul.Tensor]

    def slightly_off(lw: object, node: object, *args: object) -> str:
        return lw.op("Mul", [correct(lw, node, *args), lw.const(1 + 1e-5, torch.float64)])

    monkeypatch.setitem(registry.TABLE, aten.mul.Tensor, slightly_off)
    x = torch.randn(3, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    report = check_parity(Chain(), x.requires_grad_(), rtol=4.5e-5, atol=0.0, path=tmp_path)
    assert not report.ok
    finding = report.finding
    assert finding is not None and not finding.alone, str(report)
    assert finding.case.ops == ["aten.mul.Tensor"] * 5, finding.case.ops
    monkeypatch.undo()
    done = _run_repro(report.repro)
    assert done.returncode == 1, done.stdout + done.stderr


def test_minify_option_raises_on_first_call(tmp_path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(registry.TABLE, aten.tanh.default, _sigmoid_for_tanh)
    model, x = _inputs()
    ort = ORTModule(model, DebugOptions(minify=True, save_path=str(tmp_path)))
    with pytest.raises(ParityError, match=r"tanh \(aten.tanh.default, from .*test_minify.py"):
        ort(x)
    assert os.listdir(tmp_path) == ["ortmodule_repro"]


def test_minify_environment_variable_passes_a_correct_model(
    monkeypatch: pytest.MonkeyPatch, tmp_path: str
) -> None:
    monkeypatch.setenv("ORTMODULE_MINIFY", "1")
    monkeypatch.chdir(tmp_path)
    model, x = _inputs()
    ort = ORTModule(model)
    assert ort._debug.minify
    out = ort(x)
    torch.testing.assert_close(out, Net.forward(model, x), rtol=RTOL, atol=ATOL)
    out.sum().backward()
    assert all(p.grad is not None for p in model.parameters())
    assert os.listdir(tmp_path) == []


def test_minify_options_are_validated(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match="parity_rtol must be a non-negative number"):
        DebugOptions(parity_rtol=-1.0)
    with pytest.raises(TypeError, match="minify must be a bool"):
        DebugOptions(minify=1)
    monkeypatch.setenv("ORTMODULE_MINIFY", "yes")
    with pytest.raises(ValueError, match="ORTMODULE_MINIFY='yes' must be 0 or 1"):
        DebugOptions.from_env()
    monkeypatch.setenv("ORTMODULE_MINIFY", "1")
    monkeypatch.setenv("ORTMODULE_PARITY_ATOL", "1e-3")
    opts = DebugOptions.from_env()
    assert opts.minify and opts.parity_atol == 1e-3
