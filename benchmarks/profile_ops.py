"""Where does an ORTModule training step spend its time? Prints per-op totals.

    python benchmarks/profile_ops.py --model cnn28 --steps 20
    python benchmarks/profile_ops.py --model bert --steps 5    # any model of run.py
    python benchmarks/profile_ops.py --model bert-base --device cuda --steps 5
    python benchmarks/profile_ops.py --model bert-base --device cuda --autocast bf16

On cuda the engine's op times are host times (a kernel launch returns before the kernel
ends), so the GPU's own kernel times are listed as well, from torch.profiler (CUPTI): every
kernel of the step, the engine's and torch's (the optimizer, autograd's accumulation), by
kernel name, with the whole step's GPU busy time against its wall time.

After the per-op table, the GEMM calls by shape (``<op(A)><op(B)> [batch x ]MxNxK``, N: as
stored, T: transposed) with their achieved GFLOP/s: which products run below the BLAS's best.
"""

from __future__ import annotations

import argparse
import time

import torch
from _models import WORKLOADS, loss_of  # type: ignore[import-not-found]
from bench_train_step import BATCH_SIZE, make_model  # type: ignore[import-not-found]

from ortmodule import _C, ORTModule


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", default="cnn",
                        choices=["cnn28", *WORKLOADS])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--kernels", type=int, default=40, help="kernel rows listed on cuda")
    parser.add_argument("--autocast", default=None, choices=["bf16", "fp16"],
                        help="forward under torch.autocast in this 16-bit type (fp16: with "
                        "a GradScaler)")
    args = parser.parse_args()
    device = torch.device(args.device)
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    if args.model == "cnn28":
        module, x = make_model(args.model)
        y = torch.randint(0, 10, (BATCH_SIZE,))
        model = ORTModule(module)
        loss_fn = torch.nn.CrossEntropyLoss()

        def step() -> None:
            loss_fn(model(x), y).backward()
    else:
        workload = WORKLOADS[args.model]
        model = ORTModule(workload.build().to(device))
        batch = {k: v.to(device) for k, v in workload.batch().items()}
        dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(args.autocast or "")
        scaler = torch.amp.GradScaler(device.type) if dtype == torch.float16 else None

        def backward() -> None:
            with torch.autocast(device.type, dtype=dtype or torch.float32,
                                enabled=dtype is not None):
                loss = loss_of(model(**batch))
            (scaler.scale(loss) if scaler else loss).backward()

        if device.type == "cuda":
            from ortmodule.optim import FusedAdamW

            optimizer = FusedAdamW(model.parameters(), lr=1e-4, match_torch_sqrt=False)

            def step() -> None:
                backward()
                if scaler:
                    scaler.step(optimizer)
                    scaler.update()
                else:
                    optimizer.step()
                optimizer.zero_grad()
        else:
            step = backward
    for _ in range(3):
        step()
    if device.type == "cuda":
        print_cuda_kernels(step, args.steps, args.kernels)
    _C.set_profiling(True)
    _C.profile_snapshot(reset=True)
    _C.gemm_profile_snapshot(reset=True)
    start = time.perf_counter()
    for _ in range(args.steps):
        step()
    total = (time.perf_counter() - start) / args.steps
    _C.set_profiling(False)
    rows = sorted(_C.profile_snapshot().items(), key=lambda kv: -kv[1][1])
    gemms = sorted(_C.gemm_profile_snapshot().items(), key=lambda kv: -kv[1][1])
    engine = sum(s for _, (_, s) in rows) / args.steps
    print(f"step {total * 1e3:.3f} ms, of which engine ops {engine * 1e3:.3f} ms")
    print(f"{'op':32s} {'calls/step':>10s} {'ms/step':>9s} {'share':>6s}")
    for op, (calls, seconds) in rows:
        per_step = seconds / args.steps
        print(f"{op:32s} {calls / args.steps:10.1f} {per_step * 1e3:9.3f} {per_step / total:6.1%}")
    print_gemms(gemms, args.steps, total)


def print_cuda_kernels(step: object, steps: int, limit: int) -> None:
    """GPU kernel time per step by kernel name (torch.profiler), and the GPU's busy share."""
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        start = time.perf_counter()
        for _ in range(steps):
            step()  # type: ignore[operator]
        torch.cuda.synchronize()
        wall = (time.perf_counter() - start) / steps
    kernels: dict[str, list[float]] = {}
    for event in prof.events():
        if event.device_type == torch.autograd.DeviceType.CUDA:
            calls_us = kernels.setdefault(event.name, [0, 0.0])
            calls_us[0] += 1
            calls_us[1] += event.device_time
    busy = sum(us for _, us in kernels.values()) / steps / 1e3
    print(f"cuda: step {wall * 1e3:.3f} ms wall (profiler on), GPU kernels {busy:.3f} ms "
          f"({busy / (wall * 1e3):.0%} busy)")
    print(f"{'kernel':80s} {'calls/step':>10s} {'ms/step':>9s} {'share':>6s}")
    for name, (calls, us) in sorted(kernels.items(), key=lambda kv: -kv[1][1])[:limit]:
        per_step = us / steps / 1e3
        print(f"{name[:80]:80s} {calls / steps:10.1f} {per_step:9.3f} {per_step / busy:6.1%}")
    print()


def print_gemms(gemms: list[tuple[str, tuple[int, float, float]]], steps: int,
                total: float) -> None:
    """The GEMM calls by shape: calls and ms per step, share of the step, GFLOP/s."""
    if not gemms:
        return
    seconds = sum(s for _, (_, s, _) in gemms) / steps
    flops = sum(f for _, (_, _, f) in gemms) / steps
    print(f"\nGEMM calls: {seconds * 1e3:.3f} ms/step ({seconds / total:.1%} of the step), "
          f"{flops / seconds / 1e9:.0f} GFLOP/s overall")
    print(f"{'shape':32s} {'calls/step':>10s} {'ms/step':>9s} {'share':>6s} {'GFLOP/s':>8s}")
    for shape, (calls, secs, flop) in gemms:
        per_step = secs / steps
        print(f"{shape:32s} {calls / steps:10.1f} {per_step * 1e3:9.3f} {per_step / total:6.1%} "
              f"{flop / secs / 1e9:8.0f}")


if __name__ == "__main__":
    main()
