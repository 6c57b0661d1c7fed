"""The fx lowering of a traced program: ``torch.export``'s ATen graph of the flattened module
walked once into the ONNX ModelProto the engine loads, one translation per ATen op
(``registry``), without the stock lowering's decomposition pass (a second trace of the whole
program under fake tensors) and without onnxscript. Every node carries the user source line
it came from, custom autograd Functions become TorchCall bridge nodes, checkpointed ops are
tagged for recompute, ``torch.no_grad()`` regions stop gradients and input dimensions stay
symbolic (``trace`` keeps the exporter's shape guards and the buffer updates).
"""

from __future__ import annotations

import logging
from typing import Any

import onnx
import torch
from onnx import TensorProto, helper
from torch.export.graph_signature import InputKind, OutputKind

from ortmodule.capture.common import OPSET, OWN_DOMAIN, ExportError, raw_bytes
from ortmodule.capture.fx import autocast
from ortmodule.capture.fx import ops as _ops  # noqa: F401 (registers every translation)
from ortmodule.capture.fx.builder import (
    FALLBACK_HINT,
    Lowering,
    onnx_dtype,
    source_line,
    translate,
)

logger = logging.getLogger("ortmodule")


def _value_info(name: str, val: torch.Tensor) -> onnx.ValueInfoProto:
    dims: list[Any] = []
    for size in val.shape:
        if isinstance(size, torch.SymInt) and size.node.expr.free_symbols:
            dims.append(str(size.node.expr))
        else:
            dims.append(int(size))
    return helper.make_tensor_value_info(name, onnx_dtype(val.dtype), dims)


def lower(program: torch.export.ExportedProgram, wrapper: torch.nn.Module,
          calls: dict[int, Any], bridge: bool = False,
          values: dict[torch.fx.Node, Any] | None = None,
          state_values: bool = True) -> tuple[onnx.ModelProto, int]:
    """The ONNX model of ``program`` (graph inputs ``input_<k>``, one per flattened tensor)
    and the number of nodes in checkpoint regions. With ``bridge``, ops without a
    translation run on PyTorch as TorchCall nodes. ``values``, when given, receives the
    value each FX node got when it was lowered (an ONNX value name, a list of them, or a
    Python number; an in-place op's later rebinding of its input does not change it): what
    ``ortmodule.debug`` cuts the graph at. Without ``state_values`` the initializers of the
    module's parameters and buffers hold their dtype and shape only (the engine feeds their
    values at every call: ``finish`` binds them), which spares several copies of the weights
    (seconds for a model of 100M parameters)."""
    casts = autocast.insert_casts(program.graph_module)
    if casts:
        logger.debug("autocast: %d casts made explicit", casts)
    lowering = Lowering(program, calls)
    if values is not None:
        lowering.env = _FirstValues(values)
    lowering.bridge = bridge
    signature = program.graph_signature

    params = dict(wrapper.named_parameters(remove_duplicate=False))
    buffers = dict(wrapper.named_buffers(remove_duplicate=False))
    placeholders = {n.name: n for n in program.graph.nodes if n.op == "placeholder"}
    graph_inputs: list[onnx.ValueInfoProto] = []
    input_names: list[str] = []
    initializer_names: dict[str, str] = {}  # fqn -> initializer (tied weights share one)
    for k, spec in enumerate(signature.input_specs):
        node = placeholders[spec.arg.name]
        val = node.meta.get("val")
        if spec.kind == InputKind.USER_INPUT:
            if not isinstance(val, torch.Tensor):
                raise ExportError(f"the exported program has a non-tensor input {node.name}")
            name = f"input_{len(input_names)}"
            lowering.names.add(name)
            input_names.append(name)
            graph_inputs.append(_value_info(name, val))
            lowering.register_input(name, val)
            lowering.env[node] = name
        elif spec.kind in (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR):
            target = spec.target
            if spec.kind == InputKind.CONSTANT_TENSOR:
                tensor = program.constants[target]
                name = lowering.fresh(f"const_{node.name}")
            else:
                tensor = params.get(target, buffers.get(target))
                if tensor is None:
                    tensor = program.state_dict.get(target, program.constants.get(target))
                name = initializer_names.get(target) or target
                lowering.names.add(name)
            if tensor is None:
                raise ExportError(f"the exported program reads {target}, which the module "
                                  "does not hold")
            if name not in initializer_names.values():
                held = spec.kind != InputKind.CONSTANT_TENSOR and target in (
                    params if spec.kind == InputKind.PARAMETER else buffers)
                lowering.initializers.append(_initializer(name, tensor, state_values or not held))
            initializer_names[target] = name
            lowering.env[node] = name
        else:
            raise ExportError(f"the fx exporter does not support program inputs of kind "
                              f"{spec.kind.name} ({node.name}); {FALLBACK_HINT}")
    outputs = translate(lowering, program.graph, None)
    user = [i for i, s in enumerate(signature.output_specs) if s.kind == OutputKind.USER_OUTPUT]
    if len(user) != len(signature.output_specs):
        kinds = {s.kind.name for s in signature.output_specs} - {"USER_OUTPUT"}
        raise ExportError(f"the fx exporter does not support program outputs of kind "
                          f"{', '.join(sorted(kinds))}; {FALLBACK_HINT}")
    output_node = next(n for n in program.graph.nodes if n.op == "output")
    out_args = output_node.args[0]
    graph_outputs = []
    taken: set[str] = set()
    fixed = {i.name for i in lowering.initializers} | set(input_names)
    lowering.region = None
    for i, (arg, v) in enumerate(zip(out_args, outputs)):
        val = lowering.meta(arg)
        if not isinstance(val, torch.Tensor) or not isinstance(v, str):
            raise ExportError(f"output {i} of the module is not a tensor the graph computes")
        if v in taken or v in fixed:
            lowering.doc = source_line(arg) if isinstance(arg, torch.fx.Node) else ""
            v = lowering.op("Identity", [v], name=f"output_{i}")
        taken.add(v)
        graph_outputs.append(_value_info(v, val))
    graph = helper.make_graph(lowering.nodes, "ortmodule_fx", graph_inputs, graph_outputs,
                              initializer=lowering.initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET),
                                                    helper.make_opsetid(OWN_DOMAIN, 1),
                                                    helper.make_opsetid("com.microsoft", 1)],
                              producer_name="ortmodule.fx")
    model.ir_version = 10
    return model, lowering.regions


class _FirstValues(dict):
    """The lowering's values, copying the first value of each node into ``first``."""

    def __init__(self, first: dict[torch.fx.Node, Any]) -> None:
        super().__init__()
        self.first = first

    def __setitem__(self, node: torch.fx.Node, value: Any) -> None:
        self.first.setdefault(node, value)
        super().__setitem__(node, value)


def _initializer(name: str, tensor: torch.Tensor, with_value: bool = True) -> onnx.TensorProto:
    """``tensor`` as an initializer; without ``with_value`` its dtype and shape only."""
    proto = TensorProto()
    proto.name = name
    proto.data_type = TensorProto.BFLOAT16 if tensor.dtype == torch.bfloat16 else \
        onnx_dtype(tensor.dtype)
    proto.dims.extend(tensor.shape)
    if with_value:
        proto.raw_data = raw_bytes(tensor.detach().cpu().contiguous())
    return proto
