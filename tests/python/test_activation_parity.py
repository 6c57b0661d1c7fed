"""Eager PyTorch vs ORTModule (the fx exporter: every op lowers natively, no torch.onnx
fallback): forward values and the gradients of the input, a scale parameter and any tensor
operands, for the activations, rounding, trigonometric and hyperbolic functions, clamps,
softplus, erfcx and log_ndtr. The inputs hold the kinks (0, +-1, +-3, 6, the clamp bounds)
where eager's gradient conventions differ from op to op, and wide ranges (-40..40).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from ortmodule import DebugOptions, ORTModule

aten = torch.ops.aten

# Kinks of the piecewise ops, the clamp bounds used below, and values beside them.
KINKS = [-40.0, -7.0, -6.0, -3.5, -3.0, -2.5, -1.0, -0.5, -1e-3, 0.0, 1e-3, 0.25, 0.3, 0.5,
         1.0, 2.9, 3.0, 3.1, 6.0, 7.0, 25.0, 40.0]
WIDE = torch.linspace(-40, 40, 161).tolist() + KINKS


class Apply(nn.Module):
    """fn(x * scale, *operands), the scale a parameter (1: x reaches fn unchanged)."""

    def __init__(self, fn: Callable[..., torch.Tensor]) -> None:
        super().__init__()
        self.fn = fn
        self.scale = nn.Parameter(torch.ones(()))

    def forward(self, x: torch.Tensor, *operands: torch.Tensor) -> torch.Tensor:
        return self.fn(x * self.scale, *operands)


def check(fn: Callable[..., torch.Tensor], x: list[float] | torch.Tensor,
          *operands: torch.Tensor, dtype: torch.dtype = torch.float32, rtol: float = 1e-5,
          atol: float = 1e-6, grad_rtol: float | None = None,
          grad_atol: float | None = None) -> None:
    x = torch.as_tensor(x, dtype=dtype)
    eager = Apply(fn).to(dtype)
    ort = ORTModule(Apply(fn).to(dtype), debug_options=DebugOptions(exporter="fx"))
    weights = torch.linspace(0.5, 1.5, x.numel(), dtype=dtype).reshape(x.shape)
    results = []
    for model in (eager, ort):
        xi = x.clone().requires_grad_(True)
        ops = [o.detach().clone().requires_grad_(o.is_floating_point()) for o in operands]
        y = model(xi, *ops)
        (y * weights.reshape(y.shape) if y.shape == x.shape else y).sum().backward()
        results.append((y.detach(), xi.grad, model.scale.grad, [o.grad for o in ops]))
    (y_e, gx_e, gs_e, go_e), (y_o, gx_o, gs_o, go_o) = results
    torch.testing.assert_close(y_o, y_e, rtol=rtol, atol=atol, equal_nan=True)
    gr = rtol if grad_rtol is None else grad_rtol
    ga = atol if grad_atol is None else grad_atol
    torch.testing.assert_close(gx_o, gx_e, rtol=gr, atol=ga, equal_nan=True)
    torch.testing.assert_close(gs_o, gs_e, rtol=gr, atol=ga * x.numel(), equal_nan=True)
    for o, e in zip(go_o, go_e):
        if e is None:
            assert o is None
        else:
            torch.testing.assert_close(o, e, rtol=gr, atol=ga, equal_nan=True)


def _inplace(fn: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    return lambda v, *rest: fn(v.clone(), *rest)


ACTIVATIONS: dict[str, Callable[..., torch.Tensor]] = {
    "elu": lambda v: F.elu(v),
    "elu_alpha": lambda v: F.elu(v, 0.7),
    "elu_": _inplace(lambda v: F.elu(v, 0.7, inplace=True)),
    "aten_elu_scaled": lambda v: aten.elu(v, 0.5, 2.0, 1.5),
    "aten_elu_selu_form": lambda v: aten.elu(v, 1.5, 2.0),
    "selu": F.selu,
    "selu_": _inplace(lambda v: F.selu(v, inplace=True)),
    "celu": lambda v: F.celu(v, 0.5),
    "celu_": _inplace(lambda v: F.celu(v, 1.0, inplace=True)),
    "hardsigmoid": F.hardsigmoid,
    "hardsigmoid_": _inplace(lambda v: F.hardsigmoid(v, inplace=True)),
    "hardswish": F.hardswish,
    "hardswish_": _inplace(lambda v: F.hardswish(v, inplace=True)),
    "mish": F.mish,
    "mish_": _inplace(lambda v: F.mish(v, inplace=True)),
    "relu6": F.relu6,
    "relu6_": _inplace(lambda v: F.relu6(v, inplace=True)),
    "relu6_module": nn.ReLU6(),
    "hardtanh": F.hardtanh,
    "hardtanh_bounds": lambda v: F.hardtanh(v, -0.5, 0.25),
    "hardtanh_": _inplace(lambda v: F.hardtanh(v, -3.0, 3.0, inplace=True)),
    "clamp": lambda v: torch.clamp(v, -0.5, 0.25),
    "clamp_min": lambda v: torch.clamp_min(v, 0.0),
    "clamp_min_": _inplace(lambda v: v.clamp_min_(-1.0)),
    "clamp_max": lambda v: v.clamp_max(0.3),
    "clamp_max_": _inplace(lambda v: v.clamp_max_(3.0)),
    "softplus": F.softplus,
    "softplus_beta": lambda v: F.softplus(v, beta=2.0, threshold=1.0),
    "softplus_small_beta": lambda v: F.softplus(v, beta=0.5, threshold=3.0),
    "softplus_beta_default_threshold": lambda v: F.softplus(v, beta=3.0),
}


@pytest.mark.parametrize("name", list(ACTIVATIONS))
def test_activation_matches_eager(name: str) -> None:
    check(ACTIVATIONS[name], WIDE)


@pytest.mark.parametrize("name", ["elu", "selu", "celu", "hardswish", "mish", "softplus_beta"])
def test_activation_matches_eager_float64(name: str) -> None:
    # (the attributes of Selu and Celu are float32, as ONNX stores them: eager's float64
    # constants differ from them by about 1e-8)
    check(ACTIVATIONS[name], WIDE, dtype=torch.float64, rtol=1e-7, atol=1e-9)


def test_kink_gradients_are_eagers() -> None:
    """The conventions themselves, at the kinks: eager's gradient, and the engine's."""
    kinks = [-3.0, 0.0, 3.0, 6.0]
    check(F.hardswish, kinks, rtol=0, atol=0)      # 0 at -3, 1 at 3
    check(F.hardsigmoid, kinks, rtol=0, atol=0)    # 0 at +-3
    check(F.relu6, kinks, rtol=0, atol=0)          # 0 at 0 and 6
    check(lambda v: torch.clamp(v, 0.0, 6.0), kinks, rtol=0, atol=0)  # 1 at 0 and 6
    check(F.selu, kinks, rtol=1e-6, atol=0)        # alpha * scale at 0
    x = torch.tensor(kinks, requires_grad=True)
    F.hardswish(x).sum().backward()
    assert x.grad.tolist() == [0.0, 0.5, 1.0, 1.0]


UNARY: dict[str, tuple[Callable[..., torch.Tensor], list[float]]] = {
    "tan": (torch.tan, [-1.4, -0.7, 0.0, 0.3, 1.2, 1.5]),
    "asin": (torch.asin, [-0.99, -0.5, 0.0, 0.4, 0.9]),
    "acos": (torch.acos, [-0.99, -0.5, 0.0, 0.4, 0.9]),
    "atan": (torch.atan, [-40.0, -2.0, 0.0, 0.5, 3.0, 40.0]),
    "sinh": (torch.sinh, [-10.0, -1.0, 0.0, 0.5, 3.0, 10.0]),
    "cosh": (torch.cosh, [-10.0, -1.0, 0.0, 0.5, 3.0, 10.0]),
    "asinh": (torch.asinh, [-40.0, -1.0, 0.0, 0.5, 3.0, 40.0]),
    "acosh": (torch.acosh, [1.01, 1.5, 3.0, 40.0]),
    "atanh": (torch.atanh, [-0.99, -0.5, 0.0, 0.4, 0.9]),
    "tan_": (_inplace(lambda v: v.tan_()), [-1.0, 0.2, 1.1]),
    "sinh_": (_inplace(lambda v: v.sinh_()), [-3.0, 0.2, 2.7]),
}


@pytest.mark.parametrize("name", list(UNARY))
def test_trigonometric_matches_eager(name: str) -> None:
    fn, x = UNARY[name]
    check(fn, x, rtol=2e-6, atol=1e-6)


def test_atan2_matches_eager() -> None:
    a = [[-2.0, -0.5, 0.7], [1.5, -3.0, 0.25]]
    b = torch.tensor([0.3, -1.2, 2.0])
    check(torch.atan2, a, b)
    check(lambda v, w: torch.atan2(w, v), a, b)  # the second operand's gradient too


ROUNDING: dict[str, Callable[..., torch.Tensor]] = {
    "round": torch.round,
    "round_decimals": lambda v: torch.round(v, decimals=2),
    "round_negative_decimals": lambda v: torch.round(v, decimals=-1),
    "round_": _inplace(lambda v: v.round_()),
}


@pytest.mark.parametrize("name", list(ROUNDING))
def test_round_matches_eager(name: str) -> None:
    """Ties to even; the gradient is zero, as eager's."""
    x = [-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 1.234, -7.777, 15.0, 25.0, 123.456]
    check(ROUNDING[name], x, rtol=0, atol=0)


def test_clamp_with_tensor_bounds_matches_eager() -> None:
    x = [-2.0, -1.0, -0.5, 0.0, 0.5, 1.0, 2.0]
    lo = torch.tensor([-1.0, -1.0, -1.0, -1.0, 0.6, 0.6, 3.0])
    hi = torch.tensor([1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0])  # the last: min > max
    check(lambda v, a, b: torch.clamp(v, a, b), x, lo, hi)
    check(lambda v, a: torch.clamp(v, min=a), x, lo)
    check(lambda v, b: torch.clamp(v, max=b), x, hi)
    check(lambda v, a: torch.clamp_min(v, a), x, lo)
    check(lambda v, b: torch.clamp_max(v, b), x, hi)
    check(lambda v, a: torch.clamp(v, a[:1], 0.5 + a[:1]), x, lo)  # broadcast bounds


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_special_functions_match_eager_over_wide_ranges(dtype: torch.dtype) -> None:
    tight = dtype == torch.float64
    # log_ndtr: eager's float32 gradient cancels (result + x^2/2 near -40), to about 1e-4.
    check(torch.special.log_ndtr, WIDE, dtype=dtype, rtol=1e-12 if tight else 1e-5,
          atol=1e-12 if tight else 1e-6, grad_rtol=1e-9 if tight else 2e-4,
          grad_atol=1e-12 if tight else 1e-6)
    # erfcx: inf below about -26.6 (float64) / -9.4 (float32), as eager; its gradient
    # 2 x erfcx(x) - 2/sqrt(pi) cancels for large x in both.
    check(torch.special.erfcx, WIDE, dtype=dtype, rtol=1e-12 if tight else 2e-6,
          atol=1e-12 if tight else 1e-7, grad_rtol=1e-6 if tight else 1e-4,
          grad_atol=1e-12 if tight else 2e-6)


def test_log_ndtr_is_finite_and_accurate_far_below_zero() -> None:
    x = torch.tensor([-40.0, -20.0, -10.0, -6.5], dtype=torch.float64)
    ort = ORTModule(Apply(torch.special.log_ndtr).double(),
                    debug_options=DebugOptions(exporter="fx"))
    y = ort(x)
    assert torch.isfinite(y).all()
    # The asymptotic series: log Phi(x) = -x^2/2 - log(-x sqrt(2 pi)) + log(1 - 1/x^2 + ...).
    series = (-x * x / 2 - torch.log(-x * (2 * torch.pi) ** 0.5)
              + torch.log1p(-1 / x**2 + 3 / x**4 - 15 / x**6 + 105 / x**8 - 945 / x**10))
    torch.testing.assert_close(y.detach()[:2], series[:2], rtol=1e-12, atol=0)


def _loss_model(loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> nn.Module:
    class LossNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(4, 3)

        def forward(self, x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
            return loss(self.fc(x), target)
    torch.manual_seed(0)
    return LossNet()


@pytest.mark.parametrize("loss", [F.hinge_embedding_loss, F.soft_margin_loss,
                                  lambda y, t: F.relu6(y * 4).sum() + torch.clamp_min(y, 0).sum()])
def test_losses_through_torch_onnx_clamp_train(loss: Any) -> None:
    """torch.onnx writes Clip's bounds as CastLike(bound, x): the bounds follow x's dtype but
    carry no gradient, so training does not refuse them."""
    eager = _loss_model(loss)
    ort = ORTModule(_loss_model(loss), debug_options=DebugOptions(exporter="auto"))
    x = torch.randn(5, 4)
    target = torch.tensor([1.0, -1.0, 1.0]).expand(5, 3).contiguous()
    for model in (eager, ort):
        model(x, target).backward()
    for (name, p), (_, q) in zip(eager.named_parameters(), ort.named_parameters()):
        torch.testing.assert_close(q.grad, p.grad, rtol=1e-5, atol=1e-6, msg=name)
