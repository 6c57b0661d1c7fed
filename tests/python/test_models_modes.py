"""Train and eval modes on model level: eval against eager eval, one cached graph per mode,
dropout masks, and the training flags of the wrapped module and its submodules."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from ortmodule import ORTModule
from tests.python.model_zoo import (
    assert_buffers_match,
    assert_close,
    assert_grads_match,
    check_steps_match,
    loss_of,
    make_batch,
    make_pair,
)

MODEL_NAMES = ["mlp", "cnn"]


def _train_two_steps(ort: ORTModule, eager: nn.Module, name: str) -> None:
    """Moves the BatchNorm running statistics away from their initial values."""
    for seed in (1, 2):
        x, target = make_batch(name, seed=seed)
        for model in (ort, eager):
            loss_of(model, x, target, False).backward()
    assert_buffers_match(ort, eager)


def _float_buffers(model: nn.Module) -> dict[str, torch.Tensor]:
    return {n: b.clone() for n, b in model.named_buffers() if b.dtype.is_floating_point}


# ---- eval mode ----


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_eval_no_grad_matches_eager_eval(name: str) -> None:
    ort, eager = make_pair(name)
    _train_two_steps(ort, eager, name)
    ort.eval()
    eager.eval()
    assert not ort.training and not ort.module.training
    stats = _float_buffers(ort)
    x, _ = make_batch(name, seed=8)
    with torch.no_grad():
        out = ort(x)
        expected = eager(x)
    assert not out.requires_grad
    assert_close(out, expected, "eval outputs")
    for buffer_name, value in _float_buffers(ort).items():  # eval reads the running statistics
        torch.testing.assert_close(value, stats[buffer_name], rtol=0, atol=0)


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_train_eval_switching_caches_one_graph_per_mode(name: str) -> None:
    ort, eager = make_pair(name)
    for step in range(3):
        x, target = make_batch(name, seed=20 + step)
        for model in (ort, eager):
            model.train()
            loss_of(model, x, target, False).backward()
        assert len(ort._cache) == (1 if step == 0 else 2)
        for model in (ort, eager):
            model.eval()
        with torch.no_grad():
            assert_close(ort(x), eager(x), f"eval outputs at step {step}")
        assert len(ort._cache) == 2
    assert_grads_match(ort, eager)
    for buffer_name, value in _float_buffers(ort).items():
        assert_close(value, dict(eager.named_buffers())[buffer_name], buffer_name)


def test_no_grad_in_train_mode_is_its_own_graph() -> None:
    ort, eager = make_pair("cnn")
    x, _ = make_batch("cnn")
    with torch.no_grad():
        out = ort(x)
        expected = eager(x)
    assert not out.requires_grad
    assert_close(out, expected, "train-mode no_grad outputs")
    assert_buffers_match(ort, eager)  # train mode updates the statistics even without grad
    x2, target2 = make_batch("cnn", seed=2)
    loss_of(ort, x2, target2, False).backward()
    loss_of(eager, x2, target2, False).backward()
    assert len(ort._cache) == 2
    assert_grads_match(ort, eager)
    assert_buffers_match(ort, eager)


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_eval_mode_survives_export(name: str) -> None:
    ort, eager = make_pair(name)
    _train_two_steps(ort, eager, name)
    ort.eval()
    eager.eval()
    x, _ = make_batch(name, seed=8)
    with torch.no_grad():
        ort(x)
        assert not any(m.training for m in ort.module.modules()), "export switched to train()"
        assert_close(ort(x), eager(x), "second eval call")
    assert_buffers_match(ort, eager)  # num_batches_tracked must not move in eval
    assert len(ort._cache) == 2  # the training graph and one eval graph, reused


class DropoutNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.dropout = nn.Dropout(p=0.5)
        self.fc2 = nn.Linear(16, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.dropout(torch.relu(self.fc1(x))))


def test_submodule_eval_inside_train_model_is_respected() -> None:
    torch.manual_seed(0)
    eager = DropoutNet()
    ort = ORTModule(copy.deepcopy(eager))
    for model in (ort.module, eager):
        model.train()
        model.dropout.eval()  # train the model with dropout switched off
    x = torch.randn(10, 8)
    ort_out = ort(x)
    assert not ort.module.dropout.training, "the call switched the dropout back to train()"
    assert_close(ort_out, eager(x), "outputs with an eval() dropout")


def test_eval_graph_reads_running_stats_changed_after_export() -> None:
    ort, eager = make_pair("cnn")
    ort.eval()
    eager.eval()
    x, _ = make_batch("cnn")
    with torch.no_grad():
        assert_close(ort(x), eager(x), "eval before training")  # exported with fresh stats
    ort.eval()  # see test_eval_mode_survives_export
    with torch.no_grad():
        for model in (ort.module, eager):
            model.bn.running_mean.fill_(0.5)
            model.bn.running_var.fill_(4.0)
        assert_close(ort(x), eager(x), "eval after the running statistics changed")


class ZeroBiases(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(6, 6)
        self.b = nn.Linear(6, 6)
        nn.init.zeros_(self.a.bias)
        nn.init.zeros_(self.b.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(torch.tanh(self.a(x)))


def test_eval_with_grad_keeps_equal_valued_parameters_apart() -> None:
    torch.manual_seed(0)
    eager = ZeroBiases()
    ort = ORTModule(copy.deepcopy(eager))
    ort.eval()
    eager.eval()
    x = torch.randn(4, 6)
    ort(x).pow(2).sum().backward()
    eager(x).pow(2).sum().backward()
    assert_grads_match(ort, eager)


class TiedWeights(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(6, 6)
        self.b = nn.Linear(6, 6)
        self.b.weight = self.a.weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(torch.tanh(self.a(x)))


def test_tied_weights_accumulate_both_uses() -> None:
    torch.manual_seed(0)
    eager = TiedWeights()
    ort = ORTModule(copy.deepcopy(eager))
    assert ort.module.a.weight is ort.module.b.weight
    x = torch.randn(4, 6)
    ort(x).pow(2).sum().backward()
    eager(x).pow(2).sum().backward()
    assert_grads_match(ort, eager)


# ---- dropout ----


class ScaledDropout(nn.Module):
    def __init__(self, features: int) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.ones(features))
        self.dropout = nn.Dropout(p=0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(x * self.w)


def _check_dropout_grad(out: torch.Tensor, upstream: torch.Tensor, grad: torch.Tensor) -> None:
    """The gradient is 2 * upstream where the forward kept the element and 0 where it dropped."""
    kept = out.detach() != 0
    expected = torch.where(kept, 2 * upstream, torch.zeros_like(upstream))
    torch.testing.assert_close(grad, expected, rtol=1e-6, atol=0)


def test_dropout_mask_is_reused_in_backward() -> None:
    torch.manual_seed(0)
    ort = ORTModule(ScaledDropout(100))
    x = (torch.rand(50, 100) + 0.5).requires_grad_(True)  # no zeros in the input
    out = ort(x)
    kept = out.detach() != 0
    fraction = kept.float().mean().item()
    assert 0.4 < fraction < 0.6, f"dropout kept {fraction:.3f} of the elements"
    torch.testing.assert_close(out.detach()[kept], 2 * x.detach()[kept], rtol=1e-6, atol=0)

    upstream = torch.randn(50, 100)
    out.backward(upstream)
    assert x.grad is not None
    _check_dropout_grad(out, upstream, x.grad)
    assert (x.grad[~kept] == 0).all()
    expected_w = (2 * upstream * x.detach() * kept).sum(0)
    assert_close(ort.module.w.grad, expected_w, "weight gradient through dropout")


def test_dropout_masks_of_calls_in_flight_stay_apart() -> None:
    torch.manual_seed(0)
    ort = ORTModule(ScaledDropout(64))
    x1 = (torch.rand(32, 64) + 0.5).requires_grad_(True)
    x2 = (torch.rand(32, 64) + 0.5).requires_grad_(True)
    out1 = ort(x1)
    out2 = ort(x2)
    assert not torch.equal(out1 != 0, out2 != 0), "two calls drew the same mask"
    up1 = torch.randn(32, 64)
    up2 = torch.randn(32, 64)
    out2.backward(up2)  # backward in the reverse order of the forward calls
    out1.backward(up1)
    assert x1.grad is not None and x2.grad is not None
    _check_dropout_grad(out1, up1, x1.grad)
    _check_dropout_grad(out2, up2, x2.grad)


def test_dropout_masks_follow_torch_seed() -> None:
    ort = ORTModule(ScaledDropout(64))
    x = torch.rand(32, 64) + 0.5
    torch.manual_seed(123)
    first = ort(x).detach()
    second = ort(x).detach()
    torch.manual_seed(123)
    again = ort(x).detach()
    torch.testing.assert_close(again, first, rtol=0, atol=0)
    assert not torch.equal(first != 0, second != 0), "two calls drew the same mask"


def test_dropout_is_identity_in_eval() -> None:
    ort = ORTModule(ScaledDropout(16))
    ort.eval()
    x = torch.randn(4, 16)
    with torch.no_grad():
        torch.testing.assert_close(ort(x), x, rtol=0, atol=0)


def test_frozen_batchnorm_in_eval_inside_training_model() -> None:
    # Fine-tuning pattern: BatchNorm layers in eval() (fixed statistics) while the rest trains;
    # gradients flow through inference-mode BatchNorm to the conv before it.
    ort, eager = make_pair("cnn")
    for model in (ort.module, eager):
        model.train()
        model.bn.eval()
    x, _ = make_batch("cnn")
    check_steps_match(ort, eager, x)  # the statistics stay untouched
