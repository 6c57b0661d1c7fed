"""Sort-, search- and histogram-based ops through ORTModule against eager, forward and
gradients: median and nanmedian (NaN, 0-d, along dims), quantile and nanquantile in every
interpolation mode, mode, searchsorted and bucketize, isin, histc and histogram,
embedding_bag, segment_reduce, antialiased interpolation, 3-D grid_sample; and the ops whose
output size depends on the values (nonzero, masked_select, boolean-mask indexing, unique),
masked_scatter."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tests.python.parity_utils import check

NAN = float("nan")


def _values(*shape: int, seed: int = 0, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Distinct values (no ties: eager's pick among equal elements is its own)."""
    g = torch.Generator().manual_seed(seed)
    n = 1
    for s in shape:
        n *= s
    return (torch.randperm(n, generator=g).to(dtype) * 0.37 - n * 0.1).reshape(shape)


def _with_nans(x: torch.Tensor, whole_slice: bool = True) -> torch.Tensor:
    x = x.clone()
    flat = x.view(-1)
    flat[::5] = NAN
    if x.dim() >= 2 and whole_slice:
        x[0] = NAN  # a slice of NaN only
    return x


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_median_nanmedian(dtype: torch.dtype) -> None:
    x = _values(4, 7, dtype=dtype)
    for fn in (torch.median, torch.nanmedian):
        check(fn, x)
        check(fn, _with_nans(x))
        check(lambda t, f=fn: f(t, 1), x)
        check(lambda t, f=fn: f(t, 0, keepdim=True), x)
        # (Which index eager's nanmedian gives for a slice of NaN only is its nth_element's.)
        check(lambda t, f=fn: f(t, 1), _with_nans(x, whole_slice=fn is torch.median))
        check(lambda t, f=fn: f(t, 0), _with_nans(x))
        check(fn, torch.tensor(2.5, dtype=dtype))
        check(lambda t, f=fn: f(t, 0, True), torch.tensor(2.5, dtype=dtype))


def test_sorting_a_0d_tensor() -> None:
    x = torch.tensor(1.5)
    check(lambda t: torch.sort(t, descending=True), x)
    check(lambda t: torch.topk(t, 1), x)
    check(lambda t: torch.kthvalue(t, 1, 0, True), x)
    check(lambda t: torch.argsort(t) + t, x)


def test_median_of_integers() -> None:
    x = torch.tensor([[5, 1, 3, 2], [7, 7, 0, -4]])
    for fn in (torch.median, torch.nanmedian):
        check(fn, x)
        check(lambda t, f=fn: f(t, 1), x)


def test_median_of_all_splits_ties() -> None:
    check(torch.median, torch.tensor([3.0, 1.0, 2.0, 2.0, 5.0, float("inf")]))
    check(torch.nanmedian, torch.tensor([NAN, 1.0, 2.0, 2.0, NAN, -float("inf")]))
    check(torch.median, torch.tensor([NAN, 1.0, NAN]))


@pytest.mark.parametrize("interpolation", ["linear", "lower", "higher", "midpoint", "nearest"])
def test_quantile(interpolation: str) -> None:
    x = _values(5, 6)
    q = torch.tensor([0.0, 0.3, 0.5, 0.9, 1.0])
    for fn in (torch.quantile, torch.nanquantile):
        check(lambda t, f=fn: f(t, q, dim=1, keepdim=True, interpolation=interpolation),
              _with_nans(x))
        check(lambda t, f=fn: f(t, 0.5, dim=1, interpolation=interpolation), _with_nans(x))
    check(lambda t: torch.quantile(t, 0.35, interpolation=interpolation), x)
    check(lambda t: torch.quantile(t, q, dim=0, interpolation=interpolation), x)
    check(lambda t: torch.nanquantile(t, q, keepdim=True, interpolation=interpolation), x)
    if interpolation == "linear":
        check(lambda t: torch.quantile(t, 0.25, dim=1, keepdim=True), x)
        check(lambda t: torch.quantile(t, 0.5), torch.tensor(1.5))
        check(lambda t: torch.quantile(t, 0.4, dim=2), _values(2, 3, 4, dtype=torch.float64))


def test_searchsorted_bucketize() -> None:
    seq = torch.tensor([-2.0, -1.0, 0.5, 0.5, 3.0, float("inf"), NAN])
    v = torch.tensor([[NAN, -float("inf"), -2.0, 0.5], [0.7, 3.0, float("inf"), 9.0]])
    for right in (False, True):
        check(lambda s, x, r=right: torch.searchsorted(s, x, right=r), seq, v)
        check(lambda x, s, r=right: torch.bucketize(x, s, right=r, out_int32=True), v, seq)
        check(lambda s, r=right: torch.searchsorted(s, 0.5, right=r), seq)
    rows = torch.tensor([[1.0, 2.0, 3.0, 3.0], [2.0, 4.0, 6.0, 8.0]])
    check(lambda s, x: torch.searchsorted(s, x, side="right"), rows,
          torch.tensor([[2.5, 3.0, 0.0], [4.0, 9.0, 1.0]]))
    unsorted = torch.tensor([[3.0, 1.0, 2.0, 3.0], [8.0, 2.0, 6.0, 4.0]])
    order = unsorted.argsort(stable=True)
    check(lambda s, x: torch.searchsorted(s, x, sorter=order), unsorted,
          torch.tensor([[2.5, 3.0, 0.0], [4.0, 9.0, 1.0]]))
    check(lambda s, x: torch.searchsorted(s, x), torch.arange(6), torch.tensor([[-1, 2, 7]]))
    check(lambda s, x: torch.searchsorted(s, x), torch.zeros(0), torch.ones(3))


def test_mode() -> None:
    x = torch.tensor([[2.0, 5.0, 5.0, 2.0, 1.0, -0.0, 0.0, 0.0], [3.0, 3.0, 1.0, 1.0, 1.0, 7.0, 3.0, 4.0]])
    check(torch.mode, x)
    check(lambda t: torch.mode(t, 0, keepdim=True), x)
    check(lambda t: torch.mode(t, 1, keepdim=True), x)
    check(lambda t: torch.mode(t, 0), torch.tensor(1.5))
    check(lambda t: torch.mode(t, 1), torch.tensor([[1, 2, 2, 9], [4, 4, 1, 1]]))
    check(lambda t: torch.mode(t, 0), torch.tensor([True, False, True]))


def test_isin() -> None:
    x = torch.tensor([[1.0, NAN, 2.0], [3.5, -0.0, 4.0]])
    test = torch.tensor([NAN, 0.0, 3.5, 9.0])
    check(lambda a, b: torch.isin(a, b), x, test)
    check(lambda a, b: torch.isin(a, b, invert=True), x, test)
    check(lambda a: torch.isin(a, 2.0), x)
    check(lambda b: torch.isin(3.5, b), test)
    check(lambda a, b: torch.isin(a, b), torch.tensor([1, 2, 3]), torch.tensor([2.0, 3.5]))
    check(lambda a, b: torch.isin(a, b), x, torch.zeros(0))


def test_histc() -> None:
    x = torch.tensor([0.0, 1.0, 2.0, 2.0, NAN, 5.0, -1.0, 10.0, 9.999, 7.3, 0.1])
    check(lambda t: torch.histc(t, bins=4, min=0, max=10), x)
    check(lambda t: torch.histc(t, bins=7, min=-0.5, max=7.25), x)
    finite = x[~x.isnan()]
    check(lambda t: torch.histc(t, bins=5), finite)
    check(lambda t: torch.histc(t, bins=3), torch.tensor([1.0, 1.0]))
    check(lambda t: torch.histc(t, bins=3), torch.zeros(0))
    check(lambda t: torch.histc(t, bins=6), _values(3, 7, dtype=torch.float64))


def test_histogram() -> None:
    # (Eager's histogram outputs require grad but have no derivative: inputs detached.)
    x = torch.tensor([[0.0, 1.0, 2.0, 2.0, NAN, 5.0], [-1.0, 10.0, 9.999, 7.3, 0.1, 0.3]])
    w = torch.rand(2, 6, generator=torch.Generator().manual_seed(3))
    finite = torch.nan_to_num(x, 4.0)
    for density in (False, True):
        edges = torch.tensor([-1.0, 0.0, 0.3, 2.0, 9.999])
        check(lambda t, d=density: torch.histogram(t.detach(), 4, range=(0.0, 10.0),
                                                   density=d), x)
        check(lambda t, d=density: torch.histogram(t.detach(), 7, density=d), finite)
        check(lambda t, d=density: torch.histogram(t.detach(), 5, range=(-0.5, 7.25),
                                                   weight=w, density=d), x)
        check(lambda t, d=density, e=edges: torch.histogram(t.detach(), e, density=d), x)
    check(lambda t: torch.histogram(t.detach(), 3), torch.tensor(2.0))
    check(lambda t: torch.histogram(t.detach(), 3), torch.zeros(0))
    check(lambda t: torch.histogram(t.detach(), 9), _values(4, 7, dtype=torch.float64) / 7)
    check(lambda t: torch.histogram(t.detach(), 13), torch.linspace(-1, 1, 50))


# ---- outputs whose size depends on the values (NonZero) ----

def test_nonzero_argwhere_masked_select() -> None:
    x = torch.tensor([[0.0, 1.0, 0.0], [2.0, NAN, -0.0]])
    check(torch.nonzero, x)
    check(torch.argwhere, x)
    check(lambda t: torch.nonzero(t).shape[0] * t, x)  # the count used as a size
    check(lambda t: torch.nonzero_static(t, size=5), x)
    check(lambda t: torch.nonzero_static(t, size=1, fill_value=7), x)
    check(torch.nonzero, torch.tensor(3.0))
    check(torch.nonzero, torch.zeros(2, 0))
    check(lambda t: torch.masked_select(t, t > 0.5), x)
    check(lambda t: torch.masked_select(t, torch.tensor([True, False, True])), x)
    check(lambda t: torch.masked_select(t, torch.tensor([[True], [False]])), x[0])
    y = torch.arange(24.0).reshape(2, 3, 4) - 10
    check(lambda t: t[t > 0.5] * 3, y)
    check(lambda t: t[:, t[0] > 0], y)
    check(lambda t: t[..., t[0, 0] > -8], y)
    g = torch.Generator().manual_seed(0)
    source = torch.randn(4, 5, generator=g)
    keep = torch.rand(3, 4, generator=g) > 0.5
    check(lambda a, s: a.masked_scatter(keep, s), torch.randn(3, 4, generator=g), source)
    check(lambda a, s: a.masked_scatter(torch.tensor([True, False, True, True]), s),
          torch.randn(3, 4, generator=g), source)


def test_unique() -> None:
    # (Eager's unique outputs require grad but have no derivative: inputs detached.)
    x = torch.tensor([3.0, 1.0, NAN, 3.0, 2.0, NAN, 1.0, -0.0, 0.0])
    for inverse in (False, True):
        for counts in (False, True):
            check(lambda t, i=inverse, c=counts: torch.unique(
                t.detach(), return_inverse=i, return_counts=c), x)
            check(lambda t, i=inverse, c=counts: torch.unique(
                t.detach(), sorted=False, return_inverse=i, return_counts=c), x.reshape(3, 3))
            check(lambda t, i=inverse, c=counts: torch.unique_consecutive(
                t.detach(), return_inverse=i, return_counts=c),
                torch.tensor([[1.0, 1.0, NAN], [NAN, 2.0, 2.0]]))
    check(lambda t: torch.unique(t.detach(), return_inverse=True, return_counts=True),
          torch.tensor(2.0))
    check(lambda t: torch.unique(t.detach(), return_inverse=True, return_counts=True),
          torch.zeros(0))
    check(lambda t: torch.unique(t, return_inverse=True, return_counts=True),
          torch.tensor([True, False, True]))
    check(lambda t: torch.unique(t, return_counts=True), torch.tensor([5, 1, 5, 2, 9, 1]))
    rows = torch.tensor([[1.0, 2.0, 1.0, 1.0, 3.0], [0.0, 5.0, 0.0, 0.0, 3.0],
                         [1.0, 1.0, 1.0, 1.0, 1.0]])
    for dim in (0, 1, -1):
        check(lambda t, d=dim: torch.unique_consecutive(
            t.detach(), return_inverse=True, return_counts=True, dim=d), rows)
        check(lambda t, d=dim: torch.unique(
            t.detach(), return_inverse=True, return_counts=True, dim=d), rows)
    check(lambda t: torch.unique(t, return_inverse=True, return_counts=True, dim=2),
          torch.randint(0, 2, (2, 3, 6), generator=torch.Generator().manual_seed(1)))


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_embedding_bag(mode: str) -> None:
    g = torch.Generator().manual_seed(0)
    weight = torch.randn(10, 4, generator=g)
    idx = torch.tensor([1, 2, 3, 1, 4, 9, 0, 2])
    offsets = torch.tensor([0, 2, 2, 5])  # an empty bag
    for pad in (None, -9):
        check(lambda w, p=pad: F.embedding_bag(idx, w, offsets, mode=mode, padding_idx=p),
              weight)
    check(lambda w: F.embedding_bag(idx, w, torch.tensor([0, 2, 2, 5, 8]), mode=mode,
                                    padding_idx=2, include_last_offset=True), weight)
    check(lambda w: F.embedding_bag(idx.reshape(2, 4), w, mode=mode), weight)
    if mode == "sum":
        psw = torch.rand(8, generator=g)
        check(lambda w, s: F.embedding_bag(idx, w, offsets, mode=mode, per_sample_weights=s),
              weight, psw)
        check(lambda w, s: F.embedding_bag(idx, w, offsets, mode=mode, per_sample_weights=s,
                                           padding_idx=2), weight, psw)


@pytest.mark.parametrize("reduce", ["sum", "mean", "max", "min", "prod"])
def test_segment_reduce(reduce: str) -> None:
    x = torch.tensor([1.0, 0.0, 3.0, -2.0, 5.0])
    lengths = torch.tensor([2, 0, 3])  # an empty segment
    for initial in (None, 2.0):
        check(lambda t, i=initial: torch.segment_reduce(t, reduce, lengths=lengths, initial=i),
              x)
    check(lambda t: torch.segment_reduce(t, reduce, offsets=torch.tensor([0, 2, 2, 5])), x)
    y = torch.randn(3, 6, 2, generator=torch.Generator().manual_seed(2))
    per_row = torch.tensor([[2, 0, 4], [1, 2, 3], [6, 0, 0]])
    offsets = torch.cat([torch.zeros(3, 1, dtype=torch.int64), per_row.cumsum(1)], 1)
    check(lambda t: torch.segment_reduce(t, reduce, lengths=per_row, axis=1, initial=1.0), y)
    check(lambda t: torch.segment_reduce(t, reduce, offsets=offsets, axis=1), y)


@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
def test_interpolate_antialias(mode: str) -> None:
    x = torch.randn(2, 3, 10, 20, generator=torch.Generator().manual_seed(0))
    for align_corners in (False, True):
        for size in ((3, 3), (13, 7)) if align_corners else ((4, 40),):
            check(lambda t, s=size, a=align_corners: F.interpolate(
                t, size=s, mode=mode, antialias=True, align_corners=a), x, rtol=1e-4)
    check(lambda t: F.interpolate(t, scale_factor=(1.7, 0.37), mode=mode, antialias=True), x,
          rtol=1e-4)


@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
def test_grid_sample_3d(mode: str) -> None:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, 4, 5, 6, generator=g)
    grid = torch.rand(2, 3, 4, 2, 3, generator=g) * 2.4 - 1.2  # some points outside
    cases = [("zeros", False), ("border", True), ("reflection", False)]
    if mode == "bilinear":
        cases.append(("reflection", True))
    for padding, align_corners in cases:
        check(lambda a, b, p=padding, c=align_corners: F.grid_sample(
            a, b, mode=mode, padding_mode=p, align_corners=c), x, grid, rtol=1e-4)
