"""RMS normalisation written out element-wise (transformers' LlamaRMSNorm, torch.nn.RMSNorm,
x * 1 / sqrt(mean(x^2) + eps) * w) runs as one com.microsoft SimplifiedLayerNormalization
forward and one SimplifiedLayerNormalizationGrad backward, with the results of the graph as
built; chains that differ stay as written. The fused op's kernels are checked against
PyTorch at a size whose rows split over threads."""

from __future__ import annotations

import copy

import numpy as np
import onnx
import pytest
import torch
from onnx import helper, numpy_helper
from transformers.models.llama.modeling_llama import LlamaRMSNorm

from ortmodule import _C, DebugOptions, ORTModule
from tests.python.test_attention_fusion import _training_ops
from tests.python.test_ops import threads  # noqa: F401 (a fixture)
from tests.python.test_passes import _assert_same_results, _model, _rand


def _single_op(cols: int, eps: float) -> bytes:
    x = helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["rows", "seq", cols])
    scale = helper.make_tensor_value_info("scale", onnx.TensorProto.FLOAT, [cols])
    outs = [helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, None) for n in ("y", "inv")]
    node = helper.make_node("SimplifiedLayerNormalization", ["x", "scale"], ["y", "inv"],
                            domain="com.microsoft", epsilon=eps)
    graph = helper.make_graph([node], "rmsnorm", [x, scale], outs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("com.microsoft", 1)])
    return model.SerializeToString()



def _forward_norms(model: ORTModule) -> int:
    """SimplifiedLayerNormalization nodes of the training graph that are not backward's
    recompute copies (named <node>/recompute)."""
    entry = next(iter(model._cache.values()))[0]
    graph = onnx.load_from_string(entry.program.training_graph_onnx()).graph
    return sum(n.op_type == "SimplifiedLayerNormalization" and not n.name.endswith("/recompute")
               for n in graph.node)

@pytest.mark.usefixtures("threads")  # at least two: parallel_for splits the rows
@pytest.mark.parametrize("cols", [256, 333])  # 333: a tail after the vector width
def test_kernels_match_torch_rms_norm(cols: int) -> None:
    """float32 forward, inverse rms and both gradients against torch's F.rms_norm (2048
    rows: parallel_for splits them, and dscale sums 32 row blocks)."""
    eps = 1e-6
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(16, 128, cols, generator=gen) * 3 + 0.5
    w = torch.rand(cols, generator=gen) + 0.5
    dy = torch.randn(16, 128, cols, generator=gen)
    program = _C.Program(_single_op(cols, eps), [], ["x", "scale"])
    xe, we = x.clone().requires_grad_(True), w.clone().requires_grad_(True)
    y, inv = _C.run(program, [xe, we])
    dx, dw = torch.autograd.grad(y, [xe, we], dy)

    xt, wt = x.clone().requires_grad_(True), w.clone().requires_grad_(True)
    yt = torch.nn.functional.rms_norm(xt, (cols,), wt, eps)
    dxt, dwt = torch.autograd.grad(yt, [xt, wt], dy)
    torch.testing.assert_close(y, yt, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(inv, torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps),
                               rtol=1e-6, atol=0)
    torch.testing.assert_close(dx, dxt, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(dw, dwt, rtol=1e-4, atol=1e-4 * float(dwt.abs().max()))


def _const(name: str, value: float) -> onnx.NodeProto:
    return helper.make_node("Constant", [], [name],
                            value=numpy_helper.from_array(np.asarray(value, np.float64)))


def _rmsnorm(square: str = "Pow", inverse: str = "Reciprocal", weight: str = "after",
             axes: list[int] | None = None, extra_outputs: tuple[str, ...] = ()) -> onnx.ModelProto:
    """h = x @ m, then RMS normalisation of h over its last axis (or `axes`), written with
    the given square (Pow(h, 2) or Mul(h, h)) and inverse (Reciprocal(Sqrt), Div(1, Sqrt),
    or Div(h, Sqrt)), then the weight ("after": Mul(n, w); "identity": through an Identity;
    "first": Mul(w, n); "none": no weight), then Tanh."""
    nodes = [helper.make_node("MatMul", ["x", "m"], ["h"]), _const("eps", 1e-6)]
    if square == "Pow":
        nodes += [_const("two", 2.0), helper.make_node("Pow", ["h", "two"], ["sq"])]
    else:
        nodes.append(helper.make_node("Mul", ["h", "h"], ["sq"]))
    nodes += [helper.make_node("ReduceMean", ["sq"], ["ms"], axes=axes or [-1], keepdims=1),
              helper.make_node("Add", ["ms", "eps"], ["mse"]),
              helper.make_node("Sqrt", ["mse"], ["rms"])]
    if inverse == "Reciprocal":
        nodes += [helper.make_node("Reciprocal", ["rms"], ["inv"]),
                  helper.make_node("Mul", ["h", "inv"], ["n"])]
    elif inverse == "DivOne":
        nodes += [_const("one", 1.0), helper.make_node("Div", ["one", "rms"], ["inv"]),
                  helper.make_node("Mul", ["inv", "h"], ["n"])]
    else:
        nodes.append(helper.make_node("Div", ["h", "rms"], ["n"]))
    last = "n"
    if weight == "identity":
        nodes.append(helper.make_node("Identity", ["n"], ["n_id"]))
        last = "n_id"
    if weight in ("after", "identity"):
        nodes.append(helper.make_node("Mul", [last, "w"], ["scaled"]))
        last = "scaled"
    elif weight == "first":
        nodes.append(helper.make_node("Mul", ["w", last], ["scaled"]))
        last = "scaled"
    nodes.append(helper.make_node("Tanh", [last], ["out"]))
    return _model(nodes, {"x": [2, 5, 6], "m": [6, 8], "w": [8]}, ["out", *extra_outputs])


def _feeds() -> dict[str, np.ndarray]:
    return {"x": _rand(2, 5, 6) * 2, "m": _rand(6, 8), "w": _rand(8) + 1.5}


@pytest.mark.parametrize("square,inverse,weight", [
    ("Pow", "Reciprocal", "after"),    # transformers' LlamaRMSNorm in float32
    ("Pow", "Reciprocal", "identity"),  # its .to(float32) casts, exported as Identity
    ("Mul", "DivOne", "first"),
    ("Pow", "Div", "after"),
])
def test_rmsnorm_fuses_forward_and_backward(square: str, inverse: str, weight: str) -> None:
    optimized, built = _assert_same_results(_rmsnorm(square, inverse, weight), _feeds(),
                                            ["x", "m", "w"])
    assert built["ReduceMean"] == 1 and built["Sqrt"] == 1, built
    assert optimized["SimplifiedLayerNormalization"] == 1, optimized
    assert optimized["SimplifiedLayerNormalizationGrad"] == 1, optimized
    for op in ("ReduceMean", "ReduceGrad", "Sqrt", "Reciprocal", "Pow", "Div"):
        assert optimized[op] == 0, (op, optimized)


@pytest.mark.parametrize("case", ["inverse_read_elsewhere", "norm_read_elsewhere", "axis",
                                  "no_weight"])
def test_chains_that_differ_are_not_fused(case: str) -> None:
    """Intermediates read elsewhere, a mean over another axis than the last, and (outside a
    16-bit model) a norm without a weight multiply stay as written."""
    wrt = ["x", "m", "w"]
    if case == "axis":
        model = _rmsnorm(axes=[1])
    elif case == "no_weight":
        model, wrt = _rmsnorm(weight="none"), ["x", "m"]
    else:
        model = _rmsnorm(extra_outputs=("inv" if case.startswith("inverse") else "n",))
    optimized, _ = _assert_same_results(model, _feeds(), wrt)
    assert optimized["SimplifiedLayerNormalization"] == 0, optimized


class _Block(torch.nn.Module):
    def __init__(self, norm: torch.nn.Module) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(40, 48)
        self.norm = norm
        self.out = torch.nn.Linear(48, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.norm(self.lin(x)))


@pytest.mark.parametrize("kind", ["llama", "torch", "torch_defaults"])
def test_rmsnorm_modules_fuse_with_the_unoptimized_results(kind: str) -> None:
    """transformers' LlamaRMSNorm (fused by the graph pass) and torch.nn.RMSNorm (aten.rms_norm,
    lowered to the fused op directly; with its default eps and no weight too) in a float32
    block: one fused node each way, and outputs and parameter gradients those of the graph
    without optimizations (and of eager)."""
    torch.manual_seed(0)
    norm = {"llama": lambda: LlamaRMSNorm(48, eps=1e-6),
            "torch": lambda: torch.nn.RMSNorm(48, eps=1e-6),
            "torch_defaults": lambda: torch.nn.RMSNorm(48, elementwise_affine=False)}[kind]()
    if norm.weight is not None:
        with torch.no_grad():
            norm.weight.uniform_(0.5, 1.5)
    eager = _Block(norm)
    x = torch.randn(4, 24, 40)
    results = {}
    for name, model in (("optimized", ORTModule(copy.deepcopy(eager))),
                        ("built", ORTModule(copy.deepcopy(eager),
                                            DebugOptions(graph_optimizations=False))),
                        ("eager", eager)):
        loss = (model(x) * torch.linspace(-1, 2, 8)).sum()
        loss.backward()
        results[name] = [loss.detach()] + [p.grad for p in model.parameters()]
        if name == "optimized":
            ops = _training_ops(model)
            # One norm in forward (backward may recompute its output, passes/recompute.h).
            assert _forward_norms(model) == 1, ops
            assert ops["SimplifiedLayerNormalizationGrad"] == 1, ops
            assert ops["ReduceMean"] == 0 and ops["Pow"] == 0, ops
    for other in ("built", "eager"):
        for got, want in zip(results["optimized"], results[other], strict=True):
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_bfloat16_llama_rmsnorm_fuses_before_its_cast_back() -> None:
    """A bfloat16 LlamaRMSNorm normalises in float32 and casts back before the weight: the
    float32 norm fuses (ones scale), the bfloat16 weight multiply stays, and the results are
    the unoptimized graph's to bfloat16 precision."""
    torch.manual_seed(0)
    norm = LlamaRMSNorm(48, eps=1e-6)
    with torch.no_grad():
        norm.weight.uniform_(0.5, 1.5)
    eager = _Block(norm).to(torch.bfloat16)
    x = torch.randn(4, 24, 40, dtype=torch.bfloat16)
    results = {}
    for optimize in (True, False):
        model = ORTModule(copy.deepcopy(eager), DebugOptions(graph_optimizations=optimize))
        loss = (model(x).float() * torch.linspace(-1, 2, 8)).sum()
        loss.backward()
        results[optimize] = [loss.detach()] + [p.grad.float() for p in model.parameters()]
        if optimize:
            ops = _training_ops(model)
            assert ops["SimplifiedLayerNormalization"] == 1, ops
            assert ops["SimplifiedLayerNormalizationGrad"] == 1, ops
    for got, want in zip(results[True], results[False], strict=True):
        torch.testing.assert_close(got, want, rtol=2e-2, atol=2e-2 * float(want.abs().max()))
