"""ATen ops without a translation, lowered through their PyTorch decomposition: the op's
CompositeImplicitAutograd kernel or its ``torch._decomp`` rule, traced once on the node's
symbolic inputs (``make_fx``) into ATen ops that do have translations, and lowered in
place. Only when the decomposition holds an op that has neither does the op run on PyTorch
(``bridge``), as one node."""

from __future__ import annotations

import logging
from typing import Any

import torch
import torch.utils._pytree as pytree

from ortmodule import _C
from ortmodule.capture.common import OWN_DOMAIN
from ortmodule.capture.fx import registry
from ortmodule.capture.fx.builder import Lowering, UnsupportedOp, translate

logger = logging.getLogger("ortmodule.decompose")

_MAX_DEPTH = 3  # decompositions of decompositions
# Ops whose autograd formula is not the gradient of their decomposition: embedding scales
# by frequency (scale_grad_by_freq) in its own backward only.
_OWN_GRADIENT = {torch.ops.aten.embedding.default}


# Decompositions of ops PyTorch has none for, written in this package (``add_rule``).
_OWN_RULES: dict[Any, Any] = {}


def add_rule(op: torch._ops.OpOverload, rule: Any) -> None:
    """``rule(*args, **kwargs)``: ``op`` in ATen ops that have translations, traced as
    PyTorch's own decompositions are."""
    _OWN_RULES[op] = rule


def _decomposition_table(op: torch._ops.OpOverload) -> dict[Any, Any] | None:
    """What ``make_fx`` needs to trace ``op`` into other ops; None where PyTorch has no
    decomposition for it (the op has a kernel of its own)."""
    if op in _OWN_RULES:
        return {op: _OWN_RULES[op]}
    if op.has_kernel_for_dispatch_key(torch._C.DispatchKey.CompositeImplicitAutograd):
        return {}  # decomposes by itself as make_fx traces below autograd
    from torch._decomp import core_aten_decompositions, decomposition_table

    # Core ATen's rules give ATen ops (which have translations) where the general table's
    # reference implementations would give prims.
    rule = core_aten_decompositions().get(op) or decomposition_table.get(op)
    return {op: rule} if rule is not None else None


_GRAD_OPS: dict[tuple[str, str], bool] = {}


def _passes_requires_grad(domain: str, op_type: str) -> bool:
    """Whether the engine marks the op's outputs as requiring grad where an input does."""
    if not _GRAD_OPS:
        for row in _C.op_table():
            key = (row["domain"], row["op_type"])
            _GRAD_OPS[key] = _GRAD_OPS.get(key, False) or bool(
                row["differentiable"] or row.get("zero_gradient", False))
    return _GRAD_OPS.get(("" if domain == "ai.onnx" else domain, op_type), False)


def _eager_requires_grad(op: Any, values: list[Any], positions: list[int], spec: Any
                         ) -> list[bool] | None:
    """Which outputs of ``op`` require grad in eager PyTorch when a floating-point input
    does: the op run on the node's fake inputs under autograd, one input requiring grad at a
    time (an input the op cannot differentiate, as batch norm's running statistics, is left
    out); None if it cannot run so."""
    fake = torch._guards.detect_fake_mode([values[p] for p in positions])
    if fake is None:
        return None
    floating = [p for p in positions if values[p].is_floating_point()]
    found: list[bool] | None = None
    for grad_input in floating:
        try:
            with fake, torch.enable_grad():
                flat = list(values)
                # Not a leaf: in-place ops may write it.
                flat[grad_input] = values[grad_input].detach().requires_grad_(True).clone()
                args, kwargs = pytree.tree_unflatten(flat, spec)
                out = op(*args, **kwargs)
        except Exception as e:  # noqa: BLE001 (an input it does not differentiate)
            logger.debug("%s: input %d: %s", op, grad_input, e)
            continue
        flags = [t.requires_grad for t in pytree.tree_leaves(out) if isinstance(t, torch.Tensor)]
        found = flags if found is None else [a or b for a, b in zip(found, flags)]
    return found


def _requiring_grad(lw: Lowering, mark: tuple[int, int], inputs: list[Any]) -> set[str]:
    """The values, among those the decomposition added, that require grad in the engine
    when its floating-point inputs do."""
    req = {v for v in inputs if isinstance(v, str)}
    for n in lw.nodes[mark[0]:]:
        if any(i in req for i in n.input) and _passes_requires_grad(n.domain, n.op_type):
            req.update(n.output)
    return req


def _decompose(lw: Lowering, node: Any) -> Any:
    """``node`` lowered through its decomposition, or None (nothing added) where it has none
    or the decomposition holds an op without a translation."""
    op = node.target
    if not isinstance(op, torch._ops.OpOverload) or op.namespace != "aten":
        return None
    if lw.decomposing >= _MAX_DEPTH or op in _OWN_GRADIENT:
        return None
    table = _decomposition_table(op)
    if table is None:
        return None
    from torch.fx.experimental.proxy_tensor import make_fx

    def meta(a: Any) -> Any:
        return a.meta.get("val") if isinstance(a, torch.fx.Node) else a

    nodes, spec = pytree.tree_flatten((node.args, node.kwargs))
    values = [meta(a) for a in nodes]
    positions = [i for i, (a, v) in enumerate(zip(nodes, values))
                 if isinstance(a, torch.fx.Node) and isinstance(v, torch.Tensor)]
    if any(isinstance(a, torch.fx.Node) and k not in positions for k, a in enumerate(nodes)):
        return None  # a symbolic size among the arguments: not traced here

    def call(*tensors: torch.Tensor) -> Any:
        flat = list(values)
        for p, t in zip(positions, tensors):
            flat[p] = t
        args, kwargs = pytree.tree_unflatten(flat, spec)
        return op(*args, **kwargs)

    try:
        gm = make_fx(call, decomposition_table=table, tracing_mode="symbolic")(
            *[values[p] for p in positions])
    except Exception:  # noqa: BLE001 (no decomposition: the caller bridges or refuses)
        return None
    calls = [n for n in gm.graph.nodes if n.op == "call_function"]
    if any(n.target is op for n in calls):
        return None  # the rule gave the op back
    for n in calls:  # the decomposed ops come from the original's source line and region
        for key in ("stack_trace", "nn_module_stack", "custom"):
            if key in node.meta:
                n.meta[key] = node.meta[key]
    eager_grad = _eager_requires_grad(op, values, positions, spec)
    mark = lw.mark()
    saved = (lw.bridge, lw.fx_node, lw.doc, lw.region)
    lw.bridge = False  # an op of the decomposition without a translation: bridge the whole op
    lw.decomposing += 1
    try:
        out = translate(lw, gm.graph, [lw.value(nodes[p]) for p in positions])
    except UnsupportedOp as e:
        lw.rollback(mark)
        logger.debug("%s: its decomposition holds an op without a translation: %s", op,
                     str(e).split("; ")[0])
        return None
    finally:
        lw.bridge, lw.fx_node, lw.doc, lw.region = saved
        lw.decomposing -= 1
    outs = list(out) if isinstance(out, (list, tuple)) else [out]
    if eager_grad is not None:
        floating = [lw.value(nodes[p]) for p in positions if values[p].is_floating_point()]
        req = _requiring_grad(lw, mark, floating)
        if any(want and isinstance(o, str) and o not in req
               for want, o in zip(eager_grad, outs)):
            # The decomposition cuts a gradient path eager keeps (zero_, fill): the output
            # would not require grad. The op runs on PyTorch instead.
            lw.rollback(mark)
            logger.debug("%s: its decomposition loses requires_grad", op)
            return None
        # Outputs eager does not differentiate (batch norm's saved statistics, indices)
        # pass no gradient here either.
        outs = [lw.op("StopGradient", [o], domain=OWN_DOMAIN)
                if not want and isinstance(o, str) and o in req else o
                for want, o in zip(eager_grad, outs)] + outs[len(eager_grad):]
    return outs if isinstance(out, (list, tuple)) else outs[0]


registry.set_decomposition(_decompose)
