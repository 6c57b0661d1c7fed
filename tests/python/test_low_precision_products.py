"""float16/bfloat16 matrix products computed natively: MatMul, FusedMatMul, Gemm and
FusedMatMulSumToShape take 16-bit operands, accumulate in float32 and round each result once
(on CUDA through tensor-core GEMMs), instead of running in float32 between Casts.

Every product is compared with float32 products of the same operands rounded to the 16-bit
type, within one unit of that type's last place. On the CPU, where the float32 kernel runs
on widened operands (float16, and bfloat16 without AVX512-BF16: device "cpu", the
instruction set below avx512bf16), the result must also be bit for bit the float32 product
rounded once (what the Casts around a float32 product computed before). Where the packed
bfloat16 GEMM runs (devices "cpu-avx512bf16", AVX512-BF16's vdpbf16ps, and "cpu-amx", AMX
tiles), integer-valued operands, whose float32
sums are exact in any order, must give the reference bit for bit. Autocast training graphs
keep their products in 16 bits: no Cast to float32 in front of a product and none to 16
bits after it.
"""

from __future__ import annotations

from collections.abc import Iterator

import onnx
import pytest
import torch
from onnx import TensorProto, helper

from ortmodule import _C, DebugOptions, ORTModule
from tests.python.test_matmul_kernels import MATMUL_SHAPES, SUM_CASES, _model, _stored, _sum_to

LOW = {torch.float16: TensorProto.FLOAT16, torch.bfloat16: TensorProto.BFLOAT16}
# One unit in the last place of each type (relative), for results compared across devices.
ULP = {torch.float16: 2.0**-10, torch.bfloat16: 2.0**-7}
HAS_GPU = _C.cuda_info()["compiled"] and torch.cuda.is_available()
# The instruction sets with a bfloat16 GEMM this CPU runs, and their devices.
BF16_GEMM_ISAS = [isa for isa in ("avx512bf16", "amx") if _C.cpu_isa_supported(isa)]
BF16_DEVICES = [f"cpu-{isa}" for isa in BF16_GEMM_ISAS]
BF16_NATIVE = bool(BF16_GEMM_ISAS)
# The instruction set of the "cpu" paths: the best below avx512bf16 (widened products).
WIDENED_ISA = next(isa for isa in ("avx512", "avx2", "baseline") if _C.cpu_isa_supported(isa))
_NO_GPU = pytest.mark.skipif(
    not HAS_GPU, reason="no CUDA device visible (or a build without CUDA kernels): the "
    "tensor-core products run only on a machine with a GPU")
# (dtype, path): every dtype on the CPU's widened path and on CUDA, bfloat16 also through the
# packed bfloat16 GEMM where the CPU has it.
PATHS = [pytest.param(d, dev, marks=marks, id=f"{d}-{dev}")
         for d in LOW
         for dev, marks in (("cpu", ()), *((b, ()) for b in BF16_DEVICES), ("cuda", _NO_GPU))
         if dev not in BF16_DEVICES or d == torch.bfloat16]


@pytest.fixture(autouse=True)
def _cpu_path(request: pytest.FixtureRequest) -> Iterator[None]:
    """The instruction set a test's "device" names: "cpu" the widened products, "cpu-<isa>"
    the packed bfloat16 GEMM of that instruction set."""
    saved = _C.cpu_isa()
    callspec = getattr(request.node, "callspec", None)
    device = callspec.params.get("device") if callspec else None
    if device == "cpu":
        _C.set_cpu_isa(WIDENED_ISA)
    elif device in BF16_DEVICES:
        _C.set_cpu_isa(device.removeprefix("cpu-"))
    yield
    _C.set_cpu_isa(saved)


def _torch_device(device: str) -> str:
    return "cuda" if device == "cuda" else "cpu"


def _operands(shapes: tuple, trans: tuple[int, int], dtype: torch.dtype,
              seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    a = torch.randn(_stored(shapes[0], bool(trans[0])), generator=gen).to(dtype)
    b = torch.randn(_stored(shapes[1], bool(trans[1])), generator=gen).to(dtype)
    return a, b


def _op(x: torch.Tensor, trans: int) -> torch.Tensor:
    return x.transpose(-1, -2) if trans else x


def _float32_program(model: bytes) -> _C.Program:
    """The same single-op model with its 16-bit inputs declared float32."""
    proto = onnx.load_from_string(model)
    for v in proto.graph.input:
        if v.type.tensor_type.elem_type in LOW.values():
            v.type.tensor_type.elem_type = TensorProto.FLOAT
    return _C.Program(proto.SerializeToString(), [], [])


def _check(model: bytes, inputs: list[torch.Tensor], expected: torch.Tensor, dtype: torch.dtype,
           device: str) -> None:
    (got,) = _C.run(_C.Program(model, [], []), [t.to(_torch_device(device)) for t in inputs])
    assert got.dtype == dtype and got.device.type == _torch_device(device)
    assert got.shape == expected.shape
    if device == "cpu":
        # The float32 engine's product, rounded once: bit for bit.
        wide = [t.float() if t.dtype == dtype else t for t in inputs]
        (f32,) = _C.run(_float32_program(model), wide)
        assert torch.equal(got, f32.to(dtype))
    # float32 accumulation in another order, then one rounding: within one unit of the last
    # place of the 16-bit type (plus float32 rounding where terms cancel).
    torch.testing.assert_close(got.cpu().float(), expected.float(), rtol=ULP[dtype], atol=1e-4)


@pytest.mark.parametrize("dtype,device", PATHS)
@pytest.mark.parametrize("trans", [(0, 0), (1, 0), (0, 1), (1, 1)], ids=str)
@pytest.mark.parametrize("shapes", MATMUL_SHAPES, ids=str)
def test_fused_matmul(shapes: tuple, trans: tuple[int, int], dtype: torch.dtype,
                      device: str) -> None:
    a, b = _operands(shapes, trans, dtype, seed=0)
    model = _model("FusedMatMul", "com.microsoft", [("a", LOW[dtype]), ("b", LOW[dtype])],
                   transA=trans[0], transB=trans[1], alpha=0.5)
    expected = (0.5 * (_op(a.float(), trans[0]) @ _op(b.float(), trans[1]))).to(dtype)
    _check(model, [a, b], expected, dtype, device)


@pytest.mark.parametrize("dtype,device", PATHS)
@pytest.mark.parametrize("shapes", [((7, 5), (5, 6)), ((2, 3, 4, 5), (5, 6)), ((5,), (2, 5, 3))],
                         ids=str)
def test_matmul(shapes: tuple, dtype: torch.dtype, device: str) -> None:
    a, b = _operands(shapes, (0, 0), dtype, seed=1)
    model = _model("MatMul", "", [("a", LOW[dtype]), ("b", LOW[dtype])])
    _check(model, [a, b], (a.float() @ b.float()).to(dtype), dtype, device)


@pytest.mark.parametrize("dtype,device", PATHS)
@pytest.mark.parametrize("trans", [(0, 0), (1, 1)], ids=str)
@pytest.mark.parametrize("case", SUM_CASES, ids=str)
def test_fused_matmul_sum_to_shape(case: tuple, trans: tuple[int, int], dtype: torch.dtype,
                                   device: str) -> None:
    a_shape, b_shape, target = case
    if target == (96, 80):  # stored as the weight gradient's operands: [.., S, M], [.., S, N]
        a_shape, b_shape = (8, 96, 128), (8, 128, 80)
    a, b = _operands((a_shape, b_shape), trans, dtype, seed=2)
    model = _model("FusedMatMulSumToShape", "ai.ortmodule",
                   [("a", LOW[dtype]), ("b", LOW[dtype]), ("s", TensorProto.INT64)],
                   transA=trans[0], transB=trans[1], alpha=2.0)
    product = 2.0 * (_op(a.float(), trans[0]) @ _op(b.float(), trans[1]))
    expected = torch.from_numpy(_sum_to(product.numpy(), target)).to(dtype)
    _check(model, [a, b, torch.tensor(target)], expected, dtype, device)


@pytest.mark.parametrize("dtype,device", PATHS)
@pytest.mark.parametrize("c_shape,attrs", [
    (None, {}),
    ((6,), {}),
    ((4, 1), {"beta": 2.0, "alpha": 0.5}),
    ((4, 6), {"transA": 1, "transB": 1, "beta": -1.5}),
    ((1, 6), {"beta": 0.0}),
], ids=str)
def test_gemm(c_shape: tuple | None, attrs: dict, dtype: torch.dtype, device: str) -> None:
    ta, tb = attrs.get("transA", 0), attrs.get("transB", 0)
    a, b = _operands(((4, 5), (5, 6)), (ta, tb), dtype, seed=3)
    names = [("a", LOW[dtype]), ("b", LOW[dtype])]
    inputs = [a, b]
    expected = attrs.get("alpha", 1.0) * (_op(a.float(), ta) @ _op(b.float(), tb))
    if c_shape is not None:
        c = torch.randn(c_shape, generator=torch.Generator().manual_seed(4)).to(dtype)
        names.append(("c", LOW[dtype]))
        inputs.append(c)
        expected = expected + attrs.get("beta", 1.0) * c.float()
    _check(_model("Gemm", "", names, **attrs), inputs, expected.to(dtype), dtype, device)


PRODUCTS = ("MatMul", "FusedMatMul", "Gemm", "FusedMatMulSumToShape", "FusedMatMulBias")


ACTIVATIONS = {"": lambda x: x, "Relu": torch.relu, "Gelu": torch.nn.functional.gelu,
               "GeluTanh": lambda x: torch.nn.functional.gelu(x, approximate="tanh")}


def _biased_model(dtype: int, activation: str, with_pre: bool, trans_b: int,
                  alpha: float) -> bytes:
    """One FusedMatMulBias node: y (and pre, the biased sum before the activation)."""
    ins = [helper.make_tensor_value_info(n, dtype, None) for n in ("a", "b", "bias")]
    names = ["y", "pre"] if with_pre else ["y"]
    outs = [helper.make_tensor_value_info(n, TensorProto.UNDEFINED, None) for n in names]
    node = helper.make_node("FusedMatMulBias", ["a", "b", "bias"], names, domain="ai.ortmodule",
                            transB=trans_b, alpha=alpha, activation=activation)
    graph = helper.make_graph([node], "g", ins, outs)
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("ai.ortmodule", 1)]
    return helper.make_model(graph, opset_imports=opsets).SerializeToString()


def _float32_biased(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor, activation: str,
                    trans_b: int, alpha: float) -> torch.Tensor:
    """The float32 engine's FusedMatMulBias of the operands widened (no rounding)."""
    model = _biased_model(TensorProto.FLOAT, activation, False, trans_b, alpha)
    (y,) = _C.run(_C.Program(model, [], []), [a.float(), b.float(), bias.float()])
    return y


@pytest.mark.parametrize("dtype,device", PATHS)
@pytest.mark.parametrize("activation", list(ACTIVATIONS))
@pytest.mark.parametrize("with_pre", [False, True], ids=["y", "y+pre"])
@pytest.mark.parametrize("a_shape,trans_b", [((7, 5), 0), ((2, 3, 5), 1), ((8, 64, 96), 1)],
                         ids=str)
def test_fused_matmul_bias(a_shape: tuple, trans_b: int, with_pre: bool, activation: str,
                           dtype: torch.dtype, device: str) -> None:
    """A Linear layer with its activation in 16 bits: the biased sum computed in float32 and
    rounded once (pre), the activation computed in float32 from that rounded sum and
    rounded once (y), as eager's addmm and activation compute them."""
    n, k = 6 if a_shape[-1] < 64 else 130, a_shape[-1]
    gen = torch.Generator().manual_seed(5)
    a = torch.randn(a_shape, generator=gen).to(dtype)
    b = torch.randn((n, k) if trans_b else (k, n), generator=gen).to(dtype)
    bias = torch.randn(n, generator=gen).to(dtype)
    alpha = 0.5
    model = _biased_model(LOW[dtype], activation, with_pre, trans_b, alpha)
    got = _C.run(_C.Program(model, [], []), [t.to(_torch_device(device)) for t in (a, b, bias)])
    assert len(got) == (2 if with_pre else 1)
    assert all(t.dtype == dtype and t.device.type == _torch_device(device) for t in got)
    y = got[0].cpu()
    # Independent reference: float32 torch, each rounding where eager rounds.
    pre_ref = (alpha * (a.float() @ _op(b.float(), trans_b)) + bias.float()).to(dtype)
    y_ref = ACTIVATIONS[activation](pre_ref.float()).to(dtype)
    # Summed in another order than torch's (CUDA, the bfloat16 GEMM), the sum may round to
    # the neighbour of pre_ref: y then moves by up to the activation's slope (at most 1.13,
    # GELU's) times that unit, besides y's own rounding.
    tol = 1.13 * ULP[dtype] * pre_ref.float().abs() + ULP[dtype] * y_ref.float().abs() + 1e-4
    excess = (y.float() - y_ref.float()).abs() - tol
    assert excess.max() <= 0, f"{(excess > 0).sum()} elements past the bound, worst by {excess.max()}"
    if with_pre:
        torch.testing.assert_close(got[1].cpu().float(), pre_ref.float(), rtol=ULP[dtype],
                                   atol=1e-4)
    if device == "cpu":
        # Bit for bit: the float32 engine's biased sum rounded once, and the float32
        # engine's activation of that rounded sum (a product with the identity and a zero
        # bias is exact) rounded once.
        pre = _float32_biased(a, b, bias, "", trans_b, alpha).to(dtype)
        rows = pre.reshape(-1, n)
        act = _float32_biased(rows, torch.eye(n), torch.zeros(n), activation, 0, 1.0)
        assert torch.equal(y, act.to(dtype).reshape(y.shape))
        if with_pre:
            assert torch.equal(got[1], pre)


_NO_BF16_GEMM = pytest.mark.skipif(
    not BF16_NATIVE, reason="this CPU has no AVX512-BF16: its bfloat16 products widen to "
    "float32 (the cpu cases)")


def _integers(shape: tuple, gen: torch.Generator) -> torch.Tensor:
    """bfloat16 integers in [-3, 3]: products and float32 sums are exact in any order."""
    return torch.randint(-3, 4, shape, generator=gen).to(torch.bfloat16)


def _run_bf16_gemm(model: bytes, inputs: list[torch.Tensor]) -> list[torch.Tensor]:
    assert _C.cpu_isa() in BF16_GEMM_ISAS
    return _C.run(_C.Program(model, [], []), inputs)


@_NO_BF16_GEMM
@pytest.mark.parametrize("device", BF16_DEVICES)
@pytest.mark.parametrize("trans", [(0, 0), (1, 0), (0, 1), (1, 1)], ids=str)
@pytest.mark.parametrize("shapes", MATMUL_SHAPES + [((3, 70, 641), (641, 33)),
                                                    ((2, 17, 333), (2, 333, 29))], ids=str)
def test_bf16_gemm_products_are_exact_on_integers(shapes: tuple, trans: tuple[int, int],
                                                  device: str) -> None:
    """The packed bfloat16 GEMM through FusedMatMul's batch layouts (odd K, K blocks): every
    element of every operand lands where it belongs (any misplaced pair changes a sum)."""
    gen = torch.Generator().manual_seed(6)
    a = _integers(_stored(shapes[0], bool(trans[0])), gen)
    b = _integers(_stored(shapes[1], bool(trans[1])), gen)
    model = _model("FusedMatMul", "com.microsoft", [("a", LOW[torch.bfloat16]),
                                                    ("b", LOW[torch.bfloat16])],
                   transA=trans[0], transB=trans[1], alpha=0.5)
    expected = 0.5 * (_op(a.double(), trans[0]) @ _op(b.double(), trans[1]))
    (got,) = _run_bf16_gemm(model, [a, b])
    assert torch.equal(got, expected.to(torch.bfloat16))


@_NO_BF16_GEMM
@pytest.mark.parametrize("device", BF16_DEVICES)
@pytest.mark.parametrize("case", SUM_CASES, ids=str)
def test_bf16_gemm_summed_products_are_exact_on_integers(case: tuple, device: str) -> None:
    a_shape, b_shape, target = case
    trans = (0, 0)
    if target == (96, 80):  # a Linear's weight gradient: a stored as [.., S, M], transA
        a_shape, trans = (8, 96, 128), (1, 0)
    gen = torch.Generator().manual_seed(7)
    a = _integers(_stored(a_shape, bool(trans[0])), gen)
    b = _integers(b_shape, gen)
    model = _model("FusedMatMulSumToShape", "ai.ortmodule",
                   [("a", LOW[torch.bfloat16]), ("b", LOW[torch.bfloat16]),
                    ("s", TensorProto.INT64)], transA=trans[0])
    product = _op(a.double(), trans[0]) @ b.double()
    expected = torch.from_numpy(_sum_to(product.numpy(), target))
    (got,) = _run_bf16_gemm(model, [a, b, torch.tensor(target)])
    assert torch.equal(got, expected.to(torch.bfloat16))


@_NO_BF16_GEMM
@pytest.mark.parametrize("device", BF16_DEVICES)
@pytest.mark.parametrize("activation", ["", "Relu"])
@pytest.mark.parametrize("a_shape,b_shape,trans_b", [
    ((8, 64, 96), (130, 96), 1),     # every row times one weight: one GEMM, then the bias
    ((2, 5, 33), (2, 33, 7), 0),     # batched weight: the batched product, then the bias
], ids=str)
def test_bf16_gemm_biased_products_are_exact_on_integers(a_shape: tuple, b_shape: tuple,
                                                         trans_b: int, activation: str,
                                                         device: str) -> None:
    gen = torch.Generator().manual_seed(8)
    a, b = _integers(a_shape, gen), _integers(b_shape, gen)
    bias = _integers((b_shape[-2] if trans_b else b_shape[-1],), gen)
    model = _biased_model(LOW[torch.bfloat16], activation, True, trans_b, 1.0)
    pre = a.double() @ _op(b.double(), trans_b) + bias.double()
    y = torch.relu(pre) if activation else pre
    got = _run_bf16_gemm(model, [a, b, bias])
    assert torch.equal(got[0], y.to(torch.bfloat16))
    assert torch.equal(got[1], pre.to(torch.bfloat16))


@_NO_BF16_GEMM
@pytest.mark.parametrize("device", BF16_DEVICES)
def test_bf16_gemm_gemm_with_c_is_exact_on_integers(device: str) -> None:
    gen = torch.Generator().manual_seed(9)
    a, b, c = _integers((5, 37), gen), _integers((29, 37), gen), _integers((1, 29), gen)
    names = [("a", LOW[torch.bfloat16]), ("b", LOW[torch.bfloat16]), ("c", LOW[torch.bfloat16])]
    model = _model("Gemm", "", names, transB=1, alpha=2.0, beta=-1.5)
    expected = 2.0 * (a.double() @ b.double().T) - 1.5 * c.double()
    (got,) = _run_bf16_gemm(model, [a, b, c])
    assert torch.equal(got, expected.to(torch.bfloat16))


@_NO_BF16_GEMM
@pytest.mark.parametrize("device", BF16_DEVICES)
def test_bf16_gemm_reads_subnormals_as_zero(device: str) -> None:
    """vdpbf16ps and tdpbf16ps read bfloat16 subnormals as zero, as eager's bfloat16 GEMM on
    such a CPU does;
    the widened path (ORTMODULE_CPU_ISA=avx512) keeps them."""
    a = torch.zeros(256, 256, dtype=torch.bfloat16)
    a[0, 0] = 2.0**-130  # a bfloat16 (and float32) subnormal
    b = torch.eye(256, dtype=torch.bfloat16)
    model = _model("MatMul", "", [("a", LOW[torch.bfloat16]), ("b", LOW[torch.bfloat16])])
    (native,) = _run_bf16_gemm(model, [a, b])
    _C.set_cpu_isa(WIDENED_ISA)
    (widened,) = _C.run(_C.Program(model, [], []), [a, b])
    assert native[0, 0].item() == 0.0 and (a @ b)[0, 0].item() == 0.0
    assert widened[0, 0].item() == a[0, 0].item()
    assert torch.equal(native[1:], widened[1:])


class _Mlp(torch.nn.Module):
    def __init__(self, activation: str) -> None:
        super().__init__()
        self.up = torch.nn.Linear(16, 32)
        self.act = {"Relu": torch.nn.ReLU(), "Gelu": torch.nn.GELU(),
                    "GeluTanh": torch.nn.GELU(approximate="tanh")}[activation]
        self.down = torch.nn.Linear(32, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(self.act(self.up(x))).float().square().mean()


@pytest.mark.parametrize("dtype", list(LOW), ids=str)
@pytest.mark.parametrize("activation", ["Relu", "Gelu", "GeluTanh"])
def test_autocast_linear_activation_fuses_in_16_bit(activation: str, dtype: torch.dtype) -> None:
    """Under autocast a Linear and its activation become one 16-bit FusedMatMulBias (no
    Casts around it); loss and gradients match eager autocast, and the graph without
    optimizations."""
    torch.manual_seed(0)
    model = _Mlp(activation)
    reference = _Mlp(activation)
    reference.load_state_dict(model.state_dict())
    plain = _Mlp(activation)
    plain.load_state_dict(model.state_dict())
    wrapped = ORTModule(model)
    unoptimized = ORTModule(plain, debug_options=DebugOptions(graph_optimizations=False))
    x = torch.randn(4, 8, 16)
    losses = []
    with torch.autocast("cpu", dtype=dtype):
        for m in (wrapped, reference, unoptimized):
            losses.append(m(x))
    for loss in losses:
        loss.backward()
    entry = next(iter(wrapped._cache.values()))[0]
    graph = onnx.load_from_string(entry.program.training_graph_onnx()).graph
    fused = [n for n in graph.node if n.op_type == "FusedMatMulBias"]
    activations = [next(a.s.decode() for a in n.attribute if a.name == "activation")
                   for n in fused if any(a.name == "activation" for a in n.attribute)]
    assert activations == [activation], [n.op_type for n in graph.node]
    assert len(fused) == 2
    assert _products_stay_16_bit(graph) == []
    torch.testing.assert_close(losses[0], losses[1], rtol=4 * ULP[dtype], atol=1e-5)
    torch.testing.assert_close(losses[0], losses[2], rtol=4 * ULP[dtype], atol=1e-5)
    for (name, p), q, r in zip(model.named_parameters(), reference.parameters(),
                               plain.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=0.05, atol=2e-3, msg=name)
        torch.testing.assert_close(p.grad, r.grad, rtol=0.05, atol=2e-3, msg=name)




class _Attention(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.qkv = torch.nn.Linear(16, 48)
        self.out = torch.nn.Linear(16, 16)
        self.norm = torch.nn.LayerNorm(16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        p = torch.softmax(q @ k.transpose(-1, -2) / 4.0, dim=-1)
        return self.norm(self.out(p @ v) + x).float().square().mean()


def _products_stay_16_bit(graph: onnx.GraphProto) -> list[str]:
    """Products reading a Cast to float32 or read by a Cast to 16 bits (the widening the
    engine applies to ops that compute in float32)."""
    producer = {o: n for n in graph.node for o in n.output}
    readers: dict[str, list[onnx.NodeProto]] = {}
    for n in graph.node:
        for i in n.input:
            readers.setdefault(i, []).append(n)

    def cast_to(n: onnx.NodeProto | None, types: set[int]) -> bool:
        return n is not None and n.op_type == "Cast" and any(
            a.name == "to" and a.i in types for a in n.attribute)

    bad = []
    for n in graph.node:
        if n.op_type not in PRODUCTS:
            continue
        if any(cast_to(producer.get(i), {TensorProto.FLOAT}) for i in n.input[:2]):
            bad.append(f"{n.op_type} {n.name} reads a Cast to float32")
        if any(cast_to(r, set(LOW.values())) for r in readers.get(n.output[0], [])):
            bad.append(f"{n.op_type} {n.name} is rounded by a Cast after it")
    return bad


@pytest.mark.parametrize("dtype", list(LOW), ids=str)
def test_autocast_training_graph_keeps_products_in_16_bit(dtype: torch.dtype) -> None:
    """Under torch.autocast the forward products and every gradient product (input and
    weight gradients, the attention products' gradients) take 16-bit operands; the loss
    and parameter gradients still match eager autocast."""
    torch.manual_seed(0)
    model = _Attention()
    reference = _Attention()
    reference.load_state_dict(model.state_dict())
    wrapped = ORTModule(model)
    x = torch.randn(2, 8, 16)
    with torch.autocast("cpu", dtype=dtype):
        loss = wrapped(x)
        expected = reference(x)
    loss.backward()
    expected.backward()
    entry = next(iter(wrapped._cache.values()))[0]
    graph = onnx.load_from_string(entry.program.training_graph_onnx()).graph
    products = [n for n in graph.node if n.op_type in PRODUCTS]
    # 4 forward products (qkv, scores, p @ v, out) and 7 gradient products (two for each
    # but qkv, whose input x needs no gradient); the Linear layers' with their biases.
    assert len(products) == 11, [n.op_type for n in products]
    assert sum(n.op_type == "FusedMatMulBias" for n in products) == 2, products
    assert _products_stay_16_bit(graph) == []
    torch.testing.assert_close(loss, expected, rtol=2 * ULP[dtype], atol=1e-5)
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=0.05, atol=2e-3, msg=name)


@pytest.mark.skipif(not _C.cpu_isa_supported("amx"), reason="this CPU or OS has no AMX tiles")
def test_amx_products_and_torchs_own_amx_kernels_share_the_threads() -> None:
    """The engine's AMX GEMM loads its tile configuration on each thread's first tile of a
    product; torch's bfloat16 matmuls (oneDNN, on AMX on such a CPU) run on the same OpenMP
    threads with configurations of their own in between. Both stay exact on integer operands
    (float32 sums exact in any order), alternating over shapes whose tiles differ."""
    saved = _C.cpu_isa()
    _C.set_cpu_isa("amx")
    try:
        gen = torch.Generator().manual_seed(10)
        model = _model("MatMul", "", [("a", LOW[torch.bfloat16]), ("b", LOW[torch.bfloat16])])
        program = _C.Program(model, [], [])
        for m, k, n in [(64, 96, 80), (37, 700, 19), (256, 256, 256), (5, 33, 130)] * 3:
            a, b = _integers((m, k), gen), _integers((k, n), gen)
            want = (a.double() @ b.double()).to(torch.bfloat16)
            (ours,) = _C.run(program, [a, b])
            assert torch.equal(ours, want), (m, k, n)
            assert torch.equal(torch.mm(a, b), want), (m, k, n)
    finally:
        _C.set_cpu_isa(saved)
