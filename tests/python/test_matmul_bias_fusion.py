"""MatMul + bias (+ Relu/Gelu) fusion: nn.Linear over 3-D inputs and the activation after it
run as one FusedMatMulBias node, with the results and gradients of the graph as built; products
or sums that do not qualify stay as written."""

from __future__ import annotations

import collections
import copy

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper
from torch import nn

from ortmodule import _C, DebugOptions, ORTModule
from tests.python.pass_utils import outputs_and_gradients


def _model(
    nodes: list[onnx.NodeProto],
    inputs: dict[str, list],
    outputs: list[str],
    initializers: dict[str, np.ndarray] | None = None,
) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes,
        "fusion",
        [helper.make_tensor_value_info(n, TensorProto.DOUBLE, s) for n, s in inputs.items()],
        [helper.make_tensor_value_info(n, TensorProto.DOUBLE, None) for n in outputs],
        initializer=[
            helper.make_tensor(n, TensorProto.DOUBLE, a.shape, a.flatten())
            for n, a in (initializers or {}).items()
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])


def _rand(*shape: int) -> np.ndarray:
    return np.random.default_rng(sum(shape) + len(shape)).uniform(-1, 1, size=shape)


def _ops(program: _C.Program) -> collections.Counter:
    graph = onnx.load_from_string(program.training_graph_onnx()).graph
    return collections.Counter(n.op_type for n in graph.node)


def _forward_activations(graph: onnx.GraphProto) -> list[str]:
    """The Relu/Gelu nodes left unfused: those that are not backward's recompute copies."""
    return [n.name for n in graph.node
            if n.op_type in ("Relu", "Gelu") and not n.output[0].endswith("/recompute")]


def _gelu_grad_outputs(graph: onnx.GraphProto) -> list[int]:
    """The number of outputs of each GeluGrad node (2: it writes Gelu's output too)."""
    return [len(n.output) for n in graph.node if n.op_type == "GeluGrad"]


def _fused_attrs(program: _C.Program) -> list[tuple[str, int]]:
    """(activation, number of outputs) of each FusedMatMulBias node."""
    graph = onnx.load_from_string(program.training_graph_onnx()).graph
    return sorted(
        (
            next((a.s.decode() for a in n.attribute if a.name == "activation"), ""),
            len([o for o in n.output if o]),
        )
        for n in graph.node
        if n.op_type == "FusedMatMulBias"
    )


def _same_results(
    model: onnx.ModelProto,
    feeds: dict[str, np.ndarray],
    wrt: list[str],
    feed_initializers: list[str] = (),
) -> _C.Program:
    """Checks that optimized and unoptimized programs agree; returns the optimized one."""
    data = model.SerializeToString()
    programs = {
        opt: _C.Program(data, list(feed_initializers), wrt, graph_optimizations=opt)
        for opt in (True, False)
    }
    got, want = (
        outputs_and_gradients(programs[True], feeds, wrt),
        outputs_and_gradients(programs[False], feeds, wrt),
    )
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, rtol=1e-12, atol=1e-12)
    assert _ops(programs[False])["FusedMatMulBias"] == 0
    return programs[True]


@pytest.mark.parametrize("activation", ["Relu", "Gelu", "GeluTanh"])
def test_linear_bias_and_activation_fuse_with_the_gradients_of_the_graph_as_built(
    activation: str,
) -> None:
    act = (
        helper.make_node("Relu", ["pre"], ["h"])
        if activation == "Relu"
        else helper.make_node(
            "Gelu", ["pre"], ["h"], approximate="tanh" if activation == "GeluTanh" else "none"
        )
    )
    nodes = [
        helper.make_node("Transpose", ["w1"], ["w1t"], perm=[1, 0]),
        helper.make_node("MatMul", ["x", "w1t"], ["xw"]),
        helper.make_node("Add", ["b1", "xw"], ["pre"]),  # bias first: either order fuses
        act,
        helper.make_node("MatMul", ["h", "w2"], ["hw"]),  # w2 stored [K, N]
        helper.make_node("Add", ["hw", "b2"], ["y"]),
    ]
    model = _model(
        nodes,
        {"x": ["batch", "seq", 5]},
        ["y"],
        {"w1": _rand(7, 5), "b1": _rand(7), "w2": _rand(7, 3), "b2": _rand(3)},
    )
    feeds = {
        "x": _rand(2, 4, 5),
        "w1": _rand(7, 5),
        "b1": _rand(7),
        "w2": _rand(7, 3),
        "b2": _rand(3),
    }
    wrt = ["x", "w1", "b1", "w2", "b2"]
    program = _same_results(model, feeds, wrt, feed_initializers=["w1", "b1", "w2", "b2"])
    ops = _ops(program)
    assert ops["FusedMatMulBias"] == 2, ops
    # No activation is left in forward; backward's GeluGrad writes Gelu's output again from
    # the pre-activation the fused node keeps (passes/recompute.h) instead of keeping both.
    graph = onnx.load_from_string(program.training_graph_onnx()).graph
    assert _forward_activations(graph) == [], graph
    assert ops["Gelu"] == 0, ops
    assert _gelu_grad_outputs(graph) == ([] if activation == "Relu" else [2]), graph
    # The activation's gradient reads the sum (Relu's reads its output, which is output 0).
    assert _fused_attrs(program) == sorted(
        [("", 1), (activation, 1 if activation == "Relu" else 2)]
    )


def test_sums_read_elsewhere_keep_their_value_and_nonqualifying_adds_stay() -> None:
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["xw"]),
        helper.make_node("Add", ["xw", "b"], ["pre"]),
        helper.make_node("Gelu", ["pre"], ["h"]),
        helper.make_node("Mul", ["pre", "h"], ["y"]),  # reads the sum too
        helper.make_node("MatMul", ["x", "w2"], ["xw2"]),
        helper.make_node("Add", ["xw2", "rowbias"], ["z"]),  # a [seq, N] bias: not a bias of N
        helper.make_node("MatMul", ["x", "w3"], ["xw3"]),
        helper.make_node("Add", ["xw3", "b"], ["u"]),
        helper.make_node("Relu", ["xw3"], ["v"]),  # the product is read elsewhere
        # a transposed first operand: fused, through the kernel's general path
        helper.make_node("Transpose", ["x"], ["xt"], perm=[0, 2, 1]),
        helper.make_node("MatMul", ["xt", "c"], ["ct"]),
        helper.make_node("Add", ["ct", "d"], ["t"]),
    ]
    shapes = {
        "x": [2, 4, 5],
        "w": [5, 6],
        "w2": [5, 6],
        "w3": [5, 6],
        "b": [6],
        "rowbias": [4, 6],
        "c": [4, 3],
        "d": [3],
    }
    model = _model(nodes, shapes, ["y", "z", "u", "v", "t"])
    feeds = {n: _rand(*s) for n, s in shapes.items()}
    program = _same_results(model, feeds, list(feeds))
    assert _fused_attrs(program) == [("", 1), ("Gelu", 2)], _fused_attrs(program)
    assert _ops(program)["Add"] >= 2  # the row bias and the product read by Relu


class Mlp(nn.Module):
    """Linear-GELU-Linear-ReLU-Linear over [batch, seq, features], 512 wide: the fused bias
    add and activation run over several chunks of rows, the last one partial."""

    def __init__(self, approximate: str) -> None:
        super().__init__()
        self.fc1 = nn.Linear(16, 512)
        self.fc2 = nn.Linear(512, 96)
        self.fc3 = nn.Linear(96, 8)
        self.act = nn.GELU(approximate=approximate)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc3(torch.relu(self.fc2(self.act(self.fc1(x)))))


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_mlp_with_fusion_matches_eager(dtype: torch.dtype, approximate: str, tmp_path) -> None:
    torch.manual_seed(0)
    eager = Mlp(approximate).to(dtype)
    options = DebugOptions(
        graph_optimizations=True, save_onnx=True, onnx_prefix="mlp", save_path=str(tmp_path)
    )
    ort = ORTModule(copy.deepcopy(eager), debug_options=options)
    tol = {"rtol": 1e-10, "atol": 1e-12} if dtype == torch.float64 else {"rtol": 1e-5, "atol": 1e-5}
    x = torch.randn(3, 37, 16, dtype=dtype)
    expected, actual = eager(x), ort(x)
    torch.testing.assert_close(actual, expected, **tol)
    expected.square().sum().backward()
    actual.square().sum().backward()
    for (name, p), q in zip(ort.named_parameters(), eager.parameters()):
        torch.testing.assert_close(p.grad, q.grad, **tol, msg=name)
    graph = onnx.load(str(tmp_path / "mlp_training_training.onnx")).graph
    ops = collections.Counter(n.op_type for n in graph.node)
    assert ops["FusedMatMulBias"] == 3 and not _forward_activations(graph), ops
    # Backward's GeluGrad writes the Gelu output again from the kept pre-activation
    # (passes/recompute.h).
    assert ops["Gelu"] == 0 and ops["Relu"] == 0, ops
    assert _gelu_grad_outputs(graph) == [2], graph
