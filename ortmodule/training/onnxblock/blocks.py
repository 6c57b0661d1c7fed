"""Blocks: callables that append nodes (and initializers, inputs) to the model of the open
``onnxblock.base``/``empty_base`` context and return the names of what they produced.

Names, node structure and attributes follow ONNX Runtime Training's onnxblock, so artifacts built
here look like the reference's.
"""

from __future__ import annotations

import copy
import logging
from abc import ABC, abstractmethod
from typing import Any

import numpy as np
import onnx

from ortmodule.training.onnxblock import _graph_utils, model_accessor

_log = logging.getLogger("ortmodule")

# Protobuf refuses to serialize messages of 2 GiB or more; the checker then needs a path.
_PROTOBUF_LIMIT = 2**31


class Block(ABC):
    """Base class of every block. Subclasses implement ``build``; calling the block runs
    ``build`` on the context's model and then the ONNX checker (with strict shape inference)
    on the result."""

    def __init__(self) -> None:
        self.base: onnx.ModelProto | None = None

    @abstractmethod
    def build(self, *args, **kwargs):
        """Append to ``self.base`` and return the output name(s)."""

    def __call__(self, *args, **kwargs):
        self.base = model_accessor.current().model
        _log.debug("onnxblock: building %s", type(self).__name__)
        output = self.build(*args, **kwargs)
        check_model(self.base, type(self).__name__)
        return output

    def infer_shapes_on_base(self) -> onnx.ModelProto:
        """The context's model with shapes inferred (a new ModelProto)."""
        model = model_accessor.current().model
        _check_size(model, type(self).__name__)
        return onnx.shape_inference.infer_shapes(model)


def _check_size(model: onnx.ModelProto, who: str) -> None:
    size = model.ByteSize()
    if size >= _PROTOBUF_LIMIT:
        raise RuntimeError(
            f"{who}: the model is {size} bytes; models of 2 GiB or more cannot be serialized as one "
            "protobuf, and artifact generation does not support them"
        )


def check_model(model: onnx.ModelProto, who: str) -> None:
    _check_size(model, who)
    try:
        onnx.checker.check_model(model, full_check=True)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as e:
        raise RuntimeError(f"{who}: the model built so far is not valid ONNX: {e}") from e


def _node(op_type: str, inputs: list[str], output_token: str, domain: str = "", **attributes):
    """A node named ``onnx::<op_type>::<n>`` with one fresh output ``onnx::<output_token>::<n>``."""
    output = _graph_utils.generate_graph_name(output_token)
    node = onnx.helper.make_node(
        op_type, inputs, [output], name=_graph_utils.generate_graph_name(op_type), domain=domain,
        **attributes,
    )
    return node, output


def _float_initializer(model: onnx.ModelProto, token: str, value: float) -> str:
    name = _graph_utils.generate_graph_name(token)
    model.graph.initializer.append(onnx.helper.make_tensor(name, onnx.TensorProto.FLOAT, [1], [value]))
    return name


class _BinaryOp(Block):
    op_type = ""

    def build(self, input_name1: str, input_name2: str) -> str:
        node, output = _node(self.op_type, [input_name1, input_name2], f"{self.op_type.lower()}_output")
        self.base.graph.node.append(node)
        return output


class Add(_BinaryOp):
    op_type = "Add"


class Sub(_BinaryOp):
    op_type = "Sub"


class Mul(_BinaryOp):
    op_type = "Mul"


class Div(_BinaryOp):
    op_type = "Div"


class Pow(Block):
    """``input ** exponent`` with the exponent a float32 [1] initializer."""

    def __init__(self, exponent: float):
        super().__init__()
        self._exponent = exponent

    def build(self, pow_input_name: str) -> str:
        exponent = _float_initializer(self.base, "pow_exponent", self._exponent)
        output = _graph_utils.generate_graph_name("pow_output")
        self.base.graph.node.append(
            onnx.helper.make_node(
                "Pow", [pow_input_name, exponent], [output], name=_graph_utils.generate_graph_name("Pow")
            )
        )
        return output


class _UnaryOp(Block):
    op_type = ""

    def __init__(self, **attributes: Any):
        super().__init__()
        self._attributes = attributes

    def build(self, input_name: str) -> str:
        output = _graph_utils.generate_graph_name(f"{self.op_type.lower()}_output")
        self.base.graph.node.append(
            onnx.helper.make_node(
                self.op_type, [input_name], [output], _graph_utils.generate_graph_name(self.op_type),
                **self._attributes,
            )
        )
        return output


class ReduceMean(_UnaryOp):
    """ReduceMean over all axes (no ``axes`` input)."""

    op_type = "ReduceMean"

    def __init__(self, keepdims: bool = True):
        super().__init__(keepdims=keepdims)


class ReduceSum(_UnaryOp):
    """ReduceSum over all axes (no ``axes`` input)."""

    op_type = "ReduceSum"

    def __init__(self, keepdims: bool = True):
        super().__init__(keepdims=keepdims)


class Sigmoid(_UnaryOp):
    op_type = "Sigmoid"


class Log(_UnaryOp):
    op_type = "Log"


class Neg(_UnaryOp):
    op_type = "Neg"


class Abs(_UnaryOp):
    op_type = "Abs"


class Constant(Block):
    """A float32 [1] initializer holding ``value_float``; returns its name."""

    def __init__(self, value_float: float):
        super().__init__()
        self._value = value_float

    def build(self) -> str:
        return _float_initializer(self.base, "initializer", self._value)


class SequenceConstruct(Block):
    def build(self, *sequence_input_names: str) -> str:
        node, output = _node("SequenceConstruct", list(sequence_input_names), "sequenceconstruct_output")
        self.base.graph.node.append(node)
        return output


class ReduceAllL2(Block):
    """com.microsoft ReduceAllL2: the L2 norm over all elements of all inputs, float32 [1]."""

    def build(self, *reduce_input_names: str) -> str:
        node, output = _node("ReduceAllL2", list(reduce_input_names), "reducealll2_output", domain="com.microsoft")
        self.base.graph.node.append(node)
        # onnx has no shape inference for com.microsoft ops.
        self.base.graph.value_info.append(onnx.helper.make_tensor_value_info(output, onnx.TensorProto.FLOAT, [1]))
        return output


class Clip(Block):
    """Clip with optional float32 [1] min and max initializers (an absent bound is "")."""

    def __init__(self, clip_min: float | None = None, clip_max: float | None = None):
        super().__init__()
        self._min = clip_min
        self._max = clip_max

    def build(self, clip_input_name: str) -> str:
        min_name = "" if self._min is None else _float_initializer(self.base, "clip_min", self._min)
        max_name = "" if self._max is None else _float_initializer(self.base, "clip_max", self._max)
        node, output = _node("Clip", [clip_input_name, min_name, max_name], "clip_output")
        self.base.graph.node.append(node)
        return output


class PassThrough(Block):
    """Returns its inputs unchanged (the loss when generate_artifacts gets ``loss=None``)."""

    def build(self, *input_names: str) -> tuple[str, ...]:
        return input_names


class InputLike(Block):
    """Adds a graph input with the type and shape of the graph input (or else output) ``like``."""

    def __init__(self, like: str):
        super().__init__()
        self._like = like

    def build(self, input_name: str | None = None) -> str:
        try:
            template = _graph_utils.find_graph_input(self.base, self._like)
        except LookupError:
            try:
                template = _graph_utils.find_graph_output(self.base, self._like)
            except LookupError:
                raise LookupError(
                    f"InputLike: {self._like!r} is neither a graph input nor a graph output"
                ) from None
        cloned = copy.deepcopy(template)
        cloned.name = input_name or _graph_utils.generate_graph_name("input")
        self.base.graph.input.append(cloned)
        return cloned.name


class LabelEncoder(Block):
    """ai.onnx.ml LabelEncoder with the given key/value lists and defaults."""

    def __init__(
        self,
        default_float: float = 0.0,
        default_int64: int = -1,
        default_string: str = "_Unused",
        keys_floats: list[float] | None = None,
        keys_int64s: list[int] | None = None,
        keys_strings: list[str] | None = None,
        values_floats: list[float] | None = None,
        values_int64s: list[int] | None = None,
        values_strings: list[str] | None = None,
    ):
        super().__init__()
        self._attributes: dict[str, Any] = {
            "default_float": default_float,
            "default_int64": default_int64,
            "default_string": default_string,
        }
        optional = {
            "keys_floats": keys_floats,
            "keys_int64s": keys_int64s,
            "keys_strings": keys_strings,
            "values_floats": values_floats,
            "values_int64s": values_int64s,
            "values_strings": values_strings,
        }
        self._attributes.update({k: v for k, v in optional.items() if v is not None})

    def build(self, label_encoder_input_name: str) -> str:
        node, output = _node(
            "LabelEncoder", [label_encoder_input_name], "label_encoder.output", domain="ai.onnx.ml",
            **self._attributes,
        )
        self.base.graph.node.append(node)
        return output


class Cast(Block):
    def __init__(self, to: int):
        super().__init__()
        self._to = to

    def build(self, cast_input_name: str) -> str:
        node, output = _node("Cast", [cast_input_name], "cast.output", to=self._to)
        self.base.graph.node.append(node)
        return output


class Linear(Block):
    """Gemm(input, weight[in, out], bias[out]) with weight and bias drawn from N(0, 1)."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, alpha: float = 1.0,
                 beta: float = 1.0):
        super().__init__()
        self._in_features = in_features
        self._out_features = out_features
        self._bias = bias
        self._alpha = alpha
        self._beta = beta

    def build(self, linear_input_name: str) -> str:
        weight = _graph_utils.generate_graph_name("linear.weight")
        self.base.graph.initializer.append(
            onnx.numpy_helper.from_array(
                np.random.randn(self._in_features, self._out_features).astype(np.float32), weight
            )
        )
        inputs = [linear_input_name, weight]
        if self._bias:
            bias = _graph_utils.generate_graph_name("linear.bias")
            self.base.graph.initializer.append(
                onnx.numpy_helper.from_array(np.random.randn(self._out_features).astype(np.float32), bias)
            )
            inputs.append(bias)
        output = _graph_utils.generate_graph_name("linear.output")
        self.base.graph.node.append(
            onnx.helper.make_node(
                "Gemm", inputs, [output], _graph_utils.generate_graph_name("linear"),
                alpha=self._alpha, beta=self._beta,
            )
        )
        return output
