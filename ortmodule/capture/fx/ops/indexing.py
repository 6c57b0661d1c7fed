"""Indexing: slices, selects, gathers, advanced indexing."""

from __future__ import annotations

import operator
from typing import Any

import torch

from ortmodule.capture.fx.builder import Lowering
from ortmodule.capture.fx.ops.common import _axis, _out, aten
from ortmodule.capture.fx.ops.data_dependent import boolean_mask_index
from ortmodule.capture.fx.registry import register


def _index_value(lw: Lowering, v: Any) -> Any:
    return v if isinstance(v, str) else lw.const(int(v), torch.int64)


@register(aten.slice.Tensor)
def _slice(lw: Lowering, node: Any, x: Any, dim: int = 0, start: Any = None, end: Any = None,
           step: int = 1) -> Any:
    rank = lw.rank(x)
    axis = _axis(dim, rank)
    start_v = 0 if start is None else lw.value(start)
    end_v = 2**63 - 1 if end is None else lw.value(end)
    if start_v == 0 and end_v == 2**63 - 1 and step == 1:
        return lw.op("Identity", [lw.tensor(x)])
    starts, ends = lw.shape([start_v]), lw.shape([end_v])
    return lw.op("Slice", [lw.tensor(x), starts, ends, lw.ints([axis]), lw.ints([step])])


@register(aten.select.int)
def _select(lw: Lowering, node: Any, x: Any, dim: int, index: Any) -> Any:
    axis = _axis(dim, lw.rank(x))
    index = lw.value(index)
    if isinstance(index, int) and index < 0:
        index = lw.scalar_op("Add", lw.dim(x, axis), index, operator.add)
    return lw.op("Gather", [lw.tensor(x), _index_value(lw, index)], axis=axis)


@register(aten.index_select.default)
def _index_select(lw: Lowering, node: Any, x: Any, dim: int, index: Any) -> Any:
    # A 0-d index selects as a 1-element one (the axis stays); a 0-d x as a 1-element
    # vector, giving a 0-d result.
    idx = lw.tensor(index)
    if lw.rank(index) == 0:
        idx = lw.op("Reshape", [idx, lw.ints([1])])
    if lw.rank(x) == 0:
        flat = lw.op("Reshape", [lw.tensor(x), lw.ints([1])])
        return lw.op("Reshape", [lw.op("Gather", [flat, idx], axis=0), lw.ints([])])
    return lw.op("Gather", [lw.tensor(x), idx], axis=_axis(dim, lw.rank(x)))


@register(aten.gather.default)
def _gather(lw: Lowering, node: Any, x: Any, dim: int, index: Any,
            sparse_grad: bool = False) -> Any:
    return lw.op("GatherElements", [lw.tensor(x), lw.tensor(index)],
                 axis=_axis(dim, lw.rank(x)))


@register(aten.index.Tensor)
def _index(lw: Lowering, node: Any, x: Any, indices: Any) -> Any:
    """Advanced indexing: one index tensor is a Gather along its dimension; several are one
    GatherND over their broadcast shape, the indexed dimensions moved first (and the result's
    index dimensions moved back where adjacent index tensors stood, as eager lays it out)."""
    positions = [k for k, i in enumerate(indices) if i is not None]
    if any(lw.dtype_of(indices[k]) == torch.bool for k in positions):
        return boolean_mask_index(lw, node, x, indices)
    value = lw.tensor(x)
    if len(positions) == 1:
        return lw.op("Gather", [value, lw.tensor(indices[positions[0]], torch.int64)],
                     axis=positions[0])
    index_values = []
    for k in positions:
        v = lw.tensor(indices[k], torch.int64)
        size = lw.dim(x, k)
        # Negative indices count from the end, as in PyTorch.
        negative = lw.op("Less", [v, lw.const(0, torch.int64)])
        wrapped = lw.op("Add", [v, _index_value(lw, size)])
        index_values.append(lw.op("Where", [negative, wrapped, v]))
    total = index_values[0]
    for v in index_values[1:]:
        total = lw.op("Add", [total, v])
    shape = lw.op("Shape", [total])
    stacked = [lw.op("Unsqueeze", [lw.op("Expand", [v, shape]), lw.ints([-1])])
               for v in index_values]
    # The indexed dimensions move first; GatherND gives [index shape, other dimensions].
    rank = lw.rank(x)
    rest = [d for d in range(rank) if d not in positions]
    perm = positions + rest
    if perm != list(range(rank)):
        value = lw.op("Transpose", [value], perm=perm)
    y = lw.op("GatherND", [value, lw.op("Concat", stacked, axis=-1)])
    first = positions[0]
    if first and positions == list(range(first, first + len(positions))):
        # Adjacent index tensors: eager puts the index shape where they stood.
        index_rank = _out(node).dim() - len(rest)
        y = lw.op("Transpose", [y], perm=list(range(index_rank, index_rank + first))
                  + list(range(index_rank)) + list(range(index_rank + first,
                                                         index_rank + len(rest))))
    return y
