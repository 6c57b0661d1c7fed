"""Elementary functions through the fx exporter with no bridging (log2, log10, exp2, erfc,
logaddexp2, hypot, trunc, frac, signbit, copysign, fmax, fmin, logical_xor, angle; addbmm),
forward and input gradients against eager PyTorch on the inputs where a naive formula goes
wrong: signed zeros, NaN, infinities, ties, tails, values whose squares overflow, integer
inputs."""

from __future__ import annotations

import math

import pytest
import torch

from ortmodule import ORTModule
from tests.python.parity_utils import FX, Apply, check

NAN, INF = math.nan, math.inf


def t(*values: float, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.tensor(values, dtype=dtype)


def randn(*shape: int, seed: int = 0, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_log_bases_and_exp2(dtype: torch.dtype) -> None:
    x = t(1e-30, 0.5, 1.0, 2.0, 1024.0, 3.7e5, dtype=dtype)
    rtol = 1e-6 if dtype == torch.float32 else 1e-12
    check(torch.log2, x, rtol=rtol, atol=0)
    check(torch.log10, x, rtol=rtol, atol=0)
    check(torch.exp2, t(-100.0, -3.5, 0.0, 1.0, 10.0, 60.0, dtype=dtype), rtol=1e-5, atol=0)


def test_log2_exp2_of_integers_give_floats() -> None:
    x = torch.tensor([1, 2, 8, 1000], dtype=torch.int64)
    check(torch.log2, x)
    check(torch.exp2, x)


def test_logaddexp2_far_apart_tied_and_infinite() -> None:
    a = t(0.0, 3.0, 5.0, -INF, 2.0, 40.0, INF, 7.0)
    b = t(-40.0, 3.0, -1.0, 1.0, NAN, 40.0, 2.0, -INF)
    check(torch.logaddexp2, a, b, rtol=1e-6, atol=0)
    check(torch.logaddexp2, randn(4, 5), randn(5, seed=1))  # broadcast


def test_logaddexp2_of_equal_infinities_is_that_infinity() -> None:
    # The value only: eager's gradient there is NaN, the engine's goes to a.
    a, b = t(-INF, INF, -INF), t(-INF, INF, INF)
    model = ORTModule(Apply(torch.logaddexp2), FX)
    with torch.no_grad():
        torch.testing.assert_close(model(a, b), torch.logaddexp2(a, b))


def test_hypot_without_overflow_or_underflow() -> None:
    a = t(3.0, 1e30, 1e-30, 0.5, -2.0)
    b = t(4.0, 1e30, 1e-30, -0.5, 0.0)
    check(torch.hypot, a, b, rtol=1e-6, atol=0)


def test_trunc_frac_and_their_gradients() -> None:
    x = t(-2.7, -1.0, -0.3, -0.0, 0.0, 0.3, 1.0, 2.7, 1e9)
    check(torch.trunc, x)
    check(torch.frac, x)
    check(torch.trunc, torch.tensor([-3, 0, 4]))


def test_signbit_sees_minus_zero() -> None:
    x = t(-2.0, -0.0, 0.0, 3.0, -INF, INF)
    check(torch.signbit, x)
    check(torch.signbit, torch.tensor([-3, 0, 4]))


def test_copysign_signed_zeros_and_gradient() -> None:
    a = t(1.5, -2.0, 3.0, 0.0, -4.0, 5.0)
    b = t(-1.0, 2.0, -0.0, -1.0, 0.0, NAN * 0 + 1)
    check(torch.copysign, a, b)
    check(lambda x: torch.copysign(x, -1.0), a)
    check(torch.copysign, torch.tensor([1, -2, 3]), torch.tensor([-1, 1, 0]))


@pytest.mark.parametrize("fn", [torch.fmax, torch.fmin], ids=["fmax", "fmin"])
def test_fmax_fmin_ignore_nan_and_give_ties_to_the_first(fn: object) -> None:
    a = t(1.0, NAN, 2.0, NAN, 3.0, -1.0)
    b = t(2.0, 5.0, NAN, NAN, 3.0, -4.0)
    check(fn, a, b)  # the tie (3, 3): the whole gradient to a, as eager
    check(fn, torch.tensor([1, 5, 3]), torch.tensor([2, 4, 3]))
    check(fn, randn(3, 4), randn(4, seed=2))


def test_logical_xor_of_numbers() -> None:
    check(torch.logical_xor, t(0.0, 1.5, NAN, 0.0), t(0.0, 0.0, 2.0, -1.0))
    check(torch.logical_xor, torch.tensor([0, 2, 3]), torch.tensor([True, False, True]))


def test_angle_of_real_tensors() -> None:
    check(torch.angle, t(-2.0, -0.0, 0.0, 3.0, NAN, -INF))
    x = t(-1.0, 2.0).requires_grad_()
    assert ORTModule(Apply(torch.angle), FX)(x).requires_grad  # as eager's (zero gradient)
    check(torch.angle, torch.tensor([-3, 0, 4]))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_erfc_keeps_its_tails(dtype: torch.dtype) -> None:
    x = t(-12.0, -3.0, -0.5, 0.0, 1e-3, 0.5, 3.0, 9.0, 12.0, 30.0, dtype=dtype)
    rtol = 1e-5 if dtype == torch.float32 else 1e-12
    check(torch.erfc, x, rtol=rtol, atol=0)  # erfc(9) = 4e-37: relative, not 1 - erf


@pytest.mark.parametrize(("beta", "alpha"), [(1, 1), (0.5, -2.0), (0, 1)])
def test_addbmm(beta: float, alpha: float) -> None:
    bias = randn(3, 5)
    if beta == 0:
        bias[0, 0] = NAN  # ignored with beta = 0
    check(lambda i, a, b: torch.addbmm(i, a, b, beta=beta, alpha=alpha), bias,
          randn(4, 3, 2, seed=1), randn(4, 2, 5, seed=2))
    check(lambda i, a, b: torch.addbmm(i, a, b, beta=beta, alpha=alpha), randn(5, seed=3),
          randn(4, 3, 2, seed=1), randn(4, 2, 5, seed=2))  # bias broadcast


@pytest.mark.parametrize("lead", [(6,), (2, 3), ()], ids=["batch", "two-dims", "no-batch"])
@pytest.mark.parametrize("bias", [True, False])
def test_bilinear(lead: tuple[int, ...], bias: bool) -> None:
    x1, x2 = randn(*lead, 4, seed=1), randn(*lead, 3, seed=2)
    w, b = randn(5, 4, 3, seed=3), randn(5, seed=4)
    if bias:
        check(torch.nn.functional.bilinear, x1, x2, w, b)
    else:
        check(torch.nn.functional.bilinear, x1, x2, w)
