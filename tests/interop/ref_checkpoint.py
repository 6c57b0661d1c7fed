"""Writes and reads on-device training checkpoints with the reference runtime
(onnxruntime-training 1.19.2), for tests/python/test_checkpoint_interop.py. Runs under the
reference venv (`make ref-venv`, .venv-ref/bin/python), never under ours.

    python tests/interop/ref_checkpoint.py write DIR
        DIR/params.ckpt     onnxblock.save_checkpoint: parameters of many dtypes, unsorted
        DIR/nominal.ckpt    the same parameters as a nominal checkpoint
        DIR/training.ckpt   a Module + AdamW Optimizer after one train step and one optimizer
                            step, with int/float/str properties, saved with optimizer state
        DIR/expected.json   what each file holds, from the values given to the reference
                            (and the gradient the Module computed, for the moments)
    python tests/interop/ref_checkpoint.py read FILE
        prints a JSON of what the reference sees in FILE: the parameters and properties
        through its CheckpointState API, and the module state layout and optimizer groups
        from re-saving the loaded state with its own writer (include_optimizer_state=True)
        and decoding that file with its packaged FlatBuffers classes.

Tensors are {"dtype": numpy name, "shape": [...], "hex": little-endian bytes}.
"""

from __future__ import annotations

import json
import os
import pathlib
import sys
import tempfile

import numpy as np


def _tensor_json(a: np.ndarray) -> dict:
    a = np.asarray(a, order="C")  # (ascontiguousarray would make 0-d arrays 1-d)
    return {"dtype": a.dtype.name, "shape": list(a.shape), "hex": a.tobytes().hex()}


def _parameters() -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    rng = np.random.default_rng(7)
    trainable = {
        "w.float32": rng.standard_normal((3, 4)).astype(np.float32),
        "b.float64": rng.standard_normal((2,)),
        "a.float16": rng.standard_normal((2, 2)).astype(np.float16),
        "scalar": np.array(1.5, np.float32),
        "empty": np.zeros((0, 3), np.float32),
    }
    frozen = {
        "z.int64": np.array([1, -2, 2**62], np.int64),
        "int32": np.array([[7, -8]], np.int32),
        "int8": np.array([-128, 127], np.int8),
        "uint8": np.array([0, 255, 3], np.uint8),
        "mask": np.array([True, False, True]),
    }
    return trainable, frozen


def _write(out: pathlib.Path) -> None:
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    from onnxruntime.training import artifacts, onnxblock
    from onnxruntime.training.api import CheckpointState, LinearLRScheduler, Module, Optimizer

    out.mkdir(parents=True, exist_ok=True)
    expected: dict[str, dict] = {}
    trainable, frozen = _parameters()
    protos = (
        [numpy_helper.from_array(v, k) for k, v in trainable.items()],
        [numpy_helper.from_array(v, k) for k, v in frozen.items()],
    )
    onnxblock.save_checkpoint(protos, str(out / "params.ckpt"))
    expected["params.ckpt"] = {
        "trainable": {k: _tensor_json(v) for k, v in trainable.items()},
        "frozen": {k: _tensor_json(v) for k, v in frozen.items()},
        "is_nominal": False,
    }
    onnxblock.save_checkpoint(protos, str(out / "nominal.ckpt"), nominal_checkpoint=True)
    expected["nominal.ckpt"] = {
        "trainable": sorted(trainable), "frozen": sorted(frozen),
        "dtypes": {k: v.dtype.name for k, v in {**trainable, **frozen}.items()},
        "is_nominal": True,
    }

    # y = x @ W + B, MSE loss, AdamW; W trainable, B frozen.
    rng = np.random.default_rng(0)
    w = rng.standard_normal((3, 2)).astype(np.float32)
    b = rng.standard_normal((2,)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["h"]), helper.make_node("Add", ["h", "B"], ["y"])],
        "linear",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 2])],
        [numpy_helper.from_array(w, "W"), numpy_helper.from_array(b, "B")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    onnx.checker.check_model(model)
    art = out / "artifacts"
    art.mkdir(exist_ok=True)
    artifacts.generate_artifacts(model, requires_grad=["W"], frozen_params=["B"],
                                 loss=artifacts.LossType.MSELoss,
                                 optimizer=artifacts.OptimType.AdamW, artifact_directory=str(art))
    state = CheckpointState.load_checkpoint(str(art / "checkpoint"))
    module = Module(str(art / "training_model.onnx"), state, str(art / "eval_model.onnx"))
    optimizer = Optimizer(str(art / "optimizer_model.onnx"), module)
    LinearLRScheduler(optimizer, 0, 10, 0.25)  # sets the group's initial learning rate
    module.train()
    module(rng.standard_normal((4, 3)).astype(np.float32),
           rng.standard_normal((4, 2)).astype(np.float32))
    grad = state.parameters["W"].grad.copy()
    optimizer.step()
    state.properties["epoch"] = 3
    state.properties["big"] = -(2**40)
    state.properties["best_loss"] = 0.125
    state.properties["note"] = "trained by the reference"
    CheckpointState.save_checkpoint(state, str(out / "training.ckpt"), include_optimizer_state=True)
    expected["training.ckpt"] = {
        "trainable": {"W": _tensor_json(state.parameters["W"].data)},
        "frozen": {"B": _tensor_json(b)},
        "is_nominal": False,
        "grad": {"W": _tensor_json(grad)},
        "step": 1, "initial_learning_rate": 0.25,
        "properties": {"epoch": 3, "big": -(2**40), "best_loss": 0.125,
                       "note": "trained by the reference"},
    }
    (out / "expected.json").write_text(json.dumps(expected, indent=1))


def _decode_fbs_tensors(vec_len, get) -> dict:
    from onnxruntime.tools.ort_format_model.ort_flatbuffers_py.fbs.TensorDataType import (
        TensorDataType,
    )

    names = {v: k for k, v in vars(TensorDataType).items() if not k.startswith("_")}
    out = {}
    for i in range(vec_len):
        t = get(i)
        raw = t.RawDataAsNumpy()
        out[t.Name().decode()] = {
            "data_type": names.get(t.DataType(), str(t.DataType())),
            "dims": [int(d) for d in (t.DimsAsNumpy() if t.DimsLength() else [])],
            "raw_bytes": 0 if isinstance(raw, int) else int(raw.size),
        }
    return out


def _read(path: str) -> dict:
    from onnxruntime.tools.ort_format_model.ort_flatbuffers_py.fbs.Checkpoint import Checkpoint
    from onnxruntime.training.api import CheckpointState

    state = CheckpointState.load_checkpoint(path)
    report: dict = {"parameter_names": list(state._state.parameter_names())}
    with tempfile.TemporaryDirectory() as tmp:
        resaved = os.path.join(tmp, "resaved.ckpt")
        CheckpointState.save_checkpoint(state, resaved, include_optimizer_state=True)
        buf = pathlib.Path(resaved).read_bytes()
    ck = Checkpoint.GetRootAs(buf, 0)
    report["version"] = ck.Version()
    ms = ck.ModuleState()
    report["is_nominal"] = bool(ms.IsNominalState()) if ms else False
    report["requires_grad_params"] = sorted(
        _decode_fbs_tensors(ms.RequiresGradParamsLength(), ms.RequiresGradParams)) if ms else []
    report["frozen_params"] = sorted(
        _decode_fbs_tensors(ms.FrozenParamsLength(), ms.FrozenParams)) if ms else []
    groups = {}
    for i in range(ck.OptimizerGroupsLength()):
        g = ck.OptimizerGroups(i)
        states = {}
        for j in range(g.OptimizerStatesLength()):
            s = g.OptimizerStates(j)
            moments = {}
            for k in range(s.MomentumsLength()):
                m = s.Momentums(k)
                raw = m.RawDataAsNumpy()
                moments[m.Name().decode()] = {
                    "data_type": m.DataType(),
                    "dims": [int(d) for d in (m.DimsAsNumpy() if m.DimsLength() else [])],
                    "hex": "" if isinstance(raw, int) else raw.tobytes().hex(),
                }
            states[s.ParamName().decode()] = moments
        groups[g.GroupName().decode()] = {"step": g.Step(),
                                          "initial_learning_rate": g.InitialLearningRate(),
                                          "param_states": states}
    report["optimizer_groups"] = groups
    if not report["is_nominal"]:
        report["parameters"] = {
            name: {"requires_grad": p.requires_grad, **_tensor_json(p.data)}
            for name, p in state.parameters
        }
    report["properties"] = {
        name: [type(v).__name__, v] for name, v in state.properties
    }
    return report


def main() -> int:
    if len(sys.argv) != 3 or sys.argv[1] not in ("write", "read"):
        print(__doc__, file=sys.stderr)
        return 2
    if sys.argv[1] == "write":
        _write(pathlib.Path(sys.argv[2]))
    else:
        print(json.dumps(_read(sys.argv[2])))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
