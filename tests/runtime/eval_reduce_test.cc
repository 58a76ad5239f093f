#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <functional>

#include "executor_test_util.h"
#include "weft/base/algorithm.h"

namespace weft::runtime {
namespace {

using testing::ExpectEqual;
using testing::ExpectNear;
using testing::Random;
using testing::RunNamed;
using testing::Unravel;

// Reduces x over `dims` in float64, visiting elements in row-major order.
std::vector<double> ReferenceReduce(const HostTensor& x, const std::vector<int64_t>& dims,
                                    double init, const std::function<double(double, double)>& op) {
  std::vector<int64_t> kept;
  for (int64_t d = 0; d < x.rank(); ++d) {
    if (!Contains(dims, d)) kept.push_back(x.dimensions()[d]);
  }
  int64_t n = 1;
  for (int64_t d : kept) n *= d;
  std::vector<double> out(n, init);
  for (int64_t e = 0; e < x.element_count(); ++e) {
    const std::vector<int64_t> idx = Unravel(e, x.dimensions());
    int64_t o = 0;
    for (int64_t d = 0; d < x.rank(); ++d) {
      if (!Contains(dims, d)) o = o * x.dimensions()[d] + idx[d];
    }
    out[o] = op(out[o], x.GetDouble(e));
  }
  return out;
}

constexpr const char* kReducers = R"(
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
max {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT m = f32[] maximum(b, a)
}
min {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT m = f32[] minimum(a, b)
}
mul {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT m = f32[] multiply(a, b)
}
addb {
  a = bf16[] parameter(0)
  b = bf16[] parameter(1)
  ROOT s = bf16[] add(a, b)
}
maxb {
  a = bf16[] parameter(0)
  b = bf16[] parameter(1)
  ROOT m = bf16[] maximum(a, b)
}
)";

TEST(EvalReduceTest, SumMaxMinProductOverSeveralDims) {
  const std::string text = std::string("HloModule m\n") + kReducers + R"(
ENTRY e {
  x = f32[4,5,6,3] parameter(0)
  zero = f32[] constant(0)
  one = f32[] constant(1)
  ninf = f32[] constant(-inf)
  inf = f32[] constant(inf)
  s02 = f32[5,3] reduce(x, zero), dimensions={0,2}, to_apply=add
  s3 = f32[4,5,6] reduce(x, zero), dimensions={3}, to_apply=add
  s0 = f32[5,6,3] reduce(x, zero), dimensions={0}, to_apply=add
  s13 = f32[4,6] reduce(x, zero), dimensions={1,3}, to_apply=add
  all = f32[] reduce(x, zero), dimensions={0,1,2,3}, to_apply=add
  mx = f32[4,3] reduce(x, ninf), dimensions={1,2}, to_apply=max
  mn = f32[6] reduce(x, inf), dimensions={0,1,3}, to_apply=min
  ROOT pr = f32[4,5] reduce(x, one), dimensions={2,3}, to_apply=mul
})";
  std::mt19937 rng(1);
  HostTensor x = Random("f32[4,5,6,3]", rng, 0.5, 1.5);
  auto out = RunNamed(text, {x}, {"s02", "s3", "s0", "s13", "all", "mx", "mn", "pr"});
  auto add = [](double a, double b) { return a + b; };
  ExpectNear(out["s02"], ReferenceReduce(x, {0, 2}, 0, add), 1e-6, 0, "s02");
  ExpectNear(out["s3"], ReferenceReduce(x, {3}, 0, add), 1e-6, 0, "s3");
  ExpectNear(out["s0"], ReferenceReduce(x, {0}, 0, add), 1e-6, 0, "s0");
  ExpectNear(out["s13"], ReferenceReduce(x, {1, 3}, 0, add), 1e-6, 0, "s13");
  ExpectNear(out["all"], ReferenceReduce(x, {0, 1, 2, 3}, 0, add), 1e-6, 0, "all");
  ExpectEqual(out["mx"], ReferenceReduce(x, {1, 2}, -INFINITY,
                                         [](double a, double b) { return std::max(a, b); }));
  ExpectEqual(out["mn"], ReferenceReduce(x, {0, 1, 3}, INFINITY,
                                         [](double a, double b) { return std::min(a, b); }));
  ExpectNear(out["pr"], ReferenceReduce(x, {2, 3}, 1, [](double a, double b) { return a * b; }),
             1e-5, 0, "pr");
}

TEST(EvalReduceTest, LargeReductionsSplitOverThreads) {
  const std::string text = std::string("HloModule m\n") + kReducers + R"(
ENTRY e {
  x = f32[300,1000] parameter(0)
  zero = f32[] constant(0)
  rows = f32[300] reduce(x, zero), dimensions={1}, to_apply=add
  ROOT cols = f32[1000] reduce(x, zero), dimensions={0}, to_apply=add
})";
  std::mt19937 rng(2);
  HostTensor x = Random("f32[300,1000]", rng);
  auto out = RunNamed(text, {x}, {"rows", "cols"});
  auto add = [](double a, double b) { return a + b; };
  ExpectNear(out["rows"], ReferenceReduce(x, {1}, 0, add), 1e-5, 1e-4, "rows");
  ExpectNear(out["cols"], ReferenceReduce(x, {0}, 0, add), 1e-5, 1e-4, "cols");
}

TEST(EvalReduceTest, Bf16AccumulatesInF32AndIntegersWrap) {
  const char* text = R"(HloModule m
addb {
  a = bf16[] parameter(0)
  b = bf16[] parameter(1)
  ROOT s = bf16[] add(a, b)
}
addi {
  a = s32[] parameter(0)
  b = s32[] parameter(1)
  ROOT s = s32[] add(a, b)
}
maxi {
  a = s64[] parameter(0)
  b = s64[] parameter(1)
  ROOT s = s64[] maximum(a, b)
}
ENTRY e {
  x = bf16[8,256] parameter(0)
  zb = bf16[] constant(0)
  sb = bf16[8] reduce(x, zb), dimensions={1}, to_apply=addb
  i = s32[3,4] parameter(1)
  zi = s32[] constant(5)
  si = s32[4] reduce(i, zi), dimensions={0}, to_apply=addi
  l = s64[3,4] parameter(2)
  lo = s64[] constant(-9223372036854775808)
  ROOT ml = s64[3] reduce(l, lo), dimensions={1}, to_apply=maxi
})";
  std::mt19937 rng(3);
  HostTensor x = Random("bf16[8,256]", rng);
  HostTensor i = Random("s32[3,4]", rng, -1000000, 1000000);
  HostTensor l = Random("s64[3,4]", rng, -1e15, 1e15);
  auto out = RunNamed(text, {x, i, l}, {"sb", "si", "ml"});
  std::vector<double> sb = ReferenceReduce(x, {1}, 0, [](double a, double b) { return a + b; });
  for (double& v : sb) v = RoundToType(v, PrimitiveType::kBF16);
  ExpectNear(out["sb"], sb, 8e-3, 1e-3, "bf16 sum");  // one rounding at the end
  ExpectEqual(out["si"], ReferenceReduce(i, {0}, 5, [](double a, double b) { return a + b; }));
  ExpectEqual(out["ml"], ReferenceReduce(l, {1}, -9223372036854775808.0,
                                         [](double a, double b) { return std::max(a, b); }));
}

// bf16 inputs are widened a block at a time as they are read; column
// reductions split their columns over threads. Neither changes the order in
// which an output element meets its inputs, so each bf16 reduce equals the
// f32 reduce of the widened input rounded once, bit for bit.
TEST(EvalReduceTest, Bf16ReductionsEqualTheF32ReductionOfTheWidenedInput) {
  const std::string text = std::string("HloModule m\n") + kReducers + R"(
ENTRY e {
  x = bf16[64,6,256] parameter(0)
  xf = f32[64,6,256] convert(x)
  zb = bf16[] constant(0.5)
  zf = f32[] constant(0.5)
  lo = bf16[] constant(-inf)
  lof = f32[] constant(-inf)
  cols = bf16[256] reduce(x, zb), dimensions={0,1}, to_apply=addb
  colsf = f32[256] reduce(xf, zf), dimensions={0,1}, to_apply=add
  colsr = bf16[256] convert(colsf)
  mid = bf16[6] reduce(x, zb), dimensions={0,2}, to_apply=addb
  midf = f32[6] reduce(xf, zf), dimensions={0,2}, to_apply=add
  midr = bf16[6] convert(midf)
  top = bf16[6,256] reduce(x, lo), dimensions={0}, to_apply=maxb
  topf = f32[6,256] reduce(xf, lof), dimensions={0}, to_apply=max
  topr = bf16[6,256] convert(topf)
  rows = bf16[64,6] reduce(x, zb), dimensions={2}, to_apply=addb
  rowsf = f32[64,6] reduce(xf, zf), dimensions={2}, to_apply=add
  ROOT rowsr = bf16[64,6] convert(rowsf)
})";
  std::mt19937 rng(11);
  HostTensor x = Random("bf16[64,6,256]", rng);
  const std::vector<std::string> names = {"cols", "colsr", "mid",  "midr",
                                          "top",  "topr",  "rows", "rowsr"};
  auto out = RunNamed(text, {x}, names);
  auto values = [](const HostTensor& t) {
    std::vector<double> v(static_cast<size_t>(t.element_count()));
    for (int64_t i = 0; i < t.element_count(); ++i) v[i] = t.GetDouble(i);
    return v;
  };
  for (size_t i = 0; i < names.size(); i += 2) {
    ExpectEqual(out[names[i]], values(out[names[i + 1]]), names[i]);
  }
  auto add = [](double a, double b) { return a + b; };
  std::vector<double> cols = ReferenceReduce(x, {0, 1}, 0.5, add);
  for (double& v : cols) v = RoundToType(v, PrimitiveType::kBF16);
  ExpectNear(out["cols"], cols, 8e-3, 1e-3, "bf16 column sum");
  ExpectEqual(out["top"],
              ReferenceReduce(x, {0}, -INFINITY, [](double a, double b) { return std::max(a, b); }),
              "bf16 column max");
}

// Max and min fold long rows with partial results; a NaN anywhere in a row
// still wins (XLA's max and min propagate NaN), in f32 and in bf16.
TEST(EvalReduceTest, MaxAndMinOfLongRowsPropagateNaN) {
  const std::string text = std::string("HloModule m\n") + kReducers + R"(
ENTRY e {
  x = f32[5,203] parameter(0)
  lo = f32[] constant(-inf)
  hi = f32[] constant(inf)
  mx = f32[5] reduce(x, lo), dimensions={1}, to_apply=max
  mn = f32[5] reduce(x, hi), dimensions={1}, to_apply=min
  xb = bf16[5,203] convert(x)
  lob = bf16[] constant(-inf)
  ROOT mxb = bf16[5] reduce(xb, lob), dimensions={1}, to_apply=maxb
})";
  std::mt19937 rng(12);
  HostTensor x = Random("f32[5,203]", rng, -50, 50);
  float* v = x.mutable_data<float>();
  v[1 * 203 + 0] = NAN;    // first element of a row
  v[2 * 203 + 117] = NAN;  // inside the partial results' span
  v[3 * 203 + 202] = NAN;  // in the tail
  v[4 * 203 + 60] = INFINITY;
  auto out = RunNamed(text, {x}, {"mx", "mn", "mxb"});
  auto max = [](double a, double b) {
    return std::isnan(a) || std::isnan(b) ? NAN : std::max(a, b);
  };
  auto min = [](double a, double b) {
    return std::isnan(a) || std::isnan(b) ? NAN : std::min(a, b);
  };
  ExpectEqual(out["mx"], ReferenceReduce(x, {1}, -INFINITY, max), "max");
  ExpectEqual(out["mn"], ReferenceReduce(x, {1}, INFINITY, min), "min");
  std::vector<double> mxb = ReferenceReduce(x, {1}, -INFINITY, max);
  for (double& m : mxb) m = RoundToType(m, PrimitiveType::kBF16);
  ExpectEqual(out["mxb"], mxb, "bf16 max");
}

TEST(EvalReduceTest, F64SumsInDoubleAndU16Wraps) {
  const char* text = R"(HloModule m
addd {
  a = f64[] parameter(0)
  b = f64[] parameter(1)
  ROOT s = f64[] add(a, b)
}
addu {
  a = u16[] parameter(0)
  b = u16[] parameter(1)
  ROOT s = u16[] add(a, b)
}
maxu {
  a = u16[] parameter(0)
  b = u16[] parameter(1)
  ROOT s = u16[] maximum(a, b)
}
ENTRY e {
  x = f64[6,300] parameter(0)
  zd = f64[] constant(0.25)
  sd = f64[300] reduce(x, zd), dimensions={0}, to_apply=addd
  u = u16[5,7] parameter(1)
  zu = u16[] constant(3)
  su = u16[7] reduce(u, zu), dimensions={0}, to_apply=addu
  ROOT mu = u16[5] reduce(u, zu), dimensions={1}, to_apply=maxu
})";
  std::mt19937 rng(8);
  HostTensor x = Random("f64[6,300]", rng, -1e6, 1e6);
  HostTensor u = Random("u16[5,7]", rng, 0, 65535);
  auto out = RunNamed(text, {x, u}, {"sd", "su", "mu"});
  // f64 accumulates in double: agreement far below f32's precision.
  ExpectNear(out["sd"], ReferenceReduce(x, {0}, 0.25, [](double a, double b) { return a + b; }),
             1e-14, 1e-8, "f64 sum");
  std::vector<double> su = ReferenceReduce(u, {0}, 3, [](double a, double b) { return a + b; });
  for (double& v : su) v = std::fmod(v, 65536.0);  // wraps
  ExpectEqual(out["su"], su, "u16 sum");
  ExpectEqual(out["mu"],
              ReferenceReduce(u, {1}, 3, [](double a, double b) { return std::max(a, b); }),
              "u16 max");
}

TEST(EvalReduceTest, PredAndOr) {
  const char* text = R"(HloModule m
and {
  a = pred[] parameter(0)
  b = pred[] parameter(1)
  ROOT r = pred[] and(a, b)
}
or {
  a = pred[] parameter(0)
  b = pred[] parameter(1)
  ROOT r = pred[] or(a, b)
}
ENTRY e {
  x = pred[6,5] parameter(0)
  t = pred[] constant(true)
  f = pred[] constant(false)
  all = pred[6] reduce(x, t), dimensions={1}, to_apply=and
  ROOT any = pred[5] reduce(x, f), dimensions={0}, to_apply=or
})";
  std::mt19937 rng(4);
  HostTensor x = Random("pred[6,5]", rng);
  auto out = RunNamed(text, {x}, {"all", "any"});
  ExpectEqual(out["all"],
              ReferenceReduce(x, {1}, 1, [](double a, double b) { return double(a && b); }));
  ExpectEqual(out["any"],
              ReferenceReduce(x, {0}, 0, [](double a, double b) { return double(a || b); }));
}

TEST(EvalReduceTest, VariadicArgmaxIsInterpreted) {
  const char* text = R"(HloModule m
argmax {
  v0 = f32[] parameter(0)
  i0 = s32[] parameter(1)
  v1 = f32[] parameter(2)
  i1 = s32[] parameter(3)
  gt = pred[] compare(v0, v1), direction=GT
  eq = pred[] compare(v0, v1), direction=EQ
  lt_i = pred[] compare(i0, i1), direction=LT
  tie = pred[] and(eq, lt_i)
  keep = pred[] or(gt, tie)
  v = f32[] select(keep, v0, v1)
  i = s32[] select(keep, i0, i1)
  ROOT r = (f32[], s32[]) tuple(v, i)
}
ENTRY e {
  x = f32[7,9] parameter(0)
  idx = s32[7,9] iota(), iota_dimension=1
  ninf = f32[] constant(-inf)
  zero = s32[] constant(0)
  r = (f32[7], s32[7]) reduce(x, idx, ninf, zero), dimensions={1}, to_apply=argmax
  val = f32[7] get-tuple-element(r), index=0
  ROOT arg = s32[7] get-tuple-element(r), index=1
})";
  std::mt19937 rng(5);
  HostTensor x = Random("f32[7,9]", rng);
  auto out = RunNamed(text, {x}, {"val", "arg"});
  std::vector<double> v, i;
  for (int64_t r = 0; r < 7; ++r) {
    int64_t best = 0;
    for (int64_t c = 1; c < 9; ++c) {
      if (x.GetDouble(r * 9 + c) > x.GetDouble(r * 9 + best)) best = c;
    }
    v.push_back(x.GetDouble(r * 9 + best));
    i.push_back(static_cast<double>(best));
  }
  ExpectEqual(out["val"], v);
  ExpectEqual(out["arg"], i);
}

TEST(EvalReduceTest, UnrecognizedReducerIsInterpretedInOrder) {
  const char* text = R"(HloModule m
sumsq {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  bb = f32[] multiply(b, b)
  ROOT s = f32[] add(a, bb)
}
ENTRY e {
  x = f32[4,6] parameter(0)
  zero = f32[] constant(0)
  ROOT total = f32[4] reduce(x, zero), dimensions={1}, to_apply=sumsq
})";
  std::mt19937 rng(6);
  HostTensor x = Random("f32[4,6]", rng);
  auto out = RunNamed(text, {x}, {"total"});
  ExpectNear(out["total"], ReferenceReduce(x, {1}, 0, [](double a, double b) { return a + b * b; }),
             1e-6, 0);
}

// A reducer written with shifts, popcnt and count-leading-zeros (a rotate
// and mix, as hash-like reductions write it) goes through the scalar
// interpreter with integer semantics: against the same fold on uint32 and
// int32 here.
TEST(EvalReduceTest, ReducersWithShiftsArePerformedOnTheIntegers) {
  const char* text = R"(HloModule m
mix {
  a = u32[] parameter(0)
  b = u32[] parameter(1)
  five = u32[] constant(5)
  twenty_seven = u32[] constant(27)
  hi = u32[] shift-left(a, five)
  lo = u32[] shift-right-logical(a, twenty_seven)
  rot = u32[] or(hi, lo)
  x = u32[] xor(rot, b)
  pop = u32[] popcnt(b)
  ROOT r = u32[] add(x, pop)
}
halve {
  c = s32[] parameter(0)
  d = s32[] parameter(1)
  one = s32[] constant(1)
  h = s32[] shift-right-arithmetic(c, one)
  z = s32[] count-leading-zeros(d)
  s = s32[] add(h, d)
  ROOT t = s32[] subtract(s, z)
}
ENTRY e {
  xs = u32[3,9] parameter(0)
  zero = u32[] constant(0)
  mixed = u32[3] reduce(xs, zero), dimensions={1}, to_apply=mix
  ys = s32[3,9] parameter(1)
  init = s32[] constant(-1000)
  ROOT halved = s32[3] reduce(ys, init), dimensions={1}, to_apply=halve
})";
  std::mt19937_64 rng(9);
  std::vector<uint32_t> x(27);
  std::vector<int32_t> y(27);
  for (uint32_t& v : x) v = static_cast<uint32_t>(rng());
  for (int32_t& v : y) v = static_cast<int32_t>(rng() % 2001) - 1000;
  auto out = RunNamed(text,
                      {HostTensor::FromVector<uint32_t>(PrimitiveType::kU32, {3, 9}, x),
                       HostTensor::FromVector<int32_t>(PrimitiveType::kS32, {3, 9}, y)},
                      {"mixed", "halved"});
  for (int64_t r = 0; r < 3; ++r) {
    uint32_t acc = 0;
    int32_t half = -1000;
    for (int64_t c = 0; c < 9; ++c) {
      const uint32_t b = x[r * 9 + c];
      acc = ((acc << 5 | acc >> 27) ^ b) + static_cast<uint32_t>(std::popcount(b));
      const int32_t d = y[r * 9 + c];
      half = (half >> 1) + d - std::countl_zero(static_cast<uint32_t>(d));
    }
    EXPECT_EQ(out["mixed"].data<uint32_t>()[r], acc) << r;
    EXPECT_EQ(out["halved"].data<int32_t>()[r], half) << r;
  }
}

// The comparator XLA's TopK lowering writes: a float read as the integer
// of its bits, negatives' magnitude bits flipped, so that integer order is
// float order (-0 below +0). A sort with it, interpreted per element, on
// fresh random rows with signed zeros and extremes mixed in.
TEST(EvalReduceTest, ComparatorsThatBitcastFloatsToIntegersAreInterpreted) {
  const char* text = R"(HloModule m
greater {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ia = s32[] bitcast-convert(a)
  ua = u32[] bitcast-convert(a)
  big = u32[] constant(2147483647)
  fa = u32[] xor(ua, big)
  sa = s32[] bitcast-convert(fa)
  z = s32[] constant(0)
  na = pred[] compare(ia, z), direction=LT
  ka = s32[] select(na, sa, ia)
  ib = s32[] bitcast-convert(b)
  ub = u32[] bitcast-convert(b)
  fb = u32[] xor(ub, big)
  sb = s32[] bitcast-convert(fb)
  nb = pred[] compare(ib, z), direction=LT
  kb = s32[] select(nb, sb, ib)
  ROOT gt = pred[] compare(ka, kb), direction=GT
}
ENTRY e {
  x = f32[3,40] parameter(0)
  ROOT s = f32[3,40] sort(x), dimensions={1}, is_stable=true, to_apply=greater
})";
  std::mt19937 rng(std::random_device{}());
  HostTensor x = Random("f32[3,40]", rng, -100, 100);
  const float special[] = {0.0f, -0.0f, 3e38f, -3e38f, 1e-45f, -1e-45f};
  for (int i = 0; i < 6; ++i) x.mutable_data<float>()[i * 7] = special[i];
  auto out = RunNamed(text, {x}, {"s"});
  auto key = [](float v) {
    const int32_t bits = std::bit_cast<int32_t>(v);
    return bits < 0 ? bits ^ 0x7fffffff : bits;
  };
  for (int64_t r = 0; r < 3; ++r) {
    std::vector<float> row(x.data<float>() + r * 40, x.data<float>() + (r + 1) * 40);
    std::stable_sort(row.begin(), row.end(), [&](float a, float b) { return key(a) > key(b); });
    for (int64_t c = 0; c < 40; ++c) {
      const float got = out["s"].data<float>()[r * 40 + c];
      EXPECT_EQ(std::bit_cast<uint32_t>(got), std::bit_cast<uint32_t>(row[c])) << r << "," << c;
    }
  }
  // Wider types do not round-trip through a double: refused by name.
  auto wide = testing::Parse(R"(HloModule m
c {
  a = f64[] parameter(0)
  b = f64[] parameter(1)
  ia = s64[] bitcast-convert(a)
  ib = s64[] bitcast-convert(b)
  ROOT gt = pred[] compare(ia, ib), direction=GT
}
ENTRY e {
  x = f64[8] parameter(0)
  ROOT s = f64[8] sort(x), dimensions={0}, to_apply=c
})");
  testing::ExpectErrorContaining([&] { Executor executor(*wide); },
                                 {"'ia' bitcasts f64 to s64", "at most 32 bits"});
}

TEST(EvalReduceTest, ReducerThatCannotBeInterpretedIsAnError) {
  const char* text = R"(HloModule m
weird {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  bb = f32[1] broadcast(b), dimensions={}
  r = f32[] reshape(bb)
  ROOT s = f32[] add(a, r)
}
ENTRY e {
  x = f32[4,6] parameter(0)
  zero = f32[] constant(0)
  ROOT total = f32[4] reduce(x, zero), dimensions={1}, to_apply=weird
})";
  auto module = testing::Parse(text);
  testing::ExpectErrorContaining([&] { Executor executor(*module); },
                                 {"'total' (reduce)", "is interpreted per element"});
}

}  // namespace
}  // namespace weft::runtime
