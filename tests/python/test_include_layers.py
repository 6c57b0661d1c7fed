"""The engine's include graph (csrc/, read as text): the lower floors never include the upper
ones (docs/architecture.md).

- base/ (devices, storage, the allocator, the profiler's counters), kernels/ (pure functions
  over pointers), ir/ and onnx/ include nothing from ops/, grad/, runtime/ or backends/;
- base/ includes only base/;
- the gradient-rule API (grad/grad_context.h) sits below ops/: it includes nothing from
  ops/, and ops/ includes nothing else from grad/ (the walker, grad/gradient_builder.*,
  is above ops/ and finds the rules through the op table);
- backends/ (the CUDA op entries) are included by backends/ alone.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

CSRC = Path(__file__).resolve().parents[2] / "csrc"
SOURCES = sorted(p for p in CSRC.rglob("*")
                 if p.suffix in {".h", ".cpp", ".cu", ".cuh", ".inl"} and p.is_file())
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.MULTILINE)
UPPER = ("ops/", "grad/", "runtime/", "backends/")


def _includes(path: Path) -> list[tuple[int, str]]:
    text = path.read_text(errors="replace")
    return [(text.count("\n", 0, m.start()) + 1, m.group(1)) for m in INCLUDE.finditer(text)]


def _rel(path: Path) -> str:
    return path.relative_to(CSRC).as_posix()


def _violations(rule) -> list[str]:
    found = []
    for path in SOURCES:
        source = _rel(path)
        for line, target in _includes(path):
            why = rule(source, target)
            if why:
                found.append(f"csrc/{source}:{line} includes {target}: {why}")
    return found


def test_the_sources_are_read() -> None:
    assert len(SOURCES) > 100
    assert ("kernels/math/cast.h" in {t for _, t in _includes(CSRC / "ops" / "cast_ops.cpp")})


@pytest.mark.parametrize("floor", ["base/", "kernels/", "ir/", "onnx/"])
def test_lower_floors_include_nothing_above_them(floor: str) -> None:
    def rule(source: str, target: str) -> str:
        if source.startswith(floor) and target.startswith(UPPER):
            return f"{floor} is below {', '.join(UPPER)}"
        if floor == "base/" and source.startswith(floor) and not target.startswith("base/"):
            return "base/ is the bottom floor"
        return ""

    wrong = _violations(rule)
    assert not wrong, "\n".join(wrong)


def test_the_gradient_rule_api_is_below_ops() -> None:
    def rule(source: str, target: str) -> str:
        if source == "grad/grad_context.h" and target.startswith(UPPER):
            return "the rule API is below ops/"
        if source.startswith("ops/") and target.startswith("grad/") and \
                target != "grad/grad_context.h":
            return "ops/ sees only the rule API of grad/"
        return ""

    wrong = _violations(rule)
    assert not wrong, "\n".join(wrong)


def test_backends_are_included_by_backends_alone() -> None:
    def rule(source: str, target: str) -> str:
        if target.startswith("backends/") and not source.startswith("backends/"):
            return "backends/ is the top of the op floors"
        return ""

    wrong = _violations(rule)
    assert not wrong, "\n".join(wrong)
