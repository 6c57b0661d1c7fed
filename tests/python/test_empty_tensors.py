"""Tensors with no elements (an empty batch) through the engine: broadcasts, expands and
reductions of zero-size tensors, forward and input gradients against eager PyTorch."""

from __future__ import annotations

import pytest
import torch

from tests.python.parity_utils import check

CASES = {
    "expand": (lambda t: t.expand(0, 5, 4) * 1.0, [(0, 5, 1)]),
    "broadcast-mul": (lambda a, b: a * b, [(0, 5, 4), (0, 1, 4)]),
    "scalar-add": (lambda a: a + 2.0, [(0, 3)]),
    "sum-last": (lambda t: t.sum(2), [(0, 5, 4)]),
    "sum-inner": (lambda t: t.sum(1), [(0, 5)]),
    "sum-empty-dim": (lambda t: t.sum(0), [(0, 5)]),
    "reshape-sum": (lambda t, b: (t.reshape(-1, 5, 4) * b.reshape(-1, 1, 4)).sum(2),
                    [(0, 20), (0, 4)]),
    "matmul": (lambda a, w: a @ w, [(0, 3), (3, 20)]),
    "bilinear": (torch.nn.functional.bilinear, [(0, 3), (0, 4), (5, 3, 4), (5,)]),
}


@pytest.mark.parametrize("name", list(CASES))
def test_empty_batch(name: str) -> None:
    fn, shapes = CASES[name]
    gen = torch.Generator().manual_seed(0)
    check(fn, *(torch.randn(s, generator=gen) for s in shapes))
