"""Llama's gated MLP unit, silu(gate) * up (transformers' LlamaMLP: down(act(gate(x)) *
up(x)), as the exporter writes silu: g * sigmoid(g)), runs as one ai.ortmodule SiluMul forward
and one SiluMulGrad backward, with eager PyTorch's results; chains that differ stay as
written. The op's own kernels are checked by the op table's samples (op_samples.py,
op_samples_large.py)."""

from __future__ import annotations

import collections
import copy

import onnx
import pytest
import torch

from ortmodule import ORTModule


def _ops(model: ORTModule) -> collections.Counter:
    entry = next(iter(model._cache.values()))[0]
    graph = onnx.load_from_string(entry.program.training_graph_onnx()).graph
    return collections.Counter(n.op_type for n in graph.node)


class Mlp(torch.nn.Module):
    """LlamaMLP; `unit` combines the gate's and the up projection's outputs."""

    def __init__(self, unit=None, hidden: int = 16, ffn: int = 40) -> None:
        super().__init__()
        self.gate = torch.nn.Linear(hidden, ffn, bias=False)
        self.up = torch.nn.Linear(hidden, ffn, bias=False)
        self.down = torch.nn.Linear(ffn, hidden, bias=False)
        self.unit = unit or (lambda g, u: torch.nn.functional.silu(g) * u)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(self.unit(self.gate(x), self.up(x))).tanh().sum()


def _compare(model: torch.nn.Module, x: torch.Tensor, fused: int, tol: float) -> None:
    """ORTModule's loss and gradients against eager's; `fused` SiluMul nodes forward."""
    eager = copy.deepcopy(model)
    want = eager(x)
    want.backward()
    ort = ORTModule(copy.deepcopy(model))
    got = ort(x)
    got.backward()
    ops = _ops(ort)
    assert ops["SiluMul"] == fused and ops["SiluMulGrad"] == fused, ops
    if fused:
        assert ops["Sigmoid"] == 0, ops
    torch.testing.assert_close(got, want, rtol=tol, atol=tol)
    for p, q in zip(ort.module.parameters(), eager.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad, rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.float64, 1e-12)])
def test_llama_mlp_fuses_and_matches_eager(dtype: torch.dtype, tol: float) -> None:
    torch.manual_seed(0)
    _compare(Mlp().to(dtype), 3 * torch.randn(2, 7, 16, dtype=dtype), 1, tol)


def test_explicit_sigmoid_and_broadcast_up() -> None:
    """g * sigmoid(g) written out, multiplied by an up that broadcasts over the tokens (one
    row): fused, dU summed back to its shape (float64)."""
    class Broadcast(Mlp):
        def forward(self, x):
            g = self.gate(x)
            u = self.up(x[:, :1])
            return self.down(u * (torch.sigmoid(g) * g)).tanh().sum()

    torch.manual_seed(0)
    _compare(Broadcast().double(), 3 * torch.randn(2, 7, 16, dtype=torch.float64), 1, 1e-12)


def _silu_read_twice(g: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    s = torch.nn.functional.silu(g)
    return s * u + s.sum()


@pytest.mark.parametrize("unit", [
    lambda g, u: torch.sigmoid(g) * u,      # no silu
    lambda g, u: g * torch.sigmoid(u) * u,  # the sigmoid of another input
    _silu_read_twice,                       # silu(g) read by the sum too
])
def test_other_chains_stay_as_written(unit) -> None:
    torch.manual_seed(0)
    _compare(Mlp(unit).double(), 3 * torch.randn(2, 7, 16, dtype=torch.float64), 0, 1e-12)


# The Hugging Face Llama model fusing its unit in every layer: test_rotary_fusion.py's
# test_llama_model_fuses_in_every_layer.
