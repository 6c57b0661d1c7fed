"""Reductions beyond sum and mean: products, variances, log-sum-exp, norms, max/min with
indices, any/all, sorting and top-k, and the cumulative ones (cumprod, cummax, cummin,
logcumsumexp). A reduction of a 0-d tensor over dim 0 or -1 is the reduction of its one
element, as in eager.
"""

from __future__ import annotations

import math
import operator
from typing import Any

import torch
from onnx import TensorProto

from ortmodule.capture.common import ExportError
from ortmodule.capture.fx.builder import FALLBACK_HINT, Lowering, onnx_dtype
from ortmodule.capture.fx.ops.common import _axis, _out, aten
from ortmodule.capture.fx.ops.linalg_spectral import spectral_matrix_norm
from ortmodule.capture.fx.registry import register


def reduce_axes(dims: Any, rank: int) -> list[int] | None:
    """The normalised axes of a reduction's ``dim`` argument; None: every dim (dim None or
    empty, and any dim of a 0-d tensor, whose only element is the reduction)."""
    if dims is None or rank == 0:
        return None
    if isinstance(dims, int):
        dims = [dims]
    if len(dims) == 0:
        return None
    return sorted(_axis(int(d), rank) for d in dims)


def reduce(lw: Lowering, op_type: str, value: str, axes: list[int] | None,
           keepdim: bool) -> str:
    """An ONNX reduction over ``axes`` (None: all), axes as an input (opset 18 form)."""
    if axes is None:
        return lw.op(op_type, [value], keepdims=int(bool(keepdim)))
    return lw.op(op_type, [value, lw.ints(axes)], keepdims=int(bool(keepdim)))


def _count(lw: Lowering, x: Any, axes: list[int] | None) -> Any:
    """The number of elements one output reduces: an int or a 0-d int64 value."""
    n: Any = 1
    for a in range(lw.rank(x)) if axes is None else axes:
        n = lw.scalar_op("Mul", n, lw.dim(x, a), operator.mul)
    return n


# ---- products ----

@register(aten.prod.default)
def _prod(lw: Lowering, node: Any, x: Any, dtype: Any = None) -> Any:
    return lw.op("ReduceProd", [lw.tensor(x, _out(node).dtype)], keepdims=0)


@register(aten.prod.dim_int)
def _prod_dim(lw: Lowering, node: Any, x: Any, dim: int, keepdim: bool = False,
              dtype: Any = None) -> Any:
    return reduce(lw, "ReduceProd", lw.tensor(x, _out(node).dtype),
                  reduce_axes(dim, lw.rank(x)), keepdim)


# ---- variance and standard deviation ----

def _var(lw: Lowering, node: Any, x: Any, dims: Any, correction: float, keepdim: bool,
         sqrt: bool, with_mean: bool = False) -> Any:
    want = _out(node)[0].dtype if with_mean else _out(node).dtype
    value = lw.tensor(x, want)
    axes = reduce_axes(dims, lw.rank(x))
    mean = reduce(lw, "ReduceMean", value, axes, True)
    centred = lw.op("Sub", [value, mean])
    total = reduce(lw, "ReduceSum", lw.op("Mul", [centred, centred]), axes, keepdim)
    count = _count(lw, x, axes)
    if isinstance(count, int):
        divisor = lw.const(max(count - correction, 0.0), want)
    else:  # max(N - correction, 0), as torch divides
        n = lw.op("Cast", [count], to=onnx_dtype(want))
        divisor = lw.op("Max", [lw.op("Sub", [n, lw.const(float(correction), want)]),
                                lw.const(0.0, want)])
    out = lw.op("Div", [total, divisor])
    if sqrt:  # eager's std gradient is 0 where the deviation is 0
        out = _root_zero_safe(lw, out, None, want)
    if not with_mean:
        return out
    if not keepdim:
        mean = lw.op("Squeeze", [mean] + ([] if axes is None else [lw.ints(axes)]))
    return [out, mean]


def _root_zero_safe(lw: Lowering, total: str, p: float | None, dtype: torch.dtype) -> str:
    """total ** (1 / p) (the square root for p None) whose gradient is 0 where total is 0
    (the root's own is infinite there, and inf * 0 is NaN)."""
    zero = lw.const(0.0, dtype)
    is_zero = lw.op("Equal", [total, zero])
    safe = lw.op("Where", [is_zero, lw.const(1.0, dtype), total])
    root = (lw.op("Sqrt", [safe]) if p is None else
            lw.op("Pow", [safe, lw.const(1.0 / p, dtype)]))
    return lw.op("Where", [is_zero, zero, root])


def _correction(correction: Any) -> float:
    return 1.0 if correction is None else float(correction)


@register(aten.var.correction, aten.std.correction)
def _var_correction(lw: Lowering, node: Any, x: Any, dim: Any = None, correction: Any = None,
                    keepdim: bool = False) -> Any:
    return _var(lw, node, x, dim, _correction(correction), keepdim,
                node.target is aten.std.correction)


@register(aten.var.dim, aten.std.dim)
def _var_dim(lw: Lowering, node: Any, x: Any, dim: Any, unbiased: bool = True,
             keepdim: bool = False) -> Any:
    return _var(lw, node, x, dim, float(bool(unbiased)), keepdim, node.target is aten.std.dim)


@register(aten.var.default, aten.std.default)
def _var_all(lw: Lowering, node: Any, x: Any, unbiased: bool = True) -> Any:
    return _var(lw, node, x, None, float(bool(unbiased)), False,
                node.target is aten.std.default)


@register(aten.var_mean.correction, aten.std_mean.correction)
def _var_mean(lw: Lowering, node: Any, x: Any, dim: Any = None, correction: Any = None,
              keepdim: bool = False) -> Any:
    return _var(lw, node, x, dim, _correction(correction), keepdim,
                node.target is aten.std_mean.correction, with_mean=True)


@register(aten.var_mean.dim, aten.std_mean.dim)
def _var_mean_dim(lw: Lowering, node: Any, x: Any, dim: Any, unbiased: bool = True,
                  keepdim: bool = False) -> Any:
    return _var(lw, node, x, dim, float(bool(unbiased)), keepdim,
                node.target is aten.std_mean.dim, with_mean=True)


@register(aten.var_mean.default, aten.std_mean.default)
def _var_mean_all(lw: Lowering, node: Any, x: Any, unbiased: bool = True) -> Any:
    return _var(lw, node, x, None, float(bool(unbiased)), False,
                node.target is aten.std_mean.default, with_mean=True)


# ---- log-sum-exp ----

@register(aten.logsumexp.default)
def _logsumexp(lw: Lowering, node: Any, x: Any, dim: Any, keepdim: bool = False) -> Any:
    return reduce(lw, "ReduceLogSumExp", lw.tensor(x, _out(node).dtype),
                  reduce_axes(dim, lw.rank(x)), keepdim)


# ---- norms ----

def vector_norm(lw: Lowering, value: str, ord: Any, axes: list[int] | None, keepdim: bool,
                dtype: torch.dtype) -> str:
    """torch.linalg.vector_norm of ``value`` (already in ``dtype``). Its gradient at a zero
    vector is 0, as eager's (the p-norms take the root of a sum guarded against 0)."""
    p = 2.0 if ord is None else float(ord)
    if p == 2.0:
        return reduce(lw, "ReduceL2", value, axes, keepdim)
    if p == 1.0:
        return reduce(lw, "ReduceL1", value, axes, keepdim)
    if p == math.inf:
        return reduce(lw, "ReduceMax", lw.op("Abs", [value]), axes, keepdim)
    if p == -math.inf:
        return reduce(lw, "ReduceMin", lw.op("Abs", [value]), axes, keepdim)
    if p == 0.0:
        # The number of non-zero elements: a zero gradient, but (as in eager) a result that
        # requires grad. sign(|x|) is 1 off zero and 0 at zero (Sign passes no gradient and
        # keeps requires_grad); NaN counts as non-zero.
        ones = lw.op("Sign", [lw.op("Abs", [value])])
        nonzero = lw.op("Where", [lw.op("IsNaN", [value]), lw.const(1.0, dtype), ones])
        return reduce(lw, "ReduceSum", nonzero, axes, keepdim)
    powered = lw.op("Pow", [lw.op("Abs", [value]), lw.const(p, dtype)])
    return _root_zero_safe(lw, reduce(lw, "ReduceSum", powered, axes, keepdim), p, dtype)


@register(aten.linalg_vector_norm.default)
def _linalg_vector_norm(lw: Lowering, node: Any, x: Any, ord: Any = 2, dim: Any = None,
                        keepdim: bool = False, dtype: Any = None) -> Any:
    want = _out(node).dtype
    return vector_norm(lw, lw.tensor(x, want), ord, reduce_axes(dim, lw.rank(x)), keepdim,
                       want)


@register(aten.norm.Scalar, aten.norm.ScalarOpt_dtype)
def _norm_all(lw: Lowering, node: Any, x: Any, p: Any = 2, dtype: Any = None) -> Any:
    want = _out(node).dtype
    return vector_norm(lw, lw.tensor(x, want), p, None, False, want)


@register(aten.norm.ScalarOpt_dim, aten.norm.ScalarOpt_dim_dtype)
def _norm_dim(lw: Lowering, node: Any, x: Any, p: Any, dim: Any, keepdim: bool = False,
              dtype: Any = None) -> Any:
    want = _out(node).dtype
    return vector_norm(lw, lw.tensor(x, want), p, reduce_axes(dim, lw.rank(x)), keepdim, want)


def matrix_norm(lw: Lowering, value: str, rank: int, ord: Any, dim: Any,
                keepdim: bool) -> str:
    """torch.linalg.matrix_norm over the two dims ``dim``: 'fro', the induced 1 / inf
    norms (largest column / row sum of absolute values) and their -1 / -inf minima, and the
    spectral ones (2, -2, 'nuc': linalg_spectral.py)."""
    rows, cols = (_axis(int(d), rank) for d in dim)
    if ord == "fro":
        return reduce(lw, "ReduceL2", value, sorted([rows, cols]), keepdim)
    if ord in (1, -1, math.inf, -math.inf):
        summed, kept = (rows, cols) if ord in (1, -1) else (cols, rows)
        sums = lw.op("ReduceSum", [lw.op("Abs", [value]), lw.ints([summed])], keepdims=1)
        out = lw.op("ReduceMax" if ord > 0 else "ReduceMin", [sums, lw.ints([kept])],
                    keepdims=1)
        if not keepdim:
            out = lw.op("Squeeze", [out, lw.ints(sorted([rows, cols]))])
        return out
    if ord in (2, -2, "nuc"):
        return spectral_matrix_norm(lw, value, rank, ord, dim, keepdim)
    raise ExportError(f"linalg.matrix_norm with ord={ord!r}: the norms are 'fro', 'nuc', "
                      f"1, -1, 2, -2, inf and -inf; {FALLBACK_HINT}")


@register(aten.linalg_matrix_norm.default, aten.linalg_matrix_norm.str_ord)
def _linalg_matrix_norm(lw: Lowering, node: Any, x: Any, ord: Any = "fro",
                        dim: Any = (-2, -1), keepdim: bool = False, dtype: Any = None) -> Any:
    want = _out(node).dtype
    return matrix_norm(lw, lw.tensor(x, want), lw.rank(x), ord, dim, keepdim)


@register(aten.linalg_norm.default, aten.linalg_norm.ord_str)
def _linalg_norm(lw: Lowering, node: Any, x: Any, ord: Any = None, dim: Any = None,
                 keepdim: bool = False, dtype: Any = None) -> Any:
    """torch.linalg.norm: a vector norm over one dim (or all, with ord None or a 1-D input),
    a matrix norm over two (or a 2-D input's)."""
    want = _out(node).dtype
    value = lw.tensor(x, want)
    rank = lw.rank(x)
    if isinstance(dim, int):
        dim = [dim]
    matrix = (dim is not None and len(dim) == 2) or (
        dim is None and ord is not None and rank == 2)
    if isinstance(ord, str) or matrix:
        return matrix_norm(lw, value, rank, "fro" if ord is None else ord,
                           dim if dim is not None else (-2, -1), keepdim)
    return vector_norm(lw, value, ord, reduce_axes(dim, rank), keepdim, want)


@register(aten.clamp_min.default)
def _clamp_min(lw: Lowering, node: Any, x: Any, low: Any) -> Any:
    dtype = _out(node).dtype
    return lw.op("Clip", [lw.tensor(x, dtype), lw.tensor(low, dtype)])


@register(aten.clamp_max.default)
def _clamp_max(lw: Lowering, node: Any, x: Any, high: Any) -> Any:
    dtype = _out(node).dtype
    return lw.op("Clip", [lw.tensor(x, dtype), None, lw.tensor(high, dtype)])


# ---- max / min with indices, any / all ----

def _squeeze(lw: Lowering, value: str, axis: int) -> str:
    return lw.op("Squeeze", [value, lw.ints([axis])])


@register(aten.max.dim, aten.min.dim)
def _max_dim(lw: Lowering, node: Any, x: Any, dim: int, keepdim: bool = False) -> Any:
    """Values gathered at the arg-extreme's index (the first one; NaN counts as the
    extreme), so that the gradient goes to that index alone, as eager's."""
    value = lw.tensor(x)
    if lw.rank(x) == 0:
        return [lw.op("Identity", [value]), lw.const(0, torch.int64)]
    axis = _axis(int(dim), lw.rank(x))
    op_type = "ArgMax" if node.target is aten.max.dim else "ArgMin"
    index = lw.op(op_type, [value], axis=axis, keepdims=1)
    out = lw.op("GatherElements", [value, index], axis=axis)
    if not keepdim:
        out, index = _squeeze(lw, out, axis), _squeeze(lw, index, axis)
    return [out, index]


@register(aten.max.default, aten.min.default)
def _max_all(lw: Lowering, node: Any, x: Any) -> Any:
    op_type = "ReduceMax" if node.target is aten.max.default else "ReduceMin"
    return lw.op(op_type, [lw.tensor(x)], keepdims=0)


@register(aten.any.default, aten.any.dim, aten.any.dims, aten.all.default, aten.all.dim,
          aten.all.dims)
def _any_all(lw: Lowering, node: Any, x: Any, dim: Any = None, keepdim: bool = False) -> Any:
    is_any = "any" in str(node.target)
    nonzero = lw.op("Cast", [lw.tensor(x, torch.bool)], to=TensorProto.INT64)
    out = reduce(lw, "ReduceMax" if is_any else "ReduceMin", nonzero,
                 reduce_axes(dim, lw.rank(x)), keepdim)
    return lw.op("Cast", [out], to=TensorProto.BOOL)


# ---- sorting and top-k (TopK: equal elements by increasing index, NaN largest) ----

def _topk(lw: Lowering, x: Any, k: Any, axis: int, largest: bool) -> list[str]:
    if lw.rank(x) == 0:  # its one element, index 0 (eager's, whatever k)
        return [lw.op("Identity", [lw.tensor(x)]), lw.const(0, torch.int64)]
    return lw.op("TopK", [lw.tensor(x), lw.shape([lw.value(k)])], outputs=2, axis=axis,
                 largest=int(bool(largest)), sorted=1)


def _sort_axis(lw: Lowering, x: Any, dim: int) -> int:
    return 0 if lw.rank(x) == 0 else _axis(int(dim), lw.rank(x))


@register(aten.topk.default)
def _topk_op(lw: Lowering, node: Any, x: Any, k: Any, dim: int = -1, largest: bool = True,
             sorted: bool = True) -> Any:
    return _topk(lw, x, k, _sort_axis(lw, x, dim), largest)


@register(aten.sort.default)
def _sort(lw: Lowering, node: Any, x: Any, dim: int = -1, descending: bool = False) -> Any:
    """A stable sort (eager's unstable sort leaves the order of equal elements open)."""
    axis = _sort_axis(lw, x, dim)
    return _topk(lw, x, 1 if lw.rank(x) == 0 else lw.dim(x, axis), axis, descending)


@register(aten.sort.stable)
def _sort_stable(lw: Lowering, node: Any, x: Any, stable: Any = None, dim: int = -1,
                 descending: bool = False) -> Any:
    return _sort(lw, node, x, dim, descending)


@register(aten.argsort.default)
def _argsort(lw: Lowering, node: Any, x: Any, dim: int = -1, descending: bool = False) -> Any:
    return _sort(lw, node, x, dim, descending)[1]


@register(aten.argsort.stable)
def _argsort_stable(lw: Lowering, node: Any, x: Any, stable: bool = False, dim: int = -1,
                    descending: bool = False) -> Any:
    return _sort(lw, node, x, dim, descending)[1]


@register(aten.msort.default)
def _msort(lw: Lowering, node: Any, x: Any) -> Any:
    return _sort(lw, node, x, 0, False)[0]


def _kth_smallest(lw: Lowering, x: Any, k: Any, axis: int, keepdim: bool) -> list[str]:
    """The k-th smallest element along ``axis`` and its index (k from 1)."""
    values, indices = _topk(lw, x, k, axis, False)
    if lw.rank(x) == 0:
        return [values, indices]
    last = lw.scalar_op("Sub", lw.value(k), 1, operator.sub)
    start, end = lw.shape([last]), lw.shape([lw.value(k)])
    out = [lw.op("Slice", [v, start, end, lw.ints([axis])]) for v in (values, indices)]
    if not keepdim:
        out = [_squeeze(lw, v, axis) for v in out]
    return out


@register(aten.kthvalue.default)
def _kthvalue(lw: Lowering, node: Any, x: Any, k: Any, dim: int = -1,
              keepdim: bool = False) -> Any:
    return _kth_smallest(lw, x, k, _sort_axis(lw, x, dim), keepdim)


# ---- cumulative reductions: y_i reduces x_j for j <= i over a [..., n, n] masked view ----

def _prefix_view(lw: Lowering, x: Any, dim: int, fill: float) -> tuple[str, int, Any]:
    """x moved so that ``dim`` is last, as [..., i, j] = x_j where j <= i, else ``fill``;
    returns it, the axis and the permutation back (None: none needed)."""
    rank = lw.rank(x)
    axis = _axis(int(dim), rank)
    value = lw.tensor(x)
    perm = None
    if axis != rank - 1:
        perm = list(range(rank))
        perm[axis], perm[-1] = perm[-1], perm[axis]
        value = lw.op("Transpose", [value], perm=perm)
    n = lw.dim(x, axis)
    steps = lw.op("Range", [lw.const(0, torch.int64), lw.tensor(n, torch.int64),
                            lw.const(1, torch.int64)])
    rows = lw.op("Unsqueeze", [steps, lw.ints([1])])
    cols = lw.op("Unsqueeze", [steps, lw.ints([0])])
    keep = lw.op("LessOrEqual", [cols, rows])
    dtype = lw.dtype_of(x)
    expanded = lw.op("Unsqueeze", [value, lw.ints([-2])])
    return lw.op("Where", [keep, expanded, lw.const(fill, dtype)]), axis, perm


def _back(lw: Lowering, value: str, perm: Any) -> str:
    return value if perm is None else lw.op("Transpose", [value], perm=perm)


def _is_scalar(lw: Lowering, x: Any) -> bool:
    return lw.rank(x) == 0


@register(aten.cumprod.default)
def _cumprod(lw: Lowering, node: Any, x: Any, dim: int, dtype: Any = None) -> Any:
    """A product per prefix: the gradient is ReduceProd's, exact at zeros as eager's."""
    want = _out(node).dtype
    if _is_scalar(lw, x):
        return lw.op("Identity", [lw.tensor(x, want)])
    if lw.dtype_of(x) != want:
        raise ExportError(f"cumprod with a dtype other than its input's has no fx "
                          f"translation; {FALLBACK_HINT}")
    view, _, perm = _prefix_view(lw, x, dim, 1.0)
    return _back(lw, lw.op("ReduceProd", [view, lw.ints([-1])], keepdims=0), perm)


@register(aten.logcumsumexp.default)
def _logcumsumexp(lw: Lowering, node: Any, x: Any, dim: int) -> Any:
    if _is_scalar(lw, x):
        return lw.op("Identity", [lw.tensor(x)])
    view, _, perm = _prefix_view(lw, x, dim, -math.inf)
    return _back(lw, lw.op("ReduceLogSumExp", [view, lw.ints([-1])], keepdims=0), perm)


@register(aten.cummax.default, aten.cummin.default)
def _cummax(lw: Lowering, node: Any, x: Any, dim: int) -> Any:
    """Indices of the running extreme (the last of equal ones, NaN counting as the extreme,
    as eager), and the values gathered there, so that the gradient goes to those indices."""
    if _is_scalar(lw, x):
        return [lw.op("Identity", [lw.tensor(x)]), lw.const(0, torch.int64)]
    is_max = node.target is aten.cummax.default
    dtype = lw.dtype_of(x)
    if dtype is not None and dtype.is_floating_point:
        fill: float = -math.inf if is_max else math.inf
    else:
        info = torch.iinfo(dtype) if dtype != torch.bool else None
        fill = (info.min if is_max else info.max) if info else (0 if is_max else 1)
    view, axis, perm = _prefix_view(lw, x, dim, fill)
    index = lw.op("ArgMax" if is_max else "ArgMin", [view], axis=-1, keepdims=0,
                  select_last_index=1)
    index = _back(lw, index, perm)
    return [lw.op("GatherElements", [lw.tensor(x), index], axis=axis), index]
