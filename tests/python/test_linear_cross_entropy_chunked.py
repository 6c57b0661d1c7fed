"""torch.nn.functional.linear_cross_entropy with LinearCrossEntropyOptions (the chunked
``torch_nn::`` custom ops): lowered natively (fx, no bridging) to the projection and its
cross-entropy, with eager's loss and gradients for every reduction, a bias, class weights,
ignored targets and an unbatched sample."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tests.python.parity_utils import check

Options = pytest.importorskip("torch.nn.modules.linear_cross_entropy_options")


def _lce(reduction: str, **kwargs: object):
    opts = Options.LinearCrossEntropyOptions(batch_chunk_size=2, allow_retain_graph=True)
    return lambda x, w, t: F.linear_cross_entropy(
        x, w, t, reduction=reduction, options=opts, **kwargs)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_chunked_linear_cross_entropy_matches_eager(reduction: str) -> None:
    gen = torch.Generator().manual_seed(0)
    x, w = torch.randn(6, 8, generator=gen), torch.randn(11, 8, generator=gen)
    target = torch.tensor([3, 0, 10, -100, 7, 3])
    check(_lce(reduction, ignore_index=-100), x, w, target)
    check(_lce(reduction), x, w, target.clamp(min=0))
    weight = torch.rand(11, generator=gen) + 0.5
    check(lambda x, w, t, cw: _lce(reduction, weight=cw, ignore_index=-100)(x, w, t), x, w, target, weight)
    bias = torch.randn(11, generator=gen)
    check(lambda x, w, t, b: F.linear_cross_entropy(
        x, w, t, linear_bias=b, reduction=reduction, ignore_index=-100,
        options=Options.LinearCrossEntropyOptions(batch_chunk_size=4)), x, w, target, bias)


def test_chunked_linear_cross_entropy_of_one_sample() -> None:
    gen = torch.Generator().manual_seed(1)
    x, w = torch.randn(8, generator=gen), torch.randn(5, 8, generator=gen)
    check(_lce("mean"), x, w, torch.tensor(2))
