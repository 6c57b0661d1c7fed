"""Typed, frozen options. Environment variables (ORTMODULE_*) only override them."""

from __future__ import annotations

import enum
import logging
import os
from dataclasses import dataclass, replace

EXPORTERS = ("dynamo", "torchscript")


class LogLevel(enum.IntEnum):
    VERBOSE = 0
    INFO = 1
    WARNING = 2
    ERROR = 3
    FATAL = 4

    def to_logging(self) -> int:
        return {
            LogLevel.VERBOSE: logging.DEBUG,
            LogLevel.INFO: logging.INFO,
            LogLevel.WARNING: logging.WARNING,
            LogLevel.ERROR: logging.ERROR,
            LogLevel.FATAL: logging.CRITICAL,
        }[self]


@dataclass(frozen=True)
class DebugOptions:
    """What ORTModule reports and saves.

    save_onnx writes, for every compiled graph, ``<onnx_prefix>_<mode>_forward.onnx``
    (the exported model) and ``<onnx_prefix>_<mode>_training.onnx`` (forward plus the
    gradient graph built by the engine) into ``save_path`` (default: the current
    directory). ``mode`` is ``training`` or ``inference``.

    exporter picks how the module is captured: ``"dynamo"`` (torch.export lowered to
    ONNX, the default) or ``"torchscript"`` (the deprecated TorchScript exporter, which
    cannot follow modern model code such as transformers' attention masks).
    """

    log_level: LogLevel = LogLevel.WARNING
    save_onnx: bool = False
    onnx_prefix: str = ""
    save_path: str | None = None
    exporter: str = "dynamo"

    def __post_init__(self) -> None:
        if not isinstance(self.log_level, LogLevel):
            raise TypeError(f"log_level must be a LogLevel, got {type(self.log_level).__name__}")
        if self.save_onnx and not self.onnx_prefix:
            raise ValueError("save_onnx=True needs a non-empty onnx_prefix to name the files")
        if self.save_path is not None and not os.path.isdir(self.save_path):
            raise ValueError(f"save_path {self.save_path!r} is not an existing directory")
        if self.exporter not in EXPORTERS:
            raise ValueError(f"exporter {self.exporter!r} is not one of {', '.join(EXPORTERS)}")

    @staticmethod
    def from_env(base: DebugOptions | None = None) -> DebugOptions:
        """Applies ORTMODULE_LOG_LEVEL, ORTMODULE_SAVE_ONNX, ORTMODULE_ONNX_PREFIX,
        ORTMODULE_SAVE_PATH, ORTMODULE_EXPORTER on top of ``base``."""
        opts = base or DebugOptions()
        changes: dict[str, object] = {}
        level = os.environ.get("ORTMODULE_LOG_LEVEL")
        if level is not None:
            try:
                changes["log_level"] = LogLevel[level.upper()]
            except KeyError:
                names = ", ".join(m.name for m in LogLevel)
                raise ValueError(f"ORTMODULE_LOG_LEVEL={level!r} is not one of {names}") from None
        save = os.environ.get("ORTMODULE_SAVE_ONNX")
        if save is not None:
            if save not in ("0", "1"):
                raise ValueError(f"ORTMODULE_SAVE_ONNX={save!r} must be 0 or 1")
            changes["save_onnx"] = save == "1"
        for env, field in (("ORTMODULE_ONNX_PREFIX", "onnx_prefix"), ("ORTMODULE_SAVE_PATH", "save_path"),
                           ("ORTMODULE_EXPORTER", "exporter")):
            value = os.environ.get(env)
            if value is not None:
                changes[field] = value
        return replace(opts, **changes) if changes else opts
