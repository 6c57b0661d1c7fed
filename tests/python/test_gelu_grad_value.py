"""The engine's GeluGrad(dY, X) may also write Gelu(X) (its output 1): backward then takes the
activation a product's weight gradient reads from the gradient's own pass instead of repeating
the forward's Gelu (passes/recompute.h, fold_gelu_recompute_into_grad). Both outputs are bit for
bit those of Gelu and of the one-output GeluGrad, on every instruction set, for every float
dtype and both forms, and close to eager PyTorch's; models train as in eager PyTorch, with
float64 gradients matching finite differences; where the incoming gradient itself depends on the
activation, backward keeps the repeated Gelu."""

from __future__ import annotations

import copy

import onnx
import pytest
import torch
import torch.nn.functional as F
from onnx import helper

from ortmodule import _C, DebugOptions, ORTModule

ISAS = [isa for isa in ("baseline", "avx2", "avx512") if _C.cpu_isa_supported(isa)]
_ONNX = {torch.float32: onnx.TensorProto.FLOAT, torch.float64: onnx.TensorProto.DOUBLE,
         torch.bfloat16: onnx.TensorProto.BFLOAT16, torch.float16: onnx.TensorProto.FLOAT16}
_N = 20011  # several threads' chunks, and a tail past the vector width


def _program(with_value: bool, dtype: torch.dtype, approximate: str) -> _C.Program:
    info = [helper.make_tensor_value_info(n, _ONNX[dtype], [_N]) for n in ("dy", "x")]
    outs = [helper.make_tensor_value_info(n, _ONNX[dtype], [_N]) for n in ("dx", "y")]
    grad_outputs = ["dx", "y"] if with_value else ["dx"]
    nodes = [helper.make_node("GeluGrad", ["dy", "x"], grad_outputs, domain="ai.ortmodule",
                              approximate=approximate)]
    if not with_value:
        nodes.append(helper.make_node("Gelu", ["x"], ["y"], approximate=approximate))
    graph = helper.make_graph(nodes, "gelu_grad", info, outs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20),
                                                    helper.make_opsetid("ai.ortmodule", 1)])
    return _C.Program(model.SerializeToString(), [], ["dy", "x"], graph_optimizations=False)


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("dtype", list(_ONNX))
@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_grad_writes_gelu_bit_for_bit(isa: str, dtype: torch.dtype, approximate: str) -> None:
    gen = torch.Generator().manual_seed(3)
    x = (torch.randn(_N, generator=gen, dtype=torch.float64) * 4).to(dtype)
    x[:9] = torch.tensor([-30.0, -12.0, -5.0, -0.0, 0.0, 1e-30, 3.0, 9.0, 40.0]).to(dtype)
    dy = torch.randn(_N, generator=gen, dtype=torch.float64).to(dtype)
    previous = _C.cpu_isa()
    _C.set_cpu_isa(isa)
    try:
        dx, y = _C.run(_program(True, dtype, approximate), [dy, x])
        dx_alone, y_alone = _C.run(_program(False, dtype, approximate), [dy, x])
    finally:
        _C.set_cpu_isa(previous)
    assert torch.equal(y.view(torch.int16 if dtype.itemsize == 2 else y.dtype),
                       y_alone.view(torch.int16 if dtype.itemsize == 2 else y.dtype))
    assert torch.equal(dx, dx_alone)
    # Against eager PyTorch in float64, the results' dtype's precision.
    x64 = x.double()
    tol = {torch.float32: 1e-5, torch.float64: 1e-12, torch.bfloat16: 1e-2,
           torch.float16: 2e-3}[dtype]
    want_y = F.gelu(x64, approximate=approximate)
    want_dx = torch.ops.aten.gelu_backward(dy.double(), x64, approximate=approximate)
    torch.testing.assert_close(y.double(), want_y, rtol=tol, atol=tol)
    torch.testing.assert_close(dx.double(), want_dx, rtol=tol, atol=tol)


class _Mlp(torch.nn.Module):
    def __init__(self, approximate: str, square: bool = False) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(12, 40)
        self.fc2 = torch.nn.Linear(40, 6)
        self.approximate = approximate
        self.square = square  # the loss also reads the activation: its gradient depends on it

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.gelu(self.fc1(x), approximate=self.approximate)
        out = self.fc2(h)
        return out + (h * h).sum(-1, keepdim=True) if self.square else out


def _backward_ops(model: ORTModule) -> tuple[list[onnx.NodeProto], str]:
    entry = next(iter(model._cache.values()))[0]
    graph = onnx.load_from_string(entry.program.training_graph_onnx()).graph
    return list(graph.node), entry.program.plan_description().split("backward:", 1)[1]


@pytest.mark.parametrize("approximate", ["none", "tanh"])
@pytest.mark.parametrize("square", [False, True])
def test_models_train_as_eager(approximate: str, square: bool) -> None:
    torch.manual_seed(0)
    eager = _Mlp(approximate, square)
    ort = ORTModule(copy.deepcopy(eager))
    x = torch.randn(3, 33, 12) * 2
    for m in (eager, ort):
        m(x).square().sum().backward()
    for (name, p), q in zip(ort.named_parameters(), eager.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5, msg=name)
    nodes, backward = _backward_ops(ort)
    outputs = [len(n.output) for n in nodes if n.op_type == "GeluGrad"]
    if square:
        # The gradient reaching GeluGrad reads the activation, so no GeluGrad writes it (the
        # gradient may then run inside a FusedElementwise program with the square's).
        assert 2 not in outputs, nodes
    else:
        assert outputs == [2] and "  Gelu '" not in backward, backward


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_float64_gradients_match_finite_differences(approximate: str) -> None:
    torch.manual_seed(1)
    model = ORTModule(_Mlp(approximate).double())
    x = torch.randn(2, 5, 12, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: model(t), (x,), eps=1e-6, atol=1e-7, rtol=1e-5)
    nodes, _ = _backward_ops(model)
    assert [len(n.output) for n in nodes if n.op_type == "GeluGrad"] == [2], nodes


def test_without_graph_optimizations_backward_has_no_fold() -> None:
    torch.manual_seed(2)
    eager = _Mlp("none")
    ort = ORTModule(copy.deepcopy(eager), DebugOptions(graph_optimizations=False))
    x = torch.randn(4, 12)
    for m in (eager, ort):
        m(x).sum().backward()
    for p, q in zip(ort.parameters(), eager.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-5, atol=1e-6)
    nodes, _ = _backward_ops(ort)
    assert [len(n.output) for n in nodes if n.op_type == "GeluGrad"] == [1], nodes
