"""FallbackPolicy.UNSUPPORTED_OP (the default): an op the engine lacks runs on PyTorch as
one bridge node (its gradient from autograd), the rest of the model on the engine, and the
first graph says so once; with FallbackPolicy.NEVER the error names the op and the way out.

Ops used: ``linalg.eigh`` with its eigenvectors (which no lowering translates: their signs are
LAPACK's), the ``torch.library`` custom
ops ``inverse`` and ``inverse_checked`` defined here (matrix inverses no lowering can look
into), and ``stft`` (lowered by torch.onnx to the ONNX op STFT, which the engine has no kernel
for).
"""

from __future__ import annotations

import copy
import logging
import re

import pytest
import torch
from torch import nn

from ortmodule import DebugOptions, ExportError, FallbackPolicy, ORTModule

TOL = {"rtol": 1e-10, "atol": 1e-12}  # float64 models
FALLBACK = DebugOptions(fallback=FallbackPolicy.UNSUPPORTED_OP)


def close(actual: torch.Tensor, expected: torch.Tensor, what: str) -> None:
    torch.testing.assert_close(actual, expected, **TOL, msg=lambda m: f"{what}: {m}")


class SymmetricExp(nn.Module):
    """Linear, exponentials of symmetric 2x2 matrices through their eigenvectors (no engine
    op) times the input, tanh, Linear."""

    IN = 6

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.fc1 = nn.Linear(6, 8)
        self.fc2 = nn.Linear(8, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc1(x)
        m = h.reshape(-1, 2, 2) * 0.5
        w, q = torch.linalg.eigh(m + m.mT)
        e = ((q * w.exp().unsqueeze(-2)) @ q.mT).reshape(h.shape)
        return self.fc2(torch.tanh(e * h))


@torch.library.custom_op("ortmodule_fallback_test::inverse", mutates_args=())
def inverse(m: torch.Tensor) -> torch.Tensor:
    return torch.linalg.inv(m)


@torch.library.custom_op("ortmodule_fallback_test::inverse_checked", mutates_args=())
def inverse_checked(m: torch.Tensor, check_errors: bool) -> torch.Tensor:
    return torch.linalg.inv_ex(m, check_errors=check_errors).inverse


@inverse.register_fake
def _(m: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(m)


@inverse_checked.register_fake
def _(m: torch.Tensor, check_errors: bool) -> torch.Tensor:
    return torch.empty_like(m)


def _inverse_setup(ctx: object, inputs: tuple, output: torch.Tensor) -> None:
    ctx.save_for_backward(output)


def _inverse_backward(ctx: object, grad: torch.Tensor, *_: object) -> tuple:
    (inv,) = ctx.saved_tensors
    g = -inv.mT @ grad @ inv.mT  # d(A^-1) = -A^-1 dA A^-1
    return (g,) if len(ctx.needs_input_grad) == 1 else (g, None)


inverse.register_autograd(_inverse_backward, setup_context=_inverse_setup)
inverse_checked.register_autograd(_inverse_backward, setup_context=_inverse_setup)


class Inverse(nn.Module):
    IN = 6

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(1)
        self.fc1 = nn.Linear(6, 8)
        self.fc2 = nn.Linear(8, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc1(x).reshape(-1, 2, 2) * 0.125 + torch.eye(2, dtype=x.dtype)
        return self.fc2(inverse(h).reshape(x.shape[0], 8))


class InverseEx(nn.Module):
    """inverse_checked(., check_errors=True): a non-tensor argument passed through the
    bridge."""

    IN = 4

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(2)
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc(x)
        m = h.reshape(-1, 2, 2) * 0.125 + torch.eye(2, dtype=h.dtype)
        return inverse_checked(m, True).reshape(h.shape) * h


def train(ort: ORTModule, eager: nn.Module, steps: int = 4) -> None:
    x = torch.randn(10, eager.IN, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    opt_ort = torch.optim.AdamW(ort.parameters(), lr=0.05)
    opt_eager = torch.optim.AdamW(eager.parameters(), lr=0.05)
    eager_params = dict(eager.named_parameters())
    for step in range(steps):
        opt_ort.zero_grad()
        opt_eager.zero_grad()
        y_ort, y_eager = ort(x), eager(x)
        close(y_ort, y_eager, f"output at step {step}")
        y_ort.square().mean().backward()
        y_eager.square().mean().backward()
        for name, p in ort.named_parameters():
            close(p.grad, eager_params[name].grad, f"gradient of {name} at step {step}")
        opt_ort.step()
        opt_eager.step()
    for name, p in ort.named_parameters():
        close(p.detach(), eager_params[name].detach(), f"parameter {name}")


@pytest.mark.parametrize("model_class, op", [(SymmetricExp, r"aten\.linalg_eigh"),
                                             (Inverse, r"ortmodule_fallback_test\.inverse"),
                                             (InverseEx,
                                              r"ortmodule_fallback_test\.inverse_checked")])
def test_unsupported_op_runs_on_pytorch_and_trains_like_eager(
        model_class: type, op: str, caplog: pytest.LogCaptureFixture) -> None:
    eager = model_class().to(torch.float64)
    ort = ORTModule(copy.deepcopy(eager), FALLBACK)
    with caplog.at_level(logging.WARNING, logger="ortmodule"):
        train(ort, eager)
    warnings = [r.getMessage() for r in caplog.records if "on PyTorch (bridged" in r.getMessage()]
    assert len(warnings) <= 1, warnings  # once, when the graph is first built
    if warnings:
        assert re.search(rf"{op}\.\w+ x1", warnings[0]), warnings[0]
        assert "FallbackPolicy.NEVER" in warnings[0]
    assert "test_fallback.py(" in warnings[0] and "forward" in warnings[0]  # the source line
    # Only that op left the engine: one bridge node, everything else engine ops.
    (entries,) = ort._cache.values()
    nodes = entries[0].program.plan_description()
    assert nodes.count("TorchCall ") == 1
    assert "Gemm" in nodes or "MatMul" in nodes


STRICT = DebugOptions(fallback=FallbackPolicy.NEVER)


class ShortTimeFourier(nn.Module):
    """stft: torch.onnx lowers it to the ONNX op STFT, which the engine lacks."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(6, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.stft(self.fc(x), 4, center=False, return_complex=False)


def test_unsupported_onnx_op_error_names_op_and_the_option() -> None:
    ort = ORTModule(ShortTimeFourier(), STRICT)
    with pytest.raises(RuntimeError) as info:
        ort(torch.randn(2, 6))
    message = str(info.value)
    assert "unsupported op: STFT node" in message
    assert "test_fallback.py(" in message  # the source line
    assert "DebugOptions(fallback=FallbackPolicy.UNSUPPORTED_OP)" in message
    assert "Supported ops" in message


def test_untranslatable_aten_op_error_names_op_and_the_option() -> None:
    ort = ORTModule(Inverse(), STRICT)
    with pytest.raises(ExportError) as info:
        ort(torch.randn(2, 6))
    message = str(info.value)
    assert "ortmodule_fallback_test.inverse" in message and "test_fallback.py(" in message
    assert "DebugOptions(fallback=FallbackPolicy.UNSUPPORTED_OP)" in message


def test_fallback_policy_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORTMODULE_FALLBACK_POLICY", "never")
    with pytest.raises(ExportError, match="ortmodule_fallback_test.inverse"):
        ORTModule(Inverse())(torch.randn(2, 6))
    monkeypatch.setenv("ORTMODULE_FALLBACK_POLICY", "unsupported_op")
    eager = Inverse().to(torch.float64)
    ort = ORTModule(copy.deepcopy(eager))
    x = torch.randn(3, 6, dtype=torch.float64)
    close(ort(x), eager(x), "output")


def test_random_ops_through_the_fallback_draw_from_torch_generator_like_eager() -> None:
    """rand_like and randn (a symbolic size among the arguments) lower to ONNX random ops
    the engine lacks; through ATen they draw exactly what eager draws."""

    class Noisy(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(4)
            self.fc = nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = self.fc(x)
            return h * torch.rand_like(h) + torch.randn(h.shape[0], 1, dtype=h.dtype)

    eager = Noisy().to(torch.float64)
    ort = ORTModule(copy.deepcopy(eager), FALLBACK)
    x = torch.randn(3, 4, dtype=torch.float64)
    ort(x)  # builds the graph
    for seed in (1, 2):
        torch.manual_seed(seed)
        y_ort = ort(x)
        state = torch.get_rng_state()
        torch.manual_seed(seed)
        y_eager = eager(x)
        assert torch.equal(state, torch.get_rng_state()), "the generator advanced differently"
        close(y_ort, y_eager, f"output with seed {seed}")
        y_ort.sum().backward()
        y_eager.sum().backward()
    close(ort.module.fc.weight.grad, eager.fc.weight.grad, "gradient of fc.weight")
