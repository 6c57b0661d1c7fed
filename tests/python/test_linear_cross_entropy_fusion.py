"""Linear cross-entropy fusion (csrc/passes/linear_cross_entropy_fusion.h): a head's product
(+ bias) feeding cross_entropy becomes one FusedLinearCrossEntropy computed in row blocks.
Each case trains like eager PyTorch (loss and every gradient against eager's
F.cross_entropy(h @ W.T + b, y), explicit tolerances); the saved training graph shows whether
the pass fired; float64 gradients pass torch.autograd.gradcheck (finite differences); a tiny
GPT-2 trains 3 AdamW steps like eager; and the engine allocator's peak of a vocabulary-8192
head is lower fused than unfused."""

from __future__ import annotations

import copy
import logging
import os

import onnx
import pytest
import torch
import transformers as tf
from torch import nn
from torch.nn import functional as F

from ortmodule import _C, DebugOptions, LogLevel, ORTModule
from tests.python.model_zoo import DEVICES

RTOL, ATOL = 1e-4, 1e-5
NOTE = "linear cross-entropy fusion"

# The fusion wherever it matches ("auto" fuses only heads whose logits take 1 GiB or more).
ALWAYS = DebugOptions(linear_cross_entropy="always")


class Head(nn.Module):
    """A body, then logits = h @ W^T (+ b) over [B, T, K] rows and cross_entropy; `tied` reads
    the weight of an embedding as GPT-2's head does; `kv` stores it [K, V] (h @ W)."""

    def __init__(
        self,
        vocab: int = 11,
        hidden: int = 8,
        bias: bool = True,
        tied: bool = False,
        kv: bool = False,
        reduction: str = "mean",
        ignore_index: int = -100,
        class_weight: bool = False,
        return_logits: bool = False,
    ) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, hidden)
        self.body = nn.Linear(hidden, hidden)
        self.weight = nn.Parameter(torch.randn(hidden, vocab) * 0.3) if kv else None
        self.head = None if tied or kv else nn.Linear(hidden, vocab, bias=bias)
        self.bias = nn.Parameter(torch.randn(vocab) * 0.1) if (tied or kv) and bias else None
        self.vocab, self.reduction, self.ignore_index = vocab, reduction, ignore_index
        self.class_weight = torch.linspace(0.5, 1.5, vocab) if class_weight else None
        self.return_logits = return_logits

    def forward(self, ids: torch.Tensor, labels: torch.Tensor):  # type: ignore[no-untyped-def]
        h = torch.tanh(self.body(self.embed(ids)))
        if self.head is not None:
            logits = self.head(h)
        elif self.weight is not None:
            logits = h @ self.weight if self.bias is None else h @ self.weight + self.bias
        else:
            logits = F.linear(h, self.embed.weight, self.bias)
        loss = F.cross_entropy(
            logits.reshape(-1, self.vocab),
            labels.reshape(-1),
            weight=self.class_weight,
            ignore_index=self.ignore_index,
            reduction=self.reduction,
        )
        return (loss, logits) if self.return_logits else loss


def training_graph(folder: str, prefix: str) -> onnx.GraphProto:
    return onnx.load(os.path.join(folder, f"{prefix}_training_training.onnx")).graph


def op_count(graph: onnx.GraphProto, op: str) -> int:
    return sum(n.op_type == op for n in graph.node)


def batches(vocab: int, steps: int, ignore: int, gen: torch.Generator, shape=(3, 5)):
    out = []
    for _ in range(steps):
        ids = torch.randint(0, vocab, shape, generator=gen)
        labels = torch.randint(0, vocab, shape, generator=gen)
        labels[torch.rand(shape, generator=gen) < 0.3] = ignore
        out.append((ids, labels))
    return out


def train_like_eager(
    model: nn.Module, device: str, tmp_path, caplog, steps: int = 2, label_sparsity: str = "auto"
) -> tuple[list[str], onnx.GraphProto]:
    model = model.to(device)
    eager = copy.deepcopy(model)
    ort = ORTModule(
        model,
        debug_options=DebugOptions(
            linear_cross_entropy="always",
            save_onnx=True,
            onnx_prefix="lce",
            save_path=str(tmp_path),
            log_level=LogLevel.INFO,
            label_sparsity=label_sparsity,
        ),
    )
    gen = torch.Generator().manual_seed(3)
    with caplog.at_level(logging.INFO, logger="ortmodule"):
        for step, (ids, labels) in enumerate(batches(model.vocab, steps, model.ignore_index, gen)):
            ids, labels = ids.to(device), labels.to(device)
            got, want = ort(ids, labels), eager(ids, labels)
            if isinstance(got, tuple):
                torch.testing.assert_close(got[1], want[1], rtol=RTOL, atol=ATOL)
                got, want = got[0], want[0]
            torch.testing.assert_close(got, want, rtol=RTOL, atol=ATOL, msg=f"step {step}")
            (got.sum() if got.dim() else got).backward()
            (want.sum() if want.dim() else want).backward()
            for (name, p), (_, q) in zip(model.named_parameters(), eager.named_parameters()):
                torch.testing.assert_close(
                    p.grad,
                    q.grad,
                    rtol=RTOL,
                    atol=ATOL,
                    msg=lambda m, n=name, s=step: f"step {s}, '{n}': {m}",
                )
            model.zero_grad(set_to_none=True)
            eager.zero_grad(set_to_none=True)
    notes = [r.getMessage() for r in caplog.records if NOTE in r.getMessage()]
    return notes, training_graph(str(tmp_path), "lce")


CASES = {
    "linear-bias-mean": {"bias": True},
    "linear-no-bias-sum": {"bias": False, "reduction": "sum"},
    "tied-embedding": {"tied": True, "bias": False},
    "tied-embedding-bias-ignore-0": {"tied": True, "bias": True, "ignore_index": 0},
    "weight-kv-bias": {"kv": True, "bias": True},
    "weight-kv-none": {"kv": True, "bias": False, "reduction": "none"},
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", list(CASES))
def test_fused_head_trains_like_eager(case: str, device: str, tmp_path, caplog) -> None:
    torch.manual_seed(0)
    notes, graph = train_like_eager(Head(**CASES[case]), device, tmp_path, caplog)
    assert len(notes) == 1, notes
    assert op_count(graph, "FusedLinearCrossEntropy") == 1
    assert op_count(graph, "FusedLinearCrossEntropyGrad") == 1
    assert op_count(graph, "SoftmaxCrossEntropyLoss") == 0
    # No [rows, vocab] product is left: the body's and its gradients' products only.
    fused = next(n for n in graph.node if n.op_type == "FusedLinearCrossEntropy")
    assert len(fused.input) == (4 if CASES[case].get("bias", True) else 3)


@pytest.mark.parametrize("why", ["return_logits", "class_weight"])
def test_not_fused_where_it_cannot_be(why: str, tmp_path, caplog) -> None:
    """Logits read elsewhere (the model returns them) and class weights keep the unfused
    nodes, still training like eager. (With label sparsity, a loss next to returned logits
    reads its own copy of the head, which fuses: test_label_sparsity_copy_fuses.)"""
    torch.manual_seed(0)
    notes, graph = train_like_eager(
        Head(**{why: True}), "cpu", tmp_path, caplog, label_sparsity="never"
    )
    assert not notes
    assert op_count(graph, "FusedLinearCrossEntropy") == 0
    assert op_count(graph, "SoftmaxCrossEntropyLoss") == 1


def test_label_sparsity_copy_fuses(tmp_path, caplog) -> None:
    """The model returns its logits; label sparsity copies the head for the kept rows, and
    that copy, read by the loss alone, fuses; the returned logits keep the full head."""
    torch.manual_seed(0)
    notes, graph = train_like_eager(
        Head(return_logits=True), "cpu", tmp_path, caplog, label_sparsity="always"
    )
    assert len(notes) == 1, notes
    assert op_count(graph, "FusedLinearCrossEntropy") == 1
    assert op_count(graph, "NonZero") == 1


def test_every_row_ignored_is_nan_with_zero_gradients() -> None:
    torch.manual_seed(0)
    model = Head()
    eager = copy.deepcopy(model)
    ort = ORTModule(model, debug_options=ALWAYS)
    ids = torch.randint(0, 11, (2, 4))
    labels = torch.full((2, 4), -100)
    got, want = ort(ids, labels), eager(ids, labels)
    assert torch.isnan(got) and torch.isnan(want)
    got.backward()
    want.backward()
    for (name, p), (_, q) in zip(model.named_parameters(), eager.named_parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=0, atol=0, msg=name)


def test_bad_label_names_it() -> None:
    ort = ORTModule(Head(), debug_options=ALWAYS)
    labels = torch.zeros(3, 5, dtype=torch.int64)
    labels[1, 2] = 11
    with pytest.raises(
        ValueError,
        match=r"FusedLinearCrossEntropy: label 11 at position \(n=7, "
        r"d=0\) is outside the class range \[0, 11\)",
    ):
        ort(torch.zeros(3, 5, dtype=torch.int64), labels)


class HiddenHead(nn.Module):
    """cross_entropy(h @ W^T + b, y) of an input h, in float64: gradcheck's function."""

    def __init__(self, vocab: int, hidden: int) -> None:
        super().__init__()
        self.head = nn.Linear(hidden, vocab, dtype=torch.float64)

    def forward(self, h: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(self.head(h).reshape(-1, self.head.out_features), labels.reshape(-1))


def test_float64_gradients_match_finite_differences(caplog) -> None:
    torch.manual_seed(0)
    model = HiddenHead(7, 5)
    ort = ORTModule(model, debug_options=DebugOptions(log_level=LogLevel.INFO,
                                                      linear_cross_entropy="always"))
    h = torch.randn(2, 3, 5, dtype=torch.float64, requires_grad=True)
    labels = torch.randint(0, 7, (2, 3))
    labels[0, 1] = -100
    weight, bias = model.head.weight, model.head.bias
    with caplog.at_level(logging.INFO, logger="ortmodule"):
        assert torch.autograd.gradcheck(
            lambda x, w, b: ort(x, labels), (h, weight, bias), eps=1e-6, atol=1e-7, rtol=1e-6
        )
    assert any(NOTE in r.getMessage() for r in caplog.records)


class LossOnly(nn.Module):
    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=input_ids, labels=labels).loss


@pytest.mark.parametrize("label_sparsity", ["never", "always"])
def test_tiny_gpt2_trains_like_eager_with_adamw(label_sparsity: str, tmp_path, caplog) -> None:
    """The tied head over every row (its Transpose folded into the product), and over the
    rows label sparsity gathers."""
    vocab, seq = 128, 16
    torch.manual_seed(0)
    model = LossOnly(
        tf.GPT2LMHeadModel(
            tf.GPT2Config(
                vocab_size=vocab,
                n_embd=32,
                n_layer=2,
                n_head=2,
                n_positions=seq,
                use_cache=False,
                resid_pdrop=0.0,
                embd_pdrop=0.0,
                attn_pdrop=0.0,
                attn_implementation="eager",
            )
        )
    )
    eager = copy.deepcopy(model)
    ort = ORTModule(
        model,
        debug_options=DebugOptions(
            linear_cross_entropy="always",
            save_onnx=True,
            onnx_prefix="gpt2",
            save_path=str(tmp_path),
            log_level=LogLevel.INFO,
            label_sparsity=label_sparsity,
        ),
    )
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    opt_eager = torch.optim.AdamW(eager.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(5)
    with caplog.at_level(logging.INFO, logger="ortmodule"):
        for step in range(3):
            ids = torch.randint(0, vocab, (2, seq), generator=gen)
            labels = ids.clone()
            labels[:, :3] = -100  # a prompt the loss ignores
            got, want = ort(ids, labels), eager(ids, labels)
            torch.testing.assert_close(got, want, rtol=RTOL, atol=ATOL, msg=f"step {step}")
            got.backward()
            want.backward()
            opt.step()
            opt_eager.step()
            opt.zero_grad()
            opt_eager.zero_grad()
    for (name, p), (_, q) in zip(model.named_parameters(), eager.named_parameters()):
        torch.testing.assert_close(p, q, rtol=RTOL, atol=ATOL, msg=lambda m, n=name: f"{n}: {m}")
    notes = [r.getMessage() for r in caplog.records if NOTE in r.getMessage()]
    assert len(notes) == 1 and f"over {vocab} classes" in notes[0], notes
    graph = training_graph(str(tmp_path), "gpt2")
    assert op_count(graph, "FusedLinearCrossEntropy") == 1
    assert op_count(graph, "SoftmaxCrossEntropyLoss") == 0
    assert op_count(graph, "NonZero") == (label_sparsity == "always")


def engine_peak_mib(
    optimize: bool, model: nn.Module, ids: torch.Tensor, labels: torch.Tensor
) -> float:
    ort = ORTModule(copy.deepcopy(model), debug_options=DebugOptions(
        graph_optimizations=optimize, linear_cross_entropy="always"))
    ort(ids, labels).backward()  # the first call builds the graph
    _C.allocator_reset_peak()
    ort(ids, labels).backward()
    return _C.allocator_stats()["peak_allocated_bytes"] / 2**20


@pytest.mark.slow
def test_fused_head_peak_memory_is_lower_for_vocab_8192() -> None:
    """[2048 rows, 8192] float32 logits are 64 MiB; unfused, forward keeps them and their
    log-probabilities and backward makes their gradient; fused, one 32 MiB block at a time."""
    torch.manual_seed(0)
    model = Head(vocab=8192, hidden=64, tied=True, bias=False)
    ids = torch.randint(0, 8192, (8, 256))
    labels = torch.randint(0, 8192, (8, 256))
    fused = engine_peak_mib(True, model, ids, labels)
    unfused = engine_peak_mib(False, model, ids, labels)
    logits_mib = 2048 * 8192 * 4 / 2**20
    assert unfused >= 2 * logits_mib, (fused, unfused)
    assert fused <= unfused - logits_mib, (fused, unfused)


@pytest.mark.parametrize(("mode", "fused"), [("auto", False), ("never", False), ("always", True)])
def test_mode_decides_where_the_head_fuses(caplog, mode: str, fused: bool) -> None:
    """"auto" leaves a head whose logits take less than 1 GiB unfused (here 2 KiB)."""
    torch.manual_seed(0)
    model = HiddenHead(7, 5)
    ort = ORTModule(model, debug_options=DebugOptions(log_level=LogLevel.INFO,
                                                      linear_cross_entropy=mode))
    h = torch.randn(2, 3, 5, dtype=torch.float64, requires_grad=True)
    labels = torch.randint(0, 7, (2, 3))
    with caplog.at_level(logging.INFO, logger="ortmodule"):
        got = ort(h, labels)
    torch.testing.assert_close(got, model(h, labels), rtol=1e-12, atol=1e-12)
    assert any(NOTE in r.getMessage() for r in caplog.records) == fused


def test_mode_is_validated(monkeypatch) -> None:
    with pytest.raises(ValueError, match="linear_cross_entropy"):
        DebugOptions(linear_cross_entropy="sometimes")
    monkeypatch.setenv("ORTMODULE_LINEAR_CROSS_ENTROPY", "always")
    assert DebugOptions.from_env().linear_cross_entropy == "always"
