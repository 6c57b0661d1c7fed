"""What a compiled graph depends on besides its inputs, and the cheap checks that tell
when it changed.

- The module structure (which submodules, parameters and buffers; their shapes, dtypes and
  aliasing): a counter bumped by torch's global registration hooks tells when any module
  anywhere registered or replaced a parameter, buffer or submodule; only then is the
  structure of the wrapped module walked again and compared.
- Python attribute values that forward read while it was traced (a flag, a scale, a loop
  count, a plain tensor constant): recorded during capture, compared on every call.
"""

from __future__ import annotations

import contextlib
import enum
from collections.abc import Iterator
from typing import Any

import torch

_version = [0]  # bumped on every parameter/buffer/submodule registration, in any module
_hooks_installed = [False]


def _bump(*_: Any) -> None:
    # While TorchDynamo traces a frame (torch.compile), reading the counter would make the
    # compiled frame guard on its value: a module that registers a buffer inside a
    # compiled forward (Hugging Face rotary embeddings do) would change it on every call,
    # recompile until the frame's limit and then run eagerly. Registrations replayed by a
    # compiled frame are therefore not counted; ORTModule's own capture (torch.export
    # with strict=False, or TorchScript) runs forward as plain Python and counts them.
    if torch.compiler.is_dynamo_compiling():
        return
    _version[0] += 1


def install_hooks() -> None:
    """Installs the registration hooks once (on the first ORTModule, not at import)."""
    if _hooks_installed[0]:
        return
    from torch.nn.modules import module as nn_module

    nn_module.register_module_parameter_registration_hook(_bump)
    nn_module.register_module_buffer_registration_hook(_bump)
    nn_module.register_module_module_registration_hook(_bump)
    _hooks_installed[0] = True


def structure_version() -> int:
    return _version[0]


def bump() -> None:
    """Marks every wrapped module's structure as possibly changed."""
    _bump()


def structure(module: torch.nn.Module) -> tuple:
    """The module tree as the graph sees it: submodule identities, and per parameter and
    buffer slot its shape, device, buffer dtype and which earlier slot it aliases (tied
    weights)."""
    first: dict[int, int] = {}
    slots = []
    modules = list(module.modules())
    for m in modules:
        for kind, items in (("p", m._parameters), ("b", m._buffers)):
            for name, t in items.items():
                if t is None:
                    slots.append((id(m), kind, name, None))
                    continue
                alias = first.setdefault(id(t), len(slots))
                # Parameter dtypes are part of every call's cache key (.double() keeps
                # the float32 graphs for a way back); buffer dtypes are checked here.
                dtype = t.dtype if kind == "b" else None
                slots.append((id(m), kind, name, tuple(t.shape), dtype, t.device, alias))
    return (tuple(id(m) for m in modules), tuple(slots))


# ---- attribute reads during capture ----

_MISSING = object()
_SIMPLE = (bool, int, float, str, type(None), enum.Enum, torch.dtype, torch.device)


def _is_simple(value: Any) -> bool:
    if isinstance(value, _SIMPLE):
        return True
    if isinstance(value, (tuple, frozenset)) and len(value) <= 16:
        return all(_is_simple(v) for v in value)
    return False


class AttributeGuard:
    """Attribute values forward read from the wrapped module's submodules while it was
    traced. The graph bakes them in, so a later change must build a new graph."""

    def __init__(self) -> None:
        # (instance __dict__, name, value at trace time, owner description)
        self.values: list[tuple[dict, str, Any, str]] = []
        # (instance __dict__, name, tensor, its version): plain tensor attributes (not
        # buffers) become constants of the graph.
        self.tensors: list[tuple[dict, str, torch.Tensor, int, str]] = []
        # Per entry of `values`: the value forward read first, before it set its own (the
        # export cache needs both to replay forward's setting).
        self.first_read: list[Any] = []

    def __len__(self) -> int:
        return len(self.values) + len(self.tensors)

    def holds(self) -> bool:
        for d, name, value, _ in self.values:
            current = d.get(name, _MISSING)
            if current is not value and current != value:
                return False
        for d, name, tensor, version, _ in self.tensors:
            if d.get(name, _MISSING) is not tensor or tensor._version != version:
                return False
        return True

    def changed(self) -> list[str]:
        """Descriptions of the attributes whose value changed (for the log)."""
        out = []
        for d, name, value, owner in self.values:
            current = d.get(name, _MISSING)
            if current is not value and current != value:
                shown = "<deleted>" if current is _MISSING else repr(current)
                out.append(f"{owner}.{name}: {value!r} -> {shown}")
        for d, name, tensor, version, owner in self.tensors:
            if d.get(name, _MISSING) is not tensor or tensor._version != version:
                out.append(f"{owner}.{name}: tensor replaced or modified in place")
        return out


def _is_settings_object(value: Any) -> bool:
    """An instance of a plain Python class (not a module, tensor, container, function or
    type) whose attributes forward may read."""
    if isinstance(value, (torch.nn.Module, torch.Tensor, type, enum.Enum)) or _is_simple(value):
        return False
    if isinstance(value, (list, tuple, dict, set, frozenset)) or callable(value):
        return False
    return hasattr(value, "__dict__") and type(value).__module__ not in ("builtins", "torch")


def _owners(module: torch.nn.Module) -> list[tuple[Any, str]]:
    """The objects whose attribute reads are recorded, each with its description: every
    module (its name in the tree, the wrapped one by its class name) and the plain objects
    the modules hold (a Hugging Face config, an options object), whose attributes steer
    forward just as module attributes do."""
    seen: set[int] = set()
    out: list[tuple[Any, str]] = []
    holders = list(module.named_modules())
    for name, m in holders:
        seen.add(id(m))
        out.append((m, name or type(m).__name__))
    for name, m in holders:
        for attr, value in m.__dict__.items():
            if _is_settings_object(value) and id(value) not in seen:
                seen.add(id(value))
                out.append((value, f"{name}.{attr}" if name else attr))
    return out


def attribute_owners(module: torch.nn.Module) -> dict[str, Any]:
    """Description -> object, for the owners of recorded attribute reads (the export cache
    binds a stored guard to the module of another process this way); a description two
    objects share is left out."""
    found: dict[str, Any] = {}
    shared: set[str] = set()
    for obj, desc in _owners(module):
        if desc in found:
            shared.add(desc)
        found[desc] = obj
    for desc in shared:
        del found[desc]
    return found


@contextlib.contextmanager
def record_attribute_reads(module: torch.nn.Module) -> Iterator[AttributeGuard]:
    """Records the plain attributes (in the instance ``__dict__``: flags, numbers, strings,
    tensors) that code reads from ``module`` and its submodules inside the block."""
    guard = AttributeGuard()
    owners = _owners(module)
    names = {id(obj): desc for obj, desc in owners}
    objects = [obj for obj, _ in owners]
    seen: set[tuple[int, str]] = set()
    classes = {type(o) for o in objects}
    originals = {cls: (cls.__dict__.get("__getattribute__", _MISSING), cls.__getattribute__)
                 for cls in classes}

    def make(original: Any) -> Any:
        def __getattribute__(self: Any, name: str) -> Any:
            value = original(self, name)
            key = (id(self), name)
            if key in seen or id(self) not in names or name.startswith("__"):
                return value
            d = object.__getattribute__(self, "__dict__")
            if name in d and d[name] is value:
                seen.add(key)
                owner = names[id(self)]
                if isinstance(value, torch.Tensor):
                    guard.tensors.append((d, name, value, value._version, owner))
                elif _is_simple(value):
                    guard.values.append((d, name, value, owner))
            return value

        return __getattribute__

    for cls, (_, resolved) in originals.items():
        cls.__getattribute__ = make(resolved)
    try:
        yield guard
    finally:
        for cls, (own, _) in originals.items():
            if own is _MISSING:
                del cls.__getattribute__
            else:
                cls.__getattribute__ = own
        # Forward may set what it read (a Hugging Face model fills config.problem_type on
        # its first call, then reads it): the graph holds for the value as forward left it.
        guard.first_read = [value for _, _, value, _ in guard.values]
        guard.values = [(d, name, d.get(name, value), owner)
                        for d, name, value, owner in guard.values]
        guard.tensors = [(d, name, d.get(name, t), d.get(name, t)._version, owner)
                         if isinstance(d.get(name, t), torch.Tensor) else (d, name, t, v, owner)
                         for d, name, t, v, owner in guard.tensors]


# ---- module hooks inside the wrapped module ----

# Tables of nn.Module hooks that run around a module's forward or backward, and how the
# error names them.
_HOOK_TABLES = (("_forward_pre_hooks", "forward pre-hook (register_forward_pre_hook)"),
                ("_forward_hooks", "forward hook (register_forward_hook)"),
                ("_backward_pre_hooks", "backward pre-hook (register_full_backward_pre_hook)"),
                ("_backward_hooks", "backward hook (register_full_backward_hook)"))


def hooks_version() -> int:
    """Changes whenever any hook anywhere is registered (module, tensor or autograd hooks
    all take a torch.utils.hooks.RemovableHandle, whose ids count up); removing one does not
    change it."""
    return torch.utils.hooks.RemovableHandle.next_id


def _is_traced_hook(hook: Any) -> bool:
    """Forward hooks whose whole effect the captured graph computes on every call: the
    pre-hooks of torch.nn.utils.weight_norm and spectral_norm (they recompute a parameter from
    others) and the hooks by which Hugging Face transformers collect hidden states and
    attentions into forward's result, and the one of enable_input_require_grads."""
    from torch.nn.utils.spectral_norm import SpectralNorm
    from torch.nn.utils.weight_norm import WeightNorm

    module = getattr(hook, "__module__", None)
    return (isinstance(hook, (WeightNorm, SpectralNorm))
            or module == "transformers.utils.output_capturing"
            or (module == "transformers.modeling_utils"
                and getattr(hook, "__qualname__", "").endswith(_INPUT_REQUIRES_GRAD_HOOK)))


# PreTrainedModel.enable_input_require_grads (adapter fine-tuning of a frozen model) marks the
# input embeddings' output as requiring grad so that autograd reaches the adapters; in the
# captured graph every value on the path to a trainable parameter gets its gradient anyway.
_INPUT_REQUIRES_GRAD_HOOK = "enable_input_require_grads.<locals>.make_inputs_require_grads"


def _describe(hook: Any) -> str:
    name = getattr(hook, "__qualname__", None) or type(hook).__qualname__
    module = getattr(hook, "__module__", None)
    return f"{module}.{name}" if module and module != "__main__" else name


def is_fully_sharded(module: torch.nn.Module) -> bool:
    """Whether torch.distributed.fsdp.fully_shard (FSDP2) was applied to ``module`` (it
    swaps the module's class for one deriving from FSDPModule)."""
    return any(c.__name__ == "FSDPModule" and c.__module__.startswith("torch.distributed.fsdp")
               for c in type(module).__mro__)


def sharding_error(module: torch.nn.Module,
                   modules: list[torch.nn.Module]) -> RuntimeError | None:
    """The error for parameter sharding applied inside the wrapped module, or None.

    FSDP2 (fully_shard on a submodule) and DeepSpeed ZeRO stage 3 keep a submodule's
    parameters sharded and gather them in hooks around that submodule's forward; the engine
    calls no submodule, so it would never see them gathered."""
    names = {id(m): name for name, m in module.named_modules()}
    sharded = [names.get(id(m), "") or "the wrapped module" for m in modules
               if is_fully_sharded(m)]
    if sharded:
        return RuntimeError(
            f"ORTModule cannot run a model whose submodules were sharded with fully_shard "
            f"({', '.join(repr(n) for n in sharded[:3])}{' ...' if len(sharded) > 3 else ''}): "
            "fully_shard gathers a submodule's parameters in hooks around that submodule's "
            "forward, and the engine runs the whole model as one graph in which no submodule "
            "is called. Wrap before sharding instead: fully_shard(ORTModule(block)) for each "
            "block, then fully_shard(model) at the root (or fully_shard(ORTModule(model)) for "
            "one group); see docs/distributed.md")
    if any(hasattr(p, "ds_id") for m in modules for p in m._parameters.values()
           if p is not None):
        return RuntimeError(
            "ORTModule cannot run a model whose parameters DeepSpeed ZeRO stage 3 partitions: "
            "ZeRO-3 gathers each submodule's parameters in hooks around that submodule's "
            "forward, and the engine runs the whole model as one graph in which no submodule "
            "is called, so it would read the empty partitions. Use ZeRO stage 1 or 2 "
            "(deepspeed.initialize(model=ORTModule(model), config={'zero_optimization': "
            "{'stage': 2}, ...})), which shard optimizer state and gradients; see "
            "docs/distributed.md")
    return None


def module_hooks_error(module: torch.nn.Module,
                       modules: list[torch.nn.Module]) -> RuntimeError | None:
    """The error for hooks registered on ``module`` or a module inside it (``modules``, all
    of them), or None.

    The engine runs the whole forward and backward as one graph: a module inside it is never
    called, so its hooks would run once, while the graph is captured (forward hooks), or never
    (backward hooks), instead of on every call as in eager. Hooks the graph fully computes
    (_is_traced_hook) are allowed."""
    sharded = sharding_error(module, modules)
    if sharded is not None:
        return sharded
    refused = [(m, kind, hook) for m in modules for table, kind in _HOOK_TABLES
               for hook in m.__dict__.get(table, {}).values()
               if not (table.startswith("_forward") and _is_traced_hook(hook))]
    if not refused:
        return None
    names = {id(m): name for name, m in module.named_modules()}
    found = [f"{kind} {_describe(hook)} on "
             f"{f'submodule {names[id(m)]!r}' if names[id(m)] else 'the wrapped module'} "
             f"({type(m).__name__})" for m, kind, hook in refused]
    more = f" (and {len(found) - 3} more)" if len(found) > 3 else ""
    return RuntimeError(
        f"ORTModule cannot run the {'; '.join(found[:3])}{more}: the engine runs the wrapped "
        "module's forward and backward as one captured graph in which no module is called, so "
        "such a hook would run only while the graph is captured (forward hooks) or never "
        "(backward hooks). Register it on the ORTModule itself instead (its hooks run on every "
        "call, with the whole model's inputs, outputs and gradients: register_forward_hook, "
        "register_full_backward_hook, ...), use a tensor hook (Tensor.register_hook) on a "
        "parameter for its gradient, compute in forward what a hook would return, or wrap in "
        "ORTModule only the parts of the model without hooks. Remove the hook (handle.remove()) "
        "before the next call.")
