"""Floating-point representation and rounding functions through the fx exporter with no
bridging, against eager PyTorch: division with rounding_mode="trunc" and "floor" (floats
and 16-bit floats, trunc of integers; zero divisors, quotients that round to an integer),
nextafter and frexp bit for bit (signed zeros, subnormals, infinities, NaN) with eager's
gradients, and isclose (tolerances, infinities, NaN with and without equal_nan, integer and
boolean tensors)."""

from __future__ import annotations

import math

import pytest
import torch

from ortmodule import ORTModule
from tests.python.parity_utils import FX, Apply, check

NAN, INF = math.nan, math.inf


def t(*values: float, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.tensor(values, dtype=dtype)


def trunc_div(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.div(a, b, rounding_mode="trunc")


def floor_div(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.div(a, b, rounding_mode="floor")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_trunc_division_of_floats(dtype: torch.dtype) -> None:
    a = t(5.0, -5.0, 1.0, 0.0, -1.0, 7.5, -7.5, INF, NAN, 1e30, -0.0, 6.0, dtype=dtype)
    b = t(0.0, 0.0, -0.0, 0.0, 3.0, 2.0, 2.0, 3.0, 1.0, 1e-10, 5.0, -3.0, dtype=dtype)
    check(trunc_div, a, b, rtol=0, atol=0)  # the value, and a zero gradient for a and b
    check(lambda x: torch.div(x, 2.5, rounding_mode="trunc"), a, rtol=0, atol=0)
    check(trunc_div, torch.randn(3, 4, dtype=dtype) * 10, torch.randn(4, dtype=dtype))


def test_trunc_division_of_integers() -> None:
    check(trunc_div, torch.tensor([7, -7, 5, 0, -9]), torch.tensor([2, 2, -3, 4, -4]))
    check(trunc_div, torch.tensor([-128, 5, 127], dtype=torch.int8),
          torch.tensor([-1, 3, -2], dtype=torch.int8))
    check(trunc_div, torch.tensor([7, 200], dtype=torch.uint8),
          torch.tensor([2, 3], dtype=torch.uint8))
    check(lambda x: torch.div(x, 2, rounding_mode="trunc"), torch.tensor([7, -7, 5, 0]))
    check(trunc_div, torch.tensor([7, -7, 5, 0]), t(2.5, 2.0, -3.0, 4.0))  # float quotient


def test_trunc_division_by_integer_zero_raises_as_eager() -> None:
    a, b = torch.tensor([1, 2]), torch.tensor([0, 1])
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        trunc_div(a, b)
    with pytest.raises(RuntimeError, match="division by zero"):
        ORTModule(Apply(trunc_div), FX)(a, b)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("divide", [trunc_div, floor_div], ids=["trunc", "floor"])
def test_rounding_division_bit_for_bit(divide: object, dtype: torch.dtype) -> None:
    """Large quotients, where floor(a / b) is off by one from eager's (a - fmod(a, b)) / b
    (a / b rounds up to an integer), small ones, signed zeros, zero and infinite divisors;
    16-bit floats rounded after each step as eager's are."""
    gen = torch.Generator().manual_seed(0)
    a = torch.cat([torch.randn(20000, generator=gen) * 1e4, torch.randn(200, generator=gen),
                   t(5.0, -5.0, 0.0, -0.0, 1.0, -1.0, INF, -INF, NAN, 3.0, 7.5, -7.5, 1e-30)])
    b = torch.cat([torch.randn(20000, generator=gen) * 1e-2, torch.randn(200, generator=gen),
                   t(0.0, 0.0, 0.0, 0.0, -0.0, 3.0, 2.0, -2.0, 1.0, INF, -INF, 2.0, -1.0)])
    a, b = a.to(dtype), b.to(dtype)
    want = divide(a, b)
    got = ORTModule(Apply(divide), FX)(a, b)
    same = (want == got) & (want.signbit() == got.signbit()) | (want.isnan() & got.isnan())
    assert same.all(), (a[~same][:4], b[~same][:4], want[~same][:4], got[~same][:4])
    check(divide, a[-213:], b[-213:], rtol=0, atol=0)  # a zero gradient for a and b


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_nextafter(dtype: torch.dtype) -> None:
    tiny = torch.finfo(dtype).tiny
    a = t(0.0, 0.0, 1.0, 1.0, -0.0, NAN, INF, 3e38, tiny, -tiny / 4, 0.0, -0.0, 2.0, 5.0,
          dtype=dtype)
    b = t(1.0, -1.0, 1.0, 2.0, 0.0, 1.0, 0.0, INF, 0.0, 0.0, -0.0, 0.0, NAN, -INF, dtype=dtype)
    check(torch.nextafter, a, b, rtol=0, atol=0)  # a's gradient where a != b, none for b
    got = ORTModule(Apply(torch.nextafter), FX)(a, b)
    assert torch.equal(got.signbit(), torch.nextafter(a, b).signbit())
    check(torch.nextafter, torch.randn(3, 4, dtype=dtype), torch.randn(4, dtype=dtype),
          rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_nextafter_of_16_bit_floats_steps_on_their_bits(dtype: torch.dtype) -> None:
    """Every float16/bfloat16 bit pattern towards zeros, +-1, infinities, NaN and each other
    (not the float32 neighbour, which would round back to a)."""
    a = torch.arange(0, 1 << 16, dtype=torch.int32).to(torch.int16).view(dtype)
    targets = [torch.full_like(a, v) for v in (0.0, -0.0, 1.0, -1.0, INF, -INF, NAN)]
    model = ORTModule(Apply(torch.nextafter), FX)
    for b in [*targets, a.flip(0)]:
        want, got = torch.nextafter(a, b), model(a, b)
        same = (want.view(torch.int16) == got.view(torch.int16)) | (want.isnan() & got.isnan())
        assert same.all(), (a[~same][:4], b[~same][:4], want[~same][:4], got[~same][:4])
    check(torch.nextafter, torch.randn(3, 4).to(dtype), torch.randn(4).to(dtype), rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_frexp(dtype: torch.dtype) -> None:
    tiny = torch.finfo(dtype).tiny
    x = t(3.0, -5.5, 0.5, 1.0, 0.0, -0.0, INF, -INF, NAN, tiny, tiny / 8, 1e30, -1e-30,
          torch.finfo(dtype).max, dtype=dtype)
    # Mantissa and exponent bit for bit; the gradient dm / 2^e with eager's float32 2^e
    # (inf and zero gradients at the far ends of float64's range).
    check(torch.frexp, x, rtol=0, atol=0)
    check(lambda v: torch.frexp(v).mantissa, torch.randn(5, 6, dtype=dtype) * 1e3, rtol=0,
          atol=0)
    if dtype == torch.float64:
        check(torch.frexp, t(1e200, 1e-310, 1e-40, 3e38, dtype=dtype), rtol=0, atol=0)


def test_frexp_exponent_alone_has_no_gradient() -> None:
    x = torch.randn(6, requires_grad=True)
    e = ORTModule(Apply(lambda v: torch.frexp(v).exponent), FX)(x)
    assert e.dtype == torch.int32 and not e.requires_grad
    assert torch.equal(e, torch.frexp(x).exponent)


@pytest.mark.parametrize("equal_nan", [False, True])
def test_isclose_floats(equal_nan: bool) -> None:
    a = t(1.0, 1.0, 1.0, INF, INF, -INF, NAN, NAN, 0.0, 1e-9, 100.0, 100.0)
    b = t(1.0, 1.00001, 1.001, INF, -INF, 1e38, NAN, 1.0, -0.0, 0.0, 100.001, 100.01)
    check(lambda p, q: torch.isclose(p, q, equal_nan=equal_nan), a, b)
    check(lambda p, q: torch.isclose(p, q, rtol=1e-3, atol=0.5, equal_nan=equal_nan), a, b)
    check(lambda p, q: torch.isclose(p, q, rtol=0, atol=0, equal_nan=equal_nan), a, b)
    check(lambda p, q: torch.isclose(p.double(), q.double(), equal_nan=equal_nan), a, b)


def test_isclose_integers_and_booleans() -> None:
    a, b = torch.tensor([0, 5, 100, -3, 7]), torch.tensor([0, 6, 101, 3, 7])
    check(lambda p, q: torch.isclose(p, q, rtol=0.01, atol=0.0), a, b)
    check(lambda p, q: torch.isclose(p, q, atol=1.0), a, b)
    u, v = torch.tensor([0, 255, 3], dtype=torch.uint8), torch.tensor([1, 250, 3], dtype=torch.uint8)
    check(lambda p, q: torch.isclose(p, q, atol=1.5), u, v)
    check(lambda p, q: torch.isclose(p, q), torch.tensor([True, False, True]),
          torch.tensor([True, True, False]))
