"""Trains an MLP with ORTModule from an installed wheel and compares it with eager PyTorch.

Run by tests/python/test_wheel.py with a clean venv's python, from a folder outside the
source tree: `python train_mlp_from_wheel.py SOURCE_ROOT`. Exits non-zero (with the reason)
when ortmodule was imported from the source tree, when a system protobuf or flatbuffers
library is loaded, or when a loss or parameter differs from eager beyond the tolerances.
Prints one JSON line with the losses.
"""

from __future__ import annotations

import copy
import json
import os
import sys

import torch

import ortmodule
from ortmodule import ORTModule

STEPS = 6
# float32 with the same GEMMs as eager (the engine calls torch's): only summation order differs.
LOSS_RTOL, LOSS_ATOL = 1e-5, 1e-6
PARAM_RTOL, PARAM_ATOL = 1e-5, 1e-6


def fail(message: str) -> None:
    sys.exit(f"train_mlp_from_wheel: {message}")


def main() -> None:
    source_root = os.path.realpath(sys.argv[1])
    package_dir = os.path.realpath(os.path.dirname(ortmodule.__file__))
    if package_dir.startswith(source_root + os.sep):
        fail(f"ortmodule was imported from the source tree ({package_dir}), not from the wheel")
    if not package_dir.startswith(os.path.realpath(sys.prefix) + os.sep):
        fail(f"ortmodule was imported from {package_dir}, outside this venv ({sys.prefix})")

    torch.manual_seed(0)
    eager = torch.nn.Sequential(
        torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 32), torch.nn.Tanh(),
        torch.nn.Linear(32, 4),
    )  # fmt: skip
    ours = ORTModule(copy.deepcopy(eager))
    x = torch.randn(64, 16)
    y = torch.randint(0, 4, (64,))
    loss_fn = torch.nn.CrossEntropyLoss()
    opt_eager = torch.optim.SGD(eager.parameters(), lr=0.1, momentum=0.9)
    opt_ours = torch.optim.SGD(ours.parameters(), lr=0.1, momentum=0.9)
    losses: dict[str, list[float]] = {"eager": [], "ortmodule": []}
    for _ in range(STEPS):
        for model, opt, key in ((eager, opt_eager, "eager"), (ours, opt_ours, "ortmodule")):
            opt.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            opt.step()
            losses[key].append(loss.item())

    expected, got = torch.tensor(losses["eager"]), torch.tensor(losses["ortmodule"])
    if not torch.allclose(got, expected, rtol=LOSS_RTOL, atol=LOSS_ATOL):
        fail(f"losses differ from eager: {losses}")
    if not expected[-1] < expected[0]:
        fail(f"the eager loss did not decrease, so the comparison shows nothing: {losses}")
    for (name, p_eager), p_ours in zip(eager.named_parameters(), ours.parameters(), strict=True):
        if not torch.allclose(p_ours, p_eager, rtol=PARAM_RTOL, atol=PARAM_ATOL):
            diff = (p_ours - p_eager).abs().max().item()
            fail(f"parameter {name} differs from eager after {STEPS} steps (max diff {diff})")

    with open("/proc/self/maps") as f:
        mapped = {line.split()[-1] for line in f if "/" in line}
    system_libs = sorted(p for p in mapped if "libprotobuf" in p or "libflatbuffers" in p)
    if system_libs:
        fail(f"system protobuf/flatbuffers libraries are loaded: {system_libs}")
    print(json.dumps({"package": package_dir, "losses": losses}))


if __name__ == "__main__":
    main()
