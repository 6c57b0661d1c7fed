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
        _C.load_onnx(_relu_model("STFT").SerializeToString())
    message = str(info.value)
    assert "STFT node 'the_node'" in message
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


def _single_node_model(op: str, opset: int, inputs: dict[str, list[int]], outputs: list[str],
                       initializers: list[onnx.TensorProto] | None = None,
                       **attrs: object) -> onnx.ModelProto:
    ins = [helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, s) for n, s in inputs.items()]
    outs = [helper.make_tensor_value_info(n, onnx.TensorProto.UNDEFINED, None) for n in outputs]
    node = helper.make_node(op, list(inputs), outputs, name="the_node", **attrs)
    graph = helper.make_graph([node], "g", ins, outs, initializer=initializers or [])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _run(model: onnx.ModelProto, *inputs: torch.Tensor) -> list[torch.Tensor]:
    return _C.run(_C.Program(model.SerializeToString(), [], []), list(inputs))


def test_initializer_listed_as_input_is_an_overridable_default() -> None:
    # Older models list every initializer among the graph inputs: the caller may leave them
    # out (the initializer is used) or pass them (the passed value is used).
    b = onnx.numpy_helper.from_array(torch.tensor([1.0, 2.0, 3.0]).numpy(), "b")
    model = _single_node_model("Add", 17, {"a": [2, 3], "b": [3]}, ["y"], [b])
    a = torch.zeros(2, 3)
    torch.testing.assert_close(_run(model, a)[0], torch.tensor([[1.0, 2.0, 3.0]] * 2),
                               rtol=0, atol=0)
    torch.testing.assert_close(_run(model, a, torch.ones(3))[0], torch.ones(2, 3), rtol=0, atol=0)
    with pytest.raises(ValueError, match=r"expects 2 inputs \(or the 1 without a default"):
        _run(model)


@pytest.mark.parametrize("op,opset,inputs,outputs,attrs,message", [
    # Training-mode BatchNormalization before opset 14 (five outputs).
    ("BatchNormalization", 9, {"x": [2, 3], "s": [3], "b": [3], "m": [3], "v": [3]},
     ["y", "mean"], {}, "output 1 (a training-mode statistic) is not supported before opset 14"),
    ("BatchNormalization", 7, {"x": [2, 3], "s": [3], "b": [3], "m": [3], "v": [3]},
     ["y"], {"spatial": 0}, "attribute spatial=0"),
    # Dropout before opset 7 in training mode (is_test=0).
    ("Dropout", 6, {"x": [2, 3]}, ["y"], {}, "is_test=0"),
    # Legacy broadcasting that aligns B away from A's trailing dims.
    ("Add", 6, {"a": [2, 3, 4], "b": [2]}, ["y"], {"broadcast": 1, "axis": 0},
     "only trailing alignment"),
    ("Mul", 6, {"a": [2, 3], "b": [3]}, ["y"], {}, "broadcast=0 needs inputs of one shape"),
])
def test_older_semantics_the_engine_lacks_are_refused(op: str, opset: int, inputs: dict,
                                                      outputs: list[str], attrs: dict,
                                                      message: str) -> None:
    model = _single_node_model(op, opset, inputs, outputs, **attrs)
    feeds = [torch.rand(*s) for s in inputs.values()]
    with pytest.raises(RuntimeError, match="the_node") as info:
        _run(model, *feeds)
    assert message in str(info.value)


def test_opsets_outside_the_supported_range_are_refused() -> None:
    model = _relu_model()
    model.opset_import[0].version = _C.max_onnx_opset + 1
    with pytest.raises(ValueError, match=f"opset {_C.max_onnx_opset + 1} is not supported"):
        _C.Program(model.SerializeToString(), [], [])
    model.opset_import[0].version = 1
    x = torch.tensor([[-1.0, 2.0, -3.0], [4.0, -5.0, 6.0]])
    torch.testing.assert_close(_run(model, x)[0], x.clamp(min=0), rtol=0, atol=0)
