"""Elementary functions written through the engine's exponentials, logarithms and selects,
with PyTorch's values and gradients at the edges: log2, log10, exp2, logaddexp2, hypot,
trunc and frac, signbit and copysign, fmin and fmax (NaN-ignoring), logical_xor, angle
of real tensors, isclose; nextafter and frexp through the engine's own NextAfter and Frexp."""

from __future__ import annotations

import math
from typing import Any

import torch

from ortmodule.capture.common import OWN_DOMAIN
from ortmodule.capture.fx.builder import Lowering
from ortmodule.capture.fx.ops.common import _out, _result_dtype, aten
from ortmodule.capture.fx.ops.precise import log1p_value
from ortmodule.capture.fx.registry import register


@register(aten.log2.default, aten.log10.default)
def _log_base(lw: Lowering, node: Any, x: Any) -> Any:
    dtype = _out(node).dtype
    base = 2.0 if node.target is aten.log2.default else 10.0
    return lw.op("Mul", [lw.op("Log", [lw.tensor(x, dtype)]), lw.const(1.0 / math.log(base),
                                                                        dtype)])


@register(aten.exp2.default)
def _exp2(lw: Lowering, node: Any, x: Any) -> Any:
    dtype = _out(node).dtype
    return lw.op("Exp", [lw.op("Mul", [lw.tensor(x, dtype), lw.const(math.log(2.0), dtype)])])


@register(aten.logaddexp2.default)
def _logaddexp2(lw: Lowering, node: Any, a: Any, b: Any) -> Any:
    """max(a, b) + log2(1 + 2^-|a - b|). An infinite difference (one side infinite) adds 0,
    and equal infinities give themselves; their difference never reaches the formula or its
    gradient (at equal infinities a takes the gradient, where eager's is NaN)."""
    dtype = _out(node).dtype
    av, bv = lw.tensor(a, dtype), lw.tensor(b, dtype)
    raw = lw.op("Sub", [av, bv])
    same_inf = lw.op("And", [lw.op("IsInf", [av]), lw.op("Equal", [av, bv])])
    far = lw.op("IsInf", [raw])
    zero = lw.const(0.0, dtype)
    diff = lw.op("Where", [lw.op("Or", [same_inf, far]), zero, raw])
    ln2 = math.log(2.0)
    t = lw.op("Exp", [lw.op("Mul", [lw.op("Abs", [diff]), lw.const(-ln2, dtype)])])
    t = lw.op("Where", [far, zero, t])
    tail = lw.op("Mul", [log1p_value(lw, t, dtype), lw.const(1.0 / ln2, dtype)])
    return lw.op("Where", [same_inf, av, lw.op("Add", [lw.op("Max", [av, bv]), tail])])


@register(aten.hypot.default)
def _hypot(lw: Lowering, node: Any, a: Any, b: Any) -> Any:
    """m * sqrt((a/m)^2 + (b/m)^2) with m = max(|a|, |b|): no overflow or underflow of the
    squares (the value does not depend on m, so neither does the gradient)."""
    dtype = _out(node).dtype
    av, bv = lw.tensor(a, dtype), lw.tensor(b, dtype)
    m = lw.op("Max", [lw.op("Abs", [av]), lw.op("Abs", [bv])])
    zero, one = lw.const(0.0, dtype), lw.const(1.0, dtype)
    safe = lw.op("Where", [lw.op("Equal", [m, zero]), one, m])
    x, y = lw.op("Div", [av, safe]), lw.op("Div", [bv, safe])
    return lw.op("Mul", [m, lw.op("Sqrt", [lw.op("Add", [lw.op("Mul", [x, x]),
                                                         lw.op("Mul", [y, y])])])])


def trunc_value(lw: Lowering, v: Any) -> Any:
    return lw.op("Mul", [lw.op("Sign", [v]), lw.op("Floor", [lw.op("Abs", [v])])])


@register(aten.trunc.default, aten.fix.default)
def _trunc(lw: Lowering, node: Any, x: Any) -> Any:
    v = lw.tensor(x)
    if not lw.dtype_of(x).is_floating_point:
        return lw.op("Identity", [v])
    return trunc_value(lw, v)


@register(aten.frac.default)
def _frac(lw: Lowering, node: Any, x: Any) -> Any:
    v = lw.tensor(x)
    return lw.op("Sub", [v, trunc_value(lw, v)])


def _signbit_value(lw: Lowering, v: Any, dtype: torch.dtype) -> Any:
    zero = lw.const(0, dtype)
    negative = lw.op("Less", [v, zero])
    if not dtype.is_floating_point:
        return negative
    # -0.0: equal to zero, and its reciprocal is -inf.
    minus_zero = lw.op("And", [lw.op("Equal", [v, zero]),
                               lw.op("Less", [lw.op("Reciprocal", [v]), zero])])
    return lw.op("Or", [negative, minus_zero])


@register(aten.signbit.default)
def _signbit(lw: Lowering, node: Any, x: Any) -> Any:
    dtype = lw.dtype_of(x)
    if dtype == torch.bool:
        return lw.op("And", [lw.tensor(x), lw.const(False, torch.bool)])
    return _signbit_value(lw, lw.tensor(x), dtype)


@register(aten.copysign.Tensor, aten.copysign.Scalar)
def _copysign(lw: Lowering, node: Any, a: Any, b: Any) -> Any:
    """|a| with b's sign bit (-0.0 counts as negative); no gradient flows to b."""
    dtype = _out(node).dtype
    magnitude = lw.op("Abs", [lw.tensor(a, dtype)])
    sign_dtype = _result_dtype(lw, b) if isinstance(lw.meta(b), torch.Tensor) else dtype
    negative = _signbit_value(lw, lw.tensor(b, sign_dtype), sign_dtype)
    return lw.op("Where", [negative, lw.op("Neg", [magnitude]), magnitude])


@register(aten.fmax.default, aten.fmin.default)
def _fmax(lw: Lowering, node: Any, a: Any, b: Any) -> Any:
    """The larger (fmax) or smaller (fmin) where neither is NaN, the other where one is; a
    tie takes a and its gradient (as PyTorch's fmax and fmin do)."""
    dtype = _result_dtype(lw, a, b)
    av, bv = lw.tensor(a, dtype), lw.tensor(b, dtype)
    keep_a = lw.op("GreaterOrEqual" if node.target is aten.fmax.default else "LessOrEqual",
                   [av, bv])
    if dtype.is_floating_point:
        keep_a = lw.op("Or", [keep_a, lw.op("IsNaN", [bv])])
    return lw.op("Where", [keep_a, av, bv])


@register(aten.logical_xor.default)
def _logical_xor(lw: Lowering, node: Any, a: Any, b: Any) -> Any:
    return lw.op("Xor", [lw.tensor(a, torch.bool), lw.tensor(b, torch.bool)])


@register(aten.angle.default)
def _angle(lw: Lowering, node: Any, x: Any) -> Any:
    """Of a real tensor: pi below zero, 0 elsewhere, NaN for NaN; its gradient is zero."""
    dtype = _out(node).dtype
    v = lw.tensor(x, dtype)
    zero = lw.const(0.0, dtype)
    phase = lw.op("Where", [lw.op("Less", [v, zero]), lw.const(math.pi, dtype), zero])
    # sign(x) * 0 is 0, or NaN where x is: it carries the NaN, and (Sign being piecewise
    # constant) an output that requires grad, with a zero gradient, as in eager.
    return lw.op("Add", [phase, lw.op("Mul", [lw.op("Sign", [v]), zero])])


@register(aten.nextafter.default)
def _nextafter(lw: Lowering, node: Any, a: Any, b: Any) -> Any:
    """The float after a towards b (b where they are equal); the gradient goes to a where
    a != b, none to b."""
    dtype = _out(node).dtype
    return lw.op("NextAfter", [lw.tensor(a, dtype), lw.tensor(b, dtype)], domain=OWN_DOMAIN)


@register(aten.frexp.Tensor)
def _frexp(lw: Lowering, node: Any, x: Any) -> Any:
    """(mantissa, int32 exponent); the mantissa's gradient is eager's dm / 2^exponent."""
    return lw.op("Frexp", [lw.tensor(x)], outputs=2, domain=OWN_DOMAIN)


@register(aten.isclose.default)
def _isclose(lw: Lowering, node: Any, a: Any, b: Any, rtol: float = 1e-05, atol: float = 1e-08,
             equal_nan: bool = False) -> Any:
    """PyTorch's isclose: equal (NaN with NaN under equal_nan), or a finite |a - b| at most
    atol + |rtol b|, computed in the inputs' float dtype (integers and booleans in the
    default float dtype)."""
    dtype = lw.dtype_of(a)
    av, bv = lw.tensor(a), lw.tensor(b)
    close = lw.op("Equal", [av, bv])
    if equal_nan and dtype.is_floating_point:
        close = lw.op("Or", [close, lw.op("And", [lw.op("IsNaN", [av]), lw.op("IsNaN", [bv])])])
    if rtol == 0 and atol == 0:
        return close
    if not dtype.is_floating_point:
        dtype = torch.get_default_dtype()
        av, bv = lw.tensor(a, dtype), lw.tensor(b, dtype)
    allowed = lw.op("Add", [lw.const(float(atol), dtype),
                            lw.op("Abs", [lw.op("Mul", [bv, lw.const(float(rtol), dtype)])])])
    actual = lw.op("Abs", [lw.op("Sub", [av, bv])])
    finite = lw.op("Not", [lw.op("Or", [lw.op("IsNaN", [actual]), lw.op("IsInf", [actual])])])
    within = lw.op("And", [finite, lw.op("LessOrEqual", [actual, allowed])])
    return lw.op("Or", [close, within])
