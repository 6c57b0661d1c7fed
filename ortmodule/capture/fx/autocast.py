"""The casts of ``torch.autocast`` regions, made explicit for the fx lowering.

torch.export records a forward run under ``torch.autocast`` as ``wrap_with_autocast`` calls
whose bodies hold the ops as written: the casts autocast makes happen below the level
export traces at. Their node values already carry the dtypes autocast gives (float32 inputs,
a bfloat16 ``linear``); what is missing are the casts of each op's inputs. torch.onnx gets
them by tracing the whole program a second time (``run_decompositions``: two more passes of
the model under fake tensors); here each op of a region runs once on its recorded fake
inputs under the region's autocast state, a dispatch mode below autocast records the casts
autocast makes before the op, and those become ``aten._to_copy`` nodes in front of it. The
policy is torch's own, whatever its version and device.

Anything this cannot reproduce exactly is an ``UnsupportedOp`` (the ``"auto"`` exporter then
lowers the trace with torch.onnx): an op whose own decomposition is cast midway, a result
whose dtype differs from the one the trace recorded, a bridged call inside a region.
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map

from ortmodule.capture.fx.builder import SUBMODULE_KEY, UnsupportedOp, source_line
from ortmodule.capture.fx.ops import casts as fx_casts

WRAP_AUTOCAST = torch.ops.higher_order.wrap_with_autocast
WRAP_GRAD = torch.ops.higher_order.wrap_with_set_grad_enabled
_CASTS = (torch.ops.aten._to_copy.default,)  # how autocast's casts reach the dispatcher

# The autocast regions a node runs in, outermost first: (device type, dtype, enabled). An
# inner region of another device leaves the outer one in force, as in eager.
State = tuple[tuple[str, Any, bool], ...]


class _Record(TorchDispatchMode):
    """The ops dispatched below autocast, in order: (op, first argument, result, keyword
    arguments)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[Any, Any, Any, dict]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if func.namespace != "prim":  # metadata queries (prim.device) are no computation
            self.calls.append((func, args[0] if args else None, out, kwargs))
        return out


def insert_casts(graph_module: torch.fx.GraphModule) -> int:
    """Makes the casts of every autocast region of the program explicit, in place. Returns
    the casts inserted (none when an earlier lowering of the same program made them)."""
    if getattr(graph_module, "_ortmodule_casts_explicit", False):
        return 0
    inserted = _walk(graph_module, (), {})
    graph_module._ortmodule_casts_explicit = True
    return inserted


def _walk(gm: torch.fx.GraphModule, state: State, policies: dict[tuple, Any]) -> int:
    inserted = 0
    made: dict[tuple, torch.fx.Node] = {}  # (input, cast arguments) -> its cast, still valid
    for node in list(gm.graph.nodes):
        if node.op != "call_function":
            continue
        if node.target is WRAP_AUTOCAST or node.target is WRAP_GRAD:
            if node.target is WRAP_AUTOCAST:
                region = (node.args[0], node.args[1], bool(node.args[2]))
                body_state: State = (*state, region)
                sub = node.args[4]
            else:
                body_state, sub = state, node.args[1]
            body = getattr(gm, sub.target)
            node.meta[SUBMODULE_KEY] = body
            inserted += _walk(body, body_state, policies)
        elif _enabled(state):
            inserted += _cast_inputs(gm.graph, node, state, made, policies)
        if getattr(getattr(node.target, "_schema", None), "is_mutable", False):
            # An in-place op may write into any cast's source (or a view of it): casts made
            # before it serve no later op.
            made.clear()
    if inserted:
        gm.recompile()
    return inserted


def _enabled(state: State) -> bool:
    """Whether autocast is on for some device in the innermost regions."""
    on: dict[str, bool] = {}
    for device, _, enabled in state:
        on[device] = enabled
    return any(on.values())


def _probe(node: torch.fx.Node, state: State,
           replace: dict[int, Any] | None = None) -> tuple[list, Any]:
    """Runs the node's op on its inputs' recorded fake values (those ``replace`` names by
    id swapped) inside the regions of ``state`` (none: autocast off): the dispatched calls
    and the result."""
    replace = replace or {}

    def val(a: Any) -> Any:
        v = _val(a)
        return replace.get(id(v), v)

    args = tree_map(val, node.args)
    kwargs = tree_map(val, node.kwargs)
    fake = torch._guards.detect_fake_mode(tree_flatten((args, kwargs))[0])
    if fake is None:
        raise UnsupportedOp(f"autocast: {node.target} (from {_where(node)}) has no recorded "
                            "fake inputs to replay")
    record = _Record()
    with contextlib.ExitStack() as regions:
        regions.enter_context(fake)
        for device, dtype, enabled in state:
            regions.enter_context(torch.autocast(device, dtype=dtype, enabled=enabled,
                                                 cache_enabled=False))
        regions.enter_context(record)
        out = node.target(*args, **kwargs)
    return record.calls, out


def _cast_inputs(graph: torch.fx.Graph, node: torch.fx.Node, state: State,
                 made: dict[tuple, torch.fx.Node], policies: dict[tuple, Any]) -> int:
    target = node.target
    if not isinstance(target, torch._ops.OpOverload):
        return 0  # getitem, integer arithmetic on sizes: nothing autocast touches
    leaves = tree_flatten((node.args, node.kwargs))[0]
    inputs = [a for a in leaves
              if isinstance(a, torch.fx.Node) and isinstance(_val(a), torch.Tensor)]
    if not any(_val(a).is_floating_point() for a in inputs):
        return 0
    if target in fx_casts.CASTS:
        return 0  # no autocast policy names a cast
    if target.namespace == "ortmodule":
        raise UnsupportedOp(f"autocast: a bridged call (from {_where(node)}) inside an "
                            "autocast region")
    # Autocast decides by the op, the regions and its inputs' dtypes (and arguments such as
    # an explicit dtype), never by sizes: the layers of a model share one replay.
    key = (target, state, tuple(_signature(a) for a in leaves))
    policy = policies.get(key)
    if policy is None or policy[1] != _dtypes(_val(node)):
        policy = policies[key] = _replay(node, state, leaves)
    casts = policy[0]
    inserted = 0
    replace: dict[torch.fx.Node, torch.fx.Node] = {}
    for position, kwargs in casts:
        arg = leaves[position]
        cast_key = (arg, tuple(sorted(kwargs.items(), key=lambda kv: kv[0])))
        if cast_key not in made:
            made[cast_key] = _cast_node(graph, node, arg, kwargs)
            inserted += 1
        replace[arg] = made[cast_key]
    if replace:
        node.args = tree_map(lambda a: replace.get(a, a), node.args)
        node.kwargs = tree_map(lambda a: replace.get(a, a), node.kwargs)
    return inserted


def _signature(leaf: Any) -> Any:
    if isinstance(leaf, torch.fx.Node):
        v = _val(leaf)
        return (v.dtype, v.device.type) if isinstance(v, torch.Tensor) else type(v).__name__
    if isinstance(leaf, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return type(leaf).__name__
    return (type(leaf).__name__, leaf)


def _replay(node: torch.fx.Node, state: State, leaves: list
            ) -> tuple[list[tuple[int, dict]], list[torch.dtype]]:
    """The casts autocast makes before the node's op: (position of the input among the
    op's flattened arguments, the cast's arguments); and the dtypes of its results."""
    target = node.target
    position = {}
    for k, a in enumerate(leaves):
        if isinstance(a, torch.fx.Node) and isinstance(_val(a), torch.Tensor):
            position.setdefault(id(_val(a)), k)
    try:
        calls, out = _probe(node, state)
        # The casts autocast makes come first, of the op's own inputs.
        k = 0
        while k < len(calls) and calls[k][0] in _CASTS and id(calls[k][1]) in position:
            k += 1
        casts = calls[:k]
        if any(c[0] in _CASTS for c in calls[k:]):
            # More casts once the op began: its own, or autocast's inside the op's
            # decomposition, which the graph cannot hold. The op run without autocast on
            # the cast inputs tells which.
            plain, _ = _probe(node, (), {id(c[1]): c[2] for c in casts})
            if [c[0] for c in calls[k:]] != [c[0] for c in plain]:
                raise UnsupportedOp(f"autocast casts inside the decomposition of {target} "
                                    f"(from {_where(node)})")
    except UnsupportedOp:
        raise
    except Exception as e:  # the op's own checks on fake inputs: say which op
        raise UnsupportedOp(f"autocast: replaying {target} (from {_where(node)}) on fake "
                            f"inputs failed: {type(e).__name__}: {e}") from e
    _check_result(node, out)
    return [(position[id(source)], kwargs) for _, source, _, kwargs in casts], _dtypes(out)


def _cast_node(graph: torch.fx.Graph, user: torch.fx.Node, arg: torch.fx.Node,
               kwargs: dict) -> torch.fx.Node:
    """``aten._to_copy(arg, **kwargs)`` before ``user``, carrying its source line."""
    source = _val(arg)
    with source.fake_mode:
        result = torch.ops.aten._to_copy.default(source, **kwargs)
    with graph.inserting_before(user):
        cast = graph.call_function(torch.ops.aten._to_copy.default, (arg,), dict(kwargs))
    cast.meta = {k: v for k, v in user.meta.items() if k not in ("val", "tensor_meta")}
    cast.meta["val"] = result
    return cast


def _dtypes(value: Any) -> list[torch.dtype]:
    return [t.dtype for t in tree_flatten(value)[0] if isinstance(t, torch.Tensor)]


def _check_result(node: torch.fx.Node, out: Any) -> None:
    """The replayed op gives the dtypes the trace recorded, or the casts are not the ones
    the trace ran with."""
    got, want = _dtypes(out), _dtypes(_val(node))
    if got != want:
        raise UnsupportedOp(f"autocast: {node.target} (from {_where(node)}) replayed gives "
                            f"{got}, the trace recorded {want}")


def _val(a: Any) -> Any:
    return a.meta.get("val") if isinstance(a, torch.fx.Node) else a


def _where(node: torch.fx.Node) -> str:
    return source_line(node) or "an unknown line"
