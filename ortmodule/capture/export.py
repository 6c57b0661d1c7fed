"""Capture's front door: exports the wrapped module for one input schema and returns one
canonical ONNX model (bytes) plus its schema (``Captured``: the mapping from ONNX initializer
names to the module's parameters and buffers, the buffers the graph updates, the shape
guards). The only module that names a lowering.

Every exporter traces once with torch.export (``trace``); they differ in who lowers the
program: ``"fx"`` ortmodule's own translation table, ``"dynamo"`` torch.onnx, and ``"auto"``
(the default) the first, then the second on the same trace where the table cannot lower the
program (or where ``FallbackPolicy.UNSUPPORTED_OP`` asks for bridged ATen ops, which only
torch.onnx's lowering makes).
"""

from __future__ import annotations

import logging

import torch

from ortmodule import _schema
from ortmodule.capture.common import (
    Captured,
    ExportError,
    check_one_device,
    check_supported,
    explain_failure,
    forget_source_files_read,
    outside_autocast,
)
from ortmodule.capture.fx import lower as fx
from ortmodule.capture.fx.builder import FALLBACK_HINT
from ortmodule.capture.torch_onnx import lower as torch_onnx
from ortmodule.capture.trace import finish, trace
from ortmodule.options import EXPORTERS

__all__ = ["Captured", "ExportError", "check_one_device", "check_supported", "explain_failure",
           "export"]

logger = logging.getLogger("ortmodule")


def export(module: torch.nn.Module, in_spec: _schema.Spec, tensors: list[torch.Tensor],
           verbose: bool, exporter: str, autocast: tuple[str, torch.dtype] | None = None,
           fallback_unsupported_ops: bool = False, dynamic: bool = True) -> Captured:
    """Exports ``module`` called with ``tensors`` (flattened per ``in_spec``), under
    ``torch.autocast(*autocast)`` (device type, dtype) when given. With
    ``fallback_unsupported_ops``, ops the engine lacks become bridge nodes (torch.onnx's
    lowering only). torch.export traces symbolic sizes with ``dynamic``, else the call's
    sizes."""
    if exporter not in EXPORTERS:
        raise ValueError(f"unknown exporter {exporter!r}; expected one of {EXPORTERS}")
    if exporter == "fx" and fallback_unsupported_ops:
        raise NotImplementedError(
            "FallbackPolicy.UNSUPPORTED_OP needs torch.onnx's lowering; the fx exporter "
            "has no bridge for ops it cannot translate: use the default exporter "
            "(DebugOptions(exporter=\"auto\"))")
    if exporter == "auto" and fallback_unsupported_ops:
        logger.info("exporting %s: FallbackPolicy.UNSUPPORTED_OP needs torch.onnx's "
                    "lowering (exporter \"dynamo\")", type(module).__name__)
        exporter = "dynamo"
    # The caller's autocast region applies inside the traced forward only (FlatWrapper), not
    # to the exporter's own computations.
    with forget_source_files_read(), outside_autocast():
        return _export(module, in_spec, tensors, verbose, exporter, autocast,
                       fallback_unsupported_ops, dynamic)


def _export(module: torch.nn.Module, in_spec: _schema.Spec, tensors: list[torch.Tensor],
            verbose: bool, exporter: str, autocast: tuple[str, torch.dtype] | None,
            fallback_unsupported_ops: bool, dynamic: bool) -> Captured:
    if exporter == "fx":
        hint = lambda e: ""
    else:
        hint = lambda e: torch_onnx.lowering_hint(e, fallback_unsupported_ops)
    with trace(module, in_spec, tensors, verbose, autocast, hint=hint,
               dynamic=dynamic) as traced:
        if exporter == "dynamo":
            model, regions = torch_onnx.lower(traced.program, traced.args, verbose,
                                              fallback_unsupported_ops)
        else:
            untranslatable = None
            try:
                model, regions = fx.lower(traced.program, traced.wrapper, traced.session.calls)
            except ExportError as e:
                if exporter == "fx":
                    raise
                untranslatable = str(e).split("; " + FALLBACK_HINT)[0]
            if untranslatable is None:
                exporter = "fx"
            else:
                # Outside the handler: an error of torch.onnx's lowering is reported as its
                # own, not as the fx lowering's it would otherwise chain to.
                logger.info("exporting %s: %s; lowering it with torch.onnx instead (exporter "
                            "\"dynamo\": the same graph, a slower first call)",
                            type(module).__name__, untranslatable)
                model, regions = torch_onnx.lower(traced.program, traced.args, verbose, False)
                exporter = "dynamo"
    return finish(module, tensors, traced, model, regions, exporter)
