"""Shared helpers of the on-device training artifact tests: small models, the reference runtime
(ONNX Runtime Training 1.19.2 in .venv-ref, driven through tests/interop/ref_tool.py) and a
name normalization that makes generated names comparable across processes."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ROOT = Path(__file__).resolve().parents[2]
REF_PYTHON = ROOT / ".venv-ref" / "bin" / "python"
REF_TOOL = ROOT / "tests" / "interop" / "ref_tool.py"
OPSET = 17
IR_VERSION = 8  # readable by onnx 1.16 and ONNX Runtime 1.19 in the reference venv


def ref_python() -> Path:
    """The reference venv's python; a missing venv is a failure, not a skip."""
    assert REF_PYTHON.exists(), (
        f"{REF_PYTHON} is missing: the reference on-device training runtime is needed; run `make ref-venv`"
    )
    return REF_PYTHON


def ref_tool(*args: str) -> dict:
    result = subprocess.run(
        [str(ref_python()), str(REF_TOOL), *args], cwd=ROOT, capture_output=True, text=True, timeout=300,
        check=False,
    )
    assert result.returncode == 0, f"ref_tool {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}"
    return json.loads(result.stdout)


def reference_artifacts(model_path: Path, outdir: Path, **options: str | bool | None) -> Path:
    """Run the reference generate_artifacts on ``model_path`` into ``outdir``. Options are
    ref_tool generate flags (requires_grad="a,b", loss="MSELoss", nominal=True, ...)."""
    args = ["generate", str(model_path), str(outdir)]
    for key, value in options.items():
        flag = "--" + key.replace("_", "-")
        if value is True:
            args.append(flag)
        elif value not in (None, False):
            args += [flag, str(value)]
    ref_tool(*args)
    return outdir


# A generated name, also inside names derived from it ("onnx::Abs::64_grad/...").
_GENERATED = re.compile(r"onnx::([^:/\s]+)::(\d+)")


def _collect_numbers(obj, out: set[int]) -> None:
    if isinstance(obj, str):
        out.update(int(m.group(2)) for m in _GENERATED.finditer(obj))
    elif isinstance(obj, dict):
        for k, v in obj.items():
            _collect_numbers(k, out)
            _collect_numbers(v, out)
    elif isinstance(obj, list):
        for v in obj:
            _collect_numbers(v, out)


def _renumber(obj, rank: dict[int, int]):
    if isinstance(obj, str):
        return _GENERATED.sub(lambda m: f"onnx::{m.group(1)}::#{rank[int(m.group(2))]}", obj)
    if isinstance(obj, dict):
        return {_renumber(k, rank): _renumber(v, rank) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_renumber(v, rank) for v in obj]
    return obj


def normalize_names(description):
    """Generated names ``onnx::<token>::<n>`` count up over a whole process, so the same model
    built in two processes differs in n. Replace each n by its rank among the n's of the
    description: equal structure built in the same order then compares equal."""
    numbers: set[int] = set()
    _collect_numbers(description, numbers)
    rank = {n: i for i, n in enumerate(sorted(numbers))}
    return _renumber(description, rank)


def describe(path: Path) -> dict:
    """ref_tool's description of one model file (inputs, outputs, initializers, nodes, opsets),
    run in this process: the same function describes both sides."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("ref_tool", REF_TOOL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.describe_model(str(path))


def mlp_model(batch: int | str = "batch", in_features: int = 4, hidden: int = 5, out_features: int = 3,
              seed: int = 0) -> onnx.ModelProto:
    """input [batch, in] -> Gemm(fc1.weight, fc1.bias) -> Relu -> Gemm(fc2.weight, fc2.bias) -> output."""
    rng = np.random.default_rng(seed)

    def init(name, *shape):
        return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)

    nodes = [
        helper.make_node("Gemm", ["input", "fc1.weight", "fc1.bias"], ["h"], name="fc1", transB=1),
        helper.make_node("Relu", ["h"], ["a"], name="relu"),
        helper.make_node("Gemm", ["a", "fc2.weight", "fc2.bias"], ["output"], name="fc2", transB=1),
    ]
    graph = helper.make_graph(
        nodes, "mlp",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [batch, in_features])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [batch, out_features])],
        [init("fc1.weight", hidden, in_features), init("fc1.bias", hidden),
         init("fc2.weight", out_features, hidden), init("fc2.bias", out_features)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = IR_VERSION
    onnx.checker.check_model(model, full_check=True)
    return model


MLP_PARAMS = ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]


def prediction_model(shape: list[int]) -> onnx.ModelProto:
    """x -> Identity -> output, float32 of ``shape``: a model whose output a loss can read."""
    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["output"], name="identity")], "prediction",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, shape)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = IR_VERSION
    return model
