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


class LanguageModelHead(nn.Module):
    """Returns the loss beside the logits it is computed from (as transformers' LM heads do),
    and with `squash` a squashed copy of the logits too, whose gradient op reads the zeros
    standing for an undifferentiated output. The logits pass 1 MiB, the size from which those
    zeros are a read-only mapping (base/allocator.h: zero_storage)."""

    def __init__(self, squash: bool, vocab: int = 1100) -> None:
        super().__init__()
        self.squash = squash
        self.embed = nn.Embedding(vocab, 32)
        self.head = nn.Linear(32, vocab)

    def forward(self, ids: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, ...]:
        logits = self.head(torch.relu(self.embed(ids)))
        loss = nn.functional.cross_entropy(logits.flatten(0, 1), labels.flatten())
        return (loss, logits, torch.tanh(logits)) if self.squash else (loss, logits)


@pytest.mark.parametrize("through", ["loss", "loss_and_logits", "squashed", "alternating"])
def test_gradient_of_an_output_read_inside_the_graph(through: str) -> None:
    """The logits' zero gradient meets the loss's gradient in a Sum, which then adds only the
    loss's; with the squashed copy returned, TanhGrad reads the zeros of its gradient; all as
    eager, step after step (the shapes memo serves calls with and without those gradients)."""
    torch.manual_seed(0)
    squash = through in ("squashed", "alternating")
    eager = LanguageModelHead(squash)
    model = copy.deepcopy(eager)
    ort = ORTModule(model)
    ids = torch.randint(0, 1100, (4, 64))
    labels = torch.randint(0, 1100, (4, 64))
    for step in range(4):
        outs, want_outs = ort(ids, labels), eager(ids, labels)
        for got, want in zip(outs, want_outs, strict=True):
            torch.testing.assert_close(got, want, rtol=RTOL, atol=ATOL)
        mode = ("loss", "loss_and_logits", "squashed")[step % 3] if through == "alternating" \
            else through
        pick = {"loss": lambda o: o[0],
                "loss_and_logits": lambda o: o[0] + 0.01 * o[1].square().mean(),
                "squashed": lambda o: o[0] + o[2].mean()}[mode]
        pick(outs).backward()
        pick(want_outs).backward()
        for (name, p), q in zip(model.named_parameters(), eager.parameters(), strict=True):
            torch.testing.assert_close(p.grad, q.grad, rtol=RTOL, atol=ATOL,
                                       msg=lambda m, n=name, s=step: f"step {s}, '{n}': {m}")
        model.zero_grad(set_to_none=True)
        eager.zero_grad(set_to_none=True)
