"""Our optimizer arithmetic replays the reference runtime's optimizer steps.

tests/interop/ref_optimizer.py runs under the reference venv (ONNX Runtime Training
1.19.2, ``make ref-venv``): it trains a tiny MLP with the reference Module/Optimizer on
artifacts from the reference generate_artifacts (AdamW, SGD, both with ClipGradNorm, AdamW
with weight decay) and runs AdamWOptimizer nodes with attributes generate_artifacts never
writes (adam_mode 0, no bias correction). Here every recorded step is applied again with
ortmodule._C's _adamw_update / _sgd_update / _clip_grad_norm to the recorded inputs, and
the results must equal the reference's to 1e-6 relative; SGD parameters and AdamW moments
bit for bit.
"""

from __future__ import annotations

import json
import platform
import subprocess
from pathlib import Path

import numpy as np
import pytest

from ortmodule import _C

ROOT = Path(__file__).resolve().parents[2]
REF_PYTHON = ROOT / ".venv-ref" / "bin" / "python"
SCRIPT = ROOT / "tests" / "interop" / "ref_optimizer.py"
RTOL, ATOL = 1e-6, 1e-8
# Bit-for-bit checks hold where neither build contracts a multiply and an add into one
# rounding (x86-64 baseline code).
BITWISE = platform.machine() in ("x86_64", "AMD64")


@pytest.fixture(scope="module")
def ref(tmp_path_factory):
    if not REF_PYTHON.exists():
        pytest.fail(
            f"the reference runtime is missing: {REF_PYTHON} does not exist; run `make ref-venv`"
        )
    out = tmp_path_factory.mktemp("ref_optimizer") / "ref.npz"
    proc = subprocess.run(
        [str(REF_PYTHON), str(SCRIPT), str(out)],
        check=False,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, (
        f"{SCRIPT.name} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    )
    data = np.load(out)
    return data, json.loads(str(data["meta"]))


def _optimizer_node(meta_run: dict, op_type: str) -> dict | None:
    for n in meta_run["optimizer_nodes"]:
        if n["op_type"] == op_type:
            return n
    return None


def _close(got: np.ndarray, want: np.ndarray, what: str) -> None:
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL, err_msg=what)


@pytest.mark.parametrize("name", ["adamw", "sgd", "adamw_clip", "sgd_clip", "adamw_wd"])
def test_runtime_optimizer_steps_replay(ref, name):
    data, meta = ref
    run = meta[f"run:{name}"]
    adamw = _optimizer_node(run, "AdamWOptimizer")
    sgd = _optimizer_node(run, "SGDOptimizerV2")
    clip = _optimizer_node(run, "InplaceClipGradNorm")
    assert (adamw is None) != (sgd is None), run["optimizer_nodes"]
    assert (clip is not None) == name.endswith("_clip"), run["optimizer_nodes"]
    params = run["params"]
    moments = {p: (None, None) for p in params}
    for i in range(run["steps"]):
        key = f"run:{name}/{i}"
        lr = float(data[f"{key}/lr"])
        step = int(data[f"{key}/step"])
        ps = {p: data[f"{key}/before/{p}"].copy() for p in params}
        gs = {p: data[f"{key}/grad/{p}"].copy() for p in params}
        if clip is not None:
            _C._clip_grad_norm([gs[p] for p in params], clip["attributes"]["max_norm"])
        for p in params:
            if adamw is not None:
                m, v = moments[p]
                if m is None:
                    m, v = np.zeros_like(ps[p]), np.zeros_like(ps[p])
                _C._adamw_update(adamw["attributes"], lr, step, ps[p], gs[p], m, v)
                moments[p] = (m, v)
            else:
                _C._sgd_update(lr, ps[p], gs[p])
            want = data[f"{key}/after/{p}"]
            _close(ps[p], want, f"{name} step {i} parameter {p}")
            if sgd is not None and clip is None and BITWISE:
                np.testing.assert_array_equal(ps[p], want, err_msg=f"{name} step {i} {p}")


@pytest.mark.parametrize("name", ["mode0", "mode0_wd", "mode1_wd", "mode1_nobias"])
def test_adamw_op_replay(ref, name):
    data, meta = ref
    run = meta[f"op:{name}"]
    cfg = run["attributes"]
    for i in range(run["steps"]):
        key = f"op:{name}/{i}"
        for k in range(run["tensors"]):
            p = data[f"{key}/param_in/{k}"].copy()
            g = data[f"{key}/grad_in/{k}"].copy()
            m = data[f"{key}/m_in/{k}"].copy()
            v = data[f"{key}/v_in/{k}"].copy()
            _C._adamw_update(cfg, run["lr"], i + 1, p, g, m, v)
            what = f"{name} step {i} tensor {k}"
            _close(p, data[f"{key}/param_out/{k}"], what + " param")
            _close(m, data[f"{key}/m_out/{k}"], what + " first moment")
            _close(v, data[f"{key}/v_out/{k}"], what + " second moment")
            if BITWISE:
                # The moments are the reference's float expressions, operation for operation.
                # The parameters are not always: the reference's vectorized sqrt is Eigen's
                # fast-math approximation (rsqrt estimate + one Newton step, CPU-dependent),
                # ours is the exact sqrt, so a few parameters differ by a few ulps.
                np.testing.assert_array_equal(m, data[f"{key}/m_out/{k}"], err_msg=what)
                np.testing.assert_array_equal(v, data[f"{key}/v_out/{k}"], err_msg=what)


@pytest.mark.parametrize("warmup", [0, 30, 70, 200])
def test_linear_lr_scheduler_replay(ref, warmup):
    data, meta = ref
    total, lr0 = meta["sched"]["total"], meta["sched"]["initial_lr"]
    ours = np.array([_C._linear_lr(s, warmup, total, lr0) for s in range(total)], np.float32)
    # The documented schedule: in 1.19.2 it comes from the Python call with the counts swapped.
    np.testing.assert_array_equal(ours, data[f"sched:{warmup}/swapped_call"])
    # The call as documented gives another schedule (the binding swaps the counts).
    assert not np.array_equal(ours, data[f"sched:{warmup}/documented_call"])
