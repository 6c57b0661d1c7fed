"""torch.special's orthogonal polynomials through the fx exporter with no bridging (Chebyshev
T, U, V, W and their shifted forms, Hermite H and He, Laguerre L, Legendre P) against eager
PyTorch: x across [-2, 2] with the interval's ends, n from negative through the degrees where
torch switches to trigonometric closed forms up to 100, fractional and non-finite n, Python
numbers for either argument, integer tensors, and no gradient (eager's outputs do not require
grad)."""

from __future__ import annotations

import math

import pytest
import torch

from ortmodule import ORTModule
from tests.python.parity_utils import FX, Apply, check

S = torch.special
FUNCTIONS = [S.chebyshev_polynomial_t, S.chebyshev_polynomial_u, S.chebyshev_polynomial_v,
             S.chebyshev_polynomial_w, S.shifted_chebyshev_polynomial_t,
             S.shifted_chebyshev_polynomial_u, S.shifted_chebyshev_polynomial_v,
             S.shifted_chebyshev_polynomial_w, S.hermite_polynomial_h, S.hermite_polynomial_he,
             S.laguerre_polynomial_l, S.legendre_polynomial_p]
IDS = [f.__name__.removeprefix("special_") for f in FUNCTIONS]
# Recurrence steps a*b - c*d rounded once for a*b, as torch's AVX2 and AVX-512 kernels do;
# its kernels without FMA round differently where a*b overflows or cancels.
FMA_TORCH = torch.backends.cpu.get_cpu_capability() != "DEFAULT"


def grid(dtype: torch.dtype) -> torch.Tensor:
    """[-2, 2] in steps of 0.01 and the points where torch's special cases and closed forms
    take over: the ends of [-1, 1] and [0, 1], next to them, tiny, and beyond."""
    edges = [-1.0, 1.0, 0.0, -0.0, 0.5, 1 - 2 ** -24, -1 + 2 ** -24, 2 ** -30, 1e-10,
             0.99999994, 3.0, -5.0, 10.0]
    return torch.cat([torch.linspace(-2, 2, 401, dtype=dtype), torch.tensor(edges, dtype=dtype)])


DEGREES = [-3.0, -0.5, 0.0, 0.7, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 12.0, 17.0,
           25.0]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("fn", FUNCTIONS, ids=IDS)
def test_values_across_x_and_degree(fn: object, dtype: torch.dtype) -> None:
    x = grid(dtype)[:, None]
    n = torch.tensor(DEGREES + [math.nan, math.inf, -math.inf, 1e30], dtype=dtype)[None]
    # Without FMA torch's float32 recurrences differ by up to ~1e-4 near their roots.
    rtol = 1e-12 if dtype == torch.float64 else 1e-5 if FMA_TORCH else 2e-4
    check(fn, x, n, rtol=rtol, atol=1e-6)


@pytest.mark.skipif(not FMA_TORCH, reason="torch's kernels without FMA round differently")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("fn", FUNCTIONS, ids=IDS)
def test_high_degrees_and_overflow_bit_for_bit(fn: object, dtype: torch.dtype) -> None:
    """Up to degree 100 (and 128, 129, 600: Hermite's NaN above its limit), through the
    recurrences' cancellation and their overflow to inf or NaN: torch's values exactly."""
    x = grid(dtype)[:, None]
    n = torch.tensor([33.0, 50.0, 64.0, 99.0, 100.0, 128.0, 129.0, 600.0], dtype=dtype)[None]
    check(fn, x, n, rtol=0, atol=0)


@pytest.mark.parametrize("fn", FUNCTIONS, ids=IDS)
def test_python_numbers_and_integer_tensors(fn: object) -> None:
    x = torch.linspace(-1.5, 1.5, 13)
    check(lambda v: fn(v, 11), x)
    check(lambda v: fn(v, 4.5), x)
    check(lambda n: fn(0.25, n), torch.arange(-1, 15, dtype=torch.float32))
    # Integer x and n: float32 results, as eager promotes them.
    check(fn, torch.tensor([[-2], [0], [1], [3]]), torch.tensor([0, 1, 2, 5, 9]))


@pytest.mark.parametrize("fn", [S.chebyshev_polynomial_t, S.hermite_polynomial_h],
                         ids=["chebyshev_t", "hermite_h"])
def test_no_gradient(fn: object) -> None:
    x = torch.linspace(-1, 1, 7, requires_grad=True)
    n = torch.full((7,), 3.0)
    y = ORTModule(Apply(fn), FX)(x, n)
    assert not y.requires_grad and not fn(x, n).requires_grad
    with pytest.raises(RuntimeError, match="does not require grad"):
        y.sum().backward()
    # Beside a differentiable path the polynomial contributes nothing to x's gradient.
    check(lambda v, m: fn(v, m) * 3 + v * v, torch.linspace(-1, 1, 7), n)
