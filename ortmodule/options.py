"""Typed, frozen options. Environment variables (ORTMODULE_*) only override them."""

from __future__ import annotations

import enum
import logging
import os
from dataclasses import dataclass, replace

EXPORTERS = ("auto", "fx", "dynamo")
# Exporters that were options once, and what to use instead.
RETIRED_EXPORTERS = {
    "torchscript": "the TorchScript exporter was retired (it could not follow modern model code "
                   "and no supported model needs it): use the default "
                   "exporter, exporter=\"auto\"",
}
DYNAMIC_SHAPES = ("auto", "always")
LABEL_SPARSITY = ("auto", "always", "never")
LINEAR_CROSS_ENTROPY = ("auto", "always", "never")


class FallbackPolicy(enum.Flag):
    """When ORTModule may run code on PyTorch instead of the engine (each use logs a warning
    saying what and where).

    NEVER: every failure raises (an op the engine lacks raises an error naming it).
    UNSUPPORTED_OP (in the default): an op the engine lacks (an ATen op without a kernel or a
    translation, a ``torch.library`` custom op) runs on PyTorch as one node of the graph, its
    gradient from autograd; the rest of the model still runs on the engine. The first graph
    that needs such nodes warns once, listing each op, its count and its source lines.
    GRAPH_BREAK (in the default): where forward reads a tensor's value in Python (an ``if`` on a
    tensor, ``.item()``, ``.tolist()``, boolean-mask indexing, ``nonzero``), forward is split
    there by TorchDynamo: the code before and after runs as engine graphs, the Python reading
    the value runs in eager PyTorch, gradients flow through all of it. Each break warns once,
    naming its source line. Without it such a forward raises an ExportError naming the line.
    EXPORT_FAILURE: when the module cannot be exported for a call, that call (and later calls
    with the same cache key) runs the wrapped module in eager PyTorch.
    """

    NEVER = 0
    UNSUPPORTED_OP = enum.auto()
    EXPORT_FAILURE = enum.auto()
    GRAPH_BREAK = enum.auto()

    @staticmethod
    def parse(text: str) -> FallbackPolicy:
        """``"never"``, or names joined by ``|`` (``"unsupported_op|graph_break"``)."""
        policy = FallbackPolicy.NEVER
        for part in text.split("|"):
            name = part.strip().upper()
            if name not in FallbackPolicy.__members__:
                names = ", ".join(m.lower() for m in FallbackPolicy.__members__)
                raise ValueError(f"fallback policy {part.strip()!r} is not one of {names}")
            policy |= FallbackPolicy[name]
        return policy


class LogLevel(enum.IntEnum):
    VERBOSE = 0
    INFO = 1
    WARNING = 2
    ERROR = 3
    FATAL = 4

    def to_logging(self) -> int:
        return {
            LogLevel.VERBOSE: logging.DEBUG,
            LogLevel.INFO: logging.INFO,
            LogLevel.WARNING: logging.WARNING,
            LogLevel.ERROR: logging.ERROR,
            LogLevel.FATAL: logging.CRITICAL,
        }[self]


@dataclass(frozen=True)
class DebugOptions:
    """What ORTModule reports and saves.

    save_onnx writes, for every compiled graph, ``<onnx_prefix>_<mode>_forward.onnx``
    (the exported model) and ``<onnx_prefix>_<mode>_training.onnx`` (forward plus the
    gradient graph built by the engine) into ``save_path`` (default: the current
    directory). ``mode`` is ``training`` or ``inference``.

    fallback (a ``FallbackPolicy``, or its names as a string such as ``"unsupported_op"``)
    says when code may run on PyTorch instead of the engine; the default
    (``FallbackPolicy.UNSUPPORTED_OP | FallbackPolicy.GRAPH_BREAK``) runs ops the engine lacks
    on PyTorch and warns once per graph, and splits a forward that reads a tensor's value in
    Python into engine graphs around that Python (warning once per break);
    ``FallbackPolicy.NEVER`` refuses both.

    exporter picks how the module is captured. Each traces it with torch.export; they
    differ in who lowers the traced ATen graph to ONNX:
    ``"auto"`` (the default) lowers it with ortmodule's own translation table (``"fx"``)
    and hands it to torch.onnx's lowering (``"dynamo"``) only where that table cannot:
    an op it has no translation for, or an autocast region holding a custom autograd
    Function (the INFO log says which, and why); where neither lowers every op natively,
    the ops left run on PyTorch (``FallbackPolicy.UNSUPPORTED_OP``).
    ``"fx"`` uses
    the translation table only (an op it lacks runs on PyTorch, or with
    ``FallbackPolicy.NEVER`` raises an error naming it and its source line); ``"dynamo"`` uses torch.onnx only (seconds slower on the first call of a
    transformer, the same graph). The TorchScript exporter (``"torchscript"``) was retired:
    that value raises an error saying so.

    graph_optimizations (default True) lets the engine rewrite the graph into faster forms
    that compute the same values (a Transpose feeding a matrix product folded into the
    product's transA/transB). False runs the graph as exported, plus the gradient graph:
    the reference to compare against when a rewrite is suspected.

    dynamic_shapes says when torch.export traces symbolic sizes: ``"auto"`` (the default)
    traces the first graph of a kind of call at its sizes (half the trace time) and the next
    one, once a call comes with other sizes, with dynamic sizes; ``"always"`` traces with
    dynamic sizes from the first call (one export for a loop whose sizes change every step).

    label_sparsity says when a classification loss (``cross_entropy`` / ``nll_loss`` with an
    ``ignore_index``, reduction mean or sum) computes only the rows whose label it does not
    ignore: the engine gathers those rows before the row-wise nodes feeding the loss (a
    language model's head) and runs them, the loss and their backward on the kept rows
    (where the module also returns the head's output, forward computes the head for every
    row too). ``"auto"`` (the default) does so where the first call's labels leave at most 90%
    of the rows (50% where the head's output is also returned); ``"always"`` wherever the
    pattern matches; ``"never"`` not at all. The loss and the gradients are those of every
    row. Part of graph_optimizations.

    linear_cross_entropy says when a language model's head and its ``cross_entropy`` become
    one FusedLinearCrossEntropy node computing the logits in row blocks, never storing the
    ``[tokens, vocab]`` logits: ``"auto"`` (the default) where those logits would take 1 GiB
    or more (the fused kernel saves their memory and, on the CPU, takes longer than the
    unfused head), ``"always"`` wherever the pattern matches, ``"never"`` not at all. Part
    of graph_optimizations.

    minify (default False) checks every new graph against eager PyTorch on its first call:
    a copy of the module runs the call in eager PyTorch and on the engine, and their
    outputs and the gradients of a random cotangent with respect to the parameters and
    the inputs that require grad are compared with ``parity_rtol``/``parity_atol``
    (``torch.isclose``). Where they differ, the lowered graph is shrunk to the smallest
    subgraph that still differs (``ortmodule.debug``), written as a runnable repro into
    ``save_path`` (default: the current directory), and the call raises
    ``ortmodule.debug.ParityError`` naming the op. The module's parameters, buffers and
    random state are as if the check had not run. Slow (two more exports on each new
    graph): for debugging only.

    cache_dir (default None: no cache) keeps every lowered graph on disk there (created on
    the first store), keyed by everything that can change it, so that a later process
    loads it instead of capturing the module again (``ortmodule.export_cache``).

    print_memory_stats prints the engine's memory (allocated, peak since the previous
    line, cached; CUDA's where in use) after every forward and every backward run, for
    every ORTModule in the process once one asks for it (docs/profiling.md).
    """

    log_level: LogLevel = LogLevel.WARNING
    save_onnx: bool = False
    onnx_prefix: str = ""
    save_path: str | None = None
    exporter: str = "auto"
    fallback: FallbackPolicy = FallbackPolicy.UNSUPPORTED_OP | FallbackPolicy.GRAPH_BREAK
    graph_optimizations: bool = True
    dynamic_shapes: str = "auto"
    label_sparsity: str = "auto"
    linear_cross_entropy: str = "auto"
    minify: bool = False
    parity_rtol: float = 1e-4
    parity_atol: float = 1e-5
    cache_dir: str | None = None
    print_memory_stats: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.log_level, LogLevel):
            raise TypeError(f"log_level must be a LogLevel, got {type(self.log_level).__name__}")
        if not isinstance(self.save_onnx, bool):
            raise TypeError(f"save_onnx must be a bool, got {type(self.save_onnx).__name__}")
        if not isinstance(self.onnx_prefix, str):
            raise TypeError(f"onnx_prefix must be a str, got {type(self.onnx_prefix).__name__}")
        if self.save_path is not None and not isinstance(self.save_path, (str, os.PathLike)):
            raise TypeError(f"save_path must be a str or os.PathLike, got "
                            f"{type(self.save_path).__name__}")
        if isinstance(self.fallback, str):
            object.__setattr__(self, "fallback", FallbackPolicy.parse(self.fallback))
        if not isinstance(self.fallback, FallbackPolicy):
            raise TypeError(f"fallback must be a FallbackPolicy, got {type(self.fallback).__name__}")
        if not isinstance(self.graph_optimizations, bool):
            raise TypeError(f"graph_optimizations must be a bool, got "
                            f"{type(self.graph_optimizations).__name__}")
        if not isinstance(self.minify, bool):
            raise TypeError(f"minify must be a bool, got {type(self.minify).__name__}")
        for field in ("parity_rtol", "parity_atol"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise ValueError(f"{field} must be a non-negative number, got {value!r}")
            object.__setattr__(self, field, float(value))
        if not isinstance(self.print_memory_stats, bool):
            raise TypeError(f"print_memory_stats must be a bool, got "
                            f"{type(self.print_memory_stats).__name__}")
        if self.save_onnx and not self.onnx_prefix:
            raise ValueError("save_onnx=True needs a non-empty onnx_prefix to name the files")
        if self.cache_dir is not None:
            if not isinstance(self.cache_dir, (str, os.PathLike)):
                raise TypeError(f"cache_dir must be a str or os.PathLike, got "
                                f"{type(self.cache_dir).__name__}")
            object.__setattr__(self, "cache_dir", os.fspath(self.cache_dir))
            if not self.cache_dir:
                raise ValueError("cache_dir must name a directory; pass None for no cache")
            if os.path.exists(self.cache_dir) and not os.path.isdir(self.cache_dir):
                raise ValueError(f"cache_dir {self.cache_dir!r} exists and is not a directory")
        if self.save_path is not None and not os.path.isdir(self.save_path):
            raise ValueError(f"save_path {self.save_path!r} is not an existing directory")
        if self.exporter in RETIRED_EXPORTERS:
            raise ValueError(f"exporter {self.exporter!r}: {RETIRED_EXPORTERS[self.exporter]}")
        if self.exporter not in EXPORTERS:
            raise ValueError(f"exporter {self.exporter!r} is not one of {', '.join(EXPORTERS)}")
        if self.dynamic_shapes not in DYNAMIC_SHAPES:
            raise ValueError(f"dynamic_shapes {self.dynamic_shapes!r} is not one of "
                             f"{', '.join(DYNAMIC_SHAPES)}")
        if self.label_sparsity not in LABEL_SPARSITY:
            raise ValueError(f"label_sparsity {self.label_sparsity!r} is not one of "
                             f"{', '.join(LABEL_SPARSITY)}")
        if self.linear_cross_entropy not in LINEAR_CROSS_ENTROPY:
            raise ValueError(f"linear_cross_entropy {self.linear_cross_entropy!r} is not one "
                             f"of {', '.join(LINEAR_CROSS_ENTROPY)}")

    @staticmethod
    def from_env(base: DebugOptions | None = None) -> DebugOptions:
        """Applies ORTMODULE_LOG_LEVEL, ORTMODULE_SAVE_ONNX, ORTMODULE_ONNX_PREFIX,
        ORTMODULE_SAVE_PATH, ORTMODULE_EXPORTER, ORTMODULE_FALLBACK_POLICY,
        ORTMODULE_GRAPH_OPTIMIZATIONS, ORTMODULE_DYNAMIC_SHAPES, ORTMODULE_LABEL_SPARSITY,
        ORTMODULE_LINEAR_CROSS_ENTROPY,
        ORTMODULE_MINIFY, ORTMODULE_PARITY_RTOL, ORTMODULE_PARITY_ATOL, ORTMODULE_CACHE_DIR,
        ORTMODULE_PRINT_MEMORY_STATS on top of ``base`` (an empty ORTMODULE_CACHE_DIR
        switches the cache off)."""
        opts = base or DebugOptions()
        changes: dict[str, object] = {}
        level = os.environ.get("ORTMODULE_LOG_LEVEL")
        if level is not None:
            try:
                changes["log_level"] = LogLevel[level.upper()]
            except KeyError:
                names = ", ".join(m.name for m in LogLevel)
                raise ValueError(f"ORTMODULE_LOG_LEVEL={level!r} is not one of {names}") from None
        save = os.environ.get("ORTMODULE_SAVE_ONNX")
        if save is not None:
            if save not in ("0", "1"):
                raise ValueError(f"ORTMODULE_SAVE_ONNX={save!r} must be 0 or 1")
            changes["save_onnx"] = save == "1"
        optimize = os.environ.get("ORTMODULE_GRAPH_OPTIMIZATIONS")
        if optimize is not None:
            if optimize not in ("0", "1"):
                raise ValueError(f"ORTMODULE_GRAPH_OPTIMIZATIONS={optimize!r} must be 0 or 1")
            changes["graph_optimizations"] = optimize == "1"
        minify = os.environ.get("ORTMODULE_MINIFY")
        if minify is not None:
            if minify not in ("0", "1"):
                raise ValueError(f"ORTMODULE_MINIFY={minify!r} must be 0 or 1")
            changes["minify"] = minify == "1"
        for env, field in (("ORTMODULE_PARITY_RTOL", "parity_rtol"),
                           ("ORTMODULE_PARITY_ATOL", "parity_atol")):
            value = os.environ.get(env)
            if value is not None:
                try:
                    changes[field] = float(value)
                except ValueError:
                    raise ValueError(f"{env}={value!r} must be a number") from None
        for env, flag in (("ORTMODULE_GRAPH_OPTIMIZATIONS", "graph_optimizations"),
                          ("ORTMODULE_PRINT_MEMORY_STATS", "print_memory_stats")):
            value = os.environ.get(env)
            if value is not None:
                if value not in ("0", "1"):
                    raise ValueError(f"{env}={value!r} must be 0 or 1")
                changes[flag] = value == "1"
        for env, field in (("ORTMODULE_ONNX_PREFIX", "onnx_prefix"), ("ORTMODULE_SAVE_PATH", "save_path"),
                           ("ORTMODULE_EXPORTER", "exporter"),
                           ("ORTMODULE_DYNAMIC_SHAPES", "dynamic_shapes"),
                           ("ORTMODULE_LABEL_SPARSITY", "label_sparsity"),
                           ("ORTMODULE_LINEAR_CROSS_ENTROPY", "linear_cross_entropy"),
                           ("ORTMODULE_CACHE_DIR", "cache_dir")):
            value = os.environ.get(env)
            if value is not None:
                changes[field] = (value or None) if field == "cache_dir" else value
        policy = os.environ.get("ORTMODULE_FALLBACK_POLICY")
        if policy is not None:
            try:
                changes["fallback"] = FallbackPolicy.parse(policy)
            except ValueError as e:
                raise ValueError(f"ORTMODULE_FALLBACK_POLICY: {e}") from None
        return replace(opts, **changes) if changes else opts
