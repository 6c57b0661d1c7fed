"""Helpers the translation families share: the node's traced value, axes, PyTorch's type
promotion, one-element ONNX tensors.
"""

from __future__ import annotations

from typing import Any

import torch

from ortmodule.capture.fx.builder import Lowering

aten = torch.ops.aten


def _out(node: Any) -> torch.Tensor:
    return node.meta["val"]


def _axis(dim: int, rank: int) -> int:
    return dim + rank if dim < 0 else dim


def _result_dtype(lw: Lowering, *args: Any) -> torch.dtype:
    """The dtype PyTorch's type promotion gives ``args`` (tensors and Python numbers)."""
    operands: list[Any] = []
    for a in args:
        val = lw.meta(a)
        if isinstance(val, torch.Tensor):
            operands.append(val)
        elif isinstance(val, torch.SymInt):
            operands.append(1)
        elif isinstance(val, torch.SymFloat):
            operands.append(1.0)
        else:
            operands.append(val)
    first, *rest = operands
    dtype = torch.result_type(first, rest[0]) if rest else (
        first.dtype if isinstance(first, torch.Tensor) else torch.result_type(
            torch.tensor(first), torch.tensor(first)))
    for r in rest[1:]:
        dtype = torch.promote_types(dtype, torch.result_type(
            torch.empty((), dtype=dtype), r))
    return dtype


def _scalar_tensor(value: Any, dtype: torch.dtype) -> Any:
    from onnx import numpy_helper

    return numpy_helper.from_array(torch.tensor([value], dtype=dtype).numpy())
