"""fill / zero (functional and in place), native_layer_norm's three results and circular
padding through the fx exporter with no bridging, forward and input gradients against eager:
a filled output requires grad as eager's does (x's gradient is zero, a tensor fill value gets
the sum), the saved mean and inverse deviation carry no gradient, circular pads crop with
negative pads and wrap once."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from ortmodule import ORTModule
from tests.python.parity_utils import FX, Apply, check


def randn(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed))


def test_fill_scalar_and_tensor_value() -> None:
    check(lambda x: torch.fill(x, 2.5) * x, randn(3, 4))
    check(lambda x, v: torch.fill(x, v) * x, randn(3, 4), torch.tensor(0.75))


def test_fill_output_requires_grad_like_eager() -> None:
    x = randn(2, 3).requires_grad_()
    y = ORTModule(Apply(lambda t: torch.fill(t, 1.0)), FX)(x)
    assert y.requires_grad
    y.sum().backward()
    assert torch.equal(x.grad, torch.zeros_like(x))


def test_in_place_fill_and_zero_of_intermediates() -> None:
    def fill_(x: torch.Tensor) -> torch.Tensor:
        h = x * 2
        h[0].fill_(3.0)
        return h * x

    def zero_(x: torch.Tensor) -> torch.Tensor:
        h = x * 3.0
        h[:, 1].zero_()
        return h + x

    check(fill_, randn(3, 4))
    check(zero_, randn(3, 4))
    check(lambda x: torch.zero_(x * 1.0) + x, randn(5))


@pytest.mark.parametrize("affine", [True, False])
def test_native_layer_norm_all_results(affine: bool) -> None:
    w, b = (randn(3, 5, seed=1), randn(3, 5, seed=2)) if affine else (None, None)

    def ln(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        y, mean, rstd = torch.native_layer_norm(x, [3, 5], w, b, 1e-5)
        return y, mean, rstd

    check(ln, randn(2, 4, 3, 5))
    x = randn(2, 4, 3, 5).requires_grad_()
    _, mean, rstd = ORTModule(Apply(ln), FX)(x)
    assert mean.shape == (2, 4, 1, 1) and not mean.requires_grad and not rstd.requires_grad


@pytest.mark.parametrize("shape,pad", [
    ((2, 3, 5), (1, 2)),
    ((2, 3, 5), (0, 5)),
    ((1, 3, 4, 5), (-1, 1, -2, 1)),
    ((1, 3, 4, 5), (2, -1, 1, -2)),
    ((2, 4, 5), (4, 4, 3, 3)),
    ((1, 2, 3, 3, 3), (1, 1, 1, 1, 1, 1)),
    ((0, 3, 3), (1, 2)),
])
def test_circular_pad(shape, pad) -> None:
    check(lambda x: F.pad(x, pad, mode="circular"), randn(*shape))
