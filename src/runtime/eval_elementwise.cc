// Elementwise ops: unary and binary arithmetic, compare, select, clamp and
// convert, as loops over contiguous buffers (one switch per instruction,
// never per element). bf16 and f16 are computed in f32 a block at a time.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "elementwise_kernels.h"
#include "executor_eval.h"
#include "weft/base/error.h"
#include "weft/base/float8.h"

namespace weft::runtime::exec {
namespace {

constexpr int64_t kBlock = 512;  // f32 scratch per bf16/f16 block

// Runs kernel(inputs as float*, out as OutT*, n, in_cache) over [begin, end)
// of buffers of float type `t`, converting bf16/f16 through f32 scratch
// blocks that stay in L1 (in_cache: the kernel may run the `cached` span
// kernels, vectorized for the CPU's widest instruction set, where whole
// buffers streamed from memory run the baseline `streaming` ones). The
// conversions themselves are the `cached` ones: rounding f32 to bf16 is
// arithmetic enough that the baseline's 4-wide loops bound the op (a bf16
// logistic of 6.3M elements took 3.4-4.4 ms with them, 2.8-3.1 ms with the
// AVX-512 clones; a multiply 2.6-3.4 against 1.8-2.0 ms). bf16 unary and
// binary arithmetic does not come here: it runs in one pass, widening as it
// reads and narrowing as it writes (a multiply 0.65-0.88 ms); f64 runs
// as kernel(inputs as double*, out as double* (OutT float) or OutT*, n,
// false). A scalar input (stride 0) is broadcast.
template <typename OutT, typename Kernel>
void FloatBlocks(PrimitiveType t, int num_in, const void* const* in, const bool* scalar, void* out,
                 bool out_is_float_type, int64_t begin, int64_t end, Kernel kernel) {
  if (t == PrimitiveType::kF64) {
    using R = std::conditional_t<std::is_same_v<OutT, float>, double, OutT>;
    const double* p[3];
    for (int k = 0; k < num_in; ++k) {
      p[k] = static_cast<const double*>(in[k]) + (scalar[k] ? 0 : begin);
    }
    kernel(p, static_cast<R*>(out) + begin, end - begin, false);
    return;
  }
  if (!IsHalf(t)) {
    const float* p[3];
    for (int k = 0; k < num_in; ++k) {
      p[k] = static_cast<const float*>(in[k]) + (scalar[k] ? 0 : begin);
    }
    kernel(p, static_cast<OutT*>(out) + begin, end - begin, false);
    return;
  }
  float scratch[3][kBlock];
  float scalar_value[3] = {0, 0, 0};
  float result[kBlock];
  for (int k = 0; k < num_in; ++k) {
    if (scalar[k])
      streaming::HalfToFloat(t, static_cast<const uint16_t*>(in[k]), &scalar_value[k], 1);
  }
  for (int64_t b = begin; b < end; b += kBlock) {
    const int64_t n = std::min(kBlock, end - b);
    const float* p[3];
    for (int k = 0; k < num_in; ++k) {
      if (scalar[k]) {
        std::fill(scratch[k], scratch[k] + n, scalar_value[k]);
      } else {
        cached::HalfToFloat(t, static_cast<const uint16_t*>(in[k]) + b, scratch[k], n);
      }
      p[k] = scratch[k];
    }
    if (out_is_float_type) {
      kernel(p, reinterpret_cast<OutT*>(result), n, true);
      cached::FloatToHalf(t, result, static_cast<uint16_t*>(out) + b, n);
    } else {
      kernel(p, static_cast<OutT*>(out) + b, n, true);
    }
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
  ParallelRanges(
      n, kParallelChunk, args.ctx().options().use_thread_pool, [&](int64_t b, int64_t e) {
        if (t == PrimitiveType::kBF16) {  // one pass: widened as read, narrowed as written
          cached::UnaryFloatToBf16(op, static_cast<const uint16_t*>(in) + b, true,
                                   static_cast<uint16_t*>(o) + b, true, e - b);
        } else if (IsFloatingPoint(t)) {
          const bool scalar[1] = {false};
          // exp and logistic compute more than they move (ExpF): the widest
          // clone even over buffers streamed from memory.
          const bool arithmetic = op == HloOpcode::kExp || op == HloOpcode::kLogistic;
          FloatBlocks<float>(t, 1, &in, scalar, o, true, b, e,
                             [&](const auto* const* p, auto* r, int64_t m, bool in_cache) {
                               if (in_cache || arithmetic) {
                                 cached::UnaryFloat(op, p[0], r, m);
                               } else {
                                 streaming::UnaryFloat(op, p[0], r, m);
                               }
                             });
        } else if (t == PrimitiveType::kPred) {
          WEFT_CHECK(op == HloOpcode::kNot, "{} is not supported on pred", HloOpcodeString(op));
          NotPred(static_cast<const uint8_t*>(in) + b, static_cast<uint8_t*>(o) + b, e - b);
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
  HostTensor out =
      compare ? args.ctx().Allocate(instr.shape()) : args.ReuseOrAllocate(instr.shape(), {0, 1});
  const ComparisonDirection dir = instr.attrs().comparison_direction;
  const bool total_order = instr.attrs().comparison_type == "TOTALORDER";
  const int64_t n = x.element_count();
  const void* in[2] = {x.raw_data(), y.raw_data()};
  void* o = out.mutable_raw_data();
  ParallelRanges(
      n, kParallelChunk, args.ctx().options().use_thread_pool, [&](int64_t b, int64_t e) {
        const bool scalar[2] = {false, false};
        if (IsFloatingPoint(t)) {
          if (compare) {
            FloatBlocks<uint8_t>(t, 2, in, scalar, o, false, b, e,
                                 [&](const auto* const* p, uint8_t* r, int64_t m, bool in_cache) {
                                   if (total_order) {
                                     CompareTotalOrder(dir, p[0], p[1], r, m);
                                   } else if (in_cache) {
                                     cached::Compare(dir, p[0], p[1], r, m);
                                   } else {
                                     streaming::Compare(dir, p[0], p[1], r, m);
                                   }
                                 });
          } else if (t == PrimitiveType::kBF16) {  // one pass, as unary
            cached::BinaryFloatToBf16(op, static_cast<const uint16_t*>(in[0]) + b, true,
                                      static_cast<const uint16_t*>(in[1]) + b, true,
                                      static_cast<uint16_t*>(o) + b, true, e - b);
          } else {
            FloatBlocks<float>(t, 2, in, scalar, o, true, b, e,
                               [&](const auto* const* p, auto* r, int64_t m, bool in_cache) {
                                 if (in_cache) {
                                   cached::BinaryFloat(op, p[0], p[1], r, m);
                                 } else {
                                   streaming::BinaryFloat(op, p[0], p[1], r, m);
                                 }
                               });
          }
        } else if (t == PrimitiveType::kPred) {
          const uint8_t* pa = static_cast<const uint8_t*>(in[0]) + b;
          const uint8_t* pb = static_cast<const uint8_t*>(in[1]) + b;
          uint8_t* r = static_cast<uint8_t*>(o) + b;
          if (compare) {
            CompareValues(dir, pa, pb, r, e - b);
          } else {
            BinaryPred(op, pa, pb, r, e - b);
          }
        } else {
          DispatchInt(t, [&](auto* tag) {
            using T = std::remove_pointer_t<decltype(tag)>;
            const T* pa = static_cast<const T*>(in[0]) + b;
            const T* pb = static_cast<const T*>(in[1]) + b;
            if (compare) {
              CompareValues(dir, pa, pb, static_cast<uint8_t*>(o) + b, e - b);
            } else {
              BinaryInt(op, pa, pb, static_cast<T*>(o) + b, e - b);
            }
          });
        }
      });
  return Value{std::move(out)};
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
                       [&](const auto* const* p, auto* r, int64_t m, bool in_cache) {
                         if (in_cache) {
                           cached::ClampFloat(p[0], lo_scalar, p[1], p[2], hi_scalar, r, m);
                         } else {
                           streaming::ClampFloat(p[0], lo_scalar, p[1], p[2], hi_scalar, r, m);
                         }
                       });
  } else {
    WEFT_CHECK(t != PrimitiveType::kPred, "clamp of pred is not supported");
    DispatchInt(t, [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      ClampInt(lo.data<T>(), lo_scalar, x.data<T>(), hi.data<T>(), hi_scalar, static_cast<T*>(o),
               n);
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
                   ConvertElements(x.element_type(),
                                   static_cast<const std::byte*>(in) + b * from_width, to,
                                   static_cast<std::byte*>(o) + b * to_width, e - b);
                 });
  return Value{std::move(out)};
}

// Float to integer: truncate toward zero, saturate, NaN -> 0.
template <typename T>
T SaturateToInt(double v) {
  if (v != v) return 0;
  constexpr double lo = static_cast<double>(std::numeric_limits<T>::min());
  constexpr double hi = static_cast<double>(std::numeric_limits<T>::max());
  const double d = std::trunc(v);
  if (d <= lo) return std::numeric_limits<T>::min();
  if (d >= hi) return std::numeric_limits<T>::max();
  return static_cast<T>(d);
}

// n values of C++ type From converted to To by convert's rules (uint8_t is
// pred: != 0; float to integer saturates; integers wrap).
template <typename From, typename To>
void ConvertSpan(const From* in, To* out, int64_t n) {
  for (int64_t k = 0; k < n; ++k) {
    if constexpr (std::is_same_v<To, uint8_t>) {
      out[k] = in[k] != 0;
    } else if constexpr (std::is_floating_point_v<From> && std::is_integral_v<To>) {
      out[k] = SaturateToInt<To>(in[k]);
    } else {
      out[k] = static_cast<To>(in[k]);
    }
  }
}

}  // namespace

double LoadAsDouble(PrimitiveType type, const void* data, int64_t i) {
  switch (type) {
    case PrimitiveType::kF32:
      return static_cast<const float*>(data)[i];
    case PrimitiveType::kF64:
      return static_cast<const double*>(data)[i];
    case PrimitiveType::kBF16:
      return Bf16BitsToFloat(static_cast<const uint16_t*>(data)[i]);
    case PrimitiveType::kF16:
      return F16BitsToFloat(static_cast<const uint16_t*>(data)[i]);
    case PrimitiveType::kF8E4M3FN:
      return F8E4M3FNToDouble(static_cast<const uint8_t*>(data)[i]);
    case PrimitiveType::kF8E8M0FNU:
      return F8E8M0FNUToDouble(static_cast<const uint8_t*>(data)[i]);
    case PrimitiveType::kU64:  // not through int64: values past 2^63 stay positive
      return static_cast<double>(static_cast<const uint64_t*>(data)[i]);
    default:
      return static_cast<double>(LoadAsInt(type, data, i));
  }
}

int64_t LoadAsInt(PrimitiveType type, const void* data, int64_t i) {
  if (IsFloatingPoint(type)) return static_cast<int64_t>(LoadAsDouble(type, data, i));
  if (type == PrimitiveType::kPred) return static_cast<const uint8_t*>(data)[i] != 0;
  int64_t v = 0;
  DispatchInt(type, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    v = static_cast<int64_t>(static_cast<const T*>(data)[i]);
  });
  return v;
}

void StoreDouble(PrimitiveType type, void* data, int64_t i, double v) {
  switch (type) {
    case PrimitiveType::kF32:
      static_cast<float*>(data)[i] = static_cast<float>(v);
      return;
    case PrimitiveType::kF64:
      static_cast<double*>(data)[i] = v;
      return;
    case PrimitiveType::kBF16:
      static_cast<uint16_t*>(data)[i] = FloatToBf16Bits(static_cast<float>(v));
      return;
    case PrimitiveType::kF16:
      static_cast<uint16_t*>(data)[i] = FloatToF16Bits(static_cast<float>(v));
      return;
    case PrimitiveType::kF8E4M3FN:
      static_cast<uint8_t*>(data)[i] = DoubleToF8E4M3FN(v);
      return;
    case PrimitiveType::kF8E8M0FNU:
      static_cast<uint8_t*>(data)[i] = DoubleToF8E8M0FNU(v);
      return;
    default:
      // Integers: truncate toward zero, then wrap to the type's width.
      StoreInt(type, data, i,
               std::isfinite(v) && std::fabs(v) < 9.2e18 ? static_cast<int64_t>(v) : 0);
  }
}

void StoreInt(PrimitiveType type, void* data, int64_t i, int64_t v) {
  if (type == PrimitiveType::kPred) {
    static_cast<uint8_t*>(data)[i] = v != 0;
    return;
  }
  DispatchInt(type, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    static_cast<T*>(data)[i] = static_cast<T>(v);
  });
}

// bf16 and f16 go through f32 a block at a time (so f64 to bf16 rounds
// twice, as a conversion through f32 would); the other types convert
// directly, one type dispatch per block. The half conversions run the
// `cached` clones (see FloatBlocks): f32 to bf16 of 6.3M elements took
// 1.45-1.69 ms with the baseline's loops, 0.9-1.07 ms with AVX-512.
void ConvertElements(PrimitiveType from, const void* in, PrimitiveType to, void* out, int64_t n) {
  if (IsFloat8(from) || IsFloat8(to)) {  // element by element through double (exact for f8)
    for (int64_t i = 0; i < n; ++i) {
      if (IsFloatingPoint(to)) {
        StoreDouble(to, out, i, LoadAsDouble(from, in, i));
      } else {  // f8 to an integer or pred: convert's rules, as from f64
        const double v = LoadAsDouble(from, in, i);
        ConvertElements(PrimitiveType::kF64, &v, to,
                        static_cast<std::byte*>(out) + i * ByteWidth(to), 1);
      }
    }
    return;
  }
  // Fast paths for the conversions mixed precision uses.
  if (from == PrimitiveType::kF32 && IsHalf(to)) {
    return cached::FloatToHalf(to, static_cast<const float*>(in), static_cast<uint16_t*>(out), n);
  }
  if (IsHalf(from) && to == PrimitiveType::kF32) {
    return cached::HalfToFloat(from, static_cast<const uint16_t*>(in), static_cast<float*>(out), n);
  }
  const PrimitiveType from_repr = IsHalf(from) ? PrimitiveType::kF32 : from;
  const PrimitiveType to_repr = IsHalf(to) ? PrimitiveType::kF32 : to;
  float src[kBlock], dst[kBlock];
  for (int64_t b = 0; b < n; b += kBlock) {
    const int64_t m = std::min(kBlock, n - b);
    const void* s = static_cast<const std::byte*>(in) + b * ByteWidth(from);
    if (IsHalf(from)) {
      cached::HalfToFloat(from, static_cast<const uint16_t*>(s), src, m);
      s = src;
    }
    void* d =
        IsHalf(to) ? static_cast<void*>(dst) : static_cast<std::byte*>(out) + b * ByteWidth(to);
    DispatchStored(from_repr, [&](auto* from_tag) {
      DispatchStored(to_repr, [&](auto* to_tag) {
        using From = std::remove_pointer_t<decltype(from_tag)>;
        using To = std::remove_pointer_t<decltype(to_tag)>;
        ConvertSpan(static_cast<const From*>(s), static_cast<To*>(d), m);
      });
    });
    if (IsHalf(to)) cached::FloatToHalf(to, dst, static_cast<uint16_t*>(out) + b, m);
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
  // The f8 types are storage: converted, copied and selected, not computed on.
  if (IsFloat8(t) && op != HloOpcode::kConvert && op != HloOpcode::kCopy &&
      op != HloOpcode::kSelect) {
    Fail("{} of {} is not supported: the f8 types are storage types; convert to f32 first",
         HloOpcodeString(op), PrimitiveTypeName(t));
  }
  switch (op) {
    case HloOpcode::kNot:
      if (is_float) unsupported();
      break;
    case HloOpcode::kAnd:
    case HloOpcode::kOr:
    case HloOpcode::kXor:
      if (is_float) unsupported();
      break;
    case HloOpcode::kShiftLeft:
    case HloOpcode::kShiftRightArith:
    case HloOpcode::kShiftRightLogical:
    case HloOpcode::kPopcnt:
    case HloOpcode::kClz:
      if (is_float || is_pred) unsupported();
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
  WEFT_CHECK(
      instr.shape().IsArray() && PrimitiveTypeName(instr.shape().element_type()) != "invalid",
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
