"""Removes ONNX sequence values from exported graphs.

``torch.split``/``chunk`` export as ``SplitToSequence`` followed by ``SequenceAt`` at
constant positions. The engine computes with tensors only. Where the split sizes are given
and the exporter recorded the size of the split axis, the sequence becomes one ``Split``
(one pass over the data; its gradient is one ``Concat``) and each ``SequenceAt`` an
``Identity`` of its chunk. Otherwise each ``SequenceAt`` becomes the ``Slice`` it selects
(Slice clamps the end, so a short last chunk needs no size), plus a ``Squeeze`` where
``keepdims=0``. A sequence used any other way is reported, naming the node and its Python
source line.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ortmodule.capture.common import ExportError


def _constants(graph: onnx.GraphProto) -> dict[str, np.ndarray]:
    values = {i.name: numpy_helper.to_array(i) for i in graph.initializer}
    for node in graph.node:
        if node.op_type == "Constant" and node.domain in ("", "ai.onnx"):
            for a in node.attribute:
                if a.name == "value":
                    values[node.output[0]] = numpy_helper.to_array(a.t)
                elif a.name == "value_int":
                    values[node.output[0]] = np.asarray(a.i, dtype=np.int64)
                elif a.name == "value_ints":
                    values[node.output[0]] = np.asarray(list(a.ints), dtype=np.int64)
    return values


def _where(node: onnx.NodeProto) -> str:
    return f"{node.op_type} '{node.name}'" + (f" at {node.doc_string}" if node.doc_string else "")


def _chunk_bounds(split: np.ndarray | None, position: int, node: onnx.NodeProto
                  ) -> tuple[int, int]:
    """[start, end) along the axis of chunk ``position``; end may exceed the size."""
    if split is None or split.ndim == 0:
        size = 1 if split is None else int(split)
        if position < 0:
            raise ExportError(f"{_where(node)}: a negative sequence position ({position}) into "
                              "equal chunks needs the chunk count; use a non-negative index")
        return position * size, (position + 1) * size
    sizes = [int(s) for s in split.reshape(-1)]
    if not -len(sizes) <= position < len(sizes):
        raise ExportError(f"{_where(node)}: position {position} is outside the "
                          f"{len(sizes)} chunks")
    position %= len(sizes)
    start = sum(sizes[:position])
    return start, start + sizes[position]


def _axis_size(graph: onnx.GraphProto, name: str, axis: int) -> int | None:
    """The size of ``axis`` of value ``name`` when the exporter recorded it as a number."""
    for info in graph.value_info:
        if info.name == name and info.type.HasField("tensor_type"):
            dims = info.type.tensor_type.shape.dim
            if -len(dims) <= axis < len(dims) and dims[axis].HasField("dim_value"):
                return int(dims[axis].dim_value)
    return None


def _split_sizes(split: np.ndarray | None, total: int | None) -> list[int] | None:
    """The chunk sizes of a split of ``total`` elements, when both are known."""
    if split is None or total is None:
        return None
    if split.ndim == 0:
        size = int(split)
        if size <= 0:
            return None
        return [size] * (total // size) + ([total % size] if total % size else [])
    sizes = [int(v) for v in split.reshape(-1)]
    return sizes if sum(sizes) == total and min(sizes, default=0) >= 0 else None


def _as_split(node: onnx.NodeProto, consts: dict[str, np.ndarray], graph: onnx.GraphProto,
              new_inits: list[onnx.TensorProto]) -> tuple[onnx.NodeProto, list[str]] | None:
    """``SplitToSequence`` as one ``Split`` node and its output names, where possible."""
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    axis = int(attrs.get("axis", 0))
    if len(node.input) < 2 or not node.input[1] or node.input[1] not in consts:
        return None
    sizes = _split_sizes(consts[node.input[1]], _axis_size(graph, node.input[0], axis))
    if not sizes:
        return None
    base = node.output[0]
    new_inits.append(numpy_helper.from_array(np.asarray(sizes, dtype=np.int64), f"{base}__sizes"))
    parts = [f"{base}__part{k}" for k in range(len(sizes))]
    split = helper.make_node("Split", [node.input[0], f"{base}__sizes"], parts, axis=axis,
                             name=f"{node.name}__split", doc_string=node.doc_string)
    return split, parts


def rewrite_sequences(graph: onnx.GraphProto) -> int:
    """Rewrites SplitToSequence/SequenceAt into Slice in place; returns the count."""
    splits = {n.output[0]: n for n in graph.node if n.op_type == "SplitToSequence"}
    if not splits:
        return 0
    consts = _constants(graph)
    graph_outputs = {o.name for o in graph.output}
    new_nodes: list[onnx.NodeProto] = []
    new_inits: list[onnx.TensorProto] = []
    split_parts: dict[str, list[str]] = {}  # sequence -> Split outputs
    for node in graph.node:
        if node.op_type == "SplitToSequence":
            if node.output[0] in graph_outputs:
                raise ExportError(f"{_where(node)}: a sequence returned from the graph is not "
                                  "supported; return the tensors")
            as_split = _as_split(node, consts, graph, new_inits)
            if as_split is not None:
                new_nodes.append(as_split[0])
                split_parts[node.output[0]] = as_split[1]
            continue
        seq_inputs = [i for i in node.input if i in splits]
        if not seq_inputs:
            new_nodes.append(node)
            continue
        if node.op_type != "SequenceAt" or node.input[1] not in consts:
            raise ExportError(f"{_where(node)} reads the sequence made by "
                              f"{_where(splits[seq_inputs[0]])}; only SequenceAt at a constant "
                              "position is supported (index the result of split/chunk with "
                              "constants)")
        split_node = splits[node.input[0]]
        parts = split_parts.get(node.input[0])
        if parts is not None:
            position = int(consts[node.input[1]])
            if not -len(parts) <= position < len(parts):
                raise ExportError(f"{_where(node)}: position {position} is outside the "
                                  f"{len(parts)} chunks")
            new_nodes.append(helper.make_node("Identity", [parts[position]], [node.output[0]],
                                              name=f"{node.name}__chunk",
                                              doc_string=split_node.doc_string))
            continue
        attrs = {a.name: helper.get_attribute_value(a) for a in split_node.attribute}
        axis = int(attrs.get("axis", 0))
        keepdims = int(attrs.get("keepdims", 1))
        split = None
        if len(split_node.input) > 1 and split_node.input[1]:
            if split_node.input[1] not in consts:
                raise ExportError(f"{_where(split_node)}: split sizes computed at run time are "
                                  "not supported")
            split = consts[split_node.input[1]]
        if split is not None and keepdims == 0:
            keepdims = 1  # ONNX ignores keepdims when split is given
        start, end = _chunk_bounds(split, int(consts[node.input[1]]), split_node)
        base = node.output[0]
        names = [f"{base}__starts", f"{base}__ends", f"{base}__axes"]
        for name, v in zip(names, (start, end, axis)):
            new_inits.append(numpy_helper.from_array(np.asarray([v], dtype=np.int64), name))
        sliced = base if keepdims else f"{base}__chunk"
        new_nodes.append(helper.make_node("Slice", [split_node.input[0], *names], [sliced],
                                          name=f"{node.name}__slice",
                                          doc_string=split_node.doc_string))
        if not keepdims:
            new_nodes.append(helper.make_node("Squeeze", [sliced, names[2]], [base],
                                              name=f"{node.name}__squeeze",
                                              doc_string=split_node.doc_string))
    del graph.node[:]
    graph.node.extend(new_nodes)
    graph.initializer.extend(new_inits)
    keep = [v for v in graph.value_info if v.name not in splits]
    del graph.value_info[:]
    graph.value_info.extend(keep)
    return len(splits)
