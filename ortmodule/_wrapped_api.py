"""The nn.Module API of ORTModule, passed through to the wrapped module: attribute access,
registration, module/parameter/buffer iteration, train mode and state dicts all see and
change the wrapped module's own tables (ortmodule/module.py adds capture and the per-call
path)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import torch

from ortmodule import _guards

# Attributes that belong to the wrapper itself; every other attribute set on an ORTModule
# is set on the wrapped module.
_OWN = frozenset({
    "_original", "_debug", "_cache", "_saved_names", "_all_modules",
    "_param_slots", "_seen_version", "_structure", "_evictions", "forward", "training",
    "_last_call", "_own_forward", "_seen_hooks",
    # Set by register_full_backward_hook and by compile(): nn.Module.__call__ reads them from
    # the wrapper.
    "_is_full_backward_hook", "_compiled_call_impl",
})


class WrappedModuleAPI(torch.nn.Module):
    """nn.Module whose API acts on ``self.__dict__["_original"]``, the wrapped module."""

    @property
    def module(self) -> torch.nn.Module:
        return self.__dict__["_original"]

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self.__dict__["_original"], name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _OWN or name == "__class__":
            # A new class is the wrapper's own: fully_shard (FSDP2) makes the wrapper an
            # FSDPModule by assigning __class__.
            if name == "training":
                self.module.training = value
            object.__setattr__(self, name, value)
            return
        setattr(self.module, name, value)

    def __delattr__(self, name: str) -> None:
        if name in _OWN:
            object.__delattr__(self, name)
        else:
            delattr(self.module, name)

    def __dir__(self) -> list[str]:
        return sorted(set(super().__dir__()) | set(dir(self.module)))

    def add_module(self, name: str, module: torch.nn.Module | None) -> None:
        self.module.add_module(name, module)

    def register_module(self, name: str, module: torch.nn.Module | None) -> None:
        self.module.register_module(name, module)

    def register_buffer(self, name: str, tensor: torch.Tensor | None,
                        persistent: bool = True) -> None:
        self.module.register_buffer(name, tensor, persistent)

    def register_parameter(self, name: str, param: torch.nn.Parameter | None) -> None:
        self.module.register_parameter(name, param)

    def named_modules(self, memo: set | None = None, prefix: str = "",
                      remove_duplicate: bool = True) -> Iterator[tuple[str, torch.nn.Module]]:
        if _guards.is_fully_sharded(self):
            return self._named_modules_with_wrapper(memo, prefix, remove_duplicate)
        return self.module.named_modules(memo, prefix, remove_duplicate)

    def _named_modules_with_wrapper(self, memo: set | None, prefix: str,
                                    remove_duplicate: bool) -> Iterator[tuple[str, torch.nn.Module]]:
        """The wrapper, then the wrapped module's tree under the same name: fully_shard (FSDP2)
        finds its groups, this wrapper's among them, by walking the root's modules()."""
        if memo is None:
            memo = set()
        if remove_duplicate:
            if self in memo:
                return
            memo.add(self)
        yield prefix, self
        yield from self.module.named_modules(memo, prefix, remove_duplicate)

    def train(self, mode: bool = True) -> WrappedModuleAPI:
        if not isinstance(mode, bool):
            raise TypeError(f"training mode must be a bool, got {type(mode).__name__}")
        self.module.train(mode)
        object.__setattr__(self, "training", mode)
        return self

    def apply(self, fn: Callable[[torch.nn.Module], None]) -> WrappedModuleAPI:
        self.module.apply(fn)
        return self

    def _apply(self, fn: Callable, recurse: bool = True) -> WrappedModuleAPI:
        self.module._apply(fn, recurse)
        _guards.bump()  # dtypes or devices may have changed without a registration
        return self

    def state_dict(self, *args: Any, **kwargs: Any) -> Any:
        return self.module.state_dict(*args, **kwargs)

    def _save_to_state_dict(self, *args: Any, **kwargs: Any) -> None:
        self.module._save_to_state_dict(*args, **kwargs)

    def _load_from_state_dict(self, *args: Any, **kwargs: Any) -> None:
        self.module._load_from_state_dict(*args, **kwargs)

    def load_state_dict(self, state_dict: Any, strict: bool = True, assign: bool = False) -> Any:
        return self.module.load_state_dict(state_dict, strict=strict, assign=assign)

    def parameters(self, recurse: bool = True) -> Iterator[torch.nn.Parameter]:
        return self.module.parameters(recurse)

    def named_parameters(self, *args: Any, **kwargs: Any) -> Iterator[tuple[str, torch.nn.Parameter]]:
        return self.module.named_parameters(*args, **kwargs)

    def buffers(self, recurse: bool = True) -> Iterator[torch.Tensor]:
        return self.module.buffers(recurse)

    def named_buffers(self, *args: Any, **kwargs: Any) -> Iterator[tuple[str, torch.Tensor]]:
        return self.module.named_buffers(*args, **kwargs)
