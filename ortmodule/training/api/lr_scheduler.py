"""LinearLRScheduler: linear warm-up, then linear decay to zero."""

from __future__ import annotations

from ortmodule import _C
from ortmodule.training.api.optimizer import Optimizer


class LinearLRScheduler:
    """lr = initial_lr * f(s) for the optimizer's step count s, with
    f(s) = s / max(1, warmup_step_count) during warm-up (s < warmup_step_count), then
    f(s) = max(0, (total_step_count - s) / max(1, total_step_count - warmup_step_count)).

    Creating the scheduler sets the learning rate for the current step; call ``step()`` after
    every ``Optimizer.step()``.
    """

    def __init__(self, optimizer: Optimizer, warmup_step_count: int, total_step_count: int,
                 initial_lr: float) -> None:
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"optimizer must be an Optimizer, got {type(optimizer).__name__}")
        self._scheduler = _C.LinearLRScheduler(optimizer._optimizer, int(warmup_step_count),
                                               int(total_step_count), float(initial_lr))

    def step(self) -> None:
        self._scheduler.step()
