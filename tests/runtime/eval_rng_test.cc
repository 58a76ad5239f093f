// rng-bit-generator through the executor against the independent
// reference of XLA's bits (random_bits_reference.h), states threaded from
// one generator to the next; rng's distributions (weft's own generator):
// ranges, moments, repeatability and fresh numbers per loop trip.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <set>

#include "executor_test_util.h"
#include "random_bits_reference.h"

namespace weft::runtime {
namespace {

using testing::RefPhiloxBits;
using testing::RefThreeFryBits32;

HostTensor State(const std::vector<uint64_t>& words) {
  return HostTensor::FromVector<uint64_t>(PrimitiveType::kU64, {static_cast<int64_t>(words.size())},
                                          words);
}

std::vector<uint64_t> Words(const HostTensor& t) {
  std::vector<uint64_t> out;
  for (int64_t i = 0; i < t.element_count(); ++i) {
    uint64_t v = 0;
    std::memcpy(&v, static_cast<const std::byte*>(t.raw_data()) + i * ByteWidth(t.element_type()),
                static_cast<size_t>(ByteWidth(t.element_type())));
    out.push_back(v);
  }
  return out;
}

// Two generators in a row, the second on the first's state: philox on
// u64[2] and u64[3] states, three_fry, default (philox), 32- and 64-bit.
TEST(EvalRngTest, RngBitGeneratorGivesXlasBitsAndThreadsTheState) {
  struct Case {
    std::string algorithm;
    int64_t words;
    std::string type;
    std::vector<int64_t> dims;
  };
  const std::vector<Case> cases = {{"rng_philox", 2, "u32", {5, 7}},
                                   {"rng_philox", 3, "u64", {9}},
                                   {"rng_default", 2, "s32", {3, 4}},
                                   {"rng_three_fry", 2, "u32", {3, 5}},
                                   {"rng_three_fry", 2, "u32", {}}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.algorithm + " " + c.type);
    const std::string dims = fmt::format("{}", fmt::join(c.dims, ","));
    const std::string text = fmt::format(R"(HloModule rbg
ENTRY e {{
  s = u64[{0}] parameter(0)
  g1 = (u64[{0}], {1}[{2}]) rng-bit-generator(s), algorithm={3}
  s1 = u64[{0}] get-tuple-element(g1), index=0
  b1 = {1}[{2}] get-tuple-element(g1), index=1
  g2 = (u64[{0}], {1}[{2}]) rng-bit-generator(s1), algorithm={3}
  s2 = u64[{0}] get-tuple-element(g2), index=0
  b2 = {1}[{2}] get-tuple-element(g2), index=1
  ROOT r = ({1}[{2}], {1}[{2}], u64[{0}]) tuple(b1, b2, s2)
}}
)",
                                         c.words, c.type, dims, c.algorithm);
    std::vector<uint64_t> state = {0x9e3779b97f4a7c15ULL, 0xfffffffffffffffeULL};
    if (c.words == 3) state.push_back(11);
    const std::vector<HostTensor> out = testing::RunText(text, {State(state)});
    ASSERT_EQ(out.size(), 3u);
    int64_t n = 1;
    for (int64_t d : c.dims) n *= d;
    std::vector<uint64_t> s1, s2, want1, want2;
    if (c.algorithm == "rng_three_fry") {
      want1 = RefThreeFryBits32(state, c.dims, &s1);
      want2 = RefThreeFryBits32(s1, c.dims, &s2);
    } else {
      const bool wide = c.type == "u64";
      want1 = RefPhiloxBits(state, n, wide, &s1);
      want2 = RefPhiloxBits(s1, n, wide, &s2);
    }
    EXPECT_EQ(Words(out[0]), want1);
    EXPECT_EQ(Words(out[1]), want2);
    EXPECT_EQ(Words(out[2]), s2);
    EXPECT_NE(want1, want2);
  }
}

// XLA's verifier also takes a rng-bit-generator that returns the bits
// alone: they are the bits of the (state, bits) form on the same state.
TEST(EvalRngTest, ARngBitGeneratorMayReturnTheBitsAlone) {
  for (const char* algorithm : {"rng_philox", "rng_three_fry"}) {
    SCOPED_TRACE(algorithm);
    const std::string text = fmt::format(R"(HloModule rbg
ENTRY e {{
  s = u64[2] parameter(0)
  alone = u32[6,5] rng-bit-generator(s), algorithm={0}
  g = (u64[2], u32[6,5]) rng-bit-generator(s), algorithm={0}
  bits = u32[6,5] get-tuple-element(g), index=1
  ROOT r = (u32[6,5], u32[6,5]) tuple(alone, bits)
}}
)",
                                         algorithm);
    const std::vector<uint64_t> state = {0x0123456789abcdefULL, 42};
    const std::vector<HostTensor> out = testing::RunText(text, {State(state)});
    ASSERT_EQ(out.size(), 2u);
    EXPECT_EQ(Words(out[0]), Words(out[1]));
    std::vector<uint64_t> ignored;
    const std::vector<uint64_t> want = std::string(algorithm) == "rng_philox"
                                           ? RefPhiloxBits(state, 30, false, &ignored)
                                           : RefThreeFryBits32(state, {6, 5}, &ignored);
    EXPECT_EQ(Words(out[0]), want);
  }
  testing::ExpectErrorContaining(
      [] {
        testing::Parse(R"(HloModule m
ENTRY e {
  s = u64[2] parameter(0)
  ROOT g = (u64[2], u32[4], u32[4]) rng-bit-generator(s), algorithm=rng_philox
})");
      },
      {"rng-bit-generator returns (state, bits) or the bits alone", "(u64[2], u32[...])"});
}

TEST(EvalRngTest, RngBitGeneratorRefusesABadState) {
  testing::ExpectErrorContaining(
      [] {
        testing::Parse(R"(HloModule m
ENTRY e {
  s = u64[3] parameter(0)
  ROOT g = (u64[3], u32[4]) rng-bit-generator(s), algorithm=rng_three_fry
})");
      },
      {"rng-bit-generator rng_three_fry needs a state of u64[2]", "got u64[3]"});
}

std::vector<double> RunRng(const std::string& type, const std::string& distribution, double a,
                           double b, int64_t n) {
  const std::string text = fmt::format(R"(HloModule r
ENTRY e {{
  a = {0}[] constant({2})
  b = {0}[] constant({3})
  ROOT r = {0}[{4}] rng(a, b), distribution={1}
}}
)",
                                       type, distribution, a, b, n);
  return testing::RunText(text, {})[0].ToDoubles();
}

// rng_uniform in [a, b) (floats and integers), rng_normal with mean a and
// standard deviation b, the moments within 5 standard errors.
TEST(EvalRngTest, RngDistributionsHaveTheirRangesAndMoments) {
  const int64_t n = 20000;
  for (const std::string type : {"f32", "bf16", "f64"}) {
    const std::vector<double> u = RunRng(type, "rng_uniform", -1.5, 2.5, n);
    double mean = 0;
    for (double v : u) {
      ASSERT_GE(v, -1.5) << type;
      ASSERT_LT(v, 2.5) << type;
      mean += v / n;
    }
    EXPECT_NEAR(mean, 0.5, 5 * 4 / std::sqrt(12.0 * n)) << type;
  }
  const std::vector<double> k = RunRng("s32", "rng_uniform", -3, 4, n);
  std::set<double> seen(k.begin(), k.end());
  EXPECT_EQ(seen, (std::set<double>{-3, -2, -1, 0, 1, 2, 3}));
  const std::vector<double> z = RunRng("f32", "rng_normal", 2, 3, n);
  double mean = 0, var = 0;
  for (double v : z) mean += v / n;
  for (double v : z) var += (v - mean) * (v - mean) / (n - 1);
  EXPECT_NEAR(mean, 2, 5 * 3 / std::sqrt(double(n)));
  EXPECT_NEAR(std::sqrt(var), 3, 5 * 3 / std::sqrt(2.0 * n));
}

// The same module in a new executor repeats its numbers; a rng in a loop
// draws new numbers on each trip.
TEST(EvalRngTest, RngRepeatsPerExecutorAndDrawsAfreshEachTrip) {
  EXPECT_EQ(RunRng("f32", "rng_uniform", 0, 1, 64), RunRng("f32", "rng_uniform", 0, 1, 64));
  const char* loop = R"(HloModule loop
cond {
  s = (s32[], f32[2,8]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  two = s32[] constant(2)
  ROOT lt = pred[] compare(i, two), direction=LT
}
body {
  s = (s32[], f32[2,8]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  acc = f32[2,8] get-tuple-element(s), index=1
  lo = f32[] constant(0)
  hi = f32[] constant(1)
  u = f32[1,8] rng(lo, hi), distribution=rng_uniform
  zero = s32[] constant(0)
  acc2 = f32[2,8] dynamic-update-slice(acc, u, i, zero)
  one = s32[] constant(1)
  i2 = s32[] add(i, one)
  ROOT t = (s32[], f32[2,8]) tuple(i2, acc2)
}
ENTRY e {
  zero = s32[] constant(0)
  z = f32[] constant(0)
  acc = f32[2,8] broadcast(z), dimensions={}
  init = (s32[], f32[2,8]) tuple(zero, acc)
  l = (s32[], f32[2,8]) while(init), condition=cond, body=body
  ROOT out = f32[2,8] get-tuple-element(l), index=1
})";
  const std::vector<double> v = testing::RunText(loop, {})[0].ToDoubles();
  const std::vector<double> trip0(v.begin(), v.begin() + 8), trip1(v.begin() + 8, v.end());
  EXPECT_NE(trip0, trip1);
  for (double x : v) EXPECT_TRUE(x >= 0 && x < 1) << x;
}

}  // namespace
}  // namespace weft::runtime
