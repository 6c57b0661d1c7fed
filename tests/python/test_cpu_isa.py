"""The vector kernels of every instruction set this CPU runs (cpu_isa.h), through whole ops
at sizes that cross the parallel grain: against float64 references, PyTorch's float32 kernels
and the baseline (scalar) path, with explicit tolerances. Also ORTMODULE_CPU_ISA's validation.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
from collections.abc import Iterator

import onnx
import pytest
import torch
import torch.nn.functional as F
from onnx import helper

from ortmodule import _C

VECTOR_ISAS = [isa for isa in ("avx2", "avx512") if _C.cpu_isa_supported(isa)]
# The AVX-512 kernels plus the packed bfloat16 GEMM, on vdpbf16ps or on AMX tiles (tested in
# test_low_precision_products.py and tests/cpp/test_packed_bgemm.cpp).
BF16_ISAS = [isa for isa in ("avx512bf16", "amx") if _C.cpu_isa_supported(isa)]
EPS = 2.0**-23  # float32 machine epsilon
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(autouse=True)
def restore_isa() -> Iterator[None]:
    saved = _C.cpu_isa()
    torch.set_num_threads(2)
    yield
    _C.set_cpu_isa(saved)


def run_op(
    op: str, inputs: dict[str, torch.Tensor], attrs: dict, opset: int, dy: torch.Tensor,
    domain: str = "",
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """One node forward through the engine, then backward of (y * dy).sum()."""
    infos = [
        helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, list(v.shape))
        for n, v in inputs.items()
    ]
    out = helper.make_tensor_value_info("y", onnx.TensorProto.UNDEFINED, None)
    node = helper.make_node(op, list(inputs), ["y"], domain=domain or None, **attrs)
    graph = helper.make_graph([node], op, infos, [out])
    opsets = [helper.make_opsetid("", opset)] + ([helper.make_opsetid(domain, 1)] if domain else [])
    model = helper.make_model(graph, opset_imports=opsets)
    program = _C.Program(model.SerializeToString(), [], list(inputs))
    leaves = {n: v.clone().requires_grad_(True) for n, v in inputs.items()}
    y = _C.run(program, list(leaves.values()))[0]
    y.backward(dy)
    return y.detach(), {n: leaf.grad for n, leaf in leaves.items()}


def assert_close(
    got: torch.Tensor,
    want: torch.Tensor,
    rtol: float | torch.Tensor,
    atol: float,
    what: str,
    scale: torch.Tensor | None = None,
) -> None:
    """|got - want| <= rtol * scale + atol elementwise; scale is |want| unless given (the
    magnitude of the terms where the result cancels)."""
    want = want.to(torch.float64)
    err = (got.to(torch.float64) - want).abs()
    bound = rtol * (want.abs() if scale is None else scale) + atol
    bad = ~(err <= bound) & ~(got.to(torch.float64) == want)
    if bad.any():
        i = int(bad.flatten().nonzero()[0])
        raise AssertionError(
            f"{what}: {int(bad.sum())} elements out of tolerance, first at {i}: "
            f"{got.flatten()[i].item()!r} vs {want.flatten()[i].item()!r}"
        )


def gelu_reference(
    x: torch.Tensor, approximate: str
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """float64 Gelu and its derivative, in forms that do not cancel for x << 0, with the
    scales their float32 errors are measured against: the tanh form takes exp(-2u), whose
    rounded argument costs ~|2u| eps; the derivative is two terms that cancel near
    x = -0.75, so its error scales with the terms' magnitudes."""
    x = x.to(torch.float64)
    if approximate == "tanh":
        k0, k1 = math.sqrt(2 / math.pi), 0.044715
        u = k0 * (x + k1 * x**3)
        s = torch.sigmoid(2 * u)
        slope = 2 * x * s * (1 - s) * k0 * (1 + 3 * k1 * x * x)
        cond = 1 + (2 * u).abs()
        return x * s, s + slope, (x * s).abs() * cond, (s + slope.abs()) * cond
    cdf = 0.5 * torch.special.erfc(-x / math.sqrt(2))
    slope = x * torch.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)
    return x * cdf, cdf + slope, (x * cdf).abs(), cdf + slope.abs()


@pytest.mark.parametrize("approximate", ["none", "tanh"])
@pytest.mark.parametrize("isa", VECTOR_ISAS)
def test_gelu(isa: str, approximate: str) -> None:
    # [8, 128, 256] over a dense range with both tails (Gelu of a BERT FFN is [8, 128, 1024]).
    x = torch.linspace(-12, 12, 8 * 128 * 256, dtype=torch.float32).reshape(8, 128, 256)
    dy = torch.randn_like(x)
    attrs = {"approximate": approximate}
    _C.set_cpu_isa("baseline")
    y_base, g_base = run_op("Gelu", {"x": x}, attrs, 20, dy)
    _C.set_cpu_isa(isa)
    y, g = run_op("Gelu", {"x": x}, attrs, 20, dy)
    y_ref, d_ref, y_scale, d_scale = gelu_reference(x, approximate)
    d_scale = d_scale * dy.abs()
    # A few ulp of the exact values; the floor covers only results below 1e-30 (underflow).
    assert_close(y, y_ref, 8 * EPS, 1e-30, f"{isa} gelu {approximate} vs float64", y_scale)
    assert_close(
        g["x"], d_ref * dy, 8 * EPS, 1e-30, f"{isa} dgelu {approximate} vs float64", d_scale
    )
    # PyTorch's and the baseline's float32 forms cancel for x << 0 (1 + erf(x) or
    # 1 + tanh(u)): they match to ~1e-7 absolute times |x| there.
    y_torch = F.gelu(x, approximate=approximate)
    g_torch = torch.ops.aten.gelu_backward(dy, x, approximate=approximate)
    assert_close(y, y_torch, 1e-5, 2e-6, f"{isa} gelu {approximate} vs torch")
    assert_close(g["x"], g_torch, 1e-5, 2e-5, f"{isa} dgelu {approximate} vs torch")
    assert_close(y, y_base, 8 * EPS, 2e-6, f"{isa} gelu {approximate} vs baseline", y_scale)
    assert_close(
        g["x"], g_base["x"], 8 * EPS, 2e-5, f"{isa} dgelu {approximate} vs baseline", d_scale
    )


LOW_TYPES = {torch.bfloat16: onnx.TensorProto.BFLOAT16, torch.float16: onnx.TensorProto.FLOAT16}


@pytest.mark.parametrize("approximate", ["none", "tanh"])
@pytest.mark.parametrize("dtype", list(LOW_TYPES), ids=str)
@pytest.mark.parametrize("isa", ["baseline", *VECTOR_ISAS])
def test_gelu_16bit_is_computed_in_float32_and_rounded_once(
    isa: str, dtype: torch.dtype, approximate: str
) -> None:
    """A bfloat16/float16 Gelu and its gradient (autocast's FFN) widen each value exactly,
    compute in float32 and round once, as eager PyTorch does: within a unit in the last place
    of the 16-bit type from the exact values (rounding at every step is further off), and of
    eager's results. Past the threads' chunks and the widened chunks, with a tail."""
    _C.set_cpu_isa(isa)
    n = 3 * 8192 + 17
    x = torch.linspace(-6, 6, n).to(dtype)
    dy = (torch.randn(n, generator=torch.Generator().manual_seed(5)) * 2).to(dtype)
    infos = [helper.make_tensor_value_info("x", LOW_TYPES[dtype], [n])]
    out = helper.make_tensor_value_info("y", onnx.TensorProto.UNDEFINED, None)
    node = helper.make_node("Gelu", ["x"], ["y"], approximate=approximate)
    model = helper.make_model(helper.make_graph([node], "gelu", infos, [out]),
                              opset_imports=[helper.make_opsetid("", 20)])
    leaf = x.clone().requires_grad_(True)
    y = _C.run(_C.Program(model.SerializeToString(), [], ["x"]), [leaf])[0]
    y.backward(dy)
    assert y.dtype == dtype and leaf.grad.dtype == dtype
    y_ref, d_ref, y_scale, d_scale = gelu_reference(x.double(), approximate)
    g_ref = d_ref * dy.double()
    ulp = {torch.bfloat16: 2.0**-8, torch.float16: 2.0**-11}[dtype]  # relative, at worst
    tiny = {torch.bfloat16: 1e-38, torch.float16: 2.0**-24}[dtype]
    # Beside the rounding: float32's own error, a few ulp of the terms, and where the erf and
    # tanh forms cancel for x << 0 about 1e-7 |x| absolute (test_gelu).
    y_scale = y_ref.abs() + (8 * EPS * y_scale + 2e-7 * x.double().abs()) / ulp
    d_scale = g_ref.abs() + (8 * EPS * d_scale + 2e-6) * dy.double().abs() / ulp
    assert_close(y, y_ref, ulp, tiny, f"{isa} {dtype} gelu vs float64", y_scale)
    assert_close(leaf.grad, g_ref, ulp, tiny, f"{isa} {dtype} dgelu vs float64", d_scale)
    y_torch = F.gelu(x, approximate=approximate)
    g_torch = torch.ops.aten.gelu_backward(dy, x, approximate=approximate)
    # Both float32 forms cancel for x << 0 (test_gelu's absolute bounds there).
    assert_close(y, y_torch, 2 * ulp, 2e-6, f"{isa} {dtype} gelu vs torch")
    assert_close(leaf.grad, g_torch, 2 * ulp, 2e-5 * float(dy.abs().max()),
                 f"{isa} {dtype} dgelu vs torch")


@pytest.mark.parametrize("op", ["Exp", "Sigmoid", "Tanh"])
@pytest.mark.parametrize("isa", VECTOR_ISAS)
def test_activation(isa: str, op: str) -> None:
    x = torch.linspace(-30, 30, 80 * 1024, dtype=torch.float32).reshape(80, 1024)
    dy = torch.randn_like(x)
    _C.set_cpu_isa("baseline")
    y_base, g_base = run_op(op, {"x": x}, {}, 17, dy)
    _C.set_cpu_isa(isa)
    y, g = run_op(op, {"x": x}, {}, 17, dy)
    xd = x.to(torch.float64).requires_grad_(True)
    y_ref = {"Exp": torch.exp, "Sigmoid": torch.sigmoid, "Tanh": torch.tanh}[op](xd)
    (g_ref,) = torch.autograd.grad(y_ref, xd, dy.to(torch.float64))
    # exp's argument is rounded to float32: relative error ~|x| eps (Exp, Sigmoid's tail).
    cond = 1.0 if op == "Tanh" else 1.0 + x.abs().to(torch.float64)
    assert_close(y, y_ref.detach(), 4 * EPS * cond, 1e-38, f"{isa} {op} vs float64")
    assert_close(y, y_base, 4 * EPS * cond, 1e-38, f"{isa} {op} vs baseline")
    # The gradient is the same op on both paths (Mul, SigmoidGrad, TanhGrad), computed from
    # y: y (1 - y) and 1 - y^2 cancel where y rounds to 1, so a 1-ulp difference in y is
    # up to ~1e-7 |dy| there.
    assert_close(g["x"], g_base["x"], 8 * EPS * cond, 1e-6, f"{isa} d{op} vs baseline")
    if op == "Exp":
        assert_close(g["x"], g_ref, 8 * EPS * cond, 1e-37, f"{isa} d{op} vs float64")


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("isa", VECTOR_ISAS)
def test_softmax_last_axis(isa: str, op: str) -> None:
    # Attention scores [8, 4, 128, 128] with a masked (finfo.min) key block, and a row
    # length that leaves a vector tail.
    for shape in [(8, 4, 128, 128), (64, 37, 61)]:
        x = torch.randn(*shape) * 4
        x[..., -5:] = torch.finfo(torch.float32).min
        dy = torch.randn_like(x)
        _C.set_cpu_isa("baseline")
        y_base, g_base = run_op(op, {"x": x}, {"axis": -1}, 17, dy)
        _C.set_cpu_isa(isa)
        y, g = run_op(op, {"x": x}, {"axis": -1}, 17, dy)
        xd = x.to(torch.float64).requires_grad_(True)
        fn = torch.log_softmax if op == "LogSoftmax" else torch.softmax
        y_ref = fn(xd, -1)
        (g_ref,) = torch.autograd.grad(y_ref, xd, dy.to(torch.float64))
        what = f"{isa} {op} {list(shape)}"
        assert_close(y, y_ref.detach(), 8 * EPS, 1e-7, what + " vs float64")
        assert_close(g["x"], g_ref, 16 * EPS, 1e-6, what + " grad vs float64")
        assert_close(y, y_base, 8 * EPS, 1e-7, what + " vs baseline")
        assert_close(g["x"], g_base["x"], 16 * EPS, 1e-6, what + " grad vs baseline")


@pytest.mark.parametrize("op", ["LayerNormalization", "SimplifiedLayerNormalization"])
@pytest.mark.parametrize("isa", VECTOR_ISAS)
def test_layernorm(isa: str, op: str) -> None:
    """LayerNormalization and its uncentred form (com.microsoft SimplifiedLayerNormalization,
    RMS normalisation without bias), sharing the vector rows."""
    rms = op == "SimplifiedLayerNormalization"
    domain = "com.microsoft" if rms else ""
    for rows, cols in [(1024, 256), (300, 1027)]:
        inputs = {
            "x": torch.randn(rows, cols) * 2 + 3,
            "scale": torch.rand(cols) + 0.5,
            "bias": torch.randn(cols),
        }
        if rms:
            del inputs["bias"]
        dy = torch.randn(rows, cols)
        attrs = {"axis": -1, "epsilon": 1e-5}
        _C.set_cpu_isa("baseline")
        y_base, g_base = run_op(op, inputs, attrs, 17, dy, domain)
        _C.set_cpu_isa(isa)
        y, g = run_op(op, inputs, attrs, 17, dy, domain)
        leaves = {n: v.to(torch.float64).requires_grad_(True) for n, v in inputs.items()}
        if rms:
            y_ref = F.rms_norm(leaves["x"], [cols], leaves["scale"], float(torch.tensor(1e-5).item()))
        else:
            y_ref = F.layer_norm(leaves["x"], [cols], leaves["scale"], leaves["bias"], 1e-5)
        grads_ref = torch.autograd.grad(y_ref, list(leaves.values()), dy.to(torch.float64))
        what = f"{isa} {op} [{rows}, {cols}]"
        # Normalised values are O(1); sums over cols terms set the absolute scale.
        assert_close(y, y_ref.detach(), 0, 2e-5, what + " vs float64")
        assert_close(y, y_base, 0, 2e-5, what + " vs baseline")
        for (name, got), want in zip(g.items(), grads_ref):
            # dscale / dbias sum over rows: tolerance grows with sqrt(rows).
            atol = 2e-4 if name == "x" else 2e-6 * rows
            assert_close(got, want, 0, atol, f"{what} d{name} vs float64")
            assert_close(got, g_base[name], 0, atol, f"{what} d{name} vs baseline")


def _cast(x: torch.Tensor, to: int) -> torch.Tensor:
    src = {torch.float32: onnx.TensorProto.FLOAT, torch.bfloat16: onnx.TensorProto.BFLOAT16}
    infos = [helper.make_tensor_value_info("x", src[x.dtype], list(x.shape))]
    out = helper.make_tensor_value_info("y", onnx.TensorProto.UNDEFINED, None)
    graph = helper.make_graph([helper.make_node("Cast", ["x"], ["y"], to=to)], "c", infos, [out])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    return _C.run(_C.Program(model.SerializeToString(), [], []), [x])[0]


@pytest.mark.parametrize("isa", VECTOR_ISAS + BF16_ISAS)
def test_bfloat16_casts(isa: str) -> None:
    """float32 <-> bfloat16 Casts (the autocast casts, vectorized with AVX-512): the bits of
    torch's conversion and of the baseline loop, over ties, the rounding carry into the
    exponent, the largest finite values (rounding to infinity), subnormals, infinities and
    NaNs with payloads (quiet NaN out), in lengths that leave a partial last vector."""
    bits = torch.tensor([
        0x3F808000, 0x3F818000, 0x3F80_7FFF, 0x3F80_8001, 0x3FFF_8000, 0x7F7F_FFFF, 0xFF7F_FFFF,
        0x7F7F_7FFF, 0x0000_0001, 0x0000_8000, 0x0001_8000, 0x807F_FFFF, 0x7F80_0000,
        0xFF80_0000, 0x7F80_0001, 0xFF81_2345, 0x7FC0_0000, 0x0000_0000, 0x8000_0000,
    ], dtype=torch.int64).to(torch.int32)
    special = bits.view(torch.float32)
    x = torch.cat([special, torch.randn(100_003, generator=torch.Generator().manual_seed(0)),
                   special])
    _C.set_cpu_isa("baseline")
    y_base = _cast(x, onnx.TensorProto.BFLOAT16)
    back_base = _cast(y_base, onnx.TensorProto.FLOAT)
    _C.set_cpu_isa(isa)
    y = _cast(x, onnx.TensorProto.BFLOAT16)
    back = _cast(y, onnx.TensorProto.FLOAT)
    as_bits = lambda t: t.view(torch.int16) if t.dtype == torch.bfloat16 else t.view(torch.int32)
    assert torch.equal(as_bits(y), as_bits(y_base))
    assert torch.equal(as_bits(back), as_bits(back_base))
    finite = ~torch.isnan(x)
    assert torch.equal(as_bits(y[finite]), as_bits(x[finite].to(torch.bfloat16)))
    assert torch.isnan(y[~finite].float()).all() and torch.isnan(back[~finite]).all()
    assert torch.equal(as_bits(back[finite]), as_bits(y[finite].float()))


def _one_node(op: str, inputs: dict[str, torch.Tensor], outputs: int, **attrs: object
              ) -> list[torch.Tensor]:
    """One float32 node's outputs through the engine (forward only)."""
    infos = [helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, list(v.shape))
             for n, v in inputs.items()]
    names = [f"y{i}" for i in range(outputs)]
    outs = [helper.make_tensor_value_info(n, onnx.TensorProto.UNDEFINED, None) for n in names]
    graph = helper.make_graph([helper.make_node(op, list(inputs), names, **attrs)], op, infos,
                              outs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return _C.run(_C.Program(model.SerializeToString(), [], []), list(inputs.values()))


@pytest.mark.parametrize("isa", VECTOR_ISAS)
@pytest.mark.parametrize("k", [2, 3])
@pytest.mark.parametrize("width", [9, 16, 17, 31, 36, 70])
def test_stride2_max_pool_rows(isa: str, k: int, width: int) -> None:
    """MaxPool k x k, stride 2 (the vectorised rows of windows inside the input): maxima and
    indices bit for bit the baseline's and torch's, over ties (the first tap wins), NaNs (the
    last NaN of a window wins, as torch's) and output rows that leave a partial vector."""
    gen = torch.Generator().manual_seed(k * 100 + width)
    x = torch.randint(-3, 4, (2, 3, 2 * width + k, 2 * width + 1), generator=gen).float()
    x += torch.randn(x.shape, generator=gen) * (torch.rand(x.shape, generator=gen) < 0.5)
    x.view(-1)[torch.randint(0, x.numel(), (40,), generator=gen)] = float("nan")
    attrs = {"kernel_shape": [k, k], "strides": [2, 2]}
    _C.set_cpu_isa("baseline")
    y_base, i_base = _one_node("MaxPool", {"x": x}, 2, **attrs)
    _C.set_cpu_isa(isa)
    y, i = _one_node("MaxPool", {"x": x}, 2, **attrs)
    assert torch.equal(i, i_base)
    assert torch.equal(y.view(torch.int32), y_base.view(torch.int32))
    want, want_i = F.max_pool2d(x, k, 2, return_indices=True)
    # torch's indices count within each (n, c) plane; ONNX's are flat over the tensor.
    plane = x.shape[2] * x.shape[3]
    offsets = (torch.arange(x.shape[0] * x.shape[1]) * plane).view(x.shape[0], x.shape[1], 1, 1)
    assert torch.equal(i, want_i + offsets)
    assert torch.equal(y.nan_to_num(nan=7.5), want.nan_to_num(nan=7.5))


@pytest.mark.parametrize("isa", VECTOR_ISAS)
@pytest.mark.parametrize("width", [16, 17, 24, 33])
def test_stride2_convolution_rows(isa: str, width: int) -> None:
    """A stride-2 convolution, whose im2col copies every other input column (vectorised for
    rows of 16+ outputs): float64's result within float32 rounding (the GEMM's summation
    order differs between instruction sets)."""
    gen = torch.Generator().manual_seed(width)
    x = torch.randn(2, 3, 2 * width + 1, 2 * width + 2, generator=gen)
    w = torch.randn(4, 3, 3, 3, generator=gen)
    attrs = {"strides": [2, 2], "pads": [1, 0, 1, 1]}
    _C.set_cpu_isa(isa)
    (y,) = _one_node("Conv", {"x": x, "w": w}, 1, **attrs)
    want = F.conv2d(F.pad(x.double(), (0, 1, 1, 1)), w.double(), stride=2)
    assert_close(y, want, 1e-5, 1e-5, "stride-2 Conv")


def isa_in_fresh_process(value: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, ORTMODULE_CPU_ISA=value)
    code = "from ortmodule import _C; print(_C.cpu_isa())"
    return subprocess.run(
        [sys.executable, "-c", code], check=False, env=env, cwd=ROOT, capture_output=True, text=True
    )


@pytest.mark.parametrize("row", [False, True])
@pytest.mark.parametrize("isa", VECTOR_ISAS)
def test_fused_elementwise_arithmetic(isa: str, row: bool) -> None:
    """FusedElementwise's Add, Sub, Mul, Div and Pow by a one-element 2 or 3 (the register
    program's vector arithmetic): the baseline loop's bits and those of torch's float32 ops
    done one by one, read flat or row by row (a last-axis operand), in lengths past the
    parallel grain that leave a partial vector in every row."""
    n = helper.make_node
    gen = torch.Generator().manual_seed(0)
    shape = (37, 1029)
    feeds = {"a": torch.randn(shape, generator=gen), "b": torch.randn(shape, generator=gen),
             "c": torch.randn(shape, generator=gen), "p": torch.rand(shape, generator=gen) + 0.5,
             "r": torch.randn(shape[-1:] if row else shape, generator=gen),
             "s": torch.tensor(1.7)}
    consts = [n("Constant", [], [name], value=helper.make_tensor(name, onnx.TensorProto.FLOAT,
                                                                 [], [v]))
              for name, v in (("two", 2.0), ("three", 3.0))]
    nodes = [n("Add", ["a", "b"], ["t1"]), n("Mul", ["t1", "s"], ["t2"]),
             n("Sub", ["t2", "r"], ["t3"]), n("Div", ["t3", "p"], ["t4"]),
             n("Pow", ["t4", "two"], ["t5"]), n("Pow", ["c", "three"], ["t6"]),
             n("Sub", ["t5", "t6"], ["y"])]
    infos = [helper.make_tensor_value_info(k, onnx.TensorProto.FLOAT, list(v.shape))
             for k, v in feeds.items()]
    out = helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)
    graph = helper.make_graph(consts + nodes, "arith", infos, [out])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    results = {}
    for which in ("baseline", isa):
        _C.set_cpu_isa(which)
        program = _C.Program(model.SerializeToString(), [], [])
        fused = onnx.load_from_string(program.training_graph_onnx()).graph.node
        assert [x.op_type for x in fused if x.op_type != "Constant"] == ["FusedElementwise"]
        results[which] = _C.run(program, list(feeds.values()))[0]
    a, b, c, p, r, s = feeds.values()
    t4 = ((a + b) * s - r) / p
    want = t4 * t4 - (c * c) * c
    assert torch.equal(results[isa].view(torch.int32), results["baseline"].view(torch.int32))
    assert torch.equal(results[isa].view(torch.int32), want.view(torch.int32))


def test_environment_override_selects_and_validates() -> None:
    for isa in ["baseline", *VECTOR_ISAS, *BF16_ISAS]:
        done = isa_in_fresh_process(isa)
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == isa
    bad = isa_in_fresh_process("sse9")
    assert bad.returncode != 0
    assert "ORTMODULE_CPU_ISA" in bad.stderr and "baseline, avx2, avx512, avx512bf16 or amx" in bad.stderr
    for isa in ("avx2", "avx512", "avx512bf16", "amx"):
        if not _C.cpu_isa_supported(isa):
            refused = isa_in_fresh_process(isa)
            assert refused.returncode != 0 and "ORTMODULE_CPU_ISA" in refused.stderr


def test_set_cpu_isa_refuses_unknown_names() -> None:
    with pytest.raises(ValueError, match="baseline, avx2, avx512, avx512bf16 or amx"):
        _C.set_cpu_isa("sse9")


def test_cast_to_its_own_dtype_is_a_view() -> None:
    """Cast and CastLike to the input's own dtype return a view of it (no copy, as Identity),
    and an op after them writes its own output: the input is left as it was."""
    infos = [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [3, 4])]
    outs = [helper.make_tensor_value_info(n, onnx.TensorProto.UNDEFINED, None)
            for n in ("same", "like", "doubled")]
    nodes = [helper.make_node("Cast", ["x"], ["same"], to=onnx.TensorProto.FLOAT),
             helper.make_node("CastLike", ["same", "x"], ["like"]),
             helper.make_node("Add", ["like", "like"], ["doubled"])]
    model = helper.make_model(helper.make_graph(nodes, "c", infos, outs),
                              opset_imports=[helper.make_opsetid("", 19)])
    program = _C.Program(model.SerializeToString(), [], [])
    x = torch.randn(3, 4)
    kept = x.clone()
    same, like, doubled = _C.run(program, [x])
    assert torch.equal(same, x) and torch.equal(like, x) and torch.equal(doubled, 2 * kept)
    assert same.data_ptr() == x.data_ptr() and like.data_ptr() == x.data_ptr()
    assert torch.equal(x, kept)
