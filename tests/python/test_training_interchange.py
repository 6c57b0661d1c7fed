"""Training models built here use only ops that ONNX Runtime Training also runs: the engine's
own gradient helpers (SumToShape, ReduceGrad, ScalarLike, GeluGrad, ErfGrad, ZerosLike,
SliceGrad, ConcatGrad) are
written as standard ONNX and com.microsoft ops. For models exercising each helper, the
gradients of one train step equal PyTorch's on our runtime and on the reference runtime."""

from __future__ import annotations

import io
import pathlib

import numpy as np
import onnx
import pytest
import torch

from ortmodule import _C
from ortmodule.training import artifacts
from ortmodule.training.api import CheckpointState, Module
from tests.python.training_utils import ref_tool

RTOL, ATOL = 1e-4, 1e-6


class GeluMLP(torch.nn.Module):  # Gelu (opset 20) -> GeluGrad; bias -> SumToShape
    def __init__(self, approximate: str) -> None:
        super().__init__()
        self.fc1, self.fc2 = torch.nn.Linear(6, 8), torch.nn.Linear(8, 3)
        self.approximate = approximate

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.nn.functional.gelu(self.fc1(x), approximate=self.approximate))


class ErfNormMLP(torch.nn.Module):  # Erf -> ErfGrad; LayerNorm; broadcast Mul -> SumToShape
    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.norm, self.fc2 = torch.nn.Linear(6, 8), torch.nn.LayerNorm(8), torch.nn.Linear(8, 3)
        self.scale = torch.nn.Parameter(torch.linspace(0.5, 1.5, 8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.norm(torch.erf(self.fc1(x)) * self.scale))


class ChunkMLP(torch.nn.Module):
    # chunk -> Slice -> SliceGrad; an unused Split output -> ZerosLike; mean -> ReduceGrad;
    # cat -> ConcatGrad
    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc2 = torch.nn.Linear(6, 8), torch.nn.Linear(6, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a, _ = self.fc1(x).chunk(2, dim=-1)
        b, _, c = torch.split(self.fc1(x), [2, 3, 3], dim=-1)
        h = torch.cat([torch.tanh(a) - a.mean(dim=-1, keepdim=True), b * c[:, :2]], dim=-1)
        return self.fc2(h)


CASES = {
    "gelu_erf_mse": (lambda: GeluMLP("none"), 20, artifacts.LossType.MSELoss),
    "gelu_tanh_l1": (lambda: GeluMLP("tanh"), 20, artifacts.LossType.L1Loss),
    "erf_layernorm_ce": (ErfNormMLP, 17, artifacts.LossType.CrossEntropyLoss),
    "chunk_bce": (ChunkMLP, 17, artifacts.LossType.BCEWithLogitsLoss),
}


def _torch_loss(kind: artifacts.LossType, out: torch.Tensor, target: np.ndarray) -> torch.Tensor:
    t = torch.from_numpy(target)
    if kind == artifacts.LossType.MSELoss:
        return torch.nn.functional.mse_loss(out, t)
    if kind == artifacts.LossType.L1Loss:
        return torch.nn.functional.l1_loss(out, t)
    if kind == artifacts.LossType.BCEWithLogitsLoss:
        return torch.nn.functional.binary_cross_entropy_with_logits(out, t)
    return torch.nn.functional.cross_entropy(out, t)


def _build(case: str, tmp: pathlib.Path):
    factory, opset, loss = CASES[case]
    torch.manual_seed(0)
    model = factory()
    x = torch.randn(5, 6)
    buf = io.BytesIO()
    torch.onnx.export(model, (x,), buf, input_names=["input"], output_names=["output"],
                      dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}}, opset_version=opset,
                      dynamo=False)
    onnx_model = onnx.load_from_string(buf.getvalue())
    names = [i.name for i in onnx_model.graph.initializer if i.name in dict(model.named_parameters())]
    assert names, "the exported model keeps the parameter names"
    out_dir = tmp / case
    artifacts.generate_artifacts(onnx_model, requires_grad=names, loss=loss, artifact_directory=out_dir)
    rng = np.random.default_rng(1)
    if loss == artifacts.LossType.CrossEntropyLoss:
        target = rng.integers(0, 3, size=(5,)).astype(np.int64)
    elif loss == artifacts.LossType.BCEWithLogitsLoss:
        target = rng.random((5, 3)).astype(np.float32)
    else:
        target = rng.standard_normal((5, 3)).astype(np.float32)
    reference_loss = _torch_loss(loss, model(x), target)
    reference_loss.backward()
    grads = {n: p.grad.numpy() for n, p in model.named_parameters() if n in names}
    return out_dir, x.numpy(), target, float(reference_loss), grads


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict:
    tmp = tmp_path_factory.mktemp("interchange")
    return {case: _build(case, tmp) for case in CASES}


@pytest.mark.parametrize("case", list(CASES))
def test_training_model_has_no_engine_only_ops(built: dict, case: str) -> None:
    out_dir = built[case][0]
    model = onnx.load(out_dir / "training_model.onnx")
    domains = {(n.domain, n.op_type) for n in model.graph.node if n.domain not in ("", "ai.onnx")}
    assert all(d == "com.microsoft" for d, _ in domains), domains


@pytest.mark.parametrize("case", list(CASES))
def test_gradients_match_pytorch_here(built: dict, case: str) -> None:
    out_dir, x, target, loss, grads = built[case]
    state = CheckpointState.load_checkpoint(out_dir / "checkpoint")
    module = Module(out_dir / "training_model.onnx", state)
    got = module(x, target)
    np.testing.assert_allclose(float(got), loss, rtol=RTOL)
    for name, g in grads.items():
        np.testing.assert_allclose(state.parameters[name].grad, g, rtol=RTOL, atol=ATOL, err_msg=name)


def test_gradients_match_pytorch_in_the_reference(built: dict, tmp_path: pathlib.Path) -> None:
    for case, (out_dir, x, target, loss, grads) in built.items():
        data = tmp_path / f"{case}.npz"
        model = onnx.load(out_dir / "training_model.onnx")
        user_inputs = [i.name for i in model.graph.input][:2]
        np.savez(data, **{user_inputs[0]: x[None], user_inputs[1]: target[None]})
        result = ref_tool("train", str(out_dir), str(data), "--steps", "1", "--lr", "0",
                          "--grads-out", str(tmp_path / f"{case}_grads.npz"))
        np.testing.assert_allclose(result["losses"][0], loss, rtol=RTOL, err_msg=case)
        ref_grads = np.load(tmp_path / f"{case}_grads.npz")
        for name, g in grads.items():
            np.testing.assert_allclose(ref_grads[f"0/{name}"], g, rtol=RTOL, atol=ATOL,
                                       err_msg=f"{case}: {name}")


def test_engine_only_ops_are_reported() -> None:
    """A helper with no standard form (here: an opset below CastLike's 15 keeps ScalarLike)
    is listed, so generate_artifacts can warn that the reference cannot run the model."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Tanh())
    buf = io.BytesIO()
    torch.onnx.export(model, (torch.randn(2, 4),), buf, opset_version=13, dynamo=False,
                      input_names=["x"], output_names=["y"])
    m = onnx.load_from_string(buf.getvalue())
    m.graph.node.append(onnx.helper.make_node("ReduceSum", ["y"], ["loss"], keepdims=0))
    m.graph.node.append(onnx.helper.make_node("Abs", ["loss"], ["absloss"]))
    del m.graph.output[:]
    m.graph.output.append(onnx.helper.make_tensor_value_info("absloss", onnx.TensorProto.FLOAT, []))
    _, _, engine_only = _C.build_training_graphs(m.SerializeToString(), ["0.weight", "0.bias"], [])
    assert "ScalarLike (ai.ortmodule)" in engine_only
