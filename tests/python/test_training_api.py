"""The on-device training runtime API (ortmodule.training.api: CheckpointState, Module,
Optimizer, LinearLRScheduler) on artifacts from ortmodule.training.artifacts, every number
checked against plain PyTorch (same weights, same data) or a hand-written formula.

The reference-runtime interop half lives in test_training_interop.py."""

from __future__ import annotations

import math
import pathlib

import numpy as np
import onnx
import onnxruntime
import pytest
import torch
import torch.nn.functional as F
from onnx import TensorProto, helper, numpy_helper

from ortmodule.training import api, onnxblock
from ortmodule.training.artifacts import LossType, OptimType, generate_artifacts
from tests.python.training_utils import IR_VERSION, MLP_PARAMS, OPSET, mlp_model

IN, HIDDEN, OUT, BATCH = 20, 32, 5, 8
FC1 = ["fc1.weight", "fc1.bias"]
FC2 = ["fc2.weight", "fc2.bias"]
# float32 results of the same math in a different order: relative 1e-5, absolute 1e-6.
RTOL, ATOL = 1e-5, 1e-6
LOSSES = ["CrossEntropyLoss", "MSELoss", "BCEWithLogitsLoss", "L1Loss"]


# ---------------------------------------------------------------- models, data, torch twins


def bn_model(dropout: bool, seed: int = 3) -> onnx.ModelProto:
    """input -> Gemm(fc1) -> BatchNormalization(training_mode=1) -> Relu [-> Dropout(0.5, training)]
    -> Gemm(fc2) -> output: train mode uses batch statistics and drops, eval mode neither."""
    rng = np.random.default_rng(seed)

    def init(name, *shape, positive=False):
        v = rng.standard_normal(shape).astype(np.float32)
        return numpy_helper.from_array(np.abs(v) + 0.5 if positive else v, name)

    last = "a"
    nodes = [
        helper.make_node("Gemm", ["input", "fc1.weight", "fc1.bias"], ["h"], name="fc1", transB=1),
        helper.make_node("BatchNormalization", ["h", "bn.weight", "bn.bias", "bn.running_mean", "bn.running_var"],
                         ["hn", "bn_mean_out", "bn_var_out"], name="bn", epsilon=1e-5, momentum=0.9,
                         training_mode=1),
        helper.make_node("Relu", ["hn"], ["a"], name="relu"),
    ]
    inits = [init("fc1.weight", HIDDEN, IN), init("fc1.bias", HIDDEN), init("bn.weight", HIDDEN),
             init("bn.bias", HIDDEN), init("bn.running_mean", HIDDEN),
             init("bn.running_var", HIDDEN, positive=True), init("fc2.weight", OUT, HIDDEN), init("fc2.bias", OUT)]
    if dropout:
        nodes.append(helper.make_node("Dropout", ["a", "ratio", "training"], ["d"], name="dropout"))
        inits += [numpy_helper.from_array(np.array(0.5, np.float32), "ratio"),
                  numpy_helper.from_array(np.array(True), "training")]
        last = "d"
    nodes.append(helper.make_node("Gemm", [last, "fc2.weight", "fc2.bias"], ["output"], name="fc2", transB=1))
    graph = helper.make_graph(nodes, "bn_mlp", [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", IN])],
                              [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["batch", OUT])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = IR_VERSION
    onnx.checker.check_model(model, full_check=True)
    return model


BN_PARAMS = ["fc1.weight", "fc1.bias", "bn.weight", "bn.bias", "fc2.weight", "fc2.bias"]


def base_model(kind: str) -> onnx.ModelProto:
    """"mlp" (20 -> 32 -> 5), "bn" (with BatchNormalization) or "bn_dropout" (and Dropout);
    weights scaled by 1/sqrt(fan_in) so that logits stay moderate (the BCE loss block computes
    log(sigmoid(x)) and log(1 - sigmoid(x)) as they are, as the reference's does)."""
    model = mlp_model(in_features=IN, hidden=HIDDEN, out_features=OUT) if kind == "mlp" else bn_model(
        dropout=kind == "bn_dropout")
    for i, t in enumerate(model.graph.initializer):
        if t.name.endswith(".weight") and len(t.dims) == 2:
            value = numpy_helper.to_array(t) / np.float32(math.sqrt(t.dims[1]))
            model.graph.initializer[i].CopyFrom(numpy_helper.from_array(value.astype(np.float32), t.name))
    return model


def initializers(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    return {t.name: numpy_helper.to_array(t).copy() for t in model.graph.initializer}


class TorchTwin(torch.nn.Module):
    """The ONNX models above in PyTorch, from the same initializer values."""

    def __init__(self, kind: str, values: dict[str, np.ndarray]) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(IN, HIDDEN)
        self.fc2 = torch.nn.Linear(HIDDEN, OUT)
        self.bn = torch.nn.BatchNorm1d(HIDDEN, eps=1e-5, momentum=0.1) if kind != "mlp" else None
        self.dropout = torch.nn.Dropout(0.5) if kind == "bn_dropout" else None
        with torch.no_grad():
            for name, p in self.named_parameters():
                p.copy_(torch.from_numpy(values[name]))
            if self.bn is not None:
                self.bn.running_mean.copy_(torch.from_numpy(values["bn.running_mean"]))
                self.bn.running_var.copy_(torch.from_numpy(values["bn.running_var"]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc1(x)
        if self.bn is not None:
            h = self.bn(h)
        h = torch.relu(h)
        if self.dropout is not None:
            h = self.dropout(h)
        return self.fc2(h)


def torch_loss(loss: str, out: torch.Tensor, target: np.ndarray) -> torch.Tensor:
    t = torch.from_numpy(target)
    return {"CrossEntropyLoss": F.cross_entropy, "MSELoss": F.mse_loss,
            "BCEWithLogitsLoss": F.binary_cross_entropy_with_logits, "L1Loss": F.l1_loss}[loss](out, t)


def make_data(loss: str, seed: int, batch: int = BATCH) -> tuple[np.ndarray, np.ndarray]:
    """(input, labels or target) for one step."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((batch, IN)).astype(np.float32)
    if loss == "CrossEntropyLoss":
        return x, rng.integers(0, OUT, batch).astype(np.int64)
    if loss == "BCEWithLogitsLoss":
        return x, rng.uniform(0, 1, (batch, OUT)).astype(np.float32)
    return x, rng.standard_normal((batch, OUT)).astype(np.float32)


def torch_step(twin: TorchTwin, loss: str, x: np.ndarray, y: np.ndarray) -> tuple[float, dict[str, np.ndarray]]:
    """Loss and gradients of one forward/backward in PyTorch."""
    twin.zero_grad()
    value = torch_loss(loss, twin(torch.from_numpy(x)), y)
    value.backward()
    return value.item(), {n: p.grad.numpy().copy() for n, p in twin.named_parameters()}


# ---------------------------------------------------------------- artifacts and sessions


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory):
    """artifacts(kind="mlp", loss=..., optimizer=..., frozen=(...), ...) -> directory, generated
    once per option set for the whole module."""
    cache: dict[tuple, pathlib.Path] = {}

    def make(kind: str = "mlp", loss: str = "CrossEntropyLoss", optimizer: str = "AdamW",
             frozen: tuple[str, ...] = (), additional: tuple[str, ...] = (), clip: float | None = None,
             nominal: bool = False) -> pathlib.Path:
        key = (kind, loss, optimizer, frozen, additional, clip, nominal)
        if key not in cache:
            directory = tmp_path_factory.mktemp("artifacts")
            params = BN_PARAMS if kind != "mlp" else MLP_PARAMS
            if clip is not None:
                block = {"AdamW": onnxblock.optim.AdamW, "SGD": onnxblock.optim.SGD}[optimizer]
                optim = block(clip_grad=onnxblock.optim.ClipGradNorm(clip))
            else:
                optim = getattr(OptimType, optimizer)
            generate_artifacts(base_model(kind), requires_grad=[p for p in params if p not in frozen],
                               frozen_params=list(frozen), loss=getattr(LossType, loss), optimizer=optim,
                               artifact_directory=directory, additional_output_names=list(additional) or None,
                               nominal_checkpoint=nominal)
            cache[key] = directory
        return cache[key]

    return make


class Session:
    """CheckpointState + Module (+ eval model) + Optimizer over one artifact directory."""

    def __init__(self, directory: pathlib.Path, checkpoint: pathlib.Path | None = None, optimizer: bool = True):
        self.state = api.CheckpointState.load_checkpoint(checkpoint or directory / "checkpoint")
        self.module = api.Module(directory / "training_model.onnx", self.state, directory / "eval_model.onnx")
        self.optimizer = api.Optimizer(directory / "optimizer_model.onnx", self.module) if optimizer else None

    def params(self) -> dict[str, np.ndarray]:
        return {n: np.array(p.data) for n, p in self.state.parameters.items()}

    def grads(self) -> dict[str, np.ndarray | None]:
        return {n: None if p.grad is None else np.array(p.grad) for n, p in self.state.parameters.items()}

    def train(self, steps: list[tuple[np.ndarray, np.ndarray]]) -> list[float]:
        """The reference loop: loss = module(x, y); optimizer.step(); module.lazy_reset_grad()."""
        losses = []
        self.module.train()
        for x, y in steps:
            out = self.module(x, y)
            losses.append(float(out[0] if isinstance(out, tuple) else out))
            self.optimizer.step()
            self.module.lazy_reset_grad()
        return losses


def assert_close(got, want, what: str, rtol: float = RTOL, atol: float = ATOL) -> None:
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, err_msg=what)


# ---------------------------------------------------------------- train and eval steps


@pytest.mark.parametrize("loss", LOSSES)
def test_train_step_loss_and_gradients_match_torch(loss: str, artifacts) -> None:
    s = Session(artifacts(loss=loss), optimizer=False)
    assert all(not g.any() for g in s.grads().values()), "gradients are zero before the first step"
    twin = TorchTwin("mlp", initializers(base_model("mlp")))
    x, y = make_data(loss, seed=1)
    got = s.module(x, y)
    assert isinstance(got, np.ndarray) and got.shape == () and got.dtype == np.float32
    want, grads = torch_step(twin, loss, x, y)
    assert_close(got, want, "loss")
    got_grads = s.grads()
    assert sorted(got_grads) == sorted(MLP_PARAMS)
    for name in MLP_PARAMS:
        assert got_grads[name].shape == grads[name].shape, name
        assert_close(got_grads[name], grads[name], f"gradient of {name}")
        assert np.abs(got_grads[name]).max() > 0, name


@pytest.mark.parametrize("loss", LOSSES)
def test_eval_step_matches_torch(loss: str, artifacts) -> None:
    s = Session(artifacts(loss=loss), optimizer=False)
    twin = TorchTwin("mlp", initializers(base_model("mlp")))
    x, y = make_data(loss, seed=2)
    s.module.eval()
    with torch.no_grad():
        want = float(torch_loss(loss, twin(torch.from_numpy(x)), y))
    assert_close(s.module(x, y), want, "eval loss")
    assert all(not g.any() for g in s.grads().values()), "an eval step leaves the gradients alone"


@pytest.mark.parametrize("kind", ["bn", "bn_dropout"])
def test_eval_step_runs_batchnorm_and_dropout_in_inference_mode(kind: str, artifacts) -> None:
    """Eval: running statistics, no dropout (torch .eval()); the eval model has no training-mode
    BatchNormalization and no Dropout training flag."""
    d = artifacts(kind=kind)
    eval_model = onnx.load(d / "eval_model.onnx")
    for node in eval_model.graph.node:
        if node.op_type == "BatchNormalization":
            assert helper.get_attribute_value(next(a for a in node.attribute if a.name == "training_mode")) == 0
        if node.op_type == "Dropout":
            assert len(node.input) < 3 or node.input[2] == ""
    s = Session(d, optimizer=False)
    twin = TorchTwin(kind, initializers(base_model(kind))).eval()
    x, y = make_data("CrossEntropyLoss", seed=3)
    s.module.eval()
    with torch.no_grad():
        want = float(torch_loss("CrossEntropyLoss", twin(torch.from_numpy(x)), y))
    got = s.module(x, y)
    assert_close(got, want, "eval loss")
    assert_close(s.module(x, y), got, "a second eval step", rtol=0, atol=0)


def test_train_step_uses_batch_statistics(artifacts) -> None:
    """Train mode BatchNormalization normalizes with the batch's statistics, as torch .train()."""
    s = Session(artifacts(kind="bn"), optimizer=False)
    twin = TorchTwin("bn", initializers(base_model("bn"))).train()
    x, y = make_data("CrossEntropyLoss", seed=4, batch=16)
    got = s.module(x, y)
    want, grads = torch_step(twin, "CrossEntropyLoss", x, y)
    assert_close(got, want, "loss")
    got_grads = s.grads()
    for name in BN_PARAMS:
        assert_close(got_grads[name], grads[name], f"gradient of {name}", atol=1e-5)


def test_dropout_is_active_in_train_steps_only(artifacts) -> None:
    s = Session(artifacts(kind="bn_dropout"), optimizer=False)
    x, y = make_data("CrossEntropyLoss", seed=5, batch=16)
    s.module.eval()
    e1, e2 = float(s.module(x, y)), float(s.module(x, y))
    s.module.train()
    t1, t2 = float(s.module(x, y)), float(s.module(x, y))
    assert e1 == e2
    assert t1 != t2, "two train steps draw two dropout masks"


# ---------------------------------------------------------------- optimizers


def hf_adamw(p, g, m, v, step, lr, b1=0.9, b2=0.999, eps=1e-6, wd=0.0):
    """transformers' AdamW (adam_mode=1), in float64."""
    m = b1 * m + (1 - b1) * g
    v = b2 * v + (1 - b2) * g * g
    p = p - lr * math.sqrt(1 - b2**step) / (1 - b1**step) * m / (np.sqrt(v) + eps)
    p = p - lr * wd * p
    return p, m, v


def test_sgd_steps_match_torch_sgd(artifacts) -> None:
    s = Session(artifacts(loss="MSELoss", optimizer="SGD"))
    s.optimizer.set_learning_rate(0.1)
    twin = TorchTwin("mlp", initializers(base_model("mlp")))
    opt = torch.optim.SGD(twin.parameters(), lr=0.1)
    for i in range(3):
        x, y = make_data("MSELoss", seed=10 + i)
        got = float(s.module(x, y))
        want, _ = torch_step(twin, "MSELoss", x, y)
        assert_close(got, want, f"loss {i}")
        s.optimizer.step()
        opt.step()
        s.module.lazy_reset_grad()
        params = s.params()
        for name, p in twin.named_parameters():
            assert_close(params[name], p.detach().numpy(), f"step {i}: {name}")


@pytest.mark.parametrize("clip", [None, 0.5])
def test_adamw_steps_match_hf_adamw(clip, artifacts) -> None:
    """AdamW (adam_mode=1) on gradients clipped as torch.nn.utils.clip_grad_norm_ clips them."""
    s = Session(artifacts(clip=clip))
    lr = 0.01
    s.optimizer.set_learning_rate(lr)
    twin = TorchTwin("mlp", initializers(base_model("mlp")))
    params = {n: p.detach().numpy().astype(np.float64) for n, p in twin.named_parameters()}
    m = {n: np.zeros_like(p) for n, p in params.items()}
    v = {n: np.zeros_like(p) for n, p in params.items()}
    for step in range(1, 4):
        x, y = make_data("CrossEntropyLoss", seed=20 + step)
        twin.zero_grad()
        value = torch_loss("CrossEntropyLoss", twin(torch.from_numpy(x)), y)
        value.backward()
        if clip is not None:
            norm = torch.nn.utils.clip_grad_norm_(twin.parameters(), clip)
            assert float(norm) > clip, "the test data must need clipping"
        assert_close(s.module(x, y), value.item(), f"loss {step}")
        s.optimizer.step()
        grads = s.grads()
        for name, p in twin.named_parameters():
            # After the step the module's gradients are the clipped ones.
            assert_close(grads[name], p.grad.numpy(), f"step {step}: gradient of {name}")
            params[name], m[name], v[name] = hf_adamw(params[name], p.grad.numpy().astype(np.float64), m[name],
                                                      v[name], step, lr)
        s.module.lazy_reset_grad()
        got = s.params()
        for name, p in twin.named_parameters():
            assert_close(got[name], params[name], f"step {step}: {name}")
            with torch.no_grad():
                p.copy_(torch.from_numpy(got[name]))  # torch continues from the same parameters


# ---------------------------------------------------------------- gradient accumulation


def test_gradients_accumulate_until_lazy_reset_grad(artifacts) -> None:
    s = Session(artifacts(optimizer="SGD"))
    x, y = make_data("CrossEntropyLoss", seed=30)
    s.module(x, y)
    g1 = s.grads()
    for k in (2, 3):
        s.module(x, y)
        for name, g in s.grads().items():
            np.testing.assert_array_equal(g, g1[name] * k, err_msg=f"{k} steps: {name}")
    s.module.lazy_reset_grad()
    s.module(x, y)
    for name, g in s.grads().items():
        np.testing.assert_array_equal(g, g1[name], err_msg=f"the first step after a reset overwrites: {name}")
    # An optimizer step (lr 0: the parameters stay) does not reset the gradients.
    s.optimizer.set_learning_rate(0.0)
    s.optimizer.step()
    s.module(x, y)
    for name, g in s.grads().items():
        np.testing.assert_array_equal(g, g1[name] * 2, err_msg=f"optimizer.step does not reset: {name}")


# ---------------------------------------------------------------- learning rate and scheduler


def test_learning_rate_default_and_set(artifacts) -> None:
    s = Session(artifacts())
    assert s.optimizer.get_learning_rate() == pytest.approx(0.001, rel=1e-7)
    s.optimizer.set_learning_rate(0.05)
    assert s.optimizer.get_learning_rate() == pytest.approx(0.05, rel=1e-7)


def linear_lr(step: int, warmup: int, total: int, lr: float) -> float:
    if step < warmup:
        return lr * step / max(1, warmup)
    return lr * max(0.0, (total - step) / max(1, total - warmup))


GOLDEN_4_10 = [0.0, 0.25, 0.5, 0.75, 1.0, 5 / 6, 4 / 6, 3 / 6, 2 / 6, 1 / 6]


def _scheduled_run(s: Session, scheduler: api.LinearLRScheduler, steps: range) -> list[float]:
    lrs = []
    for i in steps:
        lrs.append(s.optimizer.get_learning_rate())
        x, y = make_data("CrossEntropyLoss", seed=40 + i)
        s.module(x, y)
        s.optimizer.step()
        scheduler.step()
        s.module.lazy_reset_grad()
    return lrs


def test_linear_lr_scheduler_golden_values(artifacts) -> None:
    s = Session(artifacts())
    scheduler = api.LinearLRScheduler(s.optimizer, warmup_step_count=4, total_step_count=10, initial_lr=1.0)
    np.testing.assert_allclose(_scheduled_run(s, scheduler, range(10)), GOLDEN_4_10, rtol=1e-6, atol=1e-7)
    assert s.optimizer.get_learning_rate() == 0.0  # past the end


@pytest.mark.parametrize("warmup,total,lr", [(0, 6, 0.5), (3, 3, 0.2), (8, 5, 1.0), (1, 2, 0.2)])
def test_linear_lr_scheduler_formula(warmup, total, lr, artifacts) -> None:
    s = Session(artifacts())
    scheduler = api.LinearLRScheduler(s.optimizer, warmup, total, lr)
    want = [linear_lr(i, warmup, total, lr) for i in range(7)]
    np.testing.assert_allclose(_scheduled_run(s, scheduler, range(7)), want, rtol=1e-6, atol=1e-7)


def test_linear_lr_scheduler_resumes_from_a_checkpoint(artifacts, tmp_path) -> None:
    d = artifacts()
    s = Session(d)
    scheduler = api.LinearLRScheduler(s.optimizer, 4, 10, 1.0)
    first = _scheduled_run(s, scheduler, range(5))
    path = tmp_path / "ckpt"
    api.CheckpointState.save_checkpoint(s.state, path, include_optimizer_state=True)
    resumed = Session(d, checkpoint=path)
    assert resumed.optimizer.get_learning_rate() == pytest.approx(0.001), "the learning rate is not saved"
    scheduler = api.LinearLRScheduler(resumed.optimizer, 4, 10, 1.0)
    rest = _scheduled_run(resumed, scheduler, range(5, 10))
    np.testing.assert_allclose(first + rest, GOLDEN_4_10, rtol=1e-6, atol=1e-7)


# ---------------------------------------------------------------- checkpoints


def _steps(loss: str, seeds: range) -> list[tuple[np.ndarray, np.ndarray]]:
    return [make_data(loss, seed) for seed in seeds]


@pytest.mark.parametrize("optimizer", ["AdamW", "SGD"])
def test_checkpoint_with_optimizer_state_continues_identically(optimizer: str, artifacts, tmp_path) -> None:
    d = artifacts(optimizer=optimizer)
    data = _steps("CrossEntropyLoss", range(50, 56))
    full = Session(d)
    full.optimizer.set_learning_rate(0.02)
    want = full.train(data)

    first = Session(d)
    first.optimizer.set_learning_rate(0.02)
    got = first.train(data[:3])
    path = tmp_path / "ckpt"
    api.CheckpointState.save_checkpoint(first.state, path, include_optimizer_state=True)
    second = Session(d, checkpoint=path)
    second.optimizer.set_learning_rate(0.02)
    got += second.train(data[3:])
    assert got == want
    final, resumed = full.params(), second.params()
    for name in MLP_PARAMS:
        np.testing.assert_array_equal(resumed[name], final[name], err_msg=name)


def test_checkpoint_without_optimizer_state_restarts_the_moments(artifacts, tmp_path) -> None:
    """Without the optimizer state, training resumes like a fresh run from the saved parameters
    (AdamW's step and moments start over), which differs from the uninterrupted run."""
    d = artifacts()
    data = _steps("CrossEntropyLoss", range(60, 64))
    s = Session(d)
    s.optimizer.set_learning_rate(0.02)
    s.train(data[:2])
    saved = s.params()
    continued = s.train(data[2:])
    path = tmp_path / "ckpt"
    s2 = Session(d)
    s2.optimizer.set_learning_rate(0.02)
    s2.train(data[:2])
    api.CheckpointState.save_checkpoint(s2.state, path)
    plain = Session(d, checkpoint=path)
    for name, value in plain.params().items():
        np.testing.assert_array_equal(value, saved[name], err_msg=name)
    fresh = Session(d)
    for name, value in saved.items():
        fresh.state.parameters[name].data = value
    plain.optimizer.set_learning_rate(0.02)
    fresh.optimizer.set_learning_rate(0.02)
    restarted = plain.train(data[2:])
    assert restarted == fresh.train(data[2:])
    assert restarted[1] != continued[1]


@pytest.mark.parametrize("value", [7, -(2**40), 0.25, 1.5e-3, "a string", ""])
def test_property_round_trip(value, artifacts, tmp_path) -> None:
    s = Session(artifacts(), optimizer=False)
    s.state.properties["prop"] = value
    s.state.properties["other"] = 1
    path = tmp_path / "ckpt"
    api.CheckpointState.save_checkpoint(s.state, path)
    back = api.CheckpointState.load_checkpoint(path).properties
    assert sorted(back) == ["other", "prop"]
    assert type(back["prop"]) is type(value)
    if isinstance(value, float):
        assert back["prop"] == float(np.float32(value))  # stored as float32
    else:
        assert back["prop"] == value


def test_parameter_values_save_and_load(artifacts, tmp_path) -> None:
    s = Session(artifacts())
    s.optimizer.set_learning_rate(0.05)
    s.train(_steps("CrossEntropyLoss", range(70, 72)))
    path = tmp_path / "ckpt"
    api.CheckpointState.save_checkpoint(s.state, path)
    back = api.CheckpointState.load_checkpoint(path)
    assert list(back.parameters) == sorted(MLP_PARAMS)
    for name, value in s.params().items():
        np.testing.assert_array_equal(back.parameters[name].data, value, err_msg=name)
        assert back.parameters[name].requires_grad


def test_set_parameter_data(artifacts) -> None:
    s = Session(artifacts(), optimizer=False)
    twin = TorchTwin("mlp", initializers(base_model("mlp")))
    new = (np.arange(OUT, dtype=np.float32) - 2) / 4
    s.state.parameters["fc2.bias"].data = torch.from_numpy(new)
    np.testing.assert_array_equal(s.state.parameters["fc2.bias"].data, new)
    with torch.no_grad():
        twin.fc2.bias.copy_(torch.from_numpy(new))
    x, y = make_data("CrossEntropyLoss", seed=80)
    assert_close(s.module(x, y), torch_step(twin, "CrossEntropyLoss", x, y)[0], "loss with the new bias")
    with pytest.raises(ValueError, match=r"fc2.bias.*\[5\].*\[4\]"):
        s.state.parameters["fc2.bias"].data = np.zeros(4, np.float32)
    with pytest.raises(ValueError, match="float64"):
        s.state.parameters["fc2.bias"].data = np.zeros(OUT, np.float64)


# ---------------------------------------------------------------- nominal checkpoints


def test_nominal_checkpoint_module_refuses_to_run(artifacts, tmp_path) -> None:
    d = artifacts(frozen=tuple(FC2), nominal=True)
    state = api.CheckpointState.load_checkpoint(d / "nominal_checkpoint")
    module = api.Module(d / "training_model.onnx", state, d / "eval_model.onnx")
    optimizer = api.Optimizer(d / "optimizer_model.onnx", module)
    sizes = {n: int(np.prod(t.dims)) for n, t in
             ((t.name, t) for t in base_model("mlp").graph.initializer)}
    assert module.get_parameters_size() == sum(sizes.values())
    assert module.get_parameters_size(trainable_only=True) == sizes["fc1.weight"] + sizes["fc1.bias"]
    x, y = make_data("CrossEntropyLoss", seed=90)
    message = "Please load the model parameters first"
    with pytest.raises(RuntimeError, match=message):
        module(x, y)
    module.eval()
    with pytest.raises(RuntimeError, match=message):
        module(x, y)
    with pytest.raises(RuntimeError, match=message):
        module.export_model_for_inferencing(tmp_path / "inference.onnx", ["output"])
    with pytest.raises(RuntimeError, match=message):
        module.get_contiguous_parameters()
    with pytest.raises(RuntimeError, match=message):
        optimizer.step()
    with pytest.raises(RuntimeError, match=message):
        state.parameters["fc1.bias"].data  # noqa: B018
    with pytest.raises(RuntimeError, match=message):
        state.parameters["fc1.bias"].data = np.zeros(HIDDEN, np.float32)
    with pytest.raises(ValueError, match="trainable_only=False"):
        module.copy_buffer_to_parameters(np.zeros(module.get_parameters_size(True), np.float32), trainable_only=True)


def test_nominal_checkpoint_trains_like_the_full_one_after_copy_buffer_to_parameters(artifacts) -> None:
    d = artifacts(frozen=tuple(FC2), nominal=True)
    data = _steps("CrossEntropyLoss", range(100, 104))
    full = Session(d)
    buffer = full.module.get_contiguous_parameters()
    full.optimizer.set_learning_rate(0.05)
    want = full.train(data)

    nominal = Session(d, checkpoint=d / "nominal_checkpoint")
    nominal.module.copy_buffer_to_parameters(torch.from_numpy(buffer), trainable_only=False)
    assert not nominal.state.is_nominal
    nominal.optimizer.set_learning_rate(0.05)
    assert nominal.train(data) == want
    final = full.params()
    for name, value in nominal.params().items():
        np.testing.assert_array_equal(value, final[name], err_msg=name)


# ---------------------------------------------------------------- contiguous parameter buffers


def test_contiguous_parameters_follow_the_training_model_input_order(artifacts) -> None:
    s = Session(artifacts(frozen=tuple(FC2)))
    values = s.params()
    full = s.module.get_contiguous_parameters()
    assert full.dtype == np.float32 and full.ndim == 1
    np.testing.assert_array_equal(full, np.concatenate([values[n].ravel() for n in MLP_PARAMS]))
    trainable = s.module.get_contiguous_parameters(trainable_only=True)
    np.testing.assert_array_equal(trainable, np.concatenate([values[n].ravel() for n in FC1]))
    assert s.module.get_parameters_size() == full.size
    assert s.module.get_parameters_size(trainable_only=True) == trainable.size

    s.module.copy_buffer_to_parameters(-trainable, trainable_only=True)
    now = s.params()
    for name in FC1:
        np.testing.assert_array_equal(now[name], -values[name], err_msg=name)
    for name in FC2:
        np.testing.assert_array_equal(now[name], values[name], err_msg=f"{name} is frozen: untouched")
    s.module.copy_buffer_to_parameters(full * 2, trainable_only=False)
    now = s.params()
    for name in MLP_PARAMS:
        np.testing.assert_array_equal(now[name], values[name] * 2, err_msg=name)

    with pytest.raises(ValueError, match=rf"{trainable.size} elements.*got float32 \[{full.size}\]"):
        s.module.copy_buffer_to_parameters(full, trainable_only=True)
    with pytest.raises(ValueError, match=rf"{full.size} elements.*got float32 \[{trainable.size}\]"):
        s.module.copy_buffer_to_parameters(trainable, trainable_only=False)
    with pytest.raises(ValueError, match="float64"):
        s.module.copy_buffer_to_parameters(full.astype(np.float64), trainable_only=False)
    with pytest.raises(ValueError, match=r"1-D"):
        s.module.copy_buffer_to_parameters(full.reshape(1, -1), trainable_only=False)


# ---------------------------------------------------------------- inference export


def test_export_model_for_inferencing_runs_in_onnxruntime(artifacts, tmp_path) -> None:
    d = artifacts(additional=("output",))
    s = Session(d)
    s.optimizer.set_learning_rate(0.05)
    s.train(_steps("CrossEntropyLoss", range(110, 112)))  # export the trained values
    x, y = make_data("CrossEntropyLoss", seed=113)
    s.module.eval()
    loss, output = s.module(x, y)
    loss_name = s.module.output_names()[0]

    path = tmp_path / "inference.onnx"
    s.module.export_model_for_inferencing(path, ["output"])
    model = onnx.load(path)
    onnx.checker.check_model(model, full_check=True)
    assert [i.name for i in model.graph.input] == ["input"], "labels and parameters are no inputs"
    assert [o.name for o in model.graph.output] == ["output"]
    assert {n.domain for n in model.graph.node} <= {"", "ai.onnx"}
    assert not any(n.op_type == "SoftmaxCrossEntropyLoss" for n in model.graph.node)
    params = s.params()
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    for name in MLP_PARAMS:
        np.testing.assert_array_equal(inits[name], params[name], err_msg=name)
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    assert_close(session.run(None, {"input": x})[0], output, "exported output vs eval step")
    twin = TorchTwin("mlp", params)
    with torch.no_grad():
        assert_close(output, twin(torch.from_numpy(x)).numpy(), "eval output vs torch")

    path2 = tmp_path / "with_loss.onnx"
    s.module.export_model_for_inferencing(path2, [loss_name, "output"])
    session = onnxruntime.InferenceSession(str(path2), providers=["CPUExecutionProvider"])
    assert sorted(i.name for i in session.get_inputs()) == ["input", "labels"]
    got_loss, got_output = session.run(None, {"input": x, "labels": y})
    assert_close(got_loss, loss, "exported loss")
    assert_close(got_output, output, "exported output")


def test_export_model_for_inferencing_errors(artifacts, tmp_path) -> None:
    s = Session(artifacts(), optimizer=False)
    with pytest.raises((ValueError, RuntimeError), match="output"):
        s.module.export_model_for_inferencing(tmp_path / "a.onnx", [])
    with pytest.raises((ValueError, RuntimeError), match="no_such_value"):
        s.module.export_model_for_inferencing(tmp_path / "b.onnx", ["no_such_value"])
    with pytest.raises(TypeError, match="list"):
        s.module.export_model_for_inferencing(tmp_path / "c.onnx", "output")
    no_eval = api.Module(artifacts() / "training_model.onnx", s.state)
    with pytest.raises(RuntimeError, match="eval model"):
        no_eval.export_model_for_inferencing(tmp_path / "d.onnx", ["output"])


# ---------------------------------------------------------------- frozen parameters


def test_frozen_parameters_get_no_gradient_and_do_not_change(artifacts) -> None:
    s = Session(artifacts(frozen=tuple(FC2)))
    initial = s.params()
    twin = TorchTwin("mlp", initial)
    for name, p in s.state.parameters.items():
        assert p.requires_grad == (name in FC1), name
    x, y = make_data("CrossEntropyLoss", seed=120)
    assert_close(s.module(x, y), torch_step(twin, "CrossEntropyLoss", x, y)[0], "loss")
    _, grads = torch_step(twin, "CrossEntropyLoss", x, y)
    got = s.grads()
    for name in FC2:
        assert got[name] is None, name
    for name in FC1:
        assert_close(got[name], grads[name], f"gradient of {name}")
    s.optimizer.set_learning_rate(0.1)
    s.optimizer.step()
    now = s.params()
    for name in FC2:
        np.testing.assert_array_equal(now[name], initial[name], err_msg=name)
    for name in FC1:
        assert not np.array_equal(now[name], initial[name]), name


def test_a_parameter_cannot_be_frozen_and_trainable(tmp_path) -> None:
    with pytest.raises(RuntimeError, match="fc1.bias"):
        generate_artifacts(base_model("mlp"), requires_grad=MLP_PARAMS, frozen_params=["fc1.bias"],
                           loss=LossType.MSELoss, artifact_directory=tmp_path)


# ---------------------------------------------------------------- names and input kinds


def test_input_and_output_names(artifacts) -> None:
    s = Session(artifacts(additional=("output",)), optimizer=False)
    loss_name = s.module.output_names()[0]
    assert s.module.input_names() == ["input", "labels"]
    assert s.module.output_names() == [loss_name, "output"]
    s.module.eval()
    assert s.module.input_names() == ["input", "labels"]
    assert s.module.output_names() == [loss_name, "output"]
    mse = Session(artifacts(loss="MSELoss"), optimizer=False)
    assert mse.module.input_names() == ["input", "target"]
    assert len(mse.module.output_names()) == 1


def test_torch_inputs_give_torch_outputs(artifacts) -> None:
    s = Session(artifacts(additional=("output",)), optimizer=False)
    x, y = make_data("CrossEntropyLoss", seed=130)
    loss_np, out_np = s.module(x, y)
    assert isinstance(loss_np, np.ndarray) and isinstance(out_np, np.ndarray)
    s.module.lazy_reset_grad()
    loss_t, out_t = s.module(torch.from_numpy(x), torch.from_numpy(y))
    assert isinstance(loss_t, torch.Tensor) and isinstance(out_t, torch.Tensor)
    np.testing.assert_array_equal(loss_t.numpy(), loss_np)
    np.testing.assert_array_equal(out_t.numpy(), out_np)
    s.module.eval()
    assert isinstance(s.module(torch.from_numpy(x), torch.from_numpy(y))[0], torch.Tensor)
    with pytest.raises(ValueError, match=r"expected 2 inputs \(input, labels\), got 1"):
        s.module(x)
    with pytest.raises(ValueError, match="labels.*int64.*float32"):
        s.module(x, y.astype(np.float32))


def test_module_without_eval_model(artifacts) -> None:
    d = artifacts()
    state = api.CheckpointState.load_checkpoint(d / "checkpoint")
    module = api.Module(d / "training_model.onnx", state)
    x, y = make_data("CrossEntropyLoss", seed=140)
    module(x, None, y)  # None inputs are skipped
    module.eval()
    with pytest.raises(RuntimeError, match="no eval model"):
        module(x, y)
    with pytest.raises(RuntimeError, match="no eval model"):
        module.input_names()
