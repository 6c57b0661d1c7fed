"""One-op parity checks through the fx exporter with no bridging
(DebugOptions(exporter="fx", fallback=NEVER): each ATen op must lower natively): ORTModule's
forward and input gradients against eager PyTorch's on the same inputs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from ortmodule import DebugOptions, FallbackPolicy, ORTModule

# No bridging: an ATen op without a translation fails the test.
FX = DebugOptions(exporter="fx", fallback=FallbackPolicy.NEVER)
RTOL, ATOL = 1e-5, 1e-5  # float32, one engine kernel vs one ATen kernel


class Apply(nn.Module):
    def __init__(self, fn: Callable[..., Any]) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, *xs: torch.Tensor) -> Any:
        return self.fn(*xs)


def as_tuple(y: Any) -> tuple[torch.Tensor, ...]:
    return tuple(y) if isinstance(y, (tuple, list)) else (y,)


def check(fn: Callable[..., Any], *inputs: torch.Tensor, rtol: float = RTOL,
          atol: float = ATOL, options: DebugOptions = FX) -> None:
    """Forward outputs (indices exactly) and the gradients of every floating input of
    sum(output * w), w fixed random weights per floating output."""
    eager_in = [x.clone().requires_grad_(x.is_floating_point()) for x in inputs]
    ort_in = [x.clone().requires_grad_(x.is_floating_point()) for x in inputs]
    expected = as_tuple(fn(*eager_in))
    got = as_tuple(ORTModule(Apply(fn), options)(*ort_in))
    assert len(got) == len(expected)
    gen = torch.Generator().manual_seed(0)
    weights = [torch.randn(e.shape, generator=gen, dtype=e.dtype) if e.is_floating_point()
               else None for e in expected]
    for e, g in zip(expected, got):
        assert g.shape == e.shape and g.dtype == e.dtype, (g.shape, e.shape, g.dtype, e.dtype)
        if e.is_floating_point():
            torch.testing.assert_close(g, e, rtol=rtol, atol=atol, equal_nan=True)
        else:
            assert torch.equal(g, e), (g, e)
    eager_loss = [(e * w).sum() for e, w in zip(expected, weights) if w is not None and
                  e.requires_grad]
    if not eager_loss:
        return
    sum(eager_loss).backward()
    ort_loss = [(g * w).sum() for g, w in zip(got, weights) if w is not None and
                g.requires_grad]
    if ort_loss:  # none: outputs without gradient (a count), compared with eager's zeros
        sum(ort_loss).backward()
    for a, b in zip(eager_in, ort_in):
        if not a.is_floating_point():
            continue
        want = a.grad if a.grad is not None else torch.zeros_like(a)
        have = b.grad if b.grad is not None else torch.zeros_like(b)
        torch.testing.assert_close(have, want, rtol=rtol, atol=atol, equal_nan=True)
