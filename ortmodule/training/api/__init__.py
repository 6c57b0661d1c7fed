"""On-device training runtime: train ONNX training artifacts (from
``ortmodule.training.artifacts.generate_artifacts`` or ONNX Runtime Training) on this engine.

    state = CheckpointState.load_checkpoint("artifacts/checkpoint")
    module = Module("artifacts/training_model.onnx", state, "artifacts/eval_model.onnx")
    optimizer = Optimizer("artifacts/optimizer_model.onnx", module)
    for x, y in batches:
        loss = module(x, y)
        optimizer.step()
        module.lazy_reset_grad()
"""

from ortmodule.training.api.checkpoint_state import CheckpointState, Parameter
from ortmodule.training.api.lr_scheduler import LinearLRScheduler
from ortmodule.training.api.module import Module
from ortmodule.training.api.optimizer import Optimizer

__all__ = ["CheckpointState", "LinearLRScheduler", "Module", "Optimizer", "Parameter"]
