"""Parity of ORTModule with eager PyTorch on one call (``compare_call``, which
``ortmodule.debug.check_parity`` calls with ORTModule), the minified repro written where they
differ, and the first-call check of ``DebugOptions(minify=True)`` (``check_call``)."""

from __future__ import annotations

import copy
import logging
import os
import textwrap
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from ortmodule import _schema
from ortmodule.debug.compare import Mismatch, compare
from ortmodule.debug.minify import Finding, minify_call
from ortmodule.debug.repro import write_repro
from ortmodule.options import DebugOptions

logger = logging.getLogger("ortmodule")


@dataclass
class ParityReport:
    """What differs between ORTModule and eager PyTorch on one call."""

    mismatches: list[Mismatch] = field(default_factory=list)
    finding: Finding | None = None  # the smallest failing subgraph (with minify)
    repro: str | None = None  # the directory its repro was written to

    @property
    def ok(self) -> bool:
        return not self.mismatches

    def __str__(self) -> str:
        if self.ok:
            return "ORTModule matches eager PyTorch (outputs and gradients)"
        lines = ["ORTModule differs from eager PyTorch:"]
        lines += [f"  {m}" for m in self.mismatches[:10]]
        if len(self.mismatches) > 10:
            lines.append(f"  and {len(self.mismatches) - 10} more")
        if self.finding is not None:
            lines.append(
                "smallest failing subgraph: " + textwrap.indent(str(self.finding), "  ").lstrip()
            )
        elif self.repro is None:
            lines.append(
                "the minifier found no subgraph of the fx lowering that differs "
                "(a difference of the torch.onnx lowering, or randomness in the model)"
            )
        if self.repro is not None:
            lines.append(f"repro: python {os.path.join(self.repro, 'repro.py')}")
        return "\n".join(lines)


class ParityError(RuntimeError):
    """ORTModule's result differs from eager PyTorch's (``DebugOptions(minify=True)``)."""

    def __init__(self, report: ParityReport) -> None:
        super().__init__(str(report))
        self.report = report


def compare_call(
    wrap: Callable[[torch.nn.Module, DebugOptions], torch.nn.Module],
    module: torch.nn.Module,
    args: tuple,
    kwargs: dict,
    rtol: float = 1e-4,
    atol: float = 1e-5,
    minify: bool = True,
    path: str | os.PathLike | None = None,
    debug_options: DebugOptions | None = None,
    seed: int = 0,
) -> ParityReport:
    """Runs ``model(*args, **kwargs)`` on copies of the model in eager PyTorch and under
    ORTModule and compares the outputs and, where gradients are enabled, the gradients of a
    random cotangent (``seed``) with respect to every parameter that requires grad and every
    input that does (``torch.isclose(engine, eager, rtol, atol)``). With ``minify``, where
    they differ the lowered graph is shrunk to its smallest failing subgraph, written as a
    repro into ``path`` (default: ``debug_options.save_path``, else the current directory)
    as ``ortmodule_repro[_<k>]/``. ``model``, its state and the random state are unchanged.
    ``wrap(copy, options)`` is the ORTModule of a copy (``ortmodule.debug.check_parity``).
    """
    options = replace(debug_options or DebugOptions(), minify=False, save_onnx=False)
    report = ParityReport()
    with torch.random.fork_rng(devices=[]):
        eager = copy.deepcopy(module)
        ort = wrap(copy.deepcopy(module), options)
        ort.__dict__["_debug"] = options  # the environment may ask for minify: not in here
        e_args, e_kwargs = _fresh((args, kwargs))
        o_args, o_kwargs = _fresh((args, kwargs))
        torch.manual_seed(seed)
        want = eager(*e_args, **e_kwargs)
        torch.manual_seed(seed)
        got = ort(*o_args, **o_kwargs)
    want_flat: list[torch.Tensor] = []
    got_flat: list[torch.Tensor] = []
    _schema.flatten(want, want_flat)
    _schema.flatten(got, got_flat)
    if len(got_flat) != len(want_flat):
        raise RuntimeError(
            f"ORTModule returned {len(got_flat)} tensors where eager PyTorch "
            f"returned {len(want_flat)}"
        )
    for k, (g, w) in enumerate(zip(got_flat, want_flat)):
        bad = compare(f"output {k}", g, w, rtol, atol)
        if bad is not None:
            report.mismatches.append(bad)
    if torch.is_grad_enabled():
        report.mismatches += _gradients(
            got_flat,
            want_flat,
            ort,
            eager,
            (o_args, o_kwargs),
            (e_args, e_kwargs),
            seed,
            rtol,
            atol,
        )
    if report.ok or not minify:
        return report
    report.finding = minify_call(
        copy.deepcopy(module), *_fresh((args, kwargs)), options, rtol, atol
    )
    if report.finding is not None:
        folder = path if path is not None else (options.save_path or os.getcwd())
        report.repro = write_repro(report.finding, os.fspath(folder), rtol, atol)
    return report


def check_call(
    wrap: Callable[[torch.nn.Module, DebugOptions], torch.nn.Module],
    module: torch.nn.Module,
    args: tuple,
    kwargs: dict,
    options: DebugOptions,
) -> None:
    """The first-call check of ``DebugOptions(minify=True)`` (``wrap``: ORTModule): raises
    ParityError naming the smallest failing subgraph and its repro where the call differs
    from eager PyTorch."""
    report = compare_call(
        wrap,
        module,
        args,
        kwargs,
        rtol=options.parity_rtol,
        atol=options.parity_atol,
        debug_options=options,
    )
    if not report.ok:
        raise ParityError(report)
    logger.info(
        "%s: outputs and gradients match eager PyTorch (rtol=%g, atol=%g)",
        type(module).__name__,
        options.parity_rtol,
        options.parity_atol,
    )


def _gradients(
    got: list[torch.Tensor],
    want: list[torch.Tensor],
    ort: torch.nn.Module,
    eager: torch.nn.Module,
    got_inputs: Any,
    want_inputs: Any,
    seed: int,
    rtol: float,
    atol: float,
) -> list[Mismatch]:
    gen = torch.Generator().manual_seed(seed)
    pairs = []
    for g, w in zip(got, want):
        if w.is_floating_point() and (w.requires_grad or g.requires_grad):
            cot = torch.randn(w.shape, generator=gen, dtype=torch.float64).to(w.dtype)
            pairs.append((g, w, cot.to(w.device)))
    names = [n for n, p in eager.named_parameters() if p.requires_grad]
    got_params = dict(ort.named_parameters())
    want_params = dict(eager.named_parameters())
    got_in: list[torch.Tensor] = []
    want_in: list[torch.Tensor] = []
    _schema.flatten(got_inputs, got_in)
    _schema.flatten(want_inputs, want_in)
    inputs = [k for k, t in enumerate(want_in) if t.requires_grad]
    got_leaves = [got_params[n] for n in names] + [got_in[k] for k in inputs]
    want_leaves = [want_params[n] for n in names] + [want_in[k] for k in inputs]
    labels = [f"gradient of '{n}'" for n in names] + [f"gradient of input {k}" for k in inputs]
    got_grads = _grad(
        [g for g, _, _ in pairs if g.requires_grad],
        [c for g, _, c in pairs if g.requires_grad],
        got_leaves,
    )
    want_grads = _grad(
        [w for _, w, _ in pairs if w.requires_grad],
        [c for _, w, c in pairs if w.requires_grad],
        want_leaves,
    )
    mismatches = []
    for label, g, w in zip(labels, got_grads, want_grads):
        bad = compare(label, g, w, rtol, atol)
        if bad is not None:
            mismatches.append(bad)
    return mismatches


def _grad(
    outputs: list[torch.Tensor], cotangents: list[torch.Tensor], leaves: list[torch.Tensor]
) -> list[torch.Tensor | None]:
    if not outputs or not leaves:
        return [None] * len(leaves)
    return list(torch.autograd.grad(outputs, leaves, cotangents, allow_unused=True))


def _fresh(value: Any) -> Any:
    """A copy of the call's arguments: tensors detached and cloned, requires_grad kept."""
    if isinstance(value, torch.Tensor):
        return value.detach().clone().requires_grad_(value.requires_grad)
    if isinstance(value, tuple) and not hasattr(value, "_fields"):
        return tuple(_fresh(v) for v in value)
    if isinstance(value, list):
        return [_fresh(v) for v in value]
    if isinstance(value, dict):
        return type(value)((k, _fresh(v)) for k, v in value.items())
    return copy.deepcopy(value)
