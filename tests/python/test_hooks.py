"""Module hooks on an ORTModule behave as the same hooks on the eager module: the same calls,
the same grad_input/grad_output values, and what a hook returns changes the result and the
gradients as it does in eager. Hooks on modules inside the wrapped one cannot run on every
call (the graph runs in the engine) and raise, naming the module and the kind of hook."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn

from ortmodule import DebugOptions, FallbackPolicy, ORTModule

TOL = {"rtol": 1e-5, "atol": 1e-6}


class TwoInputs(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(6, 16)
        self.fc2 = nn.Linear(16, 3)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.tanh(self.fc1(x)) * y)


def models() -> tuple[ORTModule, nn.Module]:
    torch.manual_seed(0)
    eager = TwoInputs()
    return ORTModule(copy.deepcopy(eager)), eager


def inputs() -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(1)
    return torch.randn(5, 6, requires_grad=True), torch.randn(5, 16, requires_grad=True)


OUT_GRAD = torch.linspace(-1, 1, 15).reshape(5, 3)


def run_steps(model: nn.Module, steps: int = 3) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Forward and backward `steps` times (the later calls take the per-call path); returns
    the last outputs and the gradients of the inputs and parameters."""
    x, y = inputs()
    for _ in range(steps):
        model.zero_grad()
        x.grad = y.grad = None
        out = model(x, y)
        out.backward(OUT_GRAD)
    return [out], [x.grad, y.grad, *(p.grad for p in model.parameters())]


def assert_same(ort: ORTModule, eager: nn.Module, steps: int = 3) -> None:
    (o_out,), o_grads = run_steps(ort, steps)
    (e_out,), e_grads = run_steps(eager, steps)
    torch.testing.assert_close(o_out, e_out, **TOL)
    for i, (a, b) in enumerate(zip(o_grads, e_grads, strict=True)):
        torch.testing.assert_close(a, b, **TOL, msg=f"gradient {i}")


def recorder() -> tuple[list[tuple[str, list[torch.Tensor | None]]], Callable[..., Any]]:
    """A list of (name, copies of tensors) and a function that appends to it."""
    seen: list[tuple[str, list[torch.Tensor | None]]] = []

    def record(name: str, tensors: Any) -> None:
        seen.append((name, [None if t is None else t.detach().clone() for t in tensors]))

    return seen, record


def hook_both(ort: ORTModule, eager: nn.Module,
              register: Callable[[nn.Module, Callable[..., Any]], None]) -> list[list]:
    """Calls register(model, record) for both models; returns the two records."""
    records = []
    for model in (ort, eager):
        seen, record = recorder()
        register(model, record)
        records.append(seen)
    return records


def assert_same_records(got: list, expected: list) -> None:
    assert [name for name, _ in got] == [name for name, _ in expected]
    for (name, a), (_, b) in zip(got, expected, strict=True):
        assert len(a) == len(b), name
        for t, u in zip(a, b, strict=True):
            assert (t is None) == (u is None), name
            if t is not None:
                torch.testing.assert_close(t, u, **TOL, msg=name)


# ---- backward hooks on the ORTModule ----


def test_full_backward_hooks_see_the_gradients_eager_sees() -> None:
    def register(model: nn.Module, record: Callable[..., Any]) -> None:
        model.register_full_backward_pre_hook(lambda m, go: record("pre", go))
        model.register_full_backward_hook(lambda m, gi, go: record("in", gi) or record("out", go))

    ort, eager = models()
    records = hook_both(ort, eager, register)
    assert_same(ort, eager)
    assert [name for name, _ in records[0]] == ["pre", "in", "out"] * 3
    assert_same_records(records[0], records[1])


@pytest.mark.parametrize("kind", ["hook", "pre_hook"])
def test_backward_hooks_that_return_gradients_change_them_as_in_eager(kind: str) -> None:
    ort, eager = models()
    for model in (ort, eager):
        if kind == "hook":  # scales grad_input: the inputs' gradients change
            model.register_full_backward_hook(
                lambda m, gi, go: tuple(None if g is None else g * 3 for g in gi))
        else:  # scales grad_output: every gradient below changes
            model.register_full_backward_pre_hook(lambda m, go: (go[0] * -2,))
    assert_same(ort, eager)
    _, unhooked = run_steps(models()[1])
    _, hooked = run_steps(ort)
    assert not torch.allclose(unhooked[0], hooked[0])  # the hook did something


def test_backward_hooks_added_after_repeated_calls_fire_and_removed_ones_stop() -> None:
    ort, eager = models()
    assert_same(ort, eager)  # the per-call path is taken from here
    calls: list[str] = []
    handles = [model.register_full_backward_hook(lambda m, gi, go, n=n: calls.append(n))
               for n, model in (("ort", ort), ("eager", eager))]
    assert_same(ort, eager, steps=2)
    assert calls == ["ort", "ort", "eager", "eager"]
    for h in handles:
        h.remove()
    assert_same(ort, eager, steps=2)
    assert len(calls) == 4


def test_global_module_hooks_run_for_the_ortmodule_as_for_the_eager_module() -> None:
    ort, eager = models()
    records: dict[int, list] = {id(ort): [], id(eager): []}

    def record(m: nn.Module, name: str, tensors: Any) -> None:
        if id(m) in records:  # eager calls them for fc1 and fc2 too
            records[id(m)].append((name, [None if t is None else t.detach().clone()
                                          for t in tensors]))

    from torch.nn.modules import module as nn_module
    handles = [
        nn_module.register_module_forward_hook(lambda m, args, out: record(m, "out", [out])),
        nn_module.register_module_full_backward_hook(
            lambda m, gi, go: record(m, "grad_in", gi) or record(m, "grad_out", go)),
    ]
    try:
        assert_same(ort, eager)
    finally:
        for h in handles:
            h.remove()
    assert [name for name, _ in records[id(ort)]] == ["out", "grad_in", "grad_out"] * 3
    assert_same_records(records[id(ort)], records[id(eager)])


# ---- forward hooks on the ORTModule ----


def test_forward_hooks_run_on_every_call_and_may_replace_inputs_and_output() -> None:
    def register(model: nn.Module, record: Callable[..., Any]) -> None:
        model.register_forward_pre_hook(lambda m, args: record("pre", args))
        model.register_forward_pre_hook(lambda m, args: (args[0] * 2, args[1]))
        model.register_forward_hook(lambda m, args, out: record("post", [*args, out]))
        model.register_forward_hook(lambda m, args, out: out.relu() + 1)

    ort, eager = models()
    records = hook_both(ort, eager, register)
    assert_same(ort, eager)
    assert [name for name, _ in records[0]] == ["pre", "post"] * 3
    assert_same_records(records[0], records[1])


def test_forward_hooks_with_kwargs_see_and_replace_keyword_arguments() -> None:
    def register(model: nn.Module, record: Callable[..., Any]) -> None:
        def pre(m: nn.Module, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
            return args, {"y": kwargs["y"] * 0.5}

        def post(m: nn.Module, args: tuple, kwargs: dict, out: torch.Tensor) -> torch.Tensor:
            record("post", [*args, kwargs["y"], out])
            return out * kwargs["y"][:, :3]

        model.register_forward_pre_hook(pre, with_kwargs=True)
        model.register_forward_hook(post, with_kwargs=True)

    ort, eager = models()
    records = hook_both(ort, eager, register)
    for _ in range(3):
        x, y = inputs()
        outs = [model(x, y=y) for model in (ort, eager)]
        torch.testing.assert_close(outs[0], outs[1], **TOL)
        grads = [torch.autograd.grad(out, (x, y), OUT_GRAD) for out in outs]
        for a, b in zip(*grads, strict=True):
            torch.testing.assert_close(a, b, **TOL)
    assert len(records[0]) == 3
    assert_same_records(records[0], records[1])


# ---- hooks on modules inside the wrapped one ----


@pytest.mark.parametrize("kind, register", [
    ("forward pre-hook", lambda m: m.register_forward_pre_hook(lambda mod, args: None)),
    ("forward hook", lambda m: m.register_forward_hook(lambda mod, args, out: out * 2)),
    ("backward hook", lambda m: m.register_full_backward_hook(lambda mod, gi, go: None)),
    ("backward pre-hook", lambda m: m.register_full_backward_pre_hook(lambda mod, go: None)),
], ids=["forward_pre", "forward", "backward", "backward_pre"])
def test_hooks_inside_the_wrapped_module_raise_naming_module_and_kind(
        kind: str, register: Callable[[nn.Module], Any]) -> None:
    ort, eager = models()
    handle = register(ort.module.fc2)
    with pytest.raises(RuntimeError, match=f"cannot run the {kind} .*on submodule 'fc2' "
                                           r"\(Linear\).*Register it on the ORTModule itself"):
        ort(*inputs())
    handle.remove()
    assert_same(ort, eager)


def test_hooks_added_inside_after_repeated_calls_raise_on_the_next_call() -> None:
    ort, eager = models()
    assert_same(ort, eager)  # the next calls take the per-call path
    seen: list[int] = []
    handle = ort.module.fc1.register_forward_hook(lambda m, args, out: seen.append(1))
    for _ in range(2):  # raised again until the hook is gone
        with pytest.raises(RuntimeError, match="forward hook .* on submodule 'fc1'"):
            ort(*inputs())
    assert seen == []
    handle.remove()
    assert_same(ort, eager)
    # On the wrapped module itself (not the ORTModule) too.
    handle = ort.module.register_forward_pre_hook(lambda m, args: None)
    with pytest.raises(RuntimeError, match="forward pre-hook .* on the wrapped module"):
        ort(*inputs())
    handle.remove()
    assert_same(ort, eager)


@pytest.mark.filterwarnings("ignore:.*weight_norm. is deprecated:FutureWarning")
def test_weight_norm_pre_hooks_are_part_of_the_graph() -> None:
    def weight_normed() -> nn.Module:  # (deepcopy refuses weight_norm's computed weight)
        torch.manual_seed(0)
        model = TwoInputs()
        model.fc1 = nn.utils.weight_norm(model.fc1)
        return model

    # The norm (ReduceL2) runs on PyTorch inside the graph.
    options = DebugOptions(fallback=FallbackPolicy.UNSUPPORTED_OP)
    ort, eager = ORTModule(weight_normed(), options), weight_normed()
    assert_same(ort, eager)


def test_transformers_input_require_grads_hook_trains_frozen_model_like_eager() -> None:
    """transformers' enable_input_require_grads (adapter fine-tuning with frozen embeddings)
    registers a forward hook on the input embeddings; the captured graph computes its effect,
    so it is allowed and the trainable parameters get eager's gradients."""
    from tests.python.hf_zoo import _bert, _bert_batch

    torch.manual_seed(0)
    eager = _bert(0.0)
    for name, param in eager.named_parameters():
        param.requires_grad_(name.startswith("classifier") or "layer.1." in name)
    ort_model = copy.deepcopy(eager)
    eager.enable_input_require_grads()
    ort_model.enable_input_require_grads()
    ort = ORTModule(ort_model)
    batch = _bert_batch(2, 8, seed=3)
    for model in (eager, ort):
        model(**batch).loss.backward()
    got = dict(ort.named_parameters())
    for name, param in eager.named_parameters():
        if param.requires_grad:
            torch.testing.assert_close(got[name].grad, param.grad, rtol=1e-4, atol=1e-5,
                                       msg=lambda m, n=name: f"{n}: {m}")
        else:
            assert got[name].grad is None, name
