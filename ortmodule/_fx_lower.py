"""Capture through torch.export lowered by ortmodule itself (``exporter="fx"``, and
``"auto"``, the default, wherever the translation table covers the program).

``torch.export.export`` gives the ATen graph of the flattened module; this module walks
that graph once and writes the ONNX ModelProto the engine loads, one translation per ATen
op (``_fx_ops.TABLE``), without the stock lowering's decomposition pass (a second trace of
the whole program under fake tensors) and without onnxscript. Everything else matches the
dynamo path (``_capture_dynamo``): buffer updates become state outputs, every node carries
the user source line it came from, custom autograd Functions become TorchCall bridge
nodes, checkpointed ops are tagged for recompute, ``torch.no_grad()`` regions stop
gradients, input dimensions stay symbolic and the exporter's shape guards are kept.

An op without a translation is an ``ExportError`` naming the ATen op and the source line;
the dynamo exporter lowers many more ops.
"""

from __future__ import annotations

import logging
import operator
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import onnx
import sympy
import torch
from onnx import TensorProto, helper, numpy_helper

from ortmodule import _bridge, _lowering, _schema
from ortmodule._capture import Captured, ExportError
from ortmodule._capture_dynamo import PREFIX, _fx_source_line, finish, trace

logger = logging.getLogger("ortmodule")

OPSET = _lowering.OPSET
OWN_DOMAIN = _lowering.OWN_DOMAIN

ONNX_DTYPES: dict[torch.dtype, int] = {
    torch.float32: TensorProto.FLOAT, torch.float64: TensorProto.DOUBLE,
    torch.float16: TensorProto.FLOAT16, torch.bfloat16: TensorProto.BFLOAT16,
    torch.int64: TensorProto.INT64, torch.int32: TensorProto.INT32,
    torch.int16: TensorProto.INT16, torch.int8: TensorProto.INT8,
    torch.uint8: TensorProto.UINT8, torch.bool: TensorProto.BOOL,
}

FALLBACK_HINT = ("use the default exporter (DebugOptions(exporter=\"auto\") or "
                 "ORTMODULE_EXPORTER=auto), which lowers such programs with torch.onnx.")


def onnx_dtype(dtype: torch.dtype) -> int:
    if dtype not in ONNX_DTYPES:
        raise ExportError(f"dtype {dtype} has no ONNX equivalent the engine runs")
    return ONNX_DTYPES[dtype]


def _module_path(node: torch.fx.Node) -> str:
    stack = node.meta.get("nn_module_stack") or {}
    if not stack:
        return ""
    path = list(stack.values())[-1][0]
    if not isinstance(path, str) or path.startswith("_empty"):
        return ""
    return path.removeprefix(PREFIX) if path != PREFIX.rstrip(".") else ""


def source_line(node: torch.fx.Node) -> str:
    """The innermost user frame of the node's recorded stack and its submodule path, as
    the dynamo path writes them into each ONNX node's doc_string."""
    where = _fx_source_line(node)
    module = _module_path(node)
    if module:
        where += f" [module {module}]"
    return where


class UnsupportedOp(ExportError):
    """The program holds an ATen op the fx lowering has no translation for."""


class Lowering:
    """The ONNX graph being written and the value of every FX node translated so far.

    A tensor's value is the name of its ONNX value; an integer the graph computes from
    input sizes (a SymInt) is the name of a 0-d int64 value; a concrete Python number is
    itself; an op with several results has a list."""

    def __init__(self, program: torch.export.ExportedProgram, calls: dict[int, Any]) -> None:
        self.program = program
        self.calls = calls
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self.env: dict[torch.fx.Node, Any] = {}
        self.names: set[str] = set()
        self.consts: dict[tuple, str] = {}
        self.symbols: dict[sympy.Symbol, str] = {}  # symbolic size -> 0-d int64 value
        self.symbol_sources: dict[sympy.Symbol, tuple[str, int]] = {}  # (input, axis)
        self.doc = ""
        self.region: int | None = None
        self.fx_node: torch.fx.Node | None = None
        self.regions = 0
        self.order: dict[torch.fx.Node, int] = {}  # position of each node in its graph

    # ---- names and nodes ----

    def fresh(self, base: str) -> str:
        name = base
        k = 1
        while name in self.names:
            name = f"{base}_{k}"
            k += 1
        self.names.add(name)
        return name

    def op(self, op_type: str, inputs: Sequence[str | None], outputs: int = 1,
           domain: str = "", name: str | None = None, **attrs: Any) -> Any:
        """Appends a node; returns its output name (or list of names)."""
        base = name or (self.fx_node.name if self.fx_node is not None else op_type.lower())
        outs = [self.fresh(base) for _ in range(outputs)]
        node = helper.make_node(op_type, ["" if i is None else i for i in inputs], outs,
                                name=self.fresh(f"n_{base}"), domain=domain or None,
                                doc_string=self.doc or None,
                                **{k: v for k, v in attrs.items() if v is not None})
        if self.region is not None:
            node.metadata_props.add(key=_bridge.REGION_KEY, value=str(self.region))
            self.regions += 1
        self.nodes.append(node)
        return outs[0] if outputs == 1 else outs

    def const(self, value: Any, dtype: torch.dtype) -> str:
        """An initializer holding ``value`` (a number or nested list) as ``dtype``."""
        array = np.asarray(value, dtype=torch.empty((), dtype=dtype).numpy().dtype
                           if dtype != torch.bfloat16 else np.float32)
        key = (dtype, array.shape, array.tobytes())
        if key in self.consts:
            return self.consts[key]
        name = self.fresh("const")
        if dtype == torch.bfloat16:
            tensor = numpy_helper.from_array(array, name)
            tensor = helper.make_tensor(name, TensorProto.BFLOAT16, array.shape,
                                        torch.tensor(array, dtype=torch.bfloat16).view(
                                            torch.int16).numpy().astype(np.uint16).tobytes(),
                                        raw=True)
        else:
            tensor = numpy_helper.from_array(array, name)
        self.initializers.append(tensor)
        self.consts[key] = name
        return name

    def ints(self, values: Sequence[int]) -> str:
        return self.const(list(values), torch.int64)

    # ---- values ----

    def meta(self, arg: Any) -> Any:
        return arg.meta.get("val") if isinstance(arg, torch.fx.Node) else arg

    def value(self, arg: Any) -> Any:
        if isinstance(arg, torch.fx.Node):
            if arg not in self.env:
                raise ExportError(f"internal: FX node {arg.name} used before it was lowered")
            return self.env[arg]
        if isinstance(arg, (list, tuple)):
            return [self.value(a) for a in arg]
        if isinstance(arg, torch.SymInt):
            return self.sym(arg)
        return arg

    def tensor(self, arg: Any, dtype: torch.dtype | None = None) -> str:
        """``arg`` as an ONNX tensor value, cast to ``dtype`` when given."""
        v = self.value(arg)
        if isinstance(v, str):
            have = self.dtype_of(arg)
            if dtype is not None and have is not None and have != dtype:
                return self.op("Cast", [v], to=onnx_dtype(dtype))
            return v
        if isinstance(v, (bool, int, float)):
            if dtype is None:
                dtype = (torch.bool if isinstance(v, bool) else
                         torch.int64 if isinstance(v, int) else torch.float32)
            return self.const(v, dtype)
        raise ExportError(f"internal: {arg!r} is not a tensor value")

    def dtype_of(self, arg: Any) -> torch.dtype | None:
        val = self.meta(arg)
        if isinstance(val, torch.Tensor):
            return val.dtype
        if isinstance(val, (torch.SymInt, int)) and not isinstance(val, bool):
            return torch.int64
        if isinstance(val, (torch.SymFloat, float)):
            return torch.float32
        if isinstance(val, bool):
            return torch.bool
        return None

    def rank(self, arg: Any) -> int:
        val = self.meta(arg)
        return val.dim() if isinstance(val, torch.Tensor) else 0

    # ---- symbolic sizes ----

    def register_input(self, name: str, val: torch.Tensor) -> None:
        for axis, size in enumerate(val.shape):
            if isinstance(size, torch.SymInt):
                expr = size.node.expr
                if isinstance(expr, sympy.Symbol) and expr not in self.symbol_sources:
                    self.symbol_sources[expr] = (name, axis)

    def sym(self, size: Any) -> Any:
        """A size as a Python int, or the name of a 0-d int64 value computing it."""
        if isinstance(size, int):
            return size
        if isinstance(size, torch.SymInt):
            if size.node.is_constant() or not size.node.expr.free_symbols:
                return int(size.node.expr) if not size.node.is_constant() else int(size)
            return self.expr(size.node.expr)
        raise ExportError(f"internal: {size!r} is not a size")

    def expr(self, e: sympy.Expr) -> Any:
        if e.is_Integer:
            return int(e)
        if isinstance(e, sympy.Symbol):
            if e not in self.symbols:
                if e not in self.symbol_sources:
                    raise ExportError(f"the size {e} is not the size of an input; {FALLBACK_HINT}")
                source, axis = self.symbol_sources[e]
                saved = self.region
                self.region = None
                shape = self.op("Shape", [source], name=f"size_{e}", start=axis, end=axis + 1)
                self.symbols[e] = self.op("Squeeze", [shape], name=f"size_{e}")
                self.region = saved
            return self.symbols[e]
        from torch.utils._sympy.functions import FloorDiv, Max, Min, Mod

        args = [self.expr(a) for a in e.args]
        if isinstance(e, sympy.Add):
            return self.fold(args, "Add", operator.add)
        if isinstance(e, sympy.Mul):
            return self.fold(args, "Mul", operator.mul)
        if isinstance(e, FloorDiv):
            return self.scalar_op("Div", args[0], args[1], operator.floordiv)
        if isinstance(e, Mod):
            return self.scalar_op("Mod", args[0], args[1], operator.mod)
        if isinstance(e, Max):
            return self.fold(args, "Max", max)
        if isinstance(e, Min):
            return self.fold(args, "Min", min)
        raise ExportError(f"the size expression {e} cannot be computed in the graph; "
                          f"{FALLBACK_HINT}")

    def fold(self, args: list[Any], op_type: str, fn: Callable[[Any, Any], Any]) -> Any:
        out = args[0]
        for a in args[1:]:
            out = self.scalar_op(op_type, out, a, fn)
        return out

    def scalar_op(self, op_type: str, a: Any, b: Any, fn: Callable[[Any, Any], Any]) -> Any:
        """An integer operation on sizes: folded when both are numbers."""
        if not isinstance(a, str) and not isinstance(b, str):
            return fn(a, b)
        a = a if isinstance(a, str) else self.const(a, torch.int64)
        b = b if isinstance(b, str) else self.const(b, torch.int64)
        return self.op(op_type, [a, b])

    def shape(self, sizes: Sequence[Any]) -> str:
        """A 1-D int64 value from sizes (ints, SymInts, FX nodes of sizes)."""
        values = [self.sym(s) if isinstance(s, torch.SymInt) else self.value(s) for s in sizes]
        if all(isinstance(v, int) for v in values):
            return self.ints(values)
        parts = []
        run: list[int] = []
        for v in values:
            if isinstance(v, str):
                if run:
                    parts.append(self.ints(run))
                    run = []
                parts.append(self.op("Reshape", [v, self.ints([1])]))
            else:
                run.append(int(v))
        if run:
            parts.append(self.ints(run))
        return self.op("Concat", parts, axis=0)

    def dim(self, arg: Any, axis: int) -> Any:
        """Size ``axis`` of tensor ``arg``: an int or a 0-d int64 value."""
        val = self.meta(arg)
        size = val.shape[axis]
        return self.sym(size)


def _translate(lowering: Lowering, graph: torch.fx.Graph, inputs: list[Any] | None) -> Any:
    """Lowers ``graph``'s call nodes; placeholders take ``inputs`` (a subgraph) or are
    already bound. Returns the values of the output node's arguments."""
    from ortmodule import _fx_ops

    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    lowering.order.update((n, k) for k, n in enumerate(graph.nodes))
    if inputs is not None:
        for node, v in zip(placeholders, inputs):
            lowering.env[node] = v
    for node in graph.nodes:
        if node.op == "placeholder":
            continue
        if node.op == "output":
            return lowering.value(node.args[0])
        if node.op == "get_attr":
            lowering.env[node] = node  # submodules of higher-order ops
            continue
        lowering.fx_node = node
        lowering.doc = source_line(node)
        custom = node.meta.get("custom") or {}
        lowering.region = custom.get(_bridge.REGION_KEY)
        target = node.target
        fn = _fx_ops.lookup(target)
        if fn is None:
            where = lowering.doc or "an unknown line"
            raise UnsupportedOp(
                f"the fx exporter has no translation for {target} (from {where}); "
                f"{FALLBACK_HINT}")
        args, kwargs = _fx_ops.bind(target, node)
        try:
            lowering.env[node] = fn(lowering, node, *args, **kwargs)
        except ExportError:
            raise
        except Exception as e:
            raise ExportError(
                f"the fx exporter could not lower {target} (from "
                f"{lowering.doc or 'an unknown line'}): {type(e).__name__}: {e}; "
                f"{FALLBACK_HINT}") from e
    raise ExportError("internal: the graph has no output node")


def _value_info(name: str, val: torch.Tensor) -> onnx.ValueInfoProto:
    dims: list[Any] = []
    for size in val.shape:
        if isinstance(size, torch.SymInt) and size.node.expr.free_symbols:
            dims.append(str(size.node.expr))
        else:
            dims.append(int(size))
    return helper.make_tensor_value_info(name, onnx_dtype(val.dtype), dims)


def lower(program: torch.export.ExportedProgram, wrapper: torch.nn.Module,
          calls: dict[int, Any]) -> tuple[onnx.ModelProto, int]:
    """The ONNX model of ``program`` (graph inputs ``input_<k>``, one per flattened tensor)
    and the number of nodes in checkpoint regions."""
    from ortmodule import _fx_autocast

    casts = _fx_autocast.insert_casts(program.graph_module)
    if casts:
        logger.debug("autocast: %d casts made explicit", casts)
    lowering = Lowering(program, calls)
    signature = program.graph_signature
    from torch.export.graph_signature import InputKind, OutputKind

    params = dict(wrapper.named_parameters(remove_duplicate=False))
    buffers = dict(wrapper.named_buffers(remove_duplicate=False))
    placeholders = {n.name: n for n in program.graph.nodes if n.op == "placeholder"}
    graph_inputs: list[onnx.ValueInfoProto] = []
    input_names: list[str] = []
    initializer_names: dict[str, str] = {}  # fqn -> initializer (tied weights share one)
    for k, spec in enumerate(signature.input_specs):
        node = placeholders[spec.arg.name]
        val = node.meta.get("val")
        if spec.kind == InputKind.USER_INPUT:
            if not isinstance(val, torch.Tensor):
                raise ExportError(f"the exported program has a non-tensor input {node.name}")
            name = f"input_{len(input_names)}"
            lowering.names.add(name)
            input_names.append(name)
            graph_inputs.append(_value_info(name, val))
            lowering.register_input(name, val)
            lowering.env[node] = name
        elif spec.kind in (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR):
            target = spec.target
            if spec.kind == InputKind.CONSTANT_TENSOR:
                tensor = program.constants[target]
                name = lowering.fresh(f"const_{node.name}")
            else:
                tensor = params.get(target, buffers.get(target))
                if tensor is None:
                    tensor = program.state_dict.get(target, program.constants.get(target))
                name = initializer_names.get(target) or target
                lowering.names.add(name)
            if tensor is None:
                raise ExportError(f"the exported program reads {target}, which the module "
                                  "does not hold")
            if name not in initializer_names.values():
                lowering.initializers.append(_initializer(name, tensor))
            initializer_names[target] = name
            lowering.env[node] = name
        else:
            raise ExportError(f"the fx exporter does not support program inputs of kind "
                              f"{spec.kind.name} ({node.name}); {FALLBACK_HINT}")
    outputs = _translate(lowering, program.graph, None)
    user = [i for i, s in enumerate(signature.output_specs) if s.kind == OutputKind.USER_OUTPUT]
    if len(user) != len(signature.output_specs):
        kinds = {s.kind.name for s in signature.output_specs} - {"USER_OUTPUT"}
        raise ExportError(f"the fx exporter does not support program outputs of kind "
                          f"{', '.join(sorted(kinds))}; {FALLBACK_HINT}")
    output_node = next(n for n in program.graph.nodes if n.op == "output")
    out_args = output_node.args[0]
    graph_outputs = []
    taken: set[str] = set()
    fixed = {i.name for i in lowering.initializers} | set(input_names)
    lowering.region = None
    for i, (arg, v) in enumerate(zip(out_args, outputs)):
        val = lowering.meta(arg)
        if not isinstance(val, torch.Tensor) or not isinstance(v, str):
            raise ExportError(f"output {i} of the module is not a tensor the graph computes")
        if v in taken or v in fixed:
            lowering.doc = source_line(arg) if isinstance(arg, torch.fx.Node) else ""
            v = lowering.op("Identity", [v], name=f"output_{i}")
        taken.add(v)
        graph_outputs.append(_value_info(v, val))
    graph = helper.make_graph(lowering.nodes, "ortmodule_fx", graph_inputs, graph_outputs,
                              initializer=lowering.initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET),
                                                    helper.make_opsetid(OWN_DOMAIN, 1),
                                                    helper.make_opsetid("com.microsoft", 1)],
                              producer_name="ortmodule.fx")
    model.ir_version = 10
    return model, lowering.regions


def _initializer(name: str, tensor: torch.Tensor) -> onnx.TensorProto:
    t = tensor.detach().cpu().contiguous()
    if t.dtype == torch.bfloat16:
        return helper.make_tensor(name, TensorProto.BFLOAT16, list(t.shape),
                                  t.view(torch.int16).numpy().tobytes(), raw=True)
    proto = TensorProto()
    proto.name = name
    proto.data_type = onnx_dtype(t.dtype)
    proto.dims.extend(t.shape)
    proto.raw_data = t.numpy().tobytes()
    return proto


def export(module: torch.nn.Module, in_spec: _schema.Spec, tensors: list[torch.Tensor],
           verbose: bool, dynamo_when_untranslatable: bool = False,
           dynamic: bool = True, autocast: tuple[str, torch.dtype] | None = None) -> Captured:
    """Traces ``module`` (its forward under ``torch.autocast(*autocast)`` when given) and
    lowers the program with the translation table. With
    ``dynamo_when_untranslatable`` (the ``"auto"`` exporter), a program the table cannot
    lower is lowered by torch.onnx instead, from the same trace."""
    from ortmodule import _capture_dynamo

    hint = ((lambda e: _capture_dynamo._lowering_hint(e, False))
            if dynamo_when_untranslatable else (lambda e: ""))
    with trace(module, in_spec, tensors, verbose, autocast, hint=hint,
               dynamic=dynamic) as traced:
        untranslatable = None
        try:
            model, regions = lower(traced.program, traced.wrapper, traced.session.calls)
            exporter = "fx"
        except ExportError as e:
            if not dynamo_when_untranslatable:
                raise
            untranslatable = str(e).split("; " + FALLBACK_HINT)[0]
        if untranslatable is not None:
            # Outside the handler: an error of torch.onnx's lowering is reported as its own,
            # not as the fx lowering's it would otherwise chain to.
            logger.info("exporting %s: %s; lowering it with torch.onnx instead (exporter "
                        "\"dynamo\": the same graph, a slower first call)",
                        type(module).__name__, untranslatable)
            model, regions = _capture_dynamo._lower(traced.program, traced.args, verbose,
                                                    False)
            exporter = "dynamo"
    return finish(module, tensors, traced, model, regions, exporter)
