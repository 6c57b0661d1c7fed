"""Convolution, pooling, batch norm, embedding."""

from __future__ import annotations

import operator
from typing import Any

import numpy as np
import onnx
import torch

from ortmodule.capture.common import OWN_DOMAIN, ExportError
from ortmodule.capture.fx.builder import FALLBACK_HINT, Lowering, UnsupportedOp
from ortmodule.capture.fx.ops.common import _scalar_tensor, aten
from ortmodule.capture.fx.ops.inplace import _rebind
from ortmodule.capture.fx.registry import register


def _per_dim(v: Any, spatial: int) -> list[int]:
    """A window argument as one int per spatial axis (an int or a one-entry list stands for
    every axis)."""
    if isinstance(v, int):
        return [int(v)] * spatial
    v = [int(a) for a in v]
    return v * spatial if len(v) == 1 else v


def _conv_node(lw: Lowering, x: Any, w: Any, b: Any, stride: Any, padding: Any, dilation: Any,
               groups: Any, transposed: bool = False, output_padding: Any = 0) -> Any:
    """ONNX Conv, or ConvTranspose, with torch's symmetric pads; an unbatched input
    [C, *spatial] gets the batch axis PyTorch adds and removes."""
    spatial = lw.rank(w) - 2
    pads = _per_dim(padding, spatial)
    unbatched = lw.rank(x) == lw.rank(w) - 1
    xv = lw.op("Unsqueeze", [lw.tensor(x), lw.ints([0])]) if unbatched else lw.tensor(x)
    inputs = [xv, lw.tensor(w)] + ([lw.tensor(b)] if b is not None else [])
    attrs: dict[str, Any] = {
        "kernel_shape": [int(s) for s in lw.meta(w).shape[2:]],
        "strides": _per_dim(stride, spatial), "pads": pads + pads,
        "dilations": _per_dim(dilation, spatial), "group": int(groups)}
    if transposed:
        out = lw.op("ConvTranspose", inputs,
                    output_padding=_per_dim(output_padding, spatial), **attrs)
    else:
        out = lw.op("Conv", inputs, **attrs)
    return lw.op("Squeeze", [out, lw.ints([0])]) if unbatched else out


@register(aten.conv1d.default, aten.conv2d.default, aten.conv3d.default)
def _conv(lw: Lowering, node: Any, x: Any, w: Any, b: Any = None, stride: Any = 1,
          padding: Any = 0, dilation: Any = 1, groups: Any = 1) -> Any:
    return _conv_node(lw, x, w, b, stride, padding, dilation, groups)


@register(aten.conv_transpose1d.default, aten.conv_transpose2d.input,
          aten.conv_transpose3d.input)
def _conv_transpose(lw: Lowering, node: Any, x: Any, w: Any, b: Any = None, stride: Any = 1,
                    padding: Any = 0, output_padding: Any = 0, groups: Any = 1,
                    dilation: Any = 1) -> Any:
    return _conv_node(lw, x, w, b, stride, padding, dilation, groups, True, output_padding)


@register(aten.convolution.default, aten._convolution.default)
def _convolution(lw: Lowering, node: Any, x: Any, w: Any, b: Any, stride: Any, padding: Any,
                 dilation: Any, transposed: bool, output_padding: Any, groups: Any,
                 *backend_flags: Any) -> Any:
    """aten.convolution and aten._convolution (whose trailing cuDNN flags change nothing
    computed here)."""
    return _conv_node(lw, x, w, b, stride, padding, dilation, groups, bool(transposed),
                      output_padding)


def _pool_args(kernel: Any, stride: Any, padding: Any, spatial: int
               ) -> tuple[list[int], list[int], list[int]]:
    def per_dim(v: Any) -> list[int]:
        if isinstance(v, int):
            return [v] * spatial
        v = [int(a) for a in v]
        return v * spatial if len(v) == 1 else v

    k = per_dim(kernel)
    s = per_dim(stride) if stride else k
    p = per_dim(padding)
    return k, s, p + p


@register(aten.max_pool2d.default, aten.max_pool1d.default)
def _max_pool(lw: Lowering, node: Any, x: Any, kernel: Any, stride: Any = (),
              padding: Any = 0, dilation: Any = 1, ceil_mode: bool = False) -> Any:
    spatial = lw.rank(x) - 2
    k, s, p = _pool_args(kernel, stride, padding, spatial)
    d = _pool_args(dilation, dilation, 0, spatial)[0]
    return lw.op("MaxPool", [lw.tensor(x)], kernel_shape=k, strides=s, pads=p, dilations=d,
                 ceil_mode=int(ceil_mode))


@register(aten.avg_pool1d.default, aten.avg_pool2d.default, aten.avg_pool3d.default)
def _avg_pool(lw: Lowering, node: Any, x: Any, kernel: Any, stride: Any = (),
              padding: Any = 0, ceil_mode: bool = False, count_include_pad: bool = True,
              divisor_override: Any = None) -> Any:
    """ONNX AveragePool (whose ceil_mode windows past the padded input divide by their
    clipped size, as torch's do); torch's divisor_override is the engine's AveragePoolTorch."""
    spatial = lw.rank(x) - 2
    k, s, p = _pool_args(kernel, stride, padding, spatial)
    attrs = {"kernel_shape": k, "strides": s, "pads": p, "ceil_mode": int(ceil_mode),
             "count_include_pad": int(count_include_pad)}
    if divisor_override is not None:
        return lw.op("AveragePoolTorch", [lw.tensor(x)], domain=OWN_DOMAIN,
                     divisor_override=int(divisor_override), **attrs)
    return lw.op("AveragePool", [lw.tensor(x)], **attrs)


@register(aten.adaptive_avg_pool2d.default, aten.adaptive_avg_pool1d.default)
def _adaptive_avg_pool(lw: Lowering, node: Any, x: Any, output_size: Any) -> Any:
    sizes = [int(s) for s in output_size]
    if all(s == 1 for s in sizes):
        return lw.op("GlobalAveragePool", [lw.tensor(x)])
    spatial = lw.meta(x).shape[2:]
    if any(isinstance(s, torch.SymInt) and s.node.expr.free_symbols for s in spatial):
        raise UnsupportedOp(f"adaptive_avg_pool to {sizes} over symbolic sizes has no fx "
                          f"translation; {FALLBACK_HINT}")
    ins = [int(s) for s in spatial]
    if any(i % o for i, o in zip(ins, sizes)):
        raise UnsupportedOp(f"adaptive_avg_pool from {ins} to {sizes} (not a divisor) has no "
                          f"fx translation; {FALLBACK_HINT}")
    k = [i // o for i, o in zip(ins, sizes)]
    return lw.op("AveragePool", [lw.tensor(x)], kernel_shape=k, strides=k)


def _channel_fill(lw: Lowering, x: Any, value: float) -> str:
    channels = lw.op("Shape", [lw.tensor(x)], start=1, end=2)
    return lw.op("ConstantOfShape", [channels],
                 value=_scalar_tensor(value, lw.dtype_of(x)))


def _batch_norm_outputs(lw: Lowering, x: Any, w: Any, b: Any, mean: Any, var: Any,
                        training: bool, momentum: float, eps: float
                        ) -> tuple[str, str | None, str | None]:
    """Y and, in training with running statistics, their updated values (else None)."""
    value = lw.tensor(x)
    scale = lw.tensor(w) if w is not None else _channel_fill(lw, x, 1.0)
    bias = lw.tensor(b) if b is not None else _channel_fill(lw, x, 0.0)
    if mean is None or var is None:
        if not training:
            raise ExportError("batch norm in eval mode without running statistics")
        y, _, _ = lw.op("BatchNormalization",
                        [value, scale, bias, _channel_fill(lw, x, 0.0),
                         _channel_fill(lw, x, 1.0)],
                        outputs=3, epsilon=float(eps), momentum=1.0 - float(momentum),
                        training_mode=1)
        return y, None, None
    if not training:
        if lw.dtype_of(x) != torch.float64:
            return lw.op("BatchNormalization", [value, scale, bias, lw.tensor(mean),
                                                lw.tensor(var)], epsilon=float(eps)), None, None
        return lw.op("BatchNormTorch", [value, scale, bias, lw.tensor(mean), lw.tensor(var)],
                     domain=OWN_DOMAIN, epsilon=_exact(eps), training_mode=0), None, None
    # PyTorch's running_var tracks the unbiased batch variance: the engine's BatchNormTorch.
    y, new_mean, new_var = lw.op("BatchNormTorch", [value, scale, bias, lw.tensor(mean),
                                                    lw.tensor(var)],
                                 outputs=3, domain=OWN_DOMAIN, epsilon=_exact(eps),
                                 momentum=_exact(1.0 - float(momentum)), training_mode=1)
    return y, new_mean, new_var


def _exact(value: float) -> onnx.TensorProto:
    """A float attribute in double precision (a one-element DOUBLE tensor; ONNX's FLOAT is
    32-bit): eager's batch norm adds eps as a double, and a float64 model's 1e-3 rounded to
    float32 (1.0000000475e-3) moves its outputs by 1e-9 relative."""
    return onnx.helper.make_tensor("value", onnx.TensorProto.DOUBLE, [], [float(value)])


@register(aten.batch_norm.default)
def _batch_norm(lw: Lowering, node: Any, x: Any, w: Any, b: Any, mean: Any, var: Any,
                training: bool, momentum: float, eps: float, cudnn: bool = True) -> Any:
    y, new_mean, new_var = _batch_norm_outputs(lw, x, w, b, mean, var, training, momentum, eps)
    if new_mean is not None and new_var is not None:
        _rebind(lw, mean, new_mean)
        _rebind(lw, var, new_var)
    return y


def _used_outputs(node: Any) -> set[int]:
    """The outputs of a multi-output node that its users read (through getitem)."""
    return {int(u.args[1]) for u in node.users if u.target is operator.getitem}


def _saved_statistics(lw: Lowering, node: Any, x: Any, training: bool, eps: float
                      ) -> tuple[str | None, str | None]:
    """ATen batch norm's save_mean and save_invstd: in training the batch mean and
    1 / sqrt(biased batch variance + eps) per channel, in eval empty tensors (as eager's);
    None where nothing reads them. Like eager's, they carry no gradient."""
    if not ({1, 2} & _used_outputs(node)):
        return None, None
    dtype = lw.dtype_of(x)
    if not training:
        empty = lw.const(np.zeros(0), dtype)
        return empty, empty
    axes = lw.ints([0, *range(2, lw.rank(x))])
    value = lw.tensor(x)
    mean = lw.op("ReduceMean", [value, axes], keepdims=1)
    diff = lw.op("Sub", [value, mean])
    var = lw.op("ReduceMean", [lw.op("Mul", [diff, diff]), axes], keepdims=0)
    invstd = lw.op("Reciprocal", [lw.op("Sqrt", [lw.op("Add", [var, lw.const(float(eps),
                                                                               dtype)])])])
    mean = lw.op("Squeeze", [mean, axes])
    return (lw.op("StopGradient", [mean], domain=OWN_DOMAIN),
            lw.op("StopGradient", [invstd], domain=OWN_DOMAIN))


@register(aten.native_batch_norm.default, aten._native_batch_norm_legit.default)
def _native_batch_norm(lw: Lowering, node: Any, x: Any, w: Any, b: Any, mean: Any, var: Any,
                       training: bool, momentum: float, eps: float) -> Any:
    """(Y, save_mean, save_invstd); running statistics, when given, are updated in place."""
    y, new_mean, new_var = _batch_norm_outputs(lw, x, w, b, mean, var, training, momentum, eps)
    if new_mean is not None and new_var is not None:
        _rebind(lw, mean, new_mean)
        _rebind(lw, var, new_var)
    return [y, *_saved_statistics(lw, node, x, training, eps)]


@register(aten._native_batch_norm_legit.no_stats)
def _native_batch_norm_no_stats(lw: Lowering, node: Any, x: Any, w: Any, b: Any,
                                training: bool, momentum: float, eps: float) -> Any:
    return _native_batch_norm(lw, node, x, w, b, None, None, training, momentum, eps)


@register(aten._native_batch_norm_legit_no_training.default)
def _native_batch_norm_no_training(lw: Lowering, node: Any, x: Any, w: Any, b: Any, mean: Any,
                                   var: Any, momentum: float, eps: float) -> Any:
    return _native_batch_norm(lw, node, x, w, b, mean, var, False, momentum, eps)


@register(aten._native_batch_norm_legit_functional.default)
def _native_batch_norm_functional(lw: Lowering, node: Any, x: Any, w: Any, b: Any, mean: Any,
                                  var: Any, training: bool, momentum: float, eps: float) -> Any:
    """(Y, save_mean, save_invstd, running_mean, running_var): the updated running
    statistics as outputs (unchanged in eval)."""
    y, new_mean, new_var = _batch_norm_outputs(lw, x, w, b, mean, var, training, momentum, eps)
    save_mean, save_invstd = _saved_statistics(lw, node, x, training, eps)
    return [y, save_mean, save_invstd, new_mean or lw.tensor(mean), new_var or lw.tensor(var)]


def _reserve(lw: Lowering) -> str:
    """The CPU kernels' empty uint8 workspace output of the _batch_norm_* ops."""
    return lw.const(np.zeros(0, np.uint8), torch.uint8)


@register(aten._batch_norm_with_update.default)
def _batch_norm_with_update(lw: Lowering, node: Any, x: Any, w: Any, b: Any, mean: Any,
                            var: Any, momentum: float, eps: float) -> Any:
    """(Y, save_mean, save_invstd, reserve) in training; the running statistics are updated
    in place."""
    return [*_native_batch_norm(lw, node, x, w, b, mean, var, True, momentum, eps),
            _reserve(lw)]


@register(aten._batch_norm_with_update_functional.default)
def _batch_norm_with_update_functional(lw: Lowering, node: Any, x: Any, w: Any, b: Any,
                                       mean: Any, var: Any, momentum: float, eps: float) -> Any:
    """_batch_norm_with_update with the updated running statistics as outputs 4 and 5."""
    y, save_mean, save_invstd, new_mean, new_var = _native_batch_norm_functional(
        lw, node, x, w, b, mean, var, True, momentum, eps)
    return [y, save_mean, save_invstd, _reserve(lw), new_mean, new_var]


@register(aten._batch_norm_no_update.default)
def _batch_norm_no_update(lw: Lowering, node: Any, x: Any, w: Any, b: Any, mean: Any,
                          var: Any, momentum: float, eps: float) -> Any:
    """Eval-mode batch norm with the running statistics (batch statistics without them):
    (Y, save_mean, save_invstd, reserve)."""
    training = mean is None or var is None
    return [*_native_batch_norm(lw, node, x, w, b, mean, var, training, momentum, eps),
            _reserve(lw)]


@register(aten.embedding.default)
def _embedding(lw: Lowering, node: Any, weight: Any, indices: Any, padding_idx: int = -1,
               scale_grad_by_freq: bool = False, sparse: bool = False) -> Any:
    if scale_grad_by_freq:
        raise NotImplementedError(
            "torch.nn.Embedding(scale_grad_by_freq=True) is not supported; "
            "construct the embedding with scale_grad_by_freq=False")
    w, i = lw.tensor(weight), lw.tensor(indices)
    if padding_idx is None or padding_idx < 0:
        return lw.op("Gather", [w, i], axis=0)
    return lw.op("Embedding", [w, i], domain=OWN_DOMAIN, padding_idx=int(padding_idx))
