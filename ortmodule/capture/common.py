"""What every layer of capture shares: the capture's result (``Captured``) and its errors,
the flattening wrapper that torch.export traces, the ONNX constants the lowerings agree on,
the source-line helpers and the checks made before a trace.

Capture is a package of layers, each importing only those below it (tests/python/
test_layers.py checks): ``common`` -> ``bridge`` (trace-time interception) -> ``trace`` (the
one torch.export trace and its ``finish``) -> the lowerings ``fx`` and ``torch_onnx``, which
never import each other -> ``export``, the front door and the only module that names a
lowering.
"""

from __future__ import annotations

import contextlib
import ctypes
import linecache
import logging
import operator
import re
import sysconfig
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from ortmodule import _schema

logger = logging.getLogger("ortmodule")

OPSET = 20  # the ONNX opset both lowerings write
# The engine's own ops (TorchCall, StopGradient, Embedding, BatchNormTorch, ...).
OWN_DOMAIN = "ai.ortmodule"
# FX node meta["custom"] key and ONNX node metadata key of checkpoint regions.
REGION_KEY = "ortmodule.checkpoint_region"
PREFIX = "module."  # the wrapper's attribute holding the user's module: initializer prefix
FALLBACK_POLICY_HINT = (
    "To run the ops the engine lacks on PyTorch instead (each one as a single graph node "
    "whose gradient comes from autograd), pass "
    "DebugOptions(fallback=FallbackPolicy.UNSUPPORTED_OP) or set "
    "ORTMODULE_FALLBACK_POLICY=unsupported_op.")

class ExportError(RuntimeError):
    """The wrapped module could not be exported to ONNX."""


class DataDependentError(ExportError):
    """Forward reads a tensor's value in Python: a graph cannot hold it (a graph break can)."""


@dataclass
class Captured:
    # The ONNX model; the initializers of the module's parameters and buffers (bindings) hold
    # their dtype and shape only (with_state_values fills them in).
    onnx_bytes: bytes
    input_names: list[str]  # one per flattened user tensor
    output_names: list[str]
    output_spec: _schema.Spec
    # ONNX initializer name -> (owner module, "param"/"buffer", attribute name, state_dict name)
    bindings: dict[str, tuple[torch.nn.Module, str, str, str]] = field(default_factory=dict)
    # (graph output, initializer) pairs: forward's new value of a buffer, which the engine
    # writes back into it after every forward (BatchNorm running statistics, counters).
    state_outputs: list[tuple[str, str]] = field(default_factory=list)
    # Python conditions over the input sizes, L['tensors'][i].size()[d], under which the
    # graph is valid (pinned sizes, relations the model code relied on); other sizes
    # need a new export.
    shape_guards: list[str] = field(default_factory=list)
    exporter: str = "dynamo"
    seconds: dict[str, float] = field(default_factory=dict)  # time per capture stage
    # Keeps the Python callables of the graph's bridge nodes registered (bridge).
    callables: Any = None


class _Recorded:
    spec: _schema.Spec | None = None


class FlatWrapper(torch.nn.Module):
    """Calls the module from a flat tuple of tensors and returns a flat tuple."""

    def __init__(self, module: torch.nn.Module, in_spec: _schema.Spec,
                 return_buffers: bool = False,
                 autocast: tuple[str, torch.dtype] | None = None) -> None:
        super().__init__()
        self.module = module
        self.in_spec = in_spec
        self.return_buffers = return_buffers
        self.autocast = autocast  # (device type, dtype) of the autocast forward runs under
        # torch.export restores attributes and containers it sees changed after tracing;
        # a plain object's fields survive.
        self._recorded = _Recorded()

    @property
    def output_spec(self) -> _schema.Spec | None:
        return self._recorded.spec

    def forward(self, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        args, kwargs = _schema.unflatten(self.in_spec, list(tensors))
        if self.autocast is not None:
            # Traced inside the region, the casts autocast makes become part of the graph.
            with torch.autocast(self.autocast[0], dtype=self.autocast[1]):
                out = self.module(*args, **kwargs)
        else:
            out = self.module(*args, **kwargs)
        flat: list[torch.Tensor] = []
        self._recorded.spec = _schema.flatten(out, flat)
        if not flat:
            raise ExportError("the module returned no tensors")
        if self.return_buffers:
            # Every buffer's value after forward, as extra outputs: the graph then computes
            # the updates forward makes to buffers (which the exporter would otherwise
            # drop). Outputs of unchanged buffers are pruned after export.
            flat.extend(b.clone() for _, b in named_buffers(self.module))
        return tuple(flat)


@contextlib.contextmanager
def preserve_state(module: torch.nn.Module, changed: list[str] | None = None):
    """Export runs the module once; undo its side effects (buffer updates, RNG draws).
    ``changed`` receives the names of the buffers the run modified."""
    buffers = {name: b.detach().clone() for name, b in module.named_buffers()}
    rng = torch.random.get_rng_state()
    try:
        yield
    finally:
        with torch.no_grad():
            for name, b in module.named_buffers():
                if name in buffers:
                    if changed is not None and not torch.equal(b, buffers[name]):
                        changed.append(name)
                    b.copy_(buffers[name])
        torch.random.set_rng_state(rng)


_INTERNAL_PATHS = ("/torch/", "/onnxscript/", "/onnx/", "/onnx_ir/", "/ortmodule/", "<frozen")


@contextlib.contextmanager
def surface_warnings():
    """Collects the warnings raised while the module is captured and re-emits the ones
    the user must see: those raised by the model's own code (which eager PyTorch would
    show too) and the tracer's warnings about values it baked into the graph. The
    exporters' own chatter is dropped."""
    from torch.jit import TracerWarning

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield
    stdlib = sysconfig.get_paths()["stdlib"]
    seen = set()
    for w in caught:
        internal = (any(p in w.filename for p in _INTERNAL_PATHS)
                    or w.filename.startswith(stdlib))
        if internal and not issubclass(w.category, TracerWarning):
            continue
        key = (str(w.message), w.category, w.filename, w.lineno)
        if key in seen:
            continue
        seen.add(key)
        message = w.message
        if issubclass(w.category, TracerWarning):
            message = TracerWarning(
                f"{w.message} (ORTModule: the captured graph keeps this value fixed; calls "
                "that need another value get a wrong result unless its input shapes or "
                "types differ; the default exporter guards on such values)")
        warnings.warn_explicit(message, w.category, w.filename, w.lineno)


def _owner(module: torch.nn.Module, dotted: str) -> tuple[torch.nn.Module, str]:
    *path, attr = dotted.split(".")
    owner = module
    for p in path:
        owner = getattr(owner, p)
    return owner, attr


def named_buffers(module: torch.nn.Module) -> list[tuple[str, torch.Tensor]]:
    return [(n, b) for n, b in module.named_buffers() if b is not None]


def raw_bytes(t: torch.Tensor) -> bytes:
    """The bytes of a contiguous CPU tensor. Not through Tensor.numpy(): that marks the
    tensor's storage as not resizable for good, and FSDP2 frees and re-gathers parameters by
    resizing their storage."""
    return ctypes.string_at(t.data_ptr(), t.numel() * t.element_size()) if t.numel() else b""


def with_state_values(onnx_bytes: bytes,
                      bindings: dict[str, tuple[torch.nn.Module, str, str, str]]) -> bytes:
    """A captured model (whose parameters' and buffers' initializers hold no values: the
    engine feeds them) with their current values, as a model other runtimes load."""
    import onnx

    model = onnx.load_from_string(onnx_bytes)
    for init in model.graph.initializer:
        bound = bindings.get(init.name)
        if bound is not None:
            owner, _, attr, _ = bound
            init.raw_data = raw_bytes(getattr(owner, attr).detach().cpu().contiguous())
    return model.SerializeToString()


def bind_initializers(module: torch.nn.Module, names: list[str], prefix: str
                      ) -> dict[str, tuple[torch.nn.Module, str, str, str]]:
    """Maps ONNX initializer names (``prefix`` + state_dict-style name) to the parameters
    and buffers they hold. A tied weight has several names but is one initializer."""
    bindings: dict[str, tuple[torch.nn.Module, str, str, str]] = {}
    params = dict(module.named_parameters(remove_duplicate=False))
    buffers = dict(module.named_buffers(remove_duplicate=False))
    for init_name in names:
        name = init_name.removeprefix(prefix)
        if name in params:
            owner, attr = _owner(module, name)
            bindings[init_name] = (owner, "param", attr, name)
        elif name in buffers:
            owner, attr = _owner(module, name)
            bindings[init_name] = (owner, "buffer", attr, name)
    return bindings


def _user_frame_of(tb) -> tuple[str, int, str] | None:
    """The innermost frame of user code (outside torch and ortmodule) in a traceback."""
    found = None
    while tb is not None:
        filename = tb.tb_frame.f_code.co_filename
        if not any(p in filename for p in _INTERNAL_PATHS) and not filename.startswith("<"):
            found = (filename, tb.tb_lineno, linecache.getline(filename, tb.tb_lineno).strip())
        tb = tb.tb_next
    return found


def find_in_chain(error: BaseException, cls: type[BaseException]) -> BaseException | None:
    """The first exception of type ``cls`` in ``error``'s cause/context chain (exporters
    wrap the exceptions raised inside them in their own types)."""
    seen = set()
    e: BaseException | None = error
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, cls):
            return e
        e = e.__cause__ or e.__context__
    return None


def packed_sequence_layer(error: BaseException) -> str | None:
    """The recurrent layer (torch.nn.LSTM, GRU, RNN) whose forward was running on a
    PackedSequence when ``error`` (or an exception it wraps) was raised, if any: torch.export
    cannot trace those (their batch sizes are tensor values), nor does the engine run them."""
    seen = set()
    e: BaseException | None = error
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        tb = e.__traceback__
        while tb is not None:
            local = tb.tb_frame.f_locals
            if (tb.tb_frame.f_code.co_name == "forward"
                    and isinstance(local.get("self"), torch.nn.RNNBase)
                    and isinstance(local.get("orig_input"), torch.nn.utils.rnn.PackedSequence)):
                return type(local["self"]).__name__
            tb = tb.tb_next
        e = e.__cause__ or e.__context__
    return None


def explain_failure(module: torch.nn.Module, args: tuple, kwargs: dict,
                    error: ExportError) -> ExportError:
    """After a failed export: if the module's own forward raises in eager PyTorch, that
    exception (its type, message and traceback) propagates from here. Otherwise returns the
    error to report: one naming the source line when forward branched on a tensor's value,
    else ``error`` itself."""
    with preserve_state(module), torch.no_grad():
        module(*args, **kwargs)  # the user's own exception propagates from here unchanged
    from torch.fx.experimental.symbolic_shapes import GuardOnDataDependentSymNode

    data_dependent = find_in_chain(error, GuardOnDataDependentSymNode)
    if data_dependent is None:
        return error
    where = _user_frame_of(data_dependent.__traceback__)
    line = f"{where[0]}:{where[1]}: `{where[2]}`" if where else "an unknown line"
    explained = ExportError(
        f"{type(module).__name__}.forward uses the value of a tensor in Python control flow "
        f"at {line}. A compiled graph cannot follow such a branch (it would silently take "
        "the branch of the first call): express it with tensor operations (torch.where, "
        "masking, torch.cond), or allow graph breaks (FallbackPolicy.GRAPH_BREAK, in the "
        "default policy) to run the code around it as engine graphs and the branch in eager "
        "PyTorch.")
    explained.__cause__ = error
    return explained


def is_data_dependent(error: BaseException) -> bool:
    """Whether an export failed because forward used a tensor's value in Python (a branch, a
    size or a Python number computed from it) or an op whose output depends on the data (its
    size, or a Python value such as ``torch.equal``'s)."""
    from torch._subclasses.fake_tensor import (
        DataDependentOutputException,
        DynamicOutputShapeException,
    )
    from torch.fx.experimental.symbolic_shapes import (
        GuardOnDataDependentSymNode,
        PendingUnbackedSymbolNotFound,
    )

    return any(find_in_chain(error, cls) is not None
               for cls in (DataDependentError, GuardOnDataDependentSymNode, DataDependentOutputException,
                           DynamicOutputShapeException, PendingUnbackedSymbolNotFound))


# Ops that turn a tensor's value into a Python number (.item(), .tolist(), int(t)).
_PYTHON_VALUE_OPS = ("aten.item.default", "aten._local_scalar_dense.default")


# What torch.export adds after a bool tensor's .item(): its symbol's range checks (u in [0, 1]).
_RANGE_CHECKS = (torch.sym_ite, operator.ge, operator.le, operator.gt, operator.lt,
                 operator.eq, torch.ops.aten._assert_scalar.default)


def outputs_read_as_numbers(program: torch.export.ExportedProgram) -> None:
    """Rewrites forward's outputs that are Python numbers read from a one-element tensor
    (``x.item()`` returned as it is, which FlatWrapper turned into a 0-d tensor of the
    number: scalar_tensor(item(x))) into that tensor itself, detached (a number carries no
    gradient) and cast to float64, int64 or bool: the graph computes it and the boundary
    hands back the number (_schema's "S" nodes). A read used any other way stays, for
    check_no_python_values."""
    graph = program.graph
    aten = torch.ops.aten
    output = next(n for n in graph.nodes if n.op == "output")
    reads = []
    for node in output.args[0]:
        if not isinstance(node, torch.fx.Node) or node.target is not aten.scalar_tensor.default:
            continue
        read = node.args[0]
        if not isinstance(read, torch.fx.Node) or str(read.target) not in _PYTHON_VALUE_OPS:
            continue
        source, out = read.args[0], node.meta["val"]
        if not isinstance(source.meta.get("val"), torch.Tensor):
            continue
        # Its source line and module (not its symbol's bindings: the new nodes are tensors).
        meta = {k: read.meta[k] for k in ("stack_trace", "nn_module_stack", "custom")
                if k in read.meta}
        with graph.inserting_before(node):
            flat = graph.call_function(aten.reshape.default, (source, []))
            detached = graph.call_function(aten.detach.default, (flat,))
        for made in (flat, detached):
            made.meta.update(meta)
            with out.fake_mode:
                made.meta["val"] = torch.empty((), dtype=source.meta["val"].dtype,
                                               device=out.device)
        node.target, node.args, node.kwargs = aten._to_copy.default, (detached,), {
            "dtype": out.dtype}
        reads.append(read)
    order = {n: k for k, n in enumerate(graph.nodes)}
    for read in dict.fromkeys(reads):
        checks, stack = set(), list(read.users)
        while stack:
            user = stack.pop()
            if user.target not in _RANGE_CHECKS:
                break
            checks.add(user)
            stack.extend(u for u in user.users if u not in checks)
        else:
            for n in sorted(checks, key=order.__getitem__, reverse=True):
                graph.erase_node(n)
            graph.erase_node(read)
    if reads:
        program.graph_module.recompile()


def check_no_python_values(program: torch.export.ExportedProgram,
                           module: torch.nn.Module) -> None:
    """Raises DataDependentError where forward reads a tensor's value as a Python number
    (``.item()``, ``.tolist()``): torch.export traces it as a symbol the engine's graph cannot
    compute."""
    for node in program.graph.nodes:
        if node.op == "call_function" and str(node.target) in _PYTHON_VALUE_OPS:
            where = fx_source_line(node) or "an unknown line"
            raise DataDependentError(
                f"{type(module).__name__}.forward reads a tensor's value as a Python number "
                f"(.item(), .tolist()) at {where}. A compiled graph cannot compute it: use "
                "the tensor itself in tensor operations, or allow graph breaks "
                "(FallbackPolicy.GRAPH_BREAK, in the default policy) to run the code around "
                "it as engine graphs and the read in eager PyTorch.")


def check_one_device(module: torch.nn.Module, args: tuple, kwargs: dict) -> None:
    """Raises ValueError when a tensor argument is on another device than the module's
    parameters: a graph runs the kernels of one device (checked before capture, whose own
    error would name a fake-tensor rule rather than the argument)."""
    param = next(((n, p) for n, p in module.named_parameters()), None)
    if param is None:
        return
    name, p = param
    labelled = [(f"argument {i}", a) for i, a in enumerate(args)]
    labelled += [(f"argument '{k}'", v) for k, v in kwargs.items()]
    for label, value in labelled:
        if isinstance(value, torch.Tensor) and value.device != p.device:
            raise ValueError(
                f"{type(module).__name__}: input {label} is on {value.device} but input "
                f"'{name}' (a parameter) is on {p.device}; a graph runs on one device: move "
                f"the input with .to('{p.device}') or the module with .to('{value.device}')")


def check_real(program: torch.export.ExportedProgram) -> None:
    """Refuses a program holding complex tensors: the engine has no complex types, and a
    lowering that stored them as real pairs would return something else than eager does."""
    for node in program.graph.nodes:
        vals = node.meta.get("val")
        for val in vals if isinstance(vals, (list, tuple)) else [vals]:
            if isinstance(val, torch.Tensor) and val.is_complex():
                what = (f"input {node.name}" if node.op == "placeholder" else
                        f"{node.target} (from {fx_source_line(node) or 'an unknown line'})")
                raise ExportError(
                    f"{what} makes a {val.dtype} tensor; ORTModule has no complex tensors. "
                    "Compute with the real and imaginary parts as real tensors "
                    "(torch.view_as_real / torch.view_as_complex outside the wrapped module), "
                    "or run this part of the model outside ORTModule")


def check_no_outside_grad_tensors(program: torch.export.ExportedProgram,
                                  module: torch.nn.Module) -> None:
    """Refuses a program that reads, as a constant, a tensor that requires grad from outside
    the module (a closure or global, another module's parameter): eager PyTorch gives it a
    gradient, a constant of the graph would not get one (nor see its updates)."""
    from torch.export.graph_signature import InputKind

    lifted = [s for s in program.graph_signature.input_specs
              if s.kind == InputKind.CONSTANT_TENSOR and s.target in program.constants]
    if not lifted:
        return
    import gc

    storages = {}
    for spec in lifted:
        t = program.constants[spec.target]
        if isinstance(t, torch.Tensor) and not t.is_meta and t.numel():
            storages[t.untyped_storage().data_ptr()] = spec
    if not storages:
        return
    for obj in gc.get_objects():
        # type(), not isinstance(): the latter asks a weakref.proxy (TorchDynamo keeps some)
        # for its class, which raises once its referent is gone.
        if not (issubclass(type(obj), torch.Tensor) and obj.requires_grad and obj.is_leaf):
            continue
        try:
            spec = storages.get(obj.untyped_storage().data_ptr())
        except (RuntimeError, NotImplementedError):  # tensors without storage
            continue
        if spec is None:
            continue
        users = [n for n in program.graph.nodes if n.op == "placeholder"
                 and n.name == spec.arg.name for n in n.users]
        where = next((fx_source_line(u) for u in users if fx_source_line(u)), "")
        kind = "a parameter" if isinstance(obj, torch.nn.Parameter) else "a tensor"
        raise ExportError(
            f"{type(module).__name__}.forward reads {kind} of shape {tuple(obj.shape)} that "
            f"requires grad but is not a parameter, buffer or input of the wrapped module"
            f"{' (at ' + where + ')' if where else ''}: a closure, a global or another module "
            "outside its tree. ORTModule would treat it as a constant (no gradient, later "
            "updates unseen). Register its module as a submodule of the wrapped one (or wrap "
            "a module that holds both), or pass the tensor as an input")


def check_supported(module: torch.nn.Module) -> None:
    """Rejects module configurations the exported graph cannot reproduce."""
    for name, m in module.named_modules():
        if (isinstance(m, torch.nn.modules.batchnorm._BatchNorm) and m.training
                and m.track_running_stats and m.momentum is None):
            raise NotImplementedError(
                f"{type(m).__name__} '{name}' uses momentum=None (cumulative moving average), "
                "whose factor changes every step while the exported graph fixes it; "
                "give it a numeric momentum (PyTorch's default is 0.1)"
            )


@contextlib.contextmanager
def outside_autocast() -> Iterator[None]:
    """The caller's autocast regions switched off: they apply inside the traced forward only
    (FlatWrapper), not to the exporter's own computations."""
    with contextlib.ExitStack() as stack:
        for device in ("cpu", "cuda"):
            if torch.is_autocast_enabled(device):
                stack.enter_context(torch.autocast(device, enabled=False))
        yield


@contextlib.contextmanager
def forget_source_files_read() -> Iterator[None]:
    """Drops the source files that tracing read into ``linecache`` (torch.export formats a
    stack trace per node: several MiB of library sources kept for the process's lifetime).
    Only entries read from files during the block go; the ones already there, and those that
    no file backs (interactive cells, lazily registered modules), stay."""
    before = set(linecache.cache)
    try:
        yield
    finally:
        for name in list(linecache.cache):
            entry = linecache.cache.get(name)
            # A file-backed entry is (size, mtime, lines, fullname) with an mtime; the others
            # cannot be read back.
            if name not in before and entry is not None and len(entry) == 4 and entry[1]:
                linecache.cache.pop(name, None)



# ---- where a node came from ----

_OWN_FILE = "/ortmodule/capture/"  # capture's own frames (the flattening wrapper, the bridge)
_FRAME = re.compile(r'File "([^"]+)", line (\d+), in (\S+)\n\s*(.*)')


def user_frame(stack_trace: str) -> str:
    """The innermost frame of user code (outside torch and ortmodule) of a stack."""
    frames = _FRAME.findall(stack_trace)
    user = [f for f in frames if "/torch/" not in f[0] and _OWN_FILE not in f[0]]
    if not user:
        return ""
    path, line, func, code = user[-1]
    return f"{path}({line}): {func}: {code.strip()}"


def fx_source_line(node: torch.fx.Node) -> str:
    return user_frame(node.meta.get("stack_trace") or "")
