"""torch.special's orthogonal polynomials f(x, n) (Chebyshev T, U, V, W and their shifted
forms, Hermite H and He, Laguerre L, Legendre P): one ai.ortmodule OrthogonalPolynomial node,
x and n (tensors or Python numbers, broadcast) in the result's float dtype as eager converts
them, n truncated to an integer by the kernel. PyTorch gives these functions no gradient and
their outputs do not require grad; neither do the engine's.
"""

from __future__ import annotations

from typing import Any

from ortmodule.capture.common import OWN_DOMAIN
from ortmodule.capture.fx.builder import Lowering
from ortmodule.capture.fx.ops.common import _out, aten
from ortmodule.capture.fx.registry import TABLE, Fn

_KINDS = ("chebyshev_t", "chebyshev_u", "chebyshev_v", "chebyshev_w",
          "shifted_chebyshev_t", "shifted_chebyshev_u", "shifted_chebyshev_v",
          "shifted_chebyshev_w", "hermite_h", "hermite_he", "laguerre_l", "legendre_p")


def _polynomial(kind: str) -> Fn:
    def translate(lw: Lowering, node: Any, x: Any, n: Any) -> Any:
        dtype = _out(node).dtype
        return lw.op("OrthogonalPolynomial", [lw.tensor(x, dtype), lw.tensor(n, dtype)],
                     domain=OWN_DOMAIN, kind=kind)
    return translate


for _kind in _KINDS:  # "chebyshev_t": aten.special_chebyshev_polynomial_t
    _family, _letter = _kind.rsplit("_", 1)
    _packet = getattr(aten, f"special_{_family}_polynomial_{_letter}")
    for _overload in ("default", "x_scalar", "n_scalar"):
        TABLE[getattr(_packet, _overload)] = _polynomial(_kind)
