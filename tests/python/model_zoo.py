"""Small models and comparison helpers shared by the model-level tests (test_models_*.py).

Every test wraps one copy of a model in ORTModule and runs a deep copy of the same model in
eager PyTorch, then compares outputs, gradients, buffers and parameters.
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from ortmodule import _C, ORTModule

RTOL = 1e-4
ATOL = 1e-5

# The devices the model parity tests run on: CUDA where a CUDA build of the extension sees a
# GPU, skipped (with the reason) elsewhere. Eager's CUDA convolutions and matrix products
# compute in full float32 there (no TF32), as the engine does.
_HAS_GPU = _C.cuda_info()["compiled"] and torch.cuda.is_available()
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not _HAS_GPU, reason="no CUDA device visible (or a build without CUDA kernels): the "
    "CUDA parity cases run only on a machine with a GPU"))]
if _HAS_GPU:
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False


def on_device(values, device: str):
    """A tensor, or the tensors of a tuple, list or dict, moved to ``device``."""
    if isinstance(values, torch.Tensor):
        return values.to(device)
    if isinstance(values, dict):
        return {k: on_device(v, device) for k, v in values.items()}
    return type(values)(on_device(v, device) for v in values)


NUM_CLASSES = 5
MLP_IN = 12
CNN_SHAPE = (1, 8, 8)  # channels, height, width


def assert_close(actual: torch.Tensor, expected: torch.Tensor, msg: str = "",
                 rtol: float = RTOL, atol: float = ATOL) -> None:
    torch.testing.assert_close(
        actual, expected, rtol=rtol, atol=atol, msg=lambda m: f"{msg}: {m}" if msg else m
    )


class MLP(nn.Module):
    """Linear-ReLU-Linear-ReLU-Linear; with ``loss_inside`` forward(x, target) returns the loss."""

    def __init__(self, loss_inside: bool = False) -> None:
        super().__init__()
        self.loss_inside = loss_inside
        self.fc1 = nn.Linear(MLP_IN, 16)
        self.fc2 = nn.Linear(16, 16)
        self.fc3 = nn.Linear(16, NUM_CLASSES)

    def forward(self, x: torch.Tensor, target: torch.Tensor | None = None) -> torch.Tensor:
        logits = self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))
        if self.loss_inside:
            assert target is not None
            return F.cross_entropy(logits, target)
        return logits


class CNN(nn.Module):
    """Conv2d-BatchNorm2d-ReLU-MaxPool2d-Dropout(0)-Flatten-Linear."""

    def __init__(self, loss_inside: bool = False) -> None:
        super().__init__()
        self.loss_inside = loss_inside
        channels, height, width = CNN_SHAPE
        self.conv = nn.Conv2d(channels, 4, kernel_size=3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.relu = nn.ReLU()
        self.pool = nn.MaxPool2d(2)
        self.dropout = nn.Dropout(p=0.0)
        self.flatten = nn.Flatten()
        self.fc = nn.Linear(4 * (height // 2) * (width // 2), NUM_CLASSES)

    def forward(self, x: torch.Tensor, target: torch.Tensor | None = None) -> torch.Tensor:
        h = self.flatten(self.dropout(self.pool(self.relu(self.bn(self.conv(x))))))
        logits = self.fc(h)
        if self.loss_inside:
            assert target is not None
            return F.cross_entropy(logits, target)
        return logits


MODELS: dict[str, type[nn.Module]] = {"mlp": MLP, "cnn": CNN}


def make_model(name: str, loss_inside: bool = False, seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return MODELS[name](loss_inside=loss_inside)


def make_pair(name: str, loss_inside: bool = False, seed: int = 0) -> tuple[ORTModule, nn.Module]:
    """An ORTModule and an eager deep copy of the same freshly initialised model."""
    model = make_model(name, loss_inside, seed)
    eager = copy.deepcopy(model)
    return ORTModule(model), eager


def make_batch(name: str, batch: int = 6, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    shape = (batch, MLP_IN) if name == "mlp" else (batch, *CNN_SHAPE)
    x = torch.randn(shape, generator=gen)
    target = torch.randint(0, NUM_CLASSES, (batch,), generator=gen)
    return x, target


def loss_of(
    model: Callable[..., torch.Tensor], x: torch.Tensor, target: torch.Tensor, loss_inside: bool
) -> torch.Tensor:
    """The scalar loss of one forward call, whether the model computes it or not."""
    if loss_inside:
        return model(x, target)
    return F.cross_entropy(model(x), target)


def check_steps_match(ort: ORTModule, eager: nn.Module, x: torch.Tensor, steps: int = 2) -> None:
    """Runs forward and a sum-of-squares backward on both; outputs, gradients (accumulated
    over the steps) and buffers must match."""
    for step in range(steps):
        ort_out, eager_out = ort(x), eager(x)
        assert_close(ort_out, eager_out, f"outputs at step {step}")
        ort_out.square().sum().backward()
        eager_out.square().sum().backward()
        assert_grads_match(ort, eager)
        assert_buffers_match(ort, eager)


def assert_grads_match(ort: ORTModule, eager: nn.Module, rtol: float = RTOL,
                       atol: float = ATOL) -> None:
    ort_params = dict(ort.named_parameters())
    eager_params = dict(eager.named_parameters())
    assert ort_params.keys() == eager_params.keys()
    for name, p in ort_params.items():
        q = eager_params[name]
        if q.grad is None:
            assert p.grad is None, f"{name}: eager has no gradient but ORTModule has one"
            continue
        assert p.grad is not None, f"{name}: ORTModule produced no gradient"
        assert_close(p.grad, q.grad, f"grad of {name}", rtol, atol)


def assert_params_match(ort: ORTModule, eager: nn.Module, rtol: float = RTOL,
                        atol: float = ATOL) -> None:
    eager_params = dict(eager.named_parameters())
    for name, p in ort.named_parameters():
        assert_close(p.detach(), eager_params[name].detach(), f"parameter {name}", rtol, atol)


def assert_buffers_match(ort: ORTModule, eager: nn.Module) -> None:
    ort_buffers = dict(ort.named_buffers())
    eager_buffers = dict(eager.named_buffers())
    assert ort_buffers.keys() == eager_buffers.keys()
    for name, b in ort_buffers.items():
        if b.dtype.is_floating_point:
            assert_close(b, eager_buffers[name], f"buffer {name}")
        else:
            torch.testing.assert_close(b, eager_buffers[name], rtol=0, atol=0, msg=name)
