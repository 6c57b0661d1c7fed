"""Building blocks for on-device training artifacts, mirroring ONNX Runtime Training's
``onnxruntime.training.onnxblock``: blocks build into the model of an open ``base`` or
``empty_base`` context."""

from ortmodule.training.onnxblock import blocks, loss, optim
from ortmodule.training.onnxblock.blocks import Block
from ortmodule.training.onnxblock.checkpoint_utils import load_checkpoint_to_model, save_checkpoint
from ortmodule.training.onnxblock.model_accessor import base, custom_op_library, empty_base
from ortmodule.training.onnxblock.onnxblock import ForwardBlock, TrainingBlock

__all__ = [
    "Block",
    "ForwardBlock",
    "TrainingBlock",
    "base",
    "blocks",
    "custom_op_library",
    "empty_base",
    "load_checkpoint_to_model",
    "loss",
    "optim",
    "save_checkpoint",
]
