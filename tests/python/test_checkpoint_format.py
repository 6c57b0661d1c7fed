"""The checkpoint file format through ortmodule._C: _checkpoint_parse / _checkpoint_serialize
round trips, the dict layout (docs/checkpoint_format.md), clear errors, and the replay of
the checkpoint fuzzer's regressions."""

from __future__ import annotations

import pathlib

import ml_dtypes
import numpy as np
import pytest

from ortmodule import _C

ROOT = pathlib.Path(__file__).resolve().parents[2]
REGRESSIONS = ROOT / "tests" / "fuzz" / "regressions_checkpoint"


def _arrays() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(3)
    return {
        "f32": rng.standard_normal((2, 3)).astype(np.float32),
        "f64": rng.standard_normal((4,)),
        "f16": rng.standard_normal((3,)).astype(np.float16),
        "bf16": rng.standard_normal((2, 2)).astype(ml_dtypes.bfloat16),
        "f8": rng.standard_normal((5,)).astype(ml_dtypes.float8_e4m3fn),
        "i4": np.array([-8, -1, 0, 7, 3], dtype=ml_dtypes.int4),
        "u4": np.array([0, 15, 9], dtype=ml_dtypes.uint4),
        "i64": np.array([1, -(2**63), 2**63 - 1], np.int64),
        "i32": np.array([[1, -2]], np.int32),
        "u8": np.array([0, 255], np.uint8),
        "b": np.array([True, False, True]),
        "scalar": np.array(2.5, np.float32),
        "empty": np.zeros((0, 4), np.float32),
        "strided": np.arange(12, dtype=np.float32).reshape(3, 4)[:, ::2],
    }


def _state() -> dict:
    arrays = _arrays()
    names = sorted(arrays)
    trainable = {k: arrays[k] for k in names[::2]}
    frozen = {k: arrays[k] for k in names[1::2]}
    return {
        "trainable": trainable,
        "frozen": frozen,
        "is_nominal": False,
        "optimizer_groups": {"group0": {
            "step": 11, "initial_learning_rate": 0.5,
            "param_states": {k: {"momentum0": np.full_like(v, 0.25),
                                 "momentum1": np.full_like(v, 0.75)}
                             for k, v in trainable.items() if v.dtype == np.float32},
        }},
        "properties": {"epoch": 4, "big": -(2**63), "lr": 0.1, "name": "run 1", "empty": ""},
    }


def _assert_arrays_equal(a: dict, b: dict) -> None:
    assert sorted(a) == sorted(b)
    for k, want in a.items():
        assert b[k].dtype == want.dtype, k
        assert b[k].shape == want.shape, k
        assert want.tobytes() == b[k].tobytes(), k


def test_round_trip_with_optimizer_state() -> None:
    state = _state()
    parsed = _C._checkpoint_parse(_C._checkpoint_serialize(state, True), "<test>")
    _assert_arrays_equal(state["trainable"], parsed["trainable"])
    _assert_arrays_equal(state["frozen"], parsed["frozen"])
    assert parsed["is_nominal"] is False
    group = parsed["optimizer_groups"]["group0"]
    assert group["step"] == 11
    assert group["initial_learning_rate"] == 0.5
    want = state["optimizer_groups"]["group0"]["param_states"]
    assert sorted(group["param_states"]) == sorted(want)
    for p in want:
        _assert_arrays_equal(want[p], group["param_states"][p])
    props = parsed["properties"]
    assert props == {"epoch": 4, "big": -(2**63), "lr": float(np.float32(0.1)), "name": "run 1",
                     "empty": ""}
    assert type(props["epoch"]) is int and type(props["lr"]) is float


def test_round_trip_without_optimizer_state() -> None:
    state = _state()
    parsed = _C._checkpoint_parse(_C._checkpoint_serialize(state, False), "<test>")
    assert parsed["optimizer_groups"] == {}
    _assert_arrays_equal(state["trainable"], parsed["trainable"])
    assert parsed["properties"]["name"] == "run 1"


def test_serialized_bytes_are_deterministic_and_sorted() -> None:
    state = _state()
    shuffled = dict(state, trainable=dict(reversed(list(state["trainable"].items()))))
    assert _C._checkpoint_serialize(state, True) == _C._checkpoint_serialize(shuffled, True)
    blob = _C._checkpoint_serialize(state, True)
    assert blob[4:8] == b"ODTC"
    parsed = _C._checkpoint_parse(blob, "<test>")
    assert list(parsed["trainable"]) == sorted(state["trainable"])


def test_nominal_tensors_are_tuples() -> None:
    state = {
        "trainable": {"w": ("nominal", "float32", (3, 4)),
                      "from_array": np.ones((2, 5), np.float64)},
        "frozen": {"e": ("nominal", "bfloat16", ())},
        "is_nominal": True,
    }
    blob = _C._checkpoint_serialize(state, False)
    full = _C._checkpoint_serialize(
        {"trainable": {"w": np.ones((3, 4), np.float32),
                       "from_array": np.ones((2, 5), np.float64)},
         "frozen": {"e": np.ones((), ml_dtypes.bfloat16)}}, False)
    assert len(blob) < len(full) - 12 * 4
    parsed = _C._checkpoint_parse(blob, "<nominal>")
    assert parsed["is_nominal"] is True
    assert parsed["trainable"] == {"from_array": ("nominal", "float64", (2, 5)),
                                   "w": ("nominal", "float32", (3, 4))}
    assert parsed["frozen"] == {"e": ("nominal", "bfloat16", ())}


@pytest.mark.parametrize("value, kind", [(7, int), (-1.25, float), ("text", str)])
def test_each_property_type(value, kind) -> None:
    parsed = _C._checkpoint_parse(_C._checkpoint_serialize({"properties": {"p": value}}, False),
                                  "<test>")
    assert parsed["properties"] == {"p": value}
    assert type(parsed["properties"]["p"]) is kind


def test_invalid_states_are_refused() -> None:
    with pytest.raises(TypeError, match="property 'flag' is a bool"):
        _C._checkpoint_serialize({"properties": {"flag": True}}, False)
    with pytest.raises(ValueError, match="does not fit in int64"):
        _C._checkpoint_serialize({"properties": {"n": 2**64}}, False)
    with pytest.raises(TypeError, match="property 'l' has type list"):
        _C._checkpoint_serialize({"properties": {"l": [1]}}, False)
    with pytest.raises(KeyError, match="unknown key 'trainables'"):
        _C._checkpoint_serialize({"trainables": {}}, False)
    with pytest.raises(TypeError, match=r"trainable\['x'\] has numpy dtype complex64"):
        _C._checkpoint_serialize({"trainable": {"x": np.ones(2, np.complex64)}}, False)
    with pytest.raises(TypeError, match=r"trainable\['x'\] must be a numpy array, got tuple"):
        _C._checkpoint_serialize({"trainable": {"x": ("nominal", "float32", (2,))}}, False)
    with pytest.raises(RuntimeError, match="parameter 'x' is both trainable and frozen"):
        _C._checkpoint_serialize({"trainable": {"x": np.ones(1, np.float32)},
                                  "frozen": {"x": np.ones(1, np.float32)}}, False)
    with pytest.raises(KeyError, match=r"optimizer_groups\['group0'\] has no 'step'"):
        _C._checkpoint_serialize({"optimizer_groups": {"group0": {
            "initial_learning_rate": 0.1, "param_states": {}}}}, True)


def test_invalid_buffers_raise_clear_errors() -> None:
    blob = _C._checkpoint_serialize(_state(), True)
    with pytest.raises(RuntimeError, match=r"^cut: invalid checkpoint: truncated or corrupted"):
        _C._checkpoint_parse(blob[: len(blob) // 2], "cut")
    with pytest.raises(RuntimeError, match=r"^tiny: invalid checkpoint: truncated: 3 bytes"):
        _C._checkpoint_parse(blob[:3], "tiny")
    with pytest.raises(RuntimeError, match="file identifier is 'ORTM', expected 'ODTC'"):
        _C._checkpoint_parse(blob[:4] + b"ORTM" + blob[8:], "x.ort")


def _regressions() -> list[pathlib.Path]:
    return sorted(p for p in REGRESSIONS.iterdir() if p.is_file())


def test_fuzz_regressions_are_present() -> None:
    assert _regressions(), "tests/fuzz/regressions_checkpoint/ holds no files"


@pytest.mark.parametrize("path", _regressions(), ids=lambda p: p.name)
def test_fuzz_regression(path: pathlib.Path) -> None:
    # Each input either parses into a state that writes and reads back identically, or is
    # rejected with a RuntimeError naming its origin.
    try:
        parsed = _C._checkpoint_parse(path.read_bytes(), str(path))
    except RuntimeError as e:
        assert str(e).startswith(f"{path}: invalid checkpoint: ")
        return
    again = _C._checkpoint_parse(_C._checkpoint_serialize(parsed, True), "<again>")
    assert again.keys() == parsed.keys()
    assert again["properties"].keys() == parsed["properties"].keys()
    assert again["optimizer_groups"].keys() == parsed["optimizer_groups"].keys()
    for part in ("trainable", "frozen"):
        assert again[part].keys() == parsed[part].keys()
        if not parsed["is_nominal"]:
            _assert_arrays_equal(parsed[part], again[part])
