"""Makes the artifacts and batches that examples/cpp/train_mlp.cpp trains from: an MLP on
scikit-learn's digits (8x8 images, 10 classes), exported to ONNX, with cross-entropy loss and
AdamW, by ortmodule.training.artifacts.generate_artifacts.

    python examples/cpp/make_artifacts.py OUT_DIR [--steps N] [--batch B]
"""

from __future__ import annotations

import argparse
import io
import pathlib

import numpy as np
import onnx
import torch
from sklearn.datasets import load_digits

from ortmodule.training import artifacts


def make(out: pathlib.Path, steps: int = 20, batch: int = 32, seed: int = 0) -> None:
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
    buf = io.BytesIO()
    torch.onnx.export(model, (torch.randn(batch, 64),), buf, input_names=["input"],
                      output_names=["logits"], dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}},
                      opset_version=17, dynamo=False)
    onnx_model = onnx.load_from_string(buf.getvalue())
    params = [init.name for init in onnx_model.graph.initializer]
    artifacts.generate_artifacts(onnx_model, requires_grad=params, loss=artifacts.LossType.CrossEntropyLoss,
                                 optimizer=artifacts.OptimType.AdamW, artifact_directory=out,
                                 additional_output_names=["logits"], nominal_checkpoint=True)
    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float32)
    y = digits.target.astype(np.int64)
    order = np.random.default_rng(seed).permutation(len(x))
    with open(out / "batches.bin", "wb") as f:
        np.asarray([steps, batch, 64], dtype="<i8").tofile(f)
        for s in range(steps):
            idx = order[(s * batch + np.arange(batch)) % len(x)]  # wraps around the data
            x[idx].astype("<f4").tofile(f)
            y[idx].astype("<i8").tofile(f)


def read_batches(path: pathlib.Path) -> list[tuple[np.ndarray, np.ndarray]]:
    """The batches of batches.bin, as train_mlp.cpp reads them."""
    raw = path.read_bytes()
    steps, batch, features = np.frombuffer(raw[:24], dtype="<i8")
    out, offset = [], 24
    for _ in range(int(steps)):
        x = np.frombuffer(raw, dtype="<f4", count=int(batch * features), offset=offset)
        offset += x.nbytes
        y = np.frombuffer(raw, dtype="<i8", count=int(batch), offset=offset)
        offset += y.nbytes
        out.append((x.reshape(int(batch), int(features)).copy(), y.copy()))
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=pathlib.Path)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch", type=int, default=32)
    args = parser.parse_args()
    make(args.out, args.steps, args.batch)
    print(f"wrote artifacts and batches to {args.out}")
