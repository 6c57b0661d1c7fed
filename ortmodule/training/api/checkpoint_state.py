"""CheckpointState: parameters, optimizer state and properties of on-device training."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, MutableMapping

import numpy as np

from ortmodule import _C

PathLike = str | os.PathLike


def _as_numpy(value: object, what: str) -> np.ndarray:
    try:
        import torch

        if isinstance(value, torch.Tensor):
            return value.detach().cpu().contiguous().numpy()
    except ImportError:  # pragma: no cover - torch is a dependency
        pass
    if isinstance(value, np.ndarray):
        return np.ascontiguousarray(value)
    raise TypeError(f"{what} must be a numpy array or a torch tensor, got {type(value).__name__}")


class Parameter:
    """One parameter of a checkpoint: ``data`` (settable, same dtype and shape), ``grad``
    (the accumulated gradient; None for frozen parameters) and ``requires_grad``."""

    def __init__(self, state: _C.TrainingState, name: str) -> None:
        self._state = state
        self._name = name

    @property
    def name(self) -> str:
        return self._name

    @property
    def requires_grad(self) -> bool:
        return self._state.requires_grad(self._name)

    @property
    def data(self) -> np.ndarray:
        return self._state.get_parameter(self._name)

    @data.setter
    def data(self, value: object) -> None:
        self._state.set_parameter(self._name, _as_numpy(value, f"parameter '{self._name}'"))

    @property
    def grad(self) -> np.ndarray | None:
        return self._state.get_grad(self._name)

    def __repr__(self) -> str:
        dtype, shape = self._state.parameter_info(self._name)
        return (f"Parameter(name={self._name!r}, dtype={dtype}, shape={tuple(shape)}, "
                f"requires_grad={self.requires_grad})")


class Parameters(Mapping[str, Parameter]):
    """name -> Parameter, iterated in sorted name order."""

    def __init__(self, state: _C.TrainingState) -> None:
        self._state = state

    def __getitem__(self, name: str) -> Parameter:
        if name not in self._state.parameter_names():
            raise KeyError(f"the checkpoint has no parameter {name!r}")
        return Parameter(self._state, name)

    def __iter__(self) -> Iterator[str]:
        return iter(self._state.parameter_names())

    def __len__(self) -> int:
        return len(self._state.parameter_names())


class Properties(MutableMapping[str, int | float | str]):
    """User properties saved with the checkpoint: int (int64), float (float32) or str."""

    def __init__(self, state: _C.TrainingState) -> None:
        self._state = state

    def __getitem__(self, name: str) -> int | float | str:
        props = self._state.properties()
        if name not in props:
            raise KeyError(f"the checkpoint has no property {name!r}")
        return props[name]

    def __setitem__(self, name: str, value: float | str) -> None:
        if not isinstance(name, str):
            raise TypeError(f"property names are str, got {type(name).__name__}")
        self._state.set_property(name, value)

    def __delitem__(self, name: str) -> None:
        self._state.remove_property(name)

    def __iter__(self) -> Iterator[str]:
        return iter(self._state.properties())

    def __len__(self) -> int:
        return len(self._state.properties())


class CheckpointState:
    """The state a Module trains: load it from a checkpoint file, save it back."""

    def __init__(self, state: _C.TrainingState) -> None:
        if not isinstance(state, _C.TrainingState):
            raise TypeError("use CheckpointState.load_checkpoint(path) to create a checkpoint state")
        self._state = state

    @classmethod
    def load_checkpoint(cls, checkpoint_uri: PathLike | bytes) -> CheckpointState:
        """From a checkpoint file (or its bytes)."""
        if isinstance(checkpoint_uri, bytes | bytearray):
            return cls(_C.TrainingState.from_bytes(bytes(checkpoint_uri), "<checkpoint bytes>"))
        path = os.fspath(checkpoint_uri)
        with open(path, "rb") as f:
            data = f.read()
        return cls(_C.TrainingState.from_bytes(data, path))

    @classmethod
    def save_checkpoint(cls, state: CheckpointState, checkpoint_uri: PathLike,
                        include_optimizer_state: bool = False) -> None:
        """Writes the parameters and properties, and the optimizer state when asked."""
        if not isinstance(state, CheckpointState):
            raise TypeError(f"state must be a CheckpointState, got {type(state).__name__}")
        state._state.save(os.fspath(checkpoint_uri), bool(include_optimizer_state))

    @property
    def parameters(self) -> Parameters:
        return Parameters(self._state)

    @property
    def properties(self) -> Properties:
        return Properties(self._state)

    @property
    def is_nominal(self) -> bool:
        """True while the parameters hold no values (a nominal checkpoint not yet filled by
        Module.copy_buffer_to_parameters)."""
        return self._state.is_nominal
