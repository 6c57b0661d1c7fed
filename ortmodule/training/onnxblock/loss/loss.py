"""Loss blocks, built from basic ops exactly as ONNX Runtime Training builds them.

A missing ``target`` input is added as a copy of the prediction's graph input/output
(same type and shape); a missing ``labels`` input of CrossEntropyLoss is int64 with the
prediction's shape minus its last (class) dimension.
"""

from __future__ import annotations

import copy

import numpy as np
import onnx

from ortmodule.training.onnxblock import _graph_utils, blocks

REDUCTIONS = ("mean", "sum", "none")


def _check_reduction(loss: str, reduction: str) -> None:
    if reduction not in REDUCTIONS:
        raise RuntimeError(f"{loss}: reduction {reduction!r} is not one of {', '.join(REDUCTIONS)}")


def _reduce_block(reduction: str) -> blocks.Block:
    if reduction == "mean":
        return blocks.ReduceMean(keepdims=False)
    if reduction == "sum":
        return blocks.ReduceSum(keepdims=False)
    return blocks.PassThrough()


def _add_target_like(model: onnx.ModelProto, prediction: str, target_name: str) -> None:
    """Graph input ``target_name`` with the type and shape of the graph output ``prediction``."""
    target = copy.deepcopy(_graph_utils.find_graph_output(model, prediction))
    target.name = target_name
    model.graph.input.append(target)


class MSELoss(blocks.Block):
    """reduce((input - target) ** 2)."""

    def __init__(self, reduction: str = "mean"):
        super().__init__()
        _check_reduction("MSELoss", reduction)
        self._reduce = _reduce_block(reduction)
        self._sub = blocks.Sub()
        self._square = blocks.Pow(2.0)

    def build(self, loss_input_name: str, target_name: str = "target") -> str:
        if not _graph_utils.value_exists(self.base, target_name):
            target_name = blocks.InputLike(loss_input_name)(target_name)
        return self._reduce(self._square(self._sub(loss_input_name, target_name)))


class L1Loss(blocks.Block):
    """reduce(|input - target|)."""

    def __init__(self, reduction: str = "mean"):
        super().__init__()
        _check_reduction("L1Loss", reduction)
        self._reduce = _reduce_block(reduction)
        self._abs = blocks.Abs()
        self._sub = blocks.Sub()

    def build(self, loss_input_name: str, target_name: str = "target") -> str:
        if not _graph_utils.value_exists(self.base, target_name):
            target_name = blocks.InputLike(loss_input_name)(target_name)
        return self._reduce(self._abs(self._sub(loss_input_name, target_name)))


class CrossEntropyLoss(blocks.Block):
    """One SoftmaxCrossEntropyLoss node (scores [N, C, ...] or [N, C], int64 labels).

    weight: per-class rescaling (an ndarray of shape [C]); ignore_index: a label value that
    contributes nothing."""

    def __init__(self, weight: np.ndarray | None = None, reduction: str = "mean",
                 ignore_index: int | None = None):
        super().__init__()
        _check_reduction("CrossEntropyLoss", reduction)
        self._weight = weight
        self._reduction = reduction
        self._ignore_index = ignore_index

    def build(self, scores_input_name: str, labels_name: str = "labels") -> str:
        weight_name = _graph_utils.generate_graph_name("celoss.weight")
        if self._weight is not None:
            self.base.graph.initializer.append(onnx.numpy_helper.from_array(np.asarray(self._weight), weight_name))

        if not _graph_utils.value_exists(self.base, labels_name):
            labels = copy.deepcopy(_graph_utils.find_graph_output(self.base, scores_input_name))
            labels.name = labels_name
            labels.type.tensor_type.elem_type = onnx.TensorProto.INT64
            # The classes are the last dimension: [N, C] -> [N], [B, T, V] -> [B, T].
            del labels.type.tensor_type.shape.dim[-1]
            self.base.graph.input.append(labels)

        inputs = [scores_input_name, labels_name]
        if self._weight is not None:
            inputs.append(weight_name)
        loss_name = _graph_utils.generate_graph_name("loss")
        log_prob_name = _graph_utils.generate_graph_name("log_prob")
        self.base.graph.node.append(
            onnx.helper.make_node(
                "SoftmaxCrossEntropyLoss", inputs, [loss_name, log_prob_name],
                reduction=self._reduction, ignore_index=self._ignore_index,
                name=_graph_utils.generate_graph_name("SoftmaxCrossEntropyLoss"),
            )
        )
        return loss_name


class BCEWithLogitsLoss(blocks.Block):
    """reduce(-weight * (pos_weight * target * log(sigmoid(x)) + (1 - target) * log(1 - sigmoid(x))))
    built from Sigmoid, Log, Sub, Mul, Add and Neg."""

    def __init__(self, weight: np.ndarray | None = None, reduction: str = "mean",
                 pos_weight: np.ndarray | None = None):
        super().__init__()
        _check_reduction("BCEWithLogitsLoss", reduction)
        self._weight = weight
        self._pos_weight = pos_weight
        self._reduce = _reduce_block(reduction)
        self._sigmoid = blocks.Sigmoid()
        self._log = blocks.Log()
        self._sub = blocks.Sub()
        self._add = blocks.Add()
        self._mul = blocks.Mul()
        self._neg = blocks.Neg()

    def build(self, loss_input_name: str, target_name: str = "target") -> str:
        model = self.base
        pos_weight_name = _graph_utils.generate_graph_name("bceloss.pos_weight")
        if self._pos_weight is not None:
            model.graph.initializer.append(onnx.numpy_helper.from_array(np.asarray(self._pos_weight), pos_weight_name))
        weight_name = _graph_utils.generate_graph_name("bceloss.weight")
        if self._weight is not None:
            model.graph.initializer.append(onnx.numpy_helper.from_array(np.asarray(self._weight), weight_name))
        one_a = blocks._float_initializer(model, "bceloss.sub_ones", 1.0)
        one_b = blocks._float_initializer(model, "bceloss.sub_ones", 1.0)

        if not _graph_utils.value_exists(model, target_name):
            _add_target_like(model, loss_input_name, target_name)

        sigmoid = self._sigmoid(loss_input_name)
        positive = self._mul(self._log(sigmoid), target_name)
        if self._pos_weight is not None:
            positive = self._mul(positive, pos_weight_name)
        negative = self._mul(self._log(self._sub(one_a, sigmoid)), self._sub(one_b, target_name))
        loss = self._neg(self._add(positive, negative))
        if self._weight is not None:
            loss = self._mul(weight_name, loss)
        return self._reduce(loss)
