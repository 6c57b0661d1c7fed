"""ORTModule: runs forward and backward of a torch.nn.Module on the ortmodule engine."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from ortmodule import _C, _capture, _fallback, _schema
from ortmodule.options import DebugOptions, FallbackPolicy

logger = logging.getLogger("ortmodule")


@dataclass
class _Entry:
    """One compiled graph: a program plus how to feed it from a call."""

    program: Any  # _C.Program
    # Per program input: ("input", flat index) or ("param"/"buffer", owner, attribute).
    feeds: list[tuple]
    output_spec: _schema.Spec
    # BatchNorm counters the graph does not update itself (TorchScript capture).
    bn_counters: list[torch.nn.modules.batchnorm._BatchNorm]
    # Whether the graph is valid for the input sizes (torch.export's shape guards).
    guard: Callable[[dict[str, list[torch.Tensor]]], bool] | None
    last_shapes: tuple = ()  # sizes of the last accepted call: no need to check again
    # Seconds spent building this entry, per stage (trace, lowering, engine build).
    seconds: dict[str, float] = field(default_factory=dict)
    # Keeps the Python callables of the graph's bridge nodes registered (_bridge).
    callables: Any = None

    def accepts(self, tensors: list[torch.Tensor]) -> bool:
        if self.guard is None:
            return True
        shapes = tuple(t.shape for t in tensors)
        if shapes == self.last_shapes:
            return True
        if not self.guard({"tensors": tensors}):
            return False
        self.last_shapes = shapes
        return True


class ORTModule(torch.nn.Module):
    """Wraps ``module`` so that its forward and backward run on the ortmodule engine.

    The module is exported to ONNX on the first call for each input schema; the
    engine builds the gradient graph, plans memory and runs every later call.
    Parameters and buffers stay owned by PyTorch.
    """

    def __init__(self, module: torch.nn.Module, debug_options: DebugOptions | None = None) -> None:
        if not isinstance(module, torch.nn.Module):
            raise TypeError(
                f"ORTModule wraps a torch.nn.Module; got {type(module).__name__}. "
                "Pass the model instance, e.g. ORTModule(MyModel())."
            )
        if isinstance(module, ORTModule):
            raise TypeError("the module is already an ORTModule")
        super().__init__()
        self._modules["_module"] = module
        opts = DebugOptions.from_env(debug_options)
        object.__setattr__(self, "_debug", opts)
        object.__setattr__(self, "_cache", {})
        object.__setattr__(self, "_static_shapes", opts.exporter == "torchscript"
                           and _capture.needs_static_shapes(module))
        object.__setattr__(self, "_saved_names", set())
        # The module structure is fixed once wrapped (as for any exported graph); caching
        # the module list and parameter owners keeps the per-call cache key cheap. Parameter
        # objects are still looked up on every call, so load_state_dict(assign=True) works.
        modules = list(module.modules())
        object.__setattr__(self, "_all_modules", modules)
        object.__setattr__(self, "_param_slots", [
            (m, name) for m in modules for name, p in m._parameters.items() if p is not None
        ])
        logger.setLevel(opts.log_level.to_logging())
        if not logger.handlers:
            logger.addHandler(logging.StreamHandler())

    # ---- nn.Module API passes through to the wrapped module ----

    @property
    def module(self) -> torch.nn.Module:
        return self._modules["_module"]

    def add_module(self, name: str, module: torch.nn.Module | None) -> None:
        raise NotImplementedError(
            "ORTModule does not support adding modules to it; add them to the wrapped module "
            "before wrapping it"
        )

    def state_dict(self, *args: Any, **kwargs: Any) -> Any:
        return self.module.state_dict(*args, **kwargs)

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

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self._modules["_module"], name)

    def __getstate__(self) -> dict[str, Any]:
        # Compiled programs are not picklable and are cheap to rebuild: drop them, so
        # torch.save(model), pickle and copy.deepcopy work and re-export on first use.
        state = self.__dict__.copy()
        state["_cache"] = {}
        state["_saved_names"] = set()
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    # ---- the per-call path ----

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        tensors: list[torch.Tensor] = []
        in_spec = _schema.flatten((args, kwargs), tensors)
        grad = torch.is_grad_enabled()
        if torch.is_autocast_enabled("cpu") or torch.is_autocast_enabled("cuda"):
            raise NotImplementedError(
                "ORTModule does not support torch.autocast yet; run the module outside autocast"
            )
        key = (
            in_spec,
            _schema.signature(tensors),
            tuple(m.training for m in self._all_modules),
            grad,
            tuple(m._parameters[n].requires_grad for m, n in self._param_slots) if grad else (),
            tuple(tuple(t.shape) for t in tensors) if self._static_shapes else (),
        )
        entries = self._cache.get(key)
        entry = None
        for candidate in entries or ():
            if candidate.accepts(tensors):
                entry = candidate
                break
        if entry is None:
            entry = self._compile(in_spec, tensors)
            self._cache.setdefault(key, []).append(entry)
        inputs = [
            tensors[f[1]] if f[0] == "input" else getattr(f[1], f[2])
            for f in entry.feeds
        ]
        outputs = _C.run(entry.program, inputs)
        for bn in entry.bn_counters:
            bn.num_batches_tracked.add_(1)
        return _schema.unflatten(entry.output_spec, outputs)

    def _compile(self, in_spec: _schema.Spec, tensors: list[torch.Tensor]) -> _Entry:
        module = self.module
        verbose = self._debug.log_level <= 0
        _capture.check_supported(module)
        captured = _capture.export(
            module, in_spec, tensors, verbose, self._debug.exporter, self._static_shapes,
            fallback_unsupported_ops=bool(self._debug.fallback & FallbackPolicy.UNSUPPORTED_OP))
        # torch.export keeps one graph input per tensor; the TorchScript exporter names them
        # input_<k> and drops unused ones.
        names = (captured.input_names if captured.exporter == "dynamo"
                 else [f"input_{k}" for k in range(len(tensors))])
        input_index = {name: i for i, name in enumerate(names)}
        feed_inits = list(captured.bindings)
        grad = torch.is_grad_enabled()
        wrt: list[str] = []
        if grad:
            for name in captured.input_names:
                t = tensors[input_index[name]]
                if t.requires_grad and t.is_floating_point():
                    wrt.append(name)
            for name, (owner, kind, attr, _) in captured.bindings.items():
                if kind == "param" and getattr(owner, attr).requires_grad:
                    wrt.append(name)
        start = time.perf_counter()
        program = _fallback.build_program(captured.onnx_bytes, feed_inits, wrt,
                                          captured.state_outputs, captured.exporter)
        seconds = {**captured.seconds, "build": time.perf_counter() - start}
        feeds: list[tuple] = []
        for name in program.input_names:
            if name in input_index:
                feeds.append(("input", input_index[name]))
            else:
                owner, kind, attr, _ = captured.bindings[name]
                feeds.append((kind, owner, attr))
        bn_counters = []
        if captured.exporter == "torchscript":
            for m in module.modules():
                if (isinstance(m, torch.nn.modules.batchnorm._BatchNorm) and m.training
                        and m.track_running_stats and m.num_batches_tracked is not None):
                    bn_counters.append(m)
        guard = None
        if captured.shape_guards:
            condition = " and ".join(f"({g})" for g in captured.shape_guards)
            guard = eval(f"lambda L: {condition}", {"min": min, "max": max})
        logger.info("compiled graph #%d (training=%s, grad=%s, %d inputs need gradients)",
                    sum(len(v) for v in self._cache.values()) + 1, module.training, grad,
                    len(wrt))
        if self._debug.save_onnx:
            self._save(captured.onnx_bytes, program, module.training)
        return _Entry(program, feeds, captured.output_spec, bn_counters, guard,
                      tuple(t.shape for t in tensors), seconds, captured.callables)

    def _save(self, forward_bytes: bytes, program: Any, training: bool) -> None:
        folder = self._debug.save_path or os.getcwd()
        mode = "training" if training else "inference"
        # Later graphs of the same mode (another input schema) get a numbered name.
        stem = f"{self._debug.onnx_prefix}_{mode}"
        n = 1
        while (stem if n == 1 else f"{stem}_{n}") in self._saved_names:
            n += 1
        stem = stem if n == 1 else f"{stem}_{n}"
        self._saved_names.add(stem)
        base = os.path.join(folder, stem)
        with open(base + "_forward.onnx", "wb") as f:
            f.write(forward_bytes)
        with open(base + "_training.onnx", "wb") as f:
            f.write(program.training_graph_onnx())
        logger.info("saved %s_forward.onnx and %s_training.onnx", base, base)
