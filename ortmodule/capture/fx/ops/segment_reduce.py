"""torch.segment_reduce with lengths or offsets (over the data's dims before the axis, as
eager's): each segment's elements picked by a [..., segments, n] mask and reduced (sum, mean, max, min, prod) with ``initial``
folded in, so that the gradients are the reductions' own (max and min shared evenly among
equal elements, prod exact at zeros, as eager's). An empty segment gives ``initial``, else
the reduction's identity (NaN for mean), as eager."""

from __future__ import annotations

import math
from typing import Any

import torch

from ortmodule.capture.fx.builder import FALLBACK_HINT, Lowering, UnsupportedOp, onnx_dtype
from ortmodule.capture.fx.ops.common import aten
from ortmodule.capture.fx.registry import register

_FILL = {"sum": 0.0, "mean": 0.0, "max": -math.inf, "min": math.inf, "prod": 1.0}
_REDUCE = {"sum": "ReduceSum", "mean": "ReduceSum", "max": "ReduceMax", "min": "ReduceMin",
           "prod": "ReduceProd"}
_FOLD = {"sum": "Add", "mean": "Add", "prod": "Mul"}


@register(aten.segment_reduce.default)
def _segment_reduce(lw: Lowering, node: Any, data: Any, reduce: str, lengths: Any = None,
                    indices: Any = None, offsets: Any = None, axis: int = 0,
                    unsafe: bool = False, initial: Any = None) -> Any:
    bounds = lengths if lengths is not None else offsets
    rank = lw.rank(data)
    axis = axis if axis >= 0 else axis + rank
    if (reduce not in _REDUCE or indices is not None or bounds is None or rank == 0
            or lw.rank(bounds) != axis + 1):
        raise UnsupportedOp(f"segment_reduce {reduce!r} without lengths or offsets of the "
                            f"data's leading dims has no fx translation; {FALLBACK_HINT}")
    dtype = lw.dtype_of(data)
    value = lw.tensor(data)
    last = lw.ints([axis])  # the segments' axis of lengths and offsets
    if lengths is not None:
        sizes = lw.tensor(lengths, torch.int64)
        ends = lw.op("CumSum", [sizes, lw.const(axis, torch.int64)])
        starts = lw.op("Sub", [ends, sizes])
    else:
        edges = lw.tensor(offsets, torch.int64)
        starts = lw.op("Slice", [edges, lw.ints([0]), lw.ints([-1]), last])
        ends = lw.op("Slice", [edges, lw.ints([1]), lw.ints([2**62]), last])
    n = lw.tensor(lw.dim(data, axis), torch.int64)
    position = lw.op("Range", [lw.const(0, torch.int64), lw.op("Reshape", [n, lw.ints([])]),
                               lw.const(1, torch.int64)])  # [n]
    after = lw.ints([axis + 1])
    inside = lw.op("And", [
        lw.op("GreaterOrEqual", [position, lw.op("Unsqueeze", [starts, after])]),
        lw.op("Less", [position, lw.op("Unsqueeze", [ends, after])])])  # [lead..., S, n]
    if rank > axis + 1:
        inside = lw.op("Unsqueeze", [inside, lw.ints(list(range(axis + 2, rank + 1)))])
    picked = lw.op("Where", [inside, lw.op("Unsqueeze", [value, lw.ints([axis])]),
                             lw.const(_FILL[reduce], dtype)])  # [lead..., S, n, rest...]
    out = lw.op(_REDUCE[reduce], [picked, after], keepdims=0)
    count = lw.op("ReduceSum", [lw.op("Cast", [inside], to=onnx_dtype(dtype)), after],
                  keepdims=0)
    if initial is not None:
        start = lw.const(float(initial), dtype)
        if reduce in ("max", "min"):
            # initial where it wins (the gradient then reaches no element: eager's, which
            # shares it among the elements equal to the result); NaN stays.
            wins = lw.op("Less" if reduce == "max" else "Greater", [out, start])
            out = lw.op("Where", [wins, start, out])
        else:
            out = lw.op(_FOLD[reduce], [out, start])
    if reduce == "mean":
        if initial is not None:  # an empty segment: initial itself
            count = lw.op("Max", [count, lw.const(1.0, dtype)])
        out = lw.op("Div", [out, count])
    return out
