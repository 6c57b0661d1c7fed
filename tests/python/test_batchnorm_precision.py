"""Batch norm in float64 against eager PyTorch to float64 precision: eps and momentum reach
the kernel as doubles (an ONNX FLOAT attribute is 32-bit, and eps=1e-3 rounded to float32,
1.0000000475e-3, moved a float64 MobileNetV2's outputs by 3e-9 relative and, through AdamW,
one of its gradients by 2e-3 after three steps)."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from torch import nn

from ortmodule import DebugOptions, FallbackPolicy, ORTModule

FX = DebugOptions(exporter="fx", fallback=FallbackPolicy.NEVER)
# float64 sums in another order than eager's: a few ulps.
RTOL, ATOL = 1e-12, 1e-14


def _batch(dtype: torch.dtype) -> torch.Tensor:
    # A small spread (variance ~2.5e-3, not far above eps): eps counts.
    gen = torch.Generator().manual_seed(0)
    return (0.05 * torch.randn(2, 4, 6, 6, generator=gen, dtype=torch.float64)).to(dtype)


def _run(module: nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
    x = x.clone().requires_grad_()
    y = module(x)
    cot = torch.randn(y.shape, generator=torch.Generator().manual_seed(1), dtype=y.dtype)
    y.backward(cot)
    return y.detach(), [x.grad, *(p.grad for p in module.parameters())]


@pytest.mark.parametrize("training", [True, False])
def test_float64_batch_norm_matches_eager_to_double_precision(training: bool) -> None:
    eager = nn.BatchNorm2d(4, eps=1e-3, momentum=0.997).double().train(training)
    with torch.no_grad():
        eager.running_mean.uniform_(-0.1, 0.1)
        eager.running_var.uniform_(1e-3, 5e-3)
        eager.weight.uniform_(0.5, 1.5)
    ort = ORTModule(copy.deepcopy(eager), FX)
    x = _batch(torch.float64)
    want, want_grads = _run(eager, x)
    got, got_grads = _run(ort, x)
    torch.testing.assert_close(got, want, rtol=RTOL, atol=ATOL)
    for g, w in zip(got_grads, want_grads):
        torch.testing.assert_close(g, w, rtol=RTOL, atol=ATOL)
    for name in ("running_mean", "running_var"):
        torch.testing.assert_close(
            getattr(ort.module, name), getattr(eager, name), rtol=RTOL, atol=ATOL
        )


def test_eps_rounded_to_float32_is_outside_the_tolerance() -> None:
    # The test above can fail: the float32-rounded eps moves eager's own output further.
    eager = nn.BatchNorm2d(4, eps=1e-3).double()
    rounded = copy.deepcopy(eager)
    rounded.eps = float(np.float32(1e-3))
    x = _batch(torch.float64)
    diff = (eager(x) - rounded(x)).abs() - (ATOL + RTOL * eager(x).abs())
    assert float(diff.max()) > 0


def test_float32_batch_norm_matches_eager() -> None:
    eager = nn.BatchNorm2d(4, eps=1e-3, momentum=0.997)
    ort = ORTModule(copy.deepcopy(eager), FX)
    x = _batch(torch.float32)
    want, want_grads = _run(eager, x)
    got, got_grads = _run(ort, x)
    # float32: a few ulps of the outputs' magnitude.
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    for g, w in zip(got_grads, want_grads):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-4)
