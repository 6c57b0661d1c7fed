"""ORTModule as a drop-in nn.Module: pass-through of the nn.Module API, the guarded graph
cache (what builds a new graph), structured inputs and outputs, and errors a user can act
on. Every numeric check compares with the same module run eagerly."""

from __future__ import annotations

import collections
import copy
import dataclasses
import inspect
import io
import logging
import pickle
import warnings
from typing import Any, NamedTuple

import pytest
import torch
from torch import nn

import ortmodule.module as ort_module_mod
from ortmodule import DebugOptions, ExportError, FallbackPolicy, LogLevel, ORTModule
from tests.python.model_zoo import assert_close, assert_grads_match, assert_params_match


def graphs(ort: ORTModule) -> int:
    return sum(len(v) for v in ort._cache.values())


class Net(nn.Module):
    """Reads Python attributes in forward: a scale, a flag and a loop count."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.out = nn.Linear(4, 2)
        self.scale = 1.0
        self.use_tanh = False
        self.repeat = 1

    def forward(self, x: torch.Tensor, bias: float = 0.0, *, mode: str = "sum") -> torch.Tensor:
        h = x
        for _ in range(self.repeat):
            h = self.fc(h)
        h = torch.tanh(h) if self.use_tanh else torch.relu(h)
        y = self.out(h) * self.scale + bias
        return y.sum(-1) if mode == "sum" else y.mean(-1)


def pair(cls: type[nn.Module] = Net, seed: int = 0, **kwargs: Any) -> tuple[ORTModule, nn.Module]:
    torch.manual_seed(seed)
    eager = cls(**kwargs)
    return ORTModule(copy.deepcopy(eager)), eager


def step_matches(ort: nn.Module, eager: nn.Module, *args: Any, **kwargs: Any) -> None:
    """One forward and backward on both: outputs and parameter gradients equal."""
    for m in (ort, eager):
        m.zero_grad(set_to_none=True)
    out, ref = ort(*args, **kwargs), eager(*args, **kwargs)
    assert_close(out, ref, "outputs")
    out.square().sum().backward()
    ref.square().sum().backward()
    assert_grads_match(ort, eager)


X = torch.randn(3, 4)


# ---- 1. nn.Module pass-through ----


def test_forward_signature_is_the_wrapped_modules() -> None:
    ort, eager = pair()
    assert inspect.signature(ort.forward) == inspect.signature(eager.forward)
    assert str(inspect.signature(ort.forward)) == "(x: 'torch.Tensor', bias: 'float' = 0.0, *, " \
        "mode: 'str' = 'sum') -> 'torch.Tensor'"


def test_register_buffer_and_parameter_reach_the_wrapped_module() -> None:
    ort, _ = pair()
    ort.register_buffer("counter", torch.zeros(()))
    ort.register_parameter("extra", nn.Parameter(torch.ones(2)))
    assert ort.module.counter is ort.counter
    assert ort.module.extra is ort.extra
    assert "counter" in dict(ort.module.named_buffers())
    assert "extra" in dict(ort.module.named_parameters())
    assert list(ort.state_dict()) == list(ort.module.state_dict())


def test_module_listings_match_the_wrapped_module() -> None:
    ort, _ = pair()
    inner = ort.module
    assert list(ort.children()) == list(inner.children())
    assert [(n, id(m)) for n, m in ort.named_children()] == \
        [(n, id(m)) for n, m in inner.named_children()]
    assert list(ort.modules()) == list(inner.modules())
    assert [(n, id(m)) for n, m in ort.named_modules()] == \
        [(n, id(m)) for n, m in inner.named_modules()]
    assert [id(p) for p in ort.parameters()] == [id(p) for p in inner.parameters()]


@pytest.mark.parametrize("container", ["sequential", "moduledict"])
def test_container_holding_an_ortmodule_round_trips_state_dict(container: str) -> None:
    torch.manual_seed(0)
    plain_inner = Net()
    wrapped_inner = ORTModule(copy.deepcopy(plain_inner))

    def hold(m: nn.Module) -> nn.Module:
        if container == "sequential":
            return nn.Sequential(m, nn.Linear(1, 1))
        return nn.ModuleDict({"net": m, "head": nn.Linear(1, 1)})

    plain, wrapped = hold(plain_inner), hold(wrapped_inner)
    assert list(wrapped.state_dict()) == list(plain.state_dict())
    assert [n for n, _ in wrapped.named_parameters()] == [n for n, _ in plain.named_parameters()]
    # Loading the plain container's state into the one holding the ORTModule works, strict.
    with torch.no_grad():
        for p in plain.parameters():
            p.add_(1.0)
    result = wrapped.load_state_dict(plain.state_dict())
    assert not result.missing_keys and not result.unexpected_keys
    for (name, p), (_, q) in zip(wrapped.named_parameters(), plain.named_parameters()):
        torch.testing.assert_close(p, q, rtol=0, atol=0, msg=name)
    net = wrapped[0] if container == "sequential" else wrapped["net"]
    ref = plain[0] if container == "sequential" else plain["net"]
    step_matches(net, ref, X)


def test_new_attribute_on_the_wrapper_reaches_the_wrapped_module() -> None:
    ort, eager = pair()
    ort(X)
    ort.scale = 3.0
    eager.scale = 3.0
    assert ort.module.scale == 3.0 and "scale" not in ort.__dict__
    step_matches(ort, eager, X)
    ort.brand_new = "value"
    assert ort.module.brand_new == "value" and ort.brand_new == "value"
    del ort.brand_new
    assert not hasattr(ort.module, "brand_new")


def test_parameter_replaced_after_the_first_call_is_used() -> None:
    ort, eager = pair()
    step_matches(ort, eager, X)
    new_weight = torch.randn(2, 4)
    ort.out.weight = nn.Parameter(new_weight.clone())
    eager.out.weight = nn.Parameter(new_weight.clone())
    step_matches(ort, eager, X)
    assert ort.module.out.weight.grad is not None
    # Another shape: the old graph cannot serve it.
    ort.out.weight = nn.Parameter(torch.ones(2, 4, dtype=torch.float32))
    eager.out.weight = nn.Parameter(torch.ones(2, 4, dtype=torch.float32))
    step_matches(ort, eager, X)


def test_submodule_replaced_after_the_first_call_is_used() -> None:
    ort, eager = pair()
    step_matches(ort, eager, X)
    torch.manual_seed(5)
    new = nn.Linear(4, 2)
    ort.out = copy.deepcopy(new)
    eager.out = copy.deepcopy(new)
    assert ort.module.out is ort.out
    step_matches(ort, eager, X)
    # A replacement with another shape inside a Sequential.
    ort.fc = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 4))
    eager.fc = copy.deepcopy(ort.fc)
    step_matches(ort, eager, X)


def test_untying_tied_weights_builds_a_new_graph() -> None:
    class Tied(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = nn.Linear(4, 4, bias=False)
            self.b = nn.Linear(4, 4, bias=False)
            self.b.weight = self.a.weight

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.b(torch.relu(self.a(x)))

    ort, eager = pair(Tied)
    step_matches(ort, eager, X)
    w = torch.randn(4, 4)
    ort.b.weight = nn.Parameter(w.clone())
    eager.b.weight = nn.Parameter(w.clone())
    step_matches(ort, eager, X)


def test_apply_to_requires_grad_and_zero_grad_pass_through() -> None:
    ort, eager = pair()

    def init(m: nn.Module) -> None:
        if isinstance(m, nn.Linear):
            nn.init.constant_(m.bias, 0.25)

    assert ort.apply(init) is ort
    eager.apply(init)
    assert torch.equal(ort.module.fc.bias, torch.full((4,), 0.25))
    assert ort.to(torch.float32) is ort and ort.cpu() is ort
    step_matches(ort, eager, X)
    ort.zero_grad()
    assert all(p.grad is None for p in ort.module.parameters())
    # Frozen parameters: a new graph without their gradients.
    ort.requires_grad_(False)
    eager.requires_grad_(False)
    ort.out.requires_grad_(True)
    eager.out.requires_grad_(True)
    step_matches(ort, eager, X)
    assert ort.module.fc.weight.grad is None and ort.module.out.weight.grad is not None


def test_double_builds_a_new_graph() -> None:
    ort, eager = pair()
    step_matches(ort, eager, X)
    ort.double()
    eager.double()
    step_matches(ort, eager, X.double())
    assert graphs(ort) == 2


def test_deepcopy_pickle_and_torch_save_keep_the_behaviour() -> None:
    ort, eager = pair()
    ort.scale = 2.0
    eager.scale = 2.0
    step_matches(ort, eager, X)
    buffer = io.BytesIO()
    torch.save(ort, buffer)
    buffer.seek(0)
    copies = [copy.deepcopy(ort), pickle.loads(pickle.dumps(ort)),
              torch.load(buffer, weights_only=False)]
    for clone in copies:
        assert isinstance(clone, ORTModule) and graphs(clone) == 0
        assert inspect.signature(clone.forward) == inspect.signature(eager.forward)
        assert clone.module.scale == 2.0
        # The copy's tables are its wrapped module's, not the original's.
        assert clone._parameters is clone.module._parameters
        assert clone.module.fc.weight is not ort.module.fc.weight
        reference = copy.deepcopy(eager)
        step_matches(clone, reference, X)
        clone.scale = 5.0
        reference.scale = 5.0
        step_matches(clone, reference, X)


# ---- 2. guarded graph cache ----


@pytest.mark.parametrize("owner", ["wrapper", "submodule"])
def test_attributes_read_in_forward_are_guarded(owner: str) -> None:
    class Scaled(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(4, 4)
            self.factor = 1.0

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.lin(x) * self.factor

    class Outer(Net):
        def __init__(self) -> None:
            super().__init__()
            self.fc = Scaled()

    ort, eager = pair(Outer)
    step_matches(ort, eager, X)
    # Set through the wrapper or on the wrapped module directly; "factor" lives on a
    # submodule.
    top = ort if owner == "wrapper" else ort.module
    changes: list[tuple[str, Any]] = [("scale", 0.5), ("use_tanh", True), ("repeat", 3),
                                      ("factor", -2.0), ("repeat", 1), ("scale", 1.0)]
    for name, value in changes:
        setattr(top.fc if name == "factor" else top, name, value)
        setattr(eager.fc if name == "factor" else eager, name, value)
        step_matches(ort, eager, X)
    assert graphs(ort) == 7
    # A combination seen before reuses its graph (scale 0.5 with tanh, 1 repeat, factor -2).
    top.scale, eager.scale = 0.5, 0.5
    step_matches(ort, eager, X)
    assert graphs(ort) == 7


def test_plain_tensor_attribute_changed_in_place_builds_a_new_graph() -> None:
    class WithConstant(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(4, 4)
            self.offset = torch.ones(4)  # a plain attribute, not a buffer

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.lin(x) + self.offset

    ort, eager = pair(WithConstant)
    step_matches(ort, eager, X)
    ort.module.offset.mul_(3.0)
    eager.offset.mul_(3.0)
    step_matches(ort, eager, X)
    ort.offset = torch.full((4,), -1.0)
    eager.offset = torch.full((4,), -1.0)
    step_matches(ort, eager, X)


def test_python_arguments_none_and_strings_are_part_of_the_key() -> None:
    ort, eager = pair()
    calls: list[tuple[tuple, dict]] = [
        ((X,), {}), ((X, 0.5), {}), ((X, 0.5), {"mode": "mean"}), ((X,), {"bias": -1.0}),
        ((X, 2), {}), ((X, 0.5), {}),
    ]
    for args, kwargs in calls:
        step_matches(ort, eager, *args, **kwargs)


def test_nan_argument_reuses_its_graph() -> None:
    ort, _ = pair()
    with torch.no_grad():
        for _ in range(3):
            out = ort(X, float("nan"))
            assert torch.isnan(out).all()
    assert graphs(ort) == 1
    with torch.no_grad():
        ort(X, -0.0)
        ort(X, 0.0)
    assert graphs(ort) == 3  # -0.0 and 0.0 are different values


def test_ranks_dtypes_and_requires_grad_sets_build_new_graphs() -> None:
    class Pointwise(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = nn.Parameter(torch.tensor(1.5))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.sin(x) * self.w

    ort, eager = pair(Pointwise)
    for x in (torch.randn(3), torch.randn(2, 3), torch.randn(2, 3, 4), torch.randn(5)):
        for m in (ort, eager):
            m.zero_grad()
        xo = x.clone().requires_grad_(True)
        xe = x.clone().requires_grad_(True)
        out, ref = ort(xo), eager(xe)
        assert_close(out, ref)
        out.square().sum().backward()
        ref.square().sum().backward()
        assert_close(xo.grad, xe.grad, "input gradient")
        assert_close(ort.w.grad, eager.w.grad, "parameter gradient")
    assert graphs(ort) == 4  # one per rank, and rank 1 at a second size (dynamic sizes)
    x5 = torch.randn(5)
    with torch.no_grad():  # gradients off: another graph
        assert_close(ort(x5), eager(x5))
    assert graphs(ort) == 5
    ort.w.requires_grad_(False)  # another requires-grad set: another graph
    eager.w.requires_grad_(False)
    ort.zero_grad()
    xo, xe = x5.clone().requires_grad_(True), x5.clone().requires_grad_(True)
    ort(xo).sum().backward()
    eager(xe).sum().backward()
    assert_close(xo.grad, xe.grad)
    assert ort.w.grad is None and graphs(ort) == 6


def test_training_and_grad_mode_select_graphs() -> None:
    class Drop(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(4, 4)
            self.drop = nn.Dropout(0.5)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.drop(self.lin(x))

    ort, eager = pair(Drop)
    ort.eval()
    eager.eval()
    step_matches(ort, eager, X)
    ort.train()
    assert ort.module.training and ort.training and ort.module.drop.training
    with torch.no_grad():
        out = ort(torch.ones(200, 4))
    # no_grad in train mode still drops (as eager does), unlike an eval graph.
    assert (out == 0).float().mean().item() > 0.3


def test_cache_is_bounded_and_warns_when_it_churns(monkeypatch: pytest.MonkeyPatch,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(ort_module_mod, "MAX_GRAPHS", 3)
    ort, eager = pair()
    with caplog.at_level(logging.WARNING, logger="ortmodule"), torch.no_grad():
        for k in range(6):
            assert_close(ort(X, float(k)), eager(X, float(k)), f"bias {k}")
    assert graphs(ort) == 3
    assert "dropped the least recently used" in caplog.text


# ---- 3. inputs and outputs ----


class Pair(NamedTuple):
    a: torch.Tensor
    b: torch.Tensor


@dataclasses.dataclass
class Result:
    logits: torch.Tensor
    extra: torch.Tensor | None = None


class Structured(nn.Module):
    def __init__(self, kind: str) -> None:
        super().__init__()
        self.kind = kind
        self.lin = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> Any:
        y = self.lin(x)
        if self.kind == "ordereddict":
            return collections.OrderedDict([("second", y * 2), ("first", y.sum())])
        if self.kind == "namedtuple":
            return Pair(y, torch.tanh(y))
        if self.kind == "dataclass":
            return Result(y, None)
        if self.kind == "nested":
            return (y, [None, {"k": y.exp(), "none": None}], (y.argmax(-1), y * 3))
        raise AssertionError(self.kind)


def _tensors(obj: Any) -> list[torch.Tensor]:
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, dict):
        return [t for v in obj.values() for t in _tensors(v)]
    if dataclasses.is_dataclass(obj):
        return [t for f in dataclasses.fields(obj) for t in _tensors(getattr(obj, f.name))]
    if isinstance(obj, (list, tuple)):
        return [t for v in obj for t in _tensors(v)]
    return []


@pytest.mark.parametrize("kind", ["ordereddict", "namedtuple", "dataclass", "nested"])
def test_structured_outputs_keep_their_types(kind: str) -> None:
    ort, eager = pair(Structured, kind=kind)
    out, ref = ort(X), eager(X)
    assert type(out) is type(ref)
    if isinstance(ref, dict):
        assert list(out) == list(ref)
    if kind == "nested":
        assert out[1][0] is None and out[1][1]["none"] is None
    got, want = _tensors(out), _tensors(ref)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.requires_grad == w.requires_grad
        assert_close(g, w)
    loss = sum(g.float().sum() for g in got if g.is_floating_point())
    loss_ref = sum(w.float().sum() for w in want if w.is_floating_point())
    loss.backward()
    loss_ref.backward()
    assert_grads_match(ort, eager)


def test_integer_and_bool_outputs_between_differentiable_ones() -> None:
    class Mixed(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(4, 4)

        def forward(self, x: torch.Tensor, mask: torch.Tensor, codes: torch.Tensor) -> Any:
            y = self.lin(x)
            return y, y.argmax(-1), y > 0, mask & (y > 0), codes + 1, y.sum()

    ort, eager = pair(Mixed)
    mask = torch.rand(3, 4) > 0.5
    codes = torch.randint(0, 200, (3,), dtype=torch.uint8)
    out, ref = ort(X, mask, codes), eager(X, mask, codes)
    for g, w in zip(out, ref):
        assert g.dtype == w.dtype and g.requires_grad == w.requires_grad
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-6)
    (out[0].sum() + out[-1]).backward()
    (ref[0].sum() + ref[-1]).backward()
    assert_grads_match(ort, eager)


def test_input_returned_unchanged_and_duplicated_outputs() -> None:
    class Passthrough(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(4, 4)

        def forward(self, x: torch.Tensor, other: torch.Tensor) -> Any:
            y = self.lin(x)
            return y, y, other, x

    ort, eager = pair(Passthrough)
    xo, xe = X.clone().requires_grad_(True), X.clone().requires_grad_(True)
    other = torch.randn(2)
    out, ref = ort(xo, other), eager(xe, other)
    for g, w in zip(out, ref):
        assert_close(g, w)
    torch.testing.assert_close(out[2], other, rtol=0, atol=0)
    (out[0].sum() + 2 * out[1].sum() + 3 * out[3].sum()).backward()
    (ref[0].sum() + 2 * ref[1].sum() + 3 * ref[3].sum()).backward()
    assert_grads_match(ort, eager)
    assert_close(xo.grad, xe.grad, "input gradient")


def test_model_without_parameters_in_train_and_eval() -> None:
    class Free(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.softmax(x * 2, dim=-1)

    ort = ORTModule(Free())
    for training in (True, False):
        ort.train(training)
        xo, xe = X.clone().requires_grad_(True), X.clone().requires_grad_(True)
        out, ref = ort(xo), Free()(xe)
        assert_close(out, ref)
        (out * torch.arange(4.0)).sum().backward()
        (ref * torch.arange(4.0)).sum().backward()
        assert_close(xo.grad, xe.grad)
        with torch.no_grad():
            assert_close(ort(X), Free()(X))


def test_keyword_only_arguments_and_var_kwargs() -> None:
    class Kw(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(4, 4)

        def forward(self, x: torch.Tensor, *, scale: torch.Tensor, **extra: Any) -> torch.Tensor:
            y = self.lin(x) * scale
            for name in sorted(extra):
                y = y + extra[name] if isinstance(extra[name], torch.Tensor) else y * extra[name]
            return y

    ort, eager = pair(Kw)
    s = torch.tensor(2.0)
    step_matches(ort, eager, X, scale=s)
    step_matches(ort, eager, X, scale=s, shift=torch.ones(4))
    step_matches(ort, eager, X, scale=s, shift=torch.ones(4), factor=0.5)
    assert str(inspect.signature(ort.forward)) == str(inspect.signature(eager.forward))


# ---- 4. errors ----


def test_exception_in_forward_keeps_its_type_and_message() -> None:
    class Raises(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(4, 4)

        def forward(self, x: torch.Tensor, key: str) -> torch.Tensor:
            table = {"a": 1.0}
            return self.lin(x) * table[key]

    ort, _ = pair(Raises)
    with pytest.raises(KeyError, match="'missing'"):
        ort(X, "missing")

    class BadShape(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if x.shape[-1] != 3:
                raise ValueError(f"expected 3 features, got {x.shape[-1]}")
            return x

    with pytest.raises(ValueError, match="expected 3 features, got 4"):
        ORTModule(BadShape())(X)


class Branchy(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.lin(x)
        if y.sum() > 0:  # control flow on a tensor's value
            return y * 2
        return -y


def test_control_flow_on_tensor_values_names_the_source_line() -> None:
    # (By default such a forward is split at a graph break: test_graph_breaks.py.)
    ort = ORTModule(Branchy(), DebugOptions(fallback=FallbackPolicy.NEVER))
    line = inspect.getsourcelines(Branchy.forward)[1] + 2
    with pytest.raises(ExportError, match=rf"test_dropin.py:{line}: `if y.sum\(\) > 0:"):
        ort(X)


def test_export_failure_fallback_runs_eagerly_on_every_call(
        caplog: pytest.LogCaptureFixture) -> None:
    torch.manual_seed(0)
    eager = Branchy()
    ort = ORTModule(copy.deepcopy(eager), DebugOptions(fallback=FallbackPolicy.EXPORT_FAILURE))
    with caplog.at_level(logging.WARNING, logger="ortmodule"):
        for sign in (1.0, -1.0, 1.0, -1.0):
            x = X.abs() * sign * 10
            step_matches(ort, eager, x)
    assert "EXPORT_FAILURE" in caplog.text and "control flow" in caplog.text
    assert caplog.text.count("runs Branchy in eager PyTorch") == 1  # one graph key, one warning


def test_data_parallel_is_refused_both_ways() -> None:
    with pytest.raises(TypeError, match="DistributedDataParallel"):
        ORTModule(nn.DataParallel(nn.Linear(4, 4)))
    with pytest.raises(TypeError, match="DistributedDataParallel"):
        ORTModule(nn.Sequential(nn.DataParallel(nn.Linear(4, 4))))
    around = nn.DataParallel(ORTModule(nn.Linear(4, 4)))
    with pytest.raises(TypeError, match="DataParallel wraps this ORTModule"):
        around(X)
    with pytest.raises(TypeError, match="DistributedDataParallel"):
        ORTModule(nn.Linear(4, 4))._replicate_for_data_parallel()


@pytest.mark.parametrize("kwargs, error, message", [
    ({"log_level": 1}, TypeError, "log_level must be a LogLevel"),
    ({"log_level": "INFO"}, TypeError, "log_level must be a LogLevel"),
    ({"save_onnx": True}, ValueError, "needs a non-empty onnx_prefix"),
    ({"save_onnx": 1, "onnx_prefix": "m"}, TypeError, "save_onnx must be a bool"),
    ({"onnx_prefix": 7}, TypeError, "onnx_prefix must be a str"),
    ({"save_path": "/definitely/not/here"}, ValueError, "not an existing directory"),
    ({"save_path": 3}, TypeError, "save_path must be a str"),
    ({"exporter": "jit"}, ValueError, "exporter 'jit'"),
    ({"fallback": "sometimes"}, ValueError, "fallback policy 'sometimes'"),
    ({"fallback": 1}, TypeError, "fallback must be a FallbackPolicy"),
])
def test_debug_options_are_validated_at_construction(kwargs: dict, error: type,
                                                     message: str) -> None:
    with pytest.raises(error, match=message):
        DebugOptions(**kwargs)


def test_debug_options_argument_must_be_debug_options() -> None:
    with pytest.raises(TypeError, match="debug_options must be a DebugOptions"):
        ORTModule(nn.Linear(2, 2), {"log_level": LogLevel.INFO})  # type: ignore[arg-type]


def test_fallback_policy_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORTMODULE_FALLBACK_POLICY", "unsupported_op|export_failure")
    opts = DebugOptions.from_env()
    assert opts.fallback == FallbackPolicy.UNSUPPORTED_OP | FallbackPolicy.EXPORT_FAILURE
    monkeypatch.setenv("ORTMODULE_FALLBACK_POLICY", "always")
    with pytest.raises(ValueError, match="ORTMODULE_FALLBACK_POLICY"):
        DebugOptions.from_env()


def test_first_call_leaves_torch_rng_state_unchanged() -> None:
    ort, _ = pair()
    state = torch.random.get_rng_state()
    ort(X).sum().backward()
    assert torch.equal(state, torch.random.get_rng_state())


# ---- 9. buffers, warnings ----


class Tracker(nn.Module):
    """Buffers updated by forward other than BatchNorm's: a step counter and an EMA."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.register_buffer("steps", torch.zeros((), dtype=torch.long))
        self.register_buffer("ema", torch.zeros(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.lin(x)
        if self.training:
            self.steps += 1
            self.ema.mul_(0.9).add_(0.1 * y.detach().mean(0))
        return y - self.ema


def test_buffer_updates_other_than_batch_norm_are_kept() -> None:
    ort, eager = pair(Tracker)
    opt_o = torch.optim.SGD(ort.parameters(), lr=0.1)
    opt_e = torch.optim.SGD(eager.parameters(), lr=0.1)
    for step in range(4):
        x = torch.randn(3, 4)
        step_matches(ort, eager, x)
        opt_o.step()
        opt_e.step()
        assert int(ort.module.steps) == int(eager.steps) == step + 1
        assert_close(ort.module.ema, eager.ema, f"ema at step {step}")
    assert_params_match(ort, eager)
    ort.eval()
    eager.eval()
    with torch.no_grad():
        assert_close(ort(X), eager(X))
    assert int(ort.module.steps) == 4


def test_warnings_from_model_code_are_shown() -> None:
    class Warns(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            warnings.warn("this layer is deprecated, use Other", UserWarning, stacklevel=1)
            return self.lin(x)

    with pytest.warns(UserWarning, match="this layer is deprecated"):
        ORTModule(Warns())(X)


def test_forward_hooks_on_submodules_are_refused() -> None:
    ort, _ = pair()
    seen: list[int] = []
    handle = ort.fc.register_forward_hook(lambda m, i, o: seen.append(1))
    with pytest.raises(RuntimeError, match="cannot run the forward hook .* on submodule 'fc'"):
        ort(X)
    handle.remove()
    # Hooks on the ORTModule itself run on every call (tests/python/test_hooks.py).
    calls: list[int] = []
    ort.register_forward_hook(lambda m, i, o: calls.append(1))
    ort(X)
    ort(X)
    assert calls == [1, 1]


def test_casts_to_bool_and_integers_stop_the_gradient() -> None:
    """`x.bool()` and `x.long()` are not differentiable in PyTorch: a mask computed from a
    parameter adds nothing to its gradient (a cast back to float included)."""
    class Masks(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = nn.Parameter(torch.tensor([[0.0, 1.5, -2.0, 0.0]] * 3))
            self.lin = nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            mask = self.a.bool().float()
            steps = (self.lin(x) * 3).long().to(x.dtype)
            return self.a * x + mask + steps + self.lin(x)

    ort, eager = pair(Masks)
    step_matches(ort, eager, X)


def test_detach_and_no_grad_regions_stop_the_gradient() -> None:
    class Stops(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = self.lin(x)
            centre = y.detach().mean(0)
            with torch.no_grad():
                scale = torch.sigmoid(y) * 2
            return (y - centre) * scale

    ort, eager = pair(Stops)
    step_matches(ort, eager, X)


def test_dropout_masks_do_not_depend_on_grad_mode() -> None:
    # With gradients on, the no_grad region below adds a node to the graph; the masks
    # drawn for one seed must still be the same as without gradients, as in eager.
    class DropAfterNoGrad(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(4, 4)
            self.drop1 = nn.Dropout(0.5)
            self.drop2 = nn.Dropout(0.5)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            with torch.no_grad():
                scale = torch.sigmoid(x).mean()
            return self.drop2(self.drop1(self.lin(x)) * scale)

    ort = ORTModule(DropAfterNoGrad())
    x = torch.randn(64, 4)
    torch.manual_seed(3)
    with_grad = ort(x).detach()
    torch.manual_seed(3)
    with torch.no_grad():
        without = ort(x)
    assert graphs(ort) == 2
    torch.testing.assert_close(with_grad, without, rtol=0, atol=0)


def test_settings_objects_read_by_forward_are_guarded() -> None:
    # A Hugging Face config is a plain object held by the modules; forward reads its flags.
    import transformers

    config = transformers.GPT2Config(vocab_size=50, n_embd=16, n_layer=1, n_head=2,
                                     n_positions=32, use_cache=False,
                                     attn_implementation="eager")
    torch.manual_seed(0)
    eager = transformers.GPT2LMHeadModel(config).eval()
    ort = ORTModule(copy.deepcopy(eager))
    ids = torch.randint(0, 50, (2, 6))
    with torch.no_grad():
        assert ort(input_ids=ids).hidden_states is None
        for model in (ort, eager):
            model.config.output_hidden_states = True
        out, ref = ort(input_ids=ids), eager(input_ids=ids)
    assert out.hidden_states is not None and len(out.hidden_states) == len(ref.hidden_states)
    for got, want in zip(out.hidden_states, ref.hidden_states):
        assert_close(got, want)


def test_attribute_forward_sets_on_its_first_call_reuses_the_graph() -> None:
    # The pattern of Hugging Face's config.problem_type: filled in by the first forward,
    # read on every call.
    class Settings:
        problem_type: str | None = None

    class FillsIn(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(4, 4)
            self.settings = Settings()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if self.settings.problem_type is None:
                self.settings.problem_type = "regression"
            y = self.lin(x)
            return y.square() if self.settings.problem_type == "regression" else y

    ort, eager = pair(FillsIn)
    for _ in range(3):
        step_matches(ort, eager, X)
    assert graphs(ort) == 1
    ort.settings.problem_type = eager.settings.problem_type = "other"
    step_matches(ort, eager, X)
    assert graphs(ort) == 2
