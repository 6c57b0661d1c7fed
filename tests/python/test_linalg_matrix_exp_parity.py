"""torch.linalg.matrix_exp (and torch.matrix_exp) through the fx exporter with no bridging,
against eager PyTorch, forward and input gradients, float32 and float64: batches, matrices
whose 1-norm picks each Pade degree, large norms (scaling and squaring), 1 x 1 and 0 x 0
matrices and empty batches; the gradient also against finite differences in float64."""

from __future__ import annotations

import pytest
import torch

from ortmodule import ORTModule
from tests.python.parity_utils import FX, Apply, check

DTYPES = [torch.float32, torch.float64]
TOL = {torch.float32: {"rtol": 1e-4, "atol": 1e-5}, torch.float64: {"rtol": 1e-7, "atol": 1e-7}}


def with_norm(norm: float, *shape: int, dtype: torch.dtype, seed: int = 0) -> torch.Tensor:
    """Random matrices, each scaled to 1-norm ``norm``."""
    a = torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    a = a * (norm / a.abs().sum(-2).amax(-1))[..., None, None]
    return a.to(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_batched_matrix_exp(dtype: torch.dtype) -> None:
    check(lambda a, b: (torch.linalg.matrix_exp(a), torch.matrix_exp(b)),
          with_norm(1.5, 2, 3, 4, 4, dtype=dtype), with_norm(0.3, 5, 5, dtype=dtype),
          **TOL[dtype])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("norm", [1e-3, 0.1, 0.5, 1.5, 4.0])
def test_each_pade_degree(dtype: torch.dtype, norm: float) -> None:
    check(torch.linalg.matrix_exp, with_norm(norm, 3, 6, 6, dtype=dtype, seed=1), **TOL[dtype])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("norm", [12.0, 60.0])
def test_large_norms_square_the_scaled_exponential(dtype: torch.dtype, norm: float) -> None:
    """Norms past Higham's theta_13 (about 5.37): exp(A / 2^s) squared s times (s = 2, 4).
    Skew-symmetric parts keep the exponential's entries moderate, as rotations are."""
    a = with_norm(norm, 2, 4, 4, dtype=torch.float64, seed=2)
    a = (a - a.mT) * 0.5 + torch.eye(4, dtype=torch.float64) * 0.1
    check(torch.linalg.matrix_exp, a.to(dtype), **TOL[dtype])


@pytest.mark.parametrize("dtype", DTYPES)
def test_tiny_and_empty_matrices_as_eager(dtype: torch.dtype) -> None:
    check(lambda a, b, c: (torch.linalg.matrix_exp(a), torch.linalg.matrix_exp(b),
                           torch.linalg.matrix_exp(c)),
          with_norm(0.7, 3, 1, 1, dtype=dtype), torch.zeros(2, 0, 0, dtype=dtype),
          torch.zeros(0, 3, 3, dtype=dtype), **TOL[dtype])


@pytest.mark.parametrize("dtype", DTYPES)
def test_non_finite_entries_as_eager(dtype: torch.dtype) -> None:
    """1 x 1: the scalar exponential (inf, 0, overflow to inf); larger: NaN everywhere."""
    inf = float("inf")
    check(lambda a, b: (torch.linalg.matrix_exp(a.detach()), torch.linalg.matrix_exp(b.detach())),
          torch.tensor([[[inf]], [[-inf]], [[800.0]], [[-3.0]]], dtype=dtype),
          torch.tensor([[[inf, 0.0], [0.0, 1.0]], [[float("nan"), 0.0], [0.0, 1.0]]],
                       dtype=dtype), **TOL[dtype])


def test_gradient_against_finite_differences() -> None:
    """Small and squared (norm 20) matrices: the 2n x 2n block exponential of the rule."""
    for norm in (0.4, 20.0):
        a = with_norm(norm, 2, 3, 3, dtype=torch.float64, seed=3).requires_grad_()
        ort = ORTModule(Apply(torch.linalg.matrix_exp), FX)
        assert torch.autograd.gradcheck(ort, (a,), eps=1e-6, atol=1e-6, rtol=1e-6)


def test_matrix_exp_inside_a_model_gives_eager_gradients() -> None:
    """An exponential in the middle of a model: the parameters' gradients reach them through
    the block exponential as eager's do."""
    torch.manual_seed(0)
    eager = torch.nn.Linear(4, 4, dtype=torch.float64)
    ort_linear = torch.nn.Linear(4, 4, dtype=torch.float64)
    ort_linear.load_state_dict(eager.state_dict())

    def model(lin: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
        h = lin(x).reshape(-1, 2, 2)
        return (torch.linalg.matrix_exp(h * 0.5) @ h).tanh().sum()

    class M(torch.nn.Module):
        def __init__(self, lin: torch.nn.Module) -> None:
            super().__init__()
            self.lin = lin

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return model(self.lin, x)

    x = torch.randn(6, 4, dtype=torch.float64)
    ort = ORTModule(M(ort_linear), FX)
    model(eager, x).backward()
    ort(x).backward()
    for (name, p), q in zip(eager.named_parameters(), ort_linear.parameters()):
        torch.testing.assert_close(q.grad, p.grad, **TOL[torch.float64], msg=name)
