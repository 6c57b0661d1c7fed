"""Max pooling that returns indices (max_pool1d/2d/3d with return_indices, adaptive max
pooling in 1-D/2-D/3-D) through the fx exporter with no bridging: values, PyTorch's in-plane
indices exactly, and the input gradient against eager, including ties (the first maximum in
scan order takes the gradient), padding, dilation, ceil_mode, unbatched inputs and adaptive
windows that do not divide the input."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tests.python.parity_utils import check


def randn(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed))


def ties(*shape: int) -> torch.Tensor:
    """Few distinct values, so windows hold equal maxima."""
    return torch.randint(0, 3, shape, generator=torch.Generator().manual_seed(1)).float()


@pytest.mark.parametrize("make", [randn, ties])
@pytest.mark.parametrize("kwargs", [
    {"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True},
    {"kernel_size": 2},
    {"kernel_size": 3, "stride": 1, "padding": 1, "dilation": 2},
    {"kernel_size": (2, 3), "stride": (1, 2), "padding": (1, 0)},
])
def test_max_pool2d_with_indices(make, kwargs) -> None:
    check(lambda x: F.max_pool2d(x, return_indices=True, **kwargs), make(2, 3, 7, 8))


def test_max_pool2d_with_indices_unbatched() -> None:
    check(lambda x: F.max_pool2d(x, 3, 2, 1, return_indices=True), randn(3, 6, 5))


@pytest.mark.parametrize("make", [randn, ties])
def test_max_pool1d_and_3d_with_indices(make) -> None:
    check(lambda x: F.max_pool1d(x, 3, 2, 1, ceil_mode=True, return_indices=True),
          make(2, 3, 10))
    check(lambda x: F.max_pool1d(x, 2, return_indices=True), make(4, 9))
    check(lambda x: F.max_pool3d(x, 3, 2, 1, dilation=(1, 2, 1), return_indices=True),
          make(1, 2, 5, 7, 6))


def test_max_pool_indices_feed_max_unpool() -> None:
    def pool_unpool(x: torch.Tensor) -> torch.Tensor:
        y, idx = F.max_pool2d(x, 2, return_indices=True)
        return F.max_unpool2d(y * 2.0, idx, 2, output_size=x.shape[-2:])

    check(pool_unpool, randn(2, 2, 6, 6))


@pytest.mark.parametrize("make", [randn, ties])
@pytest.mark.parametrize("shape,out", [
    ((2, 3, 8, 8), (4, 4)),    # windows divide the input
    ((2, 3, 7, 5), (3, 2)),    # overlapping windows of two widths
    ((3, 4, 4), (2, 3)),       # unbatched
    ((1, 2, 5, 9), (5, 1)),    # one cell per row, one column window
    ((1, 1, 3, 3), (6, 4)),    # more cells than input positions
])
def test_adaptive_max_pool2d(make, shape, out) -> None:
    check(lambda x: F.adaptive_max_pool2d(x, out, return_indices=True), make(*shape))
    check(lambda x: F.adaptive_max_pool2d(x, out), make(*shape))


@pytest.mark.parametrize("make", [randn, ties])
def test_adaptive_max_pool1d_and_3d(make) -> None:
    check(lambda x: F.adaptive_max_pool1d(x, 4, return_indices=True), make(2, 3, 11))
    check(lambda x: F.adaptive_max_pool1d(x, 3, return_indices=True), make(3, 7))
    check(lambda x: F.adaptive_max_pool3d(x, (2, 3, 2), return_indices=True),
          make(1, 2, 5, 7, 4))
