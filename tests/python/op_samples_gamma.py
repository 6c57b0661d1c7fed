"""Samples for the gamma family (ai.ortmodule Digamma, Lgamma, Polygamma, Erfinv, Ndtri, Zeta,
Igamma, Igammac; see op_samples.py), each against torch's float64 function: values across
the regimes of the algorithms (recurrence and asymptotic series, reflection below zero,
series and continued fraction of the incomplete gamma function, the tails of the inverses)
and, without gradients, the poles, infinities and NaN where torch defines them."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from tests.python.sample_utils import Sample, rand

OWN = "ai.ortmodule"
inf, nan = np.inf, np.nan


def _torch(fn: str, *names: str, **kwargs: object) -> Callable[[dict[str, np.ndarray]],
                                                              list[np.ndarray]]:
    """torch.<fn>(*inputs, **kwargs) in float64."""
    def reference(d: dict[str, np.ndarray]) -> list[np.ndarray]:
        import torch

        f = torch
        for part in fn.split("."):
            f = getattr(f, part)
        return [f(*[torch.from_numpy(d[n]) for n in names], **kwargs).numpy()]
    return reference


def _unary(fn: str, x: np.ndarray, **kw: object) -> Sample:
    return Sample({"x": np.asarray(x, dtype=np.float64)}, domain=OWN, expected=_torch(fn, "x"),
                  **kw)


def _polygamma(n: int, x: np.ndarray, **kw: object) -> Sample:
    def reference(d: dict[str, np.ndarray]) -> list[np.ndarray]:
        import torch

        return [torch.polygamma(n, torch.from_numpy(d["x"])).numpy()]
    return Sample({"x": np.asarray(x, dtype=np.float64)}, attrs={"n": n}, domain=OWN,
                  expected=reference, **kw)


def _trigamma_exact(x: np.ndarray, **kw: object) -> Sample:
    """Polygamma n = 1 against mpmath's (torch's float64 trigamma stops its asymptotic
    series at x^-7 after six recurrence steps: about 1e-9 off)."""
    def reference(d: dict[str, np.ndarray]) -> list[np.ndarray]:
        import mpmath

        return [np.vectorize(lambda v: float(mpmath.psi(1, v)))(d["x"])]
    return Sample({"x": np.asarray(x, dtype=np.float64)}, attrs={"n": 1}, domain=OWN,
                  expected=reference, **kw)


def _binary(fn: str, first: str, second: str, a: np.ndarray, b: np.ndarray,
            **kw: object) -> Sample:
    return Sample({first: np.asarray(a, dtype=np.float64), second: np.asarray(b, dtype=np.float64)},
                  domain=OWN, expected=_torch(fn, first, second), **kw)


_POLES = [0.0, -0.0, -1.0, -3.0, inf, -inf, nan]
# Incomplete gamma: a and x across the series (x < a + 1), the continued fraction, small a
# with small x (Q without 1 - P) and a ~ x.
_A = np.array([0.05, 0.5, 1.0, 2.5, 7.0, 30.0])
_X = np.array([[0.01], [0.3], [1.2], [4.0], [12.0], [45.0]])
# (a = x above 20: torch's own asymptotic series there agrees with the exact value to 1e-9.)
_NEAR = {"reference_rtol": 1e-8, "grad": ["x"]}

GAMMA_SAMPLES: dict[str, list[Sample]] = {
    "Digamma": [
        _unary("digamma", rand(3, 4, low=0.1, high=8)),
        _unary("digamma", [-7.3, -2.5, -0.4, 0.05, 1.4616321449683622, 12.0, 1e5, 3e8]),
        _unary("digamma", _POLES + [1e-30, 1e300], grad=[]),
    ],
    "Lgamma": [
        _unary("lgamma", rand(3, 4, low=0.1, high=10)),
        _unary("lgamma", [-6.5, -2.3, -0.7, 0.01, 0.5, 2.5, 171.5, 3e4]),
        _unary("lgamma", _POLES + [1e-300, 1e10, 1e306], grad=[]),
    ],
    "Polygamma": [
        _polygamma(0, rand(2, 3, low=0.2, high=6)),
        _trigamma_exact(rand(3, 4, low=0.2, high=8)),
        _trigamma_exact([-5.5, -2.25, -0.4, 0.05, 0.5, 3.0, 1e4]),
        _polygamma(2, [-3.7, -0.4, 0.05, 1.5, 9.0, 150.0]),
        _polygamma(3, rand(2, 3, low=0.3, high=5)),
        _polygamma(4, [-1.5, 0.25, 2.0, 11.0, 40.0]),
        _polygamma(12, [0.5, 2.0, 10.0, 100.0]),
        _polygamma(1, _POLES + [1e-30], grad=[]),
        _polygamma(3, _POLES + [1e-30], grad=[]),
        _polygamma(30, [0.5, 2.0, 10.0, -1.5, 1e3], grad=[]),
    ],
    "Erfinv": [
        _unary("erfinv", rand(3, 4, low=-0.95, high=0.95)),
        _unary("erfinv", [-0.999, -0.9, -0.5, -1e-8, 1e-8, 0.49, 0.51, 0.99]),
        _unary("erfinv", [-1.0, 1.0, -1.5, 2.0, 0.0, -0.0, nan, 1e-300, -0.999999, 0.9999999999,
                          1.0 - 2.0 ** -53], grad=[]),
    ],
    "Ndtri": [
        _unary("special.ndtri", rand(3, 4, low=0.02, high=0.98)),
        _unary("special.ndtri", [1e-3, 0.1, 0.2499, 0.2501, 0.5, 0.7499, 0.7501, 0.999]),
        _unary("special.ndtri", [0.0, 1.0, -0.1, 1.1, nan, 1e-300, 5e-324, 1e-12, 1e-5,
                                 1.0 - 2.0 ** -53], grad=[]),
    ],
    "Zeta": [
        _binary("special.zeta", "s", "q", [[1.5], [2.0], [3.5], [7.0]],
                [0.3, 1.0, 2.5, 11.0, 1e3], grad=["q"]),
        _binary("special.zeta", "s", "q", [2.0, 3.0, 4.0, 5.0, 60.0],
                [-2.5, -0.5, 0.01, 1e5, 0.8], grad=["q"]),
        _binary("special.zeta", "s", "q",
                [1.0, 0.5, 2.0, 2.0, 2.5, 3.0, inf, inf, inf, 2.0, nan],
                [1.0, 1.0, 0.0, -2.0, -1.5, -1.5, 0.5, 1.0, 2.0, inf, 1.0], grad=[]),
    ],
    "Igamma": [
        _binary("igamma", "a", "x", _A, _X, grad=["x"]),
        _binary("igamma", "a", "x", [25.0, 100.0, 1e3], [24.0, 100.0, 1010.0], **_NEAR),
        _binary("igamma", "a", "x", [0.0, 0.0, 1.0, 1.0, inf, inf, -1.0, 1.0, nan, 2.0],
                [0.0, 1.0, 0.0, inf, 1.0, inf, 1.0, -1.0, 1.0, nan], grad=[]),
    ],
    "Igammac": [
        _binary("igammac", "a", "x", _A, _X, grad=["x"]),
        _binary("igammac", "a", "x", [1e-3, 1e-6, 0.2, 0.24], [0.5, 1.0, 1.4, 0.01], grad=["x"]),
        _binary("igammac", "a", "x", [25.0, 100.0, 1e3], [24.0, 100.0, 1010.0], **_NEAR),
        _binary("igammac", "a", "x", [0.0, 0.0, 1.0, 1.0, inf, inf, -1.0, 1.0, nan, 2.0],
                [0.0, 1.0, 0.0, inf, 1.0, inf, 1.0, -1.0, 1.0, nan], grad=[]),
    ],
}
