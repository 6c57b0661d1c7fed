"""The Bessel family: torch.i0 and torch.special's i0e, i1, i1e, bessel_j0/j1, bessel_y0/y1,
modified_bessel_i0/i1/k0/k1, scaled_modified_bessel_k0/k1, airy_ai and spherical_bessel_j0.
Each is one ai.ortmodule op; integer inputs are taken in the result's float dtype, as torch
computes them. modified_bessel_i0/i1 are i0/i1's values, but torch gives them no gradient
(their results do not require grad), so their op's result passes through StopGradient; the
other functions' ops are themselves not differentiable, as torch's.
"""

from __future__ import annotations

from typing import Any

from ortmodule.capture.common import OWN_DOMAIN
from ortmodule.capture.fx.builder import Lowering
from ortmodule.capture.fx.ops.common import _out, aten
from ortmodule.capture.fx.registry import TABLE, Fn


def _unary(op_type: str, differentiable: bool = True) -> Fn:
    def translate(lw: Lowering, node: Any, x: Any) -> Any:
        y = lw.op(op_type, [lw.tensor(x, _out(node).dtype)], domain=OWN_DOMAIN)
        return y if differentiable else lw.op("StopGradient", [y], domain=OWN_DOMAIN)
    return translate


for _op, _onnx in (
        (aten.i0, "BesselI0"), (aten.special_i0e, "BesselI0e"),
        (aten.special_i1, "BesselI1"), (aten.special_i1e, "BesselI1e"),
        (aten.special_bessel_j0, "BesselJ0"), (aten.special_bessel_j1, "BesselJ1"),
        (aten.special_bessel_y0, "BesselY0"), (aten.special_bessel_y1, "BesselY1"),
        (aten.special_modified_bessel_k0, "BesselK0"),
        (aten.special_modified_bessel_k1, "BesselK1"),
        (aten.special_scaled_modified_bessel_k0, "BesselK0e"),
        (aten.special_scaled_modified_bessel_k1, "BesselK1e"),
        (aten.special_airy_ai, "AiryAi"),
        (aten.special_spherical_bessel_j0, "SphericalBesselJ0")):
    TABLE[_op.default] = _unary(_onnx)
TABLE[aten.special_modified_bessel_i0.default] = _unary("BesselI0", differentiable=False)
TABLE[aten.special_modified_bessel_i1.default] = _unary("BesselI1", differentiable=False)
