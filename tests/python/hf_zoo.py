"""Tiny random-weight Hugging Face models of six families, and batches for them.

Built from configs only (no downloads); eager attention so that attention dropout and
attention weights are plain tensor code.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import transformers as tf

VOCAB = 97


@dataclass(frozen=True)
class Family:
    name: str
    build: Callable[[float], torch.nn.Module]  # dropout probability -> model
    batch: Callable[[int, int, int], dict[str, torch.Tensor]]  # (batch, length, seed) -> kwargs
    has_sequence: bool = True  # whether `length` is a sequence length (else an image size)


def _ids(batch: int, length: int, gen: torch.Generator) -> torch.Tensor:
    return torch.randint(0, VOCAB, (batch, length), generator=gen)


def _bert(p: float) -> torch.nn.Module:
    return tf.BertForSequenceClassification(tf.BertConfig(
        vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=37, max_position_embeddings=64, num_labels=3,
        hidden_dropout_prob=p, attention_probs_dropout_prob=p, attn_implementation="eager"))


def _bert_batch(batch: int, length: int, seed: int) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    mask = torch.ones(batch, length, dtype=torch.long)
    mask[0, length - 2:] = 0  # padding in the first sequence
    return {"input_ids": _ids(batch, length, gen), "attention_mask": mask,
            "labels": torch.randint(0, 3, (batch,), generator=gen)}


def _gpt2(p: float) -> torch.nn.Module:
    return tf.GPT2LMHeadModel(tf.GPT2Config(
        vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4, n_positions=64, use_cache=False,
        resid_pdrop=p, embd_pdrop=p, attn_pdrop=p, attn_implementation="eager"))


def _lm_batch(batch: int, length: int, seed: int) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    ids = _ids(batch, length, gen)
    return {"input_ids": ids, "labels": ids.clone()}


def _t5(p: float) -> torch.nn.Module:
    return tf.T5ForConditionalGeneration(tf.T5Config(
        vocab_size=VOCAB, d_model=32, d_kv=8, d_ff=37, num_layers=2, num_heads=4,
        relative_attention_num_buckets=8, relative_attention_max_distance=16,
        dropout_rate=p, use_cache=False, decoder_start_token_id=0, pad_token_id=0,
        attn_implementation="eager"))


def _t5_batch(batch: int, length: int, seed: int) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return {"input_ids": _ids(batch, length, gen), "labels": _ids(batch, length - 2, gen)}


def _vit(p: float) -> torch.nn.Module:
    return tf.ViTForImageClassification(tf.ViTConfig(
        image_size=16, patch_size=4, num_channels=3, hidden_size=32, num_hidden_layers=2,
        num_attention_heads=4, intermediate_size=37, num_labels=3, hidden_dropout_prob=p,
        attention_probs_dropout_prob=p, attn_implementation="eager"))


def _image_batch(batch: int, size: int, seed: int) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return {"pixel_values": torch.randn(batch, 3, size, size, generator=gen),
            "labels": torch.randint(0, 3, (batch,), generator=gen)}


def _llama(p: float) -> torch.nn.Module:
    return tf.LlamaForCausalLM(tf.LlamaConfig(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=37, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
        attention_dropout=p, use_cache=False, attn_implementation="eager"))


def _resnet(p: float) -> torch.nn.Module:
    return tf.ResNetForImageClassification(tf.ResNetConfig(
        num_channels=3, embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1],
        layer_type="basic", num_labels=3))


FAMILIES = {
    "bert": Family("bert", _bert, _bert_batch),
    "gpt2": Family("gpt2", _gpt2, _lm_batch),
    "t5": Family("t5", _t5, _t5_batch),
    "vit": Family("vit", _vit, lambda b, n, s: _image_batch(b, 16, s), has_sequence=False),
    "llama": Family("llama", _llama, _lm_batch),
    "resnet": Family("resnet", _resnet, _image_batch, has_sequence=False),
}

# Families with attention dropout (ResNet has no dropout).
DROPOUT_FAMILIES = ["bert", "gpt2", "t5", "vit", "llama"]
