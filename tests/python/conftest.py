"""What every test runs under.

- No ORTMODULE_* variable is set: they are cleared once before anything imports ortmodule
  (its C++ side reads some when it loads) and again before each test. The values the run
  started with are in tests/python/harness_env.py.
- Tests marked `parity` (every test of PARITY_FILES, the files that compare models trained
  by ORTModule with eager PyTorch) fail when a graph they compiled runs the module eagerly
  (a fallback) or holds a bridge node to PyTorch (ai.ortmodule::TorchCall), so that a parity
  test never compares eager with eager. A test about bridging says so with
  `@pytest.mark.bridging`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import onnx
import pytest

# Imported first: it reads the variables the run started with, before they are cleared.
from tests.python import harness_env  # noqa: F401


def _clear_ortmodule_variables() -> None:
    for name in [k for k in os.environ if k.startswith("ORTMODULE_")]:
        del os.environ[name]


_clear_ortmodule_variables()

PARITY_FILES = {
    "test_attention_fusion.py", "test_autocast.py", "test_checkpoint.py",
    "test_gelu_fusion.py", "test_label_sparsity.py", "test_low_precision_products.py",
    "test_matmul_bias_fusion.py", "test_models_api.py", "test_models_modes.py",
    "test_models_training.py", "test_rmsnorm_fusion.py", "test_step_path.py",
    "test_transformers.py", "test_zero_gradients.py",
}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.name in PARITY_FILES:
            item.add_marker(pytest.mark.parity)


@pytest.fixture(autouse=True)
def _no_ortmodule_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [k for k in os.environ if k.startswith("ORTMODULE_")]:
        monkeypatch.delenv(name)


def bridge_nodes(program: object) -> list[str]:
    """The bridge nodes (ai.ortmodule::TorchCall) of a compiled program's training graph."""
    model = onnx.ModelProto()
    model.ParseFromString(program.training_graph_onnx())
    return [f"{n.name or n.op_type}" for n in model.graph.node
            if n.domain == "ai.ortmodule" and n.op_type == "TorchCall"]


@pytest.fixture(autouse=True)
def _engine_only(request: pytest.FixtureRequest,
                 monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    if (request.node.get_closest_marker("parity") is None
            or request.node.get_closest_marker("bridging") is not None):
        yield
        return
    from ortmodule.module import ORTModule

    compiled: list[tuple[str, object]] = []
    compile_graph = ORTModule._compile

    def recording(self: ORTModule, *args: object, **kwargs: object) -> object:
        entry = compile_graph(self, *args, **kwargs)
        compiled.append((type(self.module).__name__, entry))
        return entry

    monkeypatch.setattr(ORTModule, "_compile", recording)
    yield
    for name, entry in compiled:
        if entry.program is None:
            pytest.fail(f"{name} ran in eager PyTorch (fallback: {entry.fallback_reason}): a "
                        "parity test must run on the engine", pytrace=False)
        bridged = bridge_nodes(entry.program)
        if bridged:
            pytest.fail(f"{name}'s graph runs {len(bridged)} node(s) on PyTorch "
                        f"({', '.join(bridged[:5])}): a parity test must run on the engine; "
                        "mark a test about bridging with @pytest.mark.bridging", pytrace=False)
