"""The gamma family through the fx exporter with no bridging (digamma, lgamma, polygamma,
mvlgamma, erfinv, special.ndtri, special.zeta, igamma, igammac and their torch.special
names), forward and input gradients against eager PyTorch in float32 and float64: values
across each function's regimes (below zero, near zero, the asymptotic range, the tails of
the inverses), and the forward alone at the poles, infinities and NaN. Like eager, zeta has
no gradient for s and igamma/igammac none for a: asking for one fails, naming the op."""

from __future__ import annotations

import math

import pytest
import torch

from ortmodule import ORTModule
from tests.python.parity_utils import FX, Apply, check

NAN, INF = math.nan, math.inf
DTYPES = [torch.float32, torch.float64]


def t(*values: float, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.tensor(values, dtype=dtype)


def tol(dtype: torch.dtype) -> dict[str, float]:
    return {"rtol": 2e-5, "atol": 1e-5} if dtype == torch.float32 else {"rtol": 1e-9,
                                                                        "atol": 1e-12}


def forward_only(fn: object, *inputs: torch.Tensor, rtol: float = 1e-6) -> None:
    """The values where eager's gradient is not a number worth comparing (poles, inf)."""
    with torch.no_grad():
        got = ORTModule(Apply(fn), FX)(*inputs)
        torch.testing.assert_close(got, fn(*inputs), rtol=rtol, atol=0, equal_nan=True)


# Below zero between the poles, near zero, the recurrence and the asymptotic range.
GAMMA_ARGS = (-7.3, -2.5, -0.4, 0.05, 0.5, 1.4616, 3.0, 12.5, 150.0, 1e4)
POLES = (0.0, -0.0, -1.0, -3.0, INF, -INF, NAN)


@pytest.mark.parametrize("dtype", DTYPES)
def test_digamma_lgamma(dtype: torch.dtype) -> None:
    x = t(*GAMMA_ARGS, dtype=dtype)
    check(torch.digamma, x, **tol(dtype))
    check(torch.special.psi, x, **tol(dtype))
    check(torch.lgamma, x, **tol(dtype))
    check(torch.special.gammaln, x, **tol(dtype))
    poles = t(*POLES, 1e-30, dtype=dtype)
    forward_only(torch.digamma, poles)
    forward_only(torch.lgamma, poles)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [0, 1, 2, 3, 4, 9])
def test_polygamma(n: int, dtype: torch.dtype) -> None:
    x = t(*GAMMA_ARGS[:-1], dtype=dtype)
    check(lambda v: torch.polygamma(n, v), x, **tol(dtype))
    forward_only(lambda v: torch.special.polygamma(n, v), t(*POLES, 1e-30, dtype=dtype))


def test_polygamma_of_large_order() -> None:
    # n! zeta(n + 1, x): overflow to -inf in float32 at 0.5, finite in float64. (Eager's
    # float32 n! is exp(lgamma(n + 1)) in float32, 3e-6 off at n = 30; the engine's is exact.)
    for dtype, rtol in ((torch.float32, 1e-5), (torch.float64, 1e-12)):
        forward_only(lambda v: torch.polygamma(30, v), t(0.5, 2.0, 10.0, -1.5, 1e3, dtype=dtype),
                     rtol=rtol)


@pytest.mark.parametrize("p", [1, 3, 5])
def test_mvlgamma(p: int) -> None:
    x = t(2.6, 3.1, 4.75, 9.0, 40.0) + (p - 1) / 2.0
    check(lambda v: torch.mvlgamma(v, p), x)
    check(lambda v: torch.special.multigammaln(v, p), x.double(), **tol(torch.float64))


@pytest.mark.parametrize("dtype", DTYPES)
def test_erfinv_ndtri(dtype: torch.dtype) -> None:
    check(torch.erfinv, t(-0.999, -0.9, -0.3, -1e-6, 0.0, 1e-6, 0.5, 0.9, 0.99999, dtype=dtype),
          **tol(dtype))
    check(torch.special.ndtri, t(1e-6, 0.01, 0.2, 0.5, 0.75, 0.99, 0.999999, dtype=dtype),
          **tol(dtype))
    forward_only(torch.erfinv, t(-1.0, 1.0, 1.5, -2.0, NAN, -0.0, 1e-30, dtype=dtype))
    forward_only(torch.special.ndtri, t(0.0, 1.0, -0.1, 1.1, NAN, 1e-30, dtype=dtype))


@pytest.mark.parametrize("dtype", DTYPES)
def test_zeta_gradient_of_q(dtype: torch.dtype) -> None:
    s = t(1.5, 2.0, 4.0, 7.0, dtype=dtype).reshape(4, 1)
    q = t(0.3, 1.0, 2.5, 11.0, -2.5, 150.0, dtype=dtype)
    check(lambda v: torch.special.zeta(s, v), q, **tol(dtype))
    check(lambda v: torch.special.zeta(3.0, v), q, **tol(dtype))  # the scalar-s overload
    forward_only(lambda v: torch.special.zeta(v, 2.0), t(1.0, 0.5, 1.5, 3.0, INF, dtype=dtype))
    forward_only(torch.special.zeta, t(2.0, 2.0, 2.5, 3.0, INF, INF, 2.0, dtype=dtype),
                 t(0.0, -2.0, -1.5, -1.5, 0.5, 2.0, INF, dtype=dtype))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("fn", [torch.igamma, torch.igammac, torch.special.gammainc,
                                torch.special.gammaincc])
def test_incomplete_gamma_gradient_of_x(fn: object, dtype: torch.dtype) -> None:
    a = t(0.05, 0.5, 1.0, 2.5, 7.0, 30.0, dtype=dtype).reshape(6, 1)
    x = t(0.01, 0.3, 1.2, 4.0, 12.0, 45.0, dtype=dtype)
    check(lambda v: fn(a, v), x, **tol(dtype))
    forward_only(fn, t(0.0, 0.0, 1.0, 1.0, INF, INF, -1.0, 1.0, NAN, dtype=dtype),
                 t(0.0, 1.0, 0.0, INF, 1.0, INF, 1.0, -1.0, 1.0, dtype=dtype))


@pytest.mark.parametrize("fn,op", [(torch.igamma, "Igamma"), (torch.igammac, "Igammac"),
                                   (torch.special.zeta, "Zeta")])
def test_no_gradient_for_the_first_argument(fn: object, op: str) -> None:
    first = t(2.0, 3.0).requires_grad_(True)
    second = t(1.5, 2.5).requires_grad_(True)
    with pytest.raises(NotImplementedError):  # eager
        torch.autograd.grad(fn(first, second).sum(), [first])
    with pytest.raises(Exception, match=f"{op}.*not implemented"):
        ORTModule(Apply(fn), FX)(first, second).sum().backward()


def test_in_place_methods() -> None:
    x = t(0.3, 1.5, 3.0, 7.5)
    check(lambda v: (v * 1).digamma_(), x)
    check(lambda v: (v * 1).lgamma_(), x)
    check(lambda v: (v * 1).polygamma_(2), x)
    check(lambda v: (v * 0.1).erfinv_(), x)
    check(lambda v: (v * 1).mvlgamma_(2), x + 1)
    # (self is a: no gradient, as eager.)
    forward_only(lambda v: (v * 1).igamma_(t(2.0)), x)
    forward_only(lambda v: (v * 1).igammac_(t(0.5, 2.0, 2.5, 9.0)), x)
