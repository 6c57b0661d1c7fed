"""Higher-order ops (``torch.no_grad()`` and ``torch.autocast`` regions) and bridge nodes
(``TorchCall``)."""

from __future__ import annotations

from typing import Any

import torch

from ortmodule.capture import bridge
from ortmodule.capture.common import OWN_DOMAIN, ExportError
from ortmodule.capture.fx.builder import SUBMODULE_KEY, Lowering, translate
from ortmodule.capture.fx.registry import TABLE


def _wrap_with_set_grad_enabled(lw: Lowering, node: Any, enabled: bool, submodule: Any,
                                *args: Any) -> Any:
    """The body of a ``torch.no_grad()`` (or enable_grad) region, inlined; the region's
    outputs were detached by ``trace.mark_no_grad_regions``."""
    return _inline(lw, node, submodule, args)


def _wrap_with_autocast(lw: Lowering, node: Any, device: str, dtype: Any, enabled: bool,
                        cache_enabled: bool, submodule: Any, *args: Any) -> Any:
    """The body of a ``torch.autocast`` region, inlined; ``autocast.insert_casts`` made
    the casts autocast does explicit in it."""
    return _inline(lw, node, submodule, args)


def _inline(lw: Lowering, node: Any, submodule: Any, args: Any) -> Any:
    graph_module = node.meta.get(SUBMODULE_KEY) or getattr(lw.program.graph_module,
                                                          submodule.target)
    out = translate(lw, graph_module.graph, [lw.value(a) for a in args])
    return list(out) if isinstance(out, (list, tuple)) else out


TABLE[torch.ops.higher_order.wrap_with_set_grad_enabled] = _wrap_with_set_grad_enabled
TABLE[torch.ops.higher_order.wrap_with_autocast] = _wrap_with_autocast


def _torch_call(lw: Lowering, node: Any, callable_id: int, inputs: Any) -> Any:
    call = lw.calls.get(callable_id)
    if call is None:
        raise ExportError(f"internal: bridged call #{callable_id} is not registered")
    outs = lw.op("TorchCall", [lw.tensor(i) for i in inputs], outputs=len(call.out_positions),
                 domain=OWN_DOMAIN, callable_id=int(callable_id), callable=call.name)
    return outs if isinstance(outs, list) else [outs]


TABLE[bridge.torch_call_op()] = _torch_call
