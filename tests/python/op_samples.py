"""Sample inputs for every op in the op table (like PyTorch's OpInfo).

test_ops.py generates, from ortmodule._C.op_table(), a forward test (against the
ONNX reference implementation) and a finite-difference gradient check (double
precision, the row's tolerances) for every sample of every exporter-facing op.
A row without samples fails the coverage test, so adding an op means adding
samples here.
"""

from __future__ import annotations

import numpy as np

from tests.python.op_samples_data import DATA_SAMPLES
from tests.python.op_samples_dtypes import DTYPE_SAMPLES
from tests.python.sample_utils import (
    Sample,
    away_from_zero,
    distinct,
    fused_attention_reference,
    fused_matmul_reference,
    i64,
    rand,
    rnn_layer_reference,
    scaled_masked_softmax_reference,
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
