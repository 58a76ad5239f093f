// Elementwise ops: unary and binary arithmetic, compare, select, clamp and
// convert, as loops over contiguous buffers (one switch per instruction,
// never per element). bf16 and f16 are computed in f32 a block at a time.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "weft/base/error.h"
#include "weft/runtime/executor_eval.h"

namespace weft::runtime::exec {
namespace {

constexpr int64_t kBlock = 512;            // f32 scratch per bf16/f16 block
constexpr int64_t kParallelChunk = 1 << 15;  // elements per thread-pool task

bool IsHalf(PrimitiveType t) { return t == PrimitiveType::kBF16 || t == PrimitiveType::kF16; }

void HalfToFloat(PrimitiveType t, const uint16_t* in, float* out, int64_t n) {
  if (t == PrimitiveType::kBF16) {
    for (int64_t i = 0; i < n; ++i) out[i] = Bf16BitsToFloat(in[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) out[i] = F16BitsToFloat(in[i]);
  }
}

void FloatToHalf(PrimitiveType t, const float* in, uint16_t* out, int64_t n) {
  if (t == PrimitiveType::kBF16) {
    for (int64_t i = 0; i < n; ++i) out[i] = FloatToBf16Bits(in[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) out[i] = FloatToF16Bits(in[i]);
  }
}

// Runs kernel(inputs as float*, out as OutT*, n) over [begin, end) of
// buffers of float type `t`, converting bf16/f16 through f32 scratch.
// A scalar input (stride 0) is broadcast.
template <typename OutT, typename Kernel>
void FloatBlocks(PrimitiveType t, int num_in, const void* const* in, const bool* scalar, void* out,
                 bool out_is_float_type, int64_t begin, int64_t end, Kernel kernel) {
  if (!IsHalf(t)) {
    const float* p[3];
    for (int k = 0; k < num_in; ++k) {
      p[k] = static_cast<const float*>(in[k]) + (scalar[k] ? 0 : begin);
    }
    kernel(p, static_cast<OutT*>(out) + begin, end - begin);
    return;
  }
  float scratch[3][kBlock];
  float scalar_value[3] = {0, 0, 0};
  float result[kBlock];
  for (int k = 0; k < num_in; ++k) {
    if (scalar[k]) HalfToFloat(t, static_cast<const uint16_t*>(in[k]), &scalar_value[k], 1);
  }
  for (int64_t b = begin; b < end; b += kBlock) {
    const int64_t n = std::min(kBlock, end - b);
    const float* p[3];
    for (int k = 0; k < num_in; ++k) {
      if (scalar[k]) {
        std::fill(scratch[k], scratch[k] + n, scalar_value[k]);
      } else {
        HalfToFloat(t, static_cast<const uint16_t*>(in[k]) + b, scratch[k], n);
      }
      p[k] = scratch[k];
    }
    if (out_is_float_type) {
      kernel(p, reinterpret_cast<OutT*>(result), n);
      FloatToHalf(t, result, static_cast<uint16_t*>(out) + b, n);
    } else {
      kernel(p, static_cast<OutT*>(out) + b, n);
    }
  }
}

float Sign(float x) { return x > 0 ? 1.0f : (x < 0 ? -1.0f : x); }  // keeps NaN and -0

void UnaryFloat(HloOpcode op, const float* a, float* o, int64_t n) {
  switch (op) {
#define WEFT_UNARY(OP, EXPR)                          \
  case HloOpcode::OP:                                 \
    for (int64_t i = 0; i < n; ++i) {                 \
      const float x = a[i];                           \
      o[i] = (EXPR);                                  \
    }                                                 \
    return;
    WEFT_UNARY(kAbs, std::fabs(x))
    WEFT_UNARY(kCeil, std::ceil(x))
    WEFT_UNARY(kCosine, std::cos(x))
    WEFT_UNARY(kExp, std::exp(x))
    WEFT_UNARY(kExpm1, std::expm1(x))
    WEFT_UNARY(kFloor, std::floor(x))
    WEFT_UNARY(kLog, std::log(x))
    WEFT_UNARY(kLog1p, std::log1p(x))
    WEFT_UNARY(kLogistic, 1.0f / (1.0f + std::exp(-x)))
    WEFT_UNARY(kNegate, -x)
    WEFT_UNARY(kRsqrt, 1.0f / std::sqrt(x))
    WEFT_UNARY(kSign, Sign(x))
    WEFT_UNARY(kSine, std::sin(x))
    WEFT_UNARY(kSqrt, std::sqrt(x))
    WEFT_UNARY(kTanh, std::tanh(x))
#undef WEFT_UNARY
    default:
      Fail("{} is not a floating-point unary op", HloOpcodeString(op));
  }
}

// XLA's maximum/minimum propagate NaN.
inline float MaxF(float a, float b) { return a != a ? a : (b != b ? b : (a > b ? a : b)); }
inline float MinF(float a, float b) { return a != a ? a : (b != b ? b : (a < b ? a : b)); }

void BinaryFloat(HloOpcode op, const float* a, const float* b, float* o, int64_t n) {
  switch (op) {
#define WEFT_BINARY(OP, EXPR)                         \
  case HloOpcode::OP:                                 \
    for (int64_t i = 0; i < n; ++i) {                 \
      const float x = a[i], y = b[i];                 \
      o[i] = (EXPR);                                  \
    }                                                 \
    return;
    WEFT_BINARY(kAdd, x + y)
    WEFT_BINARY(kSubtract, x - y)
    WEFT_BINARY(kMultiply, x* y)
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

template <typename T>
void Compare(ComparisonDirection d, const T* a, const T* b, uint8_t* o, int64_t n) {
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
  using U = std::make_unsigned_t<T>;
  U result = 1, b = static_cast<U>(base);
  for (U e = static_cast<U>(exp); e != 0; e >>= 1) {
    if (e & 1) result *= b;
    b *= b;
  }
  return static_cast<T>(result);
}

template <typename T>
void BinaryInt(HloOpcode op, const T* a, const T* b, T* o, int64_t n) {
  using U = std::make_unsigned_t<T>;
  switch (op) {
#define WEFT_BINARY(OP, EXPR)                         \
  case HloOpcode::OP:                                 \
    for (int64_t i = 0; i < n; ++i) {                 \
      const T x = a[i], y = b[i];                     \
      o[i] = static_cast<T>(EXPR);                    \
    }                                                 \
    return;
    WEFT_BINARY(kAdd, static_cast<U>(x) + static_cast<U>(y))
    WEFT_BINARY(kSubtract, static_cast<U>(x) - static_cast<U>(y))
    WEFT_BINARY(kMultiply, static_cast<U>(x) * static_cast<U>(y))
    WEFT_BINARY(kDivide, IntDiv(x, y))
    WEFT_BINARY(kRemainder, IntRem(x, y))
    WEFT_BINARY(kMaximum, x > y ? x : y)
    WEFT_BINARY(kMinimum, x < y ? x : y)
    WEFT_BINARY(kAnd, x& y)
    WEFT_BINARY(kOr, x | y)
    WEFT_BINARY(kXor, x ^ y)
    WEFT_BINARY(kPower, IntPow(x, y))
#undef WEFT_BINARY
    default:
      Fail("{} is not supported on integers", HloOpcodeString(op));
  }
}

template <typename T>
void UnaryInt(HloOpcode op, const T* a, T* o, int64_t n) {
  using U = std::make_unsigned_t<T>;
  switch (op) {
    case HloOpcode::kNegate:
      for (int64_t i = 0; i < n; ++i) o[i] = static_cast<T>(U(0) - static_cast<U>(a[i]));
      return;
    case HloOpcode::kAbs:
      for (int64_t i = 0; i < n; ++i) {
        o[i] = a[i] < 0 ? static_cast<T>(U(0) - static_cast<U>(a[i])) : a[i];
      }
      return;
    case HloOpcode::kSign:
      for (int64_t i = 0; i < n; ++i) o[i] = static_cast<T>((a[i] > 0) - (a[i] < 0));
      return;
    case HloOpcode::kNot:
      for (int64_t i = 0; i < n; ++i) o[i] = static_cast<T>(~a[i]);
      return;
    default:
      Fail("{} is not supported on integers", HloOpcodeString(op));
  }
}

void BinaryPred(HloOpcode op, const uint8_t* a, const uint8_t* b, uint8_t* o, int64_t n) {
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
    case PrimitiveType::kU32:
      return fn(static_cast<uint32_t*>(nullptr));
    default:
      Fail("element type {} is not an integer type", PrimitiveTypeName(t));
  }
}

Value EvalUnary(const HloInstruction& instr, EvalArgs& args) {
  const HostTensor& x = args.array(0);
  const PrimitiveType t = x.element_type();
  const HloOpcode op = instr.opcode();
  HostTensor out = args.ReuseOrAllocate(instr.shape(), {0});
  const int64_t n = x.element_count();
  const void* in = x.raw_data();
  void* o = out.mutable_raw_data();
  ParallelRanges(n, kParallelChunk, args.ctx().options().use_thread_pool, [&](int64_t b,
                                                                              int64_t e) {
    if (IsFloatingPoint(t)) {
      const bool scalar[1] = {false};
      FloatBlocks<float>(t, 1, &in, scalar, o, true, b, e,
                         [&](const float* const* p, float* r, int64_t m) {
                           UnaryFloat(op, p[0], r, m);
                         });
    } else if (t == PrimitiveType::kPred) {
      WEFT_CHECK(op == HloOpcode::kNot, "{} is not supported on pred", HloOpcodeString(op));
      const uint8_t* a = static_cast<const uint8_t*>(in);
      uint8_t* r = static_cast<uint8_t*>(o);
      for (int64_t i = b; i < e; ++i) r[i] = a[i] ^ 1;
    } else {
      DispatchInt(t, [&](auto* tag) {
        using T = std::remove_pointer_t<decltype(tag)>;
        UnaryInt(op, static_cast<const T*>(in) + b, static_cast<T*>(o) + b, e - b);
      });
    }
  });
  return Value{std::move(out)};
}

Value EvalBinary(const HloInstruction& instr, EvalArgs& args) {
  const HostTensor& x = args.array(0);
  const HostTensor& y = args.array(1);
  const PrimitiveType t = x.element_type();
  const HloOpcode op = instr.opcode();
  const bool compare = op == HloOpcode::kCompare;
  HostTensor out = compare ? args.ctx().Allocate(instr.shape())
                           : args.ReuseOrAllocate(instr.shape(), {0, 1});
  const ComparisonDirection dir = instr.attrs().comparison_direction;
  const int64_t n = x.element_count();
  const void* in[2] = {x.raw_data(), y.raw_data()};
  void* o = out.mutable_raw_data();
  ParallelRanges(n, kParallelChunk, args.ctx().options().use_thread_pool, [&](int64_t b,
                                                                              int64_t e) {
    const bool scalar[2] = {false, false};
    if (IsFloatingPoint(t)) {
      if (compare) {
        FloatBlocks<uint8_t>(t, 2, in, scalar, o, false, b, e,
                             [&](const float* const* p, uint8_t* r, int64_t m) {
                               Compare(dir, p[0], p[1], r, m);
                             });
      } else {
        FloatBlocks<float>(t, 2, in, scalar, o, true, b, e,
                           [&](const float* const* p, float* r, int64_t m) {
                             BinaryFloat(op, p[0], p[1], r, m);
                           });
      }
    } else if (t == PrimitiveType::kPred) {
      const uint8_t* pa = static_cast<const uint8_t*>(in[0]) + b;
      const uint8_t* pb = static_cast<const uint8_t*>(in[1]) + b;
      uint8_t* r = static_cast<uint8_t*>(o) + b;
      if (compare) {
        Compare(dir, pa, pb, r, e - b);
      } else {
        BinaryPred(op, pa, pb, r, e - b);
      }
    } else {
      DispatchInt(t, [&](auto* tag) {
        using T = std::remove_pointer_t<decltype(tag)>;
        const T* pa = static_cast<const T*>(in[0]) + b;
        const T* pb = static_cast<const T*>(in[1]) + b;
        if (compare) {
          Compare(dir, pa, pb, static_cast<uint8_t*>(o) + b, e - b);
        } else {
          BinaryInt(op, pa, pb, static_cast<T*>(o) + b, e - b);
        }
      });
    }
  });
  return Value{std::move(out)};
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
  for (int64_t i = begin; i < end; ++i) r[i] = pred[i] ? x[i] : y[i];
}

Value EvalSelect(const HloInstruction& instr, EvalArgs& args) {
  const HostTensor& p = args.array(0);
  const HostTensor& x = args.array(1);
  const HostTensor& y = args.array(2);
  HostTensor out = args.ReuseOrAllocate(instr.shape(), {1, 2});
  const int64_t width = ByteWidth(x.element_type());
  const bool scalar = p.rank() == 0 && x.rank() > 0;
  const uint8_t* pd = p.data<uint8_t>();
  ParallelRanges(x.element_count(), kParallelChunk, args.ctx().options().use_thread_pool,
                 [&](int64_t b, int64_t e) {
                   void* o = out.mutable_raw_data();
                   switch (width) {
                     case 1:
                       return SelectBytes<1>(pd, scalar, x.raw_data(), y.raw_data(), o, b, e);
                     case 2:
                       return SelectBytes<2>(pd, scalar, x.raw_data(), y.raw_data(), o, b, e);
                     case 4:
                       return SelectBytes<4>(pd, scalar, x.raw_data(), y.raw_data(), o, b, e);
                     default:
                       return SelectBytes<8>(pd, scalar, x.raw_data(), y.raw_data(), o, b, e);
                   }
                 });
  return Value{std::move(out)};
}

// clamp(lo, x, hi) = min(max(x, lo), hi); bounds may be scalars.
Value EvalClamp(const HloInstruction& instr, EvalArgs& args) {
  const HostTensor& lo = args.array(0);
  const HostTensor& x = args.array(1);
  const HostTensor& hi = args.array(2);
  const PrimitiveType t = x.element_type();
  HostTensor out = args.ReuseOrAllocate(instr.shape(), {1});
  const int64_t n = x.element_count();
  const bool lo_scalar = lo.rank() == 0 && x.rank() > 0;
  const bool hi_scalar = hi.rank() == 0 && x.rank() > 0;
  void* o = out.mutable_raw_data();
  if (IsFloatingPoint(t)) {
    const void* in[3] = {lo.raw_data(), x.raw_data(), hi.raw_data()};
    const bool scalar[3] = {lo_scalar, false, hi_scalar};
    FloatBlocks<float>(t, 3, in, scalar, o, true, 0, n,
                       [&](const float* const* p, float* r, int64_t m) {
                         for (int64_t i = 0; i < m; ++i) {
                           r[i] = MinF(MaxF(p[1][i], p[0][lo_scalar ? 0 : i]),
                                       p[2][hi_scalar ? 0 : i]);
                         }
                       });
  } else {
    WEFT_CHECK(t != PrimitiveType::kPred, "clamp of pred is not supported");
    DispatchInt(t, [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      const T* l = lo.data<T>();
      const T* v = x.data<T>();
      const T* h = hi.data<T>();
      T* r = static_cast<T*>(o);
      for (int64_t i = 0; i < n; ++i) {
        r[i] = std::min(std::max(v[i], l[lo_scalar ? 0 : i]), h[hi_scalar ? 0 : i]);
      }
    });
  }
  return Value{std::move(out)};
}

Value EvalConvert(const HloInstruction& instr, EvalArgs& args) {
  const HostTensor& x = args.array(0);
  const PrimitiveType to = instr.shape().element_type();
  if (to == x.element_type()) return Value{x};  // no-op: share the bytes
  HostTensor out = args.ReuseOrAllocate(instr.shape(), {0});
  const int64_t from_width = ByteWidth(x.element_type()), to_width = ByteWidth(to);
  const void* in = x.raw_data();
  void* o = out.mutable_raw_data();
  ParallelRanges(x.element_count(), kParallelChunk, args.ctx().options().use_thread_pool,
                 [&](int64_t b, int64_t e) {
                   ConvertElements(x.element_type(), static_cast<const std::byte*>(in) + b * from_width,
                                   to, static_cast<std::byte*>(o) + b * to_width, e - b);
                 });
  return Value{std::move(out)};
}

// Float to integer: truncate toward zero, saturate, NaN -> 0.
template <typename T>
T SaturateToInt(float v) {
  if (v != v) return 0;
  constexpr double lo = static_cast<double>(std::numeric_limits<T>::min());
  constexpr double hi = static_cast<double>(std::numeric_limits<T>::max());
  const double d = std::trunc(static_cast<double>(v));
  if (d <= lo) return std::numeric_limits<T>::min();
  if (d >= hi) return std::numeric_limits<T>::max();
  return static_cast<T>(d);
}

}  // namespace

double LoadAsDouble(PrimitiveType type, const void* data, int64_t i) {
  switch (type) {
    case PrimitiveType::kF32:
      return static_cast<const float*>(data)[i];
    case PrimitiveType::kBF16:
      return Bf16BitsToFloat(static_cast<const uint16_t*>(data)[i]);
    case PrimitiveType::kF16:
      return F16BitsToFloat(static_cast<const uint16_t*>(data)[i]);
    default:
      return static_cast<double>(LoadAsInt(type, data, i));
  }
}

int64_t LoadAsInt(PrimitiveType type, const void* data, int64_t i) {
  switch (type) {
    case PrimitiveType::kS32:
      return static_cast<const int32_t*>(data)[i];
    case PrimitiveType::kS64:
      return static_cast<const int64_t*>(data)[i];
    case PrimitiveType::kU32:
      return static_cast<const uint32_t*>(data)[i];
    case PrimitiveType::kPred:
      return static_cast<const uint8_t*>(data)[i] != 0;
    default:
      return static_cast<int64_t>(LoadAsDouble(type, data, i));
  }
}

void StoreDouble(PrimitiveType type, void* data, int64_t i, double v) {
  switch (type) {
    case PrimitiveType::kF32:
      static_cast<float*>(data)[i] = static_cast<float>(v);
      return;
    case PrimitiveType::kBF16:
      static_cast<uint16_t*>(data)[i] = FloatToBf16Bits(static_cast<float>(v));
      return;
    case PrimitiveType::kF16:
      static_cast<uint16_t*>(data)[i] = FloatToF16Bits(static_cast<float>(v));
      return;
    case PrimitiveType::kPred:
      static_cast<uint8_t*>(data)[i] = v != 0;
      return;
    default: {
      // Integers: truncate toward zero, then wrap to the type's width.
      const int64_t w = std::isfinite(v) && std::fabs(v) < 9.2e18 ? static_cast<int64_t>(v) : 0;
      if (type == PrimitiveType::kS32) static_cast<int32_t*>(data)[i] = static_cast<int32_t>(w);
      if (type == PrimitiveType::kU32) static_cast<uint32_t*>(data)[i] = static_cast<uint32_t>(w);
      if (type == PrimitiveType::kS64) static_cast<int64_t*>(data)[i] = w;
      return;
    }
  }
}

void ConvertElements(PrimitiveType from, const void* in, PrimitiveType to, void* out, int64_t n) {
  // Fast paths for the conversions mixed precision uses.
  if (from == PrimitiveType::kF32 && IsHalf(to)) {
    return FloatToHalf(to, static_cast<const float*>(in), static_cast<uint16_t*>(out), n);
  }
  if (IsHalf(from) && to == PrimitiveType::kF32) {
    return HalfToFloat(from, static_cast<const uint16_t*>(in), static_cast<float*>(out), n);
  }
  float f[kBlock];
  int64_t ints[kBlock];
  const bool float_source = IsFloatingPoint(from);
  for (int64_t b = 0; b < n; b += kBlock) {
    const int64_t m = std::min(kBlock, n - b);
    // Floats load exactly into f32, integers into int64.
    for (int64_t i = 0; i < m; ++i) {
      if (float_source) {
        f[i] = static_cast<float>(LoadAsDouble(from, in, b + i));
      } else {
        ints[i] = LoadAsInt(from, in, b + i);
      }
    }
    for (int64_t i = 0; i < m; ++i) {
      const int64_t k = b + i;
      switch (to) {
        case PrimitiveType::kF32:
          static_cast<float*>(out)[k] = float_source ? f[i] : static_cast<float>(ints[i]);
          break;
        case PrimitiveType::kBF16:
        case PrimitiveType::kF16: {
          const float v = float_source ? f[i] : static_cast<float>(ints[i]);
          static_cast<uint16_t*>(out)[k] = to == PrimitiveType::kBF16 ? FloatToBf16Bits(v) : FloatToF16Bits(v);
          break;
        }
        case PrimitiveType::kPred:
          static_cast<uint8_t*>(out)[k] = float_source ? f[i] != 0 : ints[i] != 0;
          break;
        case PrimitiveType::kS32:
          static_cast<int32_t*>(out)[k] =
              float_source ? SaturateToInt<int32_t>(f[i]) : static_cast<int32_t>(ints[i]);
          break;
        case PrimitiveType::kS64:
          static_cast<int64_t*>(out)[k] = float_source ? SaturateToInt<int64_t>(f[i]) : ints[i];
          break;
        case PrimitiveType::kU32:
          static_cast<uint32_t*>(out)[k] =
              float_source ? SaturateToInt<uint32_t>(f[i]) : static_cast<uint32_t>(ints[i]);
          break;
        default:
          Fail("cannot convert to {}", PrimitiveTypeName(to));
      }
    }
  }
}

void CheckElementwise(const HloInstruction& instr) {
  const HloOpcode op = instr.opcode();
  const int64_t operand = op == HloOpcode::kSelect || op == HloOpcode::kClamp ? 1 : 0;
  const Shape& in = instr.operand(operand)->shape();
  WEFT_CHECK(in.IsArray(), "{} of a tuple is not supported", HloOpcodeString(op));
  const PrimitiveType t = in.element_type();
  const bool is_float = IsFloatingPoint(t), is_pred = t == PrimitiveType::kPred;
  auto unsupported = [&] {
    Fail("{} of {} is not supported", HloOpcodeString(op), PrimitiveTypeName(t));
  };
  switch (op) {
    case HloOpcode::kNot:
      if (is_float) unsupported();
      break;
    case HloOpcode::kAnd:
    case HloOpcode::kOr:
    case HloOpcode::kXor:
      if (is_float) unsupported();
      break;
    case HloOpcode::kAbs:
    case HloOpcode::kNegate:
    case HloOpcode::kSign:
    case HloOpcode::kAdd:
    case HloOpcode::kSubtract:
    case HloOpcode::kMultiply:
    case HloOpcode::kDivide:
    case HloOpcode::kRemainder:
    case HloOpcode::kPower:
    case HloOpcode::kClamp:
      if (is_pred) unsupported();
      break;
    case HloOpcode::kCompare:
    case HloOpcode::kMaximum:
    case HloOpcode::kMinimum:
    case HloOpcode::kSelect:
    case HloOpcode::kConvert:
    case HloOpcode::kCopy:
      break;
    default:
      if (!is_float) unsupported();  // transcendental and rounding ops
  }
  WEFT_CHECK(instr.shape().IsArray() && PrimitiveTypeName(instr.shape().element_type()) != "invalid",
             "{} result {} is not supported", HloOpcodeString(op), instr.shape().ToString());
}

Value EvalElementwise(const HloInstruction& instr, EvalArgs& args) {
  const HloOpcode op = instr.opcode();
  if (op == HloOpcode::kSelect) return EvalSelect(instr, args);
  if (op == HloOpcode::kClamp) return EvalClamp(instr, args);
  if (op == HloOpcode::kConvert) return EvalConvert(instr, args);
  if (op == HloOpcode::kCopy) return Value{args.array(0)};
  if (IsElementwiseUnary(op)) return EvalUnary(instr, args);
  return EvalBinary(instr, args);
}

}  // namespace weft::runtime::exec
