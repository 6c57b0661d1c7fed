"""p-norm distances: cdist (every row of x1 against every row of x2) and pdist (every pair of
rows of one input), composed from Sub, Abs, Pow and ReduceSum with eager's gradients, zero
where a distance is zero (and, for p < 1, where a coordinate difference is); p = 0 counts the
differing coordinates and passes a zero gradient; p = inf takes the largest difference, its
gradient going to every tied coordinate (InfNormTorch). cdist's Euclidean distance through a
matrix product (eager's compute_mode for more than 25 rows) follows eager's formula too.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from ortmodule.capture.common import OWN_DOMAIN
from ortmodule.capture.fx.builder import FALLBACK_HINT, Lowering, UnsupportedOp
from ortmodule.capture.fx.ops.activations import _inplace
from ortmodule.capture.fx.ops.common import _out, _scalar_tensor, aten
from ortmodule.capture.fx.registry import TABLE, register

_MM_IF_NECESSARY, _MM, _NO_MM = 0, 1, 2  # cdist's compute_mode (None: if necessary)


def _guarded(lw: Lowering, v: str, fn: Any, dtype: torch.dtype) -> str:
    """``fn(v)`` where ``v`` is not zero, 0 where it is: the gradient there is 0, not 0 times
    the infinite derivative of a power at 0."""
    zero = lw.const(0, dtype)
    at_zero = lw.op("Equal", [v, zero])
    safe = lw.op("Where", [at_zero, lw.const(1, dtype), v])
    return lw.op("Where", [at_zero, zero, fn(safe)])


def _norm(lw: Lowering, diff: str, p: float, dtype: torch.dtype) -> str:
    """The p-norm over the last axis of ``diff``, with eager's gradient."""
    if p == 0:
        # The count of differing coordinates (NaN differs); Sign carries a zero gradient,
        # as eager's.
        differs = lw.op("Abs", [lw.op("Sign", [diff])])
        differs = lw.op("Where", [lw.op("IsNaN", [diff]), lw.const(1, dtype), differs])
        return lw.op("ReduceSum", [differs, lw.ints([-1])], keepdims=0)
    magnitude = lw.op("Abs", [diff])
    if math.isinf(p):
        # The largest |difference|; eager's gradient goes to every tied coordinate in full
        # (InfNormTorch).
        extreme = lw.op("ReduceMax",
                        [lw.op("StopGradient", [magnitude], domain=OWN_DOMAIN),
                         lw.ints([-1])], keepdims=1)
        kept = lw.op("InfNormTorch", [extreme, diff], domain=OWN_DOMAIN)
        return lw.op("Squeeze", [kept, lw.ints([-1])])
    if p == 1:
        return lw.op("ReduceSum", [magnitude, lw.ints([-1])], keepdims=0)
    if p == 2:
        total = lw.op("ReduceSum", [lw.op("Mul", [diff, diff]), lw.ints([-1])], keepdims=0)
        return _guarded(lw, total, lambda s: lw.op("Sqrt", [s]), dtype)
    powered = _guarded(lw, magnitude, lambda a: lw.op("Pow", [a, lw.const(p, dtype)]), dtype)
    total = lw.op("ReduceSum", [powered, lw.ints([-1])], keepdims=0)
    return _guarded(lw, total, lambda s: lw.op("Pow", [s, lw.const(1.0 / p, dtype)]), dtype)


def _euclidean_by_matmul(lw: Lowering, a: str, b: str, rank: int, dtype: torch.dtype) -> str:
    """Eager's _euclidean_dist: |a|^2 + |b|^2 - 2 a.b as one matrix product of padded rows,
    clamped at 0, square-rooted."""
    def squares(v: str) -> str:
        return lw.op("ReduceSum", [lw.op("Mul", [v, v]), lw.ints([-1])], keepdims=1)

    def ones_like(v: str) -> str:
        return lw.op("ConstantOfShape", [lw.op("Shape", [v])], value=_scalar_tensor(1, dtype))

    a_norm, b_norm = squares(a), squares(b)
    left = lw.op("Concat", [lw.op("Mul", [a, lw.const(-2, dtype)]), a_norm, ones_like(a_norm)],
                 axis=-1)
    right = lw.op("Concat", [b, ones_like(b_norm), b_norm], axis=-1)
    right_t = lw.op("Transpose", [right], perm=[*range(rank - 2), rank - 1, rank - 2])
    product = lw.op("MatMul", [left, right_t])
    return lw.op("Sqrt", [lw.op("Max", [product, lw.const(0, dtype)])])


@register(aten.cdist.default, aten._cdist_forward.default)
def _cdist(lw: Lowering, node: Any, x1: Any, x2: Any, p: float = 2.0,
           compute_mode: Any = None) -> str:
    dtype = _out(node).dtype
    a, b = lw.tensor(x1, dtype), lw.tensor(x2, dtype)
    mode = _MM_IF_NECESSARY if compute_mode is None else int(compute_mode)
    rows = [lw.meta(x1).shape[-2], lw.meta(x2).shape[-2]]
    if p == 2 and mode != _NO_MM:
        if mode == _MM_IF_NECESSARY and not all(isinstance(r, int) for r in rows):
            raise UnsupportedOp(f"cdist over a symbolic number of rows (eager's method "
                                f"depends on it) has no fx translation; {FALLBACK_HINT}")
        if mode == _MM or any(r > 25 for r in rows):
            if lw.rank(x1) != lw.rank(x2):
                raise UnsupportedOp(f"cdist by matrix product of inputs of ranks "
                                    f"{lw.rank(x1)} and {lw.rank(x2)}; {FALLBACK_HINT}")
            return _euclidean_by_matmul(lw, a, b, lw.rank(x1), dtype)
    diff = lw.op("Sub", [lw.op("Unsqueeze", [a, lw.ints([-2])]),
                         lw.op("Unsqueeze", [b, lw.ints([-3])])])
    return _norm(lw, diff, float(p), dtype)


@register(aten.pdist.default, aten._pdist_forward.default)
def _pdist(lw: Lowering, node: Any, x: Any, p: float = 2.0) -> str:
    """Rows i < j in row-major order of the pairs: two Gathers of the rows and their
    difference's norm (each Gather's gradient adds back into its rows)."""
    dtype = _out(node).dtype
    rows = lw.meta(x).shape[0]
    if not isinstance(rows, int):
        raise UnsupportedOp(f"pdist over a symbolic number of rows has no fx translation; "
                            f"{FALLBACK_HINT}")
    first = [i for i in range(rows) for _ in range(i + 1, rows)]
    second = [j for i in range(rows) for j in range(i + 1, rows)]
    value = lw.tensor(x, dtype)
    diff = lw.op("Sub", [lw.op("Gather", [value, lw.ints(first)], axis=0),
                         lw.op("Gather", [value, lw.ints(second)], axis=0)])
    return _norm(lw, diff, float(p), dtype)


# cosine_embedding_loss's decomposition takes the square root of the magnitudes in place.
TABLE[aten.sqrt_.default] = _inplace(aten.sqrt.default)
