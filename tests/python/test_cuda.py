"""The CUDA backend: what the build reports, the per-element math the CUDA kernels share with
the CPU kernels, and (on a machine with a GPU) models trained on a CUDA device against the CPU
engine and eager PyTorch. `make cuda-check` runs this file on the CUDA build, where
ORTMODULE_EXPECT_CUDA_BUILD=1 makes a build without its CUDA kernels a failure."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from ortmodule import _C, ORTModule
from tests.python import harness_env

ROOT = Path(__file__).resolve().parents[2]
CUDA_INFO = _C.cuda_info()
HAS_GPU = CUDA_INFO["compiled"] and torch.cuda.is_available()
needs_gpu = pytest.mark.skipif(
    not HAS_GPU,
    reason="no CUDA device visible (or a build without CUDA kernels): the CUDA kernels run "
    "only on a machine with a GPU",
)
if HAS_GPU:
    # Convolutions on CUDA run torch's cuDNN convolution, which follows torch's TF32 switch
    # (on by default); products follow torch.backends.cuda.matmul.allow_tf32 (off by default).
    # The tolerances here are full float32's.
    torch.backends.cudnn.allow_tf32 = False


def test_build_reports_its_cuda_kernels() -> None:
    rows = _C.op_table()
    twins = {(r["domain"], r["op_type"], r["since_version"]) for r in rows if r["cuda"] == "yes"}
    assert twins, "the op table names no CUDA kernel"
    if harness_env.startup("ORTMODULE_EXPECT_CUDA_BUILD") == "1":
        assert CUDA_INFO["compiled"], "make cuda-check built _C without its CUDA kernels"
    if not CUDA_INFO["compiled"]:
        # A CPU build: no backend, no device, no kernel; rows still name their CUDA twins.
        assert CUDA_INFO == {"compiled": False, "device_count": 0, "kernels": []}
        assert torch.version.cuda is None or harness_env.startup("ORTMODULE_CUDA") == "0"
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
    cu = "\n".join(p.read_text() for p in sorted((ROOT / "csrc/backends/cuda").glob("*.cu")))
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


# Per-channel and per-window kernels: every helper of the shared header is called by the CPU
# kernels and by the CUDA file alike.
SHARED_MATH = {
    "csrc/kernels/math/pool.h": (["csrc/kernels/cpu/pool.cpp", "csrc/ops/window.cpp"],
                                 "csrc/backends/cuda/pool.cu"),
    "csrc/kernels/math/batchnorm.h": (["csrc/kernels/cpu/batchnorm.cpp"],
                                      "csrc/backends/cuda/batchnorm.cu"),
}


@pytest.mark.parametrize("header", sorted(SHARED_MATH))
def test_window_and_channel_kernels_share_the_cpu_math(header: str) -> None:
    helpers = set(re.findall(r"^ORTM_HOST_DEVICE [\w:<>]+ (\w+)\(",
                             (ROOT / header).read_text(), re.MULTILINE))
    assert helpers, f"no ORTM_HOST_DEVICE helper found in {header}"
    cpu_files, cuda_file = SHARED_MATH[header]
    cpu = "".join((ROOT / f).read_text() for f in cpu_files)
    cu = (ROOT / cuda_file).read_text()
    for name in sorted(helpers):
        assert re.search(rf"\b{name}(<\w+>)?\(", cpu), f"{name} ({header}) unused on the CPU"
        assert re.search(rf"\b{name}(<\w+>)?\(", cu), f"{name} ({header}) unused in {cuda_file}"


def test_data_movement_kernels_share_the_cpu_index_math() -> None:
    """The CUDA twins of the data-movement ops compute offsets, masks, scans and scatter
    reductions with the kernels/math/index.h helpers that their CPU kernels call."""
    cuda_dir = ROOT / "csrc/backends/cuda"
    cu = "".join((cuda_dir / f).read_text() for f in ("layout.cu", "slice_pad.cu", "gather.cu", "index.cu"))
    cpu = "".join(path.read_text() for path in (ROOT / "csrc/ops").glob("*_ops.cpp"))
    used = _math_calls(cu)
    expected = {"box_offset", "tiled_offset", "padded_source_offset", "trilu_keeps", "cumsum_line",
                "scatter_reduce", "index_in_range", "wrap_index"}
    assert expected <= used, sorted(expected - used)
    assert used <= _math_calls(cpu), sorted(used - _math_calls(cpu))


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


class SmallCNN(torch.nn.Module):
    """Conv (padded, and strided with groups), BatchNorm, ReLU, MaxPool, AveragePool (ceil_mode,
    count_include_pad, and one over the whole map in place of a global average: the capture
    lowers adaptive_avg_pool2d(1) to ReduceMean) and Linear."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn1 = torch.nn.BatchNorm2d(8)
        self.pool = torch.nn.MaxPool2d(2)
        self.conv2 = torch.nn.Conv2d(8, 8, 3, stride=2, padding=1, groups=2)
        self.bn2 = torch.nn.BatchNorm2d(8)
        self.avg = torch.nn.AvgPool2d(2, stride=1, padding=1, ceil_mode=True,
                                      count_include_pad=True)
        self.global_avg = torch.nn.AvgPool2d(4)
        self.fc = torch.nn.Linear(8, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.pool(torch.relu(self.bn1(self.conv1(x))))  # [N, 8, 6, 6]
        h = torch.relu(self.bn2(self.conv2(h)))  # [N, 8, 3, 3]
        h = self.global_avg(self.avg(h))  # [N, 8, 4, 4] -> [N, 8, 1, 1]
        return self.fc(torch.flatten(h, 1))


def _sgd_steps(model: torch.nn.Module, x: torch.Tensor, steps: int) -> list[list[torch.Tensor]]:
    """Per step: output, parameter gradients, then parameters and buffers after the update
    (on the CPU)."""
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    record = []
    for _ in range(steps):
        opt.zero_grad()
        y = model(x)
        (y * y).mean().backward()
        opt.step()
        state = [y.detach(), *(p.grad for p in model.parameters()), *model.parameters(),
                 *model.buffers()]
        # Copies: on the CPU .cpu() returns the live tensor, which the next step updates.
        record.append([t.detach().cpu().clone() for t in state])
    return record


@needs_gpu
def test_cnn_on_cuda_matches_cpu_and_eager() -> None:
    torch.manual_seed(0)
    reference = SmallCNN()
    x = torch.randn(4, 3, 12, 12, generator=torch.Generator().manual_seed(1))
    eager = _sgd_steps(copy.deepcopy(reference), x, 2)
    cpu = _sgd_steps(ORTModule(copy.deepcopy(reference)), x, 2)
    model = ORTModule(copy.deepcopy(reference).cuda())
    gpu = _sgd_steps(model, x.cuda(), 2)  # the second step runs the cached graph
    assert all(p.device.type == "cuda" for p in model.parameters())
    for step in range(2):
        for got, on_cpu, in_eager in zip(gpu[step], cpu[step], eager[step]):
            torch.testing.assert_close(got, on_cpu, rtol=1e-4, atol=1e-5)
            torch.testing.assert_close(got, in_eager, rtol=1e-4, atol=1e-5)



class _Convs(torch.nn.Module):
    """A padded Conv and a strided one after an uneven F.pad (a Pad op of its own). The Conv
    rows with uneven ONNX pads, which run the engine's im2col kernels instead of cuDNN, are
    test_ops.py's CUDA cases."""

    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.b = torch.nn.Conv2d(8, 4, 3, stride=2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(torch.nn.functional.pad(torch.relu(self.a(x)), (0, 2, 1, 0)))


@needs_gpu
@pytest.mark.parametrize("tf32", [False, True])
def test_conv_follows_torch_cudnn_settings(tf32: bool) -> None:
    """Convolutions on CUDA agree with eager's on the same GPU under torch's TF32 switch for
    cuDNN, either way (full float32: tight; TF32: TF32's rounding)."""
    torch.manual_seed(0)
    reference = _Convs().cuda()
    x = torch.randn(4, 3, 16, 16, device="cuda")
    tolerance = {"rtol": 2e-3, "atol": 2e-3} if tf32 else {"rtol": 1e-5, "atol": 1e-5}
    before = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = tf32
    try:
        runs = []
        for model in (copy.deepcopy(reference), ORTModule(copy.deepcopy(reference))):
            y = model(x)
            (y * y).sum().backward()
            runs.append([y.detach(), *(p.grad for p in model.parameters())])
    finally:
        torch.backends.cudnn.allow_tf32 = before
    for got, eager in zip(runs[1], runs[0]):
        torch.testing.assert_close(got, eager, **tolerance)

def _row_without_cuda_kernel() -> tuple[str, Any] | None:
    """An op of the default domain without a CUDA kernel (its row's cuda column empty: not
    "yes", not "host") and a sample of it with float32 inputs only, or None once every row has
    a kernel."""
    from tests.python.op_samples import SAMPLES

    for row in _C.op_table():
        if row["cuda"] != "" or row["internal"] or row["domain"] not in ("", "ai.onnx"):
            continue
        for sample in SAMPLES.get(row["op_type"], []):
            if (row["since_version"] <= sample.opset <= row["until_version"] and sample.inputs
                    and all(v.dtype == np.float32 for v in sample.inputs.values())):
                return row["op_type"], sample
    return None


@needs_gpu
def test_op_without_cuda_kernel_names_the_op() -> None:
    # The conv, pool and batch-norm rows now have kernels: the op is taken from the table,
    # the first row still without one, run on its own as a one-node program.
    found = _row_without_cuda_kernel()
    if found is None:
        pytest.skip("every row of the default domain has a CUDA kernel: the error path has no "
                    "op left to reach it")
    from tests.python.test_ops import build_model, to_torch

    op, sample = found
    program = _C.Program(build_model(op, sample).SerializeToString(), [], [])
    inputs = [to_torch(v).cuda() for v in sample.inputs.values()]
    with pytest.raises(RuntimeError, match=rf"{op} .*has no CUDA kernel"):
        _C.run(program, inputs)


_BRIDGE_DEVICES: list[str] = []


class _ScaledGrad(torch.autograd.Function):
    """x * w with a custom backward (scaled by 3 and 0.5), so the engine must call it through
    the TorchCall / TorchCallGrad bridge; records in _BRIDGE_DEVICES the device its forward
    ran on."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        _BRIDGE_DEVICES.append(x.device.type)
        ctx.save_for_backward(x, w)
        return x * w

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x, w = ctx.saved_tensors
        return 3.0 * grad * w, 0.5 * grad * x


class Bridged(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.w = torch.nn.Parameter(torch.randn(4, 8, generator=g))
        self.b = torch.nn.Parameter(torch.randn(4, 8, generator=g))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(_ScaledGrad.apply(torch.tanh(x * self.b), self.w))


@needs_gpu
def test_torch_call_runs_on_the_device_tensors() -> None:
    x = torch.randn(4, 8, generator=torch.Generator().manual_seed(1))
    eager = _sgd_steps(Bridged(), x, 2)
    model = ORTModule(Bridged().cuda())
    _BRIDGE_DEVICES.clear()
    gpu = _sgd_steps(model, x.cuda(), 2)
    # The engine handed the call its device tensors (capture may also trace it on fake ones).
    assert "cuda" in _BRIDGE_DEVICES and "cpu" not in _BRIDGE_DEVICES, _BRIDGE_DEVICES
    for step in range(2):
        for got, in_eager in zip(gpu[step], eager[step]):
            torch.testing.assert_close(got, in_eager, rtol=1e-5, atol=1e-6)


@needs_gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_cuda_autocast_trains_like_eager(dtype: torch.dtype) -> None:
    """torch.autocast('cuda') around a CUDA model: the autocast casts are traced into the
    graph and the engine rounds each 16-bit value where eager does; with float16,
    GradScaler's scales and skipped steps follow eager's."""
    from tests.python.test_autocast import train_like_eager_with_scaler

    train_like_eager_with_scaler("cuda", dtype, steps=8)


@needs_gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_cuda_autocast_convolutions_run_in_16_bits(dtype: torch.dtype) -> None:
    """Convolutions under torch.autocast('cuda') run on torch's 16-bit cuDNN convolution and
    train like eager's."""
    from tests.python.test_autocast import train_cnn_like_eager

    train_cnn_like_eager("cuda", dtype)


@needs_gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_cuda_autocast_transposed_convolutions_run_in_16_bits(dtype: torch.dtype) -> None:
    """Transposed convolutions under torch.autocast('cuda') run on torch's 16-bit transposed
    convolution (their gradients on its 16-bit Conv and ConvGrad) and train like eager's."""
    from tests.python.test_autocast import DecoderNet, train_cnn_like_eager

    train_cnn_like_eager("cuda", dtype, build=DecoderNet)


