"""Eager PyTorch against ORTModule (fx exporter: every op lowers natively, none falls back)
for average pooling's window divisors, batch norm's saved statistics, F.interpolate's ATen ops
and the per-sample norms: forward outputs and the gradients of inputs and parameters."""

from __future__ import annotations

import copy
from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from ortmodule import DebugOptions, FallbackPolicy, ORTModule

# fallback NEVER: an op without a native translation raises instead of running on PyTorch.
FX = DebugOptions(exporter="fx", fallback=FallbackPolicy.NEVER)
# float32 sums in another order than eager's: a few ulps of the outputs' magnitude.
RTOL, ATOL = 1e-5, 1e-5


class Fn(nn.Module):
    def __init__(self, fn: Callable[..., torch.Tensor]) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, *xs: torch.Tensor) -> torch.Tensor:
        return self.fn(*xs)


def _check(module: nn.Module, *shapes: tuple[int, ...], rtol: float = RTOL,
           atol: float = ATOL, seed: int = 0, options: DebugOptions = FX) -> None:
    torch.manual_seed(seed)
    xs = [torch.randn(*s) for s in shapes]
    eager = module
    ort = ORTModule(copy.deepcopy(module), options)
    outs = []
    grads = []
    for m in (eager, ort):
        inputs = [x.clone().requires_grad_(True) for x in xs]
        out = m(*inputs)
        out = out if isinstance(out, tuple) else (out,)
        torch.manual_seed(seed + 1)
        loss = sum((o * torch.randn_like(o)).sum() for o in out)
        loss.backward()
        outs.append([o.detach() for o in out])
        grads.append([i.grad for i in inputs] +
                     [p.grad for p in m.parameters() if p.grad is not None])
    for e, o in zip(*outs):
        assert e.shape == o.shape
        torch.testing.assert_close(o, e, rtol=rtol, atol=atol)
    assert len(grads[0]) == len(grads[1])
    for e, o in zip(*grads):
        torch.testing.assert_close(o, e, rtol=rtol, atol=atol)


# ---- average pooling: ceil_mode windows past the padded input, divisor_override ----

@pytest.mark.parametrize("fn,shape", [
    (lambda x: F.avg_pool2d(x, 2, 2, ceil_mode=True, count_include_pad=True), (2, 3, 5, 5)),
    (lambda x: F.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=True), (2, 3, 6, 7)),
    (lambda x: F.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False), (2, 3, 6, 7)),
    # a "global" pool whose kernel is larger than the input
    (lambda x: F.avg_pool2d(x, 4, 4, ceil_mode=True, count_include_pad=True), (2, 3, 3, 3)),
    (lambda x: F.avg_pool2d(x, 2, 2, ceil_mode=True, divisor_override=3), (2, 3, 5, 5)),
    (lambda x: F.avg_pool2d(x, 3, 1, 1, divisor_override=5), (1, 2, 4, 4)),
    (lambda x: F.avg_pool1d(x, 3, 2, 1, ceil_mode=True, count_include_pad=True), (2, 3, 8)),
    (lambda x: F.avg_pool3d(x, 2, 2, ceil_mode=True, count_include_pad=True), (1, 2, 3, 5, 5)),
    (lambda x: F.avg_pool3d(x, (2, 3, 3), 2, 1, ceil_mode=True, divisor_override=7),
     (1, 2, 4, 5, 6)),
])
def test_avg_pool(fn: Callable[[torch.Tensor], torch.Tensor], shape: tuple[int, ...]) -> None:
    _check(Fn(fn), shape)


class EfficientNetTail(nn.Module):
    """A stem with padding, ceil-mode pooling as EfficientNet ports write it (odd sizes), a
    squeeze-excite block, and a head."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, 2, 1)
        self.pool = nn.AvgPool2d(3, 2, 1, ceil_mode=True, count_include_pad=True)
        self.se = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(8, 4, 1), nn.SiLU(),
                                nn.Conv2d(4, 8, 1), nn.Sigmoid())
        self.head = nn.AvgPool2d(4, 4, ceil_mode=True)
        self.fc = nn.Linear(8, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.pool(F.silu(self.stem(x)))
        y = y * self.se(y)
        return self.fc(self.head(y).mean((2, 3)))


@pytest.mark.parametrize("size", [13, 15, 16])
def test_efficientnet_like_pooling(size: int) -> None:
    _check(EfficientNetTail(), (2, 3, size, size))


# ---- batch norm's saved statistics ----

def test_native_batch_norm_saved_statistics() -> None:
    def fn(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, ...]:
        rm, rv = torch.zeros(3), torch.ones(3)
        y, mean, invstd = torch.ops.aten.native_batch_norm(x, w, b, rm, rv, True, 0.1, 1e-5)
        y2, mean2, invstd2 = torch.ops.aten._native_batch_norm_legit.no_stats(
            x, w, b, True, 0.1, 1e-3)
        return y, mean, invstd, y2 + mean2.view(1, 3, 1, 1) * invstd2.view(1, 3, 1, 1)

    _check(Fn(fn), (4, 3, 5, 5), (3,), (3,))


def test_native_batch_norm_eval_statistics_are_empty() -> None:
    def fn(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        rm, rv = torch.full((3,), 0.5), torch.full((3,), 2.0)
        y, mean, invstd = torch.ops.aten._native_batch_norm_legit_no_training(
            x, None, None, rm, rv, 0.1, 1e-5)
        return y, mean, invstd

    _check(Fn(fn), (2, 3, 4))


# ---- F.interpolate ----

INTERPOLATE = [
    # (input shape, kwargs); every ATen overload F.interpolate reaches
    ((2, 3, 5), {"scale_factor": 2.0, "mode": "nearest"}),
    ((2, 3, 7), {"size": 4, "mode": "nearest"}),
    ((2, 3, 4, 5), {"scale_factor": 1.5, "mode": "nearest"}),
    ((2, 3, 4, 5), {"scale_factor": (1.7, 0.6), "mode": "nearest"}),
    ((2, 3, 4, 5), {"size": (7, 3), "mode": "nearest"}),
    ((1, 2, 3, 4, 5), {"scale_factor": 1.3, "mode": "nearest"}),
    ((2, 3, 7), {"scale_factor": 1.6, "mode": "nearest-exact"}),
    ((2, 3, 4, 5), {"scale_factor": 1.5, "mode": "nearest-exact"}),
    ((1, 2, 3, 4, 5), {"size": (5, 3, 7), "mode": "nearest-exact"}),
    ((2, 3, 6), {"scale_factor": 1.7, "mode": "linear"}),
    ((2, 3, 6), {"size": 4, "mode": "linear", "align_corners": True}),
    ((2, 3, 4, 5), {"scale_factor": 2.0, "mode": "bilinear"}),
    ((2, 3, 4, 5), {"scale_factor": 1.3, "mode": "bilinear", "recompute_scale_factor": True}),
    ((2, 3, 4, 5), {"scale_factor": 0.6, "mode": "bilinear"}),
    ((2, 3, 4, 5), {"size": (9, 2), "mode": "bilinear", "align_corners": True}),
    ((1, 2, 3, 4, 5), {"scale_factor": 1.5, "mode": "trilinear"}),
    ((1, 2, 3, 4, 5), {"size": (2, 6, 3), "mode": "trilinear", "align_corners": True}),
    ((2, 3, 4, 5), {"scale_factor": 1.5, "mode": "bicubic"}),
    ((2, 3, 4, 5), {"scale_factor": 1.5, "mode": "bicubic", "recompute_scale_factor": True}),
    ((2, 3, 6, 5), {"size": (4, 9), "mode": "bicubic", "align_corners": True}),
]


@pytest.mark.parametrize("shape,kwargs", INTERPOLATE,
                         ids=[f"{k['mode']}-{i}" for i, (_, k) in enumerate(INTERPOLATE)])
def test_interpolate(shape: tuple[int, ...], kwargs: dict) -> None:
    _check(Fn(lambda x: F.interpolate(x, **kwargs)), shape)


@pytest.mark.parametrize("op,args", [
    (torch.ops.aten.upsample_nearest1d.default, ([9], 1.9)),
    (torch.ops.aten.upsample_nearest2d.default, ([7, 4], 1.5, None)),
    (torch.ops.aten.upsample_nearest3d.default, ([4, 5, 6], None, None, None)),
    (torch.ops.aten._upsample_nearest_exact1d.default, ([4], None)),
    (torch.ops.aten._upsample_nearest_exact2d.default, ([6, 8], 1.5, 1.6)),
    (torch.ops.aten._upsample_nearest_exact3d.default, ([4, 5, 6], None, None, None)),
    (torch.ops.aten.upsample_linear1d.default, ([9], False, 1.9)),
    (torch.ops.aten.upsample_bilinear2d.default, ([7, 4], True, None, None)),
    (torch.ops.aten.upsample_trilinear3d.default, ([4, 5, 6], False, None, 1.25, None)),
    (torch.ops.aten.upsample_bicubic2d.default, ([6, 8], False, 1.5, 1.6)),
    # Sizes kept or doubled under other scale factors: torch's backward kernels take
    # shortcuts its forward kernels do not (nearest 1-D/3-D per axis, bicubic when no size
    # changes); ResizeGrad follows them.
    (torch.ops.aten.upsample_nearest1d.default, ([8], 2.1)),
    (torch.ops.aten.upsample_nearest3d.default, ([4, 4, 6], 1.3, 1.1, None)),
    (torch.ops.aten.upsample_bicubic2d.default, ([4, 5], False, 1.3, 1.2)),
])
def test_upsample_default_overloads(op: torch._ops.OpOverload, args: tuple) -> None:
    rank = len(args[0])
    shape = (2, 3, 4, 5, 4)[: 2 + rank]
    _check(Fn(lambda x: op(x, *args)), shape)


@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
def test_antialias_downsampling_is_native(mode: str) -> None:
    """antialias=True (torch's separable filters over the scaled support) lowers natively,
    with eager's values and gradients."""
    _check(Fn(lambda x: F.interpolate(x, size=(3, 4), mode=mode, antialias=True)), (1, 2, 6, 7))


# ---- per-sample norms ----

@pytest.mark.parametrize("module,shape", [
    (nn.GroupNorm(3, 6), (2, 6, 4, 5)),
    (nn.GroupNorm(1, 4, affine=False), (3, 4, 7)),
    (nn.GroupNorm(4, 4, eps=1e-3), (2, 4, 2, 3, 3)),
    (nn.InstanceNorm1d(3), (2, 3, 7)),
    (nn.InstanceNorm1d(3, affine=True), (2, 3, 7)),
    (nn.InstanceNorm2d(4, affine=True), (2, 4, 5, 6)),
    (nn.InstanceNorm2d(4), (3, 4, 5, 5)),
    (nn.InstanceNorm3d(2, affine=True), (2, 2, 3, 4, 3)),
])
def test_norm_modules(module: nn.Module, shape: tuple[int, ...]) -> None:
    torch.manual_seed(3)
    for p in module.parameters():
        with torch.no_grad():
            p.add_(torch.randn_like(p) * 0.3)
    _check(module, shape)


@pytest.mark.parametrize("cls,shape", [(nn.InstanceNorm1d, (2, 3, 7)),
                                       (nn.InstanceNorm2d, (2, 3, 4, 5)),
                                       (nn.InstanceNorm3d, (2, 3, 2, 3, 4))])
@pytest.mark.parametrize("affine", [False, True])
def test_instance_norm_running_statistics(cls: type, shape: tuple[int, ...],
                                          affine: bool) -> None:
    eager = cls(3, affine=affine, track_running_stats=True, momentum=0.3)
    ort = ORTModule(copy.deepcopy(eager), FX)
    torch.manual_seed(4)
    for _ in range(2):  # training updates the running statistics
        x = torch.randn(*shape) * 2 + 0.5
        _compare_step(eager, ort, x)
    torch.testing.assert_close(ort.module.running_mean, eager.running_mean, rtol=RTOL, atol=ATOL)
    torch.testing.assert_close(ort.module.running_var, eager.running_var, rtol=RTOL, atol=ATOL)
    eager.eval()
    ort.eval()
    _compare_step(eager, ort, torch.randn(*shape))  # eval normalises with them


def _compare_step(eager: nn.Module, ort: nn.Module, x: torch.Tensor) -> None:
    xs = [x.clone().requires_grad_(True) for _ in range(2)]
    outs = [m(xi) for m, xi in zip((eager, ort), xs)]
    torch.testing.assert_close(outs[1], outs[0], rtol=RTOL, atol=ATOL)
    if torch.is_grad_enabled() and outs[0].requires_grad:
        g = torch.randn_like(outs[0])
        for o in outs:
            o.backward(g)
        torch.testing.assert_close(xs[1].grad, xs[0].grad, rtol=RTOL, atol=ATOL)


def test_native_group_norm_statistics() -> None:
    def fn(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return torch.ops.aten.native_group_norm(x, w, b, 2, 6, 12, 3, 1e-5)

    _check(Fn(fn), (2, 6, 3, 4), (6,), (6,))


def test_functional_group_norm() -> None:
    _check(Fn(lambda x, w, b: F.group_norm(x, 2, w, b, eps=1e-4)), (3, 4, 5), (4,), (4,))


@pytest.mark.parametrize("track", [True, False])
def test_batch_norm_saved_statistics_through_torch_onnx(track: bool) -> None:
    """The torch.onnx lowering (its decompositions reach _native_batch_norm_legit_functional
    and .no_stats) gives the same saved statistics."""

    class SavedStats(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bn = nn.BatchNorm2d(3, track_running_stats=track)

        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
            return torch.ops.aten.native_batch_norm(x, self.bn.weight, self.bn.bias,
                                                    self.bn.running_mean, self.bn.running_var,
                                                    True, 0.1, 1e-5)

    torch.manual_seed(0)
    eager = SavedStats()
    ort = ORTModule(copy.deepcopy(eager), DebugOptions(exporter="dynamo"))
    x = torch.randn(4, 3, 5, 5) * 2 + 1
    for got, want in zip(ort(x), eager(x)):
        torch.testing.assert_close(got, want, rtol=RTOL, atol=ATOL)
