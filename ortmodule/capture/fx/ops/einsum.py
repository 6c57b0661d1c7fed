"""torch.einsum as Transpose / Reshape / MatMul / Mul / ReduceSum: repeated labels of one
operand become diagonals (a product with an identity mask, summed), labels no later operand
or the output needs are summed out, operands are contracted pairwise from the left (a
batched MatMul over [batch..., kept of A, contracted] x [batch..., contracted, kept of B], or
a broadcasting Mul where nothing is contracted), and the result is permuted to the output's
labels. Dims of size 1 broadcast against the same label's size elsewhere, as in eager.
Gradients come from those ops.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ortmodule.capture.common import ExportError
from ortmodule.capture.fx.builder import FALLBACK_HINT, Lowering, onnx_dtype
from ortmodule.capture.fx.ops.common import _out, aten
from ortmodule.capture.fx.registry import register


@dataclass
class Operand:
    value: str
    labels: list[str]
    sizes: list[Any]  # ints or SymInts, one per label


def _is_one(size: Any) -> bool:
    return isinstance(size, int) and size == 1


def parse(equation: str, ranks: list[int]) -> tuple[list[list[str]], list[str]]:
    """The labels of every operand and of the output; the dims an ellipsis covers are
    labels "...k", right-aligned across operands as broadcasting aligns them."""
    equation = equation.replace(" ", "")
    lhs, arrow, rhs = equation.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ranks):
        raise ExportError(f"einsum equation {equation!r} names {len(terms)} operands, "
                          f"not the {len(ranks)} given")
    ellipsis = max((rank - (len(t) - 3) for t, rank in zip(terms, ranks) if "..." in t),
                   default=0)

    def labels(term: str, covered: int) -> list[str]:
        head, dots, tail = term.partition("...")
        middle = [f"...{ellipsis - covered + k}" for k in range(covered)] if dots else []
        return list(head) + middle + list(tail)

    inputs = []
    for term, rank in zip(terms, ranks):
        covered = rank - (len(term) - 3) if "..." in term else 0
        inputs.append(labels(term, covered))
        if len(inputs[-1]) != rank:
            raise ExportError(f"einsum term {term!r} does not match an operand of rank {rank}")
    if arrow:
        output = labels(rhs, ellipsis)
    else:  # implicit: the ellipsis dims, then the labels seen once, alphabetically
        counts: dict[str, int] = {}
        for term in inputs:
            for label in term:
                counts[label] = counts.get(label, 0) + 1
        output = [f"...{k}" for k in range(ellipsis)] + sorted(
            label for label, n in counts.items() if n == 1 and not label.startswith("..."))
    return inputs, output


def _sum_out(lw: Lowering, op: Operand, drop: set[str]) -> Operand:
    axes = [k for k, label in enumerate(op.labels) if label in drop]
    if not axes:
        return op
    value = lw.op("ReduceSum", [op.value, lw.ints(axes)], keepdims=0)
    keep = [k for k in range(len(op.labels)) if k not in axes]
    return Operand(value, [op.labels[k] for k in keep], [op.sizes[k] for k in keep])


def _permute(lw: Lowering, op: Operand, labels: list[str]) -> Operand:
    perm = [op.labels.index(label) for label in labels]
    if perm == list(range(len(perm))):
        return op
    return Operand(lw.op("Transpose", [op.value], perm=perm), labels,
                   [op.sizes[k] for k in perm])


def _diagonals(lw: Lowering, op: Operand, dtype: torch.dtype) -> Operand:
    """Each label repeated within the operand reduced to its diagonal."""
    while True:
        seen: dict[str, int] = {}
        pair = None
        for k, label in enumerate(op.labels):
            if label in seen:
                pair = (seen[label], k)
                break
            seen[label] = k
        if pair is None:
            return op
        p, q = pair
        n = op.sizes[p]
        rank = len(op.labels)
        if isinstance(n, int):
            shape = [1] * rank
            shape[p] = shape[q] = n
            mask = lw.const(np.eye(n).reshape(shape).tolist(), dtype)
        else:
            steps = lw.op("Range", [lw.const(0, torch.int64), lw.tensor(lw.sym(n), torch.int64),
                                    lw.const(1, torch.int64)])
            eye = lw.op("Equal", [lw.op("Unsqueeze", [steps, lw.ints([1])]),
                                  lw.op("Unsqueeze", [steps, lw.ints([0])])])
            mask = lw.op("Cast", [eye], to=onnx_dtype(dtype))
            others = [k for k in range(rank) if k not in (p, q)]
            if others:
                mask = lw.op("Unsqueeze", [mask, lw.ints(others)])
        value = lw.op("ReduceSum", [lw.op("Mul", [op.value, mask]), lw.ints([q])], keepdims=0)
        keep = [k for k in range(rank) if k != q]
        op = Operand(value, [op.labels[k] for k in keep], [op.sizes[k] for k in keep])


def _product(sizes: list[Any]) -> Any:
    out: Any = 1
    for s in sizes:
        out = out * s
    return out


def _contract(lw: Lowering, a: Operand, b: Operand, keep: set[str]) -> Operand:
    """a and b combined over their shared labels: summed unless ``keep`` holds them."""
    shared = [label for label in a.labels if label in b.labels]
    batch = [label for label in shared if label in keep]
    summed = [label for label in shared if label not in keep]
    # A summed label of size 1 on one side: sum the other side's first (then both are 1).
    for label in summed:
        sa, sb = a.sizes[a.labels.index(label)], b.sizes[b.labels.index(label)]
        if _is_one(sa) and not _is_one(sb):
            b = _sum_keep(lw, b, label)
        elif _is_one(sb) and not _is_one(sa):
            a = _sum_keep(lw, a, label)
    a_only = [label for label in a.labels if label not in shared]
    b_only = [label for label in b.labels if label not in shared]
    size = {**dict(zip(b.labels, b.sizes)), **dict(zip(a.labels, a.sizes))}
    batch_sizes = []
    for label in batch:
        sa, sb = a.sizes[a.labels.index(label)], b.sizes[b.labels.index(label)]
        batch_sizes.append(sb if _is_one(sa) else sa)
    labels = batch + a_only + b_only
    sizes = batch_sizes + [size[label] for label in a_only] + [
        b.sizes[b.labels.index(label)] for label in b_only]
    if not summed:  # a broadcasting product: a as [batch, a_only, 1...], b as [batch, 1..., b_only]
        a = _permute(lw, a, batch + a_only)
        b = _permute(lw, b, batch + b_only)
        bv = b.value
        if a_only and b_only:
            bv = lw.op("Unsqueeze", [bv, lw.ints(list(range(len(batch),
                                                                len(batch) + len(a_only))))])
        av = a.value
        if b_only:
            start = len(batch) + len(a_only)
            av = lw.op("Unsqueeze", [av, lw.ints(list(range(start, start + len(b_only))))])
        return Operand(lw.op("Mul", [av, bv]), labels, sizes)
    a = _permute(lw, a, batch + a_only + summed)
    b = _permute(lw, b, batch + summed + b_only)
    a_batch, b_batch = a.sizes[:len(batch)], b.sizes[:len(batch)]
    k = _product(a.sizes[len(batch) + len(a_only):])
    m = _product(a.sizes[len(batch):len(batch) + len(a_only)])
    n = _product(b.sizes[len(batch) + len(summed):])
    av = lw.op("Reshape", [a.value, lw.shape(list(a_batch) + [m, k])])
    bv = lw.op("Reshape", [b.value, lw.shape(list(b_batch) + [k, n])])
    product = lw.op("MatMul", [av, bv])
    return Operand(lw.op("Reshape", [product, lw.shape(sizes)]), labels, sizes)


def _sum_keep(lw: Lowering, op: Operand, label: str) -> Operand:
    axis = op.labels.index(label)
    value = lw.op("ReduceSum", [op.value, lw.ints([axis])], keepdims=1)
    sizes = list(op.sizes)
    sizes[axis] = 1
    return Operand(value, op.labels, sizes)


@register(aten.einsum.default)
def _einsum(lw: Lowering, node: Any, equation: str, tensors: Any, path: Any = None) -> Any:
    dtype = _out(node).dtype
    if not dtype.is_floating_point:
        raise ExportError(f"einsum of {dtype} operands has no fx translation; {FALLBACK_HINT}")
    ranks = [lw.rank(t) for t in tensors]
    terms, output = parse(equation, ranks)
    operands = []
    for t, labels in zip(tensors, terms):
        sizes = list(lw.meta(t).shape)
        operands.append(_diagonals(lw, Operand(lw.tensor(t, dtype), labels, sizes), dtype))
    if len(set(output)) != len(output):
        raise ExportError(f"einsum output {equation!r} repeats a label")

    def needed(later: list[Operand]) -> set[str]:
        return set(output).union(*(set(o.labels) for o in later))

    current = _sum_out(lw, operands[0], set(operands[0].labels) - needed(operands[1:]))
    for k in range(1, len(operands)):
        later = operands[k + 1:]
        other = _sum_out(lw, operands[k],
                         set(operands[k].labels) - needed(later) - set(current.labels))
        current = _contract(lw, current, other, needed(later))
        current = _sum_out(lw, current, set(current.labels) - needed(later))
    current = _sum_out(lw, current, set(current.labels) - set(output))
    return _permute(lw, current, output).value
