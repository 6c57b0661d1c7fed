"""Debugging ORTModule against eager PyTorch.

``check_parity(model, *inputs)`` compares one call's outputs and gradients with eager
PyTorch and, where they differ, shrinks the lowered graph to the smallest subgraph that
still differs and writes it as a runnable repro (``ortmodule_repro/repro.py``).
``DebugOptions(minify=True)`` (``ORTMODULE_MINIFY=1``) runs that check on the first call of
every new graph and raises ``ParityError`` where it fails.
"""

from ortmodule.debug.compare import Mismatch
from ortmodule.debug.minify import Finding
from ortmodule.debug.parity import ParityError, ParityReport, check_parity

__all__ = ["Finding", "Mismatch", "ParityError", "ParityReport", "check_parity"]
