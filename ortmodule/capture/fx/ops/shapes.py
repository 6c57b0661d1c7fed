"""Shapes and views: symbolic sizes, reshapes, transposes, expands, squeezes,
concatenation, splits, padding.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Callable
from typing import Any

import torch

from ortmodule.capture.common import ExportError
from ortmodule.capture.fx import registry
from ortmodule.capture.fx.builder import FALLBACK_HINT, Lowering, UnsupportedOp, source_line
from ortmodule.capture.fx.ops.common import _axis, _out, aten
from ortmodule.capture.fx.registry import TABLE, Fn, register


@register(aten.sym_size.int)
def _sym_size(lw: Lowering, node: Any, x: Any, dim: int) -> Any:
    size = _out(node)
    if isinstance(size, int) or not size.node.expr.free_symbols:
        return int(size)
    rank = lw.rank(x)
    axis = _axis(dim, rank)
    shape = lw.op("Shape", [lw.tensor(x)], start=axis, end=axis + 1)
    return lw.op("Squeeze", [shape])


_CHECKS = (operator.ge, operator.gt, operator.le, operator.lt, operator.eq)


@register(aten.sym_storage_offset.default)
def _sym_storage_offset(lw: Lowering, node: Any, x: Any) -> Any:
    """A view's offset in its storage, which torch.export asks only to assert it is in range
    (a split at positions held by a tensor): the engine's values have no storage to be
    offset in, and its views hold the elements the checks guard. Any other use of the
    offset (as_strided's argument) cannot be lowered."""
    for user in node.users:
        if user.target not in _CHECKS or any(
                u.target is not aten._assert_scalar.default for u in user.users):
            raise UnsupportedOp(
                f"the fx exporter cannot translate aten.sym_storage_offset.default read by "
                f"{user.target} (a tensor's offset in its storage, which the engine's "
                f"values do not have); {FALLBACK_HINT}")
    return 0


def _sym_arith(op_type: str, fn: Callable[[Any, Any], Any]) -> Fn:
    def translate(lw: Lowering, node: Any, a: Any, b: Any) -> Any:
        return lw.scalar_op(op_type, lw.value(a), lw.value(b), fn)
    return translate


TABLE[operator.add] = _sym_arith("Add", operator.add)
TABLE[operator.sub] = _sym_arith("Sub", operator.sub)
TABLE[operator.mul] = _sym_arith("Mul", operator.mul)
TABLE[operator.floordiv] = _sym_arith("Div", operator.floordiv)  # sizes are >= 0
TABLE[operator.mod] = _sym_arith("Mod", operator.mod)
# Comparisons of sizes (torch._check's conditions, which _assert_scalar consumes).
TABLE[operator.ge] = _sym_arith("GreaterOrEqual", operator.ge)
TABLE[operator.gt] = _sym_arith("Greater", operator.gt)
TABLE[operator.le] = _sym_arith("LessOrEqual", operator.le)
TABLE[operator.lt] = _sym_arith("Less", operator.lt)
TABLE[operator.eq] = _sym_arith("Equal", operator.eq)


@register(operator.getitem)
def _getitem(lw: Lowering, node: Any, seq: Any, index: int) -> Any:
    values = lw.value(seq)
    if not isinstance(values, list):
        raise ExportError(f"internal: getitem on {seq} which has no list of results")
    out = values[index]
    if out is None and not node.users:
        return None  # a result nothing reads needs no translation
    if out is None:
        error = UnsupportedOp(f"result {index} of {seq.target} has no fx translation; "
                              f"{FALLBACK_HINT}")
        translation = registry.bridge_translation()
        if not lw.bridge or translation is None:
            raise error
        # The op's other results are engine values; this one comes from a second call of
        # the op on PyTorch (its gradient from autograd), made once for all of them.
        bridged = lw.bridged_results.get(seq)
        if bridged is None:
            saved = lw.doc
            lw.doc = source_line(seq)
            bridged = translation(lw, seq, error)
            lw.bridged.append((str(seq.target), lw.doc, f"result {index} has no translation"))
            lw.doc = saved
            lw.bridged_results[seq] = bridged
        out = bridged[index]
    return out


@register(aten.view.default, aten.reshape.default, aten._unsafe_view.default)
def _view(lw: Lowering, node: Any, x: Any, sizes: Any) -> Any:
    return lw.op("Reshape", [lw.tensor(x), lw.shape(sizes)])


@register(aten.flatten.using_ints)
def _flatten(lw: Lowering, node: Any, x: Any, start: int = 0, end: int = -1) -> Any:
    rank = lw.rank(x)
    if rank == 0:
        return lw.op("Reshape", [lw.tensor(x), lw.ints([1])])
    start, end = _axis(start, rank), _axis(end, rank)
    value = lw.tensor(x)
    sizes = [lw.dim(x, d) for d in range(start)] + [-1] + \
            [lw.dim(x, d) for d in range(end + 1, rank)]
    return lw.op("Reshape", [value, lw.shape(sizes)])


@register(aten.unflatten.int)
def _unflatten(lw: Lowering, node: Any, x: Any, dim: int, sizes: Any) -> Any:
    return lw.op("Reshape", [lw.tensor(x), lw.shape(list(_out(node).shape))])


@register(aten.transpose.int)
def _transpose(lw: Lowering, node: Any, x: Any, d0: int, d1: int) -> Any:
    rank = lw.rank(x)
    perm = list(range(rank))
    a, b = _axis(d0, rank), _axis(d1, rank)
    perm[a], perm[b] = perm[b], perm[a]
    return lw.op("Transpose", [lw.tensor(x)], perm=perm)


@register(aten.t.default)
def _t(lw: Lowering, node: Any, x: Any) -> Any:
    if lw.rank(x) < 2:
        return lw.op("Identity", [lw.tensor(x)])
    return lw.op("Transpose", [lw.tensor(x)], perm=[1, 0])


@register(aten.permute.default)
def _permute(lw: Lowering, node: Any, x: Any, dims: Any) -> Any:
    rank = lw.rank(x)
    return lw.op("Transpose", [lw.tensor(x)], perm=[_axis(d, rank) for d in dims])


@register(aten.expand.default)
def _expand(lw: Lowering, node: Any, x: Any, sizes: Any, implicit: bool = False) -> Any:
    rank = lw.rank(x)
    offset = len(sizes) - rank
    target = [lw.dim(x, k - offset) if (isinstance(s, int) and s == -1) else s
              for k, s in enumerate(sizes)]
    return lw.op("Expand", [lw.tensor(x), lw.shape(target)])


@register(aten.expand_as.default)
def _expand_as(lw: Lowering, node: Any, x: Any, other: Any) -> Any:
    return lw.op("Expand", [lw.tensor(x), lw.op("Shape", [lw.tensor(other)])])


@register(aten.unsqueeze.default)
def _unsqueeze(lw: Lowering, node: Any, x: Any, dim: int) -> Any:
    axis = _axis(dim, lw.rank(x) + 1)
    return lw.op("Unsqueeze", [lw.tensor(x), lw.ints([axis])])


@register(aten.squeeze.dim, aten.squeeze.dims, aten.squeeze.default)
def _squeeze(lw: Lowering, node: Any, x: Any, dims: Any = None) -> Any:
    rank = lw.rank(x)
    shape = lw.meta(x).shape
    if rank == 0:  # a 0-d tensor takes dims 0 and -1 and stays as it is
        return lw.op("Identity", [lw.tensor(x)])
    if dims is None:
        dims = list(range(rank))
    elif isinstance(dims, int):
        dims = [dims]
    axes = []
    for d in dims:
        a = _axis(d, rank)
        size = shape[a]
        if isinstance(size, torch.SymInt) and size.node.expr.free_symbols:
            raise UnsupportedOp(f"squeeze of a dimension whose size is symbolic has no fx "
                              f"translation; {FALLBACK_HINT}")
        if int(size) == 1:
            axes.append(a)
    if not axes:
        return lw.op("Identity", [lw.tensor(x)])
    return lw.op("Squeeze", [lw.tensor(x), lw.ints(axes)])


@register(aten.cat.default)
def _cat(lw: Lowering, node: Any, tensors: Any, dim: int = 0) -> Any:
    rank = _out(node).dim()
    dtype = _out(node).dtype
    values = [lw.tensor(t, dtype) for t in tensors
              if not (lw.rank(t) == 1 and lw.meta(t).shape[0] == 0 and rank != 1)]
    return lw.op("Concat", values, axis=_axis(dim, rank))


@register(aten.stack.default)
def _stack(lw: Lowering, node: Any, tensors: Any, dim: int = 0) -> Any:
    axis = _axis(dim, _out(node).dim())
    values = [lw.op("Unsqueeze", [lw.tensor(t), lw.ints([axis])]) for t in tensors]
    return lw.op("Concat", values, axis=axis)


@register(aten.split.Tensor, aten.split_with_sizes.default, aten.chunk.default,
          aten.unbind.int)
def _split(lw: Lowering, node: Any, x: Any, arg: Any = None, dim: int = 0) -> Any:
    if node.target is aten.unbind.int:
        dim = arg if arg is not None else 0
    rank = lw.rank(x)
    axis = _axis(dim, rank)
    outs = _out(node)
    if node.target is aten.unbind.int:
        sizes = [1] * len(outs)
    else:
        sizes = [lw.sym(o.shape[axis]) for o in outs]
    value = lw.tensor(x)
    if all(isinstance(s, int) for s in sizes):
        parts = lw.op("Split", [value, lw.ints(sizes)], outputs=len(sizes), axis=axis)
        parts = parts if isinstance(parts, list) else [parts]
    else:
        parts = []
        start: Any = 0
        for s in sizes:
            end = lw.scalar_op("Add", start, s, operator.add)
            parts.append(lw.op("Slice", [value, lw.shape([start]), lw.shape([end]),
                                         lw.ints([axis])]))
            start = end
    if node.target is aten.unbind.int:
        parts = [lw.op("Squeeze", [p, lw.ints([axis])]) for p in parts]
    return parts


@register(aten.tensor_split.tensor_indices_or_sections)
def _tensor_split_at(lw: Lowering, node: Any, x: Any, at: Any, dim: int = 0) -> Any:
    """Pieces between split positions held by a 1-D tensor: x[:at[0]], x[at[0]:at[1]], ...,
    x[at[-1]:] along `dim`, with Python's slicing (negative positions count from the end;
    a position before the previous one gives an empty piece), which Slice shares. A 0-d
    tensor (a number of sections) sets the number of results by its value: refused."""
    if lw.rank(at) != 1:
        raise UnsupportedOp("aten.tensor_split with a 0-d tensor (a number of sections read "
                            f"from its value) has no fx translation; {FALLBACK_HINT}")
    axis = _axis(dim, lw.rank(x))
    value, positions = lw.tensor(x), lw.tensor(at)
    bounds: list[Any] = [lw.ints([0])]
    bounds += [lw.op("Gather", [positions, lw.ints([i])], axis=0)
               for i in range(len(_out(node)) - 1)]
    bounds.append(lw.ints([torch.iinfo(torch.int64).max]))
    return [lw.op("Slice", [value, start, end, lw.ints([axis])])
            for start, end in itertools.pairwise(bounds)]


@register(aten.pad.default, aten.constant_pad_nd.default)
def _pad(lw: Lowering, node: Any, x: Any, pad: Any, mode: Any = "constant",
         value: Any = None) -> Any:
    if node.target is aten.constant_pad_nd.default:
        mode, value = "constant", mode
    if mode == "circular":
        return _circular_pad(lw, x, [int(p) for p in pad])
    if mode != "constant":
        raise UnsupportedOp(f"pad mode {mode!r} has no fx translation; {FALLBACK_HINT}")
    rank = lw.rank(x)
    begins = [0] * rank
    ends = [0] * rank
    for k in range(len(pad) // 2):
        axis = rank - 1 - k
        begins[axis], ends[axis] = pad[2 * k], pad[2 * k + 1]
    dtype = _out(node).dtype
    return lw.op("Pad", [lw.tensor(x), lw.shape(begins + ends),
                         lw.const(0 if value is None else value, dtype)], mode="constant")


def _circular_pad(lw: Lowering, x: Any, pad: list[int]) -> str:
    """Circular padding as PyTorch's: per padded axis (the last first), negative pads crop
    the input, then the left pad repeats the cropped input's last elements and the right pad
    its first ones (each at most the axis's size: one wrap)."""
    rank = lw.rank(x)
    value = lw.tensor(x)
    end = 2**63 - 1
    for k in range(len(pad) // 2):
        axis = rank - 1 - k
        left, right = pad[2 * k], pad[2 * k + 1]
        size = lw.meta(x).shape[axis]
        kept = size - max(-left, 0) - max(-right, 0)
        if isinstance(kept, int) and (left > kept or right > kept):
            raise ExportError(f"circular pad {pad} wraps around more than once on axis "
                              f"{axis} of size {size} (each pad must be at most {kept})")
        axes = lw.ints([axis])
        if left < 0 or right < 0:
            value = lw.op("Slice", [value, lw.ints([max(-left, 0)]),
                                    lw.ints([right if right < 0 else end]), axes])
        parts = []
        if left > 0:
            parts.append(lw.op("Slice", [value, lw.ints([-left]), lw.ints([end]), axes]))
        parts.append(value)
        if right > 0:
            parts.append(lw.op("Slice", [value, lw.ints([0]), lw.ints([right]), axes]))
        if len(parts) > 1:
            value = lw.op("Concat", parts, axis=axis)
    return value


@register(aten.diff.default)
def _diff(lw: Lowering, node: Any, x: Any, n: int = 1, dim: int = -1, prepend: Any = None,
          append: Any = None) -> Any:
    if n != 1:
        raise UnsupportedOp(f"diff with n={n} has no fx translation; {FALLBACK_HINT}")
    axis = _axis(dim, lw.rank(x))
    parts = [lw.tensor(t) for t in (prepend, x, append) if t is not None]
    value = parts[0] if len(parts) == 1 else lw.op("Concat", parts, axis=axis)
    axes = lw.ints([axis])
    head = lw.op("Slice", [value, lw.ints([1]), lw.ints([2**63 - 1]), axes])
    tail = lw.op("Slice", [value, lw.ints([0]), lw.ints([-1]), axes])
    if lw.dtype_of(x) == torch.bool:
        return lw.op("Xor", [head, tail])
    return lw.op("Sub", [head, tail])
