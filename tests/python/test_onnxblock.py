"""onnxblock: every loss block evaluated by onnx.reference and stock onnxruntime against
torch.nn.functional; basic blocks against numpy; contexts and errors; the optimizer and loss
compositions against those of ONNX Runtime Training 1.19.2 (the reference venv)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime
import pytest
import torch
import torch.nn.functional as F
from onnx.reference import ReferenceEvaluator

from ortmodule.training import onnxblock
from tests.python.training_utils import (
    MLP_PARAMS,
    describe,
    mlp_model,
    normalize_names,
    prediction_model,
    reference_artifacts,
)

RTOL, ATOL = 1e-5, 1e-6
REDUCTIONS = ["mean", "sum", "none"]


def _run_reference(model: onnx.ModelProto, feeds: dict) -> list[np.ndarray]:
    return ReferenceEvaluator(model).run(None, feeds)


def _run_onnxruntime(model: onnx.ModelProto, feeds: dict) -> list[np.ndarray]:
    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


RUNNERS = {"onnx_reference": _run_reference, "onnxruntime": _run_onnxruntime}


class _Forward(onnxblock.ForwardBlock):
    """Applies one block to the model's output."""

    def __init__(self, block: onnxblock.Block):
        super().__init__()
        self._block = block

    def build(self, output_name: str):
        return self._block(output_name)


def _compose(base: onnx.ModelProto, block: onnxblock.Block) -> onnx.ModelProto:
    forward = _Forward(block)
    with onnxblock.base(base):
        forward("output")
    return forward.to_model_proto()


def _check(runner: str, model: onnx.ModelProto, feeds: dict, expected: torch.Tensor) -> None:
    (got,) = RUNNERS[runner](model, feeds)
    np.testing.assert_allclose(got, expected.numpy(), rtol=RTOL, atol=ATOL)
    assert np.shape(got) == tuple(expected.shape)


# ---- losses ----

@pytest.mark.parametrize("runner", list(RUNNERS))
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("loss_name", ["MSELoss", "L1Loss"])
def test_regression_loss_matches_torch(loss_name: str, reduction: str, runner: str) -> None:
    rng = np.random.default_rng(1)
    x = rng.standard_normal((4, 3, 2)).astype(np.float32)
    target = rng.standard_normal((4, 3, 2)).astype(np.float32)
    model = _compose(prediction_model([4, 3, 2]), getattr(onnxblock.loss, loss_name)(reduction=reduction))
    assert [v.name for v in model.graph.input] == ["x", "target"]
    assert model.graph.input[1].type == model.graph.input[0].type
    fn = F.mse_loss if loss_name == "MSELoss" else F.l1_loss
    expected = fn(torch.from_numpy(x).double(), torch.from_numpy(target).double(), reduction=reduction).float()
    _check(runner, model, {"x": x, "target": target}, expected)


@pytest.mark.parametrize("runner", list(RUNNERS))
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("ignore_index", [None, 2])
def test_cross_entropy_matches_torch(ignore_index, weighted: bool, reduction: str, runner: str) -> None:
    rng = np.random.default_rng(2)
    scores = rng.standard_normal((6, 4)).astype(np.float32)
    labels = np.array([0, 2, 1, 3, 2, 1], dtype=np.int64)
    weight = rng.uniform(0.5, 2.0, 4).astype(np.float32) if weighted else None
    loss = onnxblock.loss.CrossEntropyLoss(weight=weight, reduction=reduction, ignore_index=ignore_index)
    model = _compose(prediction_model([6, 4]), loss)
    labels_input = model.graph.input[1]
    assert labels_input.name == "labels"
    assert labels_input.type.tensor_type.elem_type == onnx.TensorProto.INT64
    assert [d.dim_value for d in labels_input.type.tensor_type.shape.dim] == [6]
    (node,) = [n for n in model.graph.node if n.op_type == "SoftmaxCrossEntropyLoss"]
    assert len(node.input) == (3 if weighted else 2)
    expected = F.cross_entropy(
        torch.from_numpy(scores).double(), torch.from_numpy(labels),
        weight=None if weight is None else torch.from_numpy(weight).double(),
        ignore_index=-100 if ignore_index is None else ignore_index, reduction=reduction,
    ).float()
    _check(runner, model, {"x": scores, "labels": labels}, expected)


@pytest.mark.parametrize("runner", list(RUNNERS))
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("pos_weighted", [False, True])
def test_bce_with_logits_matches_torch(pos_weighted: bool, weighted: bool, reduction: str, runner: str) -> None:
    rng = np.random.default_rng(3)
    logits = rng.standard_normal((5, 3)).astype(np.float32)
    target = rng.uniform(0.0, 1.0, (5, 3)).astype(np.float32)
    weight = rng.uniform(0.5, 2.0, (5, 1)).astype(np.float32) if weighted else None
    pos_weight = rng.uniform(0.5, 3.0, 3).astype(np.float32) if pos_weighted else None
    loss = onnxblock.loss.BCEWithLogitsLoss(weight=weight, reduction=reduction, pos_weight=pos_weight)
    model = _compose(prediction_model([5, 3]), loss)
    assert [v.name for v in model.graph.input] == ["x", "target"]
    ops = [n.op_type for n in model.graph.node[1:]]
    assert set(ops) <= {"Sigmoid", "Log", "Sub", "Mul", "Add", "Neg", "ReduceMean", "ReduceSum"}
    expected = F.binary_cross_entropy_with_logits(
        torch.from_numpy(logits).double(), torch.from_numpy(target).double(),
        weight=None if weight is None else torch.from_numpy(weight).double(),
        pos_weight=None if pos_weight is None else torch.from_numpy(pos_weight).double(),
        reduction=reduction,
    ).float()
    _check(runner, model, {"x": logits, "target": target}, expected)


@pytest.mark.parametrize("loss_name", ["MSELoss", "L1Loss", "CrossEntropyLoss", "BCEWithLogitsLoss"])
def test_loss_rejects_unknown_reduction(loss_name: str) -> None:
    with pytest.raises(RuntimeError, match=f"{loss_name}: reduction 'avg' is not one of mean, sum, none"):
        getattr(onnxblock.loss, loss_name)(reduction="avg")


def test_loss_uses_an_existing_target_input() -> None:
    base = prediction_model([2, 3])
    base.graph.input.append(onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2, 3]))

    class WithTarget(onnxblock.ForwardBlock):
        def build(self, output_name):
            return onnxblock.loss.MSELoss()(output_name, "y")

    block = WithTarget()
    with onnxblock.base(base):
        block("output")
    model = block.to_model_proto()
    assert [v.name for v in model.graph.input] == ["x", "y"]
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    y = np.ones((2, 3), np.float32)
    (got,) = _run_reference(model, {"x": x, "y": y})
    np.testing.assert_allclose(got, np.mean((x - y) ** 2), rtol=RTOL)


# ---- basic blocks ----

class _Expression(onnxblock.ForwardBlock):
    def __init__(self, fn):
        super().__init__()
        self._fn = fn

    def build(self, output_name):
        return self._fn(output_name)


def _evaluate(fn, x: np.ndarray) -> np.ndarray:
    block = _Expression(fn)
    with onnxblock.base(prediction_model(list(x.shape))):
        block("output")
    model = block.to_model_proto()
    (ref,) = _run_reference(model, {"x": x})
    (ort,) = _run_onnxruntime(model, {"x": x})
    np.testing.assert_allclose(ort, ref, rtol=RTOL, atol=ATOL)
    return ref


BLOCK_CASES = {
    "add": (lambda o: onnxblock.blocks.Add()(o, onnxblock.blocks.Constant(2.0)()), lambda x: x + 2),
    "sub": (lambda o: onnxblock.blocks.Sub()(o, onnxblock.blocks.Constant(0.5)()), lambda x: x - 0.5),
    "mul": (lambda o: onnxblock.blocks.Mul()(o, o), lambda x: x * x),
    "div": (lambda o: onnxblock.blocks.Div()(o, onnxblock.blocks.Constant(4.0)()), lambda x: x / 4),
    "pow": (lambda o: onnxblock.blocks.Pow(3.0)(o), lambda x: x**3),
    "reduce_mean": (lambda o: onnxblock.blocks.ReduceMean(keepdims=False)(o), lambda x: np.mean(x)),
    "reduce_sum_keepdims": (lambda o: onnxblock.blocks.ReduceSum()(o), lambda x: np.sum(x, keepdims=True)),
    "sigmoid": (lambda o: onnxblock.blocks.Sigmoid()(o), lambda x: 1 / (1 + np.exp(-x))),
    "log_abs": (lambda o: onnxblock.blocks.Log()(onnxblock.blocks.Abs()(o)), lambda x: np.log(np.abs(x))),
    "neg": (lambda o: onnxblock.blocks.Neg()(o), lambda x: -x),
    "clip": (lambda o: onnxblock.blocks.Clip(-0.5, 0.25)(o), lambda x: np.clip(x, -0.5, 0.25)),
    "clip_min_only": (lambda o: onnxblock.blocks.Clip(clip_min=0.0)(o), lambda x: np.maximum(x, 0)),
    "cast": (lambda o: onnxblock.blocks.Cast(onnx.TensorProto.INT64)(o), lambda x: x.astype(np.int64)),
}


@pytest.mark.parametrize("case", list(BLOCK_CASES))
def test_basic_block_matches_numpy(case: str) -> None:
    fn, expected = BLOCK_CASES[case]
    x = np.random.default_rng(4).standard_normal((3, 4)).astype(np.float32) * 2
    got = _evaluate(fn, x)
    np.testing.assert_allclose(got, expected(x.astype(np.float64)).astype(got.dtype), rtol=RTOL, atol=ATOL)


def test_linear_block_is_a_gemm_with_fresh_parameters() -> None:
    x = np.random.default_rng(5).standard_normal((2, 3)).astype(np.float32)
    block = _Expression(lambda o: onnxblock.blocks.Linear(3, 4, alpha=0.5, beta=2.0)(o))
    with onnxblock.base(prediction_model([2, 3])):
        block("output")
    model = block.to_model_proto()
    gemm = model.graph.node[-1]
    assert gemm.op_type == "Gemm"
    assert {a.name: a.f for a in gemm.attribute} == {"alpha": 0.5, "beta": 2.0}
    weight, bias = (onnx.numpy_helper.to_array(t) for t in model.graph.initializer)
    assert weight.shape == (3, 4) and bias.shape == (4,)
    (got,) = _run_reference(model, {"x": x})
    np.testing.assert_allclose(got, 0.5 * x @ weight + 2.0 * bias, rtol=RTOL, atol=ATOL)


def test_input_like_and_sequence_construct() -> None:
    x = np.random.default_rng(6).standard_normal((2, 2)).astype(np.float32)

    def fn(o):
        other = onnxblock.blocks.InputLike("x")("other")
        return onnxblock.blocks.SequenceConstruct()(o, other)

    block = _Expression(fn)
    with onnxblock.base(prediction_model([2, 2])):
        block("output")
    model = block.to_model_proto()
    assert model.graph.input[1].name == "other" and model.graph.input[1].type == model.graph.input[0].type
    (seq,) = _run_reference(model, {"x": x, "other": 2 * x})
    np.testing.assert_array_equal(seq[0], x)
    np.testing.assert_array_equal(seq[1], 2 * x)


def test_label_encoder_block() -> None:
    graph = onnx.helper.make_graph(
        [onnx.helper.make_node("Identity", ["x"], ["output"])], "g",
        [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.STRING, [3])],
        [onnx.helper.make_tensor_value_info("output", onnx.TensorProto.STRING, [3])],
    )
    base = onnx.helper.make_model(
        graph, opset_imports=[onnx.helper.make_opsetid("", 17), onnx.helper.make_opsetid("ai.onnx.ml", 2)]
    )
    base.ir_version = 8
    encoder = onnxblock.blocks.LabelEncoder(default_int64=-1, keys_strings=["a", "b"], values_int64s=[3, 7])
    block = _Expression(encoder)
    with onnxblock.base(base):
        block("output")
    model = block.to_model_proto()
    node = model.graph.node[-1]
    assert (node.op_type, node.domain) == ("LabelEncoder", "ai.onnx.ml")
    (got,) = _run_onnxruntime(model, {"x": np.array(["b", "a", "z"], dtype=object)})
    np.testing.assert_array_equal(got, [7, 3, -1])


# ---- contexts and errors ----

def test_block_outside_a_context_raises() -> None:
    with pytest.raises(RuntimeError, match="no onnxblock model context is open"):
        onnxblock.blocks.Neg()("x")


def test_contexts_do_not_nest() -> None:
    with onnxblock.empty_base(), pytest.raises(RuntimeError, match="already open"), onnxblock.empty_base():
        pass


def test_base_copies_the_model() -> None:
    base = prediction_model([2])
    with onnxblock.base(base) as accessor:
        onnxblock.blocks.Neg()("output")
        assert len(accessor.model.graph.node) == 2
    assert len(base.graph.node) == 1


def test_empty_base_imports_default_and_microsoft_domains() -> None:
    with onnxblock.empty_base(opset_version=17) as accessor:
        opsets = {o.domain: o.version for o in accessor.model.opset_import}
        assert opsets == {"": 17, "com.microsoft": 1}
        assert accessor.model.ir_version == 10


def test_invalid_build_names_the_block() -> None:
    with onnxblock.base(prediction_model([2])), pytest.raises(RuntimeError, match="Add: the model built so far"):
        onnxblock.blocks.Add()("output", "no_such_value")


def test_custom_op_library_is_not_supported(tmp_path) -> None:
    library = tmp_path / "libcustom.so"
    expected = "libcustom.so.*custom op libraries are not supported"
    with pytest.raises(NotImplementedError, match=expected), onnxblock.custom_op_library(library):
        pass


def test_training_block_before_build_raises() -> None:
    class Loss(onnxblock.TrainingBlock):
        def build(self, output_name):
            return onnxblock.loss.MSELoss()(output_name)

    block = Loss()
    with pytest.raises(RuntimeError, match="parameters are known only after the training model is built"):
        block.parameters()
    with pytest.raises(RuntimeError, match="training and eval models are not built yet"):
        block.to_model_proto()
    with pytest.raises(RuntimeError, match="forward model is not built yet"):
        _Forward(onnxblock.blocks.Neg()).to_model_proto()


def test_requires_grad_toggles_between_trainable_and_frozen() -> None:
    class Loss(onnxblock.TrainingBlock):
        def build(self, output_name):
            return output_name

    block = Loss()
    block.requires_grad("a")
    block.requires_grad("b", False)
    block.requires_grad("a", False)
    block.requires_grad("b")
    assert list(block._requires_grad) == ["b"] and list(block._frozen_params) == ["a"]


# ---- against the reference's compositions ----

def _our_optimizer(model: onnx.ModelProto, optimizer: str, clip: float | None, path) -> None:
    trainable = [t for t in model.graph.initializer if t.name in MLP_PARAMS]
    clip_block = None if clip is None else onnxblock.optim.ClipGradNorm(clip)
    block = getattr(onnxblock.optim, optimizer)(clip_grad=clip_block)
    with onnxblock.empty_base(opset_version=17):
        block((trainable, []))
    onnx.save(block.to_model_proto(), path)


@pytest.mark.parametrize("clip", [None, 2.5])
@pytest.mark.parametrize("optimizer", ["AdamW", "SGD"])
def test_optimizer_model_matches_reference(optimizer: str, clip, tmp_path) -> None:
    model = mlp_model()
    onnx.save(model, tmp_path / "mlp.onnx")
    ref_dir = reference_artifacts(
        tmp_path / "mlp.onnx", tmp_path / "ref", requires_grad=",".join(MLP_PARAMS), loss="MSELoss",
        optimizer=optimizer, clip_grad_norm=clip,
    )
    ours = tmp_path / "optimizer_model.onnx"
    _our_optimizer(model, optimizer, clip, ours)
    expected = normalize_names(describe(ref_dir / "optimizer_model.onnx"))
    got = normalize_names(describe(ours))
    assert got == expected
    assert onnx.load(ours).ir_version == onnx.load(ref_dir / "optimizer_model.onnx").ir_version

    # The facts the runtime relies on, spelled out.
    assert [v["name"] for v in got["inputs"]] == [
        "learning_rate", "step", "params", "gradients", "first_order_moments",
        *(["second_order_moments"] if optimizer == "AdamW" else []),
    ]
    assert got["opset_import"] == {"ai.onnx": 17, "com.microsoft": 1}
    update = got["nodes"][-1]
    assert update["domain"] == "com.microsoft"
    if optimizer == "AdamW":
        assert update["op_type"] == "AdamWOptimizer"
        attrs = update["attributes"]
        assert attrs["adam_mode"] == 1 and attrs["correct_bias"] == 1 and attrs["weight_decay"] == 0.0
        np.testing.assert_allclose([attrs["alpha"], attrs["beta"], attrs["epsilon"]], [0.9, 0.999, 1e-6], rtol=1e-7)
    else:
        assert update["op_type"] == "SGDOptimizerV2"
    if clip is not None:
        assert got["nodes"][0]["op_type"] == "InplaceClipGradNorm"
    assert got["outputs"] == [{"name": update["outputs"][0], "type": "BOOL", "shape": [1]}]


@pytest.mark.parametrize("loss_name", ["MSELoss", "CrossEntropyLoss", "BCEWithLogitsLoss", "L1Loss"])
def test_loss_composition_matches_reference(loss_name: str, tmp_path) -> None:
    """The reference's eval model is the forward model plus the loss with the parameters moved
    to inputs: its nodes, loss constants, loss inputs and outputs equal our composition."""
    model = mlp_model()
    onnx.save(model, tmp_path / "mlp.onnx")
    ref_dir = reference_artifacts(
        tmp_path / "mlp.onnx", tmp_path / "ref", requires_grad=",".join(MLP_PARAMS), loss=loss_name,
        optimizer="none",
    )
    expected = normalize_names(describe(ref_dir / "eval_model.onnx"))
    ours_path = tmp_path / "composed.onnx"
    onnx.save(_compose(model, getattr(onnxblock.loss, loss_name)()), ours_path)
    got = normalize_names(describe(ours_path))
    assert got["nodes"] == expected["nodes"]
    assert got["outputs"] == expected["outputs"]
    assert got["inputs"] == [v for v in expected["inputs"] if v["name"] not in MLP_PARAMS]
    assert [t for t in got["initializers"] if t["name"] not in MLP_PARAMS] == expected["initializers"]


def test_save_checkpoint_rejects_duplicate_names(tmp_path) -> None:
    weight = onnx.numpy_helper.from_array(np.ones(2, np.float32), "w")
    with pytest.raises(RuntimeError, match="parameter 'w' is given more than once"):
        onnxblock.save_checkpoint(([weight], [weight]), tmp_path / "checkpoint")
    assert not (tmp_path / "checkpoint").exists()
