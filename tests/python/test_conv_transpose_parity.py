"""nn.ConvTranspose1d/2d/3d and F.conv_transpose* under ORTModule against eager PyTorch:
forward outputs and the gradients of the input, the weight and the bias, in float64 and
float32, then a small generator (DCGAN-style) trained three AdamW steps. The fx exporter
with fallback NEVER, so the layers run as the engine's ConvTranspose (a bridge to PyTorch
would raise)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path

import onnx
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from ortmodule import DebugOptions, FallbackPolicy, ORTModule

FX = DebugOptions(exporter="fx", fallback=FallbackPolicy.NEVER)
# float64: sums in another order than eager's; float32: a few ulps of the outputs' magnitude.
TOL = {torch.float64: (1e-10, 1e-12), torch.float32: (1e-5, 1e-5)}


class Fn(nn.Module):
    def __init__(self, fn: Callable[..., torch.Tensor]) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, *xs: torch.Tensor) -> torch.Tensor:
        return self.fn(*xs)


def _check(
    module: nn.Module,
    shape: tuple[int, ...],
    dtype: torch.dtype,
    seed: int = 0,
    options: DebugOptions = FX,
) -> None:
    rtol, atol = TOL[dtype]
    module = module.to(dtype)
    torch.manual_seed(seed)
    x = torch.randn(*shape, dtype=dtype)
    ort = ORTModule(copy.deepcopy(module), options)
    results = []
    for m in (module, ort):
        leaf = x.clone().requires_grad_(True)
        out = m(leaf)
        torch.manual_seed(seed + 1)
        (out * torch.randn_like(out)).sum().backward()
        results.append((out.detach(), leaf.grad, [p.grad for p in m.parameters()]))
    (ref, ref_dx, ref_dp), (got, got_dx, got_dp) = results
    assert got.shape == ref.shape
    torch.testing.assert_close(got, ref, rtol=rtol, atol=atol)
    torch.testing.assert_close(got_dx, ref_dx, rtol=rtol, atol=atol)
    assert len(got_dp) == len(ref_dp)
    for (name, _), a, b in zip(module.named_parameters(), got_dp, ref_dp):
        assert a is not None, f"no gradient for {name}"
        torch.testing.assert_close(a, b, rtol=rtol, atol=atol, msg=lambda m, n=name: f"{n}: {m}")


# (layer, input shape): strides, padding, output_padding, dilation, groups, bias or none
LAYERS = {
    "1d": (lambda: nn.ConvTranspose1d(3, 4, 3), (2, 3, 7)),
    "1d-s2-op1-nobias": (
        lambda: nn.ConvTranspose1d(4, 2, 4, stride=2, padding=1, output_padding=1, bias=False),
        (2, 4, 5),
    ),
    "1d-unbatched": (lambda: nn.ConvTranspose1d(3, 2, 3, stride=2, padding=1), (3, 6)),
    "2d-s2-p1-op1": (
        lambda: nn.ConvTranspose2d(4, 3, 3, stride=2, padding=1, output_padding=1),
        (2, 4, 5, 5),
    ),
    "2d-dcgan": (
        lambda: nn.ConvTranspose2d(6, 4, 4, stride=2, padding=1, bias=False),
        (2, 6, 4, 4),
    ),
    "2d-groups-dilation": (
        lambda: nn.ConvTranspose2d(
            4, 6, (3, 2), stride=(2, 1), padding=(1, 0), dilation=(1, 2), groups=2
        ),
        (2, 4, 4, 5),
    ),
    "2d-op-below-dilation": (
        lambda: nn.ConvTranspose2d(2, 2, 3, stride=1, dilation=2, output_padding=1),
        (1, 2, 4, 4),
    ),
    "2d-unbatched": (lambda: nn.ConvTranspose2d(3, 2, 2, stride=2), (3, 4, 4)),
    "3d-s2-op": (
        lambda: nn.ConvTranspose3d(2, 3, 3, stride=2, padding=1, output_padding=(1, 0, 1)),
        (1, 2, 3, 3, 2),
    ),
    "3d-groups-nobias": (
        lambda: nn.ConvTranspose3d(
            4, 2, (2, 3, 2), stride=(1, 2, 1), dilation=(2, 1, 1), groups=2, bias=False
        ),
        (2, 4, 2, 3, 3),
    ),
}


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("name", list(LAYERS))
def test_conv_transpose_layer_matches_eager(name: str, dtype: torch.dtype) -> None:
    make, shape = LAYERS[name]
    torch.manual_seed(0)
    _check(make(), shape, dtype)


class Functional(nn.Module):
    """F.conv_transpose2d with int arguments and a weight given as a parameter."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(4, 3, 3, 3) * 0.3)
        self.bias = nn.Parameter(torch.randn(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.conv_transpose2d(x, self.weight, self.bias, 2, 1, 1, 1, 1)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
def test_functional_conv_transpose_matches_eager(dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    _check(Functional(), (2, 4, 3, 4), dtype)


class AtenConvolution(nn.Module):
    """aten.convolution / aten._convolution called with transposed=True (a dilated, grouped
    2-D transposed convolution with output_padding)."""

    def __init__(self, private: bool) -> None:
        super().__init__()
        self.private = private
        self.weight = nn.Parameter(torch.randn(4, 3, 3, 3) * 0.3)
        self.bias = nn.Parameter(torch.randn(6))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        args = (x, self.weight, self.bias, [2, 1], [1, 0], [1, 2], True, [1, 0], 2)
        if self.private:
            return torch.ops.aten._convolution(*args, False, False, True, True)
        return torch.ops.aten.convolution(*args)


@pytest.mark.parametrize("private", [False, True], ids=["convolution", "_convolution"])
def test_transposed_aten_convolution_matches_eager(private: bool) -> None:
    torch.manual_seed(0)
    _check(AtenConvolution(private), (2, 4, 3, 4), torch.float64)


@pytest.mark.parametrize("exporter", ["fx", "dynamo"])
def test_both_exporters_emit_conv_transpose(exporter: str, tmp_path: Path) -> None:
    """The fx lowering and torch.onnx's both emit ONNX ConvTranspose, which runs natively
    (fallback NEVER) and matches eager."""
    options = DebugOptions(
        exporter=exporter,
        fallback=FallbackPolicy.NEVER,
        save_onnx=True,
        onnx_prefix="ct",
        save_path=str(tmp_path),
    )
    torch.manual_seed(0)
    _check(
        nn.ConvTranspose2d(3, 2, 3, stride=2, padding=1, output_padding=1),
        (2, 3, 4, 4),
        torch.float32,
        options=options,
    )
    (path,) = tmp_path.glob("ct_*_forward.onnx")
    nodes = [n for n in onnx.load(str(path)).graph.node if n.op_type == "ConvTranspose"]
    assert len(nodes) == 1
    attrs = {a.name: list(a.ints) for a in nodes[0].attribute if a.ints}
    assert attrs["output_padding"] == [1, 1] and attrs["strides"] == [2, 2]
    assert attrs["pads"] == [1, 1, 1, 1]


class Generator(nn.Module):
    """DCGAN-style: a latent vector up to an image through transposed convolutions."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.ConvTranspose2d(8, 16, 4, stride=1, padding=0, bias=False),  # 1 -> 4
            nn.BatchNorm2d(16),
            nn.ReLU(),
            nn.ConvTranspose2d(16, 8, 4, stride=2, padding=1, bias=False),  # 4 -> 8
            nn.BatchNorm2d(8),
            nn.ReLU(),
            nn.ConvTranspose2d(8, 3, 3, stride=2, padding=1, output_padding=1),  # 8 -> 16
            nn.Tanh(),
        )

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.net(z)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
def test_generator_trains_like_eager(dtype: torch.dtype) -> None:
    rtol, atol = {torch.float64: (1e-9, 1e-11), torch.float32: (1e-4, 1e-5)}[dtype]
    torch.manual_seed(0)
    eager = Generator().to(dtype)
    ort = ORTModule(copy.deepcopy(eager), FX)
    opts = [torch.optim.AdamW(m.parameters(), lr=1e-2) for m in (eager, ort)]
    z = torch.randn(4, 8, 1, 1, dtype=dtype)
    target = torch.rand(4, 3, 16, 16, dtype=dtype) * 2 - 1
    for step in range(3):
        losses = []
        for m, opt in zip((eager, ort), opts):
            opt.zero_grad(set_to_none=True)
            loss = F.mse_loss(m(z), target)
            loss.backward()
            losses.append(loss.detach())
        torch.testing.assert_close(losses[1], losses[0], rtol=rtol, atol=atol)
        for (name, p), q in zip(eager.named_parameters(), ort.parameters()):
            torch.testing.assert_close(
                q.grad,
                p.grad,
                rtol=rtol,
                atol=atol,
                msg=lambda m, n=name, s=step: f"step {s} {n}: {m}",
            )
        if step == 0:  # the running statistics of one step from the same weights; their
            # momentum is an ONNX float attribute (float32): 0.1 off by 2.4e-7 relative
            for (name, b), c in zip(eager.named_buffers(), ort.buffers()):
                torch.testing.assert_close(
                    c,
                    b,
                    rtol=max(rtol, 1e-6),
                    atol=atol,
                    msg=lambda m, n=name: f"step 0 buffer {n}: {m}",
                )
        for opt in opts:
            opt.step()
    # AdamW divides each gradient by its own running magnitude: where one nearly cancels
    # (BatchNorm makes a weight's gradient sum to about zero), the gradients' relative error
    # becomes a step error of up to lr times it; the running statistics follow the weights.
    step_rtol, step_atol = {torch.float64: (1e-6, 1e-9), torch.float32: (1e-4, 1e-4)}[dtype]
    for (name, p), q in zip(eager.named_parameters(), ort.parameters()):
        torch.testing.assert_close(
            q.detach(),
            p.detach(),
            rtol=step_rtol,
            atol=step_atol,
            msg=lambda m, n=name: f"{n} after 3 steps: {m}",
        )
    for (name, b), c in zip(eager.named_buffers(), ort.buffers()):
        torch.testing.assert_close(
            c, b, rtol=step_rtol, atol=step_atol, msg=lambda m, n=name: f"buffer {n}: {m}"
        )


def _conv_transpose_model(**attrs: object) -> bytes:
    from onnx import TensorProto, helper

    node = helper.make_node("ConvTranspose", ["x", "w"], ["y"], **attrs)
    graph = helper.make_graph(
        [node],
        "conv_transpose",
        [
            helper.make_tensor_value_info("x", TensorProto.DOUBLE, [1, 2, 3, 3]),
            helper.make_tensor_value_info("w", TensorProto.DOUBLE, [2, 2, 3, 3]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.DOUBLE, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return model.SerializeToString()


@pytest.mark.parametrize(
    "attrs,message",
    [
        ({"strides": [2, 2], "auto_pad": "SAME_UPPER"}, "auto_pad SAME_UPPER"),
        ({"strides": [2, 2], "output_shape": [6, 6]}, "attribute 'output_shape'"),
    ],
    ids=["auto_pad", "output_shape"],
)
def test_gradient_with_derived_pads_is_refused_with_the_attribute_named(
    attrs: dict[str, object], message: str
) -> None:
    """auto_pad SAME_* and output_shape derive the pads from the input's shape, which the
    gradient rule does not see: the forward runs, the gradient is refused naming them."""
    from ortmodule import _C

    model = _conv_transpose_model(**attrs)
    x, w = (
        torch.randn(1, 2, 3, 3, dtype=torch.float64),
        torch.randn(2, 2, 3, 3, dtype=torch.float64),
    )
    (y,) = _C.run(_C.Program(model, [], []), [x, w])
    assert y.shape == (1, 2, 6, 6)
    with pytest.raises(RuntimeError, match=f"{message}.*give explicit 'pads'"):
        _C.Program(model, [], ["x"])


def test_unknown_attribute_values_are_refused() -> None:
    from ortmodule import _C

    x, w = (
        torch.randn(1, 2, 3, 3, dtype=torch.float64),
        torch.randn(2, 2, 3, 3, dtype=torch.float64),
    )
    with pytest.raises(RuntimeError, match="unknown auto_pad 'SAME'"):
        _C.run(_C.Program(_conv_transpose_model(auto_pad="SAME"), [], []), [x, w])
    with pytest.raises(RuntimeError, match="'output_padding'"):
        _C.run(_C.Program(_conv_transpose_model(output_padding=[1]), [], []), [x, w])
