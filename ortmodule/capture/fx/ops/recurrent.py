"""torch.nn.LSTM, GRU and RNN: aten.lstm / gru / rnn_tanh / rnn_relu (the padded-tensor
overloads) as the engine's one-layer, one-direction ops (ai.ortmodule LSTMTorch, GRUTorch,
RNNTorch: csrc/ops/rnn_ops.cpp), stacked here for num_layers and bidirectional, with Dropout
between layers in training. PackedSequence inputs (the .data overloads) are refused."""

from __future__ import annotations

from typing import Any

import torch

from ortmodule.capture.common import ExportError
from ortmodule.capture.fx.builder import Lowering
from ortmodule.capture.fx.ops.common import aten
from ortmodule.capture.fx.registry import register

OWN = "ai.ortmodule"


def _gather(lw: Lowering, x: str, k: int) -> str:
    """x[k] along axis 0."""
    return lw.op("Gather", [x, lw.const(k, torch.int64)], axis=0)


def _layers(lw: Lowering, node: Any, cell: str, x: Any, hx: list[Any], params: list[Any],
            has_biases: bool, num_layers: int, dropout: float, train: bool,
            bidirectional: bool, batch_first: bool) -> list[str]:
    """The stacked layers: [output, h_n] (and c_n for the LSTM)."""
    lstm = cell == "lstm"
    dirs = 2 if bidirectional else 1
    per = len(params) // (num_layers * dirs) if num_layers * dirs else 0
    if per * num_layers * dirs != len(params) or per != (4 if has_biases else 2):
        if lstm and per == (5 if has_biases else 3):
            raise ExportError(
                "torch.nn.LSTM with proj_size > 0 has no engine op (the projected hidden "
                "state); construct the LSTM without proj_size, or add a torch.nn.Linear on "
                "its output")
        raise ExportError(f"aten.{cell}: {len(params)} weights for {num_layers} layer(s) and "
                          f"{dirs} direction(s) with has_biases={has_biases}; expected "
                          f"{(4 if has_biases else 2) * num_layers * dirs}")
    dtype = lw.dtype_of(x)
    if dtype not in (torch.float32, torch.float64):
        raise ExportError(f"torch.nn.{cell.upper()} in {dtype}: the engine's recurrent layers "
                          "compute in float32 or float64")
    unbatched = lw.rank(x) == 2
    seq = lw.tensor(x)
    if unbatched:
        seq = lw.op("Unsqueeze", [seq, lw.ints([1])])
    elif batch_first:
        seq = lw.op("Transpose", [seq], perm=[1, 0, 2])
    states = [lw.tensor(h) for h in hx]
    if unbatched:
        states = [lw.op("Unsqueeze", [s, lw.ints([1])]) for s in states]
    op_type = {"lstm": "LSTMTorch", "gru": "GRUTorch"}.get(cell, "RNNTorch")
    attrs: dict[str, Any] = {}
    if cell in ("rnn_tanh", "rnn_relu"):
        attrs["nonlinearity"] = cell.removeprefix("rnn_")
    outputs = 3 if lstm else 2
    h_n: list[str] = []
    c_n: list[str] = []
    for layer in range(num_layers):
        ys = []
        for d in range(dirs):
            k = layer * dirs + d
            w = [lw.tensor(p) for p in params[k * per:(k + 1) * per]]
            inputs: list[str | None] = [seq, w[0], w[1]]
            inputs += [w[2], w[3]] if has_biases else [None, None]
            inputs.append(_gather(lw, states[0], k))
            if lstm:
                inputs.append(_gather(lw, states[1], k))
            out = lw.op(op_type, inputs, outputs=outputs, domain=OWN, reverse=d, **attrs)
            ys.append(out[0])
            h_n.append(lw.op("Unsqueeze", [out[1], lw.ints([0])]))
            if lstm:
                c_n.append(lw.op("Unsqueeze", [out[2], lw.ints([0])]))
        seq = ys[0] if dirs == 1 else lw.op("Concat", ys, axis=2)
        if train and dropout > 0 and layer < num_layers - 1:
            if dropout >= 1:  # torch: input * 0
                seq = lw.op("Mul", [seq, lw.const(0.0, dtype)])
            else:
                seq = lw.op("Dropout", [seq, lw.const(float(dropout), torch.float32),
                                        lw.const(True, torch.bool)])
    if unbatched:
        seq = lw.op("Squeeze", [seq, lw.ints([1])])
    elif batch_first:
        seq = lw.op("Transpose", [seq], perm=[1, 0, 2])

    def stack(parts: list[str]) -> str:
        out = parts[0] if len(parts) == 1 else lw.op("Concat", parts, axis=0)
        return lw.op("Squeeze", [out, lw.ints([1])]) if unbatched else out

    result = [seq, stack(h_n)]
    if lstm:
        result.append(stack(c_n))
    return result


@register(aten.lstm.input)
def _lstm(lw: Lowering, node: Any, x: Any, hx: list[Any], params: list[Any], has_biases: bool,
          num_layers: int, dropout: float, train: bool, bidirectional: bool,
          batch_first: bool) -> Any:
    return _layers(lw, node, "lstm", x, list(hx), list(params), has_biases, num_layers,
                   dropout, train, bidirectional, batch_first)


@register(aten.gru.input, aten.rnn_tanh.input, aten.rnn_relu.input)
def _gru_rnn(lw: Lowering, node: Any, x: Any, hx: Any, params: list[Any], has_biases: bool,
             num_layers: int, dropout: float, train: bool, bidirectional: bool,
             batch_first: bool) -> Any:
    cell = str(node.target).split(".")[1]  # aten.gru.input -> gru
    return _layers(lw, node, cell, x, [hx], list(params), has_biases, num_layers, dropout,
                   train, bidirectional, batch_first)


@register(aten.lstm.data, aten.gru.data, aten.rnn_tanh.data, aten.rnn_relu.data)
def _packed(lw: Lowering, node: Any, *args: Any) -> Any:
    cell = str(node.target).split(".")[1]
    raise ExportError(
        f"aten.{cell}.data: a PackedSequence input to a recurrent layer has no engine op; "
        "pass the padded batch instead (torch.nn.utils.rnn.pad_packed_sequence, or the "
        "tensor before pack_padded_sequence) and mask the padded steps in the loss")
