"""Hugging Face ``transformers.Trainer`` whose model trains under ORTModule.

    from ortmodule.trainer import ORTTrainer, ORTTrainingArguments
    args = ORTTrainingArguments(output_dir="out", optim="adamw_ort_fused")
    ORTTrainer(model=model, args=args, train_dataset=train).train()

Importing this package imports transformers (and Trainer needs accelerate); ``import ortmodule``
alone does not.
"""

from ortmodule.trainer.arguments import (
    ORT_OPTIMIZERS,
    ORTSeq2SeqTrainingArguments,
    ORTTrainingArguments,
)
from ortmodule.trainer.trainer import ModuleWithLoss, ORTSeq2SeqTrainer, ORTTrainer

__all__ = [
    "ORT_OPTIMIZERS",
    "ModuleWithLoss",
    "ORTSeq2SeqTrainer",
    "ORTSeq2SeqTrainingArguments",
    "ORTTrainer",
    "ORTTrainingArguments",
]
