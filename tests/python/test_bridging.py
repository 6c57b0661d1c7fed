"""What runs on PyTorch by default and what is refused: ops without a kernel or translation
(ATen ops, ``torch.library`` custom ops) become bridge nodes with autograd's gradient under
the default policy, through either lowering; complex tensors and tensors that require grad
from outside the module are refused with errors naming them; piecewise-constant ops keep
PyTorch's ``requires_grad``."""

from __future__ import annotations

import copy
import logging

import pytest
import torch
from torch import nn

from ortmodule import DebugOptions, ExportError, FallbackPolicy, ORTModule

TOL = {"rtol": 1e-10, "atol": 1e-12}  # float64


@torch.library.custom_op("ortmodule_test::scaled_cube", mutates_args=())
def scaled_cube(x: torch.Tensor, scale: float) -> torch.Tensor:
    return x.pow(3) * scale


@scaled_cube.register_fake
def _(x: torch.Tensor, scale: float) -> torch.Tensor:
    return torch.empty_like(x)


def _cube_backward(ctx: object, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
    (x,) = ctx.saved_tensors
    return grad * 3 * x.square() * ctx.scale, None


def _cube_setup(ctx: object, inputs: tuple, output: torch.Tensor) -> None:
    ctx.save_for_backward(inputs[0])
    ctx.scale = inputs[1]


scaled_cube.register_autograd(_cube_backward, setup_context=_cube_setup)


@torch.library.custom_op("ortmodule_test::norm_and_chunks", mutates_args=())
def norm_and_chunks(x: torch.Tensor, parts: int) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """A result and a list of results, as histogramdd's (hist, bin_edges)."""
    return x.square().sum(-1), [c * (i + 1) for i, c in enumerate(x.chunk(parts, -1))]


@norm_and_chunks.register_fake
def _(x: torch.Tensor, parts: int) -> tuple[torch.Tensor, list[torch.Tensor]]:
    return x.new_empty(x.shape[:-1]), [c.new_empty(c.shape) for c in x.chunk(parts, -1)]


def _chunks_backward(ctx: object, g_norm: torch.Tensor,
                     g_chunks: list[torch.Tensor]) -> tuple[torch.Tensor, None]:
    (x,) = ctx.saved_tensors
    g = torch.cat([gc * (i + 1) for i, gc in enumerate(g_chunks)], -1)
    return g + 2 * x * g_norm.unsqueeze(-1), None


def _chunks_setup(ctx: object, inputs: tuple, output: object) -> None:
    ctx.save_for_backward(inputs[0])


norm_and_chunks.register_autograd(_chunks_backward, setup_context=_chunks_setup)


class ListResultModel(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(4)
        self.fc = nn.Linear(6, 6)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        norm, chunks = torch.ops.ortmodule_test.norm_and_chunks(self.fc(x), 3)
        return norm + sum((c.exp() * (k + 1)).sum(-1) for k, c in enumerate(chunks))


class CustomOpModel(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.fc1 = nn.Linear(5, 6)
        self.fc2 = nn.Linear(6, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.ops.ortmodule_test.scaled_cube(self.fc1(x), 0.5))


def symmetric_exp(m: torch.Tensor) -> torch.Tensor:
    """exp of symmetric matrices through linalg.eigh's eigenvectors, which neither lowering
    runs on the engine (their signs are LAPACK's)."""
    w, q = torch.linalg.eigh(m + m.mT)
    return (q * w.exp().unsqueeze(-2)) @ q.mT


class LinalgModel(nn.Module):
    """linalg.eigh's eigenvectors, which neither lowering runs on the engine, next to
    linalg.inv, which runs natively."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(1)
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc(x)
        m = h.transpose(-1, -2) @ h + torch.eye(4, dtype=h.dtype)
        e = symmetric_exp(h.reshape(-1, 2, 2) * 0.25)
        return torch.linalg.inv(m).sum() + e.sum()


def _train_like_eager(eager: nn.Module, ort: ORTModule, x: torch.Tensor, steps: int = 3) -> None:
    opt_e = torch.optim.AdamW(eager.parameters(), lr=0.01)
    opt_o = torch.optim.AdamW(ort.parameters(), lr=0.01)
    params = dict(eager.named_parameters())
    for step in range(steps):
        opt_e.zero_grad()
        opt_o.zero_grad()
        ye, yo = eager(x), ort(x)
        torch.testing.assert_close(yo, ye, **TOL, msg=lambda m, s=step: f"step {s}: {m}")
        ye.square().sum().backward()
        yo.square().sum().backward()
        for name, p in ort.named_parameters():
            torch.testing.assert_close(p.grad, params[name].grad, **TOL,
                                       msg=lambda m, n=name, s=step: f"grad {n} step {s}: {m}")
        opt_e.step()
        opt_o.step()


def _bridged_ops(ort: ORTModule) -> list[str]:
    import onnx

    ops = []
    for entries in ort._cache.values():
        for entry in entries:
            model = onnx.ModelProto()
            model.ParseFromString(entry.program.training_graph_onnx())
            for n in model.graph.node:
                if n.op_type == "TorchCall":
                    attrs = {a.name: a for a in n.attribute}
                    ops.append(attrs["aten_op"].s.decode())
    return ops


@pytest.mark.bridging
@pytest.mark.parametrize("exporter", ["auto", "fx"])
def test_custom_op_is_bridged_by_default_with_its_autograd(
        exporter: str, caplog: pytest.LogCaptureFixture) -> None:
    eager = CustomOpModel().double()
    ort = ORTModule(copy.deepcopy(eager), DebugOptions(exporter=exporter))
    x = torch.randn(7, 5, dtype=torch.float64)
    with caplog.at_level(logging.WARNING, logger="ortmodule"):
        _train_like_eager(eager, ort, x)
    assert _bridged_ops(ort) == ["ortmodule_test::scaled_cube"]
    assert "Gemm" in ort._cache[next(iter(ort._cache))][0].program.plan_description()


@pytest.mark.bridging
@pytest.mark.parametrize("exporter", ["auto", "fx"])
def test_ops_no_lowering_runs_are_bridged_and_reported_once(
        exporter: str, caplog: pytest.LogCaptureFixture) -> None:
    # A class of its own per case: the report is once per module class and set of ops.
    eager = type(f"LinalgModel_{exporter}", (LinalgModel,), {})().double()
    x = torch.randn(6, 4, dtype=torch.float64)
    with caplog.at_level(logging.WARNING, logger="ortmodule"):
        ort = ORTModule(copy.deepcopy(eager), DebugOptions(exporter=exporter))
        _train_like_eager(eager, ort, x)
        ORTModule(copy.deepcopy(eager), DebugOptions(exporter=exporter))(x)  # same ops again
    reports = [r.getMessage() for r in caplog.records if "on PyTorch (bridged" in r.getMessage()]
    if exporter == "fx" or reports:
        assert len(reports) == 1, reports
        assert "aten.linalg_eigh.default x1" in reports[0]
        assert "test_bridging.py(" in reports[0]  # the source line of each use
        assert "FallbackPolicy.NEVER" in reports[0]
    assert "aten::linalg_eigh" in _bridged_ops(ort)


@pytest.mark.bridging
def test_bridged_op_with_a_list_of_results_trains_like_eager() -> None:
    # (Tensor, Tensor[]): the bridge returns the list's tensors one by one.
    eager = ListResultModel().double()
    ort = ORTModule(copy.deepcopy(eager), DebugOptions(exporter="fx"))
    _train_like_eager(eager, ort, torch.randn(5, 6, dtype=torch.float64))
    assert _bridged_ops(ort) == ["ortmodule_test::norm_and_chunks"]


def test_strict_policy_refuses_custom_ops_naming_them() -> None:
    ort = ORTModule(CustomOpModel(), DebugOptions(exporter="fx", fallback=FallbackPolicy.NEVER))
    with pytest.raises(ExportError, match="ortmodule_test.scaled_cube"):
        ort(torch.randn(2, 5))


@torch.library.custom_op("ortmodule_test::scale_in_place", mutates_args=("x",))
def scale_in_place(x: torch.Tensor, factor: float) -> None:
    x.mul_(factor)


@pytest.mark.bridging
def test_in_place_ops_run_through_their_functional_form_or_are_refused() -> None:
    class InPlace(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(3)
            self.fc = nn.Linear(3, 3)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = self.fc(x).abs() + 1
            torch.ops.aten.exp_(h)  # no translation: aten.exp on PyTorch, h rebound
            return h * x

    eager = InPlace().double()
    x = torch.rand(2, 3, dtype=torch.float64)
    _train_like_eager(eager, ORTModule(copy.deepcopy(eager), DebugOptions(exporter="fx")), x)

    class Mutates(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(3, 3)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = self.fc(x)
            torch.ops.ortmodule_test.scale_in_place(h, 2.0)
            return h

    with pytest.raises(ExportError, match="in place"):
        ORTModule(Mutates(), DebugOptions(exporter="fx"))(torch.rand(2, 3))


@pytest.mark.parametrize("exporter", ["auto", "fx", "dynamo"])
def test_complex_tensors_are_refused_naming_the_op(exporter: str) -> None:
    class Spectrum(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            c = torch.complex(self.fc(x), x)
            return (c * c).real

    with pytest.raises(ExportError, match=r"complex64 tensor.*no complex tensors"):
        ORTModule(Spectrum(), DebugOptions(exporter=exporter))(torch.randn(2, 4))


OUTSIDE = nn.Linear(4, 4)


def test_a_parameter_outside_the_module_is_refused_naming_it() -> None:
    class UsesGlobal(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.own = nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.own(OUTSIDE(x))

    with pytest.raises(ExportError, match=r"parameter of shape \(4(, 4)?,?\) that requires grad") \
            as info:
        ORTModule(UsesGlobal())(torch.randn(2, 4))
    assert "test_bridging.py(" in str(info.value)
    frozen = copy.deepcopy(OUTSIDE).requires_grad_(False)

    class UsesFrozen(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.own = nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.own(frozen(x))

    eager = UsesFrozen()
    x = torch.randn(2, 4)
    torch.testing.assert_close(ORTModule(copy.deepcopy(eager))(x), eager(x))


@pytest.mark.parametrize("fn", [torch.floor, torch.ceil, torch.sign, torch.trunc,
                                lambda t: torch.div(t, 0.7, rounding_mode="floor")],
                         ids=["floor", "ceil", "sign", "trunc", "floor_divide"])
def test_piecewise_constant_outputs_require_grad_like_eager(fn: object) -> None:
    class Step(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = nn.Parameter(torch.linspace(-2, 2, 5))

        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return fn(x * self.w), fn(x) * self.w

    eager = Step()
    ort = ORTModule(copy.deepcopy(eager))
    x = torch.randn(3, 5)
    ye, yo = eager(x), ort(x)
    for e, o in zip(ye, yo):
        assert o.requires_grad == e.requires_grad
        torch.testing.assert_close(o, e)
    sum(t.sum() for t in ye).backward()
    sum(t.sum() for t in yo).backward()
    torch.testing.assert_close(ort.module.w.grad, eager.w.grad)


class Float64Scalars(nn.Module):
    """A bridged op in float64 arithmetic with a Python scalar that float32 cannot hold."""

    def forward(self, m: torch.Tensor) -> torch.Tensor:
        return symmetric_exp(m * 0.1) * m + 1e-3


@pytest.mark.bridging
@pytest.mark.parametrize("exporter", ["auto", "fx"])
def test_float64_python_scalars_keep_their_value_when_bridged(exporter: str) -> None:
    torch.manual_seed(3)
    m = torch.randn(2, 3, 3, dtype=torch.float64, requires_grad=True)
    m_ort = m.detach().clone().requires_grad_()
    expected = Float64Scalars()(m)
    expected.sum().backward()
    got = ORTModule(Float64Scalars(), DebugOptions(exporter=exporter))(m_ort)
    got.sum().backward()
    # Eager's own float64 arithmetic: a scalar rounded to float32 would be off by ~1e-8.
    torch.testing.assert_close(got, expected, rtol=1e-13, atol=1e-15)
    torch.testing.assert_close(m_ort.grad, m.grad, rtol=1e-13, atol=1e-15)
