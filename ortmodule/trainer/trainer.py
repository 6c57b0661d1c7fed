"""ORTTrainer: transformers.Trainer with the model trained under ORTModule.

The model is wrapped as ORTModule(model) (or ORTModule(ModuleWithLoss(model)) with
use_module_with_loss) when training starts, before the optimizer is created, so that
accelerate's data parallel wrapping gives DDP(ORTModule(model)). While training runs,
``self.model`` is the ORTModule; outside ``train()`` it is the user's model again. Evaluation,
prediction, generation and saving always use the user's model, eagerly.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from transformers import Seq2SeqTrainer, Trainer

from ortmodule.module import ORTModule
from ortmodule.optim import FusedAdamW
from ortmodule.trainer.arguments import ORTTrainingArguments, _refuse_unsupported

LossFunction = Callable[..., torch.Tensor]


class ModuleWithLoss(nn.Module):
    """The model and Trainer.compute_loss as one module, so the loss (label smoothing
    included) is part of the graph ORTModule compiles."""

    def __init__(self, model: nn.Module, compute_loss: LossFunction) -> None:
        super().__init__()
        self.model = model
        self._compute_loss = compute_loss

    def forward(self, inputs: dict[str, torch.Tensor],
                num_items_in_batch: torch.Tensor | None = None) -> torch.Tensor:
        return self._compute_loss(self.model, inputs, return_outputs=False,
                                  num_items_in_batch=num_items_in_batch)


def _strip_data_parallel(model: nn.Module) -> nn.Module:
    while isinstance(model, (nn.parallel.DistributedDataParallel, nn.DataParallel)):
        model = model.module
    return model


def _is_module_with_loss(model: nn.Module) -> bool:
    inner = _strip_data_parallel(model)
    return isinstance(inner, ORTModule) and isinstance(inner.module, ModuleWithLoss)


def _unwrapping_ortmodule(unwrap: Callable[..., nn.Module]) -> Callable[..., nn.Module]:
    def unwrap_model(model: nn.Module, *args: Any, **kwargs: Any) -> nn.Module:
        model = unwrap(model, *args, **kwargs)
        if isinstance(model, ORTModule):
            model = model.module
        return model.model if isinstance(model, ModuleWithLoss) else model
    return unwrap_model


def _refuse_sharding_accelerate_ignores(trainer: Trainer) -> None:
    """accelerate turns fsdp into FSDP only for GPU-like distributed types: on a CPU-only
    machine (or with use_cpu=True) Trainer would train with DDP instead, every rank holding the
    whole model. The same for deepspeed where accelerate does not enable it. Raises rather than
    train unsharded."""
    args = trainer.args
    where = ("accelerate runs this job as "
             f"{getattr(trainer.accelerator.state, 'distributed_type', 'no distribution')}")
    if args.fsdp and not trainer.is_fsdp_enabled:
        raise ValueError(
            f"fsdp was requested but {where}, which ignores fsdp (accelerate enables FSDP only "
            "on GPU-like devices) and would train every rank on the whole model. On a CPU-only "
            "machine shard in your own loop with fully_shard(ORTModule(block)) per block and "
            "fully_shard(model) (docs/distributed.md), use deepspeed (ZeRO 1 or 2), or drop "
            "fsdp to train DistributedDataParallel(ORTModule(model))")
    if args.deepspeed and not trainer.is_deepspeed_enabled:
        raise ValueError(
            f"deepspeed was requested but {where}, which did not enable DeepSpeed and would "
            "train every rank on the whole model. Launch one process per rank (torchrun) so "
            "that accelerate enables it, call deepspeed.initialize(model=ORTModule(model), ...) "
            "in your own loop (docs/distributed.md), or drop deepspeed to train "
            "DistributedDataParallel(ORTModule(model))")


class ORTTrainer(Trainer):
    """transformers.Trainer whose training steps run on the ortmodule engine.

    Takes ORTTrainingArguments (plain TrainingArguments are accepted and mean the defaults of
    the ORT options). Everything else is Trainer's: data loading, gradient accumulation,
    max_grad_norm, schedulers, callbacks, logging, checkpoints and resume.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if not isinstance(self.args, ORTTrainingArguments):
            # Plain TrainingArguments were validated by transformers only.
            _refuse_unsupported(self.args)
        _refuse_sharding_accelerate_ignores(self)
        self._original_model: nn.Module | None = None
        self._ort_model: ORTModule | None = None
        # Trainer unwraps through the accelerator (label smoothing picks causal-LM label shifting
        # by the unwrapped model's class, saving checks for PreTrainedModel); accelerate knows
        # DDP and torch.compile wrappers but not ORTModule.
        self.accelerator.unwrap_model = _unwrapping_ortmodule(self.accelerator.unwrap_model)

    # ---- options ----

    def _ort_option(self, name: str, default: Any) -> Any:
        return getattr(self.args, name, default)

    @staticmethod
    def get_optimizer_cls_and_kwargs(args: Any, model: Any = None) -> tuple[Any, dict[str, Any]]:
        if str(args.optim) == "adamw_ort_fused":
            return FusedAdamW, {"lr": args.learning_rate, "betas": (args.adam_beta1, args.adam_beta2),
                                "eps": args.adam_epsilon}
        return Trainer.get_optimizer_cls_and_kwargs(args, model)

    # ---- wrapping ----

    def _wrap_blocks_for_fsdp(self) -> None:
        """FSDP2 shards what accelerate's auto-wrap policy picks (transformer_layer_cls_to_wrap,
        else the model's _no_split_modules) and the root. Each such block becomes
        ORTModule(block) in place and the policy picks the ORTModules, so accelerate applies
        fully_shard(ORTModule(block)) per block and fully_shard(model) at the root (the form
        docs/distributed.md describes); the rest of the model runs eagerly."""
        from torch.distributed.fsdp.wrap import transformer_auto_wrap_policy

        plugin = self.accelerator.state.fsdp_plugin
        model = self.model
        names = plugin.transformer_cls_names_to_wrap or list(
            getattr(model, "_no_split_modules", None) or [])
        if names == ["ORTModule"]:
            return  # already wrapped by an earlier train()
        if not names:
            raise ValueError("ORTTrainer with fsdp wraps each transformer block in ORTModule and "
                             "shards it: set fsdp_config['transformer_layer_cls_to_wrap'] (the "
                             "model has no _no_split_modules to take them from)")
        debug = self.args.debug_options() if isinstance(self.args, ORTTrainingArguments) else None
        wrapped = 0
        for parent in list(model.modules()):
            for child_name, child in list(parent.named_children()):
                if type(child).__name__ in names:
                    setattr(parent, child_name, ORTModule(child, debug))
                    wrapped += 1
        if not wrapped:
            raise ValueError(f"ORTTrainer with fsdp found no block of the classes {names} in "
                             f"{type(model).__name__} to wrap in ORTModule")
        plugin.transformer_cls_names_to_wrap = ["ORTModule"]
        plugin.auto_wrap_policy = transformer_auto_wrap_policy

    def _wrap_in_ortmodule(self) -> None:
        if isinstance(self.model, ORTModule):
            return
        if self.is_fsdp_enabled:
            self._wrap_blocks_for_fsdp()
            return
        original = self.model
        if self._ort_model is None or self._original_model is not original:
            debug = (self.args.debug_options() if isinstance(self.args, ORTTrainingArguments)
                     else None)
            target: nn.Module = original
            if self._ort_option("use_module_with_loss", False):
                target = ModuleWithLoss(original, super().compute_loss)
            self._ort_model = ORTModule(target, debug)
            self._original_model = original
        if self.model_wrapped is original:
            self.model_wrapped = self._ort_model
        self.model = self._ort_model

    def _restore_original_model(self) -> None:
        if self._original_model is not None and self.model is self._ort_model:
            self.model = self._original_model

    def _prepare_for_training(self, max_steps: int, train_dataloader: Any,
                              resume_from_checkpoint: Any) -> Any:
        # Before super() creates the optimizer and lets accelerate wrap for data parallel.
        self._wrap_in_ortmodule()
        return super()._prepare_for_training(max_steps, train_dataloader, resume_from_checkpoint)

    def _inner_training_loop(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super()._inner_training_loop(*args, **kwargs)
        finally:
            self._restore_original_model()

    def _wrap_model(self, model: nn.Module, training: bool = True, dataloader: Any = None) -> nn.Module:
        if not training and isinstance(model, ORTModule) and self._original_model is not None:
            # Evaluation and prediction run the user's model eagerly.
            model = self._original_model
        return super()._wrap_model(model, training=training, dataloader=dataloader)

    # ---- loss ----

    def compute_loss(self, model: nn.Module, inputs: dict[str, Any], return_outputs: bool = False,
                     num_items_in_batch: Any = None) -> Any:
        if _is_module_with_loss(model):
            if return_outputs:
                raise ValueError("use_module_with_loss computes only the loss inside the graph; "
                                 "outputs are not returned (evaluation runs the model eagerly)")
            return model(dict(inputs), num_items_in_batch)
        return super().compute_loss(model, inputs, return_outputs=return_outputs,
                                    num_items_in_batch=num_items_in_batch)

    # ---- saving ----

    def _save(self, output_dir: str | None = None, state_dict: dict | None = None) -> None:
        # save_pretrained of the user's model, so the result loads in plain transformers.
        wrapped = self.model
        if self._original_model is not None:
            self.model = self._original_model
        try:
            super()._save(output_dir, state_dict=None if _is_module_with_loss(wrapped) else state_dict)
        finally:
            self.model = wrapped


class ORTSeq2SeqTrainer(Seq2SeqTrainer, ORTTrainer):
    """Seq2SeqTrainer on the ortmodule engine. With predict_with_generate, generation runs the
    user's model eagerly (generate() is a Python loop over single-token steps)."""
