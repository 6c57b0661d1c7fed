"""Records what the reference on-device training runtime (ONNX Runtime Training 1.19.2)
does in its optimizer steps, for tests/python/test_optimizer_interop.py to replay.

Run it with the reference venv:  .venv-ref/bin/python tests/interop/ref_optimizer.py OUT.npz

Two kinds of records:

1. Runtime runs ("run:<name>"): artifacts of a tiny MLP (MatMul-Add-Relu-MatMul-Add, MSE
   loss) generated with the reference ``generate_artifacts`` and one optimizer (AdamW, SGD,
   and both with an ``onnxblock.optim.ClipGradNorm`` custom block, and AdamW with weight
   decay), trained with its Module/Optimizer for a few steps. Per step i and parameter:
   ``run:<name>/<i>/before/<param>``, ``/grad/<param>`` (the accumulated gradient as the
   optimizer receives it, read before the step) and ``/after/<param>``, plus the learning
   rate ``run:<name>/<i>/lr`` and the optimizer's step input ``run:<name>/<i>/step``.
2. Op runs ("op:<name>"): an optimizer model with one AdamWOptimizer node with chosen
   attributes (adam_mode 0, weight decay, no bias correction: settings that
   generate_artifacts never writes) run by an InferenceSession for a few steps, feeding the
   outputs back. ``op:<name>/<i>/{param,grad,m,v}_in/<k>`` and ``/{param,m,v}_out/<k>``.

``meta`` holds a JSON string describing every record (attributes, lr, steps, names).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

STEPS = 4
LR = 0.05
BATCH, IN, HIDDEN, OUT = 6, 4, 5, 3
PARAMS = ["w1", "b1", "w2", "b2"]


def mlp_model(seed: int) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    inits = [
        numpy_helper.from_array(rng.standard_normal((IN, HIDDEN)).astype(np.float32), "w1"),
        numpy_helper.from_array(rng.standard_normal(HIDDEN).astype(np.float32), "b1"),
        numpy_helper.from_array(rng.standard_normal((HIDDEN, OUT)).astype(np.float32), "w2"),
        numpy_helper.from_array(rng.standard_normal(OUT).astype(np.float32), "b2"),
    ]
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h0"]),
        helper.make_node("Add", ["h0", "b1"], ["h1"]),
        helper.make_node("Relu", ["h1"], ["h2"]),
        helper.make_node("MatMul", ["h2", "w2"], ["y0"]),
        helper.make_node("Add", ["y0", "b2"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [BATCH, IN])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [BATCH, OUT])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    return model


def runtime_run(name: str, optimizer, out: dict, meta: dict, seed: int) -> None:
    from onnxruntime.training import api, artifacts

    with tempfile.TemporaryDirectory() as d:
        artifacts.generate_artifacts(
            mlp_model(seed),
            requires_grad=PARAMS,
            loss=artifacts.LossType.MSELoss,
            optimizer=optimizer,
            artifact_directory=d,
        )
        optim_model = onnx.load(os.path.join(d, "optimizer_model.onnx"))
        nodes = [
            {
                "op_type": n.op_type,
                "inputs": list(n.input),
                "attributes": {
                    a.name: helper.get_attribute_value(a) for a in n.attribute if a.type != a.STRING
                },
            }
            for n in optim_model.graph.node
        ]
        state = api.CheckpointState.load_checkpoint(os.path.join(d, "checkpoint"))
        module = api.Module(os.path.join(d, "training_model.onnx"), state)
        opt = api.Optimizer(os.path.join(d, "optimizer_model.onnx"), module)
        opt.set_learning_rate(LR)
        module.train()
        rng = np.random.default_rng(seed + 1)
        for i in range(STEPS):
            x = rng.standard_normal((BATCH, IN)).astype(np.float32)
            target = rng.standard_normal((BATCH, OUT)).astype(np.float32)
            module(x, target)
            for p in PARAMS:
                prm = state.parameters[p]
                out[f"run:{name}/{i}/before/{p}"] = np.array(prm.data, copy=True)
                out[f"run:{name}/{i}/grad/{p}"] = np.array(prm.grad, copy=True)
            out[f"run:{name}/{i}/lr"] = np.float32(opt.get_learning_rate())
            # The runtime feeds its step count + 1 (1 on the first update).
            out[f"run:{name}/{i}/step"] = np.int64(i + 1)
            opt.step()
            for p in PARAMS:
                out[f"run:{name}/{i}/after/{p}"] = np.array(state.parameters[p].data, copy=True)
            module.lazy_reset_grad()
    meta[f"run:{name}"] = {"steps": STEPS, "params": PARAMS, "optimizer_nodes": nodes}


def op_run(name: str, attrs: dict, out: dict, meta: dict, seed: int) -> None:
    import onnxruntime as ort

    seq = helper.make_tensor_sequence_value_info
    inputs = [
        helper.make_tensor_value_info("lr", TensorProto.FLOAT, [1]),
        helper.make_tensor_value_info("step", TensorProto.INT64, [1]),
        seq("params", TensorProto.FLOAT, None),
        seq("grads", TensorProto.FLOAT, None),
        seq("m", TensorProto.FLOAT, None),
        seq("v", TensorProto.FLOAT, None),
    ]
    outputs = [
        helper.make_tensor_value_info("flag", TensorProto.BOOL, [1]),
        seq("params_out", TensorProto.FLOAT, None),
        seq("m_out", TensorProto.FLOAT, None),
        seq("v_out", TensorProto.FLOAT, None),
    ]
    node = helper.make_node(
        "AdamWOptimizer",
        ["lr", "step", "params", "grads", "m", "v"],
        ["flag", "params_out", "m_out", "v_out"],
        domain="com.microsoft",
        **attrs,
    )
    graph = helper.make_graph([node], "adamw", inputs, outputs)
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)],
    )
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(seed)
    shapes = [(7, 3), (11,)]
    params = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    m = [np.zeros(s, np.float32) for s in shapes]
    v = [np.zeros(s, np.float32) for s in shapes]
    for i in range(STEPS):
        grads = [(0.5 * rng.standard_normal(s)).astype(np.float32) for s in shapes]
        for k in range(len(shapes)):
            out[f"op:{name}/{i}/param_in/{k}"] = params[k].copy()
            out[f"op:{name}/{i}/grad_in/{k}"] = grads[k].copy()
            out[f"op:{name}/{i}/m_in/{k}"] = m[k].copy()
            out[f"op:{name}/{i}/v_in/{k}"] = v[k].copy()
        feeds = {
            "lr": np.array([LR], np.float32),
            "step": np.array([i + 1], np.int64),
            "params": [x.copy() for x in params],
            "grads": grads,
            "m": [x.copy() for x in m],
            "v": [x.copy() for x in v],
        }
        flag, params, m, v = sess.run(None, feeds)
        assert bool(np.asarray(flag).reshape(-1)[0]), f"{name}: AdamWOptimizer skipped step {i}"
        for k in range(len(shapes)):
            out[f"op:{name}/{i}/param_out/{k}"] = params[k]
            out[f"op:{name}/{i}/m_out/{k}"] = m[k]
            out[f"op:{name}/{i}/v_out/{k}"] = v[k]
    meta[f"op:{name}"] = {"steps": STEPS, "lr": LR, "attributes": attrs, "tensors": len(shapes)}


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    import onnxruntime
    from onnxruntime.training import artifacts, onnxblock

    onnxruntime.set_default_logger_severity(3)
    out: dict = {}
    meta: dict = {}
    optim = onnxblock.optim
    runtime_run("adamw", artifacts.OptimType.AdamW, out, meta, seed=0)
    runtime_run("sgd", artifacts.OptimType.SGD, out, meta, seed=10)
    runtime_run("adamw_clip", optim.AdamW(clip_grad=optim.ClipGradNorm(0.05)), out, meta, seed=20)
    runtime_run("sgd_clip", optim.SGD(clip_grad=optim.ClipGradNorm(0.05)), out, meta, seed=30)
    runtime_run(
        "adamw_wd",
        optim.AdamW(betas=(0.85, 0.99), eps=1e-4, weight_decay=0.1),
        out,
        meta,
        seed=40,
    )
    base = {"alpha": 0.9, "beta": 0.999, "epsilon": 1e-8}
    op_run("mode0", {**base, "adam_mode": 0, "correct_bias": 1, "weight_decay": 0.0}, out, meta, 50)
    op_run(
        "mode0_wd", {**base, "adam_mode": 0, "correct_bias": 1, "weight_decay": 0.2}, out, meta, 51
    )
    op_run(
        "mode1_wd", {**base, "adam_mode": 1, "correct_bias": 1, "weight_decay": 0.2}, out, meta, 52
    )
    op_run(
        "mode1_nobias",
        {
            "alpha": 0.8,
            "beta": 0.95,
            "epsilon": 1e-3,
            "adam_mode": 1,
            "correct_bias": 0,
            "weight_decay": 0.05,
        },
        out,
        meta,
        53,
    )
    out["meta"] = np.array(json.dumps(meta, default=float))
    np.savez(argv[0], **out)
    print(
        json.dumps(
            {
                k: {kk: vv for kk, vv in v.items() if kk != "optimizer_nodes"}
                for k, v in meta.items()
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
