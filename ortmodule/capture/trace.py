"""The one torch.export trace of a capture, and its ``finish``.

``trace`` runs ``torch.export.export(strict=False)`` on the flattened module in its current
mode, at the call's sizes or (``dynamic``) with every input dimension dynamic unless the
model code pins it, inside a bridge session; a lowering (``fx`` or ``torch_onnx``) turns the
program into ONNX inside the block. ``finish`` makes the ``Captured`` of the lowered model.

What torch.export's program does not say by itself is put right here, for both lowerings:
- buffer updates (BatchNorm running statistics, counters, EMAs): the wrapper returns every
  buffer's value after forward, and the outputs of buffers that forward changed become
  state outputs written back by the engine (``finish``);
- ``torch.no_grad()`` regions: their outputs are detached (``mark_no_grad_regions``), which
  each lowering translates into a gradient stop.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import onnx
import torch
import torch.fx.experimental._config

from ortmodule import _schema
from ortmodule.capture import bridge
from ortmodule.capture.common import (
    PREFIX,
    Captured,
    ExportError,
    FlatWrapper,
    bind_initializers,
    check_no_python_values,
    find_in_chain,
    named_buffers,
    outputs_read_as_numbers,
    packed_sequence_layer,
    preserve_state,
    surface_warnings,
)

logger = logging.getLogger("ortmodule")


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


@dataclass
class Trace:
    """torch.export's program of the flattened module, and what the capture needs with it."""

    wrapper: FlatWrapper
    program: torch.export.ExportedProgram
    args: tuple[torch.Tensor, ...]
    session: Any  # the bridge session: the Functions bridged while tracing
    lease: bridge.CallableLease
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
    wrapper = FlatWrapper(module, in_spec, return_buffers=bool(buffers), autocast=autocast)
    auto = torch.export.Dim.AUTO
    dynamic_shapes = ((tuple({d: auto for d in range(t.dim())} for t in tensors),)  # *tensors
                      if dynamic else None)
    # Inputs keep requires_grad so that code asking it while tracing (checkpoint) sees
    # what eager sees; the graph cache key holds it too.
    args = tuple(t.detach().requires_grad_(t.requires_grad and torch.is_grad_enabled()
                                           and t.is_floating_point()) for t in tensors)
    start = time.perf_counter()
    with preserve_state(module), _quiet_exporter(verbose), \
            bridge.capture_session() as session:
        # The callables registered for bridge nodes live as long as the compiled graph.
        lease = bridge.CallableLease(session.calls)
        stage = "exporting {} with torch.export"
        try:
            # Size-oblivious tracing keeps sizes 0 and 1 symbolic too, so that a graph
            # exported at batch 2 also serves batch 1 unless the model code branches on it.
            with torch.fx.experimental._config.patch(backed_size_oblivious=dynamic):
                program = torch.export.export(wrapper, args, dynamic_shapes=dynamic_shapes,
                                              strict=False)
            outputs_read_as_numbers(program)
            check_no_python_values(program, module)
            mark_no_grad_regions(program)
            traced = time.perf_counter()
            if wrapper.output_spec is None:
                raise ExportError("the exporter did not run the module's forward")
            stage = "lowering the exported program of {} to ONNX"  # the export worked
            yield Trace(wrapper, program, args, session, lease, start, traced, dynamic)
        except ExportError:
            raise
        except Exception as e:  # the exporters raise many exception types
            # An ExportError of our own raised inside the exporter (a Function that cannot
            # be bridged), wrapped in the exporter's exception types.
            own = find_in_chain(e, ExportError)
            if own is not None:
                raise own from e
            layer = packed_sequence_layer(e)
            if layer is not None:
                raise ExportError(
                    f"torch.nn.{layer} got a PackedSequence: recurrent layers run on padded "
                    "batches only; pass the padded tensor (the one given to "
                    "pack_padded_sequence, or pad_packed_sequence's result) and mask the "
                    "padded steps in the loss") from e
            raise ExportError(
                f"{stage.format(type(module).__name__)} failed: {_short_error(e)}{hint(e)}"
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
    _drop_state_values(graph, bindings)
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


def _drop_state_values(graph: onnx.GraphProto, bindings: dict[str, Any]) -> None:
    """The initializers of the module's parameters and buffers keep their dtype and shape
    only: the engine feeds their values at every call (the fx lowering leaves them out
    already; torch.onnx's has them). An initializer without a value that is not fed is
    refused by the engine's loader, naming it."""
    for init in graph.initializer:
        if init.name in bindings:
            for data in ("raw_data", "float_data", "double_data", "int32_data", "int64_data",
                         "uint64_data"):
                init.ClearField(data)


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


def mark_no_grad_regions(program: torch.export.ExportedProgram) -> int:
    """Detaches the outputs of ``torch.no_grad()`` regions. torch.export records such a
    region as a ``wrap_with_set_grad_enabled(False, ...)`` call, which the ONNX lowering
    inlines, losing that no gradient may flow through it. Returns the regions marked."""
    graph = program.graph_module.graph
    wrap = torch.ops.higher_order.wrap_with_set_grad_enabled
    marked = 0
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target is not wrap or node.args[0] is not False:
            continue
        marked += 1
        for user in list(node.users):
            val = user.meta.get("val")
            if not isinstance(val, torch.Tensor):
                continue
            with graph.inserting_after(user):
                detached = graph.call_function(torch.ops.aten.detach.default, (user,))
            detached.meta = dict(user.meta)
            user.replace_all_uses_with(
                detached, delete_user_cb=lambda n, keep=detached: n is not keep)
    if marked:
        program.graph_module.recompile()
    return marked
