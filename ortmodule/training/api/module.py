"""Module: runs the training and eval models of training artifacts."""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from ortmodule import _C
from ortmodule.training.api._io import check_device, read_model
from ortmodule.training.api.checkpoint_state import CheckpointState


def typed_outputs(model_bytes: bytes) -> bytes:
    """The inference model with a type on every graph output: an output that is an
    intermediate value of the eval model has none recorded there, and ONNX requires one
    (onnx.checker: "Field 'type' of 'value_info' is required"). ONNX shape inference gives
    it; an output it cannot type is an error naming it."""
    import onnx

    model = onnx.load_from_string(model_bytes)
    untyped = [o.name for o in model.graph.output if not o.HasField("type")]
    if not untyped:
        return model_bytes
    inferred = onnx.shape_inference.infer_shapes(model)
    types = {v.name: v.type for v in (*inferred.graph.value_info, *inferred.graph.output)
             if v.HasField("type")}
    missing = [name for name in untyped if name not in types]
    if missing:
        raise ValueError(
            f"export_model_for_inferencing: ONNX shape inference gives no type for the output(s) "
            f"{', '.join(missing)}; request outputs computed by standard ONNX ops, or the eval "
            "model's own outputs")
    for output in model.graph.output:
        if not output.HasField("type"):
            output.type.CopyFrom(types[output.name])
    return model.SerializeToString()


def _is_torch(value: object) -> bool:
    import torch

    return isinstance(value, torch.Tensor)


class Module:
    """The training model (forward, loss, gradient accumulation) and, optionally, the eval model
    of training artifacts, over a CheckpointState.

    Calling the module runs a train step (``train()`` mode, the default) or an eval step
    (``eval()``). Inputs are numpy arrays or torch tensors, in ``input_names()`` order (None
    inputs are skipped); outputs come back as the same kind, a single output bare.

    Gradients accumulate: the first train step after creation or ``lazy_reset_grad()``
    overwrites the gradient buffers, later ones add to them. ``Optimizer.step()`` does not
    reset them.
    """

    training: bool

    def __init__(self, train_model_uri: str | os.PathLike | bytes, state: CheckpointState,
                 eval_model_uri: str | os.PathLike | bytes | None = None, device: str = "cpu",
                 session_options: Any = None) -> None:
        if not isinstance(state, CheckpointState):
            raise TypeError(f"state must be a CheckpointState, got {type(state).__name__}")
        check_device(device)
        if session_options is not None:
            raise ValueError("session_options are not supported by this runtime; pass None")
        self._state = state
        self._eval_model_uri = eval_model_uri
        train = read_model(train_model_uri, "training model")
        evaluation = read_model(eval_model_uri, "eval model") if eval_model_uri is not None else b""
        self._module = _C.TrainingModule(state._state, train, evaluation)
        self.training = True
        self._device = device

    def __call__(self, *user_inputs: Any) -> Any:
        inputs = [x for x in user_inputs if x is not None]
        as_torch = any(_is_torch(x) for x in inputs)
        arrays = []
        for i, x in enumerate(inputs):
            if _is_torch(x):
                arrays.append(x.detach().cpu().contiguous().numpy())
            elif isinstance(x, np.ndarray):
                arrays.append(np.ascontiguousarray(x))
            elif np.isscalar(x):
                arrays.append(np.asarray(x))
            else:
                raise TypeError(f"input {i} must be a numpy array or a torch tensor, got "
                                f"{type(x).__name__}")
        step = self._module.train_step if self.training else self._module.eval_step
        outputs = step(arrays)
        if as_torch:
            import torch

            outputs = [torch.from_numpy(o) for o in outputs]
        return outputs[0] if len(outputs) == 1 else tuple(outputs)

    def train(self, mode: bool = True) -> Module:
        """Train mode (``mode=True``) runs train steps; returns the module."""
        self.training = bool(mode)
        return self

    def eval(self) -> Module:
        """Eval mode: calls run the eval model."""
        return self.train(False)

    def lazy_reset_grad(self) -> None:
        """The next train step overwrites the gradients instead of adding to them."""
        self._module.lazy_reset_grad()

    def get_parameters_size(self, trainable_only: bool = False) -> int:
        """Number of parameter elements (all, or the trainable ones); known from the model even
        for a nominal checkpoint."""
        return int(self._module.parameters_size(bool(trainable_only)))

    def get_contiguous_parameters(self, trainable_only: bool = False) -> np.ndarray:
        """The float32 parameters concatenated in training-model input order."""
        return self._module.copy_parameters_to_buffer(bool(trainable_only))

    def copy_buffer_to_parameters(self, buffer: Any, trainable_only: bool = True) -> None:
        """The inverse of get_contiguous_parameters; completes a nominal checkpoint."""
        if _is_torch(buffer):
            buffer = buffer.detach().cpu().contiguous().numpy()
        if not isinstance(buffer, np.ndarray):
            raise TypeError(f"buffer must be a numpy array or a torch tensor, got {type(buffer).__name__}")
        self._module.copy_buffer_to_parameters(np.ascontiguousarray(buffer), bool(trainable_only))

    def export_model_for_inferencing(self, inference_model_uri: str | os.PathLike,
                                     graph_output_names: list[str]) -> None:
        """Writes an inference model: the eval model cut to ``graph_output_names``, parameters
        as initializers, standard ONNX ops only (runs in stock onnxruntime)."""
        if isinstance(graph_output_names, str) or not isinstance(graph_output_names, list | tuple):
            raise TypeError("graph_output_names must be a list of output names")
        data = typed_outputs(self._module.export_model_for_inferencing(list(graph_output_names)))
        with open(os.fspath(inference_model_uri), "wb") as f:
            f.write(data)

    def input_names(self) -> list[str]:
        """User inputs of the current mode's model (parameters and gradients left out)."""
        return list(self._module.input_names(self.training))

    def output_names(self) -> list[str]:
        """User outputs of the current mode's model (gradient flags left out)."""
        return list(self._module.output_names(self.training))
