"""Translations from ATen ops to ONNX where the stock torch.onnx translation is wrong
for training: torch.onnx's custom translation table. Each training semantic is written
here once for this lowering (the fx lowering has its own translations in ``fx/ops``)."""

from __future__ import annotations

from typing import Any

import onnx
import torch
from onnxscript import opset20 as op
from onnxscript import values

from ortmodule.capture.common import OWN_DOMAIN

# The engine's own ops (ai.ortmodule domain) that translations emit.
own = values.Opset(OWN_DOMAIN, 1)


def _register_own_schemas() -> None:
    """Declares the engine's own ops to onnx so that onnxscript can emit them."""
    param = onnx.defs.OpSchema.FormalParameter
    floats = ["tensor(float)", "tensor(double)", "tensor(float16)", "tensor(bfloat16)"]
    if not onnx.defs.has("Embedding", OWN_DOMAIN):
        onnx.defs.register_schema(onnx.defs.OpSchema(
            "Embedding", OWN_DOMAIN, 1,
            doc="Gather along axis 0 whose padding_idx row receives no gradient.",
            inputs=[param("weight", "T"), param("indices", "Tind")],
            outputs=[param("output", "T")],
            type_constraints=[("T", ["tensor(float)", "tensor(double)"], "weights"),
                              ("Tind", ["tensor(int32)", "tensor(int64)"], "indices")],
            attributes=[onnx.defs.OpSchema.Attribute(
                "padding_idx", onnx.defs.OpSchema.AttrType.INT, "row without gradient")]))
    if not onnx.defs.has("StopGradient", OWN_DOMAIN):
        onnx.defs.register_schema(onnx.defs.OpSchema(
            "StopGradient", OWN_DOMAIN, 1,
            doc="Identity whose output carries no gradient (Tensor.detach).",
            inputs=[param("input", "T")], outputs=[param("output", "T")],
            type_constraints=[("T", [*floats, "tensor(int64)", "tensor(int32)",
                                     "tensor(bool)", "tensor(uint8)", "tensor(int8)"],
                               "any tensor")]))
    if not onnx.defs.has("BatchNormTorch", OWN_DOMAIN):
        attr = onnx.defs.OpSchema.Attribute
        kind = onnx.defs.OpSchema.AttrType
        onnx.defs.register_schema(onnx.defs.OpSchema(
            "BatchNormTorch", OWN_DOMAIN, 1,
            doc="BatchNormalization whose running_var tracks the unbiased batch variance "
                "(PyTorch's batch norm); ONNX's tracks the biased one.",
            inputs=[param("X", "T"), param("scale", "T"), param("B", "T"),
                    param("input_mean", "T"), param("input_var", "T")],
            outputs=[param("Y", "T"), param("running_mean", "T"), param("running_var", "T")],
            type_constraints=[("T", ["tensor(float)", "tensor(double)"], "floats")],
            # One-element DOUBLE tensors: eager adds eps and weighs by momentum in double
            # precision, and ONNX's FLOAT attributes are 32-bit (a float64 model's eps=1e-3
            # would move its outputs by 1e-9 relative).
            attributes=[attr("epsilon", kind.TENSOR, "added to the variance"),
                        attr("momentum", kind.TENSOR, "weight of the old running value"),
                        attr("training_mode", kind.INT, "normalize with batch statistics")]))


_register_own_schemas()


def _double(value: float) -> onnx.TensorProto:
    """An attribute of BatchNormTorch: a one-element DOUBLE tensor."""
    return onnx.helper.make_tensor("value", onnx.TensorProto.DOUBLE, [], [float(value)])


def _channel_ones(input: Any, value: float) -> Any:
    return op.Expand(op.Constant(value_float=value), op.Shape(input, start=1, end=2))


def _saved_statistics(input: Any, eps: float) -> tuple[Any, Any]:
    """ATen batch norm's save_mean and save_invstd in training: the batch mean and
    1 / sqrt(biased batch variance + eps) per channel (axes 0 and 2.. of [N, C, ...]). Like
    eager's, they carry no gradient."""
    rank = op.Size(op.Shape(input))
    axes = op.Concat(op.Constant(value_ints=[0]),
                     op.Range(op.Constant(value_int=2), rank, op.Constant(value_int=1)), axis=0)
    mean = op.ReduceMean(input, axes, keepdims=1)
    diff = op.Sub(input, mean)
    var = op.ReduceMean(op.Mul(diff, diff), axes, keepdims=0)
    invstd = op.Reciprocal(op.Sqrt(op.Add(var, op.CastLike(op.Constant(value_float=eps), var))))
    return own.StopGradient(op.Squeeze(mean, axes)), own.StopGradient(invstd)


def batch_norm_functional(input: Any, weight: Any = None, bias: Any = None,
                          running_mean: Any = None, running_var: Any = None,
                          training: bool = False, momentum: float = 0.1,
                          eps: float = 1e-5) -> tuple[Any, Any, Any, Any, Any]:
    """aten._native_batch_norm_legit_functional: batch norm that returns the updated
    running statistics. The stock translation always lowers it as inference batch norm
    (normalizing with the running statistics, which it returns unchanged)."""
    if weight is None:
        weight = _channel_ones(input, 1.0)
    if bias is None:
        bias = _channel_ones(input, 0.0)
    if not training:
        y = op.BatchNormalization(input, weight, bias, running_mean, running_var, epsilon=eps)
        empty = op.CastLike(op.Constant(value_floats=[]), input)
        return y, empty, empty, running_mean, running_var
    # ONNX's momentum weights the old running value; PyTorch's weights the batch value.
    # PyTorch updates running_var with the unbiased batch variance (ONNX's
    # BatchNormalization with the biased one): the engine's BatchNormTorch does.
    y, new_mean, new_var = own.BatchNormTorch(
        input, weight, bias, running_mean, running_var,
        epsilon=_double(eps), momentum=_double(1.0 - momentum), training_mode=1)
    save_mean, save_invstd = _saved_statistics(input, eps)
    return y, save_mean, save_invstd, new_mean, new_var


def batch_norm_no_stats(input: Any, weight: Any = None, bias: Any = None,
                        training: bool = True, momentum: float = 0.1,
                        eps: float = 1e-5) -> tuple[Any, Any, Any]:
    """aten._native_batch_norm_legit.no_stats (track_running_stats=False): always
    normalizes with batch statistics. The stock translation feeds computed statistics to
    inference batch norm, whose gradient would have to flow through them."""
    if weight is None:
        weight = _channel_ones(input, 1.0)
    if bias is None:
        bias = _channel_ones(input, 0.0)
    # Training-mode BatchNormalization needs running statistics to update; these are
    # throwaway values (its running-statistic outputs are not used).
    y, _, _ = op.BatchNormalization(
        input, weight, bias, _channel_ones(input, 0.0), _channel_ones(input, 1.0),
        epsilon=_double(eps), momentum=_double(1.0 - momentum), training_mode=1)
    save_mean, save_invstd = _saved_statistics(input, eps)
    return y, save_mean, save_invstd


def embedding(weight: Any, indices: Any, padding_idx: int = -1,
              scale_grad_by_freq: bool = False, sparse: bool = False) -> Any:
    """aten.embedding: the stock translation is a plain Gather, which drops padding_idx,
    so the padding row would get a gradient that torch.nn.Embedding never gives it."""
    if scale_grad_by_freq:
        raise NotImplementedError(
            "torch.nn.Embedding(scale_grad_by_freq=True) is not supported; "
            "construct the embedding with scale_grad_by_freq=False")
    if padding_idx is None or padding_idx < 0:
        return op.Gather(weight, indices, axis=0)
    return own.Embedding(weight, indices, padding_idx=padding_idx)


def detach(self: Any) -> Any:
    """aten.detach: the stock translation is an Identity, through which the engine would
    pass gradients that eager PyTorch stops (a straight-through estimator written as
    ``x + (q(x) - x).detach()`` would train wrong)."""
    return own.StopGradient(self)


def translation_table() -> dict[Any, Any]:
    return {
        torch.ops.aten.detach.default: detach,
        torch.ops.aten.embedding.default: embedding,
        torch.ops.aten._native_batch_norm_legit_functional.default: batch_norm_functional,
        torch.ops.aten._native_batch_norm_legit.no_stats: batch_norm_no_stats,
    }
