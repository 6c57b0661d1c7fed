"""Kernel lab: our Conv / MaxPool / BatchNormalization / Gelu / Softmax / LayerNormalization
CPU kernels against PyTorch eager.

Each case is one ONNX node run through the engine (`_C.Program` + `_C.run`), forward and
backward, next to the matching ATen kernels on the same tensors. Our per-kernel time comes from
the engine's op profiler (one reset per iteration, so the framework around the op is not
counted); PyTorch's from timing the ATen forward and backward calls on their own. The four are
sampled in turn each iteration, so that all see the same load on a shared machine; --stat min
is the steadier summary there. Before timing, every case checks that outputs and gradients agree
with PyTorch, so a fast wrong variant fails loudly instead of winning.

    python benchmarks/kernels/bench_kernels.py                  # all cases, 2 threads
    python benchmarks/kernels/bench_kernels.py --filter conv --runs 50 --stat min
    python benchmarks/kernels/bench_kernels.py --filter gelu --isa baseline,avx2

--isa runs every case once per named instruction set of our vector kernels (cpu_isa.h), so
the baseline and vector paths are compared in one process.

Cases are one list (cases()); adding a shape is one line.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import onnx
import onnx.numpy_helper
import torch
import torch.nn.functional as F
from onnx import helper

from ortmodule import _C

OPSET = 17
FORWARD_OPS = {
    "Conv",
    "MaxPool",
    "BatchNormalization",
    "BatchNormInternal",
    "Gelu",
    "Softmax",
    "ScaledMaskedSoftmax",
    "LayerNormalization",
}
BACKWARD_OPS = {
    "ConvGrad",
    "MaxPoolGrad",
    "BatchNormalizationGrad",
    "GeluGrad",
    "SoftmaxGrad_13",
    "ScaledMaskedSoftmaxGrad",
    "LayerNormalizationGrad",
}


@dataclass
class Case:
    name: str
    op: str  # ONNX op type
    inputs: dict[str, torch.Tensor]
    attrs: dict
    outputs: list[str]
    wrt: list[str]
    # (inputs) -> (forward thunk, backward thunk given dy): PyTorch's ATen kernels.
    torch_kernels: Callable[[dict[str, torch.Tensor]], tuple[Callable, Callable]]
    # Float sums over N*H*W terms differ in rounding order from PyTorch's, so errors are
    # measured relative to the largest reference magnitude rather than elementwise.
    tol: float = 1e-5
    opset: int = OPSET
    # The graph's nodes when the case is more than one `op` node over `inputs` (a chain the
    # engine's passes fuse into one op).
    nodes: list[onnx.NodeProto] | None = None


def conv_case(name: str, n: int, c: int, h: int, m: int, k: int = 3, pad: int = 1,
              stride: int = 1) -> Case:
    x, w, b = torch.randn(n, c, h, h), torch.randn(m, c, k, k) * 0.2, torch.randn(m)

    def kernels(t: dict[str, torch.Tensor]) -> tuple[Callable, Callable]:
        def fwd() -> torch.Tensor:
            return F.conv2d(t["x"], t["w"], t["b"], padding=pad, stride=stride)

        def bwd(dy: torch.Tensor) -> tuple:
            return torch.ops.aten.convolution_backward(
                dy,
                t["x"],
                t["w"],
                [m],
                [stride, stride],
                [pad, pad],
                [1, 1],
                False,
                [0, 0],
                1,
                [True, True, True],
            )

        return fwd, bwd

    return Case(name, "Conv", {"x": x, "w": w, "b": b}, {"pads": [pad] * 4, "strides": [stride] * 2},
                ["y"], ["x", "w", "b"], kernels)


def maxpool_case(name: str, n: int, c: int, h: int, kernel: int = 2, stride: int = 2,
                 pad: int = 0) -> Case:
    def kernels(t: dict[str, torch.Tensor]) -> tuple[Callable, Callable]:
        saved = {}

        def fwd() -> torch.Tensor:
            y, saved["idx"] = F.max_pool2d(t["x"], kernel, stride, pad, return_indices=True)
            return y

        def bwd(dy: torch.Tensor) -> tuple:
            return (
                torch.ops.aten.max_pool2d_with_indices_backward(
                    dy, t["x"], [kernel] * 2, [stride] * 2, [pad] * 2, [1, 1], False, saved["idx"]
                ),
            )

        return fwd, bwd

    return Case(
        name,
        "MaxPool",
        {"x": torch.randn(n, c, h, h)},
        {"kernel_shape": [kernel] * 2, "strides": [stride] * 2, "pads": [pad] * 4},
        ["y"],
        ["x"],
        kernels,
    )


def batchnorm_case(name: str, n: int, c: int, h: int) -> Case:
    inputs = {
        "x": torch.randn(n, c, h, h) * 2 + 1,
        "scale": torch.rand(c) + 0.5,
        "bias": torch.randn(c),
        "mean": torch.zeros(c),
        "var": torch.ones(c),
    }

    def kernels(t: dict[str, torch.Tensor]) -> tuple[Callable, Callable]:
        saved = {}
        rm, rv = t["mean"].clone(), t["var"].clone()

        def fwd() -> torch.Tensor:
            y, saved["mean"], saved["invstd"] = torch.ops.aten.native_batch_norm(
                t["x"], t["scale"], t["bias"], rm, rv, True, 0.1, 1e-5
            )
            return y

        def bwd(dy: torch.Tensor) -> tuple:
            return torch.ops.aten.native_batch_norm_backward(
                dy,
                t["x"],
                t["scale"],
                rm,
                rv,
                saved["mean"],
                saved["invstd"],
                True,
                1e-5,
                [True, True, True],
            )

        return fwd, bwd

    return Case(
        name,
        "BatchNormalization",
        inputs,
        {"training_mode": 1, "momentum": 0.9, "epsilon": 1e-5},
        ["y"],
        ["x", "scale", "bias"],
        kernels,
    )


def gelu_case(name: str, shape: tuple[int, ...], approximate: str) -> Case:
    def kernels(t: dict[str, torch.Tensor]) -> tuple[Callable, Callable]:
        def fwd() -> torch.Tensor:
            return F.gelu(t["x"], approximate=approximate)

        def bwd(dy: torch.Tensor) -> tuple:
            return (torch.ops.aten.gelu_backward(dy, t["x"], approximate=approximate),)

        return fwd, bwd

    return Case(
        name,
        "Gelu",
        {"x": torch.randn(*shape) * 2},
        {"approximate": approximate},
        ["y"],
        ["x"],
        kernels,
        opset=20,
    )


def softmax_case(name: str, shape: tuple[int, ...]) -> Case:
    def kernels(t: dict[str, torch.Tensor]) -> tuple[Callable, Callable]:
        saved = {}

        def fwd() -> torch.Tensor:
            saved["y"] = torch.softmax(t["x"], -1)
            return saved["y"]

        def bwd(dy: torch.Tensor) -> tuple:
            return (torch.ops.aten._softmax_backward_data(dy, saved["y"], -1, torch.float32),)

        return fwd, bwd

    return Case(
        name, "Softmax", {"x": torch.randn(*shape) * 3}, {"axis": -1}, ["y"], ["x"], kernels
    )


def masked_softmax_case(name: str, batch: int, heads: int, seq: int) -> Case:
    """Attention scores under a boolean causal mask, as scaled_dot_product_attention writes
    them: Softmax(Where(keep, x * scale, lowest)), which the engine fuses into one
    ScaledMaskedSoftmax (and one ScaledMaskedSoftmaxGrad)."""
    scale = 0.125
    lowest = torch.finfo(torch.float32).min
    keep = torch.ones(seq, seq, dtype=torch.bool).tril().expand(batch, 1, seq, seq).contiguous()
    fill = onnx.numpy_helper.from_array(torch.tensor(lowest).numpy(), "fill")
    factor = onnx.numpy_helper.from_array(torch.tensor(scale).numpy(), "factor")
    nodes = [
        helper.make_node("Constant", [], ["c_fill"], value=fill),
        helper.make_node("Constant", [], ["c_scale"], value=factor),
        helper.make_node("Mul", ["x", "c_scale"], ["scaled"]),
        helper.make_node("Where", ["keep", "scaled", "c_fill"], ["masked"]),
        helper.make_node("Softmax", ["masked"], ["y"], axis=-1),
    ]

    def kernels(t: dict[str, torch.Tensor]) -> tuple[Callable, Callable]:
        saved = {}

        def fwd() -> torch.Tensor:
            saved["y"] = torch.softmax(torch.where(t["keep"], t["x"] * scale, lowest), -1)
            return saved["y"]

        def bwd(dy: torch.Tensor) -> tuple:
            g = torch.ops.aten._softmax_backward_data(dy, saved["y"], -1, torch.float32)
            return (torch.where(t["keep"], g, 0.0) * scale,)

        return fwd, bwd

    inputs = {"x": torch.randn(batch, heads, seq, seq) * 8, "keep": keep}
    return Case(name, "ScaledMaskedSoftmax", inputs, {}, ["y"], ["x"], kernels, nodes=nodes)


def layernorm_case(name: str, rows: int, cols: int) -> Case:
    inputs = {
        "x": torch.randn(rows, cols) * 2 + 1,
        "scale": torch.rand(cols) + 0.5,
        "bias": torch.randn(cols),
    }

    def kernels(t: dict[str, torch.Tensor]) -> tuple[Callable, Callable]:
        saved = {}

        def fwd() -> torch.Tensor:
            y, saved["mean"], saved["rstd"] = torch.ops.aten.native_layer_norm(
                t["x"], [cols], t["scale"], t["bias"], 1e-5
            )
            return y

        def bwd(dy: torch.Tensor) -> tuple:
            return torch.ops.aten.native_layer_norm_backward(
                dy,
                t["x"],
                [cols],
                saved["mean"],
                saved["rstd"],
                t["scale"],
                t["bias"],
                [True, True, True],
            )

        return fwd, bwd

    return Case(
        name,
        "LayerNormalization",
        inputs,
        {"axis": -1, "epsilon": 1e-5},
        ["y"],
        ["x", "scale", "bias"],
        kernels,
    )


def cases() -> list[Case]:
    torch.manual_seed(0)
    return [
        # cnn28 (batch 64, 32/64 channels, 28x28) and the brief's reference shape.
        conv_case("conv 1->32 28x28", 64, 1, 28, 32),
        conv_case("conv 32->32 28x28", 64, 32, 28, 32),
        conv_case("conv 32->64 14x14", 64, 32, 14, 64),
        maxpool_case("maxpool 32x28x28", 64, 32, 28),
        maxpool_case("maxpool 64x14x14", 64, 64, 14),
        maxpool_case("maxpool 3x3/2 64x32x32 resnet", 16, 64, 32, 3, 2, 1),
        batchnorm_case("batchnorm 32x28x28", 64, 32, 28),
        batchnorm_case("batchnorm 64x14x14", 64, 64, 14),
        # ResNet-18 layout at 64x64 (batch 16): the stride-1 3x3 convs of its first two stages,
        # the Winograd ones (forward, dx and dw).
        conv_case("conv 64->64 16x16 resnet", 16, 64, 16, 64),
        conv_case("conv 128->128 8x8 resnet", 16, 128, 8, 128),
        # ... and its other convolutions (im2col + GEMM): the stem, the strided first convs
        # and 1x1 shortcuts of stages 2-4, the 3x3 convs of stages 3 and 4.
        conv_case("conv stem 3->64 7x7/2 resnet", 16, 3, 64, 64, k=7, pad=3, stride=2),
        conv_case("conv 64->128 3x3/2 resnet", 16, 64, 16, 128, stride=2),
        conv_case("conv 64->128 1x1/2 resnet", 16, 64, 16, 128, k=1, pad=0, stride=2),
        conv_case("conv 128->256 3x3/2 resnet", 16, 128, 8, 256, stride=2),
        conv_case("conv 256->256 4x4 resnet", 16, 256, 4, 256),
        conv_case("conv 256->512 3x3/2 resnet", 16, 256, 4, 512, stride=2),
        conv_case("conv 512->512 2x2 resnet", 16, 512, 2, 512),
        # cnn (batch 64, 16/32 channels, 8x8): per-call overhead dominates.
        conv_case("conv 1->16 8x8", 64, 1, 8, 16),
        conv_case("conv 16->32 4x4", 64, 16, 4, 32),
        maxpool_case("maxpool 16x8x8", 64, 16, 8),
        batchnorm_case("batchnorm 16x8x8", 64, 16, 8),
        batchnorm_case("batchnorm 32x4x4", 64, 32, 4),
        # BERT-small (batch 8, seq 128, hidden 256, 4 heads, FFN 1024).
        gelu_case("gelu 8x128x1024", (8, 128, 1024), "none"),
        gelu_case("gelu tanh 8x128x1024", (8, 128, 1024), "tanh"),
        softmax_case("softmax 8x4x128x128", (8, 4, 128, 128)),
        masked_softmax_case("masked softmax 8x4x128x128", 8, 4, 128),
        masked_softmax_case("masked softmax 4x4x512x512", 4, 4, 512),
        layernorm_case("layernorm 1024x256", 1024, 256),
    ]


def build_program(case: Case, wrt: list[str]) -> object:
    types = {torch.float32: onnx.TensorProto.FLOAT, torch.bool: onnx.TensorProto.BOOL}
    infos = [
        helper.make_tensor_value_info(n, types[v.dtype], list(v.shape))
        for n, v in case.inputs.items()
    ]
    outs = [
        helper.make_tensor_value_info(n, onnx.TensorProto.UNDEFINED, None) for n in case.outputs
    ]
    nodes = case.nodes or [helper.make_node(case.op, list(case.inputs), case.outputs, **case.attrs)]
    graph = helper.make_graph(nodes, case.name, infos, outs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", case.opset)])
    return _C.Program(model.SerializeToString(), [], wrt)


def ours_step(
    program: object, case: Case, dy: torch.Tensor | None = None
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """One forward + backward; dy defaults to ones (the gradient of y.sum())."""
    leaves = {n: v.clone().requires_grad_(n in case.wrt) for n, v in case.inputs.items()}
    y = _C.run(program, list(leaves.values()))[0]
    y.backward(torch.ones_like(y) if dy is None else dy)
    return y.detach(), {n: leaves[n].grad for n in case.wrt}


def assert_close_scaled(got: torch.Tensor, ref: torch.Tensor, tol: float, what: str) -> None:
    err = (got - ref).abs().max().item()
    scale = max(1.0, ref.abs().max().item())
    assert err <= tol * scale, f"{what}: max error {err:.3g} > {tol:g} * {scale:.3g}"


def check(case: Case, program: object) -> None:
    fwd, bwd = case.torch_kernels({n: v.clone() for n, v in case.inputs.items()})
    y_ref = fwd()
    # A random dy: with dy = 1 batch normalization's gradients are sums that cancel to ~0.
    dy = torch.randn_like(y_ref)
    y, grads = ours_step(program, case, dy)
    assert_close_scaled(y, y_ref, case.tol, f"{case.name} y")
    for name, g_ref in zip(case.wrt, bwd(dy)):
        assert_close_scaled(grads[name], g_ref, case.tol, f"{case.name} d{name}")


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def time_case(case: Case, program: object, runs: int) -> dict[str, list[float]]:
    """Seconds per call of our forward / backward kernels and PyTorch's, one sample of each per
    iteration, interleaved so that all four see the same load on a shared machine."""
    torch_fwd, torch_bwd = case.torch_kernels({n: v.clone() for n, v in case.inputs.items()})
    dy = torch.ones_like(torch_fwd())
    samples: dict[str, list[float]] = {
        "ours_fwd": [],
        "ours_bwd": [],
        "torch_fwd": [],
        "torch_bwd": [],
    }
    _C.set_profiling(True)
    try:
        for i in range(runs + 3):
            _C.profile_snapshot(reset=True)
            ours_step(program, case)
            ops = _C.profile_snapshot(reset=True)
            tf = timed(torch_fwd)
            tb = timed(lambda: torch_bwd(dy))
            if i < 3:  # warm-up
                continue
            samples["ours_fwd"].append(sum(s for op, (_, s) in ops.items() if op in FORWARD_OPS))
            samples["ours_bwd"].append(sum(s for op, (_, s) in ops.items() if op in BACKWARD_OPS))
            samples["torch_fwd"].append(tf)
            samples["torch_bwd"].append(tb)
    finally:
        _C.set_profiling(False)
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--filter", default="", help="only cases whose name contains this")
    parser.add_argument(
        "--isa",
        default="",
        help="comma-separated instruction sets of our vector kernels to run each case with "
        "(baseline, avx2, avx512); default: the one the engine chose",
    )
    parser.add_argument(
        "--stat",
        choices=["median", "min"],
        default="median",
        help="min is steadier on a machine shared with other jobs",
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    stat = statistics.median if args.stat == "median" else min
    print(
        f"{args.threads} threads, {args.stat} of {args.runs} runs, ms per call "
        "(ratio = ours / torch; below 1 is faster)"
    )
    print(
        f"{'case':32s} {'fwd ours':>9s} {'torch':>7s} {'ratio':>6s}   "
        f"{'bwd ours':>9s} {'torch':>7s} {'ratio':>6s}"
    )
    isas = [i for i in args.isa.split(",") if i] or [_C.cpu_isa()]
    for case in cases():
        if args.filter not in case.name:
            continue
        program = build_program(case, case.wrt)
        for isa in isas:
            _C.set_cpu_isa(isa)
            check(case, program)
            t = {k: stat(v) for k, v in time_case(case, program, args.runs).items()}
            of, ob, tf, tb = t["ours_fwd"], t["ours_bwd"], t["torch_fwd"], t["torch_bwd"]
            label = f"{case.name} [{isa}]" if len(isas) > 1 else case.name
            print(
                f"{label:32s} {of * 1e3:9.3f} {tf * 1e3:7.3f} {of / tf:6.2f}   "
                f"{ob * 1e3:9.3f} {tb * 1e3:7.3f} {ob / tb:6.2f}"
            )


if __name__ == "__main__":
    main()
