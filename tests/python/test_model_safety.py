"""Crafted and malformed models: every one must end in a clear Python exception that names
the node (or tensor) and the attribute or input at fault, never a crash, a hang or a write
outside a buffer.

The cases run in child interpreters: a case that crashes or hangs fails its own test instead
of killing pytest. One child runs the cases in order and reports each as it finishes; when a
child dies, a fresh one resumes after the case that killed it.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess
import sys
from collections.abc import Callable

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

ROOT = pathlib.Path(__file__).resolve().parents[2]
REGRESSIONS = ROOT / "tests" / "fuzz" / "regressions"
CASE_TIMEOUT_S = 60

F = TensorProto.FLOAT
I64 = TensorProto.INT64


def _model(nodes, inputs, outputs, initializers=(), opset: int = 17) -> bytes:
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    return model.SerializeToString()


def _vi(name: str, elem: int, shape) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, shape)


def _unary(op: str, x_shape, **attrs) -> tuple[bytes, list[np.ndarray]]:
    node = helper.make_node(op, ["x"], ["y"], name="bad_node", **attrs)
    model = _model([node], [_vi("x", F, x_shape)], [_vi("y", F, None)])
    return model, [np.ones(x_shape, np.float32)]


def _with_const(op: str, x: np.ndarray, const: np.ndarray, **attrs):
    """op(x, c) with c an initializer."""
    node = helper.make_node(op, ["x", "c"], ["y"], name="bad_node", **attrs)
    init = numpy_helper.from_array(const, "c")
    elem = helper.np_dtype_to_tensor_dtype(x.dtype)
    model = _model([node], [_vi("x", elem, list(x.shape))], [_vi("y", elem, None)], [init])
    return model, [x]


def _const_only(op: str, const: np.ndarray, **attrs):
    """op(c) with c an initializer, no graph input."""
    node = helper.make_node(op, ["c"], ["y"], name="bad_node", **attrs)
    model = _model([node], [], [_vi("y", F, None)], [numpy_helper.from_array(const, "c")])
    return model, []


def _range(start: float, limit: float, delta: float):
    inits = [numpy_helper.from_array(np.array(v, np.float32), n)
             for n, v in (("s", start), ("l", limit), ("d", delta))]
    node = helper.make_node("Range", ["s", "l", "d"], ["y"], name="bad_node")
    return _model([node], [], [_vi("y", F, None)], inits), []


def _initializer_model(tensor: TensorProto):
    node = helper.make_node("Identity", [tensor.name], ["y"], name="copy")
    return _model([node], [], [_vi("y", tensor.data_type, None)], [tensor]), []


def _raw_tensor(name: str, dims, raw: bytes, elem: int = F) -> TensorProto:
    t = TensorProto()
    t.name = name
    t.data_type = elem
    t.dims.extend(dims)
    t.raw_data = raw
    return t


def _typed_tensor(name: str, elem: int, dims, **fields) -> TensorProto:
    """A tensor whose typed data field holds what `fields` say, whatever the dims."""
    t = TensorProto()
    t.name = name
    t.data_type = elem
    t.dims.extend(dims)
    for field, values in fields.items():
        getattr(t, field).extend(values)
    return t


def _gather(indices: np.ndarray, axis: int = 0):
    return _with_const("Gather", np.arange(6, dtype=np.float32).reshape(2, 3), indices, axis=axis)


# name -> (builder, regex the error message must match). Every message also names the node.
CASES: dict[str, tuple[Callable[[], tuple[bytes, list[np.ndarray]]], str]] = {
    # The three known crafted models.
    "transpose_perm_repeated": (lambda: _unary("Transpose", [2, 3], perm=[0, 0]),
                                r"bad_node.*'perm'.*\[0, 0\].*permutation"),
    "maxpool_zero_strides": (lambda: _unary("MaxPool", [1, 1, 4, 4], kernel_shape=[2, 2],
                                            strides=[0, 0]),
                             r"bad_node.*'strides'.*positive"),
    "initializer_negative_dim": (lambda: _initializer_model(_raw_tensor("w", [-1, 4], b"")),
                                 r"tensor 'w'.*dimension -1"),
    # Loader: tensors.
    "initializer_dims_overflow": (lambda: _initializer_model(
        _raw_tensor("w", [1 << 40, 1 << 40], b"")), r"tensor 'w'.*overflow"),
    "initializer_too_large": (lambda: _initializer_model(
        _raw_tensor("w", [1 << 60], b"")), r"tensor 'w'.*(overflow|too large)"),
    "initializer_raw_size_mismatch": (lambda: _initializer_model(
        _raw_tensor("w", [4], b"\0" * 12)), r"tensor 'w'.*12 bytes.*expected 16"),
    "initializer_float_data_mismatch": (lambda: _initializer_model(
        _typed_tensor("w", F, [3], float_data=[1.0, 2.0])), r"tensor 'w'.*2 elements.*3"),
    "initializer_int64_data_mismatch": (lambda: _initializer_model(
        _typed_tensor("w", I64, [2, 2], int64_data=[1, 2, 3])), r"tensor 'w'.*3 elements.*4"),
    "graph_input_negative_dim": (lambda: (_model(
        [helper.make_node("Relu", ["x"], ["y"], name="r")],
        [_vi("x", F, [-3])], [_vi("y", F, None)]), [np.ones(1, np.float32)]),
        r"'x'.*dimension -3"),
    # Loader: attributes of the wrong kind.
    "attribute_ints_for_int": (lambda: _gather(np.array([0], np.int64), axis=[0]),
                               r"bad_node.*'axis'.*int.*ints"),
    "attribute_int_for_ints": (lambda: _unary("Transpose", [2, 3], perm=1),
                               r"bad_node.*'perm'.*ints.*int"),
    # Shape rules: attributes.
    "transpose_perm_out_of_range": (lambda: _unary("Transpose", [2, 3], perm=[0, 5]),
                                    r"bad_node.*'perm'"),
    "transpose_perm_wrong_length": (lambda: _unary("Transpose", [2, 3], perm=[1, 0, 2]),
                                    r"bad_node.*'perm'"),
    "maxpool_kernel_rank": (lambda: _unary("MaxPool", [1, 1, 4, 4], kernel_shape=[2]),
                            r"bad_node.*'kernel_shape'.*2"),
    "maxpool_negative_pads": (lambda: _unary("MaxPool", [1, 1, 4, 4], kernel_shape=[2, 2],
                                             pads=[-1, 0, 0, 0]), r"bad_node.*'pads'"),
    "maxpool_zero_dilations": (lambda: _unary("MaxPool", [1, 1, 4, 4], kernel_shape=[2, 2],
                                              dilations=[0, 1]), r"bad_node.*'dilations'"),
    "maxpool_zero_kernel": (lambda: _unary("MaxPool", [1, 1, 4, 4], kernel_shape=[0, 2]),
                            r"bad_node.*'kernel_shape'"),
    "maxpool_kernel_larger_than_input": (lambda: _unary("MaxPool", [1, 1, 4, 4],
                                                        kernel_shape=[9, 2]),
                                         r"bad_node.*kernel"),
    "avgpool_zero_strides": (lambda: _unary("AveragePool", [1, 1, 4, 4], kernel_shape=[2, 2],
                                            strides=[1, 0]), r"bad_node.*'strides'"),
    "conv_group_mismatch": (lambda: _with_const(
        "Conv", np.ones((1, 3, 4, 4), np.float32), np.ones((2, 3, 1, 1), np.float32), group=2),
        r"bad_node.*group"),
    "conv_zero_group": (lambda: _with_const(
        "Conv", np.ones((1, 3, 4, 4), np.float32), np.ones((2, 3, 1, 1), np.float32), group=0),
        r"bad_node.*'group'"),
    "conv_zero_strides": (lambda: _with_const(
        "Conv", np.ones((1, 1, 4, 4), np.float32), np.ones((1, 1, 2, 2), np.float32),
        strides=[0, 0]), r"bad_node.*'strides'"),
    "conv_weight_rank": (lambda: _with_const(
        "Conv", np.ones((1, 1, 4, 4), np.float32), np.ones((1, 1, 2), np.float32)),
        r"bad_node.*weight|bad_node.*input 1"),
    "softmax_axis_out_of_range": (lambda: _unary("Softmax", [2, 3], axis=4),
                                  r"bad_node.*axis 4"),
    "concat_axis_out_of_range": (lambda: _with_const(
        "Concat", np.ones((2, 3), np.float32), np.ones((2, 3), np.float32), axis=-3),
        r"bad_node.*axis -3"),
    "split_sizes_do_not_sum": (lambda: _with_const(
        "Split", np.ones((4, 3), np.float32), np.array([1, 2], np.int64)),
        r"bad_node.*split"),
    "split_negative_size": (lambda: _with_const(
        "Split", np.ones((4, 3), np.float32), np.array([5, -1], np.int64)),
        r"bad_node.*split"),
    "reduce_axes_duplicated": (lambda: _with_const(
        "ReduceSum", np.ones((2, 3), np.float32), np.array([1, -1], np.int64)),
        r"bad_node.*axis.*(duplicate|twice|more than once)"),
    "unsqueeze_axes_duplicated": (lambda: _with_const(
        "Unsqueeze", np.ones((2, 3), np.float32), np.array([0, 0], np.int64)),
        r"bad_node.*axis.*(duplicate|twice|more than once)"),
    "squeeze_non_one_dim": (lambda: _with_const(
        "Squeeze", np.ones((2, 3), np.float32), np.array([0], np.int64)),
        r"bad_node"),
    "gather_index_out_of_range": (lambda: _gather(np.array([0, 7], np.int64)),
                                  r"bad_node.*index 7.*out of range"),
    "gather_negative_index_out_of_range": (lambda: _gather(np.array([-3], np.int64)),
                                           r"bad_node.*index -3.*out of range"),
    "gather_elements_index_out_of_range": (lambda: _with_const(
        "GatherElements", np.ones((2, 3), np.float32), np.array([[0, 9, 0]], np.int64), axis=1),
        r"bad_node.*index 9.*out of range"),
    "scatter_elements_index_out_of_range": (lambda: (_model(
        [helper.make_node("ScatterElements", ["x", "i", "u"], ["y"], name="bad_node", axis=0)],
        [_vi("x", F, [2, 3]), _vi("u", F, [1, 3])], [_vi("y", F, None)],
        [numpy_helper.from_array(np.array([[0, 5, 1]], np.int64), "i")]),
        [np.ones((2, 3), np.float32), np.ones((1, 3), np.float32)]),
        r"bad_node.*index 5.*out of range"),
    "gather_nd_index_out_of_range": (lambda: _with_const(
        "GatherND", np.ones((2, 3), np.float32), np.array([[1, 3]], np.int64)),
        r"bad_node.*index 3.*out of range"),
    "scatter_nd_index_out_of_range": (lambda: (_model(
        [helper.make_node("ScatterND", ["x", "i", "u"], ["y"], name="bad_node")],
        [_vi("x", F, [4]), _vi("u", F, [1])], [_vi("y", F, None)],
        [numpy_helper.from_array(np.array([[4]], np.int64), "i")]),
        [np.ones(4, np.float32), np.ones(1, np.float32)]),
        r"bad_node.*index 4.*out of range"),
    "embedding_like_gather_huge_index": (lambda: _gather(np.array([1 << 62], np.int64)),
                                         r"bad_node.*out of range"),
    # Shape rules: sizes read from shape tensors.
    "reshape_negative_dim": (lambda: _with_const(
        "Reshape", np.ones((2, 3), np.float32), np.array([-2, 3], np.int64)),
        r"bad_node.*-2"),
    "reshape_two_inferred_dims": (lambda: _with_const(
        "Reshape", np.ones((2, 3), np.float32), np.array([-1, -1], np.int64)),
        r"bad_node.*-1"),
    "expand_negative_dim": (lambda: _with_const(
        "Expand", np.ones((1, 3), np.float32), np.array([-4, 3], np.int64)),
        r"bad_node.*-4"),
    "expand_huge": (lambda: _with_const(
        "Expand", np.ones((1, 1), np.float32), np.array([1 << 40, 1 << 40], np.int64)),
        r"bad_node.*(overflow|too large|exceeds)"),
    "constant_of_shape_negative": (lambda: _const_only(
        "ConstantOfShape", np.array([3, -1], np.int64)), r"bad_node.*-1"),
    "constant_of_shape_huge": (lambda: _const_only(
        "ConstantOfShape", np.array([1 << 31, 1 << 31, 1 << 31], np.int64)),
        r"bad_node.*(overflow|too large|exceeds)"),
    "range_huge_count": (lambda: _range(0.0, 1e30, 1.0), r"bad_node.*(too large|exceeds)"),
    "range_zero_delta": (lambda: _range(0.0, 5.0, 0.0), r"bad_node.*delta"),
    "range_nan": (lambda: _range(0.0, float("nan"), 1.0), r"bad_node"),
    "tile_negative_repeats": (lambda: _with_const(
        "Tile", np.ones((2, 3), np.float32), np.array([1, -2], np.int64)),
        r"bad_node.*repeats.*-2"),
    "tile_repeats_wrong_length": (lambda: _with_const(
        "Tile", np.ones((2, 3), np.float32), np.array([2], np.int64)),
        r"bad_node.*repeats"),
    "pad_huge": (lambda: _with_const(
        "Pad", np.ones((2, 3), np.float32), np.array([0, 0, 1 << 40, 1 << 40], np.int64)),
        r"bad_node.*(too large|exceeds|overflow)"),
    "pad_negative_below_zero": (lambda: _with_const(
        "Pad", np.ones((2, 3), np.float32), np.array([0, -5, 0, 0], np.int64)),
        r"bad_node.*pad"),
    "pad_wrong_length": (lambda: _with_const(
        "Pad", np.ones((2, 3), np.float32), np.array([1, 1, 1], np.int64)),
        r"bad_node.*pads"),
    "slice_zero_step": (lambda: (_model(
        [helper.make_node("Slice", ["x", "s", "e", "a", "st"], ["y"], name="bad_node")],
        [_vi("x", F, [4])], [_vi("y", F, None)],
        [numpy_helper.from_array(np.array([v], np.int64), n)
         for n, v in (("s", 0), ("e", 4), ("a", 0), ("st", 0))]), [np.ones(4, np.float32)]),
        r"bad_node.*step"),
    "slice_axes_duplicated": (lambda: (_model(
        [helper.make_node("Slice", ["x", "s", "e", "a"], ["y"], name="bad_node")],
        [_vi("x", F, [4, 4])], [_vi("y", F, None)],
        [numpy_helper.from_array(np.array(v, np.int64), n)
         for n, v in (("s", [0, 0]), ("e", [2, 2]), ("a", [0, 0]))]),
        [np.ones((4, 4), np.float32)]), r"bad_node.*ax"),
    "flatten_axis_out_of_range": (lambda: _unary("Flatten", [2, 3], axis=5),
                                  r"bad_node.*axis 5"),
    "trilu_scalar_input": (lambda: _unary("Trilu", [3]), r"bad_node.*rank"),
    "cumsum_axis_out_of_range": (lambda: _with_const(
        "CumSum", np.ones((2, 3), np.float32), np.array(3, np.int64)), r"bad_node.*axis 3"),
    "argmax_axis_out_of_range": (lambda: _unary("ArgMax", [2, 3], axis=2),
                                 r"bad_node.*axis 2"),
    "layernorm_axis_out_of_range": (lambda: _with_const(
        "LayerNormalization", np.ones((2, 3), np.float32), np.ones(3, np.float32), axis=3),
        r"bad_node.*axis 3"),
    "gemm_inner_mismatch": (lambda: _with_const(
        "Gemm", np.ones((2, 3), np.float32), np.ones((4, 5), np.float32)),
        r"bad_node.*(3|4)"),
    # Clip before opset 11 reads float attributes as bounds; NaN has no integer value.
    "clip_nan_bound_integer_input": (lambda: (_model(
        [helper.make_node("Clip", ["x"], ["y"], name="bad_node", min=float("nan"), max=0.5)],
        [_vi("x", TensorProto.UINT8, [3])], [_vi("y", TensorProto.UINT8, None)], opset=6),
        [np.array([1, 2, 3], np.uint8)]), r"bad_node.*attribute min.*NaN.*uint8"),
    # A standard op missing a required input, or given more than its schema takes, is refused
    # at load (the schemas' arity, ops/onnx_arity.h) before any rule reads the inputs.
    "conv_missing_weight": (lambda: (_model(
        [helper.make_node("Conv", ["x", ""], ["y"], name="bad_node")],
        [_vi("x", TensorProto.FLOAT, [1, 1, 3, 3])], [_vi("y", TensorProto.FLOAT, None)]),
        [np.ones((1, 1, 3, 3), np.float32)]), r"bad_node.*missing.*input 1 \(W\)"),
    "relu_extra_input": (lambda: (_model(
        [helper.make_node("Relu", ["x", "x"], ["y"], name="bad_node")],
        [_vi("x", TensorProto.FLOAT, [3])], [_vi("y", TensorProto.FLOAT, None)]),
        [np.ones(3, np.float32)]), r"bad_node.*2 inputs.*at most 1"),
    "matmul_rank0": (lambda: _with_const(
        "MatMul", np.ones((2, 3), np.float32), np.array(1.0, np.float32)), r"bad_node"),
}


def _child_source(names: list[str]) -> str:
    return f"""
import json, sys
import torch
from ortmodule import _C
from tests.python.test_model_safety import CASES, load_bytes_case
for name in {names!r}:
    print(json.dumps({{"start": name}}), flush=True)
    if name.startswith("regression:"):
        model, inputs = load_bytes_case(name[len("regression:"):]), []
    else:
        model, inputs = CASES[name][0]()
    try:
        program = _C.Program(model, [], [])
        names_in = program.input_names
        feed = [torch.from_numpy(a) for a in inputs]
        if len(feed) != len(names_in):
            feed = [torch.zeros(2) for _ in names_in]
        _C.run(program, feed)
        result = {{"name": name, "raised": None, "message": ""}}
    except Exception as e:  # reported to the parent, which judges it
        result = {{"name": name, "raised": type(e).__name__, "message": str(e)}}
    print(json.dumps(result), flush=True)
"""


def _run_cases(names: list[str]) -> dict[str, dict]:
    """Runs the named cases in child interpreters; a case that kills its child is recorded as
    a crash and the next child resumes after it."""
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    results: dict[str, dict] = {}
    pending = list(names)
    while pending:
        timeout = CASE_TIMEOUT_S + 10 * len(pending)
        try:
            proc = subprocess.run([sys.executable, "-c", _child_source(pending)],
                                  capture_output=True, text=True, timeout=timeout, cwd=ROOT,
                                  env=env, check=False)
            stdout, stderr, rc = proc.stdout, proc.stderr, proc.returncode
        except subprocess.TimeoutExpired as e:
            stdout = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
            stderr, rc = f"timed out after {timeout} s", "timeout"
        started = None
        for line in stdout.splitlines():
            if not line.startswith("{"):
                continue
            record = json.loads(line)
            if "start" in record:
                started = record["start"]
            else:
                results[record["name"]] = record
                started = None
        if started is None:
            if rc != 0:
                for name in pending:
                    results.setdefault(name, {"name": name, "crashed": f"rc={rc}: {stderr}"})
            break
        results[started] = {"name": started, "crashed": f"rc={rc}: {stderr[-3000:]}"}
        pending = pending[pending.index(started) + 1:]
    return results


def load_bytes_case(file_name: str) -> bytes:
    return (REGRESSIONS / file_name).read_bytes()


def _regression_files() -> list[str]:
    if not REGRESSIONS.is_dir():
        return []
    return sorted(p.name for p in REGRESSIONS.iterdir() if p.is_file())


@pytest.fixture(scope="module")
def outcomes() -> dict[str, dict]:
    return _run_cases(list(CASES) + ["regression:" + f for f in _regression_files()])


@pytest.mark.parametrize("name", list(CASES))
def test_crafted_model_raises_clear_error(outcomes, name: str) -> None:
    result = outcomes[name]
    assert "crashed" not in result, f"{name} crashed the process: {result['crashed']}"
    assert result["raised"] is not None, f"{name} ran without an error"
    assert result["raised"] in ("ValueError", "RuntimeError"), result
    message = result["message"]
    assert "internal error" not in message, message
    pattern = CASES[name][1]
    assert re.search(pattern, message, re.DOTALL), f"{name}: {message!r} does not match {pattern!r}"


@pytest.mark.parametrize("file_name", _regression_files())
def test_fuzz_regression_does_not_crash(outcomes, file_name: str) -> None:
    # Inputs the fuzzer once crashed on: any clear exception, or a clean run, is fine.
    result = outcomes["regression:" + file_name]
    assert "crashed" not in result, f"{file_name} crashed the process: {result['crashed']}"
    if result["raised"] is not None:
        assert result["raised"] in ("ValueError", "RuntimeError"), result
        assert "internal error" not in result["message"], result["message"]


def test_errors_inside_parallel_loops_reach_the_caller() -> None:
    # A Gather over many rows runs its copy loop on several threads; a bad index in the
    # middle must surface as the node's own error, on the calling thread.
    import torch

    from ortmodule import _C

    rows = 1 << 16
    idx = np.zeros(rows, np.int64)
    idx[rows // 2 + 7] = 99
    model, _ = _with_const("Gather", np.ones((4, 64), np.float32), idx)
    torch.set_num_threads(max(2, torch.get_num_threads()))
    program = _C.Program(model, [], [])
    with pytest.raises(RuntimeError, match=r"bad_node.*index 99.*out of range"):
        _C.run(program, [torch.ones(4, 64)])


def test_absurd_allocation_is_refused() -> None:
    import torch

    from ortmodule import _C

    # 2^31 x 2^31 float32 is far beyond any machine's memory; the engine must refuse it
    # before asking the OS.
    model, _ = _with_const("Expand", np.ones((1, 1), np.float32),
                           np.array([1 << 31, 1 << 31], np.int64))
    program = _C.Program(model, [], [])
    with pytest.raises(RuntimeError, match=r"bad_node"):
        _C.run(program, [torch.ones(1, 1)])


def test_fuzz_regressions_are_present() -> None:
    # An empty list would skip the replay above without failing.
    assert _regression_files(), "tests/fuzz/regressions/ holds no model files"
