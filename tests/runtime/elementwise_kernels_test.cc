// The elementwise span kernels' own formulas: ExpF (the f32 e^x every exp
// and logistic of the executor runs) against float64 over every 97th float
// of its range and at the edges, and the two compilations of the span
// kernels (streaming for whole buffers, cached as target clones for fused
// tiles) giving the same bits, NaNs included; the kernels that round their
// results to bf16 in the same pass against rounding afterwards; select of
// every element width against a plain choice, in place too.
#include "elementwise_kernels.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace weft::runtime::exec {
namespace {

// Distance in units in the last place of `want` (float64 rounded to f32).
double Ulps(float got, double want) {
  const float w = static_cast<float>(want);
  if (got == w) return 0;
  const float next = std::nextafter(w, std::numeric_limits<float>::infinity());
  const double ulp = static_cast<double>(next) - static_cast<double>(w);
  return std::fabs(static_cast<double>(got) - want) / ulp;
}

TEST(ElementwiseKernelsTest, ExpFIsWithinTwoUlpOverItsWholeRange) {
  double worst = 0;
  float worst_at = 0;
  int64_t checked = 0;
  // Every 97th f32 bit pattern from -104 to 89 (both signs), about 21M values.
  for (const float end : {-104.0f, 89.0f}) {
    const uint32_t last = std::bit_cast<uint32_t>(end);
    for (uint32_t bits = end < 0 ? 0x80000000u : 0u; bits <= last; bits += 97) {
      const float x = std::bit_cast<float>(bits);
      const double want = std::exp(static_cast<double>(x));
      const double ulps = Ulps(ExpF(x), want);
      ++checked;
      if (ulps > worst) {
        worst = ulps;
        worst_at = x;
      }
    }
  }
  EXPECT_GT(checked, 20'000'000);
  EXPECT_LE(worst, 2.0) << "at x = " << worst_at << ": ExpF " << ExpF(worst_at) << ", e^x "
                        << std::exp(static_cast<double>(worst_at));
}

TEST(ElementwiseKernelsTest, ExpFEdges) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(ExpF(0.0f), 1.0f);
  EXPECT_EQ(ExpF(-0.0f), 1.0f);
  EXPECT_EQ(ExpF(kInf), kInf);
  EXPECT_EQ(ExpF(-kInf), 0.0f);
  EXPECT_TRUE(std::isnan(ExpF(std::numeric_limits<float>::quiet_NaN())));
  // ln(FLT_MAX) = 88.7228391...: the float below it is finite, above it inf.
  EXPECT_TRUE(std::isfinite(ExpF(88.72283f)));
  EXPECT_EQ(ExpF(88.7229f), kInf);
  EXPECT_EQ(ExpF(1000.0f), kInf);
  // Subnormal results round once: within one subnormal step of e^x.
  constexpr double kStep = 1.401298464324817e-45;  // 2^-149
  for (float x = -103.9f; x < -87.0f; x += 0.37f) {
    const double want = std::exp(static_cast<double>(x));
    EXPECT_LE(std::fabs(static_cast<double>(ExpF(x)) - want), std::max(kStep, want * 2.5e-7)) << x;
  }
  EXPECT_EQ(ExpF(-104.5f), 0.0f);
  EXPECT_EQ(ExpF(-1e30f), 0.0f);
}

TEST(ElementwiseKernelsTest, StreamingAndCachedKernelsGiveTheSameBits) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> wide(-120.0f, 100.0f), narrow(-6.0f, 6.0f);
  std::vector<float> x(4099);
  for (size_t i = 0; i < x.size(); ++i) x[i] = i % 3 ? narrow(rng) : wide(rng);
  x[5] = std::numeric_limits<float>::quiet_NaN();
  x[6] = -std::numeric_limits<float>::infinity();
  for (HloOpcode op : {HloOpcode::kExp, HloOpcode::kLogistic, HloOpcode::kTanh, HloOpcode::kLog,
                       HloOpcode::kRsqrt}) {
    std::vector<float> a(x.size()), b(x.size());
    streaming::UnaryFloat(op, x.data(), a.data(), static_cast<int64_t>(x.size()));
    cached::UnaryFloat(op, x.data(), b.data(), static_cast<int64_t>(x.size()));
    for (size_t i = 0; i < x.size(); ++i) {
      ASSERT_EQ(std::bit_cast<uint32_t>(a[i]), std::bit_cast<uint32_t>(b[i]))
          << HloOpcodeString(op) << " of " << x[i];
    }
  }
  // logistic against float64 where it is not tiny.
  std::vector<float> y(x.size());
  streaming::UnaryFloat(HloOpcode::kLogistic, x.data(), y.data(), static_cast<int64_t>(x.size()));
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::isnan(x[i]) || x[i] < -80.0f) continue;
    const double want = 1.0 / (1.0 + std::exp(-static_cast<double>(x[i])));
    EXPECT_LE(Ulps(y[i], want), 3.0) << x[i];
  }
}

// Random bit patterns (every exponent, NaNs with payloads and signs,
// infinities, subnormals) plus ties and the values that round to infinity.
std::vector<float> EdgyFloats(uint32_t seed, size_t n) {
  std::mt19937 rng(seed);
  std::vector<float> x(n);
  for (float& v : x) v = std::bit_cast<float>(static_cast<uint32_t>(rng()));
  const uint32_t special[] = {0x3f808000u, 0x3f818000u, 0xbf808000u, 0x7f7fffffu, 0xff7fffffu,
                              0x7f7f8000u, 0x00008000u, 0x00018000u, 0x7f800000u, 0xff800000u,
                              0x7fc00001u, 0xff80ffffu, 0x7f800001u, 0x80000000u, 0x00000001u};
  for (size_t i = 0; i < std::size(special); ++i) x[3 * i] = std::bit_cast<float>(special[i]);
  return x;
}

TEST(ElementwiseKernelsTest, KernelsRoundingToBf16MatchRoundingAfterwards) {
  std::vector<float> a = EdgyFloats(11, 4099), b = EdgyFloats(12, 4099);
  const int64_t n = static_cast<int64_t>(a.size());
  // Operands given as bf16 bits are widened exactly: the same values.
  std::vector<uint16_t> a_bits(a.size()), b_bits(b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    a_bits[i] = FloatToBf16Bits(a[i]);
    b_bits[i] = FloatToBf16Bits(b[i]);
  }
  std::vector<float> a_rounded(a.size()), b_rounded(b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    a_rounded[i] = Bf16BitsToFloat(a_bits[i]);
    b_rounded[i] = Bf16BitsToFloat(b_bits[i]);
  }
  std::vector<float> want(a.size()), got(a.size());
  std::vector<uint16_t> got_bits(a.size());
  auto check = [&](const std::string& what) {
    for (size_t i = 0; i < a.size(); ++i) {
      const uint16_t bits = FloatToBf16Bits(want[i]);
      ASSERT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(Bf16BitsToFloat(bits)))
          << what << " at " << i << ": " << a[i] << ", " << b[i];
      ASSERT_EQ(got_bits[i], bits) << what << " (bits) at " << i << ": " << a[i] << ", " << b[i];
    }
  };
  for (HloOpcode op : {HloOpcode::kAdd, HloOpcode::kMultiply, HloOpcode::kDivide,
                       HloOpcode::kSubtract, HloOpcode::kMaximum}) {
    const std::string name(HloOpcodeString(op));
    streaming::BinaryFloat(op, a.data(), b.data(), want.data(), n);
    cached::BinaryFloatToBf16(op, a.data(), false, b.data(), false, got.data(), false, n);
    cached::BinaryFloatToBf16(op, a.data(), false, b.data(), false, got_bits.data(), true, n);
    check(name);
    streaming::BinaryFloatToBf16(op, a.data(), false, b.data(), false, got.data(), false, n);
    streaming::BinaryFloatToBf16(op, a.data(), false, b.data(), false, got_bits.data(), true, n);
    check(name + " (streaming)");
    // bf16 operands: as the f32 kernel on their values.
    streaming::BinaryFloat(op, a_rounded.data(), b.data(), want.data(), n);
    cached::BinaryFloatToBf16(op, a_bits.data(), true, b.data(), false, got.data(), false, n);
    cached::BinaryFloatToBf16(op, a_bits.data(), true, b.data(), false, got_bits.data(), true, n);
    check(name + " (bf16, f32)");
    streaming::BinaryFloat(op, a.data(), b_rounded.data(), want.data(), n);
    cached::BinaryFloatToBf16(op, a.data(), false, b_bits.data(), true, got.data(), false, n);
    cached::BinaryFloatToBf16(op, a.data(), false, b_bits.data(), true, got_bits.data(), true, n);
    check(name + " (f32, bf16)");
    streaming::BinaryFloat(op, a_rounded.data(), b_rounded.data(), want.data(), n);
    cached::BinaryFloatToBf16(op, a_bits.data(), true, b_bits.data(), true, got.data(), false, n);
    cached::BinaryFloatToBf16(op, a_bits.data(), true, b_bits.data(), true, got_bits.data(), true,
                              n);
    check(name + " (bf16, bf16)");
  }
  for (HloOpcode op : {HloOpcode::kLogistic, HloOpcode::kNegate, HloOpcode::kExp}) {
    const std::string name(HloOpcodeString(op));
    streaming::UnaryFloat(op, a.data(), want.data(), n);
    cached::UnaryFloatToBf16(op, a.data(), false, got.data(), false, n);
    cached::UnaryFloatToBf16(op, a.data(), false, got_bits.data(), true, n);
    check(name);
    streaming::UnaryFloat(op, a_rounded.data(), want.data(), n);
    cached::UnaryFloatToBf16(op, a_bits.data(), true, got.data(), false, n);
    cached::UnaryFloatToBf16(op, a_bits.data(), true, got_bits.data(), true, n);
    check(name + " (bf16)");
  }
  // RoundToHalf, the separate pass, agrees too.
  got = a;
  cached::RoundToHalf(PrimitiveType::kBF16, got.data(), n);
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(std::bit_cast<uint32_t>(got[i]),
              std::bit_cast<uint32_t>(Bf16BitsToFloat(FloatToBf16Bits(a[i]))))
        << a[i];
  }
}

// SelectBytes blends both sides through a mask: every width picks the
// chosen side's bits (NaN payloads and -0 included), on random predicates
// and with the output written over either input.
template <int kBytes>
void CheckSelect(std::mt19937& rng) {
  using T = typename Bits<kBytes>::type;
  const int64_t n = 1000 + static_cast<int64_t>(rng() % 100);
  std::vector<uint8_t> pred(n);
  std::vector<T> a(n), b(n);
  for (int64_t i = 0; i < n; ++i) {
    pred[i] = static_cast<uint8_t>(rng() % 3 == 0);
    a[i] = static_cast<T>((uint64_t{rng()} << 32) | rng());
    b[i] = static_cast<T>(~a[i] ^ static_cast<T>(rng()));
  }
  std::vector<T> want(n);
  for (int64_t i = 0; i < n; ++i) want[i] = pred[i] ? a[i] : b[i];
  std::vector<T> out(n);
  SelectBytes<kBytes>(pred.data(), false, a.data(), b.data(), out.data(), 0, n);
  EXPECT_EQ(out, want) << kBytes << "-byte elements";
  // A range [begin, end) leaves the rest alone.
  std::vector<T> part(n, T{7});
  SelectBytes<kBytes>(pred.data(), false, a.data(), b.data(), part.data(), 3, n - 5);
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(part[i], i >= 3 && i < n - 5 ? want[i] : T{7}) << kBytes << "-byte, element " << i;
  }
  std::vector<T> over_a = a, over_b = b;
  SelectBytes<kBytes>(pred.data(), false, over_a.data(), b.data(), over_a.data(), 0, n);
  SelectBytes<kBytes>(pred.data(), false, a.data(), over_b.data(), over_b.data(), 0, n);
  EXPECT_EQ(over_a, want) << kBytes << "-byte elements, written over the true side";
  EXPECT_EQ(over_b, want) << kBytes << "-byte elements, written over the false side";
  // A scalar predicate copies one side.
  const uint8_t yes = 1, no = 0;
  SelectBytes<kBytes>(&yes, true, a.data(), b.data(), out.data(), 0, n);
  EXPECT_EQ(out, a);
  SelectBytes<kBytes>(&no, true, a.data(), b.data(), out.data(), 0, n);
  EXPECT_EQ(out, b);
}

TEST(ElementwiseKernelsTest, SelectPicksEachElementsChosenSide) {
  std::mt19937 rng(20261130);
  CheckSelect<1>(rng);
  CheckSelect<2>(rng);
  CheckSelect<4>(rng);
  CheckSelect<8>(rng);
}

}  // namespace
}  // namespace weft::runtime::exec
