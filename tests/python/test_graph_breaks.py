"""Graph breaks: a forward that reads a tensor's value in Python (an ``if`` on a tensor,
``.item()``, ``.tolist()``, boolean-mask indexing, ``nonzero``) is split there by TorchDynamo;
the graphs between the breaks run on the engine, the Python in between eagerly. Each model
trains for several AdamW steps against eager PyTorch: outputs, every parameter gradient and
the buffers compared at every step.
"""

from __future__ import annotations

import copy
import inspect
import logging
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn

from ortmodule import DebugOptions, FallbackPolicy, ORTModule
from ortmodule.capture.common import ExportError

RTOL, ATOL = 1e-4, 1e-5
STEPS = 4


def _near_identity(lin: nn.Linear) -> nn.Linear:
    """Weights close to the identity, so that the sign of the input decides a branch."""
    with torch.no_grad():
        lin.weight.copy_(
            torch.eye(lin.out_features, lin.in_features)
            + 0.01 * torch.randn(lin.out_features, lin.in_features)
        )
        lin.bias.zero_()
    return lin


def _entry(ort: ORTModule) -> Any:
    entries = [e for es in ort._cache.values() for e in es]
    assert len(entries) == 1, entries
    return entries[0]


def _engine_graphs(ort: ORTModule) -> int:
    """Graphs of the split forward that ran on the engine (each part's compiled programs)."""
    breaks = _entry(ort).graph_breaks
    assert breaks is not None, "the forward was not split at graph breaks"
    programs = [e.program for part in breaks.parts for es in part._cache.values() for e in es]
    assert all(p is not None for p in programs), "a part ran eagerly"
    return len(programs)


def train_like_eager(
    make: Callable[[], nn.Module],
    batch: Callable[[int], tuple[torch.Tensor, ...]],
    steps: int = STEPS,
    rtol: float = RTOL,
    atol: float = ATOL,
) -> ORTModule:
    """``steps`` AdamW steps of the model under ORTModule and in eager PyTorch from the same
    weights: the loss, every parameter gradient and every buffer equal at every step."""
    torch.manual_seed(0)
    eager = make()
    ort = ORTModule(copy.deepcopy(eager))
    opt_ort = torch.optim.AdamW(ort.parameters(), lr=1e-2)
    opt_eager = torch.optim.AdamW(eager.parameters(), lr=1e-2)
    for step in range(steps):
        inputs = batch(step)
        got, want = ort(*inputs), eager(*inputs)
        torch.testing.assert_close(
            got, want, rtol=rtol, atol=atol, msg=lambda m, s=step: f"output at step {s}: {m}"
        )
        got.backward()
        want.backward()
        for (name, p), (_, q) in zip(ort.named_parameters(), eager.named_parameters()):
            assert (p.grad is None) == (q.grad is None), f"gradient presence of {name}"
            if q.grad is not None:
                torch.testing.assert_close(
                    p.grad,
                    q.grad,
                    rtol=rtol,
                    atol=atol,
                    msg=lambda m, n=name, s=step: f"gradient of {n} at step {s}: {m}",
                )
        for (name, b), (_, c) in zip(ort.named_buffers(), eager.named_buffers()):
            torch.testing.assert_close(
                b, c, rtol=rtol, atol=atol, msg=lambda m, n=name: f"buffer {n}: {m}"
            )
        for opt in (opt_ort, opt_eager):
            opt.step()
            opt.zero_grad()
    return ort


def _signed(step: int, rows: int = 6) -> tuple[torch.Tensor]:
    """Inputs all positive on even steps, all negative on odd ones."""
    g = torch.Generator().manual_seed(step)
    x = torch.rand(rows, 8, generator=g) + 0.1
    return (x if step % 2 == 0 else -x,)


class Branchy(nn.Module):
    """An ``if`` on a tensor in the middle of forward, a BatchNorm (buffers updated in place)
    before it."""

    def __init__(self) -> None:
        super().__init__()
        self.first = _near_identity(nn.Linear(8, 8))
        self.norm = nn.BatchNorm1d(8, affine=False)
        self.second = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.first(x)
        if h.sum() > 0:  # the branch
            h = torch.relu(h) * 2
        else:
            h = torch.tanh(h) - 1
        return self.second(self.norm(h) + h).pow(2).mean()


def test_if_on_a_tensor_takes_both_branches_like_eager() -> None:
    taken = []
    for step in range(STEPS):
        (x,) = _signed(step)
        taken.append(bool(x.sum() > 0))
    assert set(taken) == {True, False}
    ort = train_like_eager(Branchy, _signed)
    # The code before the break, and each branch with the code after it.
    assert _engine_graphs(ort) == 3


class NormFirst(nn.Module):
    """Buffers updated before the break (BatchNorm's running statistics and counter)."""

    def __init__(self) -> None:
        super().__init__()
        # (Without a bias: the engine's running mean after a Linear with a bias drifts from
        # eager's once AdamW has moved the bias, with or without a graph break.)
        self.first = nn.Linear(8, 8, bias=False)
        self.norm = nn.BatchNorm1d(8)
        self.second = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm(self.first(x))
        if h.max() > 1.5:
            h = h / h.max()
        return self.second(h).pow(2).mean()


def test_buffers_updated_before_a_break_match_eager() -> None:
    ort = train_like_eager(NormFirst, lambda step: (torch.randn(6, 8) * (1 + step),))
    assert int(ort.module.norm.num_batches_tracked) == STEPS


class Item(nn.Module):
    """``.item()`` read as a Python number and used after the break."""

    def __init__(self) -> None:
        super().__init__()
        self.first = nn.Linear(8, 8)
        self.second = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.tanh(self.first(x))
        scale = h.abs().mean().item()
        return (self.second(h) / scale).pow(2).mean()


def test_item_as_a_python_number() -> None:
    ort = train_like_eager(Item, lambda step: (torch.randn(5, 8) + step,))
    assert _engine_graphs(ort) >= 2


class ToList(nn.Module):
    """``.tolist()`` of an integer tensor gives the sizes of a split."""

    def __init__(self) -> None:
        super().__init__()
        self.first = nn.Linear(8, 8)
        self.second = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        h = self.first(x)
        pooled = torch.stack([chunk.mean(0) for chunk in torch.split(h, lengths.tolist())])
        return self.second(torch.relu(pooled)).pow(2).sum()


def test_tolist_gives_split_sizes() -> None:
    def batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
        lengths = [[2, 3, 1], [1, 1, 4], [3, 3, 0 + 1]][step % 3]
        return torch.randn(sum(lengths), 8), torch.tensor(lengths)

    train_like_eager(ToList, batch, steps=3)


class Masked(nn.Module):
    """Boolean-mask indexing and ``nonzero`` (data-dependent shapes) between two engine
    regions."""

    def __init__(self) -> None:
        super().__init__()
        self.first = nn.Linear(8, 8)
        self.second = nn.Linear(8, 4)
        self.third = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.tanh(self.first(x))
        kept = h[h[:, 0] > 0]  # boolean mask
        rows = torch.nonzero(h[:, 1] < 0).squeeze(1)
        if rows.shape[0] == 0:  # Python on the data-dependent size (as DeBERTa's loss does)
            rows = torch.zeros(1, dtype=torch.long)
        picked = h.index_select(0, rows)
        y = self.second(torch.cat([kept, picked]))
        return self.third(torch.relu(y)).pow(2).sum()


def test_boolean_mask_and_nonzero() -> None:
    ort = train_like_eager(Masked, lambda step: (torch.randn(9, 8),))
    assert _engine_graphs(ort) >= 2


class MaskedInGraph(Masked):
    """A boolean mask whose data-dependent size only tensor ops use: no break, the indexing
    runs inside the one engine graph (NonZero and GatherND)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.tanh(self.first(x))
        y = self.second(h[h[:, 0] > 0])
        return self.third(torch.relu(y)).pow(2).sum()


def test_boolean_mask_without_python_stays_in_one_graph() -> None:
    ort = train_like_eager(MaskedInGraph, lambda step: (torch.randn(9, 8),))
    entry = _entry(ort)
    assert entry.graph_breaks is None and entry.program is not None
    assert entry.exporter == "fx"


class Gate(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = _near_identity(nn.Linear(8, 8))

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        h = self.lin(h)
        if (h > 0).float().mean() > 0.5:  # the break, inside the submodule
            return torch.relu(h)
        return h * 0.5


class Outer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.first = _near_identity(nn.Linear(8, 8))
        self.gate = Gate()
        self.head = nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.gate(torch.tanh(self.first(x)))).pow(2).mean()


class NarrowAtTensor(nn.Module):
    """``narrow`` at a position held by a tensor: TorchDynamo keeps the op in its graph, whose
    unbacked start torch.export cannot trace."""

    def __init__(self) -> None:
        super().__init__()
        self.first = nn.Linear(8, 8)
        self.second = nn.Linear(3, 4)

    def forward(self, x: torch.Tensor, start: torch.Tensor) -> torch.Tensor:
        h = torch.narrow(self.first(x), 1, start, 3)
        return self.second(torch.relu(h)).pow(2).sum()


def test_a_graph_export_cannot_capture_runs_in_eager_pytorch(
        caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="ortmodule"):
        ort = train_like_eager(NarrowAtTensor,
                               lambda step: (torch.randn(5, 8), torch.tensor(step % 4)))
    parts = _entry(ort).graph_breaks.parts
    assert parts and all(e.program is None for p in parts for es in p._cache.values()
                         for e in es)
    warnings = [r.getMessage() for r in caplog.records if "torch.export cannot capture"
                in r.getMessage()]
    assert warnings and "NarrowAtTensor[graph 1]" in warnings[0], warnings


class SplitAtTensor(nn.Module):
    """``tensor_split`` at positions held by a tensor: the pieces' sizes come from its values,
    which torch.export traces as unbacked sizes (and asserts the pieces' storage offsets)."""

    def __init__(self) -> None:
        super().__init__()
        self.first = nn.Linear(8, 8)
        self.second = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor, at: torch.Tensor) -> torch.Tensor:
        parts = torch.tensor_split(self.first(x), at, dim=1)
        h = torch.cat([torch.tanh(p) * (i + 1) for i, p in enumerate(parts)], dim=1)
        return self.second(h).pow(2).sum()


def test_split_at_positions_held_by_a_tensor_stays_one_engine_graph() -> None:
    """The split points change every step (an empty piece among them): one engine graph,
    lowered by the fx exporter, follows them all, no break and no eager part."""
    points = [[2, 5], [1, 7], [4, 4], [0, 6]]
    ort = train_like_eager(SplitAtTensor,
                           lambda step: (torch.randn(5, 8), torch.tensor(points[step])))
    entry = _entry(ort)
    assert entry.graph_breaks is None and entry.program is not None
    assert entry.exporter == "fx"


def test_break_inside_a_submodule() -> None:
    ort = train_like_eager(Outer, _signed)
    assert _engine_graphs(ort) >= 3


class Warned(Branchy):
    """Breaks are reported once per module class: a class no other test runs."""


def test_each_break_warns_once_naming_its_line(caplog: pytest.LogCaptureFixture) -> None:
    line = inspect.getsourcelines(Branchy.forward)[1] + 2
    with caplog.at_level(logging.WARNING, logger="ortmodule"):
        train_like_eager(Warned, _signed)
    warned = [r.getMessage() for r in caplog.records if "graph break" in r.getMessage()]
    assert len(warned) == 1, warned
    assert f"test_graph_breaks.py:{line}: `if h.sum() > 0:  # the branch`" in warned[0]
    assert "control flow on a tensor's value" in warned[0]
    assert "FallbackPolicy.NEVER" in warned[0]


@pytest.mark.parametrize("policy", [FallbackPolicy.NEVER, FallbackPolicy.UNSUPPORTED_OP])
def test_never_refuses_with_the_source_line(policy: FallbackPolicy) -> None:
    ort = ORTModule(Branchy(), DebugOptions(fallback=policy))
    line = inspect.getsourcelines(Branchy.forward)[1] + 2
    with pytest.raises(ExportError, match=rf"test_graph_breaks.py:{line}: `if h.sum\(\) > 0:"):
        ort(torch.randn(4, 8))


def test_eval_and_no_grad_calls_after_training() -> None:
    torch.manual_seed(0)
    eager = Branchy()
    ort = ORTModule(copy.deepcopy(eager))
    x = torch.randn(6, 8)
    ort(x).backward()
    eager(x).backward()
    ort.eval()
    eager.eval()
    with torch.no_grad():
        for sign in (1.0, -1.0):
            torch.testing.assert_close(
                ort(sign * x.abs()), eager(sign * x.abs()), rtol=RTOL, atol=ATOL
            )


def test_many_split_modules_in_one_process_all_run_on_the_engine() -> None:
    """Dynamo keeps compiled graphs per code object and runs a frame eagerly past its recompile
    limit (8): ORTModules of twelve module classes, each with its own split forward and both
    branches, still run every part on the engine and train like eager."""
    for i in range(12):
        ort = train_like_eager(type(f"Branchy{i}", (Branchy,), {}), _signed, steps=2)
        assert _engine_graphs(ort) >= 2
