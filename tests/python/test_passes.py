"""Graph passes must never change what a model computes: models whose nodes differ only in
details that are easy to lose (float attributes equal to 6 significant digits) give eager's
results."""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import nn

from ortmodule import ORTModule

# float32 neighbours just above 1: both print as 1 with 6 significant digits.
SLOPE_A = 1.0 + 2.0**-23
SLOPE_B = 1.0 + 2.0**-22


class TwoSlopes(nn.Module):
    """The difference of two LeakyReLUs over the same input, scaled so that it is visible:
    zero if the two nodes were wrongly merged, about the negative inputs otherwise."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc(x)
        return (F.leaky_relu(h, SLOPE_A) - F.leaky_relu(h, SLOPE_B)) * 2.0**23


def test_nodes_differing_in_a_float_attribute_past_six_digits_are_not_merged() -> None:
    torch.manual_seed(0)
    eager = TwoSlopes().double()
    ort = ORTModule(copy.deepcopy(eager))
    x = torch.randn(6, 4, dtype=torch.float64)
    expected, actual = eager(x), ort(x)
    assert expected.abs().max() > 0.1  # the model sees the difference
    torch.testing.assert_close(actual, expected, rtol=1e-7, atol=1e-9)
    expected.square().sum().backward()
    actual.square().sum().backward()
    for (name, p), q in zip(ort.named_parameters(), eager.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-7, atol=1e-9, msg=name)
