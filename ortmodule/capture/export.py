"""Capture's front door: exports the wrapped module for one input schema and returns one
canonical ONNX model (bytes) plus its schema (``Captured``: the mapping from ONNX initializer
names to the module's parameters and buffers, the buffers the graph updates, the shape
guards). The only module that names a lowering.

Every exporter traces once with torch.export (``trace``); they differ in who lowers the
program: ``"fx"`` ortmodule's own translation table, ``"dynamo"`` torch.onnx, and ``"auto"``
(the default) the first, then the second on the same trace where the table cannot lower the
program; with ``FallbackPolicy.UNSUPPORTED_OP`` (the default), ops no lowering translates
run on PyTorch as bridge nodes, and each graph that needs them says so once.
"""

from __future__ import annotations

import logging

import torch

from ortmodule import _schema
from ortmodule.capture.common import (
    Captured,
    ExportError,
    check_no_outside_grad_tensors,
    check_one_device,
    check_real,
    check_supported,
    explain_failure,
    forget_source_files_read,
    is_data_dependent,
    outside_autocast,
    with_state_values,
)
from ortmodule.capture.fx import lower as fx
from ortmodule.capture.fx.builder import FALLBACK_HINT
from ortmodule.capture.torch_onnx import lower as torch_onnx
from ortmodule.capture.trace import finish, trace
from ortmodule.options import EXPORTERS

__all__ = ["Captured", "ExportError", "check_one_device", "check_supported", "explain_failure",
           "export", "is_data_dependent", "with_state_values"]

logger = logging.getLogger("ortmodule")


def export(module: torch.nn.Module, in_spec: _schema.Spec, tensors: list[torch.Tensor],
           verbose: bool, exporter: str, autocast: tuple[str, torch.dtype] | None = None,
           fallback_unsupported_ops: bool = False, dynamic: bool = True) -> Captured:
    """Exports ``module`` called with ``tensors`` (flattened per ``in_spec``), under
    ``torch.autocast(*autocast)`` (device type, dtype) when given. With
    ``fallback_unsupported_ops``, ops the engine lacks become bridge nodes that run on
    PyTorch. torch.export traces symbolic sizes with ``dynamic``, else the call's sizes."""
    if exporter not in EXPORTERS:
        raise ValueError(f"unknown exporter {exporter!r}; expected one of {EXPORTERS}")
    # The caller's autocast region applies inside the traced forward only (FlatWrapper), not
    # to the exporter's own computations.
    with forget_source_files_read(), outside_autocast():
        captured = _export(module, in_spec, tensors, verbose, exporter, autocast,
                           fallback_unsupported_ops, dynamic)
    report_bridged_ops(module, captured)
    return captured


def _export(module: torch.nn.Module, in_spec: _schema.Spec, tensors: list[torch.Tensor],
            verbose: bool, exporter: str, autocast: tuple[str, torch.dtype] | None,
            bridge: bool, dynamic: bool) -> Captured:
    """Lowers one trace. ``"auto"`` tries, in order, until one succeeds: the fx lowering
    with every op native, torch.onnx's lowering (which translates more ops; with ``bridge``
    it bridges the ops the engine lacks; skipped with ``bridge`` for a float64 program, whose
    Python scalars it rounds to float32), and with ``bridge`` the fx lowering bridging every
    op it cannot translate (custom ops, ops torch.onnx cannot lower)."""
    if exporter == "fx":
        hint = lambda e: ""
    else:
        hint = lambda e: torch_onnx.lowering_hint(e, bridge)
    name = type(module).__name__
    with trace(module, in_spec, tensors, verbose, autocast, hint=hint,
               dynamic=dynamic) as traced:
        program, calls = traced.program, traced.session.calls
        check_real(program)
        check_no_outside_grad_tensors(program, module)
        if exporter == "dynamo":
            model, regions = torch_onnx.lower(program, traced.args, verbose, bridge)
        elif exporter == "fx":
            model, regions = fx.lower(program, traced.wrapper, calls, bridge=bridge,
                                     state_values=False)
        else:
            model = None
            try:
                model, regions = fx.lower(program, traced.wrapper, calls, state_values=False)
                exporter = "fx"
            except ExportError as e:
                untranslatable = str(e).split("; " + FALLBACK_HINT)[0]
            failure = None
            if model is None and bridge and _computes_in_float64(program):
                # torch.onnx stores the Python scalars of float64 arithmetic as float32
                # constants cast up (x * 0.1 is off by 1e-8 relative): bridging keeps eager's.
                failure = ExportError("the program computes in float64, whose Python scalars "
                                      "torch.onnx's lowering rounds to float32")
            elif model is None:
                # Outside the handler: an error of torch.onnx's lowering is reported as its
                # own, not as the fx lowering's it would otherwise chain to.
                logger.info("exporting %s: %s; lowering it with torch.onnx instead (exporter "
                            "\"dynamo\": the same graph, a slower first call)", name,
                            untranslatable)
                try:
                    model, regions = torch_onnx.lower(program, traced.args, verbose, bridge)
                    exporter = "dynamo"
                except Exception as e:
                    if not bridge:
                        raise
                    failure = e
            if model is None:
                logger.info("exporting %s: not through torch.onnx's lowering (%s: %s); "
                            "lowering it with the fx exporter, running the ops it cannot "
                            "translate on PyTorch", name, type(failure).__name__, failure)
                model, regions = fx.lower(program, traced.wrapper, calls, bridge=True,
                                         state_values=False)
                exporter = "fx"
    return finish(module, tensors, traced, model, regions, exporter)


def _computes_in_float64(program: torch.export.ExportedProgram) -> bool:
    """Whether any value of the traced graph is a float64 (or complex128) tensor."""
    for node in program.graph.nodes:
        vals = node.meta.get("val")
        for v in vals if isinstance(vals, (list, tuple)) else (vals,):
            if isinstance(v, torch.Tensor) and v.dtype in (torch.float64, torch.complex128):
                return True
    return False


_REPORTED: set[tuple[str, tuple[str, ...]]] = set()


def bridged_ops(model_bytes: bytes) -> dict[str, list[str]]:
    """The ops a captured graph runs on PyTorch (TorchCall nodes naming an ATen or custom
    op, not the user's autograd Functions): op -> the source line of each use."""
    import onnx

    uses: dict[str, list[str]] = {}
    for node in onnx.load_from_string(model_bytes).graph.node:
        if node.op_type != "TorchCall":
            continue
        attrs = {a.name: a for a in node.attribute}
        if "aten_op" not in attrs:
            continue
        overload = attrs["aten_overload"].s.decode() if "aten_overload" in attrs else ""
        op = attrs["aten_op"].s.decode().replace("::", ".") + "." + (overload or "default")
        uses.setdefault(op, []).append(node.doc_string or "an unknown line")
    return uses


def report_bridged_ops(module: torch.nn.Module, captured: Captured) -> None:
    """Warns, once per module class and set of ops, which ops run on PyTorch."""
    uses = bridged_ops(captured.onnx_bytes)
    if not uses:
        return
    key = (type(module).__name__, tuple(sorted(uses)))
    level = logging.DEBUG if key in _REPORTED else logging.WARNING
    _REPORTED.add(key)
    lines = []
    for op, where in sorted(uses.items()):
        places = sorted(set(where))
        shown = "; ".join(places[:3]) + (f"; and {len(places) - 3} more" if len(places) > 3
                                         else "")
        lines.append(f"  {op} x{len(where)}: {shown}")
    logger.log(level, "ortmodule: %s runs %d op(s) the engine lacks on PyTorch (bridged: "
               "correct, gradients from autograd, slower than native kernels):\n%s\n"
               "DebugOptions(fallback=FallbackPolicy.NEVER) or ORTMODULE_FALLBACK_POLICY=never "
               "refuses them instead", type(module).__name__, len(uses), "\n".join(lines))
