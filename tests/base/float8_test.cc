// The MX formats' 8-bit floats: every bit pattern decodes to the value the
// OCP MX specification gives it and encodes back to itself, and rounding
// from double is to nearest, ties to even, with NaN past the largest value
// (the expected bits are ml_dtypes' conversions of the same inputs).
#include "weft/base/float8.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

namespace weft {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

TEST(Float8Test, E4M3FNDecodesEveryPatternAndRoundTrips) {
  for (int b = 0; b < 256; ++b) {
    const double v = F8E4M3FNToDouble(static_cast<uint8_t>(b));
    if ((b & 0x7F) == 0x7F) {
      EXPECT_TRUE(std::isnan(v)) << b;
      continue;
    }
    const int e = (b >> 3) & 0xF, m = b & 7;
    const double magnitude =
        e == 0 ? m / 8.0 * std::ldexp(1.0, -6) : (1 + m / 8.0) * std::ldexp(1.0, e - 7);
    EXPECT_EQ(v, (b & 0x80) ? -magnitude : magnitude) << b;
    if (v != 0) {
      EXPECT_EQ(DoubleToF8E4M3FN(v), b) << b;
    }
  }
  EXPECT_EQ(F8E4M3FNToDouble(0x7E), 448.0);   // the largest finite value
  EXPECT_EQ(F8E4M3FNToDouble(0x01), 0x1p-9);  // the smallest subnormal
}

TEST(Float8Test, E4M3FNRoundsToNearestEvenAndOverflowsToNaN) {
  EXPECT_EQ(DoubleToF8E4M3FN(464), 0x7E);  // halfway 448 / 480: to even (448)
  EXPECT_EQ(DoubleToF8E4M3FN(465), 0x7F);  // nearer 480, past the largest: NaN
  EXPECT_EQ(DoubleToF8E4M3FN(500), 0x7F);
  EXPECT_EQ(DoubleToF8E4M3FN(-kInf), 0xFF);
  EXPECT_TRUE(std::isnan(F8E4M3FNToDouble(DoubleToF8E4M3FN(kNaN))));
  EXPECT_EQ(DoubleToF8E4M3FN(240), 119);  // 240 exactly
  EXPECT_EQ(DoubleToF8E4M3FN(250), 120);  // between 240 and 256: 256
  EXPECT_EQ(DoubleToF8E4M3FN(0.001), 1);  // nearest subnormal: 2^-9
  EXPECT_EQ(DoubleToF8E4M3FN(0.0013), 1);
  EXPECT_EQ(DoubleToF8E4M3FN(-0.0), 0x80);    // the sign of zero is kept
  EXPECT_EQ(DoubleToF8E4M3FN(1.0625), 0x38);  // halfway 1 / 1.125: to even (1)
  EXPECT_EQ(DoubleToF8E4M3FN(1.1875), 0x3A);  // halfway 1.125 / 1.25: to even (1.25)
  // Any value lands on one of its two neighbours, the nearer one.
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<double> u(-440, 440);
  for (int i = 0; i < 10000; ++i) {
    const double v = u(rng) * std::ldexp(1.0, -(i % 12));
    const double r = F8E4M3FNToDouble(DoubleToF8E4M3FN(v));
    const double quantum = std::ldexp(1.0, std::max(std::ilogb(std::fabs(v)), -6) - 3);
    EXPECT_LE(std::fabs(r - v), quantum / 2) << v;
  }
}

TEST(Float8Test, E8M0FNUIsAPowerOfTwoWithNoZeroOrSign) {
  for (int b = 0; b < 255; ++b) {
    EXPECT_EQ(F8E8M0FNUToDouble(static_cast<uint8_t>(b)), std::ldexp(1.0, b - 127)) << b;
    EXPECT_EQ(DoubleToF8E8M0FNU(std::ldexp(1.0, b - 127)), b) << b;
  }
  EXPECT_TRUE(std::isnan(F8E8M0FNUToDouble(0xFF)));
  EXPECT_EQ(DoubleToF8E8M0FNU(2.5), 128);    // 1.25 x 2: down to 2
  EXPECT_EQ(DoubleToF8E8M0FNU(3.0), 129);    // 1.5 x 2, halfway: up to 4
  EXPECT_EQ(DoubleToF8E8M0FNU(0.75), 127);   // 1.5 x 2^-1: up to 1
  EXPECT_EQ(DoubleToF8E8M0FNU(0.0), 0xFF);   // no zero
  EXPECT_EQ(DoubleToF8E8M0FNU(-1.0), 0xFF);  // no sign
  EXPECT_EQ(DoubleToF8E8M0FNU(kInf), 0xFF);  // no infinity
  EXPECT_EQ(DoubleToF8E8M0FNU(1e-40), 0);    // below 2^-127: the smallest
  EXPECT_EQ(DoubleToF8E8M0FNU(0x1p128), 0xFF);
}

}  // namespace
}  // namespace weft
