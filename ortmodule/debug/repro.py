"""Repro directories of the minifier: ``write_repro`` writes one, ``run`` (and ``python -m
ortmodule.debug.repro DIR``, and the directory's own ``repro.py``) runs it.

A repro directory holds ``model.onnx`` (the smallest failing subgraph, its inputs the eager
values of the nodes before it), ``inputs.pt`` (those values, and the reference's inputs),
``reference.py`` (the PyTorch ops the subgraph was lowered from, as torch.fx code),
``case.json`` (which nodes, ops and source lines; how outputs and gradients pair up; the
tolerances) and ``repro.py``.
"""

from __future__ import annotations

import json
import os
import sys

from ortmodule.debug.case import Case
from ortmodule.debug.minify import Finding

_SCRIPT = '''"""{summary}

Runs model.onnx (cut out of the graph ORTModule lowered) on the engine and reference.py (the
PyTorch ops it was lowered from) on PyTorch, with the same inputs (inputs.pt) and the same
random cotangent, and prints what differs. Exit status 1 while they differ, 0 once they match.
"""

import os
import sys

from ortmodule.debug.repro import run

sys.exit(run(os.path.dirname(os.path.abspath(__file__))))
'''


def write_repro(finding: Finding, folder: str, rtol: float, atol: float) -> str:
    """Writes the repro of ``finding`` into a new ``ortmodule_repro[_<k>]`` directory in
    ``folder``; returns its path."""
    if not os.path.isdir(folder):
        raise ValueError(f"the repro folder {folder!r} is not an existing directory")
    path = os.path.join(folder, "ortmodule_repro")
    k = 1
    while os.path.exists(path):
        k += 1
        path = os.path.join(folder, f"ortmodule_repro_{k}")
    os.makedirs(path)
    finding.case.save(path)
    with open(os.path.join(path, "case.json")) as f:
        meta = json.load(f)
    meta.update(rtol=rtol, atol=atol, summary=str(finding).splitlines()[0])
    with open(os.path.join(path, "case.json"), "w") as f:
        json.dump(meta, f, indent=1)
    with open(os.path.join(path, "repro.py"), "w") as f:
        f.write(_SCRIPT.format(summary=_docstring_safe(meta["summary"])))
    return path


def run(folder: str) -> int:
    """Runs the repro in ``folder``: prints each mismatch; 1 where the engine differs from
    PyTorch, else 0."""
    case = Case.load(folder)
    with open(os.path.join(folder, "case.json")) as f:
        meta = json.load(f)
    print(
        f"{len(case.nodes)} node(s): "
        + ", ".join(
            f"{n} ({op}, from {src or 'an unknown line'})"
            for n, op, src in zip(case.nodes, case.ops, case.sources)
        )
    )
    mismatches = case.run(meta["rtol"], meta["atol"])
    for m in mismatches:
        print(f"MISMATCH {m}")
    if not mismatches:
        print(f"the engine matches PyTorch (rtol={meta['rtol']}, atol={meta['atol']})")
    return 1 if mismatches else 0


def _docstring_safe(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"""', "'''")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print("usage: python -m ortmodule.debug.repro REPRO_DIRECTORY", file=sys.stderr)
        sys.exit(2)
    sys.exit(run(sys.argv[1]))
