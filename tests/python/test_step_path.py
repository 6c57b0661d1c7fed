"""The per-call path: a call like the previous one reuses its graph without recomputing the
cache key (_C.StepCall), shape rules run once per input signature, and every change the
cache key covers still builds or picks the right graph. Backward stages share autograd
nodes unless a gradient has hooks. Results are compared with eager PyTorch."""

from __future__ import annotations

import copy

import numpy as np
import torch
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator
from torch import nn

from ortmodule import _C, ORTModule


def graphs(ort: ORTModule) -> int:
    return sum(len(v) for v in ort._cache.values())


def mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(12, 16), nn.ReLU(), nn.Linear(16, 16), nn.ReLU(),
                         nn.Linear(16, 3))


def step(model: nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor | None]]:
    for p in model.parameters():
        p.grad = None
    out = model(x)
    (out * torch.linspace(-1, 1, out.numel()).reshape(out.shape)).sum().backward()
    return out.detach(), [None if p.grad is None else p.grad.clone() for p in model.parameters()]


def assert_same_step(ort: ORTModule, eager: nn.Module, x: torch.Tensor) -> None:
    out, grads = step(ort, x)
    ref_out, ref_grads = step(eager, x)
    torch.testing.assert_close(out, ref_out, rtol=1e-5, atol=1e-6)
    for g, r in zip(grads, ref_grads, strict=True):
        if r is None:
            assert g is None
        else:
            torch.testing.assert_close(g, r, rtol=1e-5, atol=1e-6)


def test_repeated_calls_reuse_the_graph_and_its_shapes() -> None:
    eager = mlp()
    ort = ORTModule(copy.deepcopy(eager))
    x = torch.randn(8, 12)
    assert_same_step(ort, eager, x)
    program = next(iter(ort._cache.values()))[0].program
    rules = program.shape_cache_stats()["shape_rules_run"]
    assert rules > 0
    for _ in range(3):
        assert_same_step(ort, eager, torch.randn(8, 12))
    # Every step of an MLP has shapes that follow from the input shapes.
    assert program.shape_cache_stats()["shape_rules_run"] == rules
    assert ort._last_call is not None and ort._last_call.entry.program is program
    # The first graph serves the first call's sizes; a new batch size builds the graph with
    # dynamic sizes, which serves every later batch size, its shape rules running once each.
    assert_same_step(ort, eager, torch.randn(5, 12))
    assert graphs(ort) == 2
    dynamic = ort._last_call.entry.program
    assert dynamic is not program
    assert_same_step(ort, eager, torch.randn(3, 12))
    after_new_batch = dynamic.shape_cache_stats()["shape_rules_run"]
    assert ort._last_call.entry.program is dynamic
    assert_same_step(ort, eager, torch.randn(3, 12))
    assert_same_step(ort, eager, torch.randn(5, 12))
    assert dynamic.shape_cache_stats()["shape_rules_run"] == after_new_batch
    assert_same_step(ort, eager, torch.randn(8, 12))  # either graph serves it: no new one
    assert graphs(ort) == 2


def test_changes_the_key_covers_are_seen_after_repeated_calls() -> None:
    eager = mlp()
    ort = ORTModule(copy.deepcopy(eager))
    x = torch.randn(4, 12)
    for _ in range(2):
        assert_same_step(ort, eager, x)
    # A parameter stops requiring grad: a new graph without its gradient.
    ort.module[2].weight.requires_grad_(False)
    eager[2].weight.requires_grad_(False)
    assert_same_step(ort, eager, x)
    assert ort.module[2].weight.grad is None
    assert graphs(ort) == 2
    ort.module[2].weight.requires_grad_(True)
    eager[2].weight.requires_grad_(True)
    assert_same_step(ort, eager, x)
    assert graphs(ort) == 2
    # An input that requires grad gets its gradient.
    xg = x.clone().requires_grad_(True)
    xe = x.clone().requires_grad_(True)
    ort(xg).sum().backward()
    eager(xe).sum().backward()
    torch.testing.assert_close(xg.grad, xe.grad, rtol=1e-5, atol=1e-6)
    # No grad mode, eval mode and another dtype each pick their own graph.
    with torch.no_grad():
        torch.testing.assert_close(ort(x), eager(x), rtol=1e-5, atol=1e-6)
    ort.eval()
    eager.eval()
    torch.testing.assert_close(ort(x), eager(x), rtol=1e-5, atol=1e-6)
    ort.train()
    eager.train()
    assert_same_step(ort, eager, x)
    ort.double()
    eager.double()
    assert_same_step(ort, eager, x.double())
    assert ort(x.double()).dtype == torch.float64


def test_keyword_and_non_tensor_arguments_take_the_full_key() -> None:
    class Scaled(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = nn.Linear(6, 2)

        def forward(self, x: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
            return self.linear(x) * scale

    torch.manual_seed(0)
    eager = Scaled()
    ort = ORTModule(copy.deepcopy(eager))
    x = torch.randn(3, 6)
    for scale in (1.0, 2.0, 2.0, 1.0):
        torch.testing.assert_close(ort(x, scale), eager(x, scale), rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(ort(x, scale=scale), eager(x, scale=scale), rtol=1e-5,
                                   atol=1e-6)
    torch.testing.assert_close(ort(x), eager(x), rtol=1e-5, atol=1e-6)


def test_reshape_to_a_fed_target_follows_its_values() -> None:
    """Reshape's output shape reads the target's values: the rule runs on every call, so
    targets of the same shape but other values give the right shapes."""
    nodes = [helper.make_node("Relu", ["x"], ["h"]),
             helper.make_node("Reshape", ["h", "target"], ["y"])]
    graph = helper.make_graph(
        nodes, "fed_target",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", "M"]),
         helper.make_tensor_value_info("target", TensorProto.INT64, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    program = _C.Program(model.SerializeToString(), [], [], [])
    reference = ReferenceEvaluator(model)
    x = np.random.default_rng(0).standard_normal((4, 6)).astype(np.float32)
    for target in ((6, 4), (3, 8), (24, 1), (6, 4)):
        t = np.asarray(target, dtype=np.int64)
        (got,) = _C.run(program, [torch.from_numpy(x), torch.from_numpy(t)])
        (expected,) = reference.run(None, {"x": x, "target": t})
        assert tuple(got.shape) == target
        np.testing.assert_allclose(got.numpy(), expected, rtol=0, atol=0)


def backward_nodes(out: torch.Tensor) -> list[str]:
    """The chain of ORTModule backward nodes behind `out`."""
    names = []
    node = out.grad_fn
    while node is not None:
        names.append(node.name())
        node = next((f for f, _ in node.next_functions
                     if f is not None and f.name().startswith("ortmodule::")), None)
    return names


def test_backward_stages_share_a_node_unless_a_gradient_has_hooks() -> None:
    eager = mlp()
    ort = ORTModule(copy.deepcopy(eager))
    x = torch.randn(4, 12)
    assert backward_nodes(ort(x)) == ["ortmodule::ProgramBackward"]
    assert_same_step(ort, eager, x)
    # A hook on the first layer's weight: the node that hands out its gradient ends there,
    # so the hook runs before the rest of backward; what it returns is what accumulates.
    order: dict[str, list[str]] = {"ort": [], "eager": []}
    for name, model in (("ort", ort.module), ("eager", eager)):
        model[4].weight.register_hook(lambda g, seen=order[name]: seen.append("fc3.weight"))
        model[0].weight.register_hook(
            lambda g, seen=order[name]: (seen.append("fc1.weight"), g * 3)[1])
    # One node ends after fc3.weight's stage, one after fc1.weight's; the rest is a third.
    nodes = backward_nodes(ort(x))
    assert nodes == ["ortmodule::ProgramBackward"] + ["ortmodule::ProgramBackwardStage"] * 2
    assert_same_step(ort, eager, x)
    assert order["ort"] == order["eager"] == ["fc3.weight", "fc1.weight"]


def test_parameters_and_buffers_are_read_on_every_call() -> None:
    class Shifted(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = nn.Linear(5, 3)
            self.register_buffer("shift", torch.zeros(3))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.linear(x) + self.shift

    torch.manual_seed(0)
    eager = Shifted()
    ort = ORTModule(copy.deepcopy(eager))
    x = torch.randn(2, 5)
    assert_same_step(ort, eager, x)
    # Replaced without a registration (the table itself), through assignment, in place.
    for model in (ort.module, eager):
        model._buffers["shift"] = torch.full((3,), 2.0)
    assert_same_step(ort, eager, x)
    for model in (ort.module, eager):
        model.shift = torch.full((3,), -1.0)
        model.linear.weight = nn.Parameter(model.linear.weight.detach() * 2)
    assert_same_step(ort, eager, x)
    with torch.no_grad():
        for model in (ort.module, eager):
            model.linear.bias.add_(1.0)
    assert_same_step(ort, eager, x)
    assert graphs(ort) == 1


def test_batchnorm_counters_advance_once_per_call() -> None:
    torch.manual_seed(0)
    eager = nn.Sequential(nn.Linear(6, 4), nn.BatchNorm1d(4), nn.ReLU(), nn.Linear(4, 2))
    ort = ORTModule(copy.deepcopy(eager))
    for k in range(4):
        assert_same_step(ort, eager, torch.randn(5, 6))
        assert int(ort.module[1].num_batches_tracked) == int(eager[1].num_batches_tracked) == k + 1
    for (name, got), (_, want) in zip(ort.module.named_buffers(), eager.named_buffers(),
                                      strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6, msg=name)
    ort.eval()
    eager.eval()
    torch.testing.assert_close(ort(torch.ones(2, 6)), eager(torch.ones(2, 6)), rtol=1e-5,
                               atol=1e-6)
    assert int(ort.module[1].num_batches_tracked) == 4


def test_compiled_model_registering_a_buffer_in_forward_does_not_recompile() -> None:
    """ORTModule's registration hooks are global: a torch.compile'd model that registers a
    buffer in forward (as Hugging Face rotary embeddings do) must not recompile per call."""
    from torch._dynamo.utils import counters

    class Rotary(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            self.register_buffer("inv_freq", torch.arange(1.0, 5.0), persistent=False)
            return self.linear(x) * self.inv_freq

    torch.manual_seed(0)
    ort = ORTModule(mlp())  # installs the hooks
    x = torch.randn(3, 12)
    ort(x)
    torch._dynamo.reset()
    counters.clear()
    model = Rotary()
    compiled = torch.compile(model, backend="eager")
    y = torch.randn(3, 4)
    for _ in range(3):  # the first call registers, later ones replace: two frames at most
        compiled(y)
    frames = counters["frames"]["total"]
    assert frames <= 2, dict(counters["frames"])
    for _ in range(10):
        torch.testing.assert_close(compiled(y), model.linear(y) * torch.arange(1.0, 5.0))
    assert counters["frames"]["total"] == frames, dict(counters["frames"])
    assert not counters["recompiles"] or sum(counters["recompiles"].values()) <= 1
    # Registrations outside compiled code still reach ORTModule's structure guard.
    before = graphs(ort)
    ort.module[0] = nn.Linear(12, 16)
    ort(x)
    assert graphs(ort) == 1 and before == 1
    assert ort._last_call.entry is next(iter(ort._cache.values()))[0]


def test_large_gradients_end_a_backward_node() -> None:
    """Stages share a node only up to about 1 MiB of gradients, so that gradients added to
    an existing .grad are not all held at once; accumulation still matches eager."""
    torch.manual_seed(0)
    eager = nn.Sequential(nn.Linear(8, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                          nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 2))
    ort = ORTModule(copy.deepcopy(eager))
    x = torch.randn(3, 8)
    assert len(backward_nodes(ort(x))) >= 2
    for model in (ort, eager):
        for _ in range(2):  # the second backward adds to the .grad of the first
            (model(x) * torch.linspace(-1, 1, 6).reshape(3, 2)).sum().backward()
    for (name, p), q in zip(ort.module.named_parameters(), eager.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-5, atol=1e-6, msg=name)


def test_hooks_added_after_repeated_calls_run_on_every_later_call() -> None:
    """Repeated calls skip nn.Module.__call__ only while it would call forward directly: a
    hook on the wrapper or a global module hook, added at any time, runs on every call."""
    eager = mlp()
    ort = ORTModule(copy.deepcopy(eager))
    x = torch.randn(4, 12)
    for _ in range(2):
        assert_same_step(ort, eager, x)
    seen: list[str] = []
    pre = ort.register_forward_pre_hook(lambda m, args: (args[0] * 2,))
    post = ort.register_forward_hook(lambda m, args, out: seen.append("post") or out + 1)
    for _ in range(2):
        torch.testing.assert_close(ort(x), eager(x * 2) + 1, rtol=1e-5, atol=1e-6)
    assert seen == ["post", "post"]
    pre.remove()
    post.remove()
    assert_same_step(ort, eager, x)
    global_hook = torch.nn.modules.module.register_module_forward_hook(
        lambda m, args, out: seen.append(type(m).__name__))
    try:
        ort(x)
        ort(x)
    finally:
        global_hook.remove()
    assert seen.count("ORTModule") == 2
    assert_same_step(ort, eager, x)
    # A library that wraps forward on the instance (accelerate's hooks do) is called too.
    original = ort.forward
    ort.forward = lambda *args: seen.append("wrapped") or original(*args)
    ort(x)
    ort(x)
    assert seen.count("wrapped") == 2
    ort.forward = original
    assert_same_step(ort, eager, x)
    assert graphs(ort) == 1


def test_structured_output_of_repeated_calls() -> None:
    class Pair(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = nn.Linear(3, 2)

        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
            y = self.linear(x)
            return y.relu(), {"sum": y.sum(1), "x": x}

    torch.manual_seed(0)
    eager = Pair()
    ort = ORTModule(copy.deepcopy(eager))
    for _ in range(3):
        x = torch.randn(5, 3)
        got, want = ort(x), eager(x)
        assert isinstance(got, tuple) and isinstance(got[1], dict)
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def test_keyword_tensor_calls_reuse_the_graph_and_see_every_change() -> None:
    class WithLoss(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = mlp()

        def forward(self, inputs: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
            return nn.functional.cross_entropy(self.model(inputs), labels)

    eager = WithLoss()
    ort = ORTModule(copy.deepcopy(eager))
    x, labels = torch.randn(6, 12), torch.randint(0, 3, (6,))

    def same(**kwargs: torch.Tensor) -> None:
        for model in (ort, eager):
            model.zero_grad(set_to_none=True)
        got, want = ort(**kwargs), eager(**kwargs)
        got.backward()
        want.backward()
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
        for g, r in zip(ort.parameters(), eager.parameters(), strict=True):
            torch.testing.assert_close(g.grad, r.grad, rtol=1e-5, atol=1e-6)

    for _ in range(2):
        same(inputs=x, labels=labels)
    step_call = ort._last_call
    assert step_call is not None
    same(inputs=torch.randn(6, 12), labels=labels)
    assert ort._last_call is step_call  # taken without building the key
    # Keywords in another order: another schema, another graph.
    same(labels=labels, inputs=x)
    assert graphs(ort) == 2
    for model in (ort.module, eager):
        with torch.no_grad():
            model.model[0].weight.mul_(0.5)
    same(inputs=x, labels=labels)
    # Another batch size: the graph with dynamic sizes; an input that requires grad: another
    # graph.
    same(inputs=torch.randn(4, 12), labels=torch.randint(0, 3, (4,)))
    assert graphs(ort) == 3
    same(inputs=x.clone().requires_grad_(), labels=labels)
    assert graphs(ort) == 4


def test_compile_of_the_ortmodule_wraps_the_wrapper_not_the_wrapped_module() -> None:
    """ORTModule.compile() (nn.Module.compile) compiles the wrapper's call: the wrapped module
    is left as it was (calling it still runs eager PyTorch), and compiled calls train like
    eager."""
    torch.manual_seed(0)
    eager = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    model = ORTModule(copy.deepcopy(eager))
    x = torch.randn(5, 8)
    model(x)
    model.compile(backend="eager")
    assert model.__dict__.get("_compiled_call_impl") is not None
    assert model.module._compiled_call_impl is None
    for _ in range(2):
        model(x).square().sum().backward()
        eager(x).square().sum().backward()
    for p, q in zip(model.parameters(), eager.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(model.module(x), eager(x), rtol=1e-5, atol=1e-6)
