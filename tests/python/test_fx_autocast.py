"""torch.autocast through the fx lowering: the casts autocast makes are made explicit by
replaying each op of a region (``ortmodule.capture.fx.autocast``). They must be exactly the casts
torch's own second trace (``ExportedProgram.run_decompositions``) finds, and the trained
result must match eager autocast and torch.onnx's lowering of the same trace."""

from __future__ import annotations

import copy
from collections import Counter

import pytest
import torch
from torch import nn

from ortmodule import DebugOptions, ExportError, ORTModule, _schema
from ortmodule.capture import trace as capture_trace
from ortmodule.capture.fx import autocast as fx_autocast

DTYPES = [torch.bfloat16, torch.float16]


class Mixed(nn.Module):
    """Ops of each autocast list (Linear, matmul and conv run in 16 bits; LayerNorm and
    softmax keep their input's type on the CPU), a region with autocast switched off, one
    switching off another device's autocast only, an in-place update between two products
    of the same value and a parameter used several times."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv1d(4, 4, 3, padding=1)
        self.fc = nn.Linear(16, 16)
        self.norm = nn.LayerNorm(16)
        self.w = nn.Parameter(torch.randn(16, 16) / 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.conv(x)  # [B, 4, 16]
        h = self.norm(self.fc(h))
        a = torch.softmax(h @ self.w, dim=-1)
        with torch.autocast("cuda", enabled=False):
            a = a + (h @ self.w)  # still a 16-bit product: the CPU's autocast is on
        with torch.autocast("cpu", enabled=False):
            exact = a.float() @ self.w  # float32 product inside the region
        h2 = exact.clone()  # float32: each product below casts it
        first = h2 @ self.w
        h2.add_(1.0)
        second = h2 @ self.w  # must cast the updated value, not reuse the first cast
        return (first + second).float().sum() + exact.sum()


def _casts(gm: torch.fx.GraphModule) -> Counter:
    """(consumer op, from dtype, to dtype) of every cast in the program (the model's own
    ``.float()`` is an ``aten.to`` before decomposition, a ``_to_copy`` after)."""
    found: Counter = Counter()
    for node in gm.graph.nodes:
        if node.op == "get_attr":
            found.update(_casts(getattr(gm, node.target)))
        if node.target in (torch.ops.aten._to_copy.default, torch.ops.aten.to.dtype):
            for user in node.users:
                found[(str(user.target), node.args[0].meta["val"].dtype,
                       node.meta["val"].dtype)] += 1
    return found


@pytest.mark.parametrize("dtype", DTYPES)
def test_casts_are_those_of_torchs_second_trace(dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    model = Mixed()
    tensors: list[torch.Tensor] = []
    spec = _schema.flatten(((torch.randn(3, 4, 16),), {}), tensors)
    with capture_trace.trace(model, spec, tensors, False, ("cpu", dtype)) as traced:
        program = traced.program
        want = _casts(program.run_decompositions({}).graph_module)
        inserted = fx_autocast.insert_casts(program.graph_module)
        got = _casts(program.graph_module)
    assert got == want
    # conv (input, weight, bias), fc (weight, bias), the parameter w (cast once per region
    # that uses it: outside, then in the other device's region, then after it), the float32
    # value before and after its in-place update.
    assert inserted == 10


@pytest.mark.parametrize("dtype", DTYPES)
def test_small_model_trains_like_eager_autocast(dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    eager = Mixed()
    ort = ORTModule(copy.deepcopy(eager))
    x = torch.randn(3, 4, 16)
    results = []
    for model in (eager, ort):
        with torch.autocast("cpu", dtype=dtype):
            loss = model(x)
        loss.backward()
        results.append((loss, [p.grad for p in model.parameters()]))
    entry = next(e for entries in ort._cache.values() for e in entries)
    assert entry.exporter == "fx"
    tol = {"rtol": 2e-2, "atol": 2e-2}  # one 16-bit rounding apart at most
    torch.testing.assert_close(results[1][0], results[0][0], **tol)
    for got, want in zip(results[1][1], results[0][1]):
        scale = want.abs().max().item() + 1e-6
        torch.testing.assert_close(got / scale, want / scale, **tol)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", ["bert", "gpt2", "llama"])
def test_transformers_match_torch_onnx_lowering(name: str, dtype: torch.dtype) -> None:
    from tests.python.test_transformers import FAMILIES

    family = FAMILIES[name]
    torch.manual_seed(0)
    model = family.build(0.0).train()
    batch = family.batch(2, 8, 11)
    results = []
    for exporter in ("fx", "dynamo"):
        ort = ORTModule(copy.deepcopy(model), DebugOptions(exporter=exporter))
        with torch.autocast("cpu", dtype=dtype):
            out = ort(**batch)
        out.loss.backward()
        entry = next(e for entries in ort._cache.values() for e in entries)
        assert entry.exporter == exporter
        results.append((out.loss, [p.grad for p in ort.parameters()]))
    # The two graphs round in the same places but not always in the same order (torch.onnx
    # decomposes some ops): they agree within two 16-bit rounding steps, per gradient as a
    # relative norm (eager autocast is 1e-2 from float32 on these models).
    step = 2 * (2.0**-8 if dtype == torch.bfloat16 else 2.0**-11)
    torch.testing.assert_close(results[0][0], results[1][0], rtol=step, atol=0.0)
    for got, want in zip(results[0][1], results[1][1]):
        assert (got is None) == (want is None)
        if got is not None and want.abs().max() > 1e-6:  # not a gradient of rounding noise
            assert (got - want).norm() <= step * want.norm()


class Doubled(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        return x * 2

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        return grad * 2


class WithFunction(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return Doubled.apply(self.fc(x)).float().sum()


def test_bridged_call_in_a_region_is_lowered_by_torch_onnx() -> None:
    torch.manual_seed(0)
    eager = WithFunction()
    x = torch.randn(4, 8)
    with pytest.raises(ExportError, match="bridged call.*autocast region"), \
            torch.autocast("cpu", dtype=torch.bfloat16):
        ORTModule(copy.deepcopy(eager), DebugOptions(exporter="fx"))(x)
    ort = ORTModule(copy.deepcopy(eager))  # "auto": torch.onnx lowers the same trace
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = ort(x)
        want = eager(x)
    entry = next(e for entries in ort._cache.values() for e in entries)
    assert entry.exporter == "dynamo"
    torch.testing.assert_close(got, want, rtol=2e-2, atol=2e-2)
