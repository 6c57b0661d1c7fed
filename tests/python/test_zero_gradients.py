"""Backward skips what only the gradient of an undifferentiated output feeds
(runtime/zero_gradients.h): a module with two heads, trained through one, the other or both,
gives eager PyTorch's gradients (explicit tolerances), and the engine reports the skipped
steps only where an output got no gradient."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from ortmodule import ORTModule
from tests.python.model_zoo import DEVICES

RTOL, ATOL = 1e-5, 1e-6


class TwoHeads(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Linear(8, 16)
        self.left = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.LayerNorm(32), nn.Linear(32, 4))
        self.right = nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 3))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = torch.tanh(self.body(x))
        return self.left(h), self.right(h)


def zero_steps(ort: ORTModule) -> int:
    return sum(entry.program.shape_cache_stats()["zero_steps"]
               for entries in ort._cache.values() for entry in entries)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("through", ["left", "right", "both"])
def test_undifferentiated_output_is_skipped(through: str, device: str) -> None:
    torch.manual_seed(0)
    eager = TwoHeads().to(device)
    model = copy.deepcopy(eager)
    ort = ORTModule(model)
    x = torch.randn(5, 7, 8, device=device)
    for step in range(2):
        (a, b), (ea, eb) = ort(x), eager(x)
        torch.testing.assert_close(a, ea, rtol=RTOL, atol=ATOL)
        torch.testing.assert_close(b, eb, rtol=RTOL, atol=ATOL)
        if through == "left":
            loss, want = a.square().mean(), ea.square().mean()
        elif through == "right":
            loss, want = b.sum(), eb.sum()
        else:
            loss, want = a.square().mean() + b.sum(), ea.square().mean() + eb.sum()
        loss.backward()
        want.backward()
        for (name, p), q in zip(model.named_parameters(), eager.parameters()):
            if q.grad is None:  # the head nobody differentiated: zeros here, None in eager
                assert p.grad is None or not p.grad.any(), f"step {step}: '{name}'"
                continue
            torch.testing.assert_close(p.grad, q.grad, rtol=RTOL, atol=ATOL,
                                       msg=lambda m, n=name, s=step: f"step {s}, '{n}': {m}")
        model.zero_grad(set_to_none=True)
        eager.zero_grad(set_to_none=True)
    skipped = zero_steps(ort)
    if through == "both":
        assert skipped == 0
    else:
        # The other head's products (two per Linear, input and weight gradients) at least.
        assert skipped >= 2 * 4, skipped


def test_retain_graph_backward_through_each_output_in_turn() -> None:
    torch.manual_seed(0)
    eager = TwoHeads()
    model = copy.deepcopy(eager)
    ort = ORTModule(model)
    x = torch.randn(6, 8)
    (a, b), (ea, eb) = ort(x), eager(x)
    a.sum().backward(retain_graph=True)
    ea.sum().backward(retain_graph=True)
    b.square().sum().backward()
    eb.square().sum().backward()
    for (name, p), q in zip(model.named_parameters(), eager.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=RTOL, atol=ATOL,
                                   msg=lambda m, n=name: f"'{n}': {m}")
    assert zero_steps(ort) > 0
