"""torch.autocast("cpu", dtype=torch.bfloat16 or torch.float16) around ORTModule: the casts
autocast makes are captured into the graph and the engine rounds every 16-bit value where
eager does, so outputs and gradients match eager autocast to 16-bit precision; float16 with
torch.amp.GradScaler scales, unscales and skips steps as eager does."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from ortmodule import ORTModule

# bfloat16 has an 8-bit mantissa: one rounding step is 2**-8 relative (float16: 2**-11).
# Summation orders differ between the engine and eager, so a few steps are allowed.
RTOL, ATOL = 3e-2, 2e-2
DTYPES = [torch.bfloat16, torch.float16]


def autocast(dtype: torch.dtype = torch.bfloat16) -> torch.autocast:
    return torch.autocast("cpu", dtype=dtype)


class Block(nn.Module):
    """Linear, GELU, LayerNorm, attention-style softmax and a residual."""

    def __init__(self) -> None:
        super().__init__()
        self.inp = nn.Linear(8, 16)
        self.norm = nn.LayerNorm(16)
        self.qk = nn.Linear(16, 32)
        self.out = nn.Linear(16, 3)
        self.drop = nn.Dropout(0.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm(F.gelu(self.inp(x)))
        q, k = self.qk(h).chunk(2, dim=-1)
        att = torch.softmax(q @ k.transpose(-1, -2) / 4.0, dim=-1)
        h = h + self.drop(att @ h)
        return self.out(h).mean(1)


@pytest.mark.parametrize("dtype", DTYPES)
def test_outputs_gradients_and_steps_match_eager_autocast(dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    eager = Block()
    ort = ORTModule(copy.deepcopy(eager))
    opt_e = torch.optim.SGD(eager.parameters(), lr=0.05)
    opt_o = torch.optim.SGD(ort.parameters(), lr=0.05)
    target = torch.randint(0, 3, (4,))
    for step in range(3):
        x = torch.randn(4, 5, 8)
        losses = []
        for model, opt in ((eager, opt_e), (ort, opt_o)):
            opt.zero_grad()
            with autocast(dtype):
                out = model(x)
                loss = F.cross_entropy(out, target)
            assert out.dtype == dtype
            loss.backward()
            opt.step()
            losses.append((out, loss))
        (out_e, loss_e), (out_o, loss_o) = losses
        torch.testing.assert_close(out_o, out_e, rtol=RTOL, atol=ATOL, msg=f"output, step {step}")
        torch.testing.assert_close(loss_o, loss_e, rtol=RTOL, atol=ATOL)
        for (name, p), q in zip(eager.named_parameters(), ort.parameters()):
            assert q.grad is not None and q.grad.dtype == p.grad.dtype == torch.float32
            scale = p.grad.abs().max().item() + 1e-3
            torch.testing.assert_close(q.grad / scale, p.grad / scale, rtol=RTOL, atol=ATOL,
                                       msg=f"grad of {name} at step {step}")
    for (name, p), q in zip(eager.named_parameters(), ort.parameters()):
        torch.testing.assert_close(q, p, rtol=RTOL, atol=ATOL, msg=name)


def test_autocast_state_is_part_of_the_cache_key() -> None:
    torch.manual_seed(0)
    eager = Block()
    ort = ORTModule(copy.deepcopy(eager))
    x = torch.randn(2, 5, 8)
    with torch.no_grad():
        plain = ort(x)
        with autocast():
            low = ort(x)
            low_eager = eager(x)
        with autocast(torch.float16):
            half = ort(x)
            half_eager = eager(x)
        again = ort(x)
    assert plain.dtype == again.dtype == torch.float32 and low.dtype == torch.bfloat16
    assert half.dtype == torch.float16
    torch.testing.assert_close(plain, eager(x), rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(again, plain, rtol=0, atol=0)
    torch.testing.assert_close(low, low_eager, rtol=RTOL, atol=ATOL)
    torch.testing.assert_close(half, half_eager, rtol=RTOL, atol=ATOL)
    assert sum(len(v) for v in ort._cache.values()) == 3
    # autocast(enabled=False) inside the region is respected as in eager.
    with torch.no_grad(), autocast(), torch.autocast("cpu", enabled=False):
        torch.testing.assert_close(ort(x), plain, rtol=0, atol=0)


def _train_under_autocast(model: nn.Module, device: str, dtype: torch.dtype, steps: int,
                          shape: tuple[int, ...], init_scale: float
                          ) -> tuple[list[float], torch.Tensor]:
    """SGD steps on random batches of `shape` (3 classes) under torch.autocast(device, dtype),
    with a GradScaler from `init_scale` for float16: the scale after each step and the
    losses."""
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    scaler = torch.amp.GradScaler(device, init_scale=init_scale, growth_interval=2,
                                  enabled=dtype == torch.float16)
    torch.manual_seed(1)
    scales, losses = [], []
    for _ in range(steps):
        x = torch.randn(*shape, device=device)
        target = torch.randint(0, 3, (shape[0],), device=device)
        opt.zero_grad()
        with torch.autocast(device, dtype=dtype):
            out = model(x)
            loss = F.cross_entropy(out, target)
        assert out.dtype == dtype
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        scales.append(scaler.get_scale())
        losses.append(loss.detach())
    return scales, torch.stack(losses)


def _train_like_eager(build: type[nn.Module], device: str, dtype: torch.dtype, steps: int,
                      shape: tuple[int, ...], init_scale: float
                      ) -> tuple[ORTModule, list[float]]:
    """The model `build` makes, trained eagerly and through ORTModule from the same state
    (_train_under_autocast): the scales (the skipped steps), the losses and the parameters
    agree. Returns the ORTModule and the scales."""
    torch.manual_seed(0)
    eager = build().to(device)
    ort = ORTModule(copy.deepcopy(eager))
    (scales_e, losses_e), (scales_o, losses_o) = (
        _train_under_autocast(model, device, dtype, steps, shape, init_scale)
        for model in (eager, ort))
    assert scales_o == scales_e
    torch.testing.assert_close(losses_o, losses_e, rtol=RTOL, atol=ATOL)
    for (name, p), q in zip(eager.named_parameters(), ort.parameters()):
        torch.testing.assert_close(q, p, rtol=RTOL, atol=ATOL, msg=name)
    return ort, scales_e


def train_like_eager_with_scaler(device: str, dtype: torch.dtype, steps: int) -> None:
    """Trains Block on `device` under torch.autocast(device, dtype), with GradScaler for
    float16, eagerly and through ORTModule, and checks that the scales (the skipped steps),
    the losses and the parameters agree. The first scale (2**24) makes float16 gradients
    overflow in both runs; the scale then halves until the steps go through."""
    _, scales = _train_like_eager(Block, device, dtype, steps, (4, 5, 8), 2.0**24)
    if dtype == torch.float16:
        assert scales[0] < 2.0**24, "the first step should overflow and be skipped"


def test_float16_autocast_with_grad_scaler_scales_unscales_and_skips_like_eager() -> None:
    """The mixed-precision recipe of float16: GradScaler scales the loss, unscales the
    gradients, skips the step whose gradients overflowed float16 and lowers its scale, as
    with eager autocast."""
    train_like_eager_with_scaler("cpu", torch.float16, steps=12)


@pytest.mark.parametrize("dtype", DTYPES)
def test_16_bit_inputs_and_parameters_without_autocast(dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    eager = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2)).to(dtype)
    ort = ORTModule(copy.deepcopy(eager))
    x = torch.randn(3, 4, dtype=dtype)
    out_o, out_e = ort(x), eager(x)
    assert out_o.dtype == dtype
    torch.testing.assert_close(out_o, out_e, rtol=RTOL, atol=ATOL)
    out_o.float().sum().backward()
    out_e.float().sum().backward()
    for p, q in zip(eager.parameters(), ort.parameters()):
        assert q.grad.dtype == dtype
        torch.testing.assert_close(q.grad, p.grad, rtol=RTOL, atol=ATOL)



class ConvNet(nn.Module):
    """Padded, strided-grouped and 1x1 convolutions with batch norm, and one after an uneven
    F.pad (its own Pad op)."""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
            nn.Conv2d(8, 8, 3, stride=2, padding=1, groups=2), nn.ReLU(), nn.Conv2d(8, 6, 1))
        self.last = nn.Conv2d(6, 4, 2)
        self.fc = nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.last(F.pad(self.features(x), (0, 1, 1, 0)))
        return self.fc(h.mean((2, 3)))


class DecoderNet(nn.Module):
    """Transposed convolutions (stride 2 with output_padding, grouped, without bias) between
    a strided Conv and a classifier."""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 8, 3, stride=2, padding=1), nn.ReLU(),
            nn.ConvTranspose2d(8, 6, 3, stride=2, padding=1, output_padding=1), nn.ReLU(),
            nn.ConvTranspose2d(6, 4, 2, stride=1, groups=2, bias=False))
        self.fc = nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.features(x).mean((2, 3)))


def convolutions_read_float32(model: ORTModule) -> list[str]:
    """The Conv, ConvGrad and ConvTranspose nodes of `model`'s optimized training graph with an
    input widened to float32 by a Cast."""
    import onnx

    program = next(iter(model._cache.values()))[0].program
    graph = onnx.load_from_string(program.training_graph_onnx()).graph
    producer = {out: node for node in graph.node for out in node.output}
    widened = []
    for node in graph.node:
        if node.op_type in ("Conv", "ConvGrad", "ConvTranspose"):
            for name in node.input:
                cast = producer.get(name)
                if cast is not None and cast.op_type == "Cast" and any(
                        a.name == "to" and a.i == 1 for a in cast.attribute):
                    widened.append(f"{node.name} input {name}")
    return widened


def train_cnn_like_eager(device: str, dtype: torch.dtype, steps: int = 4,
                         build: type[nn.Module] = ConvNet) -> None:
    """ConvNet (or `build`) under torch.autocast(device, dtype) (float16 with a GradScaler),
    eagerly and through ORTModule: the scales, losses and parameters agree, and the engine's
    convolutions take the 16-bit operands autocast gives them (no float32 Conv between
    Casts)."""
    ort, _ = _train_like_eager(build, device, dtype, steps, (4, 3, 10, 10), 2.0**10)
    assert convolutions_read_float32(ort) == []


@pytest.mark.parametrize("dtype", DTYPES)
def test_convolutions_train_in_16_bits_like_eager(dtype: torch.dtype) -> None:
    train_cnn_like_eager("cpu", dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_transposed_convolutions_train_in_16_bits_like_eager(dtype: torch.dtype) -> None:
    train_cnn_like_eager("cpu", dtype, build=DecoderNet)

@pytest.mark.slow
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", ["bert", "gpt2", "llama"])
def test_transformers_train_under_autocast_like_eager(name: str, dtype: torch.dtype) -> None:
    from tests.python.test_transformers import FAMILIES

    family = FAMILIES[name]
    torch.manual_seed(0)
    eager = family.build(0.0).train()
    ort = ORTModule(copy.deepcopy(eager))
    batch = family.batch(2, 8, 11)
    losses = []
    for model in (eager, ort):
        with autocast(dtype):
            out = model(**batch)
        out.loss.backward()
        losses.append(out.loss)
    torch.testing.assert_close(losses[1], losses[0], rtol=RTOL, atol=ATOL)
    for (pname, p), q in zip(eager.named_parameters(), ort.parameters()):
        if p.grad is None:
            assert q.grad is None, pname
            continue
        scale = p.grad.abs().max().item() + 1e-6
        torch.testing.assert_close(q.grad / scale, p.grad / scale, rtol=RTOL, atol=ATOL,
                                   msg=f"grad of {pname}")
