"""Attention's scores softmax, Softmax(Add(Mul(x, c), mask)) as the exporter writes it, runs as
one ScaledMaskedSoftmax node forward and one ScaledMaskedSoftmaxGrad node backward, and the
attention around it, MatMul(softmax, v), as one FusedAttention node and one FusedAttentionGrad
node, with the results of the graph as built (float64, 1e-12); chains that differ stay as
written."""

from __future__ import annotations

import collections
import copy

import numpy as np
import onnx
import pytest
import torch
from onnx import helper, numpy_helper

from ortmodule import _C, DebugOptions, ORTModule
from tests.python.hf_zoo import FAMILIES
from tests.python.test_passes import (
    _assert_same_results,
    _model,
    _op_counts,
    _outputs_and_gradients,
    _program,
    _rand,
)


def _scalar(name: str, value: float) -> onnx.NodeProto:
    return helper.make_node("Constant", [], [name],
                            value=numpy_helper.from_array(np.asarray(value, np.float64)))


def _attention(scale_op: str | None, mask: bool, axis: int = -1,
               extra_outputs: tuple[str, ...] = ()) -> onnx.ModelProto:
    """scores = q @ k^T, then optionally scaled (Mul(scores, c), Mul(c, scores) or
    Div(scores, c)) and masked (Add(., mask)), Softmax(axis), then @ v."""
    nodes = [helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
             helper.make_node("MatMul", ["q", "kt"], ["scores"])]
    last = "scores"
    if scale_op == "Mul":
        nodes += [_scalar("c", 0.35), helper.make_node("Mul", ["scores", "c"], ["scaled"])]
        last = "scaled"
    elif scale_op == "MulFirst":
        nodes += [_scalar("c", 0.35), helper.make_node("Mul", ["c", "scores"], ["scaled"])]
        last = "scaled"
    elif scale_op == "Div":
        nodes += [_scalar("c", 2.75), helper.make_node("Div", ["scores", "c"], ["scaled"])]
        last = "scaled"
    if mask:
        nodes.append(helper.make_node("Add", [last, "mask"], ["masked"]))
        last = "masked"
    nodes += [helper.make_node("Softmax", [last], ["probs"], axis=axis),
              helper.make_node("MatMul", ["probs", "v"], ["out"])]
    inputs = {"q": [2, 3, 5, 4], "k": [2, 3, 5, 4], "v": [2, 3, 5, 4]}
    if mask:
        inputs["mask"] = [2, 1, 1, 5]
    return _model(nodes, inputs, ["out", *extra_outputs])


def _feeds(mask: bool) -> dict[str, np.ndarray]:
    feeds = {"q": _rand(2, 3, 5, 4) * 3, "k": _rand(2, 3, 5, 4), "v": _rand(2, 3, 5, 4)}
    if mask:  # a padding mask: 0 or a large negative
        feeds["mask"] = np.where(np.arange(5) < np.array([[5], [3]]), 0.0, -1e9).reshape(
            2, 1, 1, 5)
    return feeds


@pytest.mark.parametrize("scale_op,mask,mask_needs_grad", [
    ("Mul", True, False),
    ("MulFirst", True, False),
    ("Div", True, False),
    ("Mul", True, True),  # a learned additive bias: its gradient comes from the fused node too
    ("Mul", False, False),
    (None, True, False),
    (None, True, True),
])
def test_scaled_masked_softmax_fuses_forward_and_backward(
        scale_op: str | None, mask: bool, mask_needs_grad: bool) -> None:
    # The softmax is also an output, so the attention around it does not fuse
    # (test_attention_fuses_into_one_op).
    model = _attention(scale_op, mask, extra_outputs=("probs",))
    feeds = _feeds(mask)
    if mask_needs_grad:
        feeds["mask"] = _rand(2, 1, 1, 5)
    wrt = ["q", "k", "v"] + (["mask"] if mask_needs_grad else [])
    optimized, built = _assert_same_results(model, feeds, wrt)
    assert built["Softmax"] == 1 and built["SoftmaxGrad_13"] == 1, built
    assert optimized["ScaledMaskedSoftmax"] == 1, optimized
    # Unscaled, the scores and the mask share one gradient node.
    grads = 1 + (mask_needs_grad and scale_op is not None)
    assert optimized["ScaledMaskedSoftmaxGrad"] == grads, optimized
    for op in ("Softmax", "SoftmaxGrad_13", "Mul", "Div", "Add"):
        assert optimized[op] == 0, (op, optimized)


@pytest.mark.parametrize("recompute", [False, True])
@pytest.mark.parametrize("scale_op,mask,mask_needs_grad", [
    ("Mul", True, False),
    ("Div", True, False),
    ("Mul", False, False),
    ("Mul", True, True),  # the mask's gradient comes from the unfused rule, recomputed
])
def test_attention_fuses_into_one_op(scale_op: str | None, mask: bool, mask_needs_grad: bool,
                                     recompute: bool) -> None:
    """MatMul(softmax(scale * q k^T + mask), v) runs as one FusedAttention forward and one
    FusedAttentionGrad backward, with the softmax kept for backward or (recompute: a stash
    limit of 0 bytes) recomputed block by block; results as the graph as built."""
    model = _attention(scale_op, mask)
    feeds = _feeds(mask)
    if mask_needs_grad:
        feeds["mask"] = _rand(2, 1, 1, 5)
    wrt = ["q", "k", "v"] + (["mask"] if mask_needs_grad else [])
    limit = _C.attention_probs_limit()
    _C.set_attention_probs_limit(0 if recompute else limit)
    try:
        optimized, built = _assert_same_results(model, feeds, wrt)
    finally:
        _C.set_attention_probs_limit(limit)
    assert built["Softmax"] == 1 and built["MatMul"] >= 2, built
    assert optimized["FusedAttention"] == 1 and optimized["FusedAttentionGrad"] == 1, optimized
    assert optimized["ScaledMaskedSoftmax"] == int(mask_needs_grad), optimized
    for op in ("Softmax", "SoftmaxGrad_13", "Mul", "Div", "Add", "MatMul", "Transpose"):
        assert optimized[op] == 0, (op, optimized)


@pytest.mark.parametrize("limit", [0, None])
def test_attention_fuses_without_a_gradient_graph(limit: int | None) -> None:
    """An inference graph (no gradients) fuses too: batched products on scratch memory below
    the stash limit, blocks of rows above (limit 0)."""
    saved = _C.attention_probs_limit()
    _C.set_attention_probs_limit(saved if limit is None else limit)
    model, feeds = _attention("Mul", True), _feeds(True)
    tensors = [torch.from_numpy(v.copy()) for v in feeds.values()]
    try:
        programs = {opt: _program(model, [], opt) for opt in (True, False)}
        outputs = {opt: _C.run(p, tensors) for opt, p in programs.items()}
    finally:
        _C.set_attention_probs_limit(saved)
    for got, want in zip(outputs[True], outputs[False], strict=True):
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    optimized = _op_counts(programs[True])
    assert optimized["FusedAttention"] == 1 and optimized["MatMul"] == 0, optimized


@pytest.mark.parametrize("case", ["scaled_read_elsewhere", "masked_read_elsewhere", "axis"])
def test_chains_that_differ_are_not_fused(case: str) -> None:
    if case == "axis":
        model = _attention("Mul", True, axis=2)
    else:
        model = _attention("Mul", True, extra_outputs=("scaled" if case.startswith("scaled")
                                                       else "masked",))
    optimized, _ = _assert_same_results(model, _feeds(True), ["q", "k", "v"])
    if case == "scaled_read_elsewhere":  # the Add and the Softmax still fuse, unscaled
        assert optimized["ScaledMaskedSoftmax"] == 1 and optimized["Mul"] >= 1, optimized
    else:
        assert optimized["ScaledMaskedSoftmax"] == 0 and optimized["Softmax"] == 1, optimized


def test_a_scale_that_is_not_a_constant_is_left_to_the_mask_only() -> None:
    nodes = [helper.make_node("Mul", ["x", "s"], ["scaled"]),
             helper.make_node("Add", ["scaled", "mask"], ["masked"]),
             helper.make_node("Softmax", ["masked"], ["y"], axis=-1)]
    model = _model(nodes, {"x": [2, 3, 4], "s": [1], "mask": [3, 4]}, ["y"])
    feeds = {"x": _rand(2, 3, 4), "s": np.array([0.7]), "mask": _rand(3, 4)}
    optimized, _ = _assert_same_results(model, feeds, ["x", "s", "mask"])
    assert optimized["ScaledMaskedSoftmax"] == 1 and optimized["Mul"] >= 1, optimized


def _masked_attention(batch: int, heads: int, rows: int, mask_batch: int, additive: bool,
                      fill: float) -> onnx.ModelProto:
    """float64 attention over q, k, v [batch, heads, rows, 8], scale 0.25, masked by an input
    [mask_batch, 1, rows, rows]: added (additive) or Where(mask, scores, fill)."""
    nodes = [helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
             helper.make_node("MatMul", ["q", "kt"], ["scores"]),
             _scalar("c", 0.25), helper.make_node("Mul", ["scores", "c"], ["scaled"]),
             _scalar("fill", fill),
             helper.make_node("Add", ["scaled", "mask"], ["masked"]) if additive else
             helper.make_node("Where", ["mask", "scaled", "fill"], ["masked"]),
             helper.make_node("Softmax", ["masked"], ["probs"], axis=-1),
             helper.make_node("MatMul", ["probs", "v"], ["out"])]
    double = onnx.TensorProto.DOUBLE
    inputs = [helper.make_tensor_value_info(n, double, [batch, heads, rows, 8]) for n in "qkv"]
    inputs.append(helper.make_tensor_value_info(
        "mask", double if additive else onnx.TensorProto.BOOL, [mask_batch, 1, rows, rows]))
    return helper.make_model(
        helper.make_graph(nodes, "masked_attention", inputs,
                          [helper.make_tensor_value_info("out", double, None)]),
        opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("case", ["causal", "empty_row", "near_fill", "kept", "additive",
                                  "additive_near", "additive_nan_key"])
def test_blocked_attention_leaves_out_dropped_keys_exactly(case: str) -> None:
    """Causal attention over 300 keys in blocks of rows (a stash limit of 0 bytes): the first
    block's products leave out the keys no row of it sees. A row that sees nothing (its softmax
    spreads over all keys) and a fill whose weight does not vanish (-3: exp(fill - max) is
    not 0) make the block run over all keys; "kept" stashes the softmax instead; "additive"
    masks with 0 / the lowest float64 (left out), "additive_near" with 0 / -3 (kept). Each
    agrees with the graph as built."""
    rows, heads = 300, 2
    keep = np.tril(np.ones((rows, rows), dtype=np.bool_))[None, None]
    if case == "empty_row":
        keep = keep.copy()
        keep[0, 0, 5, :] = False
    fill = -3.0 if case in ("near_fill", "additive_near") else float(
        np.finfo(np.float64).min)
    additive = case.startswith("additive")
    model = _masked_attention(1, heads, rows, 1, additive, fill)
    feeds = {n: _rand(1, heads, rows, 8) * 2 for n in "qkv"}
    feeds["mask"] = np.where(keep, 0.0, fill) if additive else keep
    if case == "additive_nan_key":
        # A NaN key that the first block's rows cannot see: unfused, NaN plus the mask spreads
        # NaN over every row of the head, so the blocks must not leave that key out.
        feeds["k"][0, 0, rows - 1, :] = np.nan
        tensors = [torch.from_numpy(v.copy()) for v in feeds.values()]
        limit = _C.attention_probs_limit()
        _C.set_attention_probs_limit(0)
        try:
            got, want = (_C.run(_program(model, [], opt), tensors)[0] for opt in (True, False))
        finally:
            _C.set_attention_probs_limit(limit)
        assert torch.isnan(want[0, 0]).all() and not torch.isnan(want[0, 1]).any()
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12, equal_nan=True)
        return
    limit = _C.attention_probs_limit()
    _C.set_attention_probs_limit(limit if case == "kept" else 0)
    try:
        optimized, _ = _assert_same_results(model, feeds, ["q", "k", "v"])
    finally:
        _C.set_attention_probs_limit(limit)
    assert optimized["FusedAttention"] == 1 and optimized["FusedAttentionGrad"] == 1, optimized


@pytest.mark.parametrize("case", ["boolean", "additive", "additive_nan_key"])
def test_long_sequence_blocks_with_a_mask_per_sample(case: str) -> None:
    """600 queries and keys in blocks of 112 rows (a stash limit of 0 bytes), a causal mask
    with a different padding per sample ([2, 1, 600, 600]: the second sample's last 150 keys
    are padding, so that its blocks past them reach 450 keys only): each block leaves out the keys no row
    of it sees in its own sample, and agrees with the graph as built. "additive_nan_key": a
    NaN key past the first blocks' reach in the second sample only, which spreads NaN over
    that sample's rows unfused and must not be left out there, while the first sample's
    blocks still leave keys out."""
    rows, heads, batch, padded = 600, 2, 2, 150
    causal = np.tril(np.ones((rows, rows), dtype=np.bool_))
    keep = np.stack([causal, causal & (np.arange(rows) < rows - padded)])[:, None]
    fill = float(np.finfo(np.float64).min)
    additive = case.startswith("additive")
    model = _masked_attention(batch, heads, rows, batch, additive, fill)
    feeds = {n: _rand(batch, heads, rows, 8) * 2 for n in "qkv"}
    feeds["mask"] = np.where(keep, 0.0, fill) if additive else keep
    limit = _C.attention_probs_limit()
    _C.set_attention_probs_limit(0)
    try:
        if case == "additive_nan_key":
            feeds["k"][1, 0, rows - padded - 1, :] = np.nan
            tensors = [torch.from_numpy(v.copy()) for v in feeds.values()]
            got, want = (_C.run(_program(model, [], opt), tensors)[0] for opt in (True, False))
            assert torch.isnan(want[1, 0]).all() and not torch.isnan(want[0]).any()
            assert not torch.isnan(want[1, 1]).any()
            torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12, equal_nan=True)
            return
        optimized, _ = _assert_same_results(model, feeds, ["q", "k", "v"])
    finally:
        _C.set_attention_probs_limit(limit)
    assert optimized["FusedAttention"] == 1 and optimized["FusedAttentionGrad"] == 1, optimized


def _boolean_mask_attention(form: str, scaled: bool) -> onnx.ModelProto:
    """scores = q @ k^T (times 0.35 when scaled), masked by a boolean [2, 1, 5, 5] mask:
    Where(keep, scores, lowest) ("keep", scaled_dot_product_attention's attn_mask) or
    Where(drop, lowest, scores) ("drop", masked_fill); Softmax; @ v."""
    nodes = [helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
             helper.make_node("MatMul", ["q", "kt"], ["scores"])]
    last = "scores"
    if scaled:
        nodes += [_scalar("c", 0.35), helper.make_node("Mul", ["scores", "c"], ["scaled"])]
        last = "scaled"
    nodes.append(_scalar("fill", float(np.finfo(np.float64).min)))
    branches = [last, "fill"] if form == "keep" else ["fill", last]
    nodes += [helper.make_node("Where", ["mask", *branches], ["masked"]),
              helper.make_node("Softmax", ["masked"], ["probs"], axis=-1),
              helper.make_node("MatMul", ["probs", "v"], ["out"])]
    double = onnx.TensorProto.DOUBLE
    inputs = [helper.make_tensor_value_info(n, double, [2, 3, 5, 4]) for n in ("q", "k", "v")]
    inputs.append(helper.make_tensor_value_info("mask", onnx.TensorProto.BOOL, [2, 1, 5, 5]))
    graph = helper.make_graph(nodes, "bool_mask", inputs,
                              [helper.make_tensor_value_info("out", double, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("recompute", [False, True])
@pytest.mark.parametrize("scaled", [True, False])
@pytest.mark.parametrize("form", ["keep", "drop"])
def test_boolean_masks_fuse_forward_and_backward(form: str, scaled: bool, recompute: bool) -> None:
    """A causal-and-padding boolean mask with one query row dropped entirely: its softmax is
    uniform and q, k get no gradient through it, fused as unfused; recomputed block by block
    (the padding keys of the second sequence are left out of its products, except for the row
    that sees nothing)."""
    keep = np.tril(np.ones((5, 5), dtype=np.bool_))[None, None].repeat(2, axis=0)
    keep[1, 0, :, 3:] = False  # the second sequence: two padding keys ...
    keep[1, 0, 4, :] = False   # ... and a query that sees nothing
    feeds = {"q": _rand(2, 3, 5, 4) * 3, "k": _rand(2, 3, 5, 4), "v": _rand(2, 3, 5, 4),
             "mask": keep if form == "keep" else ~keep}
    limit = _C.attention_probs_limit()
    _C.set_attention_probs_limit(0 if recompute else limit)
    try:
        optimized, built = _assert_same_results(_boolean_mask_attention(form, scaled), feeds,
                                                ["q", "k", "v"])
    finally:
        _C.set_attention_probs_limit(limit)
    assert built["Where"] >= 1 and built["Softmax"] == 1, built
    assert optimized["FusedAttention"] == 1, optimized
    assert optimized["FusedAttentionGrad"] == 1, optimized
    for op in ("Softmax", "SoftmaxGrad_13", "Mul", "Where", "ScaledMaskedSoftmax"):
        assert optimized[op] == 0, (op, optimized)
    assert optimized["Not"] == (form == "drop"), optimized


def _training_ops(model: ORTModule) -> collections.Counter:
    entry = next(iter(model._cache.values()))[0]
    graph = onnx.load_from_string(entry.program.training_graph_onnx()).graph
    return collections.Counter(n.op_type for n in graph.node)


@pytest.mark.parametrize("name", ["bert", "gpt2", "llama"])
def test_transformer_attention_softmax_is_fused_in_every_layer(name: str) -> None:
    """The Hugging Face models' eager attention (padding or causal mask) fuses in every layer,
    Llama's element-wise chains fuse too (test_elementwise_fusion.py; BERT's and GPT-2's
    leave none once constants are folded and biases fused into the products; their head
    transposes are read through), and the loss and gradients are those of the unoptimized graph
    in float64.

    Llama computes its attention softmax in float32 whatever the model's dtype
    (``softmax(..., dtype=torch.float32)``): in float64 the graph casts the masked scores to
    float32 before the Softmax, and the fusion, which would compute in the scores' dtype, does
    not cross that Cast. Its fusion is counted on the float32 model, which has no such Cast."""
    family = FAMILIES[name]
    torch.manual_seed(0)
    eager = family.build(0.0).double().train()
    batch = family.batch(2, 6, 0)
    layers = eager.config.num_hidden_layers
    if name == "llama":
        ort = ORTModule(copy.deepcopy(eager).float())
        ort(**batch).loss.backward()
        ops = _training_ops(ort)
        assert ops["FusedAttention"] == layers, ops
        assert ops["FusedAttentionGrad"] == layers and ops["Softmax"] == 0, ops
    results = {}
    for optimize in (True, False):
        ort = ORTModule(copy.deepcopy(eager), DebugOptions(graph_optimizations=optimize))
        loss = ort(**batch).loss
        loss.backward()
        ops = _training_ops(ort)
        if optimize:
            if name == "llama":
                assert ops["ScaledMaskedSoftmax"] == 0 and ops["Softmax"] == layers, ops
                assert ops["FusedElementwise"] > 0, ops
            else:
                assert ops["FusedAttention"] == layers, ops
                assert ops["FusedAttentionGrad"] == layers and ops["Softmax"] == 0, ops
                # The head transposes around attention, forward and backward, are read through.
                assert ops["Transpose"] == 0, ops
        results[optimize] = (loss.detach(), {n: p.grad for n, p in ort.module.named_parameters()})
    torch.testing.assert_close(results[True][0], results[False][0], rtol=1e-12, atol=1e-12)
    for n, g in results[False][1].items():
        torch.testing.assert_close(results[True][1][n], g, rtol=1e-10, atol=1e-12, msg=n)


@pytest.mark.parametrize("name", ["bert", "gpt2", "llama"])
def test_sdpa_attention_softmax_is_fused_in_every_layer(name: str) -> None:
    """The models' default attention, scaled_dot_product_attention with a boolean mask
    (padding, causal), fuses in every layer into ScaledMaskedSoftmax(scores, mask, fill); loss
    and gradients are those of the unoptimized graph and of eager PyTorch in float64."""
    family = FAMILIES[name]
    torch.manual_seed(0)
    eager = family.build(0.0).double().train()
    eager.set_attn_implementation("sdpa")
    batch = family.batch(2, 6, 0)
    if name != "bert":  # a padded sequence for the causal models too
        batch["attention_mask"] = torch.ones(2, 6, dtype=torch.long)
        batch["attention_mask"][1, 4:] = 0
    layers = eager.config.num_hidden_layers
    reference = copy.deepcopy(eager)
    loss = reference(**batch).loss
    loss.backward()
    results = {}
    for optimize in (True, False):
        ort = ORTModule(copy.deepcopy(eager), DebugOptions(graph_optimizations=optimize))
        got = ort(**batch).loss
        got.backward()
        if optimize:
            ops = _training_ops(ort)
            assert ops["FusedAttention"] == layers, ops
            assert ops["FusedAttentionGrad"] == layers and ops["Softmax"] == 0, ops
            assert ops["Where"] == 0, ops
        results[optimize] = (got.detach(), {n: p.grad for n, p in ort.module.named_parameters()})
    torch.testing.assert_close(results[True][0], results[False][0], rtol=1e-12, atol=1e-12)
    # The causal models' loss upcasts the logits with .float(): in float32 even for a
    # float64 model, so eager agrees to float32 rounding there.
    tol = {"rtol": 1e-10, "atol": 1e-12} if name == "bert" else {"rtol": 1e-5, "atol": 1e-7}
    torch.testing.assert_close(results[True][0], loss.detach(), **tol)
    for n, p in reference.named_parameters():
        torch.testing.assert_close(results[True][1][n], results[False][1][n], rtol=1e-10,
                                   atol=1e-12, msg=n)
        torch.testing.assert_close(results[True][1][n], p.grad, **tol, msg=n)


def _dropout_attention(rows: int, causal: bool) -> onnx.ModelProto:
    """softmax(0.25 * q k^T [causal: boolean mask]) -> Dropout(0.3, training) -> @ v."""
    nodes = [helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
             helper.make_node("MatMul", ["q", "kt"], ["scores"]),
             _scalar("c", 0.25), helper.make_node("Mul", ["scores", "c"], ["scaled"])]
    last = "scaled"
    if causal:
        nodes += [_scalar("fill", float(np.finfo(np.float64).min)),
                  helper.make_node("Where", ["mask", "scaled", "fill"], ["masked"])]
        last = "masked"
    nodes += [helper.make_node("Softmax", [last], ["probs"], axis=-1),
              _scalar("ratio", 0.3),
              helper.make_node("Constant", [], ["training"],
                               value=numpy_helper.from_array(np.asarray(True))),
              helper.make_node("Dropout", ["probs", "ratio", "training"], ["dropped"]),
              helper.make_node("MatMul", ["dropped", "v"], ["out"])]
    double = onnx.TensorProto.DOUBLE
    inputs = [helper.make_tensor_value_info(n, double, [2, 3, rows, 8]) for n in "qkv"]
    if causal:
        inputs.append(helper.make_tensor_value_info("mask", onnx.TensorProto.BOOL,
                                                    [1, 1, rows, rows]))
    return helper.make_model(
        helper.make_graph(nodes, "dropout", inputs,
                          [helper.make_tensor_value_info("out", double, None)]),
        opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("recompute", [False, True])
@pytest.mark.parametrize("rows,causal", [(5, False), (300, True)])
def test_attention_dropout_draws_what_the_dropout_node_draws(rows: int, causal: bool,
                                                             recompute: bool) -> None:
    """Dropout on the attention weights fuses into FusedAttentionDropout, which drops the
    elements the Dropout node drops for the same seed (its random stream), forward and
    backward: the same outputs and gradients as the graph as built, kept or recomputed in
    blocks (300 keys: several blocks, the first leaving keys out)."""
    model = _dropout_attention(rows, causal)
    feeds = {n: _rand(2, 3, rows, 8) * 2 for n in "qkv"}
    if causal:
        feeds["mask"] = np.tril(np.ones((rows, rows), dtype=np.bool_))[None, None]
    tensors = [torch.from_numpy(v.copy()) for v in feeds.values()]
    limit = _C.attention_probs_limit()
    _C.set_attention_probs_limit(0 if recompute else limit)
    try:
        results, counts = {}, {}
        for optimize in (True, False):
            program = _program(model, ["q", "k", "v"], optimize)
            torch.manual_seed(7)  # the run's seed: the same dropout elements in both graphs
            results[optimize] = _outputs_and_gradients(program, tensors, [0, 1, 2])
            counts[optimize] = _op_counts(program)
        torch.manual_seed(8)
        other = _outputs_and_gradients(_program(model, ["q", "k", "v"], True), tensors,
                                       [0, 1, 2])
    finally:
        _C.set_attention_probs_limit(limit)
    for got, want in zip(results[True], results[False], strict=True):
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    assert not torch.allclose(other[0], results[True][0]), "another seed drops other elements"
    assert counts[True]["FusedAttentionDropout"] == 1, counts[True]
    assert counts[True]["FusedAttentionGrad"] == 1, counts[True]
    assert counts[True]["Dropout"] == 0 and counts[True]["DropoutGrad"] == 0, counts[True]
    assert counts[False]["Dropout"] == 1, counts[False]


def _with_attention_dropout(name: str, attention: str) -> torch.nn.Module:
    """A float64 BERT or GPT-2 of the test zoo, dropout 0.1 on the attention weights only."""
    import transformers

    torch.manual_seed(0)
    model = FAMILIES[name].build(0.0)
    config = model.config
    if name == "bert":
        config.attention_probs_dropout_prob = 0.1
        model = transformers.BertForSequenceClassification(config)
    else:
        config.attn_pdrop = 0.1
        model = transformers.GPT2LMHeadModel(config)
    model.set_attn_implementation(attention)
    return model.double().train()


@pytest.mark.parametrize("name,attention", [("bert", "eager"), ("gpt2", "sdpa")])
def test_attention_dropout_fuses_in_transformers(name: str, attention: str) -> None:
    """With dropout on the attention weights (0.1, the models' configs' default), every
    layer's attention is one FusedAttentionDropout; for the same seed, loss and gradients are
    those of the unfused graph in float64."""
    model = _with_attention_dropout(name, attention)
    batch = FAMILIES[name].batch(2, 6, 0)
    layers = model.config.num_hidden_layers
    results = {}
    for optimize in (True, False):
        ort = ORTModule(copy.deepcopy(model), DebugOptions(graph_optimizations=optimize))
        torch.manual_seed(5)
        loss = ort(**batch).loss
        loss.backward()
        if optimize:
            ops = _training_ops(ort)
            assert ops["FusedAttentionDropout"] == layers, ops
            assert ops["FusedAttentionGrad"] == layers, ops
        results[optimize] = (loss.detach(), {n: p.grad for n, p in ort.module.named_parameters()})
    torch.testing.assert_close(results[True][0], results[False][0], rtol=1e-12, atol=1e-12)
    for n, g in results[False][1].items():
        torch.testing.assert_close(results[True][1][n], g, rtol=1e-10, atol=1e-12, msg=n)


def _heads_attention(mask: bool, kv_heads: int, dropout: bool,
                     output_transposed: bool) -> onnx.ModelProto:
    """Heads as models lay them out: q, k, v given [batch, seq, heads, dim], transposed to
    [batch, heads, seq, dim] for softmax(0.5 q k^T [+ mask]) [-> Dropout(0.25)] @ v, and the
    result transposed back and merged (output_transposed). kv_heads 1: K and V broadcast over
    Q's heads."""
    heads = [0, 2, 1, 3]
    nodes = [helper.make_node("Transpose", [f"{x}h"], [x], perm=heads) for x in "qkv"]
    nodes += [helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
              helper.make_node("MatMul", ["q", "kt"], ["scores"]),
              _scalar("c", 0.5), helper.make_node("Mul", ["scores", "c"], ["scaled"])]
    last = "scaled"
    if mask:  # additive, made from a boolean padding mask as models make it
        nodes += [_scalar("zero", 0.0), _scalar("lowest", np.finfo(np.float64).min),
                  helper.make_node("Where", ["keep", "zero", "lowest"], ["mask"]),
                  helper.make_node("Add", [last, "mask"], ["masked"])]
        last = "masked"
    nodes.append(helper.make_node("Softmax", [last], ["probs"], axis=-1))
    last = "probs"
    if dropout:
        nodes += [_scalar("ratio", 0.25),
                  helper.make_node("Constant", [], ["training"],
                                   value=numpy_helper.from_array(np.asarray(True))),
                  helper.make_node("Dropout", ["probs", "ratio", "training"], ["dropped"])]
        last = "dropped"
    nodes.append(helper.make_node("MatMul", [last, "v"], ["o"]))
    if output_transposed:  # and merged into [batch, seq, heads * dim], as models do
        nodes += [helper.make_node("Transpose", ["o"], ["ot"], perm=heads),
                  helper.make_node("Constant", [], ["merged"],
                                   value=numpy_helper.from_array(np.asarray([2, 6, 15]))),
                  helper.make_node("Reshape", ["ot", "merged"], ["out"])]
    inputs = {"qh": [2, 6, 3, 4], "kh": [2, 6, kv_heads, 4], "vh": [2, 6, kv_heads, 5]}
    model = _model(nodes, inputs, ["out" if output_transposed else "o"])
    if mask:
        model.graph.input.append(
            helper.make_tensor_value_info("keep", onnx.TensorProto.BOOL, [2, 1, 1, 6]))
    return model


def _heads_feeds(mask: bool, kv_heads: int) -> dict[str, np.ndarray]:
    feeds = {"qh": _rand(2, 6, 3, 4), "kh": _rand(2, 6, kv_heads, 4),
             "vh": _rand(2, 6, kv_heads, 5)}
    if mask:
        keep = np.ones((2, 1, 1, 6), dtype=bool)
        keep[1, ..., 4:] = False  # the second sequence is padded
        feeds["keep"] = keep
    return feeds


@pytest.mark.parametrize("recompute", [False, True])
@pytest.mark.parametrize("output_transposed", [True, False])
@pytest.mark.parametrize("kv_heads", [3, 1])
@pytest.mark.parametrize("mask", [False, True])
def test_head_transposes_are_read_through_not_run(mask: bool, kv_heads: int,
                                                  output_transposed: bool,
                                                  recompute: bool) -> None:
    """The transposes that move heads before the sequence (and back after the product) are
    dropped: FusedAttention reads Q, K, V and writes its output in the [batch, seq, heads, dim]
    layout (attribute bshd), with the results of the graph as built, K and V broadcast over
    heads included, with the softmax kept or recomputed block by block."""
    model = _heads_attention(mask, kv_heads, False, output_transposed)
    feeds = _heads_feeds(mask, kv_heads)
    limit = _C.attention_probs_limit()
    _C.set_attention_probs_limit(0 if recompute else limit)
    try:
        optimized, built = _assert_same_results(model, feeds, ["qh", "kh", "vh"])
        # An inference graph (no gradients) reads the heads layout too.
        tensors = [torch.from_numpy(v.copy()) for v in feeds.values()]
        inference = {opt: _C.run(_program(model, [], opt), tensors) for opt in (True, False)}
    finally:
        _C.set_attention_probs_limit(limit)
    torch.testing.assert_close(inference[True], inference[False], rtol=1e-12, atol=1e-12)
    assert built["Transpose"] >= 4, built
    assert optimized["Transpose"] == 0 and optimized["FusedAttention"] == 1, optimized
    program = _program(model, ["qh", "kh", "vh"], True)
    graph = onnx.load_from_string(program.training_graph_onnx()).graph
    bshd = {n.op_type: helper.get_attribute_value(a) for n in graph.node for a in n.attribute
            if a.name == "bshd"}
    expected = 15 if output_transposed else 7
    assert bshd == {"FusedAttention": expected, "FusedAttentionGrad": expected}, bshd


@pytest.mark.parametrize("recompute", [False, True])
def test_head_layout_dropout_draws_what_the_dropout_node_draws(recompute: bool) -> None:
    """Dropout on the weights of attention read in the heads layout drops the elements the
    Dropout node drops (its random stream), forward and backward."""
    model = _heads_attention(True, 3, True, True)
    feeds = [torch.from_numpy(v) for v in _heads_feeds(True, 3).values()]
    limit = _C.attention_probs_limit()
    _C.set_attention_probs_limit(0 if recompute else limit)
    results = {}
    try:
        for optimize in (True, False):
            program = _program(model, ["qh", "kh", "vh"], optimize)
            torch.manual_seed(3)
            results[optimize] = _outputs_and_gradients(program, feeds, [0, 1, 2])
    finally:
        _C.set_attention_probs_limit(limit)
    assert _op_counts(_program(model, ["qh", "kh", "vh"], True))["FusedAttentionDropout"] == 1
    for got, want in zip(results[True], results[False], strict=True):
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
