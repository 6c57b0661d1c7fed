"""The graph-cache key of a call, component by component: the one contract between module.py
(which builds it for every call that misses the fast path and looks the graph up by it) and
_C.StepCall (csrc/python/step_runner.cpp), which reads the same fields from the key of the
call it was made from and checks each of them on later calls in C++. StepCall refuses a key
with a field it does not check, so a component added here cannot be left unchecked there
(tests/python/test_call_key.py changes each component alone and sees both paths miss).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from ortmodule import _autocast, _schema


@dataclass(frozen=True)
class CallKey:
    # Structure of the arguments and their non-tensor values (StepCall serves calls of
    # tensors only, with the same number of positional arguments and the same keywords).
    inputs: _schema.Spec
    # Per flattened tensor: dtype, rank, requires_grad under grad mode, device.
    tensors: tuple[_schema.TensorSignature, ...]
    # The training flag of every module, the wrapped one first.
    training: tuple[bool, ...]
    grad: bool  # torch.is_grad_enabled()
    # Per parameter: dtype, device, and whether it requires grad under grad mode.
    params: tuple[tuple[torch.dtype, torch.device, bool], ...]
    # (device type, dtype, cache enabled) of the enabled autocast region, () outside one.
    autocast: tuple


def call_key(in_spec: _schema.Spec, tensors: list[torch.Tensor], modules: list[Any],
             param_slots: list[tuple[Any, str]]) -> CallKey:
    grad = torch.is_grad_enabled()
    return CallKey(
        in_spec,
        _schema.signature(tensors),
        tuple(m.training for m in modules),
        grad,
        tuple((p.dtype, p.device, grad and p.requires_grad)
              for p in (m._parameters[n] for m, n in param_slots)),
        _autocast.state(),
    )
