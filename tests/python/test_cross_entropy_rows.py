"""SoftmaxCrossEntropyLoss's gradient with the classes along rows ([N, C] scores, a language
model's [tokens, vocab] logits) is made row by row, each row's log-probability gradient written
where the row's softmax backward then runs: bit for bit the gradient of the unfused
NegativeLogLikelihoodLoss(LogSoftmax(x)), whose two kernels it chains, on every instruction set,
for each reduction, with class weights and ignored labels; and close to eager PyTorch's."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import torch
import torch.nn.functional as F
from onnx import helper, numpy_helper

from ortmodule import _C

_ONNX = {torch.float32: onnx.TensorProto.FLOAT, torch.float64: onnx.TensorProto.DOUBLE}
ISAS = [isa for isa in ("baseline", "avx2", "avx512") if _C.cpu_isa_supported(isa)]


def _program(fused: bool, n: int, c: int, dtype: torch.dtype, reduction: str,
             weight: np.ndarray | None, ignore_index: int | None) -> object:
    attrs: dict[str, object] = {"reduction": reduction}
    if ignore_index is not None:
        attrs["ignore_index"] = ignore_index
    inputs = ["x", "labels"] + (["w"] if weight is not None else [])
    if fused:
        nodes = [helper.make_node("SoftmaxCrossEntropyLoss", inputs, ["loss"], **attrs)]
    else:
        nodes = [helper.make_node("LogSoftmax", ["x"], ["lp"], axis=1),
                 helper.make_node("NegativeLogLikelihoodLoss", ["lp"] + inputs[1:], ["loss"],
                                  **attrs)]
    inits = [numpy_helper.from_array(weight, "w")] if weight is not None else []
    graph = helper.make_graph(
        nodes, "ce", [helper.make_tensor_value_info("x", _ONNX[dtype], [n, c]),
                      helper.make_tensor_value_info("labels", onnx.TensorProto.INT64, [n])],
        [helper.make_tensor_value_info("loss", _ONNX[dtype], None)], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return _C.Program(model.SerializeToString(), [], ["x"], graph_optimizations=False)


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("weighted,ignore", [(False, False), (True, True)])
def test_row_gradient_is_the_unfused_chain_bit_for_bit(
    isa: str, dtype: torch.dtype, reduction: str, weighted: bool, ignore: bool
) -> None:
    n, c = 67, 4099  # rows over several threads' chunks; classes past the vector width
    gen = torch.Generator().manual_seed(7)
    x = (torch.randn(n, c, generator=gen, dtype=torch.float64) * 3).to(dtype)
    labels = torch.randint(0, c, (n,), generator=gen)
    ignore_index = 5 if ignore else None
    if ignore:
        labels[::4] = 5
    weight = (torch.rand(c, generator=gen, dtype=torch.float64) + 0.5).to(dtype).numpy() \
        if weighted else None
    dloss_shape = (n,) if reduction == "none" else ()
    dloss = torch.randn(dloss_shape, generator=gen, dtype=dtype)
    previous = _C.cpu_isa()
    _C.set_cpu_isa(isa)
    try:
        grads = {}
        for fused in (True, False):
            prog = _program(fused, n, c, dtype, reduction, weight, ignore_index)
            xs = x.clone().requires_grad_(True)
            (loss,) = _C.run(prog, [xs, labels])
            (grads[fused],) = torch.autograd.grad(loss, [xs], dloss)
    finally:
        _C.set_cpu_isa(previous)
    assert torch.equal(grads[True], grads[False])
    ref_x = x.clone().requires_grad_(True)
    ref = F.cross_entropy(ref_x, labels, weight=None if weight is None else torch.from_numpy(weight),
                          ignore_index=-100 if ignore_index is None else ignore_index,
                          reduction=reduction)
    (g_ref,) = torch.autograd.grad(ref, [ref_x], dloss)
    tol = 1e-6 if dtype == torch.float32 else 1e-12
    torch.testing.assert_close(grads[True], g_ref, rtol=tol, atol=tol * float(g_ref.abs().max()))
