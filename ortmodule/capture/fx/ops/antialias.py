"""F.interpolate(antialias=True) (_upsample_bilinear2d_aa, _upsample_bicubic2d_aa): eager's
separable filter, whose weights depend only on the sizes, so each spatial axis is one
constant [out, in] matrix built here with eager's support, centres and normalisation, and
the resampling is two MatMuls (their gradients are eager's, the transposed matrices)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ortmodule.capture.fx.builder import FALLBACK_HINT, Lowering, UnsupportedOp
from ortmodule.capture.fx.ops.common import _out, aten
from ortmodule.capture.fx.registry import register


def _triangle(x: float) -> float:
    x = abs(x)
    return 1.0 - x if x < 1.0 else 0.0


def _cubic(x: float) -> float:
    a = -0.5  # as eager's antialiased bicubic (PIL's)
    x = abs(x)
    if x < 1.0:
        return ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0
    if x < 2.0:
        return (((x - 5.0) * x + 8.0) * x - 4.0) * a
    return 0.0


def _scale(size_in: int, size_out: int, align_corners: bool, factor: Any) -> float:
    """Eager's area_pixel_compute_scale."""
    if align_corners:
        return (size_in - 1) / (size_out - 1) if size_out > 1 else 0.0
    return 1.0 / float(factor) if factor is not None and factor > 0 else size_in / size_out


def _weights(size_in: int, size_out: int, scale: float, interp_size: int,
             filter_fn: Any) -> np.ndarray:
    """[out, in]: row i holds output i's normalised filter taps (eager's
    _compute_weights_aa, antialiased: the filter widened by the scale when shrinking)."""
    support = interp_size * 0.5 * scale if scale >= 1.0 else interp_size * 0.5
    invscale = 1.0 / scale if scale >= 1.0 else 1.0
    max_taps = math.ceil(support) * 2 + 1
    out = np.zeros((size_out, size_in))
    for i in range(size_out):
        center = scale * (i + 0.5)
        low = max(int(center - support + 0.5), 0)
        taps = min(max(min(int(center + support + 0.5), size_in) - low, 0), max_taps)
        w = np.array([filter_fn((j + low - center + 0.5) * invscale) for j in range(taps)])
        total = w.sum()
        if total != 0.0:
            w = w / total
        out[i, low:low + taps] = w
    return out


def _antialiased(lw: Lowering, node: Any, x: Any, align_corners: bool, factors: list[Any]
                 ) -> Any:
    interp_size, filter_fn = ((2, _triangle) if "bilinear" in str(node.target)
                              else (4, _cubic))
    sizes_in = list(lw.meta(x).shape[2:])
    sizes_out = list(_out(node).shape[2:])
    if not all(isinstance(s, int) for s in sizes_in + sizes_out):
        raise UnsupportedOp(f"F.interpolate(antialias=True) with symbolic spatial sizes has "
                            f"no fx translation; {FALLBACK_HINT}")
    dtype = lw.dtype_of(x)
    (h_in, w_in), (h_out, w_out) = sizes_in, sizes_out
    rows = _weights(h_in, h_out, _scale(h_in, h_out, align_corners, factors[0]), interp_size,
                    filter_fn)
    cols = _weights(w_in, w_out, _scale(w_in, w_out, align_corners, factors[1]), interp_size,
                    filter_fn)
    y = lw.op("MatMul", [lw.tensor(x), lw.const(cols.T, dtype)])  # [N, C, H, w_out]
    return lw.op("MatMul", [lw.const(rows, dtype), y])  # [N, C, h_out, w_out]


@register(aten._upsample_bilinear2d_aa.vec, aten._upsample_bicubic2d_aa.vec)
def _antialiased_vec(lw: Lowering, node: Any, x: Any, output_size: Any, align_corners: bool,
                     scale_factors: Any) -> Any:
    factors = [None, None] if scale_factors is None else [float(f) for f in scale_factors]
    return _antialiased(lw, node, x, align_corners, factors)


@register(aten._upsample_bilinear2d_aa.default, aten._upsample_bicubic2d_aa.default)
def _antialiased_default(lw: Lowering, node: Any, x: Any, output_size: Any,
                         align_corners: bool, scales_h: Any = None, scales_w: Any = None
                         ) -> Any:
    return _antialiased(lw, node, x, align_corners, [scales_h, scales_w])
