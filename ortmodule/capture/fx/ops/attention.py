"""Attention."""

from __future__ import annotations

import math
from typing import Any

import torch

from ortmodule.capture.fx.builder import FALLBACK_HINT, Lowering, UnsupportedOp, onnx_dtype
from ortmodule.capture.fx.ops.common import _scalar_tensor, aten
from ortmodule.capture.fx.registry import register


@register(aten.scaled_dot_product_attention.default)
def _sdpa(lw: Lowering, node: Any, q: Any, k: Any, v: Any, mask: Any = None,
          dropout_p: float = 0.0, is_causal: bool = False, scale: Any = None,
          enable_gqa: bool = False) -> Any:
    """softmax(q k^T * scale + mask) v, with the causal mask built from the sizes."""
    q_val, k_val = lw.meta(q), lw.meta(k)
    if q_val.shape[-3:-2] != k_val.shape[-3:-2] and enable_gqa:
        raise UnsupportedOp(f"scaled_dot_product_attention with grouped key/value heads has "
                          f"no fx translation; {FALLBACK_HINT}")
    dtype = q_val.dtype
    if scale is None:
        head = q_val.shape[-1]
        if isinstance(head, torch.SymInt) and head.node.expr.free_symbols:
            raise UnsupportedOp(f"scaled_dot_product_attention over a symbolic head size has "
                              f"no fx translation; {FALLBACK_HINT}")
        scale = 1.0 / math.sqrt(int(head))
    rank = q_val.dim()
    perm = list(range(rank))
    perm[-1], perm[-2] = perm[-2], perm[-1]
    key_t = lw.op("Transpose", [lw.tensor(k)], perm=perm)
    scores = lw.op("Mul", [lw.op("MatMul", [lw.tensor(q), key_t]), lw.const(scale, dtype)])
    lowest = lw.const(float(torch.finfo(dtype).min), dtype)
    if is_causal:
        rows, cols = lw.dim(q, -2), lw.dim(k, -2)
        ones = lw.op("ConstantOfShape", [lw.shape([rows, cols])],
                     value=_scalar_tensor(True, torch.bool))
        keep = lw.op("Trilu", [lw.op("Cast", [ones], to=onnx_dtype(torch.int64))], upper=0)
        keep = lw.op("Cast", [keep], to=onnx_dtype(torch.bool))
        scores = lw.op("Where", [keep, scores, lowest])
    if mask is not None:
        if lw.dtype_of(mask) == torch.bool:
            scores = lw.op("Where", [lw.tensor(mask), scores, lowest])
        else:
            scores = lw.op("Add", [scores, lw.tensor(mask, dtype)])
    weights = lw.op("Softmax", [scores], axis=-1)
    if dropout_p > 0:
        weights = lw.op("Dropout", [weights, lw.const(float(dropout_p), torch.float32),
                                    lw.const(True, torch.bool)])
    return lw.op("MatMul", [weights, lw.tensor(v)])
