"""Writes at indices: scatter, scatter_add, scatter_reduce, index_add/copy/fill/reduce,
index_put and put, as ONNX ScatterElements / ScatterND (reductions add, max, min), with
their in-place forms.

Eager's semantics the translations keep: ``src`` may be larger than ``index`` (only the
part of ``index``'s shape is read); ``scatter_reduce``'s ``include_self=False`` replaces the
written elements by the reduction of the updates alone; ``mean`` divides by the number of
values reduced (at least 1); amax/amin share the gradient evenly among equal values (the
ScatterElements gradient rule); ``prod``, and amax/amin without ``include_self`` (whose
eager gradient also counts the replaced element), carry eager's gradient through
ScatterReduceTorch.
"""

from __future__ import annotations

from typing import Any

import torch

from ortmodule.capture.common import OWN_DOMAIN
from ortmodule.capture.fx.builder import FALLBACK_HINT, Lowering, UnsupportedOp
from ortmodule.capture.fx.ops.common import _axis, _out, aten
from ortmodule.capture.fx.ops.inplace import _rebind
from ortmodule.capture.fx.registry import TABLE, register


def _as_1d(lw: Lowering, v: str, was_0d: bool) -> str:
    return lw.op("Reshape", [v, lw.ints([1])]) if was_0d else v


def _scatter(lw: Lowering, x: str, axis: int, index: str, updates: str,
             reduction: str = "none") -> str:
    return lw.op("ScatterElements", [x, index, updates], axis=axis,
                 reduction=None if reduction == "none" else reduction)


def _updates_like_index(lw: Lowering, src: Any, index: Any, dtype: torch.dtype) -> str:
    """``src`` cut to ``index``'s shape (eager reads only that part of a larger ``src``)."""
    value = lw.tensor(src, dtype)
    src_shape = list(lw.meta(src).shape) if isinstance(lw.meta(src), torch.Tensor) else []
    index_shape = list(lw.meta(index).shape)
    if src_shape == index_shape:
        return value
    if len(src_shape) != len(index_shape):
        raise UnsupportedOp(f"scatter with src of shape {src_shape} and index of shape "
                          f"{index_shape} (ranks differ); {FALLBACK_HINT}")
    rank = len(index_shape)
    return lw.op("Slice", [value, lw.ints([0] * rank), lw.op("Shape", [lw.tensor(index)]),
                           lw.ints(list(range(rank)))])


def _reduce_into(lw: Lowering, data: str, axis: int, idx: str, upd: str, dtype: torch.dtype,
                 reduce: str, include_self: bool) -> str:
    """``data`` with ``upd`` reduced into it along ``axis`` at ``idx`` (same shapes)."""
    if reduce in ("sum", "mean"):
        if not include_self:
            # The written elements start from zero.
            zeros = lw.op("Expand", [lw.const(0, dtype), lw.op("Shape", [idx])])
            data_from = _scatter(lw, data, axis, idx, zeros)
        else:
            data_from = data
        y = _scatter(lw, data_from, axis, idx, upd, "add")
        if reduce == "sum":
            return y
        if not dtype.is_floating_point:
            raise UnsupportedOp(f"a mean scatter_reduce of {dtype} (eager floors the "
                              f"quotient); {FALLBACK_HINT}")
        return lw.op("Div", [y, _count(lw, data, axis, idx, dtype, include_self)])
    if reduce == "amax" or reduce == "amin":
        if include_self:
            return _scatter(lw, data, axis, idx, upd, "max" if reduce == "amax" else "min")
        return _reduce_torch(lw, data, axis, idx, upd, dtype, reduce, include_self)
    if reduce == "prod":
        return _reduce_torch(lw, data, axis, idx, upd, dtype, reduce, include_self)
    raise UnsupportedOp(f"the reduction {reduce!r} of a scatter has no fx translation "
                      f"(sum, prod, mean, amax, amin have); {FALLBACK_HINT}")


def _identity(reduce: str, dtype: torch.dtype) -> Any:
    if reduce == "prod":
        return True if dtype == torch.bool else 1
    if dtype == torch.bool:
        return reduce == "amin"
    if dtype.is_floating_point:
        return float("-inf") if reduce == "amax" else float("inf")
    info = torch.iinfo(dtype)
    return info.min if reduce == "amax" else info.max


def _reduce_torch(lw: Lowering, data: str, axis: int, idx: str, upd: str, dtype: torch.dtype,
                  reduce: str, include_self: bool) -> str:
    """prod, amax or amin: ScatterElements with mul/max/min (the written elements start from
    the reduction's identity without ``include_self``), its gradient eager's
    (ScatterReduceTorch): a product's without dividing by zero, an extremum's shared evenly
    among the values equal to it."""
    floating = dtype.is_floating_point
    base, values = ((lw.op("StopGradient", [data], domain=OWN_DOMAIN),
                     lw.op("StopGradient", [upd], domain=OWN_DOMAIN)) if floating
                    else (data, upd))
    if not include_self:
        start = lw.op("Expand", [lw.const(_identity(reduce, dtype), dtype),
                                 lw.op("Shape", [idx])])
        base = _scatter(lw, base, axis, idx, start)
    onnx_reduce = {"prod": "mul", "amax": "max", "amin": "min"}[reduce]
    y = _scatter(lw, base, axis, idx, values, onnx_reduce)
    if not floating:
        return y
    return lw.op("ScatterReduceTorch", [y, data, idx, upd], domain=OWN_DOMAIN, axis=axis,
                 reduction=reduce, include_self=int(include_self))


def _count(lw: Lowering, data: str, axis: int, index: str, dtype: torch.dtype,
           include_self: bool) -> str:
    """How many values a mean reduces into each element: the updates written there, plus
    the element itself (``include_self``); at least 1."""
    shape = lw.op("Shape", [data])
    base = lw.op("Expand", [lw.const(1 if include_self else 0, dtype), shape])
    ones = lw.op("Expand", [lw.const(1, dtype), lw.op("Shape", [index])])
    count = _scatter(lw, base, axis, index, ones, "add")
    return count if include_self else lw.op("Max", [count, lw.const(1, dtype)])


def _elementwise_scatter(lw: Lowering, node: Any, x: Any, dim: int, index: Any,
                         updates: Any, reduce: str | None, include_self: bool = True) -> str:
    """A scatter along ``dim`` at ``index`` (of ``x``'s rank); ``updates`` a tensor of at
    least ``index``'s extent, or a number. ``reduce``: None replaces."""
    out = _out(node)
    dtype = out.dtype
    was_0d = out.dim() == 0
    axis = 0 if was_0d else _axis(dim, out.dim())
    data = _as_1d(lw, lw.tensor(x, dtype), was_0d)
    idx = _as_1d(lw, lw.tensor(index, torch.int64), lw.rank(index) == 0)
    if isinstance(lw.meta(updates), torch.Tensor) and lw.rank(updates) > 0:
        upd = _updates_like_index(lw, updates, index, dtype)
    else:
        upd = lw.op("Expand", [lw.tensor(updates, dtype), lw.op("Shape", [idx])])
    if reduce is None:
        y = _scatter(lw, data, axis, idx, upd)
    else:
        y = _reduce_into(lw, data, axis, idx, upd, dtype, reduce, include_self)
    return lw.op("Reshape", [y, lw.ints([])]) if was_0d else y


@register(aten.scatter.src, aten.scatter.value)
def _scatter_op(lw: Lowering, node: Any, x: Any, dim: int, index: Any, src: Any) -> str:
    return _elementwise_scatter(lw, node, x, dim, index, src, None)


@register(aten.scatter.reduce, aten.scatter.value_reduce)
def _scatter_reduce_legacy(lw: Lowering, node: Any, x: Any, dim: int, index: Any, src: Any,
                           reduce: str) -> str:
    if reduce != "add":
        raise UnsupportedOp(f"scatter with reduce={reduce!r} has no gradient in eager and no "
                          f"fx translation; {FALLBACK_HINT}")
    return _elementwise_scatter(lw, node, x, dim, index, src, "sum")


@register(aten.scatter_add.default)
def _scatter_add(lw: Lowering, node: Any, x: Any, dim: int, index: Any, src: Any) -> str:
    return _elementwise_scatter(lw, node, x, dim, index, src, "sum")


@register(aten.scatter_reduce.two)
def _scatter_reduce(lw: Lowering, node: Any, x: Any, dim: int, index: Any, src: Any,
                    reduce: str, include_self: bool = True) -> str:
    return _elementwise_scatter(lw, node, x, dim, index, src, reduce, include_self)


# ---- index_*: one index per slice along dim ----

def _along(lw: Lowering, index: Any, axis: int, rank: int, shape: str) -> str:
    """The 1-D ``index`` of the slices along ``axis``, as element indices of ``shape``."""
    idx = lw.tensor(index, torch.int64)
    along = [1] * rank
    along[axis] = -1
    return lw.op("Expand", [lw.op("Reshape", [idx, lw.ints(along)]), shape])


def _index_write(lw: Lowering, node: Any, x: Any, dim: int, index: Any, source: Any,
                 reduce: str | None, include_self: bool = True, alpha: Any = 1,
                 fill: bool = False) -> str:
    """Writes ``source``'s slices along ``dim`` at the 1-D ``index`` (or, with ``fill``, the
    number or 0-d tensor ``source`` over each selected slice)."""
    out = _out(node)
    dtype = out.dtype
    was_0d = out.dim() == 0
    rank = max(out.dim(), 1)
    axis = 0 if was_0d else _axis(dim, out.dim())
    data = _as_1d(lw, lw.tensor(x, dtype), was_0d)
    if not fill:
        upd = _as_1d(lw, lw.tensor(source, dtype), lw.rank(source) == 0)
        shape = lw.op("Shape", [upd])
    else:
        sizes = [1] if was_0d else [lw.dim(x, k) for k in range(rank)]
        sizes[axis] = 1 if lw.rank(index) == 0 else lw.dim(index, 0)
        shape = lw.shape(sizes)
        # The filled positions as a mask: a repeated index fills once, and the value's
        # gradient sums each filled element once, as eager's.
        upd = lw.op("Expand", [lw.const(True, torch.bool), shape])
        falses = lw.op("Expand", [lw.const(False, torch.bool), lw.op("Shape", [data])])
        mask = _scatter(lw, falses, axis, _along(lw, index, axis, rank, shape), upd)
        y = lw.op("Where", [mask, lw.tensor(source, dtype), data])
        return lw.op("Reshape", [y, lw.ints([])]) if was_0d else y
    if alpha != 1:
        upd = lw.op("Mul", [upd, lw.tensor(alpha, dtype)])
    idx = _along(lw, index, axis, rank, shape)
    if reduce is None:
        y = _scatter(lw, data, axis, idx, upd)
    else:
        y = _reduce_into(lw, data, axis, idx, upd, dtype, reduce, include_self)
    return lw.op("Reshape", [y, lw.ints([])]) if was_0d else y


@register(aten.index_add.default)
def _index_add(lw: Lowering, node: Any, x: Any, dim: int, index: Any, source: Any,
               alpha: Any = 1) -> str:
    return _index_write(lw, node, x, dim, index, source, "sum", alpha=alpha)


@register(aten.index_copy.default)
def _index_copy(lw: Lowering, node: Any, x: Any, dim: int, index: Any, source: Any) -> str:
    return _index_write(lw, node, x, dim, index, source, None)


@register(aten.index_fill.int_Scalar, aten.index_fill.int_Tensor)
def _index_fill(lw: Lowering, node: Any, x: Any, dim: int, index: Any, value: Any) -> str:
    return _index_write(lw, node, x, dim, index, value, None, fill=True)


@register(aten.index_reduce.default)
def _index_reduce(lw: Lowering, node: Any, x: Any, dim: int, index: Any, source: Any,
                  reduce: str, include_self: bool = True) -> str:
    return _index_write(lw, node, x, dim, index, source, reduce, include_self)


# ---- index_put (x[indices] = values) and put ----

@register(aten.index_put.default, aten._unsafe_index_put.default)
def _index_put(lw: Lowering, node: Any, x: Any, indices: Any, values: Any,
               accumulate: bool = False) -> str:
    """Integer index tensors become one ScatterND over their broadcast shape, the indexed
    dimensions moved first; one boolean mask with a single value is a Where."""
    out = _out(node)
    dtype = out.dtype
    rank = out.dim()
    positions = [k for k, i in enumerate(indices) if i is not None]
    value = lw.tensor(values, dtype)
    if any(lw.dtype_of(indices[k]) in (torch.bool, torch.uint8) for k in positions):
        return _masked_put(lw, x, indices, positions, value, values, accumulate, dtype, rank)
    index_shapes = [list(lw.meta(indices[k]).shape) for k in positions]
    index_rank = len(torch.broadcast_shapes(*[torch.Size(s) for s in index_shapes])) \
        if all(isinstance(d, int) for s in index_shapes for d in s) else \
        max(len(s) for s in index_shapes)
    idx = [lw.tensor(indices[k], torch.int64) for k in positions]
    total = idx[0]
    for v in idx[1:]:
        total = lw.op("Add", [total, v])
    index_shape = lw.op("Shape", [total])
    stacked = lw.op("Concat", [lw.op("Unsqueeze", [lw.op("Expand", [v, index_shape]),
                                                   lw.ints([-1])]) for v in idx], axis=-1)
    data = lw.tensor(x, dtype)
    rest = [d for d in range(rank) if d not in positions]
    perm = positions + rest
    first = positions[0]
    adjacent = positions == list(range(first, first + len(positions)))
    # Eager's layout of the values: the index shape where the indexed dimensions were when
    # they are adjacent, else first; the other dimensions in order.
    pieces = []
    lead = first if adjacent else 0
    if lead:
        pieces.append(lw.op("Shape", [data], start=0, end=lead))
    pieces.append(index_shape)
    tail = [lw.op("Reshape", [_size(lw, lw.dim(x, d)), lw.ints([1])]) for d in rest[lead:]]
    pieces += tail
    value = lw.op("Expand", [value, lw.op("Concat", pieces, axis=0)])
    if lead:
        value = lw.op("Transpose", [value], perm=list(range(lead, lead + index_rank))
                      + list(range(lead)) + list(range(lead + index_rank,
                                                       index_rank + len(rest))))
    moved = perm != list(range(rank))
    if moved:
        data = lw.op("Transpose", [data], perm=perm)
    y = lw.op("ScatterND", [data, stacked, value],
              reduction="add" if accumulate else None)
    if moved:
        y = lw.op("Transpose", [y], perm=[perm.index(d) for d in range(rank)])
    return y


def _size(lw: Lowering, v: Any) -> str:
    return v if isinstance(v, str) else lw.const(int(v), torch.int64)


def _masked_put(lw: Lowering, x: Any, indices: Any, positions: list[int], value: str,
                values: Any, accumulate: bool, dtype: torch.dtype, rank: int) -> str:
    """``x[mask] = v`` (or ``+=``) where ``v`` does not depend on how many elements the mask
    selects: one element, or a shape that broadcasts over the dimensions after the mask's."""
    values_meta = lw.meta(values)
    at = positions[0] if positions else 0
    trailing = rank - at - (lw.rank(indices[at]) if positions else 0)
    values_rank = values_meta.dim() if isinstance(values_meta, torch.Tensor) else 0
    single = not isinstance(values_meta, torch.Tensor) or values_meta.numel() == 1
    if len(positions) != 1 or not (single or values_rank <= trailing):
        shape = list(values_meta.shape) if isinstance(values_meta, torch.Tensor) else []
        raise UnsupportedOp(f"index_put with {len(positions)} index tensors, a boolean mask "
                          f"among them, and values of shape {shape} has a data-dependent "
                          f"shape; {FALLBACK_HINT}")
    mask = lw.tensor(indices[at], torch.bool)
    if trailing:
        mask = lw.op("Reshape", [mask, lw.op("Concat", [lw.op("Shape", [mask]),
                                                        lw.ints([1] * trailing)], axis=0)])
    if single:
        value = lw.op("Reshape", [value, lw.ints([])])
    data = lw.tensor(x, dtype)
    if accumulate:
        value = lw.op("Add", [data, value])
    return lw.op("Where", [mask, value, data])


@register(aten.put.default)
def _put(lw: Lowering, node: Any, x: Any, index: Any, source: Any,
         accumulate: bool = False) -> str:
    dtype = _out(node).dtype
    data = lw.tensor(x, dtype)
    flat = [lw.op("Reshape", [v, lw.ints([-1])]) for v in
            (data, lw.tensor(index, torch.int64), lw.tensor(source, dtype))]
    y = _scatter(lw, flat[0], 0, flat[1], flat[2], "add" if accumulate else "none")
    return lw.op("Reshape", [y, lw.op("Shape", [data])])


# ---- in-place forms: the functional value rebinds the tensor written ----

_IN_PLACE = {
    aten.scatter_.src: aten.scatter.src, aten.scatter_.value: aten.scatter.value,
    aten.scatter_.reduce: aten.scatter.reduce,
    aten.scatter_.value_reduce: aten.scatter.value_reduce,
    aten.scatter_add_.default: aten.scatter_add.default,
    aten.scatter_reduce_.two: aten.scatter_reduce.two,
    aten.index_add_.default: aten.index_add.default,
    aten.index_copy_.default: aten.index_copy.default,
    aten.index_fill_.int_Scalar: aten.index_fill.int_Scalar,
    aten.index_fill_.int_Tensor: aten.index_fill.int_Tensor,
    aten.index_reduce_.default: aten.index_reduce.default,
    aten.index_put_.default: aten.index_put.default,
    aten.put_.default: aten.put.default,
}


@register(*_IN_PLACE)
def _in_place(lw: Lowering, node: Any, x: Any, *rest: Any) -> str:
    out = TABLE[_IN_PLACE[node.target]](lw, node, x, *rest)
    _rebind(lw, x, out)
    return out
