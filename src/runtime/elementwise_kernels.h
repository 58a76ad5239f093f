// Internal to the executor: the elementwise span kernels, the one
// definition of each elementwise op's formula. eval_elementwise.cc runs them
// over whole buffers, eval_fusion.cc over the tiles of a loop fusion; both
// compute bf16 and f16 in f32 and round each result to its element type, so
// the two give the same bits.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "weft/base/error.h"
#include "weft/hlo/instruction.h"
#include "weft/runtime/executor_tensor.h"

namespace weft::runtime::exec {

inline bool IsHalf(PrimitiveType t) {
  return t == PrimitiveType::kBF16 || t == PrimitiveType::kF16;
}

// The float span kernels, defined once (elementwise_spans.inc) and
// compiled twice (elementwise_kernels.cc): `streaming` for whole buffers
// (eval_elementwise.cc), `cached` for tiles that stay in cache
// (eval_fusion.cc, vectorized for the CPU's widest instruction set). The
// two give the same bits.
#define WEFT_FLOAT_SPAN_KERNELS                                                                \
  void HalfToFloat(PrimitiveType t, const uint16_t* in, float* out, int64_t n);                \
  void FloatToHalf(PrimitiveType t, const float* in, uint16_t* out, int64_t n);                \
  void UnaryFloat(HloOpcode op, const float* a, float* o, int64_t n);                          \
  void BinaryFloat(HloOpcode op, const float* a, const float* b, float* o, int64_t n);         \
  /* bf16 ops in one pass: operands f32 or (x_bf16) bf16 bits, widened as read; each */        \
  /* result rounded to a bf16 value (RoundToHalf's bits), kept in f32 or (o_bf16) */           \
  /* stored as bf16 bits (FloatToHalf's). */                                                   \
  void UnaryFloatToBf16(HloOpcode op, const void* a, bool a_bf16, void* o, bool o_bf16,        \
                        int64_t n);                                                            \
  void BinaryFloatToBf16(HloOpcode op, const void* a, bool a_bf16, const void* b, bool b_bf16, \
                         void* o, bool o_bf16, int64_t n);                                     \
  void Compare(ComparisonDirection d, const float* a, const float* b, uint8_t* o, int64_t n);  \
  void ClampFloat(const float* lo, bool lo_scalar, const float* x, const float* hi,            \
                  bool hi_scalar, float* o, int64_t n);                                        \
  /* Rounds f32 values to what bf16 / f16 `t` holds, in place. */                              \
  void RoundToHalf(PrimitiveType t, float* x, int64_t n);
namespace streaming {
WEFT_FLOAT_SPAN_KERNELS
}  // namespace streaming
namespace cached {
WEFT_FLOAT_SPAN_KERNELS
}  // namespace cached
#undef WEFT_FLOAT_SPAN_KERNELS

// Real (f32, f64) formulas, one definition each: the f32 span kernels
// (elementwise_spans.inc) instantiate them under every target (always
// inlined, so each clone vectorizes them), f64 calls them directly.
#define WEFT_REAL_KERNEL inline __attribute__((always_inline))

template <typename T>
WEFT_REAL_KERNEL T Sign(T x) {  // keeps NaN and -0
  return x > 0 ? T(1) : (x < 0 ? T(-1) : x);
}

// XLA's maximum/minimum propagate NaN.
template <typename T>
WEFT_REAL_KERNEL T MaxF(T a, T b) {
  return a != a ? a : (b != b ? b : (a > b ? a : b));
}
template <typename T>
WEFT_REAL_KERNEL T MinF(T a, T b) {
  return a != a ? a : (b != b ? b : (a < b ? a : b));
}

// e^x in f32, branch-free so that loops of it vectorize (libm's expf is a
// call per element): x = n ln2 + r with |r| <= ln2 / 2 (ln2 split in two, so
// n * kLn2Hi is exact), a degree-6 polynomial for e^r (Cephes' expf
// coefficients; within 2 ulp of e^x over the normal range), and 2^n applied
// as two exact power-of-two factors, so results in the subnormal range round
// once and e^x overflows to inf where it should. NaN gives NaN, -inf 0.
// Plain multiplies and adds, and elementwise_kernels.cc is compiled with
// -ffp-contract=off (no FMAs in the AVX2 / AVX-512 clones only), so every
// target clone of a loop of it gives the same bits.
WEFT_REAL_KERNEL float ExpF(float x) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  // Past these, e^x is inf or rounds to 0 (n stays within [-150, 129]).
  const float c = x < -104.0f ? -104.0f : (x > 89.0f ? 89.0f : x);
  const float t = c * kLog2e + kRound;
  const int32_t n = std::bit_cast<int32_t>(t) - std::bit_cast<int32_t>(kRound);
  const float fn = t - kRound;
  float r = c - fn * kLn2Hi;
  r = r - fn * kLn2Lo;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * (r * r) + r + 1.0f;
  const int32_t n1 = n / 2, n2 = n - n1;  // each in [-75, 65]: normal powers of two
  const float s1 = std::bit_cast<float>((n1 + 127) << 23);
  const float s2 = std::bit_cast<float>((n2 + 127) << 23);
  const float y = p * s1 * s2;
  // NaN in, the default quiet NaN out: the sign of a NaN (of -x in logistic)
  // is not kept the same way by every target's code.
  return x != x ? std::numeric_limits<float>::quiet_NaN() : y;
}

template <typename T>
WEFT_REAL_KERNEL T Exp(T x) {
  if constexpr (std::is_same_v<T, float>) {
    return ExpF(x);
  } else {
    return std::exp(x);
  }
}

// What the real kernels apply to each result before storing it: nothing,
// or the rounding to a bf16 value (kept in f32) that a bf16 result of an op
// inside a fusion gets (fusion_tiles.cc), in the same pass.
struct KeepResult {
  template <typename T>
  WEFT_REAL_KERNEL T operator()(T x) const {
    return x;
  }
};
// Bf16BitsToFloat(FloatToBf16Bits(x)) in 32-bit integer steps (no narrowing
// and widening of lanes): ties to even, NaN kept quiet.
struct RoundToBf16 {
  WEFT_REAL_KERNEL float operator()(float x) const {
    const uint32_t u = std::bit_cast<uint32_t>(x);
    const bool nan = (u & 0x7fffffffu) > 0x7f800000u;
    const uint32_t r = nan ? (u | 0x00400000u) : u + 0x7fffu + ((u >> 16) & 1u);
    return std::bit_cast<float>(r & 0xffff0000u);
  }
};
// The same rounding, stored as the bf16 bits (FloatToBf16Bits).
struct NarrowToBf16 {
  WEFT_REAL_KERNEL uint16_t operator()(float x) const {
    return static_cast<uint16_t>(std::bit_cast<uint32_t>(RoundToBf16{}(x)) >> 16);
  }
};

// An operand element as the real kernels compute with it: f32 and f64 as
// they are, bf16 bits (a fused tile's raw bf16 source) widened exactly.
WEFT_REAL_KERNEL float Widen(float x) { return x; }
WEFT_REAL_KERNEL double Widen(double x) { return x; }
WEFT_REAL_KERNEL float Widen(uint16_t bf16_bits) {
  return std::bit_cast<float>(static_cast<uint32_t>(bf16_bits) << 16);
}

template <typename A, typename O, typename Post = KeepResult>
WEFT_REAL_KERNEL void UnaryReal(HloOpcode op, const A* a, O* o, int64_t n, Post post = {}) {
  using T = decltype(Widen(A{}));  // f32 or f64: what the formulas compute in
  switch (op) {
#define WEFT_UNARY(OP, EXPR)          \
  case HloOpcode::OP:                 \
    for (int64_t i = 0; i < n; ++i) { \
      const T x = Widen(a[i]);        \
      o[i] = post(EXPR);              \
    }                                 \
    return;
    WEFT_UNARY(kAbs, std::fabs(x))
    WEFT_UNARY(kCeil, std::ceil(x))
    WEFT_UNARY(kCosine, std::cos(x))
    WEFT_UNARY(kExp, Exp(x))
    WEFT_UNARY(kExpm1, std::expm1(x))
    WEFT_UNARY(kFloor, std::floor(x))
    WEFT_UNARY(kLog, std::log(x))
    WEFT_UNARY(kLog1p, std::log1p(x))
    WEFT_UNARY(kLogistic, T(1) / (T(1) + Exp(-x)))
    WEFT_UNARY(kNegate, -x)
    WEFT_UNARY(kRsqrt, T(1) / std::sqrt(x))
    WEFT_UNARY(kSign, Sign(x))
    WEFT_UNARY(kSine, std::sin(x))
    WEFT_UNARY(kSqrt, std::sqrt(x))
    WEFT_UNARY(kTanh, std::tanh(x))
#undef WEFT_UNARY
    default:
      Fail("{} is not a floating-point unary op", HloOpcodeString(op));
  }
}

template <typename A, typename B, typename O, typename Post = KeepResult>
WEFT_REAL_KERNEL void BinaryReal(HloOpcode op, const A* a, const B* b, O* o, int64_t n,
                                 Post post = {}) {
  using T = decltype(Widen(A{}) + Widen(B{}));
  switch (op) {
#define WEFT_BINARY(OP, EXPR)                   \
  case HloOpcode::OP:                           \
    for (int64_t i = 0; i < n; ++i) {           \
      const T x = Widen(a[i]), y = Widen(b[i]); \
      o[i] = post(EXPR);                        \
    }                                           \
    return;
    WEFT_BINARY(kAdd, x + y)
    WEFT_BINARY(kSubtract, x - y)
    WEFT_BINARY(kMultiply, x * y)
    WEFT_BINARY(kDivide, x / y)
    WEFT_BINARY(kMaximum, MaxF(x, y))
    WEFT_BINARY(kMinimum, MinF(x, y))
    WEFT_BINARY(kPower, std::pow(x, y))
    WEFT_BINARY(kRemainder, std::fmod(x, y))
#undef WEFT_BINARY
    default:
      Fail("{} is not a floating-point binary op", HloOpcodeString(op));
  }
}

// Any ordered element type (floats, integers, pred bytes).
template <typename T>
WEFT_REAL_KERNEL void CompareValues(ComparisonDirection d, const T* a, const T* b, uint8_t* o,
                                    int64_t n) {
  switch (d) {
    case ComparisonDirection::kEq:
      for (int64_t i = 0; i < n; ++i) o[i] = a[i] == b[i];
      return;
    case ComparisonDirection::kNe:
      for (int64_t i = 0; i < n; ++i) o[i] = a[i] != b[i];
      return;
    case ComparisonDirection::kLt:
      for (int64_t i = 0; i < n; ++i) o[i] = a[i] < b[i];
      return;
    case ComparisonDirection::kLe:
      for (int64_t i = 0; i < n; ++i) o[i] = a[i] <= b[i];
      return;
    case ComparisonDirection::kGt:
      for (int64_t i = 0; i < n; ++i) o[i] = a[i] > b[i];
      return;
    case ComparisonDirection::kGe:
      for (int64_t i = 0; i < n; ++i) o[i] = a[i] >= b[i];
      return;
  }
}

// compare's type=TOTALORDER on floats (f32, f64; bf16 and f16 widen to f32
// exactly, NaN payloads in order): the IEEE bits read as sign-magnitude
// integers, so -NaN < -inf < ... < -0 < +0 < ... < inf < +NaN, and EQ holds
// for equal bits (NaN == NaN, -0 != +0), as XLA defines the total order.
template <typename F>
inline void CompareTotalOrder(ComparisonDirection d, const F* a, const F* b, uint8_t* o,
                              int64_t n) {
  using I = std::conditional_t<sizeof(F) == 8, int64_t, int32_t>;
  auto key = [](F v) {
    const I bits = std::bit_cast<I>(v);
    return bits < 0 ? static_cast<I>(bits ^ std::numeric_limits<I>::max()) : bits;
  };
  constexpr int64_t kBlock = 256;
  I ka[kBlock], kb[kBlock];
  for (int64_t s = 0; s < n; s += kBlock) {
    const int64_t m = std::min(kBlock, n - s);
    for (int64_t i = 0; i < m; ++i) {
      ka[i] = key(a[s + i]);
      kb[i] = key(b[s + i]);
    }
    CompareValues(d, ka, kb, o + s, m);
  }
}

// clamp(lo, x, hi) = min(max(x, lo), hi); a scalar bound is broadcast.
template <typename T>
WEFT_REAL_KERNEL void ClampReal(const T* lo, bool lo_scalar, const T* x, const T* hi,
                                bool hi_scalar, T* o, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    o[i] = MinF(MaxF(x[i], lo[lo_scalar ? 0 : i]), hi[hi_scalar ? 0 : i]);
  }
}

// The f32 span kernels' f64 overloads (computed in double, rounded to
// nothing narrower), so code generic over the element type calls one name.
namespace streaming {
inline void UnaryFloat(HloOpcode op, const double* a, double* o, int64_t n) {
  UnaryReal(op, a, o, n);
}
inline void BinaryFloat(HloOpcode op, const double* a, const double* b, double* o, int64_t n) {
  BinaryReal(op, a, b, o, n);
}
inline void Compare(ComparisonDirection d, const double* a, const double* b, uint8_t* o,
                    int64_t n) {
  CompareValues(d, a, b, o, n);
}
inline void ClampFloat(const double* lo, bool lo_scalar, const double* x, const double* hi,
                       bool hi_scalar, double* o, int64_t n) {
  ClampReal(lo, lo_scalar, x, hi, hi_scalar, o, n);
}
}  // namespace streaming
namespace cached {  // f64 computes as streaming does (no clones of it)
inline void UnaryFloat(HloOpcode op, const double* a, double* o, int64_t n) {
  streaming::UnaryFloat(op, a, o, n);
}
inline void BinaryFloat(HloOpcode op, const double* a, const double* b, double* o, int64_t n) {
  streaming::BinaryFloat(op, a, b, o, n);
}
inline void Compare(ComparisonDirection d, const double* a, const double* b, uint8_t* o,
                    int64_t n) {
  streaming::Compare(d, a, b, o, n);
}
inline void ClampFloat(const double* lo, bool lo_scalar, const double* x, const double* hi,
                       bool hi_scalar, double* o, int64_t n) {
  streaming::ClampFloat(lo, lo_scalar, x, hi, hi_scalar, o, n);
}
}  // namespace cached

// Unsigned arithmetic for T's wrap-around that never promotes to (signed)
// int: u16 * u16 in int could overflow.
template <typename T>
using WrapUnsigned =
    std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, std::make_unsigned_t<T>>;

// Integer semantics follow XLA: wrap-around arithmetic, x / 0 = -1 (all
// bits set), x % 0 = x, INT_MIN / -1 = INT_MIN, INT_MIN % -1 = 0.
template <typename T>
T IntDiv(T x, T y) {
  if (y == 0) return static_cast<T>(-1);
  if constexpr (std::is_signed_v<T>) {
    if (x == std::numeric_limits<T>::min() && y == -1) return x;
  }
  return x / y;
}
template <typename T>
T IntRem(T x, T y) {
  if (y == 0) return x;
  if constexpr (std::is_signed_v<T>) {
    if (x == std::numeric_limits<T>::min() && y == -1) return 0;
  }
  return x % y;
}
template <typename T>
T IntPow(T base, T exp) {
  if constexpr (std::is_signed_v<T>) {
    if (exp < 0) return base == 1 ? 1 : (base == -1 ? ((exp & 1) ? -1 : 1) : 0);
  }
  using U = WrapUnsigned<T>;
  U result = 1, b = static_cast<U>(base);
  for (U e = static_cast<U>(exp); e != 0; e >>= 1) {
    if (e & 1) result *= b;
    b *= b;
  }
  return static_cast<T>(result);
}

// XLA's shifts read the amount as unsigned: one of the type's bit width or
// more shifts every bit out (0), or for an arithmetic shift right fills
// with the sign bit; an arithmetic shift of an unsigned type shifts its
// bits as the signed type of the same width does.
template <typename T>
T ShiftLeft(T x, T y) {
  using Bits = std::make_unsigned_t<T>;
  if (static_cast<Bits>(y) >= sizeof(T) * 8) return 0;
  return static_cast<T>(static_cast<WrapUnsigned<T>>(static_cast<Bits>(x)) << y);
}
template <typename T>
T ShiftRightLogical(T x, T y) {
  using Bits = std::make_unsigned_t<T>;
  if (static_cast<Bits>(y) >= sizeof(T) * 8) return 0;
  return static_cast<T>(static_cast<Bits>(x) >> y);
}
template <typename T>
T ShiftRightArithmetic(T x, T y) {
  using Bits = std::make_unsigned_t<T>;
  using Signed = std::make_signed_t<T>;
  const Signed s = static_cast<Signed>(x);
  if (static_cast<Bits>(y) >= sizeof(T) * 8) return static_cast<T>(s < 0 ? Signed(-1) : Signed(0));
  return static_cast<T>(static_cast<Signed>(s >> y));
}

template <typename T>
void BinaryInt(HloOpcode op, const T* a, const T* b, T* o, int64_t n) {
  using U = WrapUnsigned<T>;
  switch (op) {
#define WEFT_BINARY(OP, EXPR)         \
  case HloOpcode::OP:                 \
    for (int64_t i = 0; i < n; ++i) { \
      const T x = a[i], y = b[i];     \
      o[i] = static_cast<T>(EXPR);    \
    }                                 \
    return;
    WEFT_BINARY(kAdd, static_cast<U>(x) + static_cast<U>(y))
    WEFT_BINARY(kSubtract, static_cast<U>(x) - static_cast<U>(y))
    WEFT_BINARY(kMultiply, static_cast<U>(x) * static_cast<U>(y))
    WEFT_BINARY(kDivide, IntDiv(x, y))
    WEFT_BINARY(kRemainder, IntRem(x, y))
    WEFT_BINARY(kMaximum, x > y ? x : y)
    WEFT_BINARY(kMinimum, x < y ? x : y)
    WEFT_BINARY(kAnd, x & y)
    WEFT_BINARY(kOr, x | y)
    WEFT_BINARY(kXor, x ^ y)
    WEFT_BINARY(kPower, IntPow(x, y))
    WEFT_BINARY(kShiftLeft, ShiftLeft(x, y))
    WEFT_BINARY(kShiftRightLogical, ShiftRightLogical(x, y))
    WEFT_BINARY(kShiftRightArith, ShiftRightArithmetic(x, y))
#undef WEFT_BINARY
    default:
      Fail("{} is not supported on integers", HloOpcodeString(op));
  }
}

template <typename T>
void UnaryInt(HloOpcode op, const T* a, T* o, int64_t n) {
  using U = WrapUnsigned<T>;
  switch (op) {
    case HloOpcode::kNegate:
      for (int64_t i = 0; i < n; ++i) o[i] = static_cast<T>(U(0) - static_cast<U>(a[i]));
      return;
    case HloOpcode::kAbs:
      for (int64_t i = 0; i < n; ++i) {
        if constexpr (std::is_signed_v<T>) {
          o[i] = a[i] < 0 ? static_cast<T>(U(0) - static_cast<U>(a[i])) : a[i];
        } else {
          o[i] = a[i];
        }
      }
      return;
    case HloOpcode::kSign:
      for (int64_t i = 0; i < n; ++i) o[i] = static_cast<T>((a[i] > 0) - (a[i] < 0));
      return;
    case HloOpcode::kNot:
      for (int64_t i = 0; i < n; ++i) o[i] = static_cast<T>(~a[i]);
      return;
    case HloOpcode::kPopcnt:
      for (int64_t i = 0; i < n; ++i) {
        o[i] = static_cast<T>(std::popcount(static_cast<std::make_unsigned_t<T>>(a[i])));
      }
      return;
    case HloOpcode::kClz:
      for (int64_t i = 0; i < n; ++i) {
        o[i] = static_cast<T>(std::countl_zero(static_cast<std::make_unsigned_t<T>>(a[i])));
      }
      return;
    default:
      Fail("{} is not supported on integers", HloOpcodeString(op));
  }
}

inline void BinaryPred(HloOpcode op, const uint8_t* a, const uint8_t* b, uint8_t* o, int64_t n) {
  switch (op) {
    case HloOpcode::kAnd:
    case HloOpcode::kMinimum:
      for (int64_t i = 0; i < n; ++i) o[i] = a[i] & b[i];
      return;
    case HloOpcode::kOr:
    case HloOpcode::kMaximum:
      for (int64_t i = 0; i < n; ++i) o[i] = a[i] | b[i];
      return;
    case HloOpcode::kXor:
      for (int64_t i = 0; i < n; ++i) o[i] = a[i] ^ b[i];
      return;
    default:
      Fail("{} is not supported on pred", HloOpcodeString(op));
  }
}

// Calls fn with a null pointer of the C++ element type of integer / pred `t`.
template <typename Fn>
void DispatchInt(PrimitiveType t, Fn&& fn) {
  switch (t) {
    case PrimitiveType::kS32:
      return fn(static_cast<int32_t*>(nullptr));
    case PrimitiveType::kS64:
      return fn(static_cast<int64_t*>(nullptr));
    case PrimitiveType::kU16:
      return fn(static_cast<uint16_t*>(nullptr));
    case PrimitiveType::kU32:
      return fn(static_cast<uint32_t*>(nullptr));
    case PrimitiveType::kU64:
      return fn(static_cast<uint64_t*>(nullptr));
    default:
      Fail("element type {} is not an integer type", PrimitiveTypeName(t));
  }
}

// Calls fn with a null pointer of the C++ type of `t` for every type whose
// values are computed as stored: f32, f64, the integers and pred (uint8_t).
// bf16, f16 (computed in f32), c64 and token are refused.
template <typename Fn>
void DispatchStored(PrimitiveType t, Fn&& fn) {
  switch (t) {
    case PrimitiveType::kF32:
      return fn(static_cast<float*>(nullptr));
    case PrimitiveType::kF64:
      return fn(static_cast<double*>(nullptr));
    case PrimitiveType::kPred:
      return fn(static_cast<uint8_t*>(nullptr));
    default:
      return DispatchInt(t, fn);
  }
}

template <int kBytes>
struct Bits;
template <>
struct Bits<1> {
  using type = uint8_t;
};
template <>
struct Bits<2> {
  using type = uint16_t;
};
template <>
struct Bits<4> {
  using type = uint32_t;
};
template <>
struct Bits<8> {
  using type = uint64_t;
};

template <int kBytes>
void SelectBytes(const uint8_t* pred, bool scalar_pred, const void* a, const void* b, void* o,
                 int64_t begin, int64_t end) {
  using T = typename Bits<kBytes>::type;
  const T* x = static_cast<const T*>(a);
  const T* y = static_cast<const T*>(b);
  T* r = static_cast<T*>(o);
  if (scalar_pred) {
    const T* src = pred[0] ? x : y;
    for (int64_t i = begin; i < end; ++i) r[i] = src[i];
    return;
  }
  // Both sides are read and blended through a mask, without a branch: the
  // loop vectorizes, and a pattern the branch predictor cannot follow
  // (a one-hot row, a random mask) costs nothing more.
  for (int64_t i = begin; i < end; ++i) {
    const T m = static_cast<T>(T{0} - static_cast<T>(pred[i] != 0));
    r[i] = static_cast<T>((x[i] & m) | (y[i] & static_cast<T>(~m)));
  }
}

// not of pred: flips 0 and 1.
inline void NotPred(const uint8_t* a, uint8_t* o, int64_t n) {
  for (int64_t i = 0; i < n; ++i) o[i] = a[i] ^ 1;
}

// clamp(lo, x, hi) = min(max(x, lo), hi); a scalar bound (stride 0) is
// broadcast.
template <typename T>
void ClampInt(const T* lo, bool lo_scalar, const T* x, const T* hi, bool hi_scalar, T* o,
              int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    o[i] = std::min(std::max(x[i], lo[lo_scalar ? 0 : i]), hi[hi_scalar ? 0 : i]);
  }
}

}  // namespace weft::runtime::exec
