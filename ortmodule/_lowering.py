"""Translations from ATen ops to ONNX where the stock torch.onnx translation is wrong
for training. Used by the torch.export capture path as its custom translation table."""

from __future__ import annotations

from typing import Any

import torch
from onnxscript import opset20 as op

OPSET = 20


def _channel_ones(input: Any, value: float) -> Any:
    return op.Expand(op.Constant(value_float=value), op.Shape(input, start=1, end=2))


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
        return y, running_mean, running_var, running_mean, running_var
    # ONNX's momentum weights the old running value; PyTorch's weights the batch value.
    # The engine updates running_var with the unbiased batch variance, as PyTorch does.
    y, new_mean, new_var = op.BatchNormalization(
        input, weight, bias, running_mean, running_var,
        epsilon=eps, momentum=1.0 - momentum, training_mode=1)
    # Outputs 1 and 2 (saved mean and inverse std) only feed ATen's own batch-norm
    # backward, which never appears in a forward graph; the engine derives its own.
    return y, new_mean, new_var, new_mean, new_var


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
    y, mean, var = op.BatchNormalization(
        input, weight, bias, _channel_ones(input, 0.0), _channel_ones(input, 1.0),
        epsilon=eps, momentum=1.0 - momentum, training_mode=1)
    return y, mean, var


def translation_table() -> dict[Any, Any]:
    return {
        torch.ops.aten._native_batch_norm_legit_functional.default: batch_norm_functional,
        torch.ops.aten._native_batch_norm_legit.no_stats: batch_norm_no_stats,
    }
