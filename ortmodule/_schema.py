"""Flattening of call arguments and outputs into tensor lists plus a schema.

The schema (structure, dtypes, ranks, requires_grad, non-tensor constants) is part
of the graph-cache key: a call whose schema differs from every compiled one builds
a new graph instead of reusing a wrong one.
"""

from __future__ import annotations

import dataclasses
import struct
from dataclasses import dataclass
from typing import Any

import torch

# Schema nodes: ("T", index) for a tensor, ("C", value) for a constant, ("F", bits) for a
# float (its bit pattern: NaN equals itself, -0.0 differs from 0.0), ("S", index, type) for a
# Python number the graph computes (a traced ``.item()``: the 0-d tensor ``index``, returned
# as a float, int or bool),
# ("tuple"/"list", [children], type), ("dict", [(key, child), ...], type),
# ("dataclass", [(field, child), ...], type). The type is the container's own class (a
# namedtuple, an OrderedDict, a Hugging Face ModelOutput, ...), rebuilt on the way out.
Spec = tuple


# The Python type of each symbolic number torch.export traces, and the dtype of the 0-d tensor
# that carries it out of the graph.
_SYMBOLIC = ((torch.SymBool, bool, torch.bool), (torch.SymInt, int, torch.int64),
             (torch.SymFloat, float, torch.float64))


def flatten(obj: Any, tensors: list[torch.Tensor]) -> Spec:
    if isinstance(obj, torch.Tensor):
        tensors.append(obj)
        return ("T", len(tensors) - 1)
    for sym, python_type, dtype in _SYMBOLIC:
        if isinstance(obj, sym):  # only while torch.export traces forward
            tensors.append(torch.scalar_tensor(obj, dtype=dtype))
            return ("S", len(tensors) - 1, python_type)
    if isinstance(obj, (tuple, list)):
        kind = "tuple" if isinstance(obj, tuple) else "list"
        return (kind, tuple(flatten(o, tensors) for o in obj), type(obj))
    if isinstance(obj, dict):
        return ("dict", tuple((k, flatten(v, tensors)) for k, v in obj.items()), type(obj))
    if isinstance(obj, float):
        return ("F", struct.pack("<d", obj))
    if obj is None or isinstance(obj, (bool, int, str)):
        return ("C", obj)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return ("dataclass", tuple((f.name, flatten(getattr(obj, f.name), tensors))
                                   for f in dataclasses.fields(obj)), type(obj))
    raise TypeError(
        f"ORTModule inputs and outputs may be tensors, tuples, lists, dicts, dataclasses and "
        f"Python scalars/strings/None; got {type(obj).__name__}"
    )


def unflatten(spec: Spec, tensors: list[Any]) -> Any:
    kind, payload = spec[0], spec[1]
    if kind == "T":
        return tensors[payload]
    if kind == "C":
        return payload
    if kind == "F":
        return struct.unpack("<d", payload)[0]
    if kind == "S":
        return spec[2](tensors[payload].item())
    cls = spec[2]
    if kind == "dataclass":
        # Rebuilt field by field without calling __init__ (init=False fields keep their value).
        obj = object.__new__(cls)
        for name, s in payload:
            object.__setattr__(obj, name, unflatten(s, tensors))
        return obj
    if kind in ("tuple", "list"):
        items = [unflatten(s, tensors) for s in payload]
        if cls in (tuple, list):
            return cls(items)
        return cls(*items) if hasattr(cls, "_fields") else cls(items)  # namedtuple or other
    values = {k: unflatten(s, tensors) for k, s in payload}
    if cls is dict:
        return values
    if all(isinstance(k, str) for k in values):
        return cls(**values)
    return cls(values)


@dataclass(frozen=True)
class TensorSignature:
    dtype: torch.dtype
    rank: int
    requires_grad: bool
    device: torch.device


def signature(tensors: list[torch.Tensor]) -> tuple[TensorSignature, ...]:
    grad = torch.is_grad_enabled()
    return tuple(
        TensorSignature(t.dtype, t.dim(), grad and t.requires_grad, t.device) for t in tensors
    )
