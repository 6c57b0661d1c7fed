"""The accuracy minifier: shrinks the lowered graph of one call to the smallest subgraph
whose engine result differs from eager PyTorch's.

The call is captured as ORTModule captures it (torch.export, then the fx lowering, which
records the ONNX value of every FX node), and the exported program is run once in eager
PyTorch, recording the value of every node. A contiguous run of FX nodes (in graph order)
becomes a ``Case``: the ONNX nodes computing those nodes' values from the recorded values
of the nodes before them (each such value a subgraph input), compared with the same FX
nodes run on PyTorch, outputs and the gradients of a random cotangent.

The search (delta debugging over the node order): every node alone first; the first node
that differs alone is the answer (one op). Where none does (a difference that grows over
several nodes, or a rewrite across nodes), bisection finds the shortest prefix of the graph
that differs and then the latest start from which that prefix's last node still differs.
"""

from __future__ import annotations

import logging
import operator
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import onnx
import torch
from onnx import helper
from torch.export.graph_signature import InputKind

from ortmodule import _schema
from ortmodule.capture.common import OWN_DOMAIN
from ortmodule.capture.fx import lower as fx
from ortmodule.capture.fx.builder import onnx_dtype, source_line
from ortmodule.capture.trace import trace
from ortmodule.debug.case import Case, GradInput, Output, leaf, reference_function
from ortmodule.debug.compare import Mismatch
from ortmodule.options import DebugOptions, FallbackPolicy

logger = logging.getLogger("ortmodule")


@dataclass
class Finding:
    """The smallest failing subgraph the minifier found."""

    case: Case
    mismatches: list[Mismatch]
    alone: bool  # one FX node, failing by itself
    failing_alone: list[str] = field(default_factory=list)  # every node failing by itself
    checked: int = 0  # subgraphs run

    def __str__(self) -> str:
        c = self.case
        where = c.sources[0] if c.sources and c.sources[0] else "an unknown line"
        if self.alone:
            head = f"node {c.nodes[0]} ({c.ops[0]}, from {where}) differs from eager by itself"
            if len(self.failing_alone) > 1:
                head += (
                    f" (as do {len(self.failing_alone) - 1} later nodes: "
                    f"{', '.join(self.failing_alone[1:6])})"
                )
        else:
            head = (
                f"no node differs by itself; the {len(c.nodes)} nodes {c.nodes[0]} .. "
                f"{c.nodes[-1]} (from {where}) do together"
            )
        return head + "".join(f"\n  {m}" for m in self.mismatches[:8])


def minify_call(
    module: torch.nn.Module,
    args: tuple,
    kwargs: dict,
    options: DebugOptions,
    rtol: float,
    atol: float,
) -> Finding | None:
    """The smallest subgraph of the call's lowered graph that differs from eager PyTorch,
    or None where the whole graph, cut the same way, does not differ (the difference comes
    from elsewhere: another lowering, randomness)."""
    tensors: list[torch.Tensor] = []
    in_spec = _schema.flatten((args, kwargs), tensors)
    with trace(module, in_spec, tensors, verbose=False, dynamic=False) as traced:
        values: dict[torch.fx.Node, Any] = {}
        bridge = FallbackPolicy.UNSUPPORTED_OP in options.fallback
        model, _ = fx.lower(
            traced.program, traced.wrapper, traced.session.calls, bridge=bridge, values=values
        )
        graph = _Cutter(
            traced.program, traced.wrapper, traced.args, model, values, options.graph_optimizations
        )
        return graph.search(rtol, atol)


class _Cutter:
    """The lowered graph and the eager value of every top-level FX node of the program."""

    def __init__(
        self,
        program: torch.export.ExportedProgram,
        wrapper: torch.nn.Module,
        args: tuple[torch.Tensor, ...],
        model: onnx.ModelProto,
        values: dict[torch.fx.Node, Any],
        graph_optimizations: bool,
    ) -> None:
        self.program = program
        self.model = model
        self.values = values
        self.graph_optimizations = graph_optimizations
        self.eager = _record(program, wrapper, args)
        self.order = {n: k for k, n in enumerate(program.graph.nodes)}
        self.nodes = [
            n for n in program.graph.nodes if n.op == "call_function" and _onnx_names(values.get(n))
        ]
        self.producer = {out: k for k, n in enumerate(model.graph.node) for out in n.output}
        self.initializers = {i.name: i for i in model.graph.initializer}
        self.checked = 0
        self.unchecked = 0

    # ---- the search ----

    def search(self, rtol: float, atol: float) -> Finding | None:
        failing: list[tuple[Case, list[Mismatch]]] = []
        for node in self.nodes:
            if node.target is operator.getitem:
                continue
            result = self._try([node], rtol, atol)
            if result is not None and result[1]:
                failing.append(result)
        if failing:
            case, mismatches = failing[0]
            return Finding(case, mismatches, True, [c.nodes[0] for c, _ in failing], self.checked)
        fails = lambda s, e: bool((r := self._try(self.nodes[s : e + 1], rtol, atol)) and r[1])
        last = len(self.nodes) - 1
        if last < 0 or not fails(0, last):
            return None
        end = _first_true(0, last, lambda e: fails(0, e))
        start = _last_true(0, end, lambda s: fails(s, end))
        case, mismatches = self._try(self.nodes[start : end + 1], rtol, atol)  # type: ignore[misc]
        return Finding(case, mismatches, False, [], self.checked)

    def _try(
        self, seg: list[torch.fx.Node], rtol: float, atol: float
    ) -> tuple[Case, list[Mismatch]] | None:
        """The case of ``seg`` and what differs; None where it cannot be run alone."""
        self.checked += 1
        try:
            case = self.case(seg)
            return case, case.run(rtol, atol)
        except (RuntimeError, ValueError, TypeError, KeyError) as e:
            # A subgraph the engine cannot run by itself (a node reading a value the cut
            # does not provide): no verdict on it, the search goes on without it.
            self.unchecked += 1
            logger.info(
                "minify: %s .. %s not checked alone: %s: %s",
                seg[0].name,
                seg[-1].name,
                type(e).__name__,
                e,
            )
            return None

    # ---- cutting ----

    def case(self, seg: list[torch.fx.Node]) -> Case:
        """The subgraph computing ``seg`` from the recorded values of the nodes before it."""
        first = self.order[seg[0]]
        inside = set(seg)
        fed: dict[str, torch.Tensor] = {}
        labels: dict[str, str] = {}  # fed value -> the FX node (and result) it holds
        for node, recorded in self.eager.items():
            if self.order[node] < first:
                names = _onnx_names(self.values.get(node))
                for k, (name, t) in enumerate(zip(names, _elements(recorded))):
                    if name is not None and isinstance(t, torch.Tensor):
                        fed[name] = t
                        labels[name] = node.name if len(names) == 1 else f"{node.name}_{k}"
        outs = [n for n in seg if n is seg[-1] or any(u not in inside for u in n.users)]
        outputs: list[Output] = []
        for i, node in enumerate(outs):
            names = self.values[node]
            for k, name in enumerate(names if isinstance(names, list) else [names]):
                if not isinstance(name, str):
                    continue
                element = k if isinstance(names, list) else None
                label = node.name if element is None else f"{node.name}[{k}]"
                outputs.append(Output(f"{label} ({node.target})", name, i, element))
        cut = [a for a in _inputs_of(seg) if a not in inside]
        code = _reference_code(self.program, seg, cut, outs)
        nodes, used = self._closure([o.onnx_name for o in outputs], fed)
        rename = self._input_names(nodes, used, labels)
        model = self._model(
            nodes, used, fed, rename, outputs, outs, self._differentiable(code, cut, outputs)
        )
        grads = []
        for i, a in enumerate(cut):
            names = _onnx_names(self.values.get(a))
            for k, t in enumerate(_elements(self.eager[a])):
                if isinstance(t, torch.Tensor) and t.requires_grad:
                    name = names[k] if k < len(names) else None
                    element = k if isinstance(self.eager[a], tuple) else None
                    label = a.name if element is None else f"{a.name}[{k}]"
                    grads.append(
                        GradInput(label, rename.get(name) if name in used else None, i, element)
                    )
        return Case(
            model.SerializeToString(),
            {rename[n]: fed[n] for n in used},
            code,
            [self.eager[a] for a in cut],
            outputs,
            grads,
            self.graph_optimizations,
            [n.name for n in seg],
            [str(n.target) for n in seg],
            [source_line(n) for n in seg],
            root=self.program.graph_module,
        )

    def _differentiable(
        self, code: str, cut: list[torch.fx.Node], outputs: list[Output]
    ) -> list[bool]:
        """Per output, whether eager PyTorch differentiates it (not a statistic such as
        BatchNorm's saved mean): the subgraph stops the gradient of the others."""
        with torch.enable_grad():
            ref = reference_function(code, self.program.graph_module)(
                *[leaf(self.eager[a]) for a in cut]
            )
        flags = []
        for out in outputs:
            value = _pick(ref[out.index], out.element)
            flags.append(isinstance(value, torch.Tensor) and value.requires_grad)
        return flags

    def _input_names(
        self, nodes: list[int], used: list[str], labels: dict[str, str]
    ) -> dict[str, str]:
        """The subgraph's input names: the FX node each one's value comes from."""
        taken = {o for k in nodes for o in self.model.graph.node[k].output}
        taken |= set(self.initializers)
        rename: dict[str, str] = {}
        for v in used:
            name = labels[v]
            while name in taken:
                name += "_in"
            taken.add(name)
            rename[v] = name
        return rename

    def _closure(
        self, outputs: list[str], fed: dict[str, torch.Tensor]
    ) -> tuple[list[int], list[str]]:
        """The ONNX nodes computing ``outputs`` back to fed values and constants (in graph
        order), and the fed values they read (in order of first use)."""
        needed: set[int] = set()
        seen: set[str] = set()
        stack = [o for o in outputs if o not in fed]
        while stack:
            v = stack.pop()
            if v in seen or v == "" or v in fed or v in self.initializers:
                continue
            seen.add(v)
            if v not in self.producer:
                raise ValueError(f"value {v} has neither a producer nor a recorded value")
            k = self.producer[v]
            needed.add(k)
            stack.extend(self.model.graph.node[k].input)
        nodes = sorted(needed)
        used: list[str] = []
        for k in nodes:
            for v in self.model.graph.node[k].input:
                if v in fed and v not in used:
                    used.append(v)
        for o in outputs:
            if o in fed and o not in used:
                used.append(o)
        return nodes, used

    def _model(
        self,
        nodes: list[int],
        used: list[str],
        fed: dict[str, torch.Tensor],
        rename: dict[str, str],
        outputs: list[Output],
        outs_nodes: list[torch.fx.Node],
        differentiable: list[bool],
    ) -> onnx.ModelProto:
        body = []
        for k in nodes:
            node = onnx.NodeProto()
            node.CopyFrom(self.model.graph.node[k])
            node.input[:] = [rename.get(v, v) for v in node.input]
            body.append(node)
        reads = {v for n in body for v in n.input}
        inits = [self.initializers[v] for v in sorted(reads) if v in self.initializers]
        inputs = [
            helper.make_tensor_value_info(rename[v], onnx_dtype(fed[v].dtype), list(fed[v].shape))
            for v in used
        ]
        outs = []
        taken: set[str] = set()
        for k, out in enumerate(outputs):
            want = _pick(self.eager[outs_nodes[out.index]], out.element)
            stop = want.is_floating_point() and not differentiable[k]
            if out.onnx_name in fed or out.onnx_name in taken or stop:
                # A node whose value is its input's (a view lowered to nothing): the output
                # is that value, through an Identity; a statistic stops the gradient.
                name = f"repro_output_{k}"
                body.append(
                    helper.make_node(
                        "StopGradient" if stop else "Identity",
                        [rename.get(out.onnx_name, out.onnx_name)],
                        [name],
                        domain=OWN_DOMAIN if stop else None,
                    )
                )
                out.onnx_name = name
            taken.add(out.onnx_name)
            outs.append(
                helper.make_tensor_value_info(
                    out.onnx_name, onnx_dtype(want.dtype), list(want.shape)
                )
            )
        sub = helper.make_graph(body, "ortmodule_repro", inputs, outs, initializer=inits)
        model = helper.make_model(
            sub, opset_imports=list(self.model.opset_import), producer_name="ortmodule.debug"
        )
        model.ir_version = self.model.ir_version
        return model


def _first_true(lo: int, hi: int, pred: Callable[[int], bool]) -> int:
    """The least k in [lo, hi] with pred(k), given pred(hi) (bisection)."""
    while lo < hi:
        mid = (lo + hi) // 2
        if pred(mid):
            hi = mid
        else:
            lo = mid + 1
    return hi


def _last_true(lo: int, hi: int, pred: Callable[[int], bool]) -> int:
    """The greatest k in [lo, hi] with pred(k), given pred(lo) (bisection)."""
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if pred(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


def _onnx_names(value: Any) -> list[str | None]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and any(isinstance(v, str) for v in value):
        return [v if isinstance(v, str) else None for v in value]
    return []


def _pick(recorded: Any, element: int | None) -> Any:
    return recorded if element is None else recorded[element]


def _elements(recorded: Any) -> tuple[Any, ...]:
    return tuple(recorded) if isinstance(recorded, (tuple, list)) else (recorded,)


def _inputs_of(seg: list[torch.fx.Node]) -> list[torch.fx.Node]:
    seen: list[torch.fx.Node] = []
    for node in seg:
        for a in node.all_input_nodes:
            if a not in seen and a.op != "get_attr":
                seen.append(a)
    return seen


def _reference_code(
    program: torch.export.ExportedProgram,
    seg: list[torch.fx.Node],
    cut: list[torch.fx.Node],
    outs: list[torch.fx.Node],
) -> str:
    """torch.fx code running ``seg`` on PyTorch from ``cut``'s values."""
    g = torch.fx.Graph()
    env: dict[torch.fx.Node, torch.fx.Node] = {a: g.placeholder(a.name) for a in cut}
    for node in seg:
        for a in node.all_input_nodes:
            if a.op == "get_attr" and a not in env:
                env[a] = g.node_copy(a)
        env[node] = g.node_copy(node, lambda a: env[a])
    g.output(tuple(env[n] for n in outs))
    return torch.fx.GraphModule(program.graph_module, g).code


def _record(
    program: torch.export.ExportedProgram, wrapper: torch.nn.Module, args: tuple[torch.Tensor, ...]
) -> dict[torch.fx.Node, Any]:
    """The eager value of every top-level node of ``program`` run on ``args``."""
    params = dict(wrapper.named_parameters(remove_duplicate=False))
    buffers = dict(wrapper.named_buffers(remove_duplicate=False))
    flat: list[Any] = []
    user = iter(args)
    for spec in program.graph_signature.input_specs:
        if spec.kind == InputKind.USER_INPUT:
            flat.append(next(user))
        elif spec.kind == InputKind.CONSTANT_TENSOR:
            flat.append(program.constants[spec.target])
        else:
            t = params.get(spec.target, buffers.get(spec.target))
            flat.append(program.state_dict[spec.target] if t is None else t)
    recorded: dict[torch.fx.Node, Any] = {}

    class Recorder(torch.fx.Interpreter):
        def run_node(self, n: torch.fx.Node) -> Any:
            out = super().run_node(n)
            if n.op in ("placeholder", "call_function"):
                recorded[n] = _snapshot(out)
            return out

    # With gradients on, so that each value says whether eager differentiates it.
    with torch.enable_grad(), torch.random.fork_rng(devices=[]):
        Recorder(program.graph_module).run(*[_snapshot(t) for t in flat])
    return recorded


def _snapshot(value: Any) -> Any:
    """A copy of ``value`` that keeps whether it requires grad."""
    if isinstance(value, torch.Tensor):
        return value.detach().clone().requires_grad_(value.requires_grad)
    if isinstance(value, (tuple, list)):
        return tuple(_snapshot(v) for v in value)
    return value
