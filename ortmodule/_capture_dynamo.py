"""Capture through torch.export: ``torch.export.export(strict=False)`` of the flattened
module in its current mode, at the call's sizes or (``dynamic``) with every input dimension
dynamic unless the model code pins it,
lowered to ONNX with ``torch.onnx.export(exported_program, dynamo=True, optimize=False)``.

What the stock lowering gets wrong for training is put right here:
- buffer updates (BatchNorm running statistics, counters, EMAs) are dropped by the
  exporter: the wrapper returns every buffer's value after forward, and the outputs of
  buffers that forward changed become state outputs written back by the engine;
- train-mode BatchNorm is lowered as inference BatchNorm: ``_lowering`` translates it;
- ``optimize=True`` would fold weights into constants: it stays off.
Dropout keeps its training flag (a constant input of the Dropout node).
"""

from __future__ import annotations

import contextlib
import logging
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import onnx
import torch
import torch.fx.experimental._config

from ortmodule import _bridge, _fallback, _lowering, _schema
from ortmodule._capture import (
    Captured,
    ExportError,
    _FlatWrapper,
    _preserve_state,
    bind_initializers,
    find_in_chain,
    named_buffers,
    surface_warnings,
)
from ortmodule._sequence_rewrite import rewrite_sequences

logger = logging.getLogger("ortmodule")

PREFIX = "module."  # the wrapper's attribute holding the user's module


@contextlib.contextmanager
def _quiet_exporter(verbose: bool) -> Iterator[None]:
    """The exporter logs warnings about optional packages (torchvision) and progress."""
    if verbose:
        yield
        return
    loggers = [logging.getLogger(n) for n in ("torch.onnx", "torch.export", "torch._export",
                                               "torch.fx.experimental.symbolic_shapes")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        with surface_warnings():
            yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)


def _short_error(e: BaseException) -> str:
    """The exporter's own message without its bug-report boilerplate."""
    text = str(e)
    if "## Exception summary" in text:
        text = text.split("## Exception summary", 1)[1].split("(Refer to the full stack", 1)[0]
    return f"{type(e).__name__}: {text.strip()}"


_OWN_FILE = "/ortmodule/_"  # capture's own frames (the flattening wrapper, the bridge)
_FRAME = re.compile(r'File "([^"]+)", line (\d+), in (\S+)\n\s*(.*)')


def _user_frame(stack_trace: str) -> str:
    """The innermost frame of user code (outside torch and ortmodule) of a stack."""
    frames = _FRAME.findall(stack_trace)
    user = [f for f in frames if "/torch/" not in f[0] and _OWN_FILE not in f[0]]
    if not user:
        return ""
    path, line, func, code = user[-1]
    return f"{path}({line}): {func}: {code.strip()}"


def _fx_source_line(node: torch.fx.Node) -> str:
    return _user_frame(node.meta.get("stack_trace") or "")


def _source_line(node) -> str:
    """One line naming where a node came from: the innermost frame of user code (outside
    torch) of the exporter's recorded stack, and the submodule path."""
    props = {p.key: p.value for p in node.metadata_props}
    where = _user_frame(props.get("pkg.torch.onnx.stack_trace", ""))
    # Qualified names of the enclosing modules, outermost first, then the op itself.
    scopes = props.get("pkg.torch.onnx.name_scopes", "").strip("[]").split(",")
    innermost = scopes[-2].strip(" '") if len(scopes) >= 2 else ""
    module = innermost.removeprefix(PREFIX) if innermost != PREFIX.rstrip(".") else ""
    if module:
        where += f" [module {module}]"
    return where


@dataclass
class Trace:
    """torch.export's program of the flattened module, and what the capture needs with it."""

    wrapper: _FlatWrapper
    program: torch.export.ExportedProgram
    args: tuple[torch.Tensor, ...]
    session: Any  # the bridge session: the Functions bridged while tracing
    lease: _bridge.CallableLease
    start: float
    traced: float
    dynamic: bool  # traced with symbolic sizes (else at the call's sizes only)


@contextlib.contextmanager
def trace(module: torch.nn.Module, in_spec: _schema.Spec, tensors: list[torch.Tensor],
          verbose: bool, autocast: tuple[str, torch.dtype] | None = None,
          hint: Callable[[BaseException], str] = lambda e: "",
          dynamic: bool = True) -> Iterator[Trace]:
    """Traces the flattened module with torch.export; the caller lowers the program inside
    the block (the bridge session stays open). A failure of either is an ExportError, its
    message followed by ``hint(error)``. Without ``dynamic`` every size is the call's (a
    faster trace: no symbolic shape reasoning; the graph serves these sizes only)."""
    buffers = named_buffers(module)
    wrapper = _FlatWrapper(module, in_spec, return_buffers=bool(buffers), autocast=autocast)
    auto = torch.export.Dim.AUTO
    dynamic_shapes = ((tuple({d: auto for d in range(t.dim())} for t in tensors),)  # *tensors
                      if dynamic else None)
    # Inputs keep requires_grad so that code asking it while tracing (checkpoint) sees
    # what eager sees; the graph cache key holds it too.
    args = tuple(t.detach().requires_grad_(t.requires_grad and torch.is_grad_enabled()
                                           and t.is_floating_point()) for t in tensors)
    start = time.perf_counter()
    with _preserve_state(module), _quiet_exporter(verbose), \
            _bridge.capture_session() as session:
        # The callables registered for bridge nodes live as long as the compiled graph.
        lease = _bridge.CallableLease(session.calls)
        try:
            # Size-oblivious tracing keeps sizes 0 and 1 symbolic too, so that a graph
            # exported at batch 2 also serves batch 1 unless the model code branches on it.
            with torch.fx.experimental._config.patch(backed_size_oblivious=dynamic):
                program = torch.export.export(wrapper, args, dynamic_shapes=dynamic_shapes,
                                              strict=False)
            _lowering.mark_no_grad_regions(program)
            traced = time.perf_counter()
            if wrapper.output_spec is None:
                raise ExportError("the exporter did not run the module's forward")
            yield Trace(wrapper, program, args, session, lease, start, traced, dynamic)
        except ExportError:
            raise
        except Exception as e:  # the exporters raise many exception types
            # An ExportError of our own raised inside the exporter (a Function that cannot
            # be bridged), wrapped in the exporter's exception types.
            own = find_in_chain(e, ExportError)
            if own is not None:
                raise own from e
            raise ExportError(
                f"exporting {type(module).__name__} with torch.export failed: "
                f"{_short_error(e)}{hint(e)}"
            ) from e


def finish(module: torch.nn.Module, tensors: list[torch.Tensor], traced: Trace,
           model: onnx.ModelProto, regions: int, exporter: str) -> Captured:
    """The capture of a lowered program: the buffers' outputs become state outputs (or are
    dropped when forward leaves the buffer unchanged), the initializers are bound to the
    module's parameters and buffers, the shape guards are kept."""
    buffers = named_buffers(module)
    graph = model.graph
    num_user = len(graph.output) - (len(buffers) if traced.wrapper.return_buffers else 0)
    state_outputs = _state_outputs(graph, num_user, buffers)
    del graph.output[num_user:]
    if len(graph.input) != len(tensors):
        raise ExportError(f"the exported graph has {len(graph.input)} inputs for "
                          f"{len(tensors)} tensors passed to the module")
    guards = _shape_guards(traced.program, tensors, traced.dynamic)
    bindings = bind_initializers(module, [i.name for i in graph.initializer], PREFIX)
    seconds = {"trace": traced.traced - traced.start,
               "lowering": time.perf_counter() - traced.traced}
    logger.info("exported %s with torch.export (lowering: %s): %d nodes, %d bound "
                "parameters/buffers, %d buffer updates, %d bridged calls, %d nodes in "
                "checkpoint regions; trace %.2f s, ONNX lowering %.2f s",
                type(module).__name__, exporter, len(graph.node), len(bindings),
                len(state_outputs), len(traced.session.calls), regions, seconds["trace"],
                seconds["lowering"])
    return Captured(model.SerializeToString(), [i.name for i in graph.input],
                    [o.name for o in graph.output], traced.wrapper.output_spec, bindings,
                    state_outputs=state_outputs, shape_guards=guards, exporter=exporter,
                    seconds=seconds, callables=traced.lease)


def export(module: torch.nn.Module, in_spec: _schema.Spec, tensors: list[torch.Tensor],
           verbose: bool, autocast: tuple[str, torch.dtype] | None = None,
           fallback_unsupported_ops: bool = False, dynamic: bool = True) -> Captured:
    with trace(module, in_spec, tensors, verbose, autocast,
               lambda e: _lowering_hint(e, fallback_unsupported_ops), dynamic) as traced:
        model, regions = _lower(traced.program, traced.args, verbose, fallback_unsupported_ops)
    return finish(module, tensors, traced, model, regions, "dynamo")


def _lower(program: torch.export.ExportedProgram, args: tuple[torch.Tensor, ...],
           verbose: bool, fallback_unsupported_ops: bool) -> tuple[onnx.ModelProto, int]:
    """The ONNX model of ``program`` as the engine loads it, and how many of its nodes
    checkpoint regions recompute. With the fallback, ops the engine lacks are translated
    into bridge nodes and the program lowered again."""
    bridged: dict[torch._ops.OpOverload, str] = {}
    while True:
        table = {**_lowering.translation_table(),
                 _bridge.torch_call_op(): _bridge.translate_torch_call,
                 **{op: _fallback.aten_translation(op) for op in bridged}}
        try:
            onnx_program = torch.onnx.export(
                program, args, dynamo=True, optimize=False, opset_version=_lowering.OPSET,
                custom_translation_table=table, verbose=verbose)
        except Exception as e:
            fx_node = _fallback.untranslatable_node(e) if fallback_unsupported_ops else None
            op = _fallback.aten_op(fx_node) if fx_node is not None else None
            if op is None or op in bridged:
                raise
            bridged[op] = _fx_source_line(fx_node)
            _fallback.warn(op, "the ONNX lowering has no translation for it", bridged[op])
            continue
        model = onnx_program.model_proto
        for node in model.graph.node:
            source = _source_line(node)
            if source:
                node.doc_string = source
        rewrite_sequences(model.graph)
        if fallback_unsupported_ops:
            fx_nodes = _fallback.fx_nodes_of(onnx_program)
            fresh = {}
            for node in _fallback.unsupported_nodes(model.graph, _lowering.OPSET):
                fx_node = fx_nodes.get(_bridge.fx_node_name(node) or "")
                op = _fallback.aten_op(fx_node) if fx_node is not None else None
                if op is not None and op not in bridged and op not in fresh:
                    fresh[op] = node
            if fresh:
                for op, node in fresh.items():
                    bridged[op] = node.doc_string
                    _fallback.warn(op, f"the engine has no kernel for the ONNX op "
                                   f"{node.op_type} it lowers to", node.doc_string)
                continue
        regions = _bridge.tag_checkpoint_regions(
            model.graph, _bridge.checkpoint_regions(onnx_program.exported_program))
        return model, regions


def _lowering_hint(e: BaseException, fallback_unsupported_ops: bool) -> str:
    fx_node = _fallback.untranslatable_node(e)
    if fx_node is None or fallback_unsupported_ops:
        return ""
    return f" ({fx_node.target} from {_fx_source_line(fx_node)}). {_fallback.HINT}"


def _shape_guards(program: torch.export.ExportedProgram,
                  tensors: list[torch.Tensor], dynamic: bool) -> list[str]:
    """Python conditions over the input sizes (``L['tensors'][i].size()[d]``) under which
    the graph is valid: the dimensions the model code pinned and the relations it relied
    on. A static trace, or one without torch.export's record of them, holds every size to
    the exported one."""
    guards = getattr(program, "_guards_code", None) if dynamic else None
    if guards is None:
        return [f"L['tensors'][{i}].size() == {tuple(t.shape)}" for i, t in enumerate(tensors)]
    return list(guards)


def _state_outputs(graph, num_user: int, buffers: list[tuple[str, torch.Tensor]]
                   ) -> list[tuple[str, str]]:
    """(output, initializer) pairs for the buffers whose value forward changes; an output
    that is the buffer itself (or an Identity of it) is an unchanged buffer."""
    identity_of = {n.output[0]: n.input[0] for n in graph.node if n.op_type == "Identity"}
    initializers = {i.name for i in graph.initializer}
    pairs = []
    for out, (name, _) in zip(graph.output[num_user:], buffers):
        init = PREFIX + name
        source = out.name
        while source in identity_of:
            source = identity_of[source]
        if source == init:
            continue
        if init not in initializers:
            raise ExportError(f"buffer '{name}' is updated by forward but the exported graph "
                              "does not read it")
        pairs.append((out.name, init))
    return pairs
