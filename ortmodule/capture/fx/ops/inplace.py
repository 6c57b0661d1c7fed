"""In-place writes: the new value rebinds the tensor it modifies, and a write into a slice
or select of another tensor writes through to that tensor.
"""

from __future__ import annotations

import operator
from typing import Any

import torch

from ortmodule.capture.common import ExportError
from ortmodule.capture.fx.builder import FALLBACK_HINT, Lowering, UnsupportedOp
from ortmodule.capture.fx.ops.common import aten
from ortmodule.capture.fx.ops.elementwise import _masked_fill
from ortmodule.capture.fx.registry import TABLE, bind, register


@register(aten.relu_.default, aten.add_.Tensor, aten.mul_.Tensor, aten.sub_.Tensor,
          aten.div_.Tensor)
def _inplace(lw: Lowering, node: Any, x: Any, *rest: Any) -> Any:
    """``x.op_(...)``: the functional op's value, which later reads of ``x`` see."""
    functional = {aten.relu_.default: aten.relu.default, aten.add_.Tensor: aten.add.Tensor,
                  aten.mul_.Tensor: aten.mul.Tensor, aten.sub_.Tensor: aten.sub.Tensor,
                  aten.div_.Tensor: aten.div.Tensor}[node.target]
    out = TABLE[functional](lw, node, x, *rest)
    _rebind(lw, x, out)
    return out


def _is_view(node: Any) -> bool:
    return (isinstance(node, torch.fx.Node) and isinstance(node.target, torch._ops.OpOverload)
            and bool(node.target._schema.returns)
            and node.target._schema.returns[0].alias_info is not None
            and not node.target._schema.returns[0].alias_info.is_write)


def _rebind(lw: Lowering, x: Any, out: str, through: Any = None) -> None:
    """Later reads of ``x`` (modified in place) see ``out``. A slice or select of another
    tensor writes through to that tensor; other views cannot be followed."""
    if not isinstance(x, torch.fx.Node):
        raise ExportError("internal: in-place op on a constant")
    _check_no_stale_views(lw, x, through)
    lw.env[x] = out
    if not _is_view(x):
        return
    if x.target not in (aten.slice.Tensor, aten.select.int):
        raise UnsupportedOp(f"the fx exporter cannot follow an in-place update of a view "
                          f"({x.name}, made by {x.target}); {FALLBACK_HINT}")
    base = x.args[0]
    args, _ = bind(x.target, x)
    rank = lw.rank(base)
    axis = args[1] + rank if args[1] < 0 else args[1]
    size = lw.dim(base, axis)
    if x.target is aten.select.int:
        index = lw.value(args[2])
        if isinstance(index, int) and index < 0:
            index = lw.scalar_op("Add", size, index, operator.add)
        start, end, step = index, lw.scalar_op("Add", index, 1, operator.add), 1
        out = lw.op("Unsqueeze", [out, lw.ints([axis])])
    else:
        start = 0 if args[2] is None else lw.value(args[2])
        end = size if args[3] is None or args[3] == 2**63 - 1 else lw.value(args[3])
        step = args[4]
        for name, v in (("start", start), ("end", end)):
            if isinstance(v, int) and v < 0:
                raise UnsupportedOp(f"the fx exporter cannot follow an in-place update of a "
                                  f"slice with a negative {name}; {FALLBACK_HINT}")
        end = lw.scalar_op("Min", end, size, min)
    if step != 1:
        raise UnsupportedOp(f"the fx exporter cannot follow an in-place update of a strided "
                          f"slice; {FALLBACK_HINT}")
    # The new base: the written values padded to the base's extent, chosen where the view
    # lies along the axis, the old base elsewhere.
    zeros = [0] * rank
    begins, ends = list(zeros), list(zeros)
    begins[axis] = start
    ends[axis] = lw.scalar_op("Sub", size, end, operator.sub)
    dtype = lw.dtype_of(base)
    padded = lw.op("Pad", [out, lw.shape(begins + ends), lw.const(0, dtype)], mode="constant")
    positions = lw.op("Range", [lw.const(0, torch.int64), _scalar(lw, size),
                                lw.const(1, torch.int64)])
    inside = lw.op("And", [lw.op("GreaterOrEqual", [positions, _scalar(lw, start)]),
                           lw.op("Less", [positions, _scalar(lw, end)])])
    along = [1] * rank
    along[axis] = -1
    inside = lw.op("Reshape", [inside, lw.ints(along)])
    _rebind(lw, base, lw.op("Where", [inside, padded, lw.tensor(base)]), x)


def _scalar(lw: Lowering, v: Any) -> str:
    return v if isinstance(v, str) else lw.const(int(v), torch.int64)


def _check_no_stale_views(lw: Lowering, x: Any, through: Any) -> None:
    """Refuses an in-place update of ``x`` when a view of it (or a view of such a view)
    made before the update is read after it: the lowering would give that read the old
    values."""
    here = lw.order.get(lw.fx_node, -1)
    pending = [x]
    while pending:
        base = pending.pop()
        for user in base.users:
            if user is lw.fx_node or user is through or not _is_view(user) \
                    or user.args[0] is not base or lw.order.get(user, here) >= here:
                continue
            if any(lw.order.get(u, -1) > here for u in user.users):
                raise UnsupportedOp(f"the fx exporter cannot follow an in-place update of "
                                  f"{x.name} that a view made before it ({user.name}) "
                                  f"reads after it; {FALLBACK_HINT}")
            pending.append(user)


@register(aten.copy_.default)
def _copy_(lw: Lowering, node: Any, x: Any, src: Any, non_blocking: bool = False) -> Any:
    out = lw.op("Expand", [lw.tensor(src, lw.dtype_of(x)), lw.op("Shape", [lw.tensor(x)])])
    _rebind(lw, x, out)
    return out




def _filled(lw: Lowering, x: Any, value: Any) -> str:
    """x's shape and dtype, every element ``value``. Selected over x by an all-true Where,
    so that the output requires grad when x does (as eager's) with a zero gradient for x;
    a tensor ``value`` gets the sum of the output's gradient."""
    v = lw.tensor(x)
    shape = lw.op("Shape", [v])
    everywhere = lw.op("Expand", [lw.const(True, torch.bool), shape])
    return lw.op("Where", [everywhere, lw.tensor(value, lw.dtype_of(x)), v])


@register(aten.fill.Scalar, aten.fill.Tensor)
def _fill(lw: Lowering, node: Any, x: Any, value: Any) -> Any:
    return _filled(lw, x, value)


@register(aten.zero.default)
def _zero(lw: Lowering, node: Any, x: Any) -> Any:
    return _filled(lw, x, 0)


@register(aten.fill_.Tensor, aten.fill_.Scalar)
def _fill_(lw: Lowering, node: Any, x: Any, value: Any) -> Any:
    out = _filled(lw, x, value)
    _rebind(lw, x, out)
    return out


@register(aten.zero_.default)
def _zero_(lw: Lowering, node: Any, x: Any) -> Any:
    out = _filled(lw, x, 0)
    _rebind(lw, x, out)
    return out


@register(aten.masked_fill_.Scalar, aten.masked_fill_.Tensor)
def _masked_fill_(lw: Lowering, node: Any, x: Any, mask: Any, value: Any) -> Any:
    out = _masked_fill(lw, node, x, mask, value)
    _rebind(lw, x, out)
    return out
