"""Optimizer: applies the optimizer model of training artifacts to a Module's parameters."""

from __future__ import annotations

import os

from ortmodule import _C
from ortmodule.training.api._io import read_model
from ortmodule.training.api.module import Module


class Optimizer:
    """AdamW or SGD from the optimizer model (one AdamWOptimizer or SGDOptimizerV2 node,
    optionally after InplaceClipGradNorm). The learning rate starts at 0.001."""

    def __init__(self, optimizer_uri: str | os.PathLike | bytes, module: Module) -> None:
        if not isinstance(module, Module):
            raise TypeError(f"module must be a Module, got {type(module).__name__}")
        self._module = module
        self._optimizer = _C.TrainingOptimizer(read_model(optimizer_uri, "optimizer model"),
                                               module._module)

    def step(self) -> None:
        """Updates the parameters from the accumulated gradients (which it does not reset)."""
        self._optimizer.step()

    def set_learning_rate(self, learning_rate: float) -> None:
        self._optimizer.learning_rate = float(learning_rate)

    def get_learning_rate(self) -> float:
        return float(self._optimizer.learning_rate)
