"""The package's import graph, read from the source with ast: no import cycle, capture's layers
import only downwards (ortmodule/capture/__init__.py), its two lowerings never import each
other, and nothing under capture/ imports the package inside a function.

An import of a submodule is an edge to that submodule (``from ortmodule import _schema`` to
``ortmodule._schema``); an import of a name defined in a package's ``__init__`` is an edge
to that package. ``ortmodule._C``, the compiled engine, imports no Python module of the
package: it is a leaf.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "ortmodule"
EXTENSION = "ortmodule._C"

# Bottom to top. A module may import modules of its own layer only where the layer says so
# (a package and the modules inside it), and of the layers below; never above.
LAYERS: list[tuple[str, list[str]]] = [
    ("foundation", ["ortmodule._C", "ortmodule.options", "ortmodule._schema",
                    "ortmodule._guards", "ortmodule._autocast", "ortmodule._call_key",
                    "ortmodule._cache_codec"]),
    # The profile report and the first-run block (over the engine's counters in _C).
    ("profiling", ["ortmodule.profiling", "ortmodule._report_table", "ortmodule._first_run"]),
    ("capture.common", ["ortmodule.capture", "ortmodule.capture.common"]),
    ("capture.bridge", ["ortmodule.capture.bridge"]),
    ("capture.trace", ["ortmodule.capture.trace"]),
    ("fx.registry", ["ortmodule.capture.fx", "ortmodule.capture.fx.registry"]),
    ("fx.builder", ["ortmodule.capture.fx.builder"]),
    ("fx.ops", ["ortmodule.capture.fx.ops", "ortmodule.capture.fx.ops.*"]),
    ("fx.autocast", ["ortmodule.capture.fx.autocast"]),
    ("fx.lower", ["ortmodule.capture.fx.lower"]),
    ("torch_onnx.translations", ["ortmodule.capture.torch_onnx",
                                 "ortmodule.capture.torch_onnx.translations",
                                 "ortmodule.capture.torch_onnx.sequences"]),
    ("torch_onnx.aten_bridge", ["ortmodule.capture.torch_onnx.aten_bridge"]),
    ("torch_onnx.lower", ["ortmodule.capture.torch_onnx.lower"]),
    ("capture.export", ["ortmodule.capture.export"]),
    # The parity check and the minifier: ortmodule.debug (package layer) hands them
    # ORTModule, and module.py calls check_call on the first call under minify.
    ("debug", ["ortmodule.debug.compare", "ortmodule.debug.case", "ortmodule.debug.minify",
               "ortmodule.debug.parity", "ortmodule.debug.repro"]),
    ("entry", ["ortmodule._entry", "ortmodule.export_cache"]),
    ("breaks", ["ortmodule._breaks"]),
    ("module", ["ortmodule.module", "ortmodule.optim", "ortmodule._wrapped_api"]),
    ("package", ["ortmodule", "ortmodule.debug", "ortmodule.trainer", "ortmodule.trainer.*",
                 "ortmodule.training", "ortmodule.training.*"]),
]
# Layers whose modules import one another (one op family helping another, a package and its
# modules); the graph among them must still be free of cycles.
OPEN_LAYERS = {"foundation", "profiling", "capture.common", "fx.registry", "fx.ops",
               "torch_onnx.translations", "debug", "module", "package"}
# The two lowerings: neither may import the other.
SIBLINGS = ("ortmodule.capture.fx", "ortmodule.capture.torch_onnx")


def _name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {_name(p): p for p in PACKAGE.rglob("*.py")}


def _imports(module: str) -> list[tuple[str, int, bool]]:
    """(imported module, line, inside a function) for every import of the package."""
    path = MODULES[module]
    tree = ast.parse(path.read_text(), str(path))
    is_package = path.name == "__init__.py"
    found: list[tuple[str, int, bool]] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            local = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef,
                                                      ast.Lambda))
            if isinstance(child, ast.Import):
                found.extend((a.name, child.lineno, in_function) for a in child.names
                             if a.name.split(".")[0] == "ortmodule")
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    parts = module.split(".")
                    keep = len(parts) - child.level + (1 if is_package else 0)
                    base = ".".join(parts[:keep] + ([base] if base else []))
                if base.split(".")[0] == "ortmodule":
                    for a in child.names:
                        sub = f"{base}.{a.name}"
                        target = sub if sub in MODULES or sub == EXTENSION else base
                        found.append((target, child.lineno, in_function))
            visit(child, local)

    visit(tree, False)
    return found


def _resolve(target: str) -> str:
    while target not in MODULES and target != EXTENSION:
        target = target.rpartition(".")[0]
    return target


GRAPH = {m: {_resolve(t) for t, _, _ in _imports(m)} - {m} for m in MODULES}


def _layer(module: str) -> int:
    for k, (_, members) in enumerate(LAYERS):
        for pattern in members:
            if module == pattern or (pattern.endswith(".*")
                                     and module.startswith(pattern[:-1])):
                return k
    raise AssertionError(f"{module} is in no layer of {__name__}.LAYERS: add it")


def test_every_module_has_a_layer() -> None:
    for module in MODULES:
        _layer(module)


def test_no_import_cycle() -> None:
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def strong(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in GRAPH.get(v, ()):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in MODULES:
        if v not in index:
            strong(v)
    assert not cycles, f"import cycles: {cycles}"


def test_imports_follow_the_layers() -> None:
    wrong = []
    for module, targets in GRAPH.items():
        here = _layer(module)
        for target in targets:
            there = _layer(target)
            if there > here or (there == here and LAYERS[here][0] not in OPEN_LAYERS
                                and target != module):
                wrong.append(f"{module} ({LAYERS[here][0]}) imports {target} "
                             f"({LAYERS[there][0]})")
    assert not wrong, "imports against the layer order:\n" + "\n".join(sorted(wrong))


@pytest.mark.parametrize("side", range(2))
def test_the_lowerings_never_import_each_other(side: int) -> None:
    this, other = SIBLINGS[side], SIBLINGS[1 - side]
    crossing = [f"{m} imports {t}" for m, targets in GRAPH.items()
                if m == this or m.startswith(this + ".")
                for t in targets if t == other or t.startswith(other + ".")]
    assert not crossing, crossing


def test_module_imports_only_capture_export_from_capture() -> None:
    capture = {t for t in GRAPH["ortmodule.module"] if t.startswith("ortmodule.capture")}
    assert capture == {"ortmodule.capture.export"}, capture


def test_no_function_local_import_of_the_package_under_capture() -> None:
    local = [f"{MODULES[m].relative_to(PACKAGE.parent)}:{line} imports {t}"
             for m in MODULES if m.startswith("ortmodule.capture")
             for t, line, in_function in _imports(m) if in_function]
    assert not local, local


def test_the_graph_is_read() -> None:
    """The graph holds the edges it must (a check that the reader sees imports at all)."""
    assert "ortmodule.capture.export" in GRAPH["ortmodule.module"]
    assert EXTENSION in GRAPH["ortmodule.capture.bridge"]
    assert "ortmodule.capture.fx.registry" in GRAPH["ortmodule.capture.fx.ops.shapes"]
    assert "ortmodule.capture.common" in GRAPH["ortmodule"]
