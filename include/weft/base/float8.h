// The 8-bit floats of the OCP Microscaling (MX) formats, as XLA names them:
//   f8e4m3fn   sign, 4 exponent bits (bias 7), 3 mantissa bits; no
//              infinity, NaN is S.1111.111; largest finite 448; subnormals.
//   f8e8m0fnu  8 exponent bits (bias 127), no sign, no mantissa: 2^(e-127);
//              0xFF is NaN; no zero. An MX block's scale.
// Storage types only (one byte each): arithmetic converts to float. Rounding
// from a wider float is to nearest, ties to even, as ml_dtypes converts; a
// value past the largest finite one becomes NaN (neither type has infinity).
// f8e8m0fnu has no sign and no zero: a negative value or zero becomes NaN, a
// positive one below 2^-127 becomes 2^-127.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>

namespace weft {

inline double F8E4M3FNToDouble(uint8_t bits) {
  const int exponent = (bits >> 3) & 0xF, mantissa = bits & 0x7;
  const double sign = (bits & 0x80) != 0 ? -1.0 : 1.0;
  if (exponent == 0xF && mantissa == 0x7) return std::numeric_limits<double>::quiet_NaN();
  if (exponent == 0) return sign * std::ldexp(mantissa, -9);  // subnormal: m/8 * 2^-6
  return sign * std::ldexp(8 + mantissa, exponent - 10);      // (1 + m/8) * 2^(e-7)
}

inline uint8_t DoubleToF8E4M3FN(double v) {
  if (std::isnan(v)) return 0x7F;
  const uint8_t sign = std::signbit(v) ? 0x80 : 0x00;
  const double a = std::fabs(v);
  if (std::isinf(a)) return static_cast<uint8_t>(sign | 0x7F);
  // Quantum of a's binade (subnormals share the smallest normal binade's).
  int exp2 = 0;
  std::frexp(a, &exp2);                                   // a = f * 2^exp2, f in [0.5, 1)
  const int e = std::max(exp2 - 1, -6);                   // a in [2^e, 2^(e+1))
  const double q = std::nearbyint(std::ldexp(a, 3 - e));  // in units of 2^(e-3); ties to even
  const double rounded = std::ldexp(q, e - 3);
  if (rounded > 448.0) return static_cast<uint8_t>(sign | 0x7F);  // no infinity: NaN
  if (rounded == 0) return sign;
  int re = 0;
  std::frexp(rounded, &re);
  const int be = std::max(re - 1, -6);
  if (rounded < std::ldexp(1.0, -6)) {  // subnormal: mantissa in units of 2^-9
    return static_cast<uint8_t>(sign | static_cast<int>(std::ldexp(rounded, 9)));
  }
  const int mantissa = static_cast<int>(std::ldexp(rounded, 3 - be)) - 8;
  return static_cast<uint8_t>(sign | ((be + 7) << 3) | mantissa);
}

inline double F8E8M0FNUToDouble(uint8_t bits) {
  if (bits == 0xFF) return std::numeric_limits<double>::quiet_NaN();
  return std::ldexp(1.0, static_cast<int>(bits) - 127);
}

inline uint8_t DoubleToF8E8M0FNU(double v) {
  if (!(v > 0) || std::isinf(v)) return 0xFF;  // NaN, zero, negative, infinity
  int exp2 = 0;
  const double f = std::frexp(v, &exp2);  // v = f * 2^exp2, f in [0.5, 1)
  // v = (2f) * 2^(exp2-1), 2f in [1, 2): round the mantissa to 1 or 2, ties
  // (2f = 1.5) to even: to 2, whose mantissa bit pattern is even.
  int e = exp2 - 1 + (2 * f >= 1.5 ? 1 : 0);
  if (e > 127) return 0xFF;
  if (e < -127) e = -127;
  return static_cast<uint8_t>(e + 127);
}

}  // namespace weft
