"""torch.nn.LSTM, GRU and RNN under ORTModule against the same modules run eagerly: outputs
(h_n and c_n included), the gradients of the input, the initial states and every weight and
bias, then three AdamW steps. The fx exporter only, so the layers run as the engine's own ops
(ai.ortmodule LSTMTorch / GRUTorch / RNNTorch), never through a fallback."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch
from torch import nn

from ortmodule import DebugOptions, ExportError, ORTModule

TOL = {torch.float32: (1e-4, 1e-5), torch.float64: (1e-10, 1e-12)}
CELLS = {
    "lstm": (nn.LSTM, {}),
    "gru": (nn.GRU, {}),
    "rnn_tanh": (nn.RNN, {"nonlinearity": "tanh"}),
    "rnn_relu": (nn.RNN, {"nonlinearity": "relu"}),
}
# (num_layers, bidirectional, batch_first, bias, initial states given)
CONFIGS = [
    (1, False, False, True, False),
    (1, True, True, False, True),
    (2, False, True, True, True),
    (2, True, False, True, False),
    (3, True, True, False, True),
]
T, B, I, H = 5, 3, 4, 6


class Recurrent(nn.Module):
    """The layer, returning every result flat: output, h_n (and c_n)."""

    def __init__(self, cell: str, **kwargs: Any) -> None:
        super().__init__()
        cls, extra = CELLS[cell]
        self.rnn = cls(I, H, **extra, **kwargs)

    def forward(self, x: torch.Tensor, *state: torch.Tensor) -> tuple[torch.Tensor, ...]:
        if isinstance(self.rnn, nn.LSTM):
            y, (h, c) = self.rnn(x, tuple(state) if state else None)
            return y, h, c
        y, h = self.rnn(x, state[0] if state else None)
        return y, h


def _inputs(cell: str, layers: int, dirs: int, batch_first: bool, states: bool,
            dtype: torch.dtype, unbatched: bool = False) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    shape = (T, I) if unbatched else (B, T, I) if batch_first else (T, B, I)
    tensors = [torch.randn(shape, generator=g, dtype=dtype)]
    if states:
        state = (layers * dirs, H) if unbatched else (layers * dirs, B, H)
        tensors += [torch.randn(state, generator=g, dtype=dtype) * 0.5
                    for _ in range(2 if cell == "lstm" else 1)]
    return tensors


def _loss(outputs: tuple[torch.Tensor, ...]) -> torch.Tensor:
    """A weighted sum of every result, the weights fixed: each gets its own gradient."""
    g = torch.Generator().manual_seed(2)
    return sum((o * torch.randn(o.shape, generator=g, dtype=o.dtype)).sum() for o in outputs)


def _close(actual: torch.Tensor, expected: torch.Tensor, what: str) -> None:
    rtol, atol = TOL[expected.dtype]
    torch.testing.assert_close(actual, expected, rtol=rtol, atol=atol,
                               msg=lambda m: f"{what}: {m}")


def _check(cell: str, dtype: torch.dtype, inputs: list[torch.Tensor], steps: int = 3,
           **kwargs: Any) -> None:
    torch.manual_seed(0)
    eager = Recurrent(cell, **kwargs).to(dtype)
    ort = ORTModule(copy.deepcopy(eager), debug_options=DebugOptions(exporter="fx"))
    opts = [torch.optim.AdamW(m.parameters(), lr=1e-2) for m in (eager, ort)]
    for step in range(steps):
        results = []
        for m, opt in zip((eager, ort), opts):
            opt.zero_grad(set_to_none=True)
            leaves = [t.clone().requires_grad_(True) for t in inputs]
            outputs = m(*leaves)
            _loss(outputs).backward()
            results.append((outputs, leaves))
        (ref, ref_in), (got, got_in) = results
        names = ["output", "h_n", "c_n"]
        for k, (a, b) in enumerate(zip(got, ref)):
            _close(a, b, f"step {step}: {names[k]}")
        for k, (a, b) in enumerate(zip(got_in, ref_in)):
            _close(a.grad, b.grad, f"step {step}: gradient of input {k}")
        for (name, p), q in zip(eager.named_parameters(), ort.parameters()):
            _close(q.grad, p.grad, f"step {step}: gradient of {name}")
        for opt in opts:
            opt.step()
    for (name, p), q in zip(eager.named_parameters(), ort.parameters()):
        _close(q.detach(), p.detach(), f"{name} after {steps} AdamW steps")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: "L{}{}{}{}{}".format(
    c[0], "-bidir" if c[1] else "", "-bf" if c[2] else "", "" if c[3] else "-nobias",
    "-h0" if c[4] else ""))
@pytest.mark.parametrize("cell", list(CELLS))
def test_matches_eager(cell: str, config: tuple, dtype: torch.dtype) -> None:
    layers, bidir, batch_first, bias, states = config
    inputs = _inputs(cell, layers, 2 if bidir else 1, batch_first, states, dtype)
    _check(cell, dtype, inputs, num_layers=layers, bidirectional=bidir, batch_first=batch_first,
           bias=bias)


@pytest.mark.parametrize("cell", list(CELLS))
def test_unbatched_input_matches_eager(cell: str) -> None:
    inputs = _inputs(cell, 2, 2, False, True, torch.float64, unbatched=True)
    _check(cell, torch.float64, inputs, steps=1, num_layers=2, bidirectional=True)


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_dropout_in_eval_and_at_one_matches_eager(cell: str) -> None:
    """Eval mode has no dropout; p = 1 zeroes the inner layers' outputs in both."""
    inputs = _inputs(cell, 2, 1, False, True, torch.float64)
    torch.manual_seed(0)
    eager = Recurrent(cell, num_layers=2, dropout=0.5).double().eval()
    ort = ORTModule(copy.deepcopy(eager), debug_options=DebugOptions(exporter="fx")).eval()
    with torch.no_grad():
        for a, b in zip(ort(*inputs), eager(*inputs)):
            _close(a, b, "eval output")
    _check(cell, torch.float64, inputs, steps=1, num_layers=2, dropout=1.0)


@pytest.mark.parametrize("cell", ["lstm", "rnn_tanh"])
def test_dropout_between_layers_trains(cell: str) -> None:
    """Dropout 0.5 between layers (the engine's Dropout, its own random stream): the inner
    outputs change, the first layer's h_n does not, and the gradients match central
    differences of the same draw (torch's seed fixes the engine's mask)."""
    x, *state = _inputs(cell, 2, 1, False, True, torch.float64)
    torch.manual_seed(0)
    eager = Recurrent(cell, num_layers=2, dropout=0.5).double()
    ort = ORTModule(copy.deepcopy(eager), debug_options=DebugOptions(exporter="fx"))

    def run(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        torch.manual_seed(1234)
        return ort(x, *state)

    dropped = run(x)
    plain = eager.eval()(x, *state)
    _close(dropped[1][0], plain[1][0], "first layer's h_n (before any dropout)")
    assert (dropped[0] - plain[0]).abs().max() > 1e-3, "dropout changed nothing"
    assert torch.autograd.gradcheck(run, (x.clone().requires_grad_(True),), eps=1e-6,
                                    atol=1e-6, rtol=1e-5)


def test_proj_size_is_refused() -> None:
    ort = ORTModule(nn.LSTM(I, H, proj_size=2), debug_options=DebugOptions(exporter="fx"))
    with pytest.raises(ExportError, match="proj_size"):
        ort(torch.randn(T, B, I))


def test_packed_sequence_is_refused() -> None:
    class Packed(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.rnn = nn.GRU(I, H)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            packed = nn.utils.rnn.pack_padded_sequence(x, [T] * B)
            return self.rnn(packed)[1]

    ort = ORTModule(Packed(), debug_options=DebugOptions(exporter="fx"))
    with pytest.raises(ExportError, match="PackedSequence"):
        ort(torch.randn(T, B, I))
