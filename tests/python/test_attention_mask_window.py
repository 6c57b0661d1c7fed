"""A constant attention mask that depends only on j - i (causal, causal with past keys, sliding
window, a distance bias), built from positions in the graph as Hugging Face models build theirs,
reaches FusedAttention as its S + T - 1 diagonal values (attribute mask_window,
passes/attention_mask_window.h), and forward and gradients are those of the graph as built
(float64, 1e-12), with the softmax kept or recomputed block by block. Masks that vary along a
diagonal or come from an input stay whole."""

from __future__ import annotations

import collections
import copy

import numpy as np
import onnx
import pytest
import torch
from onnx import helper, numpy_helper

from ortmodule import _C, DebugOptions, ORTModule
from tests.python.test_passes import _assert_same_results, _program, _rand

LOWEST = float(np.finfo(np.float64).min)


def _const(name: str, value: np.ndarray) -> onnx.NodeProto:
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(value))


def _positions(S: int, T: int) -> list[onnx.NodeProto]:
    """rows [S, 1] = 0..S-1 and cols [1, T] = 0..T-1, int64, from Range."""
    i64 = np.int64
    return [_const("zero", np.asarray(0, i64)), _const("one", np.asarray(1, i64)),
            _const("s_len", np.asarray(S, i64)), _const("t_len", np.asarray(T, i64)),
            _const("ax0", np.asarray([0], i64)), _const("ax1", np.asarray([1], i64)),
            helper.make_node("Range", ["zero", "s_len", "one"], ["r"]),
            helper.make_node("Range", ["zero", "t_len", "one"], ["c"]),
            helper.make_node("Unsqueeze", ["r", "ax1"], ["rows"]),
            helper.make_node("Unsqueeze", ["c", "ax0"], ["cols"])]


def _mask_nodes(kind: str, S: int, T: int, out: str) -> tuple[list[onnx.NodeProto], bool]:
    """Nodes computing `out` [1, 1, S, T] from positions, and whether it is boolean. Key j is
    visible to query i when j <= i + (T - S) (causal, the keys of T - S past positions
    first); "window" also hides keys more than 40 behind; "bias" adds -0.01 |j - i| to the
    causal additive mask; "random" is a constant mask that no diagonal describes."""
    nodes = _positions(S, T)
    i64 = np.int64
    nodes += [_const("past", np.asarray(T - S, i64)),
              helper.make_node("Add", ["rows", "past"], ["reach"]),
              helper.make_node("LessOrEqual", ["cols", "reach"], ["causal"])]
    four_d = [_const("axes01", np.asarray([0, 1], i64))]
    if kind == "window":
        nodes += [_const("width", np.asarray(40, i64)),
                  helper.make_node("Sub", ["reach", "width"], ["floor"]),
                  helper.make_node("Greater", ["cols", "floor"], ["recent"]),
                  helper.make_node("And", ["causal", "recent"], ["keep"]),
                  *four_d, helper.make_node("Unsqueeze", ["keep", "axes01"], [out])]
        return nodes, True
    if kind == "boolean":
        return nodes + [*four_d, helper.make_node("Unsqueeze", ["causal", "axes01"], [out])], True
    if kind == "random":
        bits = np.random.default_rng(5).uniform(size=(1, 1, S, T)) < 0.7
        bits[..., 0] = True
        return [_const(out, bits)], True
    nodes += [_const("zero_f", np.asarray(0.0)), _const("lowest", np.asarray(LOWEST)),
              helper.make_node("Where", ["causal", "zero_f", "lowest"], ["additive"])]
    if kind == "bias":
        nodes += [helper.make_node("Sub", ["cols", "rows"], ["dist"]),
                  helper.make_node("Abs", ["dist"], ["adist"]),
                  helper.make_node("Cast", ["adist"], ["fdist"], to=onnx.TensorProto.DOUBLE),
                  _const("slope", np.asarray(-0.01)),
                  helper.make_node("Mul", ["fdist", "slope"], ["bias"]),
                  helper.make_node("Add", ["additive", "bias"], ["biased"])]
        return nodes + [*four_d, helper.make_node("Unsqueeze", ["biased", "axes01"], [out])], False
    return nodes + [*four_d, helper.make_node("Unsqueeze", ["additive", "axes01"], [out])], False


def _attention(kind: str, S: int, T: int, heads: int = 2, pad: bool = False) -> onnx.ModelProto:
    """Attention over q [2, heads, S, 8], k, v [2, heads, T, 8] with _mask_nodes' mask; pad:
    the mask And a boolean input pad [2, 1, 1, T]."""
    mask_nodes, boolean = _mask_nodes(kind, S, T, "built" if pad else "mask")
    if pad:
        mask_nodes.append(helper.make_node("And", ["built", "pad"], ["mask"]))
    nodes = [*mask_nodes,
             helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
             helper.make_node("MatMul", ["q", "kt"], ["scores"]),
             _const("scale", np.asarray(0.25)),
             helper.make_node("Mul", ["scores", "scale"], ["scaled"])]
    if boolean:
        nodes += [_const("fill", np.asarray(LOWEST)),
                  helper.make_node("Where", ["mask", "scaled", "fill"], ["masked"])]
    else:
        nodes.append(helper.make_node("Add", ["scaled", "mask"], ["masked"]))
    nodes += [helper.make_node("Softmax", ["masked"], ["probs"], axis=-1),
              helper.make_node("MatMul", ["probs", "v"], ["out"])]
    double = onnx.TensorProto.DOUBLE
    inputs = [helper.make_tensor_value_info("q", double, [2, heads, S, 8]),
              helper.make_tensor_value_info("k", double, [2, heads, T, 8]),
              helper.make_tensor_value_info("v", double, [2, heads, T, 8])]
    if pad:
        inputs.append(helper.make_tensor_value_info("pad", onnx.TensorProto.BOOL, [2, 1, 1, T]))
    graph = helper.make_graph(nodes, "positions_mask", inputs,
                              [helper.make_tensor_value_info("out", double, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _attention_nodes(program: _C.Program) -> list[onnx.NodeProto]:
    graph = onnx.load_from_string(program.training_graph_onnx()).graph
    return [n for n in graph.node if n.op_type.startswith("FusedAttention")]


def _window_attrs(program: _C.Program) -> dict[str, int]:
    return {n.op_type: helper.get_attribute_value(a) for n in _attention_nodes(program)
            for a in n.attribute if a.name == "mask_window"}


@pytest.mark.parametrize("recompute", [False, True])
@pytest.mark.parametrize("kind,S,T", [("additive", 300, 300), ("boolean", 300, 300),
                                      ("additive", 250, 300), ("window", 300, 300),
                                      ("bias", 300, 300), ("boolean", 2, 2)])
def test_a_mask_of_key_query_distances_reaches_attention_as_its_diagonals(
        kind: str, S: int, T: int, recompute: bool) -> None:
    model = _attention(kind, S, T)
    feeds = {"q": _rand(2, 2, S, 8) * 2, "k": _rand(2, 2, T, 8) * 2, "v": _rand(2, 2, T, 8)}
    limit = _C.attention_probs_limit()
    _C.set_attention_probs_limit(0 if recompute else limit)
    try:
        optimized, _ = _assert_same_results(model, feeds, ["q", "k", "v"])
    finally:
        _C.set_attention_probs_limit(limit)
    assert optimized["FusedAttention"] == 1 and optimized["FusedAttentionGrad"] == 1, optimized
    program = _program(model, ["q", "k", "v"], True)
    assert _window_attrs(program) == {"FusedAttention": 1, "FusedAttentionGrad": 1}
    # The mask's producers are gone: nothing [S, T] is built per call.
    assert optimized["LessOrEqual"] == 0 and optimized["Where"] == 0, optimized
    graph = onnx.load_from_string(program.training_graph_onnx()).graph
    window = {i.name: tuple(i.dims) for i in graph.initializer}[_attention_nodes(program)[0].input[3]]
    assert window == (S + T - 1,)


def test_a_mask_no_diagonal_describes_stays_whole() -> None:
    """A constant mask whose elements differ along a diagonal keeps its [S, T] form."""
    model = _attention("random", 200, 200)
    feeds = {"q": _rand(2, 2, 200, 8), "k": _rand(2, 2, 200, 8), "v": _rand(2, 2, 200, 8)}
    _assert_same_results(model, feeds, ["q", "k", "v"])
    assert _window_attrs(_program(model, ["q", "k", "v"], True)) == {}


def test_a_mask_from_an_input_stays_whole() -> None:
    """A causal mask combined with a padding mask fed per call is not a constant."""
    model = _attention("boolean", 64, 64, pad=True)
    pad = np.ones((2, 1, 1, 64), dtype=np.bool_)
    pad[1, ..., 50:] = False
    feeds = {"q": _rand(2, 2, 64, 8), "k": _rand(2, 2, 64, 8), "v": _rand(2, 2, 64, 8),
             "pad": pad}
    _assert_same_results(model, feeds, ["q", "k", "v"])
    assert _window_attrs(_program(model, ["q", "k", "v"], True)) == {}


def _gpt2(attention: str) -> torch.nn.Module:
    import transformers

    torch.manual_seed(0)
    return transformers.GPT2LMHeadModel(transformers.GPT2Config(
        vocab_size=97, n_embd=32, n_layer=2, n_head=2, n_positions=200, use_cache=False,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, attn_implementation=attention))


def _lm_loss(model: torch.nn.Module, ids: torch.Tensor) -> torch.Tensor:
    logits = model(input_ids=ids).logits  # float64 (transformers' loss from labels is float32)
    return torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, 97),
                                             ids[:, 1:].reshape(-1))


def test_gpt2_causal_mask_is_windowed_and_trains_like_eager() -> None:
    """GPT-2's eager attention: transformers builds an additive [1, 1, S, S] causal mask from
    positions each step; the engine takes its diagonals once and builds no [S, S] tensor per
    step. Gradients are those of the graph without optimizations (float64, 1e-10), and three
    AdamW steps train like eager."""
    eager = _gpt2("eager").double()
    ids = torch.randint(0, 97, (2, 150), generator=torch.Generator().manual_seed(1))
    grads = {}
    for optimize in (True, False):
        model = ORTModule(copy.deepcopy(eager), DebugOptions(graph_optimizations=optimize))
        _lm_loss(model, ids).backward()
        grads[optimize] = {n: p.grad for n, p in model.module.named_parameters()}
        if optimize:
            entry = next(iter(model._cache.values()))[0]
            graph = onnx.load_from_string(entry.program.training_graph_onnx()).graph
    for name, g in grads[False].items():
        torch.testing.assert_close(grads[True][name], g, rtol=1e-10, atol=1e-12, msg=name)
    counts = collections.Counter(
        (n.op_type, helper.get_attribute_value(a)) for n in graph.node for a in n.attribute
        if a.name == "mask_window")
    assert counts == {("FusedAttention", 1): 2, ("FusedAttentionGrad", 1): 2}, counts
    sizes = {tuple(i.dims) for i in graph.initializer
             if any(i.name == n.input[3] for n in graph.node if n.op_type == "FusedAttention")}
    assert sizes == {(2 * 150 - 1,)}, sizes
    ort = ORTModule(copy.deepcopy(eager))
    optimizers = [torch.optim.AdamW(m.parameters(), lr=1e-3) for m in (eager, ort)]
    for _ in range(3):
        losses = []
        for model, optimizer in zip((eager, ort), optimizers, strict=True):
            loss = _lm_loss(model, ids)
            loss.backward()
            losses.append(loss.detach())
            optimizer.step()
            optimizer.zero_grad()
        torch.testing.assert_close(losses[1], losses[0], rtol=1e-12, atol=1e-14)
    for (name, p), q in zip(ort.named_parameters(), eager.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=1e-10, atol=1e-12, msg=name)
