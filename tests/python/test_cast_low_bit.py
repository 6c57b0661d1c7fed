"""Cast/CastLike to and from the low-bit types (float8, float4/float6, e8m0, 4-bit and
2-bit integers), bit-exact against onnx.reference.ReferenceEvaluator (a NaN matching any
NaN: ONNX leaves a NaN's sign and payload open), on edge values:
NaN of both signs, infinities, every format's largest and smallest values, the midpoints
between neighbouring values (rounding ties) and the points just beside them, with
`saturate` on and off; plus the packed storage of the sub-byte types in ONNX files.
A float out of an integer type's range, which ONNX leaves undefined, is compared with the
engine's written rule instead (tests/python/cast_rule.py, docs/behaviour.md), for the
standard integer types too.

Each model declares the lowest opset whose Cast admits its types (float8: 19, int4: 21,
float4: 23, e8m0: 24, int2: 25, float6: 28). The loader accepts opsets up to its gate
(csrc/onnx/loader.cpp kMaxOpset); a model past it must be refused with the gate's own
error, and is compared value by value as soon as the gate admits it.
"""

from __future__ import annotations

import itertools
import re
import warnings

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from ortmodule import _C
from tests.python import cast_rule
from tests.python.onnx_corpus import (
    LOW_BIT_TORCH_DTYPES,
    _to_numpy,
    _to_torch,
    low_bit_differs,
)

TP = TensorProto
FLOAT8 = [TP.FLOAT8E4M3FN, TP.FLOAT8E4M3FNUZ, TP.FLOAT8E5M2, TP.FLOAT8E5M2FNUZ]
MINIFLOATS = [*FLOAT8, TP.FLOAT4E2M1, TP.FLOAT6E2M3, TP.FLOAT6E3M2]
SMALL_INTS = [TP.UINT4, TP.INT4, TP.UINT2, TP.INT2]
LOW_BIT = [*MINIFLOATS, TP.FLOAT8E8M0, *SMALL_INTS]
STANDARD = [TP.FLOAT, TP.DOUBLE, TP.FLOAT16, TP.BFLOAT16, TP.INT64, TP.INT32, TP.INT8,
            TP.UINT8, TP.BOOL]
FLOATING = {TP.FLOAT, TP.DOUBLE, TP.FLOAT16, TP.BFLOAT16, *MINIFLOATS, TP.FLOAT8E8M0}

# The Cast version that first admits each type.
SINCE = {**dict.fromkeys(FLOAT8, 19), TP.UINT4: 21, TP.INT4: 21, TP.FLOAT4E2M1: 23,
         TP.FLOAT8E8M0: 24, TP.UINT2: 25, TP.INT2: 25, TP.FLOAT6E2M3: 28, TP.FLOAT6E3M2: 28}


def _name(t: int) -> str:
    return TP.DataType.Name(t)


def _np_dtype(t: int) -> np.dtype:
    return np.dtype(helper.tensor_dtype_to_np_dtype(t))


def _opset(*types: int) -> int:
    return max([19, *(SINCE.get(t, 19) for t in types)])


def _all_codes(t: int) -> np.ndarray:
    """Every value of a low-bit type, as an array of that type."""
    width = {TP.UINT4: 4, TP.INT4: 4, TP.FLOAT4E2M1: 4, TP.UINT2: 2, TP.INT2: 2,
             TP.FLOAT6E2M3: 6, TP.FLOAT6E3M2: 6}.get(t, 8)
    return np.arange(1 << width, dtype=np.uint8).view(_np_dtype(t))


def _edge_floats() -> np.ndarray:
    """Every finite value of every minifloat format, the midpoints between neighbours
    (ties), points just beside each midpoint, and the special values."""
    values = [np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 1e-30, -1e-30, 1e30,
                        -1e30, 2.0**-127, 3 * 2.0**-128, 2.0**127 * 1.5, 2.0**127 * 1.99],
                       np.float64)]
    for t in MINIFLOATS:
        v = _all_codes(t).astype(np.float64)
        v = np.unique(np.abs(v[np.isfinite(v)]))
        mid = (v[:-1] + v[1:]) / 2
        above = np.append(v, v[-1] * 2)  # the first value past the largest
        values += [v, -v, mid, -mid, mid * (1 + 2.0**-12), mid * (1 - 2.0**-12),
                   above[-1:], -above[-1:], (v[-1] + (v[-1] - v[-2]) / 2) * np.array([1, -1])]
    out = np.concatenate(values)
    return out


def _source_values(t: int) -> np.ndarray:
    if t in LOW_BIT:
        return _all_codes(t)
    if t == TP.BOOL:
        return np.array([False, True])
    dtype = _np_dtype(t)
    if t in FLOATING:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            return _edge_floats().astype(dtype)
    info = np.iinfo(dtype)
    ints = np.concatenate([np.arange(-300, 301), [info.min, info.max, 448, 464, 480, 57344,
                                                  61440, -61440, 17, 19, 2**24 + 1]])
    return np.clip(ints, info.min, info.max).astype(dtype)


def _model(op: str, src: int, dst: int, attrs: dict, opset: int) -> onnx.ModelProto:
    inputs = [helper.make_tensor_value_info("x", src, None)]
    names = ["x"]
    if op == "CastLike":
        inputs.append(helper.make_tensor_value_info("like", dst, None))
        names.append("like")
    else:
        attrs = {"to": dst, **attrs}
    node = helper.make_node(op, names, ["y"], **attrs)
    graph = helper.make_graph([node], "cast", inputs,
                              [helper.make_tensor_value_info("y", dst, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _engine(model: onnx.ModelProto, inputs: list[np.ndarray]) -> np.ndarray | None:
    """The engine's output, or None when the model's opset is past the loader's gate (which
    must then be the reason the model is refused)."""
    try:
        program = _C.Program(model.SerializeToString(), [], [])
    except ValueError as e:
        if re.search(r"opset \d+ is not supported", str(e)):
            return None
        raise
    (y,) = _C.run(program, [_to_torch(x) for x in inputs])
    return y


def _reference(model: onnx.ModelProto, inputs: list[np.ndarray], src: int, dst: int, op: str,
               attrs: dict) -> np.ndarray:
    feeds = dict(zip(["x", "like"], inputs))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        try:
            return ReferenceEvaluator(model).run(None, feeds)[0]
        except TypeError as e:
            # ml_dtypes converts some pairs (e8m0 into most types, int4 <-> int2, ...)
            # only through float32. Every low-bit value is exact in float32, so the
            # reference casts that float32 instead.
            if src not in LOW_BIT or "Cannot cast array data" not in str(e.__cause__ or e):
                raise
            via = _model(op, TP.FLOAT, dst, attrs, _opset(src, dst))
            feeds["x"] = inputs[0].astype(np.float32)
            return ReferenceEvaluator(via).run(None, feeds)[0]


def _compare_undefined(op: str, src: int, dst: int, attrs: dict, x: np.ndarray) -> None:
    """Values out of dst's range against cast_rule's independent implementation."""
    if x.size == 0:
        return
    inputs = [x] if op == "Cast" else [x, np.zeros(1, _np_dtype(dst))]
    got = _engine(_model(op, src, dst, attrs, _opset(src, dst)), inputs)
    if got is None:
        return
    got = cast_rule.as_integers(_to_numpy(got, _np_dtype(dst)), dst)
    want = cast_rule.expected(x, dst)
    _fail_where(got != want, f"{op} {_name(src)} -> {_name(dst)} {attrs}, out of range "
                f"(against the rule)", x, got, want)


def _fail_where(bad: np.ndarray, what: str, x: np.ndarray, got: np.ndarray,
                expected: np.ndarray) -> None:
    if bad.any():
        i = np.flatnonzero(bad)[:8]
        pytest.fail(f"{what}: {bad.sum()} of {bad.size} differ; inputs "
                    f"{x[i].astype(np.float64)} got {got[i]} expected {expected[i]}")


def _compare(src: int, dst: int, op: str = "Cast", attrs: dict | None = None,
             x: np.ndarray | None = None) -> None:
    attrs = attrs or {}
    x = _source_values(src) if x is None else x
    if dst in cast_rule.INTEGER_TYPES and src in FLOATING:
        # ONNX leaves a float out of an integer type's range undefined: those values follow
        # the engine's written rule (docs/behaviour.md), the others onnx.reference.
        defined = cast_rule.in_range(x, dst)
        _compare_undefined(op, src, dst, attrs, x[~defined])
        x = x[defined]
    inputs = [x]
    if op == "CastLike":
        inputs.append(np.zeros(1, _np_dtype(dst)))
    model = _model(op, src, dst, attrs, _opset(src, dst))
    expected = _reference(model, inputs, src, dst, op, attrs)
    got = _engine(model, inputs)
    if got is None:
        return
    expected = np.asarray(expected)
    got = _to_numpy(got, expected.dtype)
    if str(expected.dtype) == "bfloat16":  # bfloat16 crosses back as float32, exactly
        expected = expected.astype(np.float32)
    assert got.dtype == expected.dtype, f"dtype {got.dtype} != {expected.dtype}"
    assert got.shape == expected.shape
    if str(expected.dtype) in LOW_BIT_TORCH_DTYPES:  # bit for bit; a NaN is any NaN
        bad = low_bit_differs(got, expected)
    elif expected.dtype == np.float16:  # any NaN is a NaN; everything else bit for bit
        g, e = got.view(np.uint16), expected.view(np.uint16)
        bad = (g != e) & ~(np.isnan(got) & np.isnan(expected))
    elif expected.dtype.kind == "f":
        bad = (got != expected) & ~(np.isnan(got) & np.isnan(expected))
        bad |= np.signbit(got) != np.signbit(expected)
        bad &= ~np.isnan(expected)
    else:
        bad = got != expected
    _fail_where(bad, f"{op} {_name(src)} -> {_name(dst)} {attrs}", x, got, expected)


@pytest.mark.parametrize("saturate", [1, 0])
@pytest.mark.parametrize("dst", LOW_BIT, ids=_name)
@pytest.mark.parametrize("src", STANDARD + LOW_BIT, ids=_name)
def test_cast_to_low_bit(src: int, dst: int, saturate: int) -> None:
    if src == dst:
        return _compare(src, dst)
    _compare(src, dst, attrs={"saturate": saturate})


@pytest.mark.parametrize("dst", STANDARD, ids=_name)
@pytest.mark.parametrize("src", LOW_BIT, ids=_name)
def test_cast_from_low_bit(src: int, dst: int) -> None:
    _compare(src, dst)


INTEGERS = [TP.INT64, TP.INT32, TP.INT16, TP.INT8, TP.UINT64, TP.UINT32, TP.UINT16, TP.UINT8]


@pytest.mark.parametrize("dst", INTEGERS, ids=_name)
@pytest.mark.parametrize("src", [TP.FLOAT, TP.DOUBLE, TP.FLOAT16, TP.BFLOAT16], ids=_name)
def test_cast_float_to_integer_out_of_range(src: int, dst: int) -> None:
    """Every integer type's limits and the values just beside them, powers of two up to
    past 2^64 of both signs, and the special values: the defined ones against the
    reference, the others against the rule."""
    powers = np.array([2.0**k for k in range(70)] + [1e30, 2.0**127 * 1.5])
    limits = np.array([float(v) for t in INTEGERS for v in cast_rule.limits(t)])
    v = np.concatenate([powers, powers + 0.5, powers - 0.5, powers * 3, limits,
                        limits + 1, limits - 1, limits + 0.75, limits - 0.75,
                        [0.0, -0.0, 0.25, -0.75, np.inf, -np.inf, np.nan]])
    v = np.concatenate([v, -v])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        x = v.astype(_np_dtype(src))
    _compare(src, dst, x=x)


@pytest.mark.parametrize(("round_mode", "saturate"),
                         list(itertools.product(["up", "down", "nearest"], [1, 0])))
@pytest.mark.parametrize("src", [TP.FLOAT, TP.FLOAT16, TP.DOUBLE, TP.BFLOAT16], ids=_name)
def test_cast_to_e8m0_round_mode(src: int, round_mode: str, saturate: int) -> None:
    _compare(src, TP.FLOAT8E8M0, attrs={"round_mode": round_mode, "saturate": saturate})


@pytest.mark.parametrize("saturate", [1, 0])
@pytest.mark.parametrize(("src", "dst"), [(TP.FLOAT, TP.FLOAT8E4M3FN),
                                          (TP.FLOAT16, TP.FLOAT8E5M2FNUZ),
                                          (TP.FLOAT8E5M2, TP.FLOAT8E4M3FNUZ),
                                          (TP.FLOAT, TP.INT4), (TP.UINT4, TP.FLOAT16),
                                          (TP.FLOAT, TP.FLOAT4E2M1), (TP.INT2, TP.INT8)],
                         ids=lambda t: _name(t))
def test_cast_like(src: int, dst: int, saturate: int) -> None:
    _compare(src, dst, op="CastLike", attrs={"saturate": saturate})


def test_round_mode_is_checked() -> None:
    model = _model("Cast", TP.FLOAT, TP.FLOAT8E8M0, {"round_mode": "sideways"}, 24)
    x = np.ones(3, np.float32)
    try:
        program = _C.Program(model.SerializeToString(), [], [])
    except ValueError as e:
        assert re.search(r"opset \d+ is not supported", str(e)), e
        return
    with pytest.raises(RuntimeError, match=r"Cast.*'round_mode' must be 'up', 'down' or "
                                           r"'nearest', got 'sideways'"):
        _C.run(program, [_to_torch(x)])


@pytest.mark.parametrize("dtype", [TP.INT4, TP.UINT4, TP.FLOAT4E2M1, TP.INT2, TP.UINT2,
                                   TP.FLOAT6E2M3, TP.FLOAT6E3M2, TP.FLOAT8E4M3FN,
                                   TP.FLOAT8E8M0], ids=_name)
@pytest.mark.parametrize("n", [1, 5, 7, 8])
@pytest.mark.parametrize("layout", ["raw_data", "int32_data"])
def test_packed_initializer_round_trip(dtype: int, n: int, layout: str) -> None:
    """An initializer of a (sub-byte) low-bit type is unpacked by the loader and packed
    back by the saver exactly as onnx's numpy_helper reads and writes it."""
    codes = _all_codes(dtype)
    values = np.resize(codes[::-1], n)
    if layout == "raw_data":
        init = numpy_helper.from_array(values, "w")
    else:
        # int32_data: one packed byte per entry for the 4-bit and 2-bit types, one element
        # per entry for the others (what numpy_helper.to_array reads).
        init = TensorProto(name="w", data_type=dtype, dims=[n])
        if dtype in (TP.INT4, TP.UINT4, TP.FLOAT4E2M1, TP.INT2, TP.UINT2):
            entries = np.frombuffer(numpy_helper.from_array(values).raw_data, np.uint8)
        else:
            entries = values.view(np.uint8)
        init.int32_data.extend(entries.tolist())
    np.testing.assert_array_equal(numpy_helper.to_array(init).view(np.uint8),
                                  values.view(np.uint8))
    graph = helper.make_graph([helper.make_node("Identity", ["w"], ["y"])], "packed", [],
                              [helper.make_tensor_value_info("y", dtype, [n])], [init])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", _opset(dtype))])
    try:
        program = _C.Program(model.SerializeToString(), [], [])
    except ValueError as e:
        assert re.search(r"opset \d+ is not supported", str(e)), e
        return
    (y,) = _C.run(program, [])
    np.testing.assert_array_equal(_to_numpy(y, values.dtype).view(np.uint8),
                                  values.view(np.uint8))
    saved = onnx.load_from_string(program.training_graph_onnx())
    (w,) = [t for t in saved.graph.initializer if t.name == "w"]
    assert w.data_type == dtype
    np.testing.assert_array_equal(numpy_helper.to_array(w).view(np.uint8),
                                  values.view(np.uint8))


def test_packed_initializer_size_is_checked() -> None:
    init = numpy_helper.from_array(np.zeros(6, ml_dtypes.int4), "w")
    init.raw_data = init.raw_data[:-1]
    graph = helper.make_graph([helper.make_node("Identity", ["w"], ["y"])], "packed", [],
                              [helper.make_tensor_value_info("y", TP.INT4, [6])], [init])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    with pytest.raises(ValueError, match=r"tensor 'w' has 2 bytes of raw data, expected 3 "
                                         r"\(6 int4 elements packed\)"):
        _C.Program(model.SerializeToString(), [], [])
