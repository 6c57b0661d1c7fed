"""A broad zoo of tiny random-weight models (Hugging Face configs and torch.nn language
models) with batches for them, for the eager-parity training test test_zoo.py.

Built from configs only (no downloads): hidden sizes 32-64, two layers, vocabulary 97, every
dropout probability 0, eager attention, fixed seeds, inputs drawn from torch.Generator.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
import transformers as tf
from torch import nn

VOCAB = 97
LABELS = 3

Batch = dict[str, torch.Tensor]


@dataclass(frozen=True)
class Arch:
    name: str
    kind: str  # text-encoder, decoder, encoder-decoder, vision-cnn, vision-transformer, ...
    build: Callable[[], nn.Module]
    batch: Callable[[int, int, int], Batch]  # (batch, size, seed) -> keyword arguments
    size: int  # sequence length (or image size / samples) of the three training steps
    other_size: int  # the size of the extra step
    other_batch: int = 2  # the batch size of the extra step


def no_dropout(config: tf.PretrainedConfig) -> tf.PretrainedConfig:
    """Sets every dropout-like probability of a config (dropout, pdrop, layerdrop,
    drop_path_rate, drop_connect_rate...) to 0."""
    for key, value in list(vars(config).items()):
        if "drop" in key and (isinstance(value, float) or (value is None and "dropout" in key)):
            setattr(config, key, 0.0)
    return config


def _hf(model_cls: type, config_cls: type, **kwargs: object) -> Callable[[], nn.Module]:
    def build() -> nn.Module:
        config = config_cls(**kwargs)
        config._attn_implementation = "eager"
        return model_cls(no_dropout(config))
    return build


def _cls(model: str, config: str, **kwargs: object) -> Callable[[], nn.Module]:
    return _hf(getattr(tf, model), getattr(tf, config), **kwargs)


def _ids(batch: int, length: int, gen: torch.Generator, low: int = 3) -> torch.Tensor:
    # Ids from 3 up: 0-2 are the special tokens (pad, bos, eos) of the configs below.
    return torch.randint(low, VOCAB, (batch, length), generator=gen)


def classify_batch(batch: int, length: int, seed: int) -> Batch:
    gen = torch.Generator().manual_seed(seed)
    mask = torch.ones(batch, length, dtype=torch.long)
    mask[0, length - 2:] = 0  # padding in the first sequence
    return {"input_ids": _ids(batch, length, gen), "attention_mask": mask,
            "labels": torch.randint(0, LABELS, (batch,), generator=gen)}


def lm_batch(batch: int, length: int, seed: int) -> Batch:
    gen = torch.Generator().manual_seed(seed)
    ids = _ids(batch, length, gen)
    return {"input_ids": ids, "labels": ids.clone()}


def seq2seq_batch(batch: int, length: int, seed: int) -> Batch:
    gen = torch.Generator().manual_seed(seed)
    return {"input_ids": _ids(batch, length, gen), "labels": _ids(batch, length - 2, gen)}


def image_batch(batch: int, size: int, seed: int) -> Batch:
    gen = torch.Generator().manual_seed(seed)
    return {"pixel_values": torch.randn(batch, 3, size, size, generator=gen),
            "labels": torch.randint(0, LABELS, (batch,), generator=gen)}


def detection_batch(batch: int, size: int, seed: int) -> Batch:
    """Images with 1 to 3 boxes each (class labels and boxes as DETR's loss takes them)."""
    gen = torch.Generator().manual_seed(seed)
    labels = [{"class_labels": torch.randint(0, LABELS, (n,), generator=gen),
               "boxes": torch.rand(n, 4, generator=gen) * 0.5 + 0.25}
              for n in [1 + i % 3 for i in range(batch)]]
    return {"pixel_values": torch.randn(batch, 3, size, size, generator=gen), "labels": labels}


def audio_batch(batch: int, samples: int, seed: int) -> Batch:
    gen = torch.Generator().manual_seed(seed)
    return {"input_values": torch.randn(batch, samples, generator=gen),
            "labels": torch.randint(0, LABELS, (batch,), generator=gen)}


def ctc_batch(batch: int, samples: int, seed: int) -> Batch:
    """Raw audio with CTC transcripts of 5 tokens, the first padded (-100) after 3."""
    gen = torch.Generator().manual_seed(seed)
    labels = torch.randint(1, VOCAB, (batch, 5), generator=gen)
    labels[0, 3:] = -100
    return {"input_values": torch.randn(batch, samples, generator=gen), "labels": labels}


def whisper_batch(batch: int, length: int, seed: int) -> Batch:
    # The encoder takes exactly 2 * max_source_positions frames: `length` is the label length.
    gen = torch.Generator().manual_seed(seed)
    return {"input_features": torch.randn(batch, 8, 16, generator=gen),
            "labels": _ids(batch, length, gen)}


def tokens_batch(batch: int, length: int, seed: int) -> Batch:
    gen = torch.Generator().manual_seed(seed)
    return {"ids": _ids(batch, length, gen, low=0)}


# ---- text encoders (sequence classification) -------------------------------------------

_ENC = {"vocab_size": VOCAB, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
        "intermediate_size": 37, "max_position_embeddings": 64, "num_labels": LABELS}

TEXT_ENCODERS = {
    "bert": _cls("BertForSequenceClassification", "BertConfig", **_ENC),
    "roberta": _cls("RobertaForSequenceClassification", "RobertaConfig", **_ENC),
    "xlm_roberta": _cls("XLMRobertaForSequenceClassification", "XLMRobertaConfig", **_ENC),
    "camembert": _cls("CamembertForSequenceClassification", "CamembertConfig", **_ENC),
    "distilbert": _cls("DistilBertForSequenceClassification", "DistilBertConfig",
                       vocab_size=VOCAB, dim=32, n_layers=2, n_heads=4, hidden_dim=37,
                       max_position_embeddings=64, num_labels=LABELS),
    "albert": _cls("AlbertForSequenceClassification", "AlbertConfig", **_ENC,
                   embedding_size=16),
    "electra": _cls("ElectraForSequenceClassification", "ElectraConfig", **_ENC,
                    embedding_size=16),
    "deberta": _cls("DebertaForSequenceClassification", "DebertaConfig", **_ENC,
                    relative_attention=True, pos_att_type=["c2p", "p2c"],
                    max_relative_positions=16),
    "deberta_v2": _cls("DebertaV2ForSequenceClassification", "DebertaV2Config", **_ENC,
                       relative_attention=True, pos_att_type=["c2p", "p2c"],
                       position_buckets=8, max_relative_positions=16),
    "mpnet": _cls("MPNetForSequenceClassification", "MPNetConfig", **_ENC),
    "convbert": _cls("ConvBertForSequenceClassification", "ConvBertConfig", **_ENC,
                     embedding_size=32, conv_kernel_size=3),
    "ernie": _cls("ErnieForSequenceClassification", "ErnieConfig", **_ENC),
}

# ---- decoders (causal language models) ---------------------------------------------------

_LLAMA_LIKE = {"vocab_size": VOCAB, "hidden_size": 32, "intermediate_size": 37,
               "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
               "head_dim": 8, "max_position_embeddings": 64, "use_cache": False, "pad_token_id": 0,
               "bos_token_id": 1, "eos_token_id": 2}


def _llama_like(prefix: str, **extra: object) -> Callable[[], nn.Module]:
    return _cls(f"{prefix}ForCausalLM", f"{prefix}Config", **{**_LLAMA_LIKE, **extra})


DECODERS = {
    "gpt2": _cls("GPT2LMHeadModel", "GPT2Config", vocab_size=VOCAB, n_embd=32, n_layer=2,
                 n_head=4, n_positions=64, use_cache=False),
    "gpt_neo": _cls("GPTNeoForCausalLM", "GPTNeoConfig", vocab_size=VOCAB, hidden_size=32,
                    num_layers=2, attention_types=[[["global", "local"], 1]], num_heads=4,
                    intermediate_size=37, max_position_embeddings=64, window_size=4,
                    use_cache=False),
    "gptj": _cls("GPTJForCausalLM", "GPTJConfig", vocab_size=VOCAB, n_embd=32, n_layer=2,
                 n_head=4, rotary_dim=4, n_positions=64, use_cache=False),
    "gpt_neox": _cls("GPTNeoXForCausalLM", "GPTNeoXConfig", vocab_size=VOCAB, hidden_size=32,
                     num_hidden_layers=2, num_attention_heads=4, intermediate_size=37,
                     max_position_embeddings=64, use_cache=False),
    "codegen": _cls("CodeGenForCausalLM", "CodeGenConfig", vocab_size=VOCAB, n_embd=32,
                    n_layer=2, n_head=4, rotary_dim=4, n_ctx=64, n_positions=64,
                    use_cache=False),
    "opt": _cls("OPTForCausalLM", "OPTConfig", vocab_size=VOCAB, hidden_size=32,
                num_hidden_layers=2, num_attention_heads=4, ffn_dim=37,
                max_position_embeddings=64, word_embed_proj_dim=32, use_cache=False,
                pad_token_id=0, bos_token_id=1, eos_token_id=2),
    "bloom": _cls("BloomForCausalLM", "BloomConfig", vocab_size=VOCAB, hidden_size=32,
                  n_layer=2, n_head=4, use_cache=False),
    "falcon": _cls("FalconForCausalLM", "FalconConfig", vocab_size=VOCAB, hidden_size=32,
                   num_hidden_layers=2, num_attention_heads=4, use_cache=False),
    "llama": _llama_like("Llama"),
    "mistral": _llama_like("Mistral", sliding_window=4),
    "qwen2": _llama_like("Qwen2"),
    "qwen3": _llama_like("Qwen3"),
    "phi": _cls("PhiForCausalLM", "PhiConfig", vocab_size=VOCAB, hidden_size=32,
                intermediate_size=37, num_hidden_layers=2, num_attention_heads=4,
                max_position_embeddings=64, use_cache=False),
    "phi3": _llama_like("Phi3"),
    "gemma": _llama_like("Gemma"),
    "gemma2": _llama_like("Gemma2", sliding_window=4),
    "stablelm": _llama_like("StableLm"),
    "olmo": _llama_like("Olmo"),
    "starcoder2": _llama_like("Starcoder2"),
    "granite": _llama_like("Granite"),
}

# ---- encoder-decoders ---------------------------------------------------------------------

_BART_LIKE = {"vocab_size": VOCAB, "d_model": 32, "encoder_layers": 2, "decoder_layers": 2,
              "encoder_attention_heads": 4, "decoder_attention_heads": 4, "encoder_ffn_dim": 37,
              "decoder_ffn_dim": 37, "max_position_embeddings": 64, "use_cache": False,
              "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2, "decoder_start_token_id": 2}


def _bart_like(prefix: str, **extra: object) -> Callable[[], nn.Module]:
    return _cls(f"{prefix}ForConditionalGeneration", f"{prefix}Config",
                **{**_BART_LIKE, **extra})


ENCODER_DECODERS = {
    "t5": _cls("T5ForConditionalGeneration", "T5Config", vocab_size=VOCAB, d_model=32, d_kv=8,
               d_ff=37, num_layers=2, num_heads=4, relative_attention_num_buckets=8,
               relative_attention_max_distance=16, use_cache=False, decoder_start_token_id=0,
               pad_token_id=0),
    "bart": _bart_like("Bart"),
    "mbart": _bart_like("MBart"),
    "pegasus": _bart_like("Pegasus"),
    "marian": _cls("MarianMTModel", "MarianConfig", **_BART_LIKE, decoder_vocab_size=VOCAB),
    "blenderbot_small": _bart_like("BlenderbotSmall"),
}

# ---- vision -------------------------------------------------------------------------------

VISION_CNNS = {
    "resnet": _cls("ResNetForImageClassification", "ResNetConfig", num_channels=3,
                   embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1], layer_type="basic",
                   num_labels=LABELS),
    "convnext": _cls("ConvNextForImageClassification", "ConvNextConfig", num_channels=3,
                     hidden_sizes=[8, 16], depths=[1, 1], num_stages=2, patch_size=2,
                     num_labels=LABELS),
    "mobilenet_v2": _cls("MobileNetV2ForImageClassification", "MobileNetV2Config",
                         num_channels=3, image_size=32, depth_multiplier=0.25, output_stride=8,
                         num_labels=LABELS),
    "efficientnet": _cls("EfficientNetForImageClassification", "EfficientNetConfig",
                         num_channels=3, image_size=32, width_coefficient=0.1,
                         depth_coefficient=0.1, hidden_dim=128, num_labels=LABELS),
    "regnet": _cls("RegNetForImageClassification", "RegNetConfig", num_channels=3,
                   embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1], groups_width=8,
                   num_labels=LABELS),
}

# DETR: a transformers ResNet backbone (no timm), its loss's Hungarian matching (scipy) and
# `.item()` of the box count run between graph breaks.
VISION_DETECTION = {
    "detr": _cls("DetrForObjectDetection", "DetrConfig",
                 backbone_config=tf.ResNetConfig(num_channels=3, embedding_size=8,
                                                 hidden_sizes=[8, 16], depths=[1, 1],
                                                 layer_type="basic", out_features=["stage2"]),
                 d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
                 decoder_attention_heads=2, encoder_ffn_dim=37, decoder_ffn_dim=37,
                 num_queries=6, num_labels=LABELS),
}

_VIT = {"image_size": 16, "patch_size": 4, "num_channels": 3, "hidden_size": 32,
        "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 37,
        "num_labels": LABELS}

VISION_TRANSFORMERS = {
    "vit": _cls("ViTForImageClassification", "ViTConfig", **_VIT),
    "deit": _cls("DeiTForImageClassification", "DeiTConfig", **_VIT),
    "beit": _cls("BeitForImageClassification", "BeitConfig", **_VIT,
                 use_relative_position_bias=True),
    "swin": _cls("SwinForImageClassification", "SwinConfig", image_size=16, patch_size=2,
                 num_channels=3, embed_dim=16, depths=[1, 1], num_heads=[2, 4], window_size=2,
                 num_labels=LABELS),
    "segformer": _cls("SegformerForImageClassification", "SegformerConfig", num_channels=3,
                      num_encoder_blocks=2, depths=[1, 1], sr_ratios=[2, 1],
                      hidden_sizes=[16, 32], patch_sizes=[3, 3], strides=[2, 2],
                      num_attention_heads=[1, 2], mlp_ratios=[2, 2], num_labels=LABELS),
}

# ---- audio --------------------------------------------------------------------------------

_W2V = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
        "intermediate_size": 37, "conv_dim": (8, 8), "conv_stride": (4, 2), "conv_kernel": (8, 3),
        "num_conv_pos_embeddings": 4, "num_conv_pos_embedding_groups": 2,
        "apply_spec_augment": False, "mask_time_prob": 0.0, "num_labels": LABELS,
        "classifier_proj_size": 16, "vocab_size": VOCAB}

AUDIO = {
    "wav2vec2": _cls("Wav2Vec2ForSequenceClassification", "Wav2Vec2Config", **_W2V),
    "hubert": _cls("HubertForSequenceClassification", "HubertConfig", **_W2V),
    # CTC's loss masks the padded labels (masked_select) and leaves cuDNN off: graph breaks.
    "wav2vec2_ctc": _cls("Wav2Vec2ForCTC", "Wav2Vec2Config", **_W2V, pad_token_id=0,
                         ctc_loss_reduction="mean"),
    "whisper": _cls("WhisperForConditionalGeneration", "WhisperConfig", vocab_size=VOCAB,
                    num_mel_bins=8, d_model=32, encoder_layers=2, decoder_layers=2,
                    encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=37,
                    decoder_ffn_dim=37, max_source_positions=8, max_target_positions=32,
                    pad_token_id=0, bos_token_id=1, eos_token_id=2, decoder_start_token_id=1,
                    use_cache=False),
}

# ---- mixture of experts, state space -----------------------------------------------------

MOE = {
    "mixtral": _llama_like("Mixtral", num_local_experts=4, num_experts_per_tok=2,
                           intermediate_size=32),  # grouped products want 16-byte strides,
    "qwen2_moe": _llama_like("Qwen2Moe", num_experts=4, num_experts_per_tok=2,
                             moe_intermediate_size=16, shared_expert_intermediate_size=16,
                             decoder_sparse_step=1),
    "qwen3_moe": _llama_like("Qwen3Moe", num_experts=4, num_experts_per_tok=2,
                             moe_intermediate_size=16, decoder_sparse_step=1),
}

STATE_SPACE = {
    "mamba": _cls("MambaForCausalLM", "MambaConfig", vocab_size=VOCAB, hidden_size=32,
                  state_size=4, num_hidden_layers=2, expand=2, conv_kernel=4, use_cache=False,
                  pad_token_id=0, bos_token_id=1, eos_token_id=2),
}

# ---- torch.nn models ----------------------------------------------------------------------


class RecurrentLM(nn.Module):
    """Embedding, a two-layer nn.LSTM or nn.GRU, a vocabulary head; next-token loss."""

    def __init__(self, cell: type[nn.LSTM | nn.GRU]) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, 32)
        self.rnn = cell(32, 32, num_layers=2, batch_first=True)
        self.head = nn.Linear(32, VOCAB)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        hidden, _ = self.rnn(self.embed(ids[:, :-1]))
        logits = self.head(hidden)
        return F.cross_entropy(logits.reshape(-1, VOCAB), ids[:, 1:].reshape(-1))


class EncoderLM(nn.Module):
    """nn.TransformerEncoder with a causal mask as a language model (pre-norm layers)."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, 32)
        self.pos = nn.Parameter(torch.randn(64, 32) * 0.02)
        layer = nn.TransformerEncoderLayer(32, 4, 37, dropout=0.0, batch_first=True,
                                           norm_first=True, activation="gelu")
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = nn.Linear(32, VOCAB)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = ids[:, :-1]
        n = x.shape[1]
        mask = nn.Transformer.generate_square_subsequent_mask(n)
        hidden = self.encoder(self.embed(x) + self.pos[:n], mask=mask, is_causal=True)
        logits = self.head(hidden)
        return F.cross_entropy(logits.reshape(-1, VOCAB), ids[:, 1:].reshape(-1))


class Seq2SeqTransformer(nn.Module):
    """nn.Transformer translating the sequence into its reverse (teacher forcing)."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, 32)
        self.transformer = nn.Transformer(32, 4, 2, 2, 37, dropout=0.0, batch_first=True)
        self.head = nn.Linear(32, VOCAB)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        target = ids.flip(1)
        tgt_in = target[:, :-1]
        n = tgt_in.shape[1]
        mask = nn.Transformer.generate_square_subsequent_mask(n)
        scale = math.sqrt(32)
        hidden = self.transformer(self.embed(ids) * scale, self.embed(tgt_in) * scale,
                                  tgt_mask=mask, tgt_is_causal=True)
        logits = self.head(hidden)
        return F.cross_entropy(logits.reshape(-1, VOCAB), target[:, 1:].reshape(-1))


TORCH_NN = {
    "torch_lstm": lambda: RecurrentLM(nn.LSTM),
    "torch_gru": lambda: RecurrentLM(nn.GRU),
    "torch_transformer_encoder": EncoderLM,
    "torch_transformer": Seq2SeqTransformer,
}


def _arches() -> dict[str, Arch]:
    groups: list[tuple[str, dict[str, Callable[[], nn.Module]], Callable[..., Batch], int, int,
                       int]] = [
        ("text-encoder", TEXT_ENCODERS, classify_batch, 8, 11, 2),
        ("decoder", DECODERS, lm_batch, 8, 11, 2),
        ("encoder-decoder", ENCODER_DECODERS, seq2seq_batch, 8, 11, 2),
        ("vision-cnn", VISION_CNNS, image_batch, 32, 40, 2),
        ("vision-detection", VISION_DETECTION, detection_batch, 32, 40, 2),
        ("audio", {k: v for k, v in AUDIO.items() if k not in ("whisper", "wav2vec2_ctc")},
         audio_batch, 200, 168, 2),
        ("audio", {"wav2vec2_ctc": AUDIO["wav2vec2_ctc"]}, ctc_batch, 200, 168, 2),
        ("audio", {"whisper": AUDIO["whisper"]}, whisper_batch, 6, 9, 2),
        ("moe", MOE, lm_batch, 8, 11, 2),
        ("state-space", STATE_SPACE, lm_batch, 8, 11, 2),
        ("torch-nn", TORCH_NN, tokens_batch, 8, 11, 2),
    ]
    arches: dict[str, Arch] = {}
    for kind, builders, batch, size, other, other_batch in groups:
        for name, build in builders.items():
            arches[name] = Arch(name, kind, build, batch, size, other, other_batch)
    # Vision transformers: ViT, DeiT and BEiT fix the image size in the config (their extra
    # step changes the batch size instead); Swin pads to its windows, SegFormer is size-free.
    for name, build in VISION_TRANSFORMERS.items():
        varies = name in ("swin", "segformer")
        arches[name] = Arch(name, "vision-transformer", build, image_batch, 16,
                            24 if varies else 16, 2 if varies else 3)
    return arches


ARCHES = _arches()
