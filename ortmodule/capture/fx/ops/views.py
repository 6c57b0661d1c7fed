"""Reorderings and diagonals as slices: flip (Slice with step -1) and diagonal (the last two
axes flattened and sliced with stride columns + 1)."""

from __future__ import annotations

from typing import Any

from ortmodule.capture.fx.builder import FALLBACK_HINT, Lowering, UnsupportedOp
from ortmodule.capture.fx.ops.common import _axis, aten
from ortmodule.capture.fx.registry import register

_INT64_MIN = -(2**63)


@register(aten.flip.default)
def _flip(lw: Lowering, node: Any, x: Any, dims: Any) -> Any:
    rank = lw.rank(x)
    axes = [_axis(int(d), rank) for d in dims]
    if not axes:
        return lw.op("Identity", [lw.tensor(x)])
    n = len(axes)
    return lw.op("Slice", [lw.tensor(x), lw.ints([-1] * n), lw.ints([_INT64_MIN] * n),
                           lw.ints(axes), lw.ints([-1] * n)])


@register(aten.diagonal.default)
def _diagonal(lw: Lowering, node: Any, x: Any, offset: int = 0, dim1: int = 0,
              dim2: int = 1) -> Any:
    """The diagonal of axes dim1, dim2 as PyTorch's view: those axes moved last and
    flattened, every (columns + 1)-th element from the diagonal's first, the diagonal's
    length of them, appended as the last axis."""
    val = lw.meta(x)
    rank = val.dim()
    d1, d2 = _axis(dim1, rank), _axis(dim2, rank)
    rows, cols = val.shape[d1], val.shape[d2]
    if not (isinstance(rows, int) and isinstance(cols, int)):
        raise UnsupportedOp(f"diagonal over symbolic sizes has no fx translation; "
                            f"{FALLBACK_HINT}")
    rest = [a for a in range(rank) if a not in (d1, d2)]
    moved = lw.op("Transpose", [lw.tensor(x)], perm=[*rest, d1, d2])
    length = max(0, min(rows, cols - offset) if offset >= 0 else min(rows + offset, cols))
    start = offset if offset >= 0 else -offset * cols
    shape = [lw.dim(x, a) for a in rest]
    flat = lw.op("Reshape", [moved, lw.shape([*shape, rows * cols])])
    taken = lw.op("Slice", [flat, lw.ints([start]),
                            lw.ints([start + length * (cols + 1) if length else start]),
                            lw.ints([len(rest)]), lw.ints([cols + 1])])
    return taken
