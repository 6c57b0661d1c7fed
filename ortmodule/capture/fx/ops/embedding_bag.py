"""F.embedding_bag: the rows of each bag's indices summed, averaged or maxed (offsets
giving where each bag starts, optional per-sample weights, the padding index left out).
Each index's bag is its offset's insertion point (SearchSorted), and the rows are
scatter-reduced into the bags, whose gradients (the scatter's and Gather's) are eager's for
these modes. ATen's other outputs (offset2bag, bag_size, max_indices), which only eager's
backward reads, are not translated."""

from __future__ import annotations

import math
import operator
from typing import Any

import torch

from ortmodule.capture.common import OWN_DOMAIN
from ortmodule.capture.fx.builder import FALLBACK_HINT, Lowering, UnsupportedOp, onnx_dtype
from ortmodule.capture.fx.ops.common import aten
from ortmodule.capture.fx.registry import register

_MODES = {0: "sum", 1: "mean", 2: "max"}


def _used_outputs(node: Any) -> set[int]:
    """The outputs that later nodes read."""
    return {int(u.args[1]) for u in node.users if u.target is operator.getitem and u.users}


def _embedding_bag(lw: Lowering, node: Any, weight: Any, indices: Any, offsets: Any,
                   scale_grad_by_freq: bool, mode: int, sparse: bool,
                   per_sample_weights: Any, include_last_offset: bool,
                   padding_idx: Any) -> list[Any]:
    if scale_grad_by_freq or sparse or _used_outputs(node) - {0} or lw.rank(indices) != 1:
        raise UnsupportedOp(f"embedding_bag with scale_grad_by_freq, sparse, 2-D indices or "
                            f"its auxiliary outputs used has no fx translation; {FALLBACK_HINT}")
    dtype = lw.dtype_of(weight)
    table = lw.tensor(weight)
    idx = lw.tensor(indices, torch.int64)
    starts = lw.tensor(offsets, torch.int64)
    n = lw.tensor(lw.dim(indices, 0), torch.int64)
    bags = lw.op("Reshape", [lw.op("Size", [starts]), lw.ints([])])  # bags + 1 with the last
    if include_last_offset:
        bags = lw.op("Sub", [bags, lw.const(1, torch.int64)])
    position = lw.op("Range", [lw.const(0, torch.int64), lw.op("Reshape", [n, lw.ints([])]),
                               lw.const(1, torch.int64)])
    bag = lw.op("Sub", [lw.op("SearchSorted", [starts, position], domain=OWN_DOMAIN, right=1),
                        lw.const(1, torch.int64)])
    keep = lw.op("And", [lw.op("GreaterOrEqual", [bag, lw.const(0, torch.int64)]),
                         lw.op("Less", [bag, bags])])
    if padding_idx is not None:
        pad = int(padding_idx)
        if pad < 0:
            pad = lw.scalar_op("Add", lw.dim(weight, 0), pad, operator.add)
        pad_value = lw.tensor(pad, torch.int64) if isinstance(pad, str) else lw.const(
            pad, torch.int64)
        keep = lw.op("And", [keep, lw.op("Not", [lw.op("Equal", [idx, pad_value])])])
    rows = lw.op("Gather", [table, idx], axis=0)  # [n, D]
    if per_sample_weights is not None:
        rows = lw.op("Mul", [rows, lw.op("Unsqueeze", [lw.tensor(per_sample_weights, dtype),
                                                       lw.ints([1])])])
    slot = lw.op("Where", [keep, bag, bags])  # left-out elements land in one spare bag
    width = lw.op("Shape", [table], start=1, end=2)
    spread = lw.op("Expand", [lw.op("Unsqueeze", [slot, lw.ints([1])]),
                              lw.op("Concat", [lw.op("Shape", [idx]), width], axis=0)])
    out_shape = lw.op("Concat", [lw.op("Reshape", [lw.op("Add", [bags, lw.const(
        1, torch.int64)]), lw.ints([1])]), width], axis=0)
    keep_rows = lw.op("Unsqueeze", [keep, lw.ints([1])])
    count = lw.op("ScatterElements", [
        lw.op("Expand", [lw.const(0.0, dtype), lw.op("Reshape", [
            lw.op("Add", [bags, lw.const(1, torch.int64)]), lw.ints([1])])]),
        slot, lw.op("Cast", [keep], to=onnx_dtype(dtype))], axis=0, reduction="add")
    count = lw.op("Unsqueeze", [count, lw.ints([1])])
    name = _MODES.get(int(mode))
    if name is None:
        raise UnsupportedOp(f"embedding_bag mode {mode} has no fx translation; {FALLBACK_HINT}")
    if name == "max":
        start = lw.op("Expand", [lw.const(-math.inf, dtype), out_shape])
        out = lw.op("ScatterElements", [start, spread, rows], axis=0, reduction="max")
        out = lw.op("Where", [lw.op("Greater", [count, lw.const(0.0, dtype)]), out,
                              lw.const(0.0, dtype)])
    else:
        start = lw.op("Expand", [lw.const(0.0, dtype), out_shape])
        update = lw.op("Where", [keep_rows, rows, lw.const(0.0, dtype)])
        out = lw.op("ScatterElements", [start, spread, update], axis=0, reduction="add")
        if name == "mean":
            out = lw.op("Div", [out, lw.op("Max", [count, lw.const(1.0, dtype)])])
    bags_1d = lw.op("Reshape", [bags, lw.ints([1])])
    out = lw.op("Slice", [out, lw.ints([0]), bags_1d, lw.ints([0])])
    # Auxiliary outputs: unused (checked above); empty values hold their places.
    empty = lw.const([], torch.int64)
    return [out, empty, empty, empty]


@register(aten.embedding_bag.default)
def _embedding_bag_default(lw: Lowering, node: Any, weight: Any, indices: Any, offsets: Any,
                           scale_grad_by_freq: bool = False, mode: int = 0,
                           sparse: bool = False, per_sample_weights: Any = None,
                           include_last_offset: bool = False) -> Any:
    return _embedding_bag(lw, node, weight, indices, offsets, scale_grad_by_freq, mode, sparse,
                          per_sample_weights, include_last_offset, None)


@register(aten.embedding_bag.padding_idx)
def _embedding_bag_padding(lw: Lowering, node: Any, weight: Any, indices: Any, offsets: Any,
                           scale_grad_by_freq: bool, mode: int, sparse: bool,
                           per_sample_weights: Any, include_last_offset: bool,
                           padding_idx: Any) -> Any:
    return _embedding_bag(lw, node, weight, indices, offsets, scale_grad_by_freq, mode, sparse,
                          per_sample_weights, include_last_offset, padding_idx)
