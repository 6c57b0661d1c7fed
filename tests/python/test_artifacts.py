"""generate_artifacts: argument errors, the file layout, and the training/eval models and the
checkpoint against those ONNX Runtime Training 1.19.2 generates (the reference venv), which
also reads our checkpoint back."""

from __future__ import annotations

import os

import numpy as np
import onnx
import pytest

from ortmodule.training import artifacts, onnxblock
from ortmodule.training.artifacts import LossType, OptimType, generate_artifacts
from tests.python.training_utils import (
    MLP_PARAMS,
    describe,
    mlp_model,
    normalize_names,
    ref_tool,
    reference_artifacts,
)

TRAINABLE = ["fc1.weight", "fc1.bias"]
FROZEN = ["fc2.weight", "fc2.bias"]


# ---- argument errors (raised before anything is written) ----

@pytest.mark.parametrize(
    ("kwargs", "error", "pattern"),
    [
        ({"requires_grad": ["fc1.weight", "fc2.bias"], "frozen_params": ["fc2.bias"]}, RuntimeError,
         r"\['fc2.bias'\] are in both requires_grad and frozen_params"),
        ({"requires_grad": ["fc1.weight", "no_such_param"]}, RuntimeError,
         "requires_grad names 'no_such_param', which is neither an initializer nor a graph input"),
        ({"requires_grad": ["fc1.weight"], "frozen_params": ["fc9.weight"]}, RuntimeError,
         "frozen_params names 'fc9.weight'"),
        ({"loss": "MSELoss"}, RuntimeError, "unknown loss 'MSELoss' of type str; expected a LossType"),
        ({"loss": LossType.MSELoss, "additional_output_names": "output"}, RuntimeError,
         "additional_output_names must be a list of output names, got str"),
        ({"loss": LossType.MSELoss, "additional_output_names": ("output",)}, RuntimeError,
         "must be a list of output names, got tuple"),
        ({"loss": LossType.MSELoss, "additional_output_names": ["no_such_output"]}, LookupError,
         "cannot make 'no_such_output' a graph output"),
        ({"optimizer": "AdamW"}, TypeError, "unknown optimizer 'AdamW' of type str; expected an OptimType"),
        ({"ort_format": True}, NotImplementedError, r"ort_format=True is not supported: .*no writer for .*\.ort"),
        ({"custom_op_library": "/opt/libmy_ops.so"}, NotImplementedError,
         "'/opt/libmy_ops.so': custom op libraries are not supported"),
    ],
    ids=["both-lists", "unknown-trainable", "unknown-frozen", "bad-loss", "str-outputs", "tuple-outputs",
         "unknown-output", "bad-optimizer", "ort-format", "custom-op-library"],
)
def test_argument_errors(kwargs, error, pattern, tmp_path) -> None:
    with pytest.raises(error, match=pattern):
        generate_artifacts(mlp_model(), artifact_directory=tmp_path, **kwargs)
    assert os.listdir(tmp_path) == []


def test_model_must_be_a_model_or_a_path(tmp_path) -> None:
    with pytest.raises(RuntimeError, match="model must be an onnx.ModelProto or a path to an ONNX file, got int"):
        generate_artifacts(3, artifact_directory=tmp_path)


# ---- artifacts against the reference ----

@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """reference(name, **ref_tool generate options) -> directory of reference artifacts for
    mlp_model(), generated once per name."""
    root = tmp_path_factory.mktemp("reference")
    model_path = root / "mlp.onnx"
    onnx.save(mlp_model(), model_path)
    cache: dict[str, object] = {}

    def get(name: str, **options):
        if name not in cache:
            cache[name] = reference_artifacts(model_path, root / name, **options)
        return cache[name]

    return get


def _io(path) -> list:
    """Inputs and outputs of a model file, generated names normalized over just these (the
    gradient graphs in between differ)."""
    desc = describe(path)
    return normalize_names([desc["inputs"], desc["outputs"]])


def _generate(tmp_path, **kwargs):
    out = tmp_path / "ours"
    out.mkdir()
    generate_artifacts(mlp_model(), artifact_directory=out, **kwargs)
    return out


LOSSES = ["MSELoss", "CrossEntropyLoss", "BCEWithLogitsLoss", "L1Loss"]


@pytest.mark.parametrize("loss", LOSSES)
def test_training_and_eval_models_match_reference(loss: str, reference, tmp_path) -> None:
    ref = reference(loss, requires_grad=",".join(TRAINABLE), frozen=",".join(FROZEN), loss=loss,
                    optimizer="AdamW")
    ours = _generate(tmp_path, requires_grad=TRAINABLE, frozen_params=FROZEN, loss=getattr(LossType, loss),
                     optimizer=OptimType.AdamW)
    assert sorted(os.listdir(ours)) == sorted(os.listdir(ref))

    for name in ("training_model.onnx", "eval_model.onnx"):
        assert _io(ours / name) == _io(ref / name), name
        assert describe(ours / name)["opset_import"]["ai.onnx"] == 17, name
    # The eval model is the forward model plus the loss, parameters as inputs, node for node.
    assert normalize_names(describe(ours / "eval_model.onnx"))["nodes"] == \
        normalize_names(describe(ref / "eval_model.onnx"))["nodes"]

    training_inputs = [v["name"] for v in describe(ours / "training_model.onnx")["inputs"]]
    user = ["input"] + (["labels"] if loss == "CrossEntropyLoss" else ["target"])
    assert training_inputs == user + MLP_PARAMS + [f"{p}_grad.accumulation.buffer" for p in TRAINABLE] + [
        "lazy_reset_grad"
    ]
    training = onnx.load(ours / "training_model.onnx")
    accumulators = [n for n in training.graph.node if n.op_type == "InPlaceAccumulatorV2"]
    # The gradient each node reads is named by the gradient builder; the runtimes only see the
    # buffers and flags.
    assert [(n.domain, n.input[0], n.input[2], list(n.output)) for n in accumulators] == [
        ("com.microsoft", f"{p}_grad.accumulation.buffer", "lazy_reset_grad", [f"{p}_grad.accumulation.out"])
        for p in TRAINABLE
    ]

    assert normalize_names(describe(ours / "optimizer_model.onnx")) == \
        normalize_names(describe(ref / "optimizer_model.onnx"))


def test_reference_reads_our_checkpoint(reference, tmp_path) -> None:
    ref = reference("CrossEntropyLoss", requires_grad=",".join(TRAINABLE), frozen=",".join(FROZEN),
                    loss="CrossEntropyLoss", optimizer="AdamW")
    ours = _generate(tmp_path, requires_grad=TRAINABLE, frozen_params=FROZEN, loss=LossType.CrossEntropyLoss,
                     optimizer=OptimType.AdamW)
    expected = ref_tool("describe", str(ref))["checkpoint"]
    got = ref_tool("describe", str(ours))["checkpoint"]
    assert got["parameters"] == expected["parameters"]
    assert got["properties"] == expected["properties"] == {}


def test_checkpoint_values_round_trip(tmp_path) -> None:
    ours = _generate(tmp_path, requires_grad=TRAINABLE, frozen_params=FROZEN, loss=LossType.MSELoss)
    assert not (ours / "optimizer_model.onnx").exists()
    original = mlp_model()
    zeroed = mlp_model()
    for t in zeroed.graph.initializer:
        t.CopyFrom(onnx.numpy_helper.from_array(np.zeros_like(onnx.numpy_helper.to_array(t)), t.name))
    onnxblock.load_checkpoint_to_model(ours / "checkpoint", zeroed)
    for want, got in zip(original.graph.initializer, zeroed.graph.initializer, strict=True):
        np.testing.assert_array_equal(onnx.numpy_helper.to_array(got), onnx.numpy_helper.to_array(want))


def test_nominal_checkpoint_is_smaller_and_has_the_same_parameters(reference, tmp_path) -> None:
    ours = _generate(tmp_path, requires_grad=MLP_PARAMS, loss=LossType.MSELoss, nominal_checkpoint=True,
                     prefix="mlp_")
    assert sorted(os.listdir(ours)) == ["mlp_checkpoint", "mlp_eval_model.onnx", "mlp_nominal_checkpoint",
                                        "mlp_training_model.onnx"]
    assert (ours / "mlp_nominal_checkpoint").stat().st_size < (ours / "mlp_checkpoint").stat().st_size
    with pytest.raises(RuntimeError, match="is a nominal checkpoint"):
        onnxblock.load_checkpoint_to_model(ours / "mlp_nominal_checkpoint", mlp_model())


def test_additional_outputs_follow_the_loss(reference, tmp_path) -> None:
    ref = reference("extra", requires_grad=",".join(MLP_PARAMS), loss="CrossEntropyLoss", optimizer="none",
                    additional_output_names="output")
    ours = _generate(tmp_path, requires_grad=MLP_PARAMS, loss=LossType.CrossEntropyLoss,
                     additional_output_names=["output"])
    for name in ("training_model.onnx", "eval_model.onnx"):
        assert _io(ours / name) == _io(ref / name), name
    outputs = [v["name"] for v in describe(ours / "training_model.onnx")["outputs"]]
    assert outputs[1] == "output" and outputs[0].startswith("onnx::loss::")


def test_model_path_and_model_proto_give_the_same_artifacts(tmp_path) -> None:
    path = tmp_path / "mlp.onnx"
    onnx.save(mlp_model(), path)
    for name, model in (("from_path", str(path)), ("from_proto", mlp_model())):
        os.mkdir(tmp_path / name)
        generate_artifacts(model, requires_grad=MLP_PARAMS, loss=LossType.L1Loss, optimizer=OptimType.SGD,
                           artifact_directory=tmp_path / name)
    for name in ("training_model.onnx", "eval_model.onnx", "optimizer_model.onnx"):
        a = normalize_names(describe(tmp_path / "from_path" / name))
        b = normalize_names(describe(tmp_path / "from_proto" / name))
        assert a == b, name


class _SquaredSumLoss(onnxblock.Block):
    """A custom loss: sum((output - target)^2) from basic blocks."""

    def build(self, output_name):
        target = onnxblock.blocks.InputLike(output_name)("target")
        return onnxblock.blocks.ReduceSum(keepdims=False)(
            onnxblock.blocks.Pow(2.0)(onnxblock.blocks.Sub()(output_name, target))
        )


def test_custom_loss_block(tmp_path) -> None:
    ours = _generate(tmp_path, requires_grad=MLP_PARAMS, loss=_SquaredSumLoss())
    eval_model = onnx.load(ours / "eval_model.onnx")
    assert [n.op_type for n in eval_model.graph.node][-3:] == ["Sub", "Pow", "ReduceSum"]
    assert [v.name for v in eval_model.graph.input][:2] == ["input", "target"]


def test_loss_input_names(reference, tmp_path) -> None:
    ours = _generate(tmp_path, requires_grad=MLP_PARAMS, loss=LossType.MSELoss, loss_input_names=["output"])
    ref = reference("loss_input_names", requires_grad=",".join(MLP_PARAMS), loss="MSELoss", optimizer="none",
                    loss_input_names="output")
    for name in ("training_model.onnx", "eval_model.onnx"):
        assert _io(ours / name) == _io(ref / name), name


def test_no_loss_passes_the_outputs_through(tmp_path) -> None:
    """loss=None: the model's outputs stay the outputs and the first one is the loss. The
    model here already ends in a loss (composed with onnxblock), as a model exported with
    its loss would."""

    class WithLoss(onnxblock.ForwardBlock):
        def build(self, output_name):
            return onnxblock.loss.MSELoss()(output_name), output_name

    block = WithLoss()
    with onnxblock.base(mlp_model()):
        block("output")
    path = tmp_path / "mlp_with_loss.onnx"
    onnx.save(block.to_model_proto(), path)
    ref = reference_artifacts(path, tmp_path / "ref", requires_grad=",".join(MLP_PARAMS), loss="none",
                              optimizer="SGD")
    os.mkdir(tmp_path / "ours")
    generate_artifacts(str(path), requires_grad=MLP_PARAMS, optimizer=OptimType.SGD,
                       artifact_directory=tmp_path / "ours")
    for name in ("training_model.onnx", "eval_model.onnx"):
        assert _io(tmp_path / "ours" / name) == _io(ref / name), name
        assert [v["name"] for v in describe(tmp_path / "ours" / name)["outputs"]][:2] == [v.name for v in block.to_model_proto().graph.output]


def test_enums_name_the_reference_members() -> None:
    assert [m.name for m in artifacts.LossType] == LOSSES
    assert [m.name for m in artifacts.OptimType] == ["AdamW", "SGD"]


@pytest.mark.parametrize("optimizer", ["AdamW", "SGD"])
def test_reference_runtime_trains_our_artifacts_like_its_own(optimizer: str, reference, tmp_path) -> None:
    """The reference runtime trains from our artifacts and from its own: same losses step for
    step, same eval losses, same final parameters."""
    ref = reference(f"train_{optimizer}", requires_grad=",".join(TRAINABLE), frozen=",".join(FROZEN),
                    loss="CrossEntropyLoss", optimizer=optimizer)
    ours = _generate(tmp_path, requires_grad=TRAINABLE, frozen_params=FROZEN, loss=LossType.CrossEntropyLoss,
                     optimizer=getattr(OptimType, optimizer))
    rng = np.random.default_rng(7)
    steps = 4
    data = tmp_path / "data.npz"
    np.savez(data, input=rng.standard_normal((steps, 6, 4)).astype(np.float32),
             labels=rng.integers(0, 3, (steps, 6)).astype(np.int64))
    results = {}
    for name, directory in (("ref", ref), ("ours", ours)):
        params = tmp_path / f"{name}_params.npz"
        results[name] = ref_tool("train", str(directory), str(data), "--steps", str(steps), "--lr", "0.05",
                                 "--eval", "--params-out", str(params))
        results[name]["params"] = dict(np.load(params))
    want, got = results["ref"], results["ours"]
    assert got["input_names"] == want["input_names"] == ["input", "labels"]
    np.testing.assert_allclose(got["losses"], want["losses"], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got["eval_losses"], want["eval_losses"], rtol=1e-5, atol=1e-6)
    assert sorted(got["params"]) == sorted(want["params"]) == sorted(MLP_PARAMS)
    initial = {t.name: onnx.numpy_helper.to_array(t) for t in mlp_model().graph.initializer}
    for name in MLP_PARAMS:
        np.testing.assert_allclose(got["params"][name], want["params"][name], rtol=1e-5, atol=1e-6, err_msg=name)
        assert np.array_equal(got["params"][name], initial[name]) == (name in FROZEN), name
