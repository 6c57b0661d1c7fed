"""PyTorch's operator database through ORTModule: every OpInfo entry with float32 CPU
support, its first sample inputs through a one-op module, forward and every input gradient
against eager PyTorch.

Each entry gets one class (the worst of its samples):

- ``native``: matches eager, the graph runs on the engine only;
- ``bridged``: matches eager, some ops run on PyTorch (TorchCall bridge nodes);
- ``graph-break``: matches eager, forward is split at a graph break (the op reads a tensor's
  value in Python or has a data-dependent output): the op runs in eager PyTorch between
  engine graphs (the reason names the breaks);
- ``refused``: ORTModule raised (the reason is its error's first line);
- ``mismatch``: a value, dtype, shape, ``requires_grad`` or gradient differs from eager
  with no error: silently wrong, which the test fails on.

Samples eager PyTorch itself rejects are left out; an entry whose samples all are is
``eager-error``. Ops whose eager result differs between two runs on the same input or that
seed themselves (random ops), and the ``empty*`` factories (uninitialised memory), are
compared by shape and dtype only.

``python -m tests.python.opinfo_run --update`` rewrites ``tests/python/opinfo_expected.txt``
(one line per entry: ``name: class: reason``), from which tools/gen_ops_doc.py writes the
table in docs/supported_ops.md; ``test_opinfo.py`` runs the same and compares.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import io
import itertools
import json
import logging
import math
import os
import re
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
import torch.utils._pytree as pytree

EXPECTED = Path(__file__).with_name("opinfo_expected.txt")
SAMPLES_PER_OP = int(os.environ.get("ORTMODULE_OPINFO_SAMPLES", "2"))
# The fx lowering, bridging what it cannot translate: "native" means an engine kernel for
# every op through ortmodule's own translations (the default exporter may also reach
# engine kernels through torch.onnx's, at a slower first call).
EXPORTER = os.environ.get("ORTMODULE_OPINFO_EXPORTER", "fx")
RTOL, ATOL = 1e-4, 1e-5  # float32; float64 samples: 1e-7
RTOL64, ATOL64 = 1e-7, 1e-7
CLASSES = ("native", "bridged", "graph-break", "refused", "mismatch", "eager-error")
_WORST = {c: k for k, c in enumerate(("eager-error", "native", "bridged", "graph-break",
                                      "refused", "mismatch"))}


def entry_name(op: Any) -> str:
    return op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")


def entries() -> list[Any]:
    """The OpInfo entries with a float32 CPU sample, in op_db order."""
    from torch.testing._internal.common_methods_invocations import op_db

    return [op for op in op_db if op.supports_dtype(torch.float32, "cpu")]


class OneOp(torch.nn.Module):
    """``fn(*args, **kwargs)`` with the sample's tensors as the module's inputs."""

    def __init__(self, fn: Any, leaves: list[Any], spec: Any, positions: list[int]) -> None:
        super().__init__()
        self.fn = fn
        self.leaves = leaves
        self.spec = spec
        self.positions = positions

    def forward(self, *tensors: torch.Tensor) -> Any:
        leaves = list(self.leaves)
        for p, t in zip(self.positions, tensors):
            leaves[p] = t
        inp, args, kwargs = pytree.tree_unflatten(leaves, self.spec)
        return self.fn(inp, *args, **kwargs)


def _inputs(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    out = []
    for t in tensors:
        c = t.detach().clone()
        if t.requires_grad:
            c.requires_grad_(True)
        out.append(c)
    return out


def _flat_tensors(value: Any) -> list[Any]:
    return [v for v in pytree.tree_leaves(value) if isinstance(v, torch.Tensor)]


def _close(a: torch.Tensor, b: torch.Tensor) -> str:
    """'' when ``b`` (ORTModule's) matches ``a`` (eager's), else what differs."""
    if a.shape != b.shape:
        return f"shape {tuple(b.shape)} where eager has {tuple(a.shape)}"
    if a.dtype != b.dtype:
        return f"dtype {b.dtype} where eager has {a.dtype}"
    if a.is_complex() or not (a.is_floating_point()):
        if not torch.equal(a, b):
            return "values differ"
        return ""
    rtol, atol = (RTOL64, ATOL64) if a.dtype == torch.float64 else (RTOL, ATOL)
    if not torch.allclose(a, b, rtol=rtol, atol=atol, equal_nan=True):
        diff = (a.double() - b.double()).abs().nan_to_num(float("inf")).max().item()
        return f"values differ (max abs {diff:.3g})"
    return ""


def _same_python_value(a: Any, b: Any) -> bool:
    """Whether ``b`` (ORTModule's) is eager's non-tensor output ``a``: the same type, and the
    same value (a float to the float32 tolerance)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return math.isclose(a, b, rel_tol=RTOL, abs_tol=ATOL) or (math.isnan(a) and math.isnan(b))
    return bool(a == b)


def _weights(outputs: list[torch.Tensor]) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return [torch.randn(o.shape, generator=g, dtype=o.dtype) if o.is_floating_point() else None
            for o in outputs]


def _grads(outputs: list[torch.Tensor], weights: list[Any], inputs: list[torch.Tensor]
           ) -> list[Any] | None:
    """Gradients of sum(weights * outputs) with respect to the inputs that require grad."""
    terms = [(o * w).sum() for o, w in zip(outputs, weights)
             if w is not None and o.requires_grad]
    wrt = [t for t in inputs if t.requires_grad]
    if not terms or not wrt:
        return None
    return list(torch.autograd.grad(sum(terms), wrt, allow_unused=True))


def _float64_outputs(module: Any, tensors: list[torch.Tensor]) -> list[torch.Tensor] | None:
    """Eager's outputs with every floating-point input in float64 (None if the op does not
    run so)."""
    inputs = [t.detach().double() if t.is_floating_point() else t.detach() for t in tensors]
    try:
        with torch.no_grad():
            return _flat_tensors(module(*inputs))
    except Exception:  # noqa: BLE001 (no float64 reference: eager's float32 decides)
        return None


def _no_less_accurate(a: torch.Tensor, b: torch.Tensor, truth: torch.Tensor | None) -> bool:
    """Whether float32 ``b`` (ORTModule's) is within the tolerance of the float64 ``truth``
    or errs from it no more than eager's ``a`` does."""
    if truth is None or truth.shape != b.shape or not truth.is_floating_point():
        return False
    ours = (b.double() - truth.double()).abs().nan_to_num(float("inf")).max()
    theirs = (a.double() - truth.double()).abs().nan_to_num(float("inf")).max()
    return not _close(truth.float(), b) or bool(ours <= theirs)


def _float64_grads(module: Any, tensors: list[torch.Tensor], weights: list[Any]
                   ) -> list[Any] | None:
    """Eager's gradients with every floating-point tensor in float64 (None if the op does
    not run so)."""
    inputs = [t.detach().double().requires_grad_(t.requires_grad) if t.is_floating_point()
              else t.detach() for t in tensors]
    try:
        out = _flat_tensors(module(*inputs))
        return _grads(out, [w.double() if w is not None else None for w in weights], inputs)
    except Exception:  # noqa: BLE001 (no float64 reference: eager's float32 decides)
        return None


def _random(fn: Any, inputs: list[torch.Tensor]) -> bool:
    """Whether eager's outputs differ between two runs on the same inputs."""
    with torch.no_grad():
        torch.manual_seed(1)
        a = _flat_tensors(fn(*inputs))
        torch.manual_seed(2)
        b = _flat_tensors(fn(*inputs))
    return any(x.shape != y.shape or not torch.equal(x.nan_to_num(), y.nan_to_num())
               for x, y in zip(a, b))


def _seeded(op: Any) -> bool:
    """Whether the entry draws random numbers under a seed it sets itself (OpInfo's
    ``wrapper_set_seed``): eager is repeatable, a graph's draws cannot follow."""
    code = getattr(op.op, "__code__", None)
    return code is not None and "wrapper_set_seed" in code.co_names


def _first_line(e: BaseException) -> str:
    text = f"{type(e).__name__}: {e}".strip().splitlines()[0]
    text = re.sub(r"0x[0-9a-f]+", "0x…", text)
    text = re.sub(r"/[^\s:()]*/", "", text)  # paths, which differ between machines
    return text[:300]


def run_sample(op: Any, sample: Any) -> tuple[str, str]:
    """(class, reason) of one sample."""
    from ortmodule import DebugOptions, ORTModule
    from ortmodule.module import ORTModule as Impl

    leaves, spec = pytree.tree_flatten((sample.input, tuple(sample.args), dict(sample.kwargs)))
    positions = [i for i, v in enumerate(leaves) if isinstance(v, torch.Tensor)]
    tensors = [leaves[p] for p in positions]
    if not tensors:
        return "eager-error", "the sample has no tensor"
    module = OneOp(op.op, leaves, spec, positions)
    eager_in = _inputs(tensors)
    try:
        eager_out = module(*eager_in)
        eager_flat = _flat_tensors(eager_out)
        weights = _weights(eager_flat)
        eager_grads = _grads(eager_flat, weights, eager_in)
    except Exception as e:  # noqa: BLE001 (eager's own error leaves the sample out)
        return "eager-error", _first_line(e)
    # Random ops, and the empty* factories whose values are whatever memory held.
    random = _seeded(op) or "empty" in op.name or _random(module, _inputs(tensors))

    compiled: list[Any] = []
    compile_graph = Impl._compile

    eager_parts: list[Any] = []  # graphs between breaks that torch.export could not capture

    def recording(self: Any, *args: Any, **kwargs: Any) -> Any:
        entry = compile_graph(self, *args, **kwargs)
        if entry.program is None and entry.graph_breaks is None and \
                self.__dict__.get("_graph_part"):
            eager_parts.append(entry)
        else:
            compiled.append(entry)
        return entry

    ort_in = _inputs(tensors)
    Impl._compile = recording
    try:
        wrapped = ORTModule(module, DebugOptions(exporter=EXPORTER))
        ort_out = wrapped(*ort_in)
        ort_flat = _flat_tensors(ort_out)
        ort_grads = _grads(ort_flat, weights, ort_in) if not random else None
    except Exception as e:  # noqa: BLE001 (the refusal is the result)
        return "refused", _first_line(e)
    finally:
        Impl._compile = compile_graph
    if pytree.tree_structure(ort_out) != pytree.tree_structure(eager_out):
        return "mismatch", "the output structure differs from eager's"
    for a, b in zip(pytree.tree_leaves(eager_out), pytree.tree_leaves(ort_out)):
        if not isinstance(a, torch.Tensor) and not _same_python_value(a, b):
            return "mismatch", f"the Python value {b!r} where eager has {a!r}"
    for k, (a, b) in enumerate(zip(eager_flat, ort_flat)):
        if random:
            if a.shape != b.shape or a.dtype != b.dtype:
                return "mismatch", (f"output {k}: {tuple(b.shape)} {b.dtype} where eager "
                                    f"has {tuple(a.shape)} {a.dtype}")
            continue
        why = _close(a, b)
        if why and a.dtype == torch.float32:
            # Eager's float32 result may be the less accurate one (matrix_exp's squarings):
            # as for gradients below, ORTModule's is measured against the float64 result.
            exact = _float64_outputs(module, tensors)
            if (exact is not None and len(exact) == len(eager_flat)
                    and _no_less_accurate(a, b, exact[k])):
                why = ""
        if why:
            return "mismatch", f"output {k}: {why}"
        if a.requires_grad and not b.requires_grad:
            # (The other way round, the gradients below show that none flows through it.)
            return "mismatch", f"output {k} does not require grad where eager's does"
    if eager_grads is not None and not random:
        if ort_grads is None:
            return "mismatch", "no gradient where eager has one"
        wrt = [t for t in ort_in if t.requires_grad]
        for k, (a, b) in enumerate(zip(eager_grads, ort_grads)):
            if a is None and b is None:
                continue
            a = torch.zeros_like(wrt[k]) if a is None else a
            b = torch.zeros_like(a) if b is None else b
            why = _close(a, b)
            if why and a.dtype == torch.float32:
                # Eager's float32 gradient may be the less accurate one (logcumsumexp at
                # 1e4): against the float64 gradient, ORTModule's may err no more than
                # eager's (or be within the tolerance of it).
                exact = _float64_grads(module, tensors, weights)
                if exact is not None and _no_less_accurate(a, b, exact[k]):
                    why = ""
            if why:
                return "mismatch", f"gradient {k}: {why}"
    breaks = sorted({what for e in compiled if e.graph_breaks is not None
                     for _, what in e.graph_breaks.breaks})
    if any(e.program is None and e.graph_breaks is None for e in compiled):
        return "refused", "ran in eager PyTorch (export fallback)"
    if eager_parts:
        breaks.append("a graph between the breaks runs in eager PyTorch (torch.export cannot "
                      "capture it)")
    if any(e.graph_breaks is not None for e in compiled):
        return "graph-break", "; ".join(breaks) or "split by TorchDynamo"
    if any(_bridged(e.program) for e in compiled):
        return "bridged", ", ".join(sorted({op for e in compiled for op in _bridged(e.program)}))
    return "native", ""


def _bridged(program: Any) -> list[str]:
    import onnx

    model = onnx.ModelProto()
    model.ParseFromString(program.training_graph_onnx())
    ops = []
    for n in model.graph.node:
        if n.domain == "ai.ortmodule" and n.op_type == "TorchCall":
            attrs = {a.name: a for a in n.attribute}
            ops.append(attrs["aten_op"].s.decode() if "aten_op" in attrs else "a Function")
    return ops


def run_entry(op: Any) -> tuple[str, str]:
    """(class, reason) of an entry: its worst sample."""
    result = ("eager-error", "no sample")
    samples = op.sample_inputs("cpu", torch.float32, requires_grad=op.supports_autograd)
    for sample in itertools.islice(samples, SAMPLES_PER_OP):
        torch.manual_seed(0)
        try:
            got = run_sample(op, sample)
        except Exception as e:  # noqa: BLE001 (the harness's own failure is reported)
            got = ("refused", "harness: " + _first_line(e))
        if _WORST[got[0]] > _WORST[result[0]] or result[1] == "no sample":
            result = got
    return result


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    logging.getLogger("ortmodule").setLevel(logging.ERROR)
    log = os.environ.get("ORTMODULE_OPINFO_DECOMPOSE_LOG")  # why decompositions fell short
    if log:
        handler = logging.FileHandler(log)
        decompose = logging.getLogger("ortmodule.decompose")
        decompose.setLevel(logging.DEBUG)
        if not decompose.handlers:
            decompose.addHandler(handler)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with contextlib.redirect_stderr(io.StringIO()):
            yield


def _worker(names: list[str], out_path: str) -> None:
    """Runs ``names`` in this process, appending one JSON line per entry to ``out_path``
    (flushed, so that a crash loses only the entry that crashed)."""
    torch.set_num_threads(1)
    by_name = {entry_name(op): op for op in entries()}
    with open(out_path, "a") as out:
        for name in names:
            out.write(json.dumps({"start": name}) + "\n")
            out.flush()
            start = time.perf_counter()
            with _quiet():
                try:
                    result = run_entry(by_name[name])
                except Exception:  # noqa: BLE001 (reported as the entry's result)
                    result = ("refused", "harness: " + traceback.format_exc().splitlines()[-1])
            out.write(json.dumps({"name": name, "result": result}) + "\n")
            out.flush()
            if os.environ.get("ORTMODULE_OPINFO_VERBOSE"):
                print(f"{name}: {result[0]} ({time.perf_counter() - start:.1f} s)",
                      file=sys.__stderr__, flush=True)


def _run_chunk(names: list[str], tmp: Path, k: int) -> dict[str, tuple[str, str]]:
    """Runs ``names`` in worker processes until each has a result; an entry whose process
    dies (a crash in the engine) is a ``mismatch`` naming the signal: never hidden."""
    results: dict[str, tuple[str, str]] = {}
    todo = list(names)
    attempt = 0
    while todo:
        path = tmp / f"chunk{k}_{attempt}.jsonl"
        attempt += 1
        proc = subprocess.run([sys.executable, "-m", "tests.python.opinfo_run", "--worker",
                               str(path), *todo], cwd=Path(__file__).parents[2],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                              check=False)
        started = None
        if path.exists():
            for line in path.read_text().splitlines():
                record = json.loads(line)
                if "start" in record:
                    started = record["start"]
                else:
                    results[record["name"]] = tuple(record["result"])
                    started = None
        if proc.returncode != 0:
            crashed = started or (todo[0] if not results else None)
            tail = proc.stderr.strip().splitlines()[-1:] or [""]
            if crashed is None:
                raise RuntimeError(f"an OpInfo worker failed ({proc.returncode}): {tail[0]}")
            results[crashed] = ("mismatch", (f"the process died (exit {proc.returncode}): "
                                             f"{tail[0][:200]}"))
        todo = [n for n in todo if n not in results]
    return results


def run_all(processes: int = 2, only: list[str] | None = None) -> dict[str, tuple[str, str]]:
    """Every entry's (class, reason), in ``processes`` worker processes at a time."""
    names = only or [entry_name(op) for op in entries()]
    chunks = [names[k::processes] for k in range(processes)]
    results: dict[str, tuple[str, str]] = {}
    with tempfile.TemporaryDirectory() as tmp, \
            concurrent.futures.ThreadPoolExecutor(processes) as pool:
        futures = [pool.submit(_run_chunk, c, Path(tmp), k) for k, c in enumerate(chunks) if c]
        for f in futures:
            results.update(f.result())
    return {n: results[n] for n in names if n in results}


def write_expected(results: dict[str, tuple[str, str]], path: Path = EXPECTED) -> None:
    lines = ["# generated by `python -m tests.python.opinfo_run --update`: the class of every",
             "# OpInfo entry with float32 CPU support through ORTModule (name: class: reason)"]
    lines += [f"{n}: {c}: {r}" if r else f"{n}: {c}" for n, (c, r) in results.items()]
    path.write_text("\n".join(lines) + "\n")


def read_expected(path: Path = EXPECTED) -> dict[str, tuple[str, str]]:
    out = {}
    for line in path.read_text().splitlines():
        if line.startswith("#") or not line.strip():
            continue
        name, cls, *reason = line.split(": ", 2)
        out[name] = (cls, reason[0] if reason else "")
    return out


def counts(results: dict[str, tuple[str, str]]) -> dict[str, int]:
    return {c: sum(1 for v in results.values() if v[0] == c) for c in CLASSES}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--update", action="store_true", help="rewrite opinfo_expected.txt")
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--json", help="also write the results as JSON here")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("ops", nargs="*", help="entry names (default: all)")
    args = parser.parse_args()
    if args.worker:
        _worker(args.ops, args.worker)
        return
    start = time.perf_counter()
    results = run_all(args.processes, args.ops or None)
    print(json.dumps(counts(results)), f"in {time.perf_counter() - start:.0f} s")
    for n, (c, r) in results.items():
        if args.ops or c == "mismatch":
            print(f"{n}: {c}: {r}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    if args.update:
        write_expected(results)


if __name__ == "__main__":
    main()
