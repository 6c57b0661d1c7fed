"""Checkpoint files interchange with the reference runtime (onnxruntime-training 1.19.2),
both ways, through tests/interop/ref_checkpoint.py running in the reference venv
(REPO/.venv-ref, built by `make ref-venv`)."""

from __future__ import annotations

import json
import pathlib
import subprocess

import numpy as np
import pytest

from ortmodule import _C

ROOT = pathlib.Path(__file__).resolve().parents[2]
REF_PY = ROOT / ".venv-ref" / "bin" / "python"
SCRIPT = ROOT / "tests" / "interop" / "ref_checkpoint.py"


def _ref(*args: str) -> str:
    if not REF_PY.exists():
        pytest.fail(f"the reference runtime is missing: {REF_PY} does not exist; run "
                    "`make ref-venv` to build it")
    r = subprocess.run([str(REF_PY), str(SCRIPT), *args], capture_output=True, text=True,
                       timeout=600, cwd=ROOT, check=False)
    assert r.returncode == 0, f"ref_checkpoint.py {' '.join(args)} failed:\n{r.stderr[-4000:]}"
    return r.stdout


def _ref_read(path: pathlib.Path) -> dict:
    return json.loads(_ref("read", str(path)))


@pytest.fixture(scope="module")
def ref_dir(tmp_path_factory) -> pathlib.Path:
    out = tmp_path_factory.mktemp("ref_checkpoints")
    _ref("write", str(out))
    return out


@pytest.fixture(scope="module")
def expected(ref_dir) -> dict:
    return json.loads((ref_dir / "expected.json").read_text())


def _parse(path: pathlib.Path) -> dict:
    return _C._checkpoint_parse(path.read_bytes(), str(path))


def _as_json(a: np.ndarray) -> dict:
    return {"dtype": a.dtype.name, "shape": list(a.shape), "hex": a.tobytes().hex()}


# ---- the reference writes, we read ----

def test_we_read_reference_parameters(ref_dir, expected) -> None:
    parsed = _parse(ref_dir / "params.ckpt")
    want = expected["params.ckpt"]
    assert parsed["is_nominal"] is False
    for part in ("trainable", "frozen"):
        assert {k: _as_json(v) for k, v in parsed[part].items()} == want[part]
    assert parsed["optimizer_groups"] == {} and parsed["properties"] == {}


def test_we_read_reference_nominal(ref_dir, expected) -> None:
    parsed = _parse(ref_dir / "nominal.ckpt")
    want = expected["nominal.ckpt"]
    assert parsed["is_nominal"] is True
    assert sorted(parsed["trainable"]) == want["trainable"]
    assert sorted(parsed["frozen"]) == want["frozen"]
    for part in ("trainable", "frozen"):
        for name, t in parsed[part].items():
            # The reference writes nominal tensors without dims.
            assert t[0] == "nominal" and t[1] == want["dtypes"][name], (name, t)
    assert (ref_dir / "nominal.ckpt").stat().st_size < (ref_dir / "params.ckpt").stat().st_size


def test_we_read_reference_training_state(ref_dir, expected) -> None:
    parsed = _parse(ref_dir / "training.ckpt")
    want = expected["training.ckpt"]
    for part in ("trainable", "frozen"):
        assert {k: _as_json(v) for k, v in parsed[part].items()} == want[part]
    group = parsed["optimizer_groups"]["group0"]
    assert list(parsed["optimizer_groups"]) == ["group0"]
    assert group["step"] == want["step"]
    assert group["initial_learning_rate"] == want["initial_learning_rate"]
    # One AdamW step from zero moments: m0 = (1 - beta1) g, m1 = (1 - beta2) g^2.
    g = np.frombuffer(bytes.fromhex(want["grad"]["W"]["hex"]), np.float32).reshape(3, 2)
    moments = group["param_states"]["W"]
    assert sorted(moments) == ["momentum0", "momentum1"]
    np.testing.assert_allclose(moments["momentum0"], 0.1 * g, rtol=1e-5, atol=1e-9)
    np.testing.assert_allclose(moments["momentum1"], 0.001 * g * g, rtol=1e-4, atol=1e-12)
    assert parsed["properties"] == {**want["properties"],
                                    "best_loss": float(np.float32(0.125))}
    assert type(parsed["properties"]["epoch"]) is int


# ---- we write, the reference reads ----

def _our_state() -> dict:
    rng = np.random.default_rng(11)
    w = rng.standard_normal((3, 2)).astype(np.float32)
    return {
        "trainable": {"W": w, "bias": rng.standard_normal((2,)),
                      "scalar": np.array(-3.5, np.float32), "empty": np.zeros((0, 2), np.float32)},
        "frozen": {"ids": np.array([3, -4, 2**40], np.int64), "i32": np.array([[1, 2]], np.int32),
                   "i8": np.array([-7], np.int8), "u8": np.array([200], np.uint8),
                   "mask": np.array([True, False])},
        "is_nominal": False,
        "optimizer_groups": {"group0": {
            "step": 5, "initial_learning_rate": 0.0125,
            "param_states": {"W": {"momentum0": np.full_like(w, 0.5),
                                   "momentum1": rng.random((3, 2)).astype(np.float32)}},
        }},
        "properties": {"epoch": 9, "neg": -(2**62), "loss": 0.1, "note": "from ortmodule"},
    }


def test_reference_reads_ours(tmp_path) -> None:
    state = _our_state()
    path = tmp_path / "ours.ckpt"
    path.write_bytes(_C._checkpoint_serialize(state, True))
    seen = _ref_read(path)
    assert seen["version"] == 2 and seen["is_nominal"] is False
    assert seen["requires_grad_params"] == sorted(state["trainable"])
    assert seen["frozen_params"] == sorted(state["frozen"])
    for part, requires_grad in (("trainable", True), ("frozen", False)):
        for name, a in state[part].items():
            assert seen["parameters"][name] == {"requires_grad": requires_grad, **_as_json(a)}
    group = seen["optimizer_groups"]["group0"]
    assert group["step"] == 5
    assert group["initial_learning_rate"] == float(np.float32(0.0125))
    for m, a in state["optimizer_groups"]["group0"]["param_states"]["W"].items():
        assert group["param_states"]["W"][m] == {"data_type": 1, "dims": [3, 2],
                                                 "hex": a.tobytes().hex()}
    assert seen["properties"] == {"epoch": ["int", 9], "neg": ["int", -(2**62)],
                                  "loss": ["float", float(np.float32(0.1))],
                                  "note": ["str", "from ortmodule"]}


def test_reference_reads_ours_without_optimizer_state(tmp_path) -> None:
    path = tmp_path / "ours.ckpt"
    path.write_bytes(_C._checkpoint_serialize(_our_state(), False))
    seen = _ref_read(path)
    assert seen["optimizer_groups"] == {}
    assert sorted(seen["parameters"]) == sorted(seen["parameter_names"])


def test_reference_reads_our_nominal(tmp_path) -> None:
    path = tmp_path / "nominal.ckpt"
    path.write_bytes(_C._checkpoint_serialize({
        "trainable": {"W": ("nominal", "float32", (3, 2))},
        "frozen": {"B": ("nominal", "float32", (2,)), "ids": ("nominal", "int64", (4,))},
        "is_nominal": True}, False))
    seen = _ref_read(path)
    assert seen["is_nominal"] is True
    assert seen["requires_grad_params"] == ["W"]
    assert seen["frozen_params"] == ["B", "ids"]


def test_reference_reads_ours_as_its_own(ref_dir) -> None:
    # The reference's training checkpoint, parsed and written again by us, reads the same.
    ours = ref_dir / "training_rewritten.ckpt"
    ours.write_bytes(_C._checkpoint_serialize(_parse(ref_dir / "training.ckpt"), True))
    assert _ref_read(ours) == _ref_read(ref_dir / "training.ckpt")
