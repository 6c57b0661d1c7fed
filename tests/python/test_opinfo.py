"""PyTorch's OpInfo database through ORTModule (tests/python/opinfo_run.py): no entry may
give a result that differs from eager PyTorch without an error, and each entry's class
(native / bridged / refused) is the one docs/supported_ops.md lists
(tests/python/opinfo_expected.txt, regenerated with
``python -m tests.python.opinfo_run --update`` then ``python tools/gen_ops_doc.py``)."""

from __future__ import annotations

import pytest
import torch

from tests.python import opinfo_run


@pytest.mark.slow
def test_opinfo_entries_match_eager_or_are_refused_as_documented() -> None:
    results = opinfo_run.run_all(processes=2)
    mismatched = [f"{n}: {r}" for n, (c, r) in results.items() if c == "mismatch"]
    assert not mismatched, "silently wrong against eager PyTorch:\n" + "\n".join(mismatched)
    expected = opinfo_run.read_expected()
    changed = [f"{n}: {expected.get(n, ('absent', ''))[0]} -> {c} ({r})"
               for n, (c, r) in results.items() if expected.get(n, ("", ""))[0] != c]
    changed += [f"{n}: {c} -> absent" for n, (c, _) in expected.items() if n not in results]
    assert not changed, (
        "OpInfo classes differ from tests/python/opinfo_expected.txt (and the table in "
        "docs/supported_ops.md); if the change is intended, run "
        "`python -m tests.python.opinfo_run --update` and `python tools/gen_ops_doc.py`:\n"
        + "\n".join(changed))


class _Sample:
    def __init__(self) -> None:
        self.input = torch.randn(3, 4, requires_grad=True)
        self.args = ()
        self.kwargs: dict = {}


class _Op:
    def __init__(self, fn: object) -> None:
        self.op = fn
        self.name = "test_op"


def test_harness_tells_a_wrong_result_from_a_right_one() -> None:
    """The comparison itself: a graph that computes something else than eager (here: what
    forward does while torch.export traces it) is a mismatch, in values or gradients."""
    wrong_value = _Op(lambda x: x * 3 if torch.compiler.is_exporting() else x * 2)
    assert opinfo_run.run_sample(wrong_value, _Sample())[0] == "mismatch"
    wrong_grad = _Op(lambda x: (x * 2 + (x - x.detach()) * 0.5 if torch.compiler.is_exporting()
                                else x * 2))
    cls, why = opinfo_run.run_sample(wrong_grad, _Sample())
    assert cls == "mismatch" and "gradient" in why, (cls, why)
    assert opinfo_run.run_sample(_Op(lambda x: torch.tanh(x) * 2), _Sample()) == ("native", "")
    wrong_number = _Op(lambda x: (x * 3 if torch.compiler.is_exporting() else x).sum().item())
    cls, why = opinfo_run.run_sample(wrong_number, _Sample())
    assert cls == "mismatch" and "Python value" in why, (cls, why)
    right_number = _Op(lambda x: x[1, 2].item())
    assert opinfo_run.run_sample(right_number, _Sample()) == ("native", "")
    cls, why = opinfo_run.run_sample(_Op(lambda x: torch.linalg.eigh(x @ x.T).eigenvectors.abs()),
                                     _Sample())
    assert (cls, why) == ("bridged", "aten::linalg_eigh")
