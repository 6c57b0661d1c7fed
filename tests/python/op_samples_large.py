"""float32 samples large enough to cross the kernels' parallel grain (see op_samples.py).

The samples in op_samples.py are small and float64: they check the math against the ONNX
reference and finite differences. These run the float32 kernels at sizes where parallel_for
splits the work over threads (elementwise grain: 32768 elements; row kernels split rows), and
every output is compared: running statistics, mean/inv_std, indices, log_prob, masks.
test_ops.py checks their forward against onnx.reference and their float32 gradients against
the engine's float64 gradients of the same model (checked in turn by a directional finite
difference at the same size).
"""

from __future__ import annotations

import numpy as np

from tests.python.op_samples_bessel import BESSEL_LARGE_SAMPLES
from tests.python.op_samples_linalg import LINALG_LARGE_SAMPLES
from tests.python.op_samples_linalg_lu import LINALG_LU_LARGE_SAMPLES
from tests.python.op_samples_linalg_spectral import LINALG_SPECTRAL_LARGE_SAMPLES
from tests.python.op_samples_sort_search import SORT_SEARCH_LARGE_SAMPLES
from tests.python.sample_utils import (
    Sample,
    conv_transpose_reference,
    fused_attention_reference,
    fused_matmul_reference,
    fused_rotary_reference,
    linear_cross_entropy_reference,
    rnn_layer_reference,
    scaled_masked_softmax_reference,
    silu_mul_reference,
    simplified_layernorm_reference,
)

_rng = np.random.default_rng(7)


def f(*shape: int, low: float = -1.0, high: float = 1.0) -> np.ndarray:
    return _rng.uniform(low, high, size=shape).astype(np.float32)


def _causal_keep(batch: int, rows: int, cols: int) -> np.ndarray:
    """[batch, 1, rows, cols]: query i sees keys up to i + cols - rows; the first sequence
    also drops its last 16 keys (padding)."""
    keep = np.tril(np.ones((rows, cols), dtype=np.bool_), k=cols - rows)
    keep = np.broadcast_to(keep, (batch, 1, rows, cols)).copy()
    keep[0, :, :, cols - 16:] = False
    return keep


def away(*shape: int) -> np.ndarray:
    return f(*shape, low=0.2, high=1.0) * _rng.choice([-1.0, 1.0], size=shape).astype(np.float32)


def distinct(*shape: int) -> np.ndarray:
    n = int(np.prod(shape))
    return (_rng.permutation(n).astype(np.float32) / n).reshape(shape)


def i64(values: object) -> np.ndarray:
    return np.asarray(values, dtype=np.int64)


def idx(high: int, *shape: int) -> np.ndarray:
    return _rng.integers(0, high, size=shape).astype(np.int64)


def bools(*shape: int) -> np.ndarray:
    return _rng.random(shape) < 0.5


def sparse(*shape: int) -> np.ndarray:
    """float32 values, about half of them zero; its own generator, so that the other samples
    keep their values."""
    x = np.random.default_rng(8).uniform(-1.0, 1.0, size=shape).astype(np.float32)
    x[x < 0] = 0.0
    return x


def L(inputs: dict[str, np.ndarray], **kw: object) -> Sample:
    kw.setdefault("reference_rtol", 1e-4)
    return Sample(inputs, **kw)  # type: ignore[arg-type]


# Rows, columns of the elementwise samples: 80 * 1024 = 81920 elements, > 2 grains.
R, C = 80, 1024


def _unary(low: float = -1.0, high: float = 1.0, **kw: object) -> list[Sample]:
    return [L({"x": f(R, C, low=low, high=high)}, **kw)]


def _torch_special(fn: str, x: np.ndarray) -> np.ndarray:
    import torch

    return getattr(torch.special, fn)(torch.from_numpy(x.astype(np.float64))).numpy().astype(
        x.dtype)


def _torch64(fn: str, *args: object) -> np.ndarray:
    """torch.<fn>(*args) in float64 (arrays as tensors), as the first array's dtype."""
    import torch

    f = torch
    for part in fn.split("."):
        f = getattr(f, part)
    arrays = [a for a in args if isinstance(a, np.ndarray)]
    out = f(*[torch.from_numpy(a.astype(np.float64)) if isinstance(a, np.ndarray) else a
              for a in args])
    return out.numpy().astype(arrays[0].dtype)
def _torch_polynomial(kind: str) -> object:
    """torch.special.<kind>_polynomial_<letter>(x, n), in float64, as float32."""
    def reference(d: dict[str, np.ndarray]) -> list[np.ndarray]:
        import torch

        family, letter = kind.rsplit("_", 1)
        f = getattr(torch.special, f"{family}_polynomial_{letter}")
        x, n = (torch.from_numpy(d[k].astype(np.float64)) for k in ("x", "n"))
        return [f(x, n).numpy().astype(np.float32)]
    return reference


def _binary(b_low: float = -1.0, b_high: float = 1.0) -> list[Sample]:
    return [L({"a": f(R, C), "b": f(C, low=b_low, high=b_high)}),
            L({"a": f(R, C), "b": f(R, 1, low=b_low, high=b_high)})]


def _compare() -> list[Sample]:
    a = _rng.integers(-3, 3, size=(R, C)).astype(np.float32)
    return [L({"a": a, "b": _rng.integers(-3, 3, size=(C,)).astype(np.float32)}),
            L({"a": idx(5, R, C), "b": idx(5, R, 1)})]


def _logical() -> list[Sample]:
    return [L({"a": bools(R, C), "b": bools(C)})]


def _nan_inf() -> np.ndarray:
    x = f(R, C)
    flat = x.reshape(-1)
    flat[::7] = np.nan
    flat[::11] = np.inf
    flat[::13] = -np.inf
    return x


def _embedding(inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
    return [inputs["weight"][inputs["indices"]]]


def _gather_elements(inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
    """onnx.reference's GatherElements mishandles 2-D indices narrower than the data."""
    return [np.take_along_axis(inputs["x"], inputs["i"], axis=1)]


def _bn_torch(d: dict[str, np.ndarray]) -> list[np.ndarray]:
    """PyTorch's training-mode batch norm in float64 (running_var: unbiased variance)."""
    x = d["x"].astype(np.float64)
    mean, var = x.mean(axis=(0, 2, 3)), x.var(axis=(0, 2, 3))
    count = x.size // x.shape[1]
    shape = (1, -1, 1, 1)
    y = ((x - mean.reshape(shape)) / np.sqrt(var.reshape(shape) + 1e-5)
         * d["scale"].reshape(shape) + d["bias"].reshape(shape))
    m = float(np.float32(0.9))
    return [y.astype(np.float32), (m * d["mean"] + (1 - m) * mean).astype(np.float32),
            (m * d["var"] + (1 - m) * var * count / (count - 1)).astype(np.float32)]


def _sin(inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
    return [np.sin(inputs["x"])]


_GROUPED_CONV_TRANSPOSE = {"group": 2, "strides": [2, 2], "pads": [1, 1, 1, 1],
                           "output_padding": [1, 1]}


def _nchw() -> np.ndarray:
    return f(8, 16, 24, 24)


_MOD_DIVISOR = away(C) * 2


def _mod_dividend() -> np.ndarray:
    """Quotients at least 0.1 away from an integer: no finite difference straddles a jump."""
    k = _rng.integers(-3, 3, size=(R, C))
    frac = _rng.uniform(0.1, 0.9, size=(R, C))
    return ((k + frac) * _MOD_DIVISOR).astype(np.float32)


LARGE_SAMPLES: dict[str, list[Sample]] = {
    # ---- element-wise ----
    "Add": _binary(), "Sub": _binary(), "Mul": _binary(),
    "Div": _binary(b_low=0.5, b_high=1.5),
    "Pow": [L({"a": f(R, C, low=0.5, high=1.5), "b": f(C, low=1.0, high=3.0)})],
    "Sum": [L({"a": f(R, C), "b": f(R, C), "c": f(C)}),
            # Four of the output's shape: the single-pass path (a gradient over four readers).
            L({"a": f(R, C), "b": f(R, C), "c": f(R, C), "d": f(R, C)})],
    "Neg": _unary(), "Relu": [L({"x": away(R, C)})], "Sigmoid": _unary(-4, 4),
    "Tanh": _unary(-2, 2), "Exp": _unary(), "Log": _unary(0.5, 2.0), "Sqrt": _unary(0.5, 2.0),
    "Erf": _unary(-2, 2), "Abs": [L({"x": away(R, C)})],
    "Sign": [L({"x": f(R, C)})],
    "Scale": [L({"x": f(R, C)}, constants={"scale": np.array([2.5], np.float32)},
                order=["x", "scale"], domain="com.microsoft",
                expected=lambda d: [d["x"] * np.float32(d["scale"][0])])],
    "LeakyRelu": [L({"x": away(R, C)}, attrs={"alpha": 0.1})],
    "Clip": [L({"x": f(R, C)}, constants={"lo": np.float32(-0.5), "hi": np.float32(0.5)},
               order=["x", "lo", "hi"])],
    "Identity": _unary(),
    "StopGradient": [L({"x": f(R, C)}, domain="ai.ortmodule", expected=lambda d: [d["x"]])],
    "Cast": [L({"x": f(R, C)}, attrs={"to": 11}, grad=[]),
             L({"x": f(R, C, low=-100, high=100)}, attrs={"to": 7}, grad=[])],
    "CastLike": [L({"x": f(R, C), "like": np.zeros(1, np.float64)}, grad=[])],
    "Expand": [L({"x": f(1, C)}, constants={"shape": i64([R, C])}, order=["x", "shape"]),
               L({"x": f(R, 1)}, constants={"shape": i64([R, C])}, order=["x", "shape"])],
    "Sin": _unary(-3, 3), "Cos": _unary(-3, 3), "Reciprocal": _unary(0.5, 2.0),
    "Softplus": _unary(-4, 4), "Gelu": [L({"x": f(R, C, low=-3, high=3)}, opset=20),
                                          L({"x": f(R, C, low=-6, high=6)}, opset=20,
                                            attrs={"approximate": "tanh"})],
    "Floor": _unary(-5, 5), "Ceil": _unary(-5, 5),
    # ---- activations, rounding and transcendental functions ----
    "Elu": _unary(-3, 3, attrs={"alpha": 0.7}), "Selu": _unary(-3, 3),
    "Celu": _unary(-3, 3, attrs={"alpha": 0.5}),
    "ScaledElu": _unary(-3, 3, attrs={"alpha": 0.5, "scale": 2.0, "input_scale": 1.5},
                        domain="ai.ortmodule",
                        expected=lambda d: [np.where(d["x"] > 0, np.float32(2) * d["x"],
                                                     np.expm1(np.float32(1.5) * d["x"]))]),
    "HardSigmoid": _unary(-4, 4, attrs={"alpha": 1 / 6, "beta": 0.5}),
    "HardSwish": _unary(-5, 5), "Mish": _unary(-5, 5, opset=18),
    "Round": _unary(-5, 5, grad=[]), "Tan": _unary(-1.2, 1.2), "Asin": _unary(-0.9, 0.9),
    "Acos": _unary(-0.9, 0.9), "Atan": _unary(-3, 3), "Sinh": _unary(-2, 2),
    "Cosh": _unary(-2, 2), "Asinh": _unary(-3, 3), "Acosh": _unary(1.2, 3),
    "Atanh": _unary(-0.9, 0.9),
    "HardTanh": _unary(-2, 2, attrs={"min": -1.0, "max": 1.0}, domain="ai.ortmodule",
                       expected=lambda d: [np.clip(d["x"], np.float32(-1), np.float32(1))]),
    "Atan2": [L({"a": f(R, C), "b": f(C)}, domain="ai.ortmodule",
                expected=lambda d: [np.arctan2(d["a"], d["b"])])],
    "Erfcx": _unary(-5, 30, domain="ai.ortmodule", expected=lambda d: [_torch_special(
        "erfcx", d["x"])]),
    "LogNdtr": _unary(-40, 6, domain="ai.ortmodule", expected=lambda d: [_torch_special(
        "log_ndtr", d["x"])]),
    "Digamma": _unary(0.1, 8, domain="ai.ortmodule", expected=lambda d: [_torch64(
        "digamma", d["x"])]),
    "Lgamma": _unary(0.1, 30, domain="ai.ortmodule", expected=lambda d: [_torch64(
        "lgamma", d["x"])]),
    "Polygamma": _unary(0.1, 12, attrs={"n": 2}, domain="ai.ortmodule",
                        expected=lambda d: [_torch64("polygamma", 2, d["x"])]),
    "Erfinv": _unary(-0.999, 0.999, domain="ai.ortmodule", expected=lambda d: [_torch64(
        "erfinv", d["x"])]),
    "Ndtri": _unary(1e-4, 0.9999, domain="ai.ortmodule", expected=lambda d: [_torch64(
        "special.ndtri", d["x"])]),
    "Zeta": [L({"s": f(R, C, low=1.5, high=6), "q": f(C, low=0.2, high=20)}, grad=["q"],
               domain="ai.ortmodule",
               expected=lambda d: [_torch64("special.zeta", d["s"], d["q"])])],
    "Igamma": [L({"a": f(R, C, low=0.1, high=20), "x": f(C, low=0.01, high=30)}, grad=["x"],
                 domain="ai.ortmodule", expected=lambda d: [_torch64("igamma", d["a"], d["x"])])],
    "Igammac": [L({"a": f(R, C, low=0.1, high=20), "x": f(C, low=0.01, high=30)}, grad=["x"],
                  domain="ai.ortmodule",
                  expected=lambda d: [_torch64("igammac", d["a"], d["x"])])],
    "NextAfter": [L({"a": f(R, C), "b": f(C)}, domain="ai.ortmodule",
                    expected=lambda d: [np.nextafter(d["a"], d["b"])])],
    "Frexp": [L({"x": f(R, C, low=-100, high=100)}, domain="ai.ortmodule", num_outputs=2,
                expected=lambda d: [np.frexp(d["x"])[0], np.frexp(d["x"])[1].astype(np.int32)])],
    "OrthogonalPolynomial": [
        L({"x": f(R, C, low=-1.2, high=1.2), "n": _rng.integers(0, 13, size=(C,)).astype(
            np.float32)}, attrs={"kind": kind}, domain="ai.ortmodule",
          expected=_torch_polynomial(kind)) for kind in ("chebyshev_u", "hermite_h",
                                                        "legendre_p")],
    "Min": [L({"a": distinct(R, C), "b": distinct(C) + np.float32(0.5) / (R * C)})],
    "Max": [L({"a": distinct(R, C), "b": distinct(C) + np.float32(0.5) / (R * C)})],
    "Mod": [L({"a": _mod_dividend(), "b": _MOD_DIVISOR}, attrs={"fmod": 1}, grad=["a"])],
    "Where": [L({"p": f(R, C), "q": f(C)}, constants={"c": bools(R, C)},
                order=["c", "p", "q"])],
    # ---- comparisons and logic ----
    "Equal": _compare(), "Less": _compare(), "Greater": _compare(),
    "LessOrEqual": _compare(), "GreaterOrEqual": _compare(),
    "Not": [L({"x": bools(R, C)})], "And": _logical(), "Or": _logical(), "Xor": _logical(),
    "IsNaN": [L({"x": _nan_inf()})], "IsInf": [L({"x": _nan_inf()})],
    # ---- matrix products ----
    "Gemm": [L({"a": f(256, 128), "b": f(128, 192), "c": f(192)}),
             L({"a": f(128, 256), "b": f(192, 128), "c": f(256, 192)},
               attrs={"transA": 1, "transB": 1, "alpha": 0.5, "beta": 2.0})],
    "FusedMatMul": [L({"a": f(4, 64, 128), "b": f(96, 128)}, attrs={"transB": 1},
                      domain="com.microsoft", expected=fused_matmul_reference(trans_b=1)),
                    L({"a": f(2, 2, 32, 64), "b": f(2, 2, 48, 32)},
                      attrs={"transA": 1, "transB": 1, "alpha": 0.125}, domain="com.microsoft",
                      expected=fused_matmul_reference(1, 1, 0.125))],
    "MatMul": [L({"a": f(4, 64, 128), "b": f(128, 96)}),
               L({"a": f(2, 1, 64, 32), "b": f(1, 3, 32, 48)})],
    # ---- data movement ----
    "Reshape": [L({"x": f(R, C)}, constants={"shape": i64([-1, 256])}, order=["x", "shape"])],
    "Flatten": [L({"x": f(8, 10, 1024)}, attrs={"axis": 2})],
    "Squeeze": [L({"x": f(R, 1, C)}, constants={"axes": i64([1])}, order=["x", "axes"])],
    "Unsqueeze": [L({"x": f(R, C)}, constants={"axes": i64([1])}, order=["x", "axes"])],
    "Transpose": [L({"x": f(64, 32, 48)}, attrs={"perm": [2, 0, 1]}),
                  L({"x": f(R, C)}),
                  # attention: heads out of [B, S, H, D], and K^T of [B, H, S, D]
                  L({"x": f(4, 96, 4, 64)}, attrs={"perm": [0, 2, 1, 3]}),
                  L({"x": f(4, 4, 100, 72)}, attrs={"perm": [0, 1, 3, 2]})],
    "Concat": [L({"a": f(64, 100, 8), "b": f(64, 28, 8), "c": f(64, 3, 8)}, attrs={"axis": 1})],
    "Gather": [L({"data": f(1000, 96)}, constants={"idx": idx(1000, 80, 12)},
                 order=["data", "idx"]),
               L({"data": f(16, 500, 12)}, constants={"idx": idx(500, 900)}, attrs={"axis": 1},
                 order=["data", "idx"])],
    "Embedding": [L({"weight": f(300, 128)}, constants={"indices": 1 + idx(299, 40, 50)},
                    attrs={"padding_idx": 0}, order=["weight", "indices"],
                    domain="ai.ortmodule", expected=_embedding)],
    "Slice": [L({"x": f(R, C)}, constants={"s": i64([1, 3]), "e": i64([-1, 1000]),
                                           "a": i64([0, 1]), "st": i64([1, 2])},
                order=["x", "s", "e", "a", "st"], opset=13)],
    "Split": [L({"x": f(R, C)}, constants={"sizes": i64([100, 412, 512])}, order=["x", "sizes"],
                attrs={"axis": 1}, num_outputs=3, opset=18)],
    "Tile": [L({"x": f(40, 256)}, constants={"r": i64([2, 8])}, order=["x", "r"])],
    "Pad": [L({"x": f(R, C)}, constants={"p": i64([1, 3, 2, 5]), "v": np.float32(0.5)},
              order=["x", "p", "v"]),
            L({"x": f(R, C)}, constants={"p": i64([2, 1, 1, 3])}, attrs={"mode": "reflect"},
              order=["x", "p"])],
    "Trilu": [L({"x": f(4, 160, 160)})],
    "CumSum": [L({"x": f(R, C)}, constants={"axis": np.asarray(1, dtype=np.int64)},
                 order=["x", "axis"], reference_rtol=2e-3),
               L({"x": f(R, 4, 256)}, constants={"axis": np.asarray(0, dtype=np.int64)},
                 attrs={"exclusive": 1, "reverse": 1}, order=["x", "axis"])],
    "Range": [L({"start": np.asarray(3, dtype=np.int64), "limit": np.asarray(100003, np.int64),
                 "delta": np.asarray(1, dtype=np.int64)})],
    "GatherElements": [L({"x": f(R, C)}, constants={"i": idx(C, R, 700)}, attrs={"axis": 1},
                         order=["x", "i"], expected=_gather_elements)],
    "ScatterElements": [L({"x": f(R, C), "u": f(R, 600)},
                          constants={"i": np.stack([_rng.permutation(C)[:600]
                                                    for _ in range(R)]).astype(np.int64)},
                          attrs={"axis": 1}, order=["x", "i", "u"], opset=16),
                        L({"x": f(R, C), "u": f(R, 900)}, constants={"i": idx(C, R, 900)},
                          attrs={"axis": 1, "reduction": "add"}, order=["x", "i", "u"],
                          opset=16)],
    "GatherND": [L({"x": f(200, 300, 4)}, constants={"i": idx(200, 500, 2) % 200},
                   order=["x", "i"])],
    "ScatterND": [L({"x": f(400, 256), "u": f(300, 256)},
                    constants={"i": _rng.permutation(400)[:300].astype(np.int64)[:, None]},
                    order=["x", "i", "u"], opset=16),
                  L({"x": f(400, 256), "u": f(700, 256)}, constants={"i": idx(400, 700, 1)},
                    attrs={"reduction": "add"}, order=["x", "i", "u"], opset=16)],
    "NonZero": [L({"x": sparse(64, 128, 16)})],
    "ConstantOfShape": [L({}, constants={"shape": i64([R, C])}, order=["shape"],
                          attrs={"value": np.array([1.5], dtype=np.float32)})],
    "TorchCall": [L({"x": f(R, C)}, attrs={"aten_op": "aten::sin", "aten_overload": "",
                                           "args": ["t"]},
                    domain="ai.ortmodule", expected=_sin)],
    # ---- reductions ----
    "ReduceSum": [L({"x": f(64, 128, 16)}, constants={"axes": i64([1])}, order=["x", "axes"]),
                  L({"x": f(64, 128, 16)}, constants={"axes": i64([0, 2])},
                    attrs={"keepdims": 0}, order=["x", "axes"])],
    "ReduceMean": [L({"x": f(64, 128, 16)}, constants={"axes": i64([-1])}, order=["x", "axes"],
                     opset=18),
                   L({"x": f(64, 128, 16)}, constants={"axes": i64([0, 1])},
                     order=["x", "axes"], opset=18)],
    "ReduceMax": [L({"x": distinct(64, 128, 16)}, constants={"axes": i64([1])},
                    order=["x", "axes"], opset=18)],
    "ReduceMin": [L({"x": distinct(64, 128, 16)}, constants={"axes": i64([0, 2])},
                    attrs={"keepdims": 0}, order=["x", "axes"], opset=18)],
    "ArgMax": [L({"x": distinct(64, 128, 16)}, attrs={"axis": 1})],
    "ArgMin": [L({"x": distinct(64, 128, 16)}, attrs={"axis": -1, "keepdims": 0})],
    # ---- neural-network layers ----
    "Softmax": [L({"x": f(256, 512, low=-4, high=4)}),
                L({"x": f(16, 64, 128, low=-4, high=4)}, attrs={"axis": 1})],
    "LogSoftmax": [L({"x": f(256, 512, low=-4, high=4)}),
                   L({"x": f(16, 64, 128, low=-4, high=4)}, attrs={"axis": 1})],
    # Row lengths off the vector width, a [B, 1, S, S] causal-style mask of large negatives.
    "ScaledMaskedSoftmax": [
        L({"x": f(8, 4, 64, 130, low=-8, high=8), "mask": f(8, 1, 64, 130, low=-1e4, high=0)},
          attrs={"scale": 0.125}, domain="ai.ortmodule",
          expected=scaled_masked_softmax_reference(0.125)),
        L({"x": f(256, 509, low=-4, high=4)}, attrs={"scale": 3.0}, domain="ai.ortmodule",
          expected=scaled_masked_softmax_reference(3.0)),
        # Rows longer than a warp's share on CUDA (1024): the block-per-row kernel.
        L({"x": f(3, 5, 1500, low=-4, high=4), "mask": f(3, 1, 1500, low=-4, high=0)},
          attrs={"scale": 0.5}, domain="ai.ortmodule",
          expected=scaled_masked_softmax_reference(0.5)),
        # A boolean causal-and-padding mask [B, 1, S, S] with torch.finfo(float32).min as fill.
        L({"x": f(8, 4, 64, 130, low=-8, high=8), "mask": _causal_keep(8, 64, 130)},
          constants={"fill": np.asarray(np.finfo(np.float32).min, np.float32)},
          order=["x", "mask", "fill"], attrs={"scale": 0.125}, domain="ai.ortmodule",
          expected=scaled_masked_softmax_reference(0.125)),
    ],
    # Causal attention over 300 keys: four blocks of rows, the later ones reaching further.
    "FusedAttention": [
        L({"q": f(2, 4, 300, 32), "k": f(2, 4, 300, 32), "v": f(2, 4, 300, 16),
           "mask": _causal_keep(2, 300, 300)},
          constants={"fill": np.asarray(np.finfo(np.float32).min, np.float32)},
          order=["q", "k", "v", "mask", "fill"], attrs={"scale": 0.25}, domain="ai.ortmodule",
          expected=fused_attention_reference(0.25)),
        L({"q": f(8, 4, 128, 64), "k": f(8, 4, 128, 64), "v": f(8, 4, 128, 64),
           "mask": f(8, 1, 1, 128, low=-4, high=0)},
          attrs={"scale": 0.125}, domain="ai.ortmodule", expected=fused_attention_reference(0.125)),
        # BERT-small's attention with its heads laid out [batch, seq, heads, dim] (bshd).
        L({"q": f(8, 128, 4, 64), "k": f(8, 128, 4, 64), "v": f(8, 128, 4, 64),
           "mask": f(8, 1, 1, 128, low=-4, high=0)},
          attrs={"scale": 0.125, "bshd": 15}, domain="ai.ortmodule",
          expected=fused_attention_reference(0.125, 15)),
    ],
    "Conv": [L({"x": _nchw(), "w": f(32, 16, 3, 3, low=-0.2, high=0.2), "b": f(32)},
               attrs={"pads": [1, 1, 1, 1]}),
             L({"x": _nchw(), "w": f(16, 8, 3, 3, low=-0.2, high=0.2)},
               attrs={"group": 2, "strides": [2, 2]})],
    "ConvTranspose": [
        L({"x": _nchw(), "w": f(16, 8, 4, 4, low=-0.2, high=0.2), "b": f(8)},
          attrs={"strides": [2, 2], "pads": [1, 1, 1, 1]}),
        # grouped: onnx.reference's grouped ConvTranspose is wrong, the definition instead
        L({"x": _nchw(), "w": f(16, 4, 3, 3, low=-0.2, high=0.2)},
          attrs=_GROUPED_CONV_TRANSPOSE,
          expected=conv_transpose_reference(_GROUPED_CONV_TRANSPOSE))],
    "MaxPool": [L({"x": distinct(8, 16, 24, 24)}, attrs={"kernel_shape": [3, 3],
                                                        "strides": [2, 2],
                                                        "pads": [1, 1, 1, 1]}, num_outputs=2)],
    "AveragePool": [L({"x": _nchw()}, attrs={"kernel_shape": [3, 3], "strides": [2, 2],
                                             "pads": [1, 1, 1, 1]})],
    "GlobalAveragePool": [L({"x": _nchw()})],
    "BatchNormalization": [
        L({"x": f(16, 32, 16, 16), "scale": f(32, low=0.5, high=1.5), "bias": f(32),
           "mean": f(32), "var": f(32, low=0.5, high=1.5)},
          attrs={"training_mode": 1, "momentum": 0.9}, grad=["x", "scale", "bias"],
          num_outputs=3),
        L({"x": f(16, 32, 16, 16), "scale": f(32, low=0.5, high=1.5), "bias": f(32),
           "mean": f(32), "var": f(32, low=0.5, high=1.5)}, grad=["x", "scale", "bias"]),
    ],
    "BatchNormTorch": [
        L({"x": f(16, 32, 16, 16), "scale": f(32, low=0.5, high=1.5), "bias": f(32),
           "mean": f(32), "var": f(32, low=0.5, high=1.5)},
          attrs={"training_mode": 1, "momentum": 0.9}, grad=["x", "scale", "bias"],
          num_outputs=3, domain="ai.ortmodule", expected=_bn_torch),
    ],
    "LayerNormalization": [
        L({"x": f(256, 512), "scale": f(512, low=0.5, high=1.5), "bias": f(512)},
          num_outputs=3),
        L({"x": f(32, 8, 256), "scale": f(8, 256, low=0.5, high=1.5)}, attrs={"axis": 1},
          num_outputs=3),
    ],
    # Llama's MLP gate [tokens, ffn] with a tail past the vector width: chunks over threads.
    "SiluMul": [
        L({"g": f(1000, 333, low=-6, high=6), "u": f(1000, 333)}, domain="ai.ortmodule",
          reference_rtol=1e-5, expected=silu_mul_reference()),
    ],
    # Llama's q: [batch, heads, seq, 64], cos and sin shared by the heads; lines over threads.
    "FusedRotary": [
        L({"x": f(8, 4, 128, 64), "cos": f(8, 1, 128, 64), "sin": f(8, 1, 128, 64)},
          attrs={"axis": -1, "split": 32}, domain="ai.ortmodule",
          expected=fused_rotary_reference(-1, 32)),
    ],
    # Rows of 256 and 1000 (a vector tail): several rows per thread, and dscale's row blocks.
    "SimplifiedLayerNormalization": [
        L({"x": f(1024, 256), "scale": f(256, low=0.5, high=1.5)}, attrs={"epsilon": 1e-6},
          domain="com.microsoft", num_outputs=2, reference_rtol=1e-5,
          expected=simplified_layernorm_reference(eps=1e-6)),
        L({"x": f(8, 40, 1000), "scale": f(1000, low=0.5, high=1.5)}, domain="com.microsoft",
          num_outputs=2, reference_rtol=1e-5, expected=simplified_layernorm_reference()),
    ],
    "Dropout": [L({"x": f(R, C)}, constants={"ratio": np.float32(0.3),
                                             "training": np.asarray(True)},
                  order=["x", "ratio", "training"], reference=False, random=True,
                  num_outputs=2)],
    "SoftmaxCrossEntropyLoss": [
        L({"scores": f(4096, 32, low=-3, high=3)}, constants={"labels": idx(32, 4096)},
          order=["scores", "labels"], num_outputs=2),
        L({"scores": f(64, 16, 128, low=-3, high=3)}, constants={"labels": idx(16, 64, 128)},
          attrs={"reduction": "none", "ignore_index": 3}, order=["scores", "labels"],
          num_outputs=2),
    ],
    # 512 rows over 1000 classes in blocks of 96 rows (the last one short), a tenth ignored.
    "FusedLinearCrossEntropy": [
        L({"x": f(2, 256, 64), "w": f(1000, 64, low=-0.3, high=0.3), "bias": f(1000)},
          constants={"labels": np.where(idx(10, 2, 256) == 0, -100, idx(1000, 2, 256))},
          order=["x", "w", "labels", "bias"],
          attrs={"reduction": "mean", "ignore_index": -100, "block_rows": 96},
          domain="ai.ortmodule", num_outputs=2, reference_rtol=1e-5,
          expected=linear_cross_entropy_reference(1, "mean", -100)),
    ],
    "NegativeLogLikelihoodLoss": [
        L({"input": f(4096, 32)}, constants={"target": idx(32, 4096)},
          order=["input", "target"]),
        L({"input": f(64, 16, 128)}, constants={"target": idx(16, 64, 128),
                                                "w": f(16, low=0.5, high=1.5)},
          attrs={"reduction": "sum"}, order=["input", "target", "w"]),
    ],
    # Recurrent layers: 32 steps of a batch of 16, hidden size 128.
    "LSTMTorch": [
        L({"x": f(32, 16, 64), "w_ih": f(512, 64, low=-0.1, high=0.1),
           "w_hh": f(512, 128, low=-0.1, high=0.1), "b_ih": f(512), "b_hh": f(512),
           "h0": f(16, 128), "c0": f(16, 128)}, domain="ai.ortmodule", num_outputs=3,
          expected=rnn_layer_reference("lstm")),
    ],
    "GRUTorch": [
        L({"x": f(32, 16, 64), "w_ih": f(384, 64, low=-0.1, high=0.1),
           "w_hh": f(384, 128, low=-0.1, high=0.1), "b_ih": f(384), "b_hh": f(384),
           "h0": f(16, 128)}, attrs={"reverse": 1}, domain="ai.ortmodule", num_outputs=2,
          expected=rnn_layer_reference("gru", 1)),
    ],
    "RNNTorch": [
        L({"x": f(32, 16, 64), "w_ih": f(128, 64, low=-0.1, high=0.1),
           "w_hh": f(128, 128, low=-0.1, high=0.1), "b_ih": f(128), "b_hh": f(128),
           "h0": f(16, 128)}, domain="ai.ortmodule", num_outputs=2,
          expected=rnn_layer_reference("rnn")),
    ],
}


def _with_zeros(x: np.ndarray, every: int) -> np.ndarray:
    """x with every `every`-th element 0: slices with no, one and several zeros."""
    flat = x.reshape(-1).copy()
    flat[::every] = 0
    return flat.reshape(x.shape)


# ---- accumulating reductions and TopK ----
LARGE_SAMPLES.update({
    "ReduceProd": [L({"x": f(64, 128, 16, low=0.97, high=1.03)}, constants={"axes": i64([1])},
                     order=["x", "axes"], opset=18),
                   L({"x": _with_zeros(f(64, 128, 16, low=0.97, high=1.03), 1531)},
                     constants={"axes": i64([0, 2])}, attrs={"keepdims": 0},
                     order=["x", "axes"], opset=18)],
    "ReduceL1": [L({"x": away(64, 128, 16)}, constants={"axes": i64([-1])}, order=["x", "axes"],
                   opset=18)],
    "ReduceL2": [L({"x": f(64, 128, 16)}, constants={"axes": i64([0, 2])},
                   order=["x", "axes"], opset=18)],
    "ReduceLogSumExp": [L({"x": f(64, 128, 16, low=-4, high=4)}, constants={"axes": i64([1])},
                          order=["x", "axes"], opset=18)],
    "TopK": [L({"x": distinct(64, 512)}, constants={"k": i64([16])}, order=["x", "k"],
               num_outputs=2),
             L({"x": distinct(64, 128, 16)}, constants={"k": i64([128])}, order=["x", "k"],
               attrs={"axis": 1, "largest": 0}, num_outputs=2)],
})

# Rows with nothing to compute per element: no large sample.
NO_LARGE_SAMPLE = {"Shape": "returns a shape", "Constant": "returns its attribute",
                   "Size": "returns a count", "BroadcastGradientArgs": "computes on shapes",
                   "InPlaceAccumulatorV2": "one add; covered by the training-session tests",
                   "FusedAttentionDropout": "random; compared with the unfused Dropout graph at "
                                            "sizes that span several blocks in "
                                            "test_attention_fusion.py",
                   "ScatterReduceTorch": "passes input 0 through (a view)",
                   "AsStridedScatterTorch": "passes input 0 through (a view)",
                   "InfNormTorch": "passes input 0 through (a view)"}

# ---- Resampling and per-sample normalization ----


def _avg_pool_divisor5(d: dict[str, np.ndarray]) -> list[np.ndarray]:
    import torch

    x = torch.from_numpy(d["x"])
    return [torch.nn.functional.avg_pool2d(x, 3, 2, 1, True, True, 5).numpy()]


def _bicubic(d: dict[str, np.ndarray]) -> list[np.ndarray]:
    import torch

    x = torch.from_numpy(d["x"])
    return [torch.ops.aten.upsample_bicubic2d.default(x, [40, 36], False, 2.0, 1.5).numpy()]


def _group_norm8(d: dict[str, np.ndarray]) -> list[np.ndarray]:
    import torch

    x = torch.from_numpy(d["x"])
    out = torch.ops.aten.native_group_norm(x, torch.from_numpy(d["scale"]),
                                           torch.from_numpy(d["bias"]), 8, 32, 256, 8, 1e-5)
    return [t.numpy() for t in out]


LARGE_SAMPLES.update({
    "AveragePoolTorch": [L({"x": _nchw()}, attrs={"kernel_shape": [3, 3], "strides": [2, 2],
                                                  "pads": [1, 1, 1, 1], "ceil_mode": 1,
                                                  "count_include_pad": 1, "divisor_override": 5},
                           domain="ai.ortmodule", expected=_avg_pool_divisor5)],
    "Resize": [
        L({"x": f(4, 16, 20, 24)}, constants={"scales": np.asarray([1, 1, 2, 1.5], np.float32)},
          order=["x", "", "scales"], attrs={"mode": "linear"}),
        L({"x": f(4, 16, 20, 24)}, constants={"sizes": np.asarray([4, 16, 33, 17], np.int64)},
          order=["x", "", "", "sizes"], attrs={"mode": "nearest"}),
    ],
    "InstanceNormalization": [
        L({"x": f(8, 32, 16, 16), "scale": f(32, low=0.5, high=1.5), "bias": f(32)}),
    ],
    "GroupNorm": [
        L({"x": f(8, 32, 16, 16), "scale": f(32, low=0.5, high=1.5), "bias": f(32)},
          attrs={"num_groups": 8}, domain="ai.ortmodule", num_outputs=3,
          expected=_group_norm8),
    ],
    "ResizeTorch": [
        L({"x": f(4, 16, 20, 24)}, constants={"sizes": np.asarray([40, 36], np.int64),
                                              "scales": np.asarray([2.0, 1.5])},
          order=["x", "sizes", "scales"], attrs={"mode": "cubic", "align_corners": 0},
          domain="ai.ortmodule", expected=_bicubic),
    ],
})
LARGE_SAMPLES.update(BESSEL_LARGE_SAMPLES)
LARGE_SAMPLES.update(LINALG_LARGE_SAMPLES)
LARGE_SAMPLES.update(LINALG_SPECTRAL_LARGE_SAMPLES)
LARGE_SAMPLES.update(SORT_SEARCH_LARGE_SAMPLES)
LARGE_SAMPLES.update(LINALG_LU_LARGE_SAMPLES)
