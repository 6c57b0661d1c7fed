"""Per-op escape hatch (``FallbackPolicy.UNSUPPORTED_OP``): an op the engine lacks runs on
PyTorch as one bridge node, its gradient from autograd; the rest stays on the engine.

Two kinds of op qualify: an ONNX op the engine has no kernel for (found by checking the
lowered graph against the op table), and an ATen op the ONNX lowering cannot translate
(the exporter's DispatchError). Either way the ATen op behind it (the FX node the ONNX
node was made from, before decomposition) gets a translation into an
``ai.ortmodule::TorchCall`` node naming the op, and the program is lowered again. Its
non-tensor arguments are encoded as strings for csrc/python/torch_call.cpp, which
calls the op through the dispatcher.

The bridged calls the trace recorded (custom autograd Functions, ``capture.bridge``) become
TorchCall nodes here too, and checkpointed ops get their region tag.
"""

from __future__ import annotations

import ast
import logging
from collections.abc import Callable, Sequence
from typing import Any

import onnx
import torch

from ortmodule import _C
from ortmodule.capture import bridge
from ortmodule.capture.common import OWN_DOMAIN, REGION_KEY

logger = logging.getLogger("ortmodule")


# ---- which ops the engine lacks ----

def _engine_versions() -> dict[tuple[str, str], list[tuple[int, int]]]:
    versions: dict[tuple[str, str], list[tuple[int, int]]] = {}
    for row in _C.op_table():
        versions.setdefault((row["domain"], row["op_type"]), []).append(
            (row["since_version"], row["until_version"]))
    return versions


def unsupported_nodes(graph: onnx.GraphProto, opset: int) -> list[onnx.NodeProto]:
    """Nodes the engine's loader would reject (the rule of find_op in op_table.cpp)."""
    versions = _engine_versions()
    rejected = []
    for node in graph.node:
        domain = "" if node.domain == "ai.onnx" else node.domain
        ranges = versions.get((domain, node.op_type), [])
        if not any(domain or since <= opset <= until for since, until in ranges):
            rejected.append(node)
    return rejected


def aten_op(fx_node: torch.fx.Node) -> torch._ops.OpOverload | None:
    """The ATen op an FX node of the lowered program comes from: the op before
    decomposition (aten.lgamma rather than prims.lgamma), which the exporter then keeps."""
    for target in (fx_node.meta.get("original_aten"), fx_node.target):
        if isinstance(target, torch._ops.OpOverload) and target.namespace == "aten":
            # The registered overload object: copies of the graph may hold other objects
            # for the same op, which neither compare equal nor match translations.
            packet = getattr(torch.ops.aten, target._schema.name.split("::", 1)[1])
            return getattr(packet, target._overloadname)
    return None


def fx_nodes_of(onnx_program: Any) -> dict[str, torch.fx.Node]:
    return {n.name: n for n in onnx_program.exported_program.graph.nodes}


def untranslatable_node(error: BaseException) -> torch.fx.Node | None:
    """The FX node the ONNX lowering found no translation for, from its DispatchError."""
    from torch.onnx._internal.exporter import _errors

    seen = set()
    e: BaseException | None = error
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, _errors.DispatchError):
            tb = e.__traceback__
            node = None
            while tb is not None:
                candidate = tb.tb_frame.f_locals.get("node")
                if isinstance(candidate, torch.fx.Node):
                    node = candidate
                tb = tb.tb_next
            return node
        e = e.__cause__ or e.__context__
    return None


# ---- the translation: an ATen op as a TorchCall node ----

def _is_value(v: Any) -> bool:
    from onnxscript import ir

    return isinstance(v, ir.Value)


def aten_translation(op: torch._ops.OpOverload) -> Callable[..., Any]:
    """Translation of ``op`` into a TorchCall node that calls it through the dispatcher."""
    schema = op._schema
    name = f"{schema.name}.{schema.overload_name or 'default'}"
    for ret in schema.returns:
        if not isinstance(ret.type, torch._C.TensorType):
            raise NotImplementedError(
                f"{name} returns {ret.type}, but only ops that return tensors can run on "
                "PyTorch inside the engine graph")

    def translate(*args: Any, **kwargs: Any) -> Any:
        inputs: list[Any] = []
        codes = []
        for k, arg in enumerate(schema.arguments):
            if k < len(args) and not arg.kwarg_only:
                value = args[k]
            elif arg.name in kwargs:
                value = kwargs[arg.name]
            elif arg.has_default_value():
                value = arg.default_value
            else:
                raise NotImplementedError(f"{name}: argument '{arg.name}' is missing")
            codes.append(bridge.encode_argument(value, arg, inputs, name, _is_value))
        outputs = emit_torch_call(inputs, {"aten_op": schema.name,
                                           "aten_overload": schema.overload_name, "args": codes},
                                  len(schema.returns))
        return outputs[0] if len(outputs) == 1 else outputs

    return translate


def warn(op: torch._ops.OpOverload, why: str, where: str) -> None:
    logger.debug("ortmodule: %s runs on PyTorch (fallback=UNSUPPORTED_OP) because %s%s; "
                   "its gradient comes from autograd", op, why,
                   f"; from {where}" if where else "")


# ---- TorchCall nodes and checkpoint regions in torch.onnx's graph ----

def emit_torch_call(inputs: Sequence[Any], attributes: dict[str, Any], num_outputs: int
                    ) -> list[Any]:
    """Adds an ai.ortmodule::TorchCall node with ``num_outputs`` outputs to the graph the
    exporter is building (onnxscript infers one output for variadic schemas) and returns
    its outputs."""
    from onnxscript import ir
    from torch.onnx._internal.exporter import _core, _tensors

    tracer = _core.current_tracer
    if tracer is None:
        raise RuntimeError("TorchCall emitted outside the ONNX lowering")
    outputs = [_tensors.SymbolicTensor(tracer.opset) for _ in range(num_outputs)]
    node = ir.Node(OWN_DOMAIN, "TorchCall", list(inputs),
                   attributes=ir.convenience.convert_attributes(attributes),
                   outputs=outputs, version=1)
    tracer.nodes.append(node)
    return outputs


def translate_torch_call(callable_id: int, inputs: Sequence[Any]) -> Any:
    """ortmodule::torch_call -> TorchCall(callable_id) with the Function's outputs."""
    call = bridge.call_of(callable_id)
    return emit_torch_call(inputs, {"callable_id": callable_id, "callable": call.name},
                           len(call.out_positions))


def checkpoint_regions(exported_program: torch.export.ExportedProgram) -> dict[str, int]:
    """FX node name -> checkpoint region, for the nodes traced inside one."""
    regions = {}
    for node in exported_program.graph.nodes:
        custom = node.meta.get("custom") or {}
        if REGION_KEY in custom:
            regions[node.name] = custom[REGION_KEY]
    return regions


def fx_node_name(onnx_node: Any) -> str | None:
    """The FX node an exported ONNX node was translated from."""
    for prop in onnx_node.metadata_props:
        if prop.key == "pkg.torch.onnx.name_scopes":
            scopes = ast.literal_eval(prop.value)
            return scopes[-1] if scopes else None
    return None


def tag_checkpoint_regions(graph: Any, regions: dict[str, int]) -> int:
    """Marks ONNX nodes made from checkpointed ops for recompute; returns how many."""
    tagged = 0
    for node in graph.node:
        region = regions.get(fx_node_name(node) or "")
        if region is not None:
            node.metadata_props.add(key=REGION_KEY, value=str(region))
            tagged += 1
    return tagged
