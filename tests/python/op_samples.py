"""Sample inputs for every op in the op table (like PyTorch's OpInfo).

test_ops.py generates, from ortmodule._C.op_table(), a forward test (against the
ONNX reference implementation) and a finite-difference gradient check (double
precision, the row's tolerances) for every sample of every exporter-facing op.
A row without samples fails the coverage test, so adding an op means adding
samples here.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from tests.python.op_samples_bessel import BESSEL_SAMPLES
from tests.python.op_samples_data import DATA_SAMPLES
from tests.python.op_samples_dtypes import DTYPE_SAMPLES
from tests.python.op_samples_gamma import GAMMA_SAMPLES
from tests.python.op_samples_linalg import LINALG_SAMPLES
from tests.python.op_samples_linalg_lu import LINALG_LU_SAMPLES
from tests.python.op_samples_linalg_spectral import LINALG_SPECTRAL_SAMPLES
from tests.python.op_samples_scatter import SCATTER_SAMPLES
from tests.python.op_samples_sort_search import SORT_SEARCH_SAMPLES
from tests.python.sample_utils import (
    Sample,
    away_from_zero,
    conv_transpose_reference,
    distinct,
    fused_attention_reference,
    fused_matmul_reference,
    fused_rotary_reference,
    i64,
    linear_cross_entropy_reference,
    rand,
    rnn_layer_reference,
    scaled_masked_softmax_reference,
    silu_mul_reference,
    simplified_layernorm_reference,
)

S = Sample


def _causal_keep(batch: int, heads: int, rows: int, cols: int) -> np.ndarray:
    """[batch, heads, rows, cols]: query i sees keys up to i + cols - rows; the first query of
    the last batch entry sees nothing."""
    keep = np.tril(np.ones((rows, cols), dtype=np.bool_), k=cols - rows)
    keep = np.broadcast_to(keep, (batch, heads, rows, cols)).copy()
    keep[-1, :, 0, :] = False
    return keep


def _keep_mask(*shape: int) -> np.ndarray:
    """A random boolean attention mask whose first row drops every element."""
    keep = np.random.default_rng(7).uniform(size=shape) < 0.7
    keep.reshape(-1, shape[-1])[0] = False
    return keep


def _aten(op: str, overload: str, args: list[str], inputs: dict[str, np.ndarray],
          expected: object, num_outputs: int = 1) -> Sample:
    return S(inputs, attrs={"aten_op": op, "aten_overload": overload, "args": args},
             domain="ai.ortmodule", expected=expected, num_outputs=num_outputs)

_GROUPED_CONV_TRANSPOSE = {"group": 2, "strides": [2, 1], "dilations": [1, 2],
                           "pads": [1, 0, 0, 1], "output_padding": [1, 0]}

SAMPLES: dict[str, list[Sample]] = {
    "Add": [S({"a": rand(2, 3), "b": rand(3)}), S({"a": rand(2, 1, 3), "b": rand(4, 1)})],
    "Sub": [S({"a": rand(2, 3), "b": rand(2, 1)}), S({"a": rand(3), "b": rand(2, 3)})],
    "Mul": [S({"a": rand(2, 3), "b": rand(3)}), S({"a": rand(4, 1, 2), "b": rand(3, 1)}),
            # Gradients that sum trailing, middle and mixed broadcast dims.
            S({"a": rand(2, 3, 4), "b": rand(2, 3, 1)}), S({"a": rand(2, 3, 4), "b": rand(1, 3, 1)}),
            S({"a": rand(2, 3, 4, 1), "b": rand(2, 1, 4, 1)})],
    "Div": [S({"a": rand(2, 3), "b": rand(2, 3, low=0.5, high=1.5)}),
            S({"a": rand(2, 3), "b": rand(3, low=0.5, high=1.5)})],
    "Pow": [S({"a": rand(2, 3, low=0.5, high=1.5), "b": rand(3, low=1.0, high=3.0)}),
            # Scalar exponents with fast paths (x**2 in RMSNorm, x**1 in its gradient).
            *[S({"a": rand(2, 3, low=0.5, high=1.5)}, constants={"e": np.asarray(e)},
                order=["a", "e"]) for e in (1.0, 2.0, 0.5)]],
    "Sum": [S({"a": rand(2, 3), "b": rand(2, 3), "c": rand(3)}),
            S({"a": rand(2, 3), "b": rand(2, 3), "c": rand(2, 3)})],
    "Neg": [S({"x": rand(2, 3)})],
    "Relu": [S({"x": away_from_zero(3, 4)})],
    "Sigmoid": [S({"x": rand(3, 4, low=-3, high=3)})],
    "Tanh": [S({"x": rand(3, 4, low=-2, high=2)})],
    "Exp": [S({"x": rand(3, 4)})],
    "Log": [S({"x": rand(3, 4, low=0.5, high=2.0)})],
    "Sqrt": [S({"x": rand(3, 4, low=0.5, high=2.0)})],
    "Identity": [S({"x": rand(2, 3)})],
    "Erf": [S({"x": rand(3, 4, low=-2, high=2)}, reference_rtol=1e-6)],
    "Abs": [S({"x": away_from_zero(3, 4)})],
    "Sign": [S({"x": np.array([[-2.5, 0.0, 3.0], [-0.0, 1e-300, -1e-300]])}),
             S({"x": np.array([-7, 0, 5, -1], np.int32)}),
             S({"x": np.array([0, 3, 200], np.uint8)}),
             S({"x": np.array([-1.5, 0.0, np.nan, 2.0], np.float32)})],
    "LeakyRelu": [S({"x": away_from_zero(3, 4)}, attrs={"alpha": 0.1}), S({"x": away_from_zero(5)})],
    "Clip": [
        S({"x": np.array([-0.9, -0.6, -0.3, 0.1, 0.4, 0.8])},
          constants={"lo": np.asarray(-0.5), "hi": np.asarray(0.5)}, order=["x", "lo", "hi"]),
        S({"x": np.array([-0.9, -0.2, 0.3])}, constants={"lo": np.asarray(0.0)},
          order=["x", "lo"]),
    ],
    "Cast": [
        S({"x": rand(2, 3)}, attrs={"to": 11}),
        # uint8 and int8 both ways (wrapping as numpy and torch do).
        S({"x": np.array([[0, 7, 200, 255]], dtype=np.uint8)}, attrs={"to": 1}),
        S({"x": np.array([[-128, -1, 0, 127]], dtype=np.int8)}, attrs={"to": 7}),
        S({"x": np.array([[0.0, 3.0, 100.0, 250.0]])}, attrs={"to": 2}),
        S({"x": np.array([[-100, -3, 0, 120]], dtype=np.int64)}, attrs={"to": 3}),
    ],
    "CastLike": [S({"x": rand(2, 3), "like": rand(1)}, grad=["x"])],
    "Expand": [S({"x": rand(3, 1)}, constants={"shape": i64([2, 3, 4])}, order=["x", "shape"])],
    "Gemm": [
        S({"a": rand(3, 4), "b": rand(4, 5), "c": rand(5)}),
        S({"a": rand(4, 3), "b": rand(5, 4), "c": rand(3, 5)},
          attrs={"transA": 1, "transB": 1, "alpha": 0.5, "beta": 2.0}),
        S({"a": rand(3, 4), "b": rand(5, 4), "c": rand(1, 5)}, attrs={"transB": 1}),
        S({"a": rand(4, 3), "b": rand(4, 5)}, attrs={"transA": 1}),
    ],
    # com.microsoft FusedMatMul: what transpose folding makes of MatMul(x, Transpose(W))
    # (nn.Linear) and MatMul(q, Transpose(k)) (attention scores).
    "FusedMatMul": [
        S({"a": rand(2, 3, 4), "b": rand(5, 4)}, attrs={"transB": 1}, domain="com.microsoft",
          expected=fused_matmul_reference(trans_b=1)),
        S({"a": rand(2, 2, 3, 4), "b": rand(2, 2, 5, 4)}, attrs={"transB": 1},
          domain="com.microsoft", expected=fused_matmul_reference(trans_b=1)),
        S({"a": rand(2, 4, 3), "b": rand(1, 5, 4)}, attrs={"transA": 1, "transB": 1, "alpha": 0.5},
          domain="com.microsoft", expected=fused_matmul_reference(1, 1, 0.5)),
        S({"a": rand(4, 3), "b": rand(2, 4, 5)}, attrs={"transA": 1}, domain="com.microsoft",
          expected=fused_matmul_reference(trans_a=1)),
        S({"a": rand(2, 3, 4), "b": rand(4, 5)}, attrs={"alpha": 2.0}, domain="com.microsoft",
          expected=fused_matmul_reference(alpha=2.0)),
    ],
    "MatMul": [S({"a": rand(2, 3, 4), "b": rand(4, 5)}), S({"a": rand(3, 4), "b": rand(2, 4, 5)}),
               S({"a": rand(2, 1, 3, 4), "b": rand(3, 4, 2)}),
               S({"a": rand(2, 2, 3, 4), "b": rand(2, 2, 4, 3)}),  # attention scores
               S({"a": rand(2, 1, 3, 4), "b": rand(1, 2, 4, 5)}),  # batch dims broadcast both ways
               S({"a": rand(4), "b": rand(2, 4, 3)}), S({"a": rand(2, 3, 4), "b": rand(4)}),
               S({"a": rand(4), "b": rand(4)}), S({"a": rand(3, 4), "b": rand(4)})],
    "Reshape": [S({"x": rand(2, 3, 4)}, constants={"shape": i64([4, -1])}, order=["x", "shape"]),
                S({"x": rand(2, 3, 4)}, constants={"shape": i64([0, 12])}, order=["x", "shape"])],
    "Flatten": [S({"x": rand(2, 3, 4)}, attrs={"axis": 2}), S({"x": rand(2, 3, 4)})],
    "Squeeze": [S({"x": rand(2, 1, 3)}, constants={"axes": i64([1])}, order=["x", "axes"])],
    "Unsqueeze": [S({"x": rand(2, 3)}, constants={"axes": i64([0, 3])}, order=["x", "axes"])],
    "Transpose": [S({"x": rand(2, 3, 4)}, attrs={"perm": [2, 0, 1]}), S({"x": rand(2, 3)})],
    "Concat": [S({"a": rand(2, 1, 3), "b": rand(2, 2, 3), "c": rand(2, 3, 3)}, attrs={"axis": 1})],
    "Gather": [
        S({"data": rand(5, 3)}, constants={"idx": i64([[0, 2], [4, 0]])}, order=["data", "idx"]),
        S({"data": rand(2, 4, 3)}, constants={"idx": i64([3, -1, 1])}, attrs={"axis": 1},
          order=["data", "idx"]),
    ],
    "Constant": [S({}, attrs={"value": rand(2, 3)})],
    "ConstantOfShape": [
        S({}, constants={"shape": i64([2, 3])}, order=["shape"],
          attrs={"value": np.array([1.5], dtype=np.float32)}),
        S({}, constants={"shape": i64([4])}, order=["shape"]),
    ],
    "Shape": [S({"x": rand(2, 3, 4)}), S({"x": rand(2, 3, 4)}, attrs={"start": 1})],
    "Size": [S({"x": rand(2, 3, 4)}), S({"x": rand(0, 3)})],
    # On-device training graphs (com.microsoft, as ONNX Runtime Training defines them).
    "InPlaceAccumulatorV2": [
        S({"buffer": rand(2, 3), "value": rand(2, 3), "reset": np.array([flag])},
          domain="com.microsoft", num_outputs=2,
          expected=lambda d, flag=flag: [np.array([True]),
                                         d["value"] if flag else d["buffer"] + d["value"]])
        for flag in (False, True)],
    # com.microsoft Scale: x times the scale taken as float32 (its float32 reciprocal with
    # scale_down=1), cast to x's dtype.
    "Scale": [
        S({"x": rand(2, 3)}, constants={"scale": np.array([2.5], np.float32)}, order=["x", "scale"],
          domain="com.microsoft", grad=["x"],
          expected=lambda d: [d["x"] * np.float64(np.float32(d["scale"][0]))]),
        S({"x": rand(2, 3)}, constants={"scale": np.array(6, np.int64)}, order=["x", "scale"],
          attrs={"scale_down": 1}, domain="com.microsoft", grad=["x"],
          expected=lambda d: [d["x"] * np.float64(np.float32(1) / np.float32(d["scale"]))]),
        S({"x": rand(4).astype(np.float32)}, constants={"scale": np.array([3.0])},
          order=["x", "scale"], attrs={"scale_down": 1}, domain="com.microsoft",
          expected=lambda d: [d["x"] * (np.float32(1) / np.float32(d["scale"][0]))]),
    ],
    "BroadcastGradientArgs": [
        S({"a": i64(a), "b": i64(b)}, domain="com.microsoft", num_outputs=2,
          expected=lambda d, ea=ea, eb=eb: [i64(ea), i64(eb)])
        for a, b, ea, eb in [([3], [2, 3], [0], []), ([2, 1, 4], [3, 1], [1], [0, 2]),
                             ([], [2, 3], [0, 1], []), ([2, 3], [2, 3], [], [])]],
    "ReduceSum": [
        S({"x": rand(2, 3, 4)}, constants={"axes": i64([1])}, attrs={"keepdims": 0},
          order=["x", "axes"]),
        S({"x": rand(2, 3, 4)}),
        S({"x": rand(2, 3)}, constants={"axes": i64([])}, order=["x", "axes"], opset=13),
        S({"x": rand(2, 3)}, constants={"axes": i64([])}, order=["x", "axes"],
          attrs={"noop_with_empty_axes": 1}, opset=13),
    ],
    "ReduceMean": [S({"x": rand(2, 3, 4)}, attrs={"axes": [0, 2]}),
                   S({"x": rand(2, 3, 4)}, attrs={"axes": [-1], "keepdims": 0}),
                   # The exported models' form: axes as an input, keepdims=1.
                   S({"x": rand(2, 3, 4)}, constants={"axes": i64([-1])}, order=["x", "axes"],
                     attrs={"keepdims": 1, "noop_with_empty_axes": 0}, opset=18),
                   S({"x": rand(2, 3, 4, 5)}, constants={"axes": i64([2, 3])},
                     order=["x", "axes"], opset=18),
                   S({"x": rand(2, 3)}, opset=18)],
    "ReduceMax": [
        S({"x": distinct(2, 3, 4)}, constants={"axes": i64([1])}, attrs={"keepdims": 0},
          order=["x", "axes"], opset=18),
        S({"x": distinct(2, 3, 4)}, constants={"axes": i64([0, -1])}, order=["x", "axes"],
          opset=18),
        S({"x": distinct(2, 3, 4)}, opset=18),  # axes omitted: reduce all
        S({"x": distinct(2, 3)}, constants={"axes": i64([])}, order=["x", "axes"],
          attrs={"noop_with_empty_axes": 1}, opset=18),
        # Two-way ties: the gradient is split evenly, which central differences also give.
        S({"x": np.array([[0.5, 0.9, 0.9], [0.2, -0.1, 0.2]])}, constants={"axes": i64([1])},
          order=["x", "axes"], opset=18),
        S({"x": i64([[3, -2, 7], [7, 1, 0]])}, constants={"axes": i64([-1])},
          order=["x", "axes"], opset=18),
        S({"x": distinct(2, 3, 4)}, attrs={"axes": [2], "keepdims": 0}),  # attribute form
    ],
    "ReduceMin": [
        S({"x": distinct(2, 3, 4)}, constants={"axes": i64([-2])}, order=["x", "axes"],
          opset=18),
        S({"x": distinct(3, 4)}, attrs={"keepdims": 0}, opset=20),
        S({"x": np.array([[0.5, -0.3, -0.3], [0.2, 0.8, 0.2]])}, constants={"axes": i64([1])},
          attrs={"keepdims": 0}, order=["x", "axes"], opset=18),
        S({"x": i64([[3, -2, 7], [7, 1, 0]])}, constants={"axes": i64([0])},
          order=["x", "axes"], opset=18),
        S({"x": distinct(2, 3, 4)}, attrs={"axes": [0, 1]}),
    ],
    "ArgMax": [
        S({"x": distinct(2, 3, 4)}, attrs={"axis": 1}),
        S({"x": distinct(2, 3, 4)}, attrs={"axis": -1, "keepdims": 0}),
        S({"x": np.array([[1.0, 3.0, 3.0], [2.0, 2.0, 0.0]])}, attrs={"axis": 1,
                                                                     "select_last_index": 1}),
        S({"x": i64([[3, 9, 9], [4, 4, 1]])}, attrs={"axis": 1, "keepdims": 0}),
    ],
    "ArgMin": [
        S({"x": distinct(2, 3, 4)}),
        S({"x": np.array([[1.0, 0.0, 0.0], [2.0, 2.0, 5.0]])}, attrs={"axis": -1,
                                                                     "select_last_index": 1}),
        S({"x": i64([[3, 1, 1], [0, 4, 0]])}, attrs={"axis": 1, "keepdims": 0}),
    ],
    "Softmax": [S({"x": rand(2, 3, 4)}, attrs={"axis": 1}), S({"x": rand(3, 5)})],
    "LogSoftmax": [S({"x": rand(2, 3, 4)}, attrs={"axis": 1}), S({"x": rand(3, 5)})],
    # Attention scores: [B, H, S, S] with a padding mask [B, 1, 1, S]; a mask that needs a
    # gradient (a learned bias); x broadcast up by the mask, also along the softmax axis.
    "ScaledMaskedSoftmax": [
        S({"x": rand(2, 3, 4, 5, low=-3, high=3), "mask": rand(2, 1, 1, 5, low=-2, high=0)},
          attrs={"scale": 0.5}, domain="ai.ortmodule", expected=scaled_masked_softmax_reference(0.5)),
        S({"x": rand(2, 3, 4), "mask": rand(4)}, attrs={"scale": -1.5}, domain="ai.ortmodule",
          expected=scaled_masked_softmax_reference(-1.5)),
        S({"x": rand(3, 4)}, attrs={"scale": 2.0}, domain="ai.ortmodule",
          expected=scaled_masked_softmax_reference(2.0)),
        S({"x": rand(2, 1, 4), "mask": rand(3, 4)}, domain="ai.ortmodule",
          expected=scaled_masked_softmax_reference(1.0)),
        S({"x": rand(2, 3, 1), "mask": rand(2, 3, 4)}, attrs={"scale": 0.25},
          domain="ai.ortmodule", expected=scaled_masked_softmax_reference(0.25)),
        # A boolean mask [B, 1, S, S] with a fill (scaled_dot_product_attention's attn_mask):
        # one row dropped entirely (uniform softmax, no gradient to x).
        S({"x": rand(2, 3, 4, 5, low=-3, high=3), "mask": _keep_mask(2, 1, 4, 5)},
          constants={"fill": np.asarray(-1e4)}, order=["x", "mask", "fill"],
          attrs={"scale": 0.5}, domain="ai.ortmodule",
          expected=scaled_masked_softmax_reference(0.5)),
        S({"x": rand(3, 4), "mask": np.array([True, False, True, True])},
          constants={"fill": np.asarray(-np.inf)}, order=["x", "mask", "fill"],
          domain="ai.ortmodule", expected=scaled_masked_softmax_reference(1.0)),
    ],
    # Attention [B, H, S, D] x [B, H, T, D] x [B, H, T, Dv]: unmasked; a padding mask that
    # needs a gradient (from the unfused rule); a boolean causal mask with a fill and a row
    # that sees nothing; K and V shared by the heads (broadcast); one unbatched matrix.
    "FusedAttention": [
        S({"q": rand(2, 3, 4, 5), "k": rand(2, 3, 6, 5), "v": rand(2, 3, 6, 7)},
          attrs={"scale": 0.375}, domain="ai.ortmodule", expected=fused_attention_reference(0.375)),
        S({"q": rand(2, 3, 4, 5), "k": rand(2, 3, 6, 5), "v": rand(2, 3, 6, 7),
           "mask": rand(2, 1, 1, 6, low=-2, high=0)},
          domain="ai.ortmodule", expected=fused_attention_reference(1.0)),
        S({"q": rand(2, 3, 4, 5), "k": rand(2, 3, 6, 5), "v": rand(2, 3, 6, 7),
           "mask": _causal_keep(2, 1, 4, 6)},
          constants={"fill": np.asarray(np.finfo(np.float64).min)},
          order=["q", "k", "v", "mask", "fill"], attrs={"scale": 0.5}, domain="ai.ortmodule",
          expected=fused_attention_reference(0.5)),
        S({"q": rand(2, 3, 4, 5), "k": rand(2, 1, 6, 5), "v": rand(2, 1, 6, 7)},
          attrs={"scale": 0.3125}, domain="ai.ortmodule", expected=fused_attention_reference(0.3125)),
        S({"q": rand(4, 5), "k": rand(6, 5), "v": rand(6, 3)}, attrs={"scale": -0.625},
          domain="ai.ortmodule", expected=fused_attention_reference(-0.625)),
        # Heads laid out [batch, seq, heads, dim] (attribute bshd): all four operands, K and V
        # shared by the heads under a padding mask, and Q alone.
        S({"q": rand(2, 4, 3, 5), "k": rand(2, 6, 3, 5), "v": rand(2, 6, 3, 7)},
          attrs={"scale": 0.375, "bshd": 15}, domain="ai.ortmodule",
          expected=fused_attention_reference(0.375, 15)),
        S({"q": rand(2, 4, 3, 5), "k": rand(2, 6, 1, 5), "v": rand(2, 6, 1, 7),
           "mask": _causal_keep(2, 1, 4, 6)},
          constants={"fill": np.asarray(np.finfo(np.float64).min)},
          order=["q", "k", "v", "mask", "fill"], attrs={"scale": 0.5, "bshd": 15},
          domain="ai.ortmodule", expected=fused_attention_reference(0.5, 15)),
        S({"q": rand(2, 4, 3, 5), "k": rand(2, 3, 6, 5), "v": rand(2, 3, 6, 7)},
          attrs={"scale": 0.25, "bshd": 1}, domain="ai.ortmodule",
          expected=fused_attention_reference(0.25, 1)),
        # A mask given by its S + T - 1 diagonals (attribute mask_window): causal after two
        # past keys (boolean, with its fill), and an additive distance bias in the heads layout
        # (a constant: a windowed mask has no gradient).
        S({"q": rand(2, 3, 4, 5), "k": rand(2, 3, 6, 5), "v": rand(2, 3, 6, 7),
           "mask": np.arange(9) <= 5},
          constants={"fill": np.asarray(np.finfo(np.float64).min)},
          order=["q", "k", "v", "mask", "fill"], attrs={"scale": 0.5, "mask_window": 1},
          domain="ai.ortmodule", expected=fused_attention_reference(0.5, window=True)),
        S({"q": rand(2, 4, 3, 5), "k": rand(2, 6, 3, 5), "v": rand(2, 6, 3, 7),
           "mask": rand(9, low=-2, high=0)},
          attrs={"scale": 0.375, "bshd": 15, "mask_window": 1}, domain="ai.ortmodule",
          grad=["q", "k", "v"], expected=fused_attention_reference(0.375, 15, window=True)),
    ],
    # Dropout 0.25 on the softmax (the same elements forward and backward: finite differences
    # reseed the run), unmasked and under a boolean causal mask.
    "FusedAttentionDropout": [
        S({"q": rand(2, 3, 4, 5), "k": rand(2, 3, 6, 5), "v": rand(2, 3, 6, 5)},
          attrs={"scale": 0.375, "dropout": 0.25}, domain="ai.ortmodule", reference=False,
          random=True),
        S({"q": rand(2, 3, 4, 5), "k": rand(2, 3, 6, 5), "v": rand(2, 3, 6, 5),
           "mask": _causal_keep(2, 1, 4, 6)},
          constants={"fill": np.asarray(np.finfo(np.float64).min)},
          order=["q", "k", "v", "mask", "fill"], attrs={"scale": 0.5, "dropout": 0.25},
          domain="ai.ortmodule", reference=False, random=True),
    ],
    "Conv": [
        S({"x": rand(2, 4, 5, 5), "w": rand(6, 2, 3, 3), "b": rand(6)},
          attrs={"group": 2, "strides": [2, 1], "pads": [1, 0, 1, 2]}),
        S({"x": rand(1, 2, 6, 6), "w": rand(3, 2, 2, 2)}, attrs={"dilations": [2, 2]}),
        S({"x": rand(2, 3, 7), "w": rand(4, 3, 3), "b": rand(4)}, attrs={"pads": [1, 1]}),
        # 3-D: pads, strides and dilations per axis; groups with a bias.
        S({"x": rand(1, 2, 4, 5, 4), "w": rand(3, 2, 2, 3, 2), "b": rand(3)},
          attrs={"pads": [1, 0, 1, 0, 1, 1], "strides": [1, 2, 1], "dilations": [2, 1, 1]}),
        S({"x": rand(2, 4, 3, 4, 5), "w": rand(6, 2, 2, 2, 3), "b": rand(6)},
          attrs={"group": 2, "strides": [1, 1, 2], "pads": [0, 1, 1, 1, 0, 1]}),
    ],
    "ConvTranspose": [
        # stride 2 with output_padding (the shape torch's decoders use), with a bias
        S({"x": rand(2, 4, 3, 3), "w": rand(4, 3, 3, 3), "b": rand(3)},
          attrs={"strides": [2, 2], "pads": [1, 1, 1, 1], "output_padding": [1, 1]}),
        # 1-D, dilated, pads that differ between the two ends
        S({"x": rand(2, 3, 5), "w": rand(3, 2, 3)}, attrs={"dilations": [2], "pads": [1, 0]}),
        # 3-D: strides, pads and output_padding per axis
        S({"x": rand(1, 2, 2, 3, 2), "w": rand(2, 3, 2, 2, 2), "b": rand(3)},
          attrs={"strides": [2, 1, 2], "pads": [0, 1, 1, 1, 0, 0],
                 "output_padding": [1, 0, 0]}),
        # groups (onnx.reference's grouped ConvTranspose is wrong: the definition instead)
        S({"x": rand(2, 4, 3, 4), "w": rand(4, 2, 3, 2), "b": rand(4)},
          attrs=_GROUPED_CONV_TRANSPOSE,
          expected=conv_transpose_reference(_GROUPED_CONV_TRANSPOSE)),
        S({"x": rand(1, 6, 3, 2, 2), "w": rand(6, 1, 2, 1, 2)},
          attrs={"group": 3, "strides": [2, 1, 1], "dilations": [1, 1, 2]},
          expected=conv_transpose_reference({"group": 3, "strides": [2, 1, 1],
                                             "dilations": [1, 1, 2]})),
        # output_padding not below the stride (torch allows it below the dilation): the
        # gradient's Conv reads dY without its last cell (onnx.reference's col2im refuses it)
        S({"x": rand(1, 2, 4), "w": rand(2, 2, 3), "b": rand(2)},
          attrs={"dilations": [2], "output_padding": [1]},
          expected=conv_transpose_reference({"dilations": [2], "output_padding": [1]})),
        # auto_pad and output_shape: forward only (their gradient asks for explicit pads)
        S({"x": rand(1, 2, 3, 3), "w": rand(2, 2, 3, 3)},
          attrs={"strides": [2, 2], "auto_pad": "SAME_UPPER"}, grad=[]),
        S({"x": rand(1, 1, 3, 3), "w": rand(1, 2, 3, 3), "b": rand(2)},
          attrs={"strides": [3, 2], "output_shape": [10, 8]}, grad=[]),
    ],
    "MaxPool": [
        S({"x": distinct(1, 2, 6, 6)}, attrs={"kernel_shape": [3, 3], "strides": [2, 2],
                                               "pads": [1, 1, 1, 1]}, num_outputs=2),
        S({"x": distinct(2, 1, 5, 5)}, attrs={"kernel_shape": [2, 2], "strides": [2, 2],
                                               "ceil_mode": 1}),
        # int8 and uint8 (forward only), with ties, the type's extremes and padding.
        S({"x": np.random.default_rng(7).integers(0, 256, (1, 2, 5, 5)).astype(np.uint8)},
          attrs={"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
        S({"x": np.random.default_rng(8).integers(-128, 128, (1, 2, 4, 4, 4)).astype(np.int8)},
          attrs={"kernel_shape": [2, 2, 2], "strides": [2, 2, 2], "pads": [1, 1, 1, 1, 1, 1]}),
    ],
    "AveragePool": [
        S({"x": rand(1, 2, 6, 6)}, attrs={"kernel_shape": [2, 2], "strides": [2, 2]}),
        S({"x": rand(1, 2, 5, 5)}, attrs={"kernel_shape": [3, 3], "pads": [1, 1, 1, 1],
                                          "count_include_pad": 1}),
        S({"x": rand(1, 2, 5, 5)}, attrs={"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}),
    ],
    "GlobalAveragePool": [S({"x": rand(2, 3, 4, 5)})],
    "BatchNormalization": [
        S({"x": rand(4, 3, 2, 2), "scale": rand(3, low=0.5, high=1.5), "bias": rand(3),
           "mean": rand(3), "var": rand(3, low=0.5, high=1.5)},
          attrs={"training_mode": 1, "momentum": 0.9}, grad=["x", "scale", "bias"],
          num_outputs=3),
        S({"x": rand(5, 3), "scale": rand(3), "bias": rand(3), "mean": rand(3),
           "var": rand(3, low=0.5, high=1.5)}, attrs={"training_mode": 1},
          grad=["x", "scale", "bias"], num_outputs=3),
        # Inference mode (a BatchNorm in eval() inside a model being trained).
        S({"x": rand(4, 3, 2, 2), "scale": rand(3, low=0.5, high=1.5), "bias": rand(3),
           "mean": rand(3), "var": rand(3, low=0.5, high=1.5)},
          attrs={"epsilon": 1e-3}, grad=["x", "scale", "bias"]),
    ],
    "LayerNormalization": [
        S({"x": rand(2, 3, 4), "scale": rand(4, low=0.5, high=1.5), "bias": rand(4)},
          num_outputs=3),
        S({"x": rand(3, 2, 5), "scale": rand(2, 5, low=0.5, high=1.5)},
          attrs={"axis": 1, "epsilon": 1e-3}, num_outputs=3),
    ],
    # com.microsoft SimplifiedLayerNormalization: RMS normalisation (passes/rmsnorm_fusion.h).
    "SimplifiedLayerNormalization": [
        S({"x": rand(2, 3, 8), "scale": rand(8, low=0.5, high=1.5)}, attrs={"epsilon": 1e-6},
          domain="com.microsoft", num_outputs=2,
          expected=simplified_layernorm_reference(eps=1e-6)),
        S({"x": rand(3, 2, 5), "scale": rand(2, 5, low=0.5, high=1.5)},
          attrs={"axis": 1, "epsilon": 1e-3}, domain="com.microsoft", num_outputs=2,
          expected=simplified_layernorm_reference(axis=1, eps=1e-3)),
        S({"x": rand(4, 7), "scale": rand(7, low=0.5, high=1.5)}, domain="com.microsoft",
          expected=simplified_layernorm_reference()),
    ],
    # ai.ortmodule SiluMul (passes/silu_mul_fusion.h): Llama's silu(gate) * up; up broadcast
    # over rows, and gate broadcast (the gradient sums dG and dU back to each one's shape);
    # large gates on both sides, where sigmoid saturates.
    "SiluMul": [
        S({"g": rand(3, 4, 5, low=-4, high=4), "u": rand(3, 4, 5)}, domain="ai.ortmodule",
          expected=silu_mul_reference()),
        S({"g": rand(3, 6, low=-4, high=4), "u": rand(6)}, domain="ai.ortmodule",
          expected=silu_mul_reference()),
        S({"g": rand(1, 6, low=-4, high=4), "u": rand(2, 3, 6)}, domain="ai.ortmodule",
          expected=silu_mul_reference()),
        S({"g": np.array([-60.0, -20.0, -1.0, 0.0, 1.0, 20.0, 60.0]), "u": rand(7)},
          domain="ai.ortmodule", expected=silu_mul_reference()),
    ],
    # ai.ortmodule FusedRotary (passes/rotary_fusion.h): Llama's q * cos + rotate_half(q) * sin
    # with cos and sin shared by the heads; a split off the middle, one past the axis (the
    # whole axis rotates), the rotation along an inner axis with x broadcast over the batch;
    # the gradient form (mode 1, which has a gradient too), also of a dY of higher rank than
    # the reference whose dims a non-negative axis counts; the bare rotation (mode 2).
    "FusedRotary": [
        S({"x": rand(2, 3, 4, 6), "cos": rand(2, 1, 4, 6), "sin": rand(2, 1, 4, 6)},
          attrs={"axis": -1, "split": 3}, domain="ai.ortmodule",
          expected=fused_rotary_reference(-1, 3)),
        S({"x": rand(3, 5), "cos": rand(5), "sin": rand(3, 1)}, attrs={"axis": 1, "split": 2},
          domain="ai.ortmodule", expected=fused_rotary_reference(1, 2)),
        S({"x": rand(3, 4), "cos": rand(4), "sin": rand(4)}, attrs={"axis": -1, "split": 9},
          domain="ai.ortmodule", expected=fused_rotary_reference(-1, 9)),
        S({"x": rand(4, 3), "cos": rand(2, 4, 1), "sin": rand(2, 4, 3)},
          attrs={"axis": -2, "split": 1}, domain="ai.ortmodule",
          expected=fused_rotary_reference(-2, 1)),
        S({"x": rand(2, 4, 6), "cos": rand(4, 6), "sin": rand(4, 6)},
          attrs={"axis": -1, "split": 3, "mode": 1}, domain="ai.ortmodule",
          expected=fused_rotary_reference(-1, 3, mode=1)),
        S({"x": rand(3, 4, 6), "cos": rand(4, 6), "sin": rand(3, 1, 6), "ref": rand(4, 6)},
          attrs={"axis": 1, "split": 2, "mode": 1}, domain="ai.ortmodule",
          grad=["x", "cos", "sin"], expected=fused_rotary_reference(1, 2, mode=1)),
        S({"x": rand(2, 5)}, attrs={"axis": -1, "split": 2, "mode": 2}, domain="ai.ortmodule",
          grad=[], expected=fused_rotary_reference(-1, 2, mode=2)),
    ],
    "Dropout": [
        S({"x": rand(4, 5)}, constants={"ratio": np.asarray(0.5), "training": np.asarray(True)},
          order=["x", "ratio", "training"], reference=False, random=True),
        S({"x": rand(4, 5)}),
    ],
    "SoftmaxCrossEntropyLoss": [
        S({"scores": rand(3, 4)}, constants={"labels": i64([1, 0, 3])},
          order=["scores", "labels"], num_outputs=2),
        S({"scores": rand(2, 3, 4)}, constants={"labels": i64([[0, 2, 1, 1], [2, 2, 0, 1]])},
          attrs={"reduction": "sum", "ignore_index": 1}, order=["scores", "labels"]),
        S({"scores": rand(4, 3)}, constants={"labels": i64([0, 2, 1, 2]),
                                             "w": rand(3, low=0.5, high=1.5)},
          attrs={"reduction": "none"}, order=["scores", "labels", "w"]),
        S({"scores": rand(4, 3)}, constants={"labels": i64([0, 2, 1, 2]),
                                             "w": rand(3, low=0.5, high=1.5)},
          attrs={"ignore_index": 2}, order=["scores", "labels", "w"]),
    ],
    # A head's product and its loss in row blocks: a Linear's [V, K] weight over [B, T, K]
    # rows, 2 rows a block, a bias, one ignored row; a [K, V] weight, summed, 4 rows a block
    # (the last one short); per-row losses with ignore_index 1, one block.
    "FusedLinearCrossEntropy": [
        S({"x": rand(2, 3, 4), "w": rand(5, 4), "bias": rand(5)},
          constants={"labels": i64([[1, 0, 4], [3, -100, 2]])}, order=["x", "w", "labels", "bias"],
          attrs={"trans_w": 1, "reduction": "mean", "ignore_index": -100, "block_rows": 2},
          num_outputs=2, domain="ai.ortmodule",
          expected=linear_cross_entropy_reference(1, "mean", -100)),
        S({"x": rand(5, 3), "w": rand(3, 6)}, constants={"labels": i64([5, 0, 2, 2, 1])},
          order=["x", "w", "labels"], attrs={"trans_w": 0, "reduction": "sum", "block_rows": 4},
          domain="ai.ortmodule", expected=linear_cross_entropy_reference(0, "sum")),
        S({"x": rand(4, 3), "w": rand(6, 3), "bias": rand(6)},
          constants={"labels": i64([5, 1, 1, 0])}, order=["x", "w", "labels", "bias"],
          attrs={"reduction": "none", "ignore_index": 1}, domain="ai.ortmodule",
          expected=linear_cross_entropy_reference(1, "none", 1)),
    ],
    "NegativeLogLikelihoodLoss": [
        S({"input": rand(3, 4)}, constants={"target": i64([1, 0, 3])}, order=["input", "target"]),
        S({"input": rand(2, 3, 4)}, constants={"target": i64([[0, 2, 1, 1], [2, 2, 0, 1]])},
          attrs={"reduction": "none"}, order=["input", "target"]),
        S({"input": rand(4, 3)}, constants={"target": i64([0, 2, 1, 2]),
                                            "w": rand(3, low=0.5, high=1.5)},
          attrs={"ignore_index": 1}, order=["input", "target", "w"]),
    ],
    # ---- recurrent layers (torch's layout and gate order, one layer, one direction) ----
    # Every input; the steps reversed without biases or initial states; some inputs only.
    "LSTMTorch": [
        S({"x": rand(4, 2, 3), "w_ih": rand(20, 3), "w_hh": rand(20, 5), "b_ih": rand(20),
           "b_hh": rand(20), "h0": rand(2, 5), "c0": rand(2, 5)}, domain="ai.ortmodule",
          num_outputs=3, expected=rnn_layer_reference("lstm")),
        S({"x": rand(3, 2, 4), "w_ih": rand(12, 4), "w_hh": rand(12, 3)}, attrs={"reverse": 1},
          domain="ai.ortmodule", num_outputs=3, expected=rnn_layer_reference("lstm", 1)),
        S({"x": rand(3, 1, 2), "w_ih": rand(8, 2), "w_hh": rand(8, 2), "b_ih": rand(8),
           "h0": rand(1, 2)}, order=["x", "w_ih", "w_hh", "b_ih", "", "h0"],
          domain="ai.ortmodule", num_outputs=3, expected=rnn_layer_reference("lstm")),
    ],
    "GRUTorch": [
        S({"x": rand(4, 2, 3), "w_ih": rand(15, 3), "w_hh": rand(15, 5), "b_ih": rand(15),
           "b_hh": rand(15), "h0": rand(2, 5)}, domain="ai.ortmodule", num_outputs=2,
          expected=rnn_layer_reference("gru")),
        S({"x": rand(3, 2, 4), "w_ih": rand(9, 4), "w_hh": rand(9, 3)}, attrs={"reverse": 1},
          domain="ai.ortmodule", num_outputs=2, expected=rnn_layer_reference("gru", 1)),
        S({"x": rand(3, 2, 2), "w_ih": rand(6, 2), "w_hh": rand(6, 2), "b_hh": rand(6),
           "h0": rand(2, 2)}, order=["x", "w_ih", "w_hh", "", "b_hh", "h0"],
          domain="ai.ortmodule", num_outputs=2, expected=rnn_layer_reference("gru")),
    ],
    "RNNTorch": [
        S({"x": rand(4, 2, 3), "w_ih": rand(5, 3), "w_hh": rand(5, 5), "b_ih": rand(5),
           "b_hh": rand(5), "h0": rand(2, 5)}, domain="ai.ortmodule", num_outputs=2,
          expected=rnn_layer_reference("rnn")),
        S({"x": rand(4, 2, 3), "w_ih": rand(5, 3), "w_hh": rand(5, 5), "b_ih": rand(5),
           "h0": rand(2, 5)}, order=["x", "w_ih", "w_hh", "b_ih", "", "h0"],
          attrs={"reverse": 1, "nonlinearity": "relu"}, domain="ai.ortmodule", num_outputs=2,
          expected=rnn_layer_reference("rnn", 1, "relu")),
    ],
    # Bridge nodes that call an ATen op through the dispatcher; gradients from autograd.
    "TorchCall": [
        _aten("aten::sin", "", ["t"], {"x": rand(2, 3)}, lambda d: [np.sin(d["x"])]),
        # Broadcasting inputs: autograd's gradient of b is summed over the broadcast rows.
        _aten("aten::mul", "Tensor", ["t", "t"], {"a": rand(2, 3), "b": rand(3)},
              lambda d: [d["a"] * d["b"]]),
        _aten("aten::pow", "Tensor_Scalar", ["t", f"f:{(3.0).hex()}"],
              {"x": rand(2, 3)}, lambda d: [d["x"] ** 3]),
        _aten("aten::sum", "dim_IntList", ["t", "I:1", "b:1", "n"], {"x": rand(2, 3, 4)},
              lambda d: [d["x"].sum(1, keepdims=True)]),
        # Two outputs, one of them integer (no gradient).
        _aten("aten::max", "dim", ["t", "i:1", "b:0"], {"x": distinct(3, 4)},
              lambda d: [d["x"].max(1), d["x"].argmax(1)], num_outputs=2),
    ],
}
SAMPLES.update(DATA_SAMPLES)
SAMPLES.update(GAMMA_SAMPLES)
SAMPLES.update(BESSEL_SAMPLES)
SAMPLES.update(LINALG_SAMPLES)
SAMPLES.update(LINALG_SPECTRAL_SAMPLES)
SAMPLES.update(SCATTER_SAMPLES)
SAMPLES.update(SORT_SEARCH_SAMPLES)
SAMPLES.update(LINALG_LU_SAMPLES)


def _bn_torch(d: dict[str, np.ndarray], momentum: float = 0.9,
              eps: float = 1e-5) -> list[np.ndarray]:
    """PyTorch's training-mode batch norm: normalise with the biased batch variance, track
    the unbiased one (ONNX momentum: the weight of the old running value)."""
    x = d["x"]
    axes = tuple(i for i in range(x.ndim) if i != 1)
    shape = [1, -1] + [1] * (x.ndim - 2)
    mean, var = x.mean(axis=axes), x.var(axis=axes)
    momentum = float(np.float32(momentum))  # the attribute is a float32
    count = x.size // x.shape[1]
    y = ((x - mean.reshape(shape)) / np.sqrt(var.reshape(shape) + eps) * d["scale"].reshape(shape)
         + d["bias"].reshape(shape))
    return [y, momentum * d["mean"] + (1 - momentum) * mean,
            momentum * d["var"] + (1 - momentum) * var * count / (count - 1)]


def _softmax_2d(d: dict[str, np.ndarray], axis: int = 1, log: bool = False) -> list[np.ndarray]:
    """Softmax before opset 13: the input coerced to 2-D at axis, each row normalised."""
    x = d["x"]
    rows = x.reshape(int(np.prod(x.shape[:axis % x.ndim if axis < 0 else axis])), -1)
    e = np.exp(rows - rows.max(axis=1, keepdims=True))
    y = e / e.sum(axis=1, keepdims=True)
    return [(np.log(y) if log else y).reshape(x.shape)]


def _bn_infer(d: dict[str, np.ndarray], eps: float = 1e-5) -> list[np.ndarray]:
    shape = [1, -1] + [1] * (d["x"].ndim - 2)
    c = {k: d[k].reshape(shape) for k in ("scale", "bias", "mean", "var")}
    eps = float(np.float32(eps))  # the attribute is a float32
    return [(d["x"] - c["mean"]) / np.sqrt(c["var"] + eps) * c["scale"] + c["bias"]]


def _maxpool_column_major(d: dict[str, np.ndarray], kernel: list[int]) -> list[np.ndarray]:
    """MaxPool with storage_order=1 (no padding, stride 1): torch's per-plane row-major
    indices made absolute and column-major over the spatial dims."""
    import torch

    x = torch.from_numpy(d["x"])
    pool = torch.nn.functional.max_pool2d if x.dim() == 4 else torch.nn.functional.max_pool3d
    y, idx = pool(x, kernel, stride=1, return_indices=True)
    spatial = tuple(x.shape[2:])
    coords = np.unravel_index(idx.numpy(), spatial)
    column = np.ravel_multi_index(coords, spatial, order="F")
    planes = np.arange(x.shape[0] * x.shape[1]).reshape(x.shape[0], x.shape[1],
                                                        *([1] * len(spatial)))
    return [y.numpy(), column + planes * int(np.prod(spatial))]


def _extend(extra: dict[str, list[Sample]]) -> None:
    for op, samples in extra.items():
        SAMPLES.setdefault(op, []).extend(samples)


# Samples at the opsets of the op's older rows (and of semantics newer opsets added).
_extend({
    # Before opset 7: broadcasting only with broadcast=1 (B to A's shape, trailing dims).
    "Add": [S({"a": rand(2, 3), "b": rand(3)}, attrs={"broadcast": 1}, opset=6),
            S({"a": rand(2, 3), "b": rand(2, 3)}, opset=6)],
    "Sub": [S({"a": rand(2, 3, 4), "b": rand(3, 4)}, attrs={"broadcast": 1, "axis": 1}, opset=6)],
    "Mul": [S({"a": rand(2, 3), "b": rand(1, 3)}, attrs={"broadcast": 1}, opset=6)],
    "Div": [S({"a": rand(2, 3), "b": rand(3, low=0.5, high=1.5)}, attrs={"broadcast": 1},
              opset=6)],
    "Pow": [S({"a": rand(2, 3, low=0.5, high=1.5), "b": rand(3, low=1.0, high=2.0)},
              attrs={"broadcast": 1}, opset=6, expected=lambda d: [d["a"] ** d["b"]])],
    # Before opset 11 the bounds are attributes; min > max makes every output max.
    "Clip": [S({"x": np.array([-0.9, -0.6, -0.3, 0.1, 0.4, 0.8])},
               attrs={"min": -0.5, "max": 0.5}, opset=10),
             S({"x": np.array([-0.9, -0.2, 0.3])}, attrs={"min": 0.0}, opset=6),
             S({"x": np.array([-0.9, -0.2, 0.3, 1.5])}, constants={"lo": np.asarray(1.0),
                                                             "hi": np.asarray(0.5)},
               order=["x", "lo", "hi"])],
    # Before opset 10 starts, ends and axes are attributes.
    "Slice": [S({"x": rand(3, 4, 5)}, attrs={"starts": [1, -3], "ends": [3, 100], "axes": [0, 2]},
                opset=9),
              S({"x": rand(3, 4)}, attrs={"starts": [0, 1], "ends": [2, 3]}, opset=1)],
    # Before opset 11 pads and value are attributes.
    "Pad": [S({"x": rand(2, 3)}, attrs={"pads": [0, 1, 1, 2], "value": 1.5}, opset=10),
            S({"x": rand(3, 4)}, attrs={"pads": [1, 2, 1, 0], "mode": "reflect"}, opset=2)],
    # Before opset 13 the input is coerced to 2-D at axis (default 1).
    # (onnx.reference normalises along the axis alone at these opsets: numpy references.)
    "Softmax": [S({"x": rand(2, 3, 4)}, opset=11, expected=_softmax_2d),
                S({"x": rand(2, 3, 4)}, attrs={"axis": 2}, opset=11,
                  expected=lambda d: _softmax_2d(d, 2)),
                S({"x": rand(2, 3, 4)}, attrs={"axis": 0}, opset=1,
                  expected=lambda d: _softmax_2d(d, 0))],
    "LogSoftmax": [S({"x": rand(2, 3, 4)}, opset=12, expected=lambda d: _softmax_2d(d, log=True)),
                   S({"x": rand(3, 5)}, attrs={"axis": -1}, opset=11,
                     expected=lambda d: _softmax_2d(d, -1, log=True))],
    # Before opset 14: inference form (Y only).
    "BatchNormalization": [
        S({"x": rand(4, 3, 2, 2), "scale": rand(3, low=0.5, high=1.5), "bias": rand(3),
           "mean": rand(3), "var": rand(3, low=0.5, high=1.5)}, attrs={"epsilon": 1e-3},
          grad=["x", "scale", "bias"], opset=9, expected=lambda d: _bn_infer(d, 1e-3)),
        S({"x": rand(4, 3, 5), "scale": rand(3), "bias": rand(3), "mean": rand(3),
           "var": rand(3, low=0.5, high=1.5)}, attrs={"is_test": 1, "spatial": 1},
          grad=["x", "scale", "bias"], opset=6, expected=_bn_infer),
        # Training mode follows ONNX: running_var tracks the biased batch variance.
        S({"x": rand(4, 3, 2, 2), "scale": rand(3, low=0.5, high=1.5), "bias": rand(3),
           "mean": rand(3), "var": rand(3, low=0.5, high=1.5)},
          attrs={"training_mode": 1, "momentum": 0.8}, grad=[], num_outputs=3,
          reference_rtol=1e-6),
    ],
    # PyTorch's batch norm (the capture emits it): running_var tracks the unbiased variance.
    "BatchNormTorch": [
        S({"x": rand(4, 3, 2, 2), "scale": rand(3, low=0.5, high=1.5), "bias": rand(3),
           "mean": rand(3), "var": rand(3, low=0.5, high=1.5)},
          attrs={"training_mode": 1, "momentum": 0.9}, grad=[], num_outputs=3,
          domain="ai.ortmodule", expected=_bn_torch),
        S({"x": rand(6, 2), "scale": rand(2, low=0.5, high=1.5), "bias": rand(2),
           "mean": rand(2), "var": rand(2, low=0.5, high=1.5)},
          attrs={"training_mode": 1, "momentum": 0.7}, grad=["x", "scale", "bias"],
          domain="ai.ortmodule", expected=lambda d: _bn_torch(d, momentum=0.7)[:1]),
    ],
    # Before opset 12 Dropout runs as inference (ratio an attribute; is_test=1 before 7).
    "Dropout": [S({"x": rand(4, 5)}, attrs={"is_test": 1, "ratio": 0.3}, opset=6,
                  expected=lambda d: [d["x"]]),
                S({"x": rand(4, 5)}, attrs={"ratio": 0.3}, opset=9),
                S({"x": rand(4, 5)}, attrs={"ratio": 0.3}, num_outputs=2, opset=11)],
    # fmod=0 on floats (opset 28): floored quotient, the sign of the divisor.
    "Mod": [S({"a": np.array([2.3, -2.7, 1.45, 5.1, -3.0]),
               "b": np.array([1.0, 1.2, -0.6, -1.4, 1.6])}, opset=28, grad=["a"])],
    # 3-D windows, dilations, column-major indices (storage_order=1).
    "MaxPool": [
        S({"x": distinct(1, 2, 4, 5, 4)}, attrs={"kernel_shape": [2, 3, 2], "strides": [2, 1, 2],
                                                "pads": [1, 0, 1, 0, 1, 0]}, num_outputs=2),
        S({"x": distinct(1, 1, 5, 5, 5)}, attrs={"kernel_shape": [2, 2, 2],
                                                "dilations": [2, 1, 2], "ceil_mode": 1}),
        # (onnx.reference miscounts column-major indices: torch's, converted, are the reference.)
        S({"x": distinct(2, 2, 5, 4)}, attrs={"kernel_shape": [2, 2], "storage_order": 1},
          num_outputs=2, expected=lambda d: _maxpool_column_major(d, [2, 2])),
        S({"x": distinct(1, 2, 3, 4, 3)}, attrs={"kernel_shape": [2, 2, 2], "storage_order": 1},
          num_outputs=2, expected=lambda d: _maxpool_column_major(d, [2, 2, 2])),
        S({"x": distinct(1, 2, 7, 7)}, attrs={"kernel_shape": [3, 3], "dilations": [2, 2],
                                             "pads": [1, 1, 1, 1]}),
        S({"x": distinct(1, 2, 6, 6)}, attrs={"kernel_shape": [2, 2]}, opset=1),
    ],
    "AveragePool": [
        S({"x": rand(1, 2, 4, 5, 4)}, attrs={"kernel_shape": [2, 3, 2], "strides": [2, 1, 2],
                                            "pads": [1, 0, 1, 0, 1, 0]}),
        S({"x": rand(1, 2, 5, 5, 5)}, attrs={"kernel_shape": [3, 2, 3], "pads": [1, 1, 1, 1, 0, 1],
                                            "count_include_pad": 1}),
        S({"x": rand(1, 1, 6, 6, 6)}, attrs={"kernel_shape": [2, 2, 2], "dilations": [2, 2, 2],
                                            "strides": [2, 2, 2], "ceil_mode": 1}, opset=19),
        S({"x": rand(1, 2, 6, 6)}, attrs={"kernel_shape": [2, 2]}, opset=6),
    ],
})
def _torch_unary(fn: str) -> object:
    """The reference of an ai.ortmodule op that is a torch function of x (float64)."""
    def reference(d: dict[str, np.ndarray]) -> list[np.ndarray]:
        import torch

        f = torch
        for part in fn.split("."):
            f = getattr(f, part)
        return [f(torch.from_numpy(d["x"])).numpy()]
    return reference


def _atan2(d: dict[str, np.ndarray]) -> list[np.ndarray]:
    return [np.arctan2(d["a"], d["b"])]


# ---- activations, rounding and transcendental functions (activation_family_ops.cpp,
# transcendental_ops.cpp); values stay away from the kinks of the piecewise ones ----
_KINKS_3 = np.array([-4.2, -3.1, -2.9, -1.3, -0.2, 0.4, 1.9, 2.9, 3.1, 5.0])
_extend({
    "Elu": [S({"x": away_from_zero(3, 4)}, attrs={"alpha": 0.7}), S({"x": away_from_zero(5)})],
    "Selu": [S({"x": away_from_zero(3, 4)}),
             S({"x": away_from_zero(5)}, attrs={"alpha": 1.5, "gamma": 2.0})],
    "Celu": [S({"x": away_from_zero(3, 4)}, attrs={"alpha": 0.5}), S({"x": away_from_zero(5)})],
    "ScaledElu": [S({"x": away_from_zero(3, 4)},
                    attrs={"alpha": 0.5, "scale": 2.0, "input_scale": 1.5}, domain="ai.ortmodule",
                    expected=lambda d: [np.where(d["x"] > 0, 2.0 * d["x"],
                                                 np.expm1(1.5 * d["x"]))])],
    "HardSigmoid": [S({"x": np.array([-3.9, -2.7, -2.2, -1.0, 0.3, 1.7, 2.4, 2.8, 3.5])}),
                    S({"x": _KINKS_3}, attrs={"alpha": 1 / 6, "beta": 0.5})],
    # (onnx.reference multiplies by alpha = float32(1/6); the engine divides by 6, as torch.)
    "HardSwish": [S({"x": _KINKS_3}, reference_rtol=1e-6)],
    "Mish": [S({"x": rand(3, 4, low=-4, high=4)}, opset=18),
             S({"x": np.array([-30.0, -12.0, 0.0, 15.0, 30.0])}, opset=18)],
    # Ties round to even (no finite differences across the steps).
    "Round": [S({"x": np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 0.4, -0.6, 3.7, -0.0])},
                grad=[]),
              S({"x": np.array([-2.3, -0.7, 0.2, 1.1, 3.7])})],
    "Tan": [S({"x": rand(3, 4, low=-1.2, high=1.2)})],
    "Asin": [S({"x": rand(3, 4, low=-0.9, high=0.9)})],
    "Acos": [S({"x": rand(3, 4, low=-0.9, high=0.9)})],
    "Atan": [S({"x": rand(3, 4, low=-3, high=3)})],
    "Sinh": [S({"x": rand(3, 4, low=-2, high=2)})],
    "Cosh": [S({"x": rand(3, 4, low=-2, high=2)})],
    "Asinh": [S({"x": rand(3, 4, low=-3, high=3)})],
    "Acosh": [S({"x": rand(3, 4, low=1.2, high=3)})],
    "Atanh": [S({"x": rand(3, 4, low=-0.9, high=0.9)})],
    "HardTanh": [S({"x": np.array([-1.7, -0.9, -0.3, 0.2, 0.8, 1.4])}, attrs={"min": -1.0, "max": 1.0},
                   domain="ai.ortmodule", expected=lambda d: [np.clip(d["x"], -1.0, 1.0)]),
                 S({"x": np.array([-1.0, 0.5, 3.0, 5.9, 6.5])}, attrs={"min": 0.0, "max": 6.0},
                   domain="ai.ortmodule", expected=lambda d: [np.clip(d["x"], 0.0, 6.0)])],
    "Atan2": [S({"a": rand(2, 3), "b": rand(3)}, domain="ai.ortmodule", expected=_atan2),
              S({"a": away_from_zero(2, 1, 3), "b": away_from_zero(4, 1)}, domain="ai.ortmodule",
                expected=_atan2)],
    "Erfcx": [S({"x": rand(3, 4, low=-3, high=3)}, domain="ai.ortmodule",
                expected=_torch_unary("special.erfcx")),
              S({"x": np.array([-8.0, -1.5, 5.0, 25.0, 26.5, 40.0, 1e3])},
                domain="ai.ortmodule", expected=_torch_unary("special.erfcx")),
              S({"x": np.array([-26.5, -30.0, -np.inf, 1e10, 1e300, np.inf, np.nan])}, grad=[],
                domain="ai.ortmodule", expected=_torch_unary("special.erfcx"))],
    "LogNdtr": [S({"x": rand(3, 4, low=-3, high=3)}, domain="ai.ortmodule",
                  expected=_torch_unary("special.log_ndtr")),
                S({"x": np.array([-40.0, -20.0, -6.5, -1.0, 0.5, 6.0, 9.0, 40.0])},
                  domain="ai.ortmodule", expected=_torch_unary("special.log_ndtr"))],
})


# ---- torch.special's orthogonal polynomials (polynomial_ops.cpp): x inside, at and beyond
# the interval's ends, n negative, fractional, below and above the degrees where torch takes
# closed forms, broadcast; no gradient ----
_POLYNOMIAL_KINDS = ("chebyshev_t", "chebyshev_u", "chebyshev_v", "chebyshev_w",
                     "shifted_chebyshev_t", "shifted_chebyshev_u", "shifted_chebyshev_v",
                     "shifted_chebyshev_w", "hermite_h", "hermite_he", "laguerre_l",
                     "legendre_p")


def _torch_polynomial(kind: str) -> object:
    """torch.special.<kind>_polynomial_<letter>(x, n) in the inputs' dtype."""
    def reference(d: dict[str, np.ndarray]) -> list[np.ndarray]:
        import torch

        family, letter = kind.rsplit("_", 1)
        f = getattr(torch.special, f"{family}_polynomial_{letter}")
        return [f(torch.from_numpy(d["x"]), torch.from_numpy(d["n"])).numpy()]
    return reference


_POLYNOMIAL_X = np.array([-2.5, -1.0, -0.7, -1e-9, 0.0, 0.3, 0.5, 0.999, 1.0, 1.5, 4.0,
                          np.inf])[:, None]
_POLYNOMIAL_N = np.array([-2.0, -0.5, 0.0, 1.0, 2.0, 3.9, 5.0, 7.0, 9.0, 16.0, 33.0, np.nan])
_extend({"OrthogonalPolynomial": [
    S({"x": _POLYNOMIAL_X, "n": _POLYNOMIAL_N}, attrs={"kind": kind}, domain="ai.ortmodule",
      expected=_torch_polynomial(kind), name=kind) for kind in _POLYNOMIAL_KINDS]})


# ---- floating-point representation (float_parts_ops.cpp): signed zeros, subnormals,
# infinities and NaN; gradients away from a == b and from powers of two ----
def _nextafter(d: dict[str, np.ndarray]) -> list[np.ndarray]:
    return [np.nextafter(d["a"], d["b"])]


def _frexp(d: dict[str, np.ndarray]) -> list[np.ndarray]:
    mantissa, exponent = np.frexp(d["x"])
    return [mantissa, np.where(np.isfinite(d["x"]), exponent, 0).astype(np.int32)]


_extend({
    "NextAfter": [S({"a": rand(2, 3), "b": rand(3)}, domain="ai.ortmodule", expected=_nextafter),
                  S({"a": np.array([0.0, 0.0, -0.0, 1.0, np.nan, np.inf, 5e-324, 2.0]),
                     "b": np.array([1.0, -0.0, 0.0, 1.0, 1.0, 0.0, 0.0, np.nan])}, grad=[],
                    domain="ai.ortmodule", expected=_nextafter)],
    "Frexp": [S({"x": rand(3, 4, low=-3, high=3)}, domain="ai.ortmodule", num_outputs=2,
                expected=_frexp),
              S({"x": np.array([0.0, -0.0, 1.0, 0.5, -0.75, 5e-324, 1e300, np.inf, -np.inf,
                                np.nan])}, grad=[], domain="ai.ortmodule", num_outputs=2,
                expected=_frexp)],
})


# ---- Resampling and per-sample normalization: pooling windows past the padded input ----


def _avgpool_torch(d: dict[str, np.ndarray], kernel: list[int], stride: list[int],
                   pad: list[int], ceil_mode: bool, count_include_pad: bool,
                   divisor: int | None) -> list[np.ndarray]:
    """torch's avg_pool1d/2d/3d (the reference of AveragePoolTorch's divisor_override)."""
    import torch

    x = torch.from_numpy(d["x"])
    pool = {3: torch.nn.functional.avg_pool1d, 4: torch.nn.functional.avg_pool2d,
            5: torch.nn.functional.avg_pool3d}[x.dim()]
    extra = {} if x.dim() == 3 else {"divisor_override": divisor}
    return [pool(x, kernel, stride, pad, ceil_mode, count_include_pad, **extra).numpy()]


def _avgpool_torch_sample(shape: tuple[int, ...], kernel: list[int], stride: list[int],
                          pad: list[int], ceil_mode: bool, count_include_pad: bool,
                          divisor: int) -> Sample:
    attrs = {"kernel_shape": kernel, "strides": stride, "pads": pad + pad,
             "ceil_mode": int(ceil_mode), "count_include_pad": int(count_include_pad),
             "divisor_override": divisor}
    return S({"x": rand(*shape)}, attrs=attrs, domain="ai.ortmodule",
             expected=lambda d: _avgpool_torch(d, kernel, stride, pad, ceil_mode,
                                               count_include_pad, divisor))


_extend({
    # ceil_mode windows that run past the padded input divide by their clipped size (as
    # torch's avg_pool does), 1-D, 2-D and 3-D; a kernel larger than the input.
    "AveragePool": [
        S({"x": rand(1, 2, 5, 5)}, attrs={"kernel_shape": [2, 2], "strides": [2, 2],
                                          "ceil_mode": 1, "count_include_pad": 1}),
        S({"x": rand(2, 2, 6, 7)}, attrs={"kernel_shape": [3, 3], "strides": [2, 2],
                                          "pads": [1, 1, 1, 1], "ceil_mode": 1,
                                          "count_include_pad": 1}),
        S({"x": rand(1, 2, 3, 3)}, attrs={"kernel_shape": [4, 4], "strides": [4, 4],
                                          "ceil_mode": 1, "count_include_pad": 1}),
        S({"x": rand(2, 3, 7)}, attrs={"kernel_shape": [3], "strides": [2], "pads": [1, 1],
                                       "ceil_mode": 1, "count_include_pad": 1}),
        S({"x": rand(1, 2, 5, 4, 5)}, attrs={"kernel_shape": [2, 3, 2], "strides": [2, 2, 2],
                                             "pads": [0, 1, 1, 0, 1, 1], "ceil_mode": 1,
                                             "count_include_pad": 1}),
    ],
    "AveragePoolTorch": [
        _avgpool_torch_sample((1, 2, 5, 5), [2, 2], [2, 2], [0, 0], True, True, 3),
        _avgpool_torch_sample((2, 2, 6, 7), [3, 3], [2, 2], [1, 1], True, False, 5),
        _avgpool_torch_sample((1, 2, 5, 4, 5), [2, 3, 2], [2, 2, 2], [1, 1, 0], False, True, 7),
    ],
})
# ---- Resampling and per-sample normalization: Resize, ResizeTorch ----


def _resize(x: np.ndarray, *, scales: list[float] | None = None,
            sizes: list[int] | None = None, opset: int = 17, **attrs: object) -> Sample:
    """ONNX Resize of x by scales (float32) or sizes (int64), as initializers."""
    constants: dict[str, np.ndarray] = {}
    order = ["x", "", "", ""]
    if opset < 13:  # roi and scales are required inputs there (empty when unused)
        constants["roi"] = np.zeros(0, np.float32)
        order[1] = "roi"
        if scales is None:
            constants["scales"] = np.zeros(0, np.float32)
            order[2] = "scales"
    if scales is not None:
        constants["scales"] = np.asarray(scales, np.float32)
        order[2] = "scales"
    if sizes is not None:
        constants["sizes"] = i64(sizes)
        order[3] = "sizes"
    while order[-1] == "":
        order.pop()
    # onnx.reference's Resize computes the cubic weights in float32 (its cubic_coeff_a is a
    # numpy float32): the cubic samples run its interpolation with the coefficient in float64.
    expected = _resize_cubic_reference(attrs) if attrs.get("mode") == "cubic" else None
    return S({"x": x}, attrs=dict(attrs), constants=constants, order=order, grad=["x"],
             opset=opset, expected=expected)


def _resize_cubic_reference(attrs: dict[str, object]
                            ) -> Callable[[dict[str, np.ndarray]], list[np.ndarray]]:
    from onnx.reference.ops import op_resize

    a = float(attrs.get("cubic_coeff_a", -0.75))  # type: ignore[arg-type]

    def reference(d: dict[str, np.ndarray]) -> list[np.ndarray]:
        y = op_resize._interpolate_nd(
            d["x"], lambda ratio, scale: op_resize._cubic_coeffs(ratio, scale, A=a),
            output_size=list(d["sizes"]) if "sizes" in d else None,
            scale_factors=list(d["scales"].astype(np.float64)) if "sizes" not in d else None,
            exclude_outside=bool(attrs.get("exclude_outside", 0)),
            coordinate_transformation_mode=str(attrs.get("coordinate_transformation_mode",
                                                         "half_pixel")))
        return [y.astype(d["x"].dtype)]
    return reference


def _resize_torch_reference(d: dict[str, np.ndarray], mode: str,
                            align_corners: bool) -> list[np.ndarray]:
    """PyTorch's upsample_* / _upsample_nearest_exact* (the .default overloads, which take
    the output size and the scale factors torch was given)."""
    import torch

    aten = torch.ops.aten
    x = torch.from_numpy(d["x"])
    sizes = [int(v) for v in d["sizes"]]
    factors = [None if v <= 0 else float(v) for v in d["scales"]] if "scales" in d \
        else [None] * len(sizes)
    rank = len(sizes)
    if mode in ("nearest", "nearest_exact"):
        prefix = "upsample_nearest" if mode == "nearest" else "_upsample_nearest_exact"
        fn = getattr(aten, f"{prefix}{rank}d").default
        return [fn(x, sizes, *factors).numpy()]
    name = {("linear", 1): "upsample_linear1d", ("linear", 2): "upsample_bilinear2d",
            ("linear", 3): "upsample_trilinear3d", ("cubic", 2): "upsample_bicubic2d"}[
                (mode, rank)]
    return [getattr(aten, name).default(x, sizes, align_corners, *factors).numpy()]


def _resize_torch(x: np.ndarray, mode: str, sizes: list[int],
                  scales: list[float] | None = None, align_corners: bool = False) -> Sample:
    constants = {"sizes": i64(sizes)}
    order = ["x", "sizes"]
    if scales is not None:
        constants["scales"] = np.asarray(scales, np.float64)
        order.append("scales")
    return S({"x": x}, attrs={"mode": mode, "align_corners": int(align_corners)},
             constants=constants, order=order, grad=["x"], domain="ai.ortmodule",
             expected=lambda d: _resize_torch_reference(d, mode, align_corners))


_extend({
    "Resize": [
        # nearest: every nearest_mode, upsampling and downsampling, scales and sizes
        _resize(rand(1, 2, 3, 2), scales=[1, 1, 2, 3]),
        _resize(rand(1, 2, 5, 4), scales=[1, 1, 0.6, 1.7], mode="nearest",
                coordinate_transformation_mode="asymmetric", nearest_mode="floor"),
        _resize(rand(1, 2, 3, 4), sizes=[1, 2, 5, 7], mode="nearest",
                coordinate_transformation_mode="align_corners", nearest_mode="round_prefer_ceil"),
        _resize(rand(2, 1, 4, 3), sizes=[2, 1, 7, 5], mode="nearest",
                coordinate_transformation_mode="pytorch_half_pixel", nearest_mode="ceil"),
        # linear, 1-D, 2-D and 3-D spatial
        _resize(rand(1, 2, 3, 4), scales=[1, 1, 2, 2], mode="linear"),
        _resize(rand(2, 2, 4, 3), sizes=[2, 2, 5, 7], mode="linear",
                coordinate_transformation_mode="align_corners"),
        _resize(rand(2, 3, 5), sizes=[2, 3, 8], mode="linear",
                coordinate_transformation_mode="pytorch_half_pixel"),
        _resize(rand(1, 2, 3, 4, 4), scales=[1, 1, 1.5, 2, 0.5], mode="linear",
                coordinate_transformation_mode="asymmetric"),
        # cubic: coefficient, exclude_outside, downsampling
        _resize(rand(1, 2, 4, 4), scales=[1, 1, 2, 1.5], mode="cubic"),
        _resize(rand(1, 1, 5, 4), sizes=[1, 1, 7, 6], mode="cubic", exclude_outside=1,
                coordinate_transformation_mode="align_corners"),
        _resize(rand(1, 2, 6, 5), sizes=[1, 2, 3, 4], mode="cubic", cubic_coeff_a=-0.5,
                coordinate_transformation_mode="asymmetric"),
        _resize(rand(1, 2, 4, 5), scales=[1, 1, 1.75, 0.8], mode="cubic", exclude_outside=1),
        # opset 11 (roi and empty scales before sizes), 18 (axes, keep_aspect_ratio_policy),
        # 19 (half_pixel_symmetric)
        _resize(rand(1, 2, 3, 3), sizes=[1, 2, 6, 4], opset=11, mode="linear"),
        _resize(rand(1, 2, 3, 4), scales=[2.5, 1.5], opset=18, mode="linear", axes=[2, 3]),
        _resize(rand(1, 2, 4, 6), sizes=[6, 6], opset=18, mode="nearest", axes=[2, 3],
                keep_aspect_ratio_policy="not_larger"),
        _resize(rand(1, 2, 4, 5), scales=[1, 1, 1.6, 0.7], opset=19, mode="linear",
                coordinate_transformation_mode="half_pixel_symmetric"),
    ],
    "ResizeTorch": [
        _resize_torch(rand(1, 2, 3, 4), "nearest", [6, 8], [2.0, 2.0]),
        _resize_torch(rand(2, 2, 5, 4), "nearest", [7, 4], [1.5, 1.1]),
        _resize_torch(rand(1, 3, 7), "nearest", [3]),
        _resize_torch(rand(1, 2, 2, 3, 3), "nearest", [3, 4, 5]),
        _resize_torch(rand(1, 2, 5, 3), "nearest_exact", [8, 4], [1.7, 1.5]),
        _resize_torch(rand(1, 2, 6), "nearest_exact", [4]),
        _resize_torch(rand(1, 2, 3, 4), "linear", [5, 7]),
        _resize_torch(rand(1, 2, 3, 4), "linear", [6, 6], [2.0, 1.5]),
        _resize_torch(rand(2, 1, 4, 5), "linear", [7, 3], align_corners=True),
        _resize_torch(rand(1, 2, 5), "linear", [9], [1.9]),
        _resize_torch(rand(1, 1, 2, 3, 4), "linear", [3, 5, 6], align_corners=True),
        _resize_torch(rand(1, 2, 4, 4), "cubic", [7, 9]),
        _resize_torch(rand(1, 2, 4, 5), "cubic", [6, 5], [1.5, 1.0]),
        _resize_torch(rand(1, 1, 5, 4), "cubic", [3, 7], align_corners=True),
    ],
})

# ---- Resampling and per-sample normalization: InstanceNormalization, GroupNorm ----


def _group_norm_torch(d: dict[str, np.ndarray], groups: int, eps: float,
                      outputs: int) -> list[np.ndarray]:
    """torch's native_group_norm: Y, mean and rstd ([N, G]); groups 0 is one per channel."""
    import torch

    x = torch.from_numpy(d["x"])
    n, c = x.shape[:2]
    g = groups or c
    y, mean, rstd = torch.ops.aten.native_group_norm(
        x, torch.from_numpy(d["scale"]), torch.from_numpy(d["bias"]), n, c,
        x[0, 0].numel(), g, eps)
    return [t.numpy() for t in (y, mean, rstd)][:outputs]


def _group_norm_sample(shape: tuple[int, ...], groups: int, eps: float = 1e-5,
                       outputs: int = 1) -> Sample:
    c = shape[1]
    return S({"x": rand(*shape), "scale": rand(c, low=0.5, high=1.5), "bias": rand(c)},
             attrs={"num_groups": groups, "epsilon": eps}, domain="ai.ortmodule",
             num_outputs=outputs, expected=lambda d: _group_norm_torch(d, groups, eps, outputs))


_extend({
    "InstanceNormalization": [
        S({"x": rand(2, 3, 4, 5), "scale": rand(3, low=0.5, high=1.5), "bias": rand(3)}),
        S({"x": rand(3, 2, 7), "scale": rand(2, low=0.5, high=1.5), "bias": rand(2)},
          attrs={"epsilon": 1e-3}),
        S({"x": rand(1, 2, 2, 3, 3), "scale": rand(2, low=0.5, high=1.5), "bias": rand(2)}),
    ],
    "GroupNorm": [
        _group_norm_sample((2, 6, 3, 4), 3),
        _group_norm_sample((3, 4, 5), 2, eps=2.0 ** -10, outputs=3),  # a float32 epsilon
        _group_norm_sample((2, 4, 2, 2, 3), 1),
        _group_norm_sample((2, 3, 4), 0, outputs=3),
        _group_norm_sample((4, 5), 5),
    ],
})



def _logsumexp_reference(axes: tuple[int, ...]) -> object:
    """ReduceLogSumExp computed max-shifted (onnx.reference's exp overflows on large inputs)."""
    def reference(d: dict[str, np.ndarray]) -> list[np.ndarray]:
        m = np.max(d["x"], axis=axes, keepdims=True)
        return [np.log(np.sum(np.exp(d["x"] - m), axis=axes, keepdims=True)) + m]
    return reference


# ---- accumulating reductions and TopK ----
SAMPLES.update({
    "ReduceProd": [
        S({"x": rand(2, 3, 4)}, constants={"axes": i64([1])}, attrs={"keepdims": 0},
          order=["x", "axes"], opset=18),
        # Slices with no, one and two zeros: the product is linear in each element, so central
        # differences are exact at the zeros too.
        S({"x": np.array([[0.5, 0.0, 0.7, -1.2], [0.0, 0.0, 0.3, 0.8], [0.4, -0.6, 0.9, 1.1]])},
          constants={"axes": i64([-1])}, order=["x", "axes"], opset=18),
        S({"x": np.array([[0.5, 0.0], [0.0, 0.0], [0.4, -0.6]])}, opset=18),  # reduce all
        S({"x": rand(2, 3, 4)}, attrs={"axes": [0, 2]}, opset=13),  # attribute form
        S({"x": i64([[2, -3, 1], [4, 5, 0]])}, constants={"axes": i64([0])},
          order=["x", "axes"], opset=18),
    ],
    "ReduceL1": [
        S({"x": away_from_zero(2, 3, 4)}, constants={"axes": i64([-1])}, order=["x", "axes"],
          opset=18),
        S({"x": away_from_zero(2, 3, 4)}, attrs={"axes": [0, 2], "keepdims": 0}, opset=13),
        # A zero element: sign(0) = 0, as the central difference of |x| there.
        S({"x": np.array([[0.0, -0.5, 0.3], [0.0, 0.0, 0.0]])}, opset=18),
    ],
    "ReduceL2": [
        S({"x": rand(2, 3, 4)}, constants={"axes": i64([1])}, order=["x", "axes"], opset=18),
        S({"x": rand(2, 3, 4)}, attrs={"axes": [0, 2], "keepdims": 0}, opset=13),
        # A zero slice: gradient 0 (torch's), which central differences also give.
        S({"x": np.array([[0.0, 0.0, 0.0], [0.3, -0.4, 0.5]])}, constants={"axes": i64([1])},
          attrs={"keepdims": 0}, order=["x", "axes"], opset=18),
    ],
    "ReduceLogSumExp": [
        S({"x": rand(2, 3, 4, low=-3.0, high=3.0)}, constants={"axes": i64([0, 2])},
          order=["x", "axes"], opset=18),
        S({"x": rand(2, 3, 4)}, attrs={"axes": [1], "keepdims": 0}, opset=13),
        S({"x": rand(3, 4)}, opset=18),
        # Large values: the max shift keeps exp finite.
        S({"x": np.array([[1000.0, 1001.0, 999.5], [-1000.0, -1002.0, -1001.0]])},
          constants={"axes": i64([1])}, order=["x", "axes"], opset=18,
          expected=_logsumexp_reference((1,))),
    ],
    "TopK": [
        S({"x": distinct(3, 5)}, constants={"k": i64([2])}, order=["x", "k"], num_outputs=2),
        S({"x": distinct(4, 3)}, constants={"k": i64([2])}, order=["x", "k"],
          attrs={"axis": 0, "largest": 0}, num_outputs=2),
        S({"x": distinct(2, 4, 3)}, constants={"k": i64([4])}, order=["x", "k"],
          attrs={"axis": 1, "sorted": 1}, num_outputs=2),
        S({"x": i64([[3, 9, 1, 7], [4, -2, 8, 0]])}, constants={"k": i64([3])},
          order=["x", "k"], attrs={"largest": 0}, num_outputs=2),
    ],
})

for _op, _extra in DTYPE_SAMPLES.items():
    SAMPLES.setdefault(_op, []).extend(_extra)
