"""ORTModule: runs forward and backward of a torch.nn.Module on the ortmodule engine."""

from __future__ import annotations

import dataclasses
import functools
import inspect
import logging
import os
import sys
import time
import types
from collections import OrderedDict
from typing import Any

import torch

from ortmodule import _C, _autocast, _breaks, _first_run, _guards, _schema, export_cache
from ortmodule._call_key import CallKey, call_key
from ortmodule._entry import _Entry, build_program
from ortmodule._wrapped_api import WrappedModuleAPI
from ortmodule.capture import export as capture
from ortmodule.options import DebugOptions, FallbackPolicy

logger = logging.getLogger("ortmodule")

# Compiled graphs kept per ORTModule; the least recently used one is dropped beyond that.
MAX_GRAPHS = 32



def _install_forward(wrapper: ORTModule, signature: inspect.Signature | None) -> None:
    """Sets a bound ``forward`` for this instance that reports the wrapped module's
    signature, and its function as ``_own_forward`` (ORTModule.__call__ calls forward
    itself only while ``forward`` is still this one)."""

    def forward(self: ORTModule, *args: Any, **kwargs: Any) -> Any:
        # A call like the previous one, with no registration since: no further frame.
        d = self.__dict__
        last = d["_last_call"]
        if (last is not None and _guards._version[0] == d["_seen_version"]
                and _guards.hooks_version() == d["_seen_hooks"]):
            out = last(args, kwargs)
            if out is not _MISS:
                return out
        return self._run(args, kwargs)

    if signature is not None:
        self_param = inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)
        forward.__signature__ = signature.replace(  # type: ignore[attr-defined]
            parameters=[self_param, *signature.parameters.values()])
    wrapper.__dict__["_own_forward"] = forward
    wrapper.__dict__["forward"] = types.MethodType(forward, wrapper)


# What _C.StepCall returns for a call that may not take the previous call's graph.
_MISS = object()


def _signature_of(module: torch.nn.Module) -> inspect.Signature | None:
    try:
        return inspect.signature(module.forward)
    except (TypeError, ValueError):
        return None


def _data_parallel_error(where: str) -> TypeError:
    return TypeError(
        f"ORTModule does not support torch.nn.DataParallel ({where}); use "
        "torch.nn.parallel.DistributedDataParallel around the ORTModule instead: "
        "DistributedDataParallel(ORTModule(model)), one process per device")


def _refuse_data_parallel(module: torch.nn.Module) -> None:
    for name, m in module.named_modules():
        if isinstance(m, torch.nn.DataParallel):
            where = f"submodule {name!r}" if name else "the wrapped module"
            raise _data_parallel_error(f"{where} is a DataParallel")


def _called_from_data_parallel() -> bool:
    """Whether torch.nn.DataParallel's forward is among the callers (checked once per
    compiled graph, not per call)."""
    code = torch.nn.DataParallel.forward.__code__
    frame = sys._getframe(1)
    for _ in range(12):
        if frame is None:
            return False
        if frame.f_code is code:
            return True
        frame = frame.f_back
    return False


class ORTModule(WrappedModuleAPI):
    """Wraps ``module`` so that its forward and backward run on the ortmodule engine.

    The module is exported to ONNX on the first call for each input schema; the
    engine builds the gradient graph, plans memory and runs every later call.
    Parameters and buffers stay owned by PyTorch. The wrapper shares the wrapped
    module's parameter, buffer and submodule tables, so every nn.Module method (and any
    container holding the wrapper) sees exactly what the wrapped module holds.
    """

    def __init__(self, module: torch.nn.Module, debug_options: DebugOptions | None = None) -> None:
        if not isinstance(module, torch.nn.Module):
            raise TypeError(
                f"ORTModule wraps a torch.nn.Module; got {type(module).__name__}. "
                "Pass the model instance, e.g. ORTModule(MyModel())."
            )
        if isinstance(module, ORTModule):
            raise TypeError("the module is already an ORTModule")
        if debug_options is not None and not isinstance(debug_options, DebugOptions):
            raise TypeError(f"debug_options must be a DebugOptions, got "
                            f"{type(debug_options).__name__}")
        _refuse_data_parallel(module)
        super().__init__()
        opts = DebugOptions.from_env(debug_options)
        d = self.__dict__
        d["_original"] = module
        # One set of tables: what is registered through the wrapper lands in the wrapped
        # module, and recursion over the wrapper (state_dict, load_state_dict, _apply,
        # children) sees the wrapped module's names.
        for table in ("_parameters", "_buffers", "_modules", "_non_persistent_buffers_set"):
            d[table] = module.__dict__[table]
        d["training"] = module.training
        d["_debug"] = opts
        d["_cache"] = OrderedDict()
        d["_saved_names"] = set()
        d["_evictions"] = 0
        d["_last_call"] = None
        d["_seen_hooks"] = -1  # hooks inside the module are checked on the first call
        _install_forward(self, _signature_of(module))
        _guards.install_hooks()
        self._refresh_structure()
        logger.setLevel(opts.log_level.to_logging())
        if opts.print_memory_stats:
            _first_run.print_memory_stats(True)
        if not logger.handlers:
            logger.addHandler(logging.StreamHandler())

    def _replicate_for_data_parallel(self) -> ORTModule:
        raise _data_parallel_error("DataParallel wraps this ORTModule")

    def __getstate__(self) -> dict[str, Any]:
        # Compiled programs are not picklable and are cheap to rebuild: drop them, so
        # torch.save(model), pickle and copy.deepcopy work and re-export on first use.
        state = self.__dict__.copy()
        state["_cache"] = OrderedDict()
        state["_last_call"] = None
        state["_saved_names"] = set()
        for transient in ("forward", "_own_forward", "_all_modules", "_param_slots",
                          "_structure"):
            state.pop(transient, None)
        state["_seen_version"] = -1
        state["_seen_hooks"] = -1
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        _install_forward(self, _signature_of(self.module))
        self._refresh_structure()

    # ---- the per-call path ----

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        # A call like the previous one, with no hook (on the wrapper, global, or registered
        # anywhere since), registration or replaced forward since, runs its graph from here (_C.StepCall.step); any other goes through
        # nn.Module.__call__.
        d = self.__dict__
        last = d["_last_call"]
        if last is not None:
            out = last.step(d, args, kwargs)
            if out is not _MISS:
                return out
        return super().__call__(*args, **kwargs)

    def _refresh_structure(self) -> None:
        """Re-reads the module tree after a registration anywhere; a changed tree (a new
        submodule, a parameter of another shape or dtype, untied weights) drops every
        compiled graph."""
        d = self.__dict__
        d["_seen_version"] = _guards.structure_version()
        structure = _guards.structure(self.module)
        if structure == d.get("_structure"):
            return
        if d.get("_structure") is not None and self._cache:
            logger.info("the wrapped module's structure changed: dropping %d compiled graphs",
                        sum(len(v) for v in self._cache.values()))
            self._cache.clear()
            d["_last_call"] = None
        d["_structure"] = structure
        modules = list(self.module.modules())
        d["_all_modules"] = modules
        d["_param_slots"] = [(m, name) for m in modules
                             for name, p in m._parameters.items() if p is not None]

    def _check_module_hooks(self) -> None:
        """Raises while a module inside the wrapped one has hooks the graph cannot run;
        checked on the first call and after any hook registration anywhere."""
        version = _guards.hooks_version()
        error = _guards.module_hooks_error(self.module, self._all_modules)
        if error is not None:
            raise error
        self.__dict__["_seen_hooks"] = version

    def forward(self, *args: Any, **kwargs: Any) -> Any:  # replaced per instance
        return self._run(args, kwargs)

    def _run(self, args: tuple, kwargs: dict) -> Any:
        d = self.__dict__
        if _guards._version[0] != d["_seen_version"]:
            self._refresh_structure()
        if _guards.hooks_version() != d["_seen_hooks"]:
            self._check_module_hooks()
        last = d["_last_call"]
        if last is not None:
            out = last(args, kwargs)
            if out is not _MISS:
                return out
        tensors = []
        in_spec = _schema.flatten((args, kwargs), tensors)
        key = call_key(in_spec, tensors, self._all_modules, self._param_slots)
        cache = self._cache
        entries = cache.get(key)
        entry = None
        if entries is not None:
            cache.move_to_end(key)
            for candidate in entries:
                if candidate.accepts(tensors):
                    entry = candidate
                    break
            if entry is None and entries and logger.isEnabledFor(logging.INFO):
                changed = [c for e in entries for c in e.attributes.changed()]
                if changed:
                    logger.info("attributes read by forward changed (%s): building a new graph",
                                "; ".join(changed[:5]))
        fresh = entry is None
        if entry is None:
            # The first graph of a kind is traced at the call's sizes (a faster export);
            # once a call of the same kind comes with other sizes, the next one is traced
            # with symbolic sizes and serves every size the model allows.
            sizes = tuple(tuple(t.shape) for t in tensors)
            dynamic = (self._debug.dynamic_shapes == "always"
                       or any(e.static_sizes != sizes for e in entries or ()))
            if dynamic and logger.isEnabledFor(logging.INFO):
                logger.info("%s called with other input sizes than its graph's: exporting "
                            "again with dynamic sizes", type(self.module).__name__)
            reason = _first_run.build_reason(cache, key, entries, dynamic)
            entry = self._compile(in_spec, tensors, args, kwargs,
                                  _autocast.traced_region(key.autocast, tensors,
                                                          self._param_slots),
                                  dynamic)
            entry.build_reason = reason
            if self._debug.minify and entry.program is not None:
                # Debugging only: the new graph against eager PyTorch on copies of the
                # module; a difference raises ParityError naming the failing subgraph.
                # Imported here: the ortmodule.debug package imports this module (its
                # check_parity takes ORTModules).
                from ortmodule.debug.parity import check_call

                check_call(ORTModule, self.module, args, kwargs, self._debug)
            cache.setdefault(key, []).append(entry)
            self._bound_cache()
        # The next call of the same kind takes this entry without computing the key.
        d["_last_call"] = self._last_call_for(entry, key, args, kwargs)
        if fresh:
            return _first_run.report_new_graph(
                self, entry, tensors, lambda: self._launch(entry, tensors, args, kwargs))
        return self._launch(entry, tensors, args, kwargs)

    def _last_call_for(self, entry: _Entry, key: CallKey, args: tuple, kwargs: dict) -> Any:
        """What a later call must match to take `entry` without building the cache key
        (calls whose arguments are all tensors): a _C.StepCall checking `key`, or None."""
        if entry.program is None or not all(isinstance(a, torch.Tensor)
                                            for a in (*args, *kwargs.values())):
            return None
        spec = entry.output_spec
        single = spec[0] == "T" and spec[1] == 0
        finish = None if single else functools.partial(_schema.unflatten, spec)
        return _C.StepCall(entry.runner, entry, key, args, kwargs, self._all_modules,
                           self._param_slots,
                           entry.attributes if entry.attributes else None,
                           entry.accepts if entry.guard is not None else None, finish, _MISS,
                           _guards._version)

    def _launch(self, entry: _Entry, tensors: list[torch.Tensor], args: tuple,
                kwargs: dict) -> Any:
        if entry.program is None:
            if entry.graph_breaks is not None:
                return entry.graph_breaks(args, kwargs)
            return self.module(*args, **kwargs)
        outputs = entry.launch(tensors)
        spec = entry.output_spec
        return outputs[spec[1]] if spec[0] == "T" else _schema.unflatten(spec, outputs)

    def _bound_cache(self) -> None:
        cache = self._cache
        while sum(len(v) for v in cache.values()) > MAX_GRAPHS:
            key, entries = next(iter(cache.items()))
            dropped = entries.pop(0)
            last = self.__dict__["_last_call"]
            if last is not None and last.entry is dropped:
                self.__dict__["_last_call"] = None
            if not entries:
                del cache[key]
            self.__dict__["_evictions"] += 1
            if self._evictions in (1, 10, 100) or self._evictions % 1000 == 0:
                logger.warning(
                    "ORTModule compiled more than %d graphs for %s and dropped the least "
                    "recently used one (%d so far): the calls keep changing what the graph "
                    "depends on (input structure, dtypes, ranks, Python scalar arguments, "
                    "attributes read by forward, modes). Each new graph costs an export; "
                    "pass such values as tensors or keep them fixed.",
                    MAX_GRAPHS, type(self.module).__name__, self._evictions)

    def _compile(self, in_spec: _schema.Spec, tensors: list[torch.Tensor], args: tuple,
                 kwargs: dict, autocast: tuple[str, torch.dtype] | None = None,
                 dynamic: bool = True) -> _Entry:
        module = self.module
        if _called_from_data_parallel():
            raise _data_parallel_error("DataParallel wraps this ORTModule")
        verbose = self._debug.log_level <= 0
        capture.check_supported(module)
        capture.check_one_device(module, args, kwargs)
        stored = export_cache.key_for(self._debug, module, in_spec, tensors, self._all_modules,
                                      self._param_slots, dynamic)
        loaded = stored and export_cache.load(self._debug.cache_dir, *stored, module)
        try:
            if loaded:
                captured, attributes = loaded.captured, loaded.attributes
            else:
                with _guards.record_attribute_reads(module) as attributes:
                    captured = capture.export(
                        module, in_spec, tensors, verbose, self._debug.exporter, autocast,
                        fallback_unsupported_ops=FallbackPolicy.UNSUPPORTED_OP in self._debug.fallback,
                        dynamic=dynamic)
                if stored:
                    export_cache.store(self._debug.cache_dir, *stored, captured, attributes)
        except capture.ExportError as e:
            error = capture.explain_failure(module, args, kwargs, e)
            if (FallbackPolicy.GRAPH_BREAK in self._debug.fallback
                    and capture.is_data_dependent(e)):
                logger.info("%s", error)
                return self._graph_breaks()
            if self.__dict__.get("_graph_part") and capture.is_data_dependent(e):
                # TorchDynamo kept in this graph an op whose result depends on the data in a
                # way torch.export cannot trace (narrow at a tensor position, say): the graph
                # runs in eager PyTorch, as the Python between the breaks does.
                logger.warning("ORTModule runs %s in eager PyTorch: this graph between graph "
                               "breaks holds an op whose result depends on tensor values in a "
                               "way torch.export cannot capture: %s", type(module).__name__,
                               error)
                return _Entry(None, [], None, None, fallback_reason=str(error),
                              attributes=attributes)
            if FallbackPolicy.EXPORT_FAILURE in self._debug.fallback:
                logger.warning("ORTModule runs %s in eager PyTorch for this kind of call "
                               "(fallback policy EXPORT_FAILURE) because its export failed: %s",
                               type(module).__name__, error)
                return _Entry(None, [], None, None, fallback_reason=str(error),
                              attributes=attributes)
            if error is e:
                raise
            raise error from e
        # torch.export keeps one graph input per tensor.
        input_index = {name: i for i, name in enumerate(captured.input_names)}
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
        program = build_program(
            captured.onnx_bytes, feed_inits, wrt, captured.state_outputs,
            self._debug.graph_optimizations, self._debug.label_sparsity,
            {name: tensors[i] for name, i in input_index.items()},
            self._debug.linear_cross_entropy)
        seconds = {**captured.seconds, "build": time.perf_counter() - start}
        feeds: list[tuple] = []
        for name in program.input_names:
            if name in input_index:
                feeds.append(("input", input_index[name]))
            else:
                owner, kind, attr, _ = captured.bindings[name]
                feeds.append((kind, owner, attr))
        guard = None
        if captured.shape_guards:
            condition = " and ".join(f"({g})" for g in captured.shape_guards)
            guard = eval(f"lambda L: {condition}", {"min": min, "max": max})
        logger.info("compiled graph #%d (training=%s, grad=%s, %d inputs need gradients, "
                    "%d attributes guarded)",
                    sum(len(v) for v in self._cache.values()) + 1, module.training, grad,
                    len(wrt), len(attributes))
        if self._debug.save_onnx:
            self._save(capture.with_state_values(captured.onnx_bytes, captured.bindings), program,
                       module.training)
        return _Entry(program, feeds, captured.output_spec, guard,
                      tuple(t.shape for t in tensors), seconds, attributes,
                      callables=captured.callables, exporter=captured.exporter,
                      static_sizes=None if dynamic else tuple(tuple(t.shape) for t in tensors))

    def _graph_breaks(self) -> _Entry:
        """The entry of a forward that reads a tensor's value in Python: TorchDynamo splits
        it there, each graph between the breaks runs on the engine as an ORTModule of its own
        (with these options, less graph breaks)."""
        debug = self._debug
        parts = [0]

        def make_part(part: torch.nn.Module) -> ORTModule:
            parts[0] += 1
            inner = ORTModule(part, debug)
            inner.__dict__["_graph_part"] = True
            # Set after construction: the environment must not turn graph breaks back on.
            inner.__dict__["_debug"] = dataclasses.replace(
                debug, fallback=debug.fallback & ~FallbackPolicy.GRAPH_BREAK,
                onnx_prefix=f"{debug.onnx_prefix}_graph{parts[0]}" if debug.save_onnx
                else debug.onnx_prefix)
            return inner

        logger.info("%s.forward reads a tensor's value in Python: running it through "
                    "TorchDynamo, split at its graph breaks", type(self.module).__name__)
        return _Entry(None, [], None, None,
                      graph_breaks=_breaks.GraphBreaks(self.module, make_part))

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

