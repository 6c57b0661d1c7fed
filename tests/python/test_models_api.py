"""Model-level API of ORTModule: state_dict, graph reuse, structured inputs and outputs,
errors and re-export rules, and saving the ONNX graphs."""

from __future__ import annotations

import copy
import io
from pathlib import Path
from typing import Any, NoReturn

import numpy as np
import onnx
import onnx.reference
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from ortmodule import DebugOptions, FallbackPolicy, ORTModule
from tests.python.model_zoo import (
    assert_buffers_match,
    assert_close,
    assert_grads_match,
    loss_of,
    make_batch,
    make_model,
    make_pair,
)

MODEL_NAMES = ["mlp", "cnn"]


# ---- state_dict ----


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_state_dict_keys_match_unwrapped_module(name: str) -> None:
    ort, eager = make_pair(name)
    assert list(ort.state_dict().keys()) == list(eager.state_dict().keys())
    x, target = make_batch(name)
    loss_of(ort, x, target, False).backward()
    assert list(ort.state_dict().keys()) == list(eager.state_dict().keys())
    # The checkpoint loads into the unwrapped model, and the other way round.
    plain = make_model(name, seed=5)
    plain.load_state_dict(ort.state_dict())
    ort.load_state_dict(plain.state_dict())


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_state_dict_round_trip_after_export(name: str) -> None:
    ort, eager = make_pair(name)
    x, target = make_batch(name)
    for model in (ort, eager):
        loss_of(model, x, target, False).backward()
        with torch.no_grad():
            for p in model.parameters():
                p -= 0.1 * p.grad
    state = copy.deepcopy(ort.state_dict())

    fresh = ORTModule(make_model(name, seed=7))
    x2, target2 = make_batch(name, seed=3)
    loss_of(fresh, x2, target2, False).backward()  # exported with its own weights
    fresh.load_state_dict(state)
    fresh.zero_grad()
    ort.zero_grad()
    eager.zero_grad()
    outputs = [model(x2) for model in (fresh, ort, eager)]  # one train-mode call each
    assert_close(outputs[0], outputs[1], "outputs after load_state_dict")
    assert_close(outputs[0], outputs[2], "outputs against eager")
    assert_buffers_match(fresh, eager)
    assert_buffers_match(ort, eager)
    for out in (outputs[0], outputs[2]):
        F.cross_entropy(out, target2).backward()
    assert_grads_match(fresh, eager)


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_load_state_dict_after_first_call_is_used_by_next_step(name: str) -> None:
    ort, _ = make_pair(name)
    x, target = make_batch(name)
    loss_of(ort, x, target, False).backward()
    ort.zero_grad()

    other = make_model(name, seed=11)
    eager = copy.deepcopy(other)
    ort.load_state_dict(other.state_dict())
    x2, target2 = make_batch(name, seed=4)
    ort_loss = loss_of(ort, x2, target2, False)
    eager_loss = loss_of(eager, x2, target2, False)
    assert_close(ort_loss, eager_loss, "loss after load_state_dict")
    ort_loss.backward()
    eager_loss.backward()
    assert_grads_match(ort, eager)
    assert_buffers_match(ort, eager)
    assert len(ort._cache) == 1  # one kind of call: its static and dynamic graphs


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_state_dict_torch_save_load(name: str) -> None:
    ort, _ = make_pair(name)
    x, target = make_batch(name)
    loss_of(ort, x, target, False).backward()
    buf = io.BytesIO()
    torch.save(ort.state_dict(), buf)
    buf.seek(0)
    state = torch.load(buf)
    assert list(state.keys()) == list(ort.state_dict().keys())
    for key, value in ort.state_dict().items():
        torch.testing.assert_close(state[key], value, rtol=0, atol=0)

    fresh = ORTModule(make_model(name, seed=9))
    fresh.load_state_dict(state)
    x2, _ = make_batch(name, seed=5)
    assert_close(fresh(x2), ort(x2), "outputs after torch.load")


# ---- graph reuse ----


def _raise_forward(*args: object, **kwargs: object) -> NoReturn:
    raise AssertionError("the wrapped module's Python forward ran after the first call")


@pytest.mark.parametrize("loss_inside", [True, False], ids=["loss_inside", "loss_outside"])
@pytest.mark.parametrize("name", MODEL_NAMES)
def test_python_forward_not_called_after_first_step(name: str, loss_inside: bool) -> None:
    ort, eager = make_pair(name, loss_inside)
    x, target = make_batch(name)
    x1, target1 = make_batch(name, batch=5, seed=7)  # a second size: the dynamic graph
    for model in (ort, eager):
        loss_of(model, x, target, loss_inside).backward()
        loss_of(model, x1, target1, loss_inside).backward()
    for module in ort.module.modules():
        module.forward = _raise_forward
    with pytest.raises(AssertionError):
        ort.module(x)  # the patch is in place

    x2, target2 = make_batch(name, batch=9, seed=6)  # another batch size: same schema
    ort_loss = loss_of(ort, x2, target2, loss_inside)
    eager_loss = loss_of(eager, x2, target2, loss_inside)
    assert_close(ort_loss, eager_loss, "loss of the second step")
    ort_loss.backward()
    eager_loss.backward()
    assert_grads_match(ort, eager)
    assert_buffers_match(ort, eager)
    assert len(ort._cache) == 1


# ---- structured inputs and outputs ----


class MultiOutput(nn.Module):
    def __init__(self, kind: str) -> None:
        super().__init__()
        self.kind = kind
        self.encoder = nn.Linear(6, 8)
        self.head = nn.Linear(8, 3)

    def forward(self, x: torch.Tensor, *, shift: torch.Tensor, scale: float = 1.0) -> Any:
        hidden = torch.tanh(self.encoder(x + shift)) * scale
        logits = self.head(hidden)
        if self.kind == "tuple":
            return logits, hidden
        if self.kind == "list":
            return [logits, hidden]
        return {"logits": logits, "hidden": hidden, "nested": (logits.sum(), {"h": hidden})}


def _combine(out: Any, kind: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    if kind == "dict":
        assert set(out) == {"logits", "hidden", "nested"}
        total = out["logits"].pow(2).sum() + out["hidden"].sum() + out["nested"][0]
        total = total + out["nested"][1]["h"].mean()
        return out["logits"], out["hidden"], total
    assert isinstance(out, tuple if kind == "tuple" else list) and len(out) == 2
    logits, hidden = out
    return logits, hidden, logits.pow(2).sum() + hidden.sum()


@pytest.mark.parametrize("kind", ["tuple", "list", "dict"])
def test_structured_outputs_and_kwargs(kind: str) -> None:
    torch.manual_seed(0)
    eager = MultiOutput(kind)
    ort = ORTModule(copy.deepcopy(eager))
    x = torch.randn(5, 6)
    shift = torch.randn(6)
    shift_ort = shift.clone().requires_grad_(True)
    shift_eager = shift.clone().requires_grad_(True)
    ort_logits, ort_hidden, ort_total = _combine(ort(x, shift=shift_ort, scale=0.5), kind)
    eager_logits, eager_hidden, eager_total = _combine(eager(x, shift=shift_eager, scale=0.5), kind)
    assert_close(ort_logits, eager_logits, "logits")
    assert_close(ort_hidden, eager_hidden, "hidden")
    ort_total.backward()
    eager_total.backward()
    assert_grads_match(ort, eager)
    assert_close(shift_ort.grad, shift_eager.grad, "gradient of the keyword input")

    # Another value of a Python-scalar keyword is another graph, with the right result.
    with torch.no_grad():
        ort_out = _combine(ort(x, shift=shift, scale=2.0), kind)
        eager_out = _combine(eager(x, shift=shift, scale=2.0), kind)
    for got, expected in zip(ort_out, eager_out, strict=True):
        assert_close(got, expected, "outputs with scale=2.0")
    assert len(ort._cache) == 2


def test_keyword_inputs_in_any_order() -> None:
    ort, eager = make_pair("mlp", loss_inside=True)
    x, target = make_batch("mlp")
    ort_loss = ort(x=x, target=target)
    eager_loss = eager(x, target)
    assert_close(ort_loss, eager_loss, "loss with keyword inputs")
    ort_loss.backward()
    eager_loss.backward()
    assert_grads_match(ort, eager)
    ort_loss = ort(target=target, x=x)
    eager_loss = eager(target=target, x=x)
    assert_close(ort_loss, eager_loss, "loss with keyword inputs in the other order")
    ort_loss.backward()
    eager_loss.backward()
    assert_grads_match(ort, eager)


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_two_calls_in_flight_before_one_backward(name: str) -> None:
    ort, eager = make_pair(name)
    x1, target1 = make_batch(name, seed=1)
    x2, target2 = make_batch(name, batch=4, seed=2)
    for model in (ort, eager):
        first = loss_of(model, x1, target1, False)
        second = loss_of(model, x2, target2, False)
        (first + 2 * second).backward()
    assert_grads_match(ort, eager)
    assert_buffers_match(ort, eager)


# ---- errors and re-export rules ----


class NotAModule:
    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return x


@pytest.mark.parametrize(
    "obj, type_name",
    [(NotAModule(), "NotAModule"), (lambda x: x, "function"), (42, "int")],
    ids=["object", "function", "int"],
)
def test_wrapping_a_non_module_raises_type_error(obj: object, type_name: str) -> None:
    with pytest.raises(TypeError, match=type_name):
        ORTModule(obj)  # type: ignore[arg-type]


def test_wrapping_an_ortmodule_raises() -> None:
    with pytest.raises(TypeError, match="already an ORTModule"):
        ORTModule(ORTModule(nn.Linear(2, 2)))  # type: ignore[arg-type]


def test_add_module_through_the_wrapper_reaches_the_wrapped_module() -> None:
    ort = ORTModule(nn.Sequential(nn.Linear(2, 2)))
    ort.add_module("extra", nn.Linear(2, 2))
    ort.register_module("more", nn.Linear(2, 2))
    assert isinstance(ort.module.extra, nn.Linear) and isinstance(ort.module.more, nn.Linear)
    assert list(ort.state_dict()) == list(ort.module.state_dict())


def test_unsupported_input_type_raises_type_error() -> None:
    ort = ORTModule(nn.Linear(2, 2))
    with pytest.raises(TypeError, match="object"):
        ort(object())


def test_dtype_change_re_exports_with_correct_results() -> None:
    ort, eager = make_pair("mlp")
    x, target = make_batch("mlp")
    for model in (ort, eager):
        loss_of(model, x, target, False).backward()
    assert len(ort._cache) == 1

    ort.double()
    eager.double()
    assert all(p.dtype == torch.float64 for p in ort.parameters())
    ort.zero_grad()
    eager.zero_grad()
    x64 = x.double()
    ort_out = ort(x64)
    eager_out = eager(x64)
    assert ort_out.dtype == torch.float64
    assert len(ort._cache) == 2
    assert_close(ort_out, eager_out, "float64 outputs")
    F.cross_entropy(ort_out, target).backward()
    F.cross_entropy(eager_out, target).backward()
    assert_grads_match(ort, eager)

    # Back to float32: the first graph is reused and still right.
    ort.float()
    eager.float()
    with torch.no_grad():
        assert_close(ort(x), eager(x), "float32 outputs after the round trip")


class CastsInput(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x.float()) * 2


def test_input_dtype_change_alone_re_exports() -> None:
    torch.manual_seed(0)
    eager = CastsInput()
    ort = ORTModule(copy.deepcopy(eager))
    x32 = torch.randn(3, 4)
    x64 = torch.randn(3, 4, dtype=torch.float64)
    assert_close(ort(x32), eager(x32), "float32 input")
    out64 = ort(x64)
    assert len(ort._cache) == 2
    assert out64.dtype == torch.float32
    assert_close(out64, eager(x64), "float64 input")


def test_float32_input_into_float64_model_is_never_silently_wrong() -> None:
    ort, _ = make_pair("mlp")
    x, _ = make_batch("mlp")
    ort(x)
    ort.double()
    # Eager PyTorch raises here too; the cached float32 graph must not run on float64 weights.
    with pytest.raises(RuntimeError, match="dtype"):
        ort(x)


def test_rank_change_re_exports_with_correct_results() -> None:
    ort, eager = make_pair("mlp")
    x, _ = make_batch("mlp")
    assert_close(ort(x), eager(x), "rank-2 outputs")
    x3 = torch.randn(3, 4, x.shape[1]).requires_grad_(True)
    x3_eager = x3.detach().clone().requires_grad_(True)
    ort_out = ort(x3)
    eager_out = eager(x3_eager)
    assert len(ort._cache) == 2
    assert ort_out.shape == eager_out.shape == (3, 4, 5)
    assert_close(ort_out, eager_out, "rank-3 outputs")
    ort_out.pow(2).sum().backward()
    eager_out.pow(2).sum().backward()
    assert_close(x3.grad, x3_eager.grad, "rank-3 input gradient")
    assert_grads_match(ort, eager)


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_new_batch_size_does_not_re_export(name: str) -> None:
    ort, eager = make_pair(name)
    for step, batch in enumerate((6, 3, 11, 1 if name == "mlp" else 2)):
        x, target = make_batch(name, batch=batch, seed=30 + step)
        ort_loss = loss_of(ort, x, target, False)
        eager_loss = loss_of(eager, x, target, False)
        assert_close(ort_loss, eager_loss, f"loss at batch size {batch}")
        ort_loss.backward()
        eager_loss.backward()
        assert_grads_match(ort, eager)
        assert_buffers_match(ort, eager)
    assert len(ort._cache) == 1


class GridSampling(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        grid = x.reshape(1, 2, 2, 2).tanh()
        return F.grid_sample(x.reshape(1, 1, 2, 4), grid, align_corners=False)


class ShortTimeFourier(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.stft(self.fc(x), 4, center=False, return_complex=False)


@pytest.mark.parametrize(
    "module, op, where, exporter",
    [
        # torch.onnx lowers grid_sample to GridSample, which the engine lacks (the default
        # exporter's fx lowering decomposes it into engine ops instead).
        (nn.Sequential(nn.Linear(4, 4), GridSampling()), "GridSample", "[module 1]", "dynamo"),
        # torch.onnx lowers stft to STFT, which the engine lacks; the fx lowering has no
        # translation for it, so "auto" hands it to torch.onnx too.
        (ShortTimeFourier(), "STFT", "", "auto"),
        (ShortTimeFourier(), "STFT", "", "dynamo"),
    ],
    ids=["grid_sample-dynamo", "stft-auto", "stft-dynamo"],
)
def test_unsupported_op_names_the_op_and_lists_supported_ops(module: nn.Module, op: str,
                                                             where: str, exporter: str) -> None:
    ort = ORTModule(module, DebugOptions(exporter=exporter, fallback=FallbackPolicy.NEVER))
    with pytest.raises(RuntimeError) as info:
        ort(torch.randn(2, 4))
    message = str(info.value)
    assert f"unsupported op: {op} node" in message
    assert "Supported ops" in message
    # The Python line that produced the node, from the exporter's recorded stack, and
    # the submodule it belongs to.
    assert "test_models_api.py(" in message
    if exporter == "dynamo":
        assert where in message
    assert "Gemm" in message.split("Supported ops", 1)[1]  # the list itself follows


# ---- saving the graphs ----


def test_debug_options_save_onnx(tmp_path: Path) -> None:
    options = DebugOptions(save_onnx=True, onnx_prefix="m", save_path=str(tmp_path))
    ort = ORTModule(make_model("cnn"), debug_options=options)
    x, target = make_batch("cnn")
    F.cross_entropy(ort(x), target).backward()
    forward_path = tmp_path / "m_training_forward.onnx"
    training_path = tmp_path / "m_training_training.onnx"
    assert forward_path.is_file()
    assert training_path.is_file()
    forward = onnx.load(str(forward_path))
    training = onnx.load(str(training_path))
    assert len(forward.graph.node) > 0
    assert len(training.graph.node) > len(forward.graph.node)
    forward_ops = {n.op_type for n in forward.graph.node}
    # Training-mode batch norm keeps PyTorch's running_var (unbiased): the engine's own op.
    assert {"Conv", "BatchNormTorch", "MaxPool"} <= forward_ops

    ort.eval()
    with torch.no_grad():
        ort(x)
        want = ort(x)
    for suffix in ("forward", "training"):
        onnx.load(str(tmp_path / f"m_inference_{suffix}.onnx"))
    # The saved forward holds the module's parameters and buffers as they were at the save
    # (the graph the engine builds takes their values as feeds): the ONNX reference runs it
    # as the module computes.
    inference = onnx.load(str(tmp_path / "m_inference_forward.onnx"))
    state = {"module." + n: t for n, t in ort.module.state_dict().items()}
    for init in inference.graph.initializer:
        if init.name in state:
            np.testing.assert_array_equal(onnx.numpy_helper.to_array(init),
                                          state[init.name].numpy(), err_msg=init.name)
    (got,) = onnx.reference.ReferenceEvaluator(inference).run(
        None, {inference.graph.input[0].name: x.numpy()})
    np.testing.assert_allclose(got, want.numpy(), rtol=1e-4, atol=1e-5)


def test_captured_graph_holds_no_copy_of_the_weights() -> None:
    """The engine feeds parameters and buffers at every call: the captured model keeps their
    dtype and shape, not a copy of their values (for a large model, seconds of the first
    call and its size in memory)."""
    from ortmodule import _schema
    from ortmodule.capture import export

    model = nn.Sequential(nn.Linear(256, 512), nn.BatchNorm1d(512), nn.Linear(512, 256))
    x = torch.randn(4, 256)
    tensors: list[torch.Tensor] = []
    spec = _schema.flatten(((x,), {}), tensors)
    for exporter in ("fx", "dynamo"):
        captured = export.export(model, spec, tensors, False, exporter)
        weights = sum(t.numel() * t.element_size() for t in model.state_dict().values())
        assert len(captured.onnx_bytes) < weights / 20, (exporter, len(captured.onnx_bytes))
        shapes = {i.name: list(i.dims) for i in onnx.load_from_string(
            captured.onnx_bytes).graph.initializer if i.name in captured.bindings}
        assert shapes["module.0.weight"] == [512, 256], exporter
        assert len(shapes) == len(captured.bindings), exporter


# ---- input layouts ----


@pytest.mark.parametrize("layout", ["transposed", "expanded", "offset_view", "image_hw_swapped"])
def test_non_contiguous_inputs(layout: str) -> None:
    name = "cnn" if layout == "image_hw_swapped" else "mlp"
    ort, eager = make_pair(name)
    x, target = make_batch(name, batch=5)
    if layout == "transposed":
        x = x.t().contiguous().t()
    elif layout == "expanded":
        x = x[:1].expand(5, -1)
    elif layout == "offset_view":
        x = torch.cat([torch.randn(3, x.shape[1]), x])[3:]
    else:
        x = x.transpose(2, 3).contiguous().transpose(2, 3)
    assert not x.is_contiguous() or x.storage_offset() > 0
    x_ort = x.detach().requires_grad_(True)
    x_eager = x.detach().clone().requires_grad_(True)
    ort_loss = loss_of(ort, x_ort, target, False)
    eager_loss = loss_of(eager, x_eager, target, False)
    assert_close(ort_loss, eager_loss, f"loss with a {layout} input")
    ort_loss.backward()
    eager_loss.backward()
    assert_grads_match(ort, eager)
    assert_close(x_ort.grad, x_eager.grad, f"gradient of a {layout} input")


def test_in_place_change_of_saved_input_before_backward_raises() -> None:
    # Eager PyTorch refuses this too: the gradient would use the modified weight.
    model = ORTModule(nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2)))
    out = model(torch.randn(5, 4))
    with torch.no_grad():
        model.module[2].weight.add_(1.0)
    with pytest.raises(RuntimeError, match="modified in place"):
        out.sum().backward()


def test_deepcopy_and_pickle_of_wrapped_module_rebuild_their_graphs() -> None:
    model = ORTModule(nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2)))
    x = torch.randn(5, 4)
    expected = model(x).detach()
    clone = copy.deepcopy(model)
    buffer = io.BytesIO()
    torch.save(model, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=False)
    for other in (clone, loaded):
        assert len(other._cache) == 0
        torch.testing.assert_close(other(x), expected)
        other(x).sum().backward()
        assert all(p.grad is not None for p in other.parameters())
        # Copies own their parameters: the original is untouched.
        assert all(p is not q for p, q in zip(other.parameters(), model.parameters()))


def test_graph_without_random_ops_leaves_torch_rng_untouched() -> None:
    # Eager PyTorch draws no random numbers for this model; neither must the engine.
    model = ORTModule(nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2)))
    x = torch.randn(5, 4)
    for _ in range(2):  # the first call exports, the second runs the cached graph
        state = torch.random.get_rng_state()
        model(x).sum().backward()
        assert torch.equal(torch.random.get_rng_state(), state)


class _Scale(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.ones(4, 8))

    def forward(self, x: torch.Tensor, *, bias: torch.Tensor) -> torch.Tensor:
        return x * self.w + bias


def test_input_on_another_device_than_the_parameters_is_named_before_capture() -> None:
    # "meta" stands in for a GPU: the check runs before capture, whatever the device.
    model = ORTModule(_Scale())
    with pytest.raises(ValueError, match=r"input argument 0 is on meta but input 'w' \(a "
                       r"parameter\) is on cpu.*\.to\('cpu'\)"):
        model(torch.ones(4, 8, device="meta"), bias=torch.zeros(4, 8))
    with pytest.raises(ValueError, match=r"input argument 'bias' is on meta"):
        model(torch.ones(4, 8), bias=torch.zeros(4, 8, device="meta"))
    # Inputs on the parameters' device still train.
    y = model(torch.ones(4, 8), bias=torch.zeros(4, 8))
    y.sum().backward()
    torch.testing.assert_close(model.w.grad, torch.ones(4, 8), rtol=0, atol=0)
