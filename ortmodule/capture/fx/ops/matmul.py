"""Matrix products."""

from __future__ import annotations

from typing import Any

from ortmodule.capture.fx.builder import Lowering
from ortmodule.capture.fx.ops.common import aten
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


@register(aten.matmul.default, aten.mm.default, aten.bmm.default)
def _matmul(lw: Lowering, node: Any, a: Any, b: Any) -> Any:
    return lw.op("MatMul", [lw.tensor(a), lw.tensor(b)])
