"""FusedAdamW / FusedSGD on CUDA parameters: the multi-tensor CUDA kernels (kernels/cuda/optim.cu)
against torch.optim on the same device and against the CPU kernels they share their math with,
and (on any machine) the refusals of groups the kernels cannot take. `make cuda-check` runs
this file on the CUDA build."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from ortmodule import _C
from ortmodule.optim import FusedAdamW, FusedSGD, _group_device

ROOT = Path(__file__).resolve().parents[2]
CUDA_KERNELS = _C._fused_optimizers_have_cuda_kernels()
needs_gpu = pytest.mark.skipif(
    not (CUDA_KERNELS and torch.cuda.is_available()),
    reason="no CUDA device visible (or a build without CUDA kernels): the fused optimizers' "
    "CUDA kernels run only on a machine with a GPU",
)

# Above the kernels' chunk (32768 elements): several blocks per tensor, and a tail chunk.
SIZES = [(300, 257), (17,), (4096, 3), (0,)]


def _params(device: str, dtype: torch.dtype, seed: int = 0) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(s, generator=g, dtype=dtype).to(device).requires_grad_() for s in SIZES]


def _grads(params: list[torch.Tensor], steps: int, seed: int = 1) -> list[list[torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    return [[torch.randn(p.shape, generator=g, dtype=p.dtype).to(p.device) for p in params]
            for _ in range(steps)]


def _run(opt: torch.optim.Optimizer, params: list[torch.Tensor],
         grads: list[list[torch.Tensor]]) -> None:
    for step_grads in grads:
        for p, g in zip(params, step_grads):
            p.grad = g.clone()
        opt.step()


# ---- on a GPU: against torch.optim on CUDA and against the CPU kernels ----

ADAMW_CASES = [
    {},
    {"amsgrad": True},
    {"maximize": True, "weight_decay": 0.0},
    {"betas": (0.3, 0.99), "weight_decay": 0.1},
]


@needs_gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("kwargs", ADAMW_CASES)
@pytest.mark.parametrize("torch_impl", ["foreach", "fused"])
def test_adamw_on_cuda_matches_torch(dtype: torch.dtype, kwargs: dict, torch_impl: str) -> None:
    ours_p = _params("cuda", dtype)
    ref_p = [p.detach().clone().requires_grad_() for p in ours_p]
    grads = _grads(ours_p, steps=5)
    hyper = {"lr": 1e-2, **kwargs}
    _run(FusedAdamW(ours_p, **hyper), ours_p, grads)
    _run(torch.optim.AdamW(ref_p, **hyper, **{torch_impl: True}), ref_p, grads)
    tol = {"rtol": 1e-5, "atol": 1e-6} if dtype == torch.float32 else {"rtol": 1e-12, "atol": 1e-14}
    for ours, ref in zip(ours_p, ref_p):
        assert ours.device.type == "cuda"
        torch.testing.assert_close(ours, ref, **tol)


SGD_CASES = [
    {},
    {"momentum": 0.9},
    {"momentum": 0.9, "nesterov": True, "weight_decay": 0.01},
    {"momentum": 0.5, "dampening": 0.1, "maximize": True},
]


@needs_gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("kwargs", SGD_CASES)
def test_sgd_on_cuda_matches_torch(dtype: torch.dtype, kwargs: dict) -> None:
    ours_p = _params("cuda", dtype)
    ref_p = [p.detach().clone().requires_grad_() for p in ours_p]
    grads = _grads(ours_p, steps=4)
    opt = FusedSGD(ours_p, lr=0.05, **kwargs)
    _run(opt, ours_p, grads)
    ref = torch.optim.SGD(ref_p, lr=0.05, foreach=True, **kwargs)
    _run(ref, ref_p, grads)
    tol = {"rtol": 1e-5, "atol": 1e-6} if dtype == torch.float32 else {"rtol": 1e-12, "atol": 1e-14}
    for ours, theirs in zip(ours_p, ref_p):
        torch.testing.assert_close(ours, theirs, **tol)
        if kwargs.get("momentum"):
            torch.testing.assert_close(opt.state[ours]["momentum_buffer"],
                                       ref.state[theirs]["momentum_buffer"], **tol)


@needs_gpu
@pytest.mark.skipif(not _C._cpu_has_fused_multiply_add(), reason="the CPU has no FMA")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_cuda_kernels_compute_the_cpu_kernels_math_bitwise(dtype: torch.dtype) -> None:
    """The CUDA kernels run kernels/math/optim.h with fused multiply-adds and the IEEE square
    root: the CPU's FusedAdamW(match_torch_sqrt=False) / FusedSGD with FMA, bit for bit."""
    for make in (lambda ps: FusedAdamW(ps, lr=1e-2, amsgrad=True, match_torch_sqrt=False),
                 lambda ps: FusedSGD(ps, lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.1)):
        gpu = _params("cuda", dtype)
        cpu = [p.detach().cpu().requires_grad_() for p in gpu]
        grads = _grads(gpu, steps=3)
        _run(make(gpu), gpu, grads)
        cpu_opt = make(cpu)
        cpu_opt._fused_multiply_add = True
        _run(cpu_opt, cpu, [[g.cpu() for g in step] for step in grads])
        for g, c in zip(gpu, cpu):
            assert torch.equal(g.cpu(), c)


@needs_gpu
def test_cuda_step_keeps_the_step_count_on_the_host_and_state_dicts_move() -> None:
    params = _params("cuda", torch.float32)
    opt = FusedAdamW(params, lr=1e-3)
    _run(opt, params, _grads(params, steps=2))
    state = opt.state[params[0]]
    assert state["step"].device.type == "cpu" and state["step"].item() == 2
    assert state["exp_avg"].device == params[0].device
    ref = torch.optim.AdamW([p.detach().clone().requires_grad_() for p in params], foreach=True)
    ref.load_state_dict(opt.state_dict())
    assert torch.equal(ref.state[ref.param_groups[0]["params"][0]]["exp_avg"], state["exp_avg"])


# ---- on any machine: groups the kernels cannot take ----


def test_group_spanning_devices_is_refused_naming_both_parameters() -> None:
    cpu = torch.zeros(3, requires_grad=True)
    meta = torch.zeros(3, device="meta", requires_grad=True)
    cpu.grad, meta.grad = torch.ones(3), torch.zeros(3, device="meta")
    model = {"first": cpu, "second": meta}
    for opt in (FusedAdamW(model.items()), FusedSGD(model.items(), lr=0.1, momentum=0.9)):
        with pytest.raises(ValueError, match=re.escape(
                "param_groups[0]['params'][0] ('first') is on cpu but "
                "param_groups[0]['params'][1] ('second') is on meta; one step updates one "
                "device's parameters")):
            opt.step()
        assert not opt.state, "state was created before the refusal"


def test_cuda_parameters_need_a_build_with_cuda_kernels() -> None:
    """The device check reads only .device, so CUDA parameters are stood in for here."""
    group = {"param_names": ["w", "b"]}
    on_cuda = [SimpleNamespace(device=torch.device("cuda", 1))] * 2
    if CUDA_KERNELS:
        assert _group_device("FusedAdamW", 0, group, on_cuda, [0, 1]) == torch.device("cuda", 1)
    else:
        with pytest.raises(ValueError, match=re.escape(
                "FusedAdamW: param_groups[0]['params'][1] ('b') is on cuda:1 but this build of "
                "ortmodule has no CUDA kernels (a CPU build)")):
            _group_device("FusedAdamW", 0, group, on_cuda, [1, 0])
    mixed = [SimpleNamespace(device=torch.device("cuda", 0)),
             SimpleNamespace(device=torch.device("cuda", 1))]
    with pytest.raises(ValueError, match=r"\('w'\) is on cuda:0 but .*\('b'\) is on cuda:1"):
        _group_device("FusedSGD", 0, group, mixed, [0, 1])


def test_cpu_and_cuda_kernels_call_the_shared_math() -> None:
    """Every per-element helper of kernels/math/optim.h is called by the CPU loops and the CUDA
    kernels alike, and neither writes the update arithmetic of its own."""
    header = (ROOT / "csrc/kernels/math/optim.h").read_text()
    helpers = set(re.findall(r"^ORTM_HOST_DEVICE T (\w+)\(", header, re.MULTILINE))
    assert {"adamw_exp_avg", "adamw_exp_avg_sq", "adamw_param", "sgd_grad", "sgd_param"} <= helpers
    cpu = (ROOT / "csrc/optim/multi_tensor.cpp").read_text()
    cu = (ROOT / "csrc/kernels/cuda/optim.cu").read_text()
    for name in sorted(helpers):
        assert re.search(rf"\b{name}(<\w+>)?\(", cpu), f"{name} unused by multi_tensor.cpp"
        assert re.search(rf"\b{name}(<\w+>)?\(", cu), f"{name} unused by optim.cu"
    for source in (cpu, cu):
        assert not re.search(r"\b(fmaf?|__builtin_fmaf?|__fmaf_rn|sqrtf?)\(", source)
    assert "#include \"kernels/math/optim.h\"" in cpu and "#include \"kernels/math/optim.h\"" in cu
