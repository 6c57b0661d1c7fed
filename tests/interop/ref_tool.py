"""Command-line harness over the reference on-device training runtime (ONNX Runtime Training 1.19.2).

Run it with the reference venv (``make ref-venv``), never with the project's own venv:

    .venv-ref/bin/python tests/interop/ref_tool.py generate MODEL.onnx OUTDIR \
        --requires-grad a,b --frozen c --loss CrossEntropyLoss --optimizer AdamW
    .venv-ref/bin/python tests/interop/ref_tool.py train OUTDIR DATA.npz --steps 5 --lr 0.01 \
        --eval --out result.json
    .venv-ref/bin/python tests/interop/ref_tool.py describe OUTDIR
    .venv-ref/bin/python tests/interop/ref_tool.py batch COMMANDS.json

``generate`` calls the reference ``generate_artifacts``. ``train`` loads the reference
CheckpointState/Module/Optimizer on a directory of artifacts and trains ``--steps`` steps; DATA.npz
holds one array per user input of the training model (named like the input), with a leading step
axis: ``data[name][i]`` is the input of step i. The loop per step is

    loss = module(*inputs); optimizer.step(); module.lazy_reset_grad()

and with ``--eval`` the eval model then runs on the same inputs (with the updated parameters):
``eval_losses[i]`` follows optimizer step i. Without an optimizer model the optimizer step is
left out (and ``learning_rates`` is empty). ``describe`` prints, per model, the inputs and outputs
(name, element type, shape), the opset imports and the nodes (op type, domain, inputs, outputs,
attributes), plus the checkpoint's parameters. ``batch`` runs a JSON list of subcommand argument
lists in one process (the reference's import costs seconds) and prints ``{"results": [...]}``, one
result per command, in order. Every subcommand prints JSON on stdout (``--out``
also writes it to a file); the reference's own log lines go to stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np
import onnx

MODEL_FILES = ("training_model.onnx", "eval_model.onnx", "optimizer_model.onnx")


def _names(text: str | None) -> list[str]:
    if not text:
        return []
    return [n for n in text.split(",") if n]


def _emit(result: dict, out: str | None) -> None:
    text = json.dumps(result, indent=1)
    print(text)
    if out:
        with open(out, "w") as f:
            f.write(text + "\n")


def cmd_generate(args: argparse.Namespace) -> dict:
    from onnxruntime.training import artifacts, onnxblock

    model = onnx.load(args.model)
    loss = None if args.loss == "none" else getattr(artifacts.LossType, args.loss)
    if args.optimizer == "none":
        optimizer = None
    elif args.clip_grad_norm is not None:
        # A custom optimizer block: the stock block with an InplaceClipGradNorm before the update.
        block = {"AdamW": onnxblock.optim.AdamW, "SGD": onnxblock.optim.SGD}[args.optimizer]
        optimizer = block(clip_grad=onnxblock.optim.ClipGradNorm(args.clip_grad_norm))
    else:
        optimizer = getattr(artifacts.OptimType, args.optimizer)
    extra = {}
    if args.additional_output_names:
        extra["additional_output_names"] = _names(args.additional_output_names)
    if args.loss_input_names:
        extra["loss_input_names"] = _names(args.loss_input_names)
    os.makedirs(args.outdir, exist_ok=True)
    artifacts.generate_artifacts(
        model,
        requires_grad=_names(args.requires_grad),
        frozen_params=_names(args.frozen),
        loss=loss,
        optimizer=optimizer,
        artifact_directory=args.outdir,
        prefix=args.prefix,
        nominal_checkpoint=args.nominal,
        **extra,
    )
    return {"artifacts": sorted(os.listdir(args.outdir))}


def _loss_value(out) -> float | list:
    first = out[0] if isinstance(out, tuple) else out
    arr = np.asarray(first)
    return float(arr.reshape(())) if arr.size == 1 else arr.tolist()


def cmd_train(args: argparse.Namespace) -> dict:
    from onnxruntime.training import api

    d = args.artifact_dir
    p = args.prefix
    checkpoint = args.checkpoint or os.path.join(d, f"{p}checkpoint")
    state = api.CheckpointState.load_checkpoint(checkpoint)
    eval_path = os.path.join(d, f"{p}eval_model.onnx")
    module = api.Module(
        os.path.join(d, f"{p}training_model.onnx"),
        state,
        eval_path if os.path.exists(eval_path) else None,
    )
    optim_path = os.path.join(d, f"{p}optimizer_model.onnx")
    optimizer = None
    if os.path.exists(optim_path):
        optimizer = api.Optimizer(optim_path, module)
        optimizer.set_learning_rate(args.lr)

    data = np.load(args.data)
    module.train()
    input_names = list(module.input_names())
    output_names = list(module.output_names())
    missing = [n for n in input_names if n not in data.files]
    if missing:
        raise SystemExit(
            f"ref_tool train: {args.data} lacks arrays for inputs {missing} (has {data.files})"
        )
    eval_input_names: list[str] = []
    eval_output_names: list[str] = []
    if args.eval:
        module.eval()
        eval_input_names = list(module.input_names())
        eval_output_names = list(module.output_names())
        module.train()
    losses, eval_losses, lrs = [], [], []
    grads: dict[str, np.ndarray] = {}
    for i in range(args.steps):
        module.train()
        out = module(*[data[n][i] for n in input_names])
        losses.append(_loss_value(out))
        if args.grads_out:
            for name, prm in state.parameters:
                if prm.requires_grad:
                    grads[f"{i}/{name}"] = np.array(prm.grad, copy=True)
        if optimizer is not None:
            lrs.append(float(optimizer.get_learning_rate()))
            optimizer.step()
        module.lazy_reset_grad()
        if args.eval:
            module.eval()
            eout = module(*[data[n][i] for n in eval_input_names])
            eval_losses.append(_loss_value(eout))
    result = {
        "losses": losses,
        "eval_losses": eval_losses,
        "learning_rates": lrs,
        "input_names": input_names,
        "output_names": output_names,
        "eval_input_names": eval_input_names,
        "eval_output_names": eval_output_names,
    }
    if args.grads_out:
        np.savez(args.grads_out, **grads)
        result["grads_out"] = args.grads_out
    if args.params_out:
        np.savez(args.params_out, **{name: np.array(prm.data) for name, prm in state.parameters})
        result["params_out"] = args.params_out
    if args.save_checkpoint:
        api.CheckpointState.save_checkpoint(
            state, args.save_checkpoint, include_optimizer_state=True
        )
        result["checkpoint_out"] = args.save_checkpoint
    return result


def _type_str(tp: onnx.TypeProto) -> tuple[str, list | None]:
    kind = tp.WhichOneof("value")
    if kind == "tensor_type":
        tt = tp.tensor_type
        shape = None
        if tt.HasField("shape"):
            shape = [
                d.dim_value
                if d.HasField("dim_value")
                else (d.dim_param if d.HasField("dim_param") else None)
                for d in tt.shape.dim
            ]
        return onnx.TensorProto.DataType.Name(tt.elem_type), shape
    if kind == "sequence_type":
        inner, shape = _type_str(tp.sequence_type.elem_type)
        return f"seq({inner})", shape
    return str(kind), None


def _value_infos(vis) -> list[dict]:
    out = []
    for vi in vis:
        t, shape = _type_str(vi.type)
        out.append({"name": vi.name, "type": t, "shape": shape})
    return out


def _attr_value(a: onnx.AttributeProto):
    v = onnx.helper.get_attribute_value(a)
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    if isinstance(v, onnx.TensorProto):
        arr = onnx.numpy_helper.to_array(v)
        return {
            "tensor": onnx.TensorProto.DataType.Name(v.data_type),
            "dims": list(v.dims),
            "values": arr.tolist(),
        }
    if isinstance(v, onnx.GraphProto):
        return {"graph": v.name, "nodes": len(v.node)}
    if isinstance(v, list):
        return [x.decode("utf-8", "replace") if isinstance(x, bytes) else x for x in v]
    return v


def _initializer(t: onnx.TensorProto) -> dict:
    entry = {
        "name": t.name,
        "type": onnx.TensorProto.DataType.Name(t.data_type),
        "dims": list(t.dims),
    }
    if int(np.prod(t.dims)) <= 16:  # constants of the loss and gradient graphs
        entry["values"] = onnx.numpy_helper.to_array(t).reshape(-1).tolist()
    return entry


def describe_model(path: str) -> dict:
    m = onnx.load(path)
    g = m.graph
    return {
        "opset_import": {o.domain or "ai.onnx": o.version for o in m.opset_import},
        "inputs": _value_infos(g.input),
        "outputs": _value_infos(g.output),
        "initializers": [_initializer(t) for t in g.initializer],
        "nodes": [
            {
                "op_type": n.op_type,
                "domain": n.domain or "ai.onnx",
                "name": n.name,
                "inputs": list(n.input),
                "outputs": list(n.output),
                "attributes": {a.name: _attr_value(a) for a in n.attribute},
            }
            for n in g.node
        ],
    }


def describe_checkpoint(path: str) -> dict:
    from onnxruntime.training import api

    state = api.CheckpointState.load_checkpoint(path)
    params = []
    # Through the binding's names: a nominal state refuses get_parameter (and so iteration).
    for name in state._state.parameter_names():
        entry: dict = {"name": name}
        try:
            prm = state.parameters[name]
            data = np.asarray(prm.data)
            entry["requires_grad"] = bool(prm.requires_grad)
            entry["dtype"] = str(data.dtype)
            entry["shape"] = list(data.shape)
        except RuntimeError as e:  # a nominal state: report the reference's refusal
            entry["error"] = str(e).strip().split("> ")[-1]
        params.append(entry)
    return {
        "parameters": params,
        "properties": dict(state.properties),
        "file_size": os.path.getsize(path),
    }


def cmd_describe(args: argparse.Namespace) -> dict:
    result: dict = {}
    for f in MODEL_FILES:
        path = os.path.join(args.artifact_dir, args.prefix + f)
        if os.path.exists(path):
            result[f] = describe_model(path)
    for kind in ("checkpoint", "nominal_checkpoint"):
        ckpt = os.path.join(args.artifact_dir, args.prefix + kind)
        if os.path.exists(ckpt):
            result[kind] = describe_checkpoint(ckpt)
    if not result:
        raise SystemExit(f"ref_tool describe: no artifacts under {args.artifact_dir}")
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)

    g = sub.add_parser("generate", help="reference generate_artifacts")
    g.add_argument("model")
    g.add_argument("outdir")
    g.add_argument("--requires-grad", default="")
    g.add_argument("--frozen", default="")
    g.add_argument(
        "--loss",
        choices=["MSELoss", "CrossEntropyLoss", "BCEWithLogitsLoss", "L1Loss", "none"],
        default="none",
    )
    g.add_argument("--optimizer", choices=["AdamW", "SGD", "none"], default="AdamW")
    g.add_argument(
        "--clip-grad-norm", type=float, default=None, help="add InplaceClipGradNorm(max_norm)"
    )
    g.add_argument("--nominal", action="store_true", help="also write nominal_checkpoint")
    g.add_argument("--additional-output-names", default="")
    g.add_argument("--loss-input-names", default="")
    g.add_argument("--prefix", default="")
    g.add_argument("--out")

    t = sub.add_parser("train", help="train with the reference Module/Optimizer")
    t.add_argument("artifact_dir")
    t.add_argument("data")
    t.add_argument("--steps", type=int, required=True)
    t.add_argument("--lr", type=float, required=True)
    t.add_argument("--eval", action="store_true")
    t.add_argument("--prefix", default="")
    t.add_argument("--params-out", help="npz of the parameters after training")
    t.add_argument(
        "--grads-out",
        help="npz of each step's gradients ('<step>/<param>'), read before the optimizer step",
    )
    t.add_argument("--save-checkpoint", help="save the state (with optimizer state) after training")
    t.add_argument("--checkpoint", help="load this checkpoint instead of OUTDIR/<prefix>checkpoint")
    t.add_argument("--out")

    d = sub.add_parser("describe", help="JSON description of the artifacts")
    d.add_argument("artifact_dir")
    d.add_argument("--prefix", default="")
    d.add_argument("--out")

    b = sub.add_parser("batch", help="run several subcommands in this one process")
    b.add_argument("commands", help="JSON file: a list of argument lists, e.g. [[\"train\", ...], ...]")
    b.add_argument("--out")

    args = ap.parse_args(argv)
    if args.cmd == "batch":
        with open(args.commands) as f:
            commands = json.load(f)
        results = []
        for command in commands:
            sub_args = ap.parse_args(command)
            if sub_args.cmd == "batch":
                raise SystemExit("ref_tool batch: a batch cannot contain a batch")
            results.append(_COMMANDS[sub_args.cmd](sub_args))
        _emit({"results": results}, args.out)
        return 0
    _emit(_COMMANDS[args.cmd](args), args.out)
    return 0


_COMMANDS = {"generate": cmd_generate, "train": cmd_train, "describe": cmd_describe}


if __name__ == "__main__":
    sys.exit(main())
