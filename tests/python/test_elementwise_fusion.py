"""Trees of element-wise ops, forward and backward, run as one FusedElementwise node each (a
register program evaluated in one pass over memory) with the results of the graph as built:
every opcode, float32 and float64, the broadcast fast paths (same shape, scalar, last axis)
and the general one, sizes past one block and past the parallel grain. Values read twice,
graph outputs and forward values backward reads stay outside the trees."""

from __future__ import annotations

import collections

import numpy as np
import onnx
import pytest
import torch
from onnx import helper, numpy_helper

from ortmodule import _C
from tests.python.test_passes import _outputs_and_gradients

_ONNX_DTYPE = {np.float32: onnx.TensorProto.FLOAT, np.float64: onnx.TensorProto.DOUBLE}


def _model(nodes: list[onnx.NodeProto], feeds: dict[str, np.ndarray], outputs: list[str],
           dtype: type, constants: dict[str, float] | None = None) -> onnx.ModelProto:
    def info(name: str, array: np.ndarray) -> onnx.ValueInfoProto:
        elem = onnx.TensorProto.BOOL if array.dtype == np.bool_ else _ONNX_DTYPE[dtype]
        return helper.make_tensor_value_info(name, elem, list(array.shape))

    consts = [helper.make_node("Constant", [], [name],
                               value=numpy_helper.from_array(np.asarray(v, dtype)))
              for name, v in (constants or {}).items()]
    graph = helper.make_graph(
        consts + nodes, "fusion", [info(n, a) for n, a in feeds.items()],
        [helper.make_tensor_value_info(n, _ONNX_DTYPE[dtype], None) for n in outputs])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _ops(program: _C.Program) -> collections.Counter:
    graph = onnx.load_from_string(program.training_graph_onnx()).graph
    return collections.Counter(n.op_type for n in graph.node if n.op_type != "Constant")


def _run(model: onnx.ModelProto, feeds: dict[str, np.ndarray], wrt: list[str],
         dtype: type) -> collections.Counter:
    """Optimized vs as built: forward outputs and the gradients of `wrt` agree to the last
    bits (the fused program rounds as the nodes did). Returns the optimized op counts."""
    tensors = [torch.from_numpy(v.copy()) for v in feeds.values()]
    positions = [list(feeds).index(n) for n in wrt]
    results, counts = {}, {}
    for optimize in (True, False):
        program = _C.Program(model.SerializeToString(), [], wrt, graph_optimizations=optimize)
        if wrt:
            results[optimize] = _outputs_and_gradients(program, tensors, positions)
        else:
            results[optimize] = [y.detach() for y in _C.run(program, tensors)]
        counts[optimize] = _ops(program)
    tol = 1e-12 if dtype == np.float64 else 1e-6
    for got, want in zip(results[True], results[False], strict=True):
        assert got.dtype == want.dtype and got.shape == want.shape
        torch.testing.assert_close(got, want, rtol=tol, atol=tol)
    assert sum(counts[True].values()) < sum(counts[False].values()), counts
    return counts[True]


def _rand(shape: tuple[int, ...], dtype: type, low: float = -1.0, high: float = 1.0,
          seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed + len(shape)).uniform(low, high, size=shape).astype(dtype)


# Shapes of (a, b, positive p, condition): same shape (flat), scalar, last-axis broadcast,
# middle-axis broadcast (row by row), a size-1 last axis (broadcast along rows), and sizes
# past one 512-element block and past the parallel grain.
SHAPES = {
    "same": ((2, 3, 4), (2, 3, 4), (2, 3, 4), (2, 3, 4)),
    "scalar": ((2, 3, 4), (), (2, 3, 4), ()),
    "last_axis": ((2, 3, 4), (4,), (4,), (3, 4)),
    "middle_axis": ((2, 3, 4), (2, 1, 4), (3, 1), (2, 1, 4)),
    "size1_last": ((2, 3, 1), (2, 3, 5), (1, 5), (3, 1)),
    "large_rows": ((3, 7, 1300), (7, 1300), (1300,), (3, 1, 1300)),
    "large_flat": ((40, 2600), (40, 2600), (), (40, 2600)),
}


def _every_opcode() -> list[onnx.NodeProto]:
    """out = Where(c, Relu(a - b), -(exp(tanh(a)) / (erf(b) + two)))
             * Pow(p, b) * Pow(p, two) + Pow(a, two - one) + Pow(p, half)
             + Reciprocal(Sqrt(p)) * Sigmoid(Identity(b))"""
    n = helper.make_node
    return [
        n("Sub", ["a", "b"], ["t_sub"]), n("Relu", ["t_sub"], ["t_relu"]),
        n("Tanh", ["a"], ["t_tanh"]), n("Exp", ["t_tanh"], ["t_exp"]),
        n("Erf", ["b"], ["t_erf"]), n("Add", ["t_erf", "two"], ["t_den"]),
        n("Div", ["t_exp", "t_den"], ["t_div"]), n("Neg", ["t_div"], ["t_neg"]),
        n("Where", ["c", "t_relu", "t_neg"], ["t_where"]),
        n("Pow", ["p", "b"], ["t_pow"]), n("Pow", ["p", "two"], ["t_sq"]),
        n("Sub", ["two", "one"], ["e_one"]), n("Pow", ["a", "e_one"], ["t_one"]),
        n("Pow", ["p", "half"], ["t_half"]),
        n("Mul", ["t_where", "t_pow"], ["t_m1"]), n("Mul", ["t_m1", "t_sq"], ["t_m2"]),
        n("Add", ["t_m2", "t_one"], ["t_s1"]), n("Add", ["t_s1", "t_half"], ["t_s2"]),
        n("Sqrt", ["p"], ["t_sqrt"]), n("Reciprocal", ["t_sqrt"], ["t_rec"]),
        n("Identity", ["b"], ["t_id"]), n("Sigmoid", ["t_id"], ["t_sig"]),
        n("Mul", ["t_rec", "t_sig"], ["t_m3"]), n("Add", ["t_s2", "t_m3"], ["out"]),
    ]


def _opcode_feeds(shape: str, dtype: type) -> dict[str, np.ndarray]:
    sa, sb, sp, sc = SHAPES[shape]
    return {"a": _rand(sa, dtype, -2, 2), "b": _rand(sb, dtype, -1.5, 1.5, seed=1),
            "p": _rand(sp, dtype, 0.5, 2.0, seed=2),
            "c": np.asarray(np.random.default_rng(3).random(sc) < 0.5)}


CONSTANTS = {"two": 2.0, "one": 1.0, "half": 0.5}


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("shape", list(SHAPES))
def test_every_opcode_fuses_into_one_node(shape: str, dtype: type) -> None:
    model = _model(_every_opcode(), _opcode_feeds(shape, dtype), ["out"], dtype, CONSTANTS)
    ops = _run(model, _opcode_feeds(shape, dtype), [], dtype)
    assert ops == {"FusedElementwise": 1}, ops


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("shape", ["same", "middle_axis", "large_rows"])
def test_backward_chains_fuse_and_forward_values_backward_reads_stay(shape: str,
                                                                     dtype: type) -> None:
    """Forward: the program minus the values backward reads; backward: the gradients' chains
    (TanhGrad's among them) fuse on their side of the split."""
    feeds = _opcode_feeds(shape, dtype)
    model = _model(_every_opcode(), feeds, ["out"], dtype, CONSTANTS)
    ops = _run(model, feeds, ["a", "b", "p"], dtype)
    assert ops["FusedElementwise"] >= 3, ops
    for op in ("TanhGrad", "Identity"):
        assert ops[op] == 0, (op, ops)
    # Read by backward (TanhGrad reads tanh's output), so computed once in forward.
    assert ops["Tanh"] == 1, ops


@pytest.mark.parametrize("inverse_returned", [True, False])
def test_rmsnorm_and_silu_chains(inverse_returned: bool) -> None:
    """Llama's RMSNorm (x * 1 / sqrt(mean(x^2) + eps) * w) and SiLU (x * sigmoid(x)): with the
    norm's inverse also returned (so the RMSNorm fusion, passes/rmsnorm_fusion.h, leaves the
    norm as written), the norm's Add and Sqrt fuse, and values backward reads (the sqrt's
    output, its reciprocal, SiLU's sigmoid) end the trees; otherwise the norm is one
    SimplifiedLayerNormalization and SiLU's chain still fuses."""
    n = helper.make_node
    nodes = [n("Pow", ["x", "two"], ["sq"]),
             n("ReduceMean", ["sq"], ["ms"], axes=[-1], keepdims=1),
             n("Add", ["ms", "eps"], ["mse"]), n("Sqrt", ["mse"], ["rms"]),
             n("Reciprocal", ["rms"], ["inv"]), n("Mul", ["x", "inv"], ["xn"]),
             n("Mul", ["w", "xn"], ["h"]),
             n("Sigmoid", ["h"], ["sig"]), n("Mul", ["h", "sig"], ["silu"]),
             n("Add", ["silu", "x"], ["out"])]
    feeds = {"x": _rand((2, 5, 8), np.float64), "w": _rand((8,), np.float64, seed=4)}
    outputs = ["out", "inv"] if inverse_returned else ["out"]
    model = _model(nodes, feeds, outputs, np.float64, {"two": 2.0, "eps": 1e-6})
    ops = _run(model, feeds, ["x", "w"], np.float64)
    # The sigmoid runs twice: forward, inside SiLU's fused tree (the shape its product's
    # gradient reads is its input's, passes/metadata_reads.h), and backward's recompute of
    # its output from the kept input (passes/recompute.h), instead of keeping both.
    assert ops["Sigmoid"] == 1, ops
    if inverse_returned:
        assert ops["Reciprocal"] == 1 and ops["FusedElementwise"] >= 3, ops
        assert ops["Sqrt"] == 0, ops
    else:
        # Forward's, and backward's recompute of its output (read by the weight's gradient).
        assert ops["SimplifiedLayerNormalization"] == 2, ops
        assert ops["SimplifiedLayerNormalizationGrad"] == 1, ops
        assert ops["FusedElementwise"] >= 1, ops
        for op in ("Pow", "ReduceMean", "Sqrt", "Reciprocal"):
            assert ops[op] == 0, (op, ops)


def test_values_read_twice_or_returned_bound_the_trees() -> None:
    n = helper.make_node
    nodes = [n("Add", ["a", "b"], ["s"]), n("Tanh", ["s"], ["t"]),
             n("Mul", ["t", "t"], ["sq"]),            # t read twice: a leaf of the next tree
             n("Neg", ["sq"], ["u"]), n("Exp", ["u"], ["out"]),
             n("Sub", ["a", "b"], ["d"]), n("Relu", ["d"], ["r"])]  # r is returned
    feeds = {"a": _rand((3, 4), np.float64), "b": _rand((4,), np.float64, seed=5)}
    model = _model(nodes, feeds, ["out", "r", "s"], np.float64)
    ops = _run(model, feeds, [], np.float64)
    # Add stays (s is an output), so does Tanh (read twice); Mul + Neg + Exp fuse, and so
    # do Sub + Relu.
    assert ops == {"Add": 1, "Tanh": 1, "FusedElementwise": 2}, ops


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_sum_adds_left_to_right_inside_a_tree(dtype: type) -> None:
    """Sum (backward's accumulation of gradient contributions), with one and with several
    broadcast inputs, becomes Adds in the program, in the Sum kernel's order."""
    n = helper.make_node
    nodes = [n("Sum", ["a", "b", "c"], ["s"]), n("Sum", ["b"], ["t"]),
             n("Mul", ["s", "t"], ["out"])]
    feeds = {"a": _rand((2, 3, 4), dtype) * 1e8, "b": _rand((4,), dtype, seed=6),
             "c": _rand((3, 1), dtype, seed=7) * -1e8}
    ops = _run(_model(nodes, feeds, ["out"], dtype), feeds, [], dtype)
    assert ops == {"FusedElementwise": 1}, ops


def test_16_bit_round_trips_fuse_as_roundings() -> None:
    """Cast(to float32) or CastLike of Cast(to bfloat16 / float16) of a float32 value (the rounding
    autocast puts between 16-bit ops that compute in float32) is one rounding instruction
    inside a tree, and alone a node of its own; a 16-bit value read elsewhere or returned
    stays a 16-bit value. Results are those of the graph as built, bit for bit."""
    bf16, f16, f32 = onnx.TensorProto.BFLOAT16, onnx.TensorProto.FLOAT16, onnx.TensorProto.FLOAT
    nodes = [
        helper.make_node("Mul", ["x", "x"], ["sq"]),
        helper.make_node("Cast", ["sq"], ["sq16"], to=bf16),
        helper.make_node("Cast", ["sq16"], ["sq32"], to=f32),
        helper.make_node("Tanh", ["sq32"], ["t"]),
        helper.make_node("Cast", ["t"], ["t16"], to=f16),
        helper.make_node("CastLike", ["t16", "x"], ["t32"]),  # as a Cast's gradient widens
        helper.make_node("Add", ["t32", "x"], ["y"]),
        # a lone round trip
        helper.make_node("Cast", ["x"], ["x16"], to=bf16),
        helper.make_node("Cast", ["x16"], ["z"], to=f32),
    ]
    x = _rand((5, 1300), np.float32, -3.0, 3.0)
    model = _model(nodes, {"x": x}, ["y", "z"], np.float32)
    counts = _run(model, {"x": x}, [], np.float32)
    assert counts == collections.Counter({"FusedElementwise": 2}), counts
    # The roundings happened: y differs from the same tree without them.
    (y, z) = _C.run(_C.Program(model.SerializeToString(), [], []), [torch.from_numpy(x)])
    xt = torch.from_numpy(x)
    assert torch.equal(z, xt.to(torch.bfloat16).float())
    t = torch.tanh((xt * xt).to(torch.bfloat16).float())
    torch.testing.assert_close(y, t.half().float() + xt, rtol=0, atol=1e-6)

    # The 16-bit value also read by another op is no round trip: it is kept, the Mul writing
    # it rounded (its Cast fused), the Tanh reading it widened (its Cast fused), and the other
    # reader's Cast stays.
    kept = nodes[:3] + [helper.make_node("Tanh", ["sq32"], ["y"]),
                        helper.make_node("Cast", ["sq16"], ["w"], to=f32)]
    model = _model(kept, {"x": x}, ["y", "w"], np.float32)
    program = _C.Program(model.SerializeToString(), [], [])
    y, w = _C.run(program, [xt])
    assert _ops(program) == collections.Counter({"FusedElementwise": 2, "Cast": 1}), _ops(program)
    assert torch.equal(w, (xt * xt).to(torch.bfloat16).float())
    torch.testing.assert_close(y, torch.tanh(w), rtol=0, atol=1e-6)


@pytest.mark.parametrize("low", [onnx.TensorProto.BFLOAT16, onnx.TensorProto.FLOAT16])
@pytest.mark.parametrize("shape", ["same", "scalar", "last_axis", "large_rows", "large_flat"])
def test_16_bit_values_at_a_trees_edges_are_read_widened_and_written_rounded(
        low: int, shape: str) -> None:
    """A tree computing in float32 between 16-bit values (autocast's Cast(to float32) of each
    16-bit input, Cast(to 16 bits) of the result) reads the 16-bit inputs in place, widened,
    and writes its result rounded once: one node for the tree and its Casts, bit for bit the
    graph as built (forward, and gradients of training graphs; a one-element input broadcast
    too). The Cast of a float32 value also returned stays, read as float32."""
    f32 = onnx.TensorProto.FLOAT
    n = helper.make_node
    nodes = [
        n("Cast", ["a16"], ["a"], to=f32), n("Cast", ["b16"], ["b"], to=f32),
        n("Cast", ["c16"], ["c"], to=f32),
        n("Mul", ["a", "b"], ["ab"]), n("Tanh", ["ab"], ["t"]), n("Add", ["t", "c"], ["s"]),
        n("Cast", ["s"], ["y16"], to=low),
    ]
    sa, sb, _, _ = SHAPES[shape]
    torch_low = {onnx.TensorProto.BFLOAT16: torch.bfloat16,
                 onnx.TensorProto.FLOAT16: torch.float16}[low]
    feeds = [torch.from_numpy(_rand(sh, np.float32, -2, 2, seed=i)).to(torch_low)
             for i, sh in enumerate((sa, sb, sa))]
    infos = [helper.make_tensor_value_info(name, low, list(t.shape))
             for name, t in zip(("a16", "b16", "c16"), feeds, strict=True)]
    outs = [helper.make_tensor_value_info("y16", low, None),
            helper.make_tensor_value_info("c", f32, None)]
    model = helper.make_model(helper.make_graph(nodes, "edges", infos, outs),
                              opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    forward = _C.Program(model, [], [])
    graph = onnx.load_from_string(forward.training_graph_onnx()).graph
    assert _ops(forward) == collections.Counter({"FusedElementwise": 1, "Cast": 1}), _ops(forward)
    (fused,) = [x for x in graph.node if x.op_type == "FusedElementwise"]
    assert list(fused.output) == ["y16"] and set(fused.input) == {"a16", "b16", "c"}, fused
    as_built = _C.Program(model, [], [], graph_optimizations=False)
    for got, want in zip(_C.run(forward, feeds), _C.run(as_built, feeds), strict=True):
        assert got.dtype == want.dtype and torch.equal(got, want)
    # Training: the Casts of the values backward reads stay; results are still bit for bit.
    results = {}
    for optimize in (True, False):
        program = _C.Program(model, [], ["a16", "b16", "c16"], graph_optimizations=optimize)
        results[optimize] = _outputs_and_gradients(program, feeds, [0, 1, 2])
    for got, want in zip(results[True], results[False], strict=True):
        assert got.dtype == want.dtype and got.shape == want.shape
        assert torch.equal(got, want)


@pytest.mark.parametrize("low", [None, onnx.TensorProto.BFLOAT16, onnx.TensorProto.FLOAT16])
@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_gradients_fuse_with_their_16_bit_edges(approximate: str, low: int | None) -> None:
    """Gelu's gradient (GeluGrad, either form) is an opcode of the fused program: in float32 it
    fuses with the gradient chain it ends (TanhGrad's, for y = tanh(gelu(x))); between 16-bit
    values (autocast: Cast(to float32) of the 16-bit input, Gelu, Cast back) it reads the
    16-bit output gradient in place, widened, and writes the input's gradient rounded once;
    it reads the 16-bit input widened too, in place of backward's recompute of its widening:
    backward is that one node, and it makes the gradient itself. Bit for bit the graph as
    built, forward and gradient, on a size past the parallel grain."""
    f32 = onnx.TensorProto.FLOAT
    n = helper.make_node
    if low is None:
        nodes = [n("Gelu", ["x"], ["g"], approximate=approximate), n("Tanh", ["g"], ["y"])]
    else:
        nodes = [n("Cast", ["x"], ["x32"], to=f32),
                 n("Gelu", ["x32"], ["g32"], approximate=approximate),
                 n("Cast", ["g32"], ["y"], to=low)]
    elem = low or f32
    torch_dtype = {None: torch.float32, onnx.TensorProto.BFLOAT16: torch.bfloat16,
                   onnx.TensorProto.FLOAT16: torch.float16}[low]
    feeds = [torch.from_numpy(_rand((40, 2600), np.float32, -4, 4)).to(torch_dtype)]
    model = helper.make_model(
        helper.make_graph(nodes, "gelu", [helper.make_tensor_value_info("x", elem, [40, 2600])],
                          [helper.make_tensor_value_info("y", elem, None)]),
        opset_imports=[helper.make_opsetid("", 20)]).SerializeToString()
    results, ops = {}, {}
    for optimize in (True, False):
        program = _C.Program(model, [], ["x"], graph_optimizations=optimize)
        results[optimize] = _outputs_and_gradients(program, feeds, [0])
        ops[optimize] = _ops(program)
    assert ops[False]["GeluGrad"] == 1, ops[False]
    assert ops[True]["GeluGrad"] == 0 and ops[True]["TanhGrad"] == 0, ops[True]
    if low is not None:
        graph = onnx.load_from_string(
            _C.Program(model, [], ["x"]).training_graph_onnx()).graph
        (grad,) = [x for x in graph.node if "y_grad" in x.input]
        assert grad.op_type == "FusedElementwise" and list(grad.input) == ["y_grad", "x"], grad
        assert not [x for x in graph.node if "/recompute" in x.name], graph
        assert "CastLike" not in ops[True], ops[True]
    for got, want in zip(results[True], results[False], strict=True):
        assert got.dtype == want.dtype and got.shape == want.shape
        assert torch.equal(got, want)


@pytest.mark.parametrize("low", [onnx.TensorProto.BFLOAT16, onnx.TensorProto.FLOAT16])
def test_shape_reads_of_a_widened_input_read_the_16_bit_input(low: int) -> None:
    """An Add's gradient reads the shapes of its operands (to sum a broadcast gradient back):
    under autocast one operand is a Cast(to float32) of a 16-bit input. The Shape reads the
    16-bit input instead (a Cast keeps its input's shape by definition,
    passes/metadata_reads.h), so nothing but the tree reads the Cast's output, and the tree
    reads the 16-bit input in place, widened: forward runs no Cast of it. Bit for bit the
    graph as built, forward and gradients."""
    f32 = onnx.TensorProto.FLOAT
    n = helper.make_node
    nodes = [n("Cast", ["x16"], ["x"], to=f32), n("Add", ["x", "b"], ["s"]),
             n("Tanh", ["s"], ["t"]), n("Cast", ["t"], ["y"], to=low)]
    torch_low = {onnx.TensorProto.BFLOAT16: torch.bfloat16,
                 onnx.TensorProto.FLOAT16: torch.float16}[low]
    feeds = [torch.from_numpy(_rand((40, 2600), np.float32, -2, 2)).to(torch_low),
             torch.from_numpy(_rand((2600,), np.float32, -1, 1, seed=1))]
    model = helper.make_model(
        helper.make_graph(nodes, "shapes",
                          [helper.make_tensor_value_info("x16", low, [40, 2600]),
                           helper.make_tensor_value_info("b", f32, [2600])],
                          [helper.make_tensor_value_info("y", low, None)]),
        opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    results, graphs = {}, {}
    for optimize in (True, False):
        program = _C.Program(model, [], ["x16", "b"], graph_optimizations=optimize)
        results[optimize] = _outputs_and_gradients(program, feeds, [0, 1])
        graphs[optimize] = onnx.load_from_string(program.training_graph_onnx()).graph

    def shape_reads(graph: onnx.GraphProto) -> set[str]:
        return {x.input[0] for x in graph.node if x.op_type == "Shape"}

    assert shape_reads(graphs[False]) == {"x", "b"}, shape_reads(graphs[False])
    assert shape_reads(graphs[True]) == {"x16", "b"}, shape_reads(graphs[True])
    assert not [x for x in graphs[True].node if x.op_type == "Cast" and x.input[0] == "x16"]
    (tree,) = [x for x in graphs[True].node if x.op_type == "FusedElementwise" and "x16" in x.input]
    assert set(tree.input) == {"x16", "b"}, tree
    for got, want in zip(results[True], results[False], strict=True):
        assert got.dtype == want.dtype and got.shape == want.shape
        assert torch.equal(got, want)
