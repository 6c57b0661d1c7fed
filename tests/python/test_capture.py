"""Capture through torch.export: training semantics that the stock ONNX lowering loses
(buffer updates, train-mode BatchNorm), dimension guards, output containers, and the
retired TorchScript exporter's clear error."""

from __future__ import annotations

import copy
from collections import namedtuple

import pytest
import torch
from torch import nn

from ortmodule import DebugOptions, ORTModule


def graphs_built(ort: ORTModule) -> int:
    return sum(len(entries) for entries in ort._cache.values())


class Counting(nn.Module):
    """A step counter and an exponential moving average updated in forward."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 3)
        self.register_buffer("steps", torch.zeros((), dtype=torch.long))
        self.register_buffer("ema", torch.zeros(3))
        self.register_buffer("scale", torch.full((3,), 2.0))  # read, never updated

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.fc(x) * self.scale
        self.steps += 1
        self.ema.mul_(0.9).add_(0.1 * y.detach().mean(0))
        return y


def test_user_buffer_updates_are_written_back() -> None:
    torch.manual_seed(0)
    eager = Counting()
    ort = ORTModule(copy.deepcopy(eager))
    for step in range(3):
        x = torch.randn(5, 4)
        ort(x).sum().backward()
        eager(x).sum().backward()
        assert int(ort.module.steps) == step + 1
        torch.testing.assert_close(ort.module.ema, eager.ema, rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(ort.module.fc.weight.grad, eager.fc.weight.grad)
    torch.testing.assert_close(ort.module.scale, torch.full((3,), 2.0))
    program = next(iter(ort._cache.values()))[0].program
    assert len(program.output_names) == 1  # buffer updates are not user outputs


class NeedsOldBuffer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.ones(3))
        self.register_buffer("state", torch.ones(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x * self.w * self.state  # backward reads the old state
        self.state.mul_(2.0)
        return y


def test_buffer_updated_in_place_but_read_by_backward_is_reported() -> None:
    with pytest.raises(RuntimeError, match="buffer 'module.state' is updated in place"):
        ORTModule(NeedsOldBuffer())(torch.randn(2, 3))


@pytest.mark.parametrize("track", [True, False])
def test_train_mode_batchnorm_uses_batch_statistics(track: bool) -> None:
    torch.manual_seed(0)
    eager = nn.Sequential(nn.Conv2d(2, 4, 3), nn.BatchNorm2d(4, track_running_stats=track),
                          nn.ReLU())
    ort = ORTModule(copy.deepcopy(eager))
    for _ in range(2):
        x = torch.randn(3, 2, 6, 6) * 3 + 1
        got, want = ort(x), eager(x)
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
        got.pow(2).sum().backward()
        want.pow(2).sum().backward()
    torch.testing.assert_close(ort.module[0].weight.grad, eager[0].weight.grad,
                               rtol=1e-4, atol=1e-5)
    for (name, got), (_, want) in zip(ort.module.named_buffers(), eager.named_buffers()):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6, msg=name)


class BranchesOnShape(nn.Module):
    """Model code whose Python branches depend on input sizes."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x * 2 if x.shape[1] == 3 else x * 3  # pins dim 1
        return y + 1 if x.shape[0] > x.shape[2] else y - 1  # relates dims 0 and 2


def test_shape_guards_select_or_build_the_right_graph() -> None:
    ort = ORTModule(BranchesOnShape())
    eager = BranchesOnShape()
    # The first graph serves (5, 3, 2) alone; the second, traced with dynamic sizes, every
    # shape with dim 1 == 3 and dim 0 > dim 2; then one per branch the guards tell apart.
    shapes = [(5, 3, 2), (6, 3, 4), (8, 3, 1), (4, 3, 6), (7, 5, 2), (5, 3, 2), (2, 5, 7)]
    built = [1, 2, 2, 3, 4, 4, 5]
    for shape, graphs in zip(shapes, built):
        x = torch.randn(*shape)
        torch.testing.assert_close(ort(x), eager(x), msg=f"shape {shape}")
        assert graphs_built(ort) == graphs, f"graphs after shape {shape}"


def test_batch_of_one_reuses_the_graph() -> None:
    """The graph traced with dynamic sizes (after a first call at batch 3) serves batch 1 as
    well as the others: sizes 0 and 1 are not specialized."""
    torch.manual_seed(0)
    eager = nn.Sequential(nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 1))
    ort = ORTModule(copy.deepcopy(eager))
    for batch in (3, 2, 1, 4, 1):
        x = torch.randn(batch, 4)
        torch.testing.assert_close(ort(x), eager(x))
    assert graphs_built(ort) == 2


Pair = namedtuple("Pair", ["first", "second"])


class ReturnsContainers(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(3, 3)

    def forward(self, x: torch.Tensor) -> tuple:
        y = self.fc(x)
        return Pair(y, y * 2), {"sum": y.sum()}


def test_output_containers_keep_their_types() -> None:
    ort = ORTModule(ReturnsContainers())
    pair, extra = ort(torch.randn(2, 3))
    assert isinstance(pair, Pair)
    torch.testing.assert_close(pair.second, pair.first * 2)
    assert type(extra) is dict and set(extra) == {"sum"}


def test_torchscript_exporter_is_retired_with_a_clear_error(
        monkeypatch: pytest.MonkeyPatch) -> None:
    retired = r"exporter 'torchscript': the TorchScript exporter was retired .* exporter=\"auto\""
    with pytest.raises(ValueError, match=retired):
        DebugOptions(exporter="torchscript")
    monkeypatch.setenv("ORTMODULE_EXPORTER", "torchscript")
    with pytest.raises(ValueError, match=retired):
        DebugOptions.from_env()


def test_exporter_option_is_validated(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match="exporter 'jit' is not one of auto, fx, dynamo"):
        DebugOptions(exporter="jit")
    monkeypatch.setenv("ORTMODULE_EXPORTER", "dynamo")
    assert DebugOptions.from_env().exporter == "dynamo"


def test_export_drops_the_source_files_it_read_into_linecache() -> None:
    """torch.export reads library sources into linecache for its stack traces; the capture
    drops those (several MiB held for the process's lifetime) and keeps every entry that was
    there before and every entry no file backs."""
    import linecache

    linecache.clearcache()
    linecache.getline(__file__, 1)  # file-backed, there before the export
    cell = "<interactive cell>"
    linecache.cache[cell] = (12, None, ["y = x + 1\n"], cell)  # no file backs it
    model = ORTModule(nn.Sequential(nn.Linear(4, 3), nn.GELU()))
    try:
        model(torch.randn(2, 4)).sum().backward()
        added = [name for name, entry in linecache.cache.items()
                 if name not in (__file__, cell) and len(entry) == 4 and entry[1]]
        assert added == []
        assert __file__ in linecache.cache and linecache.cache[cell][2] == ["y = x + 1\n"]
    finally:
        linecache.cache.pop(cell, None)


def test_dynamic_shapes_always_exports_once_for_every_size(monkeypatch) -> None:
    """DebugOptions(dynamic_shapes="always") traces with dynamic sizes from the first call:
    one graph serves every batch size. The option is validated, and ORTMODULE_DYNAMIC_SHAPES
    sets it."""
    torch.manual_seed(0)
    eager = nn.Sequential(nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 1))
    ort = ORTModule(copy.deepcopy(eager), DebugOptions(dynamic_shapes="always"))
    for batch in (3, 5, 1):
        x = torch.randn(batch, 4)
        torch.testing.assert_close(ort(x), eager(x))
    assert graphs_built(ort) == 1
    assert next(iter(ort._cache.values()))[0].static_sizes is None
    with pytest.raises(ValueError, match="dynamic_shapes 'sometimes' is not one of auto, always"):
        DebugOptions(dynamic_shapes="sometimes")
    monkeypatch.setenv("ORTMODULE_DYNAMIC_SHAPES", "always")
    assert DebugOptions.from_env().dynamic_shapes == "always"
