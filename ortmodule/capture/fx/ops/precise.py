"""Elementwise math PyTorch computes with care that a naive formula would lose: log1p and
expm1 near zero (Kahan's and the half-angle forms), fmod and remainder with their signs,
the floating-point predicates."""

from __future__ import annotations

from typing import Any

from ortmodule.capture.fx.builder import Lowering
from ortmodule.capture.fx.ops.common import _out, _result_dtype, aten
from ortmodule.capture.fx.registry import register


def log1p_value(lw: Lowering, v: Any, dtype: Any) -> Any:
    """log(1 + v) as v * log(u) / (u - 1) with u = 1 + v (exact to a few ulps where u - 1
    rounds), v itself where u rounds to 1; the divisor of the unused branch is kept away
    from zero so that no NaN reaches the gradient."""
    one = lw.const(1.0, dtype)
    u = lw.op("Add", [v, one])
    d = lw.op("Sub", [u, one])
    tiny = lw.op("Equal", [d, lw.const(0.0, dtype)])
    safe = lw.op("Where", [tiny, one, d])
    kahan = lw.op("Div", [lw.op("Mul", [v, lw.op("Log", [u])]), safe])
    return lw.op("Where", [tiny, v, kahan])


@register(aten.log1p.default)
def _log1p(lw: Lowering, node: Any, x: Any) -> Any:
    dtype = _out(node).dtype
    return log1p_value(lw, lw.tensor(x, dtype), dtype)


@register(aten.expm1.default)
def _expm1(lw: Lowering, node: Any, x: Any) -> Any:
    """exp(x) - 1 as 2t / (1 - t) with t = tanh(x / 2) for |x| < 1/2 (no cancellation),
    exp(x) - 1 elsewhere (no cancellation either)."""
    dtype = _out(node).dtype
    v = lw.tensor(x, dtype)
    small = lw.op("Less", [lw.op("Abs", [v]), lw.const(0.5, dtype)])
    zero = lw.const(0.0, dtype)
    half = lw.op("Where", [small, v, zero])  # the unused branch's argument: finite
    t = lw.op("Tanh", [lw.op("Mul", [half, lw.const(0.5, dtype)])])
    near = lw.op("Div", [lw.op("Mul", [t, lw.const(2.0, dtype)]),
                         lw.op("Sub", [lw.const(1.0, dtype), t])])
    far = lw.op("Sub", [lw.op("Exp", [v]), lw.const(1.0, dtype)])
    return lw.op("Where", [small, near, far])


@register(aten.fmod.Tensor, aten.fmod.Scalar)
def _fmod(lw: Lowering, node: Any, a: Any, b: Any) -> Any:
    """C's fmod: the sign of the dividend."""
    dtype = _result_dtype(lw, a, b)
    return lw.op("Mod", [lw.tensor(a, dtype), lw.tensor(b, dtype)], fmod=1)


@register(aten.remainder.Tensor, aten.remainder.Scalar)
def _remainder(lw: Lowering, node: Any, a: Any, b: Any) -> Any:
    """Python's modulo: the sign of the divisor (fmod, moved by b where the signs differ)."""
    dtype = _result_dtype(lw, a, b)
    av, bv = lw.tensor(a, dtype), lw.tensor(b, dtype)
    if not dtype.is_floating_point:
        return lw.op("Mod", [av, bv], fmod=0)
    m = lw.op("Mod", [av, bv], fmod=1)
    zero = lw.const(0.0, dtype)
    nonzero = lw.op("Not", [lw.op("Equal", [m, zero])])
    signs = lw.op("Xor", [lw.op("Less", [m, zero]), lw.op("Less", [bv, zero])])
    return lw.op("Where", [lw.op("And", [nonzero, signs]), lw.op("Add", [m, bv]), m])


@register(aten.isnan.default)
def _isnan(lw: Lowering, node: Any, x: Any) -> Any:
    if not lw.dtype_of(x).is_floating_point:
        return lw.op("Not", [lw.op("Equal", [lw.tensor(x), lw.tensor(x)])])
    return lw.op("IsNaN", [lw.tensor(x)])


@register(aten.isinf.default)
def _isinf(lw: Lowering, node: Any, x: Any) -> Any:
    return lw.op("IsInf", [lw.tensor(x)])


@register(aten.isfinite.default)
def _isfinite(lw: Lowering, node: Any, x: Any) -> Any:
    if not lw.dtype_of(x).is_floating_point:
        return lw.op("Equal", [lw.tensor(x), lw.tensor(x)])
    v = lw.tensor(x)
    return lw.op("Not", [lw.op("Or", [lw.op("IsNaN", [v]), lw.op("IsInf", [v])])])


@register(aten.isposinf.default, aten.isneginf.default)
def _isposinf(lw: Lowering, node: Any, x: Any) -> Any:
    positive = node.target is aten.isposinf.default
    if not lw.dtype_of(x).is_floating_point:
        v = lw.tensor(x)
        return lw.op("Not", [lw.op("Equal", [v, v])])
    return lw.op("IsInf", [lw.tensor(x)], detect_positive=int(positive),
                 detect_negative=int(not positive))

