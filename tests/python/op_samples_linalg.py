"""Samples for the ai.ortmodule Cholesky and Householder QR family (Cholesky, CholeskySolve,
CholeskyInverse, Geqrf, LinalgQr, HouseholderProduct, Ormqr; see op_samples.py and
op_samples_large.py): symmetric positive definite matrices (well and badly conditioned, one
not positive definite for Cholesky's info), square, tall and wide matrices, batched. The
references are torch's LAPACK kernels in float64.

Cholesky reads one triangle of A and torch's gradient is the symmetric one (it assumes a
symmetric perturbation), CholeskySolve's and CholeskyInverse's gradients for the factor are
torch's formulas on the whole factor; neither is what a finite difference of single entries
measures, so those samples check no gradient here (tests/python/test_linalg_qr_parity.py
compares them with eager's).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from tests.python.sample_utils import Sample

S = Sample
OWN = "ai.ortmodule"
_rng = np.random.default_rng(17)
Reference = Callable[[dict[str, np.ndarray]], list[np.ndarray]]


def _randn(*shape: int, dtype: type = np.float64) -> np.ndarray:
    return _rng.standard_normal(shape).astype(dtype)


def spd(*shape: int, ridge: float = 1.0, dtype: type = np.float64) -> np.ndarray:
    a = _randn(*shape)
    n = shape[-1]
    return (a @ np.swapaxes(a, -1, -2) / n + ridge * np.eye(n)).astype(dtype)


def _lower_factor(*shape: int, upper: bool = False, dtype: type = np.float64) -> np.ndarray:
    f = np.linalg.cholesky(spd(*shape))
    return (np.swapaxes(f, -1, -2) if upper else f).astype(dtype)


def _t(x: np.ndarray):
    import torch

    return torch.from_numpy(x.astype(np.float64))


def _back(outs: tuple, like: np.ndarray) -> list[np.ndarray]:
    return [o.numpy().astype(like.dtype if o.is_floating_point() else o.numpy().dtype)
            for o in outs]


def cholesky_reference(upper: bool) -> Reference:
    def ref(d: dict[str, np.ndarray]) -> list[np.ndarray]:
        import torch

        return _back(torch.linalg.cholesky_ex(_t(d["a"]), upper=upper), d["a"])
    return ref


def cholesky_solve_reference(upper: bool) -> Reference:
    def ref(d: dict[str, np.ndarray]) -> list[np.ndarray]:
        import torch

        return _back((torch.cholesky_solve(_t(d["b"]), _t(d["f"]), upper=upper),), d["b"])
    return ref


def cholesky_inverse_reference(upper: bool) -> Reference:
    def ref(d: dict[str, np.ndarray]) -> list[np.ndarray]:
        import torch

        return _back((torch.cholesky_inverse(_t(d["f"]), upper=upper),), d["f"])
    return ref


def geqrf_reference(d: dict[str, np.ndarray]) -> list[np.ndarray]:
    import torch

    return _back(torch.geqrf(_t(d["a"])), d["a"])


def qr_reference(mode: str) -> Reference:
    def ref(d: dict[str, np.ndarray]) -> list[np.ndarray]:
        import torch

        return _back(torch.linalg.qr(_t(d["a"]), mode=mode), d["a"])
    return ref


def householder_reference(d: dict[str, np.ndarray]) -> list[np.ndarray]:
    import torch

    return _back((torch.linalg.householder_product(_t(d["v"]), _t(d["tau"])),), d["v"])


def ormqr_reference(left: bool, transpose: bool) -> Reference:
    def ref(d: dict[str, np.ndarray]) -> list[np.ndarray]:
        import torch

        return _back((torch.ormqr(_t(d["a"]), _t(d["tau"]), _t(d["c"]), left=left,
                                  transpose=transpose),), d["c"])
    return ref


_NOT_PD = np.array([[4.0, 2.0, 1.0], [2.0, -3.0, 0.0], [1.0, 0.0, 5.0]])

LINALG_SAMPLES: dict[str, list[Sample]] = {
    "Cholesky": [
        S({"a": spd(2, 4, 4)}, domain=OWN, num_outputs=2, grad=[],
          expected=cholesky_reference(False)),
        S({"a": spd(3, 3, ridge=1e-6)}, attrs={"upper": 1}, domain=OWN, num_outputs=2, grad=[],
          expected=cholesky_reference(True), reference_rtol=1e-8),
        # Not positive definite at order 2: info 2, LAPACK's partial factor.
        S({"a": np.stack([_NOT_PD, spd(3, 3)])}, domain=OWN, num_outputs=2, grad=[],
          expected=cholesky_reference(False)),
    ],
    "CholeskySolve": [
        S({"b": _randn(3, 1, 4, 2), "f": _lower_factor(2, 4, 4)}, domain=OWN, grad=["b"],
          expected=cholesky_solve_reference(False)),
        S({"b": _randn(3, 2), "f": _lower_factor(3, 3, upper=True)}, attrs={"upper": 1},
          domain=OWN, grad=["b"], expected=cholesky_solve_reference(True)),
    ],
    "CholeskyInverse": [
        S({"f": _lower_factor(2, 4, 4)}, domain=OWN, grad=[],
          expected=cholesky_inverse_reference(False)),
        S({"f": _lower_factor(3, 3, upper=True)}, attrs={"upper": 1}, domain=OWN, grad=[],
          expected=cholesky_inverse_reference(True)),
    ],
    "Geqrf": [
        S({"a": _randn(2, 5, 3)}, domain=OWN, num_outputs=2, expected=geqrf_reference),
        S({"a": _randn(3, 4)}, domain=OWN, num_outputs=2, expected=geqrf_reference),
        # A zero column below the diagonal: tau 0, as LAPACK's dlarfg.
        S({"a": np.array([[2.0, 1.0], [0.0, 3.0], [0.0, -1.0]])}, domain=OWN, num_outputs=2,
          expected=geqrf_reference),
    ],
    "LinalgQr": [
        S({"a": _randn(2, 5, 3)}, domain=OWN, num_outputs=2, expected=qr_reference("reduced")),
        S({"a": _randn(3, 5)}, domain=OWN, num_outputs=2, expected=qr_reference("reduced")),
        S({"a": _randn(4, 4)}, attrs={"mode": "complete"}, domain=OWN, num_outputs=2,
          expected=qr_reference("complete")),
        S({"a": _randn(4, 2)}, attrs={"mode": "complete"}, domain=OWN, num_outputs=2, grad=[],
          expected=qr_reference("complete")),
        S({"a": _randn(4, 3)}, attrs={"mode": "r"}, domain=OWN, num_outputs=2, grad=[],
          expected=qr_reference("r")),
    ],
    "HouseholderProduct": [
        S({"v": _randn(2, 5, 3), "tau": _randn(2, 2)}, domain=OWN,
          expected=householder_reference),
        S({"v": _randn(4, 4), "tau": _randn(4)}, domain=OWN, expected=householder_reference),
    ],
    "Ormqr": [
        S({"a": _randn(5, 3), "tau": _randn(3), "c": _randn(5, 2)}, domain=OWN,
          expected=ormqr_reference(True, False)),
        S({"a": _randn(2, 4, 3), "tau": _randn(2, 3), "c": _randn(2, 4, 2)},
          attrs={"transpose": 1}, domain=OWN, expected=ormqr_reference(True, True)),
        S({"a": _randn(4, 2), "tau": _randn(2), "c": _randn(3, 4)}, attrs={"left": 0},
          domain=OWN, expected=ormqr_reference(False, False)),
        S({"a": _randn(4, 3), "tau": _randn(3), "c": _randn(2, 4)},
          attrs={"left": 0, "transpose": 1}, domain=OWN, expected=ormqr_reference(False, True)),
    ],
}


def _large(sample_inputs: dict[str, np.ndarray], **kw: object) -> Sample:
    kw.setdefault("reference_rtol", 1e-4)
    return Sample(sample_inputs, domain=OWN, **kw)  # type: ignore[arg-type]


# Batches of 64 float32 matrices: several chunks of the per-matrix parallel loop.
LINALG_LARGE_SAMPLES: dict[str, list[Sample]] = {
    "Cholesky": [_large({"a": spd(64, 12, 12, dtype=np.float32)}, num_outputs=2, grad=[],
                        expected=cholesky_reference(False))],
    "CholeskySolve": [_large({"b": _randn(64, 12, 3, dtype=np.float32),
                              "f": _lower_factor(64, 12, 12, dtype=np.float32)}, grad=["b"],
                             expected=cholesky_solve_reference(False))],
    "CholeskyInverse": [_large({"f": _lower_factor(64, 12, 12, dtype=np.float32)}, grad=[],
                               expected=cholesky_inverse_reference(False))],
    "Geqrf": [_large({"a": _randn(64, 12, 8, dtype=np.float32)}, num_outputs=2,
                     expected=geqrf_reference)],
    "LinalgQr": [_large({"a": _randn(64, 12, 8, dtype=np.float32)}, num_outputs=2,
                        expected=qr_reference("reduced"))],
    "HouseholderProduct": [_large({"v": _randn(64, 12, 8, dtype=np.float32),
                                   "tau": _randn(64, 6, dtype=np.float32)},
                                  expected=householder_reference)],
    "Ormqr": [_large({"a": _randn(64, 12, 8, dtype=np.float32),
                      "tau": _randn(64, 8, dtype=np.float32),
                      "c": _randn(64, 12, 5, dtype=np.float32)},
                     expected=ormqr_reference(True, False))],
}
