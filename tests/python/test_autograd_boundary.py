"""Autograd semantics at the ORTModule boundary, next to eager PyTorch: which gradients reach
param.grad (torch.autograd.grad with inputs, parameters also used outside the module), hooks,
retain_graph and a second backward, second-order gradients, and in-place changes of tensors
that backward reads."""

from __future__ import annotations

import copy
from collections.abc import Callable

import pytest
import torch
from torch import nn

from ortmodule import ORTModule
from tests.python.model_zoo import assert_close, loss_of, make_batch, make_pair

EAGER_INPLACE_ERROR = (
    "one of the variables needed for gradient computation has been modified by an inplace "
    "operation"
)


def _grads(model: nn.Module) -> dict[str, torch.Tensor | None]:
    return {n: None if p.grad is None else p.grad.clone() for n, p in model.named_parameters()}


def _assert_same_grads(ort: dict, eager: dict, what: str) -> None:
    assert ort.keys() == eager.keys()
    for name, g in eager.items():
        if g is None:
            assert ort[name] is None, f"{what}: {name} has a gradient; eager has none"
        else:
            assert ort[name] is not None, f"{what}: {name} has no gradient; eager has one"
            assert_close(ort[name], g, f"{what}: {name}")


# ---- which gradients reach .grad ----


def test_autograd_grad_with_inputs_leaves_grad_untouched() -> None:
    ort, eager = make_pair("mlp")
    x, target = make_batch("mlp")
    results = {}
    for kind, model in (("ort", ort), ("eager", eager)):
        model.fc1.bias.grad = torch.ones_like(model.fc1.bias)  # an earlier accumulation
        wanted = [model.fc3.weight, model.fc1.bias]
        results[kind] = torch.autograd.grad(loss_of(model, x, target, False), wanted)
        assert model.fc3.weight.grad is None, f"{kind}: torch.autograd.grad accumulated"
        assert torch.equal(model.fc1.bias.grad, torch.ones_like(model.fc1.bias)), kind
        assert model.fc2.weight.grad is None, kind
    for got, expected in zip(results["ort"], results["eager"]):
        assert_close(got, expected, "gradient returned by torch.autograd.grad")


def test_backward_with_inputs_accumulates_only_those() -> None:
    ort, eager = make_pair("mlp")
    x, target = make_batch("mlp")
    for model in (ort, eager):
        loss_of(model, x, target, False).backward(inputs=[model.fc2.weight])
    _assert_same_grads(_grads(ort), _grads(eager), "backward(inputs=[fc2.weight])")
    assert ort.fc1.weight.grad is None and ort.fc2.weight.grad is not None


def test_parameter_used_inside_and_outside_gets_one_summed_gradient() -> None:
    torch.manual_seed(0)
    eager_inner = nn.Linear(4, 3)
    ort_inner = copy.deepcopy(eager_inner)
    x = torch.randn(5, 4)
    seen = {}
    for kind, inner, model in (("eager", eager_inner, eager_inner),
                               ("ort", ort_inner, ORTModule(ort_inner))):
        events: list = []
        inner.weight.register_hook(lambda g, events=events: events.append(("hook", g.clone())))
        inner.weight.register_post_accumulate_grad_hook(
            lambda p, events=events: events.append(("accumulated", p.grad.clone())))
        # weight feeds the loss inside the module and outside it.
        loss = model(x).square().sum() + (inner.weight * torch.arange(3.0)[:, None]).sum()
        loss.backward()
        seen[kind] = events
    # One hook call with the sum of both contributions, one accumulation, as in eager.
    assert [e[0] for e in seen["ort"]] == [e[0] for e in seen["eager"]] == ["hook", "accumulated"]
    for (_, got), (_, expected) in zip(seen["ort"], seen["eager"]):
        assert_close(got, expected, "gradient of a parameter used inside and outside")
    assert_close(ort_inner.weight.grad, eager_inner.weight.grad, "weight.grad")
    assert_close(ort_inner.bias.grad, eager_inner.bias.grad, "bias.grad")


def test_gradient_hooks_on_parameters_match_eager() -> None:
    ort, eager = make_pair("mlp")
    x, target = make_batch("mlp")
    accumulated = {}
    for kind, model in (("ort", ort), ("eager", eager)):
        model.fc2.weight.register_hook(lambda g: g * 2)  # replaces the gradient
        log: list = []
        for name, p in model.named_parameters():
            p.register_post_accumulate_grad_hook(
                lambda p, name=name, log=log: log.append((name, p.grad.clone())))
        loss_of(model, x, target, False).backward()
        accumulated[kind] = dict(log)
        assert len(log) == len(accumulated[kind]), f"{kind}: a parameter accumulated twice"
    _assert_same_grads(_grads(ort), _grads(eager), "with a doubling hook on fc2.weight")
    _assert_same_grads(accumulated["ort"], accumulated["eager"], "seen by post-accumulate hooks")


# ---- retain_graph and a second backward ----


@pytest.mark.parametrize("loss_inside", [True, False], ids=["loss_inside", "sum_of_outputs"])
def test_second_backward_without_retain_graph_raises_and_applies_nothing_twice(
    loss_inside: bool,
) -> None:
    ort, eager = make_pair("mlp", loss_inside=loss_inside)
    x, target = make_batch("mlp")
    once = {}
    for kind, model in (("ort", ort), ("eager", eager)):
        loss = model(x, target) if loss_inside else model(x).square().sum()
        loss.backward()
        once[kind] = _grads(model)
        with pytest.raises(RuntimeError, match="backward through the graph a second time"):
            loss.backward()
        after = _grads(model)
        for name, g in once[kind].items():
            assert torch.equal(after[name], g), f"{kind}: {name} changed by the failed backward"
    _assert_same_grads(once["ort"], once["eager"], "after one backward")


def test_retain_graph_twice_accumulates_twice() -> None:
    ort, eager = make_pair("mlp", loss_inside=True)
    x, target = make_batch("mlp")
    for model in (ort, eager):
        loss = model(x, target)
        loss.backward(retain_graph=True)
        loss.backward(retain_graph=True)
        loss.backward()
    _assert_same_grads(_grads(ort), _grads(eager), "after three backwards of one forward")
    single = copy.deepcopy(eager)
    single.zero_grad()
    single(x, target).backward()
    assert_close(ort.fc1.weight.grad, 3 * single.fc1.weight.grad, "three times one backward")


# ---- second-order gradients ----


@pytest.mark.filterwarnings("ignore:Using backward\\(\\) with create_graph=True")
@pytest.mark.parametrize("how", ["autograd_grad", "backward"])
def test_create_graph_is_refused(how: str) -> None:
    ort, _ = make_pair("mlp")
    x, target = make_batch("mlp")
    x.requires_grad_(True)
    loss = loss_of(ort, x, target, False)
    message = (r"second-order gradients are not supported.*ORTModule.*create_graph=True.*"
               r"plain module")
    with pytest.raises(RuntimeError, match=message):
        if how == "autograd_grad":
            torch.autograd.grad(loss, x, create_graph=True)
        else:
            loss.backward(create_graph=True)
    assert all(p.grad is None for p in ort.parameters())


# ---- in-place changes of tensors backward reads ----


class Activation(nn.Module):
    """Linear followed by an activation whose gradient reads its output."""

    def __init__(self, activation: Callable[[torch.Tensor], torch.Tensor],
                 flatten: bool = False) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 3)
        self.activation = activation
        self.flatten = flatten

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.activation(self.fc(x))
        return y.flatten() if self.flatten else y  # flatten: the output is a view of y


ACTIVATIONS = {"sigmoid": torch.sigmoid, "tanh": torch.tanh, "exp": torch.exp}


def _activation_pair(name: str, flatten: bool = False) -> tuple[ORTModule, nn.Module]:
    torch.manual_seed(0)
    eager = Activation(ACTIVATIONS[name], flatten)
    return ORTModule(copy.deepcopy(eager)), eager


@pytest.mark.parametrize("change", ["mul_", "view_add_", "flattened_output"])
@pytest.mark.parametrize("name", list(ACTIVATIONS))
def test_in_place_change_of_output_backward_reads_raises(name: str, change: str) -> None:
    ort, eager = _activation_pair(name, flatten=change == "flattened_output")
    x = torch.randn(5, 4)
    for kind, model in (("eager", eager), ("ort", ort)):
        y = model(x)
        if change == "view_add_":
            y[0].add_(1.0)
        else:
            y.mul_(2.0)
        match = EAGER_INPLACE_ERROR + (r".*output 0 .*of the ORTModule" if kind == "ort" else "")
        with pytest.raises(RuntimeError, match=match):
            y.sum().backward()


def test_in_place_change_of_output_backward_does_not_read_matches_eager() -> None:
    torch.manual_seed(0)
    eager = nn.Sequential(nn.Linear(4, 6), nn.ReLU(), nn.Linear(6, 3))
    ort = ORTModule(copy.deepcopy(eager))
    x = torch.randn(5, 4)
    for model in (ort, eager):
        y = model(x)
        y.mul_(2.0)  # the last Linear's backward reads its input and weight, not y
        y[1:].add_(1.0)
        y.square().sum().backward()
    _assert_same_grads(_grads(ort), _grads(eager), "after an in-place change of the output")
