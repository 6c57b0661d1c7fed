"""Small helpers over a ModelProto shared by the blocks."""

from __future__ import annotations

import itertools

import onnx

_NAME_COUNTER = itertools.count(1)


def generate_graph_name(token: str) -> str:
    """A fresh name ``onnx::<token>::<n>``; n counts up over the whole process, as in the
    reference, so names built in one process never collide."""
    return f"onnx::{token}::{next(_NAME_COUNTER)}"


def find_graph_input(model: onnx.ModelProto, name: str) -> onnx.ValueInfoProto:
    for value in model.graph.input:
        if value.name == name:
            return value
    raise LookupError(f"{name!r} is not a graph input (inputs: {[v.name for v in model.graph.input]})")


def find_graph_output(model: onnx.ModelProto, name: str) -> onnx.ValueInfoProto:
    for value in model.graph.output:
        if value.name == name:
            return value
    raise LookupError(f"{name!r} is not a graph output (outputs: {[v.name for v in model.graph.output]})")


def value_exists(model: onnx.ModelProto, name: str) -> bool:
    """True when a node reads or writes ``name`` or it is a graph input."""
    if any(value.name == name for value in model.graph.input):
        return True
    return any(name in node.input or name in node.output for node in model.graph.node)


def register_graph_outputs(model: onnx.ModelProto, output_names: str | list[str] | tuple[str, ...]) -> None:
    """Make ``output_names`` (in that order) the graph outputs. Each must already be a graph
    output or have a value_info (from shape inference) so its type is known."""
    if isinstance(output_names, str):
        output_names = [output_names]
    known = {value.name: value for value in model.graph.value_info}
    known.update({value.name: value for value in model.graph.output})
    known.update({value.name: value for value in model.graph.input})
    outputs = []
    for name in output_names:
        if name not in known:
            raise LookupError(
                f"cannot make {name!r} a graph output: it is neither a graph output nor a value whose "
                "type shape inference could find"
            )
        value = onnx.ValueInfoProto()
        value.CopyFrom(known[name])
        outputs.append(value)
    del model.graph.output[:]
    model.graph.output.extend(outputs)
