"""ATen's _batch_norm_with_update / _batch_norm_no_update (what torch.export may keep of
F.batch_norm): outputs, saved statistics, the empty workspace, gradients and the running
statistics updated in place, against eager, through the fx lowering without bridging."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from ortmodule import ORTModule
from tests.python.parity_utils import FX, check

aten = torch.ops.aten


class WithUpdate(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        gen = torch.Generator().manual_seed(0)
        self.weight = nn.Parameter(torch.rand(channels, generator=gen) + 0.5)
        self.bias = nn.Parameter(torch.randn(channels, generator=gen))
        self.register_buffer("mean", torch.randn(channels, generator=gen))
        self.register_buffer("var", torch.rand(channels, generator=gen) + 0.5)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        y, save_mean, save_invstd, reserve = aten._batch_norm_with_update(
            x, self.weight, self.bias, self.mean, self.var, 0.1, 1e-5)
        return y, save_mean, save_invstd, reserve


@pytest.mark.parametrize("shape", [(4, 3), (2, 3, 5), (2, 3, 4, 4)])
def test_batch_norm_with_update_matches_eager(shape: tuple[int, ...]) -> None:
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(1))
    eager = WithUpdate(shape[1])
    ort = ORTModule(copy.deepcopy(eager), FX)
    xe, xo = x.clone().requires_grad_(), x.clone().requires_grad_()
    want, got = eager(xe), ort(xo)
    for w, g in zip(want, got):
        assert g.dtype == w.dtype and g.shape == w.shape
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5)
    assert not got[1].requires_grad and not got[2].requires_grad  # saved statistics
    want[0].pow(2).sum().backward()
    got[0].pow(2).sum().backward()
    torch.testing.assert_close(xo.grad, xe.grad, rtol=1e-4, atol=1e-5)
    for (name, p), (_, q) in zip(ort.module.named_parameters(), eager.named_parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5, msg=name)
    # The running statistics moved as eager's (momentum 0.1, unbiased variance).
    torch.testing.assert_close(ort.module.mean, eager.mean, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(ort.module.var, eager.var, rtol=1e-6, atol=1e-6)


def test_batch_norm_no_update_matches_eager() -> None:
    gen = torch.Generator().manual_seed(2)
    x, w, b = torch.randn(2, 3, 5, generator=gen), torch.rand(3, generator=gen), torch.randn(3)
    mean, var = torch.randn(3, generator=gen), torch.rand(3, generator=gen) + 0.5
    # The running statistics as constants: the op takes no gradient for them.
    check(lambda x, w, b: aten._batch_norm_no_update(x, w, b, mean, var, 0.1, 1e-5), x, w, b)
