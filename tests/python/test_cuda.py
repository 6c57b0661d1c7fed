"""The CUDA backend: what the build reports, the per-element math the CUDA kernels share with
the CPU kernels, and (on a machine with a GPU) models trained on a CUDA device against the CPU
engine and eager PyTorch. `make cuda-check` runs this file on the CUDA build, where
ORTMODULE_EXPECT_CUDA_BUILD=1 makes a build without its CUDA kernels a failure."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
import torch

from ortmodule import _C, ORTModule

ROOT = Path(__file__).resolve().parents[2]
CUDA_INFO = _C.cuda_info()
HAS_GPU = CUDA_INFO["compiled"] and torch.cuda.is_available()
needs_gpu = pytest.mark.skipif(
    not HAS_GPU,
    reason="no CUDA device visible (or a build without CUDA kernels): the CUDA kernels run "
    "only on a machine with a GPU",
)


def test_build_reports_its_cuda_kernels() -> None:
    rows = _C.op_table()
    twins = {(r["domain"], r["op_type"], r["since_version"]) for r in rows if r["cuda"] == "yes"}
    assert twins, "the op table names no CUDA kernel"
    if os.environ.get("ORTMODULE_EXPECT_CUDA_BUILD") == "1":
        assert CUDA_INFO["compiled"], "make cuda-check built _C without its CUDA kernels"
    if not CUDA_INFO["compiled"]:
        # A CPU build: no backend, no device, no kernel; rows still name their CUDA twins.
        assert CUDA_INFO == {"compiled": False, "device_count": 0, "kernels": []}
        assert torch.version.cuda is None or os.environ.get("ORTMODULE_CUDA") == "0"
        return
    linked = {(r["domain"], r["op_type"], r["since_version"]) for r in rows if r["cuda_linked"]}
    # Every kernel a row names is linked (a missing definition would leave its weak slot null).
    assert twins <= linked, sorted(twins - linked)
    assert set(map(tuple, CUDA_INFO["kernels"])) == linked
    assert CUDA_INFO["device_count"] == torch.cuda.device_count()


# ---- the CUDA kernels compute with the CPU kernels' per-element math ----


def _bodies(source: str, prefix: str) -> dict[str, str]:
    """Function name (without `prefix`) -> body, for each `void <prefix>X(OpContext& ctx)`
    defined on one line or closed by a brace at the start of a line."""
    pattern = rf"^void {prefix}(\w+)\(OpContext& ctx\) \{{([^\n]*\}}$|.*?^\}})"
    return {m.group(1): m.group(2)
            for m in re.finditer(pattern, source, re.MULTILINE | re.DOTALL)}


def _math_calls(text: str) -> set[str]:
    return set(re.findall(r"math::(\w+)\(", text))


def test_cuda_kernels_share_the_cpu_math() -> None:
    cu = "\n".join(p.read_text() for p in sorted((ROOT / "csrc/kernels/cuda").glob("*.cu")))
    functors = {m.group(1): _math_calls(m.group(2))
                for m in re.finditer(r"struct (\w+Op) \{(.*?)\n\};", cu, re.DOTALL)}
    cpu = {}
    for path in (ROOT / "csrc/ops").glob("*_ops.cpp"):
        cpu.update(_bodies(path.read_text(), "cpu_"))
    checked = 0
    for name, body in _bodies(cu, "cuda_").items():
        used = set().union(*(functors.get(f, set())
                             for f in re.findall(r"(\w+Op)(?:<\w+>)?\{", body)))
        if not used:
            continue  # plain arithmetic (Add, Exp, ...) has no shared helper to compare
        assert name in cpu, f"cuda_{name} has no CPU kernel cpu_{name}"
        missing = used - _math_calls(cpu[name])
        assert not missing, f"cuda_{name} calls math::{sorted(missing)}, cpu_{name} does not"
        checked += 1
    assert checked >= 8, f"only {checked} CUDA kernels were matched to their CPU kernels"


# ---- on a GPU: models on a CUDA device against the CPU engine and eager PyTorch ----


class Pointwise(torch.nn.Module):
    """Element-wise ops only (the ops that have CUDA kernels), with parameters of the input's
    shape so no gradient needs a broadcast reduction."""

    def __init__(self) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.w = torch.nn.Parameter(torch.randn(4, 8, generator=g))
        self.b = torch.nn.Parameter(torch.randn(4, 8, generator=g))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.tanh(x * self.w + self.b)
        return torch.sigmoid(h) * torch.relu(h) + torch.nn.functional.gelu(h) / (self.w * self.w + 1)


def _train_step(model: torch.nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
    model.zero_grad()
    y = model(x)
    y.sum().backward()
    return y.detach().cpu(), [p.grad.detach().cpu() for p in model.parameters()]


@needs_gpu
@pytest.mark.parametrize("wrap_first", [True, False], ids=["ORTModule.to", "module.cuda"])
def test_model_on_cuda_matches_cpu_and_eager(wrap_first: bool) -> None:
    x = torch.randn(4, 8, generator=torch.Generator().manual_seed(1))
    eager_y, eager_grads = _train_step(Pointwise(), x)
    cpu_y, cpu_grads = _train_step(ORTModule(Pointwise()), x)
    model = ORTModule(Pointwise()).to("cuda") if wrap_first else ORTModule(Pointwise().cuda())
    for _ in range(2):  # the second step runs the cached graph
        gpu_y, gpu_grads = _train_step(model, x.cuda())
        assert all(p.device.type == "cuda" for p in model.parameters())
        for got, cpu, eager in zip([gpu_y, *gpu_grads], [cpu_y, *cpu_grads], [eager_y, *eager_grads]):
            torch.testing.assert_close(got, cpu, rtol=1e-5, atol=1e-6)
            torch.testing.assert_close(got, eager, rtol=1e-5, atol=1e-6)


@needs_gpu
def test_inputs_on_two_devices_are_refused() -> None:
    model = ORTModule(Pointwise().cuda())
    with pytest.raises(ValueError, match=r"is on cpu but input .* is on cuda:0"):
        model(torch.randn(4, 8))


@needs_gpu
def test_op_without_cuda_kernel_names_the_op() -> None:
    model = ORTModule(torch.nn.Conv2d(1, 1, 3).cuda())
    with pytest.raises(RuntimeError, match=r"Conv .*has no CUDA kernel"):
        model(torch.randn(1, 1, 5, 5, device="cuda"))
