"""ONNX loading from Python: protobuf coexistence with torch and onnx, clear errors."""

from __future__ import annotations

import subprocess
import sys

import onnx
import pytest
import torch
from onnx import helper

from ortmodule import _C


def _relu_model(op: str = "Relu") -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2, 3])
    node = helper.make_node(op, ["x"], ["y"], name="the_node")
    graph = helper.make_graph([node], "g", [x], [y])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_torch_onnx_and_engine_share_a_process() -> None:
    # A fresh interpreter importing all three, in both orders, then round-tripping a model
    # exported by torch through onnx's parser and ours.
    code = """
import io, torch, onnx
from ortmodule import _C
m = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.ReLU())
buf = io.BytesIO()
torch.onnx.export(m, (torch.randn(1, 3),), buf, dynamo=False)
model = onnx.load_from_string(buf.getvalue())
onnx.checker.check_model(model)
info = _C.load_onnx(model.SerializeToString())
assert [n[1] for n in info["nodes"]] == ["Gemm", "Relu"], info
"""
    for prelude in ("", "from ortmodule import _C\n"):
        result = subprocess.run([sys.executable, "-c", prelude + code], capture_output=True,
                                text=True, timeout=300, check=False)
        assert result.returncode == 0, result.stderr


def test_loads_file(tmp_path) -> None:
    path = tmp_path / "relu.onnx"
    onnx.save(_relu_model(), str(path))
    info = _C.load_onnx_file(str(path))
    assert info["nodes"] == [("", "Relu", "the_node")]


def test_malformed_file_gives_clear_error(tmp_path) -> None:
    path = tmp_path / "broken.onnx"
    path.write_bytes(b"\x0a\xff\xff\xff\xff garbage")
    with pytest.raises(ValueError, match="do not parse as an ONNX ModelProto.*broken.onnx"):
        _C.load_onnx_file(str(path))


def test_missing_file() -> None:
    with pytest.raises(ValueError, match="cannot open ONNX file"):
        _C.load_onnx_file("/nonexistent/model.onnx")


def test_unsupported_op_names_op_node_and_supported_list() -> None:
    with pytest.raises(RuntimeError) as info:
        _C.load_onnx(_relu_model("Round").SerializeToString())
    message = str(info.value)
    assert "Round node 'the_node'" in message
    assert "Supported ops:" in message and "Conv" in message


def test_program_runs_exported_model() -> None:
    program = _C.Program(_relu_model().SerializeToString(), [], [])
    x = torch.randn(2, 3)
    (y,) = _C.run(program, [x])
    torch.testing.assert_close(y, torch.relu(x))


def test_wrong_dtype_input_is_rejected_clearly() -> None:
    program = _C.Program(_relu_model().SerializeToString(), [], [])
    with pytest.raises(RuntimeError, match="Relu node 'the_node'.*int64"):
        _C.run(program, [torch.ones(2, 3, dtype=torch.int64)])
