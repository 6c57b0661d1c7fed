"""Fused multi-tensor optimizers: drop-in torch.optim.AdamW and torch.optim.SGD.

    from ortmodule.optim import FusedAdamW
    opt = FusedAdamW(model.parameters(), lr=1e-3, weight_decay=1e-2)

One C++ call per parameter group updates every parameter, reading and writing each element
once: on the engine's thread pool for CPU parameters, and with one CUDA kernel launch per dtype
on torch's current stream for CUDA parameters (in a CUDA build of the extension). On the CPU
the arithmetic reproduces torch.optim.AdamW / torch.optim.SGD with foreach=True bit for bit
(see csrc/optim/multi_tensor.h); on CUDA it is the same per-element math (kernels/math/optim.h)
with fused multiply-adds and the IEEE square root. The state uses torch's keys, so state dicts
move between them in both directions.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch

from ortmodule import _C

__all__ = ["FusedAdamW", "FusedSGD"]

# torch's vectorized CPU kernels (AVX2/AVX-512) evaluate a*b + c as one fused multiply-add;
# its DEFAULT kernels round the product first. The fused optimizers reproduce whichever runs.
_CAPABILITIES_WITH_FMA = ("AVX2", "AVX512")
_CAPABILITIES_WITHOUT_FMA = ("DEFAULT",)


def _torch_uses_fused_multiply_add(optimizer: str) -> bool:
    capability = torch.backends.cpu.get_cpu_capability()
    if capability in _CAPABILITIES_WITHOUT_FMA:
        return False
    if capability in _CAPABILITIES_WITH_FMA:
        if not _C._cpu_has_fused_multiply_add():
            raise RuntimeError(
                f"{optimizer}: torch reports CPU capability {capability} but the CPU lacks "
                "AVX2/FMA; set ATEN_CPU_CAPABILITY=default"
            )
        return True
    raise RuntimeError(
        f"{optimizer}: torch's CPU capability {capability!r} is not supported (expected one of "
        f"{_CAPABILITIES_WITHOUT_FMA + _CAPABILITIES_WITH_FMA}); use torch.optim instead"
    )


def _check_number(optimizer: str, name: str, value: Any) -> float:
    if isinstance(value, torch.Tensor) or not isinstance(value, (int, float)):
        raise TypeError(
            f"{optimizer}: {name} must be a Python number, got {type(value).__name__}"
        )
    return float(value)


def _group_device(
    optimizer: str,
    index: int,
    group: dict[str, Any],
    params: list[torch.Tensor],
    positions: list[int],
) -> torch.device:
    """The one device of a group's parameters that have gradients; refuses a group spanning
    devices, and CUDA parameters where the extension has no CUDA kernels."""
    names = group.get("param_names")

    def label(i: int) -> str:
        where = f"param_groups[{index}]['params'][{positions[i]}]"
        return where + (f" ('{names[positions[i]]}')" if names is not None else "")

    device = params[0].device
    others = [i for i, p in enumerate(params) if p.device != device]
    if others:
        raise ValueError(
            f"{optimizer}: {label(0)} is on {device} but {label(others[0])} is on "
            f"{params[others[0]].device}; one step updates one device's parameters: give each "
            "device's parameters a parameter group of their own"
        )
    if device.type == "cuda" and not _C._fused_optimizers_have_cuda_kernels():
        raise ValueError(
            f"{optimizer}: {label(0)} is on {device} but this build of ortmodule has no CUDA "
            "kernels (a CPU build): build it against a CUDA build of torch with nvcc "
            "(docs/install.md), or use torch.optim"
        )
    return device


def _scalar_dtype() -> torch.dtype:
    # torch.optim keeps state['step'] in float32 unless float64 is the default dtype.
    return torch.float64 if torch.get_default_dtype() == torch.float64 else torch.float32


class FusedAdamW(torch.optim.Optimizer):
    """AdamW (decoupled weight decay) with torch.optim.AdamW's arguments, state and results.

    State per parameter: 'step' (a float tensor), 'exp_avg', 'exp_avg_sq' and, with amsgrad,
    'max_exp_avg_sq'. Parameters without a gradient are skipped. Only dense float32/float64
    parameters on the CPU or (CUDA build) one CUDA device per group are accepted; the error
    names the parameter otherwise. state['step'] stays a CPU tensor, as torch.optim.AdamW's
    without capturable/fused, so no step reads the device.

    match_torch_sqrt=True (the default) takes the square roots from torch.sqrt, so results
    equal torch.optim.AdamW(foreach=True)'s bitwise; torch.sqrt is MKL's vector square root,
    which is slow on some CPUs. False uses the IEEE square root in the same single pass over
    memory (as torch.optim.AdamW(fused=True) does): faster, equal to torch's within a few ulps.
    """

    def __init__(
        self,
        params: Iterable[torch.Tensor] | Iterable[dict[str, Any]],
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 1e-2,
        amsgrad: bool = False,
        *,
        maximize: bool = False,
        match_torch_sqrt: bool = True,
    ) -> None:
        name = type(self).__name__
        lr = _check_number(name, "lr", lr)
        if lr < 0.0:
            raise ValueError(f"{name}: invalid learning rate {lr} (must be >= 0)")
        if _check_number(name, "eps", eps) < 0.0:
            raise ValueError(f"{name}: invalid eps {eps} (must be >= 0)")
        if len(betas) != 2:
            raise ValueError(f"{name}: betas must be a pair (beta1, beta2), got {betas!r}")
        for i, beta in enumerate(betas):
            if not 0.0 <= _check_number(name, f"betas[{i}]", beta) < 1.0:
                raise ValueError(f"{name}: invalid beta parameter at index {i}: {beta}")
        if _check_number(name, "weight_decay", weight_decay) < 0.0:
            raise ValueError(f"{name}: invalid weight_decay {weight_decay} (must be >= 0)")
        defaults = {
            "lr": lr,
            "betas": (float(betas[0]), float(betas[1])),
            "eps": float(eps),
            "weight_decay": float(weight_decay),
            "amsgrad": bool(amsgrad),
            "maximize": bool(maximize),
            "match_torch_sqrt": bool(match_torch_sqrt),
        }
        super().__init__(params, defaults)
        self._fused_multiply_add = _torch_uses_fused_multiply_add(name)

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        # Not part of torch's pickled optimizer state (defaults, state, param_groups).
        self._fused_multiply_add = _torch_uses_fused_multiply_add(type(self).__name__)
        for group in self.param_groups:
            group.setdefault("amsgrad", False)
            group.setdefault("maximize", False)
            group.setdefault("match_torch_sqrt", True)
            for p in group["params"]:
                p_state = self.state.get(p, {})
                if len(p_state) != 0 and not torch.is_tensor(p_state["step"]):
                    p_state["step"] = torch.tensor(float(p_state["step"]), dtype=_scalar_dtype())

    @torch.no_grad()
    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """One AdamW update of every parameter that has a gradient; returns closure()'s loss."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        name = type(self).__name__
        for index, group in enumerate(self.param_groups):
            params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, steps, positions = (
                [], [], [], [], [], [], []
            )
            amsgrad = bool(group["amsgrad"])
            if group.get("decoupled_weight_decay", True) is False and group["weight_decay"] != 0:
                raise ValueError(
                    f"{name}: param_groups[{index}] has decoupled_weight_decay=False (state loaded "
                    "from torch.optim.Adam, whose weight decay is an L2 term in the gradient); "
                    "FusedAdamW applies decoupled (AdamW) decay: use torch.optim.Adam for it"
                )
            with_grad = [(pos, p) for pos, p in enumerate(group["params"]) if p.grad is not None]
            if not with_grad:
                continue
            _group_device(name, index, group, [p for _, p in with_grad], [i for i, _ in with_grad])
            for position, p in with_grad:
                state = self.state[p]
                if len(state) == 0:
                    state["step"] = torch.tensor(0.0, dtype=_scalar_dtype())
                    state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                    state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                    if amsgrad:
                        state["max_exp_avg_sq"] = torch.zeros_like(
                            p, memory_format=torch.preserve_format
                        )
                elif amsgrad and "max_exp_avg_sq" not in state:
                    raise RuntimeError(
                        f"{name}: param_groups[{index}]['params'][{position}] has state without "
                        "'max_exp_avg_sq' but the group has amsgrad=True (state loaded from an "
                        "optimizer without amsgrad?)"
                    )
                params.append(p)
                grads.append(p.grad)
                exp_avgs.append(state["exp_avg"])
                exp_avg_sqs.append(state["exp_avg_sq"])
                if amsgrad:
                    max_exp_avg_sqs.append(state["max_exp_avg_sq"])
                steps.append(state["step"])
                positions.append(position)
            if not params:
                continue
            beta1, beta2 = group["betas"]
            _C._fused_adamw_step(
                params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, steps, positions,
                index, group.get("param_names"),
                lr=_check_number(name, "lr", group["lr"]),
                beta1=_check_number(name, "betas[0]", beta1),
                beta2=_check_number(name, "betas[1]", beta2),
                eps=_check_number(name, "eps", group["eps"]),
                weight_decay=_check_number(name, "weight_decay", group["weight_decay"]),
                amsgrad=amsgrad,
                maximize=bool(group["maximize"]),
                fused_multiply_add=self._fused_multiply_add,
                match_torch_sqrt=bool(group["match_torch_sqrt"]),
            )  # fmt: skip
        return loss


class FusedSGD(torch.optim.Optimizer):
    """SGD with torch.optim.SGD's arguments, state ('momentum_buffer') and results.

    Unlike torch.optim.SGD(foreach=True) with nesterov, the gradients are left unchanged.
    """

    def __init__(
        self,
        params: Iterable[torch.Tensor] | Iterable[dict[str, Any]],
        lr: float = 1e-3,
        momentum: float = 0.0,
        dampening: float = 0.0,
        weight_decay: float = 0.0,
        nesterov: bool = False,
        *,
        maximize: bool = False,
    ) -> None:
        name = type(self).__name__
        if _check_number(name, "lr", lr) < 0.0:
            raise ValueError(f"{name}: invalid learning rate {lr} (must be >= 0)")
        if _check_number(name, "momentum", momentum) < 0.0:
            raise ValueError(f"{name}: invalid momentum {momentum} (must be >= 0)")
        _check_number(name, "dampening", dampening)
        if _check_number(name, "weight_decay", weight_decay) < 0.0:
            raise ValueError(f"{name}: invalid weight_decay {weight_decay} (must be >= 0)")
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError(f"{name}: nesterov momentum requires a momentum and zero dampening")
        defaults = {
            "lr": float(lr),
            "momentum": float(momentum),
            "dampening": float(dampening),
            "weight_decay": float(weight_decay),
            "nesterov": bool(nesterov),
            "maximize": bool(maximize),
        }
        super().__init__(params, defaults)
        self._fused_multiply_add = _torch_uses_fused_multiply_add(name)

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        self._fused_multiply_add = _torch_uses_fused_multiply_add(type(self).__name__)
        for group in self.param_groups:
            group.setdefault("nesterov", False)
            group.setdefault("maximize", False)

    @torch.no_grad()
    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """One SGD update of every parameter that has a gradient; returns closure()'s loss."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        name = type(self).__name__
        for index, group in enumerate(self.param_groups):
            momentum = _check_number(name, "momentum", group["momentum"])
            params, grads, buffers, first_steps, positions = [], [], [], [], []
            new_buffers: list[tuple[dict[str, Any], torch.Tensor]] = []
            with_grad = [(pos, p) for pos, p in enumerate(group["params"]) if p.grad is not None]
            if not with_grad:
                continue
            _group_device(name, index, group, [p for _, p in with_grad], [i for i, _ in with_grad])
            for position, p in with_grad:
                params.append(p)
                grads.append(p.grad)
                positions.append(position)
                if momentum != 0:
                    state = self.state[p]
                    buffer = state.get("momentum_buffer")
                    first_steps.append(buffer is None)
                    if buffer is None:
                        # Written as the gradient by the kernel; kept only once that ran.
                        buffer = torch.empty_like(p, memory_format=torch.preserve_format)
                        new_buffers.append((state, buffer))
                    buffers.append(buffer)
            if not params:
                continue
            _C._fused_sgd_step(
                params, grads, buffers, first_steps, positions, index,
                group.get("param_names"),
                lr=_check_number(name, "lr", group["lr"]),
                momentum=momentum,
                dampening=_check_number(name, "dampening", group["dampening"]),
                weight_decay=_check_number(name, "weight_decay", group["weight_decay"]),
                nesterov=bool(group["nesterov"]),
                maximize=bool(group["maximize"]),
                fused_multiply_add=self._fused_multiply_add,
            )  # fmt: skip
            for state, buffer in new_buffers:
                state["momentum_buffer"] = buffer
        return loss
