"""Offline checkpoint writing and reading (the ``ODTC`` FlatBuffers format of ONNX Runtime
Training; the engine serializes it)."""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np
import onnx
from onnx import numpy_helper


def _tensor_map(tensors: Sequence[onnx.TensorProto], nominal: bool, seen: set[str]) -> dict:
    out = {}
    for tensor in tensors:
        if tensor.name in seen:
            raise RuntimeError(f"save_checkpoint: parameter {tensor.name!r} is given more than once")
        seen.add(tensor.name)
        if nominal:
            # Only the dtype and shape of a nominal tensor are kept; np.empty touches no memory.
            dtype = onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type)
            out[tensor.name] = np.empty(tuple(tensor.dims), dtype)
        else:
            out[tensor.name] = numpy_helper.to_array(tensor)
    return out


def save_checkpoint(
    parameters: tuple[Sequence[onnx.TensorProto], Sequence[onnx.TensorProto]],
    path_to_checkpoint: str | os.PathLike,
    nominal_checkpoint: bool = False,
) -> None:
    """Write ``(trainable, frozen)`` parameters to the checkpoint file ``path_to_checkpoint``.
    A nominal checkpoint holds the names, dtypes and shapes but no values."""
    if parameters is None:
        raise RuntimeError("save_checkpoint: no parameters given (expected a (trainable, frozen) tuple)")
    trainable, frozen = parameters
    seen: set[str] = set()
    state = {
        "trainable": _tensor_map(trainable, nominal_checkpoint, seen),
        "frozen": _tensor_map(frozen, nominal_checkpoint, seen),
        "is_nominal": bool(nominal_checkpoint),
        "optimizer_groups": {},
        "properties": {},
    }
    from ortmodule import _C

    data = _C._checkpoint_serialize(state, False)
    with open(os.fspath(path_to_checkpoint), "wb") as f:
        f.write(data)


def load_checkpoint_to_model(path_to_checkpoint: str | os.PathLike, model: onnx.ModelProto) -> None:
    """Copy the checkpoint's parameter values into the initializers of ``model`` with the same
    names (in place). Initializers the checkpoint lacks are left as they are."""
    from ortmodule import _C

    path = os.fspath(path_to_checkpoint)
    with open(path, "rb") as f:
        state = _C._checkpoint_parse(f.read(), path)
    if state.get("is_nominal"):
        raise RuntimeError(
            f"load_checkpoint_to_model: {path!r} is a nominal checkpoint and holds no "
            "parameter values"
        )
    values = {**state["frozen"], **state["trainable"]}
    for i, initializer in enumerate(model.graph.initializer):
        if initializer.name not in values:
            continue
        value = np.asarray(values[initializer.name])
        expected = onnx.helper.tensor_dtype_to_np_dtype(initializer.data_type)
        if value.dtype != expected or list(value.shape) != list(initializer.dims):
            raise RuntimeError(
                f"load_checkpoint_to_model: parameter {initializer.name!r} is {value.dtype}{list(value.shape)} in "
                f"the checkpoint but {np.dtype(expected)}{list(initializer.dims)} in the model"
            )
        model.graph.initializer[i].CopyFrom(numpy_helper.from_array(value, initializer.name))
