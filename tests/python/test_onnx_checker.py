"""Every kind of ONNX file ortmodule writes passes onnx.checker.check_model: the graphs that
DebugOptions(save_onnx=True) saves (forward and training, train and eval mode), the training
artifacts (training, eval and optimizer models), and the inference models that
Module.export_model_for_inferencing writes, from artifacts made here and by ONNX Runtime
Training (the reference venv), which also pass the full check (strict shape inference).
The inference models are also run with the ONNX reference evaluator against the eval step."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnx.reference
import pytest
import torch

from ortmodule import DebugOptions, ORTModule
from ortmodule.training import api
from ortmodule.training.artifacts import LossType, OptimType, generate_artifacts
from tests.python.training_utils import MLP_PARAMS, mlp_model, reference_artifacts

ATOL, RTOL = 1e-5, 1e-5  # float32 evaluator against the engine


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(4, 3)
        self.norm = torch.nn.BatchNorm1d(3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.gelu(self.norm(self.fc(x))).sum(dim=1)


def test_save_onnx_graphs_pass_the_checker(tmp_path: Path) -> None:
    model = ORTModule(
        Net(), DebugOptions(save_onnx=True, onnx_prefix="net", save_path=str(tmp_path))
    )
    model(torch.randn(5, 4)).sum().backward()
    model.eval()
    with torch.no_grad():
        model(torch.randn(5, 4))
    saved = sorted(p.name for p in tmp_path.glob("*.onnx"))
    assert saved == [
        "net_inference_forward.onnx",
        "net_inference_training.onnx",
        "net_training_forward.onnx",
        "net_training_training.onnx",
    ]
    for name in saved:
        onnx.checker.check_model(str(tmp_path / name))
    # The gradient outputs are typed like the parameters they are the gradients of.
    training = onnx.load(str(tmp_path / "net_training_training.onnx"))
    shapes = sorted(
        tuple(d.dim_value for d in o.type.tensor_type.shape.dim) for o in training.graph.output[1:]
    )
    assert shapes == sorted([(3, 4), (3,), (3,), (3,)])


def _artifacts(tmp_path: Path, made_by: str) -> Path:
    model_path = tmp_path / "mlp.onnx"
    onnx.save(mlp_model(), model_path)
    out = tmp_path / made_by
    if made_by == "ortmodule":
        generate_artifacts(
            str(model_path),
            requires_grad=MLP_PARAMS,
            loss=LossType.MSELoss,
            optimizer=OptimType.AdamW,
            artifact_directory=out,
        )
    else:
        reference_artifacts(
            model_path, out, requires_grad=",".join(MLP_PARAMS), loss="MSELoss", optimizer="AdamW"
        )
    return out


def test_training_artifacts_pass_the_checker(tmp_path: Path) -> None:
    out = _artifacts(tmp_path, "ortmodule")
    names = sorted(p.name for p in out.glob("*.onnx"))
    assert names == ["eval_model.onnx", "optimizer_model.onnx", "training_model.onnx"]
    for name in names:
        onnx.checker.check_model(str(out / name), full_check=True)


@pytest.mark.parametrize("made_by", ["ortmodule", "onnxruntime-training"])
@pytest.mark.parametrize("outputs", [["output"], ["a"], ["h", "output"]])
def test_inference_export_passes_the_full_check(
    tmp_path: Path, made_by: str, outputs: list[str]
) -> None:
    """ "a" and "h" are values inside the eval model, which records no type for them: the
    exported model must give its outputs one."""
    out = _artifacts(tmp_path, made_by)
    state = api.CheckpointState.load_checkpoint(str(out / "checkpoint"))
    module = api.Module(str(out / "training_model.onnx"), state, str(out / "eval_model.onnx"))
    path = tmp_path / "inference.onnx"
    module.export_model_for_inferencing(str(path), outputs)
    onnx.checker.check_model(str(path), full_check=True)
    exported = onnx.load(str(path))
    assert [o.name for o in exported.graph.output] == outputs
    for o in exported.graph.output:
        assert o.type.tensor_type.elem_type == onnx.TensorProto.FLOAT
        assert len(o.type.tensor_type.shape.dim) == 2
    # Its values: the ONNX reference evaluator against the same MLP in numpy.
    x = np.random.default_rng(0).standard_normal((6, 4)).astype(np.float32)
    got = onnx.reference.ReferenceEvaluator(exported).run(None, {"input": x})
    params = {n: np.array(p.data) for n, p in state.parameters.items()}
    h = x @ params["fc1.weight"].T + params["fc1.bias"]
    a = np.maximum(h, 0)
    values = {"h": h, "a": a, "output": a @ params["fc2.weight"].T + params["fc2.bias"]}
    for name, value in zip(outputs, got):
        np.testing.assert_allclose(value, values[name], atol=ATOL, rtol=RTOL, err_msg=name)
