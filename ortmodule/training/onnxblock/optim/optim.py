"""Optimizer blocks: the optimizer model that ONNX Runtime Training's Optimizer runs.

Inputs, in the order the runtime expects them: ``learning_rate`` float[1], ``step`` int64[1],
then tensor sequences ``params``, ``gradients``, ``first_order_moments`` and, for AdamW,
``second_order_moments``. One com.microsoft node (``AdamWOptimizer`` or ``SGDOptimizerV2``)
updates them in place and outputs a bool[1] "updated" flag, the only graph output. An optional
``ClipGradNorm`` puts an ``InplaceClipGradNorm`` on the gradients first.
"""

from __future__ import annotations

import onnx

from ortmodule.training.onnxblock import _graph_utils, blocks
from ortmodule.training.onnxblock.onnxblock import ForwardBlock

LEARNING_RATE = "learning_rate"
STEP = "step"
PARAMS = "params"
GRADIENTS = "gradients"
FIRST_ORDER_MOMENTS = "first_order_moments"
SECOND_ORDER_MOMENTS = "second_order_moments"


def _microsoft_node(op_type: str, inputs: list[str], output: str, **attributes) -> onnx.NodeProto:
    return onnx.helper.make_node(
        op_type, inputs, [output], name=_graph_utils.generate_graph_name(op_type), domain="com.microsoft",
        **attributes,
    )


class ClipGradNorm(blocks.Block):
    """InplaceClipGradNorm(max_norm) over a gradient sequence; returns the clipped sequence."""

    def __init__(self, max_norm: float):
        super().__init__()
        self._max_norm = max_norm

    def build(self, gradients_name: str) -> str:
        output = _graph_utils.generate_graph_name("clip_grad_norm_output")
        self.base.graph.node.append(
            _microsoft_node("InplaceClipGradNorm", [gradients_name], output, max_norm=self._max_norm)
        )
        # onnx has no shape inference for com.microsoft ops.
        self.base.graph.value_info.append(
            onnx.helper.make_tensor_sequence_value_info(output, onnx.TensorProto.FLOAT, None)
        )
        return output


class SGDOptimizer(blocks.Block):
    """One SGDOptimizerV2(learning_rate, params, gradients) node."""

    def build(self, learning_rate_name: str, params_name: str, gradients_name: str) -> str:
        output = _graph_utils.generate_graph_name("update_completed")
        self.base.graph.node.append(
            _microsoft_node("SGDOptimizerV2", [learning_rate_name, params_name, gradients_name], output)
        )
        return output


class AdamWOptimizer(blocks.Block):
    """One AdamWOptimizer node in the Hugging Face variant (adam_mode 1)."""

    def __init__(self, bias_correction: bool = True, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-6, weight_decay: float = 0.0):
        super().__init__()
        self._attributes = {
            "alpha": betas[0],
            "beta": betas[1],
            "epsilon": eps,
            "weight_decay": weight_decay,
            "correct_bias": 1 if bias_correction else 0,
            "adam_mode": 1,
        }

    def build(self, learning_rate_name: str, step_name: str, parameter_sequence_name: str,
              gradient_sequence_name: str, first_order_moment_sequence_name: str,
              second_order_moment_sequence_name: str) -> str:
        inputs = [
            learning_rate_name, step_name, parameter_sequence_name, gradient_sequence_name,
            first_order_moment_sequence_name, second_order_moment_sequence_name,
        ]
        output = _graph_utils.generate_graph_name("adamw.updated_flag")
        self.base.graph.node.append(_microsoft_node("AdamWOptimizer", inputs, output, **self._attributes))
        return output


class _Optimizer(ForwardBlock):
    """Builds the optimizer model from ``(trainable, frozen)`` parameters (call it inside
    ``onnxblock.empty_base(opset_version)``)."""

    def __init__(self, clip_grad: ClipGradNorm | None = None):
        super().__init__()
        self._clip_grad = clip_grad

    def build(self, parameters) -> str:
        trainable, _ = parameters
        if not trainable:
            raise RuntimeError(
                f"{type(self).__name__}: there are no trainable parameters to build an optimizer model "
                "for; pass requires_grad names"
            )
        element_type = trainable[0].data_type
        graph = self.base.graph
        graph.input.extend(
            [
                onnx.helper.make_tensor_value_info(LEARNING_RATE, onnx.TensorProto.FLOAT, [1]),
                onnx.helper.make_tensor_value_info(STEP, onnx.TensorProto.INT64, [1]),
            ]
        )
        for name in (PARAMS, GRADIENTS, FIRST_ORDER_MOMENTS):
            graph.input.append(onnx.helper.make_tensor_sequence_value_info(name, element_type, None))
        gradients = GRADIENTS if self._clip_grad is None else self._clip_grad(GRADIENTS)
        updated = self._update(gradients, element_type)
        graph.output.append(onnx.helper.make_tensor_value_info(updated, onnx.TensorProto.BOOL, [1]))
        return updated

    def _update(self, gradients_name: str, element_type: int) -> str:
        raise NotImplementedError(f"{type(self).__name__} must implement _update")


class AdamW(_Optimizer):
    def __init__(self, bias_correction: bool = True, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-6, weight_decay: float = 0.0, clip_grad: ClipGradNorm | None = None):
        super().__init__(clip_grad)
        self._adamw = AdamWOptimizer(bias_correction=bias_correction, betas=betas, eps=eps,
                                     weight_decay=weight_decay)

    def _update(self, gradients_name: str, element_type: int) -> str:
        self.base.graph.input.append(
            onnx.helper.make_tensor_sequence_value_info(SECOND_ORDER_MOMENTS, element_type, None)
        )
        return self._adamw(LEARNING_RATE, STEP, PARAMS, gradients_name, FIRST_ORDER_MOMENTS, SECOND_ORDER_MOMENTS)


class SGD(_Optimizer):
    def __init__(self, clip_grad: ClipGradNorm | None = None):
        super().__init__(clip_grad)
        self._sgd = SGDOptimizer()

    def _update(self, gradients_name: str, element_type: int) -> str:
        return self._sgd(LEARNING_RATE, PARAMS, gradients_name)
