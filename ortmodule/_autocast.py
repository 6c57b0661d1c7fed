"""The torch.autocast state a call runs under: part of the graph-cache key, and the region
the capture traces forward inside."""

from __future__ import annotations

import torch


def state() -> tuple:
    """(device type, dtype, cache enabled) of the enabled autocast region, () outside one."""
    for device in ("cpu", "cuda"):
        if torch.is_autocast_enabled(device):
            return (device, torch.get_autocast_dtype(device), torch.is_autocast_cache_enabled())
    return ()


def traced_region(autocast: tuple, tensors: list[torch.Tensor],
                  param_slots: list) -> tuple[str, torch.dtype] | None:
    """The (device type, dtype) to trace forward under: the region applies where eager
    applies it, to ops on its device. The graph of a model on another device (its inputs',
    else its parameters', device; the CPU without either) is traced without it."""
    if not autocast:
        return None
    device = next((t.device.type for t in tensors), None)
    if device is None:
        params = (m._parameters[n] for m, n in param_slots)
        device = next((p.device.type for p in params if p is not None), "cpu")
    return (autocast[0], autocast[1]) if autocast[0] == device else None
