"""The symmetric eigendecomposition and the SVD through ORTModule against eager PyTorch, in
float32 and float64: eigvalsh and eigh's eigenvalues, svdvals, pinv / pinverse (with the
default, relative and absolute tolerances, hermitian), matrix_rank, cond and the spectral
matrix norms (ord 2, -2, 'nuc'), forward and input gradients, through the fx exporter with
no bridging.

Eigen- and singular vectors are compared only through gauge-invariant functions of them
(a reconstruction, V f(w) V^T, U S^3 Vh, U U^T) on the engine's own ops, since their signs
are a convention: ORTModule leaves a program that reads them to PyTorch (bridged), which the
last tests check."""

from __future__ import annotations

import warnings

import numpy as np
import onnx
import pytest
import torch
from onnx import helper

from ortmodule import _C, DebugOptions, ORTModule
from tests.python.parity_utils import FX, Apply, check

DTYPES = [torch.float32, torch.float64]


def tol(dtype: torch.dtype) -> dict[str, float]:
    return {"rtol": 1e-4, "atol": 2e-5} if dtype == torch.float32 else {"rtol": 1e-9,
                                                                       "atol": 1e-10}


def mat(*shape: int, dtype: torch.dtype, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def sym(*shape: int, dtype: torch.dtype, seed: int = 0) -> torch.Tensor:
    a = mat(*shape, dtype=dtype, seed=seed)
    return a + a.mT


@pytest.mark.parametrize("dtype", DTYPES)
def test_eigenvalues(dtype: torch.dtype) -> None:
    a = sym(2, 5, 5, dtype=dtype)
    check(torch.linalg.eigvalsh, a, **tol(dtype))
    check(lambda x: torch.linalg.eigvalsh(x, UPLO="U"), a, **tol(dtype))
    check(lambda x: torch.linalg.eigh(x).eigenvalues, a, **tol(dtype))
    # Not symmetric: one triangle is read, as eager's; its gradient is eager's too.
    b = mat(4, 4, dtype=dtype, seed=1)
    check(torch.linalg.eigvalsh, b, **tol(dtype))
    check(lambda x: torch.linalg.eigvalsh(x, UPLO="U"), b, **tol(dtype))


@pytest.mark.parametrize("dtype", DTYPES)
def test_singular_values(dtype: torch.dtype) -> None:
    for shape in ((5, 3), (3, 5), (2, 4, 4)):
        check(torch.linalg.svdvals, mat(*shape, dtype=dtype), **tol(dtype))
    check(lambda x: torch.linalg.svd(x, full_matrices=False).S, mat(4, 6, dtype=dtype),
          **tol(dtype))
    check(lambda x: torch.svd(x)[1], mat(6, 4, dtype=dtype), **tol(dtype))
    # Empty matrices: no vectors to choose signs for; every output lowers.
    check(lambda x: torch.linalg.svd(x), mat(0, 0, dtype=dtype))
    check(lambda x: torch.linalg.eigh(x), mat(0, 0, dtype=dtype))


@pytest.mark.parametrize("dtype", DTYPES)
def test_pinv(dtype: torch.dtype) -> None:
    check(torch.linalg.pinv, mat(5, 3, dtype=dtype), **tol(dtype))
    check(torch.linalg.pinv, mat(2, 3, 5, dtype=dtype), **tol(dtype))
    check(torch.pinverse, mat(4, 4, dtype=dtype), **tol(dtype))
    check(lambda x: torch.linalg.pinv(x, hermitian=True), sym(4, 4, dtype=dtype), **tol(dtype))
    # Tolerances that drop singular values (relative, absolute, rcond), and a singular matrix
    # whose zero singular values the default tolerance drops.
    a = mat(4, 4, dtype=dtype, seed=2) * torch.tensor([3.0, 1.0, 0.3, 0.05], dtype=dtype)
    check(lambda x: torch.linalg.pinv(x, rtol=0.1), a, **tol(dtype))
    check(lambda x: torch.linalg.pinv(x, atol=0.2), a, **tol(dtype))
    check(lambda x: torch.linalg.pinv(x, 0.1), a, **tol(dtype))
    # Tolerances as tensors: 0-d, and one per matrix of a batch.
    # (Made inside the function: eager refuses a tolerance that requires grad.)
    check(lambda x: torch.linalg.pinv(x, rtol=torch.tensor(0.1, dtype=dtype)), a, **tol(dtype))
    batch = torch.stack([a, 2 * a, a.mT])
    check(lambda x: torch.linalg.pinv(x, atol=torch.tensor([0.2, 0.05, 0.5], dtype=dtype)),
          batch, **tol(dtype))
    singular = mat(5, 2, dtype=dtype) @ mat(2, 4, dtype=dtype, seed=3)
    with torch.no_grad():
        got = ORTModule(Apply(torch.linalg.pinv), FX)(singular)
    torch.testing.assert_close(got, torch.linalg.pinv(singular), **tol(dtype))


@pytest.mark.parametrize("dtype", DTYPES)
def test_matrix_rank(dtype: torch.dtype) -> None:
    ranks = torch.stack([mat(5, k, dtype=dtype, seed=k) @ mat(k, 4, dtype=dtype, seed=9)
                         for k in range(1, 5)])
    check(torch.linalg.matrix_rank, ranks)
    check(lambda x: torch.linalg.matrix_rank(x, hermitian=True), ranks.mT @ ranks)
    scaled = mat(4, 4, dtype=dtype) * torch.tensor([10.0, 1.0, 0.1, 0.01], dtype=dtype)
    check(lambda x: torch.linalg.matrix_rank(x, atol=0.5), scaled)
    check(lambda x: torch.linalg.matrix_rank(x, atol=0.5, rtol=0.1), scaled)
    check(lambda x: torch.linalg.matrix_rank(x, rtol=0.05), scaled)
    check(torch.linalg.matrix_rank, torch.zeros(3, 3, dtype=dtype))
    check(lambda x, t: torch.linalg.matrix_rank(x, atol=t), torch.stack([scaled, 10 * scaled]),
          torch.tensor([0.5, 0.5], dtype=dtype))
    check(lambda x, t: torch.linalg.matrix_rank(x, t), scaled, torch.tensor(0.05, dtype=dtype))


@pytest.mark.parametrize("dtype", DTYPES)
def test_cond_and_spectral_norms(dtype: torch.dtype) -> None:
    a = mat(2, 4, 4, dtype=dtype)
    check(torch.linalg.cond, a, **tol(dtype))
    check(lambda x: torch.linalg.cond(x, -2), a, **tol(dtype))
    for ord in (2, -2, "nuc"):
        check(lambda x, p=ord: torch.linalg.matrix_norm(x, p), a, **tol(dtype))
        check(lambda x, p=ord: torch.linalg.matrix_norm(x, p, dim=(0, 2), keepdim=True), a,
              **tol(dtype))
    check(lambda x: torch.norm(x, "nuc"), mat(3, 5, dtype=dtype), **tol(dtype))
    check(lambda x: torch.linalg.norm(x, 2), mat(5, 3, dtype=dtype), **tol(dtype))


@pytest.mark.parametrize("scale", [1e-200, 1e200])
def test_extreme_scales(scale: float) -> None:
    """float64 matrices near underflow and overflow: the kernels scale before squaring."""
    a = sym(4, 4, dtype=torch.float64, seed=6) * scale
    for fn in (torch.linalg.eigvalsh, torch.linalg.svdvals, torch.linalg.pinv,
               torch.linalg.matrix_rank):
        with torch.no_grad():
            got = ORTModule(Apply(fn), FX)(a)
        torch.testing.assert_close(got, fn(a), rtol=1e-9, atol=0)


def test_non_finite_input_gives_nan() -> None:
    """Eager raises (LAPACK does not converge); the engine's factors are NaN."""
    a = sym(3, 3, dtype=torch.float32)
    a[0, 1] = a[1, 0] = float("nan")
    for fn in (torch.linalg.eigvalsh, torch.linalg.svdvals, torch.linalg.pinv):
        with torch.no_grad():
            assert ORTModule(Apply(fn), FX)(a).isnan().all()


# ---- the vectors, on the engine's ops: gauge-invariant functions of them ----

def _program(nodes: list, x_shape: tuple[int, ...], outputs: list[str],
             dtype: torch.dtype) -> object:
    elem = onnx.TensorProto.FLOAT if dtype == torch.float32 else onnx.TensorProto.DOUBLE
    graph = helper.make_graph(
        nodes, "spectral", [helper.make_tensor_value_info("x", elem, x_shape)],
        [helper.make_tensor_value_info(n, elem, None) for n in outputs])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("ai.ortmodule", 1)])
    return _C.Program(model.SerializeToString(), [], ["x"])


def _against_eager(program: object, fn: object, x: torch.Tensor, dtype: torch.dtype) -> None:
    ours_in = x.clone().requires_grad_(True)
    eager_in = x.clone().requires_grad_(True)
    ours = _C.run(program, [ours_in])
    eager = fn(eager_in)
    gen = torch.Generator().manual_seed(1)
    weights = [torch.randn(e.shape, generator=gen, dtype=dtype) for e in eager]
    for o, e in zip(ours, eager):
        torch.testing.assert_close(o, e.detach(), **tol(dtype))
    (g_ours,) = torch.autograd.grad(sum((o * w).sum() for o, w in zip(ours, weights)), ours_in)
    (g_eager,) = torch.autograd.grad(sum((e * w).sum() for e, w in zip(eager, weights)),
                                     eager_in)
    torch.testing.assert_close(g_ours, g_eager, **tol(dtype))


@pytest.mark.parametrize("dtype", DTYPES)
def test_eigh_vectors_gauge_invariant(dtype: torch.dtype) -> None:
    """Eigh's V diag(w^2) V^T (= A^2), V diag(w) V^T (= A) and w: forward and the gradient
    through both outputs, against eager's eigh."""
    n = 5
    nodes = [
        helper.make_node("Eigh", ["x"], ["w", "v"], domain="ai.ortmodule"),
        helper.make_node("Transpose", ["v"], ["vt"], perm=[0, 2, 1]),
        helper.make_node("Unsqueeze", ["w", "axis"], ["wrow"]),
        helper.make_node("Mul", ["v", "wrow"], ["vw"]),
        helper.make_node("MatMul", ["vw", "vt"], ["recon"]),
        helper.make_node("Mul", ["vw", "wrow"], ["vww"]),
        helper.make_node("MatMul", ["vww", "vt"], ["square"]),
        helper.make_node("Constant", [], ["axis"], value=helper.make_tensor(
            "axis", onnx.TensorProto.INT64, [1], [1])),
    ]
    nodes = nodes[-1:] + nodes[:-1]
    program = _program(nodes, (2, n, n), ["w", "recon", "square"], dtype)

    def eager(x: torch.Tensor) -> list[torch.Tensor]:
        w, v = torch.linalg.eigh(x)
        return [w, (v * w[:, None, :]) @ v.mT, (v * (w * w)[:, None, :]) @ v.mT]

    a = sym(2, n, n, dtype=dtype, seed=4)
    _against_eager(program, eager, a, dtype)
    # Orthonormal vectors that diagonalize the input.
    w, v = _C.run(_program(nodes[1:2], (2, n, n), ["w", "v"], dtype), [a])
    torch.testing.assert_close(v.mT @ v, torch.eye(n, dtype=dtype).expand(2, n, n), **tol(dtype))
    torch.testing.assert_close((v * w[:, None, :]) @ v.mT, a, **tol(dtype))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(6, 4), (3, 5)])
def test_svd_vectors_gauge_invariant(dtype: torch.dtype, shape: tuple[int, int]) -> None:
    """Svd's U diag(S) Vh (= A), U diag(S^3) Vh and U U^T: forward and the gradient through
    all three outputs (the (I - U U^T) terms of the tall and wide cases), against eager."""
    nodes = [
        helper.make_node("Constant", [], ["axis"], value=helper.make_tensor(
            "axis", onnx.TensorProto.INT64, [1], [0])),
        helper.make_node("Svd", ["x"], ["u", "s", "vh"], domain="ai.ortmodule"),
        helper.make_node("Unsqueeze", ["s", "axis"], ["srow"]),
        helper.make_node("Mul", ["u", "srow"], ["us"]),
        helper.make_node("MatMul", ["us", "vh"], ["recon"]),
        helper.make_node("Mul", ["us", "srow"], ["us2"]),
        helper.make_node("Mul", ["us2", "srow"], ["us3"]),
        helper.make_node("MatMul", ["us3", "vh"], ["cubed"]),
        helper.make_node("Transpose", ["u"], ["ut"], perm=[1, 0]),
        helper.make_node("MatMul", ["u", "ut"], ["proj"]),
    ]
    program = _program(nodes, shape, ["recon", "cubed", "proj"], dtype)

    def eager(x: torch.Tensor) -> list[torch.Tensor]:
        u, s, vh = torch.linalg.svd(x, full_matrices=False)
        return [(u * s) @ vh, (u * s**3) @ vh, u @ u.mT]

    _against_eager(program, eager, mat(*shape, dtype=dtype, seed=5), dtype)


# ---- vectors a program reads stay on PyTorch ----

def test_used_vectors_are_bridged() -> None:
    a = sym(4, 4, dtype=torch.float32)
    with pytest.raises(Exception, match="unique only up to sign"):
        ORTModule(Apply(lambda x: torch.linalg.eigh(x)[1]), FX)(a)
    with pytest.raises(Exception, match="unique only up to sign"):
        ORTModule(Apply(lambda x: torch.linalg.svd(x)[0]), FX)(mat(4, 3, dtype=torch.float32))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = ORTModule(Apply(torch.linalg.eigh), DebugOptions(exporter="fx"))(a)
    expected = torch.linalg.eigh(a)
    torch.testing.assert_close(got[0], expected[0])
    torch.testing.assert_close(got[1], expected[1])
    assert np.isfinite(got[1].detach().numpy()).all()
