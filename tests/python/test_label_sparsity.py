"""Label sparsity (DebugOptions.label_sparsity, csrc/passes/label_sparsity.h): a loss whose
labels ignore most rows computes, and differentiates, the kept rows alone. Each case trains
like eager PyTorch (loss, returned logits and every parameter gradient against eager's, with
explicit tolerances), over steps whose number of kept rows changes, down to none; and the
graph is checked for what the pass did (a NonZero gathering the rows; the head's products on
the kept rows; where the model also returns its logits, the full head's backward skipped as
long as nobody differentiates them)."""

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

from ortmodule import DebugOptions, LogLevel, ORTModule
from tests.python.model_zoo import DEVICES

RTOL, ATOL = 1e-4, 1e-5
VOCAB, BATCH, SEQ = 96, 3, 12


class LossOnly(nn.Module):
    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=input_ids, labels=labels).loss


def bert_mlm() -> nn.Module:
    return tf.BertForMaskedLM(tf.BertConfig(
        vocab_size=VOCAB, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=SEQ, hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0, attn_implementation="eager"))


def gpt2_lm() -> nn.Module:
    return tf.GPT2LMHeadModel(tf.GPT2Config(
        vocab_size=VOCAB, n_embd=32, n_layer=1, n_head=2, n_positions=SEQ, use_cache=False,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, attn_implementation="eager"))


MODELS = {"bert-mlm": bert_mlm, "gpt2": gpt2_lm}


def label_batches(gen: torch.Generator) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Batches whose labels keep about 20% of the rows, then fewer, then one, then none."""
    out = []
    for keep in (0.2, 0.1, 0.0, -1.0):
        ids = torch.randint(0, VOCAB, (BATCH, SEQ), generator=gen)
        kept = torch.rand(BATCH, SEQ, generator=gen) < keep
        if keep == 0.0:
            kept[1, 5] = True  # one row (GPT-2's shifted labels read position 5 as row 4's)
        out.append((ids, torch.where(kept, ids, torch.full_like(ids, -100))))
    return out


def saved_graph(folder: str, prefix: str) -> onnx.GraphProto:
    return onnx.load(os.path.join(folder, f"{prefix}_training_training.onnx")).graph


def assert_grads_match(ort: nn.Module, eager: nn.Module, what: str) -> None:
    for (name, got), (_, want) in zip(ort.named_parameters(), eager.named_parameters()):
        if want.grad is None:
            assert got.grad is None, f"{what}: '{name}' got a gradient eager has not"
            continue
        torch.testing.assert_close(got.grad, want.grad, rtol=RTOL, atol=ATOL,
                                   msg=lambda m, n=name: f"{what}, gradient of '{n}': {m}")


def zero_steps(ort: ORTModule) -> int:
    """Backward steps that handed on zeros instead of computing (runtime/zero_gradients.h)."""
    return sum(entry.program.shape_cache_stats()["zero_steps"]
               for entries in ort._cache.values() for entry in entries)


def run_steps(model: nn.Module, loss_only: bool, device: str, tmp_path, caplog,
              mode: str = "always", extra_loss: bool = False) -> tuple[list[str], int]:
    """Trains ORTModule(model) and eager on label_batches(); returns the pass's log lines and
    the number of backward steps that handed on zeros."""
    model = (LossOnly(model) if loss_only else model).to(device)
    eager = copy.deepcopy(model)
    ort = ORTModule(model, debug_options=DebugOptions(
        label_sparsity=mode, save_onnx=True, onnx_prefix="ls", save_path=str(tmp_path),
        log_level=LogLevel.INFO))
    with caplog.at_level(logging.INFO, logger="ortmodule"):
        for step, (ids, labels) in enumerate(label_batches(torch.Generator().manual_seed(1))):
            ids, labels = ids.to(device), labels.to(device)
            what = f"step {step}"
            if loss_only:
                got, want = ort(ids, labels), eager(input_ids=ids, labels=labels)
            else:
                out = ort(input_ids=ids, labels=labels)
                ref = eager(input_ids=ids, labels=labels)
                torch.testing.assert_close(out.logits, ref.logits, rtol=RTOL, atol=ATOL)
                got, want = out.loss, ref.loss
                if extra_loss:  # the logits carry a gradient of their own too
                    got = got.nan_to_num() + out.logits.square().mean()
                    want = want.nan_to_num() + ref.logits.square().mean()
            if step == 3 and not extra_loss:
                assert torch.isnan(got) and torch.isnan(want), what  # no row kept: 0 / 0
            else:
                torch.testing.assert_close(got, want, rtol=RTOL, atol=ATOL, msg=what)
            got.backward()
            want.backward()
            assert_grads_match(model, eager, what)
            model.zero_grad(set_to_none=True)
            eager.zero_grad(set_to_none=True)
    notes = [r.getMessage() for r in caplog.records if "label sparsity" in r.getMessage()]
    return notes, zero_steps(ort)


def op_count(graph: onnx.GraphProto, op: str) -> int:
    return sum(n.op_type == op for n in graph.node)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", list(MODELS))
def test_loss_alone_computes_the_head_on_kept_rows(name: str, device: str, tmp_path,
                                                   caplog) -> None:
    torch.manual_seed(0)
    notes, zeros = run_steps(MODELS[name](), True, device, tmp_path, caplog)
    assert len(notes) == 1 and "gathered before the" in notes[0], notes
    assert "read elsewhere" not in notes[0] and zeros == 0
    graph = saved_graph(str(tmp_path), "ls")
    assert op_count(graph, "NonZero") == 1
    # The rows are gathered before the head: no product reads the encoder's rows after the
    # gather except through it, and the head's gradient scatters back only through GatherGrad.
    gathers = [n for n in graph.node if n.op_type == "Gather" and "kept_rows" in n.name]
    assert len(gathers) == 2, [n.name for n in gathers]  # the labels and the source rows
    scatters = [n for n in graph.node
                if n.op_type == "GatherGrad" and any("kept_rows/index" in i for i in n.input)]
    assert len(scatters) == 1


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", list(MODELS))
def test_returned_logits_keep_every_row(name: str, device: str, tmp_path, caplog) -> None:
    torch.manual_seed(0)
    notes, zeros = run_steps(MODELS[name](), False, device, tmp_path, caplog)
    assert len(notes) == 1 and "read elsewhere too" in notes[0], notes
    assert op_count(saved_graph(str(tmp_path), "ls"), "NonZero") == 1
    # The full head's backward reads the returned logits' gradient alone, which autograd does
    # not give: its products at least are skipped (two steps per backward, 4 backwards).
    assert zeros >= 4 * 2, zeros


def test_gradient_through_the_returned_logits_too(tmp_path, caplog) -> None:
    torch.manual_seed(0)
    _, zeros = run_steps(bert_mlm(), False, "cpu", tmp_path, caplog, extra_loss=True)
    assert zeros == 0


@pytest.mark.parametrize("mode", ["auto", "never"])
def test_auto_looks_at_the_first_labels(mode: str, tmp_path, caplog) -> None:
    """auto gathers the sparse labels of label_batches() but not dense ones; never does not."""
    torch.manual_seed(0)
    notes, _ = run_steps(bert_mlm(), True, "cpu", tmp_path, caplog, mode=mode)
    graph = saved_graph(str(tmp_path), "ls")
    if mode == "never":
        assert not notes and op_count(graph, "NonZero") == 0
        return
    assert len(notes) == 1 and "of the first call's labels" in notes[0], notes
    assert op_count(graph, "NonZero") == 1
    # A causal LM's labels (every token but the shifted-out last one): left as is.
    caplog.clear()
    torch.manual_seed(0)
    model = LossOnly(gpt2_lm())
    ort = ORTModule(model, debug_options=DebugOptions(log_level=LogLevel.INFO))
    ids = torch.randint(0, VOCAB, (BATCH, SEQ))
    with caplog.at_level(logging.INFO, logger="ortmodule"):
        ort(ids, ids.clone()).backward()
    dense = [r.getMessage() for r in caplog.records if "label sparsity" in r.getMessage()]
    assert len(dense) == 1 and "left as is" in dense[0], dense


class Head(nn.Module):
    """A classifier head over token rows (Linear, GELU, LayerNorm, Linear), with a loss of
    the caller's choice: the pattern beyond transformers' models."""

    def __init__(self, loss: str, ignore_index: int) -> None:
        super().__init__()
        self.body = nn.Linear(8, 16)
        self.head = nn.Sequential(nn.Linear(16, 16), nn.GELU(), nn.LayerNorm(16), nn.Linear(16, 10))
        self.loss, self.ignore_index = loss, ignore_index
        self.weight = torch.linspace(0.5, 1.5, 10)

    def forward(self, x: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        scores = self.head(torch.tanh(self.body(x))).reshape(-1, 10)
        labels = labels.reshape(-1)
        if self.loss == "nll":
            return F.nll_loss(F.log_softmax(scores, dim=-1), labels, ignore_index=self.ignore_index)
        if self.loss == "weighted":
            return F.cross_entropy(scores, labels, weight=self.weight, ignore_index=self.ignore_index)
        return F.cross_entropy(scores, labels, ignore_index=self.ignore_index, reduction="sum")


@pytest.mark.parametrize("loss", ["nll", "weighted", "sum"])
def test_losses_and_ignore_index(loss: str, tmp_path, caplog) -> None:
    torch.manual_seed(0)
    ignore = 0 if loss == "sum" else -100
    model = Head(loss, ignore)
    eager = copy.deepcopy(model)
    ort = ORTModule(model, debug_options=DebugOptions(
        label_sparsity="always", log_level=LogLevel.INFO, save_onnx=True, onnx_prefix="ls",
        save_path=str(tmp_path)))
    gen = torch.Generator().manual_seed(2)
    with caplog.at_level(logging.INFO, logger="ortmodule"):
        for step in range(3):
            x = torch.randn(4, 6, 8, generator=gen)
            labels = torch.randint(1, 10, (4, 6), generator=gen)
            labels[torch.rand(4, 6, generator=gen) < 0.7] = ignore
            got, want = ort(x, labels), eager(x, labels)
            torch.testing.assert_close(got, want, rtol=RTOL, atol=ATOL, msg=f"step {step}")
            got.backward()
            want.backward()
            assert_grads_match(model, eager, f"step {step}")
            model.zero_grad(set_to_none=True)
            eager.zero_grad(set_to_none=True)
    notes = [r.getMessage() for r in caplog.records if "label sparsity" in r.getMessage()]
    assert len(notes) == 1 and "gathered before the" in notes[0], notes
    # Every node of the model maps rows to rows, so the kept rows are gathered from the input.
    graph = saved_graph(str(tmp_path), "ls")
    gather = next(n for n in graph.node if n.op_type == "Gather" and n.name.endswith("/gather"))
    producers = {o: n for n in graph.node for o in n.output}
    flatten = producers[gather.input[0]]
    assert flatten.op_type == "Flatten"
    assert flatten.input[0] in {i.name for i in graph.input}


def test_option_is_checked() -> None:
    with pytest.raises(ValueError, match="label_sparsity 'sometimes' is not one of"):
        DebugOptions(label_sparsity="sometimes")
    os.environ["ORTMODULE_LABEL_SPARSITY"] = "never"
    try:
        assert DebugOptions.from_env().label_sparsity == "never"
    finally:
        del os.environ["ORTMODULE_LABEL_SPARSITY"]


def test_inference_gathers_from_the_scores(caplog) -> None:
    """Without gradients, a head whose logits are returned is not copied (that would only add
    forward work): the loss alone runs on the kept rows."""
    torch.manual_seed(0)
    model = bert_mlm().eval()
    eager = copy.deepcopy(model)
    ort = ORTModule(model, debug_options=DebugOptions(label_sparsity="always",
                                                      log_level=LogLevel.INFO))
    ids, labels = label_batches(torch.Generator().manual_seed(1))[0]
    with torch.no_grad(), caplog.at_level(logging.INFO, logger="ortmodule"):
        out, ref = ort(input_ids=ids, labels=labels), eager(input_ids=ids, labels=labels)
    torch.testing.assert_close(out.loss, ref.loss, rtol=RTOL, atol=ATOL)
    torch.testing.assert_close(out.logits, ref.logits, rtol=RTOL, atol=ATOL)
    notes = [r.getMessage() for r in caplog.records if "label sparsity" in r.getMessage()]
    assert len(notes) == 1 and "gathered from its scores" in notes[0], notes
