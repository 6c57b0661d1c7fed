"""Model-level training tests: ORTModule against eager PyTorch on an MLP and a CNN.

One step (loss, every gradient, BatchNorm buffers), 20 optimizer steps, frozen
parameters and gradients with respect to the inputs.
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from ortmodule import ORTModule
from tests.python.model_zoo import (
    DEVICES,
    assert_buffers_match,
    assert_close,
    assert_grads_match,
    assert_params_match,
    check_steps_match,
    loss_of,
    make_batch,
    make_model,
    make_pair,
    on_device,
)

MODEL_NAMES = ["mlp", "cnn"]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("loss_inside", [True, False], ids=["loss_inside", "loss_outside"])
@pytest.mark.parametrize("name", MODEL_NAMES)
def test_one_step_matches_eager(name: str, loss_inside: bool, device: str) -> None:
    ort, eager = make_pair(name, loss_inside)
    ort.to(device)
    eager.to(device)
    x, target = on_device(make_batch(name), device)

    if loss_inside:
        ort_loss = ort(x, target)
        eager_loss = eager(x, target)
    else:
        ort_logits = ort(x)
        eager_logits = eager(x)
        assert ort_logits.shape == eager_logits.shape
        assert_close(ort_logits, eager_logits, "logits")
        ort_loss = F.cross_entropy(ort_logits, target)
        eager_loss = F.cross_entropy(eager_logits, target)
    assert ort_loss.shape == eager_loss.shape == ()
    assert ort_loss.requires_grad
    assert_close(ort_loss, eager_loss, "loss")

    ort_loss.backward()
    eager_loss.backward()
    for p_name, p in ort.named_parameters():
        assert p.grad is not None, f"{p_name} has no gradient"
    assert_grads_match(ort, eager)
    # BatchNorm running_mean, running_var and num_batches_tracked after one step.
    assert_buffers_match(ort, eager)

    # A second step on another batch: the buffers keep following eager.
    x2, target2 = on_device(make_batch(name, seed=2), device)
    loss_of(ort, x2, target2, loss_inside).backward()
    loss_of(eager, x2, target2, loss_inside).backward()
    assert_grads_match(ort, eager)  # accumulated over both steps
    assert_buffers_match(ort, eager)
    if name == "cnn":
        assert int(ort.module.bn.num_batches_tracked) == 2


OPTIMIZERS: dict[str, Callable[[list[torch.nn.Parameter]], torch.optim.Optimizer]] = {
    "sgd_momentum": lambda params: torch.optim.SGD(params, lr=0.05, momentum=0.9),
    "adamw": lambda params: torch.optim.AdamW(params, lr=1e-2, weight_decay=0.01),
}


@pytest.mark.parametrize("optimizer", list(OPTIMIZERS))
@pytest.mark.parametrize("name", MODEL_NAMES)
def test_twenty_optimizer_steps_match_eager(name: str, optimizer: str) -> None:
    loss_inside = name == "cnn"  # one model of each kind of loss placement
    ort, eager = make_pair(name, loss_inside)
    if name == "cnn" and optimizer == "adamw":
        # BatchNorm cancels the conv bias: its true gradient is 0 and both runs see only
        # rounding noise (~1e-9), which Adam's normalisation turns into full-size steps of
        # random sign. Freeze it so that the comparison is meaningful.
        for model in (ort, eager):
            model.conv.bias.requires_grad_(False)
    ort_opt = OPTIMIZERS[optimizer](list(ort.parameters()))
    eager_opt = OPTIMIZERS[optimizer](list(eager.parameters()))
    for step in range(20):
        x, target = make_batch(name, batch=8, seed=100 + step)
        for model, opt in ((ort, ort_opt), (eager, eager_opt)):
            opt.zero_grad()
            loss_of(model, x, target, loss_inside).backward()
            opt.step()
    assert len(ort._cache) == 1
    assert_params_match(ort, eager)
    assert_buffers_match(ort, eager)


FROZEN = {
    "mlp": ["fc1.weight", "fc1.bias", "fc3.bias"],
    "cnn": ["conv.weight", "bn.bias", "fc.bias"],
}


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_frozen_parameters_get_no_gradient(name: str) -> None:
    ort, eager = make_pair(name)
    for model in (ort, eager):
        for p_name, p in model.named_parameters():
            if p_name in FROZEN[name]:
                p.requires_grad_(False)
    x, target = make_batch(name)
    loss_of(ort, x, target, False).backward()
    loss_of(eager, x, target, False).backward()
    for p_name, p in ort.named_parameters():
        if p_name in FROZEN[name]:
            assert p.grad is None, f"frozen {p_name} got a gradient"
        else:
            assert p.grad is not None, f"{p_name} has no gradient"
    assert_grads_match(ort, eager)
    assert_buffers_match(ort, eager)


def test_unfreezing_builds_a_new_graph_with_the_gradient() -> None:
    ort, eager = make_pair("mlp")
    x, target = make_batch("mlp")
    for model in (ort, eager):
        model.fc1.weight.requires_grad_(False)
        loss_of(model, x, target, False).backward()
    assert ort.fc1.weight.grad is None
    for model in (ort, eager):
        model.fc1.weight.requires_grad_(True)
        loss_of(model, x, target, False).backward()
    assert len(ort._cache) == 2
    assert ort.fc1.weight.grad is not None
    assert_grads_match(ort, eager)


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_gradient_wrt_input(name: str) -> None:
    ort, eager = make_pair(name)
    x, target = make_batch(name)
    x_ort = x.clone().requires_grad_(True)
    x_eager = x.clone().requires_grad_(True)
    loss_of(ort, x_ort, target, False).backward()
    loss_of(eager, x_eager, target, False).backward()
    assert x_ort.grad is not None
    assert_close(x_ort.grad, x_eager.grad, "input gradient")
    assert_grads_match(ort, eager)


def test_gradient_wrt_input_with_all_parameters_frozen() -> None:
    model = make_model("cnn")
    model.requires_grad_(False)
    eager = copy.deepcopy(model)
    ort = ORTModule(model)
    x, target = make_batch("cnn")
    x_ort = x.clone().requires_grad_(True)
    x_eager = x.clone().requires_grad_(True)
    loss_of(ort, x_ort, target, False).backward()
    loss_of(eager, x_eager, target, False).backward()
    assert_close(x_ort.grad, x_eager.grad, "input gradient")
    assert all(p.grad is None for p in ort.parameters())
    assert_buffers_match(ort, eager)


# ---- BatchNorm variants ----


def _bn_net(**bn_kwargs: object) -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Conv2d(1, 3, 3),
        torch.nn.BatchNorm2d(3, **bn_kwargs),  # type: ignore[arg-type]
        torch.nn.ReLU(),
        torch.nn.Flatten(),
        torch.nn.Linear(3 * 6 * 6, 4),
    )


def _check_bn_steps(bn_kwargs: dict[str, object]) -> None:
    eager = _bn_net(**bn_kwargs)
    ort = ORTModule(copy.deepcopy(eager))
    gen = torch.Generator().manual_seed(0)
    for step in range(3):
        x = torch.randn(4, 1, 8, 8, generator=gen)
        ort_out = ort(x)
        eager_out = eager(x)
        assert_close(ort_out, eager_out, f"outputs at step {step}")
        ort_out.pow(2).sum().backward()
        eager_out.pow(2).sum().backward()
        assert_buffers_match(ort, eager)
    assert_grads_match(ort, eager)
    ort.eval()
    eager.eval()
    with torch.no_grad():
        assert_close(ort(x), eager(x), "eval outputs")


@pytest.mark.parametrize(
    "bn_kwargs", [{"momentum": 0.3}, {"affine": False}], ids=["momentum0.3", "no_affine"]
)
def test_batchnorm_variants(bn_kwargs: dict[str, object]) -> None:
    _check_bn_steps(bn_kwargs)


def test_batchnorm_cumulative_average_is_rejected_clearly() -> None:
    # The cumulative-average factor changes every step; a fixed graph would be wrong.
    with pytest.raises(NotImplementedError, match="momentum=None"):
        _check_bn_steps({"momentum": None})


def test_batchnorm_without_running_stats() -> None:
    _check_bn_steps({"track_running_stats": False})


def test_layernorm_gelu_mlp_matches_eager() -> None:
    # A transformer-style block: LayerNorm, GELU (Erf), residual connection, on 3-D input.
    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.norm = nn.LayerNorm(8)
            self.up = nn.Linear(8, 16)
            self.down = nn.Linear(16, 8)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x + self.down(F.gelu(self.up(self.norm(x))))

    torch.manual_seed(0)
    eager = Block()
    ort = ORTModule(copy.deepcopy(eager))
    check_steps_match(ort, eager, torch.randn(3, 5, 8))
