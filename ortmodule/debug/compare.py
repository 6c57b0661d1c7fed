"""Element-wise comparison of the engine's tensors with eager PyTorch's, and what a
difference looks like in a report (``Mismatch``)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Mismatch:
    """Where a tensor the engine computed differs from eager PyTorch's beyond the
    tolerances (``torch.isclose(got, want, rtol, atol)``)."""

    what: str  # "output 0", "gradient of 'fc.weight'", "output of tanh (aten.tanh.default)"
    count: int  # elements outside the tolerances
    numel: int
    max_abs: float
    max_rel: float
    index: tuple[int, ...]  # the element that differs most
    got: float
    want: float

    def __str__(self) -> str:
        if self.count < 0:
            return f"{self.what}: {self.index_note}"
        return (
            f"{self.what}: {self.count} of {self.numel} elements differ (max abs "
            f"{self.max_abs:.3g}, max rel {self.max_rel:.3g}); at {list(self.index)}: "
            f"engine {self.got!r}, eager {self.want!r}"
        )

    @property
    def index_note(self) -> str:
        return "shape or dtype differs" if self.count < 0 else ""


def compare(
    what: str, got: torch.Tensor | None, want: torch.Tensor | None, rtol: float, atol: float
) -> Mismatch | None:
    """None where ``got`` matches ``want``; a missing tensor (no gradient) counts as zeros."""
    if got is None and want is None:
        return None
    if got is None:
        got = torch.zeros_like(want)
    if want is None:
        want = torch.zeros_like(got)
    got = got.detach().cpu()
    want = want.detach().cpu()
    if got.shape != want.shape or got.dtype != want.dtype:
        return Mismatch(
            f"{what} (engine {got.dtype} {list(got.shape)}, eager {want.dtype} {list(want.shape)})",
            -1,
            want.numel(),
            math.inf,
            math.inf,
            (),
            math.nan,
            math.nan,
        )
    if not (got.is_floating_point() or got.is_complex()):
        bad = got != want
        if not bool(bad.any()):
            return None
        flat = int(torch.nonzero(bad.reshape(-1))[0])
        index = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), got.shape))
        return Mismatch(
            what,
            int(bad.sum()),
            got.numel(),
            math.inf,
            math.inf,
            index,
            got.reshape(-1)[flat].item(),
            want.reshape(-1)[flat].item(),
        )
    close = torch.isclose(got, want, rtol=rtol, atol=atol, equal_nan=True)
    if bool(close.all()):
        return None
    diff = (got.double() - want.double()).abs()
    diff = torch.where(close, torch.zeros_like(diff), diff.nan_to_num(math.inf))
    flat = int(diff.reshape(-1).argmax())
    index = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), got.shape))
    rel = diff / want.double().abs().clamp_min(1e-30)
    return Mismatch(
        what,
        int((~close).sum()),
        got.numel(),
        float(diff.max()),
        float(rel.max()),
        index,
        got.reshape(-1)[flat].item(),
        want.reshape(-1)[flat].item(),
    )
