"""MatMul's batched GEMM paths and the FusedMatMulSumToShape gradient op, against numpy.

Batch dims that are contiguous or broadcast in both operands run as one batched GEMM, a leading
rest loops; a broadcast right operand with a contiguous left one collapses into one 2-D GEMM.
The gradient of a broadcast operand sums the product over the batch dims it lacks in one op
(one 2-D GEMM when both operands share their batch dims). Every pattern is checked in float32
and float64, at sizes that cross the parallel grain, and MatMul's gradients against autograd.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper

from ortmodule import _C

DTYPES = {np.float32: (TensorProto.FLOAT, 2e-5), np.float64: (TensorProto.DOUBLE, 1e-12)}

# (a shape, b shape): every batch layout batched_matmul distinguishes.
MATMUL_SHAPES = [
    ((7, 5), (5, 6)),                  # plain 2-D
    ((2, 3, 4, 5), (5, 6)),            # broadcast b, contiguous a: one collapsed GEMM
    ((4, 5), (2, 3, 5, 6)),            # broadcast a (stride 0), contiguous b
    ((2, 3, 4, 5), (2, 3, 5, 6)),      # attention: both contiguous, one batched GEMM
    ((2, 1, 4, 5), (1, 3, 5, 6)),      # crossed broadcast: outer loop of batched GEMMs
    ((3, 4, 5), (2, 1, 5, 6)),         # different ranks, partial broadcast
    ((2, 3, 1, 4, 5), (3, 2, 5, 6)),   # broadcast in the middle
    ((1, 1, 4, 5), (2, 3, 5, 6)),      # size-1 batch dims of a
    ((8, 64, 96), (96, 130)),          # threaded collapsed GEMM
    ((4, 4, 64, 32), (4, 4, 32, 64)),  # threaded batched GEMM
]


def _model(op: str, domain: str, inputs: list[tuple[str, int]],
           shapes: tuple | None = None, **attrs: object) -> bytes:
    ins = [helper.make_tensor_value_info(n, t, shapes[i] if shapes else None)
           for i, (n, t) in enumerate(inputs)]
    out = helper.make_tensor_value_info("y", TensorProto.UNDEFINED, None)
    node = helper.make_node(op, [n for n, _ in inputs], ["y"], domain=domain, **attrs)
    graph = helper.make_graph([node], "g", ins, [out])
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1),
              helper.make_opsetid("ai.ortmodule", 1)]
    return helper.make_model(graph, opset_imports=opsets).SerializeToString()


def _stored(shape: tuple[int, ...], trans: bool) -> tuple[int, ...]:
    return (*shape[:-2], shape[-1], shape[-2]) if trans else shape


def _op(x: np.ndarray, trans: bool) -> np.ndarray:
    return np.swapaxes(x, -1, -2) if trans else x


def _sum_to(x: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    lead = x.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(
        lead + i for i, d in enumerate(shape) if d == 1 and x.shape[lead + i] != 1)
    return x.sum(axis=axes, keepdims=True).reshape(shape)


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("trans_a,trans_b", [(0, 0), (1, 0), (0, 1), (1, 1)])
@pytest.mark.parametrize("shapes", MATMUL_SHAPES, ids=str)
def test_fused_matmul_batch_layouts(shapes: tuple, trans_a: int, trans_b: int,
                                    dtype: type) -> None:
    proto, tol = DTYPES[dtype]
    rng = np.random.default_rng(0)
    a = rng.standard_normal(_stored(shapes[0], bool(trans_a))).astype(dtype)
    b = rng.standard_normal(_stored(shapes[1], bool(trans_b))).astype(dtype)
    model = _model("FusedMatMul", "com.microsoft", [("a", proto), ("b", proto)],
                   transA=trans_a, transB=trans_b, alpha=0.5)
    (y,) = _C.run(_C.Program(model, [], []), [torch.from_numpy(a), torch.from_numpy(b)])
    expected = 0.5 * np.matmul(_op(a, bool(trans_a)), _op(b, bool(trans_b)))
    np.testing.assert_allclose(y.numpy(), expected, rtol=tol, atol=tol * 10)


# (a shape, b shape as op(a) @ op(b), target): the product summed down to target.
SUM_CASES = [
    ((2, 3, 4, 5), (2, 3, 5, 6), (4, 6)),        # everything summed
    ((2, 3, 4, 5), (2, 3, 5, 6), (1, 4, 6)),     # everything summed, kept rank
    ((2, 3, 4, 5), (2, 3, 5, 6), (3, 4, 6)),     # the leading dim summed
    ((2, 3, 4, 5), (2, 3, 5, 6), (2, 1, 4, 6)),  # an inner dim summed
    ((2, 3, 4, 5), (2, 3, 5, 6), (2, 3, 4, 6)),  # nothing summed
    ((4, 5), (2, 3, 5, 6), (4, 6)),              # a broadcast operand's own gradient
    ((2, 1, 4, 5), (1, 3, 5, 6), (1, 3, 4, 6)),  # crossed broadcast
    ((8, 128, 96), (8, 128, 80), (96, 80)),      # threaded, as transA (a Linear's weight)
]


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("trans_a,trans_b", [(0, 0), (1, 0), (0, 1), (1, 1)])
@pytest.mark.parametrize("case", SUM_CASES, ids=str)
def test_fused_matmul_sum_to_shape(case: tuple, trans_a: int, trans_b: int, dtype: type) -> None:
    a_shape, b_shape, target = case
    if case[2] == (96, 80):  # stored as the weight gradient's operands: [.., S, M], [.., S, N]
        a_shape, b_shape = (8, 96, 128), (8, 128, 80)
    proto, tol = DTYPES[dtype]
    rng = np.random.default_rng(1)
    a = rng.standard_normal(_stored(a_shape, bool(trans_a))).astype(dtype)
    b = rng.standard_normal(_stored(b_shape, bool(trans_b))).astype(dtype)
    model = _model("FusedMatMulSumToShape", "ai.ortmodule",
                   [("a", proto), ("b", proto), ("s", TensorProto.INT64)],
                   transA=trans_a, transB=trans_b, alpha=2.0)
    s = torch.tensor(target, dtype=torch.int64)
    (y,) = _C.run(_C.Program(model, [], []), [torch.from_numpy(a), torch.from_numpy(b), s])
    product = 2.0 * np.matmul(_op(a, bool(trans_a)), _op(b, bool(trans_b)))
    np.testing.assert_allclose(y.numpy(), _sum_to(product, target), rtol=tol * 10,
                               atol=tol * 100)


def test_fused_matmul_sum_to_shape_refuses_a_shape_it_does_not_sum_to() -> None:
    model = _model("FusedMatMulSumToShape", "ai.ortmodule",
                   [("a", TensorProto.FLOAT), ("b", TensorProto.FLOAT),
                    ("s", TensorProto.INT64)])
    inputs = [torch.ones(2, 3, 4), torch.ones(2, 4, 5), torch.tensor([3, 3, 5])]
    with pytest.raises(RuntimeError, match=r"FusedMatMulSumToShape.*\[3, 3, 5\].*\[2, 3, 5\]"):
        _C.run(_C.Program(model, [], []), inputs)


@pytest.mark.parametrize("shapes", MATMUL_SHAPES[:8] + [((5,), (2, 5, 3)), ((2, 4, 5), (5,))],
                         ids=str)
def test_matmul_gradients_match_autograd(shapes: tuple) -> None:
    # Declared shapes: the gradient rule promotes rank-1 operands as numpy does.
    model = _model("MatMul", "", [("a", TensorProto.DOUBLE), ("b", TensorProto.DOUBLE)], shapes)
    program = _C.Program(model, [], ["a", "b"])
    gen = torch.Generator().manual_seed(2)
    a = torch.randn(shapes[0], dtype=torch.float64, generator=gen, requires_grad=True)
    b = torch.randn(shapes[1], dtype=torch.float64, generator=gen, requires_grad=True)
    (y,) = _C.run(program, [a, b])
    dy = torch.randn(y.shape, dtype=torch.float64, generator=gen)
    da, db = torch.autograd.grad(y, (a, b), dy)
    ea, eb = torch.autograd.grad(torch.matmul(a, b), (a, b), dy)
    torch.testing.assert_close(y, torch.matmul(a, b), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(da, ea, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(db, eb, rtol=1e-12, atol=1e-12)
    training = onnx.load_from_string(program.training_graph_onnx())
    ops = [n.op_type for n in training.graph.node]
    assert "FusedMatMulSumToShape" in ops and "SumToShape" not in ops, ops


def test_gemm_profile_records_every_product_by_shape() -> None:
    """With profiling on, each GEMM of a training step is recorded under its shape: a
    bias-free Linear's forward, input gradient and weight gradient are three products of
    2*M*N*K flops each, whatever transposes the optimized graph chose."""
    from ortmodule import ORTModule

    batch, n_in, n_out = 8, 32, 16
    model = ORTModule(torch.nn.Linear(n_in, n_out, bias=False))
    x = torch.randn(batch, n_in, requires_grad=True)
    model(x).sum().backward()  # builds the graphs outside the profile
    _C.set_profiling(True)
    try:
        _C.gemm_profile_snapshot(reset=True)
        model(x).sum().backward()
        rows = _C.gemm_profile_snapshot(reset=True)
    finally:
        _C.set_profiling(False)
    assert sum(calls for calls, _, _ in rows.values()) == 3, rows
    assert sum(flops for _, _, flops in rows.values()) == 3 * 2 * batch * n_in * n_out, rows
    for shape, (_, seconds, _) in rows.items():
        trans, dims = shape.split(" ", 1)
        assert set(trans) <= {"N", "T"} and len(trans) == 2, shape
        assert sorted(int(d) for d in dims.split("x")) == sorted([batch, n_in, n_out]), shape
        assert seconds > 0, shape
    model(x).sum().backward()
    assert not _C.gemm_profile_snapshot(reset=True)  # profiling off: nothing recorded
