"""The symmetric eigendecomposition and the SVD (ai.ortmodule Eigh and Svd) and what is
built on them: eigvalsh, svdvals, pinv / pinverse (Pinv), matrix_rank (MatrixRank), cond
and the spectral matrix norms (ord 2, -2, 'nuc').

Eigen- and singular vectors are unique only up to sign (and, at repeated values, up to a
rotation), and eager's come from LAPACK's algorithms, which the engine's Jacobi kernels do
not reproduce. Where a program uses non-empty vectors (torch.linalg.eigh's eigenvectors,
torch.linalg.svd's U or Vh), the op is left to PyTorch (an ``UnsupportedOp``: bridged, with
the reason in the bridging warning) so that they match eager; the values and every
gauge-invariant function of the factors (pinv, rank, norms, cond) lower natively.
"""

from __future__ import annotations

import operator
from typing import Any

import torch

from ortmodule.capture.common import OWN_DOMAIN
from ortmodule.capture.fx.builder import Lowering, UnsupportedOp
from ortmodule.capture.fx.ops.common import _axis, _out, aten
from ortmodule.capture.fx.registry import register

_GAUGE = ("are unique only up to sign, and eager's signs come from LAPACK, which the "
          "engine's Jacobi kernel does not reproduce: the op runs on PyTorch so that they "
          "match eager (the values alone, and pinv, matrix_rank, cond and the spectral norms, "
          "lower natively)")


def _used_outputs(node: Any) -> set[int]:
    """The indices of a multi-output node's results that the program reads."""
    used = set()
    for user in node.users:
        if user.target is operator.getitem and user.users:
            used.add(int(user.args[1]))
        elif user.target is not operator.getitem:
            return set(range(len(_out(node))))
    return used


def _empty(val: torch.Tensor) -> bool:
    return any(isinstance(d, int) and d == 0 for d in val.shape)


def _refuse_used_vectors(node: Any, what: dict[int, str]) -> None:
    vals = _out(node)
    for index in sorted(_used_outputs(node)):
        if index in what and not _empty(vals[index]):
            raise UnsupportedOp(f"{node.target}: {what[index]} {_GAUGE}")


def _float_input(lw: Lowering, node: Any, x: Any) -> str:
    dtype = lw.dtype_of(x)
    if dtype not in (torch.float32, torch.float64):
        raise UnsupportedOp(f"{node.target} on {dtype}: the engine's kernels take float32 and "
                            "float64")
    return lw.tensor(x)


def _swap_last(lw: Lowering, value: str, rank: int) -> str:
    perm = list(range(rank - 2)) + [rank - 1, rank - 2]
    return lw.op("Transpose", [value], perm=perm)


def svd_values(lw: Lowering, value: str) -> str:
    """The singular values [..., k] (descending) of ``value`` [..., m, n]."""
    return lw.op("Svd", [value], outputs=3, domain=OWN_DOMAIN)[1]


# ---- eigh ----

def _uplo(node: Any, uplo: str) -> int:
    if uplo not in ("L", "U"):
        raise UnsupportedOp(f"{node.target}: UPLO must be 'L' or 'U', not {uplo!r}")
    return int(uplo == "L")


@register(aten.linalg_eigh.default)
def _linalg_eigh(lw: Lowering, node: Any, x: Any, uplo: str = "L") -> Any:
    _refuse_used_vectors(node, {1: "its eigenvectors"})
    return lw.op("Eigh", [_float_input(lw, node, x)], outputs=2, domain=OWN_DOMAIN,
                 lower=_uplo(node, uplo))


@register(aten.linalg_eigvalsh.default)
def _linalg_eigvalsh(lw: Lowering, node: Any, x: Any, uplo: str = "L") -> Any:
    return lw.op("Eigh", [_float_input(lw, node, x)], outputs=2, domain=OWN_DOMAIN,
                 lower=_uplo(node, uplo))[0]


# ---- svd ----

@register(aten.linalg_svd.default)
def _linalg_svd(lw: Lowering, node: Any, x: Any, full_matrices: bool = True,
                driver: Any = None) -> Any:
    _refuse_used_vectors(node, {0: "its left singular vectors U", 2: "its Vh"})
    val = lw.meta(x)
    m, n = val.shape[-2], val.shape[-1]
    used = _used_outputs(node)
    if full_matrices and (0 in used or 2 in used) and not (isinstance(m, int) and m == n):
        raise UnsupportedOp(f"{node.target}: full_matrices=True of a non-square matrix")
    return lw.op("Svd", [_float_input(lw, node, x)], outputs=3, domain=OWN_DOMAIN)


@register(aten.svd.default)
def _svd(lw: Lowering, node: Any, x: Any, some: bool = True, compute_uv: bool = True) -> Any:
    """torch.svd: U, S and V (not Vh); reduced when ``some``."""
    _refuse_used_vectors(node, {0: "its left singular vectors U", 2: "its V"})
    val = lw.meta(x)
    m, n = val.shape[-2], val.shape[-1]
    used = _used_outputs(node)
    if (0 in used or 2 in used) and (not compute_uv or (
            not some and not (isinstance(m, int) and m == n))):
        raise UnsupportedOp(f"{node.target}: some=False of a non-square matrix, or "
                            "compute_uv=False")
    u, s, vt = lw.op("Svd", [_float_input(lw, node, x)], outputs=3, domain=OWN_DOMAIN)
    return [u, s, _swap_last(lw, vt, lw.rank(x))]


@register(aten.linalg_svdvals.default)
def _linalg_svdvals(lw: Lowering, node: Any, x: Any, driver: Any = None) -> Any:
    return svd_values(lw, _float_input(lw, node, x))


# ---- pinv and matrix_rank: torch's tolerances ----

def _number(node: Any, value: Any, name: str) -> float | None:
    if value is None or isinstance(value, (int, float)):
        return None if value is None else float(value)
    raise UnsupportedOp(f"{node.target}: {name} must be a number")


class _Tolerances:
    """The optional atol / rtol inputs and attributes of Pinv and MatrixRank: torch's
    semantics (rtol unset: eps * max(m, n), or 0 where atol > 0; the kernels' rtol -1)."""

    def __init__(self, lw: Lowering, node: Any, x: Any, atol: Any, rtol: Any) -> None:
        self.inputs: list[str | None] = [None, None]
        self.attrs: dict[str, float] = {"atol": 0.0, "rtol": -1.0}
        batch = tuple(lw.meta(x).shape[:-2])
        for k, (name, value) in enumerate((("atol", atol), ("rtol", rtol))):
            if isinstance(value, torch.fx.Node):
                shape = tuple(lw.meta(value).shape)
                if len(shape) > len(batch) or any(
                        t != 1 and t != b for t, b in zip(reversed(shape), reversed(batch))):
                    raise UnsupportedOp(f"{node.target}: a {name} of shape {list(shape)}, "
                                        f"which does not broadcast into the batch "
                                        f"{list(batch)}")
                self.inputs[k] = lw.tensor(value)
                continue
            number = _number(node, value, name)
            if number is None:
                continue
            if name == "rtol" and number < 0:
                raise UnsupportedOp(f"{node.target}: a negative rtol")
            self.attrs[name] = number

    def node_inputs(self, a: str) -> list[str | None]:
        inputs = [a, *self.inputs]
        while inputs[-1] is None:
            inputs.pop()
        return inputs


def _pinv(lw: Lowering, node: Any, x: Any, hermitian: bool, tol: _Tolerances) -> str:
    return lw.op("Pinv", tol.node_inputs(_float_input(lw, node, x)), domain=OWN_DOMAIN,
                 hermitian=int(bool(hermitian)), **tol.attrs)


@register(aten.linalg_pinv.atol_rtol_float, aten.linalg_pinv.atol_rtol_tensor)
def _linalg_pinv(lw: Lowering, node: Any, x: Any, atol: Any = None, rtol: Any = None,
                 hermitian: bool = False) -> Any:
    return _pinv(lw, node, x, hermitian, _Tolerances(lw, node, x, atol, rtol))


@register(aten.linalg_pinv.default, aten.linalg_pinv.rcond_tensor)
def _linalg_pinv_rcond(lw: Lowering, node: Any, x: Any, rcond: Any,
                       hermitian: bool = False) -> Any:
    """The rcond form: rtol = rcond, atol = 0."""
    return _pinv(lw, node, x, hermitian, _Tolerances(lw, node, x, 0.0, rcond))


@register(aten.pinverse.default)
def _pinverse(lw: Lowering, node: Any, x: Any, rcond: float = 1e-15) -> Any:
    return _pinv(lw, node, x, False, _Tolerances(lw, node, x, 0.0, rcond))


def _rank(lw: Lowering, node: Any, x: Any, hermitian: bool, tol: _Tolerances) -> str:
    return lw.op("MatrixRank", tol.node_inputs(_float_input(lw, node, x)), domain=OWN_DOMAIN,
                 hermitian=int(bool(hermitian)), **tol.attrs)


@register(aten.linalg_matrix_rank.atol_rtol_float, aten.linalg_matrix_rank.atol_rtol_tensor)
def _linalg_matrix_rank(lw: Lowering, node: Any, x: Any, atol: Any = None, rtol: Any = None,
                        hermitian: bool = False) -> Any:
    return _rank(lw, node, x, hermitian, _Tolerances(lw, node, x, atol, rtol))


@register(aten.linalg_matrix_rank.default, aten.linalg_matrix_rank.tol_tensor)
def _linalg_matrix_rank_tol(lw: Lowering, node: Any, x: Any, tol: Any,
                            hermitian: bool = False) -> Any:
    """The legacy tol form: atol = tol, rtol = 0."""
    return _rank(lw, node, x, hermitian, _Tolerances(lw, node, x, tol, 0.0))


# ---- cond and the spectral norms ----

@register(aten.linalg_cond.default, aten.linalg_cond.p_str)
def _linalg_cond(lw: Lowering, node: Any, x: Any, p: Any = None) -> Any:
    """The 2-norm condition number s_max / s_min (p None or 2; -2: s_min / s_max), as eager
    computes it from the singular values; the other p need an inverse."""
    if p not in (None, 2, -2):
        raise UnsupportedOp(f"{node.target}: p={p!r} (p None, 2 and -2 lower)")
    val = lw.meta(x)
    if _empty(val):
        raise UnsupportedOp(f"{node.target} of an empty matrix")
    s = svd_values(lw, _float_input(lw, node, x))
    axis = lw.rank(x) - 2
    first = lw.op("Gather", [s, lw.const(0, torch.int64)], axis=axis)
    last = lw.op("Gather", [s, lw.const(-1, torch.int64)], axis=axis)
    return lw.op("Div", [first, last] if p != -2 else [last, first])


def spectral_matrix_norm(lw: Lowering, value: str, rank: int, ord: Any, dim: Any,
                         keepdim: bool) -> str:
    """torch.linalg.matrix_norm with ord 2 (the largest singular value), -2 (the smallest)
    or 'nuc' (their sum) over the two dims ``dim``."""
    rows, cols = (_axis(int(d), rank) for d in dim)
    others = [d for d in range(rank) if d not in (rows, cols)]
    if others + [rows, cols] != list(range(rank)):
        value = lw.op("Transpose", [value], perm=others + [rows, cols])
    s = svd_values(lw, value)
    reduction = {2: "ReduceMax", -2: "ReduceMin", "nuc": "ReduceSum"}[ord]
    out = lw.op(reduction, [s, lw.ints([rank - 2])], keepdims=0)
    if keepdim:
        out = lw.op("Unsqueeze", [out, lw.ints(sorted([rows, cols]))])
    return out
