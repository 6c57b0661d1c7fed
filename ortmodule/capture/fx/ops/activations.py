"""Activations and unary math beyond the basic element-wise family: the ELU family, hard
sigmoid/swish/tanh, mish, softplus with beta and threshold, rounding, the trigonometric and
hyperbolic functions and their inverses, atan2, erfcx and log_ndtr; clamps with tensor
bounds. Each reaches a native op (docs/supported_ops.md) whose gradient is eager's.
"""

from __future__ import annotations

from typing import Any

from ortmodule.capture.common import OWN_DOMAIN
from ortmodule.capture.fx.builder import Lowering
from ortmodule.capture.fx.ops.common import _out, aten
from ortmodule.capture.fx.ops.inplace import _rebind
from ortmodule.capture.fx.registry import TABLE, Fn, register

# torch's SELU constants (aten.selu is aten.elu with these).
_SELU_ALPHA = 1.6732632423543772848170429916717
_SELU_SCALE = 1.0507009873554804934193349852946


def _float_input(lw: Lowering, node: Any, x: Any) -> str:
    """``x`` in the node's result dtype (integer inputs of torch's float functions)."""
    return lw.tensor(x, _out(node).dtype)


@register(aten.elu.default)
def _elu(lw: Lowering, node: Any, x: Any, alpha: Any = 1.0, scale: Any = 1.0,
         input_scale: Any = 1.0) -> Any:
    """aten.elu: x > 0 ? scale x : alpha scale (exp(input_scale x) - 1), in ONNX's form when
    one has these parameters (Elu, Selu, Celu), else ai.ortmodule ScaledElu."""
    v = _float_input(lw, node, x)
    alpha, scale, input_scale = float(alpha), float(scale), float(input_scale)
    if scale == 1.0 and input_scale == 1.0:
        return lw.op("Elu", [v], alpha=alpha)
    if input_scale == 1.0:
        return lw.op("Selu", [v], alpha=alpha, gamma=scale)
    return lw.op("ScaledElu", [v], domain=OWN_DOMAIN, alpha=alpha, scale=scale,
                 input_scale=input_scale)


@register(aten.selu.default)
def _selu(lw: Lowering, node: Any, x: Any) -> Any:
    return lw.op("Selu", [_float_input(lw, node, x)], alpha=_SELU_ALPHA, gamma=_SELU_SCALE)


@register(aten.celu.default)
def _celu(lw: Lowering, node: Any, x: Any, alpha: Any = 1.0) -> Any:
    return lw.op("Celu", [_float_input(lw, node, x)], alpha=float(alpha))


@register(aten.hardsigmoid.default)
def _hardsigmoid(lw: Lowering, node: Any, x: Any) -> Any:
    return lw.op("HardSigmoid", [_float_input(lw, node, x)], alpha=1.0 / 6.0, beta=0.5)


def _unary(op_type: str, domain: str = "") -> Fn:
    def translate(lw: Lowering, node: Any, x: Any) -> Any:
        return lw.op(op_type, [_float_input(lw, node, x)], domain=domain)
    return translate


for _op, _onnx in ((aten.hardswish, "HardSwish"), (aten.mish, "Mish"), (aten.tan, "Tan"),
                   (aten.asin, "Asin"), (aten.acos, "Acos"), (aten.atan, "Atan"),
                   (aten.sinh, "Sinh"), (aten.cosh, "Cosh"), (aten.asinh, "Asinh"),
                   (aten.acosh, "Acosh"), (aten.atanh, "Atanh")):
    TABLE[_op.default] = _unary(_onnx)
TABLE[aten.special_erfcx.default] = _unary("Erfcx", OWN_DOMAIN)
TABLE[aten.special_log_ndtr.default] = _unary("LogNdtr", OWN_DOMAIN)


@register(aten.erfc.default, aten.special_erfc.default)
def _erfc(lw: Lowering, node: Any, x: Any) -> Any:
    """erfc(a) = erfcx(a) exp(-a^2) for a = |x| (no cancellation of 1 - erf(x) in the tail),
    and 2 - erfc(-x) below zero (erfc(-x) is at most 1 there: no cancellation either). a
    is taken through a select, not Abs, so that the gradient at 0 is erfc's."""
    v = _float_input(lw, node, x)
    dtype = _out(node).dtype
    negative = lw.op("Less", [v, lw.const(0.0, dtype)])
    a = lw.op("Where", [negative, lw.op("Neg", [v]), v])
    tail = lw.op("Mul", [lw.op("Erfcx", [a], domain=OWN_DOMAIN),
                         lw.op("Exp", [lw.op("Neg", [lw.op("Mul", [a, a])])])])
    return lw.op("Where", [negative, lw.op("Sub", [lw.const(2.0, dtype), tail]), tail])


@register(aten.round.default, aten.round.decimals)
def _round(lw: Lowering, node: Any, x: Any, decimals: int = 0) -> Any:
    """Half to even; with decimals, torch's nearbyint(x * 10^d) / 10^d (x / 10^-d, then
    times 10^-d, for d < 0), in x's dtype."""
    v = lw.tensor(x)
    if not decimals:
        return lw.op("Round", [v])
    dtype = lw.dtype_of(x)
    ten_pow = lw.const(10.0 ** abs(int(decimals)), dtype)
    if decimals > 0:
        return lw.op("Div", [lw.op("Round", [lw.op("Mul", [v, ten_pow])]), ten_pow])
    return lw.op("Mul", [lw.op("Round", [lw.op("Div", [v, ten_pow])]), ten_pow])


@register(aten.atan2.default)
def _atan2(lw: Lowering, node: Any, a: Any, b: Any) -> Any:
    dtype = _out(node).dtype
    return lw.op("Atan2", [lw.tensor(a, dtype), lw.tensor(b, dtype)], domain=OWN_DOMAIN)


@register(aten.hardtanh.default, aten.relu6.default)
def _hardtanh(lw: Lowering, node: Any, x: Any, low: Any = -1.0, high: Any = 1.0) -> Any:
    """Clip whose gradient passes strictly inside the bounds (hardtanh_backward)."""
    if node.target in (aten.relu6.default, aten.relu6_.default):
        low, high = 0.0, 6.0
    return lw.op("HardTanh", [lw.tensor(x)], domain=OWN_DOMAIN, min=float(low), max=float(high))


def _lower_bound(lw: Lowering, v: str, lo: str) -> str:
    """max(v, lo) as torch.clamp: v's gradient where v >= lo, lo's where v < lo; NaN in v
    stays."""
    return lw.op("Where", [lw.op("Less", [v, lo]), lo, v])


def _upper_bound(lw: Lowering, v: str, hi: str) -> str:
    return lw.op("Where", [lw.op("Greater", [v, hi]), hi, v])


@register(aten.clamp.Tensor, aten.clip.Tensor)
def _clamp_tensor(lw: Lowering, node: Any, x: Any, low: Any = None, high: Any = None) -> Any:
    """torch.clamp with tensor bounds (broadcast): the gradient goes to x where
    min <= x <= max, to min below it, to max above it."""
    dtype = _out(node).dtype
    out = lw.tensor(x, dtype)
    if low is not None:
        out = _lower_bound(lw, out, lw.tensor(low, dtype))
    if high is not None:
        out = _upper_bound(lw, out, lw.tensor(high, dtype))
    return out


# (clamp_min.default and clamp_max.default with scalar bounds: Clip, in reductions.py)
@register(aten.clamp_min.Tensor)
def _clamp_min(lw: Lowering, node: Any, x: Any, low: Any) -> Any:
    dtype = _out(node).dtype
    return _lower_bound(lw, lw.tensor(x, dtype), lw.tensor(low, dtype))


@register(aten.clamp_max.Tensor)
def _clamp_max(lw: Lowering, node: Any, x: Any, high: Any) -> Any:
    dtype = _out(node).dtype
    return _upper_bound(lw, lw.tensor(x, dtype), lw.tensor(high, dtype))


@register(aten.softplus.default)
def _softplus(lw: Lowering, node: Any, x: Any, beta: Any = 1, threshold: Any = 20) -> Any:
    """log(1 + exp(beta x)) / beta, and x itself where beta x > threshold (as torch, forward
    and gradient)."""
    dtype = _out(node).dtype
    v = lw.tensor(x, dtype)
    scaled = v if beta == 1 else lw.op("Mul", [v, lw.const(float(beta), dtype)])
    smooth = lw.op("Softplus", [scaled])
    if beta != 1:
        smooth = lw.op("Div", [smooth, lw.const(float(beta), dtype)])
    linear = lw.op("Greater", [scaled, lw.const(float(threshold), dtype)])
    return lw.op("Where", [linear, v, smooth])


def _inplace(functional: Any) -> Fn:
    def translate(lw: Lowering, node: Any, x: Any, *rest: Any) -> Any:
        out = TABLE[functional](lw, node, x, *rest)
        _rebind(lw, x, out)
        return out
    return translate


for _op in ("elu", "selu", "celu", "hardsigmoid", "hardswish", "mish", "hardtanh", "relu6",
            "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh"):
    TABLE[getattr(aten, _op + "_").default] = _inplace(getattr(aten, _op).default)
TABLE[aten.round_.default] = _inplace(aten.round.default)
TABLE[aten.round_.decimals] = _inplace(aten.round.decimals)
TABLE[aten.clamp_min_.default] = _inplace(aten.clamp_min.default)
TABLE[aten.clamp_min_.Tensor] = _inplace(aten.clamp_min.Tensor)
TABLE[aten.clamp_max_.default] = _inplace(aten.clamp_max.default)
TABLE[aten.clamp_max_.Tensor] = _inplace(aten.clamp_max.Tensor)
TABLE[aten.clamp_.Tensor] = _inplace(aten.clamp.Tensor)
TABLE[aten.atan2_.default] = _inplace(aten.atan2.default)
