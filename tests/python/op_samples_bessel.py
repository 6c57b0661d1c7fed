"""Samples for the ai.ortmodule Bessel family (BesselI0 ... SphericalBesselJ0; see
op_samples.py and op_samples_large.py): values across each kernel's regimes (series,
recurrence, integral, asymptotic expansion and the borders between them), below 0, at 0,
+-inf and NaN. References: torch in float64, except for J0, J1, Y0, Y1 and Ai, whose torch
float64 kernels are accurate to only about 1e-8 (J1 near 7: 3e-8, Ai near its first zero:
7e-7), below these samples' tolerance; scipy's are accurate to double rounding.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from tests.python.sample_utils import Sample, rand

S = Sample
OWN = "ai.ortmodule"
INF, NAN = np.inf, np.nan
_rng = np.random.default_rng(11)


def _torch(fn: str) -> Callable[[dict[str, np.ndarray]], list[np.ndarray]]:
    def reference(d: dict[str, np.ndarray]) -> list[np.ndarray]:
        import torch

        f = torch
        for part in fn.split("."):
            f = getattr(f, part)
        x = d["x"]
        return [f(torch.from_numpy(x.astype(np.float64))).numpy().astype(x.dtype)]
    return reference


def _scipy(fn: str) -> Callable[[dict[str, np.ndarray]], list[np.ndarray]]:
    def reference(d: dict[str, np.ndarray]) -> list[np.ndarray]:
        import scipy.special

        x = d["x"].astype(np.float64)
        with np.errstate(all="ignore"):
            y = scipy.special.airy(x)[0] if fn == "airy_ai" else getattr(scipy.special, fn)(x)
        return [np.asarray(y).astype(d["x"].dtype)]
    return reference


def _arr(*values: float) -> np.ndarray:
    return np.array(values, dtype=np.float64)


def _i_samples(fn: str, kink_at_zero: bool = False) -> list[Sample]:
    """Gradients checked against finite differences except at the infinities, and at 0 for
    I0e (e^-|x| I0(x) has a kink there; its gradient is I1e(0) - sign(0) I0e(0) = 0)."""
    near_zero = (-1e-3, 0.0, 1e-9)
    return [S({"x": rand(3, 4, low=-4, high=4)}, domain=OWN, expected=_torch(fn)),
            S({"x": _arr(-45.0, -20.5, -19.9, -7.5, *near_zero[:1 if kink_at_zero else 3], 0.75,
                         12.0, 20.5, 33.0, 100.0)}, domain=OWN, expected=_torch(fn)),
            S({"x": _arr(-INF, -1e3, -0.0, 0.0, 1e-9, 700.0, 1e3, INF, NAN)}, grad=[],
              domain=OWN, expected=_torch(fn))]


def _value_samples(reference: Callable[[dict[str, np.ndarray]], list[np.ndarray]],
                   *arrays: np.ndarray) -> list[Sample]:
    return [S({"x": a}, domain=OWN, expected=reference) for a in arrays]


_JY = _arr(1e-8, 0.3, 1.7, 3.9, 4.1, 6.2, 11.0, 18.3, 24.9, 25.1, 47.0, 310.0, 1e5)
_K = _arr(1e-8, 0.05, 0.8, 1.99, 2.01, 4.5, 11.0, 19.9, 20.1, 65.0, 720.0)
_EDGES = _arr(-INF, -2.5, -0.0, 0.0, INF, NAN)

BESSEL_SAMPLES: dict[str, list[Sample]] = {
    "BesselI0": _i_samples("i0"),
    "BesselI0e": _i_samples("special.i0e", kink_at_zero=True),
    "BesselI1": _i_samples("special.i1"),
    "BesselI1e": _i_samples("special.i1e"),
    "BesselJ0": _value_samples(_scipy("j0"), rand(3, 4, low=-30, high=30), _JY, -_JY, _EDGES),
    "BesselJ1": _value_samples(_scipy("j1"), rand(3, 4, low=-30, high=30), _JY, -_JY, _EDGES),
    "BesselY0": _value_samples(_scipy("y0"), rand(3, 4, low=0.1, high=30), _JY, _EDGES),
    "BesselY1": _value_samples(_scipy("y1"), rand(3, 4, low=0.1, high=30), _JY, _EDGES),
    "BesselK0": _value_samples(_torch("special.modified_bessel_k0"), rand(3, 4, low=0, high=25),
                               _K, _EDGES),
    "BesselK1": _value_samples(_torch("special.modified_bessel_k1"), rand(3, 4, low=0, high=25),
                               _K, _EDGES),
    "BesselK0e": _value_samples(_torch("special.scaled_modified_bessel_k0"),
                                rand(3, 4, low=0, high=25), _K, _EDGES),
    "BesselK1e": _value_samples(_torch("special.scaled_modified_bessel_k1"),
                                rand(3, 4, low=0, high=25), _K, _EDGES),
    # The Taylor steps on [-9.65, 1], K_1/3 above, the oscillating expansion below -9.65.
    "AiryAi": _value_samples(_scipy("airy_ai"), rand(3, 4, low=-12, high=6),
                             _arr(-200.0, -9.7, -9.6, -4.0, -1e-6, 0.0, 0.6, 0.99, 1.01, 14.0,
                                  15.0, 60.0, 104.0), _EDGES),
    "SphericalBesselJ0": _value_samples(_torch("special.spherical_bessel_j0"),
                                        rand(3, 4, low=-20, high=20),
                                        _arr(-1e6, -3.5, -1e-9, 1e-300, 0.25, 7.0), _EDGES),
}


def _large(low: float, high: float, reference: Callable[[dict[str, np.ndarray]],
                                                         list[np.ndarray]]) -> list[Sample]:
    """float32, 80 x 1024 elements (more than two parallel grains)."""
    x = _rng.uniform(low, high, size=(80, 1024)).astype(np.float32)
    return [S({"x": x}, domain=OWN, expected=reference, reference_rtol=1e-4)]


BESSEL_LARGE_SAMPLES: dict[str, list[Sample]] = {
    "BesselI0": _large(-30, 30, _torch("i0")),
    "BesselI0e": _large(-30, 30, _torch("special.i0e")),
    "BesselI1": _large(-30, 30, _torch("special.i1")),
    "BesselI1e": _large(-30, 30, _torch("special.i1e")),
    "BesselJ0": _large(-40, 40, _torch("special.bessel_j0")),
    "BesselJ1": _large(-40, 40, _torch("special.bessel_j1")),
    "BesselY0": _large(0.05, 40, _torch("special.bessel_y0")),
    "BesselY1": _large(0.05, 40, _torch("special.bessel_y1")),
    "BesselK0": _large(0.01, 30, _torch("special.modified_bessel_k0")),
    "BesselK1": _large(0.01, 30, _torch("special.modified_bessel_k1")),
    "BesselK0e": _large(0.01, 30, _torch("special.scaled_modified_bessel_k0")),
    "BesselK1e": _large(0.01, 30, _torch("special.scaled_modified_bessel_k1")),
    "AiryAi": _large(-20, 10, _torch("special.airy_ai")),
    "SphericalBesselJ0": _large(-50, 50, _torch("special.spherical_bessel_j0")),
}
