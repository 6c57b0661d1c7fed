"""generate_artifacts: the files ONNX Runtime Training's on-device API (and ours) trains from.

From a forward ONNX model this writes, into ``artifact_directory``:
``{prefix}training_model.onnx`` (forward + loss + gradients accumulated into buffers),
``{prefix}eval_model.onnx`` (forward + loss, inference mode), ``{prefix}checkpoint`` (the
parameters), optionally ``{prefix}nominal_checkpoint`` and ``{prefix}optimizer_model.onnx``.
"""

from __future__ import annotations

import enum
import logging
import os
import pathlib

import onnx

from ortmodule.training import onnxblock

_log = logging.getLogger("ortmodule")


class LossType(enum.Enum):
    """Loss added on top of the model's first output (``loss=`` of generate_artifacts)."""

    MSELoss = 1
    CrossEntropyLoss = 2
    BCEWithLogitsLoss = 3
    L1Loss = 4


class OptimType(enum.Enum):
    """Optimizer of the optimizer model (``optimizer=`` of generate_artifacts)."""

    AdamW = 1
    SGD = 2


_LOSS_BLOCKS = {
    LossType.MSELoss: onnxblock.loss.MSELoss,
    LossType.CrossEntropyLoss: onnxblock.loss.CrossEntropyLoss,
    LossType.BCEWithLogitsLoss: onnxblock.loss.BCEWithLogitsLoss,
    LossType.L1Loss: onnxblock.loss.L1Loss,
}
_OPTIMIZER_BLOCKS = {OptimType.AdamW: onnxblock.optim.AdamW, OptimType.SGD: onnxblock.optim.SGD}


class _LossTrainingBlock(onnxblock.TrainingBlock):
    """The model's outputs (or ``loss_input_names``) go through the loss; the graph outputs are
    the loss output(s), then ``additional_output_names``."""

    def __init__(self, loss: onnxblock.Block, loss_input_names: list[str] | None,
                 additional_output_names: list[str] | None):
        super().__init__()
        self._loss = loss
        self._loss_input_names = loss_input_names
        self._additional_output_names = additional_output_names or []

    def build(self, *inputs_to_loss: str):
        if self._loss_input_names:
            inputs_to_loss = tuple(self._loss_input_names)
        loss_output = self._loss(*inputs_to_loss)
        if not self._additional_output_names:
            return loss_output
        loss_outputs = loss_output if isinstance(loss_output, tuple) else (loss_output,)
        return (*loss_outputs, *self._additional_output_names)


def _load_model(model) -> tuple[onnx.ModelProto, str | None]:
    if isinstance(model, onnx.ModelProto):
        return model, None
    if isinstance(model, (str, os.PathLike)):
        path = os.fspath(model)
        return onnx.load(path), path
    raise RuntimeError(
        f"generate_artifacts: model must be an onnx.ModelProto or a path to an ONNX file, got {type(model).__name__}"
    )


def _loss_block(loss) -> onnxblock.Block:
    if loss is None:
        return onnxblock.blocks.PassThrough()
    if isinstance(loss, LossType):
        return _LOSS_BLOCKS[loss]()
    if isinstance(loss, onnxblock.Block):
        return loss
    raise RuntimeError(
        f"generate_artifacts: unknown loss {loss!r} of type {type(loss).__name__}; expected a LossType "
        f"({', '.join(m.name for m in LossType)}), an onnxblock.Block or None"
    )


def _optimizer_block(optimizer) -> onnxblock.Block | None:
    if optimizer is None:
        return None
    if isinstance(optimizer, OptimType):
        return _OPTIMIZER_BLOCKS[optimizer]()
    if isinstance(optimizer, onnxblock.Block):
        return optimizer
    raise TypeError(
        f"generate_artifacts: unknown optimizer {optimizer!r} of type {type(optimizer).__name__}; expected an "
        f"OptimType ({', '.join(m.name for m in OptimType)}), an onnxblock.Block or None"
    )


def _default_opset(model: onnx.ModelProto) -> int | None:
    for opset in model.opset_import:
        if opset.domain in ("", "ai.onnx"):
            return opset.version
    return None


def generate_artifacts(
    model: onnx.ModelProto | str | os.PathLike,
    requires_grad: list[str] | None = None,
    frozen_params: list[str] | None = None,
    loss: LossType | onnxblock.Block | None = None,
    optimizer: OptimType | onnxblock.Block | None = None,
    artifact_directory: str | os.PathLike | None = None,
    prefix: str = "",
    ort_format: bool = False,
    custom_op_library: str | os.PathLike | None = None,
    additional_output_names: list[str] | None = None,
    nominal_checkpoint: bool = False,
    loss_input_names: list[str] | None = None,
) -> None:
    """Write the training, eval and optimizer models and the checkpoint for ``model``.

    requires_grad / frozen_params: names of initializers (a graph input may also require a
    gradient) that are trainable / frozen parameters; other initializers stay constants.
    loss: a LossType (reduction "mean"), a custom onnxblock.Block, or None (the model's outputs
    pass through and the first one is the loss). loss_input_names: only these names go to the
    loss. additional_output_names: graph outputs kept after the loss output(s).
    optimizer: an OptimType, an onnxblock optimizer Block, or None (no optimizer model).
    nominal_checkpoint: also write a checkpoint with shapes and dtypes but no values.
    ort_format and custom_op_library are not supported (see the errors they raise).
    """
    if ort_format:
        raise NotImplementedError(
            "generate_artifacts: ort_format=True is not supported: ortmodule has no writer for the ONNX "
            "Runtime .ort (FlatBuffers model) format; the .onnx artifacts load in both runtimes"
        )
    if custom_op_library is not None:
        with onnxblock.custom_op_library(custom_op_library):
            pass  # raises NotImplementedError naming the library
    if additional_output_names is not None and not isinstance(additional_output_names, list):
        raise RuntimeError(
            "generate_artifacts: additional_output_names must be a list of output names, got "
            f"{type(additional_output_names).__name__} ({additional_output_names!r})"
        )
    both = [name for name in (requires_grad or []) if name in set(frozen_params or [])]
    if both:
        raise RuntimeError(
            f"generate_artifacts: parameter(s) {both} are in both requires_grad and frozen_params; a parameter "
            "cannot be frozen and require a gradient at the same time"
        )

    base_model, model_path = _load_model(model)
    loss_block = _loss_block(loss)
    optim_block = _optimizer_block(optimizer)

    training_block = _LossTrainingBlock(loss_block, loss_input_names, additional_output_names)
    for name in requires_grad or []:
        training_block.requires_grad(name)
    for name in frozen_params or []:
        training_block.requires_grad(name, False)

    with onnxblock.base(base_model, model_path):
        training_block(*[output.name for output in base_model.graph.output])
        training_model, eval_model = training_block.to_model_proto()
        parameters = training_block.parameters()

    directory = pathlib.Path.cwd() if artifact_directory is None else pathlib.Path(artifact_directory)
    directory.mkdir(parents=True, exist_ok=True)
    _save(training_model, directory / f"{prefix}training_model.onnx")
    _save(eval_model, directory / f"{prefix}eval_model.onnx")
    checkpoint_path = directory / f"{prefix}checkpoint"
    onnxblock.save_checkpoint(parameters, checkpoint_path, nominal_checkpoint=False)
    _log.info("saved checkpoint to %s", checkpoint_path)
    if nominal_checkpoint:
        nominal_path = directory / f"{prefix}nominal_checkpoint"
        onnxblock.save_checkpoint(parameters, nominal_path, nominal_checkpoint=True)
        _log.info("saved nominal checkpoint to %s", nominal_path)

    if optim_block is None:
        _log.info("no optimizer given: no optimizer model written")
        return
    with onnxblock.empty_base(opset_version=_default_opset(base_model)):
        optim_block(parameters)
        optim_model = optim_block.to_model_proto()
    _save(optim_model, directory / f"{prefix}optimizer_model.onnx")


def _save(model: onnx.ModelProto, path: pathlib.Path) -> None:
    if path.exists():
        _log.info("overwriting %s", path)
    onnx.save(model, path)
    _log.info("saved %s", path)
