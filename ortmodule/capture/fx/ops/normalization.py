"""Normalization, activations with axes, dropout, losses, reductions."""

from __future__ import annotations

import operator
from typing import Any

import numpy as np
import torch

from ortmodule.capture.common import OWN_DOMAIN, ExportError
from ortmodule.capture.fx.builder import FALLBACK_HINT, Lowering, UnsupportedOp, onnx_dtype
from ortmodule.capture.fx.ops.common import _axis, _out, _scalar_tensor, aten
from ortmodule.capture.fx.ops.inplace import _rebind
from ortmodule.capture.fx.registry import TABLE, Fn, register


def _weight_or_ones(lw: Lowering, x: Any, shape: Any, w: Any) -> str:
    """A norm's weight, or ones of the normalised shape where the module has none."""
    if w is not None:
        return lw.tensor(w)
    return lw.op("ConstantOfShape", [lw.shape(shape)],
                 value=_scalar_tensor(1.0, lw.dtype_of(x)))


def _needs_exact_eps(lw: Lowering, x: Any, shape: Any, eps: float) -> bool:
    """Whether ONNX's 32-bit FLOAT epsilon would move a float64 norm: eager adds eps as a
    double, and 1e-5 rounded to float32 (9.99999975e-6) moved a float64 GPT-2's gradients by
    4.5e-10 relative (activations of small variance)."""
    return (lw.dtype_of(x) == torch.float64 and float(np.float32(eps)) != float(eps)
            and len(shape) > 0)


def _layer_norm_exact(lw: Lowering, x: Any, shape: Any, w: Any, b: Any, eps: float
                      ) -> tuple[str, str, str]:
    """Layer norm written out, eps a float64 constant: y = (x - mean) * rstd * w + b with
    rstd = 1 / sqrt(biased variance + eps) over the trailing len(shape) dims; (y, mean,
    rstd), the statistics kept as size-1 dims."""
    dtype = lw.dtype_of(x)
    axes = lw.ints(list(range(-len(shape), 0)))
    value = lw.tensor(x)
    mean = lw.op("ReduceMean", [value, axes], keepdims=1)
    diff = lw.op("Sub", [value, mean])
    var = lw.op("ReduceMean", [lw.op("Mul", [diff, diff]), axes], keepdims=1)
    rstd = lw.op("Reciprocal", [lw.op("Sqrt", [lw.op("Add", [var, lw.const(float(eps), dtype)])])])
    y = lw.op("Mul", [diff, rstd])
    if w is not None:
        y = lw.op("Mul", [y, lw.tensor(w)])
    if b is not None:
        y = lw.op("Add", [y, lw.tensor(b)])
    return y, mean, rstd


@register(aten.layer_norm.default)
def _layer_norm(lw: Lowering, node: Any, x: Any, shape: Any, w: Any = None, b: Any = None,
                eps: float = 1e-5, cudnn: bool = True) -> Any:
    if _needs_exact_eps(lw, x, shape, eps):
        return _layer_norm_exact(lw, x, shape, w, b, eps)[0]
    inputs = [lw.tensor(x), _weight_or_ones(lw, x, shape, w)] + ([lw.tensor(b)] if b is not None else [])
    return lw.op("LayerNormalization", inputs, axis=-len(shape), epsilon=float(eps))


@register(aten.native_layer_norm.default)
def _native_layer_norm(lw: Lowering, node: Any, x: Any, shape: Any, w: Any, b: Any,
                       eps: float) -> Any:
    """The normalized output, the mean and the inverse deviation (over the normalized
    dims, kept as size 1), which in eager carry no gradient. A float64 norm whose eps float32
    cannot hold is written out (_layer_norm_exact): ONNX's epsilon attribute is 32-bit."""
    if _needs_exact_eps(lw, x, shape, eps):
        y, mean, rstd = _layer_norm_exact(lw, x, shape, w, b, eps)
    else:
        inputs = [lw.tensor(x), _weight_or_ones(lw, x, shape, w)] + (
            [lw.tensor(b)] if b is not None else [])
        y, mean, rstd = lw.op("LayerNormalization", inputs, outputs=3, axis=-len(shape),
                              epsilon=float(eps))
    return [y, lw.op("StopGradient", [mean], domain=OWN_DOMAIN),
            lw.op("StopGradient", [rstd], domain=OWN_DOMAIN)]


@register(aten.rms_norm.default)
def _rms_norm(lw: Lowering, node: Any, x: Any, shape: Any, w: Any = None,
              eps: float | None = None) -> Any:
    """torch.nn.RMSNorm / F.rms_norm over the trailing len(shape) dims, as ONNX Runtime's
    SimplifiedLayerNormalization (what passes/rmsnorm_fusion.h makes of the same norm written
    out element-wise); eps None is torch's default, the machine epsilon of x's dtype."""
    if eps is None:
        eps = torch.finfo(lw.dtype_of(x)).eps
    return lw.op("SimplifiedLayerNormalization",
                 [lw.tensor(x), _weight_or_ones(lw, x, shape, w)], domain="com.microsoft",
                 axis=-len(shape), epsilon=float(eps))


@register(aten.softmax.int, aten._softmax.default, aten.log_softmax.int,
          aten._log_softmax.default)
def _softmax(lw: Lowering, node: Any, x: Any, dim: int, third: Any = None) -> Any:
    want = _out(node).dtype
    value = lw.tensor(x, want)
    op_type = "LogSoftmax" if "log_softmax" in str(node.target) else "Softmax"
    return lw.op(op_type, [value], axis=dim)


@register(aten._safe_softmax.default)
def _safe_softmax(lw: Lowering, node: Any, x: Any, dim: int, dtype: Any = None) -> Any:
    """Softmax whose rows of only -inf are 0 (attention over fully masked rows), with a zero
    gradient there: those rows are replaced by zeros before the softmax too, so that no NaN
    reaches the backward."""
    want = _out(node).dtype
    value = lw.tensor(x, want)
    axis = _axis(dim, lw.rank(x))
    masked = lw.op("Cast", [lw.op("Equal", [value, lw.const(float("-inf"), want)])],
                   to=onnx_dtype(want))
    empty = lw.op("Equal", [lw.op("ReduceMin", [masked, lw.ints([axis])], keepdims=1),
                            lw.const(1.0, want)])
    zero = lw.const(0.0, want)
    safe = lw.op("Where", [empty, zero, value])
    return lw.op("Where", [empty, zero, lw.op("Softmax", [safe], axis=axis)])


@register(aten.dropout.default, aten.feature_dropout.default)
def _dropout(lw: Lowering, node: Any, x: Any, p: float, train: bool) -> Any:
    if node.target is aten.feature_dropout.default and train and p > 0:
        raise UnsupportedOp(f"channel dropout (Dropout2d) has no engine op; {FALLBACK_HINT}")
    if not train or p == 0:
        return lw.op("Identity", [lw.tensor(x)])
    return lw.op("Dropout", [lw.tensor(x), lw.const(float(p), torch.float32),
                             lw.const(True, torch.bool)])


@register(aten.cross_entropy_loss.default)
def _cross_entropy(lw: Lowering, node: Any, x: Any, target: Any, weight: Any = None,
                   reduction: int = 1, ignore_index: int = -100,
                   label_smoothing: float = 0.0) -> Any:
    if label_smoothing:
        raise UnsupportedOp(f"cross_entropy with label_smoothing has no fx translation; "
                          f"{FALLBACK_HINT}")
    if lw.dtype_of(target) != torch.int64:
        raise UnsupportedOp(f"cross_entropy with probability targets has no fx translation; "
                          f"{FALLBACK_HINT}")
    inputs = [lw.tensor(x), lw.tensor(target)]
    if weight is not None:
        inputs.append(lw.tensor(weight))
    if lw.rank(x) == 1:  # an unbatched sample: [C] and a 0-d target
        inputs[0] = lw.op("Unsqueeze", [inputs[0], lw.ints([0])])
        inputs[1] = lw.op("Unsqueeze", [inputs[1], lw.ints([0])])
    out = lw.op("SoftmaxCrossEntropyLoss", inputs, ignore_index=int(ignore_index),
                reduction=("none", "mean", "sum")[reduction])
    if lw.rank(x) == 1 and reduction == 0:
        out = lw.op("Squeeze", [out, lw.ints([0])])
    return out


@register(aten.nll_loss.default, aten.nll_loss_nd.default, aten.nll_loss2d.default)
def _nll_loss(lw: Lowering, node: Any, x: Any, target: Any, weight: Any = None,
              reduction: int = 1, ignore_index: int = -100) -> Any:
    inputs = [lw.tensor(x), lw.tensor(target)]
    if weight is not None:
        inputs.append(lw.tensor(weight))
    if lw.rank(x) == 1:
        raise UnsupportedOp(f"nll_loss of an unbatched sample has no fx translation; "
                          f"{FALLBACK_HINT}")
    return lw.op("NegativeLogLikelihoodLoss", inputs, ignore_index=int(ignore_index),
                 reduction=("none", "mean", "sum")[reduction])


def _reduce(op_type: str) -> Fn:
    def translate(lw: Lowering, node: Any, x: Any, dims: Any = None, keepdim: bool = False,
                  dtype: Any = None) -> Any:
        if isinstance(dims, torch.dtype):  # the .default overloads: (x, dtype)
            dims = None
        want = _out(node).dtype
        value = lw.tensor(x, want)
        if lw.rank(x) == 0:  # dim 0 or -1 of a 0-d tensor: its one element
            dims = None
        if dims is None or (isinstance(dims, (list, tuple)) and len(dims) == 0):
            return lw.op(op_type, [value], keepdims=int(bool(keepdim)))
        if isinstance(dims, int):
            dims = [dims]
        return lw.op(op_type, [value, lw.ints(dims)], keepdims=int(bool(keepdim)))
    return translate


TABLE[aten.mean.dim] = _reduce("ReduceMean")
TABLE[aten.mean.default] = _reduce("ReduceMean")
TABLE[aten.sum.dim_IntList] = _reduce("ReduceSum")
TABLE[aten.sum.default] = _reduce("ReduceSum")
TABLE[aten.amax.default] = _reduce("ReduceMax")
TABLE[aten.amin.default] = _reduce("ReduceMin")


@register(aten.cumsum.default)
def _cumsum(lw: Lowering, node: Any, x: Any, dim: int, dtype: Any = None) -> Any:
    want = _out(node).dtype
    if lw.rank(x) == 0:
        return lw.op("Identity", [lw.tensor(x, want)])
    return lw.op("CumSum", [lw.tensor(x, want), lw.const(int(dim), torch.int64)])


# ---- per-sample norms: torch's GroupNorm and InstanceNorm ----

def _channels_fill(lw: Lowering, x: Any, value: float) -> str:
    channels = lw.op("Shape", [lw.tensor(x)], start=1, end=2)
    return lw.op("ConstantOfShape", [channels], value=_scalar_tensor(value, lw.dtype_of(x)))


def _affine(lw: Lowering, x: Any, w: Any, b: Any) -> tuple[str, str]:
    return (lw.tensor(w) if w is not None else _channels_fill(lw, x, 1.0),
            lw.tensor(b) if b is not None else _channels_fill(lw, x, 0.0))


def _group_statistics(lw: Lowering, x: Any, groups: int, eps: float) -> tuple[str, str]:
    """native_group_norm's mean and rstd, [N, G]: differentiable, as eager's are."""
    value = lw.tensor(x)
    grouped = lw.op("Reshape", [value, lw.ints([0, groups, -1])])
    axis = lw.ints([2])
    mean = lw.op("ReduceMean", [grouped, axis], keepdims=1)
    diff = lw.op("Sub", [grouped, mean])
    var = lw.op("ReduceMean", [lw.op("Mul", [diff, diff]), axis], keepdims=0)
    rstd = lw.op("Reciprocal", [lw.op("Sqrt", [lw.op("Add", [
        var, lw.const(float(eps), lw.dtype_of(x))])])])
    return lw.op("Squeeze", [mean, axis]), rstd


@register(aten.group_norm.default)
def _group_norm(lw: Lowering, node: Any, x: Any, groups: int, w: Any = None, b: Any = None,
                eps: float = 1e-5, cudnn: bool = True) -> Any:
    scale, bias = _affine(lw, x, w, b)
    y, _, _ = lw.op("GroupNorm", [lw.tensor(x), scale, bias], outputs=3, domain=OWN_DOMAIN,
                    num_groups=int(groups), epsilon=float(eps))
    return y


@register(aten.native_group_norm.default)
def _native_group_norm(lw: Lowering, node: Any, x: Any, w: Any, b: Any, n: Any, c: Any,
                       hxw: Any, groups: int, eps: float) -> Any:
    y = _group_norm(lw, node, x, groups, w, b, eps)
    used = {int(u.args[1]) for u in node.users if u.target is operator.getitem}
    if not ({1, 2} & used):
        return [y, None, None]
    return [y, *_group_statistics(lw, x, int(groups), eps)]


@register(aten.instance_norm.default)
def _instance_norm(lw: Lowering, node: Any, x: Any, w: Any, b: Any, running_mean: Any,
                   running_var: Any, use_input_stats: bool, momentum: float, eps: float,
                   cudnn: bool = True) -> Any:
    """nn.InstanceNorm1d/2d/3d. With use_input_stats (training, or no running statistics)
    each (sample, channel) is normalised by its own statistics, and running statistics, when
    tracked, move by momentum towards the batch average of the per-sample means and unbiased
    variances; otherwise the running statistics normalise, as batch norm in eval does."""
    scale, bias = _affine(lw, x, w, b)
    value = lw.tensor(x)
    if not use_input_stats:
        if running_mean is None or running_var is None:
            raise ExportError("instance_norm without input statistics needs running statistics")
        return lw.op("BatchNormalization", [value, scale, bias, lw.tensor(running_mean),
                                            lw.tensor(running_var)], epsilon=float(eps))
    y = lw.op("InstanceNormalization", [value, scale, bias], epsilon=float(eps))
    if running_mean is not None and running_var is not None:
        new_mean, new_var = _instance_running_stats(lw, x, running_mean, running_var,
                                                    float(momentum))
        _rebind(lw, running_mean, new_mean)
        _rebind(lw, running_var, new_var)
    return y


def _instance_running_stats(lw: Lowering, x: Any, running_mean: Any, running_var: Any,
                            momentum: float) -> tuple[str, str]:
    dtype = lw.dtype_of(x)
    flat = lw.op("Reshape", [lw.op("StopGradient", [lw.tensor(x)], domain=OWN_DOMAIN),
                             lw.ints([0, 0, -1])])
    axis = lw.ints([2])
    mean = lw.op("ReduceMean", [flat, axis], keepdims=1)
    diff = lw.op("Sub", [flat, mean])
    count = lw.op("Cast", [lw.op("Shape", [flat], start=2, end=3)], to=onnx_dtype(dtype))
    unbiased = lw.op("Div", [lw.op("ReduceSum", [lw.op("Mul", [diff, diff]), axis], keepdims=0),
                             lw.op("Sub", [count, lw.const(1.0, dtype)])])
    batch = lw.ints([0])
    mean_c = lw.op("ReduceMean", [lw.op("Squeeze", [mean, axis]), batch], keepdims=0)
    var_c = lw.op("ReduceMean", [unbiased, batch], keepdims=0)
    keep, take = lw.const(1.0 - momentum, dtype), lw.const(momentum, dtype)

    def blend(old: Any, new: str) -> str:
        return lw.op("Add", [lw.op("Mul", [lw.tensor(old), keep]), lw.op("Mul", [new, take])])

    return blend(running_mean, mean_c), blend(running_var, var_c)
