"""The standalone C++ training library (libortmodule_training.so): its API checks
(tests/cpp_api/training_api_checks.cpp) and examples/cpp/train_mlp.cpp against the Python API
on the same artifacts and batches. `make cpp-lib` builds the programs (make test does)."""

from __future__ import annotations

import importlib.util
import pathlib
import re
import subprocess

import numpy as np
import onnx
import onnxruntime
import pytest

from ortmodule.training.api import CheckpointState, Module, Optimizer

ROOT = pathlib.Path(__file__).resolve().parents[2]
BUILD = ROOT / "build" / "cmake"


def _program(name: str) -> pathlib.Path:
    path = BUILD / name
    assert path.exists(), f"{path} is missing: build it with `make cpp-lib`"
    return path


def _load_example_module():
    spec = importlib.util.spec_from_file_location("make_artifacts", ROOT / "examples/cpp/make_artifacts.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    out = tmp_path_factory.mktemp("cpp_artifacts")
    _load_example_module().make(out, steps=12, batch=16)
    return out


def test_library_links_no_python_and_no_torch() -> None:
    libs = subprocess.run(["ldd", str(BUILD / "libortmodule_training.so")], capture_output=True,
                          text=True, check=True).stdout
    assert "libpython" not in libs and "libtorch" not in libs and "libc10" not in libs, libs


def test_cpp_api_checks(artifacts: pathlib.Path) -> None:
    result = subprocess.run([str(_program("training_api_checks")), str(artifacts)],
                            capture_output=True, text=True, timeout=300, check=False)
    lines = result.stdout.splitlines()
    failures = [line for line in lines if not line.startswith("ok ")]
    assert result.returncode == 0 and not failures, result.stdout + result.stderr
    assert len(lines) >= 12, result.stdout


def test_cpp_example_matches_python_api(artifacts: pathlib.Path, tmp_path: pathlib.Path) -> None:
    result = subprocess.run([str(_program("train_mlp")), str(artifacts)], capture_output=True,
                            text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    cpp_losses = [float(m) for m in re.findall(r"^step \d+ loss (\S+)$", result.stdout, re.MULTILINE)]
    cpp_eval = float(re.search(r"^eval loss (\S+)$", result.stdout, re.MULTILINE).group(1))
    batches = _load_example_module().read_batches(artifacts / "batches.bin")
    assert len(cpp_losses) == len(batches) == 12

    state = CheckpointState.load_checkpoint(artifacts / "checkpoint")
    module = Module(artifacts / "training_model.onnx", state, artifacts / "eval_model.onnx")
    optimizer = Optimizer(artifacts / "optimizer_model.onnx", module)
    optimizer.set_learning_rate(0.01)
    py_losses = []
    for x, y in batches:
        loss, _ = module(x, y)
        optimizer.step()
        module.lazy_reset_grad()
        py_losses.append(float(loss))
    # Same engine, other GEMM (std::thread backend vs PyTorch's BLAS): float rounding only.
    np.testing.assert_allclose(cpp_losses, py_losses, rtol=2e-5, atol=1e-6)
    assert py_losses[-1] < py_losses[0]
    module.eval()
    eval_loss, logits = module(*batches[0])
    np.testing.assert_allclose(cpp_eval, float(eval_loss), rtol=2e-5)

    # The C++ program's inference model runs in stock onnxruntime: standard ops only.
    exported = onnx.load(artifacts / "inference_model.onnx")
    assert {n.domain for n in exported.graph.node} <= {"", "ai.onnx"}
    assert [i.name for i in exported.graph.input] == ["input"]
    session = onnxruntime.InferenceSession(str(artifacts / "inference_model.onnx"))
    (ort_logits,) = session.run(None, {"input": batches[0][0]})
    np.testing.assert_allclose(ort_logits, logits, rtol=1e-4, atol=1e-5)

    # The checkpoint it saved (with optimizer state and a property) loads in Python.
    trained = CheckpointState.load_checkpoint(artifacts / "checkpoint_trained")
    assert trained.properties["steps_trained"] == 12
    for name in state.parameters:
        np.testing.assert_allclose(trained.parameters[name].data, state.parameters[name].data,
                                   rtol=1e-4, atol=1e-6)
