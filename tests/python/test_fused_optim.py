"""ortmodule.optim.FusedAdamW / FusedSGD against torch.optim.AdamW / SGD with foreach=True.

The fused optimizers reproduce torch's foreach arithmetic operation by operation, so the
parameters and states after N steps are compared with zero tolerance (bitwise, NaN == NaN).
"""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest
import torch

from ortmodule import _C
from ortmodule.optim import FusedAdamW, FusedSGD
from tests.python.model_zoo import assert_params_match, loss_of, make_batch, make_pair

# 0-d, empty, odd sizes below and above the kernel's chunk (16384) and its serial
# threshold (65536 elements per group), a 2-D weight.
SHAPES: list[tuple[int, ...]] = [(), (0,), (1,), (7,), (3, 5), (16385,), (70001,), (257, 301)]
STEPS = 20


def assert_bitwise(actual: torch.Tensor, expected: torch.Tensor, what: str) -> None:
    torch.testing.assert_close(
        actual, expected, rtol=0, atol=0, equal_nan=True, msg=lambda m: f"{what}: {m}"
    )


def make_params(dtype: torch.dtype = torch.float32, seed: int = 0) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(s, generator=gen, dtype=dtype).requires_grad_() for s in SHAPES]


def clone_params(params: list[torch.Tensor]) -> list[torch.Tensor]:
    return [p.detach().clone().requires_grad_() for p in params]


def set_grads(params: list[torch.Tensor], step: int, skip: Callable[[int], bool] | None = None) -> None:
    gen = torch.Generator().manual_seed(1000 + step)
    for i, p in enumerate(params):
        g = torch.randn(p.shape, generator=gen, dtype=p.dtype)
        p.grad = None if skip is not None and skip(i) else g


def groups_of(params: list[torch.Tensor], group_options: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Splits the parameters round-robin over len(group_options) groups."""
    n = len(group_options)
    return [{"params": params[k::n], **opts} for k, opts in enumerate(group_options)]


def run_both(
    make_fused: Callable[[Any], torch.optim.Optimizer],
    make_torch: Callable[[Any], torch.optim.Optimizer],
    group_options: list[dict[str, Any]],
    dtype: torch.dtype = torch.float32,
    steps: int = STEPS,
    skip: Callable[[int, int], bool] | None = None,
) -> tuple[torch.optim.Optimizer, torch.optim.Optimizer, list[torch.Tensor], list[torch.Tensor]]:
    fused_params = make_params(dtype)
    torch_params = clone_params(fused_params)
    fused = make_fused(groups_of(fused_params, group_options))
    reference = make_torch(groups_of(torch_params, group_options))
    for step in range(steps):
        skip_now = (lambda i, step=step: skip(step, i)) if skip is not None else None
        set_grads(fused_params, step, skip_now)
        set_grads(torch_params, step, skip_now)
        fused.step()
        reference.step()
    return fused, reference, fused_params, torch_params


def assert_same_state(fused: torch.optim.Optimizer, reference: torch.optim.Optimizer) -> None:
    fused_state = fused.state_dict()["state"]
    torch_state = reference.state_dict()["state"]
    assert fused_state.keys() == torch_state.keys()
    for index, state in torch_state.items():
        assert fused_state[index].keys() == state.keys(), index
        for key, value in state.items():
            assert_bitwise(fused_state[index][key], value, f"state[{index}][{key!r}]")


ADAMW_CASES: dict[str, list[dict[str, Any]]] = {
    "defaults": [{}],
    "two_groups": [{"lr": 3e-3, "weight_decay": 0.1}, {"lr": 5e-4, "weight_decay": 0.0}],
    "amsgrad": [{"amsgrad": True, "lr": 1e-2}],
    "maximize": [{"maximize": True, "weight_decay": 0.05}],
    "large_lerp_weight": [{"betas": (0.3, 0.99), "eps": 1e-6}],
    "hf_defaults": [{"lr": 5e-5, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.0}],
}


def torch_adamw(groups: Any) -> torch.optim.Optimizer:
    return torch.optim.AdamW(groups, foreach=True)


# The fused multiply-add loops of AdamW's moments are compiled for AVX2 and for AVX-512 (taken
# when the active instruction set is AVX-512): both must give torch's bits.
VECTOR_ISAS = [isa for isa in ("avx2", "avx512") if _C.cpu_isa_supported(isa)] or [_C.cpu_isa()]


@pytest.fixture(params=VECTOR_ISAS)
def vector_isa(request: pytest.FixtureRequest) -> Any:
    saved = _C.cpu_isa()
    _C.set_cpu_isa(request.param)
    yield request.param
    _C.set_cpu_isa(saved)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("case", list(ADAMW_CASES))
def test_adamw_matches_torch_foreach_bitwise(case: str, dtype: torch.dtype,
                                             vector_isa: str) -> None:
    fused, reference, fused_params, torch_params = run_both(
        FusedAdamW, torch_adamw, ADAMW_CASES[case], dtype
    )
    for i, (a, b) in enumerate(zip(fused_params, torch_params)):
        assert_bitwise(a, b, f"parameter {i} {tuple(a.shape)}")
    assert_same_state(fused, reference)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("case", list(ADAMW_CASES))
def test_adamw_with_ieee_sqrt_matches_torch_fused(case: str, dtype: torch.dtype,
                                                  vector_isa: str) -> None:
    # match_torch_sqrt=False: the IEEE square root, as torch.optim.AdamW(fused=True) takes it.
    # Equal bitwise; with amsgrad torch's fused kernel differs by up to 1 ulp (measured), so
    # that case is compared within 2 ulps relative.
    fused, _, fused_params, torch_params = run_both(
        lambda groups: FusedAdamW(groups, match_torch_sqrt=False),
        lambda groups: torch.optim.AdamW(groups, fused=True),
        ADAMW_CASES[case],
        dtype,
    )
    rtol = 2 * torch.finfo(dtype).eps if case == "amsgrad" else 0.0
    for i, (a, b) in enumerate(zip(fused_params, torch_params)):
        torch.testing.assert_close(a, b, rtol=rtol, atol=0, msg=lambda m, i=i: f"parameter {i}: {m}")
    assert all(g["match_torch_sqrt"] is False for g in fused.param_groups)


def test_adamw_skips_parameters_without_grad() -> None:
    # Parameter 2 never has a gradient; parameter 5 gets its first one at step 7, so its
    # step count differs from the others' within one group.
    def skip(step: int, i: int) -> bool:
        return i == 2 or (i == 5 and step < 7)

    fused, reference, fused_params, torch_params = run_both(
        FusedAdamW, torch_adamw, [{"lr": 1e-2}], skip=skip
    )
    for i, (a, b) in enumerate(zip(fused_params, torch_params)):
        assert_bitwise(a, b, f"parameter {i}")
    assert fused_params[2] not in fused.state
    assert float(fused.state[fused_params[5]]["step"]) == STEPS - 7
    assert_same_state(fused, reference)


def test_adamw_nan_and_inf_gradients_propagate_as_in_torch() -> None:
    fused_params = make_params()
    torch_params = clone_params(fused_params)
    fused = FusedAdamW(fused_params, amsgrad=True)
    reference = torch.optim.AdamW(torch_params, amsgrad=True, foreach=True)
    for step in range(3):
        for params, opt in ((fused_params, fused), (torch_params, reference)):
            set_grads(params, step)
            params[6].grad[::3] = float("nan")
            params[6].grad[1::7] = float("inf")
            opt.step()
    for i, (a, b) in enumerate(zip(fused_params, torch_params)):
        assert_bitwise(a, b, f"parameter {i}")
    assert_same_state(fused, reference)


@pytest.mark.parametrize("direction", ["torch_to_fused", "fused_to_torch"])
def test_adamw_state_dict_moves_between_torch_and_fused(direction: str) -> None:
    options = [{"lr": 2e-3, "weight_decay": 0.1, "amsgrad": True}, {"lr": 1e-3}]
    first, second = (torch_adamw, FusedAdamW)
    if direction == "fused_to_torch":
        first, second = second, first
    params_a = make_params()
    params_b = clone_params(params_a)
    opt_a = first(groups_of(params_a, options))
    for step in range(5):
        set_grads(params_a, step)
        opt_a.step()
    # The second optimizer continues from the first's state on a copy of its parameters.
    with torch.no_grad():
        for a, b in zip(params_a, params_b):
            b.copy_(a)
    opt_b = second(groups_of(params_b, [{}, {}]))
    opt_b.load_state_dict(copy.deepcopy(opt_a.state_dict()))
    assert opt_b.param_groups[0]["amsgrad"] and opt_b.param_groups[0]["lr"] == 2e-3
    for step in range(5, 12):
        set_grads(params_a, step)
        set_grads(params_b, step)
        opt_a.step()
        opt_b.step()
    for i, (a, b) in enumerate(zip(params_a, params_b)):
        assert_bitwise(b, a, f"parameter {i}")
    assert_same_state(opt_b, opt_a)


def test_adamw_linear_lr_scheduler_drives_both_identically() -> None:
    fused_params = make_params()
    torch_params = clone_params(fused_params)
    fused = FusedAdamW(groups_of(fused_params, [{"lr": 1e-2}, {"lr": 3e-3}]))
    reference = torch_adamw(groups_of(torch_params, [{"lr": 1e-2}, {"lr": 3e-3}]))
    schedulers = [
        torch.optim.lr_scheduler.LinearLR(opt, start_factor=0.1, total_iters=10)
        for opt in (fused, reference)
    ]
    for step in range(15):
        for params, opt, sched in zip((fused_params, torch_params), (fused, reference), schedulers):
            set_grads(params, step)
            opt.step()
            sched.step()
        assert [g["lr"] for g in fused.param_groups] == [g["lr"] for g in reference.param_groups]
    for i, (a, b) in enumerate(zip(fused_params, torch_params)):
        assert_bitwise(a, b, f"parameter {i}")


def test_adamw_closure_zero_grad_and_version_counter() -> None:
    p = torch.randn(5, 4, requires_grad=True)
    opt = FusedAdamW([p], lr=0.1)
    x = torch.randn(3, 5)

    losses: list[torch.Tensor] = []

    def closure() -> torch.Tensor:
        opt.zero_grad()
        loss = (x @ p).square().sum()
        loss.backward()  # runs with gradients enabled although step() itself does not
        losses.append(loss)
        return loss

    before = p.detach().clone()
    version = p._version
    assert opt.step(closure) is losses[0]
    assert p.grad is not None and not torch.equal(p.detach(), before)
    assert p._version > version  # autograd sees the in-place update
    opt.zero_grad()
    assert p.grad is None


@pytest.mark.parametrize("kind", ["adamw", "sgd"])
def test_deep_copy_steps_like_the_original(kind: str) -> None:
    params = make_params()
    if kind == "adamw":
        opt = FusedAdamW(params, lr=1e-2)
    else:
        opt = FusedSGD(params, lr=1e-2, momentum=0.9)
    set_grads(params, 0)
    opt.step()
    # deepcopy goes through torch's __getstate__/__setstate__ (defaults, state, param_groups).
    copied = copy.deepcopy({"params": params, "opt": opt})
    for step in (1, 2):
        set_grads(params, step)
        set_grads(copied["params"], step)
        opt.step()
        copied["opt"].step()
    for i, (a, b) in enumerate(zip(copied["params"], params)):
        assert_bitwise(a, b, f"parameter {i}")


def test_ortmodule_mlp_trains_like_eager_with_torch_adamw() -> None:
    ort, eager = make_pair("mlp")
    ort_opt = FusedAdamW(ort.parameters(), lr=1e-2, weight_decay=0.01)
    eager_opt = torch.optim.AdamW(eager.parameters(), lr=1e-2, weight_decay=0.01, foreach=True)
    for step in range(20):
        x, target = make_batch("mlp", batch=8, seed=100 + step)
        for model, opt in ((ort, ort_opt), (eager, eager_opt)):
            opt.zero_grad()
            loss_of(model, x, target, False).backward()
            opt.step()
    assert_params_match(ort, eager)


# ---- SGD ----

SGD_CASES: dict[str, list[dict[str, Any]]] = {
    "plain": [{"lr": 0.1}],
    "momentum": [{"lr": 0.05, "momentum": 0.9}],
    "dampening_wd": [{"lr": 0.05, "momentum": 0.8, "dampening": 0.3, "weight_decay": 1e-3}],
    "nesterov": [{"lr": 0.02, "momentum": 0.9, "nesterov": True, "weight_decay": 1e-2}],
    "maximize": [{"lr": 0.01, "momentum": 0.5, "maximize": True, "weight_decay": 1e-2}],
    "two_groups": [{"lr": 0.1, "momentum": 0.9}, {"lr": 0.01, "weight_decay": 0.1}],
}


def torch_sgd(groups: Any) -> torch.optim.Optimizer:
    return torch.optim.SGD(groups, lr=0.1, foreach=True)


def fused_sgd(groups: Any) -> torch.optim.Optimizer:
    return FusedSGD(groups, lr=0.1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("case", list(SGD_CASES))
def test_sgd_matches_torch_foreach_bitwise(case: str, dtype: torch.dtype) -> None:
    # Parameter 4 joins at step 5: its momentum buffer starts while the others' exist.
    fused, reference, fused_params, torch_params = run_both(
        fused_sgd, torch_sgd, SGD_CASES[case], dtype, skip=lambda step, i: i == 4 and step < 5
    )
    for i, (a, b) in enumerate(zip(fused_params, torch_params)):
        assert_bitwise(a, b, f"parameter {i} {tuple(a.shape)}")
    assert_same_state(fused, reference)


def test_sgd_state_dict_moves_between_torch_and_fused() -> None:
    params_a = make_params()
    params_b = clone_params(params_a)
    opt_a = torch_sgd([{"params": params_a, "momentum": 0.9}])
    for step in range(4):
        set_grads(params_a, step)
        opt_a.step()
    with torch.no_grad():
        for a, b in zip(params_a, params_b):
            b.copy_(a)
    opt_b = fused_sgd(params_b)
    opt_b.load_state_dict(copy.deepcopy(opt_a.state_dict()))
    for step in range(4, 9):
        set_grads(params_a, step)
        set_grads(params_b, step)
        opt_a.step()
        opt_b.step()
    for i, (a, b) in enumerate(zip(params_a, params_b)):
        assert_bitwise(b, a, f"parameter {i} after the torch -> fused move")
    params_c = clone_params(params_b)
    opt_c = torch_sgd(params_c)
    opt_c.load_state_dict(copy.deepcopy(opt_b.state_dict()))
    for step in range(9, 12):
        for params, opt in ((params_a, opt_a), (params_c, opt_c)):
            set_grads(params, step)
            opt.step()
    for i, (a, c) in enumerate(zip(params_a, params_c)):
        assert_bitwise(c, a, f"parameter {i} after the fused -> torch move")


# ---- arithmetic of torch's baseline kernels ----

_DEFAULT_CAPABILITY_SCRIPT = """
import torch
from tests.python.test_fused_optim import ADAMW_CASES, SGD_CASES, run_both, torch_adamw
from tests.python.test_fused_optim import torch_sgd, fused_sgd, assert_bitwise
from ortmodule.optim import FusedAdamW
assert torch.backends.cpu.get_cpu_capability() == "DEFAULT"
for make_fused, make_torch, cases in ((FusedAdamW, torch_adamw, ADAMW_CASES),
                                      (fused_sgd, torch_sgd, SGD_CASES)):
    for options in cases.values():
        _, _, fused_params, torch_params = run_both(make_fused, make_torch, options, steps=5)
        for a, b in zip(fused_params, torch_params):
            assert_bitwise(a, b, "parameter")
print("ok")
"""


def test_matches_torch_default_cpu_capability_without_fma() -> None:
    # torch's DEFAULT kernels round a*b before adding c; the fused optimizers follow them.
    env = {**os.environ, "ATEN_CPU_CAPABILITY": "default"}
    result = subprocess.run(
        [sys.executable, "-c", _DEFAULT_CAPABILITY_SCRIPT],
        env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


# ---- refusals ----


def test_refuses_sparse_complex_and_non_cpu_with_the_parameter_named() -> None:
    emb = torch.nn.Embedding(10, 3, sparse=True)
    emb(torch.tensor([1, 2])).sum().backward()
    with pytest.raises(ValueError, match=r"param_groups\[0\]\['params'\]\[0\].*sparse"):
        FusedAdamW(emb.parameters()).step()

    z = torch.zeros(3, dtype=torch.complex64, requires_grad=True)
    z.grad = torch.ones_like(z)
    with pytest.raises(ValueError, match=r"param_groups\[0\]\['params'\]\[1\].*complex"):
        FusedSGD([torch.zeros(2, requires_grad=True), z], lr=0.1).step()

    meta = torch.zeros(3, device="meta", requires_grad=True)
    meta.grad = torch.zeros(3, device="meta")
    with pytest.raises(ValueError, match="on meta.*CPU tensors only"):
        FusedAdamW([meta]).step()

    named = torch.nn.Linear(4, 4)
    named.weight.grad = torch.ones(4, 4)
    named.bias.grad = torch.ones(8)[::2]
    with pytest.raises(ValueError, match=r"\['params'\]\[1\] \('bias'\): grad must be a contig"):
        FusedAdamW(named.named_parameters()).step()


def test_refuses_adam_state_with_l2_weight_decay() -> None:
    adam = torch.optim.Adam([torch.zeros(2, requires_grad=True)], weight_decay=0.1)
    p = torch.zeros(2, requires_grad=True)
    p.grad = torch.ones(2)
    opt = FusedAdamW([p])
    opt.load_state_dict(adam.state_dict())
    with pytest.raises(ValueError, match="decoupled_weight_decay=False"):
        opt.step()


def test_refuses_non_contiguous_parameters_and_tensor_lr() -> None:
    p = torch.randn(4, 6).t().requires_grad_()
    p.grad = torch.ones_like(p)
    with pytest.raises(ValueError, match="not contiguous"):
        FusedAdamW([p]).step()
    with pytest.raises(TypeError, match="lr must be a Python number"):
        FusedAdamW([torch.zeros(2, requires_grad=True)], lr=torch.tensor(0.1))
    with pytest.raises(ValueError, match="invalid beta parameter at index 1"):
        FusedAdamW([torch.zeros(2, requires_grad=True)], betas=(0.9, 1.0))
    with pytest.raises(ValueError, match="nesterov"):
        FusedSGD([torch.zeros(2, requires_grad=True)], lr=0.1, nesterov=True)
