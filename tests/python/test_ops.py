"""Per-op tests generated from the op table: forward against the ONNX reference
implementation, gradients against finite differences in double precision."""

from __future__ import annotations

import dataclasses

import ml_dtypes
import numpy as np
import onnx
import pytest
import torch
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from ortmodule import _C
from tests.python.op_samples import SAMPLES, Sample
from tests.python.op_samples_large import LARGE_SAMPLES, NO_LARGE_SAMPLE

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
        for i, sample in enumerate(row_samples(row)):
            if differentiable_only and not grad_names(sample):
                continue
            cases.append(pytest.param(row, sample, id=f"{row_id(row)}-{i}"))
    return cases


def row_samples(row: dict) -> list[Sample]:
    """The samples of the row's op whose opset the row covers (ops of other domains than
    the ONNX default have one row whatever the opset)."""
    samples = SAMPLES.get(row["op_type"], [])
    if row["domain"] not in ("", "ai.onnx"):
        return samples
    return [s for s in samples if row["since_version"] <= s.opset <= row["until_version"]]


def row_id(row: dict) -> str:
    """Op type, with the opset range for the rows of an op with several."""
    versions = [r for r in ROWS if r["op_type"] == row["op_type"] and r["domain"] == row["domain"]]
    if len(versions) == 1:
        return row["op_type"]
    return f"{row['op_type']}@{row['since_version']}"


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
    """numpy -> torch; bfloat16 (ml_dtypes, which torch.from_numpy does not know) by bits.
    Scalars stay 0-d (np.ascontiguousarray alone makes them 1-d)."""
    v = np.ascontiguousarray(v).reshape(np.shape(v))
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
    missing = [row_id(r) for r in ROWS if not row_samples(r)]
    assert not missing, f"op-table rows without samples (at their opsets) in op_samples.py: {missing}"


def test_newest_opset_is_onnx_newest() -> None:
    """The loader accepts opsets up to the newest the pinned onnx defines: the op table's
    rows were checked against every version up to it."""
    assert _C.max_onnx_opset == onnx.defs.onnx_opset_version()


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
        # Integer and bool outputs (ArgMax, comparison results) carry no gradient, nor do
        # statistics, indices and masks (the row's grad_outputs).
        outputs = _C.run(program, [feed[n] for n in names])
        return tuple(y for y, d in zip(outputs, program.output_differentiable)
                     if d and y.is_floating_point())

    diff = [base[n].clone().requires_grad_(True) for n in wrt]
    assert torch.autograd.gradcheck(
        run, tuple(diff), eps=1e-6, atol=row["grad_atol"], rtol=row["grad_rtol"]
    )


# ---- the CUDA kernels: every sample of a row with one, on a GPU against the CPU engine ----
# (itself checked against onnx.reference and finite differences above). Samples with inputs
# of other dtypes than float32/float64 (and int64 shape inputs) are left to the CPU.

CUDA_ROWS = [r for r in ROWS if r["cuda"] == "yes"]
CUDA_DTYPES = (np.float32, np.float64, np.int64)
HAS_GPU = _C.cuda_info()["compiled"] and torch.cuda.is_available()
if HAS_GPU:
    # The CUDA Conv kernels run torch's cuDNN convolution, which follows torch's TF32 switch
    # (on by default): the float32 tolerances below are full float32's.
    torch.backends.cudnn.allow_tf32 = False


def _cuda_cases() -> list:
    return [case for case in _cases(CUDA_ROWS)
            if all(v.dtype in CUDA_DTYPES for v in case.values[1].inputs.values())]


@pytest.mark.skipif(not HAS_GPU, reason="no CUDA device visible (or a build without CUDA "
                    "kernels): the CUDA kernels run only on a machine with a GPU")
@pytest.mark.parametrize("device", ["cuda"])
@pytest.mark.parametrize("row,sample", _cuda_cases())
def test_forward_on_device_matches_cpu(row: dict, sample: Sample, device: str) -> None:
    program = _C.Program(build_model(row["op_type"], sample).SerializeToString(), [], [])
    inputs = [to_torch(v) for v in sample.inputs.values()]

    def run(feed: list[torch.Tensor]) -> list[torch.Tensor]:
        if sample.random:
            # The same seed for both runs: the device draws the CPU's mask (Dropout).
            torch.manual_seed(1234)
        return _C.run(program, feed)

    # Each run gets its own copies: BatchNormalization updates its running statistics in
    # place, into the fed tensors.
    expected = run([t.clone() for t in inputs])
    got = run([t.to(device, copy=True) for t in inputs])
    for g, e in zip(got, expected):
        assert g.device.type == device
        tight = e.dtype == torch.float64
        torch.testing.assert_close(g.cpu(), e, rtol=1e-12 if tight else 1e-5,
                                   atol=1e-12 if tight else 1e-6, equal_nan=True)


def _cuda_kernel_missing(graph: onnx.GraphProto, opset: int) -> list[str]:
    """The ops of `graph` whose op-table row has neither a CUDA kernel nor runs on the host."""
    missing = []
    for node in graph.node:
        rows = [r for r in _C.op_table() if r["op_type"] == node.op_type
                and r["domain"] == node.domain
                and (node.domain or r["since_version"] <= opset <= r["until_version"])]
        if not rows or rows[0]["cuda"] not in ("yes", "host"):
            missing.append(f"{node.domain or 'ai.onnx'}.{node.op_type}")
    return missing


def _forward_and_grads(program: object, sample: Sample, wrt: list[str], device: str,
                       upstream: list[np.ndarray]) -> list[torch.Tensor]:
    feed = {n: to_torch(v).to(device) for n, v in sample.inputs.items()}
    diff = {n: feed[n].requires_grad_(True) for n in wrt}
    outputs = _C.run(program, [feed[n] for n in sample.inputs])
    flows = [y for y, d in zip(outputs, program.output_differentiable)
             if d and y.is_floating_point()]
    grads = torch.autograd.grad(flows, [diff[n] for n in wrt],
                                [torch.from_numpy(w).to(y) for w, y in zip(upstream, flows)],
                                allow_unused=True)
    return [y.detach() for y in outputs] + [
        torch.zeros_like(diff[n]) if g is None else g for n, g in zip(wrt, grads)]


def _cuda_grad_cases() -> list:
    return [case for case in _cases([r for r in GRAD_ROWS if r["cuda"] == "yes"],
                                    differentiable_only=True)
            if not case.values[1].random
            and all(v.dtype in CUDA_DTYPES for v in case.values[1].inputs.values())]


@pytest.mark.skipif(not HAS_GPU, reason="no CUDA device visible (or a build without CUDA "
                    "kernels): the CUDA kernels run only on a machine with a GPU")
@pytest.mark.parametrize("device", ["cuda"])
@pytest.mark.parametrize("row,sample", _cuda_grad_cases())
def test_gradient_on_device_matches_cpu(row: dict, sample: Sample, device: str) -> None:
    """The gradient program of the finite-difference check, on the device against the CPU,
    for the rows whose forward and gradient ops all have CUDA kernels."""
    wrt = grad_names(sample)
    program = _C.Program(build_model(row["op_type"], sample).SerializeToString(), [], wrt)
    missing = _cuda_kernel_missing(onnx.load_from_string(program.training_graph_onnx()).graph,
                                   sample.opset)
    if missing:
        pytest.skip(f"the gradient program uses ops without a CUDA kernel: {sorted(set(missing))}")
    gen = np.random.default_rng(3)
    flows = [y for y, d in zip(_C.run(program, [to_torch(v) for v in sample.inputs.values()]),
                               program.output_differentiable) if d and y.is_floating_point()]
    upstream = [gen.uniform(-1, 1, size=tuple(y.shape)) for y in flows]
    expected = _forward_and_grads(program, sample, wrt, "cpu", upstream)
    got = _forward_and_grads(program, sample, wrt, device, upstream)
    for g, e in zip(got, expected):
        assert g.device.type == device
        tight = e.dtype == torch.float64
        torch.testing.assert_close(g.cpu(), e, rtol=1e-12 if tight else 1e-5,
                                   atol=1e-12 if tight else 1e-6)


# ---- float32 at sizes that cross the parallel grain (op_samples_large.py) ----

def _row_covers(row: dict, sample: Sample) -> bool:
    return (row["domain"] not in ("", "ai.onnx")
            or row["since_version"] <= sample.opset <= row["until_version"])


LARGE_CASES = [
    pytest.param(row, sample, id=f"{row['op_type']}-large{i}")
    for row in ROWS for i, sample in enumerate(LARGE_SAMPLES.get(row["op_type"], []))
    if _row_covers(row, sample)
]


@pytest.fixture
def threads():
    """At least two threads, so that parallel_for splits the large samples."""
    before = torch.get_num_threads()
    torch.set_num_threads(max(2, before))
    yield
    torch.set_num_threads(before)


def test_every_row_has_large_samples() -> None:
    missing = [r["op_type"] for r in ROWS
               if not LARGE_SAMPLES.get(r["op_type"]) and r["op_type"] not in NO_LARGE_SAMPLE]
    assert not missing, f"op-table rows without samples in op_samples_large.py: {missing}"


def _large_grad_names(sample: Sample) -> list[str]:
    if sample.grad is not None:
        return sample.grad
    return [n for n, v in sample.inputs.items() if v.dtype == np.float32]


def _as_float64(sample: Sample) -> Sample:
    def up(d: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {n: v.astype(np.float64) if v.dtype == np.float32 else v for n, v in d.items()}

    return dataclasses.replace(sample, inputs=up(sample.inputs), constants=up(sample.constants))


def _check_dropout(sample: Sample, outputs: list[torch.Tensor]) -> None:
    x = sample.inputs["x"]
    ratio = float(sample.constants["ratio"])
    y, mask = (o.numpy() for o in outputs)
    assert mask.dtype == np.bool_ and mask.shape == x.shape
    np.testing.assert_allclose(y, np.where(mask, x / np.float32(1 - ratio), 0), rtol=1e-6,
                               atol=0)
    assert abs(mask.mean() - (1 - ratio)) < 0.01, mask.mean()


@pytest.mark.parametrize("row,sample", LARGE_CASES)
def test_large_float32_forward(row: dict, sample: Sample, threads: None) -> None:
    model = build_model(row["op_type"], sample)
    program = _C.Program(model.SerializeToString(), [], [])
    outputs = _C.run(program, [torch.from_numpy(v.copy()) for v in sample.inputs.values()])
    assert len(outputs) == sample.num_outputs
    if sample.random:
        _check_dropout(sample, outputs)
        return
    if sample.expected is not None:
        reference = sample.expected({**sample.constants, **sample.inputs})
    else:
        reference = ReferenceEvaluator(model).run(None, dict(sample.inputs))
    assert len(reference) == sample.num_outputs
    for i, (got, expected) in enumerate(zip(outputs, reference)):
        expected = np.asarray(expected)
        got = got.numpy()
        assert got.shape == expected.shape, f"output {i}: shape {got.shape} != {expected.shape}"
        assert got.dtype == expected.dtype, f"output {i}: dtype {got.dtype} != {expected.dtype}"
        if expected.dtype.kind == "f":
            scale = float(np.max(np.abs(expected[np.isfinite(expected)]), initial=1.0))
            np.testing.assert_allclose(got, expected, rtol=sample.reference_rtol,
                                       atol=1e-6 * scale, err_msg=f"output {i}")
        else:
            np.testing.assert_array_equal(got, expected, err_msg=f"output {i}")


def _run_with_grads(program: object, sample: Sample, wrt: list[str], dtype: torch.dtype,
                    upstream: list[np.ndarray] | None):
    feed = {n: torch.from_numpy(v.copy()) for n, v in sample.inputs.items()}
    diff = {n: feed[n].requires_grad_(True) for n in wrt}
    outputs = _C.run(program, [feed[n] for n in sample.inputs])
    flows = [y for y, d in zip(outputs, program.output_differentiable) if d]
    if upstream is None:
        gen = np.random.default_rng(3)
        upstream = [gen.uniform(-1, 1, size=tuple(y.shape)) for y in flows]
    grads = torch.autograd.grad(flows, [diff[n] for n in wrt],
                                [torch.from_numpy(w).to(dtype) for w in upstream],
                                allow_unused=True)
    return upstream, [torch.zeros_like(diff[n]) if g is None else g
                      for n, g in zip(wrt, grads)]


LARGE_GRAD_CASES = [
    p for p in LARGE_CASES
    if p.values[0]["has_gradient"] and not p.values[1].random and _large_grad_names(p.values[1])
]


@pytest.mark.parametrize("row,sample", LARGE_GRAD_CASES)
def test_large_float32_gradient(row: dict, sample: Sample, threads: None) -> None:
    """float32 gradients against the engine's float64 ones; the float64 ones against a
    directional central difference at the same size."""
    wrt = _large_grad_names(sample)
    s64 = _as_float64(sample)
    p32 = _C.Program(build_model(row["op_type"], sample).SerializeToString(), [], wrt)
    p64 = _C.Program(build_model(row["op_type"], s64).SerializeToString(), [], wrt)
    assert list(p32.output_differentiable) == list(p64.output_differentiable)
    upstream, g64 = _run_with_grads(p64, s64, wrt, torch.float64, None)
    _, g32 = _run_with_grads(p32, sample, wrt, torch.float32, upstream)
    for n, a, b in zip(wrt, g32, g64):
        scale = float(b.abs().max()) or 1.0
        np.testing.assert_allclose(a.double().numpy(), b.numpy(), rtol=1e-3, atol=1e-4 * scale,
                                   err_msg=f"gradient of {n}")

    gen = np.random.default_rng(5)
    direction = {n: gen.uniform(-1, 1, size=s64.inputs[n].shape) for n in wrt}
    flows = [i for i, d in enumerate(p64.output_differentiable) if d]

    def phi(t: float) -> float:
        feed = dict(s64.inputs)
        for n in wrt:
            feed[n] = s64.inputs[n] + t * direction[n]
        outs = _C.run(p64, [torch.from_numpy(np.ascontiguousarray(feed[n])) for n in feed])
        return sum(float(np.sum(w * outs[i].numpy())) for i, w in zip(flows, upstream))

    eps = 1e-6
    numeric = (phi(eps) - phi(-eps)) / (2 * eps)
    analytic = sum(float(np.sum(g.numpy() * direction[n])) for n, g in zip(wrt, g64))
    assert abs(numeric - analytic) <= 1e-5 * max(1.0, abs(analytic)), (numeric, analytic)


def test_gradient_into_a_statistic_output_is_refused() -> None:
    # LayerNormalization's mean output feeds a loss: its gradient is not implemented, so
    # building the gradient graph must fail instead of silently dropping that term.
    x = helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, 4])
    y = helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)
    scale = numpy_helper.from_array(np.ones(4, np.float32), "scale")
    nodes = [helper.make_node("LayerNormalization", ["x", "scale"], ["ln", "mean"], name="ln"),
             helper.make_node("Mul", ["ln", "mean"], ["y"], name="mul")]
    model = helper.make_model(helper.make_graph(nodes, "g", [x], [y], initializer=[scale]),
                              opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(RuntimeError, match=r"output 1 \('mean'\) of LayerNormalization"):
        _C.Program(model.SerializeToString(), [], ["x"])
