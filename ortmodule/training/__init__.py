"""On-device training: offline artifact generation (``artifacts``, ``onnxblock``) and the
runtime API (``api``), interoperable with ONNX Runtime Training 1.19.

Submodules load on first access, so ``import ortmodule.training`` costs nothing.
"""

import importlib

_SUBMODULES = ("api", "artifacts", "onnxblock")


def __getattr__(name: str):
    if name in _SUBMODULES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_SUBMODULES))
