"""Samples for the spectral family (ai.ortmodule Eigh, Svd, Pinv, MatrixRank; see
op_samples.py), each against torch.linalg in float64. Eigen- and singular vectors are
compared under the ops' sign convention (each eigenvector's, and each left singular vector's,
largest-magnitude component positive), applied to torch's.

Eigh, and Pinv with hermitian=1, read one triangle, and their gradient is torch's: the
gradient for symmetric perturbations, which a finite difference of one entry does not
measure (torch checks it through a wrapper that symmetrizes the input); those samples have
no finite-difference check (grad=[]), and test_linalg_spectral_parity.py compares their
gradients with eager's. Truncating pinvs (a tolerance that drops singular values) are not
differentiable across the cut, so they have none either."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from tests.python.sample_utils import Sample, rand

OWN = "ai.ortmodule"
_rng = np.random.default_rng(11)


def _fix_signs(vectors: np.ndarray, *others: np.ndarray) -> list[np.ndarray]:
    """Flips columns of ``vectors`` [..., r, c] so that each one's largest-magnitude entry
    is positive, and the same columns of ``others`` (given as [..., *, c])."""
    if vectors.size == 0:
        return [vectors, *others]
    best = np.argmax(np.abs(vectors), axis=-2)[..., None, :]
    sign = np.where(np.take_along_axis(vectors, best, axis=-2) < 0, -1.0, 1.0)
    return [vectors * sign] + [o * sign for o in others]


def _eigh(d: dict[str, np.ndarray], lower: bool = True) -> list[np.ndarray]:
    import torch

    x = d["x"]
    w, v = torch.linalg.eigh(torch.from_numpy(x).double(), UPLO="L" if lower else "U")
    (v,) = _fix_signs(v.numpy())
    return [w.numpy().astype(x.dtype), v.astype(x.dtype)]


def _svd(d: dict[str, np.ndarray]) -> list[np.ndarray]:
    import torch

    x = d["x"]
    u, s, vh = torch.linalg.svd(torch.from_numpy(x).double(), full_matrices=False)
    u, v = _fix_signs(u.numpy(), np.swapaxes(vh.numpy(), -1, -2))
    return [u.astype(x.dtype), s.numpy().astype(x.dtype), np.swapaxes(v, -1, -2).astype(x.dtype)]


def _linalg(fn: str, **attrs: object) -> Callable[[dict[str, np.ndarray]], list[np.ndarray]]:
    """torch.linalg.<fn>(x, atol, rtol, hermitian) from the op's attributes (rtol < 0: unset),
    in x's dtype (whose eps the default rtol is)."""
    def reference(d: dict[str, np.ndarray]) -> list[np.ndarray]:
        import torch

        x = d["x"]
        rtol = float(attrs.get("rtol", -1.0))
        out = getattr(torch.linalg, fn)(torch.from_numpy(x),
                                        atol=float(attrs.get("atol", 0.0)),
                                        rtol=None if rtol < 0 else rtol,
                                        hermitian=bool(attrs.get("hermitian", 0)))
        return [out.numpy().astype(x.dtype) if out.is_floating_point() else out.numpy()]
    return reference


def _tensor_tolerances(fn: str) -> Callable[[dict[str, np.ndarray]], list[np.ndarray]]:
    def reference(d: dict[str, np.ndarray]) -> list[np.ndarray]:
        import torch

        out = getattr(torch.linalg, fn)(*(torch.from_numpy(d[n]) for n in ("x",)),
                                        atol=torch.from_numpy(d["atol"]),
                                        rtol=torch.from_numpy(d["rtol"]))
        return [out.numpy()]
    return reference


def _sym(*shape: int) -> np.ndarray:
    a = rand(*shape)
    return a + np.swapaxes(a, -1, -2)


def _rank_deficient(m: int, n: int, rank: int) -> np.ndarray:
    return rand(m, rank) @ rand(rank, n)


def _op(attrs: dict[str, object], x: np.ndarray, fn: str, **kw: object) -> Sample:
    return Sample({"x": x}, attrs=attrs, domain=OWN, expected=_linalg(fn, **attrs), **kw)


LINALG_SPECTRAL_SAMPLES: dict[str, list[Sample]] = {
    "Eigh": [
        Sample({"x": _sym(4, 4)}, num_outputs=2, domain=OWN, expected=_eigh, grad=[],
               reference_rtol=1e-9),
        # Only the upper triangle is read (UPLO='U'); batched; a negative definite matrix.
        Sample({"x": rand(2, 3, 3)}, attrs={"lower": 0}, num_outputs=2, domain=OWN,
               expected=lambda d: _eigh(d, lower=False), grad=[], reference_rtol=1e-9),
        Sample({"x": -5.0 * np.eye(3) + 0.1 * _sym(3, 3)}, num_outputs=2, domain=OWN,
               expected=_eigh, grad=[], reference_rtol=1e-9),
        Sample({"x": np.zeros((0, 0))}, num_outputs=2, domain=OWN, expected=_eigh, grad=[]),
    ],
    "Svd": [
        Sample({"x": rand(4, 3)}, num_outputs=3, domain=OWN, expected=_svd, reference_rtol=1e-9),
        Sample({"x": rand(2, 3, 5)}, num_outputs=3, domain=OWN, expected=_svd,
               reference_rtol=1e-9),
        # Large and small scales in one matrix: the small singular values keep their accuracy.
        Sample({"x": rand(3, 3) * np.array([1e3, 1.0, 1e-3])}, num_outputs=3, domain=OWN,
               expected=_svd, reference_rtol=1e-8),
        Sample({"x": np.zeros((0, 2))}, num_outputs=3, domain=OWN, expected=_svd, grad=[]),
    ],
    "Pinv": [
        _op({}, rand(4, 3), "pinv", reference_rtol=1e-9),
        _op({}, rand(2, 3, 5), "pinv", reference_rtol=1e-9),
        # rank 2 of 4: the default rtol (eps * max(m, n)) drops the zero singular values.
        _op({}, _rank_deficient(5, 4, 2), "pinv", grad=[], reference_rtol=1e-7),
        _op({"rtol": 0.5}, rand(3, 3), "pinv", grad=[], reference_rtol=1e-9),
        _op({"atol": 0.3}, rand(4, 4), "pinv", grad=[], reference_rtol=1e-9),
        _op({"hermitian": 1}, _sym(4, 4), "pinv", grad=[], reference_rtol=1e-9),
        _op({}, np.zeros((3, 0)), "pinv", grad=[]),
        Sample({"x": np.stack([rand(3, 3) * np.array([10.0, 1.0, 0.01])] * 2),
                "atol": np.array([0.5, 0.001]), "rtol": np.array(0.0)}, domain=OWN,
               expected=_tensor_tolerances("pinv"), grad=[], reference_rtol=1e-9),
    ],
    "MatrixRank": [
        _op({}, rand(4, 4), "matrix_rank"),
        # atol per matrix (a tensor input), rtol 0-d: torch's tensor tolerances.
        Sample({"x": np.stack([rand(3, 3) * np.array([10.0, 1.0, 0.01])] * 2),
                "atol": np.array([0.5, 20.0]), "rtol": np.array(0.001)}, domain=OWN,
               expected=_tensor_tolerances("matrix_rank")),
        _op({}, np.stack([_rank_deficient(5, 4, 2), _rank_deficient(5, 4, 3)]), "matrix_rank"),
        _op({"atol": 1.0, "rtol": 0.0}, rand(3, 3) * np.array([10.0, 1.0, 0.01]),
            "matrix_rank"),
        _op({"hermitian": 1, "rtol": 0.2}, _sym(4, 4), "matrix_rank"),
        _op({}, np.zeros((3, 3)), "matrix_rank"),
        _op({}, np.zeros((2, 0, 3)), "matrix_rank"),
    ],
}


def _large_sym(batch: int, n: int) -> np.ndarray:
    a = _rng.uniform(-1, 1, size=(batch, n, n))
    return (a + np.swapaxes(a, -1, -2)).astype(np.float32)


# float32 batches that span several parallel grains.
LINALG_SPECTRAL_LARGE_SAMPLES: dict[str, list[Sample]] = {
    "Eigh": [Sample({"x": _large_sym(48, 6)}, num_outputs=2, domain=OWN, expected=_eigh,
                    grad=[], reference_rtol=1e-4)],
    "Svd": [Sample({"x": _rng.uniform(-1, 1, size=(48, 7, 5)).astype(np.float32)},
                   num_outputs=3, domain=OWN, expected=_svd, reference_rtol=1e-4)],
    "Pinv": [_op({}, _rng.uniform(-1, 1, size=(48, 5, 6)).astype(np.float32), "pinv",
                 reference_rtol=1e-4)],
    "MatrixRank": [_op({}, np.stack([(_rng.uniform(-1, 1, size=(6, k)) @
                                      _rng.uniform(-1, 1, size=(k, 6))).astype(np.float32)
                                     for k in range(1, 7) for _ in range(8)]), "matrix_rank")],
}
