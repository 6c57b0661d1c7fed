"""Translations of ATen ops (as torch.export records them, before decomposition) into the
ONNX ops the engine runs (docs/supported_ops.md), for the fx lowering (``_fx_lower``).

One entry per op overload. A translation receives the lowering, the FX node and the op's
arguments bound to its schema (FX nodes, Python numbers, lists), and returns the value of
the node: an ONNX value name, a list of them, or a Python number (integer arithmetic on
sizes that folds). In-place ops rebind the value of the tensor they modify.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from typing import Any

import torch

from ortmodule import _bridge
from ortmodule._capture import ExportError
from ortmodule._fx_lower import FALLBACK_HINT, OWN_DOMAIN, Lowering, onnx_dtype

aten = torch.ops.aten
Fn = Callable[..., Any]
TABLE: dict[Any, Fn] = {}


def bind(target: Any, node: Any) -> tuple[list[Any], dict[str, Any]]:
    """The node's arguments in schema order (defaults filled in) for an ATen overload;
    its raw arguments for other targets."""
    if not isinstance(target, torch._ops.OpOverload):
        return list(node.args), dict(node.kwargs)
    values = []
    for k, arg in enumerate(target._schema.arguments):
        if k < len(node.args):
            values.append(node.args[k])
        elif arg.name in node.kwargs:
            values.append(node.kwargs[arg.name])
        elif arg.has_default_value():
            values.append(arg.default_value)
        else:
            values.append(None)
    return values, {}


def lookup(target: Any) -> Fn | None:
    return TABLE.get(target)


def register(*targets: Any) -> Callable[[Fn], Fn]:
    def add(fn: Fn) -> Fn:
        for t in targets:
            TABLE[t] = fn
        return fn
    return add


def _out(node: Any) -> torch.Tensor:
    return node.meta["val"]


def _axis(dim: int, rank: int) -> int:
    return dim + rank if dim < 0 else dim


def _result_dtype(lw: Lowering, *args: Any) -> torch.dtype:
    """The dtype PyTorch's type promotion gives ``args`` (tensors and Python numbers)."""
    operands: list[Any] = []
    for a in args:
        val = lw.meta(a)
        if isinstance(val, torch.Tensor):
            operands.append(val)
        elif isinstance(val, torch.SymInt):
            operands.append(1)
        elif isinstance(val, torch.SymFloat):
            operands.append(1.0)
        else:
            operands.append(val)
    first, *rest = operands
    dtype = torch.result_type(first, rest[0]) if rest else (
        first.dtype if isinstance(first, torch.Tensor) else torch.result_type(
            torch.tensor(first), torch.tensor(first)))
    for r in rest[1:]:
        dtype = torch.promote_types(dtype, torch.result_type(
            torch.empty((), dtype=dtype), r))
    return dtype


# ---- no-ops, identities, casts ----

@register(aten._assert_tensor_metadata.default, aten._assert_scalar.default,
          aten.sym_constrain_range_for_size.default, aten.sym_constrain_range.default)
def _noop(lw: Lowering, node: Any, *args: Any) -> Any:
    return None


@register(aten.clone.default, aten.contiguous.default, aten.alias.default,
          aten.lift_fresh_copy.default)
def _identity(lw: Lowering, node: Any, x: Any, *rest: Any) -> Any:
    return lw.op("Identity", [lw.tensor(x)])


@register(aten.detach.default, aten.detach_.default)
def _detach(lw: Lowering, node: Any, x: Any) -> Any:
    return lw.op("StopGradient", [lw.tensor(x)], domain=OWN_DOMAIN)


@register(aten.to.dtype, aten.to.dtype_layout, aten.to.device, aten._to_copy.default,
          aten.to.other, aten.type_as.default)
def _to(lw: Lowering, node: Any, x: Any, *rest: Any) -> Any:
    want = _out(node).dtype
    value = lw.tensor(x)
    if lw.dtype_of(x) == want:
        return lw.op("Identity", [value])
    return lw.op("Cast", [value], to=onnx_dtype(want))


# ---- elementwise ----

def _binary(op_type: str, compare: bool = False) -> Fn:
    def translate(lw: Lowering, node: Any, a: Any, b: Any, *rest: Any) -> Any:
        dtype = _result_dtype(lw, a, b)
        out = lw.op(op_type, [lw.tensor(a, dtype), lw.tensor(b, dtype)])
        want = _out(node).dtype
        if not compare and want != dtype:
            out = lw.op("Cast", [out], to=onnx_dtype(want))
        return out
    return translate


def _with_alpha(op_type: str) -> Fn:
    def translate(lw: Lowering, node: Any, a: Any, b: Any, alpha: Any = 1) -> Any:
        if alpha != 1:
            b_val = lw.meta(b)
            if isinstance(b_val, torch.Tensor):
                dtype = _result_dtype(lw, a, b)
                scaled = lw.op("Mul", [lw.tensor(b, dtype), lw.const(alpha, dtype)])
                return lw.op(op_type, [lw.tensor(a, dtype), scaled])
            b = b * alpha
        return _binary(op_type)(lw, node, a, b)
    return translate


TABLE[aten.add.Tensor] = _with_alpha("Add")
TABLE[aten.add.Scalar] = _with_alpha("Add")
TABLE[aten.sub.Tensor] = _with_alpha("Sub")
TABLE[aten.sub.Scalar] = _with_alpha("Sub")
TABLE[aten.mul.Tensor] = _binary("Mul")
TABLE[aten.mul.Scalar] = _binary("Mul")
for _op, _onnx in ((aten.eq, "Equal"), (aten.lt, "Less"), (aten.le, "LessOrEqual"),
                   (aten.gt, "Greater"), (aten.ge, "GreaterOrEqual")):
    TABLE[_op.Tensor] = _binary(_onnx, compare=True)
    TABLE[_op.Scalar] = _binary(_onnx, compare=True)


@register(aten.ne.Tensor, aten.ne.Scalar)
def _ne(lw: Lowering, node: Any, a: Any, b: Any) -> Any:
    return lw.op("Not", [_binary("Equal", compare=True)(lw, node, a, b)])


@register(aten.div.Tensor, aten.div.Scalar, aten.div.Tensor_mode)
def _div(lw: Lowering, node: Any, a: Any, b: Any, rounding_mode: str | None = None) -> Any:
    want = _out(node).dtype
    dtype = want if rounding_mode is None else _result_dtype(lw, a, b)
    floating = dtype.is_floating_point
    # ONNX's integer Div truncates; a floating quotient is floored by Floor. Floor division
    # of integers and truncation of floats have no engine op.
    if (rounding_mode == "floor" and not floating) or (rounding_mode == "trunc" and floating):
        raise ExportError(f"division with rounding_mode={rounding_mode!r} of {dtype} tensors "
                          f"has no fx translation; {FALLBACK_HINT}")
    out = lw.op("Div", [lw.tensor(a, dtype), lw.tensor(b, dtype)])
    if rounding_mode == "floor":
        out = lw.op("Floor", [out])
    return out


@register(aten.rsub.Scalar, aten.rsub.Tensor)
def _rsub(lw: Lowering, node: Any, a: Any, b: Any, alpha: Any = 1) -> Any:
    return _with_alpha("Sub")(lw, node, b, a, 1) if alpha == 1 else \
        _binary("Sub")(lw, node, lw.op("Mul", [lw.tensor(b), lw.const(alpha, lw.dtype_of(b))]), a)


@register(aten.pow.Tensor_Scalar, aten.pow.Tensor_Tensor)
def _pow(lw: Lowering, node: Any, a: Any, b: Any) -> Any:
    dtype = _out(node).dtype
    return lw.op("Pow", [lw.tensor(a, dtype), lw.tensor(b, dtype)])


@register(aten.__and__.Tensor, aten.bitwise_and.Tensor, aten.logical_and.default)
def _and(lw: Lowering, node: Any, a: Any, b: Any) -> Any:
    return _logical(lw, node, "And", a, b)


@register(aten.__or__.Tensor, aten.bitwise_or.Tensor, aten.logical_or.default)
def _or(lw: Lowering, node: Any, a: Any, b: Any) -> Any:
    return _logical(lw, node, "Or", a, b)


def _logical(lw: Lowering, node: Any, op_type: str, a: Any, b: Any) -> Any:
    if _out(node).dtype != torch.bool and node.target not in (aten.logical_and.default,
                                                              aten.logical_or.default):
        raise ExportError(f"bitwise {op_type} of integer tensors has no engine op; "
                          f"{FALLBACK_HINT}")
    return lw.op(op_type, [lw.tensor(a, torch.bool), lw.tensor(b, torch.bool)])


@register(aten.bitwise_not.default, aten.logical_not.default)
def _not(lw: Lowering, node: Any, a: Any) -> Any:
    if lw.dtype_of(a) != torch.bool and node.target is aten.bitwise_not.default:
        raise ExportError(f"bitwise not of integer tensors has no engine op; {FALLBACK_HINT}")
    return lw.op("Not", [lw.tensor(a, torch.bool)])


def _unary(op_type: str) -> Fn:
    def translate(lw: Lowering, node: Any, x: Any) -> Any:
        return lw.op(op_type, [lw.tensor(x)])
    return translate


for _op, _onnx in ((aten.relu, "Relu"), (aten.tanh, "Tanh"), (aten.sigmoid, "Sigmoid"),
                   (aten.exp, "Exp"), (aten.log, "Log"), (aten.sqrt, "Sqrt"),
                   (aten.abs, "Abs"), (aten.neg, "Neg"), (aten.erf, "Erf"),
                   (aten.sin, "Sin"), (aten.cos, "Cos"), (aten.reciprocal, "Reciprocal")):
    TABLE[_op.default] = _unary(_onnx)


for _op, _onnx in ((aten.floor, "Floor"), (aten.ceil, "Ceil"), (aten.sign, "Sign")):
    TABLE[_op.default] = _unary(_onnx)


@register(aten.softplus.default)
def _softplus(lw: Lowering, node: Any, x: Any, beta: Any = 1, threshold: Any = 20) -> Any:
    """log(1 + exp(beta x)) / beta; above the threshold PyTorch returns x itself, which
    equals it to within rounding."""
    value = lw.tensor(x)
    if beta == 1:
        return lw.op("Softplus", [value])
    dtype = lw.dtype_of(x)
    scaled = lw.op("Softplus", [lw.op("Mul", [value, lw.const(float(beta), dtype)])])
    return lw.op("Div", [scaled, lw.const(float(beta), dtype)])


@register(aten.square.default)
def _square(lw: Lowering, node: Any, x: Any) -> Any:
    v = lw.tensor(x)
    return lw.op("Mul", [v, v])


@register(aten.leaky_relu.default)
def _leaky_relu(lw: Lowering, node: Any, x: Any, slope: float = 0.01) -> Any:
    return lw.op("LeakyRelu", [lw.tensor(x)], alpha=float(slope))


@register(aten.clamp.default, aten.clip.default, aten.hardtanh.default, aten.relu6.default)
def _clamp(lw: Lowering, node: Any, x: Any, low: Any = None, high: Any = None) -> Any:
    if node.target is aten.hardtanh.default:
        low, high = (-1.0 if low is None else low), (1.0 if high is None else high)
    elif node.target is aten.relu6.default:
        low, high = 0.0, 6.0
    dtype = _out(node).dtype
    bounds = [None if b is None else lw.tensor(b, dtype) for b in (low, high)]
    return lw.op("Clip", [lw.tensor(x, dtype), *bounds])


@register(aten.argmax.default, aten.argmin.default)
def _argmax(lw: Lowering, node: Any, x: Any, dim: Any = None, keepdim: bool = False) -> Any:
    op_type = "ArgMax" if node.target is aten.argmax.default else "ArgMin"
    value = lw.tensor(x)
    if dim is None:
        value, dim, keepdim = lw.op("Reshape", [value, lw.ints([-1])]), 0, False
    return lw.op(op_type, [value], axis=int(dim), keepdims=int(bool(keepdim)))


@register(aten.triu.default, aten.tril.default)
def _triangle(lw: Lowering, node: Any, x: Any, diagonal: int = 0) -> Any:
    return lw.op("Trilu", [lw.tensor(x), lw.const(int(diagonal), torch.int64)],
                 upper=int(node.target is aten.triu.default))


@register(aten.repeat.default)
def _repeat(lw: Lowering, node: Any, x: Any, repeats: Any) -> Any:
    value = lw.tensor(x)
    extra = len(repeats) - lw.rank(x)
    if extra > 0:
        value = lw.op("Reshape", [value, lw.shape([1] * extra + [
            lw.dim(x, d) for d in range(lw.rank(x))])])
    return lw.op("Tile", [value, lw.shape(list(repeats))])


@register(aten.rsqrt.default)
def _rsqrt(lw: Lowering, node: Any, x: Any) -> Any:
    return lw.op("Reciprocal", [lw.op("Sqrt", [lw.tensor(x)])])


@register(aten.silu.default)
def _silu(lw: Lowering, node: Any, x: Any) -> Any:
    v = lw.tensor(x)
    return lw.op("Mul", [v, lw.op("Sigmoid", [v])])


@register(aten.gelu.default)
def _gelu(lw: Lowering, node: Any, x: Any, approximate: str = "none") -> Any:
    return lw.op("Gelu", [lw.tensor(x)], approximate=approximate)


@register(aten.relu_.default, aten.add_.Tensor, aten.mul_.Tensor, aten.sub_.Tensor,
          aten.div_.Tensor)
def _inplace(lw: Lowering, node: Any, x: Any, *rest: Any) -> Any:
    """``x.op_(...)``: the functional op's value, which later reads of ``x`` see."""
    functional = {aten.relu_.default: aten.relu.default, aten.add_.Tensor: aten.add.Tensor,
                  aten.mul_.Tensor: aten.mul.Tensor, aten.sub_.Tensor: aten.sub.Tensor,
                  aten.div_.Tensor: aten.div.Tensor}[node.target]
    out = TABLE[functional](lw, node, x, *rest)
    _rebind(lw, x, out)
    return out


def _is_view(node: Any) -> bool:
    return (isinstance(node, torch.fx.Node) and isinstance(node.target, torch._ops.OpOverload)
            and bool(node.target._schema.returns)
            and node.target._schema.returns[0].alias_info is not None
            and not node.target._schema.returns[0].alias_info.is_write)


def _rebind(lw: Lowering, x: Any, out: str, through: Any = None) -> None:
    """Later reads of ``x`` (modified in place) see ``out``. A slice or select of another
    tensor writes through to that tensor; other views cannot be followed."""
    if not isinstance(x, torch.fx.Node):
        raise ExportError("internal: in-place op on a constant")
    _check_no_stale_views(lw, x, through)
    lw.env[x] = out
    if not _is_view(x):
        return
    if x.target not in (aten.slice.Tensor, aten.select.int):
        raise ExportError(f"the fx exporter cannot follow an in-place update of a view "
                          f"({x.name}, made by {x.target}); {FALLBACK_HINT}")
    base = x.args[0]
    args, _ = bind(x.target, x)
    rank = lw.rank(base)
    axis = args[1] + rank if args[1] < 0 else args[1]
    size = lw.dim(base, axis)
    if x.target is aten.select.int:
        index = lw.value(args[2])
        if isinstance(index, int) and index < 0:
            index = lw.scalar_op("Add", size, index, operator.add)
        start, end, step = index, lw.scalar_op("Add", index, 1, operator.add), 1
        out = lw.op("Unsqueeze", [out, lw.ints([axis])])
    else:
        start = 0 if args[2] is None else lw.value(args[2])
        end = size if args[3] is None or args[3] == 2**63 - 1 else lw.value(args[3])
        step = args[4]
        for name, v in (("start", start), ("end", end)):
            if isinstance(v, int) and v < 0:
                raise ExportError(f"the fx exporter cannot follow an in-place update of a "
                                  f"slice with a negative {name}; {FALLBACK_HINT}")
        end = lw.scalar_op("Min", end, size, min)
    if step != 1:
        raise ExportError(f"the fx exporter cannot follow an in-place update of a strided "
                          f"slice; {FALLBACK_HINT}")
    # The new base: the written values padded to the base's extent, chosen where the view
    # lies along the axis, the old base elsewhere.
    zeros = [0] * rank
    begins, ends = list(zeros), list(zeros)
    begins[axis] = start
    ends[axis] = lw.scalar_op("Sub", size, end, operator.sub)
    dtype = lw.dtype_of(base)
    padded = lw.op("Pad", [out, lw.shape(begins + ends), lw.const(0, dtype)], mode="constant")
    positions = lw.op("Range", [lw.const(0, torch.int64), _scalar(lw, size),
                                lw.const(1, torch.int64)])
    inside = lw.op("And", [lw.op("GreaterOrEqual", [positions, _scalar(lw, start)]),
                           lw.op("Less", [positions, _scalar(lw, end)])])
    along = [1] * rank
    along[axis] = -1
    inside = lw.op("Reshape", [inside, lw.ints(along)])
    _rebind(lw, base, lw.op("Where", [inside, padded, lw.tensor(base)]), x)


def _scalar(lw: Lowering, v: Any) -> str:
    return v if isinstance(v, str) else lw.const(int(v), torch.int64)


def _check_no_stale_views(lw: Lowering, x: Any, through: Any) -> None:
    """Refuses an in-place update of ``x`` when a view of it (or a view of such a view)
    made before the update is read after it: the lowering would give that read the old
    values."""
    here = lw.order.get(lw.fx_node, -1)
    pending = [x]
    while pending:
        base = pending.pop()
        for user in base.users:
            if user is lw.fx_node or user is through or not _is_view(user) \
                    or user.args[0] is not base or lw.order.get(user, here) >= here:
                continue
            if any(lw.order.get(u, -1) > here for u in user.users):
                raise ExportError(f"the fx exporter cannot follow an in-place update of "
                                  f"{x.name} that a view made before it ({user.name}) "
                                  f"reads after it; {FALLBACK_HINT}")
            pending.append(user)


@register(aten.copy_.default)
def _copy_(lw: Lowering, node: Any, x: Any, src: Any, non_blocking: bool = False) -> Any:
    out = lw.op("Expand", [lw.tensor(src, lw.dtype_of(x)), lw.op("Shape", [lw.tensor(x)])])
    _rebind(lw, x, out)
    return out


@register(aten.fill_.Tensor, aten.fill_.Scalar)
def _fill_(lw: Lowering, node: Any, x: Any, value: Any) -> Any:
    out = lw.op("Expand", [lw.tensor(value, lw.dtype_of(x)), lw.op("Shape", [lw.tensor(x)])])
    _rebind(lw, x, out)
    return out


@register(aten.masked_fill_.Scalar, aten.masked_fill_.Tensor)
def _masked_fill_(lw: Lowering, node: Any, x: Any, mask: Any, value: Any) -> Any:
    out = _masked_fill(lw, node, x, mask, value)
    _rebind(lw, x, out)
    return out


@register(aten.minimum.default, aten.min.other)
def _minimum(lw: Lowering, node: Any, a: Any, b: Any) -> Any:
    return _binary("Min")(lw, node, a, b)


@register(aten.maximum.default, aten.max.other)
def _maximum(lw: Lowering, node: Any, a: Any, b: Any) -> Any:
    return _binary("Max")(lw, node, a, b)


@register(aten.where.self, aten.where.ScalarOther, aten.where.ScalarSelf, aten.where.Scalar)
def _where(lw: Lowering, node: Any, cond: Any, a: Any, b: Any) -> Any:
    dtype = _out(node).dtype
    return lw.op("Where", [lw.tensor(cond, torch.bool), lw.tensor(a, dtype),
                           lw.tensor(b, dtype)])


@register(aten.masked_fill.Scalar, aten.masked_fill.Tensor)
def _masked_fill(lw: Lowering, node: Any, x: Any, mask: Any, value: Any) -> Any:
    dtype = _out(node).dtype
    return lw.op("Where", [lw.tensor(mask, torch.bool), lw.tensor(value, dtype),
                           lw.tensor(x, dtype)])


# ---- matrix products ----

@register(aten.linear.default)
def _linear(lw: Lowering, node: Any, x: Any, w: Any, b: Any = None) -> Any:
    xv, wv = lw.tensor(x), lw.tensor(w)
    if lw.rank(x) == 2 and b is not None:
        return lw.op("Gemm", [xv, wv, lw.tensor(b)], transB=1)
    out = lw.op("MatMul", [xv, lw.op("Transpose", [wv], perm=[1, 0])])
    return out if b is None else lw.op("Add", [out, lw.tensor(b)])


@register(aten.addmm.default)
def _addmm(lw: Lowering, node: Any, bias: Any, a: Any, b: Any, beta: Any = 1,
           alpha: Any = 1) -> Any:
    return lw.op("Gemm", [lw.tensor(a), lw.tensor(b), lw.tensor(bias)],
                 alpha=float(alpha), beta=float(beta))


@register(aten.matmul.default, aten.mm.default, aten.bmm.default)
def _matmul(lw: Lowering, node: Any, a: Any, b: Any) -> Any:
    return lw.op("MatMul", [lw.tensor(a), lw.tensor(b)])


# ---- normalization, activations with axes, losses ----

@register(aten.layer_norm.default)
def _layer_norm(lw: Lowering, node: Any, x: Any, shape: Any, w: Any = None, b: Any = None,
                eps: float = 1e-5, cudnn: bool = True) -> Any:
    dtype = lw.dtype_of(x)
    if w is None:
        w_value = lw.op("ConstantOfShape", [lw.shape(shape)],
                        value=_scalar_tensor(1.0, dtype))
    else:
        w_value = lw.tensor(w)
    inputs = [lw.tensor(x), w_value] + ([lw.tensor(b)] if b is not None else [])
    return lw.op("LayerNormalization", inputs, axis=-len(shape), epsilon=float(eps))


@register(aten.native_layer_norm.default)
def _native_layer_norm(lw: Lowering, node: Any, x: Any, shape: Any, w: Any, b: Any,
                       eps: float) -> Any:
    """Only the normalized output: the saved mean and inverse deviation feed ATen's own
    backward, which an exported forward never holds (reading them is refused)."""
    return [_layer_norm(lw, node, x, shape, w, b, eps), None, None]


def _scalar_tensor(value: Any, dtype: torch.dtype) -> Any:
    from onnx import numpy_helper

    return numpy_helper.from_array(torch.tensor([value], dtype=dtype).numpy())


@register(aten.softmax.int, aten._softmax.default, aten.log_softmax.int,
          aten._log_softmax.default)
def _softmax(lw: Lowering, node: Any, x: Any, dim: int, third: Any = None) -> Any:
    want = _out(node).dtype
    value = lw.tensor(x, want)
    op_type = "LogSoftmax" if "log_softmax" in str(node.target) else "Softmax"
    return lw.op(op_type, [value], axis=dim)


@register(aten.dropout.default, aten.feature_dropout.default)
def _dropout(lw: Lowering, node: Any, x: Any, p: float, train: bool) -> Any:
    if node.target is aten.feature_dropout.default and train and p > 0:
        raise ExportError(f"channel dropout (Dropout2d) has no engine op; {FALLBACK_HINT}")
    if not train or p == 0:
        return lw.op("Identity", [lw.tensor(x)])
    return lw.op("Dropout", [lw.tensor(x), lw.const(float(p), torch.float32),
                             lw.const(True, torch.bool)])


@register(aten.cross_entropy_loss.default)
def _cross_entropy(lw: Lowering, node: Any, x: Any, target: Any, weight: Any = None,
                   reduction: int = 1, ignore_index: int = -100,
                   label_smoothing: float = 0.0) -> Any:
    if label_smoothing:
        raise ExportError(f"cross_entropy with label_smoothing has no fx translation; "
                          f"{FALLBACK_HINT}")
    if lw.dtype_of(target) != torch.int64:
        raise ExportError(f"cross_entropy with probability targets has no fx translation; "
                          f"{FALLBACK_HINT}")
    inputs = [lw.tensor(x), lw.tensor(target)]
    if weight is not None:
        inputs.append(lw.tensor(weight))
    if lw.rank(x) == 1:  # an unbatched sample: [C] and a 0-d target
        inputs[0] = lw.op("Unsqueeze", [inputs[0], lw.ints([0])])
        inputs[1] = lw.op("Unsqueeze", [inputs[1], lw.ints([0])])
    out = lw.op("SoftmaxCrossEntropyLoss", inputs, ignore_index=int(ignore_index),
                reduction=("none", "mean", "sum")[reduction])
    if lw.rank(x) == 1 and reduction == 0:
        out = lw.op("Squeeze", [out, lw.ints([0])])
    return out


@register(aten.nll_loss.default, aten.nll_loss_nd.default, aten.nll_loss2d.default)
def _nll_loss(lw: Lowering, node: Any, x: Any, target: Any, weight: Any = None,
              reduction: int = 1, ignore_index: int = -100) -> Any:
    inputs = [lw.tensor(x), lw.tensor(target)]
    if weight is not None:
        inputs.append(lw.tensor(weight))
    if lw.rank(x) == 1:
        raise ExportError(f"nll_loss of an unbatched sample has no fx translation; "
                          f"{FALLBACK_HINT}")
    return lw.op("NegativeLogLikelihoodLoss", inputs, ignore_index=int(ignore_index),
                 reduction=("none", "mean", "sum")[reduction])


def _reduce(op_type: str) -> Fn:
    def translate(lw: Lowering, node: Any, x: Any, dims: Any = None, keepdim: bool = False,
                  dtype: Any = None) -> Any:
        if isinstance(dims, torch.dtype):  # the .default overloads: (x, dtype)
            dims = None
        want = _out(node).dtype
        value = lw.tensor(x, want)
        if dims is None or (isinstance(dims, (list, tuple)) and len(dims) == 0):
            return lw.op(op_type, [value], keepdims=int(bool(keepdim)))
        if isinstance(dims, int):
            dims = [dims]
        return lw.op(op_type, [value, lw.ints(dims)], keepdims=int(bool(keepdim)))
    return translate


TABLE[aten.mean.dim] = _reduce("ReduceMean")
TABLE[aten.mean.default] = _reduce("ReduceMean")
TABLE[aten.sum.dim_IntList] = _reduce("ReduceSum")
TABLE[aten.sum.default] = _reduce("ReduceSum")
TABLE[aten.amax.default] = _reduce("ReduceMax")
TABLE[aten.amin.default] = _reduce("ReduceMin")


@register(aten.cumsum.default)
def _cumsum(lw: Lowering, node: Any, x: Any, dim: int, dtype: Any = None) -> Any:
    want = _out(node).dtype
    return lw.op("CumSum", [lw.tensor(x, want), lw.const(int(dim), torch.int64)])


# ---- shapes and views ----

@register(aten.sym_size.int)
def _sym_size(lw: Lowering, node: Any, x: Any, dim: int) -> Any:
    size = _out(node)
    if isinstance(size, int) or not size.node.expr.free_symbols:
        return int(size)
    rank = lw.rank(x)
    axis = _axis(dim, rank)
    shape = lw.op("Shape", [lw.tensor(x)], start=axis, end=axis + 1)
    return lw.op("Squeeze", [shape])


def _sym_arith(op_type: str, fn: Callable[[Any, Any], Any]) -> Fn:
    def translate(lw: Lowering, node: Any, a: Any, b: Any) -> Any:
        return lw.scalar_op(op_type, lw.value(a), lw.value(b), fn)
    return translate


TABLE[operator.add] = _sym_arith("Add", operator.add)
TABLE[operator.sub] = _sym_arith("Sub", operator.sub)
TABLE[operator.mul] = _sym_arith("Mul", operator.mul)
TABLE[operator.floordiv] = _sym_arith("Div", operator.floordiv)  # sizes are >= 0
TABLE[operator.mod] = _sym_arith("Mod", operator.mod)


@register(operator.getitem)
def _getitem(lw: Lowering, node: Any, seq: Any, index: int) -> Any:
    values = lw.value(seq)
    if not isinstance(values, list):
        raise ExportError(f"internal: getitem on {seq} which has no list of results")
    out = values[index]
    if out is None:
        raise ExportError(f"result {index} of {seq.target} has no fx translation; "
                          f"{FALLBACK_HINT}")
    return out


@register(aten.view.default, aten.reshape.default, aten._unsafe_view.default)
def _view(lw: Lowering, node: Any, x: Any, sizes: Any) -> Any:
    return lw.op("Reshape", [lw.tensor(x), lw.shape(sizes)])


@register(aten.flatten.using_ints)
def _flatten(lw: Lowering, node: Any, x: Any, start: int = 0, end: int = -1) -> Any:
    rank = lw.rank(x)
    if rank == 0:
        return lw.op("Reshape", [lw.tensor(x), lw.ints([1])])
    start, end = _axis(start, rank), _axis(end, rank)
    value = lw.tensor(x)
    sizes = [lw.dim(x, d) for d in range(start)] + [-1] + \
            [lw.dim(x, d) for d in range(end + 1, rank)]
    return lw.op("Reshape", [value, lw.shape(sizes)])


@register(aten.unflatten.int)
def _unflatten(lw: Lowering, node: Any, x: Any, dim: int, sizes: Any) -> Any:
    return lw.op("Reshape", [lw.tensor(x), lw.shape(list(_out(node).shape))])


@register(aten.transpose.int)
def _transpose(lw: Lowering, node: Any, x: Any, d0: int, d1: int) -> Any:
    rank = lw.rank(x)
    perm = list(range(rank))
    a, b = _axis(d0, rank), _axis(d1, rank)
    perm[a], perm[b] = perm[b], perm[a]
    return lw.op("Transpose", [lw.tensor(x)], perm=perm)


@register(aten.t.default)
def _t(lw: Lowering, node: Any, x: Any) -> Any:
    if lw.rank(x) < 2:
        return lw.op("Identity", [lw.tensor(x)])
    return lw.op("Transpose", [lw.tensor(x)], perm=[1, 0])


@register(aten.permute.default)
def _permute(lw: Lowering, node: Any, x: Any, dims: Any) -> Any:
    rank = lw.rank(x)
    return lw.op("Transpose", [lw.tensor(x)], perm=[_axis(d, rank) for d in dims])


@register(aten.expand.default)
def _expand(lw: Lowering, node: Any, x: Any, sizes: Any, implicit: bool = False) -> Any:
    rank = lw.rank(x)
    offset = len(sizes) - rank
    target = [lw.dim(x, k - offset) if (isinstance(s, int) and s == -1) else s
              for k, s in enumerate(sizes)]
    return lw.op("Expand", [lw.tensor(x), lw.shape(target)])


@register(aten.expand_as.default)
def _expand_as(lw: Lowering, node: Any, x: Any, other: Any) -> Any:
    return lw.op("Expand", [lw.tensor(x), lw.op("Shape", [lw.tensor(other)])])


@register(aten.unsqueeze.default)
def _unsqueeze(lw: Lowering, node: Any, x: Any, dim: int) -> Any:
    axis = _axis(dim, lw.rank(x) + 1)
    return lw.op("Unsqueeze", [lw.tensor(x), lw.ints([axis])])


@register(aten.squeeze.dim, aten.squeeze.dims, aten.squeeze.default)
def _squeeze(lw: Lowering, node: Any, x: Any, dims: Any = None) -> Any:
    rank = lw.rank(x)
    shape = lw.meta(x).shape
    if dims is None:
        dims = list(range(rank))
    elif isinstance(dims, int):
        dims = [dims]
    axes = []
    for d in dims:
        a = _axis(d, rank)
        size = shape[a]
        if isinstance(size, torch.SymInt) and size.node.expr.free_symbols:
            raise ExportError(f"squeeze of a dimension whose size is symbolic has no fx "
                              f"translation; {FALLBACK_HINT}")
        if int(size) == 1:
            axes.append(a)
    if not axes:
        return lw.op("Identity", [lw.tensor(x)])
    return lw.op("Squeeze", [lw.tensor(x), lw.ints(axes)])


def _index_value(lw: Lowering, v: Any) -> Any:
    return v if isinstance(v, str) else lw.const(int(v), torch.int64)


@register(aten.slice.Tensor)
def _slice(lw: Lowering, node: Any, x: Any, dim: int = 0, start: Any = None, end: Any = None,
           step: int = 1) -> Any:
    rank = lw.rank(x)
    axis = _axis(dim, rank)
    start_v = 0 if start is None else lw.value(start)
    end_v = 2**63 - 1 if end is None else lw.value(end)
    if start_v == 0 and end_v == 2**63 - 1 and step == 1:
        return lw.op("Identity", [lw.tensor(x)])
    starts, ends = lw.shape([start_v]), lw.shape([end_v])
    return lw.op("Slice", [lw.tensor(x), starts, ends, lw.ints([axis]), lw.ints([step])])


@register(aten.select.int)
def _select(lw: Lowering, node: Any, x: Any, dim: int, index: Any) -> Any:
    axis = _axis(dim, lw.rank(x))
    index = lw.value(index)
    if isinstance(index, int) and index < 0:
        index = lw.scalar_op("Add", lw.dim(x, axis), index, operator.add)
    return lw.op("Gather", [lw.tensor(x), _index_value(lw, index)], axis=axis)


@register(aten.index_select.default)
def _index_select(lw: Lowering, node: Any, x: Any, dim: int, index: Any) -> Any:
    return lw.op("Gather", [lw.tensor(x), lw.tensor(index)], axis=_axis(dim, lw.rank(x)))


@register(aten.gather.default)
def _gather(lw: Lowering, node: Any, x: Any, dim: int, index: Any,
            sparse_grad: bool = False) -> Any:
    return lw.op("GatherElements", [lw.tensor(x), lw.tensor(index)],
                 axis=_axis(dim, lw.rank(x)))


@register(aten.index.Tensor)
def _index(lw: Lowering, node: Any, x: Any, indices: Any) -> Any:
    """Advanced indexing: one index tensor is a Gather along its dimension; index tensors
    on the leading dimensions are one GatherND over their broadcast shape."""
    positions = [k for k, i in enumerate(indices) if i is not None]
    if any(lw.dtype_of(indices[k]) == torch.bool for k in positions):
        raise ExportError(f"indexing with a boolean mask has a data-dependent shape; "
                          f"{FALLBACK_HINT}")
    value = lw.tensor(x)
    if len(positions) == 1:
        return lw.op("Gather", [value, lw.tensor(indices[positions[0]], torch.int64)],
                     axis=positions[0])
    if positions != list(range(len(positions))):
        raise ExportError(f"indexing with tensors on non-leading dimensions "
                          f"({len(positions)} index tensors at {positions}) has no fx "
                          f"translation; {FALLBACK_HINT}")
    index_values = []
    for k in positions:
        v = lw.tensor(indices[k], torch.int64)
        size = lw.dim(x, k)
        # Negative indices count from the end, as in PyTorch.
        negative = lw.op("Less", [v, lw.const(0, torch.int64)])
        wrapped = lw.op("Add", [v, _index_value(lw, size)])
        index_values.append(lw.op("Where", [negative, wrapped, v]))
    total = index_values[0]
    for v in index_values[1:]:
        total = lw.op("Add", [total, v])
    shape = lw.op("Shape", [total])
    stacked = [lw.op("Unsqueeze", [lw.op("Expand", [v, shape]), lw.ints([-1])])
               for v in index_values]
    return lw.op("GatherND", [value, lw.op("Concat", stacked, axis=-1)])


@register(aten.cat.default)
def _cat(lw: Lowering, node: Any, tensors: Any, dim: int = 0) -> Any:
    rank = _out(node).dim()
    dtype = _out(node).dtype
    values = [lw.tensor(t, dtype) for t in tensors
              if not (lw.rank(t) == 1 and lw.meta(t).shape[0] == 0 and rank != 1)]
    return lw.op("Concat", values, axis=_axis(dim, rank))


@register(aten.stack.default)
def _stack(lw: Lowering, node: Any, tensors: Any, dim: int = 0) -> Any:
    axis = _axis(dim, _out(node).dim())
    values = [lw.op("Unsqueeze", [lw.tensor(t), lw.ints([axis])]) for t in tensors]
    return lw.op("Concat", values, axis=axis)


@register(aten.split.Tensor, aten.split_with_sizes.default, aten.chunk.default,
          aten.unbind.int)
def _split(lw: Lowering, node: Any, x: Any, arg: Any = None, dim: int = 0) -> Any:
    if node.target is aten.unbind.int:
        dim = arg if arg is not None else 0
    rank = lw.rank(x)
    axis = _axis(dim, rank)
    outs = _out(node)
    if node.target is aten.unbind.int:
        sizes = [1] * len(outs)
    else:
        sizes = [lw.sym(o.shape[axis]) for o in outs]
    value = lw.tensor(x)
    if all(isinstance(s, int) for s in sizes):
        parts = lw.op("Split", [value, lw.ints(sizes)], outputs=len(sizes), axis=axis)
        parts = parts if isinstance(parts, list) else [parts]
    else:
        parts = []
        start: Any = 0
        for s in sizes:
            end = lw.scalar_op("Add", start, s, operator.add)
            parts.append(lw.op("Slice", [value, lw.shape([start]), lw.shape([end]),
                                         lw.ints([axis])]))
            start = end
    if node.target is aten.unbind.int:
        parts = [lw.op("Squeeze", [p, lw.ints([axis])]) for p in parts]
    return parts


@register(aten.pad.default, aten.constant_pad_nd.default)
def _pad(lw: Lowering, node: Any, x: Any, pad: Any, mode: Any = "constant",
         value: Any = None) -> Any:
    if node.target is aten.constant_pad_nd.default:
        mode, value = "constant", mode
    if mode != "constant":
        raise ExportError(f"pad mode {mode!r} has no fx translation; {FALLBACK_HINT}")
    rank = lw.rank(x)
    begins = [0] * rank
    ends = [0] * rank
    for k in range(len(pad) // 2):
        axis = rank - 1 - k
        begins[axis], ends[axis] = pad[2 * k], pad[2 * k + 1]
    dtype = _out(node).dtype
    return lw.op("Pad", [lw.tensor(x), lw.shape(begins + ends),
                         lw.const(0 if value is None else value, dtype)], mode="constant")


@register(aten.diff.default)
def _diff(lw: Lowering, node: Any, x: Any, n: int = 1, dim: int = -1, prepend: Any = None,
          append: Any = None) -> Any:
    if n != 1:
        raise ExportError(f"diff with n={n} has no fx translation; {FALLBACK_HINT}")
    axis = _axis(dim, lw.rank(x))
    parts = [lw.tensor(t) for t in (prepend, x, append) if t is not None]
    value = parts[0] if len(parts) == 1 else lw.op("Concat", parts, axis=axis)
    axes = lw.ints([axis])
    head = lw.op("Slice", [value, lw.ints([1]), lw.ints([2**63 - 1]), axes])
    tail = lw.op("Slice", [value, lw.ints([0]), lw.ints([-1]), axes])
    if lw.dtype_of(x) == torch.bool:
        return lw.op("Xor", [head, tail])
    return lw.op("Sub", [head, tail])


# ---- tensor factories ----

def _fill(lw: Lowering, node: Any, sizes: Any, value: Any) -> Any:
    out = _out(node)
    if all(isinstance(s, int) for s in out.shape) and not any(
            isinstance(s, torch.fx.Node) for s in sizes):
        return lw.op("Identity", [lw.const(torch.full(tuple(out.shape), value,
                                                      dtype=out.dtype).tolist(), out.dtype)])
    return lw.op("ConstantOfShape", [lw.shape(sizes)], value=_scalar_tensor(value, out.dtype))


@register(aten.zeros.default, aten.new_zeros.default)
def _zeros(lw: Lowering, node: Any, *args: Any) -> Any:
    sizes = args[1] if node.target is aten.new_zeros.default else args[0]
    return _fill(lw, node, sizes, 0)


@register(aten.ones.default, aten.new_ones.default)
def _ones(lw: Lowering, node: Any, *args: Any) -> Any:
    sizes = args[1] if node.target is aten.new_ones.default else args[0]
    return _fill(lw, node, sizes, 1)


@register(aten.full.default, aten.new_full.default)
def _full(lw: Lowering, node: Any, *args: Any) -> Any:
    sizes, value = (args[1], args[2]) if node.target is aten.new_full.default else args[:2]
    if isinstance(value, torch.fx.Node):
        raise ExportError(f"full with a computed fill value has no fx translation; "
                          f"{FALLBACK_HINT}")
    return _fill(lw, node, sizes, value)


@register(aten.zeros_like.default, aten.ones_like.default, aten.full_like.default)
def _like(lw: Lowering, node: Any, x: Any, *args: Any) -> Any:
    value = {aten.zeros_like.default: 0, aten.ones_like.default: 1}.get(node.target)
    if value is None:
        value = args[0]
    out = _out(node)
    return lw.op("ConstantOfShape", [lw.op("Shape", [lw.tensor(x)])],
                 value=_scalar_tensor(value, out.dtype))


@register(aten.scalar_tensor.default)
def _scalar_tensor_op(lw: Lowering, node: Any, value: Any, *args: Any) -> Any:
    return lw.tensor(value, _out(node).dtype)


@register(aten.arange.default, aten.arange.start, aten.arange.start_step)
def _arange(lw: Lowering, node: Any, *args: Any) -> Any:
    dtype = _out(node).dtype
    if node.target is aten.arange.default:
        start, end, step = 0, args[0], 1
    elif node.target is aten.arange.start:
        start, end, step = args[0], args[1], 1
    else:
        start, end, step = args[0], args[1], args[2]
    values = [lw.value(v) for v in (start, end, step)]
    if all(isinstance(v, (int, float)) for v in values):
        return lw.op("Identity", [lw.const(torch.arange(*values, dtype=dtype).tolist(), dtype)])
    scalars = []
    for v in values:
        if isinstance(v, str):
            scalars.append(v if dtype == torch.int64 else lw.op("Cast", [v],
                                                                 to=onnx_dtype(dtype)))
        else:
            scalars.append(lw.const(v, dtype))
    return lw.op("Range", scalars)


# ---- convolution, pooling, batch norm ----

@register(aten.conv1d.default, aten.conv2d.default, aten.conv3d.default,
          aten.convolution.default)
def _conv(lw: Lowering, node: Any, x: Any, w: Any, b: Any = None, stride: Any = 1,
          padding: Any = 0, dilation: Any = 1, *rest: Any) -> Any:
    groups = 1
    if node.target is aten.convolution.default:
        transposed, _output_padding, groups = rest
        if transposed:
            raise ExportError(f"transposed convolution has no fx translation; "
                              f"{FALLBACK_HINT}")
    else:
        groups = rest[0] if rest else 1
    spatial = lw.rank(w) - 2

    def per_dim(v: Any) -> list[int]:
        return [int(v)] * spatial if isinstance(v, int) else [int(a) for a in v]

    pads = per_dim(padding)
    inputs = [lw.tensor(x), lw.tensor(w)] + ([lw.tensor(b)] if b is not None else [])
    kernel = [int(s) for s in lw.meta(w).shape[2:]]
    return lw.op("Conv", inputs, kernel_shape=kernel, strides=per_dim(stride),
                 pads=pads + pads, dilations=per_dim(dilation), group=int(groups))


def _pool_args(kernel: Any, stride: Any, padding: Any, spatial: int
               ) -> tuple[list[int], list[int], list[int]]:
    def per_dim(v: Any) -> list[int]:
        if isinstance(v, int):
            return [v] * spatial
        v = [int(a) for a in v]
        return v * spatial if len(v) == 1 else v

    k = per_dim(kernel)
    s = per_dim(stride) if stride else k
    p = per_dim(padding)
    return k, s, p + p


@register(aten.max_pool2d.default, aten.max_pool1d.default)
def _max_pool(lw: Lowering, node: Any, x: Any, kernel: Any, stride: Any = (),
              padding: Any = 0, dilation: Any = 1, ceil_mode: bool = False) -> Any:
    spatial = lw.rank(x) - 2
    k, s, p = _pool_args(kernel, stride, padding, spatial)
    d = _pool_args(dilation, dilation, 0, spatial)[0]
    return lw.op("MaxPool", [lw.tensor(x)], kernel_shape=k, strides=s, pads=p, dilations=d,
                 ceil_mode=int(ceil_mode))


@register(aten.avg_pool2d.default, aten.avg_pool1d.default)
def _avg_pool(lw: Lowering, node: Any, x: Any, kernel: Any, stride: Any = (),
              padding: Any = 0, ceil_mode: bool = False, count_include_pad: bool = True,
              divisor_override: Any = None) -> Any:
    if divisor_override is not None:
        raise ExportError(f"avg_pool with divisor_override has no fx translation; "
                          f"{FALLBACK_HINT}")
    spatial = lw.rank(x) - 2
    k, s, p = _pool_args(kernel, stride, padding, spatial)
    return lw.op("AveragePool", [lw.tensor(x)], kernel_shape=k, strides=s, pads=p,
                 ceil_mode=int(ceil_mode), count_include_pad=int(count_include_pad))


@register(aten.adaptive_avg_pool2d.default, aten.adaptive_avg_pool1d.default)
def _adaptive_avg_pool(lw: Lowering, node: Any, x: Any, output_size: Any) -> Any:
    sizes = [int(s) for s in output_size]
    if all(s == 1 for s in sizes):
        return lw.op("GlobalAveragePool", [lw.tensor(x)])
    spatial = lw.meta(x).shape[2:]
    if any(isinstance(s, torch.SymInt) and s.node.expr.free_symbols for s in spatial):
        raise ExportError(f"adaptive_avg_pool to {sizes} over symbolic sizes has no fx "
                          f"translation; {FALLBACK_HINT}")
    ins = [int(s) for s in spatial]
    if any(i % o for i, o in zip(ins, sizes)):
        raise ExportError(f"adaptive_avg_pool from {ins} to {sizes} (not a divisor) has no "
                          f"fx translation; {FALLBACK_HINT}")
    k = [i // o for i, o in zip(ins, sizes)]
    return lw.op("AveragePool", [lw.tensor(x)], kernel_shape=k, strides=k)


def _channel_fill(lw: Lowering, x: Any, value: float) -> str:
    channels = lw.op("Shape", [lw.tensor(x)], start=1, end=2)
    return lw.op("ConstantOfShape", [channels],
                 value=_scalar_tensor(value, lw.dtype_of(x)))


@register(aten.batch_norm.default)
def _batch_norm(lw: Lowering, node: Any, x: Any, w: Any, b: Any, mean: Any, var: Any,
                training: bool, momentum: float, eps: float, cudnn: bool = True) -> Any:
    value = lw.tensor(x)
    scale = lw.tensor(w) if w is not None else _channel_fill(lw, x, 1.0)
    bias = lw.tensor(b) if b is not None else _channel_fill(lw, x, 0.0)
    if mean is None or var is None:
        if not training:
            raise ExportError("batch norm in eval mode without running statistics")
        y, _, _ = lw.op("BatchNormalization",
                        [value, scale, bias, _channel_fill(lw, x, 0.0),
                         _channel_fill(lw, x, 1.0)],
                        outputs=3, epsilon=float(eps), momentum=1.0 - float(momentum),
                        training_mode=1)
        return y
    if not training:
        return lw.op("BatchNormalization", [value, scale, bias, lw.tensor(mean),
                                            lw.tensor(var)], epsilon=float(eps))
    # PyTorch's running_var tracks the unbiased batch variance: the engine's BatchNormTorch.
    y, new_mean, new_var = lw.op("BatchNormTorch", [value, scale, bias, lw.tensor(mean),
                                                    lw.tensor(var)],
                                 outputs=3, domain=OWN_DOMAIN, epsilon=float(eps),
                                 momentum=1.0 - float(momentum), training_mode=1)
    _rebind(lw, mean, new_mean)
    _rebind(lw, var, new_var)
    return y


@register(aten.embedding.default)
def _embedding(lw: Lowering, node: Any, weight: Any, indices: Any, padding_idx: int = -1,
               scale_grad_by_freq: bool = False, sparse: bool = False) -> Any:
    if scale_grad_by_freq:
        raise NotImplementedError(
            "torch.nn.Embedding(scale_grad_by_freq=True) is not supported; "
            "construct the embedding with scale_grad_by_freq=False")
    w, i = lw.tensor(weight), lw.tensor(indices)
    if padding_idx is None or padding_idx < 0:
        return lw.op("Gather", [w, i], axis=0)
    return lw.op("Embedding", [w, i], domain=OWN_DOMAIN, padding_idx=int(padding_idx))


# ---- attention ----

@register(aten.scaled_dot_product_attention.default)
def _sdpa(lw: Lowering, node: Any, q: Any, k: Any, v: Any, mask: Any = None,
          dropout_p: float = 0.0, is_causal: bool = False, scale: Any = None,
          enable_gqa: bool = False) -> Any:
    """softmax(q k^T * scale + mask) v, with the causal mask built from the sizes."""
    q_val, k_val = lw.meta(q), lw.meta(k)
    if q_val.shape[-3:-2] != k_val.shape[-3:-2] and enable_gqa:
        raise ExportError(f"scaled_dot_product_attention with grouped key/value heads has "
                          f"no fx translation; {FALLBACK_HINT}")
    dtype = q_val.dtype
    if scale is None:
        head = q_val.shape[-1]
        if isinstance(head, torch.SymInt) and head.node.expr.free_symbols:
            raise ExportError(f"scaled_dot_product_attention over a symbolic head size has "
                              f"no fx translation; {FALLBACK_HINT}")
        scale = 1.0 / math.sqrt(int(head))
    rank = q_val.dim()
    perm = list(range(rank))
    perm[-1], perm[-2] = perm[-2], perm[-1]
    key_t = lw.op("Transpose", [lw.tensor(k)], perm=perm)
    scores = lw.op("Mul", [lw.op("MatMul", [lw.tensor(q), key_t]), lw.const(scale, dtype)])
    lowest = lw.const(float(torch.finfo(dtype).min), dtype)
    if is_causal:
        rows, cols = lw.dim(q, -2), lw.dim(k, -2)
        ones = lw.op("ConstantOfShape", [lw.shape([rows, cols])],
                     value=_scalar_tensor(True, torch.bool))
        keep = lw.op("Trilu", [lw.op("Cast", [ones], to=onnx_dtype(torch.int64))], upper=0)
        keep = lw.op("Cast", [keep], to=onnx_dtype(torch.bool))
        scores = lw.op("Where", [keep, scores, lowest])
    if mask is not None:
        if lw.dtype_of(mask) == torch.bool:
            scores = lw.op("Where", [lw.tensor(mask), scores, lowest])
        else:
            scores = lw.op("Add", [scores, lw.tensor(mask, dtype)])
    weights = lw.op("Softmax", [scores], axis=-1)
    if dropout_p > 0:
        weights = lw.op("Dropout", [weights, lw.const(float(dropout_p), torch.float32),
                                    lw.const(True, torch.bool)])
    return lw.op("MatMul", [weights, lw.tensor(v)])


# ---- higher-order ops and bridge nodes ----

def _wrap_with_set_grad_enabled(lw: Lowering, node: Any, enabled: bool, submodule: Any,
                                *args: Any) -> Any:
    """The body of a ``torch.no_grad()`` (or enable_grad) region, inlined; the region's
    outputs were detached by ``_lowering.mark_no_grad_regions``."""
    from ortmodule._fx_lower import _translate

    graph_module = getattr(lw.program.graph_module, submodule.target)
    out = _translate(lw, graph_module.graph, [lw.value(a) for a in args])
    return list(out) if isinstance(out, (list, tuple)) else out


TABLE[torch.ops.higher_order.wrap_with_set_grad_enabled] = _wrap_with_set_grad_enabled


def _torch_call(lw: Lowering, node: Any, callable_id: int, inputs: Any) -> Any:
    call = lw.calls.get(callable_id)
    if call is None:
        raise ExportError(f"internal: bridged call #{callable_id} is not registered")
    outs = lw.op("TorchCall", [lw.tensor(i) for i in inputs], outputs=len(call.out_positions),
                 domain=OWN_DOMAIN, callable_id=int(callable_id), callable=call.name)
    return outs if isinstance(outs, list) else [outs]


TABLE[_bridge.torch_call_op()] = _torch_call


def covered_ops() -> list[str]:
    """The names of the ops the fx lowering translates (for documentation and tests)."""
    return sorted(str(t) for t in TABLE)
