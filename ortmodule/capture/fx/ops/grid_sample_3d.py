"""grid_sampler_3d (F.grid_sample of 5-D inputs), which PyTorch decomposes only in 2-D:
eager's source-index rules (unnormalised with or without align_corners, clamped to the
border or reflected) and its trilinear and nearest sampling, written in ATen ops and lowered
through the decomposition path, so its gradients for input and grid are those ops'."""

from __future__ import annotations

import torch
from torch import Tensor

from ortmodule.capture.fx.ops.common import aten
from ortmodule.capture.fx.ops.decompose import add_rule


def _reflect(coords: Tensor, twice_low: int, twice_high: int) -> Tensor:
    """coords reflected into [twice_low / 2, twice_high / 2] (bounds doubled to stay ints)."""
    if twice_low == twice_high:
        return torch.zeros_like(coords)
    low = twice_low / 2
    span = (twice_high - twice_low) / 2
    distance = (coords - low).abs()
    extra = torch.fmod(distance, span)
    flips = (distance / span).floor().to(torch.int64)
    return torch.where(flips % 2 == 0, extra + low, span + low - extra)


def _source_index(coords: Tensor, size: int, padding_mode: int, align_corners: bool
                  ) -> Tensor:
    """A grid coordinate in [-1, 1] as an input index, padded as eager's."""
    if align_corners:
        index = (coords + 1) / 2 * (size - 1)
    else:
        index = ((coords + 1) * size - 1) / 2
    if padding_mode == 1:  # border
        return torch.clamp(index, 0, size - 1)
    if padding_mode == 2:  # reflection
        if align_corners:
            index = _reflect(index, 0, 2 * (size - 1))
        else:
            index = _reflect(index, -1, 2 * size - 1)
        return torch.clamp(index, 0, size - 1)
    return index


def _grid_sampler_3d(a: Tensor, grid: Tensor, interpolation_mode: int = 0,
                     padding_mode: int = 0, align_corners: bool = False) -> Tensor:
    if interpolation_mode not in (0, 1):
        raise NotImplementedError("grid_sampler_3d: only bilinear and nearest interpolation")
    n, c, depth, height, width = a.shape
    batch = torch.arange(n, device=a.device).view(n, 1, 1, 1, 1)
    channel = torch.arange(c, device=a.device).view(1, c, 1, 1, 1)
    ix = _source_index(grid[..., 0], width, padding_mode, align_corners)
    iy = _source_index(grid[..., 1], height, padding_mode, align_corners)
    iz = _source_index(grid[..., 2], depth, padding_mode, align_corners)

    def tap(x: Tensor, y: Tensor, z: Tensor, weight: Tensor | None) -> Tensor:
        """a at (z, y, x) times weight, zero outside the input."""
        inside = ((x >= 0) & (x < width) & (y >= 0) & (y < height) & (z >= 0) & (z < depth))
        xs, ys, zs = (torch.where(inside, t, 0).to(torch.int64).unsqueeze(1)
                      for t in (x, y, z))
        value = a[batch, channel, zs, ys, xs]
        keep = inside.unsqueeze(1)
        if weight is not None:
            return torch.where(keep, value * weight.unsqueeze(1), 0)
        return torch.where(keep, value, 0)

    if interpolation_mode == 1:  # nearest, half to even as eager's nearbyint
        return tap(ix.round(), iy.round(), iz.round(), None)
    x0, y0, z0 = ix.floor(), iy.floor(), iz.floor()
    x1, y1, z1 = x0 + 1, y0 + 1, z0 + 1
    out = None
    for x, wx in ((x0, x1 - ix), (x1, ix - x0)):
        for y, wy in ((y0, y1 - iy), (y1, iy - y0)):
            for z, wz in ((z0, z1 - iz), (z1, iz - z0)):
                term = tap(x, y, z, wx * wy * wz)
                out = term if out is None else out + term
    return out


add_rule(aten.grid_sampler_3d.default, _grid_sampler_3d)
