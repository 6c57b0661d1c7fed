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


_DECOMPOSE: list[Fn] = []  # lowers an op through its PyTorch decomposition


def set_decomposition(fn: Fn) -> None:
    """``fn(lowering, node)``: the node's value lowered through its decomposition, or None."""
    _DECOMPOSE[:] = [fn]


def decomposition() -> Fn | None:
    return _DECOMPOSE[0] if _DECOMPOSE else None


# PyTorch's alias ops, lowered as the op they alias (same arguments and results).
_ALIASES = {"multiply": "mul", "subtract": "sub", "divide": "div", "true_divide": "div",
            "absolute": "abs", "negative": "neg", "greater": "gt", "greater_equal": "ge",
            "less": "lt", "less_equal": "le", "not_equal": "ne", "clip": "clamp",
            "arccos": "acos", "arcsin": "asin", "arctan": "atan", "arctan2": "atan2",
            "arccosh": "acosh", "arcsinh": "asinh", "arctanh": "atanh", "fix": "trunc",
            "special_expit": "sigmoid", "special_erf": "erf", "special_exp2": "exp2",
            "special_expm1": "expm1", "special_log1p": "log1p", "special_round": "round",
            "special_sinc": "sinc", "special_logit": "logit", "special_xlogy": "xlogy",
            "special_log_softmax": "log_softmax", "special_softmax": "softmax",
            "special_ndtr": "ndtr", "special_i0": "i0", "special_psi": "digamma",
            "special_digamma": "digamma", "special_gammaln": "lgamma",
            "special_logsumexp": "logsumexp", "orgqr": "linalg_householder_product",
            "swapaxes": "transpose", "swapdims": "transpose", "moveaxis": "movedim",
            "concatenate": "cat", "concat": "cat", "row_stack": "vstack"}


def _alias_target(target: Any) -> Any:
    if not isinstance(target, torch._ops.OpOverload) or target.namespace != "aten":
        return None
    name = _ALIASES.get(target._schema.name.split("::", 1)[1])
    packet = getattr(torch.ops.aten, name, None) if name else None
    overload = getattr(packet, target._overloadname, None) if packet is not None else None
    if overload is None or [(a.name, str(a.type)) for a in overload._schema.arguments] != \
            [(a.name, str(a.type)) for a in target._schema.arguments]:
        return None
    return overload


def lookup(target: Any) -> Fn | None:
    fn = TABLE.get(target)
    if fn is None:
        alias = _alias_target(target)
        fn = TABLE.get(alias) if alias is not None else None
    return fn


def register(*targets: Any) -> Callable[[Fn], Fn]:
    def add(fn: Fn) -> Fn:
        for t in targets:
            TABLE[t] = fn
        return fn
    return add


def covered_ops() -> list[str]:
    """The names of the ops the fx lowering translates (for documentation and tests)."""
    return sorted(str(t) for t in TABLE)
