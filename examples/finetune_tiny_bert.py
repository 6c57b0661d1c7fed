"""Fine-tunes a tiny BERT on examples/data/sentiment.csv (template-made product reviews) with
ortmodule.trainer.ORTTrainer, then runs the same fine-tuning with transformers.Trainer and
prints both results and their training speed.

No downloads: the tokenizer is a word-level vocabulary built from the data set, and the model
is a randomly initialised BertForSequenceClassification.

    python examples/finetune_tiny_bert.py [--steps 60]
"""

from __future__ import annotations

import argparse
import csv
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import transformers as tf
from torch.utils.data import Dataset

from ortmodule.trainer import ORTTrainer, ORTTrainingArguments

DATA = Path(__file__).parent / "data" / "sentiment.csv"
LENGTH = 16  # longest review is 13 words, plus [CLS]


class Reviews(Dataset):
    def __init__(self, rows: list[tuple[str, int]], vocab: dict[str, int]) -> None:
        self.items = []
        for text, label in rows:
            ids = [vocab["[CLS]"]] + [vocab[w] for w in text.split()]
            mask = [1] * len(ids) + [0] * (LENGTH - len(ids))
            ids += [vocab["[PAD]"]] * (LENGTH - len(ids))
            self.items.append({"input_ids": torch.tensor(ids), "attention_mask": torch.tensor(mask),
                               "labels": torch.tensor(label)})

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return self.items[index]


def load() -> tuple[Reviews, Reviews, int]:
    with DATA.open() as f:
        rows = [(r["text"], int(r["label"])) for r in csv.DictReader(f)]
    words = sorted({w for text, _ in rows for w in text.split()})
    vocab = {w: i for i, w in enumerate(["[PAD]", "[CLS]", *words])}
    split = len(rows) * 3 // 4
    return Reviews(rows[:split], vocab), Reviews(rows[split:], vocab), len(vocab)


def tiny_bert(vocab_size: int) -> tf.BertForSequenceClassification:
    torch.manual_seed(0)
    return tf.BertForSequenceClassification(tf.BertConfig(
        vocab_size=vocab_size, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=128, max_position_embeddings=LENGTH, num_labels=2,
        attn_implementation="eager"))


class StepClock(tf.TrainerCallback):
    """Times every optimizer step, so the steady speed can be told apart from the first step
    (which, under ORTTrainer, exports the model and builds the engine's graphs)."""

    def __init__(self) -> None:
        self.ends: list[float] = []

    def on_step_end(self, *args: Any, **kwargs: Any) -> None:
        self.ends.append(time.perf_counter())

    def steady_steps_per_second(self) -> float:
        return (len(self.ends) - 1) / (self.ends[-1] - self.ends[0])


def accuracy(prediction: tf.EvalPrediction) -> dict[str, float]:
    return {"accuracy": float((np.argmax(prediction.predictions, -1) == prediction.label_ids).mean())}


def finetune(use_ort: bool, steps: int, out: str) -> dict[str, Any]:
    train, test, vocab_size = load()
    common: dict[str, Any] = {
        "output_dir": out, "max_steps": steps, "per_device_train_batch_size": 16,
        "learning_rate": 3e-3, "weight_decay": 0.01, "logging_steps": max(1, steps // 6),
        "save_strategy": "no", "report_to": [], "seed": 0, "use_cpu": True,
    }
    if use_ort:
        args = ORTTrainingArguments(optim="adamw_ort_fused", **common)
        trainer: tf.Trainer = ORTTrainer(model=tiny_bert(vocab_size), args=args, train_dataset=train,
                                         eval_dataset=test, compute_metrics=accuracy)
    else:
        args = tf.TrainingArguments(optim="adamw_torch", **common)
        trainer = tf.Trainer(model=tiny_bert(vocab_size), args=args, train_dataset=train,
                             eval_dataset=test, compute_metrics=accuracy)
    clock = StepClock()
    trainer.add_callback(clock)
    result = trainer.train()
    metrics = trainer.evaluate()
    return {"train_loss": result.training_loss,
            "steps_per_second": result.metrics["train_steps_per_second"],
            "steady_steps_per_second": clock.steady_steps_per_second(),
            "eval_loss": metrics["eval_loss"], "eval_accuracy": metrics["eval_accuracy"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100)
    steps = parser.parse_args().steps
    with tempfile.TemporaryDirectory() as out:
        results = {"ORTTrainer": finetune(True, steps, out),
                   "transformers.Trainer": finetune(False, steps, out)}
    print(f"\n{'':22s} {'train loss':>10s} {'eval loss':>10s} {'accuracy':>9s} {'steps/s':>8s} "
          f"{'after step 1':>13s}")
    for name, r in results.items():
        print(f"{name:22s} {r['train_loss']:10.4f} {r['eval_loss']:10.4f} "
              f"{r['eval_accuracy']:9.3f} {r['steps_per_second']:8.2f} "
              f"{r['steady_steps_per_second']:13.2f}")


if __name__ == "__main__":
    main()
