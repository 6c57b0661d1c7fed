"""Ops whose output size depends on the input's values: nonzero, argwhere, masked_select,
boolean-mask indexing, unique, unique_consecutive; and masked_scatter, whose size is fixed
but which takes source elements in mask order. torch.export gives such an output an unbacked
size (u0); the engine's NonZero provides its output from the kernel (the shape rule cannot
know it), and the size is bound to that output here, so later ops that need it read it from
the tensor (Shape)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from onnx import TensorProto

from ortmodule.capture.common import OWN_DOMAIN
from ortmodule.capture.fx.builder import FALLBACK_HINT, Lowering, UnsupportedOp
from ortmodule.capture.fx.ops.common import _axis, _out, aten
from ortmodule.capture.fx.registry import register


def _bind_sizes(lw: Lowering, node: Any, value: str, output: int | None = None) -> str:
    """Lets the unbacked sizes of ``node``'s output (``output`` of several) be read from
    ``value``."""
    lw.register_input(value, _out(node) if output is None else _out(node)[output])
    return value


def _coordinates(lw: Lowering, x: Any) -> str:
    """[count, rank] int64: the coordinates of the non-zero elements in row-major order."""
    value = lw.tensor(x)
    if lw.rank(x) == 0:
        value = lw.op("Reshape", [value, lw.ints([1])])
    found = lw.op("NonZero", [value])
    out = lw.op("Transpose", [found], perm=[1, 0])
    if lw.rank(x) == 0:  # a 0-d tensor's coordinates have no entries: [count, 0]
        out = lw.op("Slice", [out, lw.ints([0]), lw.ints([0]), lw.ints([1])])
    return out


@register(aten.nonzero.default)
def _nonzero(lw: Lowering, node: Any, x: Any) -> Any:
    return _bind_sizes(lw, node, _coordinates(lw, x))


@register(aten.argwhere.default)
def _argwhere(lw: Lowering, node: Any, x: Any) -> Any:
    return _bind_sizes(lw, node, _coordinates(lw, x))


@register(aten.nonzero_static.default)
def _nonzero_static(lw: Lowering, node: Any, x: Any, size: int, fill_value: int = -1) -> Any:
    """The first ``size`` coordinates, rows of ``fill_value`` after the last."""
    rank = lw.rank(x)
    filler = lw.const(np.full((int(size), rank), int(fill_value)), torch.int64)
    rows = lw.op("Concat", [_coordinates(lw, x), filler], axis=0)
    return lw.op("Slice", [rows, lw.ints([0]), lw.ints([int(size)]), lw.ints([0])])


@register(aten.masked_select.default)
def _masked_select(lw: Lowering, node: Any, x: Any, mask: Any) -> Any:
    """The elements of x (broadcast with mask) where mask holds, in row-major order: a
    GatherND at the mask's coordinates, whose gradient scatters back."""
    value, keep = lw.tensor(x), lw.tensor(mask, torch.bool)
    if tuple(lw.meta(x).shape) != tuple(lw.meta(mask).shape):
        value = lw.op("Where", [keep, value, value])  # x broadcast with mask
        keep = lw.op("Expand", [keep, lw.op("Shape", [value])])
    rank = max(lw.rank(x), lw.rank(mask))
    if rank == 0:
        value = lw.op("Reshape", [value, lw.ints([1])])
        keep = lw.op("Reshape", [keep, lw.ints([1])])
    where = lw.op("Transpose", [lw.op("NonZero", [keep])], perm=[1, 0])
    return _bind_sizes(lw, node, lw.op("GatherND", [value, where]))


def boolean_mask_index(lw: Lowering, node: Any, x: Any, indices: list[Any]) -> Any:
    """x[..., mask, ...] with one boolean mask over dims p .. p + k of x: the mask's
    coordinates gathered (GatherND) with those dims moved first, the count put back at p."""
    positions = [k for k, i in enumerate(indices) if i is not None]
    rank = lw.rank(x)
    if len(positions) != 1 or lw.rank(indices[positions[0]]) == 0:
        raise UnsupportedOp(f"indexing with a boolean mask among other indices (or a 0-d "
                            f"mask) has no fx translation; {FALLBACK_HINT}")
    first = positions[0]
    mask = indices[first]
    span = lw.rank(mask)
    value = lw.tensor(x)
    masked = list(range(first, first + span))
    perm = masked + [d for d in range(rank) if d not in masked]
    if perm != list(range(rank)):
        value = lw.op("Transpose", [value], perm=perm)
    where = lw.op("Transpose", [lw.op("NonZero", [lw.tensor(mask, torch.bool)])], perm=[1, 0])
    y = lw.op("GatherND", [value, where])  # [count, dims before first, dims after the mask]
    if first:
        y = lw.op("Transpose", [y], perm=list(range(1, first + 1)) + [0]
                  + list(range(first + 1, rank - span + 1)))
    return _bind_sizes(lw, node, y)


# ---- unique and unique_consecutive: run starts found with NonZero ----

def _runs(lw: Lowering, node: Any, flat: str, n: str, return_inverse: bool,
          return_counts: bool, shape: str, order: str | None, rows: bool = False
          ) -> list[str]:
    """The first element (``rows``: row of [n, m]) of each run of equal neighbours of
    ``flat`` (NaN equals nothing), the run of each element (scattered back through ``order``
    where ``flat`` is sorted), and the runs' lengths; unrequested outputs are empty, as
    eager's."""
    head = lw.op("Slice", [flat, lw.ints([0]), lw.ints([-1]), lw.ints([0])])
    tail = lw.op("Slice", [flat, lw.ints([1]), lw.ints([2**62]), lw.ints([0])])
    changed = lw.op("Not", [lw.op("Equal", [head, tail])])
    if rows:
        differ = lw.op("ReduceSum", [lw.op("Cast", [changed], to=TensorProto.INT64),
                                     lw.ints([1])], keepdims=0)
        changed = lw.op("Greater", [differ, lw.const(0, torch.int64)])
    first = lw.op("Concat", [lw.const([True], torch.bool), changed], axis=0)
    first = lw.op("Slice", [first, lw.ints([0]), lw.op("Reshape", [n, lw.ints([1])]),
                            lw.ints([0])])  # (no elements: no runs)
    starts = lw.op("Reshape", [lw.op("NonZero", [first]), lw.ints([-1])])
    # No gradient, as eager's unique has none.
    values = lw.op("StopGradient", [lw.op("Gather", [flat, starts], axis=0)], domain=OWN_DOMAIN)
    empty = lw.const(np.zeros(0, dtype=np.int64), torch.int64)
    inverse = empty
    if return_inverse:
        run = lw.op("Sub", [lw.op("CumSum", [lw.op("Cast", [first], to=TensorProto.INT64),
                                             lw.const(0, torch.int64)]),
                            lw.const(1, torch.int64)])
        if order is not None:
            run = lw.op("ScatterElements", [run, order, run], axis=0)
        inverse = lw.op("Reshape", [run, shape])
    counts = empty
    if return_counts:
        ends = lw.op("Concat", [lw.op("Slice", [starts, lw.ints([1]), lw.ints([2**62]),
                                                lw.ints([0])]),
                                lw.op("Reshape", [n, lw.ints([1])])], axis=0)
        counts = lw.op("Sub", [ends, starts])
    outs = [_bind_sizes(lw, node, values, 0), inverse, counts]
    return outs


def _flat_keys(lw: Lowering, x: Any) -> tuple[str, str, str]:
    """x flattened (bool as int64, to sort), its element count, its shape."""
    value = lw.tensor(x, torch.int64 if lw.dtype_of(x) == torch.bool else None)
    flat = lw.op("Reshape", [value, lw.ints([-1])])
    n = lw.op("Reshape", [lw.op("Size", [value]), lw.ints([])])
    return flat, n, lw.op("Shape", [value])


def _as_input_dtype(lw: Lowering, x: Any, outs: list[str]) -> list[str]:
    if lw.dtype_of(x) == torch.bool:
        outs[0] = lw.op("Cast", [outs[0]], to=TensorProto.BOOL)
    return outs


@register(aten._unique2.default)
def _unique2(lw: Lowering, node: Any, x: Any, sorted: bool = True, return_inverse: bool = False,
             return_counts: bool = False) -> Any:
    """The distinct elements ascending (also for sorted=False, as eager's CPU kernel), NaN
    each its own, the first of equal ones (-0.0 before 0.0 in a stable sort)."""
    flat, n, shape = _flat_keys(lw, x)
    ordered, order = lw.op("TopK", [flat, lw.op("Reshape", [n, lw.ints([1])])], outputs=2,
                           axis=0, largest=0, sorted=1)
    outs = _runs(lw, node, ordered, n, return_inverse, return_counts, shape, order)
    return _as_input_dtype(lw, x, outs)


@register(aten.unique_consecutive.default)
def _unique_consecutive(lw: Lowering, node: Any, x: Any, return_inverse: bool = False,
                        return_counts: bool = False, dim: Any = None) -> Any:
    if dim is not None:
        return _unique_along(lw, node, x, int(dim), False, return_inverse, return_counts)
    flat, n, shape = _flat_keys(lw, x)
    outs = _runs(lw, node, flat, n, return_inverse, return_counts, shape, None)
    return _as_input_dtype(lw, x, outs)


@register(aten.unique_dim.default)
def _unique_dim(lw: Lowering, node: Any, x: Any, dim: int, sorted: bool = True,
                return_inverse: bool = False, return_counts: bool = False) -> Any:
    return _unique_along(lw, node, x, dim, True, return_inverse, return_counts)


def _unique_along(lw: Lowering, node: Any, x: Any, dim: int, sort: bool,
                  return_inverse: bool, return_counts: bool) -> list[str]:
    """The distinct slices along ``dim`` (``sort``: in lexicographic order, as eager's
    unique_dim, by stable sorts from the last element of the slices to the first)."""
    rank = lw.rank(x)
    if rank == 0:
        raise UnsupportedOp(f"unique of a 0-d tensor along a dim has no fx translation; "
                            f"{FALLBACK_HINT}")
    axis = _axis(dim, rank)
    shape = list(lw.meta(x).shape)
    rest = [shape[d] for d in range(rank) if d != axis]
    if not all(isinstance(s, int) for s in rest):
        raise UnsupportedOp(f"unique along a dim with symbolic sizes in the other dims has no "
                            f"fx translation; {FALLBACK_HINT}")
    width = int(np.prod(rest)) if rest else 1
    value = lw.tensor(x, torch.int64 if lw.dtype_of(x) == torch.bool else None)
    perm = [axis] + [d for d in range(rank) if d != axis]
    moved = lw.op("Transpose", [value], perm=perm) if axis else value
    table = lw.op("Reshape", [moved, lw.ints([-1, width])])
    n = lw.op("Reshape", [lw.op("Shape", [table], start=0, end=1), lw.ints([])])
    order = None
    if sort:
        order = lw.op("Range", [lw.const(0, torch.int64), n, lw.const(1, torch.int64)])
        size = lw.op("Reshape", [n, lw.ints([1])])
        for column in reversed(range(width)):
            key = lw.op("Gather", [lw.op("Gather", [table, lw.const(column, torch.int64)],
                                         axis=1), order], axis=0)
            _, step = lw.op("TopK", [key, size], outputs=2, axis=0, largest=0, sorted=1)
            order = lw.op("Gather", [order, step], axis=0)
        table = lw.op("Gather", [table, order], axis=0)
    outs = _runs(lw, node, table, n, return_inverse, return_counts,
                 lw.op("Reshape", [n, lw.ints([1])]), order, rows=True)
    values = lw.op("Reshape", [outs[0], lw.ints([-1] + rest)])
    if axis:
        inverse_perm = [perm.index(d) for d in range(rank)]
        values = lw.op("Transpose", [values], perm=inverse_perm)
    outs[0] = values
    return _as_input_dtype(lw, x, outs)


@register(aten.masked_scatter.default)
def _masked_scatter(lw: Lowering, node: Any, x: Any, mask: Any, source: Any) -> Any:
    """x (broadcast with mask) with its masked elements taken from source in order: element
    i takes source's k-th, k the number of masked elements before it (a CumSum), so the
    gradient reaches x where unmasked and source's elements used."""
    value, keep = lw.tensor(x), lw.tensor(mask, torch.bool)
    if tuple(lw.meta(x).shape) != tuple(lw.meta(mask).shape):
        value = lw.op("Where", [keep, value, value])
        keep = lw.op("Expand", [keep, lw.op("Shape", [value])])
    if lw.meta(source).numel() == 0:
        return lw.op("Identity", [value])  # (no element can be masked)
    shape = lw.op("Shape", [value])
    flat_keep = lw.op("Reshape", [keep, lw.ints([-1])])
    taken = lw.op("CumSum", [lw.op("Cast", [flat_keep], to=TensorProto.INT64),
                             lw.const(0, torch.int64)])
    index = lw.op("Max", [lw.op("Sub", [taken, lw.const(1, torch.int64)]),
                          lw.const(0, torch.int64)])
    flat_source = lw.op("Reshape", [lw.tensor(source, lw.dtype_of(x)), lw.ints([-1])])
    picked = lw.op("Gather", [flat_source, index], axis=0)
    out = lw.op("Where", [flat_keep, picked, lw.op("Reshape", [value, lw.ints([-1])])])
    return lw.op("Reshape", [out, shape])
