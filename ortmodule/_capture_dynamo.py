"""Capture through torch.export: ``torch.export.export(strict=False)`` of the flattened
module in its current mode, every input dimension dynamic unless the model code pins it,
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
from collections.abc import Iterator

import torch
import torch.fx.experimental._config

from ortmodule import _lowering, _schema
from ortmodule._capture import (
    Captured,
    ExportError,
    _FlatWrapper,
    _preserve_state,
    bind_initializers,
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


_OWN_FILE = "/ortmodule/_capture"  # the flattening wrapper's frame
_FRAME = re.compile(r'File "([^"]+)", line (\d+), in (\S+)\n\s*(.*)')


def _source_line(node) -> str:
    """One line naming where a node came from: the innermost frame of user code (outside
    torch) of the exporter's recorded stack, and the submodule path."""
    props = {p.key: p.value for p in node.metadata_props}
    where = ""
    frames = _FRAME.findall(props.get("pkg.torch.onnx.stack_trace", ""))
    user = [f for f in frames if "/torch/" not in f[0] and _OWN_FILE not in f[0]]
    if user:
        path, line, func, code = user[-1]
        where = f"{path}({line}): {func}: {code.strip()}"
    # Qualified names of the enclosing modules, outermost first, then the op itself.
    scopes = props.get("pkg.torch.onnx.name_scopes", "").strip("[]").split(",")
    innermost = scopes[-2].strip(" '") if len(scopes) >= 2 else ""
    module = innermost.removeprefix(PREFIX) if innermost != PREFIX.rstrip(".") else ""
    if module:
        where += f" [module {module}]"
    return where


def export(module: torch.nn.Module, in_spec: _schema.Spec, tensors: list[torch.Tensor],
           verbose: bool, autocast: torch.dtype | None = None) -> Captured:
    buffers = named_buffers(module)
    wrapper = _FlatWrapper(module, in_spec, return_buffers=bool(buffers), autocast=autocast)
    auto = torch.export.Dim.AUTO
    dynamic = (tuple({d: auto for d in range(t.dim())} for t in tensors),)  # for *tensors
    args = tuple(t.detach() for t in tensors)
    start = time.perf_counter()
    with _preserve_state(module), _quiet_exporter(verbose):
        try:
            # Size-oblivious tracing keeps sizes 0 and 1 symbolic too, so that a graph
            # exported at batch 2 also serves batch 1 unless the model code branches on it.
            with torch.fx.experimental._config.patch(backed_size_oblivious=True):
                program = torch.export.export(wrapper, args, dynamic_shapes=dynamic,
                                              strict=False)
            _lowering.mark_no_grad_regions(program)
            traced = time.perf_counter()
            onnx_program = torch.onnx.export(
                program, args, dynamo=True, optimize=False, opset_version=_lowering.OPSET,
                custom_translation_table=_lowering.translation_table(), verbose=verbose)
        except ExportError:
            raise
        except Exception as e:  # the exporters raise many exception types
            raise ExportError(
                f"exporting {type(module).__name__} with torch.export failed: {_short_error(e)}"
            ) from e
    lowered = time.perf_counter()
    if wrapper.output_spec is None:
        raise ExportError("the exporter did not run the module's forward")
    model = onnx_program.model_proto
    graph = model.graph
    num_user = len(graph.output) - (len(buffers) if wrapper.return_buffers else 0)
    state_outputs = _state_outputs(graph, num_user, buffers)
    del graph.output[num_user:]
    for node in graph.node:
        source = _source_line(node)
        if source:
            node.doc_string = source
    rewrite_sequences(graph)
    if len(graph.input) != len(tensors):
        raise ExportError(f"the exported graph has {len(graph.input)} inputs for "
                          f"{len(tensors)} tensors passed to the module")
    guards = _shape_guards(program, tensors)
    bindings = bind_initializers(module, [i.name for i in graph.initializer], PREFIX)
    logger.info("exported %s with torch.export: %d nodes, %d bound parameters/buffers, "
                "%d buffer updates; trace %.2f s, ONNX lowering %.2f s",
                type(module).__name__, len(graph.node), len(bindings), len(state_outputs),
                traced - start, lowered - traced)
    return Captured(model.SerializeToString(), [i.name for i in graph.input],
                    [o.name for o in graph.output], wrapper.output_spec, bindings,
                    state_outputs=state_outputs, shape_guards=guards, exporter="dynamo",
                    seconds={"trace": traced - start, "lowering": time.perf_counter() - traced})


def _shape_guards(program: torch.export.ExportedProgram,
                  tensors: list[torch.Tensor]) -> list[str]:
    """Python conditions over the input sizes (``L['tensors'][i].size()[d]``) under which
    the graph is valid: the dimensions the model code pinned and the relations it relied
    on. Without torch.export's record of them, every size is held to the exported one."""
    guards = getattr(program, "_guards_code", None)
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
