"""Reading model files and converting step inputs and outputs."""

from __future__ import annotations

import os


def read_model(uri: str | os.PathLike | bytes, what: str) -> bytes:
    if isinstance(uri, bytes | bytearray):
        return bytes(uri)
    path = os.fspath(uri)
    if not os.path.exists(path):
        raise FileNotFoundError(f"the {what} '{path}' does not exist")
    with open(path, "rb") as f:
        return f.read()


def check_device(device: str) -> None:
    if not isinstance(device, str):
        raise TypeError(f"device must be a str such as 'cpu', got {type(device).__name__}")
    if device != "cpu":
        raise ValueError(
            f"device {device!r} is not supported: the on-device training runtime runs on the CPU "
            "(device='cpu')")
