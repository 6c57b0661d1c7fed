"""Max pooling that also returns where each maximum came from: ``max_pool{1,2,3}d_with_indices``
(ONNX MaxPool's Indices output) and ``adaptive_max_pool{1,2,3}d`` (a window per output cell,
reduced axis by axis).

PyTorch's indices count within each (batch, channel) plane, row-major over the spatial axes;
ONNX MaxPool's count over the whole tensor, so the plane's offset is taken off. An unbatched
input ``[C, *spatial]`` gets the batch axis PyTorch adds and removes. The gradient reaches the
input at the index of each maximum only, as eager's does (ties: the first in scan order).
"""

from __future__ import annotations

from typing import Any

import torch

from ortmodule.capture.fx.builder import FALLBACK_HINT, Lowering, UnsupportedOp
from ortmodule.capture.fx.ops.common import aten
from ortmodule.capture.fx.registry import register


def _per_dim(v: Any, spatial: int, default: list[int] | None = None) -> list[int]:
    if isinstance(v, int):
        return [int(v)] * spatial
    v = [int(a) for a in v]
    if not v and default is not None:
        return default
    return v * spatial if len(v) == 1 else v


def _spatial_sizes(lw: Lowering, x: Any, spatial: int) -> list[Any]:
    rank = lw.rank(x)
    return [lw.dim(x, k) for k in range(rank - spatial, rank)]


def _plane_size(lw: Lowering, sizes: list[Any]) -> Any:
    out: Any = 1
    for s in sizes:
        out = lw.scalar_op("Mul", out, s, lambda a, b: a * b)
    return out


def _max_pool_with_indices(lw: Lowering, x: Any, spatial: int, kernel: Any, stride: Any,
                           padding: Any, dilation: Any, ceil_mode: bool) -> list[str]:
    k = _per_dim(kernel, spatial)
    s = _per_dim(stride, spatial, default=k)
    p = _per_dim(padding, spatial)
    d = _per_dim(dilation, spatial)
    unbatched = lw.rank(x) == spatial + 1
    xv = lw.op("Unsqueeze", [lw.tensor(x), lw.ints([0])]) if unbatched else lw.tensor(x)
    y, flat = lw.op("MaxPool", [xv], outputs=2, kernel_shape=k, strides=s, pads=p + p,
                    dilations=d, ceil_mode=int(ceil_mode))
    plane = _plane_size(lw, _spatial_sizes(lw, x, spatial))
    idx = lw.op("Mod", [flat, lw.tensor(plane, torch.int64)])
    if unbatched:
        y = lw.op("Squeeze", [y, lw.ints([0])])
        idx = lw.op("Squeeze", [idx, lw.ints([0])])
    return [y, idx]


def _register_with_indices(target: Any, spatial: int) -> None:
    @register(target)
    def translate(lw: Lowering, node: Any, x: Any, kernel: Any, stride: Any = (),
                  padding: Any = 0, dilation: Any = 1, ceil_mode: bool = False) -> Any:
        return _max_pool_with_indices(lw, x, spatial, kernel, stride, padding, dilation,
                                      bool(ceil_mode))


for _target, _spatial in ((aten.max_pool2d_with_indices.default, 2),
                          (aten.max_pool3d_with_indices.default, 3)):
    _register_with_indices(_target, _spatial)
if hasattr(aten, "max_pool1d_with_indices"):
    _register_with_indices(aten.max_pool1d_with_indices.default, 1)


# ---- adaptive max pooling ----

def _adaptive_windows(size: int, out: int) -> tuple[list[list[int]], int]:
    """PyTorch's adaptive windows along one axis: cell o covers [floor(o size / out),
    ceil((o + 1) size / out)). Each padded to the longest by repeating its last position
    (a repeated position changes neither the maximum nor the first place it is met)."""
    windows = []
    for o in range(out):
        lo = (o * size) // out
        hi = -((-(o + 1) * size) // out)
        windows.append(list(range(lo, hi)))
    width = max(len(w) for w in windows)
    return [w + [w[-1]] * (width - len(w)) for w in windows], width


def _adaptive_axis(lw: Lowering, v: str, pos: str | None, axis: int, rank: int, size: int,
                   out: int, stride: int) -> tuple[str, str]:
    """Max over adaptive windows along ``axis`` (of input size ``size``) of ``v`` (rank
    ``rank``), carrying ``pos``: the flat in-plane position of each value so far (None: the
    first axis reduced). ``stride``: the in-plane stride of ``axis``."""
    windows, width = _adaptive_windows(size, out)
    taps_at = lw.ints([p for w in windows for p in w])
    shape = lw.op("Shape", [lw.op("Gather", [v, taps_at], axis=axis)])
    # [..., out * width, ...] -> [..., out, width, ...]
    head = lw.op("Slice", [shape, lw.ints([0]), lw.ints([axis])])
    tail = lw.op("Slice", [shape, lw.ints([axis + 1]), lw.ints([rank])])
    split = lw.op("Concat", [head, lw.ints([out, width]), tail], axis=0)

    def windowed(t: str) -> str:
        return lw.op("Reshape", [lw.op("Gather", [t, taps_at], axis=axis), split])

    def pick(t: str, best: str) -> str:
        return lw.op("Squeeze", [lw.op("GatherElements", [t, best], axis=axis + 1),
                                 lw.ints([axis + 1])])

    taps = windowed(v)
    best = lw.op("ArgMax", [taps], axis=axis + 1, keepdims=1, select_last_index=0)
    value = pick(taps, best)
    # Each tap's input position along ``axis``, times the axis's stride in the plane.
    table = [[p * stride for p in w] for w in windows]
    table_shape = [1] * axis + [out, width] + [1] * (rank - axis - 1)
    here_all = lw.op("Expand", [lw.op("Reshape", [lw.ints(table), lw.ints(table_shape)]),
                                split])
    if pos is not None:
        here_all = lw.op("Add", [here_all, windowed(pos)])
    return value, pick(here_all, best)


def _adaptive_max_pool(lw: Lowering, x: Any, spatial: int, output_size: Any) -> list[str]:
    rank = lw.rank(x)
    sizes = _spatial_sizes(lw, x, spatial)
    if not all(isinstance(s, int) for s in sizes):
        raise UnsupportedOp(f"adaptive_max_pool over symbolic sizes {sizes} has no fx "
                            f"translation; {FALLBACK_HINT}")
    outs = _per_dim(output_size, spatial)
    if any(o <= 0 for o in outs):
        raise UnsupportedOp(f"adaptive_max_pool to {outs}: every output size must be positive")
    strides = [1] * spatial
    for k in range(spatial - 2, -1, -1):
        strides[k] = strides[k + 1] * sizes[k + 1]
    # The last axis first: its positions start the flat index, the others add to it.
    v, pos = lw.tensor(x), None
    for k in range(spatial - 1, -1, -1):
        v, pos = _adaptive_axis(lw, v, pos, rank - spatial + k, rank, sizes[k], outs[k],
                                strides[k])
    return [v, pos]


def _register_adaptive(target: Any, spatial: int) -> None:
    @register(target)
    def translate(lw: Lowering, node: Any, x: Any, output_size: Any) -> Any:
        return _adaptive_max_pool(lw, x, spatial, output_size)


for _target, _spatial in ((aten.adaptive_max_pool2d.default, 2),
                          (aten.adaptive_max_pool3d.default, 3)):
    _register_adaptive(_target, _spatial)
if hasattr(aten, "adaptive_max_pool1d"):
    _register_adaptive(aten.adaptive_max_pool1d.default, 1)
