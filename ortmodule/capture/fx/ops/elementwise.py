"""Elementwise ops: arithmetic with PyTorch's type promotion, comparisons, logic, unary
math and activations, clamps, selects.
"""

from __future__ import annotations

from typing import Any

import torch

from ortmodule.capture.fx.builder import FALLBACK_HINT, Lowering, UnsupportedOp, onnx_dtype
from ortmodule.capture.fx.ops.common import _out, _result_dtype, aten
from ortmodule.capture.fx.ops.elementary import trunc_value
from ortmodule.capture.fx.registry import TABLE, Fn, register


def _binary(op_type: str, compare: bool = False) -> Fn:
    def translate(lw: Lowering, node: Any, a: Any, b: Any, *rest: Any) -> Any:
        dtype = _result_dtype(lw, a, b)
        # On booleans PyTorch's product is a logical and, its sum a logical or.
        kind = {"Mul": "And", "Add": "Or"}.get(op_type, op_type) if dtype == torch.bool \
            else op_type
        out = lw.op(kind, [lw.tensor(a, dtype), lw.tensor(b, dtype)])
        want = _out(node).dtype
        if not compare and want != dtype:
            out = lw.op("Cast", [out], to=onnx_dtype(want))
        return out
    return translate


def _with_alpha(op_type: str) -> Fn:
    def translate(lw: Lowering, node: Any, a: Any, b: Any, alpha: Any = 1) -> Any:
        if alpha != 1:
            b_val = lw.meta(b)
            if isinstance(b_val, torch.Tensor):
                dtype = _result_dtype(lw, a, b)
                scaled = lw.op("Mul", [lw.tensor(b, dtype), lw.const(alpha, dtype)])
                return lw.op(op_type, [lw.tensor(a, dtype), scaled])
            b = b * alpha
        return _binary(op_type)(lw, node, a, b)
    return translate


TABLE[aten.add.Tensor] = _with_alpha("Add")
TABLE[aten.add.Scalar] = _with_alpha("Add")
TABLE[aten.sub.Tensor] = _with_alpha("Sub")
TABLE[aten.sub.Scalar] = _with_alpha("Sub")
TABLE[aten.mul.Tensor] = _binary("Mul")
TABLE[aten.mul.Scalar] = _binary("Mul")
for _op, _onnx in ((aten.eq, "Equal"), (aten.lt, "Less"), (aten.le, "LessOrEqual"),
                   (aten.gt, "Greater"), (aten.ge, "GreaterOrEqual")):
    TABLE[_op.Tensor] = _binary(_onnx, compare=True)
    TABLE[_op.Scalar] = _binary(_onnx, compare=True)


@register(aten.ne.Tensor, aten.ne.Scalar)
def _ne(lw: Lowering, node: Any, a: Any, b: Any) -> Any:
    return lw.op("Not", [_binary("Equal", compare=True)(lw, node, a, b)])


@register(aten.div.Tensor, aten.div.Scalar, aten.div.Tensor_mode)
def _div(lw: Lowering, node: Any, a: Any, b: Any, rounding_mode: str | None = None) -> Any:
    want = _out(node).dtype
    dtype = want if rounding_mode is None else _result_dtype(lw, a, b)
    if rounding_mode is None:
        return lw.op("Div", [lw.tensor(a, dtype), lw.tensor(b, dtype)])
    if not dtype.is_floating_point:
        # ONNX's integer Div truncates (and fails on a zero divisor, as eager raises
        # ZeroDivisionError). Floor division of integers stays on PyTorch: native, it would
        # let max_pool2d_with_indices_backward lower through a decomposition whose output
        # loses eager's requires_grad.
        if rounding_mode == "floor":
            raise UnsupportedOp(f"division with rounding_mode='floor' of {dtype} tensors has "
                                f"no fx translation; {FALLBACK_HINT}")
        return lw.op("Div", [lw.tensor(a, dtype), lw.tensor(b, dtype)])
    # float16 and bfloat16 round after each step, as eager's 16-bit kernels do.
    av, bv = lw.tensor(a, dtype), lw.tensor(b, dtype)
    if rounding_mode == "trunc":
        return trunc_value(lw, lw.op("Div", [av, bv]))
    return _floor_quotient(lw, av, bv, dtype)


def _floor_quotient(lw: Lowering, a: str, b: str, dtype: torch.dtype) -> str:
    """PyTorch's floor division of floats: (a - fmod(a, b)) / b, one less where the remainder
    and b differ in sign, floored and rounded up past .5 (floor(a / b) is off by one where
    a / b rounds to an integer); a signed zero where that is 0, a / b where b is 0. The last
    Floor leaves the value and makes the gradient zero, as eager's is."""
    zero, one = lw.const(0.0, dtype), lw.const(1.0, dtype)
    mod = lw.op("Mod", [a, b], fmod=1)
    div = lw.op("Div", [lw.op("Sub", [a, mod]), b])
    signs_differ = lw.op("Xor", [lw.op("Less", [b, zero]), lw.op("Less", [mod, zero])])
    adjust = lw.op("And", [lw.op("Not", [lw.op("Equal", [mod, zero])]), signs_differ])
    div = lw.op("Where", [adjust, lw.op("Sub", [div, one]), div])
    floored = lw.op("Floor", [div])
    past_half = lw.op("Greater", [lw.op("Sub", [div, floored]), lw.const(0.5, dtype)])
    floored = lw.op("Where", [past_half, lw.op("Add", [floored, one]), floored])
    quotient = lw.op("Div", [a, b])
    out = lw.op("Where", [lw.op("Equal", [div, zero]), lw.op("Mul", [quotient, zero]), floored])
    out = lw.op("Where", [lw.op("Equal", [b, zero]), quotient, out])
    return lw.op("Floor", [out])


@register(aten.rsub.Scalar, aten.rsub.Tensor)
def _rsub(lw: Lowering, node: Any, a: Any, b: Any, alpha: Any = 1) -> Any:
    return _with_alpha("Sub")(lw, node, b, a, 1) if alpha == 1 else \
        _binary("Sub")(lw, node, lw.op("Mul", [lw.tensor(b), lw.const(alpha, lw.dtype_of(b))]), a)


@register(aten.pow.Tensor_Scalar, aten.pow.Tensor_Tensor)
def _pow(lw: Lowering, node: Any, a: Any, b: Any) -> Any:
    dtype = _out(node).dtype
    return lw.op("Pow", [lw.tensor(a, dtype), lw.tensor(b, dtype)])


@register(aten.__and__.Tensor, aten.bitwise_and.Tensor, aten.logical_and.default)
def _and(lw: Lowering, node: Any, a: Any, b: Any) -> Any:
    return _logical(lw, node, "And", a, b)


@register(aten.__or__.Tensor, aten.bitwise_or.Tensor, aten.logical_or.default)
def _or(lw: Lowering, node: Any, a: Any, b: Any) -> Any:
    return _logical(lw, node, "Or", a, b)


def _logical(lw: Lowering, node: Any, op_type: str, a: Any, b: Any) -> Any:
    if _out(node).dtype != torch.bool and node.target not in (aten.logical_and.default,
                                                              aten.logical_or.default):
        raise UnsupportedOp(f"bitwise {op_type} of integer tensors has no engine op; "
                          f"{FALLBACK_HINT}")
    return lw.op(op_type, [lw.tensor(a, torch.bool), lw.tensor(b, torch.bool)])


@register(aten.bitwise_not.default, aten.logical_not.default)
def _not(lw: Lowering, node: Any, a: Any) -> Any:
    if lw.dtype_of(a) != torch.bool and node.target is aten.bitwise_not.default:
        raise UnsupportedOp(f"bitwise not of integer tensors has no engine op; {FALLBACK_HINT}")
    return lw.op("Not", [lw.tensor(a, torch.bool)])


def _unary(op_type: str) -> Fn:
    def translate(lw: Lowering, node: Any, x: Any) -> Any:
        return lw.op(op_type, [lw.tensor(x)])
    return translate


for _op, _onnx in ((aten.relu, "Relu"), (aten.tanh, "Tanh"), (aten.sigmoid, "Sigmoid"),
                   (aten.exp, "Exp"), (aten.log, "Log"), (aten.sqrt, "Sqrt"),
                   (aten.abs, "Abs"), (aten.neg, "Neg"), (aten.erf, "Erf"),
                   (aten.sin, "Sin"), (aten.cos, "Cos"), (aten.reciprocal, "Reciprocal")):
    TABLE[_op.default] = _unary(_onnx)


for _op, _onnx in ((aten.floor, "Floor"), (aten.ceil, "Ceil"), (aten.sign, "Sign")):
    TABLE[_op.default] = _unary(_onnx)


@register(aten.square.default)
def _square(lw: Lowering, node: Any, x: Any) -> Any:
    v = lw.tensor(x)
    return lw.op("Mul", [v, v])


@register(aten.leaky_relu.default)
def _leaky_relu(lw: Lowering, node: Any, x: Any, slope: float = 0.01) -> Any:
    return lw.op("LeakyRelu", [lw.tensor(x)], alpha=float(slope))


@register(aten.clamp.default, aten.clip.default)
def _clamp(lw: Lowering, node: Any, x: Any, low: Any = None, high: Any = None) -> Any:
    dtype = _out(node).dtype
    bounds = [None if b is None else lw.tensor(b, dtype) for b in (low, high)]
    return lw.op("Clip", [lw.tensor(x, dtype), *bounds])


@register(aten.argmax.default, aten.argmin.default)
def _argmax(lw: Lowering, node: Any, x: Any, dim: Any = None, keepdim: bool = False) -> Any:
    op_type = "ArgMax" if node.target is aten.argmax.default else "ArgMin"
    value = lw.tensor(x)
    if lw.rank(x) == 0:  # the index of a 0-d tensor's one element, whatever dim says
        return lw.op("Identity", [lw.const(0, torch.int64)])
    if dim is None:
        value, dim, keepdim = lw.op("Reshape", [value, lw.ints([-1])]), 0, False
    return lw.op(op_type, [value], axis=int(dim), keepdims=int(bool(keepdim)))


@register(aten.triu.default, aten.tril.default)
def _triangle(lw: Lowering, node: Any, x: Any, diagonal: int = 0) -> Any:
    return lw.op("Trilu", [lw.tensor(x), lw.const(int(diagonal), torch.int64)],
                 upper=int(node.target is aten.triu.default))


@register(aten.repeat.default)
def _repeat(lw: Lowering, node: Any, x: Any, repeats: Any) -> Any:
    value = lw.tensor(x)
    extra = len(repeats) - lw.rank(x)
    if extra > 0:
        value = lw.op("Reshape", [value, lw.shape([1] * extra + [
            lw.dim(x, d) for d in range(lw.rank(x))])])
    return lw.op("Tile", [value, lw.shape(list(repeats))])


@register(aten.rsqrt.default)
def _rsqrt(lw: Lowering, node: Any, x: Any) -> Any:
    return lw.op("Reciprocal", [lw.op("Sqrt", [lw.tensor(x)])])


@register(aten.silu.default)
def _silu(lw: Lowering, node: Any, x: Any) -> Any:
    v = lw.tensor(x)
    return lw.op("Mul", [v, lw.op("Sigmoid", [v])])


@register(aten.gelu.default)
def _gelu(lw: Lowering, node: Any, x: Any, approximate: str = "none") -> Any:
    return lw.op("Gelu", [lw.tensor(x)], approximate=approximate)


@register(aten.minimum.default, aten.min.other)
def _minimum(lw: Lowering, node: Any, a: Any, b: Any) -> Any:
    return _binary("Min")(lw, node, a, b)


@register(aten.maximum.default, aten.max.other)
def _maximum(lw: Lowering, node: Any, a: Any, b: Any) -> Any:
    return _binary("Max")(lw, node, a, b)


@register(aten.where.self, aten.where.ScalarOther, aten.where.ScalarSelf, aten.where.Scalar)
def _where(lw: Lowering, node: Any, cond: Any, a: Any, b: Any) -> Any:
    dtype = _out(node).dtype
    return lw.op("Where", [lw.tensor(cond, torch.bool), lw.tensor(a, dtype),
                           lw.tensor(b, dtype)])


@register(aten.masked_fill.Scalar, aten.masked_fill.Tensor)
def _masked_fill(lw: Lowering, node: Any, x: Any, mask: Any, value: Any) -> Any:
    dtype = _out(node).dtype
    return lw.op("Where", [lw.tensor(mask, torch.bool), lw.tensor(value, dtype),
                           lw.tensor(x, dtype)])
