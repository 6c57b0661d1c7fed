"""ONNX backend corpus replay: every covered case runs (see tests/python/onnx_corpus.py).

A case listed in onnx_corpus_expected.txt must fail (with the reason given there); a listed
case that starts passing fails this test, so the list only shrinks. Every other covered case
must match the recorded outputs within the case's own tolerances. A case listed there as
`undefined` is compared without the elements whose results ONNX leaves undefined, and the
list of those is exactly the cases that have such elements.
"""

from __future__ import annotations

import pytest

from tests.python import onnx_corpus as corpus

OPS = corpus.public_ops()
CASES = [c for c in corpus.all_cases() if corpus.covered(c, OPS)]
EXPECTED = corpus.load_expectations()
UNDEFINED = corpus.load_undefined()
# The share of covered cases that must pass.
MIN_PASS_RATE = 0.95


@pytest.mark.parametrize("case", CASES, ids=corpus.case_id)
def test_corpus_case(case: corpus.CorpusCase) -> None:
    name = corpus.case_id(case)
    leave_out = name in UNDEFINED
    if name not in EXPECTED:
        corpus.run_case(case, leave_out_undefined=leave_out)
        return
    try:
        corpus.run_case(case, leave_out_undefined=leave_out)
    except Exception:  # noqa: BLE001 (expected to fail, for the reason in the file)
        return
    pytest.fail(f"{name} now passes: remove it from {corpus.EXPECTATIONS.name} "
                f"(listed as: {EXPECTED[name]})")


def test_expectations_name_covered_cases() -> None:
    covered = {corpus.case_id(c) for c in CASES}
    stale = sorted(set(EXPECTED) - covered)
    assert not stale, f"{corpus.EXPECTATIONS.name} lists cases that are not covered: {stale}"


def test_undefined_list_is_exact() -> None:
    """Every case with elements ONNX leaves undefined is listed as such, and no other."""
    having = {corpus.case_id(c) for c in CASES
              if any(corpus.undefined_elements(c, ins, outs) is not None
                     for ins, outs in c.data_sets)}
    assert not having - set(UNDEFINED), (
        f"cases with undefined elements, not listed as `undefined` in "
        f"{corpus.EXPECTATIONS.name}: {sorted(having - set(UNDEFINED))}")
    assert not set(UNDEFINED) - having, (
        f"listed as `undefined` but without undefined elements: "
        f"{sorted(set(UNDEFINED) - having)}")


def test_pass_rate() -> None:
    failing = len(set(EXPECTED))
    rate = 1.0 - failing / len(CASES)
    assert rate >= MIN_PASS_RATE, (
        f"{failing} of {len(CASES)} covered corpus cases are expected to fail "
        f"({100 * rate:.1f}% pass, need {100 * MIN_PASS_RATE:.0f}%)")


def test_corpus_is_not_empty() -> None:
    kinds = {c.kind for c in CASES}
    assert kinds == {"node", *corpus.RECORDED_KINDS}, kinds
    assert len(CASES) > 1000, len(CASES)
