"""Training arguments of ORTTrainer: transformers' TrainingArguments plus the ORTModule options,
with the options the engine cannot honour refused when the arguments are built."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

from transformers import Seq2SeqTrainingArguments, TrainingArguments

from ortmodule.options import DebugOptions, LogLevel

# Optimizer names ORTTrainer adds to transformers' OptimizerNames.
ORT_OPTIMIZERS = ("adamw_ort_fused",)


@dataclass
class ORTTrainingArguments(TrainingArguments):
    """TrainingArguments with ``optim="adamw_ort_fused"`` (ortmodule.optim.FusedAdamW),
    ``use_module_with_loss`` and the ONNX saving options of ``ortmodule.DebugOptions``.

    ``gradient_checkpointing`` / ``activation_checkpointing`` run the checkpointed layers as
    engine recompute regions; ``fp16`` (CUDA only) and ``bf16`` train under autocast as
    Trainer does (with a GradScaler for fp16)."""

    use_module_with_loss: bool = field(
        default=False,
        metadata={"help": "Run Trainer.compute_loss (label smoothing included) inside the "
                          "ORTModule graph, so the loss is part of the engine's graph."},
    )
    save_onnx: bool = field(
        default=False,
        metadata={"help": "Save the exported and gradient ONNX graphs to output_dir "
                          "(needs onnx_prefix)."},
    )
    onnx_prefix: str | None = field(
        default=None, metadata={"help": "File name prefix of the ONNX graphs saved by save_onnx."},
    )
    onnx_log_level: str = field(
        default="WARNING",
        metadata={"help": "ORTModule log level: VERBOSE, INFO, WARNING, ERROR or FATAL."},
    )

    def __post_init__(self) -> None:
        # Before TrainingArguments' own checks, which would import DeepSpeed or fail on fp16
        # or an optimizer name with a message that does not say what to use here.
        _refuse_unsupported(self)
        optim = self.optim.value if hasattr(self.optim, "value") else self.optim
        ort_optim = optim in ORT_OPTIMIZERS
        if ort_optim:
            # TrainingArguments only knows its own names; validate the rest with a stand-in.
            self.optim = "adamw_torch"
        super().__post_init__()
        if ort_optim:
            self.optim = optim
        _refuse_unsupported(self)  # what __post_init__ derived (torch_compile from its backend)
        if self.save_onnx and not self.onnx_prefix:
            raise ValueError("save_onnx=True needs onnx_prefix: the saved ONNX files are named "
                             "<onnx_prefix>_<mode>_forward.onnx; pass e.g. onnx_prefix='model'")
        if self.onnx_log_level.upper() not in LogLevel.__members__:
            raise ValueError(f"onnx_log_level {self.onnx_log_level!r} is not one of "
                             f"{', '.join(LogLevel.__members__)}")

    def debug_options(self) -> DebugOptions:
        """The ORTModule DebugOptions these arguments ask for (ONNX files go to output_dir)."""
        level = LogLevel[self.onnx_log_level.upper()]
        if not self.save_onnx:
            return DebugOptions(log_level=level)
        return DebugOptions(log_level=level, save_onnx=True, onnx_prefix=self.onnx_prefix or "",
                            save_path=self.output_dir)


@dataclass
class ORTSeq2SeqTrainingArguments(Seq2SeqTrainingArguments, ORTTrainingArguments):
    """Seq2SeqTrainingArguments (predict_with_generate, generation_max_length, ...) with the
    ORTTrainingArguments options."""


# Optimizer names of earlier transformers (and of Optimum's ORTTrainingArguments, whose
# default was "adamw_hf") that transformers 5 no longer knows, and what to use instead.
RETIRED_OPTIMIZERS = {
    "adamw_hf": "transformers 5 removed its own AdamW: use optim=\"adamw_torch\" (torch.optim."
                "AdamW, the same update) or optim=\"adamw_ort_fused\" (ortmodule.optim.FusedAdamW)",
    "adamw_apex_fused": "transformers 5 removed Apex's fused AdamW: use "
                        "optim=\"adamw_ort_fused\" or optim=\"adamw_torch_fused\"",
}


def _on_cpu(args: TrainingArguments) -> bool:
    import torch

    return bool(getattr(args, "use_cpu", False)) or not torch.cuda.is_available()


def _refuse_unsupported(args: TrainingArguments) -> None:
    """Raises for the options the engine cannot honour, naming what to use instead. Runs on
    arguments before and after TrainingArguments.__post_init__ (which sets torch_compile
    where torch_compile_backend or torch_compile_mode is given, and activation_checkpointing
    from its deprecated name gradient_checkpointing)."""
    refused: list[str] = []
    optim = args.optim.value if hasattr(args.optim, "value") else args.optim
    if optim in RETIRED_OPTIMIZERS:
        refused.append(f"optim={optim!r}: {RETIRED_OPTIMIZERS[optim]}")
    if (args.fp16 or args.fp16_full_eval) and _on_cpu(args):
        refused.append("fp16=True: float16 mixed precision needs a CUDA device (autocast to "
                       "float16 and a GradScaler, as on eager PyTorch), and this run is on "
                       "the CPU; on the CPU use bf16=True (bfloat16 autocast) or float32 "
                       "(the default)")
    refused.extend(_sharding_refusals(args))
    compile_options = [f"{name}={getattr(args, name)!r}"
                       for name in ("torch_compile", "torch_compile_backend", "torch_compile_mode")
                       if getattr(args, name, None) not in (None, False)]
    if compile_options:
        refused.append(f"{', '.join(compile_options)}: torch.compile would compile the model "
                       "that ORTModule already compiles into one engine graph (transformers "
                       "turns torch_compile on when a backend or mode is given); leave all "
                       "three unset")
    for name in ("gradient_checkpointing_kwargs", "activation_checkpointing_kwargs"):
        kwargs = getattr(args, name, None)
        if isinstance(kwargs, dict) and kwargs.get("offload"):
            refused.append(f"{name}={{'offload': True}}: the engine keeps a checkpointed "
                           "region's inputs in its own memory plan and cannot move them to "
                           "the host; leave offload off")
            break
    if refused:
        raise ValueError("ORTTrainingArguments cannot honour: " + "; ".join(refused))


def _deepspeed_stage(config: object) -> int:
    """The ZeRO stage of a DeepSpeed config (a dict or the path of a JSON file)."""
    if isinstance(config, str):
        if not os.path.isfile(config):
            return 0  # TrainingArguments names the missing file
        with open(config) as f:
            config = json.load(f)
    zero = config.get("zero_optimization", {}) if isinstance(config, dict) else {}
    stage = zero.get("stage", 0) if isinstance(zero, dict) else 0
    return stage if isinstance(stage, int) else 0


def _sharding_refusals(args: TrainingArguments) -> list[str]:
    """fsdp and deepspeed: FSDP2 and ZeRO stages 1 and 2 compose with ORTModule
    (docs/distributed.md); FSDP1 and ZeRO stage 3 do not."""
    refused = []
    if args.deepspeed and _deepspeed_stage(args.deepspeed) == 3:
        refused.append("deepspeed with ZeRO stage 3: it gathers each submodule's parameters in "
                       "hooks around that submodule, which the engine's single graph never "
                       "calls; use ZeRO stage 1 or 2")
    if args.fsdp:
        config = args.fsdp_config if isinstance(args.fsdp_config, dict) else {}
        if isinstance(args.fsdp_config, str) and os.path.isfile(args.fsdp_config):
            with open(args.fsdp_config) as f:
                config = json.load(f)
        version = config.get("version", config.get("fsdp_version", 2))
        if str(version) != "2":
            refused.append(f"fsdp with fsdp_config version {version}: FSDP1 flattens the "
                           "parameters of each wrapped block into one buffer; use FSDP2 "
                           "(fsdp_config={'version': 2}, the default)")
    return refused
