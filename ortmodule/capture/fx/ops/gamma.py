"""The gamma family: digamma, lgamma, polygamma, mvlgamma (a sum of lgamma), erfinv,
special.ndtri, special.zeta, igamma and igammac (with their torch.special names and the
in-place methods). Each reaches an ai.ortmodule op (docs/supported_ops.md) whose gradient is eager's.
"""

from __future__ import annotations

import math
from typing import Any

from ortmodule.capture.common import OWN_DOMAIN
from ortmodule.capture.fx.builder import Lowering
from ortmodule.capture.fx.ops.common import _out, aten
from ortmodule.capture.fx.ops.inplace import _rebind
from ortmodule.capture.fx.registry import TABLE, Fn, register


def _float_input(lw: Lowering, node: Any, x: Any) -> str:
    """``x`` in the node's result dtype (integer inputs of torch's float functions)."""
    return lw.tensor(x, _out(node).dtype)


def _unary(op_type: str) -> Fn:
    def translate(lw: Lowering, node: Any, x: Any) -> Any:
        return lw.op(op_type, [_float_input(lw, node, x)], domain=OWN_DOMAIN)
    return translate


def _binary(op_type: str) -> Fn:
    def translate(lw: Lowering, node: Any, a: Any, b: Any) -> Any:
        dtype = _out(node).dtype
        return lw.op(op_type, [lw.tensor(a, dtype), lw.tensor(b, dtype)], domain=OWN_DOMAIN)
    return translate


for _targets, _op in (((aten.digamma, aten.special_digamma, aten.special_psi), "Digamma"),
                      ((aten.lgamma, aten.special_gammaln), "Lgamma"),
                      ((aten.erfinv, aten.special_erfinv), "Erfinv"),
                      ((aten.special_ndtri,), "Ndtri")):
    for _target in _targets:
        TABLE[_target.default] = _unary(_op)
for _targets, _op in (((aten.special_zeta,), "Zeta"),
                      ((aten.igamma, aten.special_gammainc), "Igamma"),
                      ((aten.igammac, aten.special_gammaincc), "Igammac")):
    for _target in _targets:
        TABLE[_target.default] = _binary(_op)
TABLE[aten.special_zeta.self_scalar] = _binary("Zeta")
TABLE[aten.special_zeta.other_scalar] = _binary("Zeta")


@register(aten.polygamma.default, aten.special_polygamma.default)
def _polygamma(lw: Lowering, node: Any, n: Any, x: Any) -> Any:
    return lw.op("Polygamma", [_float_input(lw, node, x)], domain=OWN_DOMAIN, n=int(n))


@register(aten.mvlgamma.default, aten.special_multigammaln.default)
def _mvlgamma(lw: Lowering, node: Any, x: Any, p: Any) -> Any:
    """The multivariate log-gamma function as torch computes it: p (p - 1) / 4 log(pi) +
    sum_j lgamma(x - j / 2), j = 0 .. p - 1 (the terms along a new last axis). Eager's
    check that every x exceeds (p - 1) / 2 reads values, which a graph cannot: there the
    terms are lgamma's values at those arguments."""
    p = int(p)
    dtype = _out(node).dtype
    v = _float_input(lw, node, x)
    offsets = lw.const([-0.5 * j for j in range(p - 1, -1, -1)], dtype)
    terms = lw.op("Lgamma", [lw.op("Add", [lw.op("Unsqueeze", [v, lw.ints([-1])]), offsets])],
                  domain=OWN_DOMAIN)
    total = lw.op("ReduceSum", [terms, lw.ints([-1])], keepdims=0)
    return lw.op("Add", [total, lw.const(p * (p - 1) / 4.0 * math.log(math.pi), dtype)])


def _inplace(functional: Fn) -> Fn:
    def translate(lw: Lowering, node: Any, x: Any, *rest: Any) -> Any:
        out = functional(lw, node, x, *rest)
        _rebind(lw, x, out)
        return out
    return translate


for _name in ("digamma", "lgamma", "erfinv", "igamma", "igammac", "mvlgamma"):
    TABLE[getattr(aten, _name + "_").default] = _inplace(TABLE[getattr(aten, _name).default])
# x.polygamma_(n): the functional op takes n first.
TABLE[aten.polygamma_.default] = _inplace(lambda lw, node, x, n: _polygamma(lw, node, n, x))
