"""The fast paths of the MaxPool and Conv CPU kernels against PyTorch, in float32, at sizes
where parallel_for splits the work over two threads.

MaxPool: the unrolled row loops (2x2 and 3x3 windows, dilation 1, stride 2), the
tap-by-tap row loop (other windows) and the clipped border windows, with indices; MaxPoolGrad's
scatter, and its refusal of an index outside its plane. Conv: the chunked im2col + GEMM paths
(small outputs batch many images per GEMM), the backward's whole-batch path, Winograd
F(2x2, 3x3) (forward, input and weight gradients, in float32 and float64), pointwise 1x1
convolutions, groups and strides.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from onnx import TensorProto, helper

from ortmodule import _C


@pytest.fixture(autouse=True)
def two_threads():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


def _program(op: str, inputs: dict[str, tuple[int, ...]], outputs: int, wrt: list[str],
             domain: str = "", types: dict[str, int] | None = None, **attrs: object):
    types = types or {}
    ins = [helper.make_tensor_value_info(n, types.get(n, TensorProto.FLOAT), s)
           for n, s in inputs.items()]
    names = [f"y{i}" for i in range(outputs)]
    outs = [helper.make_tensor_value_info(n, TensorProto.UNDEFINED, None) for n in names]
    node = helper.make_node(op, list(inputs), names, domain=domain, **attrs)
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("ai.ortmodule", 1)]
    model = helper.make_model(helper.make_graph([node], "g", ins, outs), opset_imports=opsets)
    return _C.Program(model.SerializeToString(), [], wrt)


# (input shape, kernel, stride, padding, dilation, ceil_mode): every row loop and the borders.
POOLS = [
    ((8, 32, 28, 28), 2, 2, 0, 1, False),   # the CNN's MaxPool(2): unrolled 2x2, stride 2
    ((8, 32, 15, 15), 2, 2, 0, 1, True),    # odd size, ceil_mode: a clipped last row/column
    ((4, 64, 32, 32), 3, 2, 1, 1, False),   # ResNet's stem pool: unrolled 3x3, padded border
    ((4, 32, 20, 20), 3, 1, 1, 1, False),   # unrolled 3x3, stride 1 (overlapping windows)
    ((4, 32, 21, 21), 3, 3, 0, 1, True),    # tap-by-tap loop, runtime stride
    ((4, 32, 20, 20), 2, 1, 0, 1, False),   # tap-by-tap loop, stride 1
    ((4, 32, 20, 20), 3, 2, 1, 2, False),   # dilated: tap-by-tap loop
]


@pytest.mark.parametrize("shape,kernel,stride,pad,dilation,ceil_mode", POOLS)
def test_maxpool_matches_torch(shape: tuple[int, ...], kernel: int, stride: int, pad: int,
                               dilation: int, ceil_mode: bool) -> None:
    gen = torch.Generator().manual_seed(0)
    # A permutation: distinct values, so the arg-max (and the gradient) is unambiguous.
    x = (torch.randperm(int(np.prod(shape)), generator=gen).float() / 1000).reshape(shape)
    prog = _program("MaxPool", {"x": shape}, 2, ["x"], kernel_shape=[kernel, kernel],
                    strides=[stride, stride], pads=[pad] * 4, dilations=[dilation, dilation],
                    ceil_mode=int(ceil_mode))
    xa = x.clone().requires_grad_(True)
    y, idx = _C.run(prog, [xa])
    xt = x.clone().requires_grad_(True)
    ref, ref_idx = F.max_pool2d(xt, kernel, stride, pad, dilation, ceil_mode=ceil_mode,
                                return_indices=True)
    torch.testing.assert_close(y, ref, rtol=0, atol=0)
    plane = torch.arange(shape[0] * shape[1]).reshape(shape[0], shape[1], 1, 1)
    torch.testing.assert_close(idx, ref_idx + plane * shape[2] * shape[3], rtol=0, atol=0)
    dy = torch.randn(ref.shape, generator=gen)
    (dx,) = torch.autograd.grad(y, [xa], dy)
    (ref_dx,) = torch.autograd.grad(ref, [xt], dy)
    torch.testing.assert_close(dx, ref_dx, rtol=1e-6, atol=1e-6)


def test_maxpool_grad_refuses_an_index_outside_its_plane() -> None:
    shape = (2, 32, 16, 16)
    prog = _program("MaxPoolGrad", {"dy": (2, 32, 8, 8), "idx": (2, 32, 8, 8), "shape": (4,)},
                    1, [], domain="ai.ortmodule",
                    types={"idx": TensorProto.INT64, "shape": TensorProto.INT64},
                    kernel_shape=[2, 2], strides=[2, 2])
    x = torch.randn(shape, requires_grad=True)
    _, idx = F.max_pool2d(x, 2, return_indices=True)
    plane = torch.arange(64).reshape(2, 32, 1, 1) * 256
    idx = idx + plane
    dy = torch.randn(2, 32, 8, 8)
    (dx,) = _C.run(prog, [dy, idx, torch.tensor(shape)])
    (ref,) = torch.autograd.grad(F.max_pool2d(x, 2), [x], dy)
    torch.testing.assert_close(dx, ref, rtol=0, atol=0)
    idx[1, 5, 3, 4] = 0  # a cell of plane 0, named by plane 37
    with pytest.raises(RuntimeError, match=r"entry 0 at position 2396 is out of range"):
        _C.run(prog, [dy, idx, torch.tensor(shape)])


# (x shape, weight shape, stride, padding, dilation, group, bias); a padding list is ONNX's
# [top, left, bottom, right].
CONVS = [
    # Small batches of columns: the backward takes the batch as one chunk.
    ((16, 128, 2, 2), (128, 128, 3, 3), 1, 1, 1, 1, False),  # 4-pixel outputs
    ((15, 64, 4, 4), (96, 64, 3, 3), 1, 1, 1, 1, True),      # 16-pixel outputs, odd batch
    # Larger: chunks of images per thread, per-thread partial dw sums.
    ((8, 32, 48, 48), (48, 32, 3, 3), 2, 1, 1, 1, True),
    # Winograd F(2x2, 3x3): 3x3, stride 1, outputs of at least 8x8, 16+ channels.
    ((8, 32, 14, 14), (64, 32, 3, 3), 1, 1, 1, 1, True),     # the CNN's second conv
    ((5, 24, 15, 13), (16, 24, 3, 3), 1, 1, 1, 1, True),     # odd sizes: clipped edge tiles
    ((4, 16, 12, 11), (20, 16, 3, 3), 1, [0, 1, 2, 0], 1, 1, False),  # asymmetric pads
    ((4, 16, 10, 10), (16, 16, 3, 3), 1, 2, 1, 1, True),     # pad 2: a larger output
    ((4, 16, 12, 12), (16, 16, 3, 3), 1, 0, 1, 1, True),     # no padding
    ((8, 1, 28, 28), (32, 1, 3, 3), 1, 1, 1, 1, True),       # C = 1: dw taken transposed
    ((6, 3, 32, 32), (16, 3, 7, 7), 2, 3, 1, 1, False),      # a stem: strided, padded
    ((8, 32, 9, 9), (48, 32, 1, 1), 1, 0, 1, 1, True),       # pointwise: no im2col
    ((8, 32, 9, 9), (48, 32, 1, 1), 2, 0, 1, 1, False),      # strided 1x1 downsample
    ((4, 32, 12, 12), (32, 8, 3, 3), 1, 2, 2, 4, True),      # groups, dilation
]


@pytest.mark.parametrize("xs,ws,stride,pad,dilation,group,bias", CONVS)
def test_conv_matches_torch(xs: tuple[int, ...], ws: tuple[int, ...], stride: int,
                            pad: int | list[int], dilation: int, group: int, bias: bool) -> None:
    pads = pad if isinstance(pad, list) else [pad] * 4
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(xs, generator=gen)
    w = torch.randn(ws, generator=gen) / float(np.sqrt(np.prod(ws[1:])))
    b = torch.randn(ws[0], generator=gen) if bias else None
    inputs = {"x": xs, "w": ws, **({"b": (ws[0],)} if bias else {})}
    prog = _program("Conv", inputs, 1, list(inputs), strides=[stride] * 2, pads=pads,
                    dilations=[dilation] * 2, group=group)
    ours = [t.clone().requires_grad_(True) for t in (x, w, b) if t is not None]
    ref = [t.clone().requires_grad_(True) for t in (x, w, b) if t is not None]
    (y,) = _C.run(prog, ours)
    # torch pads symmetrically: pad the input by hand ([left, right, top, bottom]).
    x_ref = F.pad(ref[0], [pads[1], pads[3], pads[0], pads[2]])
    y_ref = F.conv2d(x_ref, ref[1], ref[2] if bias else None, stride, 0, dilation, group)
    torch.testing.assert_close(y, y_ref, rtol=1e-4, atol=1e-4)
    dy = torch.randn(y_ref.shape, generator=gen)
    grads = torch.autograd.grad(y, ours, dy)
    grads_ref = torch.autograd.grad(y_ref, ref, dy)
    for name, g, g_ref in zip("xwb", grads, grads_ref):
        scale = float(g_ref.abs().max())
        torch.testing.assert_close(g, g_ref, rtol=1e-4, atol=1e-5 * scale, msg=f"d{name}")


@pytest.mark.parametrize("wrt", [["x"], ["w"], ["b"]])
def test_conv_gradient_of_one_input(wrt: list[str]) -> None:
    """ConvGrad with only one of its outputs wanted (the others' work skipped), on the
    whole-batch path (4-pixel outputs) and the Winograd one (14x14)."""
    gen = torch.Generator().manual_seed(2)
    for xs, ws in [((16, 64, 2, 2), (96, 64, 3, 3)), ((8, 32, 14, 14), (48, 32, 3, 3))]:
        feed = {"x": torch.randn(xs, generator=gen), "w": torch.randn(ws, generator=gen) / 20,
                "b": torch.randn(ws[0], generator=gen)}
        prog = _program("Conv", {n: tuple(t.shape) for n, t in feed.items()}, 1, wrt,
                        pads=[1, 1, 1, 1])
        ours = {n: t.clone().requires_grad_(n in wrt) for n, t in feed.items()}
        ref = {n: t.clone().requires_grad_(n in wrt) for n, t in feed.items()}
        (y,) = _C.run(prog, list(ours.values()))
        y_ref = F.conv2d(ref["x"], ref["w"], ref["b"], 1, 1)
        dy = torch.randn(y_ref.shape, generator=gen)
        (g,) = torch.autograd.grad(y, [ours[wrt[0]]], dy)
        (g_ref,) = torch.autograd.grad(y_ref, [ref[wrt[0]]], dy)
        torch.testing.assert_close(g, g_ref, rtol=1e-4, atol=1e-5 * float(g_ref.abs().max()))


# Winograd F(2x2, 3x3) weight gradients: (x shape, output channels, ONNX pads). Every case has a
# 3x3 stride-1 kernel, outputs of at least 8x8 and 16+ channels (conv2d_winograd_applies).
WINOGRAD_DW = [
    ((4, 64, 16, 16), 64, [1, 1, 1, 1]),    # ResNet-18's 64-channel layer at 64x64 inputs
    ((16, 128, 8, 8), 128, [1, 1, 1, 1]),   # its 128-channel layer: 16 tiles per image
    ((2, 256, 8, 8), 256, [1, 1, 1, 1]),    # wide channels: chunks of 64 tiles at least
    ((3, 32, 13, 11), 48, [1, 1, 1, 1]),    # odd outputs: zero-padded dY tiles at the edges
    ((3, 24, 12, 15), 16, [0, 0, 0, 0]),    # no padding, odd output width
    ((2, 16, 9, 11), 40, [2, 0, 1, 2]),     # asymmetric pads up to 2
    ((1, 16, 20, 20), 24, [1, 1, 1, 1]),    # one image: one range, the BLAS's own threads
]


# The gradients take Winograd under blas (its products on the BLAS) and under packed (on the
# micro-kernel); under auto also, but on a non-Intel CPU without AVX-512, which keeps
# im2col + GEMM (docs/api.md, ORTMODULE_CPU_GEMM).
WINOGRAD_GRADIENT_MODES = ["blas", "packed"] if _C.cpu_isa_supported("avx2") else ["blas"]


@pytest.mark.parametrize("gemm", WINOGRAD_GRADIENT_MODES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("xs,m,pads", WINOGRAD_DW)
def test_conv_winograd_weight_gradient(xs: tuple[int, ...], m: int, pads: list[int],
                                       dtype: torch.dtype, gemm: str) -> None:
    _C.set_cpu_gemm(gemm)
    try:
        _conv_winograd_weight_gradient(xs, m, pads, dtype)
    finally:
        _C.set_cpu_gemm("auto")


def _conv_winograd_weight_gradient(xs: tuple[int, ...], m: int, pads: list[int],
                                   dtype: torch.dtype) -> None:
    gen = torch.Generator().manual_seed(3)
    ws = (m, xs[1], 3, 3)
    feed = {"x": torch.randn(xs, generator=gen, dtype=dtype),
            "w": torch.randn(ws, generator=gen, dtype=dtype) / float(np.sqrt(9 * xs[1])),
            "b": torch.randn(m, generator=gen, dtype=dtype)}
    onnx_type = TensorProto.FLOAT if dtype == torch.float32 else TensorProto.DOUBLE
    prog = _program("Conv", {n: tuple(t.shape) for n, t in feed.items()}, 1, list(feed),
                    types=dict.fromkeys(feed, onnx_type), pads=pads)
    ours = [t.clone().requires_grad_(True) for t in feed.values()]
    ref = [t.clone().requires_grad_(True) for t in feed.values()]
    (y,) = _C.run(prog, ours)
    y_ref = F.conv2d(F.pad(ref[0], [pads[1], pads[3], pads[0], pads[2]]), ref[1], ref[2])
    dy = torch.randn(y_ref.shape, generator=gen, dtype=dtype)
    grads = torch.autograd.grad(y, ours, dy)
    grads_ref = torch.autograd.grad(y_ref, ref, dy)
    rtol, atol = (1e-4, 1e-5) if dtype == torch.float32 else (1e-10, 1e-12)
    for name, g, g_ref in zip("xwb", grads, grads_ref):
        scale = float(g_ref.abs().max())
        torch.testing.assert_close(g, g_ref, rtol=rtol, atol=atol * scale, msg=f"d{name}")



# The forward's two algorithms: im2col + GEMM on the BLAS, Winograd on the packed kernels.
GEMM_MODES = ["blas", "packed"] if _C.cpu_isa_supported("avx2") else ["blas"]


@pytest.mark.parametrize("gemm", GEMM_MODES)
@pytest.mark.parametrize("xs,m,pads", WINOGRAD_DW)
def test_conv_forward_error(xs: tuple[int, ...], m: int, pads: list[int], gemm: str) -> None:
    """Conv's float32 outputs at the Winograd-eligible shapes are as close to a float64
    convolution as eager's float32 ones, on either algorithm: within twice eager's relative
    distance (norm), or 1e-6."""
    _C.set_cpu_gemm(gemm)
    try:
        _conv_forward_error(xs, m, pads)
    finally:
        _C.set_cpu_gemm("auto")


def _conv_forward_error(xs: tuple[int, ...], m: int, pads: list[int]) -> None:
    gen = torch.Generator().manual_seed(4)
    feed = {"x": torch.randn(xs, generator=gen),
            "w": torch.randn((m, xs[1], 3, 3), generator=gen) / float(np.sqrt(9 * xs[1])),
            "b": torch.randn(m, generator=gen)}
    prog = _program("Conv", {n: tuple(t.shape) for n, t in feed.items()}, 1, list(feed),
                    pads=pads)
    (y,) = _C.run(prog, list(feed.values()))

    def conv(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return F.conv2d(F.pad(x, [pads[1], pads[3], pads[0], pads[2]]), w, b)

    exact = conv(*(t.double() for t in feed.values()))
    eager = conv(*feed.values())
    error = ((y.double() - exact).norm() / exact.norm()).item()
    eager_error = ((eager.double() - exact).norm() / exact.norm()).item()
    assert error <= max(2 * eager_error, 1e-6), (error, eager_error)
