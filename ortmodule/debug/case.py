"""One subgraph cut out of a lowered graph (``Case``): its ONNX model, the eager values it
is fed, the PyTorch code it is compared with, and how to run both and compare them. The
minifier checks cases in memory; a repro directory holds one case on disk (``save``,
``load``) and its ``repro.py`` runs it."""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from typing import Any

import torch

from ortmodule.debug.compare import Mismatch, compare

# What the reference code may name besides torch (torch.fx writes these unqualified).
_REFERENCE_GLOBALS = {"device": torch.device, "inf": math.inf, "nan": math.nan}


def reference_function(code: str, root: Any = None) -> Any:
    """The ``forward(self, *inputs)`` that torch.fx wrote in ``code``, bound to ``root``
    (the module holding the submodules a higher-order op reads; None where none does)."""
    scope: dict[str, Any] = {"torch": torch, **_REFERENCE_GLOBALS}
    exec(compile(code, "<reference>", "exec"), scope)  # noqa: S102 (code torch.fx wrote)
    forward = scope["forward"]
    return lambda *args: forward(root, *args)


@dataclass
class Output:
    label: str  # "tanh" or "native_layer_norm[0]"
    onnx_name: str  # the subgraph's output
    index: int  # the reference's output
    element: int | None = None  # within a reference output that is a tuple


@dataclass
class GradInput:
    label: str
    onnx_name: str | None  # the subgraph input it feeds (None: the subgraph does not read it)
    index: int  # the reference's input
    element: int | None = None


@dataclass
class Case:
    onnx_bytes: bytes
    inputs: dict[str, torch.Tensor]  # subgraph input -> the eager value it is fed
    reference_code: str  # torch.fx code: forward(self, *reference_inputs) -> tuple
    reference_inputs: list[Any]  # tensors, tuples of tensors, Python numbers
    outputs: list[Output]
    grads: list[GradInput]
    graph_optimizations: bool = True
    nodes: list[str] = field(default_factory=list)  # the FX nodes cut out, in order
    ops: list[str] = field(default_factory=list)  # their ops
    sources: list[str] = field(default_factory=list)  # their source lines
    seed: int = 0
    root: Any = None  # submodules the reference code reads (in memory only)

    def run(self, rtol: float, atol: float) -> list[Mismatch]:
        """Runs the subgraph on the engine and the reference on PyTorch with the same inputs
        and cotangents; what differs."""
        from ortmodule import _C

        with torch.enable_grad():
            wrt = [n for n, t in self.inputs.items() if t.requires_grad]
            program = _C.Program(
                self.onnx_bytes, [], wrt, [], graph_optimizations=self.graph_optimizations
            )
            feed = {n: t.detach().clone().requires_grad_(n in wrt) for n, t in self.inputs.items()}
            got_values = dict(
                zip(program.output_names, _C.run(program, [feed[n] for n in program.input_names]))
            )
            ref_inputs = [leaf(v) for v in self.reference_inputs]
            ref_out = reference_function(self.reference_code, self.root)(*ref_inputs)
            mismatches: list[Mismatch] = []
            got_list, want_list = [], []
            for out in self.outputs:
                got = got_values[out.onnx_name]
                want = _pick(ref_out, out.index, out.element)
                bad = compare(f"output of {out.label}", got, want, rtol, atol)
                if bad is not None:
                    mismatches.append(bad)
                got_list.append(got)
                want_list.append(want)
            mismatches += self._gradients(got_list, want_list, feed, wrt, ref_inputs, rtol, atol)
        return mismatches

    def _gradients(
        self,
        got: list[torch.Tensor],
        want: list[Any],
        feed: dict[str, torch.Tensor],
        wrt: list[str],
        ref_inputs: list[Any],
        rtol: float,
        atol: float,
    ) -> list[Mismatch]:
        gen = torch.Generator().manual_seed(self.seed)
        got_outs, got_cots, want_outs, want_cots = [], [], [], []
        for g, w in zip(got, want):
            if not (isinstance(w, torch.Tensor) and w.is_floating_point()):
                continue
            if not (w.requires_grad or g.requires_grad):
                continue
            cot = torch.randn(w.shape, generator=gen, dtype=torch.float64).to(w.dtype)
            if g.requires_grad:
                got_outs.append(g)
                got_cots.append(cot.to(g.dtype))
            if w.requires_grad:
                want_outs.append(w)
                want_cots.append(cot)
        engine: dict[str, torch.Tensor | None] = {}
        if got_outs and wrt:
            grads = torch.autograd.grad(
                got_outs, [feed[n] for n in wrt], got_cots, allow_unused=True
            )
            engine = dict(zip(wrt, grads))
        leaves = [
            t
            for v in ref_inputs
            for t in (v if isinstance(v, tuple) else (v,))
            if isinstance(t, torch.Tensor) and t.requires_grad
        ]
        eager: dict[int, torch.Tensor | None] = {}
        if want_outs and leaves:
            grads = torch.autograd.grad(want_outs, leaves, want_cots, allow_unused=True)
            eager = {id(t): g for t, g in zip(leaves, grads)}
        mismatches = []
        for entry in self.grads:
            leaf = _pick(ref_inputs, entry.index, entry.element)
            bad = compare(
                f"gradient of {entry.label}",
                engine.get(entry.onnx_name) if entry.onnx_name else None,
                eager.get(id(leaf)),
                rtol,
                atol,
            )
            if bad is not None:
                mismatches.append(bad)
        return mismatches

    # ---- on disk ----

    def save(self, folder: str) -> None:
        with open(os.path.join(folder, "model.onnx"), "wb") as f:
            f.write(self.onnx_bytes)
        torch.save(
            {"inputs": self.inputs, "reference_inputs": self.reference_inputs},
            os.path.join(folder, "inputs.pt"),
        )
        with open(os.path.join(folder, "reference.py"), "w") as f:
            f.write(
                "# The PyTorch ops the subgraph in model.onnx was lowered from (torch.fx code).\n"
            )
            f.write(self.reference_code)
        meta = {
            "nodes": self.nodes,
            "ops": self.ops,
            "sources": self.sources,
            "graph_optimizations": self.graph_optimizations,
            "seed": self.seed,
            "outputs": [vars(o) for o in self.outputs],
            "grads": [vars(g) for g in self.grads],
        }
        with open(os.path.join(folder, "case.json"), "w") as f:
            json.dump(meta, f, indent=1)

    @staticmethod
    def load(folder: str) -> Case:
        with open(os.path.join(folder, "model.onnx"), "rb") as f:
            onnx_bytes = f.read()
        tensors = torch.load(os.path.join(folder, "inputs.pt"), weights_only=True)
        with open(os.path.join(folder, "reference.py")) as f:
            code = f.read()
        with open(os.path.join(folder, "case.json")) as f:
            meta = json.load(f)
        return Case(
            onnx_bytes,
            tensors["inputs"],
            code,
            tensors["reference_inputs"],
            [Output(**o) for o in meta["outputs"]],
            [GradInput(**g) for g in meta["grads"]],
            meta["graph_optimizations"],
            meta["nodes"],
            meta["ops"],
            meta["sources"],
            meta["seed"],
        )


def leaf(value: Any) -> Any:
    """A fresh copy of a recorded value, requiring grad where eager's value did."""
    if isinstance(value, tuple):
        return tuple(leaf(v) for v in value)
    if isinstance(value, torch.Tensor):
        return value.detach().clone().requires_grad_(value.requires_grad)
    return value


def _pick(values: Any, index: int, element: int | None) -> Any:
    value = values[index]
    return value if element is None else value[element]
