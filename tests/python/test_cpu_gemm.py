"""The two implementations of float32 CPU GEMMs (runtime/cpu_gemm.h): torch's BLAS and the
engine's packed GEMM, through whole ops and a model's training step, each against float64
references or eager PyTorch with explicit tolerances; and ORTMODULE_CPU_GEMM's validation.
Both paths run on any machine with AVX2, whichever of them `auto` picks there, the packed one
on every micro-kernel the CPU runs (AVX2 6x16, AVX-512 14x32 tiles).
"""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from collections.abc import Iterator

import onnx
import pytest
import torch
from onnx import helper
from torch import nn

from ortmodule import _C, ORTModule

PACKED = _C.cpu_isa_supported("avx2")
MODES = ["blas", "packed"] if PACKED else ["blas"]
# The packed GEMM's micro-kernel per instruction set: AVX-512 14x32 tiles, AVX2 6x16.
VECTOR_ISAS = [isa for isa in ("avx2", "avx512") if _C.cpu_isa_supported(isa)]
# (mode, isa) pairs: the BLAS once, the packed GEMM on every micro-kernel this CPU runs.
PATHS = [("blas", None)] + [("packed", isa) for isa in VECTOR_ISAS]


def use_path(mode: str, isa: str | None) -> None:
    if isa is not None:
        _C.set_cpu_isa(isa)
    _C.set_cpu_gemm(mode)
    assert _C.cpu_gemm() == mode


ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(autouse=True)
def restore_gemm() -> Iterator[None]:
    isa = _C.cpu_isa()
    torch.set_num_threads(2)
    yield
    _C.set_cpu_isa(isa)
    _C.set_cpu_gemm("auto")


def matmul_program(a_shape: list[int], b_shape: list[int], trans_b: bool) -> object:
    """y = MatMul(a, b) or MatMul(a, Transpose(b)) (the transpose folds into the GEMM)."""
    infos = [
        helper.make_tensor_value_info("a", onnx.TensorProto.FLOAT, a_shape),
        helper.make_tensor_value_info("b", onnx.TensorProto.FLOAT, b_shape),
    ]
    nodes = []
    rhs = "b"
    if trans_b:
        perm = list(range(len(b_shape)))
        perm[-1], perm[-2] = perm[-2], perm[-1]
        nodes.append(helper.make_node("Transpose", ["b"], ["bt"], perm=perm))
        rhs = "bt"
    nodes.append(helper.make_node("MatMul", ["a", rhs], ["y"]))
    out = helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)
    graph = helper.make_graph(nodes, "mm", infos, [out])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return _C.Program(model.SerializeToString(), [], ["a", "b"])


# Shapes past the packed kernel's tiles and K blocks, ragged edges, a batch of products
# (split across threads) and a broadcast right operand.
MATMUL_CASES = [
    ([64, 784], [784, 512], False),
    ([37, 300], [45, 300], True),
    ([3, 129, 70], [3, 70, 33], False),
    ([8, 128, 64], [8, 128, 64], True),
    ([2, 50, 641], [641, 17], False),
]


def engine_and_float64(
    program: object, shapes: list[list[int]], reference, seed: int
) -> tuple[torch.Tensor, list[torch.Tensor], torch.Tensor, list[torch.Tensor]]:
    """Random inputs of `shapes` through the program, backward of a random output gradient;
    the same in float64 through `reference`. Returns y, the input gradients, y64, theirs."""
    gen = torch.Generator().manual_seed(seed)
    inputs = [torch.randn(s, generator=gen).requires_grad_(True) for s in shapes]
    y = _C.run(program, inputs)[0]
    dy = torch.randn(y.shape, generator=gen)
    y.backward(dy)
    inputs64 = [t.detach().double().requires_grad_(True) for t in inputs]
    y64 = reference(*inputs64)
    y64.backward(dy.double())
    return y.detach(), [t.grad for t in inputs], y64.detach(), [t.grad for t in inputs64]


@pytest.mark.parametrize("mode,isa", PATHS)
@pytest.mark.parametrize("a_shape,b_shape,trans_b", MATMUL_CASES)
def test_matmul_forward_and_gradients_match_float64(
    mode: str, isa: str | None, a_shape: list[int], b_shape: list[int], trans_b: bool
) -> None:
    use_path(mode, isa)
    y, (a_grad, b_grad), y64, (a64_grad, b64_grad) = engine_and_float64(
        matmul_program(a_shape, b_shape, trans_b),
        [a_shape, b_shape],
        lambda a, b: a @ (b.transpose(-1, -2) if trans_b else b),
        seed=1,
    )
    k = a_shape[-1]
    # float32 products summed over K terms of O(1): error grows like sqrt(K) ulps of the sum.
    tol = 4e-6 * k**0.5 * 4
    torch.testing.assert_close(y.double(), y64, rtol=0, atol=tol)
    torch.testing.assert_close(a_grad.double(), a64_grad, rtol=0, atol=tol * 4)
    torch.testing.assert_close(b_grad.double(), b64_grad, rtol=0, atol=tol * 8)


class TinyEncoderLayer(nn.Module):
    """Linear layers on 3-D activations and attention's batched products."""

    def __init__(self, d: int = 96, heads: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.out = nn.Linear(d, d)
        self.ff = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
        self.norm = nn.LayerNorm(d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.heads, d // self.heads).unbind(2)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        att = torch.softmax(q @ k.transpose(-1, -2) / (d // self.heads) ** 0.5, dim=-1)
        h = self.out((att @ v).transpose(1, 2).reshape(b, s, d))
        x = self.norm(x + h)
        return x + self.ff(x)


@pytest.mark.parametrize("mode", MODES)
def test_training_steps_match_eager(mode: str) -> None:
    _C.set_cpu_gemm(mode)
    torch.manual_seed(0)
    eager = TinyEncoderLayer()
    wrapped = ORTModule(copy.deepcopy(eager))
    opt_e = torch.optim.SGD(eager.parameters(), lr=0.05)
    opt_o = torch.optim.SGD(wrapped.parameters(), lr=0.05)
    gen = torch.Generator().manual_seed(2)
    for _ in range(3):
        x = torch.randn(4, 40, 96, generator=gen)
        for model, opt in ((eager, opt_e), (wrapped, opt_o)):
            model(x).square().mean().backward()
            opt.step()
            opt.zero_grad()
    for (name, p_e), p_o in zip(eager.named_parameters(), wrapped.parameters()):
        torch.testing.assert_close(p_o, p_e, rtol=1e-4, atol=2e-5, msg=f"{mode} {name}")


def test_packed_follows_the_instruction_set() -> None:
    if not PACKED:
        with pytest.raises(ValueError, match="avx2 or avx512"):
            _C.set_cpu_gemm("packed")
        return
    _C.set_cpu_gemm("packed")
    _C.set_cpu_isa("baseline")  # no micro-kernel: the BLAS runs
    assert _C.cpu_gemm() == "blas"
    y = _C.run(matmul_program([5, 7], [7, 3], False), [torch.ones(5, 7), torch.ones(7, 3)])[0]
    torch.testing.assert_close(y, torch.full((5, 3), 7.0))


def gemm_in_fresh_process(value: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, ORTMODULE_CPU_GEMM=value)
    code = "from ortmodule import _C; print(_C.cpu_gemm()); print(_C.cpu_gemm_reason())"
    return subprocess.run(
        [sys.executable, "-c", code], check=False, env=env, cwd=ROOT, capture_output=True, text=True
    )


def test_environment_override_selects_and_validates() -> None:
    for mode in MODES:
        done = gemm_in_fresh_process(mode)
        assert done.returncode == 0, done.stderr
        assert done.stdout.split()[0] == mode
        assert "ORTMODULE_CPU_GEMM" in done.stdout
    auto = gemm_in_fresh_process("auto")
    assert auto.returncode == 0, auto.stderr
    assert auto.stdout.split()[0] in ("blas", "packed") and "(auto:" in auto.stdout
    bad = gemm_in_fresh_process("cublas")
    assert bad.returncode != 0
    assert "ORTMODULE_CPU_GEMM" in bad.stderr and "auto, blas or packed" in bad.stderr


def test_set_cpu_gemm_refuses_unknown_names() -> None:
    with pytest.raises(ValueError, match="auto, blas or packed"):
        _C.set_cpu_gemm("mkl")


def conv_program(x_shape: list[int], w_shape: list[int], pads: int) -> object:
    infos = [
        helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, x_shape),
        helper.make_tensor_value_info("w", onnx.TensorProto.FLOAT, w_shape),
    ]
    out = helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)
    node = helper.make_node("Conv", ["x", "w"], ["y"], pads=[pads] * 4)
    graph = helper.make_graph([node], "conv", infos, [out])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return _C.Program(model.SerializeToString(), [], ["x", "w"])


# 3x3 stride-1 convolutions the Winograd kernels take (forward and input gradient on the
# micro-kernel's packed panels under `packed`): tiles that fill panels partly, channel counts
# off the micro-kernel's row count, odd outputs, pads 0 and 1; for the vector tile transforms
# (vec_winograd.inl) rows of more than 16 tiles, the CNN's 14x14 layer (49 tiles per image)
# and 8x8 outputs with many channels.
CONV_CASES = [
    ([3, 16, 12, 12], [20, 16, 3, 3], 1),
    ([2, 24, 11, 10], [16, 24, 3, 3], 0),
    ([5, 33, 8, 8], [29, 33, 3, 3], 1),
    ([3, 16, 37, 35], [17, 16, 3, 3], 1),
    ([8, 32, 14, 14], [64, 32, 3, 3], 1),
    ([6, 128, 8, 8], [96, 128, 3, 3], 1),
]


@pytest.mark.parametrize("mode,isa", PATHS)
@pytest.mark.parametrize("x_shape,w_shape,pads", CONV_CASES)
def test_winograd_conv_matches_float64(
    mode: str, isa: str | None, x_shape: list[int], w_shape: list[int], pads: int
) -> None:
    use_path(mode, isa)
    y, (x_grad, w_grad), y64, (x64_grad, w64_grad) = engine_and_float64(
        conv_program(x_shape, w_shape, pads),
        [x_shape, w_shape],
        lambda x, w: torch.nn.functional.conv2d(x, w, padding=pads),
        seed=3,
    )
    assert_conv_close_to_float64(x_shape, [y, x_grad, w_grad], [y64, x64_grad, w64_grad])


def assert_conv_close_to_float64(
    x_shape: list[int], got: list[torch.Tensor], want: list[torch.Tensor]
) -> None:
    """A float32 convolution's y, dx, dw against float64's. Winograd's transforms add and scale
    by 1/2: a few ulps more than a direct sum of C * 9 terms of O(1) per output; gradients sum
    over images and pixels too."""
    y, x_grad, w_grad = got
    y64, x64_grad, w64_grad = want
    terms = x_shape[1] * 9
    tol = 1e-5 * terms**0.5
    torch.testing.assert_close(y.double(), y64, rtol=0, atol=tol)
    torch.testing.assert_close(x_grad.double(), x64_grad, rtol=0, atol=tol * 2)
    pixels = x_shape[0] * y.shape[2] * y.shape[3]
    torch.testing.assert_close(w_grad.double(), w64_grad, rtol=0, atol=1e-5 * pixels**0.5 * 2)


@pytest.mark.parametrize("isa", VECTOR_ISAS)
@pytest.mark.parametrize("x_shape,w_shape,pads", CONV_CASES[:3])
def test_auto_picks_the_convolution_algorithm(
    isa: str, x_shape: list[int], w_shape: list[int], pads: int
) -> None:
    """docs/api.md: under auto with a vector instruction set the 3x3 convolutions take the
    packed micro-kernel's Winograd (forward and both gradients) whatever runs the other products
    (MKL on an Intel or an AVX2-only CPU): the results are packed's, bit for bit. On a non-Intel
    CPU without AVX-512 auto keeps them on im2col + the BLAS instead: the forward is blas
    mode's, bit for bit, and the gradients (blas mode's are Winograd's) as close to float64 as
    those of test_winograd_conv_matches_float64."""
    _C.set_cpu_isa(isa)
    results = {}
    for mode in ("auto", "packed", "blas"):
        _C.set_cpu_gemm(mode)
        y, grads, y64, grads64 = engine_and_float64(
            conv_program(x_shape, w_shape, pads),
            [x_shape, w_shape],
            lambda x, w: torch.nn.functional.conv2d(x, w, padding=pads),
            seed=5,
        )
        results[mode] = [y, *grads]
    if not _C.auto_convolutions_on_blas():
        for name, got, want in zip(("y", "dx", "dw"), results["auto"], results["packed"]):
            assert torch.equal(got, want), name
        return
    assert torch.equal(results["auto"][0], results["blas"][0])
    assert_conv_close_to_float64(x_shape, results["auto"], [y64, *grads64])
