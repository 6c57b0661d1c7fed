"""The fx lowering's translation table: one entry per ATen op overload (as torch.export
records them, before decomposition), translating it into the ONNX ops the engine runs
(docs/supported_ops.md).

One entry per op overload. A translation receives the lowering, the FX node and the op's
arguments bound to its schema (FX nodes, Python numbers, lists), and returns the value of
the node: an ONNX value name, a list of them, or a Python number (integer arithmetic on
sizes that folds). In-place ops rebind the value of the tensor they modify.

This module holds the registry (``TABLE``, ``register``, ``lookup``, ``bind``); the
translations live in ``ops``, one module per op family, which register on import.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

Fn = Callable[..., Any]
TABLE: dict[Any, Fn] = {}


def bind(target: Any, node: Any) -> tuple[list[Any], dict[str, Any]]:
    """The node's arguments in schema order (defaults filled in) for an ATen overload;
    its raw arguments for other targets."""
    if not isinstance(target, torch._ops.OpOverload):
        return list(node.args), dict(node.kwargs)
    values = []
    for k, arg in enumerate(target._schema.arguments):
        if k < len(node.args):
            values.append(node.args[k])
        elif arg.name in node.kwargs:
            values.append(node.kwargs[arg.name])
        elif arg.has_default_value():
            values.append(arg.default_value)
        else:
            values.append(None)
    return values, {}


_BRIDGE: list[Fn] = []  # the translation of an op into a TorchCall bridge node


def set_bridge_translation(fn: Fn) -> None:
    """``fn(lowering, node, error)``: the node as a TorchCall that runs it on PyTorch, or
    raises (``error`` chained) where it cannot run so."""
    _BRIDGE[:] = [fn]


def bridge_translation() -> Fn | None:
    return _BRIDGE[0] if _BRIDGE else None


def lookup(target: Any) -> Fn | None:
    return TABLE.get(target)


def register(*targets: Any) -> Callable[[Fn], Fn]:
    def add(fn: Fn) -> Fn:
        for t in targets:
            TABLE[t] = fn
        return fn
    return add


def covered_ops() -> list[str]:
    """The names of the ops the fx lowering translates (for documentation and tests)."""
    return sorted(str(t) for t in TABLE)
