"""Bridge nodes: parts of a model that run on PyTorch inside an engine graph.

An engine ``ai.ortmodule::TorchCall`` node runs its forward on PyTorch (at::Tensors that
share the engine's memory) and its backward through autograd over the recorded call
(csrc/python/torch_call.cpp). Capture makes such nodes for

- custom ``torch.autograd.Function`` subclasses: ``apply`` of a user Function is traced as
  the custom op ``ortmodule::torch_call(callable_id, tensors)``, so the engine
  calls the Function's own forward and backward (torch.export would inline its forward and
  replace the backward by the gradient of the inlined ops);
- ATen ops the engine lacks, with ``FallbackPolicy.UNSUPPORTED_OP``: the lowering
  translates the op into a TorchCall that names the op and encodes its other arguments;
  the engine calls it through the dispatcher, without Python.

``torch.utils.checkpoint`` regions are not bridged: they stay in the engine graph, their
nodes tagged so that the engine recomputes them during backward instead of keeping their
activations.

This module is the trace-time half: while torch.export traces, a capture session
intercepts ``Function.apply`` and checkpoint and records the calls. Each lowering turns the
records into nodes (``fx/ops/bridge.py``, ``torch_onnx/aten_bridge.py``).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import torch
import torch.fx.traceback
import torch.utils._pytree as pytree
import torch.utils.checkpoint

from ortmodule import _C
from ortmodule.capture.common import REGION_KEY, ExportError

logger = logging.getLogger("ortmodule")


class BridgeError(ExportError):
    """A part of the model that should run on PyTorch cannot be bridged."""


def qualified_name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


class CallableLease:
    """Keeps the Python callables of one compiled graph registered with the engine and
    releases them when the graph is dropped (or the capture fails). ``ids`` is a live
    view: callables registered while the capture runs are covered too."""

    def __init__(self, ids: Iterable[int]) -> None:
        self.ids = ids

    def __del__(self) -> None:
        release = getattr(_C, "release_callable", None)  # None while the interpreter exits
        if release is not None:
            for i in self.ids:
                release(i)


# ---- the custom op that stands for a bridged call while torch.export traces ----

_op_lock = threading.Lock()
_torch_call_op: Any = None


def torch_call_op() -> Any:
    """``torch.ops.ortmodule.torch_call.default``, defined on first use."""
    global _torch_call_op
    with _op_lock:
        if _torch_call_op is None:
            @torch.library.custom_op("ortmodule::torch_call", mutates_args=())
            def torch_call(callable_id: int, inputs: list[torch.Tensor]) -> list[torch.Tensor]:
                return [t.clone() for t in call_of(callable_id).run(*inputs)]

            @torch_call.register_fake
            def _(callable_id: int, inputs: list[torch.Tensor]) -> list[torch.Tensor]:
                return call_of(callable_id).fake(inputs)

            _torch_call_op = torch.ops.ortmodule.torch_call.default
    return _torch_call_op


# ---- ATen ops bridged as TorchCall nodes: their arguments as node attributes ----

ATEN_DTYPE_CODES = {torch.float32: 1, torch.uint8: 2, torch.int8: 3, torch.uint16: 4, torch.int16: 5,
           torch.int32: 6, torch.int64: 7, torch.bool: 9, torch.float16: 10, torch.float64: 11,
           torch.uint32: 12, torch.uint64: 13, torch.bfloat16: 16}


def _kind(arg_type: torch._C.JitType) -> torch._C.JitType:
    return arg_type.getElementType() if isinstance(arg_type, torch._C.OptionalType) else arg_type


def encode_argument(value: Any, arg: torch._C.Argument, inputs: list[Any], op: str,
                    is_value: Callable[[Any], bool]) -> str:
    """One argument of an ATen op bridged as a TorchCall node, as the string
    csrc/python/torch_call.cpp decodes; the lowering's values (``is_value``: tensors and
    symbolic ints) become node inputs, appended to ``inputs``."""
    kind = _kind(arg.type)
    if is_value(value):
        inputs.append(value)
        return "t" if isinstance(kind, torch._C.TensorType) else "v"  # "v": a symbolic int
    if value is None or (str(_kind(arg.real_type)) == "ScalarType" and value == -1):
        return "n"  # the exporter passes dtype=None as -1
    if isinstance(value, bool):
        return f"b:{int(value)}"
    if isinstance(value, torch.dtype):
        return f"i:{ATEN_DTYPE_CODES[value]}"
    if isinstance(value, int):
        return f"i:{int(value)}"  # an ONNX DataType (an IntEnum) for dtypes
    if isinstance(value, float):
        return f"f:{value.hex()}"
    if isinstance(value, (str, torch.device, torch.layout, torch.memory_format)):
        return f"s:{value}"
    if isinstance(value, (list, tuple)):
        if isinstance(kind, torch._C.ListType) and not isinstance(
                _kind(kind.getElementType()), (torch._C.IntType, torch._C.FloatType,
                                               torch._C.BoolType, torch._C.SymIntType)):
            codes = "".join("n" if v is None else "t" for v in value)
            inputs.extend(v for v in value if v is not None)
            return f"T:{codes}"
        if all(isinstance(v, bool) for v in value) and value:
            return "B:" + ",".join(str(int(v)) for v in value)
        if all(isinstance(v, int) or is_value(v) for v in value):
            inputs.extend(v for v in value if is_value(v))
            return "I:" + ",".join("v" if is_value(v) else str(v) for v in value)
        if all(isinstance(v, (int, float)) for v in value):
            return "F:" + ",".join(float(v).hex() for v in value)
    raise NotImplementedError(f"{op}: argument '{arg.name}' = {value!r} cannot be passed to "
                              "PyTorch from the engine")


def bridge_refusal(op: Any) -> str:
    """Why ``op`` cannot run on PyTorch as a TorchCall node ("" when it can): only
    dispatcher ops that return tensors and write none of their arguments can."""
    if not isinstance(op, torch._ops.OpOverload):
        return f"{op} is not a PyTorch operator the dispatcher can call"
    schema = op._schema
    for arg in schema.arguments:
        if arg.alias_info is not None and arg.alias_info.is_write:
            return (f"{schema.name} writes its argument '{arg.name}' in place, which a "
                    "bridged call cannot do to the engine's memory")
    for ret in schema.returns:
        kind = _kind(ret.type)
        if isinstance(kind, torch._C.ListType):
            kind = _kind(kind.getElementType())
        if not isinstance(kind, torch._C.TensorType):
            return f"{schema.name} returns {ret.type}; a bridged op must return tensors"
    if not schema.returns:
        return f"{schema.name} returns nothing"
    return ""


# ---- capture session: intercepts Function.apply and checkpoint while tracing ----

_ORIGINAL_APPLY = torch.autograd.Function.__dict__["apply"]
_ORIGINAL_NONREENTRANT = torch.utils.checkpoint._checkpoint_without_reentrant_generator
# Function.apply ends in ``super().apply(...)``, which finds this class's attribute first: the
# hook installed there also sees calls through an ``apply`` bound before the capture
# (``quantize = Quantize.apply`` at import time).
_HOOK_CLASS = torch.autograd.function._SingleLevelFunction


class _Session:
    def __init__(self) -> None:
        self.thread = threading.get_ident()  # the patches act on the capturing thread only
        self.calls: dict[int, FunctionCall] = {}
        self.regions = 0
        self.depth = 0  # > 0 while a bridged Function's own forward runs (not bridged again)


_session: _Session | None = None
_capture_lock = threading.Lock()  # one capture at a time: the patches are process-wide


def call_of(callable_id: int) -> FunctionCall:
    """The bridged call registered as ``callable_id`` by the capture running now."""
    call = _session.calls.get(callable_id) if _session else None
    if call is None:
        raise RuntimeError(f"ortmodule::torch_call #{callable_id} ran outside the capture that "
                           "made it")
    return call


def _apply_original(cls: type, *args: Any, **kwargs: Any) -> Any:
    """Function.apply as a user calls it."""
    return _ORIGINAL_APPLY.__func__(cls, *args, **kwargs)


def _apply_base(cls: type, *args: Any, **kwargs: Any) -> Any:
    """What Function.apply's ``super().apply`` runs without the hook."""
    return super(_HOOK_CLASS, cls).apply(*args, **kwargs)


class FunctionCall:
    """One call site of a custom autograd Function: the class, its non-tensor arguments
    and where the tensors go. ``run`` is what the engine calls every step."""

    def __init__(self, cls: type, spec: Any, flat: list[Any], positions: list[int]) -> None:
        self.cls = cls
        self.name = qualified_name(cls)
        self.spec = spec
        self.flat = [None if i in positions else a for i, a in enumerate(flat)]
        self.positions = positions
        self.out_spec: Any = None
        self.out_flat: list[Any] = []
        self.out_positions: list[int] = []

    def _apply(self, tensors: Sequence[torch.Tensor]) -> Any:
        flat = list(self.flat)
        for p, t in zip(self.positions, tensors):
            flat[p] = t
        args, kwargs = pytree.tree_unflatten(flat, self.spec)
        return _apply_original(self.cls, *args, **kwargs)

    def run(self, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        out = pytree.tree_leaves(self._apply(tensors))
        return tuple(out[p] for p in self.out_positions)

    def fake(self, inputs: list[torch.Tensor]) -> list[torch.Tensor]:
        """Runs the Function's forward on the tracer's symbolic tensors: the output
        structure, dtypes and symbolic shapes."""
        versions = [t._version for t in inputs]
        _session.depth += 1
        try:
            out = self._apply(inputs)
        except Exception as e:
            raise BridgeError(
                f"torch.autograd.Function {self.name} cannot run inside ORTModule: its forward "
                f"failed on the exporter's symbolic tensors ({type(e).__name__}: {e}). Its forward "
                "must not read tensor values (.item(), .tolist(), numpy); move such code out of "
                "the Function or out of the wrapped module"
            ) from e
        finally:
            _session.depth -= 1
        if any(t._version != v for t, v in zip(inputs, versions)):
            raise BridgeError(
                f"torch.autograd.Function {self.name} modifies an input in place "
                "(ctx.mark_dirty), which ORTModule cannot run: the engine may still read the "
                "input's old value. Return a new tensor instead")
        flat, self.out_spec = pytree.tree_flatten(out)
        self.out_positions = [i for i, o in enumerate(flat) if isinstance(o, torch.Tensor)]
        if not self.out_positions:
            raise BridgeError(f"torch.autograd.Function {self.name} returns no tensor")
        self.out_flat = [None if i in self.out_positions else o for i, o in enumerate(flat)]
        # A custom op's outputs are new tensors, never its inputs or views of them.
        return [flat[p].clone() for p in self.out_positions]

    def rebuild(self, tensors: Sequence[torch.Tensor]) -> Any:
        flat = list(self.out_flat)
        for p, t in zip(self.out_positions, tensors):
            flat[p] = t
        return pytree.tree_unflatten(flat, self.out_spec)


def _active() -> _Session | None:
    session = _session
    if session is None or session.thread != threading.get_ident() or session.depth > 0:
        return None
    return session


def _bridged_apply(cls: type, *args: Any, **kwargs: Any) -> Any:
    session = _active()
    if session is None:
        return _apply_base(cls, *args, **kwargs)
    if cls is torch.utils.checkpoint.CheckpointFunction:
        function, _preserve_rng_state, *rest = args
        return _checkpoint_region(session, function, rest, reentrant=True)
    if cls.__module__.split(".")[0] == "torch":
        return _apply_base(cls, *args, **kwargs)  # PyTorch's own Functions trace as usual
    flat, spec = pytree.tree_flatten((args, kwargs))
    positions = [i for i, a in enumerate(flat) if isinstance(a, torch.Tensor)]
    if not positions:
        return _apply_base(cls, *args, **kwargs)
    call = FunctionCall(cls, spec, flat, positions)
    callable_id = _C.register_callable(call.run)
    session.calls[callable_id] = call
    outputs = torch_call_op()(callable_id, [flat[p] for p in positions])
    return call.rebuild(outputs)


def _checkpoint_region(session: _Session, function: Callable, args: Sequence[Any],
                       reentrant: bool) -> Any:
    session.regions += 1
    with torch.fx.traceback.annotate({REGION_KEY: session.regions}):
        out = function(*args)
    if reentrant and torch.is_grad_enabled() and not any(
            isinstance(a, torch.Tensor) and a.requires_grad for a in args):
        # Eager reentrant checkpoint: without an input that requires grad, its outputs do
        # not either (PyTorch warns "None of the inputs have requires_grad=True").
        logger.warning(
            "ortmodule: none of the inputs of a torch.utils.checkpoint region with "
            "use_reentrant=True requires grad; as in eager PyTorch, its outputs do not "
            "require grad and the parameters inside get no gradient (pass "
            "use_reentrant=False to train them)")
        out = pytree.tree_map(lambda t: t.detach() if isinstance(t, torch.Tensor) else t, out)
    return out


def _region_generator(function: Callable, *args: Any, **kwargs: Any) -> Iterator[None]:
    """Stands for checkpoint's non-reentrant context while tracing: the region's ops are
    tagged instead of wrapped in saved-tensor hooks."""
    session = _active()
    if session is None:
        yield from _ORIGINAL_NONREENTRANT(function, *args, **kwargs)
        return
    session.regions += 1
    with torch.fx.traceback.annotate({REGION_KEY: session.regions}):
        yield


@contextlib.contextmanager
def capture_session() -> Iterator[_Session]:
    """While export and lowering run on this thread: bridges user Functions and tags
    checkpoint regions. The callables registered meanwhile are the caller's to lease or
    release."""
    global _session
    if _session is not None and _session.thread == threading.get_ident():
        raise RuntimeError("ORTModule cannot capture a module while capturing another one "
                           "(an ORTModule called inside a module being wrapped)")
    with _capture_lock:
        torch_call_op()
        session = _Session()
        _session = session
        _HOOK_CLASS.apply = classmethod(_bridged_apply)
        torch.utils.checkpoint._checkpoint_without_reentrant_generator = _region_generator
        try:
            with torch.fx.traceback.preserve_node_meta():
                yield session
        finally:
            del _HOOK_CLASS.apply
            torch.utils.checkpoint._checkpoint_without_reentrant_generator = \
                _ORIGINAL_NONREENTRANT
            _session = None
