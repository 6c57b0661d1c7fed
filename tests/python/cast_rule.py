"""The engine's rule for a floating value cast to an integer type outside that type's range,
which ONNX leaves undefined (docs/behaviour.md, "Float to integer"), written from the doc
with Python's exact integers, independently of the engine and of numpy's conversions:

- NaN gives 0;
- an infinity gives the type's largest value (+inf) or lowest value (-inf);
- any other value is truncated toward zero and wraps modulo 2^bits.

Inside the range the result is ONNX's (truncation toward zero), and tests compare it with
onnx.reference; `split` tells the two apart.
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
from onnx import TensorProto as TP

# ONNX integer type: (bits, signed).
INTEGER_TYPES = {
    TP.INT64: (64, True), TP.INT32: (32, True), TP.INT16: (16, True), TP.INT8: (8, True),
    TP.UINT64: (64, False), TP.UINT32: (32, False), TP.UINT16: (16, False),
    TP.UINT8: (8, False), TP.INT4: (4, True), TP.UINT4: (4, False), TP.INT2: (2, True),
    TP.UINT2: (2, False),
}
NUMPY_INTEGER_TYPES = {
    np.dtype(np.int64): TP.INT64, np.dtype(np.int32): TP.INT32, np.dtype(np.int16): TP.INT16,
    np.dtype(np.int8): TP.INT8, np.dtype(np.uint64): TP.UINT64, np.dtype(np.uint32): TP.UINT32,
    np.dtype(np.uint16): TP.UINT16, np.dtype(np.uint8): TP.UINT8,
    np.dtype(ml_dtypes.int4): TP.INT4, np.dtype(ml_dtypes.uint4): TP.UINT4,
    np.dtype(ml_dtypes.int2): TP.INT2, np.dtype(ml_dtypes.uint2): TP.UINT2,
}


def limits(dst: int) -> tuple[int, int]:
    bits, signed = INTEGER_TYPES[dst]
    return (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)


def _as_float64(values: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        return np.asarray(values).astype(np.float64)


def in_range(values: np.ndarray, dst: int) -> np.ndarray:
    """Elementwise: the value is finite and its truncation lies in dst's range (defined)."""
    v = _as_float64(values)
    lo, hi = limits(dst)
    with np.errstate(all="ignore"):
        t = np.trunc(v)
        # Compared exactly: float64(hi) may round up past hi (2^63 - 1 -> 2^63).
        return np.isfinite(v) & np.array([lo <= int(x) <= hi if math.isfinite(x) else False
                                          for x in t.ravel()], bool).reshape(v.shape)


def undefined_value(x: float, dst: int) -> int:
    """The rule, for one value."""
    bits, signed = INTEGER_TYPES[dst]
    lo, hi = limits(dst)
    if math.isnan(x):
        return 0
    if math.isinf(x):
        return hi if x > 0 else lo
    wrapped = math.trunc(x) % (1 << bits)
    return wrapped - (1 << bits) if signed and wrapped > hi else wrapped


def expected(values: np.ndarray, dst: int) -> np.ndarray:
    """The rule for every element, as int64 values (uint64 for UINT64)."""
    out = [undefined_value(float(x), dst) for x in _as_float64(values).ravel()]
    return np.array(out, np.uint64 if dst == TP.UINT64 else np.int64).reshape(np.shape(values))


def as_integers(values: np.ndarray, dst: int) -> np.ndarray:
    """An integer array of dst's type (ml_dtypes for the 4-bit and 2-bit ones) as int64
    values (uint64 for UINT64), to compare with `expected`."""
    return np.asarray(values).astype(np.uint64 if dst == TP.UINT64 else np.int64)
