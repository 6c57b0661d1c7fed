"""The workloads of benchmarks/run.py: models built from configs (no downloads), dropout off
(but in the full-size GPU models),
each with one fixed batch, and their analytic FLOP counts.

Every model computes its own loss, so one call is the whole forward a runner replaces:

  mlp     Linear 784-512-512-10 with ReLU, cross-entropy, batch 64.
  cnn     DigitsCNN of examples/digits_cnn.py with 32/64 channels (Conv-BN-ReLU-MaxPool x2,
          Linear) on [32, 1, 28, 28], cross-entropy.
  bert    BertForSequenceClassification: 4 layers, hidden 256, 4 heads, intermediate 1024,
          vocab 4096, 2 labels, sequence 128, batch 8 (one padded sequence).
  gpt2    GPT2LMHeadModel: 4 layers, n_embd 256, 4 heads, vocab 4096, sequence 128, batch 8.
  llama   LlamaForCausalLM: 4 layers, hidden 256, intermediate 688, 4 heads, 2 key/value heads,
          vocab 4096, sequence 128, batch 8.
  resnet  ResNetForImageClassification, basic blocks [64, 128, 256, 512] x [2, 2, 2, 2]
          (ResNet-18 layout), 10 labels, on [16, 3, 64, 64].

  bert-mlm
          BertForMaskedLM with bert's encoder and its masked-LM head (vocab 4096); 15% of the
          tokens carry a label, the rest -100; the call returns the loss alone.
  gpt2-sft
          gpt2 whose labels are -100 on the first 3/4 of each sequence (a fine-tuning
          prompt); the call returns the loss alone.

  bert-sdpa, gpt2-sdpa
          bert and gpt2 with transformers' default attention, scaled_dot_product_attention
          (a boolean padding or causal mask; eager PyTorch runs its fused CPU kernel).

The other Hugging Face models use eager attention, so attention is plain tensor code for every
runner.

Full-size models for a GPU (the default of `run.py --device cuda`), transformers' default
configs with their default dropout (0.1) and attention (scaled_dot_product_attention):

  bert-base   BertForSequenceClassification, 12 layers, hidden 768, 12 heads, intermediate
              3072, vocab 30522, 2 labels, sequence 128, batch 32 (one padded sequence).
  gpt2-small  GPT2LMHeadModel, 12 layers, n_embd 768, 12 heads, vocab 50257, sequence 512,
              batch 8.
  gpt2-124m   GPT2LMHeadModel at GPT-2-124M's size (12 layers, n_embd 768, 12 heads, vocab
              50257, tied head), eager attention, no dropout, the loss returned alone (its head
              and loss fuse: csrc/passes/linear_cross_entropy_fusion.h); sequence 1024, batch
              2 unless run.py --gpt2-124m-shape says otherwise. Not in any default list: run
              it by name (--models gpt2-124m), on a CPU too.
  resnet50    ResNetForImageClassification, bottleneck blocks [256, 512, 1024, 2048] x
              [3, 4, 6, 3], 1000 labels, on [64, 3, 224, 224].

The sequence sweep (run.py --sequence-sweep), run only when named:

  gpt2-seqS   gpt2 (4 layers, n_embd 256, 4 heads, vocab 4096, eager attention, no dropout)
              with S positions, on one sequence of S tokens (S: 512, 1024, 2048, 4096,
              8192). Eager attention holds the [heads, S, S] scores of every layer for
              backward; the engine's fused attention keeps O(S) per head.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

# The checkout these scripts belong to is imported, not another editable install of it.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
from digits_cnn import DigitsCNN

VOCAB = 4096
SEQUENCE = 128
TEXT_BATCH = 8


@dataclass(frozen=True)
class Workload:
    name: str
    description: str
    build: Callable[[], nn.Module]  # a fresh model with seeded weights, in training mode
    batch: Callable[[], dict[str, torch.Tensor]]  # keyword arguments of one call


class WithCrossEntropy(nn.Module):
    """Puts the loss inside the module, as Hugging Face models do, so that every runner
    (ORTModule included) sees the same forward."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model
        self.loss = nn.CrossEntropyLoss()

    def forward(self, inputs: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return self.loss(self.model(inputs), labels)


class LossOnly(nn.Module):
    """Returns a Hugging Face model's loss alone, as a training script's module that computes
    its loss does (the model's logits are then no output of the call)."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, **batch: torch.Tensor) -> torch.Tensor:
        return self.model(**batch).loss


def loss_of(output: object) -> torch.Tensor:
    """The loss a model call returned: the tensor itself, or a Hugging Face output's .loss."""
    if isinstance(output, torch.Tensor):
        return output
    loss = getattr(output, "loss", None)
    if not isinstance(loss, torch.Tensor):
        raise TypeError(f"the model returned {type(output).__name__} without a loss tensor")
    return loss


def _generator() -> torch.Generator:
    return torch.Generator().manual_seed(0)


def _mlp() -> nn.Module:
    torch.manual_seed(0)
    return WithCrossEntropy(nn.Sequential(
        nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10)))


def _mlp_batch() -> dict[str, torch.Tensor]:
    gen = _generator()
    return {"inputs": torch.randn(64, 784, generator=gen),
            "labels": torch.randint(0, 10, (64,), generator=gen)}


def _cnn() -> nn.Module:
    torch.manual_seed(0)
    model = DigitsCNN(channels=32, image_size=28)
    for module in model.modules():
        if isinstance(module, nn.Dropout):
            module.p = 0.0
    return WithCrossEntropy(model)


def _cnn_batch() -> dict[str, torch.Tensor]:
    gen = _generator()
    return {"inputs": torch.randn(32, 1, 28, 28, generator=gen),
            "labels": torch.randint(0, 10, (32,), generator=gen)}


def _transformers():
    import transformers

    transformers.logging.set_verbosity_error()
    return transformers


def _bert(attention: str = "eager") -> nn.Module:
    tf = _transformers()
    torch.manual_seed(0)
    return tf.BertForSequenceClassification(tf.BertConfig(
        vocab_size=VOCAB, hidden_size=256, num_hidden_layers=4, num_attention_heads=4,
        intermediate_size=1024, max_position_embeddings=SEQUENCE, num_labels=2,
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
        attn_implementation=attention))


def _bert_batch() -> dict[str, torch.Tensor]:
    gen = _generator()
    mask = torch.ones(TEXT_BATCH, SEQUENCE, dtype=torch.long)
    mask[0, SEQUENCE - 16:] = 0  # padding in the first sequence
    return {"input_ids": torch.randint(0, VOCAB, (TEXT_BATCH, SEQUENCE), generator=gen),
            "attention_mask": mask,
            "labels": torch.randint(0, 2, (TEXT_BATCH,), generator=gen)}


def _gpt2(attention: str = "eager") -> nn.Module:
    tf = _transformers()
    torch.manual_seed(0)
    return tf.GPT2LMHeadModel(tf.GPT2Config(
        vocab_size=VOCAB, n_embd=256, n_layer=4, n_head=4, n_positions=SEQUENCE,
        use_cache=False, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
        attn_implementation=attention))


def _llama() -> nn.Module:
    tf = _transformers()
    torch.manual_seed(0)
    return tf.LlamaForCausalLM(tf.LlamaConfig(
        vocab_size=VOCAB, hidden_size=256, intermediate_size=688, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=SEQUENCE,
        attention_dropout=0.0, use_cache=False, attn_implementation="eager"))


def _lm_batch() -> dict[str, torch.Tensor]:
    ids = torch.randint(0, VOCAB, (TEXT_BATCH, SEQUENCE), generator=_generator())
    return {"input_ids": ids, "labels": ids.clone()}


def _bert_mlm() -> nn.Module:
    tf = _transformers()
    torch.manual_seed(0)
    return LossOnly(tf.BertForMaskedLM(tf.BertConfig(
        vocab_size=VOCAB, hidden_size=256, num_hidden_layers=4, num_attention_heads=4,
        intermediate_size=1024, max_position_embeddings=SEQUENCE,
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, attn_implementation="eager")))


def _mlm_batch() -> dict[str, torch.Tensor]:
    """15% of the tokens carry a label (the masked ones of BERT's pre-training), the rest -100."""
    gen = _generator()
    ids = torch.randint(0, VOCAB, (TEXT_BATCH, SEQUENCE), generator=gen)
    masked = torch.rand(TEXT_BATCH, SEQUENCE, generator=gen) < 0.15
    return {"input_ids": ids, "labels": torch.where(masked, ids, torch.full_like(ids, -100))}


def _gpt2_sft() -> nn.Module:
    return LossOnly(_gpt2())


def _sft_batch() -> dict[str, torch.Tensor]:
    """A fine-tuning batch: the first 3/4 of each sequence is the prompt (labels -100), the
    model learns the last quarter."""
    batch = _lm_batch()
    batch["labels"][:, : SEQUENCE * 3 // 4] = -100
    return batch


def _resnet() -> nn.Module:
    tf = _transformers()
    torch.manual_seed(0)
    return tf.ResNetForImageClassification(tf.ResNetConfig(
        num_channels=3, embedding_size=64, hidden_sizes=[64, 128, 256, 512],
        depths=[2, 2, 2, 2], layer_type="basic", num_labels=10))


def _resnet_batch() -> dict[str, torch.Tensor]:
    gen = _generator()
    return {"pixel_values": torch.randn(16, 3, 64, 64, generator=gen),
            "labels": torch.randint(0, 10, (16,), generator=gen)}


def _bert_base() -> nn.Module:
    tf = _transformers()
    torch.manual_seed(0)
    return tf.BertForSequenceClassification(tf.BertConfig(num_labels=2))


def _bert_base_batch() -> dict[str, torch.Tensor]:
    gen = _generator()
    batch, sequence = 32, 128
    mask = torch.ones(batch, sequence, dtype=torch.long)
    mask[0, sequence - 16:] = 0  # padding in the first sequence
    return {"input_ids": torch.randint(0, 30522, (batch, sequence), generator=gen),
            "attention_mask": mask,
            "labels": torch.randint(0, 2, (batch,), generator=gen)}


def _gpt2_small() -> nn.Module:
    tf = _transformers()
    torch.manual_seed(0)
    return tf.GPT2LMHeadModel(tf.GPT2Config(use_cache=False))


def _gpt2_small_batch() -> dict[str, torch.Tensor]:
    ids = torch.randint(0, 50257, (8, 512), generator=_generator())
    return {"input_ids": ids, "labels": ids.clone()}


# GPT-2-124M's sequence and batch: 1024 x 2 by default, set by run.py --gpt2-124m-shape (a
# loaded CPU may need a smaller one).
GPT2_124M_SHAPE = {"sequence": 1024, "batch": 2}


def set_gpt2_124m_shape(sequence: int, batch: int) -> None:
    if sequence < 2 or sequence > 1024 or batch < 1:
        raise ValueError(f"gpt2-124m shape {sequence} x {batch}: the sequence must be in "
                         f"[2, 1024] (GPT-2's positions) and the batch at least 1")
    GPT2_124M_SHAPE.update(sequence=sequence, batch=batch)


def _gpt2_124m() -> nn.Module:
    tf = _transformers()
    torch.manual_seed(0)
    return LossOnly(tf.GPT2LMHeadModel(tf.GPT2Config(
        n_layer=12, n_embd=768, n_head=12, vocab_size=50257, n_positions=1024, use_cache=False,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, attn_implementation="eager")))


def _gpt2_124m_batch() -> dict[str, torch.Tensor]:
    shape = (GPT2_124M_SHAPE["batch"], GPT2_124M_SHAPE["sequence"])
    ids = torch.randint(0, 50257, shape, generator=_generator())
    return {"input_ids": ids, "labels": ids.clone()}


def _gpt2_long(sequence: int) -> nn.Module:
    tf = _transformers()
    torch.manual_seed(0)
    return tf.GPT2LMHeadModel(tf.GPT2Config(
        vocab_size=VOCAB, n_embd=256, n_layer=4, n_head=4, n_positions=sequence,
        use_cache=False, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
        attn_implementation="eager"))


def _gpt2_long_batch(sequence: int) -> dict[str, torch.Tensor]:
    ids = torch.randint(0, VOCAB, (1, sequence), generator=_generator())
    return {"input_ids": ids, "labels": ids.clone()}


# run.py --sequence-sweep: the gpt2-seqS workloads, in this order.
SWEEP_SEQUENCES = (512, 1024, 2048, 4096, 8192)


def _resnet50() -> nn.Module:
    tf = _transformers()
    torch.manual_seed(0)
    return tf.ResNetForImageClassification(tf.ResNetConfig(num_labels=1000))


def _resnet50_batch() -> dict[str, torch.Tensor]:
    gen = _generator()
    return {"pixel_values": torch.randn(64, 3, 224, 224, generator=gen),
            "labels": torch.randint(0, 1000, (64,), generator=gen)}


class LstmLM(nn.Module):
    """Embedding, a 2-layer LSTM and the vocabulary projection: logits [batch * seq, vocab]."""

    def __init__(self, vocab: int, width: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.lstm = nn.LSTM(width, width, num_layers=2, batch_first=True)
        self.head = nn.Linear(width, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        y, _ = self.lstm(self.embed(tokens))
        return self.head(y).flatten(0, 1)


LSTM_SEQUENCE, LSTM_BATCH, LSTM_VOCAB = 35, 20, 4096


def _lstm_lm() -> nn.Module:
    torch.manual_seed(0)
    return WithCrossEntropy(LstmLM(LSTM_VOCAB, 256))


def _lstm_lm_batch() -> dict[str, torch.Tensor]:
    gen = _generator()
    return {"inputs": torch.randint(0, LSTM_VOCAB, (LSTM_BATCH, LSTM_SEQUENCE), generator=gen),
            "labels": torch.randint(0, LSTM_VOCAB, (LSTM_BATCH * LSTM_SEQUENCE,), generator=gen)}


WORKLOADS = {w.name: w for w in (
    Workload("mlp", "MLP 784-512-512-10, batch 64", _mlp, _mlp_batch),
    Workload("cnn", "CNN 2 conv blocks 32/64 ch, 28x28, batch 32", _cnn, _cnn_batch),
    Workload("bert", f"BERT-small 4x256, 4 heads, ffn 1024, vocab {VOCAB}, seq {SEQUENCE}, "
                     f"batch {TEXT_BATCH}", _bert, _bert_batch),
    Workload("gpt2", f"GPT-2-small 4x256, 4 heads, vocab {VOCAB}, seq {SEQUENCE}, "
                     f"batch {TEXT_BATCH}", _gpt2, _lm_batch),
    Workload("llama", f"Llama-small 4x256, ffn 688, 4 heads / 2 kv, vocab {VOCAB}, "
                      f"seq {SEQUENCE}, batch {TEXT_BATCH}", _llama, _lm_batch),
    Workload("bert-sdpa", "bert with scaled_dot_product_attention (transformers' default)",
             functools.partial(_bert, "sdpa"), _bert_batch),
    Workload("gpt2-sdpa", "gpt2 with scaled_dot_product_attention (transformers' default)",
             functools.partial(_gpt2, "sdpa"), _lm_batch),
    Workload("bert-mlm", "BertForMaskedLM 4x256 (bert's encoder), masked-LM head, 15% of the "
                         "tokens labelled, loss returned alone", _bert_mlm, _mlm_batch),
    Workload("gpt2-sft", "gpt2 fine-tuned on the last quarter of each sequence (the prompt's "
                         "labels -100), loss returned alone", _gpt2_sft, _sft_batch),
    Workload("lstm-lm", f"LSTM language model: embedding 256, 2-layer LSTM 256, vocab "
                        f"{LSTM_VOCAB}, seq {LSTM_SEQUENCE}, batch {LSTM_BATCH}", _lstm_lm,
             _lstm_lm_batch),
    Workload("resnet", "ResNet-18 layout (basic [64..512]x[2,2,2,2]), 64x64, batch 16",
             _resnet, _resnet_batch),
    Workload("bert-base", "BERT-base 12x768, 12 heads, seq 128, batch 32, dropout 0.1, sdpa",
             _bert_base, _bert_base_batch),
    Workload("gpt2-small", "GPT-2-small 12x768, 12 heads, vocab 50257, seq 512, batch 8, "
                           "dropout 0.1, sdpa", _gpt2_small, _gpt2_small_batch),
    Workload("gpt2-124m", "GPT-2-124M 12x768, 12 heads, vocab 50257 (tied head), eager "
                          "attention, no dropout, loss returned alone; seq x batch from "
                          "--gpt2-124m-shape (default 1024 x 2)", _gpt2_124m, _gpt2_124m_batch),
    Workload("resnet50", "ResNet-50 (bottleneck [3,4,6,3]), 224x224, batch 64, 1000 labels",
             _resnet50, _resnet50_batch),
    *(Workload(f"gpt2-seq{s}", f"gpt2 at sequence {s}, batch 1 (4x256, 4 heads, vocab "
                               f"{VOCAB}, eager attention)",
               functools.partial(_gpt2_long, s), functools.partial(_gpt2_long_batch, s))
      for s in SWEEP_SEQUENCES),
)}


def training_flops(model: nn.Module, batch: dict[str, torch.Tensor]) -> float:
    """Model FLOPs of one training step: 3x the forward's (backward = 2x forward), where the
    forward's are counted by FlopCounterMode (2 per multiply-accumulate of every GEMM,
    batched GEMM and convolution; elementwise work is not counted)."""
    counter = FlopCounterMode(display=False)
    with torch.no_grad(), counter:
        model(**batch)
    return 3.0 * counter.get_total_flops()

# The full-size models, run.py's default on cuda (the others are its default on cpu).
GPU_WORKLOADS = ("bert-base", "gpt2-small", "resnet50")
# Run only when named (--models): too large for the default CPU list.
NAMED_ONLY = ("gpt2-124m", *(f"gpt2-seq{s}" for s in SWEEP_SEQUENCES))
