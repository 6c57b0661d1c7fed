"""Custom torch.autograd.Function inside a wrapped model: the engine calls the Function's own
forward and backward (a bridge node), never the gradient of its inlined forward.

Every test compares with eager PyTorch on a copy of the model: outputs, input and parameter
gradients, and parameters after optimizer steps.
"""

from __future__ import annotations

import copy
import gc
import types
import weakref

import pytest
import torch
from torch import nn

from ortmodule import ExportError, ORTModule
from tests.python.model_zoo import assert_close, assert_grads_match, assert_params_match

# float64 keeps rounding decisions (round, sign) identical between engine and eager.
DTYPE = torch.float64
TOL = {"rtol": 1e-10, "atol": 1e-12}


def close(actual: torch.Tensor, expected: torch.Tensor, what: str) -> None:
    assert_close(actual, expected, what, **TOL)


def grads_match(ort: ORTModule, eager: nn.Module) -> None:
    assert_grads_match(ort, eager, **TOL)


def params_match(ort: ORTModule, eager: nn.Module) -> None:
    assert_params_match(ort, eager, **TOL)


def pair(model: nn.Module) -> tuple[ORTModule, nn.Module]:
    model = model.to(DTYPE)
    return ORTModule(copy.deepcopy(model)), model


def batch(*shape: int, seed: int = 0, requires_grad: bool = False) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=DTYPE).requires_grad_(requires_grad)


# ---- Functions under test ----


class RoundSTE(torch.autograd.Function):
    """Straight-through estimator: round in forward, identity in backward."""

    @staticmethod
    def forward(ctx, x):
        return torch.round(x)

    @staticmethod
    def backward(ctx, grad):
        return grad


class ScaledProduct(torch.autograd.Function):
    """x * w with a custom backward that is not the true gradient (scaled by 3 and 0.5);
    saves its inputs for backward and reads a non-tensor argument in both passes."""

    @staticmethod
    def forward(ctx, x, w, scale: float, mode: str, nothing: None):
        assert mode == "product" and nothing is None
        ctx.save_for_backward(x, w)
        ctx.scale = scale
        return x * w * scale

    @staticmethod
    def backward(ctx, grad):
        x, w = ctx.saved_tensors
        gx = 3.0 * grad * w * ctx.scale if ctx.needs_input_grad[0] else None
        gw = 0.5 * (grad * x).sum(0) * ctx.scale if ctx.needs_input_grad[1] else None
        return gx, gw, None, None, None


class SplitSigns(torch.autograd.Function):
    """Two differentiable outputs and a non-differentiable mask."""

    @staticmethod
    def forward(ctx, x):
        mask = x > 0
        ctx.mark_non_differentiable(mask)
        ctx.save_for_backward(mask)
        return x.clamp(min=0), x.clamp(max=0), mask

    @staticmethod
    def backward(ctx, grad_pos, grad_neg, grad_mask):
        (mask,) = ctx.saved_tensors
        assert grad_mask is None or not grad_mask.any()
        return torch.where(mask, 2.0 * grad_pos, -grad_neg)


class Pairwise(torch.autograd.Function):
    """a * b + a with a backward written per input: correct when a and b are one tensor."""

    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return a * b + a

    @staticmethod
    def backward(ctx, grad):
        a, b = ctx.saved_tensors
        return grad * (b + 1.0), grad * a * 4.0


NEEDS: list[tuple[bool, ...]] = []


class RecordNeeds(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w):
        return x * w

    @staticmethod
    def backward(ctx, grad):
        NEEDS.append(tuple(ctx.needs_input_grad))
        x_grad = grad * 2.0 if ctx.needs_input_grad[0] else None
        w_grad = grad.sum(0) * 2.0 if ctx.needs_input_grad[1] else None
        return x_grad, w_grad


class SetupContextStyle(torch.autograd.Function):
    """forward without ctx plus setup_context (the functorch-compatible form)."""

    @staticmethod
    def forward(x, k):
        return x.sin() * k

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, k = inputs
        ctx.save_for_backward(x)
        ctx.k = k

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * ctx.k * x.cos() * 10.0, None


# Bound before any capture, as libraries often do (``quantize = Quantize.apply``).
sin_scaled = SetupContextStyle.apply


class Noisy(torch.autograd.Function):
    """Draws from torch's generator in forward."""

    @staticmethod
    def forward(ctx, x):
        return x + torch.rand_like(x)

    @staticmethod
    def backward(ctx, grad):
        return grad * 0.25


def _quantize_class(module_name: str, step: float, grad_scale: float) -> type:
    """Two classes named ``Quantize`` in different modules, each with its own backward."""

    def forward(ctx, x):
        return torch.round(x / step) * step

    def backward(ctx, grad):
        return grad * grad_scale

    module = types.ModuleType(module_name)
    cls = type("Quantize", (torch.autograd.Function,),
               {"forward": staticmethod(forward), "backward": staticmethod(backward),
                "__module__": module_name})
    module.Quantize = cls
    return cls


QuantizeA = _quantize_class("quant_pkg_a.ops", 0.5, 1.0)
QuantizeB = _quantize_class("quant_pkg_b.ops", 0.25, 7.0)


# ---- models ----


class QuantizedMLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.fc1 = nn.Linear(6, 8)
        self.fc2 = nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(RoundSTE.apply(self.fc1(x) * 4.0)))


class ScaledModel(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(1)
        self.fc = nn.Linear(5, 4)
        self.w = nn.Parameter(torch.randn(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ScaledProduct.apply(self.fc(x), self.w, 0.75, "product", None)


def train(ort: ORTModule, eager: nn.Module, x: torch.Tensor, steps: int) -> None:
    """``steps`` SGD steps on both; outputs and gradients must match at every step."""
    opt_ort = torch.optim.SGD(ort.parameters(), lr=0.1, momentum=0.9)
    opt_eager = torch.optim.SGD(eager.parameters(), lr=0.1, momentum=0.9)
    for step in range(steps):
        opt_ort.zero_grad()
        opt_eager.zero_grad()
        y_ort, y_eager = ort(x), eager(x)
        close(y_ort, y_eager, f"output at step {step}")
        (y_ort ** 2).mean().backward()
        (y_eager ** 2).mean().backward()
        grads_match(ort, eager)
        opt_ort.step()
        opt_eager.step()
    params_match(ort, eager)


# ---- tests ----


def test_straight_through_estimator_trains_like_eager() -> None:
    ort, eager = pair(QuantizedMLP())
    x = batch(16, 6)
    train(ort, eager, x, steps=5)
    # The custom backward passes gradients through round(), whose own gradient is zero:
    # fc1 would not learn at all if the Function's forward were inlined.
    assert ort.module.fc1.weight.grad.abs().sum() > 0


def test_custom_scaled_backward_and_non_tensor_arguments() -> None:
    ort, eager = pair(ScaledModel())
    x_ort, x_eager = batch(7, 5, requires_grad=True), batch(7, 5, requires_grad=True)
    y_ort, y_eager = ort(x_ort), eager(x_eager)
    close(y_ort, y_eager, "output")
    y_ort.sum().backward()
    y_eager.sum().backward()
    grads_match(ort, eager)
    close(x_ort.grad, x_eager.grad, "input gradient")
    train(ort, eager, batch(7, 5, seed=3), steps=3)


def test_several_outputs_and_mark_non_differentiable() -> None:
    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(2)
            self.fc = nn.Linear(4, 6)

        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            pos, neg, mask = SplitSigns.apply(self.fc(x))
            return pos * 3.0 + neg * neg + mask.to(x.dtype), mask

    ort, eager = pair(Model())
    x = batch(5, 4)
    (y_ort, mask_ort), (y_eager, mask_eager) = ort(x), eager(x)
    close(y_ort, y_eager, "output")
    assert mask_ort.dtype == torch.bool and torch.equal(mask_ort, mask_eager)
    assert not mask_ort.requires_grad
    y_ort.sum().backward()
    y_eager.sum().backward()
    grads_match(ort, eager)


def test_same_tensor_passed_twice() -> None:
    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(3)
            self.fc = nn.Linear(3, 3)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = self.fc(x)
            return Pairwise.apply(h, h)

    ort, eager = pair(Model())
    x_ort, x_eager = batch(4, 3, requires_grad=True), batch(4, 3, requires_grad=True)
    y_ort, y_eager = ort(x_ort), eager(x_eager)
    close(y_ort, y_eager, "output")
    y_ort.sum().backward()
    y_eager.sum().backward()
    grads_match(ort, eager)
    close(x_ort.grad, x_eager.grad, "input gradient")


@pytest.mark.parametrize("x_requires_grad", [True, False])
@pytest.mark.parametrize("w_requires_grad", [True, False])
def test_needs_input_grad_as_in_eager(x_requires_grad: bool, w_requires_grad: bool) -> None:
    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = nn.Parameter(torch.linspace(-1, 1, 3))
            self.b = nn.Parameter(torch.ones(3))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return RecordNeeds.apply(x, self.w) + self.b

    ort, eager = pair(Model())
    ort.module.w.requires_grad_(w_requires_grad)
    eager.w.requires_grad_(w_requires_grad)
    x_ort = batch(2, 3, requires_grad=x_requires_grad)
    x_eager = batch(2, 3, requires_grad=x_requires_grad)
    NEEDS.clear()
    ort(x_ort).sum().backward()
    ort_needs = list(NEEDS)
    NEEDS.clear()
    eager(x_eager).sum().backward()
    assert ort_needs == NEEDS
    grads_match(ort, eager)
    if x_requires_grad:
        close(x_ort.grad, x_eager.grad, "input gradient")


def test_setup_context_style_function_through_an_alias_of_apply() -> None:
    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(4)
            self.fc = nn.Linear(3, 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return sin_scaled(self.fc(x), 1.5)

    ort, eager = pair(Model())
    train(ort, eager, batch(6, 3), steps=2)


def test_same_class_name_in_two_modules_is_not_confused() -> None:
    assert QuantizeA.__name__ == QuantizeB.__name__ == "Quantize"

    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(5)
            self.a = nn.Linear(4, 4)
            self.b = nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return QuantizeA.apply(self.a(x)) + QuantizeB.apply(self.b(x))

    ort, eager = pair(Model())
    train(ort, eager, batch(8, 4), steps=3)


def test_random_ops_inside_draw_from_torch_generator_as_in_eager() -> None:
    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(6)
            self.fc = nn.Linear(3, 3)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return Noisy.apply(self.fc(x)) * 2.0

    ort, eager = pair(Model())
    x = batch(4, 3)
    ort(x)  # the first call exports; export leaves torch's generator as it found it
    for step in range(2):
        torch.manual_seed(100 + step)
        y_ort = ort(x)
        state_ort = torch.get_rng_state()
        torch.manual_seed(100 + step)
        y_eager = eager(x)
        assert torch.equal(state_ort, torch.get_rng_state()), "generator advanced differently"
        close(y_ort, y_eager, f"output at step {step}")
        y_ort.sum().backward()
        y_eager.sum().backward()
        grads_match(ort, eager)


def test_retain_graph_runs_the_custom_backward_twice() -> None:
    ort, eager = pair(ScaledModel())
    x = batch(3, 5)
    y_ort, y_eager = ort(x), eager(x)
    for _ in range(2):
        y_ort.sum().backward(retain_graph=True)
        y_eager.sum().backward(retain_graph=True)
        grads_match(ort, eager)


def test_no_grad_and_eval_run_the_function_forward() -> None:
    ort, eager = pair(QuantizedMLP())
    x = batch(4, 6)
    with torch.no_grad():
        close(ort(x), eager(x), "output under no_grad")
    ort.eval()
    eager.eval()
    close(ort(x), eager(x), "output in eval mode")


class InPlaceDouble(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        x.mul_(2.0)
        ctx.mark_dirty(x)
        return x

    @staticmethod
    def backward(ctx, grad):
        return grad * 2.0


def test_function_that_cannot_be_bridged_is_named() -> None:
    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(3, 3)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return InPlaceDouble.apply(self.fc(x) + 1.0)

    ort = ORTModule(Model().to(DTYPE))
    with pytest.raises(ExportError) as info:
        ort(batch(2, 3))
    message = str(info.value)
    assert f"{__name__}.InPlaceDouble" in message
    assert "in place" in message and "mark_dirty" in message


class FailsLater(torch.autograd.Function):
    armed = False

    @staticmethod
    def forward(ctx, x):
        if FailsLater.armed:
            raise ValueError("forward refused this batch")
        return x * 2.0

    @staticmethod
    def backward(ctx, grad):
        return grad * 2.0


def test_exception_in_function_forward_keeps_its_type_and_message() -> None:
    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(3, 3)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return FailsLater.apply(self.fc(x))

    ort = ORTModule(Model().to(DTYPE))
    x = batch(2, 3)
    ort(x).sum().backward()
    FailsLater.armed = True
    try:
        with pytest.raises(ValueError, match="forward refused this batch"):
            ort(x)
    finally:
        FailsLater.armed = False
    ort(x).sum().backward()  # and the graph still works afterwards


CONTEXTS: list = []


class Tracked(torch.autograd.Function):
    """Keeps a weak reference to each ctx: the record of a call must not outlive its step."""

    @staticmethod
    def forward(ctx, x):
        CONTEXTS.append(weakref.ref(ctx))
        ctx.save_for_backward(x)
        return x * 3.0

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * 3.0 + x * 0.0


def test_the_record_of_a_call_is_freed_after_backward_or_with_the_outputs() -> None:
    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(3, 3)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return Tracked.apply(self.fc(x))

    ort = ORTModule(Model().to(DTYPE))
    x = batch(2, 3)
    ort(x).sum().backward()  # the first call also exports
    CONTEXTS.clear()
    y = ort(x)
    (ctx,) = CONTEXTS
    assert ctx() is not None  # kept for backward
    y.sum().backward()
    gc.collect()
    assert ctx() is None, "the call's record outlived backward"
    CONTEXTS.clear()
    y = ort(x)
    (ctx,) = CONTEXTS
    del y  # no backward: the record goes with the outputs
    gc.collect()
    assert ctx() is None, "the call's record outlived its outputs"


class ThroughNumpy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return torch.from_numpy(x.detach().numpy() * 2.0)

    @staticmethod
    def backward(ctx, grad):
        return grad * 2.0


def test_function_whose_forward_reads_values_is_named() -> None:
    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(3, 3)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return ThroughNumpy.apply(self.fc(x))

    ort = ORTModule(Model().to(DTYPE))
    with pytest.raises(ExportError) as info:
        ort(batch(2, 3))
    message = str(info.value)
    assert f"{__name__}.ThroughNumpy" in message
    assert "symbolic tensors" in message


class SavesInput(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x)
        return x * w

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return None, (grad * x).sum(0)


def test_input_saved_by_a_function_and_modified_in_place_is_reported_like_eager() -> None:
    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = nn.Parameter(torch.ones(3))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return SavesInput.apply(x, self.w)

    ort, eager = pair(Model())
    x_ort, x_eager = batch(2, 3), batch(2, 3)
    y_ort, y_eager = ort(x_ort), eager(x_eager)
    x_ort.add_(1.0)
    x_eager.add_(1.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y_eager.sum().backward()
    with pytest.raises(RuntimeError, match="modified in place"):
        y_ort.sum().backward()
