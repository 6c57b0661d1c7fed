// float16 conversions against an independent reference: a float16 value is
// sign * mantissa * 2^exponent computed with std::ldexp from its fields, and rounding to
// float16 is checked against the two float16 neighbours of a double.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>

#include "kernels/math/float16.h"

namespace ortmodule {
namespace {

double half_value(uint16_t h) {
  const int exp = (h >> 10) & 0x1f;
  const int man = h & 0x3ff;
  const double sign = (h & 0x8000) ? -1.0 : 1.0;
  if (exp == 0x1f) return man ? std::numeric_limits<double>::quiet_NaN() : sign * INFINITY;
  if (exp == 0) return sign * std::ldexp(static_cast<double>(man), -24);
  return sign * std::ldexp(static_cast<double>(man + 1024), exp - 25);
}

TEST(Float16, EveryBitPatternWidensExactly) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const double want = half_value(static_cast<uint16_t>(h));
    const float got = math::half_to_float(static_cast<uint16_t>(h));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << h;
    } else {
      EXPECT_EQ(static_cast<double>(got), want) << h;
      EXPECT_EQ(std::signbit(got), (h & 0x8000) != 0) << h;
    }
  }
}

TEST(Float16, EveryFiniteValueRoundTrips) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    if (((h >> 10) & 0x1f) == 0x1f) continue;
    const auto bits = static_cast<uint16_t>(h);
    EXPECT_EQ(math::double_to_half(half_value(bits)), bits) << h;
    EXPECT_EQ(math::float_to_half(math::half_to_float(bits)), bits) << h;
  }
}

TEST(Float16, RoundsToNearestEvenBetweenNeighbours) {
  // Midpoints between consecutive positive finite float16 values (normal and subnormal)
  // go to the even one; a hair above or below goes to the nearer one.
  for (uint16_t h = 0; h < 0x7bff; ++h) {
    const double lo = half_value(h), hi = half_value(static_cast<uint16_t>(h + 1));
    const double mid = (lo + hi) / 2;
    const uint16_t even = (h & 1) ? static_cast<uint16_t>(h + 1) : h;
    EXPECT_EQ(math::double_to_half(mid), even) << h;
    EXPECT_EQ(math::double_to_half(std::nextafter(mid, hi)), h + 1) << h;
    EXPECT_EQ(math::double_to_half(std::nextafter(mid, lo)), h) << h;
    EXPECT_EQ(math::double_to_half(-mid), even | 0x8000) << h;
  }
}

TEST(Float16, SpecialValues) {
  EXPECT_EQ(math::double_to_half(65504.0), 0x7bff);
  EXPECT_EQ(math::double_to_half(65519.99), 0x7bff);  // below the midpoint to 2^16
  EXPECT_EQ(math::double_to_half(65520.0), 0x7c00);   // the midpoint rounds (even) to inf
  EXPECT_EQ(math::double_to_half(1e300), 0x7c00);
  EXPECT_EQ(math::double_to_half(-INFINITY), 0xfc00);
  EXPECT_EQ(math::double_to_half(-0.0), 0x8000);
  EXPECT_EQ(math::double_to_half(1e-300), 0x0000);
  EXPECT_EQ(math::double_to_half(std::ldexp(1.0, -25)), 0x0000);  // half the smallest: even
  EXPECT_EQ(math::double_to_half(std::ldexp(1.5, -25)), 0x0001);
  const uint16_t nan = math::double_to_half(std::numeric_limits<double>::quiet_NaN());
  EXPECT_EQ(nan & 0x7c00, 0x7c00);
  EXPECT_NE(nan & 0x03ff, 0);
  // One rounding straight from double: via float32, 1 + 2^-11 + 2^-40 would first become
  // the tie 1 + 2^-11 and then round down to 1.
  EXPECT_EQ(math::double_to_half(1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40)), 0x3c01);
}

}  // namespace
}  // namespace ortmodule
