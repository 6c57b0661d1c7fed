"""Cholesky and Householder QR: torch.linalg.cholesky(_ex) and torch.cholesky (ai.ortmodule
Cholesky, L and LAPACK's info; the raising forms fail where a matrix is not positive definite,
as eager), cholesky_solve, cholesky_inverse, geqrf (not differentiable, as in torch),
torch.linalg.qr and torch.qr (LinalgQr; R's diagonal signs as LAPACK's), householder_product
and ormqr. The engine computes in double per matrix and gives torch's gradients.
"""

from __future__ import annotations

from typing import Any

from ortmodule.capture.common import OWN_DOMAIN
from ortmodule.capture.fx.builder import Lowering
from ortmodule.capture.fx.ops.common import aten
from ortmodule.capture.fx.registry import register


def _cholesky(lw: Lowering, x: Any, upper: bool, check_errors: bool) -> list[str]:
    return lw.op("Cholesky", [lw.tensor(x)], outputs=2, domain=OWN_DOMAIN, upper=int(upper),
                 check_errors=int(check_errors))


@register(aten.linalg_cholesky_ex.default)
def _linalg_cholesky_ex(lw: Lowering, node: Any, x: Any, upper: bool = False,
                        check_errors: bool = False) -> Any:
    return _cholesky(lw, x, upper, check_errors)


@register(aten.linalg_cholesky.default)
def _linalg_cholesky(lw: Lowering, node: Any, x: Any, upper: bool = False) -> Any:
    return _cholesky(lw, x, upper, True)[0]


def _if_present(name: str) -> list[Any]:
    """The default overload of aten.<name>, where this torch still has it (torch.cholesky
    and torch.qr are gone from torch 2.14)."""
    packet = getattr(aten, name, None)
    return [packet.default] if packet is not None else []


@register(*_if_present("cholesky"))
def _cholesky_op(lw: Lowering, node: Any, x: Any, upper: bool = False) -> Any:
    return _cholesky(lw, x, upper, True)[0]


@register(aten.cholesky_solve.default)
def _cholesky_solve(lw: Lowering, node: Any, b: Any, factor: Any, upper: bool = False) -> Any:
    return lw.op("CholeskySolve", [lw.tensor(b), lw.tensor(factor)], domain=OWN_DOMAIN,
                 upper=int(upper))


@register(aten.cholesky_inverse.default)
def _cholesky_inverse(lw: Lowering, node: Any, factor: Any, upper: bool = False) -> Any:
    return lw.op("CholeskyInverse", [lw.tensor(factor)], domain=OWN_DOMAIN, upper=int(upper))


@register(aten.geqrf.default)
def _geqrf(lw: Lowering, node: Any, x: Any) -> Any:
    return lw.op("Geqrf", [lw.tensor(x)], outputs=2, domain=OWN_DOMAIN)


@register(aten.linalg_qr.default)
def _linalg_qr(lw: Lowering, node: Any, x: Any, mode: str = "reduced") -> Any:
    return lw.op("LinalgQr", [lw.tensor(x)], outputs=2, domain=OWN_DOMAIN, mode=mode)


@register(*_if_present("qr"))
def _qr(lw: Lowering, node: Any, x: Any, some: bool = True) -> Any:
    return lw.op("LinalgQr", [lw.tensor(x)], outputs=2, domain=OWN_DOMAIN,
                 mode="reduced" if some else "complete")


@register(aten.linalg_householder_product.default)
def _householder_product(lw: Lowering, node: Any, v: Any, tau: Any) -> Any:
    return lw.op("HouseholderProduct", [lw.tensor(v), lw.tensor(tau)], domain=OWN_DOMAIN)


@register(aten.ormqr.default)
def _ormqr(lw: Lowering, node: Any, a: Any, tau: Any, c: Any, left: bool = True,
           transpose: bool = False) -> Any:
    return lw.op("Ormqr", [lw.tensor(a), lw.tensor(tau), lw.tensor(c)], domain=OWN_DOMAIN,
                 left=int(left), transpose=int(transpose))
