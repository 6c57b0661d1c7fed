"""linspace and logspace with tensor endpoints (the number overloads fold to constants before
lowering): eager's CPU formula, the first half of the points counted up from start and the
second half down from end by one step (end - start) / (steps - 1), in float64, then cast;
logspace raises the base to them. Eager's outputs carry no gradient, nor do these."""

from __future__ import annotations

from typing import Any

import torch

from ortmodule.capture.common import OWN_DOMAIN
from ortmodule.capture.fx.builder import FALLBACK_HINT, Lowering, UnsupportedOp, onnx_dtype
from ortmodule.capture.fx.ops.common import _out, aten
from ortmodule.capture.fx.registry import register


def _endpoint(lw: Lowering, v: Any) -> str:
    value = lw.tensor(v, torch.float64)
    if isinstance(lw.value(v), str):
        value = lw.op("StopGradient", [value], domain=OWN_DOMAIN)
    return lw.op("Reshape", [value, lw.ints([])])


def _points(lw: Lowering, node: Any, start: Any, end: Any, steps: Any) -> str:
    """The linspace points in float64."""
    if not isinstance(steps, int):
        raise UnsupportedOp(f"linspace/logspace with a computed number of steps has no fx "
                            f"translation; {FALLBACK_HINT}")
    if not _out(node).dtype.is_floating_point:
        raise UnsupportedOp(f"linspace/logspace of {_out(node).dtype} (eager rounds each "
                            f"point its own way) has no fx translation; {FALLBACK_HINT}")
    first, last = _endpoint(lw, start), _endpoint(lw, end)
    if steps <= 1:
        one = lw.op("Reshape", [first, lw.ints([1])])
        return lw.op("Slice", [one, lw.ints([0]), lw.ints([max(steps, 0)])])
    f64 = torch.float64
    step = lw.op("Div", [lw.op("Sub", [last, first]), lw.const(steps - 1, f64)])
    up = lw.op("Add", [first, lw.op("Mul", [lw.const(list(range(steps)), f64), step])])
    down = lw.op("Sub", [last, lw.op("Mul", [lw.const(list(range(steps - 1, -1, -1)), f64),
                                             step])])
    first_half = lw.const([i < steps // 2 for i in range(steps)], torch.bool)
    return lw.op("Where", [first_half, up, down])


@register(aten.linspace.Tensor_Tensor, aten.linspace.Tensor_Scalar,
          aten.linspace.Scalar_Tensor)
def _linspace(lw: Lowering, node: Any, start: Any, end: Any, steps: Any,
              *args: Any, **kwargs: Any) -> str:
    points = _points(lw, node, start, end, steps)
    return lw.op("Cast", [points], to=onnx_dtype(_out(node).dtype))


@register(aten.logspace.Tensor_Tensor, aten.logspace.Tensor_Scalar,
          aten.logspace.Scalar_Tensor)
def _logspace(lw: Lowering, node: Any, start: Any, end: Any, steps: Any, base: Any = 10.0,
              *args: Any, **kwargs: Any) -> str:
    points = _points(lw, node, start, end, steps)
    powered = lw.op("Pow", [lw.const(float(base), torch.float64), points])
    return lw.op("Cast", [powered], to=onnx_dtype(_out(node).dtype))
