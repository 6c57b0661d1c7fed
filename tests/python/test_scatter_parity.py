"""Writes at indices through the fx exporter with no bridging: scatter, scatter_add,
scatter_reduce, index_add/copy/fill/reduce, index_put (x[i] = v) and put, their in-place
forms, forward and input gradients against eager PyTorch. Inputs hold what the gradients must
get right: repeated indices (sums, means, ties of amax/amin that share the gradient), `src`
larger than `index`, negative indices, 0-d tensors, index tensors on non-leading and
non-adjacent dimensions, boolean masks."""

from __future__ import annotations

import pytest
import torch

from ortmodule import ORTModule
from tests.python.parity_utils import FX, check


def randn(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed))


def ints(*values: list) -> torch.Tensor:
    return torch.tensor(values[0] if len(values) == 1 else list(values), dtype=torch.int64)


IDX = ints([[0, 2, 0], [1, 1, 3], [2, 0, 2]])  # repeats in every row


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_scatter_src_value_and_add(dim: int) -> None:
    index = IDX if dim == 0 else ints([[0, 3, 1], [2, 2, 0], [3, 1, 0]])
    # Distinct targets per row/column: scatter's result with repeats is unspecified.
    distinct = ints([[0, 2, 3], [1, 0, 2], [3, 1, 0]]) if dim == 0 else \
        ints([[0, 3, 1], [2, 1, 0], [3, 2, 1]])
    check(lambda x, i, s: torch.scatter(x, dim, i, s), randn(4, 4), distinct,
          randn(3, 3, seed=1))
    check(lambda x, i: torch.scatter(x, dim, i, 2.5), randn(4, 4), index)
    check(lambda x, i, s: torch.scatter_add(x, dim, i, s), randn(4, 4), index,
          randn(3, 3, seed=1))


def test_scatter_src_larger_than_index() -> None:
    # Eager's backward gives such a src a gradient of index's shape (an autograd error):
    # src is a constant here.
    src = randn(3, 4, seed=2)
    check(lambda x, i: x.scatter_add(1, i, src), randn(3, 5), ints([[0, 4], [1, 1]]))
    check(lambda x, i: x.scatter(0, i, src), randn(3, 5), ints([[0, 2, 1], [1, 0, 2]]))


@pytest.mark.parametrize("reduce", ["sum", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
def test_scatter_reduce(reduce: str, include_self: bool) -> None:
    x = randn(3, 4)
    src = randn(3, 3, seed=3)
    # Ties with the updates and with x: the gradient is shared among equal values.
    src[0, 0] = src[0, 2] = 5.0 if reduce == "amax" else -5.0
    src[1, 0] = x[1, 1]
    def fn(a: torch.Tensor, i: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        return a.scatter_reduce(1, i, s, reduce, include_self=include_self)

    index = ints([[0, 2, 0], [1, 1, 3], [2, 0, 2]])
    # (amax/amin without include_self: eager's gradient also counts the replaced element
    # when it equals the result, as ScatterReduceTorch's.)
    check(fn, x, index, src)


def test_scatter_reduce_0d() -> None:
    check(lambda a, i, s: a.scatter_reduce(0, i, s, "sum"), torch.tensor(1.5),
          torch.tensor(0), torch.tensor(-2.0))


def test_scatter_reduce_integer_amax() -> None:
    check(lambda a, i, s: a.scatter_reduce(0, i, s, "amax"), ints([1, 5, -3]),
          ints([2, 0, 2, 1]), ints([7, 2, -9, 5]))


@pytest.mark.parametrize("dim", [0, 1])
def test_index_add_copy_fill(dim: int) -> None:
    x = randn(4, 3)
    index = ints([2, 0, 2]) if dim == 0 else ints([1, 2])
    src = randn(3, 3, seed=4) if dim == 0 else randn(4, 2, seed=4)
    check(lambda a, i, s: a.index_add(dim, i, s, alpha=0.5), x, index, src)
    copy_index = ints([3, 0, 1]) if dim == 0 else ints([2, 0])
    check(lambda a, i, s: a.index_copy(dim, i, s), x, copy_index, src)
    check(lambda a, i: a.index_fill(dim, i, -1.25), x, index)
    check(lambda a, i, v: a.index_fill(dim, i, v), x, index, torch.tensor(0.75))


@pytest.mark.parametrize("reduce", ["mean", "amax", "amin"])
def test_index_reduce(reduce: str) -> None:
    check(lambda a, i, s: a.index_reduce(0, i, s, reduce), randn(4, 3), ints([2, 0, 2, 3]),
          randn(4, 3, seed=5))


def test_index_put_leading_and_accumulate() -> None:
    x = randn(4, 5)
    rows, cols = ints([0, 2, -1]), ints([1, 4, 0])
    check(lambda a, r, c, v: torch.index_put(a, (r, c), v), x, rows, cols, randn(3, seed=6))
    check(lambda a, r, v: torch.index_put(a, (r,), v, accumulate=True), x,
          ints([1, 3, 1]), randn(3, 5, seed=6))
    # Broadcast index tensors and a broadcast value.
    check(lambda a, r, c, v: torch.index_put(a, (r, c), v, accumulate=True), x,
          ints([[0], [2]]), ints([[1, 3, 3]]), randn(1, 3, seed=7))


def test_index_put_inner_and_separated_dims() -> None:
    x = randn(2, 5, 3, 4)

    def inner(a: torch.Tensor, i: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        b = a * 1
        b[:, i] = v  # the index on dimension 1: values [2, len(i), 3, 4]
        return b

    check(inner, x, ints([4, 0, 2]), randn(2, 3, 3, 4, seed=8))

    def adjacent(a: torch.Tensor, i: torch.Tensor, j: torch.Tensor,
                 v: torch.Tensor) -> torch.Tensor:
        b = a * 1
        b[:, i, j] = v  # indices on 1 and 2: values [2, 3, 4]
        return b

    check(adjacent, x, ints([4, 0, 2]), ints([1, 2, 0]), randn(2, 3, 4, seed=9))

    def separated(a: torch.Tensor, i: torch.Tensor, j: torch.Tensor,
                  v: torch.Tensor) -> torch.Tensor:
        b = a * 1
        b[i, :, j] += v  # indices on 0 and 2: the index shape leads the values, [2, 5, 4]
        return b

    check(separated, x, ints([1, 0]), ints([2, 2]), randn(2, 5, 4, seed=10))


def test_masked_assignment() -> None:
    x = randn(3, 4)

    def masked(a: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        b = a * 2
        b[a > 0] = v
        return b

    check(masked, x, torch.tensor(-0.5))

    def rows(a: torch.Tensor) -> torch.Tensor:
        b = a.clone()
        b.index_put_((a[:, 0] > 0,), torch.tensor(3.0), accumulate=True)
        return b

    check(rows, x)

    def row_value(a: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        b = a * 1
        b[a[:, 1] > 0] = v  # v: one row for every selected row; its gradient sums them
        return b

    check(row_value, x, randn(4, seed=13))


def test_index_reads_on_inner_and_separated_dims() -> None:
    """The reads the writes above pair with: x[:, i, j] and x[i, :, j]."""
    x = randn(2, 5, 3, 4)
    check(lambda a, i, j: a[:, i, j], x, ints([4, 0, 2]), ints([[1], [2]]))
    check(lambda a, i, j: a[i, :, j], x, ints([1, 0, 1]), ints([2, 2, 0]))
    check(lambda a, i, j: a[:, :, i, j], x, ints([0, 2]), ints([3, -1]))


def test_put_and_in_place_forms() -> None:
    check(lambda a, i, s: a.put(i, s, accumulate=True), randn(3, 4), ints([0, 11, -1, 0]),
          randn(4, seed=11))

    def in_place(a: torch.Tensor, i: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        b = a * 1
        b.scatter_add_(0, i, s)
        b.index_add_(1, i[0, :2], s[:, :2])
        b.index_fill_(0, i[1, :1], 0.0)
        return b

    check(in_place, randn(3, 3), ints([[0, 2, 0], [1, 1, 2], [2, 0, 1]]), randn(3, 3, seed=12))


def test_kv_cache_style_buffer_update_trains() -> None:
    """A buffer written at positions each step (as a KV cache), read by what follows."""

    class Cache(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.proj = torch.nn.Linear(4, 4)
            self.register_buffer("cache", torch.zeros(6, 4))

        def forward(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
            self.cache.index_copy_(0, pos, self.proj(x).detach())
            return (self.proj(x) * self.cache[pos]).sum() + self.cache.sum()

    torch.manual_seed(0)
    eager = Cache()
    ort_model = Cache()
    ort_model.load_state_dict(eager.state_dict())
    ort = ORTModule(ort_model, FX)
    for step in range(3):
        x, pos = randn(2, 4, seed=20 + step), ints([step, step + 2])
        e, o = eager(x, pos), ort(x, pos)
        torch.testing.assert_close(o, e, rtol=1e-5, atol=1e-5)
        e.backward()
        o.backward()
    torch.testing.assert_close(ort_model.cache, eager.cache, rtol=1e-5, atol=1e-5)
    for (n, a), b in zip(eager.named_parameters(), ort_model.parameters()):
        torch.testing.assert_close(b.grad, a.grad, rtol=1e-5, atol=1e-5, msg=n)

