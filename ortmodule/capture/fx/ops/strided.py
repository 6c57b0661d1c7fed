"""Strided views and the writes into them: as_strided (a Gather at flat indices computed from
sizes and strides over the contiguous input, whose gradient scatter-adds), as_strided_scatter,
unfold (a Gather of windows), slice_scatter and diagonal_scatter (ScatterElements at the
view's positions), the uninitialised factories (empty_like, new_empty, new_empty_strided: zeros, since
their values are unspecified) and resize_ / resize_as_ (the storage's first elements).
"""

from __future__ import annotations

from typing import Any

import torch

from ortmodule.capture.common import OWN_DOMAIN
from ortmodule.capture.fx.builder import FALLBACK_HINT, Lowering, UnsupportedOp
from ortmodule.capture.fx.ops.common import _axis, _out, _scalar_tensor, aten
from ortmodule.capture.fx.ops.inplace import _rebind
from ortmodule.capture.fx.registry import register


def _static(values: Any, what: str) -> list[int]:
    out = []
    for v in values:
        if isinstance(v, torch.SymInt) and v.node.expr.free_symbols:
            raise UnsupportedOp(f"{what} over symbolic sizes has no fx translation; "
                                f"{FALLBACK_HINT}")
        out.append(int(v))
    return out


def _flat_positions(lw: Lowering, x: Any, size: Any, stride: Any, offset: Any,
                    what: str) -> torch.Tensor:
    """The elements of ``x``'s storage that the strided view reads, as indices into ``x``
    flattened (``x`` must be laid out contiguously, as the graph's values are)."""
    val = lw.meta(x)
    sizes = _static(size, what)
    strides = _static(stride, what)
    shape = _static(val.shape, what)
    if not val.is_contiguous():
        raise UnsupportedOp(f"{what} of a tensor that is not contiguous reads its storage "
                            f"in an order the graph does not keep; {FALLBACK_HINT}")
    base = int(val.storage_offset())
    start = base if offset is None else int(offset)
    positions = torch.full(sizes, start - base, dtype=torch.int64)
    for axis, (n, s) in enumerate(zip(sizes, strides)):
        along = [1] * len(sizes)
        along[axis] = n
        positions = positions + (torch.arange(n, dtype=torch.int64) * s).reshape(along)
    numel = 1
    for n in shape:
        numel *= n
    if positions.numel() and (int(positions.min()) < 0 or int(positions.max()) >= numel):
        raise UnsupportedOp(f"{what} of size {sizes}, stride {strides} and offset {start} "
                            f"reads outside the input's {numel} elements; {FALLBACK_HINT}")
    return positions


@register(aten.as_strided.default, aten.as_strided_copy.default)
def _as_strided(lw: Lowering, node: Any, x: Any, size: Any, stride: Any,
                storage_offset: Any = None) -> str:
    positions = _flat_positions(lw, x, size, stride, storage_offset, "as_strided")
    flat = lw.op("Reshape", [lw.tensor(x), lw.ints([-1])])
    return lw.op("Gather", [flat, lw.const(positions.tolist(), torch.int64)], axis=0)


@register(aten.as_strided_scatter.default)
def _as_strided_scatter(lw: Lowering, node: Any, x: Any, src: Any, size: Any, stride: Any,
                        storage_offset: Any = None) -> str:
    """``src`` written at the view's flat positions (ScatterElements); the gradient eager's
    (AsStridedScatterTorch): the input's is the output's at the written positions."""
    dtype = _out(node).dtype
    positions = _flat_positions(lw, x, size, stride, storage_offset, "as_strided_scatter")
    data = lw.tensor(x, dtype)
    flat = lw.op("Reshape", [data, lw.ints([-1])])
    updates = lw.op("Reshape", [lw.tensor(src, dtype), lw.ints([-1])])
    index = lw.const(positions.reshape(-1).tolist(), torch.int64)
    if dtype.is_floating_point:
        written = lw.op("ScatterElements", [lw.op("StopGradient", [flat], domain=OWN_DOMAIN),
                                            index,
                                            lw.op("StopGradient", [updates], domain=OWN_DOMAIN)],
                        axis=0)
        y = lw.op("AsStridedScatterTorch", [written, flat, index, updates], domain=OWN_DOMAIN)
    else:
        y = lw.op("ScatterElements", [flat, index, updates], axis=0)
    return lw.op("Reshape", [y, lw.op("Shape", [data])])


@register(aten.unfold.default, aten.unfold_copy.default)
def _unfold(lw: Lowering, node: Any, x: Any, dim: int, size: int, step: int) -> str:
    """Windows of ``size`` every ``step`` along ``dim``: a Gather of a [windows, size] index
    there, the window's axis moved last."""
    val = lw.meta(x)
    value = lw.tensor(x)
    rank = val.dim()
    if rank == 0:
        return lw.op("Reshape", [value, lw.ints([1])])
    axis = _axis(dim, rank)
    (length,) = _static([val.shape[axis]], "unfold")
    windows = (length - size) // step + 1
    index = (torch.arange(windows).reshape(-1, 1) * step + torch.arange(size)).tolist()
    taken = lw.op("Gather", [value, lw.const(index, torch.int64)], axis=axis)
    perm = list(range(axis + 1)) + list(range(axis + 2, rank + 1)) + [axis + 1]
    return lw.op("Transpose", [taken], perm=perm)


def _along(lw: Lowering, positions: list[int], axis: int, rank: int, like: str) -> str:
    """``positions`` along ``axis``, expanded to the shape of ``like``."""
    along = [1] * rank
    along[axis] = len(positions)
    index = lw.op("Reshape", [lw.ints(positions), lw.ints(along)])
    return lw.op("Expand", [index, lw.op("Shape", [like])])


@register(aten.slice_scatter.default)
def _slice_scatter(lw: Lowering, node: Any, x: Any, src: Any, dim: int = 0,
                   start: Any = None, end: Any = None, step: int = 1) -> str:
    val = lw.meta(x)
    dtype = _out(node).dtype
    axis = _axis(dim, val.dim())
    (length,) = _static([val.shape[axis]], "slice_scatter")
    bounds = _static([b for b in (start, end) if b is not None], "slice_scatter")
    first = bounds.pop(0) if start is not None else None
    last = bounds.pop(0) if end is not None else None
    positions = list(range(length))[slice(first, last, int(step))]
    data = lw.tensor(x, dtype)
    updates = lw.tensor(src, dtype)
    if not positions:
        return lw.op("Identity", [data])
    index = _along(lw, positions, axis, val.dim(), updates)
    return lw.op("ScatterElements", [data, index, updates], axis=axis)


@register(aten.diagonal_scatter.default)
def _diagonal_scatter(lw: Lowering, node: Any, x: Any, src: Any, offset: int = 0,
                      dim1: int = 0, dim2: int = 1) -> str:
    """``src`` written on the diagonal: the two axes moved last and flattened, the diagonal
    every (columns + 1)-th element from its first, as ``diagonal`` reads it."""
    val = lw.meta(x)
    dtype = _out(node).dtype
    rank = val.dim()
    d1, d2 = _axis(dim1, rank), _axis(dim2, rank)
    rows, cols = _static([val.shape[d1], val.shape[d2]], "diagonal_scatter")
    rest = [a for a in range(rank) if a not in (d1, d2)]
    perm = [*rest, d1, d2]
    data = lw.tensor(x, dtype)
    moved = lw.op("Transpose", [data], perm=perm)
    length = max(0, min(rows, cols - offset) if offset >= 0 else min(rows + offset, cols))
    if length == 0:
        return lw.op("Identity", [data])
    first = offset if offset >= 0 else -offset * cols
    outer = [lw.dim(x, a) for a in rest]
    flat = lw.op("Reshape", [moved, lw.shape([*outer, rows * cols])])
    updates = lw.tensor(src, dtype)
    index = _along(lw, [first + k * (cols + 1) for k in range(length)], len(rest),
                   len(rest) + 1, updates)
    written = lw.op("ScatterElements", [flat, index, updates], axis=len(rest))
    unflat = lw.op("Reshape", [written, lw.op("Shape", [moved])])
    return lw.op("Transpose", [unflat], perm=[perm.index(a) for a in range(rank)])


# ---- uninitialised tensors: any values will do, zeros are cheapest to reason about ----

def _zeros_of(lw: Lowering, node: Any, shape: str) -> str:
    return lw.op("ConstantOfShape", [shape], value=_scalar_tensor(0, _out(node).dtype))


@register(aten.empty_like.default)
def _empty_like(lw: Lowering, node: Any, x: Any, *args: Any, **kwargs: Any) -> str:
    return _zeros_of(lw, node, lw.op("Shape", [lw.tensor(x)]))


@register(aten.new_empty.default, aten.new_empty_strided.default)
def _new_empty(lw: Lowering, node: Any, x: Any, size: Any, *args: Any, **kwargs: Any) -> str:
    return _zeros_of(lw, node, lw.shape(size))


@register(aten.empty.memory_format, aten.empty_strided.default, aten.empty_permuted.default)
def _empty(lw: Lowering, node: Any, size: Any, *args: Any, **kwargs: Any) -> str:
    return _zeros_of(lw, node, lw.shape(size))


# ---- resize_: the storage's first elements in the new shape ----

def _resized(lw: Lowering, node: Any, x: Any, what: str) -> str:
    """``x``'s elements in storage order, cut or extended (with zeros: eager leaves the new
    elements uninitialised) to the output's size, in its shape."""
    val = lw.meta(x)
    if not val.is_contiguous():
        raise UnsupportedOp(f"{what} of a tensor that is not contiguous keeps its storage's "
                            f"order, which the graph does not; {FALLBACK_HINT}")
    sizes = _static(_out(node).shape, what)
    (have,) = _static([val.numel()], what)
    want = 1
    for n in sizes:
        want *= n
    flat = lw.op("Reshape", [lw.tensor(x), lw.ints([-1])])
    if want < have:
        flat = lw.op("Slice", [flat, lw.ints([0]), lw.ints([want])])
    elif want > have:
        flat = lw.op("Pad", [flat, lw.ints([0, want - have])])
    return lw.op("Reshape", [flat, lw.ints(sizes)])


@register(aten.resize.default)
def _resize(lw: Lowering, node: Any, x: Any, size: Any, *args: Any, **kwargs: Any) -> str:
    return _resized(lw, node, x, "resize_")


@register(aten.resize_as.default)
def _resize_as(lw: Lowering, node: Any, x: Any, template: Any, *args: Any,
               **kwargs: Any) -> str:
    return _resized(lw, node, x, "resize_as_")


@register(aten.resize_.default, aten.resize_as_.default)
def _resize_in_place(lw: Lowering, node: Any, x: Any, *rest: Any, **kwargs: Any) -> str:
    what = "resize_" if node.target is aten.resize_.default else "resize_as_"
    out = _resized(lw, node, x, what)
    _rebind(lw, x, out)
    return out
