"""Fits the polynomial of the vectorized normal CDF (csrc/kernels/math/vec_math.h,
vec_normal_cdf): erfc(a) = t exp(-a^2) Q(t), t = 1 / (1 + a / 2), with Q a polynomial in t
fitted to erfc(a) exp(a^2) / t over a in [0, A_MAX] (beyond it erfc(a) < 1e-44, below
float32's smallest subnormal once multiplied out). Weighted least squares (relative error) on
Chebyshev nodes, in float64 against mpmath at 30 digits; prints the coefficients (constant
term first) and the maximum relative error of Q in float64 and in float32 Horner evaluation.

    python tools/fit_erfc.py [--degree 9]
"""

from __future__ import annotations

import argparse

import mpmath
import numpy as np

A_MAX = 10.0


def target(t: float) -> float:
    a = 2.0 * (1.0 / t - 1.0)
    return float(mpmath.erfc(a) * mpmath.exp(a * a) / t)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--degree", type=int, default=9)
    args = parser.parse_args()
    mpmath.mp.dps = 30
    t0 = 1.0 / (1.0 + 0.5 * A_MAX)
    nodes = 400
    ts = t0 + (1 - t0) * (0.5 - 0.5 * np.cos(np.pi * (np.arange(nodes) + 0.5) / nodes))
    qs = np.array([target(t) for t in ts])
    # Fit in u = (2t - (1 + t0)) / (1 - t0) in [-1, 1] (well conditioned), then expand in t.
    scale, shift = 2 / (1 - t0), -(1 + t0) / (1 - t0)
    cheb = np.polynomial.chebyshev.chebfit(scale * ts + shift, qs, args.degree, w=1 / qs)
    in_u = np.polynomial.Polynomial(np.polynomial.chebyshev.cheb2poly(cheb))
    coef = in_u(np.polynomial.Polynomial([shift, scale])).coef
    dense = np.linspace(t0, 1.0, 20001)
    exact = np.array([target(t) for t in dense])
    c32, t32 = coef.astype(np.float32), dense.astype(np.float32)
    horner = np.full_like(t32, c32[-1])
    for c in c32[-2::-1]:
        horner = (horner * t32 + c).astype(np.float32)
    err64 = np.max(np.abs(np.polynomial.polynomial.polyval(dense, coef) / exact - 1))
    err32 = np.max(np.abs(horner / exact - 1))
    print(f"degree {args.degree}: max relative error {err64:.2e} (float64), "
          f"{err32:.2e} (float32 Horner)")
    for c in coef:
        print(f"{float(np.float32(c)):.9e}f")


if __name__ == "__main__":
    main()
