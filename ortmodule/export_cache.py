"""The persistent export cache: lowered graphs kept on disk across processes.

With ``DebugOptions(cache_dir=...)`` (or ``ORTMODULE_CACHE_DIR``) each capture is stored as
one file, named by a digest of everything that can change the lowered graph, and a later
process whose call has the same key loads it instead of tracing and lowering the module
again (the engine still builds its program from the loaded ONNX model).

The key (``cache_key``): the code of every class in the module tree (the source file that
defines it, or its functions' bytecode where no file backs it) and the tree itself
(submodule names and classes, parameter and buffer names, shapes, dtypes, requires_grad,
tied weights), the call's graph-cache key (input structure and constants, tensor dtypes and
ranks, training flags, grad mode, autocast), the input sizes of a graph traced at static
sizes, the options that change the capture, and the versions of Python, torch, onnx,
transformers (when imported) and ortmodule. Device indices, ranks, process ids and paths
are not part of it: the ranks of a distributed job share their entries.

An entry holds the ONNX model and what the capture returns beside it (input and output
schema, initializer bindings by name, buffer updates, shape guards, the exporter used) and
the attribute values forward read while traced; on load those values are compared with the
module's and a difference is a miss. An entry is read only when its header, format version,
length and SHA-256 checksum agree, and its recorded key equals the call's: a truncated,
corrupted or stale entry is rebuilt (and replaced), never used. Entries are written to a
temporary file and renamed into place (``os.replace``), so processes writing at once each
leave a complete entry. A graph with custom ``torch.autograd.Function`` bridge nodes (they
refer to Python callables of the process that captured them) is not stored.

Entries are plain data (JSON and ONNX bytes, no pickle); classes named in the output schema
are resolved by module and qualified name, and the shape guards are checked to be size
conditions before they are evaluated. As with any compile cache, keep the directory
writable only by users whose files you would run.
"""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import inspect
import json
import logging
import os
import struct
import sys
import tempfile
import time
import types
from typing import Any

import torch

from ortmodule import _guards, _schema
from ortmodule._cache_codec import Uncacheable, decode, encode
from ortmodule._call_key import call_key
from ortmodule.capture.common import PREFIX, Captured, bind_initializers
from ortmodule.capture.export import report_bridged_ops
from ortmodule.options import DebugOptions

logger = logging.getLogger("ortmodule")

_MAGIC = b"ORTMXC\x00\x01"
FORMAT_VERSION = 1
_HEADER = struct.Struct("<8sI32sQQ")  # magic, format version, sha256, meta length, onnx length
SUFFIX = ".ortx"


@dataclasses.dataclass
class Stats:
    """Counts since the process started (``stats()``): ``hits`` loaded an entry, ``misses``
    found none, ``rejected`` found one that was corrupted, of another version or key, or
    whose attribute values differ (rebuilt), ``stores`` wrote one, ``uncacheable`` graphs
    could not be stored."""

    hits: int = 0
    misses: int = 0
    rejected: int = 0
    stores: int = 0
    uncacheable: int = 0
    seconds_loading: float = 0.0
    last_reason: str = ""

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


_stats = Stats()


def stats() -> dict[str, Any]:
    """The export cache's counters in this process: hits, misses, rejected, stores,
    uncacheable, seconds_loading, last_reason (why the last entry was rejected or not
    stored)."""
    return _stats.as_dict()


def reset_stats() -> None:
    global _stats
    _stats = Stats()


# ---- the key ----

_FILE_DIGESTS: dict[str, tuple[float, int, str]] = {}


def _file_digest(path: str) -> str:
    stat = os.stat(path)
    known = _FILE_DIGESTS.get(path)
    if known is not None and known[:2] == (stat.st_mtime, stat.st_size):
        return known[2]
    with open(path, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    _FILE_DIGESTS[path] = (stat.st_mtime, stat.st_size, digest)
    return digest


def _code_digest(code: types.CodeType, h: Any) -> None:
    h.update(code.co_code)
    h.update(repr(code.co_names).encode())
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            _code_digest(c, h)
        else:
            h.update(repr(c).encode())


def _class_code(cls: type) -> str:
    """The digest of the code that defines ``cls``: its source file (which holds the
    helpers its methods call too), else the bytecode of its functions."""
    if cls.__module__.split(".")[0] == "torch":
        return "torch"  # torch.__version__ is part of the key
    try:
        path = inspect.getsourcefile(cls)
    except (TypeError, OSError):
        path = None
    if path and os.path.isfile(path):
        return _file_digest(path)
    h = hashlib.sha256()
    for name, attr in sorted(vars(cls).items()):
        fn = getattr(attr, "__func__", attr)
        code = getattr(fn, "__code__", None)
        if isinstance(code, types.CodeType):
            h.update(name.encode())
            _code_digest(code, h)
    return "bytecode:" + h.hexdigest()


def _module_tree(module: torch.nn.Module) -> list:
    classes: dict[type, str] = {}
    tree = []
    for name, m in module.named_modules(remove_duplicate=False):
        for cls in type(m).__mro__:
            if cls is not object and cls not in classes:
                classes[cls] = _class_code(cls)
        tree.append([name, f"{type(m).__module__}.{type(m).__qualname__}"])
    first: dict[int, str] = {}
    params = [
        [n, list(p.shape), str(p.dtype), p.requires_grad, first.setdefault(id(p), n)]
        for n, p in module.named_parameters(remove_duplicate=False)
    ]
    buffers = [
        [n, list(b.shape), str(b.dtype), first.setdefault(id(b), n)]
        for n, b in module.named_buffers(remove_duplicate=False)
    ]
    code = sorted([f"{c.__module__}.{c.__qualname__}", d] for c, d in classes.items())
    return [tree, params, buffers, code]


def _versions() -> dict[str, str]:
    import onnx

    versions = {
        "python": f"{sys.version_info[0]}.{sys.version_info[1]}",
        "torch": torch.__version__,
        "onnx": onnx.__version__,
        "ortmodule": sys.modules["ortmodule"].__version__,
        "format": str(FORMAT_VERSION),
    }
    for name in ("transformers", "onnxscript"):
        mod = sys.modules.get(name)
        if mod is not None:
            versions[name] = getattr(mod, "__version__", "")
    return versions


def key_for(
    options: DebugOptions,
    module: torch.nn.Module,
    in_spec: _schema.Spec,
    tensors: list[torch.Tensor],
    modules: list[Any],
    param_slots: list[tuple[Any, str]],
    dynamic: bool,
) -> tuple[str, str] | None:
    """The (digest, key text) of a call's entry, or None without a cache directory or when
    the call cannot be keyed (said at debug level)."""
    if options.cache_dir is None:
        return None
    key = call_key(in_spec, tensors, modules, param_slots)
    try:
        return cache_key(
            module,
            key,
            tensors,
            dynamic,
            {"exporter": options.exporter, "fallback": str(options.fallback), "dynamic": dynamic},
        )
    except Uncacheable as e:
        _stats.uncacheable += 1
        _stats.last_reason = str(e)
        logger.debug("export cache: not used for this call of %s: %s", type(module).__name__, e)
        return None


def cache_key(
    module: torch.nn.Module,
    key: Any,
    tensors: list[torch.Tensor],
    dynamic: bool,
    options: dict[str, Any],
) -> tuple[str, str]:
    """(digest, canonical text) of what the lowered graph of this call depends on; raises
    Uncacheable when a part of it has no stable name."""
    text = json.dumps(
        {
            "versions": _versions(),
            "module": _module_tree(module),
            "call": encode(key),
            "sizes": None if dynamic else [list(t.shape) for t in tensors],
            "options": encode(tuple(sorted(options.items()))),
        },
        sort_keys=True,
        separators=(",", ":"),
    )
    return hashlib.sha256(text.encode()).hexdigest(), text


# ---- attribute guards: recorded by owner description, resolved again on load ----


def _encode_attributes(guard: _guards.AttributeGuard) -> list:
    """Per attribute: its owner, name, the value forward read first and the value forward left
    (a Hugging Face model fills ``config.problem_type`` on its first call); per tensor
    attribute the digest of its contents."""
    out = []
    first = guard.first_read or [v for _, _, v, _ in guard.values]
    for (_, name, value, owner), before in zip(guard.values, first):
        out.append(["value", owner, name, [encode(before), encode(value)]])
    for _, name, tensor, _, owner in guard.tensors:
        out.append(["tensor", owner, name, _tensor_digest(tensor)])
    return out


def _tensor_digest(t: torch.Tensor) -> str:
    data = t.detach().cpu().contiguous()
    h = hashlib.sha256(f"{data.dtype}{tuple(data.shape)}".encode())
    h.update(data.view(torch.uint8).numpy().tobytes() if data.numel() else b"")
    return h.hexdigest()


def _decode_attributes(
    records: list, module: torch.nn.Module
) -> tuple[_guards.AttributeGuard, list[tuple[dict, str, Any]]] | None:
    """The guard of a loaded entry bound to this module's objects, and the attributes to set
    as forward set them while traced; None when a recorded owner is missing or an attribute's
    value differs from the one forward read."""
    owners = _guards.attribute_owners(module)
    guard = _guards.AttributeGuard()
    writes: list[tuple[dict, str, Any]] = []
    for kind, owner, name, value in records:
        obj = owners.get(owner)
        if obj is None:
            return None
        d = object.__getattribute__(obj, "__dict__")
        current = d.get(name, _guards._MISSING)
        if kind == "value":
            before, after = decode(value[0]), decode(value[1])
            if current is _guards._MISSING or (current is not before and current != before):
                return None
            if after is not before and after != before:
                writes.append((d, name, after))
            guard.values.append((d, name, after, owner))
            guard.first_read.append(before)
        else:
            if not isinstance(current, torch.Tensor) or _tensor_digest(current) != value:
                return None
            guard.tensors.append((d, name, current, current._version, owner))
    return guard, writes


# ---- shape guards: size conditions only ----

_GUARD_NODES = (
    ast.Expression,
    ast.BoolOp,
    ast.And,
    ast.Or,
    ast.UnaryOp,
    ast.Not,
    ast.USub,
    ast.BinOp,
    ast.Add,
    ast.Sub,
    ast.Mult,
    ast.FloorDiv,
    ast.Mod,
    ast.Div,
    ast.Compare,
    ast.Eq,
    ast.NotEq,
    ast.Lt,
    ast.LtE,
    ast.Gt,
    ast.GtE,
    ast.Constant,
    ast.Subscript,
    ast.Tuple,
    ast.Load,
    ast.Call,
    ast.Name,
    ast.Attribute,
)


def _check_guard(text: str) -> None:
    for node in ast.walk(ast.parse(text, mode="eval")):
        if not isinstance(node, _GUARD_NODES):
            raise TypeError(f"shape guard {text!r} holds a {type(node).__name__}")
        if isinstance(node, ast.Name) and node.id not in ("L", "min", "max"):
            raise ValueError(f"shape guard {text!r} names {node.id}")
        if isinstance(node, ast.Attribute) and node.attr != "size":
            raise ValueError(f"shape guard {text!r} reads .{node.attr}")
        if isinstance(node, ast.Constant) and not isinstance(node.value, (int, str)):
            raise TypeError(f"shape guard {text!r} holds {node.value!r}")


# ---- entries ----


@dataclasses.dataclass
class Loaded:
    captured: Captured
    attributes: _guards.AttributeGuard = dataclasses.field(default_factory=_guards.AttributeGuard)


def _path(directory: str, digest: str) -> str:
    return os.path.join(directory, digest + SUFFIX)


def _reject(path: str, why: str) -> None:
    _stats.rejected += 1
    _stats.last_reason = why
    logger.info("export cache: entry %s is not used (%s); capturing again", path, why)


def load(directory: str, digest: str, key_text: str, module: torch.nn.Module) -> Loaded | None:
    """The entry stored under ``digest`` when it is intact, of this format and key, and
    its recorded attribute values hold for ``module``; else None (counted and logged)."""
    start = time.perf_counter()
    path = _path(directory, digest)
    try:
        with open(path, "rb") as f:
            blob = f.read()
    except OSError as e:  # no entry yet, or a directory this process cannot read
        _stats.misses += 1
        if not isinstance(e, FileNotFoundError):
            logger.info(
                "export cache: cannot read %s (%s: %s); capturing", path, type(e).__name__, e
            )
        return None
    try:
        loaded = _parse(blob, key_text, module)
    except (ValueError, LookupError, TypeError, AttributeError, struct.error, SyntaxError) as e:
        _reject(path, f"{type(e).__name__}: {e}")
        return None
    if loaded is None:
        _reject(path, "the attribute values forward read differ from the recorded ones")
        return None
    _stats.hits += 1
    report_bridged_ops(module, loaded.captured)
    seconds = time.perf_counter() - start
    _stats.seconds_loading += seconds
    loaded.captured.seconds = {"cache_load": seconds}
    logger.info(
        "export cache: loaded %s (%s, %d bytes) instead of capturing %s",
        path,
        loaded.captured.exporter,
        len(blob),
        type(module).__name__,
    )
    return loaded


def _parse(blob: bytes, key_text: str, module: torch.nn.Module) -> Loaded | None:
    if len(blob) < _HEADER.size:
        raise ValueError(f"the file has {len(blob)} bytes, fewer than its header")
    magic, version, checksum, meta_len, onnx_len = _HEADER.unpack_from(blob)
    if magic != _MAGIC:
        raise ValueError("not an ortmodule export cache entry")
    if version != FORMAT_VERSION:
        raise ValueError(f"format version {version}, this ortmodule reads {FORMAT_VERSION}")
    body = blob[_HEADER.size :]
    if len(body) != meta_len + onnx_len:
        raise ValueError(
            f"the file holds {len(body)} bytes after its header, its header "
            f"says {meta_len + onnx_len} (truncated or appended to)"
        )
    if hashlib.sha256(body).digest() != checksum:
        raise ValueError("checksum mismatch (the file was corrupted)")
    meta = json.loads(body[:meta_len])
    if meta["key"] != key_text:
        raise ValueError("the entry was stored for another key (a digest collision)")
    decoded = _decode_attributes(meta["attributes"], module)
    if decoded is None:
        return None
    attributes, writes = decoded
    for g in meta["shape_guards"]:
        _check_guard(g)
    bound = meta["bindings"]
    bindings = bind_initializers(module, bound, PREFIX)
    if sorted(bindings) != sorted(bound):
        raise ValueError("the module's parameters and buffers no longer match the entry")
    captured = Captured(
        onnx_bytes=body[meta_len:],
        input_names=meta["input_names"],
        output_names=meta["output_names"],
        output_spec=_decode_spec(meta["output_spec"]),
        bindings=bindings,
        state_outputs=[tuple(p) for p in meta["state_outputs"]],
        shape_guards=list(meta["shape_guards"]),
        exporter=meta["exporter"],
    )
    # What forward set while traced, it sets here (the graph holds for those values).
    for d, name, value in writes:
        d[name] = value
    return Loaded(captured, attributes)


def _decode_spec(spec: Any) -> _schema.Spec:
    value = decode(spec)
    if not (isinstance(value, tuple) and value and isinstance(value[0], str)):
        raise ValueError("the output schema is not a schema node")
    return value


def uncacheable_reason(captured: Captured) -> str:
    """Why the capture cannot be stored ("" when it can)."""
    calls = getattr(captured.callables, "ids", None)
    if calls:
        names = sorted({getattr(c, "name", "?") for c in calls.values()})
        return (
            "its graph calls custom torch.autograd.Function(s) "
            f"{', '.join(names)} of this process as bridge nodes"
        )
    return ""


def _write(directory: str, digest: str, data: bytes) -> None:
    """Writes the entry to a temporary file in ``directory`` and renames it into place: a
    reader sees the old entry or the new one, never a part."""
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-", suffix=SUFFIX)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, _path(directory, digest))
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def store(
    directory: str,
    digest: str,
    key_text: str,
    captured: Captured,
    attributes: _guards.AttributeGuard,
) -> bool:
    """Writes the entry atomically; False (and a debug log) when the capture cannot be
    stored."""
    reason = uncacheable_reason(captured)
    try:
        if reason:
            raise Uncacheable(reason)
        meta = {
            "key": key_text,
            "input_names": captured.input_names,
            "output_names": captured.output_names,
            "output_spec": encode(captured.output_spec),
            "bindings": sorted(captured.bindings),
            "state_outputs": [list(p) for p in captured.state_outputs],
            "shape_guards": list(captured.shape_guards),
            "exporter": captured.exporter,
            "attributes": _encode_attributes(attributes),
        }
    except Uncacheable as e:
        _stats.uncacheable += 1
        _stats.last_reason = str(e)
        logger.debug("export cache: not storing this graph: %s", e)
        return False
    meta_bytes = json.dumps(meta, sort_keys=True).encode()
    body = meta_bytes + captured.onnx_bytes
    header = _HEADER.pack(
        _MAGIC,
        FORMAT_VERSION,
        hashlib.sha256(body).digest(),
        len(meta_bytes),
        len(captured.onnx_bytes),
    )
    try:
        _write(directory, digest, header + body)
    except OSError as e:
        # The graph in memory is complete: training goes on, the cache is what fails.
        _stats.uncacheable += 1
        _stats.last_reason = f"{type(e).__name__}: {e}"
        logger.warning(
            "export cache: could not write an entry into %s (%s: %s); this graph "
            "is not stored, the next process captures it again: give "
            "DebugOptions(cache_dir=...) / ORTMODULE_CACHE_DIR a writable directory",
            directory,
            type(e).__name__,
            e,
        )
        return False
    _stats.stores += 1
    logger.info("export cache: stored %s", _path(directory, digest))
    return True
