"""Resampling: F.interpolate's ATen ops (upsample_nearest*, _upsample_nearest_exact*,
upsample_linear1d, upsample_bilinear2d, upsample_trilinear3d, upsample_bicubic2d), each as the
engine's ResizeTorch, which follows PyTorch's index and weight rules exactly (including the
1 / scale_factor that torch uses in place of in / out when scale factors were given)."""

from __future__ import annotations

from typing import Any

import torch

from ortmodule.capture.common import OWN_DOMAIN, ExportError
from ortmodule.capture.fx.builder import Lowering
from ortmodule.capture.fx.ops.common import _out, aten
from ortmodule.capture.fx.registry import register


def _resize(lw: Lowering, node: Any, x: Any, mode: str, align_corners: bool,
            factors: list[Any]) -> Any:
    """ResizeTorch of x to the node's traced output size over its trailing len(factors)
    axes; factors are the scale factors torch was given (None where none was)."""
    spatial = list(_out(node).shape[2:])
    if len(factors) != len(spatial):
        raise ExportError(f"{node.target}: {len(factors)} scale factors for "
                          f"{len(spatial)} spatial dims")
    inputs = [lw.tensor(x), lw.shape(spatial)]
    if any(f is not None for f in factors):
        inputs.append(lw.const([float(f) if f is not None else 0.0 for f in factors],
                               torch.float64))
    return lw.op("ResizeTorch", inputs, domain=OWN_DOMAIN, mode=mode,
                 align_corners=int(bool(align_corners)))


def _vec_factors(x: Any, lw: Lowering, scale_factors: Any) -> list[Any]:
    spatial = lw.rank(x) - 2
    if scale_factors is None:
        return [None] * spatial
    return [float(f) for f in scale_factors]


def _nearest(mode: str) -> tuple[Any, Any]:
    def vec(lw: Lowering, node: Any, x: Any, output_size: Any = None,
            scale_factors: Any = None) -> Any:
        return _resize(lw, node, x, mode, False, _vec_factors(x, lw, scale_factors))

    def default(lw: Lowering, node: Any, x: Any, output_size: Any, *scales: Any) -> Any:
        return _resize(lw, node, x, mode, False, list(scales))

    return vec, default


def _interpolating(mode: str) -> tuple[Any, Any]:
    def vec(lw: Lowering, node: Any, x: Any, output_size: Any = None,
            align_corners: bool = False, scale_factors: Any = None) -> Any:
        return _resize(lw, node, x, mode, align_corners, _vec_factors(x, lw, scale_factors))

    def default(lw: Lowering, node: Any, x: Any, output_size: Any, align_corners: bool,
                *scales: Any) -> Any:
        return _resize(lw, node, x, mode, align_corners, list(scales))

    return vec, default


for _mode, _ops in (("nearest", (aten.upsample_nearest1d, aten.upsample_nearest2d,
                                 aten.upsample_nearest3d)),
                    ("nearest_exact", (aten._upsample_nearest_exact1d,
                                       aten._upsample_nearest_exact2d,
                                       aten._upsample_nearest_exact3d))):
    _vec, _default = _nearest(_mode)
    for _op in _ops:
        register(_op.vec)(_vec)
        register(_op.default)(_default)

for _mode, _ops in (("linear", (aten.upsample_linear1d, aten.upsample_bilinear2d,
                                aten.upsample_trilinear3d)),
                    ("cubic", (aten.upsample_bicubic2d,))):
    _vec, _default = _interpolating(_mode)
    for _op in _ops:
        register(_op.vec)(_vec)
        register(_op.default)(_default)
