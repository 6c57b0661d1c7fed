"""On-device training step time: ortmodule's runtime (through its Python API) vs ONNX Runtime
Training 1.19.2 on the same artifacts, with eager PyTorch for context.

A step is: train step (forward, cross-entropy loss, gradients) + AdamW optimizer step +
lazy_reset_grad, on one fixed random batch. Model: the reference's on-device test MLP
(Linear 784-500-10 with ReLU), batch 64. Artifacts are made once by
ortmodule.training.artifacts.generate_artifacts; each runner trains the same files in its own
process (the reference in .venv-ref, `make ref-venv`). Median over --steps steps after --warmup.

    python benchmarks/bench_on_device.py [--steps 50] [--threads 2]
"""

from __future__ import annotations

import argparse
import io
import json
import pathlib
import statistics
import subprocess
import sys
import tempfile
import textwrap

ROOT = pathlib.Path(__file__).resolve().parents[1]

TIMING_LOOP = textwrap.dedent("""
    import json, sys, time
    import numpy as np
    {imports}
    d, steps, warmup, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    {setup}
    data = np.load(d + "/batch.npz")
    x, y = data["input"], data["labels"]
    state = CheckpointState.load_checkpoint(d + "/checkpoint")
    module = Module(d + "/training_model.onnx", state, d + "/eval_model.onnx", **module_kwargs)
    optimizer = Optimizer(d + "/optimizer_model.onnx", module)
    times, losses = [], []
    for i in range(warmup + steps):
        t0 = time.perf_counter()
        loss = module(x, y)
        optimizer.step()
        module.lazy_reset_grad()
        t1 = time.perf_counter()
        losses.append(float(loss))
        if i >= warmup:
            times.append(t1 - t0)
    print(json.dumps({{"times": times, "losses": losses}}))
""")

OURS = TIMING_LOOP.format(
    imports="import torch\nfrom ortmodule.training.api import CheckpointState, Module, Optimizer",
    setup="torch.set_num_threads(threads)\nmodule_kwargs = {}")
REFERENCE = TIMING_LOOP.format(
    imports="import onnxruntime\nfrom onnxruntime.training.api import CheckpointState, Module, Optimizer",
    setup="options = onnxruntime.SessionOptions()\noptions.intra_op_num_threads = threads\n"
          "module_kwargs = {'session_options': options}")

EAGER = textwrap.dedent("""
    import json, sys, time
    import numpy as np, torch
    d, steps, warmup, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(784, 500), torch.nn.ReLU(), torch.nn.Linear(500, 10))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, eps=1e-6, weight_decay=0.0)
    data = np.load(d + "/batch.npz")
    x, y = torch.from_numpy(data["input"]), torch.from_numpy(data["labels"])
    times = []
    for i in range(warmup + steps):
        t0 = time.perf_counter()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        t1 = time.perf_counter()
        if i >= warmup:
            times.append(t1 - t0)
    print(json.dumps({"times": times, "losses": []}))
""")


def make_artifacts(out: pathlib.Path) -> None:
    import numpy as np
    import onnx
    import torch

    from ortmodule.training import artifacts

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(784, 500), torch.nn.ReLU(), torch.nn.Linear(500, 10))
    buf = io.BytesIO()
    torch.onnx.export(model, (torch.randn(64, 784),), buf, input_names=["input"], output_names=["output"],
                      dynamic_axes={"input": {0: "batch"}}, opset_version=17, dynamo=False)
    onnx_model = onnx.load_from_string(buf.getvalue())
    artifacts.generate_artifacts(onnx_model, requires_grad=[i.name for i in onnx_model.graph.initializer],
                                 loss=artifacts.LossType.CrossEntropyLoss,
                                 optimizer=artifacts.OptimType.AdamW, artifact_directory=out)
    rng = np.random.default_rng(0)
    np.savez(out / "batch.npz", input=rng.standard_normal((64, 784)).astype(np.float32),
             labels=rng.integers(0, 10, size=64).astype(np.int64))


def run(python: str, script: str, d: pathlib.Path, steps: int, warmup: int, threads: int) -> dict:
    env = {"OMP_NUM_THREADS": str(threads), "PATH": "/usr/bin:/bin"}
    result = subprocess.run([python, "-c", script, str(d), str(steps), str(warmup), str(threads)],
                            capture_output=True, text=True, cwd=ROOT, env=env, check=False, timeout=900)
    if result.returncode != 0:
        raise RuntimeError(f"{python} failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    ref_python = ROOT / ".venv-ref" / "bin" / "python"
    if not ref_python.exists():
        sys.exit(f"{ref_python} is missing: run `make ref-venv`")
    with tempfile.TemporaryDirectory() as tmp:
        d = pathlib.Path(tmp)
        make_artifacts(d)
        runs = {
            "ortmodule (Python API)": run(sys.executable, OURS, d, args.steps, args.warmup, args.threads),
            "ONNX Runtime Training 1.19.2": run(str(ref_python), REFERENCE, d, args.steps, args.warmup,
                                                args.threads),
            "eager PyTorch (AdamW)": run(sys.executable, EAGER, d, args.steps, args.warmup, args.threads),
        }
    base = statistics.median(runs["ONNX Runtime Training 1.19.2"]["times"])
    print(f"MLP 784-500-10, batch 64, AdamW, {args.threads} threads, median of {args.steps} steps\n")
    print("| runner | step (ms) | speed vs ONNX Runtime Training |")
    print("|---|---|---|")
    for name, r in runs.items():
        t = statistics.median(r["times"])
        print(f"| {name} | {t * 1e3:.2f} | {base / t:.2f}x |")
    ours, ref = runs["ortmodule (Python API)"]["losses"], runs["ONNX Runtime Training 1.19.2"]["losses"]
    worst = max(abs(a - b) / max(abs(b), 1e-12) for a, b in zip(ours, ref))
    print(f"\nlargest relative loss difference, ortmodule vs reference, over {len(ours)} steps: {worst:.2e}")


if __name__ == "__main__":
    main()
