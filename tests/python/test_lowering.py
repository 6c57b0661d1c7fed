"""Lowering details the stock ONNX translation gets wrong or the engine rewrites:
Embedding's padding row, split/chunk sequences, and clear errors for what stays
unsupported."""

from __future__ import annotations

import copy

import numpy as np
import onnx
import pytest
import torch
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator
from torch import nn

from ortmodule import DebugOptions, FallbackPolicy, ORTModule
from ortmodule.capture.common import ExportError
from ortmodule.capture.torch_onnx.sequences import rewrite_sequences


def run_both(model: nn.Module, *inputs: torch.Tensor, options: DebugOptions | None = None
             ) -> tuple[nn.Module, ORTModule]:
    """Forward + backward of a sum-of-squares objective in eager and under ORTModule;
    the outputs must match."""
    eager = model
    ort = ORTModule(copy.deepcopy(model), options)
    results = []
    for m in (eager, ort):
        out = m(*inputs)
        outs = out if isinstance(out, tuple) else (out,)
        sum((o.float() ** 2).sum() for o in outs).backward()
        results.append(outs)
    for got, want in zip(results[1], results[0]):
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
    return eager, ort


class PaddedEmbedding(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(7, 3, padding_idx=2)
        with torch.no_grad():
            self.emb.weight[2] = 0.5  # a non-zero padding row: forward still reads it

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.emb(ids) * 2.0


def test_embedding_padding_row_gets_no_gradient() -> None:
    torch.manual_seed(0)
    ids = torch.tensor([[2, 1, 2], [4, 2, 0]])
    eager, ort = run_both(PaddedEmbedding(), ids)
    assert torch.count_nonzero(eager.emb.weight.grad[2]) == 0
    torch.testing.assert_close(ort.module.emb.weight.grad, eager.emb.weight.grad,
                               rtol=1e-6, atol=1e-6)


def test_embedding_scale_grad_by_freq_runs_on_pytorch_or_is_refused() -> None:
    """The engine's Embedding has no frequency scaling: by default the op runs on PyTorch
    (with eager's gradient); under FallbackPolicy.NEVER the error names the option."""
    ids = torch.tensor([1, 1, 3])
    eager = nn.Embedding(5, 2, scale_grad_by_freq=True)
    ort = ORTModule(copy.deepcopy(eager))
    ort(ids).square().sum().backward()
    eager(ids).square().sum().backward()
    torch.testing.assert_close(ort.module.weight.grad, eager.weight.grad)
    strict = ORTModule(nn.Embedding(5, 2, scale_grad_by_freq=True),
                       DebugOptions(fallback=FallbackPolicy.NEVER))
    with pytest.raises(ExportError, match="scale_grad_by_freq"):
        strict(ids)


class Splits(nn.Module):
    """split with a short last chunk, chunk, and unbind: sequence values in the export."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 8)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        h = self.fc(x)
        a, b, c = h.split(3, dim=-1)  # sizes 3, 3, 2
        p, q = h.chunk(2, dim=1)
        rows = h.unbind(0)
        return a * 2 + b, c.sum(-1), p - q, rows[0] * rows[-1]


def test_split_chunk_and_unbind_match_eager(monkeypatch: pytest.MonkeyPatch) -> None:
    from ortmodule.capture.torch_onnx import lower as torch_onnx_lower

    rewritten = []
    original = torch_onnx_lower.rewrite_sequences
    monkeypatch.setattr(torch_onnx_lower, "rewrite_sequences",
                        lambda g: rewritten.append(original(g)) or rewritten[-1])
    for exporter in ("dynamo", "auto"):  # torch.onnx's lowering, then ortmodule's own
        torch.manual_seed(0)
        eager, ort = run_both(Splits(), torch.randn(3, 4), options=DebugOptions(exporter=exporter))
        for (name, got), (_, want) in zip(ort.module.named_parameters(),
                                          eager.named_parameters()):
            torch.testing.assert_close(got.grad, want.grad, rtol=1e-5, atol=1e-6, msg=name)
        if exporter == "dynamo":
            assert rewritten and rewritten[0] >= 1  # the export did hold sequence values


def _sequence_model(split: list[int] | int | None, positions: list[int], keepdims: int = 1
                    ) -> onnx.ModelProto:
    inputs = ["x"]
    inits = []
    if split is not None:
        inits.append(numpy_helper.from_array(np.asarray(split, dtype=np.int64), "split"))
        inputs.append("split")
    nodes = [helper.make_node("SplitToSequence", inputs, ["seq"], axis=1, keepdims=keepdims)]
    outs = []
    for i, p in enumerate(positions):
        inits.append(numpy_helper.from_array(np.asarray(p, dtype=np.int64), f"pos{i}"))
        nodes.append(helper.make_node("SequenceAt", ["seq", f"pos{i}"], [f"y{i}"]))
        outs.append(helper.make_tensor_value_info(f"y{i}", onnx.TensorProto.FLOAT, None))
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, 7])], outs,
        initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


@pytest.mark.parametrize("split,positions,keepdims", [
    (3, [0, 1, 2], 1),           # equal chunks, short last one
    ([2, 4, 1], [2, 0, -2], 1),  # explicit sizes, negative position
    (None, [0, 6, 3], 0),        # one element per chunk, squeezed
])
def test_sequence_rewrite_matches_onnx_reference(split: object, positions: list[int],
                                                 keepdims: int) -> None:
    model = _sequence_model(split, positions, keepdims)
    x = np.random.default_rng(0).standard_normal((2, 7)).astype(np.float32)
    want = ReferenceEvaluator(model).run(None, {"x": x})
    rewritten = copy.deepcopy(model)
    assert rewrite_sequences(rewritten.graph) == 1
    assert {n.op_type for n in rewritten.graph.node} <= {"Slice", "Squeeze"}
    got = ReferenceEvaluator(rewritten).run(None, {"x": x})
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


def test_sequence_rewrite_reports_what_it_cannot_express() -> None:
    model = _sequence_model(3, [-1])
    with pytest.raises(ExportError, match="negative sequence position"):
        rewrite_sequences(model.graph)


def _split_model_with_known_axis(split: list[int] | int, positions: list[int]
                                 ) -> onnx.ModelProto:
    """A split of an intermediate value whose size the exporter recorded in value_info."""
    model = _sequence_model(split, positions)
    graph = model.graph
    graph.node.insert(0, helper.make_node("Identity", ["x"], ["h"]))
    graph.node[1].input[0] = "h"
    graph.value_info.append(helper.make_tensor_value_info("h", onnx.TensorProto.FLOAT, [2, 7]))
    return model


@pytest.mark.parametrize("split,positions", [
    (3, [0, 1, 2]),           # equal chunks, short last one
    (3, [-1, 0]),             # a negative position: the chunk count is known
    ([2, 4, 1], [2, 0, -2]),  # explicit sizes, negative position
    ([5, 2], [1]),            # a chunk nothing reads
])
def test_sequence_with_known_sizes_becomes_one_split(split: object, positions: list[int]) -> None:
    model = _split_model_with_known_axis(split, positions)
    x = np.random.default_rng(0).standard_normal((2, 7)).astype(np.float32)
    want = ReferenceEvaluator(model).run(None, {"x": x})
    rewritten = copy.deepcopy(model)
    assert rewrite_sequences(rewritten.graph) == 1
    ops = [n.op_type for n in rewritten.graph.node]
    assert ops.count("Split") == 1 and "Slice" not in ops, ops
    got = ReferenceEvaluator(rewritten).run(None, {"x": x})
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
