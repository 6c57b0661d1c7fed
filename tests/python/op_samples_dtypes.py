"""Samples over the dtypes ONNX defines for each op (see op_samples.py): data movement and
comparisons on every integer type, bool, float16 and bfloat16; integer arithmetic with
ONNX's semantics; float16/bfloat16 compute (in float32, rounded once per op); Cast between
all the standard types. Each is compared against onnx.reference like every other sample."""

from __future__ import annotations

import ml_dtypes
import numpy as np

from tests.python.sample_utils import Sample, i64, rng, simplified_layernorm_reference

S = Sample

BF16 = np.dtype(ml_dtypes.bfloat16)
SIGNED = [np.dtype(t) for t in (np.int8, np.int16, np.int32, np.int64)]
UNSIGNED = [np.dtype(t) for t in (np.uint8, np.uint16, np.uint32, np.uint64)]
INTS = SIGNED + UNSIGNED
LOW = [np.dtype(np.float16), BF16]
BOOL = np.dtype(np.bool_)
# Every standard type Cast converts between.
STANDARD = [np.dtype(np.float32), np.dtype(np.float64), *LOW, *INTS, BOOL]


def vals(dtype: np.dtype, *shape: int, low: int = -20, high: int = 20) -> np.ndarray:
    """Small values of `dtype` (non-negative for unsigned types, 0/1 for bool)."""
    if dtype == BOOL:
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    if dtype.kind == "u":
        low = max(low, 0)
    if dtype.kind == "f" or dtype == BF16:
        return (rng.integers(low * 4, high * 4, size=shape) / 4.0).astype(dtype)
    return rng.integers(low, high, size=shape).astype(dtype)


def nonzero(dtype: np.dtype, *shape: int) -> np.ndarray:
    v = vals(dtype, *shape, low=1, high=9)
    return v if dtype.kind == "u" else v * np.where(rng.random(shape) < 0.5, -1, 1).astype(dtype)


def _movement(dtype: np.dtype) -> dict[str, list[Sample]]:
    """Ops that only move elements, for one dtype."""
    x = vals(dtype, 2, 3, 4)
    return {
        "Reshape": [S({"x": x}, constants={"shape": i64([4, -1])}, order=["x", "shape"])],
        "Flatten": [S({"x": x}, attrs={"axis": 2})],
        "Squeeze": [S({"x": vals(dtype, 2, 1, 3)}, constants={"axes": i64([1])},
                      order=["x", "axes"])],
        "Unsqueeze": [S({"x": vals(dtype, 2, 3)}, constants={"axes": i64([0, 3])},
                        order=["x", "axes"])],
        "Identity": [S({"x": x})],
        "Transpose": [S({"x": x}, attrs={"perm": [2, 0, 1]})],
        "Concat": [S({"a": vals(dtype, 2, 1, 3), "b": vals(dtype, 2, 2, 3)}, attrs={"axis": 1})],
        "Split": [S({"x": vals(dtype, 2, 6)}, constants={"split": i64([2, 4])}, attrs={"axis": 1},
                    order=["x", "split"], num_outputs=2)],
        "Gather": [S({"data": vals(dtype, 5, 3)}, constants={"idx": i64([[0, 2], [4, -1]])},
                     order=["data", "idx"])],
        "GatherElements": [S({"data": vals(dtype, 3, 3)},
                             constants={"idx": i64([[1, 2], [2, 0], [0, 0]])}, attrs={"axis": 1},
                             order=["data", "idx"])],
        "GatherND": [S({"data": vals(dtype, 2, 2, 3)}, constants={"idx": i64([[0, 1], [1, 0]])},
                       order=["data", "idx"])],
        "Slice": [S({"x": x}, constants={"s": i64([0, 3]), "e": i64([2, -5]), "a": i64([1, 2]),
                                         "st": i64([1, -2])},
                    order=["x", "s", "e", "a", "st"])],
        "Expand": [S({"x": vals(dtype, 3, 1)}, constants={"shape": i64([2, 3, 4])},
                     order=["x", "shape"])],
        "Tile": [S({"x": vals(dtype, 2, 3)}, constants={"r": i64([2, 1])}, order=["x", "r"])],
        "Pad": [S({"x": vals(dtype, 2, 3)},
                  constants={"p": i64([1, 0, 0, 2]), "v": vals(dtype, 1).reshape(())},
                  order=["x", "p", "v"]),
                S({"x": vals(dtype, 2, 3)}, constants={"p": i64([0, 1, 1, 2])},
                  attrs={"mode": "reflect"}, order=["x", "p"])],
        "Where": [S({"c": vals(BOOL, 2, 3), "a": vals(dtype, 2, 3), "b": vals(dtype, 3)})],
        "Trilu": [S({"x": vals(dtype, 3, 4)}, attrs={"upper": 0})],
        "ScatterND": [S({"x": vals(dtype, 4, 2)}, constants={"i": i64([[1], [3]]),
                                                          "u": vals(dtype, 2, 2)},
                        order=["x", "i", "u"])],
        "ScatterElements": [S({"x": vals(dtype, 3, 3)},
                              constants={"i": i64([[1, 0, 2]]), "u": vals(dtype, 1, 3)},
                              order=["x", "i", "u"])],
        "Equal": [S({"a": vals(dtype, 2, 3, low=-2, high=2), "b": vals(dtype, 3, low=-2, high=2)})],
    }


def _numeric(dtype: np.dtype) -> dict[str, list[Sample]]:
    """Comparisons, arithmetic and extremes for one integer or 16-bit float dtype."""
    a, b = vals(dtype, 2, 3), vals(dtype, 3)
    samples = {
        "Less": [S({"a": a, "b": b})],
        "Greater": [S({"a": a, "b": b})],
        "LessOrEqual": [S({"a": a, "b": b})],
        "GreaterOrEqual": [S({"a": a, "b": b})],
        "Add": [S({"a": a, "b": b}, opset=14)],
        "Sub": [S({"a": a, "b": b}, opset=14)],
        "Mul": [S({"a": a, "b": b}, opset=14)],
        "Div": [S({"a": a, "b": nonzero(dtype, 3)}, opset=14)],
        # Floats take fmod=1 (fmod=0 on floats came with opset 28).
        "Mod": [S({"a": vals(dtype, 2, 4), "b": nonzero(dtype, 4)},
                  attrs={"fmod": 1} if dtype in LOW else {})],
        "Max": [S({"a": a, "b": b, "c": vals(dtype, 1)}, opset=13)],
        "Min": [S({"a": a, "b": b}, opset=13)],
        "Abs": [S({"x": a}, opset=13)],
        "Clip": [S({"x": vals(dtype, 2, 5)},
                   constants={"lo": vals(dtype, 1, low=0, high=5).reshape(()),
                              "hi": vals(dtype, 1, low=8, high=15).reshape(())},
                   order=["x", "lo", "hi"], opset=13)],
        "ReduceMax": [S({"x": vals(dtype, 2, 3, 4)}, constants={"axes": i64([1])},
                        order=["x", "axes"], opset=20)],
        "ReduceMin": [S({"x": vals(dtype, 2, 3, 4)}, attrs={"keepdims": 0}, opset=20)],
        "ArgMax": [S({"x": vals(dtype, 3, 4)}, attrs={"axis": 1})],
        "ArgMin": [S({"x": vals(dtype, 3, 4)}, attrs={"axis": 0, "keepdims": 0})],
    }
    if dtype.kind != "u":
        samples["Neg"] = [S({"x": a}, opset=13)]
    # ReduceSum (opset 13) and CumSum: the types ONNX defines them for.
    if dtype.itemsize >= 4 or dtype in LOW:
        samples["CumSum"] = [S({"x": vals(dtype, 2, 4, low=0, high=9)},
                               constants={"ax": i64(1)}, order=["x", "ax"])]
        samples["ReduceSum"] = [S({"x": vals(dtype, 2, 3, 4, low=0, high=9)},
                                  constants={"axes": i64([0, 2])}, order=["x", "axes"],
                                  opset=13)]
    return samples


def _integer_semantics() -> dict[str, list[Sample]]:
    i32, u8 = np.int32, np.uint8
    return {
        # Division truncates toward zero; Mod (fmod=0) takes the divisor's sign, fmod=1
        # the dividend's; arithmetic wraps around.
        "Div": [S({"a": np.array([7, -7, 7, -7, -128], np.int8),
                   "b": np.array([2, 2, -2, -2, -1], np.int8)}, opset=14)],
        "Mod": [S({"a": np.array([7, -7, 7, -7, 5], i32), "b": np.array([3, 3, -3, -3, -1], i32)}),
                S({"a": np.array([7, -7, 7, -7], i32), "b": np.array([3, 3, -3, -3], i32)},
                  attrs={"fmod": 1})],
        "Add": [S({"a": np.array([250, 7], u8), "b": np.array([10, 3], u8)}, opset=14),
                S({"a": np.array([2**31 - 1, -5], i32), "b": np.array([1, 3], i32)}, opset=14)],
        "Mul": [S({"a": np.array([60000, 3], np.uint16), "b": np.array([60000, 5], np.uint16)},
                  opset=14),
                S({"a": np.array([2**62, 3], np.int64), "b": np.array([4, -5], np.int64)},
                  opset=14)],
        "Sub": [S({"a": np.array([3, 0], np.uint32), "b": np.array([5, 1], np.uint32)},
                  opset=14)],
        "Neg": [S({"x": np.array([-128, 5, 0], np.int8)}, opset=13)],
        "Abs": [S({"x": np.array([-128, -5, 7], np.int8)}, opset=13)],
        # Pow: integer powers, and an exponent whose dtype differs from the base's.
        "Pow": [S({"a": np.array([2, -3, 5, 0], i32), "b": np.array([3, 3, 0, 2], i32)},
                  opset=15),
                S({"a": np.array([2, -3, 10], np.int64), "b": np.array([40, 39, 18], np.int64)},
                  opset=15),
                S({"a": np.array([4, 9, 2, 10], i32),
                   "b": np.array([0.5, 0.5, 3.0, -1.0], np.float32)}, opset=15),
                S({"a": np.array([1.5, 2.0, -3.0], np.float32),
                   "b": np.array([2, 3, 3], np.int64)}, opset=15),
                S({"a": np.array([1.5, 2.0, 4.0], np.float64), "b": np.array([2.0], np.float32)},
                  opset=15),
                S({"a": np.array([1.5, 2.0, -3.0], np.float16), "b": np.array([2, 3, 3], i32)},
                  opset=15)],
        # Clip on integers, and bounds that cross (every element becomes max).
        "Clip": [S({"x": np.array([-5, 0, 3, 9], np.int64)},
                   constants={"lo": np.asarray(-2, np.int64)}, order=["x", "lo"], opset=13),
                 S({"x": np.array([-0.5, 0.2, 0.9])},
                   constants={"lo": np.asarray(0.6), "hi": np.asarray(0.1)},
                   order=["x", "lo", "hi"], opset=13)],
        "ReduceMax": [S({"x": np.array([[True, False], [False, False]])},
                        constants={"axes": i64([1])}, order=["x", "axes"], opset=20)],
        "ReduceMin": [S({"x": np.array([[True, False], [True, True]])},
                        constants={"axes": i64([1])}, order=["x", "axes"], opset=20)],
        "Equal": [S({"a": np.array([1, 2, 3], np.uint64) * np.uint64(2**62),
                     "b": np.array([2**62, 1, 3 * 2**62], np.uint64)})],
    }


def _low_precision(dtype: np.dtype) -> dict[str, list[Sample]]:
    """16-bit float compute: float32 inside, rounded to `dtype` once per op, as numpy
    rounds each float16/bfloat16 ufunc. Multi-step ops (softmax, normalisation, products)
    are rounded once where the reference rounds after every step: a few units of
    float16's 2**-11 (bfloat16's 2**-8) apart."""
    tol = 4e-3 if dtype == np.float16 else 3e-2

    def r(*shape: int) -> np.ndarray:
        return rng.uniform(-1.0, 1.0, size=shape).astype(dtype)

    def pos(*shape: int) -> np.ndarray:  # no cancellation: sums stay away from zero
        return rng.uniform(0.25, 1.0, size=shape).astype(dtype)

    conv_rng = np.random.default_rng(11)

    def conv_pos(*shape: int) -> np.ndarray:
        return conv_rng.uniform(0.25, 1.0, size=shape).astype(dtype)

    special = np.array([1.0, np.nan, -np.inf, np.inf, 0.0, -2.5]).astype(dtype)
    return {
        "Relu": [S({"x": r(3, 4)})],
        "Sigmoid": [S({"x": r(3, 4)}, reference_rtol=tol)],
        "Tanh": [S({"x": r(3, 4)}, reference_rtol=tol)],
        "Exp": [S({"x": r(3, 4)}, reference_rtol=tol)],
        "Sqrt": [S({"x": np.abs(r(3, 4))}, reference_rtol=tol)],
        "Sum": [S({"a": r(2, 3), "b": r(3), "c": r(2, 3)}, reference_rtol=tol)],
        "Pow": [S({"a": np.abs(r(2, 3)), "b": r(3)}, reference_rtol=tol, opset=15)],
        "Softmax": [S({"x": r(2, 5)}, reference_rtol=tol)],
        "LogSoftmax": [S({"x": r(2, 5)}, reference_rtol=tol)],
        "ReduceMean": [S({"x": pos(2, 3, 4)}, attrs={"axes": [1]}, reference_rtol=tol)],
        "LayerNormalization": [S({"x": r(2, 3, 8), "scale": pos(8), "bias": pos(8) + 2},
                                 reference_rtol=tol * 4)],
        "SimplifiedLayerNormalization": [
            S({"x": r(2, 3, 8), "scale": pos(8)}, domain="com.microsoft", num_outputs=2,
              expected=simplified_layernorm_reference(), reference_rtol=tol * 4)],
        "Gemm": [S({"a": pos(3, 4), "b": pos(4, 5), "c": pos(5)}, reference_rtol=tol * 4)],
        "MatMul": [S({"a": pos(2, 3, 4), "b": pos(4, 5)}, reference_rtol=tol * 4)],
        # Even pads (a 16-bit kernel), then uneven ones (float32 between Casts); values of
        # their own generator, so the samples above keep theirs.
        "Conv": [S({"x": conv_pos(1, 2, 5, 5), "w": conv_pos(3, 2, 3, 3), "b": conv_pos(3)},
                   attrs={"pads": [1, 1, 1, 1], "strides": [2, 1]}, reference_rtol=tol * 4),
                 S({"x": conv_pos(2, 2, 4, 5), "w": conv_pos(2, 1, 2, 3)},
                   attrs={"pads": [0, 1, 1, 2], "group": 2}, reference_rtol=tol * 4)],
        "ConvTranspose": [
            S({"x": conv_pos(1, 2, 3, 3), "w": conv_pos(2, 3, 3, 3), "b": conv_pos(3)},
              attrs={"pads": [1, 1, 1, 1], "strides": [2, 2], "output_padding": [1, 1]},
              reference_rtol=tol * 4),
            S({"x": conv_pos(2, 2, 4), "w": conv_pos(2, 1, 3)},
              attrs={"pads": [0, 1], "strides": [2]}, reference_rtol=tol * 4)],
        "IsNaN": [S({"x": special})],
        "IsInf": [S({"x": special}), S({"x": special}, attrs={"detect_negative": 0})],
    }


def _cast() -> list[Sample]:
    """Every standard type to every other, with values each destination represents
    (float to integer truncates toward zero; negative floats only to signed types)."""
    samples = []
    for src in STANDARD:
        for dst in STANDARD:
            if src == dst:
                continue
            if src == BOOL:
                x = np.array([[True, False, True]])
            elif src.kind == "u" or (src.kind == "f" or src == BF16) and dst.kind == "u":
                x = np.array([[0, 1, 7, 100], [2.75, 64.5, 127.25, 3.5]][0 if src.kind in "iu"
                                                                          else 1]).astype(src)
            else:
                x = np.array([-100, -3, 0, 5] if src.kind in "iu" else [-7.75, -0.5, 0.0, 99.5],
                             ).astype(src)
            samples.append(S({"x": x}, attrs={"to": _onnx_type(dst)}, opset=13, grad=[]))
    # NaN and infinities among the float types and to bool; a double exactly between two
    # float16 neighbours after float32 rounding (rounded once, from the double).
    special = np.array([np.nan, np.inf, -np.inf, 1e-8, 70000.0, 1.0 + 2.0**-11 + 2.0**-40])
    for dst in (np.dtype(np.float32), *LOW, BOOL):
        samples.append(S({"x": special}, attrs={"to": _onnx_type(dst)}, opset=13, grad=[]))
    samples.append(S({"x": special.astype(np.float32)}, attrs={"to": 10}, opset=13))
    with np.errstate(over="ignore"):  # 70000 becomes inf
        samples.append(S({"x": special.astype(np.float16)}, attrs={"to": 16}, opset=13))
    return samples


def _onnx_type(dtype: np.dtype) -> int:
    from onnx import helper

    return helper.np_dtype_to_tensor_dtype(dtype)


def _build() -> dict[str, list[Sample]]:
    out: dict[str, list[Sample]] = {}

    def add(part: dict[str, list[Sample]]) -> None:
        for op, samples in part.items():
            out.setdefault(op, []).extend(samples)

    for dtype in [*INTS, BOOL, *LOW]:
        add(_movement(dtype))
    for dtype in [*INTS, *LOW]:
        add(_numeric(dtype))
    add(_integer_semantics())
    for dtype in LOW:
        add(_low_precision(dtype))
    add({"Cast": _cast(),
         "CastLike": [S({"x": vals(src, 2, 3, low=0, high=9), "like": vals(dst, 1)}, grad=[])
                      for src, dst in [(np.dtype(np.float16), np.dtype(np.int16)),
                                       (np.dtype(np.uint32), BF16),
                                       (np.dtype(np.uint64), np.dtype(np.float16)),
                                       (np.dtype(np.int8), np.dtype(np.uint16))]]})
    return out


DTYPE_SAMPLES = _build()
