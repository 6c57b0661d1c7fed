"""Tensor factories: zeros, ones, full, *_like, scalar_tensor, arange."""

from __future__ import annotations

from typing import Any

import torch

from ortmodule.capture.fx.builder import FALLBACK_HINT, Lowering, UnsupportedOp, onnx_dtype
from ortmodule.capture.fx.ops.common import _out, _scalar_tensor, aten
from ortmodule.capture.fx.registry import register


def _fill(lw: Lowering, node: Any, sizes: Any, value: Any) -> Any:
    out = _out(node)
    if all(isinstance(s, int) for s in out.shape) and not any(
            isinstance(s, torch.fx.Node) for s in sizes):
        return lw.op("Identity", [lw.const(torch.full(tuple(out.shape), value,
                                                      dtype=out.dtype).tolist(), out.dtype)])
    return lw.op("ConstantOfShape", [lw.shape(sizes)], value=_scalar_tensor(value, out.dtype))


@register(aten.zeros.default, aten.new_zeros.default)
def _zeros(lw: Lowering, node: Any, *args: Any) -> Any:
    sizes = args[1] if node.target is aten.new_zeros.default else args[0]
    return _fill(lw, node, sizes, 0)


@register(aten.ones.default, aten.new_ones.default)
def _ones(lw: Lowering, node: Any, *args: Any) -> Any:
    sizes = args[1] if node.target is aten.new_ones.default else args[0]
    return _fill(lw, node, sizes, 1)


@register(aten.full.default, aten.new_full.default)
def _full(lw: Lowering, node: Any, *args: Any) -> Any:
    sizes, value = (args[1], args[2]) if node.target is aten.new_full.default else args[:2]
    if isinstance(value, torch.fx.Node):
        raise UnsupportedOp(f"full with a computed fill value has no fx translation; "
                          f"{FALLBACK_HINT}")
    return _fill(lw, node, sizes, value)


@register(aten.zeros_like.default, aten.ones_like.default, aten.full_like.default)
def _like(lw: Lowering, node: Any, x: Any, *args: Any) -> Any:
    value = {aten.zeros_like.default: 0, aten.ones_like.default: 1}.get(node.target)
    if value is None:
        value = args[0]
    out = _out(node)
    return lw.op("ConstantOfShape", [lw.op("Shape", [lw.tensor(x)])],
                 value=_scalar_tensor(value, out.dtype))


@register(aten.scalar_tensor.default)
def _scalar_tensor_op(lw: Lowering, node: Any, value: Any, *args: Any) -> Any:
    return lw.tensor(value, _out(node).dtype)


@register(aten.arange.default, aten.arange.start, aten.arange.start_step)
def _arange(lw: Lowering, node: Any, *args: Any) -> Any:
    dtype = _out(node).dtype
    if node.target is aten.arange.default:
        start, end, step = 0, args[0], 1
    elif node.target is aten.arange.start:
        start, end, step = args[0], args[1], 1
    else:
        start, end, step = args[0], args[1], args[2]
    values = [lw.value(v) for v in (start, end, step)]
    if all(isinstance(v, (int, float)) for v in values):
        return lw.op("Identity", [lw.const(torch.arange(*values, dtype=dtype).tolist(), dtype)])
    scalars = []
    for v in values:
        if isinstance(v, str):
            scalars.append(v if dtype == torch.int64 else lw.op("Cast", [v],
                                                                 to=onnx_dtype(dtype)))
        else:
            scalars.append(lw.const(v, dtype))
    return lw.op("Range", scalars)
