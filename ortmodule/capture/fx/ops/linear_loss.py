"""torch.nn.functional.linear_cross_entropy's chunked custom ops (``torch_nn::``), lowered to
the projection and SoftmaxCrossEntropyLoss they compute (the engine's fusion of the two,
passes/linear_cross_entropy_fusion.h, then keeps the logits in row blocks). The ops' extra
outputs, the gradients torch's mean/sum op precomputes in forward, have no translation: a
graph that reads them bridges the op."""

from __future__ import annotations

import operator
from typing import Any

import torch

from ortmodule.capture.common import OWN_DOMAIN
from ortmodule.capture.fx.builder import FALLBACK_HINT, Lowering, UnsupportedOp
from ortmodule.capture.fx.registry import register

try:  # the module registers the ops (torch 2.13 and later)
    import torch.nn.modules.linear_cross_entropy

    _CHUNKED = torch.ops.torch_nn._linear_cross_entropy_batch_chunked.default
    _CHUNKED_NONE = torch.ops.torch_nn._linear_cross_entropy_batch_chunked_no_reduction.default
except (ImportError, AttributeError):
    _CHUNKED = _CHUNKED_NONE = None


def _loss(lw: Lowering, x: Any, w: Any, target: Any, b: Any, weight: Any, reduction: str,
          ignore_index: int, acc_dtype: Any) -> str:
    if acc_dtype not in (None, lw.dtype_of(x), torch.float32):
        raise UnsupportedOp(f"linear_cross_entropy accumulating in {acc_dtype} for "
                            f"{lw.dtype_of(x)} inputs has no fx translation; {FALLBACK_HINT}")
    logits = lw.op("MatMul", [lw.tensor(x), lw.op("Transpose", [lw.tensor(w)], perm=[1, 0])])
    if b is not None:
        logits = lw.op("Add", [logits, lw.tensor(b)])
    inputs = [logits, lw.tensor(target)]
    if weight is not None:  # the ops' autograd gives the class weights no gradient
        inputs.append(lw.op("StopGradient", [lw.tensor(weight)], domain=OWN_DOMAIN))
    return lw.op("SoftmaxCrossEntropyLoss", inputs, ignore_index=int(ignore_index),
                 reduction=reduction)


def _only_loss_read(node: Any) -> None:
    for user in node.users:
        read = user.target is not operator.getitem or bool(user.users)
        if read and (user.target is not operator.getitem or user.args[1] != 0):
            raise UnsupportedOp(f"linear_cross_entropy's precomputed gradients (outputs 1-3 "
                                f"of {node.target}) have no fx translation; {FALLBACK_HINT}")


if _CHUNKED is not None:

    @register(_CHUNKED)
    def _chunked(lw: Lowering, node: Any, x: Any, w: Any, target: Any, b: Any, weight: Any,
                 reduction: str, ignore_index: int, label_smoothing: float,
                 batch_chunk_size: int, acc_policy: str, acc_dtype: Any, *flags: Any) -> Any:
        if label_smoothing:
            raise UnsupportedOp(f"linear_cross_entropy with label_smoothing has no fx "
                                f"translation; {FALLBACK_HINT}")
        _only_loss_read(node)
        loss = _loss(lw, x, w, target, b, weight, reduction, ignore_index, acc_dtype)
        return [loss, None, None, None]

    @register(_CHUNKED_NONE)
    def _chunked_none(lw: Lowering, node: Any, x: Any, w: Any, target: Any, b: Any,
                      weight: Any, ignore_index: int, batch_chunk_size: int, acc_policy: str,
                      acc_dtype: Any) -> Any:
        return _loss(lw, x, w, target, b, weight, "none", ignore_index, acc_dtype)
