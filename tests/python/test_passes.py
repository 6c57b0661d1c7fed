"""Graph passes must never change what a model computes: models whose nodes differ only in
details that are easy to lose (float attributes equal to 6 significant digits) give eager's
results."""

from __future__ import annotations

import collections
import copy

import numpy as np
import onnx
import pytest
import torch
import torch.nn.functional as F
from onnx import helper
from torch import nn

from ortmodule import _C, DebugOptions, ORTModule
from tests.python.hf_zoo import FAMILIES

# float32 neighbours just above 1: both print as 1 with 6 significant digits.
SLOPE_A = 1.0 + 2.0**-23
SLOPE_B = 1.0 + 2.0**-22


class TwoSlopes(nn.Module):
    """The difference of two LeakyReLUs over the same input, scaled so that it is visible:
    zero if the two nodes were wrongly merged, about the negative inputs otherwise."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc(x)
        return (F.leaky_relu(h, SLOPE_A) - F.leaky_relu(h, SLOPE_B)) * 2.0**23


def test_nodes_differing_in_a_float_attribute_past_six_digits_are_not_merged() -> None:
    torch.manual_seed(0)
    eager = TwoSlopes().double()
    ort = ORTModule(copy.deepcopy(eager))
    x = torch.randn(6, 4, dtype=torch.float64)
    expected, actual = eager(x), ort(x)
    assert expected.abs().max() > 0.1  # the model sees the difference
    torch.testing.assert_close(actual, expected, rtol=1e-7, atol=1e-9)
    expected.square().sum().backward()
    actual.square().sum().backward()
    for (name, p), q in zip(ort.named_parameters(), eager.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-7, atol=1e-9, msg=name)


# ---- graph optimizations: the rewritten graph computes what the graph as built does ----

def _program(model: onnx.ModelProto, wrt: list[str], optimize: bool) -> _C.Program:
    return _C.Program(model.SerializeToString(), [], wrt, graph_optimizations=optimize)


def _op_counts(program: _C.Program) -> collections.Counter:
    graph = onnx.load_from_string(program.training_graph_onnx()).graph
    return collections.Counter(n.op_type for n in graph.node)


def _outputs_and_gradients(program: _C.Program, feeds: list[torch.Tensor],
                           wrt: list[int]) -> list[torch.Tensor]:
    inputs = [t.clone().requires_grad_(i in wrt) for i, t in enumerate(feeds)]
    outputs = _C.run(program, inputs)
    # Distinct weights per output, so that every output's gradient path counts.
    loss = sum((y * torch.linspace(-1, 2, y.numel(), dtype=y.dtype).reshape(y.shape)).sum()
               for y in outputs)
    grads = torch.autograd.grad(loss, [inputs[i] for i in wrt])
    return [y.detach() for y in outputs] + list(grads)


def _assert_same_results(model: onnx.ModelProto, feeds: dict[str, np.ndarray],
                         wrt: list[str]) -> tuple[collections.Counter, collections.Counter]:
    """Runs `model` with and without graph optimizations; forward outputs and gradients must
    agree. Returns the op counts of both training graphs (optimized first)."""
    names = list(feeds)
    tensors = [torch.from_numpy(v.copy()) for v in feeds.values()]
    positions = [names.index(n) for n in wrt]
    results = {}
    counts = {}
    for optimize in (True, False):
        program = _program(model, wrt, optimize)
        results[optimize] = _outputs_and_gradients(program, tensors, positions)
        counts[optimize] = _op_counts(program)
    for got, want in zip(results[True], results[False], strict=True):
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    return counts[True], counts[False]


def _model(nodes: list[onnx.NodeProto], inputs: dict[str, list], outputs: list[str]) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes, "passes",
        [helper.make_tensor_value_info(n, onnx.TensorProto.DOUBLE, s) for n, s in inputs.items()],
        [helper.make_tensor_value_info(n, onnx.TensorProto.DOUBLE, None) for n in outputs])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                   helper.make_opsetid("com.microsoft", 1)])


def _rand(*shape: int) -> np.ndarray:
    return np.random.default_rng(sum(shape)).uniform(-1, 1, size=shape)


def test_linear_and_attention_transposes_fold_into_the_products() -> None:
    """nn.Linear's MatMul(x, Transpose(W)) and attention's MatMul(q, Transpose(k)), with
    symbolic batch/sequence dims as the exporter writes them: both Transposes disappear
    from forward and from backward, and the results are those of the graph as built."""
    nodes = [
        helper.make_node("Transpose", ["w"], ["wt"], perm=[1, 0]),
        helper.make_node("MatMul", ["x", "wt"], ["xw"], name="linear_matmul"),
        helper.make_node("Add", ["xw", "bias"], ["h"]),
        helper.make_node("Reshape", ["h", "heads"], ["q"]),
        helper.make_node("Transpose", ["q"], ["kt"], perm=[0, 1, 3, 2]),
        helper.make_node("MatMul", ["q", "kt"], ["scores"]),
    ]
    model = _model(nodes, {"x": ["batch", "seq", 8], "w": [6, 8], "bias": [6]}, ["scores"])
    heads = helper.make_tensor("heads", onnx.TensorProto.INT64, [4], [2, 3, 2, 3])
    model.graph.initializer.append(heads)
    # The exporter declares intermediate shapes; the rank of q lets folding run before
    # gradient building.
    model.graph.value_info.append(
        helper.make_tensor_value_info("q", onnx.TensorProto.DOUBLE, ["batch", "seq", 2, 3]))
    feeds = {"x": _rand(2, 3, 8), "w": _rand(6, 8), "bias": _rand(6)}
    optimized, built = _assert_same_results(model, feeds, ["x", "w", "bias"])
    assert built["Transpose"] >= 2, built
    assert optimized["Transpose"] == 0, optimized
    assert optimized["MatMul"] == 0, optimized
    # The fused node keeps the MatMul's name, which error messages quote; once gradients are
    # built, the bias Add joins it too (passes/matmul_bias_fusion.h).
    program = _program(model, ["x", "w", "bias"], optimize=True)
    graph = onnx.load_from_string(program.training_graph_onnx()).graph
    fused = [n for n in graph.node if n.name == "linear_matmul"]
    assert [n.op_type for n in fused] == ["FusedMatMulBias"], fused
    assert {a.name: a.i for a in fused[0].attribute if a.name.startswith("trans")} == {
        "transA": 0,
        "transB": 1,
    }, fused


def test_gemm_and_fused_matmul_operands_fold_and_flags_toggle() -> None:
    nodes = [
        helper.make_node("Transpose", ["a"], ["at"]),  # no perm: reverses a 2-D input
        helper.make_node("Gemm", ["at", "b", "c"], ["g"], transB=1, alpha=0.5),
        helper.make_node("Transpose", ["g"], ["gt"], perm=[1, 0]),
        helper.make_node("FusedMatMul", ["d", "gt"], ["y"], domain="com.microsoft", transA=1,
                         alpha=2.0),
    ]
    model = _model(nodes, {"a": [4, 3], "b": [5, 4], "c": [5], "d": [5, 2]}, ["y"])
    feeds = {"a": _rand(4, 3), "b": _rand(5, 4), "c": _rand(5), "d": _rand(5, 2)}
    optimized, built = _assert_same_results(model, feeds, ["a", "b", "c", "d"])
    assert optimized["Transpose"] == 0 and built["Transpose"] >= 2, (optimized, built)


def test_a_transpose_read_elsewhere_stays_and_other_perms_are_not_folded() -> None:
    nodes = [
        helper.make_node("Transpose", ["w"], ["wt"], perm=[0, 2, 1]),
        helper.make_node("MatMul", ["x", "wt"], ["y"]),
        helper.make_node("Relu", ["wt"], ["r"]),  # a second reader of the transposed copy
        helper.make_node("Transpose", ["v"], ["vt"], perm=[1, 0, 2]),  # moves a batch dim
        helper.make_node("MatMul", ["vt", "x"], ["z"]),
    ]
    model = _model(nodes, {"x": [2, 3, 4], "w": [2, 5, 4], "v": [3, 2, 3]}, ["y", "r", "z", "wt"])
    feeds = {"x": _rand(2, 3, 4), "w": _rand(2, 5, 4), "v": _rand(3, 2, 3)}
    optimized, _ = _assert_same_results(model, feeds, ["x", "w", "v"])
    graph_forward = [n for n in _forward_nodes(model, optimize=True)]
    assert ("Transpose", [0, 2, 1]) in graph_forward  # still read by Relu and a graph output
    assert ("Transpose", [1, 0, 2]) in graph_forward  # a batch dim moves: no flag says that
    assert optimized["FusedMatMul"] >= 1


def _forward_nodes(model: onnx.ModelProto, optimize: bool) -> list[tuple[str, list[int]]]:
    program = _program(model, [], optimize)
    graph = onnx.load_from_string(program.training_graph_onnx()).graph
    return [(n.op_type, list(next((a.ints for a in n.attribute if a.name == "perm"), [])))
            for n in graph.node]


def test_rank1_operand_keeps_its_transpose_for_gradient_building() -> None:
    """The FusedMatMul gradient rule refuses a transposed operand next to a rank-1 one, so
    folding waits until gradients are built; the results agree either way."""
    nodes = [helper.make_node("Transpose", ["w"], ["wt"], perm=[1, 0]),
             helper.make_node("MatMul", ["v", "wt"], ["y"])]
    model = _model(nodes, {"v": [4], "w": [3, 4]}, ["y"])
    _assert_same_results(model, {"v": _rand(4), "w": _rand(3, 4)}, ["v", "w"])


def test_folded_gradients_match_finite_differences() -> None:
    nodes = [helper.make_node("Transpose", ["w"], ["wt"], perm=[1, 0]),
             helper.make_node("MatMul", ["x", "wt"], ["h"]),
             helper.make_node("Transpose", ["h"], ["ht"], perm=[0, 2, 1]),
             helper.make_node("MatMul", ["ht", "h"], ["y"])]
    model = _model(nodes, {"x": [2, 3, 4], "w": [5, 4]}, ["y"])
    program = _program(model, ["x", "w"], optimize=True)
    assert _op_counts(program)["Transpose"] == 0
    x = torch.from_numpy(_rand(2, 3, 4)).requires_grad_(True)
    w = torch.from_numpy(_rand(5, 4)).requires_grad_(True)
    assert torch.autograd.gradcheck(lambda a, b: _C.run(program, [a, b])[0], (x, w), eps=1e-6,
                                    atol=1e-6, rtol=1e-5)


def test_graph_optimizations_option_is_validated_and_overridden_by_environment(monkeypatch) -> None:
    assert DebugOptions().graph_optimizations is True
    with pytest.raises(TypeError, match="graph_optimizations must be a bool"):
        DebugOptions(graph_optimizations=1)
    monkeypatch.setenv("ORTMODULE_GRAPH_OPTIMIZATIONS", "0")
    assert DebugOptions.from_env().graph_optimizations is False
    monkeypatch.setenv("ORTMODULE_GRAPH_OPTIMIZATIONS", "yes")
    with pytest.raises(ValueError, match="ORTMODULE_GRAPH_OPTIMIZATIONS='yes' must be 0 or 1"):
        DebugOptions.from_env()


class Attention(nn.Module):
    """Linear projections and attention scores: the Transposes that folding removes."""

    def __init__(self) -> None:
        super().__init__()
        self.qkv = nn.Linear(8, 24)
        self.out = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        # A scale exact in float32: the exporter writes scalar constants as float32.
        scores = torch.softmax(q @ k.transpose(-1, -2) / 4.0, dim=-1)
        return self.out(scores @ v)


@pytest.mark.parametrize("optimize", [True, False])
def test_module_with_and_without_graph_optimizations_matches_eager(optimize: bool,
                                                                   tmp_path) -> None:
    torch.manual_seed(0)
    eager = Attention().double()
    options = DebugOptions(graph_optimizations=optimize, save_onnx=True, onnx_prefix="attn",
                           save_path=str(tmp_path))
    ort = ORTModule(copy.deepcopy(eager), debug_options=options)
    x = torch.randn(3, 5, 8, dtype=torch.float64)
    expected, actual = eager(x), ort(x)
    torch.testing.assert_close(actual, expected, rtol=1e-10, atol=1e-12)
    expected.square().sum().backward()
    actual.square().sum().backward()
    for (name, p), q in zip(ort.named_parameters(), eager.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-10, atol=1e-12, msg=name)
    graph = onnx.load(str(tmp_path / "attn_training_training.onnx")).graph
    transposes = sum(n.op_type == "Transpose" for n in graph.node)
    assert (transposes == 0) == optimize, transposes


class DroppedLinears(nn.Module):
    """Linear on 3-D input (MatMul + Add, fused into FusedMatMulBias) -> Dropout, twice, the
    second through a ReLU the fusion takes in."""

    def __init__(self) -> None:
        super().__init__()
        self.first = nn.Linear(16, 16)
        self.second = nn.Linear(16, 16)
        self.drop = nn.Dropout(0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.drop(self.first(x)) + x
        return self.drop(torch.relu(self.second(h)))


def test_dropout_after_a_fused_linear_draws_what_the_unoptimized_graph_draws(tmp_path) -> None:
    """The fused product's readers keep their own random streams: for the same seed, the
    optimized graph drops the elements the graph as exported drops, forward and backward."""
    torch.manual_seed(0)
    eager = DroppedLinears().train()
    x = torch.randn(4, 8, 16)
    results = {}
    for optimize in (True, False):
        options = DebugOptions(graph_optimizations=optimize, save_onnx=True,
                               onnx_prefix=f"drop{int(optimize)}", save_path=str(tmp_path))
        ort = ORTModule(copy.deepcopy(eager), debug_options=options)
        xi = x.clone().requires_grad_()
        torch.manual_seed(7)
        y = ort(xi)
        (y * torch.linspace(-1, 2, y.numel()).reshape(y.shape)).sum().backward()
        results[optimize] = [y.detach(), xi.grad] + [p.grad for p in ort.parameters()]
    graph = onnx.load(str(tmp_path / "drop1_training_training.onnx")).graph
    assert sum(n.op_type == "FusedMatMulBias" for n in graph.node) == 2
    assert (results[False][0] == 0).any() and (results[False][0] != 0).any()
    for got, want in zip(results[True], results[False], strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=0)


@pytest.mark.slow
@pytest.mark.parametrize("dropout", [0.0, 0.1])
@pytest.mark.parametrize("name", ["bert", "gpt2"])
def test_transformer_with_and_without_graph_optimizations_agree(name: str, dropout: float) -> None:
    """With dropout both graphs draw the same elements for the same seed."""
    family = FAMILIES[name]
    torch.manual_seed(0)
    eager = family.build(dropout).train()
    results = {}
    for optimize in (True, False):
        ort = ORTModule(copy.deepcopy(eager),
                        debug_options=DebugOptions(graph_optimizations=optimize))
        torch.manual_seed(1)
        loss = ort(**family.batch(4, 8, 0)).loss
        loss.backward()
        results[optimize] = (loss.detach(),
                             {n: p.grad for n, p in ort.module.named_parameters()})
    torch.testing.assert_close(results[True][0], results[False][0], rtol=1e-5, atol=1e-6)
    for n, g in results[False][1].items():
        torch.testing.assert_close(results[True][1][n], g, rtol=1e-4, atol=2e-5, msg=n)


class NormedMlp(nn.Module):
    """Linear -> LayerNorm (or RMSNorm) -> Linear: backward reads the norm's input (its
    gradient) and its output (the second Linear's weight gradient)."""

    def __init__(self, norm: type[nn.Module]) -> None:
        super().__init__()
        self.fc1, self.norm, self.fc2 = nn.Linear(24, 48), norm(48), nn.Linear(48, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.norm(self.fc1(x)))


@pytest.mark.parametrize("norm,op", [(nn.LayerNorm, "LayerNormalization"),
                                     (nn.RMSNorm, "SimplifiedLayerNormalization")])
def test_norm_output_is_recomputed_in_backward_not_kept(norm: type[nn.Module], op: str) -> None:
    """With graph optimizations backward recomputes the norm's output from its kept input
    (passes/recompute.h) instead of keeping both; the gradients are those of the unoptimized
    graph bit for bit (the copy repeats the same kernel on the same input) and eager's."""
    torch.manual_seed(0)
    eager = NormedMlp(norm)
    x = torch.randn(64, 24)  # 64 rows: the norm's parallel path
    grads, plans = {}, {}
    for optimize in (True, False):
        ort = ORTModule(copy.deepcopy(eager), DebugOptions(graph_optimizations=optimize))
        ort(x).square().sum().backward()
        grads[optimize] = {n: p.grad for n, p in ort.named_parameters()}
        plans[optimize] = next(iter(ort._cache.values()))[0].program.plan_description()
    eager(x).square().sum().backward()
    for name, q in eager.named_parameters():
        torch.testing.assert_close(grads[True][name], grads[False][name], rtol=0, atol=0,
                                   msg=name)
        torch.testing.assert_close(grads[True][name], q.grad, rtol=1e-5, atol=1e-5, msg=name)
    forward, backward = plans[True].split("backward:", 1)
    assert f"{op} " in forward and "[recompute]" not in forward, plans[True]
    assert any(f"{op} " in line and "[recompute]" in line
               for line in backward.splitlines()), plans[True]
    assert "[recompute]" not in plans[False], plans[False]


class AutocastBlock(nn.Module):
    """Linear, GELU, Linear, residual and LayerNorm: under autocast every op between the
    products computes in float32 between Casts, and each Cast's gradient is a CastLike."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.act, self.fc2 = nn.Linear(16, 48), nn.GELU(), nn.Linear(48, 16)
        self.norm = nn.LayerNorm(16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm(self.fc2(self.act(self.fc1(x))) + x)
        return h.float().square().mean()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_cast_gradients_keep_no_forward_value_for_its_dtype(dtype: torch.dtype) -> None:
    """The gradient of a Cast is CastLike(dY, X): it reads X for its dtype only. With graph
    optimizations such reads move to where the dtype is known by definition
    (passes/metadata_reads.h): no CastLike reads a forward value but a graph input, so
    backward neither keeps nor recomputes an activation for its dtype. Values widened to
    float32 for backward are widened again there from the kept 16-bit values. The results
    are the unoptimized graph's and eager's."""
    torch.manual_seed(0)
    eager = AutocastBlock()
    x = torch.randn(4, 8, 16)
    grads, losses, graphs, plans = {}, {}, {}, {}
    for optimize in (True, False):
        ort = ORTModule(copy.deepcopy(eager), DebugOptions(graph_optimizations=optimize))
        with torch.autocast("cpu", dtype=dtype):
            losses[optimize] = ort(x)
        losses[optimize].backward()
        grads[optimize] = {n: p.grad for n, p in ort.named_parameters()}
        entry = next(iter(ort._cache.values()))[0]
        graphs[optimize] = onnx.load_from_string(entry.program.training_graph_onnx()).graph
        plans[optimize] = entry.program.plan_description()
    with torch.autocast("cpu", dtype=dtype):
        expected = eager(x)
    expected.backward()

    def cast_like_targets(graph: onnx.GraphProto) -> list[str]:
        return [n.input[1] for n in graph.node if n.op_type == "CastLike"]

    inputs = {v.name for v in graphs[True].input}
    # The unoptimized graph's CastLikes read forward values; the optimized one's read graph
    # inputs (parameters) only.
    assert any(t not in inputs for t in cast_like_targets(graphs[False]))
    assert all(t in inputs for t in cast_like_targets(graphs[True])), cast_like_targets(
        graphs[True])
    backward = plans[True].split("backward:", 1)[1]
    assert "  Gelu '" not in backward, backward  # no recomputed activation

    # Forward keeps no float32 widening of a 16-bit value (passes/recompute.h,
    # recompute_widening_casts): backward widens the kept 16-bit value again.
    def kept_widenings(optimize: bool) -> set[str]:
        stash = set(plans[optimize].split("stash:", 1)[1].split("\n", 1)[0].split())
        widened = {n.output[0] for n in graphs[optimize].node if n.op_type == "Cast"
                   and n.attribute[0].i == onnx.TensorProto.FLOAT}
        return stash & widened

    assert kept_widenings(False), plans[False]
    assert not kept_widenings(True), plans[True]
    assert "[recompute]" in backward, backward
    torch.testing.assert_close(losses[True], losses[False], rtol=1e-2, atol=1e-5)
    torch.testing.assert_close(losses[True], expected, rtol=1e-2, atol=1e-5)
    for name, q in eager.named_parameters():
        torch.testing.assert_close(grads[True][name], grads[False][name], rtol=0.05, atol=2e-3,
                                   msg=name)
        torch.testing.assert_close(grads[True][name], q.grad, rtol=0.05, atol=2e-3, msg=name)
