"""Samples for dense linear algebra by LU (ai.ortmodule LUFactor, LUUnpack, TriangularSolve,
SlogDet, MatrixExp and ONNX Det; see op_samples.py), each against torch's float64 linalg:
square, wide and tall factorizations, batches (also empty ones), every triangular-solve
layout with broadcast batch dims, matrix exponentials of every Pade degree and with
squarings, and, without gradients, singular matrices (zero pivots, info > 0, det 0,
slogdet (0, -inf)). Well-conditioned matrices keep the pivot order away from ties
under finite differences."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from tests.python.sample_utils import Sample, rand

OWN = "ai.ortmodule"
Reference = Callable[[dict[str, np.ndarray]], list[np.ndarray]]


def _t(a: np.ndarray) -> Any:  # a torch.Tensor (torch is imported lazily)
    import torch

    return torch.from_numpy(a)


def _well_conditioned(*shape: int) -> np.ndarray:
    """Random matrices plus twice the identity on their leading square block."""
    a = rand(*shape)
    k = min(shape[-2:])
    a[..., range(k), range(k)] += 2.0 * np.sign(a[..., range(k), range(k)] + 0.1)
    return a


_SINGULAR = np.array([[1.0, 0.0, 3.0], [2.0, 0.0, 6.0], [1.0, 0.0, 1.0]])  # a zero column


def _lu_factor(d: dict[str, np.ndarray]) -> list[np.ndarray]:
    import torch

    lu, piv, info = torch.linalg.lu_factor_ex(_t(d["a"]))
    return [lu.numpy(), piv.numpy(), info.numpy()]


def _lu_unpack(d: dict[str, np.ndarray]) -> list[np.ndarray]:
    import torch

    p, lower, upper = torch.lu_unpack(_t(d["lu"]), _t(d["pivots"]))
    return [lower.numpy(), upper.numpy(), p.numpy()]


def _factorized(*shape: int) -> dict[str, np.ndarray]:
    import torch

    lu, piv = torch.linalg.lu_factor(torch.from_numpy(_well_conditioned(*shape)))
    return {"lu": lu.numpy(), "pivots": piv.numpy()}


def _triangular(upper: bool, left: bool, unit: bool, transpose: bool) -> Reference:
    def reference(d: dict[str, np.ndarray]) -> list[np.ndarray]:
        import torch

        a = _t(d["a"]).triu() if upper else _t(d["a"]).tril()
        if unit:
            a = a - torch.diag_embed(a.diagonal(dim1=-2, dim2=-1)) + torch.eye(a.shape[-1])
        if transpose:
            a = a.mT
        return [torch.linalg.solve_triangular(a, _t(d["b"]), upper=upper != transpose,
                                              left=left).numpy()]
    return reference


def _triangular_sample(a_shape: tuple[int, ...], b_shape: tuple[int, ...], upper: bool,
                       left: bool, unit: bool, transpose: bool) -> Sample:
    attrs = {"upper": int(upper), "left": int(left), "unitriangular": int(unit),
             "transpose": int(transpose)}
    name = "_".join(k for k, v in attrs.items() if v) or "lower"
    return Sample({"a": _well_conditioned(*a_shape), "b": rand(*b_shape)}, attrs=attrs,
                  domain=OWN, expected=_triangular(upper, left, unit, transpose), name=name)


def _slogdet(d: dict[str, np.ndarray]) -> list[np.ndarray]:
    import torch

    sign, logabs = torch.linalg.slogdet(_t(d["a"]))
    return [sign.numpy(), logabs.numpy()]


def _det(d: dict[str, np.ndarray]) -> list[np.ndarray]:
    import torch

    return [torch.linalg.det(_t(d["a"])).numpy()]


def _matrix_exp(d: dict[str, np.ndarray]) -> list[np.ndarray]:
    import torch

    return [torch.linalg.matrix_exp(_t(d["a"])).numpy()]


def _with_norm(norm: float, *shape: int) -> np.ndarray:
    """Random matrices scaled to 1-norm ``norm`` (each picks a Pade degree and squarings)."""
    a = rand(*shape)
    return a * (norm / np.abs(a).sum(axis=-2).max(axis=-1)[..., None, None])


LINALG_LU_SAMPLES: dict[str, list[Sample]] = {
    "LUFactor": [
        Sample({"a": rand(2, 4, 4)}, domain=OWN, num_outputs=3, expected=_lu_factor),
        Sample({"a": _well_conditioned(3, 5)}, domain=OWN, num_outputs=3, expected=_lu_factor,
               name="wide"),
        Sample({"a": _well_conditioned(2, 5, 3)}, domain=OWN, num_outputs=3,
               expected=_lu_factor, name="tall"),
        Sample({"a": _SINGULAR}, domain=OWN, num_outputs=3, expected=_lu_factor, grad=[],
               name="singular"),
        Sample({"a": np.zeros((3, 3))}, domain=OWN, num_outputs=3, expected=_lu_factor,
               grad=[], name="zeros"),
        Sample({"a": rand(0, 3, 3)}, domain=OWN, num_outputs=3, expected=_lu_factor, grad=[],
               name="empty_batch"),
    ],
    "LUUnpack": [
        Sample(_factorized(2, 4, 4), domain=OWN, num_outputs=3, expected=_lu_unpack,
               grad=["lu"]),
        Sample(_factorized(3, 5), domain=OWN, num_outputs=3, expected=_lu_unpack, grad=["lu"],
               name="wide"),
        Sample(_factorized(5, 3), domain=OWN, num_outputs=3, expected=_lu_unpack, grad=["lu"],
               name="tall"),
    ],
    "TriangularSolve": [
        _triangular_sample((2, 4, 4), (2, 4, 3), upper, left=True, unit=unit,
                           transpose=transpose)
        for upper in (True, False) for unit in (False, True) for transpose in (False, True)
    ] + [
        _triangular_sample((4, 4), (2, 3, 4), True, left=False, unit=False, transpose=False),
        _triangular_sample((2, 1, 3, 3), (3, 2, 3), False, left=False, unit=True,
                           transpose=True),
        _triangular_sample((3, 3), (3, 1), True, left=True, unit=False, transpose=True),
    ],
    "Det": [
        Sample({"a": rand(2, 3, 3)}, expected=_det, opset=11),
        Sample({"a": rand(4, 4)}, expected=_det),
        Sample({"a": np.stack([_SINGULAR, np.eye(3)[[1, 0, 2]]])}, expected=_det, grad=[],
               name="singular_and_permutation"),
        Sample({"a": rand(0, 2, 2)}, expected=_det, grad=[], name="empty_batch"),
    ],
    "SlogDet": [
        Sample({"a": rand(2, 3, 3)}, domain=OWN, num_outputs=2, expected=_slogdet),
        Sample({"a": np.stack([_SINGULAR, -np.eye(3)])}, domain=OWN, num_outputs=2,
               expected=_slogdet, grad=[], name="singular_and_negative"),
    ],
    "MatrixExp": [
        Sample({"a": rand(2, 4, 4)}, domain=OWN, expected=_matrix_exp),
        *[Sample({"a": _with_norm(norm, 3, 3)}, domain=OWN, expected=_matrix_exp,
                 name=f"norm_{norm}") for norm in (0.01, 0.2, 0.9, 2.0, 5.0, 40.0)],
        Sample({"a": rand(3, 1, 1)}, domain=OWN, expected=_matrix_exp, name="one_by_one"),
        Sample({"a": rand(0, 3, 3)}, domain=OWN, expected=_matrix_exp, grad=[],
               name="empty_batch"),
        Sample({"a": rand(2, 0, 0)}, domain=OWN, expected=_matrix_exp, grad=[],
               name="zero_by_zero"),
    ],
}


def _in_float32(reference: Reference) -> Reference:
    """``reference`` on float32 inputs computed in float64, float outputs rounded to
    float32 (the kernels compute in double)."""
    def run(d: dict[str, np.ndarray]) -> list[np.ndarray]:
        wide = {n: v.astype(np.float64) if v.dtype == np.float32 else v for n, v in d.items()}
        return [y.astype(np.float32) if y.dtype == np.float64 else y for y in reference(wide)]
    return run


def _f32(a: np.ndarray) -> np.ndarray:
    return a.astype(np.float32)


def _large(inputs: dict[str, np.ndarray], reference: Reference, **kw: object) -> Sample:
    kw.setdefault("domain", OWN)
    return Sample({n: _f32(v) if v.dtype == np.float64 else v for n, v in inputs.items()},
                  expected=_in_float32(reference), reference_rtol=1e-4, **kw)  # type: ignore[arg-type]


# float32, batches of 16x16 matrices over several threads (one matrix per iteration).
LINALG_LU_LARGE_SAMPLES: dict[str, list[Sample]] = {
    "LUFactor": [_large({"a": _well_conditioned(24, 16, 16)}, _lu_factor, num_outputs=3)],
    "LUUnpack": [_large(_factorized(24, 16, 12), _lu_unpack, num_outputs=3, grad=["lu"])],
    "TriangularSolve": [Sample({"a": _f32(_well_conditioned(24, 16, 16)),
                                "b": _f32(rand(24, 16, 8))},
                               attrs={"upper": 1, "left": 1, "unitriangular": 0, "transpose": 1},
                               domain=OWN, reference_rtol=1e-4,
                               expected=_in_float32(_triangular(True, True, False, True)))],
    "Det": [_large({"a": _well_conditioned(24, 8, 8)}, _det, domain="")],
    "SlogDet": [_large({"a": _well_conditioned(24, 16, 16)}, _slogdet, num_outputs=2)],
    "MatrixExp": [_large({"a": _with_norm(3.0, 24, 16, 16)}, _matrix_exp)],
}
