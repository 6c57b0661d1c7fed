"""The torch.onnx lowering of a traced program:
``torch.onnx.export(exported_program, dynamo=True, optimize=False)`` with ``translations``
as its custom table (``optimize=True`` would fold weights into constants), each node's
source line written into its doc_string, sequence values rewritten (``sequences``), bridged
calls and, with ``FallbackPolicy.UNSUPPORTED_OP``, the ATen ops the engine lacks as
TorchCall nodes (``aten_bridge``). Dropout keeps its training flag (a constant input of the
Dropout node).
"""

from __future__ import annotations

import onnx
import torch

from ortmodule.capture import bridge
from ortmodule.capture.common import FALLBACK_POLICY_HINT, OPSET, PREFIX, fx_source_line, user_frame
from ortmodule.capture.torch_onnx import aten_bridge, translations
from ortmodule.capture.torch_onnx.sequences import rewrite_sequences


def source_line(node: onnx.NodeProto) -> str:
    """One line naming where a node came from: the innermost frame of user code (outside
    torch) of the exporter's recorded stack, and the submodule path."""
    props = {p.key: p.value for p in node.metadata_props}
    where = user_frame(props.get("pkg.torch.onnx.stack_trace", ""))
    # Qualified names of the enclosing modules, outermost first, then the op itself.
    scopes = props.get("pkg.torch.onnx.name_scopes", "").strip("[]").split(",")
    innermost = scopes[-2].strip(" '") if len(scopes) >= 2 else ""
    module = innermost.removeprefix(PREFIX) if innermost != PREFIX.rstrip(".") else ""
    if module:
        where += f" [module {module}]"
    return where


def lower(program: torch.export.ExportedProgram, args: tuple[torch.Tensor, ...],
           verbose: bool, fallback_unsupported_ops: bool) -> tuple[onnx.ModelProto, int]:
    """The ONNX model of ``program`` as the engine loads it, and how many of its nodes
    checkpoint regions recompute. With the fallback, ops the engine lacks are translated
    into bridge nodes and the program lowered again."""
    bridged: dict[torch._ops.OpOverload, str] = {}
    while True:
        table = {**translations.translation_table(),
                 bridge.torch_call_op(): aten_bridge.translate_torch_call,
                 **{op: aten_bridge.aten_translation(op) for op in bridged}}
        try:
            onnx_program = torch.onnx.export(
                program, args, dynamo=True, optimize=False, opset_version=OPSET,
                custom_translation_table=table, verbose=verbose)
        except Exception as e:
            fx_node = aten_bridge.untranslatable_node(e) if fallback_unsupported_ops else None
            op = aten_bridge.aten_op(fx_node) if fx_node is not None else None
            if op is None or op in bridged:
                raise
            bridged[op] = fx_source_line(fx_node)
            aten_bridge.warn(op, "the ONNX lowering has no translation for it", bridged[op])
            continue
        model = onnx_program.model_proto
        for node in model.graph.node:
            source = source_line(node)
            if source:
                node.doc_string = source
        rewrite_sequences(model.graph)
        if fallback_unsupported_ops:
            fx_nodes = aten_bridge.fx_nodes_of(onnx_program)
            fresh = {}
            for node in aten_bridge.unsupported_nodes(model.graph, OPSET):
                fx_node = fx_nodes.get(aten_bridge.fx_node_name(node) or "")
                op = aten_bridge.aten_op(fx_node) if fx_node is not None else None
                if op is not None and op not in bridged and op not in fresh:
                    fresh[op] = node
            if fresh:
                for op, node in fresh.items():
                    bridged[op] = node.doc_string
                    aten_bridge.warn(op, f"the engine has no kernel for the ONNX op "
                                   f"{node.op_type} it lowers to", node.doc_string)
                continue
        regions = aten_bridge.tag_checkpoint_regions(
            model.graph, aten_bridge.checkpoint_regions(onnx_program.exported_program))
        return model, regions


def lowering_hint(e: BaseException, fallback_unsupported_ops: bool) -> str:
    """What an error of the trace or of this lowering adds: the op torch.onnx could not
    translate, its source line, and how to run it on PyTorch."""
    fx_node = aten_bridge.untranslatable_node(e)
    if fx_node is None or fallback_unsupported_ops:
        return ""
    return f" ({fx_node.target} from {fx_source_line(fx_node)}). {FALLBACK_POLICY_HINT}"
