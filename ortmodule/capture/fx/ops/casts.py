"""No-ops, identities and casts."""

from __future__ import annotations

from typing import Any

from ortmodule.capture.common import OWN_DOMAIN
from ortmodule.capture.fx.builder import Lowering, onnx_dtype
from ortmodule.capture.fx.ops.common import _out, aten
from ortmodule.capture.fx.registry import register


@register(aten._assert_tensor_metadata.default, aten._assert_scalar.default,
          aten.sym_constrain_range_for_size.default, aten.sym_constrain_range.default)
def _noop(lw: Lowering, node: Any, *args: Any) -> Any:
    return None


@register(aten.clone.default, aten.contiguous.default, aten.alias.default,
          aten.lift_fresh_copy.default)
def _identity(lw: Lowering, node: Any, x: Any, *rest: Any) -> Any:
    return lw.op("Identity", [lw.tensor(x)])


@register(aten.detach.default, aten.detach_.default)
def _detach(lw: Lowering, node: Any, x: Any) -> Any:
    return lw.op("StopGradient", [lw.tensor(x)], domain=OWN_DOMAIN)


# The ops that convert a tensor to another dtype or device (none is on an autocast list).
CASTS = (aten.to.dtype, aten.to.dtype_layout, aten.to.device, aten._to_copy.default,
         aten.to.other, aten.type_as.default)


@register(*CASTS)
def _to(lw: Lowering, node: Any, x: Any, *rest: Any) -> Any:
    want = _out(node).dtype
    value = lw.tensor(x)
    if lw.dtype_of(x) == want:
        return lw.op("Identity", [value])
    return lw.op("Cast", [value], to=onnx_dtype(want))
