"""Constant folding: shape arithmetic over constants and over the shapes of parameters runs
once when the graph is built; the results are those of the graph as built, for every input
shape one graph accepts, and shapes that can change between calls never fold."""

from __future__ import annotations

import collections
import copy

import numpy as np
import onnx
import torch
from onnx import TensorProto, helper
from torch import nn

from ortmodule import _C, DebugOptions, ORTModule
from tests.python.pass_utils import outputs_and_gradients


def _const(name: str, values: list, dtype: int = TensorProto.INT64) -> onnx.NodeProto:
    return helper.make_node(
        "Constant", [], [name], value=helper.make_tensor(name + "_t", dtype, [len(values)], values)
    )


def _model() -> onnx.ModelProto:
    """x [batch, seq, 4] @ W^T + b, reshaped with targets computed from W's shape (folds) and
    from x's shape (must not), scaled by a mask built from Range/Less/Where/Expand and by
    Size(W) (fold); a Shape of an input declared with fixed dims (must not: nothing holds the
    caller to the declaration)."""
    nodes = [
        _const("zero", [0]),
        _const("neg1", [-1]),
        _const("three", [3]),
        _const("lo", [0]),
        _const("hi", [6]),
        _const("step", [1]),
        _const("half", [0.5], TensorProto.DOUBLE),
        # [-1, rows of W]: folds
        helper.make_node("Shape", ["W"], ["sw"]),
        helper.make_node("Gather", ["sw", "zero"], ["rows"], axis=0),
        helper.make_node("Concat", ["neg1", "rows"], ["flat_shape"], axis=0),
        helper.make_node("Transpose", ["W"], ["wt"], perm=[1, 0]),
        helper.make_node("MatMul", ["x", "wt"], ["h"]),
        helper.make_node("Add", ["h", "b"], ["h2"]),
        helper.make_node("Reshape", ["h2", "flat_shape"], ["flat"]),
        # [batch, -1]: reads x's dynamic shape, stays
        helper.make_node("Shape", ["x"], ["sx"]),
        helper.make_node("Gather", ["sx", "zero"], ["batch"], axis=0),
        helper.make_node("Concat", ["batch", "neg1"], ["y_shape"], axis=0),
        helper.make_node("Reshape", ["flat", "y_shape"], ["y"]),
        # a [1, 6] mask: folds
        helper.make_node("Squeeze", ["lo"], ["lo0"]),
        helper.make_node("Squeeze", ["hi"], ["hi0"]),
        helper.make_node("Squeeze", ["step"], ["step0"]),
        helper.make_node("Range", ["lo0", "hi0", "step0"], ["r"]),
        helper.make_node("Cast", ["r"], ["rf"], to=TensorProto.DOUBLE),
        helper.make_node("Less", ["r", "three"], ["cond"]),
        helper.make_node("Where", ["cond", "rf", "half"], ["m"]),
        helper.make_node("Concat", ["step", "rows"], ["mask_shape"], axis=0),
        helper.make_node("Expand", ["m", "mask_shape"], ["mask"]),
        helper.make_node("Size", ["W"], ["size"]),
        helper.make_node("Cast", ["size"], ["sizef"], to=TensorProto.DOUBLE),
        helper.make_node("Mul", ["flat", "mask"], ["masked"]),
        helper.make_node("Mul", ["masked", "sizef"], ["z"]),
        # Shape of an input declared [3]: stays
        helper.make_node("Shape", ["v"], ["sv"]),
        helper.make_node("Cast", ["sv"], ["svf"], to=TensorProto.DOUBLE),
        helper.make_node("Mul", ["v", "svf"], ["u"]),
    ]
    graph = helper.make_graph(
        nodes,
        "folding",
        [
            helper.make_tensor_value_info("x", TensorProto.DOUBLE, ["batch", "seq", 4]),
            helper.make_tensor_value_info("v", TensorProto.DOUBLE, [3]),
        ],
        [helper.make_tensor_value_info(n, TensorProto.DOUBLE, None) for n in ("y", "z", "u")],
        initializer=[
            helper.make_tensor("W", TensorProto.DOUBLE, [6, 4], [0.0] * 24),
            helper.make_tensor("b", TensorProto.DOUBLE, [6], [0.0] * 6),
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _shape_readers(program: _C.Program) -> collections.Counter:
    graph = onnx.load_from_string(program.training_graph_onnx()).graph
    return collections.Counter(n.input[0] for n in graph.node if n.op_type in ("Shape", "Size"))


def test_shape_subgraphs_of_constants_and_parameters_fold_for_every_accepted_shape() -> None:
    model = _model().SerializeToString()
    wrt = ["x", "W", "b"]
    programs = {
        opt: _C.Program(model, ["W", "b"], wrt, graph_optimizations=opt) for opt in (True, False)
    }
    rng = np.random.default_rng(0)
    # One graph, two input shapes: what folded must hold for both.
    for batch, seq in ((2, 3), (5, 1)):
        feeds = {
            "x": rng.uniform(-1, 1, (batch, seq, 4)),
            "v": rng.uniform(-1, 1, 3),
            "W": rng.uniform(-1, 1, (6, 4)),
            "b": rng.uniform(-1, 1, 6),
        }
        tensors = {n: torch.from_numpy(a) for n, a in feeds.items()}
        got = outputs_and_gradients(programs[True], tensors, wrt)
        want = outputs_and_gradients(programs[False], tensors, wrt)
        assert got[0].shape == (batch, seq * 6)
        for g, w in zip(got, want, strict=True):
            torch.testing.assert_close(g, w, rtol=1e-12, atol=1e-12)
    forward, backward = programs[True].folded_constants()
    # Shape(W), Gather, 2 Concats, 3 Squeezes, Range, 2 Casts, Less, Where, Expand,
    # Size(W); backward: the gradient rules' shapes of W and b.
    assert forward == 14, forward
    assert backward >= 1, backward
    assert programs[False].folded_constants() == (0, 0)
    readers = _shape_readers(programs[True])
    assert "W" not in readers and "b" not in readers, readers
    assert readers["x"] >= 1 and readers["v"] == 1, readers  # dynamic or not held to: stays
    assert _shape_readers(programs[False])["W"] >= 2


class Flatten(nn.Module):
    """Reshapes computed from a parameter's shape and from the input's."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 6)
        self.scale = nn.Parameter(torch.randn(6))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc(x) * self.scale
        mask = torch.arange(self.scale.shape[0]) < self.fc.weight.shape[0] // 2
        h = torch.where(mask, h, h * 0.5)
        return h.reshape(x.shape[0], -1, self.fc.weight.shape[0]).sum(-2)


def test_module_with_folding_matches_eager_across_batch_sizes_sharing_one_graph() -> None:
    torch.manual_seed(0)
    eager = Flatten().double()
    ort = ORTModule(copy.deepcopy(eager), debug_options=DebugOptions(graph_optimizations=True))
    for batch, seq in ((3, 5), (4, 2), (1, 7)):
        x = torch.randn(batch, seq, 8, dtype=torch.float64)
        expected, actual = eager(x), ort(x)
        torch.testing.assert_close(actual, expected, rtol=1e-12, atol=1e-12)
        expected.square().sum().backward()
        actual.square().sum().backward()
        for (name, p), q in zip(ort.named_parameters(), eager.parameters()):
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-12, atol=1e-12, msg=name)
    entries = [e for es in ort._cache.values() for e in es]
    assert len(entries) <= 2, len(entries)  # the shapes shared a graph
    assert all(sum(e.program.folded_constants()) > 0 for e in entries)
