"""The ONNX graph the fx lowering writes (``Lowering``) and the walk over an FX graph that
fills it (``translate``), one translation per node from the registry.

An op without a translation (or a translation that refuses a case, raising
``UnsupportedOp``) is an ``UnsupportedOp`` naming the op and the source line, or, where the
lowering bridges (``Lowering.bridge``: ``FallbackPolicy.UNSUPPORTED_OP``), a TorchCall node
that runs the op on PyTorch (``registry.bridge_translation``).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import onnx
import sympy
import torch
from onnx import TensorProto, helper, numpy_helper

from ortmodule.capture.common import PREFIX, REGION_KEY, ExportError, fx_source_line
from ortmodule.capture.fx import registry

ONNX_DTYPES: dict[torch.dtype, int] = {
    torch.float32: TensorProto.FLOAT, torch.float64: TensorProto.DOUBLE,
    torch.float16: TensorProto.FLOAT16, torch.bfloat16: TensorProto.BFLOAT16,
    torch.int64: TensorProto.INT64, torch.int32: TensorProto.INT32,
    torch.int16: TensorProto.INT16, torch.int8: TensorProto.INT8,
    torch.uint8: TensorProto.UINT8, torch.bool: TensorProto.BOOL,
}

SUBMODULE_KEY = "ortmodule_submodule"  # node.meta: the body of a higher-order op (autocast)
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
    where = fx_source_line(node)
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
        self.bridge = False  # untranslatable ops become TorchCall nodes
        self.bridged: list[tuple[str, str, str]] = []  # (op, source line, why) per bridge
        self.bridged_results: dict[torch.fx.Node, list[str]] = {}  # ops bridged for a result
        self.decomposing = 0  # depth of decompositions being lowered

    # ---- undoing a translation that gave up half way ----

    def mark(self) -> tuple[int, int]:
        return len(self.nodes), len(self.initializers)

    def rollback(self, mark: tuple[int, int]) -> None:
        """Drops the nodes and initializers added since ``mark`` and what refers to them."""
        nodes, initializers = mark
        dropped = {o for n in self.nodes[nodes:] for o in n.output}
        dropped |= {t.name for t in self.initializers[initializers:]}
        del self.nodes[nodes:]
        del self.initializers[initializers:]
        self.consts = {k: v for k, v in self.consts.items() if v not in dropped}
        self.symbols = {k: v for k, v in self.symbols.items() if v not in dropped}

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
            node.metadata_props.add(key=REGION_KEY, value=str(self.region))
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


def translate(lowering: Lowering, graph: torch.fx.Graph, inputs: list[Any] | None) -> Any:
    """Lowers ``graph``'s call nodes; placeholders take ``inputs`` (a subgraph) or are
    already bound. Returns the values of the output node's arguments."""
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
        lowering.region = custom.get(REGION_KEY)
        target = node.target
        fn = registry.lookup(target)
        if fn is None:
            where = lowering.doc or "an unknown line"
            error = UnsupportedOp(f"the fx exporter has no translation for {target} (from "
                                  f"{where}); {FALLBACK_HINT}")
            lowering.env[node] = _bridge_or_raise(lowering, node, error, "it has no translation")
            continue
        args, kwargs = registry.bind(target, node)
        mark = lowering.mark()
        try:
            lowering.env[node] = fn(lowering, node, *args, **kwargs)
        except UnsupportedOp as e:
            lowering.rollback(mark)
            lowering.env[node] = _bridge_or_raise(lowering, node, e, str(e).split("; ")[0])
        except ExportError:
            raise
        except Exception as e:
            if lowering.bridge and registry.bridge_translation() is not None:
                # A case the translation does not handle (its bug): the op runs on PyTorch,
                # and the warning listing bridged ops says why.
                lowering.rollback(mark)
                lowering.env[node] = _bridge_or_raise(
                    lowering, node, UnsupportedOp(f"{target}: {type(e).__name__}: {e}"),
                    f"its translation failed ({type(e).__name__}: {e})")
                continue
            raise ExportError(
                f"the fx exporter could not lower {target} (from "
                f"{lowering.doc or 'an unknown line'}): {type(e).__name__}: {e}; "
                f"{FALLBACK_HINT}") from e
    raise ExportError("internal: the graph has no output node")


def _bridge_or_raise(lowering: Lowering, node: torch.fx.Node, error: UnsupportedOp,
                     why: str) -> Any:
    """The node lowered through its PyTorch decomposition where it has one whose ops all
    have translations; else a TorchCall bridge where the lowering bridges and the op can be
    bridged; else ``error``."""
    decompose = registry.decomposition()
    if decompose is not None:
        value = decompose(lowering, node)
        if value is not None:
            return value
    translation = registry.bridge_translation()
    if not lowering.bridge or translation is None:
        raise error
    value = translation(lowering, node, error)
    lowering.bridged.append((str(node.target), lowering.doc, why))
    return value

