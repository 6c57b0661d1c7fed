"""Capture: the only code that talks to torch.onnx.

Exports the wrapped module for one input schema and returns ONNX bytes plus the
mapping from ONNX initializer names to the module's parameters and buffers.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import sys
import tempfile
import warnings
from dataclasses import dataclass, field

import torch

from ortmodule import _schema

logger = logging.getLogger("ortmodule")

OPSET = 17


class ExportError(RuntimeError):
    """The wrapped module could not be exported to ONNX."""


@dataclass
class Captured:
    onnx_bytes: bytes
    input_names: list[str]  # one per flattened user tensor
    output_names: list[str]
    output_spec: _schema.Spec
    # ONNX initializer name -> (owner module, "param"/"buffer", attribute name, state_dict name)
    bindings: dict[str, tuple[torch.nn.Module, str, str, str]] = field(default_factory=dict)


class _FlatWrapper(torch.nn.Module):
    """Calls the module from a flat tuple of tensors and returns a flat tuple."""

    def __init__(self, module: torch.nn.Module, in_spec: _schema.Spec) -> None:
        super().__init__()
        self.module = module
        self.in_spec = in_spec
        self.output_spec: _schema.Spec | None = None

    def forward(self, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        args, kwargs = _schema.unflatten(self.in_spec, list(tensors))
        out = self.module(*args, **kwargs)
        flat: list[torch.Tensor] = []
        self.output_spec = _schema.flatten(out, flat)
        if not flat:
            raise ExportError("the module returned no tensors")
        return tuple(flat)


@contextlib.contextmanager
def _preserve_state(module: torch.nn.Module):
    """Export runs the module once; undo its side effects (buffer updates, RNG draws)."""
    buffers = {name: b.detach().clone() for name, b in module.named_buffers()}
    rng = torch.random.get_rng_state()
    try:
        yield
    finally:
        with torch.no_grad():
            for name, b in module.named_buffers():
                if name in buffers:
                    b.copy_(buffers[name])
        torch.random.set_rng_state(rng)


@contextlib.contextmanager
def _quiet_fds(enabled: bool):
    """Sends what C++ code writes to stdout/stderr to a temporary file meanwhile."""
    if not enabled:
        yield
        return
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    with tempfile.TemporaryFile() as sink:
        try:
            os.dup2(sink.fileno(), 1)
            os.dup2(sink.fileno(), 2)
            yield
        finally:
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)


def _owner(module: torch.nn.Module, dotted: str) -> tuple[torch.nn.Module, str]:
    *path, attr = dotted.split(".")
    owner = module
    for p in path:
        owner = getattr(owner, p)
    return owner, attr


def check_supported(module: torch.nn.Module) -> None:
    """Rejects module configurations the exported graph cannot reproduce."""
    for name, m in module.named_modules():
        if (isinstance(m, torch.nn.modules.batchnorm._BatchNorm) and m.training
                and m.track_running_stats and m.momentum is None):
            raise NotImplementedError(
                f"{type(m).__name__} '{name}' uses momentum=None (cumulative moving average), "
                "whose factor changes every step while the exported graph fixes it; "
                "give it a numeric momentum (PyTorch's default is 0.1)"
            )


def needs_static_shapes(module: torch.nn.Module) -> bool:
    """The exporter cannot lower batch norm without running statistics for symbolic
    shapes; such modules are exported per concrete input shape instead."""
    return any(
        isinstance(m, torch.nn.modules.batchnorm._BatchNorm) and m.running_mean is None
        for m in module.modules()
    )


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
    with _preserve_state(module), warnings.catch_warnings():
        if not verbose:
            warnings.simplefilter("ignore")
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

    import onnx  # deferred: importing onnx is slow and only needed here

    model = onnx.load_from_string(buf.getvalue())
    output_names = [o.name for o in model.graph.output]
    bindings: dict[str, tuple[torch.nn.Module, str, str, str]] = {}
    params = dict(module.named_parameters(remove_duplicate=False))
    buffers = dict(module.named_buffers(remove_duplicate=False))
    for init in model.graph.initializer:
        name = init.name.removeprefix("module.")
        if name in params:
            owner, attr = _owner(module, name)
            bindings[init.name] = (owner, "param", attr, name)
        elif name in buffers:
            owner, attr = _owner(module, name)
            bindings[init.name] = (owner, "buffer", attr, name)
    graph_inputs = [i.name for i in model.graph.input]
    logger.info("exported %s: %d nodes, %d inputs, %d bound parameters/buffers",
                type(module).__name__, len(model.graph.node), len(graph_inputs), len(bindings))
    return Captured(buf.getvalue(), graph_inputs, output_names, wrapper.output_spec, bindings)
