"""Reductions, norms, sorting, cumulative ops and einsum through the fx exporter
(DebugOptions(exporter="fx", fallback=NEVER): each ATen op must lower natively): ORTModule's
forward and input gradients against eager PyTorch's on the same inputs, with explicit
tolerances. Inputs hold the edge cases the gradients must get right: zeros in products,
zero vectors in norms, -inf slices in log-sum-exp, ties where torch defines their order."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from ortmodule import ORTModule
from tests.python.parity_utils import ATOL, FX, RTOL, Apply, as_tuple, check


def randn(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed))


def distinct(*shape: int, seed: int = 0) -> torch.Tensor:
    """A permutation of well separated values: no ties."""
    n = math.prod(shape)
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
    return (perm.to(torch.float32) / n - 0.5).reshape(shape)


ZEROS = torch.tensor([[1.5, 0.0, 2.0, -0.5], [0.0, 0.0, 3.0, 1.0], [1.0, 2.0, -3.0, 0.5]])
INF = math.inf

# ---- 1. products, variance ----

PROD = {
    "prod_all": (lambda x: x.prod(), [randn(2, 3)]),
    "prod_all_zero": (lambda x: x.prod(), [torch.tensor([[1.5, 0.0], [2.0, -3.0]])]),
    "prod_all_two_zeros": (lambda x: x.prod(), [torch.tensor([[1.5, 0.0], [0.0, -3.0]])]),
    "prod_dim_zeros": (lambda x: x.prod(1), [ZEROS]),
    "prod_dim0_keepdim": (lambda x: x.prod(0, keepdim=True), [ZEROS]),
    "prod_dim_neg": (lambda x: x.prod(-2), [randn(2, 3, 4)]),
    "prod_dtype": (lambda x: x.prod(1, dtype=torch.float64), [ZEROS]),
    "prod_all_dtype": (lambda x: x.prod(dtype=torch.float64), [randn(3)]),
    "prod_int": (lambda x: x.prod(0), [torch.tensor([[2, -3, 1], [4, 5, 7]])]),
    "prod_several_dims": (lambda x: x.prod(2).prod(0), [randn(2, 3, 4)]),
    "var_dims": (lambda x: x.var((0, 2), correction=0), [randn(2, 3, 4)]),
    "var_dims_keepdim": (lambda x: x.var((0, 1), keepdim=True), [randn(2, 3, 4)]),
    "var_correction2": (lambda x: torch.var(x, (1, 2), correction=2), [randn(2, 3, 4)]),
    "var_all": (lambda x: x.var(), [randn(3, 4)]),
    "var_unbiased_false": (lambda x: torch.var(x, 1, unbiased=False), [randn(3, 4)]),
    "std_dims": (lambda x: x.std((0, 2), keepdim=True), [randn(2, 3, 4)]),
    "std_all": (lambda x: x.std(), [randn(3, 4)]),
    "std_dim_unbiased": (lambda x: torch.std(x, 0, unbiased=True), [randn(3, 4)]),
    "var_mean": (lambda x: torch.var_mean(x, (0, 1)), [randn(2, 3, 4)]),
    "std_mean_keepdim": (lambda x: torch.std_mean(x, 1, keepdim=True), [randn(2, 3, 4)]),
}

# ---- 2. log-sum-exp ----

LSE = {
    "logsumexp_dim": (lambda x: torch.logsumexp(x, 1), [randn(3, 4) * 5]),
    "logsumexp_dims_keepdim": (lambda x: torch.logsumexp(x, (0, 2), keepdim=True),
                               [randn(2, 3, 4)]),
    "logsumexp_large": (lambda x: torch.logsumexp(x, -1),
                        [torch.tensor([[1000.0, 1001.0, 999.0], [-1000.0, -1002.0, -999.0]])]),
    "logsumexp_neg_inf_slice": (lambda x: torch.logsumexp(x, 1),
                                [torch.tensor([[-INF, -INF, -INF], [0.5, -INF, 1.0]])]),
    "logsumexp_int": (lambda x: torch.logsumexp(x, 0), [torch.tensor([1, 2, 3])]),
}

# ---- 3. norms ----

ZERO_ROW = torch.tensor([[0.0, 0.0, 0.0], [0.3, -0.4, 1.2]])

NORMS = {
    "vector_norm_2": (lambda x: torch.linalg.vector_norm(x), [randn(3, 4)]),
    "vector_norm_2_zero_vector": (lambda x: torch.linalg.vector_norm(x, dim=1), [ZERO_ROW]),
    "vector_norm_2_all_zero": (lambda x: torch.linalg.vector_norm(x), [torch.zeros(2, 3)]),
    "vector_norm_1": (lambda x: torch.linalg.vector_norm(x, 1, dim=(0, 1)), [randn(2, 3, 4)]),
    "vector_norm_1_zeros": (lambda x: torch.linalg.vector_norm(x, 1, dim=1), [ZERO_ROW]),
    "vector_norm_inf": (lambda x: torch.linalg.vector_norm(x, INF, dim=-1), [randn(3, 4)]),
    "vector_norm_inf_ties": (lambda x: torch.linalg.vector_norm(x, INF),
                             [torch.tensor([1.0, -3.0, 3.0])]),
    "vector_norm_neg_inf": (lambda x: torch.linalg.vector_norm(x, -INF, dim=0), [randn(3, 4)]),
    "vector_norm_0": (lambda x: torch.linalg.vector_norm(x, 0, dim=1), [ZERO_ROW]),
    "vector_norm_3": (lambda x: torch.linalg.vector_norm(x, 3, dim=(0, 2), keepdim=True),
                      [randn(2, 3, 4)]),
    "vector_norm_3_zero_vector": (lambda x: torch.linalg.vector_norm(x, 3, dim=1), [ZERO_ROW]),
    "vector_norm_1_5": (lambda x: torch.linalg.vector_norm(x, 1.5), [randn(5)]),
    "vector_norm_dtype": (lambda x: torch.linalg.vector_norm(x, dim=1, dtype=torch.float64),
                          [randn(3, 4)]),
    "tensor_norm": (lambda x: x.norm(), [randn(3, 4)]),
    "tensor_norm_p_dim": (lambda x: x.norm(p=1, dim=1), [randn(3, 4)]),
    "torch_norm_fro": (lambda x: torch.norm(x, p="fro"), [randn(3, 4)]),
    "torch_norm_dtype": (lambda x: torch.norm(x, 2, dim=1, keepdim=True, dtype=torch.float64),
                         [randn(3, 4)]),
    # The aten.norm overloads (torch.norm records linalg_vector_norm; direct calls these).
    "aten_norm_scalar": (lambda x: torch.ops.aten.norm.Scalar(x, 1), [randn(3, 4)]),
    "aten_norm_dim": (lambda x: torch.ops.aten.norm.ScalarOpt_dim(x, 3, [1], True),
                      [randn(3, 4)]),
    "aten_norm_dtype": (lambda x: torch.ops.aten.norm.ScalarOpt_dtype(x, 2, dtype=torch.float64),
                        [randn(3, 4)]),
    "aten_norm_dim_dtype": (lambda x: torch.ops.aten.norm.ScalarOpt_dim_dtype(
        x, 2, [0], False, dtype=torch.float64), [ZERO_ROW]),
    "linalg_norm": (lambda x: torch.linalg.norm(x), [randn(2, 3, 4)]),
    "linalg_norm_vector_ord": (lambda x: torch.linalg.norm(x, 3, dim=1), [randn(3, 4)]),
    "linalg_norm_matrix_2d": (lambda x: torch.linalg.norm(x, 1), [distinct(3, 4)]),
    "matrix_norm_fro": (lambda x: torch.linalg.matrix_norm(x), [randn(2, 3, 4)]),
    "matrix_norm_fro_keepdim": (lambda x: torch.linalg.matrix_norm(x, dim=(0, 2), keepdim=True),
                                [randn(2, 3, 4)]),
    "matrix_norm_1": (lambda x: torch.linalg.matrix_norm(x, 1), [distinct(2, 3, 4)]),
    "matrix_norm_inf": (lambda x: torch.linalg.matrix_norm(x, INF), [distinct(2, 3, 4)]),
    "matrix_norm_neg1_keepdim": (lambda x: torch.linalg.matrix_norm(x, -1, keepdim=True),
                                 [distinct(2, 3, 4)]),
    "normalize": (lambda x: F.normalize(x, dim=1), [randn(3, 4)]),
    "normalize_zero_row": (lambda x: F.normalize(x, dim=1), [ZERO_ROW]),
    "normalize_p1": (lambda x: F.normalize(x, p=1.0, dim=0), [randn(3, 4)]),
    "clamp_max": (lambda x: torch.clamp_max(x, 0.25), [randn(3, 4)]),
}

# ---- 4. top-k and sorting (ties only where torch defines their order) ----

TIES = torch.tensor([[0.5, 0.1, 0.5, 0.3, 0.1], [0.2, 0.2, 0.2, 0.9, 0.0]])

SORTING = {
    "topk": (lambda x: torch.topk(x, 2, dim=1), [distinct(3, 5)]),
    "topk_smallest_dim0": (lambda x: torch.topk(x, 2, dim=0, largest=False), [distinct(4, 3)]),
    "topk_middle_dim": (lambda x: torch.topk(x, 3, dim=1), [distinct(2, 4, 3)]),
    "topk_int": (lambda x: torch.topk(x, 2), [torch.tensor([[3, 9, 1, 7], [4, -2, 8, 0]])]),
    "sort": (lambda x: torch.sort(x, dim=1), [distinct(3, 5)]),
    "sort_descending_dim0": (lambda x: torch.sort(x, dim=0, descending=True), [distinct(4, 3)]),
    "sort_stable_ties": (lambda x: torch.sort(x, dim=1, stable=True), [TIES]),
    "sort_stable_descending_ties": (lambda x: torch.sort(x, dim=1, stable=True,
                                                         descending=True), [TIES]),
    "argsort": (lambda x: torch.argsort(x, 1), [distinct(3, 5)]),
    "argsort_descending": (lambda x: torch.argsort(x, 0, descending=True), [distinct(3, 5)]),
    "argsort_stable_ties": (lambda x: torch.argsort(x, dim=1, stable=True), [TIES]),
    "msort": (lambda x: torch.msort(x), [distinct(4, 3)]),
    "kthvalue": (lambda x: torch.kthvalue(x, 2, 1), [distinct(3, 5)]),
    "kthvalue_keepdim": (lambda x: torch.kthvalue(x, 3, 0, keepdim=True), [distinct(4, 3)]),
    "median_dim": (lambda x: torch.median(x, 1), [distinct(3, 5)]),
    "median_dim_even": (lambda x: torch.median(x, 0), [distinct(4, 3)]),
    "median_all": (lambda x: torch.median(x), [distinct(3, 4)]),
    "median_all_ties": (lambda x: torch.median(x), [torch.tensor([0.5, 0.2, 0.5, 0.9, 0.5])]),
    "max_dim": (lambda x: torch.max(x, 1), [distinct(3, 5)]),
    "min_dim_keepdim": (lambda x: torch.min(x, 0, keepdim=True), [distinct(3, 5)]),
    "max_dim_ties": (lambda x: torch.max(x, 1), [TIES]),
    "max_all_ties": (lambda x: torch.max(x), [TIES]),
    "min_all": (lambda x: torch.min(x), [randn(3, 4)]),
}

# ---- 5. cumulative ----

CUMULATIVE = {
    "cumprod": (lambda x: torch.cumprod(x, 1), [randn(3, 4)]),
    "cumprod_zeros": (lambda x: torch.cumprod(x, 1), [ZEROS]),
    "cumprod_dim0_zeros": (lambda x: torch.cumprod(x, 0), [ZEROS]),
    "cummax": (lambda x: torch.cummax(x, 1), [distinct(3, 5)]),
    "cummax_ties": (lambda x: torch.cummax(x, 1), [TIES]),
    "cummin_dim0_ties": (lambda x: torch.cummin(x, 0), [TIES.t().contiguous()]),
    "cummax_int": (lambda x: torch.cummax(x, 0), [torch.tensor([3, 1, 4, 1, 5, 9, 2, 6])]),
    "logcumsumexp": (lambda x: torch.logcumsumexp(x, 1), [randn(3, 4) * 3]),
    "logcumsumexp_spread": (lambda x: torch.logcumsumexp(x, 0),
                            [torch.tensor([[-200.0, 1.0], [0.0, 200.0], [2.0, -INF]])]),
}

# ---- 6. reductions of a 0-d tensor over dim 0 / -1 ----

SCALAR = torch.tensor(1.5)
SCALAR_CASES = {
    "sum": lambda x: x.sum(0), "sum_keepdim": lambda x: x.sum(-1, keepdim=True),
    "mean": lambda x: x.mean(0), "amax": lambda x: x.amax(0), "amin": lambda x: x.amin(-1),
    "argmax": lambda x: x.argmax(0), "argmin": lambda x: x.argmin(-1),
    "prod": lambda x: x.prod(0), "logsumexp": lambda x: torch.logsumexp(x, 0),
    "var": lambda x: x.var(0, correction=0), "std": lambda x: x.std(0, correction=0),
    "norm": lambda x: torch.linalg.vector_norm(x, dim=0), "norm1": lambda x: x.norm(1, 0),
    "max_dim": lambda x: torch.max(x, 0), "min_dim": lambda x: torch.min(x, -1),
    "cumsum": lambda x: torch.cumsum(x, 0), "cumprod": lambda x: torch.cumprod(x, 0),
    "any": lambda x: torch.any(x, 0), "all": lambda x: torch.all(x, -1),
    "cummax": lambda x: torch.cummax(x, 0), "logcumsumexp": lambda x: torch.logcumsumexp(x, 0),
}

# ---- 7. einsum ----

EINSUM = {
    "bmm": ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    "matmul": ("ij,jk->ik", [(3, 4), (4, 2)]),
    "matmul_transposed_out": ("ij,jk->ki", [(3, 4), (4, 2)]),
    "outer": ("i,j->ij", [(3,), (4,)]),
    "batch_outer": ("bi,bj->bij", [(2, 3), (2, 4)]),
    "dot": ("i,i->", [(5,), (5,)]),
    "diagonal": ("ii->i", [(4, 4)]),
    "trace": ("ii->", [(4, 4)]),
    "batch_diagonal": ("bii->bi", [(2, 3, 3)]),
    "sum_all": ("ij->", [(3, 4)]),
    "sum_rows": ("ij->j", [(3, 4)]),
    "transpose": ("ij->ji", [(3, 4)]),
    "identity": ("ij->ij", [(3, 4)]),
    "scalar_operand": (",ij->ij", [(), (3, 4)]),
    "permute3": ("ijk->kij", [(2, 3, 4)]),
    "implicit_output": ("ij,jk", [(3, 4), (4, 2)]),
    "ellipsis_matmul": ("...ij,...jk->...ik", [(2, 3, 4), (2, 4, 5)]),
    "ellipsis_broadcast": ("...ij,...jk->...ik", [(2, 1, 3, 4), (5, 4, 2)]),
    "ellipsis_sum": ("...i->...", [(2, 3, 4)]),
    "attention_scores": ("bhqd,bhkd->bhqk", [(2, 2, 3, 4), (2, 2, 5, 4)]),
    "elementwise": ("ij,ij->ij", [(3, 4), (3, 4)]),
    "hadamard_sum": ("ij,ij->i", [(3, 4), (3, 4)]),
    "bilinear": ("bn,anm,bm->ba", [(2, 3), (4, 3, 5), (2, 5)]),
    "chain3": ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)]),
    "four_operands": ("i,ij,jk,k->", [(2,), (2, 3), (3, 4), (4,)]),
    "broadcast_one": ("ij,j->ij", [(3, 4), (1,)]),
    "contract_two_dims": ("ijk,jkl->il", [(2, 3, 4), (3, 4, 5)]),
    "kept_unshared": ("ij,kl->ijkl", [(2, 3), (1, 2)]),
    "sum_before_contract": ("ijk,kl->il", [(2, 3, 4), (4, 5)]),
    "diagonal_in_product": ("ii,ij->j", [(3, 3), (3, 4)]),
}


@pytest.mark.parametrize("name", sorted(PROD))
def test_prod_var_std(name: str) -> None:
    fn, inputs = PROD[name]
    check(fn, *inputs)


@pytest.mark.parametrize("name", sorted(LSE))
def test_logsumexp(name: str) -> None:
    fn, inputs = LSE[name]
    check(fn, *inputs)


@pytest.mark.parametrize("name", sorted(NORMS))
def test_norms(name: str) -> None:
    fn, inputs = NORMS[name]
    check(fn, *inputs)


@pytest.mark.parametrize("ord", ["nuc", 2, -2])
def test_matrix_norm_from_singular_values(ord: Any) -> None:
    """The spectral norms lower through the engine's Svd (test_linalg_spectral_parity.py)."""
    check(lambda x: torch.linalg.matrix_norm(x, ord), randn(3, 4))


@pytest.mark.parametrize("name", sorted(SORTING))
def test_sorting(name: str) -> None:
    fn, inputs = SORTING[name]
    check(fn, *inputs)


@pytest.mark.parametrize("name", sorted(CUMULATIVE))
def test_cumulative(name: str) -> None:
    fn, inputs = CUMULATIVE[name]
    check(fn, *inputs)


@pytest.mark.parametrize("name", sorted(SCALAR_CASES))
def test_reduction_of_a_0d_tensor(name: str) -> None:
    fn = SCALAR_CASES[name]
    check(fn, SCALAR.clone() if name not in ("any", "all") else torch.tensor(2))


@pytest.mark.parametrize("name", sorted(EINSUM))
def test_einsum(name: str) -> None:
    equation, shapes = EINSUM[name]
    inputs = [randn(*s, seed=k) for k, s in enumerate(shapes)]
    check(lambda *xs: torch.einsum(equation, *xs), *inputs, rtol=1e-5, atol=1e-5)


def test_einsum_repeated_operand() -> None:
    check(lambda x: torch.einsum("ij,ij->", x, x), randn(3, 4))
    check(lambda x: torch.einsum("ij,kj->ik", x, x), randn(3, 4))


DYNAMIC = {
    "einsum_bmm": (lambda a, b: torch.einsum("bij,bjk->bik", a, b),
                   lambda n: [randn(n, 3, 4), randn(n, 4, 2, seed=1)]),
    "einsum_diagonal": (lambda a: torch.einsum("ii->i", a), lambda n: [randn(n, n)]),
    "sort": (lambda a: torch.sort(a, 1), lambda n: [distinct(2, n)]),
    "cummax": (lambda a: torch.cummax(a, 1), lambda n: [distinct(2, n)]),
    "cumprod": (lambda a: torch.cumprod(a, 1), lambda n: [randn(2, n)]),
    "median": (lambda a: torch.median(a, 1), lambda n: [distinct(2, n)]),
    "median_all": (lambda a: torch.median(a), lambda n: [distinct(2, n)]),
    "var": (lambda a: torch.var(a, 1), lambda n: [randn(2, n)]),
    "kthvalue": (lambda a: torch.kthvalue(a, 2, 1), lambda n: [distinct(2, n)]),
}


@pytest.mark.parametrize("name", sorted(DYNAMIC))
def test_symbolic_sizes(name: str) -> None:
    """A second size makes a graph with symbolic sizes (the masks, counts and reshapes are
    computed in the graph); forward and gradients still match eager at each size."""
    fn, make = DYNAMIC[name]
    ort = ORTModule(Apply(fn), FX)
    for n in (3, 5, 6):
        inputs = make(n)
        ort_in = [x.clone().requires_grad_() for x in inputs]
        eager_in = [x.clone().requires_grad_() for x in inputs]
        got, expected = as_tuple(ort(*ort_in)), as_tuple(fn(*eager_in))
        for g, e in zip(got, expected):
            torch.testing.assert_close(g, e, rtol=RTOL, atol=ATOL)
        sum(g.float().sum() for g in got if g.requires_grad).backward()
        sum(e.float().sum() for e in expected if e.requires_grad).backward()
        for a, b in zip(ort_in, eager_in):
            torch.testing.assert_close(a.grad, b.grad, rtol=RTOL, atol=ATOL)
