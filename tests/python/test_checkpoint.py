"""torch.utils.checkpoint regions inside a wrapped model: the engine runs them and
recomputes their activations during backward instead of keeping them.

Outputs and gradients are compared with eager PyTorch; the plan shows the recomputation.
"""

from __future__ import annotations

import copy
import logging

import pytest
import torch
import torch.utils.checkpoint as cp
from torch import nn

from ortmodule import ORTModule
from tests.python.model_zoo import assert_close, assert_grads_match


def close(actual: torch.Tensor, expected: torch.Tensor, what: str) -> None:
    assert_close(actual, expected, what)


def grads_match(ort: ORTModule, eager: nn.Module) -> None:
    assert_grads_match(ort, eager)


class Block(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(width, 2 * width)
        self.fc2 = nn.Linear(2 * width, width)
        self.norm = nn.LayerNorm(width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x + self.fc2(torch.tanh(self.fc1(x)).sin()))


class Checkpointed(nn.Module):
    """An embedding layer, two checkpointed blocks and a head."""

    def __init__(self, use_reentrant: bool | None, width: int = 8) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.use_reentrant = use_reentrant
        self.inp = nn.Linear(5, width)
        self.blocks = nn.ModuleList([Block(width), Block(width)])
        self.head = nn.Linear(width, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.inp(x)
        for block in self.blocks:
            if self.use_reentrant is None:
                h = block(h)
            else:
                h = cp.checkpoint(block, h, use_reentrant=self.use_reentrant)
        return self.head(h)


def step(ort: ORTModule, eager: nn.Module, x_ort: torch.Tensor, x_eager: torch.Tensor) -> None:
    y_ort, y_eager = ort(x_ort), eager(x_eager)
    close(y_ort, y_eager, "output")
    (y_ort ** 2).sum().backward()
    (y_eager ** 2).sum().backward()
    grads_match(ort, eager)
    if x_eager.requires_grad:
        close(x_ort.grad, x_eager.grad, "input gradient")


@pytest.mark.parametrize("use_reentrant", [False, True])
@pytest.mark.parametrize("x_requires_grad", [False, True])
def test_checkpoint_matches_eager(use_reentrant: bool, x_requires_grad: bool) -> None:
    model = Checkpointed(use_reentrant)
    ort, eager = ORTModule(copy.deepcopy(model)), model
    x = torch.randn(6, 5)
    for _ in range(2):  # gradients accumulate over two steps
        step(ort, eager, x.clone().requires_grad_(x_requires_grad),
             x.clone().requires_grad_(x_requires_grad))


def test_reentrant_checkpoint_without_input_requiring_grad_gives_no_gradient_like_eager(
        caplog: pytest.LogCaptureFixture) -> None:
    """Eager reentrant checkpoint returns outputs that do not require grad when no input
    does: the parameters inside get no gradient (PyTorch warns about it)."""

    class FirstLayerCheckpointed(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(1)
            self.block = Block(5)
            self.side = nn.Linear(5, 5)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return cp.checkpoint(self.block, x, use_reentrant=True) + self.side(x)

    model = FirstLayerCheckpointed()
    ort, eager = ORTModule(copy.deepcopy(model)), model
    x = torch.randn(4, 5)
    with caplog.at_level(logging.WARNING, logger="ortmodule"), \
            pytest.warns(UserWarning, match="None of the inputs have requires_grad=True"):
        step(ort, eager, x, x)
    assert any("use_reentrant=True" in r.getMessage() and "no gradient" in r.getMessage()
               for r in caplog.records)
    assert eager.block.fc1.weight.grad is None and ort.module.block.fc1.weight.grad is None
    assert ort.module.side.weight.grad is not None


def _plan(ort: ORTModule) -> str:
    (entries,) = ort._cache.values()
    return entries[0].program.plan_description()


def _stash(plan: str) -> set[str]:
    line = next(line for line in plan.splitlines() if line.startswith("stash:"))
    return set(line.split()[1:])


@pytest.mark.parametrize("use_reentrant", [False, True])
def test_checkpoint_regions_are_recomputed_in_backward(use_reentrant: bool) -> None:
    x = torch.randn(6, 5)
    plain = ORTModule(Checkpointed(None))
    plain(x).sum().backward()
    checkpointed = ORTModule(Checkpointed(use_reentrant))
    checkpointed(x).sum().backward()
    plan = _plan(checkpointed)
    backward = plan.split("backward:", 1)[1].split("shape-cached:", 1)[0]
    assert "[recompute]" in backward and "[recompute]" not in plan.split("backward:", 1)[0]
    # Backward no longer keeps the blocks' inner activations from forward: fewer values
    # in the stash than without checkpoint.
    assert len(_stash(plan)) < len(_stash(_plan(plain)))


def test_dropout_inside_a_region_draws_the_same_mask_when_recomputed() -> None:
    """The recomputed dropout must reuse forward's mask: gradients equal those of the same
    model without checkpoint, drawn from the same seed."""

    class DropBlock(nn.Module):
        def __init__(self, checkpointed: bool) -> None:
            super().__init__()
            torch.manual_seed(2)
            self.checkpointed = checkpointed
            self.fc1 = nn.Linear(6, 12)
            self.fc2 = nn.Linear(12, 2)

        def inner(self, x: torch.Tensor) -> torch.Tensor:
            return nn.functional.dropout(torch.relu(self.fc1(x)), p=0.5, training=True)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = cp.checkpoint(self.inner, x, use_reentrant=False) if self.checkpointed \
                else self.inner(x)
            return self.fc2(h)

    plain, checkpointed = ORTModule(DropBlock(False)), ORTModule(DropBlock(True))
    x = torch.randn(16, 6)
    for seed in (10, 11):
        torch.manual_seed(seed)
        y_plain = plain(x)
        torch.manual_seed(seed)
        y_checkpointed = checkpointed(x)
        torch.testing.assert_close(y_checkpointed, y_plain, rtol=0, atol=0)
        y_plain.square().sum().backward()
        y_checkpointed.square().sum().backward()
    for (name, p), q in zip(plain.named_parameters(), checkpointed.parameters()):
        torch.testing.assert_close(q.grad, p.grad, rtol=1e-6, atol=1e-7,
                                   msg=lambda m, name=name: f"gradient of {name}: {m}")
    assert "Dropout" in _plan(checkpointed).split("backward:", 1)[1]


def test_checkpoint_sequential_matches_eager_and_recomputes() -> None:
    class Segments(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(3)
            self.body = nn.Sequential(*[nn.Sequential(nn.Linear(6, 6), nn.Tanh())
                                        for _ in range(4)])

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return cp.checkpoint_sequential(self.body, 2, x, use_reentrant=False)

    model = Segments()
    ort, eager = ORTModule(copy.deepcopy(model)), model
    x = torch.randn(5, 6)
    step(ort, eager, x, x)
    assert "[recompute]" in _plan(ort).split("backward:", 1)[1]
