"""Order statistics built on a stable ascending TopK (NaN largest, as eager's sort): median
and nanmedian (all elements and along a dim), quantile and nanquantile with every
interpolation mode, and mode. Gradients follow eager's: median along a dim and mode pass the
gradient to the selected index, median of every element splits it evenly among the elements
equal to the median, quantile differentiates its sort, gather and lerp as eager's composite
does. Also the search- and histogram-based ops: searchsorted and bucketize (ai.ortmodule
SearchSorted), isin, histc and histogram (eager's bin rules, counts scatter-added).
"""

from __future__ import annotations

from typing import Any

import torch
from onnx import TensorProto

from ortmodule.capture.common import OWN_DOMAIN, ExportError
from ortmodule.capture.fx.builder import FALLBACK_HINT, Lowering, onnx_dtype
from ortmodule.capture.fx.ops.common import _axis, _result_dtype, aten
from ortmodule.capture.fx.registry import register


def _ascending(lw: Lowering, value: str, n: Any, axis: int) -> list[str]:
    """``value`` sorted ascending along ``axis`` (length ``n``), stable, NaN last; and the
    indices."""
    return lw.op("TopK", [value, lw.shape([n])], outputs=2, axis=axis, largest=0, sorted=1)


def _not_nan(lw: Lowering, value: str) -> str:
    """Whether each element is a number (x == x: any dtype, NaN the one exception)."""
    return lw.op("Equal", [value, value])


def _not_nan_count(lw: Lowering, value: str, axis: int) -> str:
    """The number of non-NaN elements along ``axis``, kept as a size-1 axis (int64)."""
    present = lw.op("Cast", [_not_nan(lw, value)], to=TensorProto.INT64)
    return lw.op("ReduceSum", [present, lw.ints([axis])], keepdims=1)


def _median_position(lw: Lowering, value: str, n: Any, axis: int, ignore_nan: bool) -> str:
    """The position in the ascending sort of the lower median along ``axis``, size-1 axis
    kept: of the non-NaN elements for nanmedian (0 when there are none: a NaN), else of all,
    unless there is a NaN, whose first one (after the non-NaN ones) is then the median."""
    count = _not_nan_count(lw, value, axis)
    one, two = lw.const(1, torch.int64), lw.const(2, torch.int64)
    if ignore_nan:
        return lw.op("Div", [lw.op("Sub", [lw.op("Max", [count, one]), one]), two])
    total = lw.tensor(n, torch.int64) if isinstance(n, str) else lw.const(int(n), torch.int64)
    middle = lw.op("Div", [lw.op("Sub", [total, one]), two])
    return lw.op("Where", [lw.op("Less", [count, total]), count, middle])


def _median_along(lw: Lowering, x: Any, dim: int, keepdim: bool, ignore_nan: bool
                  ) -> list[str]:
    value = lw.tensor(x)
    scalar = lw.rank(x) == 0
    if scalar:
        value = lw.op("Reshape", [value, lw.ints([1])])
        axis, n = 0, 1
    else:
        axis = _axis(int(dim), lw.rank(x))
        n = lw.dim(x, axis)
    values, indices = _ascending(lw, value, n, axis)
    where = _median_position(lw, value, n, axis, ignore_nan)
    out = [lw.op("GatherElements", [v, where], axis=axis) for v in (values, indices)]
    if scalar:
        return [lw.op("Reshape", [v, lw.ints([])]) for v in out]
    if not keepdim:
        out = [lw.op("Squeeze", [v, lw.ints([axis])]) for v in out]
    return out


@register(aten.median.dim)
def _median_dim(lw: Lowering, node: Any, x: Any, dim: int, keepdim: bool = False) -> Any:
    """The lower median ((n - 1) // 2-th of the sort) and its index, as eager; a slice with
    a NaN has its first NaN as the median."""
    return _median_along(lw, x, dim, keepdim, ignore_nan=False)


@register(aten.nanmedian.dim)
def _nanmedian_dim(lw: Lowering, node: Any, x: Any, dim: int, keepdim: bool = False) -> Any:
    return _median_along(lw, x, dim, keepdim, ignore_nan=True)


def _median_all(lw: Lowering, x: Any, ignore_nan: bool) -> str:
    """The median of every element; its gradient is split evenly among the elements equal
    to it (the NaN ones where it is NaN), as eager's evenly_distribute_backward."""
    flat = lw.op("Reshape", [lw.tensor(x), lw.ints([-1])])
    n = 1
    for a in range(lw.rank(x)):
        n = lw.scalar_op("Mul", n, lw.dim(x, a), lambda p, q: p * q)
    values, _ = _ascending(lw, flat, n, 0)
    where = _median_position(lw, flat, n, 0, ignore_nan)
    median = lw.op("StopGradient", [lw.op("GatherElements", [values, where], axis=0)],
                   domain=OWN_DOMAIN)
    both_nan = lw.op("And", [lw.op("Not", [_not_nan(lw, flat)]),
                             lw.op("Not", [_not_nan(lw, median)])])
    tie = lw.op("Or", [lw.op("Equal", [flat, median]), both_nan])
    dtype = lw.dtype_of(x)
    count = lw.op("ReduceSum", [lw.op("Cast", [tie], to=onnx_dtype(dtype))], keepdims=1)
    share = lw.op("Div", [lw.op("ReduceSum", [
        lw.op("Where", [tie, flat, lw.const(0.0, dtype)])], keepdims=1), count])
    # Forward: the median itself (the share is it up to rounding); backward: the share's.
    fixed = lw.op("StopGradient", [share], domain=OWN_DOMAIN)
    exact = lw.op("Add", [median, lw.op("Sub", [share, fixed])])
    out = lw.op("Where", [lw.op("Equal", [fixed, median]), share, exact])
    return lw.op("Reshape", [out, lw.ints([])])


@register(aten.median.default)
def _median(lw: Lowering, node: Any, x: Any) -> Any:
    return _median_all(lw, x, ignore_nan=False)


@register(aten.nanmedian.default)
def _nanmedian(lw: Lowering, node: Any, x: Any) -> Any:
    return _median_all(lw, x, ignore_nan=True)


# ---- quantile and nanquantile ----

_INTERPOLATIONS = ("linear", "lower", "higher", "midpoint", "nearest")


def _lerp(lw: Lowering, start: str, end: str, weight: str, dtype: torch.dtype) -> str:
    """torch.lerp's formula: start + w (end - start) for |w| < 0.5, else
    end - (end - start) (1 - w)."""
    diff = lw.op("Sub", [end, start])
    low = lw.op("Add", [start, lw.op("Mul", [weight, diff])])
    high = lw.op("Sub", [end, lw.op("Mul", [diff, lw.op("Sub", [lw.const(1.0, dtype),
                                                                  weight])])])
    small = lw.op("Less", [lw.op("Abs", [weight]), lw.const(0.5, dtype)])
    return lw.op("Where", [small, low, high])


def _quantile(lw: Lowering, node: Any, x: Any, q: Any, dim: Any, keepdim: bool,
              interpolation: str, ignore_nan: bool) -> Any:
    """Eager's quantile: the reduced dim sorted last, ranks q (n - 1) (of the non-NaN count
    for nanquantile; the last rank where quantile's slice has a NaN), rounded per the
    interpolation, the sorted values gathered there and lerped."""
    if interpolation not in _INTERPOLATIONS:
        raise ExportError(f"quantile interpolation {interpolation!r} has no fx translation; "
                          f"{FALLBACK_HINT}")
    dtype = lw.dtype_of(x)
    rank = lw.rank(x)
    value = lw.tensor(x)
    if dim is None or rank == 0:
        value = lw.op("Reshape", [value, lw.ints([-1])])
        n: Any = 1
        for a in range(rank):
            n = lw.scalar_op("Mul", n, lw.dim(x, a), lambda p, r: p * r)
        axis = None
    else:
        axis = _axis(int(dim), rank)
        n = lw.dim(x, axis)
        if axis != rank - 1:
            value = lw.op("Transpose", [value], perm=[d for d in range(rank) if d != axis]
                          + [axis])
    last = lw.rank(x) - 1 if axis is not None else 0
    values, _ = _ascending(lw, value, n, last)
    q_scalar = not isinstance(lw.value(q), str) or lw.rank(q) == 0
    q_value = lw.op("Reshape", [lw.tensor(q, dtype), lw.ints([-1])])
    total = lw.tensor(n, torch.int64) if isinstance(n, str) else lw.const(int(n), torch.int64)
    one = lw.const(1, torch.int64)
    if ignore_nan:
        count = _not_nan_count(lw, values, last)
        ranks = lw.op("Mul", [q_value, lw.op("Cast", [lw.op("Sub", [count, one])],
                                              to=onnx_dtype(dtype))])
        ranks = lw.op("Max", [ranks, lw.const(0.0, dtype)])
    else:
        last_index = lw.op("Cast", [lw.op("Sub", [total, one])], to=onnx_dtype(dtype))
        ranks = lw.op("Mul", [q_value, last_index])
        has_nan = lw.op("Less", [_not_nan_count(lw, values, last), total])
        ranks = lw.op("Where", [has_nan, last_index, ranks])
    if interpolation == "lower":
        ranks = lw.op("Floor", [ranks])
    elif interpolation == "higher":
        ranks = lw.op("Ceil", [ranks])
    elif interpolation == "nearest":
        ranks = lw.op("Round", [ranks])
    # The ranks broadcast to the sorted values' shape but for the last axis (q's length).
    lead = lw.op("Shape", [values], start=0, end=last) if last > 0 else None
    if lead is not None:
        q_len = lw.op("Shape", [ranks], start=-1)
        ranks = lw.op("Expand", [ranks, lw.op("Concat", [lead, q_len], axis=0)])
    below = lw.op("Cast", [ranks], to=TensorProto.INT64)
    out = lw.op("GatherElements", [values, below], axis=last)
    if interpolation in ("linear", "midpoint"):
        weight = (lw.op("Sub", [ranks, lw.op("Cast", [below], to=onnx_dtype(dtype))])
                  if interpolation == "linear" else
                  lw.op("Expand", [lw.const(0.5, dtype), lw.op("Shape", [ranks])]))
        above = lw.op("Cast", [lw.op("Ceil", [ranks])], to=TensorProto.INT64)
        out = _lerp(lw, out, lw.op("GatherElements", [values, above], axis=last), weight,
                    dtype)
    if q_scalar:
        out = lw.op("Squeeze", [out, lw.ints([last])])
    elif last > 0:  # q's axis first
        out = lw.op("Transpose", [out], perm=[last] + list(range(last)))
    if keepdim:
        if axis is None:
            ones = lw.ints(([] if q_scalar else [-1]) + [1] * rank)
            out = lw.op("Reshape", [out, ones])
        else:
            out = lw.op("Unsqueeze", [out, lw.ints([axis + (0 if q_scalar else 1)])])
    return out


@register(aten.quantile.default, aten.quantile.scalar)
def _quantile_op(lw: Lowering, node: Any, x: Any, q: Any, dim: Any = None,
                 keepdim: bool = False, interpolation: str = "linear") -> Any:
    return _quantile(lw, node, x, q, dim, keepdim, interpolation, ignore_nan=False)


@register(aten.nanquantile.default, aten.nanquantile.scalar)
def _nanquantile_op(lw: Lowering, node: Any, x: Any, q: Any, dim: Any = None,
                    keepdim: bool = False, interpolation: str = "linear") -> Any:
    return _quantile(lw, node, x, q, dim, keepdim, interpolation, ignore_nan=True)


# ---- searchsorted and bucketize: ai.ortmodule SearchSorted, a binary search per value ----

def _search(lw: Lowering, node: Any, seq: Any, values: Any, out_int32: bool, right: bool,
            sorter: Any = None) -> str:
    dtype = _result_dtype(lw, seq, values)
    rows = lw.tensor(seq, dtype)
    if sorter is not None:  # the rows in ascending order (GatherElements checks the indices)
        rows = lw.op("GatherElements", [rows, lw.tensor(sorter, torch.int64)],
                     axis=lw.rank(seq) - 1)
    out = lw.op("SearchSorted", [rows, lw.tensor(values, dtype)], domain=OWN_DOMAIN,
                right=int(bool(right)))
    return lw.op("Cast", [out], to=TensorProto.INT32) if out_int32 else out


@register(aten.searchsorted.Tensor, aten.searchsorted.Scalar)
def _searchsorted(lw: Lowering, node: Any, seq: Any, values: Any, out_int32: bool = False,
                  right: bool = False, side: Any = None, sorter: Any = None) -> Any:
    return _search(lw, node, seq, values, out_int32, bool(right) or side == "right", sorter)


@register(aten.bucketize.Tensor, aten.bucketize.Scalar)
def _bucketize(lw: Lowering, node: Any, values: Any, boundaries: Any, out_int32: bool = False,
               right: bool = False) -> Any:
    return _search(lw, node, boundaries, values, out_int32, right)


# ---- mode: the most frequent value, the smallest of equally frequent ones ----

@register(aten.mode.default)
def _mode(lw: Lowering, node: Any, x: Any, dim: int = -1, keepdim: bool = False) -> Any:
    """Counts of equal elements over an [..., n, n] comparison; the smallest value of the
    highest count, and its last index (eager's pick for rows its sort keeps stable); the
    value gathered there, so that the gradient goes to that index. (NaN, which equals
    nothing, has no defined mode: eager's sort leaves its place open.)"""
    value = lw.tensor(x)
    rank = lw.rank(x)
    scalar = rank == 0
    if scalar:
        value = lw.op("Reshape", [value, lw.ints([1])])
        rank, axis = 1, 0
    else:
        axis = _axis(int(dim), rank)
    dtype = lw.dtype_of(x)
    keys = lw.op("Cast", [value], to=TensorProto.INT64) if dtype == torch.bool else value
    key_dtype = torch.int64 if dtype == torch.bool else dtype
    rows = lw.op("Unsqueeze", [keys, lw.ints([axis + 1])])  # [..., n, 1, ...]
    cols = lw.op("Unsqueeze", [keys, lw.ints([axis])])  # [..., 1, n, ...]
    equal = lw.op("Cast", [lw.op("Equal", [rows, cols])], to=TensorProto.INT64)
    counts = lw.op("ReduceSum", [equal, lw.ints([axis + 1])], keepdims=0)
    top = lw.op("ReduceMax", [counts, lw.ints([axis])], keepdims=1)
    largest = (torch.finfo(key_dtype).max if key_dtype.is_floating_point else
               torch.iinfo(key_dtype).max)
    candidates = lw.op("Where", [lw.op("Equal", [counts, top]), keys,
                                 lw.const(largest, key_dtype)])
    smallest = lw.op("ReduceMin", [candidates, lw.ints([axis])], keepdims=1)
    hits = lw.op("Cast", [lw.op("Equal", [keys, smallest])], to=TensorProto.INT64)
    index = lw.op("ArgMax", [hits], axis=axis, keepdims=1, select_last_index=1)
    out = [lw.op("GatherElements", [value, index], axis=axis), index]
    if scalar:
        return [lw.op("Reshape", [v, lw.ints([])]) for v in out]
    if not keepdim:
        out = [lw.op("Squeeze", [v, lw.ints([axis])]) for v in out]
    return out


# ---- isin and histc ----

@register(aten.isin.Tensor_Tensor, aten.isin.Tensor_Scalar, aten.isin.Scalar_Tensor)
def _isin(lw: Lowering, node: Any, elements: Any, test: Any, assume_unique: bool = False,
          invert: bool = False) -> Any:
    """Whether each element equals any test element: an [..., m] comparison reduced."""
    dtype = _result_dtype(lw, elements, test)
    flat = lw.op("Reshape", [lw.tensor(test, dtype), lw.ints([-1])])
    value = lw.op("Unsqueeze", [lw.tensor(elements, dtype), lw.ints([-1])])
    hits = lw.op("Cast", [lw.op("Equal", [value, flat])], to=TensorProto.INT64)
    found = lw.op("Greater", [lw.op("ReduceSum", [hits, lw.ints([-1])], keepdims=0),
                              lw.const(0, torch.int64)])
    return lw.op("Not", [found]) if invert else found


def _bin_counts(lw: Lowering, pos: str, keep: str, weight: str | None, bins: int,
                dtype: torch.dtype) -> str:
    """hist[b] = the number (or weight) of the kept elements at bin position ``b`` (flat
    inputs): a scatter-add into bins + 1 slots, the last taking the elements left out."""
    slot = lw.op("Where", [keep, pos, lw.const(bins, torch.int64)])
    ones = weight if weight is not None else lw.op(
        "Expand", [lw.const(1.0, dtype), lw.op("Shape", [slot])])
    zeros = lw.op("Expand", [lw.const(0.0, dtype), lw.ints([bins + 1])])
    hist = lw.op("ScatterElements", [zeros, slot, ones], axis=0, reduction="add")
    return lw.op("Slice", [hist, lw.ints([0]), lw.ints([bins]), lw.ints([0])])


def _linear_bins(lw: Lowering, flat: str, low: str, high: str, bins: int,
                 dtype: torch.dtype) -> tuple[str, str]:
    """Eager's linear-interpolation bin of each element, (x - low) * bins / (high - low)
    truncated, the top edge in the last bin; and which elements lie in [low, high]."""
    scaled = lw.op("Div", [lw.op("Mul", [lw.op("Sub", [flat, low]), lw.const(float(bins), dtype)]),
                           lw.op("Sub", [high, low])])
    keep = lw.op("And", [lw.op("GreaterOrEqual", [flat, low]),
                         lw.op("LessOrEqual", [flat, high])])
    # (Out-of-range and NaN elements are dropped below; 0 keeps their cast defined.)
    pos = lw.op("Cast", [lw.op("Where", [keep, scaled, lw.const(0.0, dtype)])],
                to=TensorProto.INT64)
    pos = lw.op("Min", [pos, lw.const(bins - 1, torch.int64)])
    return pos, keep


def _data_range(lw: Lowering, flat: str, low: float, high: float, widen: float,
                dtype: torch.dtype, if_empty: tuple[float, float] | None = None
                ) -> tuple[str, str]:
    """The histogram's outer edges: [low, high] as given, the data's extremes where they are
    equal (as eager: a range of one value widens by ``widen`` either side; no data gives
    ``if_empty``, or [low, high] widened)."""
    if low != high:
        return lw.const(low, dtype), lw.const(high, dtype)
    empty = lw.op("Equal", [lw.op("Size", [flat]), lw.const(0, torch.int64)])
    given = lw.const(low, dtype)
    lo = lw.op("Where", [empty, given, lw.op("ReduceMin", [flat], keepdims=0)])
    hi = lw.op("Where", [empty, given, lw.op("ReduceMax", [flat], keepdims=0)])
    same = lw.op("Equal", [lo, hi])
    step = lw.const(widen, dtype)
    lo = lw.op("Where", [same, lw.op("Sub", [lo, step]), lo])
    hi = lw.op("Where", [same, lw.op("Add", [hi, step]), hi])
    if if_empty is not None:
        lo = lw.op("Where", [empty, lw.const(if_empty[0], dtype), lo])
        hi = lw.op("Where", [empty, lw.const(if_empty[1], dtype), hi])
    return lo, hi


@register(aten.histc.default)
def _histc(lw: Lowering, node: Any, x: Any, bins: int = 100, min: Any = 0, max: Any = 0
           ) -> Any:
    dtype = lw.dtype_of(x)
    flat = lw.op("Reshape", [lw.tensor(x), lw.ints([-1])])
    low, high = _data_range(lw, flat, float(min), float(max), 1.0, dtype)
    pos, keep = _linear_bins(lw, flat, low, high, int(bins), dtype)
    return _bin_counts(lw, pos, keep, None, int(bins), dtype)


# ---- histogram: counts (or weights) per bin and the bin edges ----

def _linspace(lw: Lowering, low: str, high: str, steps: int, dtype: torch.dtype) -> str:
    """Eager's linspace: low + step i over the first half, high - step (steps - 1 - i) over
    the second, step = (high - low) / (steps - 1), in ``dtype``."""
    index = lw.op("Cast", [lw.op("Range", [lw.const(0, torch.int64), lw.const(steps, torch.int64),
                                           lw.const(1, torch.int64)])], to=onnx_dtype(dtype))
    step = lw.op("Div", [lw.op("Sub", [high, low]), lw.const(float(steps - 1), dtype)])
    first = lw.op("Add", [low, lw.op("Mul", [step, index])])
    back = lw.op("Sub", [lw.const(float(steps - 1), dtype), index])
    second = lw.op("Sub", [high, lw.op("Mul", [step, back])])
    half = lw.op("Less", [index, lw.const(float(steps // 2), dtype)])
    return lw.op("Where", [half, first, second])


def _local_search(lw: Lowering, flat: str, edges: str, pos: str, count: int) -> str:
    """Eager's correction of an interpolated bin: the upper bound of each element among the
    edges pos - 1 .. pos + 1 (of ``count``), minus one."""
    base = lw.op("Max", [lw.op("Sub", [pos, lw.const(1, torch.int64)]),
                         lw.const(0, torch.int64)])
    end = lw.op("Min", [lw.op("Add", [pos, lw.const(2, torch.int64)]),
                        lw.const(count, torch.int64)])
    found = lw.op("Sub", [base, lw.const(1, torch.int64)])
    for k in range(3):
        at = lw.op("Add", [base, lw.const(k, torch.int64)])
        edge = lw.op("Gather", [edges, lw.op("Min", [at, lw.const(count - 1, torch.int64)])],
                     axis=0)
        below = lw.op("And", [lw.op("Less", [at, end]), lw.op("LessOrEqual", [edge, flat])])
        found = lw.op("Add", [found, lw.op("Cast", [below], to=TensorProto.INT64)])
    return found


def _histogram_out(lw: Lowering, flat: str, edges: str, pos: str, keep: str, weight: Any,
                   density: bool, bins: int, dtype: torch.dtype) -> list[str]:
    last = lw.const(bins - 1, torch.int64)
    pos = lw.op("Where", [lw.op("Greater", [pos, last]), last, pos])  # the top edge's bin
    w = None if weight is None else lw.op("Reshape", [lw.tensor(weight, dtype), lw.ints([-1])])
    hist = _bin_counts(lw, pos, keep, w, bins, dtype)
    if density:
        widths = lw.op("Sub", [lw.op("Slice", [edges, lw.ints([1]), lw.ints([bins + 1])]),
                               lw.op("Slice", [edges, lw.ints([0]), lw.ints([bins])])])
        hist = lw.op("Div", [lw.op("Div", [hist, lw.op("ReduceSum", [hist], keepdims=0)]),
                             widths])
    # No gradient, as eager's histogram has none.
    return [lw.op("StopGradient", [v], domain=OWN_DOMAIN) for v in (hist, edges)]


@register(aten.histogram.bin_ct)
def _histogram_bins(lw: Lowering, node: Any, x: Any, bins: int = 100, range: Any = None,
                    weight: Any = None, density: bool = False) -> Any:
    dtype = lw.dtype_of(x)
    bins = int(bins)
    flat = lw.op("Reshape", [lw.tensor(x), lw.ints([-1])])
    low_v, high_v = (0.0, 0.0) if range is None else (float(range[0]), float(range[1]))
    if range is not None and low_v == high_v:
        low, high = lw.const(low_v - 0.5, dtype), lw.const(high_v + 0.5, dtype)
    else:
        low, high = _data_range(lw, flat, low_v, high_v, 0.5, dtype, if_empty=(0.0, 1.0))
    edges = _linspace(lw, low, high, bins + 1, dtype)
    low = lw.op("Gather", [edges, lw.const(0, torch.int64)], axis=0)
    high = lw.op("Gather", [edges, lw.const(bins, torch.int64)], axis=0)
    pos, keep = _linear_bins(lw, flat, low, high, bins, dtype)
    pos = _local_search(lw, flat, edges, pos, bins + 1)
    return _histogram_out(lw, flat, edges, pos, keep, weight, density, bins, dtype)


@register(aten.histogram.bins_tensor)
def _histogram_edges(lw: Lowering, node: Any, x: Any, bins: Any, weight: Any = None,
                     density: bool = False) -> Any:
    dtype = lw.dtype_of(x)
    count = lw.meta(bins).shape[0]
    if not isinstance(count, int):
        raise ExportError(f"histogram with a symbolic number of bin edges has no fx "
                          f"translation; {FALLBACK_HINT}")
    flat = lw.op("Reshape", [lw.tensor(x), lw.ints([-1])])
    edges = lw.op("Identity", [lw.tensor(bins, dtype)])
    low = lw.op("Gather", [edges, lw.const(0, torch.int64)], axis=0)
    high = lw.op("Gather", [edges, lw.const(count - 1, torch.int64)], axis=0)
    keep = lw.op("And", [lw.op("GreaterOrEqual", [flat, low]),
                         lw.op("LessOrEqual", [flat, high])])
    above = lw.op("SearchSorted", [edges, flat], domain=OWN_DOMAIN, right=1)
    pos = lw.op("Sub", [above, lw.const(1, torch.int64)])
    pos = lw.op("Max", [pos, lw.const(0, torch.int64)])  # (dropped where below the range)
    return _histogram_out(lw, flat, edges, pos, keep, weight, density, count - 1, dtype)
