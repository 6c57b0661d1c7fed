"""Matrix products."""

from __future__ import annotations

from typing import Any

from ortmodule.capture.fx.builder import Lowering
from ortmodule.capture.fx.ops.common import _out, aten
from ortmodule.capture.fx.registry import register


@register(aten.linear.default)
def _linear(lw: Lowering, node: Any, x: Any, w: Any, b: Any = None) -> Any:
    xv, wv = lw.tensor(x), lw.tensor(w)
    if lw.rank(x) == 2 and b is not None:
        return lw.op("Gemm", [xv, wv, lw.tensor(b)], transB=1)
    out = lw.op("MatMul", [xv, lw.op("Transpose", [wv], perm=[1, 0])])
    return out if b is None else lw.op("Add", [out, lw.tensor(b)])


@register(aten.addmm.default)
def _addmm(lw: Lowering, node: Any, bias: Any, a: Any, b: Any, beta: Any = 1,
           alpha: Any = 1) -> Any:
    return lw.op("Gemm", [lw.tensor(a), lw.tensor(b), lw.tensor(bias)],
                 alpha=float(alpha), beta=float(beta))


@register(aten.addbmm.default)
def _addbmm(lw: Lowering, node: Any, bias: Any, a: Any, b: Any, beta: Any = 1,
            alpha: Any = 1) -> Any:
    """beta * bias + alpha * sum over the batch of a[i] @ b[i]; beta = 0 ignores bias (its
    NaN and infinities too), as PyTorch does."""
    dtype = _out(node).dtype
    total = lw.op("ReduceSum", [lw.op("MatMul", [lw.tensor(a), lw.tensor(b)]), lw.ints([0])],
                  keepdims=0)
    if alpha != 1:
        total = lw.op("Mul", [total, lw.const(alpha, dtype)])
    if beta == 0:
        return lw.op("Expand", [total, lw.shape(list(_out(node).shape))])
    scaled = lw.tensor(bias) if beta == 1 else lw.op("Mul", [lw.tensor(bias),
                                                             lw.const(beta, dtype)])
    return lw.op("Add", [scaled, total])


@register(aten.bilinear.default)
def _bilinear(lw: Lowering, node: Any, x1: Any, x2: Any, w: Any, bias: Any = None) -> Any:
    """y[..., o] = sum_ij x1[..., i] w[o, i, j] x2[..., j] (+ bias[o]): one product of x1
    with w laid out [i, o * j], then the j sum against x2."""
    out_shape = list(_out(node).shape)
    o, i, j = (lw.dim(w, d) for d in range(3))
    a = lw.op("Reshape", [lw.tensor(x1), lw.shape([-1, i])])
    wt = lw.op("Reshape", [lw.op("Transpose", [lw.tensor(w)], perm=[1, 0, 2]),
                           lw.shape([i, -1])])
    t = lw.op("Reshape", [lw.op("MatMul", [a, wt]), lw.shape([-1, o, j])])
    b = lw.op("Reshape", [lw.tensor(x2), lw.shape([-1, 1, j])])
    y = lw.op("ReduceSum", [lw.op("Mul", [t, b]), lw.ints([2])], keepdims=0)
    if bias is not None:
        y = lw.op("Add", [y, lw.tensor(bias)])
    return lw.op("Reshape", [y, lw.shape(out_shape)])


@register(aten.matmul.default, aten.mm.default, aten.bmm.default)
def _matmul(lw: Lowering, node: Any, a: Any, b: Any) -> Any:
    return lw.op("MatMul", [lw.tensor(a), lw.tensor(b)])
