"""Shape subgraphs (Shape -> Gather -> Unsqueeze -> Concat -> Reshape targets,
ConstantOfShape masks, Expand shapes) are computed once per set of input shapes: runs
with repeated shapes reuse them, a new shape recomputes them, and results match the
ONNX reference for every shape."""

from __future__ import annotations

import numpy as np
import onnx
import torch
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from ortmodule import _C


def i64(*values: int) -> np.ndarray:
    return np.asarray(values, dtype=np.int64)


def dynamic_model() -> onnx.ModelProto:
    """x: [B, S, 4] -> reshaped [B, S, 2, 2]; y = mask[S, S] @ x + Expand(bias, [B, S, 4]) * S;
    m = ReduceMax(y, axis 1); the input's shape as an output."""
    consts = {
        "zero": np.array(0, dtype=np.int64), "one": np.array(1, dtype=np.int64), "axes0": i64(0), "two_two": i64(2, 2), "four": i64(4),
        "reduce_axes": i64(1), "bias": np.arange(4, dtype=np.float64).reshape(1, 4) / 4,
    }
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node("Gather", ["shape", "zero"], ["b"]),
        helper.make_node("Gather", ["shape", "one"], ["s"]),
        helper.make_node("Unsqueeze", ["b", "axes0"], ["b1"]),
        helper.make_node("Unsqueeze", ["s", "axes0"], ["s1"]),
        helper.make_node("Concat", ["b1", "s1", "two_two"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["reshaped"]),
        helper.make_node("Concat", ["s1", "s1"], ["mask_shape"], axis=0),
        helper.make_node("ConstantOfShape", ["mask_shape"], ["mask"],
                         value=numpy_helper.from_array(np.array([0.5]), "value")),
        helper.make_node("MatMul", ["mask", "x"], ["mixed"]),
        helper.make_node("Concat", ["b1", "s1", "four"], ["full"], axis=0),
        helper.make_node("Expand", ["bias", "full"], ["bias_full"]),
        helper.make_node("Cast", ["s"], ["s_float"], to=TensorProto.DOUBLE),
        helper.make_node("Mul", ["bias_full", "s_float"], ["scaled"]),
        helper.make_node("Add", ["mixed", "scaled"], ["y"]),
        helper.make_node("ReduceMax", ["y", "reduce_axes"], ["m"], keepdims=0),
    ]
    graph = helper.make_graph(
        nodes, "shape_subgraphs",
        [helper.make_tensor_value_info("x", TensorProto.DOUBLE, ["B", "S", 4])],
        [helper.make_tensor_value_info(n, TensorProto.UNDEFINED, None)
         for n in ("reshaped", "y", "m", "shape")],
        initializer=[numpy_helper.from_array(v, n) for n, v in consts.items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def run_and_compare(program, model: onnx.ModelProto, x: np.ndarray) -> list[torch.Tensor]:
    got = _C.run(program, [torch.from_numpy(x.copy())])
    expected = ReferenceEvaluator(model).run(None, {"x": x})
    for g, e in zip(got, expected):
        e = np.asarray(e)
        assert tuple(g.shape) == e.shape
        np.testing.assert_allclose(g.detach().numpy(), e, rtol=1e-12, atol=1e-12)
    return got


def test_shape_steps_run_once_per_input_shape() -> None:
    model = dynamic_model()
    program = _C.Program(model.SerializeToString(), [], [])
    stats = program.shape_cache_stats()
    # Shape, the Gathers, Unsqueezes, Concats, ConstantOfShape, Expand and Cast; not the
    # Shape whose result is returned, nor anything reading x's values.
    assert stats["cached_steps"] >= 10, program.plan_description()
    assert "[shape-cached]" in program.plan_description()
    rng = np.random.default_rng(0)
    x5, x7 = rng.standard_normal((2, 5, 4)), rng.standard_normal((3, 7, 4))
    first = run_and_compare(program, model, x5)
    first[3].fill_(-1)  # the caller may write into outputs: the cache must not see it
    run_and_compare(program, model, x5)
    run_and_compare(program, model, x7)
    run_and_compare(program, model, rng.standard_normal((2, 5, 4)))
    stats = program.shape_cache_stats()
    assert (stats["misses"], stats["hits"]) == (2, 2), stats
    assert stats["steps_skipped"] == 2 * stats["cached_steps"], stats


def test_gradients_through_cached_shape_values() -> None:
    model = dynamic_model()
    program = _C.Program(model.SerializeToString(), [], ["x"])
    rng = np.random.default_rng(1)
    for shape in [(2, 3, 4), (2, 3, 4), (1, 4, 4), (2, 3, 4)]:
        x = torch.from_numpy(rng.standard_normal(shape)).requires_grad_(True)

        def run(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
            return tuple(y for y in _C.run(program, [x]) if y.is_floating_point())

        assert torch.autograd.gradcheck(run, (x,), eps=1e-6, atol=1e-6, rtol=1e-5)
    assert program.shape_cache_stats()["hits"] > 0


def test_shapes_from_values_follow_every_run() -> None:
    """NonZero's output width is the count of x's positive elements: runs with one input
    shape but other values give other shapes (no memo reuses them), and gradients flow
    through the GatherND that reads x at those coordinates."""
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("NonZero", ["r"], ["nz"]),
        helper.make_node("Transpose", ["nz"], ["coords"]),
        helper.make_node("GatherND", ["x", "coords"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "nonzero",
        [helper.make_tensor_value_info("x", TensorProto.DOUBLE, [3, 4])],
        [helper.make_tensor_value_info(n, TensorProto.UNDEFINED, None) for n in ("coords", "y")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    program = _C.Program(model.SerializeToString(), [], ["x"])
    rng = np.random.default_rng(2)
    widths = set()
    for _ in range(4):
        x = rng.standard_normal((3, 4))
        widths.add(run_and_compare(program, model, x)[0].shape[0])
        xt = torch.from_numpy(x).requires_grad_(True)
        assert torch.autograd.gradcheck(lambda t: _C.run(program, [t])[1], (xt,), eps=1e-6,
                                        atol=1e-6, rtol=1e-5)
    assert len(widths) > 1, widths
