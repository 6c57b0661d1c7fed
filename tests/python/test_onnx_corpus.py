"""ONNX backend corpus replay: every covered case runs (see tests/python/onnx_corpus.py).

A case listed in onnx_corpus_expected.txt must fail (with the reason given there); a listed
case that starts passing fails this test, so the list only shrinks. Every other covered case
must match the recorded outputs within the case's own tolerances.
"""

from __future__ import annotations

import pytest

from tests.python import onnx_corpus as corpus

OPS = corpus.public_ops()
CASES = [c for c in corpus.all_cases() if corpus.covered(c, OPS)]
EXPECTED = corpus.load_expectations()
# The share of covered cases that must pass.
MIN_PASS_RATE = 0.95


@pytest.mark.parametrize("case", CASES, ids=corpus.case_id)
def test_corpus_case(case: corpus.CorpusCase) -> None:
    name = corpus.case_id(case)
    if name not in EXPECTED:
        corpus.run_case(case)
        return
    try:
        corpus.run_case(case)
    except Exception:  # noqa: BLE001 (expected to fail, for the reason in the file)
        return
    pytest.fail(f"{name} now passes: remove it from {corpus.EXPECTATIONS.name} "
                f"(listed as: {EXPECTED[name]})")


def test_expectations_name_covered_cases() -> None:
    covered = {corpus.case_id(c) for c in CASES}
    stale = sorted(set(EXPECTED) - covered)
    assert not stale, f"{corpus.EXPECTATIONS.name} lists cases that are not covered: {stale}"


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
