"""Higher-order ops (``torch.no_grad()`` and ``torch.autocast`` regions) and bridge nodes
(``TorchCall``): bridged autograd Functions, and ops without a translation where the
lowering bridges them."""

from __future__ import annotations

from typing import Any

import torch

from ortmodule.capture import bridge
from ortmodule.capture.common import OWN_DOMAIN, ExportError
from ortmodule.capture.fx import registry
from ortmodule.capture.fx.builder import SUBMODULE_KEY, Lowering, UnsupportedOp, translate
from ortmodule.capture.fx.ops.inplace import _rebind
from ortmodule.capture.fx.registry import TABLE


def _wrap_with_set_grad_enabled(lw: Lowering, node: Any, enabled: bool, submodule: Any,
                                *args: Any) -> Any:
    """The body of a ``torch.no_grad()`` (or enable_grad) region, inlined; the region's
    outputs were detached by ``trace.mark_no_grad_regions``."""
    return _inline(lw, node, submodule, args)


def _wrap_with_autocast(lw: Lowering, node: Any, device: str, dtype: Any, enabled: bool,
                        cache_enabled: bool, submodule: Any, *args: Any) -> Any:
    """The body of a ``torch.autocast`` region, inlined; ``autocast.insert_casts`` made
    the casts autocast does explicit in it."""
    return _inline(lw, node, submodule, args)


def _inline(lw: Lowering, node: Any, submodule: Any, args: Any) -> Any:
    graph_module = node.meta.get(SUBMODULE_KEY) or getattr(lw.program.graph_module,
                                                          submodule.target)
    out = translate(lw, graph_module.graph, [lw.value(a) for a in args])
    return list(out) if isinstance(out, (list, tuple)) else out


TABLE[torch.ops.higher_order.wrap_with_set_grad_enabled] = _wrap_with_set_grad_enabled
TABLE[torch.ops.higher_order.wrap_with_autocast] = _wrap_with_autocast


def _torch_call(lw: Lowering, node: Any, callable_id: int, inputs: Any) -> Any:
    call = lw.calls.get(callable_id)
    if call is None:
        raise ExportError(f"internal: bridged call #{callable_id} is not registered")
    outs = lw.op("TorchCall", [lw.tensor(i) for i in inputs], outputs=len(call.out_positions),
                 domain=OWN_DOMAIN, callable_id=int(callable_id), callable=call.name)
    return outs if isinstance(outs, list) else [outs]


TABLE[bridge.torch_call_op()] = _torch_call


# ---- ops without a translation, run on PyTorch (FallbackPolicy.UNSUPPORTED_OP) ----

class _Value:
    """A value of the graph passed to a bridged op (a tensor, or a symbolic int)."""

    def __init__(self, name: str) -> None:
        self.name = name


def _is_value(v: Any) -> bool:
    return isinstance(v, _Value)


def _lowered(lw: Lowering, arg: Any, op: str) -> Any:
    """An argument of a bridged op with the graph's values as ``_Value``s."""
    if isinstance(arg, torch.fx.Node):
        val = lw.meta(arg)
        if isinstance(val, torch.Tensor):
            return _Value(lw.tensor(arg))
        if isinstance(val, (torch.SymInt, int)) and not isinstance(val, bool):
            v = lw.value(arg)
            return _Value(v) if isinstance(v, str) else int(v)
        if isinstance(val, (int, float, bool)):
            return lw.value(arg)
        raise UnsupportedOp(f"{op} takes {arg.name} ({type(val).__name__}), which the engine "
                            "cannot pass to PyTorch")
    if isinstance(arg, torch.SymInt):
        v = lw.sym(arg)
        return _Value(v) if isinstance(v, str) else v
    if isinstance(arg, (list, tuple)):
        return [_lowered(lw, a, op) for a in arg]
    return arg


def _as_tensor_where_typed(lw: Lowering, value: Any, arg: Any) -> Any:
    """A Python number where the schema has a Tensor (the tracer wraps numbers so, as in
    ``subtract(x, 1.0)``) as a 0-d constant, the wrapped number PyTorch would make."""
    kind = arg.type.getElementType() if isinstance(arg.type, torch._C.OptionalType) else arg.type
    if isinstance(kind, torch._C.TensorType) and isinstance(value, (bool, int, float)):
        dtype = (torch.bool if isinstance(value, bool) else
                 torch.int64 if isinstance(value, int) else torch.float64)
        return _Value(lw.const(value, dtype))
    return value


def _functional_variant(op: Any) -> Any:
    """``aten.foo`` for an in-place ``aten.foo_`` that writes only its first argument and
    returns it (uniform_, zero_, normal_, ...), where PyTorch has one with the same
    arguments; else None."""
    if not isinstance(op, torch._ops.OpOverload):
        return None
    schema = op._schema
    writes = [a for a in schema.arguments if a.alias_info is not None and a.alias_info.is_write]
    if len(writes) != 1 or writes[0] is not schema.arguments[0]:
        return None
    base = schema.name.split("::", 1)[1]
    if op == torch.ops.aten.normal_.default:
        return torch.ops.aten.normal_functional.default
    if not base.endswith("_"):
        return None
    namespace = getattr(torch.ops, schema.name.split("::", 1)[0])
    packet = getattr(namespace, base[:-1], None)
    overload = getattr(packet, op._overloadname, None) if packet is not None else None
    if overload is None:
        return None
    functional = overload._schema
    same = [(a.name, str(a.type)) for a in functional.arguments] == \
        [(a.name, str(a.type)) for a in schema.arguments]
    return overload if same and not bridge.bridge_refusal(overload) else None


def _bridge_op(lw: Lowering, node: Any, error: Exception) -> Any:
    """``node``'s op (ATen or a ``torch.library`` custom op) as a TorchCall node that calls
    it through the dispatcher, its gradient from autograd."""
    target = node.target
    functional = _functional_variant(target)
    if functional is not None:
        # x.op_(...) without a translation: the functional op on PyTorch, whose value later
        # reads of x see (as the in-place translations do).
        copy = torch.fx.Node(node.graph, node.name, "call_function", functional, node.args,
                             node.kwargs)
        copy.meta = node.meta
        out = _bridge_op(lw, copy, error)
        _rebind(lw, node.args[0], out)
        return out
    refusal = bridge.bridge_refusal(target)
    if refusal:
        raise UnsupportedOp(f"{error}; it cannot run on PyTorch inside the graph either: "
                            f"{refusal}") from error
    schema = target._schema
    name = f"{schema.name}.{schema.overload_name or 'default'}"
    args, _ = registry.bind(target, node)
    inputs: list[Any] = []
    try:
        codes = [bridge.encode_argument(_as_tensor_where_typed(lw, _lowered(lw, value, name),
                                                               arg), arg, inputs, name,
                                        _is_value)
                 for value, arg in zip(args, schema.arguments)]
    except NotImplementedError as e:
        raise UnsupportedOp(f"{error}; it cannot run on PyTorch inside the graph either: "
                            f"{e}") from error
    val = node.meta.get("val")
    many = isinstance(val, (list, tuple))
    # The node's results flattened as the bridge returns them: a Tensor[] result (as in
    # histogramdd's (hist, bin_edges)) is one output per tensor.
    counts = [len(v) if isinstance(v, (list, tuple)) else 1 for v in val] if many else [1]
    outs = lw.op("TorchCall", [v.name for v in inputs], outputs=sum(counts),
                 domain=OWN_DOMAIN, aten_op=schema.name, aten_overload=schema.overload_name,
                 args=codes)
    if not many:
        return outs
    flat = outs if isinstance(outs, list) else [outs]
    grouped: list[Any] = []
    for v, n in zip(val, counts):
        grouped.append(flat[:n] if isinstance(v, (list, tuple)) else flat[0])
        flat = flat[n:]
    return grouped


registry.set_bridge_translation(_bridge_op)
