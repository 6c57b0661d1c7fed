"""Capture through the TorchScript exporter (torch.onnx.export(dynamo=False)).

Deprecated upstream and unable to follow modern model code (transformers' attention
masks), it is kept as an option: it honours training mode per submodule and exports
BatchNorm running-statistic updates as BatchNormalization outputs.
"""

from __future__ import annotations

import io
import logging
from typing import Any

import torch

from ortmodule import _bridge, _schema
from ortmodule._capture import (
    Captured,
    ExportError,
    _FlatWrapper,
    _preserve_state,
    _quiet_fds,
    bind_initializers,
    surface_warnings,
)

logger = logging.getLogger("ortmodule")

OPSET = 17
OWN_DOMAIN = "ai.ortmodule"


def export(module: torch.nn.Module, in_spec: _schema.Spec, tensors: list[torch.Tensor],
           verbose: bool, static_shapes: bool = False) -> Captured:
    wrapper = _FlatWrapper(module, in_spec)
    input_names = [f"input_{i}" for i in range(len(tensors))]
    dynamic_axes = None if static_shapes else {
        n: {d: f"{n}_dim{d}" for d in range(t.dim())} for n, t in zip(input_names, tensors)
    }
    # PRESERVE exports every submodule in its own mode (an eval() submodule inside a
    # train() model stays in eval) and leaves the modes untouched. The wrapper itself
    # claims training so that the exporter keeps training-style symbolics available
    # and deduplicates initializers by identity only: in eval mode it would merge
    # parameters and buffers that merely hold equal values (zero biases, fresh
    # BatchNorm statistics), breaking their binding to the module.
    wrapper.training = True
    mode = torch.onnx.TrainingMode.PRESERVE
    buf = io.BytesIO()
    changed: list[str] = []
    with _preserve_state(module, changed), surface_warnings(), \
            _bridge.capture_session(refuse="the TorchScript exporter"):
        try:
            # The TorchScript exporter honours training mode (dropout, train-mode
            # BatchNorm with running-stat outputs) and keeps parameters as named
            # initializers when constant folding is off.
            # verbose=True makes the exporter record each node's Python stack in its
            # doc_string (the engine's errors quote the user's source line); the graph
            # dump it also prints from C++ is kept off the terminal unless asked for.
            with torch.no_grad(), _quiet_fds(enabled=not verbose):
                torch.onnx.export(
                    wrapper,
                    tuple(t.detach() for t in tensors),
                    buf,
                    dynamo=False,
                    export_params=True,
                    training=mode,
                    do_constant_folding=False,
                    keep_initializers_as_inputs=False,
                    input_names=input_names,
                    opset_version=OPSET,
                    dynamic_axes=dynamic_axes,
                    verbose=True,
                )
        except ExportError:
            raise
        except Exception as e:  # the exporter raises many exception types
            raise ExportError(
                f"exporting {type(module).__name__} to ONNX failed: {type(e).__name__}: {e}"
            ) from e
    if wrapper.output_spec is None:
        raise ExportError("the exporter did not run the module's forward")
    # This exporter keeps only BatchNorm's running statistics (and the engine counts its
    # batches); any other buffer update would be silently lost.
    batch_norm_stats = {
        f"{name}.{stat}" if name else stat
        for name, m in module.named_modules()
        if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)
        for stat in ("running_mean", "running_var", "num_batches_tracked")
    }
    lost = [name for name in changed if name not in batch_norm_stats]
    if lost:
        raise ExportError(
            f"{type(module).__name__}.forward updates the buffers {', '.join(lost)} in place, "
            "which the TorchScript exporter drops; use the default exporter "
            "(DebugOptions(exporter='auto')), which writes such updates back")

    import onnx  # deferred: importing onnx is slow and only needed here

    model = onnx.load_from_string(buf.getvalue())
    data = buf.getvalue()
    if _use_torch_batch_norm(model):
        data = model.SerializeToString()
    output_names = [o.name for o in model.graph.output]
    bindings = bind_initializers(module, [i.name for i in model.graph.initializer], "module.")
    graph_inputs = [i.name for i in model.graph.input]
    logger.info("exported %s: %d nodes, %d inputs, %d bound parameters/buffers",
                type(module).__name__, len(model.graph.node), len(graph_inputs), len(bindings))
    return Captured(data, graph_inputs, output_names, wrapper.output_spec, bindings,
                    exporter="torchscript")


def _use_torch_batch_norm(model: Any) -> bool:
    """Training-mode BatchNormalization nodes come from PyTorch batch norms, whose
    running_var tracks the unbiased batch variance; ONNX's op tracks the biased one. They
    become the engine's ai.ortmodule BatchNormTorch. Returns whether the model changed."""
    changed = False
    for node in model.graph.node:
        if node.op_type != "BatchNormalization" or node.domain not in ("", "ai.onnx"):
            continue
        if not any(a.name == "training_mode" and a.i for a in node.attribute):
            continue
        node.op_type, node.domain = "BatchNormTorch", OWN_DOMAIN
        changed = True
    if changed and not any(o.domain == OWN_DOMAIN for o in model.opset_import):
        model.opset_import.add(domain=OWN_DOMAIN, version=1)
    return changed
