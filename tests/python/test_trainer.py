"""ORTTrainer against transformers.Trainer: same seed, same arguments, same data; the logged
training losses and evaluation metrics must agree, and what ORTTrainer saves must load in plain
transformers. Tiny random models from hf_zoo (no dropout, so both runs draw no random numbers
inside the model) on synthetic data built here."""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.multiprocessing as mp
import transformers as tf
from torch.utils.data import Dataset

from ortmodule import ORTModule
from ortmodule.optim import FusedAdamW
from ortmodule.trainer import (
    ORTSeq2SeqTrainer,
    ORTSeq2SeqTrainingArguments,
    ORTTrainer,
    ORTTrainingArguments,
)
from tests.python.hf_zoo import FAMILIES

RTOL = 1e-3  # engine kernels vs eager over a few optimizer steps
SAMPLES, LENGTH = 16, 8


class SyntheticSet(Dataset):
    """One example per item, cut from hf_zoo's batches of the family."""

    def __init__(self, family: str, samples: int = SAMPLES, seed: int = 0) -> None:
        batch = FAMILIES[family].batch(samples, LENGTH, seed)
        self.items = [{k: v[i] for k, v in batch.items()} for i in range(samples)]

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return self.items[index]


def _model(family: str) -> torch.nn.Module:
    torch.manual_seed(0)
    return FAMILIES[family].build(0.0)


def _arguments(out: Path, seq2seq: bool = False, ort: bool = True, **overrides: Any) -> Any:
    values: dict[str, Any] = {
        "output_dir": str(out), "per_device_train_batch_size": 4, "per_device_eval_batch_size": 8,
        "max_steps": 6, "learning_rate": 1e-3, "weight_decay": 0.01, "logging_steps": 1,
        "save_strategy": "no", "report_to": [], "seed": 7, "disable_tqdm": True,
        "use_cpu": True, "dataloader_num_workers": 0,
    }
    values.update(overrides)
    if ort:
        cls = ORTSeq2SeqTrainingArguments if seq2seq else ORTTrainingArguments
    else:
        cls = tf.Seq2SeqTrainingArguments if seq2seq else tf.TrainingArguments
        for name in ("use_module_with_loss", "save_onnx", "onnx_prefix"):
            values.pop(name, None)
        if values.get("optim") == "adamw_ort_fused":
            values["optim"] = "adamw_torch"
    return cls(**values)


def _train(family: str, out: Path, ort: bool, seq2seq: bool = False,
           resume: str | None = None, **overrides: Any) -> tuple[Any, list[float]]:
    args = _arguments(out, seq2seq=seq2seq, ort=ort, **overrides)
    if seq2seq:
        cls = ORTSeq2SeqTrainer if ort else tf.Seq2SeqTrainer
    else:
        cls = ORTTrainer if ort else tf.Trainer
    trainer = cls(model=_model(family), args=args, train_dataset=SyntheticSet(family),
                  eval_dataset=SyntheticSet(family, 8, seed=1))
    trainer.train(resume_from_checkpoint=resume)
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    return trainer, losses


def _assert_losses(actual: list[float], expected: list[float], rtol: float = RTOL) -> None:
    assert len(actual) == len(expected) > 0
    torch.testing.assert_close(torch.tensor(actual), torch.tensor(expected), rtol=rtol, atol=0.0)


def test_bert_losses_evaluation_and_saved_model_match_trainer(tmp_path: Path) -> None:
    ort, ort_losses = _train("bert", tmp_path / "ort", ort=True)
    eager, eager_losses = _train("bert", tmp_path / "eager", ort=False)
    _assert_losses(ort_losses, eager_losses)
    # Training losses move: the test compares a curve, not one repeated value.
    assert ort_losses[0] != ort_losses[-1]
    assert not isinstance(ort.model, ORTModule)  # the user's model again after train()
    ort_eval, eager_eval = ort.evaluate(), eager.evaluate()
    torch.testing.assert_close(ort_eval["eval_loss"], eager_eval["eval_loss"], rtol=RTOL, atol=0.0)

    ort.save_model(str(tmp_path / "saved"))
    reloaded = tf.BertForSequenceClassification.from_pretrained(
        str(tmp_path / "saved"), attn_implementation="eager").eval()
    trained = ort.model.state_dict()
    for name, value in reloaded.state_dict().items():
        assert torch.equal(value, trained[name]), name
    batch = FAMILIES["bert"].batch(4, LENGTH, 3)
    with torch.no_grad():
        expected = ort.model.eval()(**batch).logits
        assert torch.equal(reloaded(**batch).logits, expected)


def test_module_with_loss_and_label_smoothing_match_trainer(tmp_path: Path) -> None:
    _, ort_losses = _train("bert", tmp_path / "ort", ort=True, use_module_with_loss=True,
                           label_smoothing_factor=0.1)
    _, eager_losses = _train("bert", tmp_path / "eager", ort=False, label_smoothing_factor=0.1)
    _assert_losses(ort_losses, eager_losses)


def test_adamw_ort_fused_matches_adamw_torch(tmp_path: Path) -> None:
    ort, ort_losses = _train("bert", tmp_path / "ort", ort=True, optim="adamw_ort_fused")
    _, eager_losses = _train("bert", tmp_path / "eager", ort=False, optim="adamw_torch")
    assert isinstance(ort.optimizer.optimizer if hasattr(ort.optimizer, "optimizer")
                      else ort.optimizer, FusedAdamW)
    # Parameter groups as in Trainer: biases and LayerNorm weights without weight decay.
    groups = ort.optimizer.param_groups
    assert [g["weight_decay"] for g in groups] == [0.01, 0.0]
    no_decay = {id(p) for p in groups[1]["params"]}
    for name, param in ort.model.named_parameters():
        assert (id(param) in no_decay) == ("bias" in name or "LayerNorm" in name), name
    _assert_losses(ort_losses, eager_losses)


def test_gradient_accumulation_and_max_grad_norm_match_trainer(tmp_path: Path) -> None:
    options = {"gradient_accumulation_steps": 2, "max_grad_norm": 0.05, "max_steps": 3}
    _, ort_losses = _train("bert", tmp_path / "ort", ort=True, **options)
    _, eager_losses = _train("bert", tmp_path / "eager", ort=False, **options)
    _assert_losses(ort_losses, eager_losses)


def test_resume_from_checkpoint_continues_the_loss_curve(tmp_path: Path) -> None:
    options = {"save_strategy": "steps", "save_steps": 3}
    _, full = _train("bert", tmp_path / "full", ort=True, **options)
    _, resumed = _train("bert", tmp_path / "full", ort=True, **options,
                        resume=str(tmp_path / "full" / "checkpoint-3"))
    # The resumed log holds steps 1..3 from the checkpoint's state, then the steps it ran.
    assert len(resumed) == len(full) == 6
    assert resumed[:3] == full[:3]
    _assert_losses(resumed[3:], full[3:], rtol=1e-5)


def test_save_onnx_writes_graphs_to_output_dir(tmp_path: Path) -> None:
    _train("bert", tmp_path, ort=True, max_steps=1, save_onnx=True, onnx_prefix="tiny_bert")
    assert (tmp_path / "tiny_bert_training_forward.onnx").is_file()


@pytest.mark.parametrize(("overrides", "named"), [
    ({"save_onnx": True}, "onnx_prefix"),
    ({"fp16": True}, "fp16=True: float16 mixed precision needs a CUDA device"),
    ({"fp16_full_eval": True}, "needs a CUDA device.*bf16=True"),
    ({"deepspeed": {"zero_optimization": {"stage": 3}}}, "deepspeed with ZeRO stage 3"),
    ({"fsdp": True, "fsdp_config": {"version": 1}}, "FSDP1"),
    ({"torch_compile": True}, "torch_compile=True"),
    ({"torch_compile_backend": "inductor"}, "torch_compile_backend='inductor'"),
    ({"torch_compile_mode": "reduce-overhead"}, "torch_compile_mode='reduce-overhead'"),
    ({"activation_checkpointing_kwargs": {"offload": True}}, "offload"),
    ({"optim": "adamw_hf"}, "adamw_hf.*adamw_torch"),
    ({"optim": "adamw_apex_fused"}, "adamw_apex_fused.*adamw_ort_fused"),
    ({"onnx_log_level": "LOUD"}, "onnx_log_level"),
])
def test_refused_options_name_the_option(tmp_path: Path, overrides: dict, named: str) -> None:
    # use_cpu=True (as every test here): fp16 is refused as on a machine without CUDA.
    with pytest.raises(ValueError, match=named):
        _arguments(tmp_path, **overrides)


@pytest.mark.parametrize("overrides", [{"torch_compile_backend": "inductor"},
                                       {"torch_compile_mode": "max-autotune"}])
def test_plain_arguments_with_a_compile_spelling_are_refused(tmp_path: Path,
                                                             overrides: dict) -> None:
    """transformers turns torch_compile on for a backend or mode alone; ORTTrainer given plain
    TrainingArguments refuses what it derived."""
    args = _arguments(tmp_path, ort=False, **overrides)
    assert args.torch_compile
    with pytest.raises(ValueError, match="torch_compile"):
        ORTTrainer(model=_model("bert"), args=args, train_dataset=SyntheticSet("bert"))


@pytest.mark.parametrize("name", ["gradient_checkpointing", "activation_checkpointing"])
def test_gradient_checkpointing_losses_match_trainer(tmp_path: Path, name: str) -> None:
    """transformers 5 maps the deprecated gradient_checkpointing to activation_checkpointing;
    both checkpoint every layer with torch.utils.checkpoint, which the engine runs as
    recompute regions."""
    options = {name: True, "max_steps": 4}
    ort, ort_losses = _train("bert", tmp_path / "ort", ort=True, **options)
    _, eager_losses = _train("bert", tmp_path / "eager", ort=False, **options)
    assert ort.model.is_activation_checkpointing
    _assert_losses(ort_losses, eager_losses)
    assert ort_losses[0] != ort_losses[-1]


def test_bf16_on_cpu_matches_trainer(tmp_path: Path) -> None:
    """bf16=True: Trainer's bfloat16 autocast, which the engine runs on the CPU. Both runs
    round to bfloat16 in the same places but not in the same order: tolerance of bfloat16
    rounding over a few steps."""
    options = {"bf16": True, "max_steps": 4}
    _, ort_losses = _train("bert", tmp_path / "ort", ort=True, **options)
    _, eager_losses = _train("bert", tmp_path / "eager", ort=False, **options)
    _assert_losses(ort_losses, eager_losses, rtol=2e-2)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="fp16 training needs a CUDA device")
def test_fp16_on_cuda_matches_trainer(tmp_path: Path) -> None:
    options = {"fp16": True, "max_steps": 4, "use_cpu": False}
    ort, ort_losses = _train("bert", tmp_path / "ort", ort=True, **options)
    _, eager_losses = _train("bert", tmp_path / "eager", ort=False, **options)
    assert ort.accelerator.scaler is not None  # GradScaler, as Trainer uses it
    _assert_losses(ort_losses, eager_losses, rtol=2e-2)


@pytest.mark.slow
@pytest.mark.parametrize("label_smoothing", [0.0, 0.1])
def test_gpt2_causal_lm_losses_match_trainer(tmp_path: Path, label_smoothing: float) -> None:
    # With label smoothing Trainer shifts the labels of causal LMs itself.
    options = {"max_steps": 4, "label_smoothing_factor": label_smoothing}
    _, ort_losses = _train("gpt2", tmp_path / "ort", ort=True, **options)
    _, eager_losses = _train("gpt2", tmp_path / "eager", ort=False, **options)
    _assert_losses(ort_losses, eager_losses)


@pytest.mark.slow
def test_t5_seq2seq_losses_and_generation_match_trainer(tmp_path: Path) -> None:
    options = {"max_steps": 4, "predict_with_generate": True, "generation_max_length": 5}
    ort, ort_losses = _train("t5", tmp_path / "ort", ort=True, seq2seq=True, **options)
    eager, eager_losses = _train("t5", tmp_path / "eager", ort=False, seq2seq=True, **options)
    _assert_losses(ort_losses, eager_losses)
    test_set = SyntheticSet("t5", 4, seed=2)
    ort_pred, eager_pred = ort.predict(test_set), eager.predict(test_set)
    assert ort_pred.predictions.shape == eager_pred.predictions.shape
    assert (ort_pred.predictions == eager_pred.predictions).all()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ddp_worker(rank: int, port: int, out: str, results: dict) -> None:
    os.environ.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "RANK": str(rank),
                       "LOCAL_RANK": str(rank), "WORLD_SIZE": "2"})
    torch.set_num_threads(1)
    trainer, losses = _train("bert", Path(out), ort=True, max_steps=3, ddp_backend="gloo")
    wrapped = trainer.model_wrapped
    results[rank] = {
        "losses": losses,
        "wrapping": (type(wrapped).__name__, type(getattr(wrapped, "module", None)).__name__),
        "state": {k: v.clone() for k, v in trainer.model.state_dict().items()},
    }
    torch.distributed.destroy_process_group()


@pytest.mark.slow
def test_two_process_ddp_trains_ddp_of_ortmodule(tmp_path: Path) -> None:
    ctx = mp.get_context("spawn")
    with ctx.Manager() as manager:
        results = manager.dict()
        mp.start_processes(_ddp_worker, args=(_free_port(), str(tmp_path), results), nprocs=2,
                           join=True, start_method="spawn")
        reports = dict(results)
    assert reports[0]["wrapping"] == ("DistributedDataParallel", "ORTModule")
    assert len(reports[0]["losses"]) == 3
    # Gradients were all-reduced every step: both ranks hold the same parameters.
    for name, value in reports[0]["state"].items():
        torch.testing.assert_close(reports[1]["state"][name], value, rtol=0.0, atol=0.0)
