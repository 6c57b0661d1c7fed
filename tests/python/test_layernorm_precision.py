"""Layer norm in float64 against eager PyTorch to float64 precision: ONNX's epsilon attribute is
32-bit, and eps=1e-5 rounded to float32 (9.99999975e-6) moved a float64 GPT-2's gradients by
4.5e-10 relative. A float64 norm whose eps float32 cannot hold is written out with eps a float64
constant; float32 norms, and float64 ones whose eps float32 holds, stay one LayerNormalization."""

from __future__ import annotations

import collections
import copy

import numpy as np
import onnx
import pytest
import torch
from torch import nn

from ortmodule import ORTModule
from tests.python.test_batchnorm_precision import ATOL, FX, RTOL, _run


def _batch(dtype: torch.dtype) -> torch.Tensor:
    # A small spread (variance ~1e-5, near eps): eps counts.
    gen = torch.Generator().manual_seed(0)
    return (0.003 * torch.randn(3, 5, 4, 6, generator=gen, dtype=torch.float64)).to(dtype)


def _ops(model: ORTModule) -> collections.Counter:
    entry = next(iter(model._cache.values()))[0]
    graph = onnx.load_from_string(entry.program.training_graph_onnx()).graph
    return collections.Counter(n.op_type for n in graph.node)


def _norm(shape: list[int], affine: bool, eps: float) -> nn.Module:
    norm = nn.LayerNorm(shape, eps=eps, elementwise_affine=affine)
    if affine:
        with torch.no_grad():
            norm.weight.uniform_(0.5, 1.5)
            norm.bias.uniform_(-0.1, 0.1)
    return norm


@pytest.mark.parametrize("shape", [[6], [4, 6]])
@pytest.mark.parametrize("affine", [True, False])
def test_float64_layer_norm_matches_eager_to_double_precision(shape: list[int],
                                                              affine: bool) -> None:
    torch.manual_seed(0)
    eager = _norm(shape, affine, 1e-5).double()
    ort = ORTModule(copy.deepcopy(eager), FX)
    x = _batch(torch.float64)
    want, want_grads = _run(eager, x)
    got, got_grads = _run(ort, x)
    torch.testing.assert_close(got, want, rtol=RTOL, atol=ATOL)
    for g, w in zip(got_grads, want_grads, strict=True):
        torch.testing.assert_close(g, w, rtol=RTOL, atol=ATOL)
    assert _ops(ort)["LayerNormalization"] == 0


def test_eps_rounded_to_float32_is_outside_the_tolerance() -> None:
    # The test above can fail: the float32-rounded eps moves eager's own output further.
    eager = _norm([6], True, 1e-5).double()
    rounded = copy.deepcopy(eager)
    rounded.eps = float(np.float32(1e-5))
    x = _batch(torch.float64)
    with torch.no_grad():
        diff = (eager(x) - rounded(x)).abs() - (ATOL + RTOL * eager(x).abs())
    assert float(diff.max()) > 0


@pytest.mark.parametrize("dtype,eps", [(torch.float32, 1e-5), (torch.float64, 2.0**-17)])
def test_norms_float32_holds_stay_one_op(dtype: torch.dtype, eps: float) -> None:
    eager = _norm([6], True, eps).to(dtype)
    ort = ORTModule(copy.deepcopy(eager), FX)
    x = _batch(dtype)
    want, want_grads = _run(eager, x)
    got, got_grads = _run(ort, x)
    rtol, atol = (RTOL, ATOL) if dtype == torch.float64 else (1e-4, 1e-5)
    torch.testing.assert_close(got, want, rtol=rtol, atol=atol)
    for g, w in zip(got_grads, want_grads, strict=True):
        torch.testing.assert_close(g, w, rtol=rtol, atol=atol * 10)
    assert _ops(ort)["LayerNormalization"] == 1
