"""How export cache entries write the values a capture holds as JSON (schemas with their
container classes, constants, attribute values, dtypes) and read them back: plain data only,
classes named by module and qualified name and resolved from modules already imported."""

from __future__ import annotations

import dataclasses
import enum
import json
import sys
from typing import Any

import torch


class Uncacheable(Exception):
    """A value of a capture that an entry cannot hold."""


# ---- JSON encoding of the values a capture holds ----


def _class_ref(cls: type) -> dict:
    if (
        "<locals>" in cls.__qualname__
        or cls.__module__ == "__main__"
        and not hasattr(sys.modules.get("__main__"), "__file__")
    ):
        raise Uncacheable(f"class {cls.__qualname__} has no importable name")
    return {"class": [cls.__module__, cls.__qualname__]}


def _resolve_class(ref: list) -> type:
    """A class named by an entry, from a module this process has imported already (an entry
    never makes the process import code)."""
    module_name, qualname = ref
    obj: Any = sys.modules.get(module_name)
    if obj is None:
        raise LookupError(f"the entry names a class of {module_name}, which is not imported")
    for part in qualname.split("."):
        obj = getattr(obj, part)
    if not isinstance(obj, type):
        raise TypeError(f"{module_name}.{qualname} is not a class")
    return obj


def encode(value: Any) -> Any:
    """A JSON value standing for ``value`` (schemas, constants, attribute values)."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, enum.Enum):
        return {"enum": _class_ref(type(value))["class"], "name": value.name}
    if isinstance(value, int):
        return value if type(value) is int else {"int": int(value)}
    if isinstance(value, float):
        return {"float": value.hex()}
    if isinstance(value, bytes):
        return {"bytes": value.hex()}
    if isinstance(value, torch.dtype):
        return {"dtype": str(value).removeprefix("torch.")}
    if isinstance(value, torch.device):
        return {"device": value.type}  # the index is the rank's, not the graph's
    if isinstance(value, type):
        return _class_ref(value)
    if isinstance(value, tuple):
        return {"tuple": [encode(v) for v in value]}
    if isinstance(value, frozenset):
        return {"frozenset": sorted((encode(v) for v in value), key=json.dumps)}
    if isinstance(value, list):
        return [encode(v) for v in value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {
            "dataclass": _class_ref(type(value))["class"],
            "fields": [[f.name, encode(getattr(value, f.name))] for f in dataclasses.fields(value)],
        }
    raise Uncacheable(f"a value of type {type(value).__name__} ({value!r:.60})")


_TAGS = ("enum", "int", "float", "bytes", "dtype", "device", "class", "tuple", "frozenset")


def decode(value: Any) -> Any:
    if isinstance(value, list):
        return [decode(v) for v in value]
    if not isinstance(value, dict):
        return value
    tag = next((k for k in _TAGS if k in value), None)
    payload = value.get(tag)
    if tag == "enum":
        return _resolve_class(payload)[value["name"]]
    if tag == "int":
        return int(payload)
    if tag == "float":
        return float.fromhex(payload)
    if tag == "bytes":
        return bytes.fromhex(payload)
    if tag == "dtype":
        dtype = getattr(torch, payload)
        if not isinstance(dtype, torch.dtype):
            raise ValueError(f"{payload} is not a torch dtype")
        return dtype
    if tag == "device":
        return torch.device(payload)
    if tag == "class":
        return _resolve_class(payload)
    if tag == "tuple":
        return tuple(decode(v) for v in payload)
    if tag == "frozenset":
        return frozenset(decode(v) for v in payload)
    raise ValueError(f"unknown tag {tag!r}")
