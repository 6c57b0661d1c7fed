"""Per-op tests generated from the op table: forward against the ONNX reference
implementation, gradients against finite differences in double precision."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
import pytest
import torch
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from ortmodule import _C
from tests.python.op_samples import SAMPLES, Sample

BF16 = np.dtype(ml_dtypes.bfloat16)
ROWS = [r for r in _C.op_table() if not r["internal"]]
GRAD_ROWS = [r for r in ROWS if r["has_gradient"]]


def grad_names(sample: Sample) -> list[str]:
    if sample.grad is not None:
        return sample.grad
    return [n for n, v in sample.inputs.items() if v.dtype == np.float64]


def _cases(rows: list[dict], differentiable_only: bool = False) -> list:
    """One case per (row, sample); for gradient checks only the samples that have a
    differentiable input (an integer-only sample of a differentiable op has none)."""
    cases = []
    for row in rows:
        for i, sample in enumerate(SAMPLES.get(row["op_type"], [])):
            if differentiable_only and not grad_names(sample):
                continue
            cases.append(pytest.param(row, sample, id=f"{row['op_type']}-{i}"))
    return cases


def build_model(op: str, sample: Sample) -> onnx.ModelProto:
    order = sample.order or list(sample.inputs)
    inputs = [
        helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
        for n, v in sample.inputs.items()
    ]
    inits = [numpy_helper.from_array(v, n) for n, v in sample.constants.items()]
    attrs = dict(sample.attrs)
    if isinstance(attrs.get("value"), np.ndarray):
        attrs["value"] = numpy_helper.from_array(attrs["value"], "value")
    names = output_names(sample)
    node = helper.make_node(op, order, names, name=f"{op}_under_test", domain=sample.domain,
                            **attrs)
    outs = [helper.make_tensor_value_info(n, onnx.TensorProto.UNDEFINED, None) for n in names]
    graph = helper.make_graph([node], "single_op", inputs, outs, initializer=inits)
    opsets = [helper.make_opsetid("", sample.opset)]
    if sample.domain:
        opsets.append(helper.make_opsetid(sample.domain, 1))
    return helper.make_model(graph, opset_imports=opsets)


def to_torch(v: np.ndarray) -> torch.Tensor:
    """numpy -> torch; bfloat16 (ml_dtypes, which torch.from_numpy does not know) by bits."""
    v = np.ascontiguousarray(v)
    if v.dtype == BF16:
        return torch.from_numpy(v.view(np.int16).copy()).view(torch.bfloat16)
    return torch.from_numpy(v.copy())


def to_numpy(t: torch.Tensor) -> np.ndarray:
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(BF16)
    return t.numpy()


def output_names(sample: Sample) -> list[str]:
    return ["y"] if sample.num_outputs == 1 else [f"y{i}" for i in range(sample.num_outputs)]


def test_every_row_has_samples() -> None:
    missing = [r["op_type"] for r in ROWS if not SAMPLES.get(r["op_type"])]
    assert not missing, f"op-table rows without samples in op_samples.py: {missing}"


@pytest.mark.parametrize("row,sample", _cases(ROWS))
def test_forward_matches_onnx_reference(row: dict, sample: Sample) -> None:
    model = build_model(row["op_type"], sample)
    program = _C.Program(model.SerializeToString(), [], [])
    inputs = [to_torch(v) for v in sample.inputs.values()]
    outputs = _C.run(program, inputs)
    assert len(outputs) == sample.num_outputs
    if not sample.reference:
        assert tuple(outputs[0].shape) == sample.inputs[next(iter(sample.inputs))].shape
        return
    if sample.expected is not None:
        reference = sample.expected({**sample.constants, **sample.inputs})
    else:
        reference = ReferenceEvaluator(model).run(None, dict(sample.inputs))
    for got, expected in zip(outputs, reference):
        expected = np.asarray(expected)
        assert tuple(got.shape) == expected.shape, f"shape {tuple(got.shape)} != {expected.shape}"
        got = to_numpy(got)
        assert got.dtype == expected.dtype, f"dtype {got.dtype} != {expected.dtype}"
        if expected.dtype == BF16:  # compared as the float32 values they hold
            got, expected = got.astype(np.float32), expected.astype(np.float32)
        np.testing.assert_allclose(got, expected, rtol=sample.reference_rtol, atol=1e-12)


@pytest.mark.parametrize("row,sample", _cases(GRAD_ROWS, differentiable_only=True))
def test_gradient_matches_finite_differences(row: dict, sample: Sample) -> None:
    wrt = grad_names(sample)
    model = build_model(row["op_type"], sample)
    program = _C.Program(model.SerializeToString(), [], wrt)
    names = list(sample.inputs)
    base = {n: torch.from_numpy(v.copy()) for n, v in sample.inputs.items()}

    def run(*diff: torch.Tensor) -> tuple[torch.Tensor, ...]:
        feed = dict(base)
        feed.update(zip(wrt, diff))
        if sample.random:
            torch.manual_seed(1234)  # same mask on every evaluation
        # Integer and bool outputs (ArgMax, comparison results) carry no gradient.
        return tuple(y for y in _C.run(program, [feed[n] for n in names])
                     if y.is_floating_point())

    diff = [base[n].clone().requires_grad_(True) for n in wrt]
    assert torch.autograd.gradcheck(
        run, tuple(diff), eps=1e-6, atol=row["grad_atol"], rtol=row["grad_rtol"]
    )
