"""Debugging ORTModule against eager PyTorch.

``check_parity(model, *inputs)`` compares one call's outputs and gradients with eager
PyTorch and, where they differ, shrinks the lowered graph to the smallest subgraph that
still differs and writes it as a runnable repro (``ortmodule_repro/repro.py``).
``DebugOptions(minify=True)`` (``ORTMODULE_MINIFY=1``) runs that check on the first call of
every new graph and raises ``ParityError`` where it fails.
"""

from __future__ import annotations

import os
from typing import Any

import torch

from ortmodule.debug.compare import Mismatch
from ortmodule.debug.minify import Finding
from ortmodule.debug.parity import ParityError, ParityReport, compare_call
from ortmodule.module import ORTModule
from ortmodule.options import DebugOptions

__all__ = ["Finding", "Mismatch", "ParityError", "ParityReport", "check_parity"]


def check_parity(
    model: torch.nn.Module,
    *args: Any,
    rtol: float = 1e-4,
    atol: float = 1e-5,
    minify: bool = True,
    path: str | os.PathLike | None = None,
    debug_options: DebugOptions | None = None,
    seed: int = 0,
    **kwargs: Any,
) -> ParityReport:
    """Runs ``model(*args, **kwargs)`` on copies of the model (an ``nn.Module`` or an
    ORTModule) in eager PyTorch and under ORTModule and compares the outputs and, where
    gradients are enabled, the gradients of a random cotangent (``seed``) with respect to
    every parameter and every input that requires grad (``torch.isclose(engine, eager, rtol,
    atol)``). With ``minify``, where they differ the lowered graph is shrunk to its smallest
    failing subgraph and written as a repro into ``path`` (default:
    ``debug_options.save_path``, else the current directory). ``model``, its state and the
    random state are unchanged."""
    module = model.module if isinstance(model, ORTModule) else model
    return compare_call(
        ORTModule, module, args, kwargs, rtol, atol, minify, path, debug_options, seed
    )
