#include "reduce.h"

#include <algorithm>
#include <cstring>
#include <type_traits>

namespace weft::runtime {

namespace {

// Elements per block: the accumulator stays in L1, and reading a block of
// every input before writing it makes `out` == an input safe.
constexpr int64_t kBlock = 1024;

// Element i of a buffer of T (the buffers are bytes, of any alignment).
template <typename T>
T LoadAt(const std::byte* p, int64_t i) {
  T v;
  std::memcpy(&v, p + i * static_cast<int64_t>(sizeof(T)), sizeof(T));
  return v;
}

// Always inlined, so that each target clone below compiles its loops for
// its own instructions.
template <typename T, typename Acc, typename Load, typename Store, typename Combine>
[[gnu::always_inline]] inline void ReduceTyped(const std::byte* const* inputs, int64_t n,
                                               std::byte* out, int64_t count, Load load,
                                               Store store, Combine combine) {
  constexpr int64_t w = sizeof(T);
  Acc acc[kBlock];
  for (int64_t start = 0; start < count; start += kBlock) {
    const int64_t len = std::min(kBlock, count - start);
    auto in = [&](int64_t m) { return inputs[m] + start * w; };
    std::byte* dst = out + start * w;
    auto put = [&](int64_t i, Acc v) {
      const T t = store(v);
      std::memcpy(dst + i * w, &t, sizeof(T));
    };
    // Two inputs (a collective over two devices, the common case) in one
    // pass; more go through the accumulator, the first two and the last
    // combined in the passes that load and store it. The inputs' pointers
    // are read before the loops: the stores are bytes, which may alias them.
    const std::byte* const first = in(0);
    if (n == 1) {
      for (int64_t i = 0; i < len; ++i) put(i, load(LoadAt<T>(first, i)));
      continue;
    }
    const std::byte* const second = in(1);
    if (n == 2) {
      for (int64_t i = 0; i < len; ++i) {
        put(i, combine(load(LoadAt<T>(first, i)), load(LoadAt<T>(second, i))));
      }
      continue;
    }
    for (int64_t i = 0; i < len; ++i) {
      acc[i] = combine(load(LoadAt<T>(first, i)), load(LoadAt<T>(second, i)));
    }
    for (int64_t m = 2; m + 1 < n; ++m) {
      const std::byte* const next = in(m);
      for (int64_t i = 0; i < len; ++i) acc[i] = combine(acc[i], load(LoadAt<T>(next, i)));
    }
    const std::byte* const last = in(n - 1);
    for (int64_t i = 0; i < len; ++i) put(i, combine(acc[i], load(LoadAt<T>(last, i))));
  }
}

// Max and min that return NaN when either side is NaN.
template <typename V>
V MaxOf(V a, V b) {
  return (a > b || a != a) ? a : b;
}
template <typename V>
V MinOf(V a, V b) {
  return (a < b || a != a) ? a : b;
}

template <typename T, typename Acc, typename Load, typename Store>
[[gnu::always_inline]] inline void ReduceWithOp(ReduceOp op, const std::byte* const* inputs,
                                                int64_t n, std::byte* out, int64_t count, Load load,
                                                Store store) {
  switch (op) {
    case ReduceOp::kSum:
      return ReduceTyped<T, Acc>(inputs, n, out, count, load, store,
                                 [](Acc a, Acc b) { return static_cast<Acc>(a + b); });
    case ReduceOp::kMax:
      return ReduceTyped<T, Acc>(inputs, n, out, count, load, store, MaxOf<Acc>);
    case ReduceOp::kMin:
      return ReduceTyped<T, Acc>(inputs, n, out, count, load, store, MinOf<Acc>);
  }
}

// Integers: sums wrap (computed unsigned, which is defined), max/min signed.
template <typename T>
void ReduceInteger(ReduceOp op, const std::byte* const* inputs, int64_t n, std::byte* out,
                   int64_t count) {
  using U = std::make_unsigned_t<T>;
  if (op == ReduceOp::kSum) {
    ReduceWithOp<T, U>(
        op, inputs, n, out, count, [](T v) { return static_cast<U>(v); },
        [](U v) { return static_cast<T>(v); });
  } else {
    auto same = [](T v) { return v; };
    ReduceWithOp<T, T>(op, inputs, n, out, count, same, same);
  }
}

// The float reductions, compiled for AVX-512, AVX2 and the baseline (one
// chosen from cpuid when the program loads). Each element is combined in
// the same order whatever the vector width, and a sum has no multiply to
// contract, so every clone gives the same bits.
__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default"))) void ReduceF32(
    ReduceOp op, const std::byte* const* inputs, int64_t n, std::byte* out, int64_t count) {
  auto same = [](float v) { return v; };
  ReduceWithOp<float, float>(op, inputs, n, out, count, same, same);
}

__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default"))) void ReduceBf16(
    ReduceOp op, const std::byte* const* inputs, int64_t n, std::byte* out, int64_t count) {
  // Lambdas, not the functions' addresses: inlined, so the loops vectorize.
  ReduceWithOp<uint16_t, float>(
      op, inputs, n, out, count, [](uint16_t v) { return Bf16ToFloat(v); },
      [](float v) { return FloatToBf16(v); });
}

}  // namespace

void ReduceBuffers(PrimitiveType dtype, ReduceOp op, const std::byte* const* inputs, int64_t n,
                   std::byte* out, int64_t count) {
  if (count <= 0) return;
  WEFT_CHECK(n >= 1, "ReduceBuffers needs at least one input");
  switch (dtype) {
    case PrimitiveType::kF32:
      return ReduceF32(op, inputs, n, out, count);
    case PrimitiveType::kBF16:
      return ReduceBf16(op, inputs, n, out, count);
    case PrimitiveType::kS32:
      return ReduceInteger<int32_t>(op, inputs, n, out, count);
    case PrimitiveType::kS64:
      return ReduceInteger<int64_t>(op, inputs, n, out, count);
    case PrimitiveType::kPred: {
      auto same = [](uint8_t v) { return v; };
      return ReduceWithOp<uint8_t, uint8_t>(op, inputs, n, out, count, same, same);
    }
    case PrimitiveType::kF64: {
      auto same = [](double v) { return v; };
      return ReduceWithOp<double, double>(op, inputs, n, out, count, same, same);
    }
    case PrimitiveType::kU16:
      return ReduceInteger<uint16_t>(op, inputs, n, out, count);
    default:
      CheckCollectiveType(dtype);
      FailInternal("ReduceBuffers has no reduction for {}", PrimitiveTypeName(dtype));
  }
}

}  // namespace weft::runtime
