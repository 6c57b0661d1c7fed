"""The test harness itself (tests/python/conftest.py): every test starts without ORTMODULE_*
variables, and a parity test fails when its graph runs eagerly or bridges to PyTorch."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

HERE = Path(__file__).resolve().parent


def test_a_variable_set_by_a_test() -> None:
    os.environ["ORTMODULE_FALLBACK_POLICY"] = "EXPORT_FAILURE"


def test_is_gone_for_the_next_test() -> None:
    """(Runs after the test above, which set it without monkeypatch.)"""
    assert not [k for k in os.environ if k.startswith("ORTMODULE_")]


def test_the_engine_reads_no_variable_either() -> None:
    from ortmodule import DebugOptions, FallbackPolicy

    # The default, not the variable.
    assert DebugOptions().fallback == FallbackPolicy.UNSUPPORTED_OP | FallbackPolicy.GRAPH_BREAK


PARITY_TESTS = '''
import torch
from ortmodule import DebugOptions, FallbackPolicy, ORTModule


class Twice(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return 2 * x

    @staticmethod
    def backward(ctx, g):
        return 2 * g


class Bridged(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)

    def forward(self, x):
        return Twice.apply(self.lin(x))


class Untraceable(torch.nn.Module):
    def forward(self, x):
        if x.sum().item() > 0:  # data-dependent Python branch: the export fails
            return x * 2
        return x


def test_bridged():
    ORTModule(Bridged())(torch.randn(2, 3)).sum().backward()


@pytest.mark.bridging
def test_bridged_on_purpose():
    ORTModule(Bridged())(torch.randn(2, 3)).sum().backward()


def test_eager_fallback():
    options = DebugOptions(fallback=FallbackPolicy.EXPORT_FAILURE)
    ORTModule(Untraceable(), options)(torch.ones(2, 3))


def test_on_the_engine():
    ORTModule(torch.nn.Linear(3, 3))(torch.randn(2, 3)).sum().backward()
'''


def test_parity_tests_must_run_on_the_engine(pytester: pytest.Pytester) -> None:
    pytester.makeconftest((HERE / "conftest.py").read_text())
    # A file of PARITY_FILES: its tests are parity tests.
    pytester.makepyfile(test_models_api="import pytest\n" + textwrap.dedent(PARITY_TESTS))
    root = str(HERE.parents[1])
    pytester.makeini(f"[pytest]\npythonpath = {root}\nmarkers =\n  parity\n  bridging\n")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-q")
    result.assert_outcomes(passed=4, errors=2)
    out = result.stdout.str()
    assert "Bridged's graph runs 1 node(s) on PyTorch" in out, out
    assert "Untraceable ran in eager PyTorch (fallback:" in out, out
    assert "ERROR test_models_api.py::test_bridged " in out + " ", out
    assert "ERROR test_models_api.py::test_eager_fallback" in out, out
