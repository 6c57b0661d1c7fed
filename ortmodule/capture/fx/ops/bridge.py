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


def _bridge_op(lw: Lowering, node: Any, error: Exception) -> Any:
    """``node``'s op (ATen or a ``torch.library`` custom op) as a TorchCall node that calls
    it through the dispatcher, its gradient from autograd."""
    target = node.target
    refusal = bridge.bridge_refusal(target)
    if refusal:
        raise UnsupportedOp(f"{error}; it cannot run on PyTorch inside the graph either: "
                            f"{refusal}") from error
    schema = target._schema
    name = f"{schema.name}.{schema.overload_name or 'default'}"
    args, _ = registry.bind(target, node)
    inputs: list[Any] = []
    try:
        codes = [bridge.encode_argument(_lowered(lw, value, name), arg, inputs, name, _is_value)
                 for value, arg in zip(args, schema.arguments)]
    except NotImplementedError as e:
        raise UnsupportedOp(f"{error}; it cannot run on PyTorch inside the graph either: "
                            f"{e}") from error
    val = node.meta.get("val")
    many = isinstance(val, (list, tuple))
    outs = lw.op("TorchCall", [v.name for v in inputs], outputs=len(val) if many else 1,
                 domain=OWN_DOMAIN, aten_op=schema.name, aten_overload=schema.overload_name,
                 args=codes)
    if many:
        return outs if isinstance(outs, list) else [outs]
    return outs


registry.set_bridge_translation(_bridge_op)
