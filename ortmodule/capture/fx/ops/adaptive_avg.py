"""Adaptive average pooling over three spatial axes to any output size (conv.py lowers the
one- and two-axis forms and the evenly dividing sizes): PyTorch's window of output cell o
along an axis of size n covers [floor(o n / out), ceil((o + 1) n / out)); a box's mean is the
mean along each axis in turn, so each axis is one MatMul with its averaging matrix (whose
gradient spreads each cell's gradient evenly over its window, as eager's)."""

from __future__ import annotations

from typing import Any

from ortmodule.capture.fx.builder import FALLBACK_HINT, Lowering, UnsupportedOp
from ortmodule.capture.fx.ops.common import _out, aten
from ortmodule.capture.fx.registry import register


def _averaging(size: int, out: int) -> list[list[float]]:
    """[size, out]: column o holds 1 / (window length) over cell o's window."""
    matrix = [[0.0] * out for _ in range(size)]
    for o in range(out):
        lo = (o * size) // out
        hi = -((-(o + 1) * size) // out)
        for i in range(lo, hi):
            matrix[i][o] = 1.0 / (hi - lo)
    return matrix


@register(aten.adaptive_avg_pool3d.default, aten._adaptive_avg_pool3d.default)
def _adaptive_avg_pool3d(lw: Lowering, node: Any, x: Any, output_size: Any) -> str:
    dtype = _out(node).dtype
    val = lw.meta(x)
    rank = val.dim()
    sizes = list(val.shape[rank - 3:])
    outs = [int(s) for s in output_size]
    if not all(isinstance(s, int) for s in sizes):
        raise UnsupportedOp(f"adaptive_avg_pool3d to {outs} over symbolic sizes {sizes} has "
                            f"no fx translation; {FALLBACK_HINT}")
    if any(o <= 0 for o in outs):
        raise UnsupportedOp(f"adaptive_avg_pool3d to {outs}: every output size must be "
                            f"positive")
    start = v = lw.tensor(x, dtype)
    for k, (size, out) in enumerate(zip(sizes, outs)):
        if size == out:
            continue
        axis = rank - 3 + k
        perm = list(range(rank))
        perm[axis], perm[-1] = perm[-1], perm[axis]
        moved = lw.op("Transpose", [v], perm=perm) if axis != rank - 1 else v
        pooled = lw.op("MatMul", [moved, lw.const(_averaging(size, out), dtype)])
        v = lw.op("Transpose", [pooled], perm=perm) if axis != rank - 1 else pooled
    return v if v != start else lw.op("Identity", [v])
