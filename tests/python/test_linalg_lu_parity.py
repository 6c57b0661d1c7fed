"""Dense linear algebra by LU through the fx exporter with no bridging, against eager
PyTorch, forward and input gradients, float32 and float64: LU factorizations (square, wide,
tall, batched) and their unpacking, solves with a factorization (left, right, adjoint),
linalg.solve / inv / det / slogdet / logdet, triangular solves in every layout with
broadcast batch dims, tensorinv / tensorsolve and matrix_power (negative powers through the
inverse); singular matrices (det 0, info > 0, inv raising) and empty batches as eager."""

from __future__ import annotations

import pytest
import torch

from ortmodule import ORTModule
from tests.python.parity_utils import FX, Apply, check

DTYPES = [torch.float32, torch.float64]
TOL = {torch.float32: {"rtol": 1e-4, "atol": 1e-5}, torch.float64: {"rtol": 1e-9, "atol": 1e-10}}


def mat(*shape: int, dtype: torch.dtype, seed: int = 0) -> torch.Tensor:
    """Well-conditioned random matrices: random entries plus 2 I on the leading square."""
    a = torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    k = min(shape[-2:])
    a[..., range(k), range(k)] += 2.0 * torch.sign(a[..., range(k), range(k)] + 0.1)
    return a.to(dtype)


def rhs(*shape: int, dtype: torch.dtype) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(9), dtype=dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(4, 4), (2, 3, 5, 5), (3, 5), (2, 5, 3)],
                         ids=["square", "batched", "wide", "tall"])
def test_lu_factorizations(dtype: torch.dtype, shape: tuple[int, ...]) -> None:
    check(lambda x: (*torch.linalg.lu(x), *torch.linalg.lu_factor_ex(x),
                     *torch.lu_unpack(*torch.linalg.lu_factor(x))),
          mat(*shape, dtype=dtype), **TOL[dtype])


@pytest.mark.parametrize("dtype", DTYPES)
def test_lu_solves(dtype: torch.dtype) -> None:
    def solves(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> tuple[torch.Tensor, ...]:
        lu, pivots = torch.linalg.lu_factor(a)
        return (*torch.lu(a, get_infos=True), torch.lu_solve(b, *torch.lu(a)),
                *(torch.linalg.lu_solve(lu, pivots, b if left else c, left=left,
                                        adjoint=adjoint)
                  for left in (True, False) for adjoint in (False, True)))

    check(solves, mat(2, 4, 4, dtype=dtype), rhs(2, 4, 3, dtype=dtype),
          rhs(2, 3, 4, dtype=dtype), **TOL[dtype])


@pytest.mark.parametrize("dtype", DTYPES)
def test_solve(dtype: torch.dtype) -> None:
    def solves(a: torch.Tensor, b: torch.Tensor, v: torch.Tensor, w: torch.Tensor,
               c: torch.Tensor, r: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return (torch.linalg.solve(a, b),
                torch.linalg.solve(a, v),  # batched vectors
                torch.linalg.solve(a, w),  # one vector
                torch.linalg.solve(a[0], c),  # broadcast batch dims
                torch.linalg.solve(a, r, left=False),
                *torch.linalg.solve_ex(a, b[..., :1]))

    check(solves, mat(3, 4, 4, dtype=dtype), rhs(3, 4, 2, dtype=dtype), rhs(3, 4, dtype=dtype),
          rhs(4, dtype=dtype), rhs(2, 4, 3, dtype=dtype), rhs(3, 2, 4, dtype=dtype),
          **TOL[dtype])


@pytest.mark.parametrize("dtype", DTYPES)
def test_inverse_and_determinants(dtype: torch.dtype) -> None:
    check(lambda a: (torch.linalg.inv(a), *torch.linalg.inv_ex(a), torch.linalg.det(a),
                     *torch.linalg.slogdet(a), torch.logdet(a @ a.mT),
                     torch.linalg.det(-a[0, :1, :1])),
          mat(2, 4, 4, dtype=dtype), **TOL[dtype])


@pytest.mark.parametrize("dtype", DTYPES)
def test_triangular_solves(dtype: torch.dtype) -> None:
    def solves(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> list[torch.Tensor]:
        out = []
        for upper in (True, False):
            for unit in (False, True):
                out += [torch.triangular_solve(b, a, upper=upper, transpose=t,
                                               unitriangular=unit)[0] for t in (False, True)]
                out.append(torch.linalg.solve_triangular(a, b, upper=upper,
                                                         unitriangular=unit))
                out.append(torch.linalg.solve_triangular(a[:1], c, upper=upper, left=False,
                                                         unitriangular=unit))  # broadcast
        return out

    check(solves, mat(2, 4, 4, dtype=dtype), rhs(2, 4, 3, dtype=dtype),
          rhs(3, 1, 2, 4, dtype=dtype), **TOL[dtype])


@pytest.mark.parametrize("dtype", DTYPES)
def test_tensorinv_tensorsolve_matrix_power(dtype: torch.dtype) -> None:
    check(lambda a, b, m: (torch.linalg.tensorinv(a, ind=1), torch.linalg.tensorsolve(a, b),
                           *(torch.linalg.matrix_power(m, n) for n in (0, 1, 3, 6, -1, -3))),
          mat(6, 6, dtype=dtype).reshape(6, 2, 3), rhs(6, dtype=dtype),
          mat(2, 3, 3, dtype=dtype) * 0.5, **TOL[dtype])


SINGULAR = [[1.0, 0.0, 3.0], [2.0, 0.0, 6.0], [1.0, 0.0, 1.0]]  # a zero column


@pytest.mark.parametrize("dtype", DTYPES)
def test_singular_matrices_as_eager(dtype: torch.dtype) -> None:
    s = torch.stack([torch.tensor(SINGULAR, dtype=dtype), torch.eye(3, dtype=dtype)])
    # det 0 and 1, slogdet (0, -inf), info 2 (U[1, 1] is zero), solutions of inf and NaN.
    check(lambda x: (torch.linalg.det(x.detach()), *torch.linalg.slogdet(x.detach()),
                     *torch.linalg.lu_factor_ex(x.detach()),
                     *torch.linalg.solve_ex(x.detach(), torch.ones(3, dtype=dtype)),
                     *torch.linalg.inv_ex(x.detach())), s, **TOL[dtype])
    if dtype == torch.float64:
        return
    for fn, api in [(torch.linalg.inv, "linalg.inv"), (torch.linalg.lu_factor, "lu_factor"),
                    (lambda x: torch.linalg.solve(x, x[..., :1]), "solve"),
                    (lambda x: torch.linalg.matrix_power(x, -2), "linalg.inv")]:
        with pytest.raises(RuntimeError, match=rf"{api}.*singular"):
            ORTModule(Apply(fn), FX)(s)


@pytest.mark.parametrize("dtype", DTYPES)
def test_empty_batches(dtype: torch.dtype) -> None:
    check(lambda a, b, e: (torch.linalg.det(a), *torch.linalg.slogdet(a), torch.linalg.inv(a),
                           *torch.linalg.lu_factor(a), *torch.linalg.lu(a),
                           torch.linalg.solve(a, b), torch.linalg.det(e)),  # det of 0 x 0: 1
          torch.zeros(0, 3, 3, dtype=dtype), torch.zeros(0, 3, 2, dtype=dtype),
          torch.zeros(2, 0, 0, dtype=dtype))


def test_one_graph_for_square_wide_and_tall_sizes() -> None:
    """Once sizes change the graph is traced with symbolic sizes: its LU gradient serves
    square, tall and wide matrices alike."""
    def fn(a: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return torch.linalg.lu(a)[1:]

    ort = ORTModule(Apply(fn), FX)
    for shape in [(2, 4, 4), (3, 5, 3), (2, 3, 5), (1, 4, 4)]:
        a = mat(*shape, dtype=torch.float64, seed=len(ort._cache))
        x, y = a.clone().requires_grad_(), a.clone().requires_grad_()
        got, want = ort(x), fn(y)
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w, **TOL[torch.float64])
        (got[0].sum() + 2 * got[1].sum()).backward()
        (want[0].sum() + 2 * want[1].sum()).backward()
        torch.testing.assert_close(x.grad, y.grad, **TOL[torch.float64])
