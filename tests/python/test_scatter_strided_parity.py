"""Scatters with reductions, strided views and the writes into them, through ORTModule against
eager PyTorch, forward and gradients: scatter_reduce / index_reduce prod, amax and amin with
and without include_self (ties shared evenly, the replaced element counted as eager counts
it, zeros in products), as_strided / as_strided_scatter (eager's gradient of the latter),
unfold, slice_scatter, diagonal_scatter, masked_scatter and the empty factories."""

from __future__ import annotations

import pytest
import torch

from ortmodule import ORTModule
from tests.python.parity_utils import FX, Apply, check

RTOL, ATOL = 1e-5, 1e-6

# Ties between the data and the updates and among the updates, zeros (one and two written to
# one element) and negative values.
DATA = torch.tensor([[1.0, 0.0, 3.0, 2.0], [2.0, 2.0, -1.0, 0.5], [4.0, -2.0, 0.0, 1.0]])
INDEX = torch.tensor([[0, 1, 0, 2], [1, 1, 0, 2], [0, 2, 2, 2]])
UPDATES = torch.tensor([[2.0, 0.0, 3.0, 2.0], [2.0, 5.0, 0.0, -3.0], [1.0, 0.0, 3.0, 2.0]])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("reduce", ["prod", "amax", "amin"])
def test_scatter_reduce(reduce: str, include_self: bool, dtype: torch.dtype) -> None:
    check(lambda x, i, s: x.scatter_reduce(0, i, s, reduce, include_self=include_self),
          DATA.to(dtype), INDEX, UPDATES.to(dtype), rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("reduce", ["prod", "amax", "amin"])
def test_index_reduce(reduce: str, include_self: bool) -> None:
    source = torch.tensor([[2.0, 0.0, 3.0, 2.0], [0.0, 5.0, 0.0, -3.0], [1.0, 0.0, 3.0, 1.0]])
    check(lambda x, i, s: x.index_reduce(0, i, s, reduce, include_self=include_self),
          DATA, torch.tensor([0, 2, 0]), source, rtol=RTOL, atol=ATOL)


def test_scatter_reduce_along_last_axis() -> None:
    x = torch.randn(3, 5, generator=torch.Generator().manual_seed(0))
    src = torch.randn(3, 4, generator=torch.Generator().manual_seed(1))
    index = torch.tensor([[0, 4, 4, 1], [2, 2, 2, 2], [3, 0, 1, 3]])
    check(lambda a, i, s: a.scatter_reduce(1, i, s, "prod", include_self=False), x, index, src,
          rtol=RTOL, atol=ATOL)


def test_as_strided() -> None:
    x = torch.randn(3, 4, generator=torch.Generator().manual_seed(2))
    check(lambda a: torch.as_strided(a, (2, 3), (1, 2), 1), x, rtol=RTOL, atol=ATOL)
    # Overlapping windows: the gradient sums over every read of an element.
    check(lambda a: torch.as_strided(a, (3, 3), (2, 1)), x, rtol=RTOL, atol=ATOL)


def test_as_strided_scatter() -> None:
    x = torch.randn(12, generator=torch.Generator().manual_seed(3))
    src = torch.randn(2, 3, generator=torch.Generator().manual_seed(4))
    check(lambda a, s: torch.as_strided_scatter(a, s, (2, 3), (4, 1), 1), x, src,
          rtol=RTOL, atol=ATOL)


def test_unfold() -> None:
    x = torch.randn(2, 7, 3, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    check(lambda a: a.unfold(1, 3, 2), x, rtol=RTOL, atol=ATOL)
    check(lambda a: a.unfold(-1, 2, 1), x, rtol=RTOL, atol=ATOL)


def test_slice_and_diagonal_scatter() -> None:
    x = torch.randn(4, 6, generator=torch.Generator().manual_seed(6))
    check(lambda a, s: torch.slice_scatter(a, s, 1, 1, None, 2), x,
          torch.randn(4, 3, generator=torch.Generator().manual_seed(7)), rtol=RTOL, atol=ATOL)
    check(lambda a, s: torch.slice_scatter(a, s, 0, -2), x,
          torch.randn(2, 6, generator=torch.Generator().manual_seed(8)), rtol=RTOL, atol=ATOL)
    check(lambda a, s: torch.diagonal_scatter(a, s, 2), x, torch.randn(4), rtol=RTOL,
          atol=ATOL)
    check(lambda a, s: torch.diagonal_scatter(a, s, -1), x, torch.randn(3), rtol=RTOL,
          atol=ATOL)


def test_masked_scatter() -> None:
    x = torch.randn(3, 4, generator=torch.Generator().manual_seed(9))
    mask = torch.tensor([True, False, True, True])  # broadcast over the rows
    src = torch.randn(4, 3, generator=torch.Generator().manual_seed(10))
    check(lambda a, s: a.masked_scatter(mask, s), x, src, rtol=RTOL, atol=ATOL)


def test_empty_factories_shape_and_dtype() -> None:
    def fn(a: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return (torch.empty_like(a), a.new_empty((2, 5)), a.new_empty_strided((3, 2), (1, 3)),
                a * 2)

    x = torch.randn(3, 4, requires_grad=True)
    got = ORTModule(Apply(fn), FX)(x)
    for g, e in zip(got, fn(x)):
        assert g.shape == e.shape and g.dtype == e.dtype
    torch.testing.assert_close(got[3], x * 2)


@pytest.mark.parametrize("p", [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, float("inf")])
def test_cdist(p: float) -> None:
    gen = torch.Generator().manual_seed(11)
    x1 = torch.randn(2, 4, 3, generator=gen, dtype=torch.float64)
    x2 = torch.randn(2, 5, 3, generator=gen, dtype=torch.float64)
    x2[0, 1] = x1[0, 2]  # a zero distance: eager's gradient there is 0
    x2[1, 0, 0] = x1[1, 0, 0]  # one coordinate equal
    x2[1, 2] = x1[1, 3] + torch.tensor([0.5, -0.5, 0.25], dtype=torch.float64)  # tied maxima
    check(lambda a, b: torch.cdist(a, b, p=p), x1, x2, rtol=RTOL, atol=ATOL)
    check(lambda a, b: torch.cdist(a, b, p=p), x1.float(), x2.float(), rtol=1e-4, atol=1e-5)


def test_cdist_by_matrix_product() -> None:
    gen = torch.Generator().manual_seed(12)
    x1, x2 = torch.randn(30, 4, generator=gen), torch.randn(6, 4, generator=gen)
    check(lambda a, b: torch.cdist(a, b), x1, x2, rtol=1e-4, atol=1e-5)
    check(lambda a, b: torch.cdist(a, b, compute_mode="use_mm_for_euclid_dist"), x1[:5], x2,
          rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("p", [0.0, 1.0, 2.0, 2.5, float("inf")])
def test_pdist(p: float) -> None:
    x = torch.randn(5, 3, generator=torch.Generator().manual_seed(13), dtype=torch.float64)
    x[3] = x[1]  # a zero distance
    check(lambda a: torch.nn.functional.pdist(a, p), x, rtol=RTOL, atol=ATOL)
    check(lambda a: torch.nn.functional.pdist(a, p), x[:1], rtol=RTOL, atol=ATOL)  # no pair


def test_adaptive_avg_pool3d() -> None:
    x = torch.randn(2, 3, 8, 7, 5, generator=torch.Generator().manual_seed(14))
    check(lambda a: torch.nn.functional.adaptive_avg_pool3d(a, (5, 3, 5)), x, rtol=1e-5,
          atol=1e-6)
    check(lambda a: torch.nn.functional.adaptive_avg_pool3d(a, (3, 7, 2)), x[0], rtol=1e-5,
          atol=1e-6)


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_embedding_losses(reduction: str) -> None:
    gen = torch.Generator().manual_seed(15)
    a, b = torch.randn(6, 4, generator=gen), torch.randn(6, 4, generator=gen)
    target = torch.tensor([1.0, -1.0, 1.0, -1.0, -1.0, 1.0])
    b[3] = -a[3]  # cosine -1: below the margin, no loss
    check(lambda x, y, t: torch.nn.functional.cosine_embedding_loss(
        x, y, t, margin=0.2, reduction=reduction), a, b, target, rtol=1e-5, atol=1e-6)
    distances = torch.tensor([[0.5, 1.5, 1.0], [2.0, 0.0, 0.99]])
    signs = torch.tensor([[1.0, -1.0, -1.0], [-1.0, 1.0, -1.0]])
    check(lambda x, t: torch.nn.functional.hinge_embedding_loss(
        x, t, margin=1.0, reduction=reduction), distances, signs, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("steps", [0, 1, 2, 7, 10])
def test_linspace_logspace_tensor_endpoints(steps: int) -> None:
    start, end = torch.tensor(-2.5), torch.tensor(3.25)
    check(lambda a, b: torch.linspace(a, b, steps), start, end, rtol=1e-6, atol=1e-6)
    check(lambda a: torch.linspace(a, 4, steps, dtype=torch.float64), torch.tensor(1),
          rtol=1e-12, atol=1e-12)
    check(lambda a, b: torch.logspace(a, b, steps, base=2.0), start, end, rtol=1e-6,
          atol=1e-6)
    check(lambda a: torch.logspace(-1.0, a, steps), end, rtol=1e-6, atol=1e-6)


def test_resize() -> None:
    # (Eager refuses to resize a tensor that requires grad.)
    x = torch.randn(4, 5, generator=torch.Generator().manual_seed(16))
    check(lambda a: (a.detach() * 1).resize_(5, 4), x, rtol=RTOL, atol=ATOL)
    check(lambda a: (a.detach() * 1).resize_(3, 2), x, rtol=RTOL, atol=ATOL)  # 6 elements
    check(lambda a, b: (a.detach() * 1).resize_as_(b), x, torch.randn(2, 10), rtol=RTOL,
          atol=ATOL)
