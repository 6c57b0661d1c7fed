"""Python numbers that forward returns from ``.item()``: the engine's graph
computes the one-element tensor, and the call returns the number with eager's type (float,
int or bool) and value, without a graph break and without a gradient, alone or next to
tensors in the returned structure, recomputed on every call. A read that forward goes on
computing with still splits forward at a graph break (tests/python/test_graph_breaks.py)."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from ortmodule import DebugOptions, FallbackPolicy, ORTModule, export_cache
from tests.python.parity_utils import Apply

STRICT = DebugOptions(fallback=FallbackPolicy.NEVER)  # no graph break, no bridge


def _entries(ort: ORTModule) -> list[Any]:
    return [e for es in ort._cache.values() for e in es]


def same_numbers(got: Any, want: Any, rtol: float = 0.0) -> None:
    """The same structure, Python numbers of the same type and value (floats to ``rtol``:
    the engine sums in another order than eager), tensors close."""
    assert type(got) is type(want), (got, want)
    if isinstance(want, (tuple, list)):
        assert len(got) == len(want)
        for g, w in zip(got, want):
            same_numbers(g, w, rtol)
    elif isinstance(want, dict):
        assert got.keys() == want.keys()
        for k in want:
            same_numbers(got[k], want[k], rtol)
    elif isinstance(want, torch.Tensor):
        torch.testing.assert_close(got, want)
    elif isinstance(want, float) and math.isnan(want):
        assert math.isnan(got)
    elif isinstance(want, float):
        assert math.isclose(got, want, rel_tol=rtol, abs_tol=rtol), (got, want)
    else:
        assert got == want, (got, want)


def check_calls(fn: Callable[..., Any], *calls: tuple[torch.Tensor, ...],
                options: DebugOptions = STRICT, rtol: float = 0.0) -> ORTModule:
    """``fn`` through ORTModule against eager on every call's inputs (one graph for all)."""
    ort = ORTModule(Apply(fn), options)
    for inputs in calls:
        same_numbers(ort(*inputs), fn(*inputs), rtol)
    return ort


SUM_RTOL = {torch.float32: 1e-6, torch.float64: 1e-14, torch.float16: 1e-3}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
def test_float_item_is_a_python_float(dtype: torch.dtype) -> None:
    x1, x2 = torch.randn(5, 3).to(dtype), torch.randn(5, 3).to(dtype)
    ort = check_calls(lambda x: x.sum().item(), (x1,), (x2,), rtol=SUM_RTOL[dtype])
    # An element read as it is: its value widened exactly, as eager's item() widens it.
    check_calls(lambda x: x[1, 2].item(), (x1,), (x2,))
    (entry,) = _entries(ort)
    assert entry.program is not None and entry.graph_breaks is None  # one engine graph


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.uint8])
def test_integer_item_is_a_python_int(dtype: torch.dtype) -> None:
    def fn(x: torch.Tensor, k: torch.Tensor) -> Any:
        return (x > 0).sum().item(), k.reshape(1, 1).item()

    check_calls(fn, (torch.randn(7), torch.tensor([3], dtype=dtype)),
                (torch.randn(7), torch.tensor([200], dtype=dtype)))


def test_bool_item_is_a_python_bool() -> None:
    def fn(x: torch.Tensor, flag: torch.Tensor) -> Any:
        return (x > 0).all().item(), flag.item(), (x > 10).any().item()

    check_calls(fn, (torch.rand(4) + 0.1, torch.tensor(False)),
                (torch.randn(4) - 5, torch.tensor([True])))


def test_numbers_next_to_tensors_in_containers_train_as_eager() -> None:
    """A loss tensor trains as eager's; the numbers beside it are plain Python values."""
    torch.manual_seed(0)
    eager = nn.Sequential(nn.Linear(4, 3), nn.Tanh())

    class Model(nn.Module):
        def __init__(self, net: nn.Module) -> None:
            super().__init__()
            self.net = net

        def forward(self, x: torch.Tensor) -> Any:
            y = self.net(x)
            loss = y.square().mean()
            return loss, {"loss": loss.item(), "positive": (y > 0).sum().item()}, [
                y.max().item()]

    ort = ORTModule(Model(nn.Sequential(nn.Linear(4, 3), nn.Tanh())), STRICT)
    ort.module.net.load_state_dict(eager.state_dict())
    reference = Model(eager)
    for step in range(3):
        x = torch.randn(6 + step, 4)
        got, want = ort(x), reference(x)
        assert not isinstance(got[1]["loss"], torch.Tensor)
        same_numbers(got[1:], want[1:], rtol=1e-6)
        torch.testing.assert_close(got[0], want[0])
        got[0].backward()
        want[0].backward()
        for (name, p), q in zip(eager.named_parameters(), ort.module.net.parameters()):
            torch.testing.assert_close(q.grad, p.grad, msg=name)
    assert len(_entries(ort)) <= 2  # the first sizes, then symbolic ones


def test_the_number_of_a_tensor_that_requires_grad_has_no_gradient() -> None:
    x = torch.randn(3, requires_grad=True)
    got = ORTModule(Apply(lambda x: (x * 2, (x * 2).sum().item())), STRICT)(x)
    assert isinstance(got[1], float) and got[1] == pytest.approx((x * 2).sum().item())
    assert got[0].requires_grad


def test_a_read_used_further_still_breaks_the_graph() -> None:
    """x.item() * 2 and a tensor scaled by the read: computed after the read in eager
    (a graph break), as before; under FallbackPolicy.NEVER an error names the read."""
    def fn(x: torch.Tensor) -> Any:
        s = x.abs().sum().item()
        return x / s, s * 2

    x = torch.randn(4, 3)
    ort = check_calls(fn, (x,), (x + 1,), options=DebugOptions(), rtol=1e-6)
    assert any(e.graph_breaks is not None for e in _entries(ort))
    with pytest.raises(Exception, match=r"\.item\(\)"):
        ORTModule(Apply(fn), STRICT)(x)


def test_more_than_one_element_is_eager_error() -> None:
    with pytest.raises(RuntimeError):
        torch.randn(2).item()
    with pytest.raises(Exception, match="element"):
        ORTModule(Apply(lambda x: x.item()), STRICT)(torch.randn(2))


class Counts(nn.Module):
    """A module class of its own (the export cache names classes by module and name)."""

    def forward(self, x: torch.Tensor) -> Any:
        return x * 2, (x > 0).sum().item(), x.abs().max().item(), (x > 5).any().item()


def test_numbers_come_back_from_the_persistent_export_cache(tmp_path: Path) -> None:
    export_cache.reset_stats()
    opts = DebugOptions(cache_dir=str(tmp_path), fallback=FallbackPolicy.NEVER)
    x = torch.randn(4, 3)
    first = ORTModule(Counts(), opts)(x)
    loaded = ORTModule(Counts(), opts)
    second, want = loaded(x), Counts()(x)
    assert export_cache.stats()["hits"] == 1
    (entry,) = _entries(loaded)
    assert "trace" not in entry.seconds  # the graph and its output schema came from disk
    same_numbers(first, want)
    same_numbers(second, want)
