"""ForwardBlock (builds a forward model) and TrainingBlock (builds the training and eval models,
with the gradient graph from the engine)."""

from __future__ import annotations

import logging
from abc import abstractmethod

import onnx

from ortmodule.training.onnxblock import _graph_utils, blocks, model_accessor

_log = logging.getLogger("ortmodule")


class ForwardBlock(blocks.Block):
    """A block whose ``build`` returns the name(s) of the new graph output(s). Calling it
    infers shapes, makes those names the graph outputs and stores the model in the context
    (and in ``to_model_proto()``)."""

    def __init__(self) -> None:
        super().__init__()
        self._model: onnx.ModelProto | None = None

    @abstractmethod
    def build(self, *args, **kwargs):
        """Return the name(s) of the graph output(s)."""

    def to_model_proto(self) -> onnx.ModelProto:
        if self._model is None:
            raise RuntimeError(
                f"{type(self).__name__}: the forward model is not built yet; call the block inside an "
                "onnxblock context first"
            )
        return self._model

    def __call__(self, *args, **kwargs):
        accessor = model_accessor.current()
        self.base = accessor.model
        _log.debug("onnxblock: building forward block %s", type(self).__name__)
        output = self.build(*args, **kwargs)
        model = self.infer_shapes_on_base()
        _graph_utils.register_graph_outputs(model, output)
        self._model = model
        accessor.model.CopyFrom(model)
        return output


class TrainingBlock(blocks.Block):
    """A block whose ``build`` returns the loss name first (then any other outputs). Calling
    it composes the forward model, then has the engine build the training model (parameters as
    inputs, gradients accumulated into ``<p>_grad.accumulation.buffer`` inputs under
    ``lazy_reset_grad``) and the eval model (forward only, Dropout and BatchNormalization in
    inference mode). Nothing requires a gradient unless ``requires_grad`` says so."""

    def __init__(self) -> None:
        super().__init__()
        self._requires_grad: dict[str, None] = {}  # insertion-ordered sets
        self._frozen_params: dict[str, None] = {}
        self._parameters: tuple[list[onnx.TensorProto], list[onnx.TensorProto]] | None = None
        self._training_model: onnx.ModelProto | None = None
        self._eval_model: onnx.ModelProto | None = None

    @abstractmethod
    def build(self, *args, **kwargs):
        """Return the loss output name (or a tuple of names, the loss first)."""

    def requires_grad(self, argument_name: str, value: bool = True) -> None:
        """Mark an initializer or graph input as trainable (``value=True``) or frozen."""
        if value:
            self._frozen_params.pop(argument_name, None)
            self._requires_grad[argument_name] = None
        else:
            self._requires_grad.pop(argument_name, None)
            self._frozen_params[argument_name] = None

    def parameters(self) -> tuple[list[onnx.TensorProto], list[onnx.TensorProto]]:
        """(trainable, frozen) initializers, known once the training model is built."""
        if self._parameters is None:
            raise RuntimeError(
                f"{type(self).__name__}: the parameters are known only after the training model is "
                "built; call the block inside an onnxblock context first"
            )
        return self._parameters

    def to_model_proto(self) -> tuple[onnx.ModelProto, onnx.ModelProto]:
        """(training model, eval model)."""
        if self._training_model is None or self._eval_model is None:
            raise RuntimeError(
                f"{type(self).__name__}: the training and eval models are not built yet; call the block "
                "inside an onnxblock context first"
            )
        return self._training_model, self._eval_model

    def __call__(self, *args, **kwargs):
        accessor = model_accessor.current()
        self.base = accessor.model
        _log.debug("onnxblock: building training block %s", type(self).__name__)
        output = self.build(*args, **kwargs)
        model = self.infer_shapes_on_base()
        _graph_utils.register_graph_outputs(model, output)

        self._check_argument_names(model)
        self._parameters = _model_parameters(model, self._requires_grad, self._frozen_params)
        self._training_model, self._eval_model = _build_training_graphs(
            model, list(self._requires_grad), list(self._frozen_params)
        )
        accessor.model.CopyFrom(self._training_model)
        return output

    def _check_argument_names(self, model: onnx.ModelProto) -> None:
        initializers = {t.name for t in model.graph.initializer}
        inputs = {v.name for v in model.graph.input}
        for kind, names in (("requires_grad", self._requires_grad), ("frozen_params", self._frozen_params)):
            for name in names:
                if name not in initializers and name not in inputs:
                    raise RuntimeError(
                        f"{type(self).__name__}: {kind} names {name!r}, which is neither an initializer "
                        f"nor a graph input of the model (initializers: {sorted(initializers)}, "
                        f"inputs: {sorted(inputs)})"
                    )


def _model_parameters(model: onnx.ModelProto, requires_grad, frozen_params):
    """Initializers split into (trainable, frozen), in initializer order. Initializers in
    neither set stay constants of the graph and are not parameters."""
    trainable = [t for t in model.graph.initializer if t.name in requires_grad]
    frozen = [t for t in model.graph.initializer if t.name in frozen_params]
    return trainable, frozen


def _build_training_graphs(model: onnx.ModelProto, requires_grad: list[str], frozen: list[str]):
    from ortmodule import _C

    build = getattr(_C, "build_training_graphs", None)
    if build is None:
        raise RuntimeError(
            "this build of ortmodule._C has no build_training_graphs; rebuild the extension "
            "(python setup.py build_ext --inplace)"
        )
    result = build(model.SerializeToString(), requires_grad, frozen)
    training_model = onnx.ModelProto()
    training_model.ParseFromString(result[0])
    eval_model = onnx.ModelProto()
    eval_model.ParseFromString(result[1])
    engine_only_ops = list(result[2]) if len(result) > 2 else []
    if engine_only_ops:
        _log.warning(
            "the training model uses ops that only ortmodule runs (%s); ONNX Runtime Training cannot "
            "run these artifacts", ", ".join(engine_only_ops),
        )
    return training_model, eval_model
