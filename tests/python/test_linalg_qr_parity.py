"""Cholesky and Householder QR through ORTModule against eager: torch.linalg.cholesky(_ex),
torch.cholesky, cholesky_solve (batch dims broadcast), cholesky_inverse, geqrf,
torch.linalg.qr / torch.qr (modes reduced, complete, r; tall, square and wide),
householder_product and ormqr (left/right, transposed), forward and input gradients, float64
and float32, batched. Cholesky inputs are symmetric positive definite and differentiated
through A's symmetrisation (as OpInfo's gradcheck does), so the gradient compared is the
one torch defines; the factor inputs of cholesky_solve / cholesky_inverse are triangular.
Also the refusals: a matrix that is not positive definite (info, or torch's error), geqrf's
missing derivative and QR's non-differentiable modes.
"""

from __future__ import annotations

import pytest
import torch

from ortmodule import ORTModule
from tests.python.parity_utils import FX, Apply, check

DTYPES = [torch.float64, torch.float32]


def _tol(dtype: torch.dtype) -> dict[str, float]:
    return ({"rtol": 1e-9, "atol": 1e-10} if dtype == torch.float64
            else {"rtol": 1e-4, "atol": 1e-5})


def _spd(*shape: int, dtype: torch.dtype, ridge: float = 1.0) -> torch.Tensor:
    g = torch.Generator().manual_seed(sum(shape))
    a = torch.randn(*shape, generator=g, dtype=torch.float64)
    n = shape[-1]
    return (a @ a.mT / n + ridge * torch.eye(n, dtype=torch.float64)).to(dtype)


def _randn(*shape: int, dtype: torch.dtype, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=torch.float64).to(dtype)


def _sym(a: torch.Tensor) -> torch.Tensor:
    return (a + a.mT) / 2


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("upper", [False, True])
def test_cholesky(dtype: torch.dtype, upper: bool) -> None:
    a = _spd(2, 5, 5, dtype=dtype)
    check(lambda x: torch.linalg.cholesky(_sym(x), upper=upper), a, **_tol(dtype))
    check(lambda x: torch.linalg.cholesky_ex(_sym(x), upper=upper), a, **_tol(dtype))
    check(lambda x: torch.cholesky(_sym(x), upper=upper), a, **_tol(dtype))
    # Badly conditioned: the float32 factor loses digits as eager's does.
    bad = _spd(4, 4, dtype=dtype, ridge=1e-3)
    check(lambda x: torch.linalg.cholesky(_sym(x), upper=upper), bad,
          **(_tol(dtype) if dtype == torch.float64 else {"rtol": 1e-3, "atol": 1e-4}))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("upper", [False, True])
def test_cholesky_solve_and_inverse(dtype: torch.dtype, upper: bool) -> None:
    f = torch.linalg.cholesky(_spd(2, 4, 4, dtype=torch.float64), upper=upper).to(dtype)
    b = _randn(3, 1, 4, 2, dtype=dtype)
    check(lambda x, y: torch.cholesky_solve(x, y, upper=upper), b, f, **_tol(dtype))
    check(lambda y: torch.cholesky_inverse(y, upper=upper), f, **_tol(dtype))
    check(lambda y: torch.cholesky_inverse(y, upper=upper), f[0], **_tol(dtype))


@pytest.mark.parametrize("dtype", DTYPES)
def test_geqrf(dtype: torch.dtype) -> None:
    for shape in [(2, 5, 3), (3, 5), (4, 4)]:
        # Not differentiable (torch has no derivative for it): forward only.
        check(lambda x: torch.geqrf(x.detach()), _randn(*shape, dtype=dtype, seed=1),
              **_tol(dtype))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(2, 5, 3), (4, 4), (2, 3, 5)])
def test_qr(dtype: torch.dtype, shape: tuple[int, ...]) -> None:
    a = _randn(*shape, dtype=dtype, seed=2)
    check(lambda x: torch.linalg.qr(x), a, **_tol(dtype))
    check(lambda x: torch.qr(x), a, **_tol(dtype))
    check(lambda x: torch.linalg.qr(x, mode="r")[1].detach(), a, **_tol(dtype))
    if shape[-2] <= shape[-1]:  # complete is differentiable only for m <= n
        check(lambda x: torch.linalg.qr(x, mode="complete"), a, **_tol(dtype))
    else:
        check(lambda x: tuple(t.detach() for t in torch.linalg.qr(x, mode="complete")), a,
              **_tol(dtype))


@pytest.mark.parametrize("dtype", DTYPES)
def test_householder_product(dtype: torch.dtype) -> None:
    check(torch.linalg.householder_product, _randn(2, 5, 3, dtype=dtype, seed=3),
          _randn(2, 2, dtype=dtype, seed=4), **_tol(dtype))
    # tau from geqrf: Q of a QR decomposition.
    v, tau = torch.geqrf(_randn(4, 4, dtype=dtype, seed=5))
    check(torch.linalg.householder_product, v, tau, **_tol(dtype))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("left", [True, False])
@pytest.mark.parametrize("transpose", [False, True])
def test_ormqr(dtype: torch.dtype, left: bool, transpose: bool) -> None:
    a = _randn(2, 5, 3, dtype=dtype, seed=6)
    tau = _randn(2, 3, dtype=dtype, seed=7)
    c = _randn(2, 5, 2, dtype=dtype, seed=8) if left else _randn(2, 2, 5, dtype=dtype, seed=8)
    check(lambda x, t, y: torch.ormqr(x, t, y, left=left, transpose=transpose), a, tau, c,
          **_tol(dtype))


def test_not_positive_definite() -> None:
    a = torch.tensor([[4.0, 2, 1], [2, -3, 0], [1, 0, 5]])
    check(torch.linalg.cholesky_ex, a)  # info 2 and LAPACK's partial factor
    check(lambda x: torch.linalg.cholesky_ex(x, upper=True), a)
    with pytest.raises(RuntimeError, match="leading minor of order 2 is not positive-definite"):
        ORTModule(Apply(torch.linalg.cholesky), FX)(a)


def test_refused_gradients() -> None:
    x = torch.randn(4, 3, requires_grad=True)
    with pytest.raises(RuntimeError, match="no gradient rule for ai.ortmodule::Geqrf"):
        ORTModule(Apply(torch.geqrf), FX)(x)
    with pytest.raises(RuntimeError, match="mode='r'"):
        ORTModule(Apply(lambda a: torch.linalg.qr(a, mode="r")[1]), FX)(x).sum().backward()
    with pytest.raises(RuntimeError, match="mode='complete' and nrows > ncols"):
        ORTModule(Apply(lambda a: torch.linalg.qr(a, mode="complete")[0]), FX)(x).sum().backward()
