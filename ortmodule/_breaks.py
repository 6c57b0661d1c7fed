"""Graph breaks: a forward that reads a tensor's value in Python (``if`` on a tensor,
``.item()``, ``.tolist()``, boolean-mask indexing, ``nonzero``) runs as several engine graphs
with that Python between them.

torch.export cannot follow such code, so the forward runs through TorchDynamo with a backend of
our own (``GraphBreaks``): Dynamo splits the forward where it reads a value, runs the code there
eagerly, and hands every graph in between (an fx GraphModule whose inputs are the activations it
needs and, lifted, the module's parameters and buffers) to the backend, which wraps it as a
``Part`` (a module that calls the graph with the wrapped module's own parameters and buffers)
inside an ORTModule of its own: each part is exported, lowered and run on the engine like any
module, with its gradient graph, buffer updates, bridged ops and graph cache. Gradients flow
through the parts' autograd functions and the eager code alike. Dynamo's guards choose the graphs
of a call: a branch taken for the first time compiles its own graph, a value baked into a graph
(a Python scalar read with ``.item()``) recompiles it when it changes; a stale graph is never run.
"""

from __future__ import annotations

import logging
import traceback
import types
import weakref
from collections.abc import Callable
from typing import Any

import torch
import torch._dynamo
import torch.fx

logger = logging.getLogger("ortmodule")

# Files whose frames are not the user's code (for the line a break names).
_INTERNAL = ("/torch/", "/ortmodule/", "<frozen")
# Graph breaks already reported: (module class, file, line, reason).
_REPORTED: set[tuple[str, str, int, str]] = set()
# Every live GraphBreaks (a graph Dynamo compiled for one may serve another).
_INSTANCES: weakref.WeakSet[GraphBreaks] = weakref.WeakSet()

# A value read in Python must be a break rather than an unbacked symbol inside a graph (which
# the export of that graph would refuse again). (Dynamo lifts parameters and buffers as graph
# inputs, which the backend matches to the module's own.)
# Dynamo keeps its compiled graphs per code object and, past recompile_limit entries, runs a
# frame in eager PyTorch from then on: each GraphBreaks compiles its own copy of _forward's code
# (see __init__), and the limit is raised for the user's frames after a break, whose code
# every instance of a module class shares (one entry per instance and input shape).
_DYNAMO_CONFIG = {
    "capture_scalar_outputs": False,
    "capture_dynamic_output_shape_ops": False,
    "recompile_limit": 64,
}


def _describe(reason: str) -> str:
    """Dynamo's break reason in the user's words."""
    if reason.startswith("generic_jump"):
        return "Python control flow on a tensor's value"
    first = reason.strip().splitlines()[0] if reason.strip() else "a graph break"
    return first[:200]


def _user_frame(stack: list[traceback.FrameSummary]) -> traceback.FrameSummary | None:
    user = [f for f in stack if not any(p in f.filename for p in _INTERNAL)]
    return user[-1] if user else (stack[-1] if stack else None)


def _mutated_inputs(gm: torch.fx.GraphModule, inputs: set[str]) -> list[str]:
    """Placeholders among ``inputs`` that the graph changes in place (the engine's graph would
    write its result elsewhere: such a graph runs eagerly)."""
    found = []
    for node in gm.graph.nodes:
        if node.op not in ("call_method", "call_function") or not node.args:
            continue
        target = (
            node.target if isinstance(node.target, str) else getattr(node.target, "__name__", "")
        )
        first = node.args[0]
        in_place = (target.endswith("_") and not target.endswith("__")) or target == "setitem"
        if (
            in_place
            and isinstance(first, torch.fx.Node)
            and first.op == "placeholder"
            and first.name in inputs
        ):
            found.append(f"{first.name} ({target})")
    return found


class Part(torch.nn.Module):
    """One graph of a forward split at graph breaks: Dynamo's GraphModule called with the
    wrapped module's parameters and buffers (read through ``module``, so that the capture binds
    them as its own) and the other inputs passed in."""

    def __init__(
        self,
        module: torch.nn.Module,
        graph: torch.fx.GraphModule,
        sources: list[tuple[str, Any]],
        outputs: list[int],
    ) -> None:
        super().__init__()
        self.module = module
        # Not a submodule: its tensors are the lifted inputs, not state of its own.
        object.__setattr__(self, "graph", graph)
        self.sources = sources  # per graph input: ("input", i) or ("state", dotted name)
        self.outputs = outputs  # the graph outputs this part returns (the others pass through)

    def forward(self, *inputs: Any) -> tuple[Any, ...]:
        module = self.module
        args = [inputs[v] if kind == "input" else _state(module, v) for kind, v in self.sources]
        out = self.graph(*args)
        return tuple(out[i] for i in self.outputs)


def _state(module: torch.nn.Module, dotted: str) -> Any:
    owner = module
    *path, attr = dotted.split(".")
    for p in path:
        owner = getattr(owner, p)
    return getattr(owner, attr)


def _state_names(module: torch.nn.Module) -> dict[int, str]:
    """The name of every parameter and buffer of ``module``, by the tensor's id."""
    names = {id(t): n for n, t in module.named_parameters(remove_duplicate=False)}
    names.update({id(t): n for n, t in module.named_buffers(remove_duplicate=False)})
    return names


class GraphBreaks:
    """Runs ``module``'s forward through TorchDynamo, each graph between two breaks on the
    engine (``make_part`` wraps a Part as an ORTModule)."""

    def __init__(
        self, module: torch.nn.Module, make_part: Callable[[torch.nn.Module], Callable[..., Any]]
    ) -> None:
        self.module = module
        self.make_part = make_part
        self.parts: list[Callable[..., Any]] = []  # the ORTModule of every part so far
        self.eager_graphs = 0  # graphs Dynamo captured that run eagerly (they mutate inputs)
        self.breaks: list[tuple[str, str]] = []  # ("file:line: `code`", reason) per break
        forward = types.FunctionType(
            GraphBreaks._forward.__code__.replace(), GraphBreaks._forward.__globals__, "_forward"
        )
        self._compiled = torch.compile(
            types.MethodType(forward, self), backend=self._backend, dynamic=False
        )
        _INSTANCES.add(self)

    def _forward(self, *args: Any, **kwargs: Any) -> Any:
        return self.module(*args, **kwargs)

    def __call__(self, args: tuple, kwargs: dict) -> Any:
        with torch._dynamo.config.patch(_DYNAMO_CONFIG):
            return self._compiled(*args, **kwargs)

    def _report(self, gm: torch.fx.GraphModule) -> None:
        reason = getattr(gm, "compile_subgraph_reason", None)
        if reason is None or not reason.graph_break:
            return
        frame = _user_frame(list(reason.user_stack))
        what = _describe(str(reason.reason))
        filename, line = (frame.filename, frame.lineno) if frame else ("<unknown>", 0)
        code = (frame.line or "").strip() if frame else ""
        where = f"{filename}:{line}: `{code}`"
        self.breaks.append((where, what))
        name = type(self.module).__name__
        key = (name, filename, line, what)
        level = logging.DEBUG if key in _REPORTED else logging.WARNING
        _REPORTED.add(key)
        logger.log(
            level,
            "ortmodule: %s.forward has a graph break at %s: the code before it "
            "and after it runs as engine graphs, the Python reading the value runs in "
            "eager PyTorch (gradients flow through both). Express it with tensor "
            "operations (torch.where, masking) to keep one graph; "
            "DebugOptions(fallback=FallbackPolicy.NEVER) refuses it instead",
            name,
            f"{where} ({what})",
        )

    def _backend(self, gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable:
        self._report(gm)
        module = self.module
        state = _state_names(module)
        placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        sources: list[tuple[str, Any]] = []
        expected: list[int] = []  # the positions of the module's parameters and buffers
        positions: list[int] = []  # the graph inputs the part takes
        for i, value in enumerate(example_inputs):
            name = state.get(id(value)) if isinstance(value, torch.Tensor) else None
            if name is not None:
                sources.append(("state", name))
                expected.append(i)
            else:
                sources.append(("input", len(positions)))
                positions.append(i)
        inputs = {placeholders[i].name for i in positions}
        mutated = _mutated_inputs(gm, inputs)
        output_node = next(n for n in gm.graph.nodes if n.op == "output")
        results = output_node.args[0]
        # Outputs that are graph inputs are passed through as the same objects, as in eager.
        passthrough = {
            k: placeholders.index(r)
            for k, r in enumerate(results)
            if isinstance(r, torch.fx.Node) and r.op == "placeholder"
        }
        computed = [k for k in range(len(results)) if k not in passthrough]
        if mutated or not computed:
            self.eager_graphs += 1
            if mutated:
                logger.info(
                    "ortmodule: a graph of %s.forward between graph breaks changes its "
                    "inputs in place (%s): it runs in eager PyTorch",
                    type(module).__name__,
                    ", ".join(mutated),
                )
            return gm.forward
        built: dict[tuple[int, ...], Callable[..., Any]] = {}

        def part_for(args: tuple) -> Callable[..., Any]:
            """The part for the parameters and buffers ``args`` holds. Dynamo reuses a graph
            for every module of the same class (their parameters are graph inputs): the
            graph of a submodule's forward serves each layer of a stack, the graph of a model
            every ORTModule of that class; each gets a part with its own tensors."""
            state = [args[i] for i in expected]
            for owner in [self, *_INSTANCES]:
                names = _state_names(owner.module)
                found = [names.get(id(t)) for t in state]
                if None in found:
                    continue
                it = iter(found)
                bound = [(kind, next(it) if kind == "state" else v) for kind, v in sources]
                cls = type(
                    f"{type(owner.module).__name__}[graph {len(owner.parts) + 1}]", (Part,), {}
                )
                part = owner.make_part(cls(owner.module, gm, bound, computed))
                owner.parts.append(part)
                return part
            raise RuntimeError(
                "ORTModule: a graph between graph breaks was called with parameters or buffers "
                "of no wrapped module (replaced without a registration?); assign parameters as "
                "nn.Parameter attributes, or construct a new ORTModule"
            )

        def run(*args: Any) -> Any:
            key = tuple(id(args[i]) for i in expected)
            part = built.get(key)
            if part is None:
                part = built[key] = part_for(args)
            got = part(*[args[i] for i in positions])
            out: list[Any] = [None] * len(results)
            for k, v in zip(computed, got):
                out[k] = v
            for k, i in passthrough.items():
                out[k] = args[i]
            return out

        return run
