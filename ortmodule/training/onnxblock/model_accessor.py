"""The model that blocks build into: the contexts ``base`` and ``empty_base``."""

from __future__ import annotations

import copy
import os
from collections.abc import Iterator
from contextlib import contextmanager

import onnx

# The IR version written into models built from scratch. ONNX Runtime Training 1.19 reads IR
# versions up to 10 (what its onnx 1.16 writes), so the optimizer model stays loadable there.
EMPTY_BASE_IR_VERSION = 10


class ModelAccessor:
    """Holds the model the blocks of the current context manipulate."""

    def __init__(self, model: onnx.ModelProto, model_path: str | os.PathLike | None = None):
        self._model = model
        self._path = None if model_path is None else os.fspath(model_path)

    @property
    def model(self) -> onnx.ModelProto:
        return self._model

    @property
    def path(self) -> str:
        if self._path is None:
            raise RuntimeError("this onnxblock context was opened on a ModelProto, not on a model path")
        return self._path

    @property
    def has_path(self) -> bool:
        return self._path is not None


_GLOBAL_ACCESSOR: ModelAccessor | None = None


def current() -> ModelAccessor:
    """The accessor of the open ``base``/``empty_base`` context."""
    if _GLOBAL_ACCESSOR is None:
        raise RuntimeError(
            "no onnxblock model context is open: call blocks inside `with onnxblock.base(model):` or "
            "`with onnxblock.empty_base():`"
        )
    return _GLOBAL_ACCESSOR


@contextmanager
def _open(accessor: ModelAccessor) -> Iterator[ModelAccessor]:
    global _GLOBAL_ACCESSOR
    if _GLOBAL_ACCESSOR is not None:
        raise RuntimeError("an onnxblock model context is already open; contexts do not nest")
    _GLOBAL_ACCESSOR = accessor
    try:
        yield accessor
    finally:
        _GLOBAL_ACCESSOR = None


@contextmanager
def base(model: onnx.ModelProto, model_path: str | os.PathLike | None = None) -> Iterator[ModelAccessor]:
    """Blocks called inside this context build into a copy of ``model``; the result is
    ``accessor.model``. ``model_path`` only records where the model came from."""
    if model is None:
        raise RuntimeError(
            "onnxblock.base: the base model is None; use onnxblock.empty_base() to build a model from scratch"
        )
    if not isinstance(model, onnx.ModelProto):
        raise TypeError(f"onnxblock.base: expected an onnx.ModelProto, got {type(model).__name__}")
    with _open(ModelAccessor(copy.deepcopy(model), model_path)) as accessor:
        yield accessor


@contextmanager
def empty_base(opset_version: int | None = None) -> Iterator[ModelAccessor]:
    """Blocks called inside this context build into a new empty model importing the default
    domain at ``opset_version`` (default: the newest onnx knows) and com.microsoft v1."""
    opset = opset_version or onnx.defs.onnx_opset_version()
    model = onnx.ModelProto()
    # Opsets past 21 need a newer IR version than the one the reference runtime reads.
    default_domain = onnx.helper.make_opsetid("", opset)
    model.ir_version = max(EMPTY_BASE_IR_VERSION, onnx.helper.find_min_ir_version_for([default_domain]))
    model.producer_name = "orttraining"
    model.graph.name = "graph"
    model.opset_import.extend((onnx.helper.make_opsetid("com.microsoft", 1), default_domain))
    with _open(ModelAccessor(model)) as accessor:
        yield accessor


@contextmanager
def custom_op_library(custom_op_library_path: str | os.PathLike) -> Iterator[None]:
    """Custom op libraries are shared objects compiled against the ONNX Runtime C API; the
    ortmodule engine has no loader for them, so gradient building cannot use their ops."""
    raise NotImplementedError(
        f"custom op library {os.fspath(custom_op_library_path)!r}: custom op libraries are not supported: the "
        "ortmodule engine builds gradient graphs only from its own op table and cannot load ONNX Runtime "
        "custom op shared libraries"
    )
    yield  # pragma: no cover - makes this a generator for contextmanager
