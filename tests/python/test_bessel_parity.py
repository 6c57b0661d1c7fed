"""The Bessel family through the fx exporter with no bridging (torch.i0 and torch.special's
i0e, i1, i1e, bessel_j0/j1/y0/y1, modified_bessel_i0/i1/k0/k1, scaled_modified_bessel_k0/k1,
airy_ai, spherical_bessel_j0): values and input gradients against eager PyTorch across the
regimes of each algorithm (series, recurrence, integral, asymptotic expansion, and the
borders between them), at 0, below 0, at +-inf and NaN. Only i0, i0e, i1 and i1e have
gradients in torch; the others' results do not require grad, there as here."""

from __future__ import annotations

import math

import pytest
import torch

from ortmodule import ORTModule
from tests.python.parity_utils import FX, Apply, check

NAN, INF = math.nan, math.inf
S = torch.special

# Both signs, the series/asymptotic border at 20, the float32 overflow of e^x above 88.7.
I_VALUES = (-95.0, -30.0, -20.5, -8.0, -1.5, -1e-3, 0.0, 1e-9, 0.5, 3.0, 12.0, 19.9, 20.1, 45.0,
            88.0, 150.0)
# The J/Y borders at 4 and 25, zeros of J0 and Y0, large arguments.
JY_VALUES = (1e-6, 0.3, 2.404825557695773, 3.9, 4.1, 7.0, 0.893576966279167, 13.5, 24.9, 25.1,
             60.0, 300.0, 1e4)
# The K borders at 2 and 20, underflow of K far out.
K_VALUES = (1e-7, 0.01, 0.7, 1.99, 2.01, 5.0, 12.0, 19.9, 20.1, 80.0, 700.0, 800.0)
# Ai: the Taylor steps on [-9.65, 1], K_1/3 above 1, the oscillating expansion below -9.65.
AI_VALUES = (-150.0, -30.0, -9.7, -9.6, -5.0, -2.3381074104597670, -0.6, 0.0, 0.4, 0.99, 1.01,
             3.0, 14.0, 15.0, 40.0, 100.0)
EDGES = (-INF, -3.0, -0.0, 0.0, INF, NAN)


def t(values: tuple[float, ...], dtype: torch.dtype) -> torch.Tensor:
    return torch.tensor(values, dtype=dtype)


def values_only(fn, x: torch.Tensor, rtol: float, atol: float) -> None:
    with torch.no_grad():
        got = ORTModule(Apply(fn), FX)(x)
    torch.testing.assert_close(got, fn(x), rtol=rtol, atol=atol, equal_nan=True)


def tolerances(dtype: torch.dtype) -> tuple[float, float]:
    return (2e-6, 1e-30) if dtype == torch.float32 else (1e-12, 1e-300)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("fn", [torch.i0, S.i0e, S.i1, S.i1e], ids=["i0", "i0e", "i1", "i1e"])
def test_modified_bessel_i_values_and_gradients(fn, dtype: torch.dtype) -> None:
    rtol, atol = tolerances(dtype)
    # i0e' = i1e - sign(x) i0e and i1e' cancel for large |x|: absolute float32 rounding.
    check(fn, t(I_VALUES, dtype), rtol=rtol, atol=1e-7 if dtype == torch.float32 else 1e-15)
    values_only(fn, t(EDGES + (1e3, -1e3), dtype), rtol, atol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_i1_gradient_at_zero_and_below_epsilon_is_half(dtype: torch.dtype) -> None:
    tiny = t((0.0, -0.0, 1e-20, -1e-17, 1e-3), dtype)
    rtol, atol = tolerances(dtype)
    check(S.i1, tiny, rtol=rtol, atol=atol)
    check(S.i1e, tiny, rtol=rtol, atol=atol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("fn", [S.bessel_j0, S.bessel_j1, S.bessel_y0, S.bessel_y1],
                         ids=["j0", "j1", "y0", "y1"])
def test_bessel_j_y(fn, dtype: torch.dtype) -> None:
    # Absolute tolerances, torch's own accuracy (the engine's is about 1e-15 in float64):
    # its float64 J1 and Y0 are off by up to 3e-8 near x = 7, its float32 ones at 1e4 carry
    # the float rounding of the phase x - pi/4 (about 1e-4 of the envelope).
    values = JY_VALUES + tuple(-v for v in JY_VALUES) + EDGES
    if dtype == torch.float32:
        values_only(fn, t(values, dtype), rtol=1e-5, atol=3e-6)
    else:
        values_only(fn, t(values, dtype), rtol=1e-7, atol=5e-8)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("fn", [S.modified_bessel_k0, S.modified_bessel_k1,
                                S.scaled_modified_bessel_k0, S.scaled_modified_bessel_k1,
                                S.modified_bessel_i0, S.modified_bessel_i1],
                         ids=["k0", "k1", "k0e", "k1e", "mi0", "mi1"])
def test_modified_bessel_k_and_gradient_free_i(fn, dtype: torch.dtype) -> None:
    rtol, atol = tolerances(dtype)
    values_only(fn, t(K_VALUES + tuple(-v for v in K_VALUES) + EDGES, dtype), rtol, atol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_airy_ai(dtype: torch.dtype) -> None:
    # Absolute tolerances on the oscillating side: torch's float64 Ai is off by 7e-7 at its
    # first zero, its float32 one by 2e-6 at -30 (the phase 2/3 |x|^1.5 rounded in float).
    values_only(S.airy_ai, t(AI_VALUES + EDGES, dtype), rtol=1e-5, atol=3e-6)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_spherical_bessel_j0(dtype: torch.dtype) -> None:
    values = (-40.0, -math.pi, -1e-5, 1e-30, 0.5, 3.0, 1e5) + EDGES
    values_only(S.spherical_bessel_j0, t(values, dtype), rtol=1e-6, atol=1e-15)


@pytest.mark.parametrize("fn", [S.bessel_j0, S.bessel_y1, S.modified_bessel_i0,
                                S.modified_bessel_i1, S.modified_bessel_k1,
                                S.scaled_modified_bessel_k0, S.airy_ai, S.spherical_bessel_j0],
                         ids=["j0", "y1", "mi0", "mi1", "k1", "k0e", "ai", "sj0"])
def test_gradient_free_functions_are_constants_as_in_eager(fn) -> None:
    # Eager's result does not require grad: x * f(x) differentiates to f(x).
    x = torch.tensor([0.4, 1.3, 2.5, 6.0])
    check(lambda v: v * fn(v), x, rtol=1e-6, atol=1e-7)
    got = ORTModule(Apply(fn), FX)(x.clone().requires_grad_())
    assert not got.requires_grad


def test_integer_inputs_give_floats() -> None:
    x = torch.tensor([0, 1, 3, 30], dtype=torch.int64)
    for fn in (torch.i0, S.i1e, S.bessel_j1, S.modified_bessel_k0, S.airy_ai):
        values_only(fn, x, rtol=2e-6, atol=1e-30)
