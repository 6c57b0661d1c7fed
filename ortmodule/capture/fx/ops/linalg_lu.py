"""Dense linear algebra by LU: torch.linalg.lu_factor(_ex), linalg.lu, lu_unpack,
linalg.lu_solve, linalg.solve(_ex), linalg.inv(_ex), linalg.det, linalg.slogdet (and the
composites PyTorch builds on them: lu, lu_solve, logdet, tensorinv, tensorsolve,
matrix_power) and triangular solves, over the ai.ortmodule ops LUFactor (partial pivoting as
LAPACK's getrf), LUUnpack and TriangularSolve, ONNX Det and ai.ortmodule SlogDet; and
torch.linalg.matrix_exp as ai.ortmodule MatrixExp (scaling and squaring, its Pade quotient an
LU solve). A solve with a factorization A = P L U is two triangular solves and a product with
P; the gradients are those ops' rules (csrc/ops/linalg_lu_grad_ops.cpp).
"""

from __future__ import annotations

import operator
from typing import Any

import torch
from onnx import helper

from ortmodule.capture.common import OWN_DOMAIN
from ortmodule.capture.fx.builder import Lowering, UnsupportedOp
from ortmodule.capture.fx.ops.common import _out, aten
from ortmodule.capture.fx.ops.inplace import _filled
from ortmodule.capture.fx.registry import register


def _used(node: Any) -> set[int]:
    """The outputs of a multi-output node that its users read."""
    return {int(u.args[1]) for u in node.users if u.target is operator.getitem}


def _lu_factor(lw: Lowering, a: Any, check_errors: bool = False,
               api: str | None = None) -> list[str]:
    """LU, pivots (int32, 1-based), info of ``a`` [..., m, n]."""
    return lw.op("LUFactor", [lw.tensor(a)], outputs=3, domain=OWN_DOMAIN,
                 check_errors=int(bool(check_errors)), api=api)


def _unpack(lw: Lowering, lu: str, pivots: str) -> list[str]:
    """L, U, P with A = P L U."""
    return lw.op("LUUnpack", [lu, pivots], outputs=3, domain=OWN_DOMAIN)


def _permutation(lw: Lowering, lu: str, pivots: str) -> str:
    """P of A = P L U, a constant of the gradient (piecewise constant in A)."""
    return lw.op("StopGradient", [_unpack(lw, lu, pivots)[2]], domain=OWN_DOMAIN)


def _tri(lw: Lowering, a: str, b: str, *, upper: bool, left: bool = True, unit: bool = False,
         trans: bool = False) -> str:
    return lw.op("TriangularSolve", [a, b], domain=OWN_DOMAIN, upper=int(upper),
                 left=int(left), unitriangular=int(unit), transpose=int(trans))


def _mt(lw: Lowering, x: str, rank: int) -> str:
    perm = list(range(rank - 2)) + [rank - 1, rank - 2]
    return lw.op("Transpose", [x], perm=perm)


def _lu_solve(lw: Lowering, lu: str, pivots: str, b: str, rank_p: int, rank_b: int,
              left: bool = True, adjoint: bool = False) -> str:
    """X with A X = B (left) or X A = B, A (or A^T when adjoint) = P L U from ``lu``."""
    p = _permutation(lw, lu, pivots)
    if left and not adjoint:  # X = U^-1 L^-1 P^T B
        y = lw.op("MatMul", [_mt(lw, p, rank_p), b])
        return _tri(lw, lu, _tri(lw, lu, y, upper=False, unit=True), upper=True)
    if left:  # X = P L^-T U^-T B
        y = _tri(lw, lu, _tri(lw, lu, b, upper=True, trans=True), upper=False, unit=True,
                 trans=True)
        return lw.op("MatMul", [p, y])
    if not adjoint:  # X = B U^-1 L^-1 P^T
        y = _tri(lw, lu, _tri(lw, lu, b, upper=True, left=False), upper=False, left=False,
                 unit=True)
        return lw.op("MatMul", [y, _mt(lw, p, rank_p)])
    # X = B P L^-T U^-T
    y = _tri(lw, lu, lw.op("MatMul", [b, p]), upper=False, left=False, unit=True, trans=True)
    return _tri(lw, lu, y, upper=True, left=False, trans=True)


def _no_pivoting(pivot: bool, what: str) -> None:
    if not pivot:
        raise UnsupportedOp(f"{what} with pivot=False: the engine factorizes with partial "
                            "pivoting only (PyTorch's CPU kernels too)")


@register(aten.linalg_lu_factor_ex.default)
def _linalg_lu_factor_ex(lw: Lowering, node: Any, a: Any, pivot: bool = True,
                         check_errors: bool = False) -> Any:
    _no_pivoting(pivot, "torch.linalg.lu_factor")
    return _lu_factor(lw, a, check_errors)


@register(aten.linalg_lu.default)
def _linalg_lu(lw: Lowering, node: Any, a: Any, pivot: bool = True) -> Any:
    _no_pivoting(pivot, "torch.linalg.lu")
    lu, pivots, _ = _lu_factor(lw, a)
    lower, upper, p = _unpack(lw, lu, pivots)
    return [p, lower, upper]


@register(aten.lu_unpack.default)
def _lu_unpack(lw: Lowering, node: Any, lu: Any, pivots: Any, unpack_data: bool = True,
               unpack_pivots: bool = True) -> Any:
    lower, upper, p = _unpack(lw, lw.tensor(lu), lw.tensor(pivots))
    dtype = _out(node)[1].dtype
    empty = lw.const([], dtype)  # what torch returns for the parts not unpacked
    return [p if unpack_pivots else empty, lower if unpack_data else empty,
            upper if unpack_data else empty]


@register(aten.linalg_lu_solve.default)
def _linalg_lu_solve(lw: Lowering, node: Any, lu: Any, pivots: Any, b: Any, left: bool = True,
                     adjoint: bool = False) -> Any:
    return _lu_solve(lw, lw.tensor(lu), lw.tensor(pivots), lw.tensor(b), lw.rank(lu),
                     lw.rank(b), left, adjoint)


@register(aten._linalg_solve_ex.default)
def _linalg_solve_ex(lw: Lowering, node: Any, a: Any, b: Any, left: bool = True,
                     check_errors: bool = False) -> Any:
    a_val, b_val = lw.meta(a), lw.meta(b)
    # torch's vector right-hand side: B [n] or B of A's shape without its last dim.
    vector = b_val.dim() == 1 or (b_val.dim() == a_val.dim() - 1
                                  and tuple(b_val.shape) == tuple(a_val.shape[:-1]))
    bv = lw.tensor(b)
    axis = -1 if left else -2
    if vector:
        bv = lw.op("Unsqueeze", [bv, lw.ints([axis])])
    lu, pivots, info = _lu_factor(lw, a, check_errors)
    x = _lu_solve(lw, lu, pivots, bv, a_val.dim(), b_val.dim() + int(vector), left)
    if vector:
        x = lw.op("Squeeze", [x, lw.ints([axis])])
    return [x, lu, pivots, info]


@register(aten.linalg_inv_ex.default)
def _linalg_inv_ex(lw: Lowering, node: Any, a: Any, check_errors: bool = False) -> Any:
    lu, pivots, info = _lu_factor(lw, a, check_errors)
    return [_inverse(lw, lu, pivots, lw.rank(a)), info]


def _inverse(lw: Lowering, lu: str, pivots: str, rank: int) -> str:
    """A^-1 = U^-1 L^-1 P^T."""
    p = _permutation(lw, lu, pivots)
    return _tri(lw, lu, _tri(lw, lu, _mt(lw, p, rank), upper=False, unit=True), upper=True)


def _with_factors(lw: Lowering, node: Any, a: Any, first: list[str], at: int) -> list[Any]:
    """``first`` followed by LU and pivots of ``a`` (factorized only where they are read)."""
    if not _used(node) & {at, at + 1}:
        return first + [None, None]
    lu, pivots, _ = _lu_factor(lw, a)
    return first + [lu, pivots]


@register(aten._linalg_det.default)
def _linalg_det(lw: Lowering, node: Any, a: Any) -> Any:
    return _with_factors(lw, node, a, [lw.op("Det", [lw.tensor(a)])], 1)


@register(aten._linalg_slogdet.default)
def _linalg_slogdet(lw: Lowering, node: Any, a: Any) -> Any:
    sign, logabs = lw.op("SlogDet", [lw.tensor(a)], outputs=2, domain=OWN_DOMAIN)
    return _with_factors(lw, node, a, [sign, logabs], 2)


@register(aten.triangular_solve.default)
def _triangular_solve(lw: Lowering, node: Any, b: Any, a: Any, upper: bool = True,
                      transpose: bool = False, unitriangular: bool = False) -> Any:
    av = lw.tensor(a)
    x = _tri(lw, av, lw.tensor(b), upper=upper, unit=unitriangular, trans=transpose)
    return [x, lw.op("Identity", [av])]


@register(aten.linalg_solve_triangular.default)
def _linalg_solve_triangular(lw: Lowering, node: Any, a: Any, b: Any, upper: bool,
                             left: bool = True, unitriangular: bool = False) -> Any:
    return _tri(lw, lw.tensor(a), lw.tensor(b), upper=upper, left=left, unit=unitriangular)




@register(aten._linalg_check_errors.default)
def _linalg_check_errors(lw: Lowering, node: Any, info: Any, api_name: str,
                         is_matrix: bool) -> Any:
    """torch's check of a factorization's info (linalg.inv, solve, lu_factor raise on a
    singular matrix): the LUFactor that made ``info`` checks it as it runs."""
    name = lw.value(info)
    for n in lw.nodes:
        if n.op_type == "LUFactor" and len(n.output) > 2 and n.output[2] == name:
            for attr in n.attribute:
                if attr.name == "check_errors":
                    attr.i = 1
            n.attribute.append(helper.make_attribute("api", str(api_name)))
            return None
    raise UnsupportedOp(f"{api_name}: its info does not come from an LU factorization")


@register(aten.linalg_matrix_power.default)
def _linalg_matrix_power(lw: Lowering, node: Any, a: Any, n: int) -> Any:
    """torch's algorithm: A^0 = I (requiring grad where A does, its gradient zero), A^-n =
    inv(A)^n, and A^n by repeated squaring (products in torch's order)."""
    if n == 0:
        k = lw.const(0, torch.int64)
        ones = _filled(lw, a, 1)
        return lw.op("Trilu", [lw.op("Trilu", [ones, k], upper=1), k], upper=0)
    x = lw.tensor(a)
    if n < 0:
        lu, pivots, _ = _lu_factor(lw, a, True, api="linalg.inv")
        x = _inverse(lw, lu, pivots, lw.rank(a))
        n = -n
    if n == 1:
        return lw.op("Identity", [x])
    if n == 2:
        return lw.op("MatMul", [x, x])
    if n == 3:
        return lw.op("MatMul", [lw.op("MatMul", [x, x]), x])
    z = result = None
    while n > 0:
        bit, n = n % 2, n // 2
        z = x if z is None else lw.op("MatMul", [z, z])
        if bit:
            result = z if result is None else lw.op("MatMul", [result, z])
    return result


@register(*[op.default for op in (aten.linalg_matrix_exp, getattr(aten, "matrix_exp", None))
            if op is not None])
def _linalg_matrix_exp(lw: Lowering, node: Any, a: Any) -> Any:
    """exp(A) of A [..., n, n] (float32 or float64, computed in double)."""
    dtype = lw.dtype_of(a)
    if dtype not in (torch.float32, torch.float64):
        raise UnsupportedOp(f"{node.target} on {dtype}: the engine's kernel takes float32 and "
                            "float64")
    return lw.op("MatrixExp", [lw.tensor(a)], domain=OWN_DOMAIN)
