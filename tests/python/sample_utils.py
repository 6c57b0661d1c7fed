"""Sample-making helpers shared by the op sample tables."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

rng = np.random.default_rng(0)


def rand(*shape: int, low: float = -1.0, high: float = 1.0) -> np.ndarray:
    return rng.uniform(low, high, size=shape).astype(np.float64)


def away_from_zero(*shape: int) -> np.ndarray:
    """Values with |x| in [0.2, 1]: keeps kinks (Relu) out of finite differences."""
    return rand(*shape, low=0.2, high=1.0) * rng.choice([-1.0, 1.0], size=shape)


def distinct(*shape: int) -> np.ndarray:
    """A random permutation of well separated values: no ties for max pooling."""
    n = int(np.prod(shape))
    return (rng.permutation(n).astype(np.float64) / n).reshape(shape)


def i64(values: Any) -> np.ndarray:
    return np.asarray(values, dtype=np.int64)


@dataclass
class Sample:
    inputs: dict[str, np.ndarray]          # graph inputs, in order
    attrs: dict[str, Any] = field(default_factory=dict)
    constants: dict[str, np.ndarray] = field(default_factory=dict)  # initializers
    order: list[str] | None = None        # node input order (names; "" = omitted)
    num_outputs: int = 1
    grad: list[str] | None = None          # inputs to differentiate (default: all float inputs)
    reference: bool = True                 # compare forward with onnx.reference
    random: bool = False                   # draws random numbers: reseed per call
    reference_rtol: float = 1e-10          # looser where onnx.reference computes in float32
    opset: int = 17                        # ONNX opset of the single-op model
    domain: str = ""                       # the op's domain ("ai.ortmodule": engine's own)
    # numpy reference for ops onnx.reference lacks (the engine's own ops): inputs and
    # constants by name -> outputs
    expected: Callable[[dict[str, np.ndarray]], list[np.ndarray]] | None = None
    name: str = ""




def fused_matmul_reference(trans_a: int = 0, trans_b: int = 0,
                           alpha: float = 1.0) -> Callable[[dict[str, np.ndarray]], list[np.ndarray]]:
    """com.microsoft FusedMatMul: alpha * op(a) @ op(b), op swapping the last two dims when
    the flag is set (numpy's matmul broadcasting otherwise)."""
    def reference(d: dict[str, np.ndarray]) -> list[np.ndarray]:
        a = np.swapaxes(d["a"], -1, -2) if trans_a else d["a"]
        b = np.swapaxes(d["b"], -1, -2) if trans_b else d["b"]
        y = np.matmul(a, b)
        return [(y * y.dtype.type(alpha)).astype(d["a"].dtype)]
    return reference


def scaled_masked_softmax_reference(
        scale: float) -> Callable[[dict[str, np.ndarray]], list[np.ndarray]]:
    """ai.ortmodule ScaledMaskedSoftmax: softmax(scale * x + mask) along the last axis, x and
    the optional mask broadcasting against each other; a boolean mask selects scale * x where
    it is true and the fill elsewhere."""
    def reference(d: dict[str, np.ndarray]) -> list[np.ndarray]:
        x = d["x"]
        mask = d.get("mask")
        if mask is not None and mask.dtype == np.bool_:
            z = np.where(mask, x * x.dtype.type(scale), d["fill"].astype(x.dtype))
        else:
            z = x * x.dtype.type(scale) + (x.dtype.type(0) if mask is None else mask)
        e = np.exp(z - z.max(axis=-1, keepdims=True))
        return [(e / e.sum(axis=-1, keepdims=True)).astype(x.dtype)]
    return reference


def linear_cross_entropy_reference(
        trans_w: int = 1, reduction: str = "mean",
        ignore_index: int | None = None) -> Callable[[dict[str, np.ndarray]], list[np.ndarray]]:
    """ai.ortmodule FusedLinearCrossEntropy: SoftmaxCrossEntropyLoss(x op(w) + bias, labels),
    x read as [rows, hidden], op(w) = w^T when trans_w; outputs the loss and each row's
    logsumexp (computed in float64, rounded to x's dtype)."""
    def reference(d: dict[str, np.ndarray]) -> list[np.ndarray]:
        x, w, labels = d["x"], d["w"], d["labels"].reshape(-1)
        logits = x.reshape(-1, x.shape[-1]).astype(np.float64) @ (w.T if trans_w else w)
        if "bias" in d:
            logits = logits + d["bias"]
        top = logits.max(axis=1, keepdims=True)
        lse = (top + np.log(np.exp(logits - top).sum(axis=1, keepdims=True)))[:, 0]
        kept = np.ones(labels.shape, dtype=bool) if ignore_index is None else labels != ignore_index
        rows = np.arange(labels.size)
        losses = np.where(kept, lse - logits[rows, np.where(kept, labels, 0)], 0.0)
        if reduction == "none":
            loss = losses.reshape(d["labels"].shape)
        else:
            loss = np.asarray(losses.sum() / (kept.sum() if reduction == "mean" else 1))
        return [loss.astype(x.dtype), lse.astype(x.dtype)]
    return reference


def fused_attention_reference(
        scale: float, bshd: int = 0,
        window: bool = False) -> Callable[[dict[str, np.ndarray]], list[np.ndarray]]:
    """ai.ortmodule FusedAttention: ScaledMaskedSoftmax(q k^T, mask, fill; scale) v, q, k and v
    broadcasting over their leading dims (computed in float64, rounded to q's dtype); bshd:
    the attribute's operands (1 q, 2 k, 4 v, 8 the output) laid out [batch, seq, heads, dim];
    window (attribute mask_window): the mask is W [S + T - 1], query i and key j masked by
    W[S - 1 - i + j]."""
    softmax = scaled_masked_softmax_reference(scale)

    def heads_first(x: np.ndarray, bit: int) -> np.ndarray:
        return np.swapaxes(x, 1, 2) if bshd & bit else x

    def reference(d: dict[str, np.ndarray]) -> list[np.ndarray]:
        q, k, v = (heads_first(d[n].astype(np.float64), bit)
                   for n, bit in (("q", 1), ("k", 2), ("v", 4)))
        inputs = {"x": q @ np.swapaxes(k, -1, -2)}
        if "mask" in d:
            mask = d["mask"]
            if window:
                S, T = inputs["x"].shape[-2:]
                mask = mask[S - 1 - np.arange(S)[:, None] + np.arange(T)[None, :]]
            inputs["mask"] = mask if mask.dtype == np.bool_ else mask.astype(np.float64)
        if "fill" in d:
            inputs["fill"] = d["fill"]
        return [np.ascontiguousarray(heads_first(softmax(inputs)[0] @ v, 8)).astype(d["q"].dtype)]
    return reference


def simplified_layernorm_reference(
        axis: int = -1, eps: float = 1e-5) -> Callable[[dict[str, np.ndarray]], list[np.ndarray]]:
    """com.microsoft SimplifiedLayerNormalization (RMS normalisation over x's dims from `axis`
    on): y = x / sqrt(mean(x^2) + eps) * scale and inv_std_var = 1 / sqrt(mean(x^2) + eps),
    computed in float64 (eps as the float32 attribute holds it) and rounded to x's dtype."""
    eps = float(np.float32(eps))

    def reference(d: dict[str, np.ndarray]) -> list[np.ndarray]:
        x = d["x"].astype(np.float64)
        dims = tuple(range(axis % x.ndim, x.ndim))
        inv = 1.0 / np.sqrt(np.mean(x * x, axis=dims, keepdims=True) + eps)
        y = x * inv * d["scale"].astype(np.float64)
        return [y.astype(d["x"].dtype), inv.astype(d["x"].dtype)]
    return reference


def fused_rotary_reference(axis: int = -1, split: int = 0,
                           mode: int = 0) -> Callable[[dict[str, np.ndarray]], list[np.ndarray]]:
    """ai.ortmodule FusedRotary: rot(x) = concat(-x[split:], x[:split]) along axis (split
    clamped to the axis' length); mode 0: x * cos + rot(x) * sin, mode 1: x * cos +
    rot^T(x * sin) with rot^T(z) = concat(z[D - split:], -z[:D - split]), mode 2: rot(x). A
    non-negative axis counts the dims of "ref" (when given) or of x; each product and the
    sum rounded in x's dtype, as the unfused nodes round them."""
    def rot(x: np.ndarray, h: int, a: int) -> np.ndarray:
        lo, hi = np.split(x, [h], axis=a)
        return np.concatenate([-hi, lo], axis=a)

    def rot_t(z: np.ndarray, h: int, a: int) -> np.ndarray:
        lo, hi = np.split(z, [z.shape[a] - h], axis=a)
        return np.concatenate([hi, -lo], axis=a)

    def reference(d: dict[str, np.ndarray]) -> list[np.ndarray]:
        x = d["x"]
        from_end = axis if axis < 0 else axis - d.get("ref", x).ndim
        h = min(split, x.shape[from_end])
        if mode == 2:
            return [rot(x, h, from_end)]
        cos, sin = d["cos"], d["sin"]
        if mode == 0:  # rotated before broadcasting
            return [x * cos + rot(x, h, from_end) * sin]
        x = np.broadcast_to(x, np.broadcast_shapes(x.shape, cos.shape, sin.shape))
        return [x * cos + rot_t(x * sin, h, from_end)]
    return reference


def silu_mul_reference() -> Callable[[dict[str, np.ndarray]], list[np.ndarray]]:
    """ai.ortmodule SiluMul: g * sigmoid(g) * u, g and u broadcast together, computed in float64
    and rounded to g's dtype."""
    def reference(d: dict[str, np.ndarray]) -> list[np.ndarray]:
        g, u = d["g"].astype(np.float64), d["u"].astype(np.float64)
        return [(g / (1.0 + np.exp(-g)) * u).astype(d["g"].dtype)]
    return reference


def rnn_layer_reference(cell: str, reverse: int = 0,
                        nonlinearity: str = "tanh") -> Callable[[dict[str, np.ndarray]], list[np.ndarray]]:
    """ai.ortmodule LSTMTorch / GRUTorch / RNNTorch: one layer of torch's cell (gates in torch's
    order: LSTM i f g o, GRU r z n) over x [T, B, I] from h0 (and c0) or zeros, the steps run
    backwards with reverse; outputs y [T, B, H], h_n (and c_n), computed in float64."""
    def sigmoid(a: np.ndarray) -> np.ndarray:
        return 1.0 / (1.0 + np.exp(-a))

    def reference(d: dict[str, np.ndarray]) -> list[np.ndarray]:
        x = d["x"].astype(np.float64)
        w_ih, w_hh = d["w_ih"].astype(np.float64), d["w_hh"].astype(np.float64)
        hidden = w_hh.shape[1]
        b_ih = d.get("b_ih", np.zeros(w_ih.shape[0])).astype(np.float64)
        b_hh = d.get("b_hh", np.zeros(w_ih.shape[0])).astype(np.float64)
        h = d.get("h0", np.zeros((x.shape[1], hidden))).astype(np.float64)
        c = d.get("c0", np.zeros((x.shape[1], hidden))).astype(np.float64)
        y = np.zeros((x.shape[0], x.shape[1], hidden))
        steps = range(x.shape[0] - 1, -1, -1) if reverse else range(x.shape[0])
        for t in steps:
            gi = x[t] @ w_ih.T + b_ih
            gh = h @ w_hh.T + b_hh
            if cell == "lstm":
                i, f, g, o = np.split(gi + gh, 4, axis=1)
                c = sigmoid(f) * c + sigmoid(i) * np.tanh(g)
                h = sigmoid(o) * np.tanh(c)
            elif cell == "gru":
                (ir, iz, in_), (hr, hz, hn) = np.split(gi, 3, axis=1), np.split(gh, 3, axis=1)
                r, z = sigmoid(ir + hr), sigmoid(iz + hz)
                n = np.tanh(in_ + r * hn)
                h = (1 - z) * n + z * h
            else:
                a = gi + gh
                h = np.tanh(a) if nonlinearity == "tanh" else np.maximum(a, 0)
            y[t] = h
        dtype = d["x"].dtype
        out = [y.astype(dtype), h.astype(dtype)]
        return out + [c.astype(dtype)] if cell == "lstm" else out
    return reference


def conv_transpose_reference(attrs: dict[str, Any]
                             ) -> Callable[[dict[str, np.ndarray]], list[np.ndarray]]:
    """ONNX ConvTranspose with explicit pads, by its definition: every input cell x[n, m, o]
    adds x * w[m, c, k] to y[n, g * C_out/group + c, o * stride - pad_begin + k * dilation]
    (onnx.reference's grouped ConvTranspose indexes the groups' weights wrongly)."""
    def reference(d: dict[str, np.ndarray]) -> list[np.ndarray]:
        x, w, bias = d["x"], d["w"], d.get("b")
        sd = x.ndim - 2
        group = int(attrs.get("group", 1))
        strides = attrs.get("strides", [1] * sd)
        dil = attrs.get("dilations", [1] * sd)
        pads = attrs.get("pads", [0] * 2 * sd)
        out_pad = attrs.get("output_padding", [0] * sd)
        k = w.shape[2:]
        extent = [strides[i] * (x.shape[i + 2] - 1) + out_pad[i] + dil[i] * (k[i] - 1) + 1
                  - pads[i] - pads[i + sd] for i in range(sd)]
        cin_g, cout_g = x.shape[1] // group, w.shape[1]
        y = np.zeros((x.shape[0], cout_g * group, *extent), dtype=x.dtype)
        for g in range(group):
            xg = x[:, g * cin_g:(g + 1) * cin_g]
            wg = w[g * cin_g:(g + 1) * cin_g]
            for tap in np.ndindex(*k):
                # [N, cout_g, *x_spatial]: the tap's contribution at each input cell
                part = np.einsum("nm...,mc->nc...", xg, wg[(slice(None), slice(None), *tap)])
                index = [slice(None), slice(g * cout_g, (g + 1) * cout_g)]
                src = [slice(None), slice(None)]
                for i in range(sd):
                    pos = np.arange(x.shape[i + 2]) * strides[i] - pads[i] + tap[i] * dil[i]
                    keep = (pos >= 0) & (pos < extent[i])
                    index.append(pos[keep])
                    src.append(np.nonzero(keep)[0])
                # one spatial axis at a time keeps the fancy indexing an outer product
                ix = np.ix_(*[np.arange(y.shape[0]), np.arange(g * cout_g, (g + 1) * cout_g),
                              *index[2:]])
                sx = np.ix_(*[np.arange(part.shape[0]), np.arange(cout_g), *src[2:]])
                y[ix] += part[sx]
        if bias is not None:
            y += bias.reshape(1, -1, *([1] * sd))
        return [y]
    return reference
