"""The graph-cache key (ortmodule._call_key.CallKey), the contract between module.py and
_C.StepCall: each of its components, changed alone after a call (with what the change
necessarily brings along), gives another key and makes the C++ fast path miss (so the call goes to the Python key and its own graph), and
StepCall refuses a key with a field it does not check."""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn

from ortmodule import _C, ORTModule, _schema
from ortmodule._call_key import CallKey, call_key
from ortmodule.module import _MISS


class TwoInputs(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 3)
        self.head = nn.Sequential(nn.ReLU(), nn.Linear(3, 2))

    def forward(self, x: torch.Tensor, y: torch.Tensor | None = None) -> torch.Tensor:
        h = self.lin(x)
        return self.head(h if y is None else h + y)


def _key_of(ort: ORTModule, args: tuple, kwargs: dict) -> CallKey:
    tensors: list[torch.Tensor] = []
    spec = _schema.flatten((args, kwargs), tensors)
    return call_key(spec, tensors, ort._all_modules, ort._param_slots)


def _other_arity(ort: ORTModule, x: torch.Tensor) -> tuple[tuple, dict]:
    return (x, torch.zeros(3)), {}


def _other_dtype(ort: ORTModule, x: torch.Tensor) -> tuple[tuple, dict]:
    return (x.double(),), {}


def _other_rank(ort: ORTModule, x: torch.Tensor) -> tuple[tuple, dict]:
    return (x.unsqueeze(0),), {}


def _input_requires_grad(ort: ORTModule, x: torch.Tensor) -> tuple[tuple, dict]:
    return (x.clone().requires_grad_(True),), {}


def _other_device(ort: ORTModule, x: torch.Tensor) -> tuple[tuple, dict]:
    return (x.to("meta"),), {}


def _submodule_in_eval(ort: ORTModule, x: torch.Tensor) -> tuple[tuple, dict]:
    ort.module.head[1].eval()
    return (x,), {}


def _parameter_frozen(ort: ORTModule, x: torch.Tensor) -> tuple[tuple, dict]:
    ort.module.head[1].weight.requires_grad_(False)
    return (x,), {}


def _parameter_dtype(ort: ORTModule, x: torch.Tensor) -> tuple[tuple, dict]:
    ort.module.lin.bias.data = ort.module.lin.bias.data.double()
    return (x,), {}


# Each component of the key and calls that differ from the first call in it alone; the
# context the changed call runs under (grad mode, autocast) comes with it.
CHANGES: dict[str, list[tuple[Callable[..., tuple[tuple, dict]], Any]]] = {
    "inputs": [(_other_arity, None)],
    "tensors": [(_other_dtype, None), (_other_rank, None), (_input_requires_grad, None),
                (_other_device, None)],
    "training": [(_submodule_in_eval, None)],
    "grad": [(lambda ort, x: ((x,), {}), torch.no_grad)],
    "params": [(_parameter_frozen, None), (_parameter_dtype, None)],
    "autocast": [(lambda ort, x: ((x,), {}),
                  lambda: torch.autocast("cpu", dtype=torch.bfloat16))],
}
CASES = [(field, k) for field, changes in CHANGES.items() for k in range(len(changes))]
# What a change necessarily brings along: another argument is another tensor too, and grad
# mode is part of the tensors' and the parameters' requires_grad components.
IMPLIED = {"inputs": {"tensors"}, "grad": {"tensors", "params"}}


def test_every_component_of_the_key_has_a_change_here() -> None:
    assert set(CHANGES) == {f.name for f in dataclasses.fields(CallKey)}


@pytest.mark.parametrize(("field", "k"), CASES, ids=[f"{f}-{k}" for f, k in CASES])
def test_a_component_changed_alone_misses_the_fast_path(field: str, k: int) -> None:
    torch.manual_seed(0)
    ort = ORTModule(TwoInputs())
    x = torch.randn(5, 4)
    for _ in range(2):  # the second call runs through the StepCall of the first
        ort(x).sum().backward()
    step = ort.__dict__["_last_call"]
    assert isinstance(step, _C.StepCall)
    first = _key_of(ort, (x,), {})
    assert step((x,), {}) is not _MISS  # the same call takes the fast path
    change, context = CHANGES[field][k]
    args, kwargs = change(ort, x)
    with context() if context is not None else _nothing():
        changed = _key_of(ort, args, kwargs)
        assert step(args, kwargs) is _MISS
    differing = [f.name for f in dataclasses.fields(CallKey)
                 if getattr(changed, f.name) != getattr(first, f.name)]
    assert field in differing and set(differing) <= {field, *IMPLIED.get(field, ())}, differing


def test_the_changed_call_runs_its_own_graph_like_eager() -> None:
    torch.manual_seed(0)
    eager = TwoInputs()
    ort = ORTModule(copy.deepcopy(eager))
    x = torch.randn(5, 4)
    for m in (ort, eager):
        m(x).sum().backward()
    ort.module.head[1].eval()
    eager.head[1].eval()
    with torch.no_grad():
        torch.testing.assert_close(ort(x), eager(x), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(ort(x, torch.ones(3)), eager(x, torch.ones(3)), rtol=1e-6,
                               atol=1e-6)


def test_step_call_refuses_a_key_with_a_field_it_does_not_check() -> None:
    @dataclasses.dataclass(frozen=True)
    class WiderKey(CallKey):
        phase: int = 0

    torch.manual_seed(0)
    ort = ORTModule(TwoInputs())
    x = torch.randn(5, 4)
    ort(x)
    entry = ort.__dict__["_last_call"].entry
    key = WiderKey(*(getattr(_key_of(ort, (x,), {}), f.name)
                     for f in dataclasses.fields(CallKey)))
    with pytest.raises(ValueError, match=r"StepCall checks the CallKey fields inputs, tensors, "
                                         r"training, grad, params, autocast but the key has .*"
                                         r"phase: teach StepCall::matches"):
        _C.StepCall(entry.runner, entry, key, (x,), {}, ort._all_modules, ort._param_slots,
                    None, None, None, _MISS, [0])


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None
