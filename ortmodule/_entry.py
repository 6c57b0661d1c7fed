"""One compiled graph of an ORTModule, how it is built from a capture (``build_program``) and
how a call feeds it."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from ortmodule import _C, _guards, _schema
from ortmodule.capture.common import FALLBACK_POLICY_HINT

logger = logging.getLogger("ortmodule")


def build_program(onnx_bytes: bytes, feeds: list[str], wrt: list[str],
                  state_outputs: list[tuple[str, str]],
                  graph_optimizations: bool = True, label_sparsity: str = "auto",
                  sample_inputs: dict[str, torch.Tensor] | None = None,
                  linear_cross_entropy: str = "auto") -> Any:
    """``_C.Program``; an unsupported-op error also says how to run the op on PyTorch.
    ``graph_optimizations=False`` skips the engine's rewrites, ``label_sparsity`` picks when
    losses compute only the rows they do not ignore and ``linear_cross_entropy`` when a head
    and its loss fuse (DebugOptions); ``sample_inputs`` are the
    first call's inputs by graph input name (the integer ones are read)."""
    # Integer inputs (labels among them) for the rewrites that look at the first call's data;
    # what those rewrites decided is logged.
    samples = {name: t for name, t in (sample_inputs or {}).items()
               if not (t.is_floating_point() or t.is_complex() or t.dtype == torch.bool)}
    try:
        program = _C.Program(onnx_bytes, feeds, wrt, state_outputs,
                             graph_optimizations=graph_optimizations,
                             label_sparsity=label_sparsity, sample_inputs=samples,
                             linear_cross_entropy=linear_cross_entropy)
        for note in program.notes:
            logger.info("%s", note)
        return program
    except RuntimeError as e:
        message = str(e)
        if not message.startswith("unsupported op:"):
            raise
        head, sep, ops = message.partition(" Supported ops:")
        raise RuntimeError(f"{head} {FALLBACK_POLICY_HINT}{sep}{ops}") from None


@dataclass
class _Entry:
    """One compiled graph: a program plus how to feed it from a call."""

    program: Any  # _C.Program, or None when the call runs eagerly (fallback) or split
    # Per program input: ("input", flat index) or ("param"/"buffer", owner, attribute).
    feeds: list[tuple]
    output_spec: _schema.Spec | None
    # Whether the graph is valid for the input sizes (torch.export's shape guards).
    guard: Callable[[dict[str, list[torch.Tensor]]], bool] | None
    last_shapes: tuple = ()  # sizes of the last accepted call: no need to check again
    # Seconds spent building this entry, per stage (trace, lowering, engine build).
    seconds: dict[str, float] = field(default_factory=dict)
    # Python attribute values forward read while it was traced.
    attributes: _guards.AttributeGuard = field(default_factory=_guards.AttributeGuard)
    fallback_reason: str = ""  # why this entry runs the module eagerly
    exporter: str = ""  # how the graph was lowered: "fx" or "dynamo"
    # The sizes a graph traced at the call's sizes serves (None: traced with symbolic sizes).
    static_sizes: tuple | None = None
    # Keeps the Python callables of the graph's bridge nodes registered (capture.bridge).
    callables: Any = None
    # `feeds` resolved for the per-call path: per program input (flat index, None, None,
    # None) or (-1, owner, "_parameters"/"_buffers", attribute): the owner's table is read
    # directly instead of through nn.Module.__getattr__, which returns the same tensor; an
    # attribute that something else shadows is read with getattr (table None).
    sources: list[tuple] = field(default_factory=list)
    guarded: bool = True
    # Feeds the program from `sources` (_C.EntryRunner).
    runner: Any = None
    # For a forward split at graph breaks (program None): the _breaks.GraphBreaks that runs it.
    graph_breaks: Any = None
    # Why the graph was built (first call, a training/eval switch, ...: _first_run.py).
    build_reason: str = ""

    def __post_init__(self) -> None:
        # Whether accepts() has anything to check (read on every call).
        self.guarded = self.guard is not None or bool(self.attributes)
        for f in self.feeds:
            if f[0] == "input":
                self.sources.append((f[1], None, None, None))
                continue
            kind, owner, attr = f
            table: str | None = "_parameters" if kind == "param" else "_buffers"
            items = getattr(owner, table)
            if attr not in items or getattr(owner, attr) is not items[attr]:
                table = None
            self.sources.append((-1, owner, table, attr))
        if self.program is not None:
            self.runner = _C.EntryRunner(self.program, self.sources)

    def launch(self, tensors: list[torch.Tensor]) -> list[torch.Tensor]:
        """Runs the program for a call whose flattened tensors are `tensors`: its inputs
        are those tensors and the owners' parameters and buffers (`sources`)."""
        return self.runner.launch(tensors)

    def accepts(self, tensors: list[torch.Tensor]) -> bool:
        if self.attributes and not self.attributes.holds():
            return False
        if self.guard is None:
            return True
        shapes = tuple(t.shape for t in tensors)
        if shapes == self.last_shapes:
            return True
        if not self.guard({"tensors": tensors}):
            return False
        self.last_shapes = shapes
        return True
