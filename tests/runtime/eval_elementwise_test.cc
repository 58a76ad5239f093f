#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>

#include "executor_test_util.h"

namespace weft::runtime {
namespace {

using testing::ExpectEqual;
using testing::ExpectNear;
using testing::Random;
using testing::RunNamed;

struct UnaryCase {
  std::string op;
  std::function<double(double)> ref;
  double lo, hi;  // input range where the op is defined
};

TEST(EvalElementwiseTest, FloatUnaryOpsMatchFloat64) {
  const std::vector<UnaryCase> cases = {
      {"abs", [](double x) { return std::fabs(x); }, -2, 2},
      {"ceil", [](double x) { return std::ceil(x); }, -3, 3},
      {"cosine", [](double x) { return std::cos(x); }, -3, 3},
      {"exponential", [](double x) { return std::exp(x); }, -3, 3},
      {"exponential-minus-one", [](double x) { return std::expm1(x); }, -1, 1},
      {"floor", [](double x) { return std::floor(x); }, -3, 3},
      {"log", [](double x) { return std::log(x); }, 0.1, 4},
      {"log-plus-one", [](double x) { return std::log1p(x); }, -0.5, 2},
      {"logistic", [](double x) { return 1 / (1 + std::exp(-x)); }, -4, 4},
      {"negate", [](double x) { return -x; }, -2, 2},
      {"rsqrt", [](double x) { return 1 / std::sqrt(x); }, 0.1, 4},
      {"sign", [](double x) { return x > 0 ? 1.0 : (x < 0 ? -1.0 : 0.0); }, -2, 2},
      {"sine", [](double x) { return std::sin(x); }, -3, 3},
      {"sqrt", [](double x) { return std::sqrt(x); }, 0.1, 4},
      {"tanh", [](double x) { return std::tanh(x); }, -3, 3},
  };
  std::mt19937 rng(1);
  for (const std::string t : {"f32", "f64"}) {
    const double tol = t == "f32" ? 2e-6 : 1e-14;
    for (const UnaryCase& c : cases) {
      const std::string text = "HloModule m\nENTRY e {\n  x = " + t +
                               "[5,37] parameter(0)\n  ROOT y = " + t + "[5,37] " + c.op +
                               "(x)\n}\n";
      HostTensor x = Random(t + "[5,37]", rng, c.lo, c.hi);
      auto out = RunNamed(text, {x}, {"y"});
      std::vector<double> want;
      for (double v : x.ToDoubles()) want.push_back(c.ref(v));
      ExpectNear(out["y"], want, tol, tol / 2, t + " " + c.op);
    }
  }
}

struct BinaryCase {
  std::string op;
  std::function<double(double, double)> ref;
};

TEST(EvalElementwiseTest, FloatBinaryOpsMatchFloat64) {
  const std::vector<BinaryCase> cases = {
      {"add", [](double a, double b) { return a + b; }},
      {"subtract", [](double a, double b) { return a - b; }},
      {"multiply", [](double a, double b) { return a * b; }},
      {"divide", [](double a, double b) { return a / b; }},
      {"maximum", [](double a, double b) { return std::max(a, b); }},
      {"minimum", [](double a, double b) { return std::min(a, b); }},
      {"power", [](double a, double b) { return std::pow(a, b); }},
      {"remainder", [](double a, double b) { return std::fmod(a, b); }},
  };
  std::mt19937 rng(2);
  for (const std::string t : {"f32", "f64"}) {
    const double tol = t == "f32" ? 2e-6 : 1e-14;
    for (const BinaryCase& c : cases) {
      const std::string text =
          "HloModule m\nENTRY e {\n  a = " + t + "[3,50] parameter(0)\n  b = " + t +
          "[3,50] parameter(1)\n  ROOT y = " + t + "[3,50] " + c.op + "(a, b)\n}\n";
      HostTensor a = Random(t + "[3,50]", rng, 0.5, 3);
      HostTensor b = Random(t + "[3,50]", rng, 0.5, 3);
      auto out = RunNamed(text, {a, b}, {"y"});
      std::vector<double> want;
      for (int64_t i = 0; i < a.element_count(); ++i)
        want.push_back(c.ref(a.GetDouble(i), b.GetDouble(i)));
      ExpectNear(out["y"], want, tol, tol / 2, t + " " + c.op);
    }
  }
}

TEST(EvalElementwiseTest, MaximumAndMinimumPropagateNan) {
  const char* text = R"(HloModule m
ENTRY e {
  a = f32[3] parameter(0)
  b = f32[3] parameter(1)
  mx = f32[3] maximum(a, b)
  ROOT mn = f32[3] minimum(a, b)
})";
  const double nan = std::numeric_limits<double>::quiet_NaN();
  HostTensor a = HostTensor::FromDoubles(ParseShape("f32[3]"), std::vector<double>{nan, 1, 2});
  HostTensor b = HostTensor::FromDoubles(ParseShape("f32[3]"), std::vector<double>{0, nan, 3});
  auto out = RunNamed(text, {a, b}, {"mx", "mn"});
  ExpectEqual(out["mx"], {nan, nan, 3});
  ExpectEqual(out["mn"], {nan, nan, 2});
}

TEST(EvalElementwiseTest, CompareEveryDirectionOnFloatsAndIntegers) {
  std::mt19937 rng(3);
  for (const char* type : {"f32", "s32", "bf16", "s64", "u32"}) {
    for (const char* dir : {"EQ", "NE", "LT", "LE", "GT", "GE"}) {
      const std::string shape = std::string(type) + "[64]";
      const std::string text =
          "HloModule m\nENTRY e {\n  a = " + shape + " parameter(0)\n  b = " + shape +
          " parameter(1)\n  ROOT c = pred[64] compare(a, b), direction=" + dir + "\n}\n";
      // Small integer ranges so that equal values occur.
      HostTensor a = Random(shape, rng, 0, 3);
      HostTensor b = Random(shape, rng, 0, 3);
      if (std::string(type) == "f32" || std::string(type) == "bf16") {
        a = HostTensor::FromDoubles(a.shape(), [&] {
          std::vector<double> v = a.ToDoubles();
          for (double& x : v) x = std::round(x * 2) / 2;  // some ties
          return v;
        }());
      }
      auto out = RunNamed(text, {a, b}, {"c"});
      std::vector<double> want;
      const std::string d = dir;
      for (int64_t i = 0; i < 64; ++i) {
        const double x = a.GetDouble(i), y = b.GetDouble(i);
        want.push_back(d == "EQ"   ? x == y
                       : d == "NE" ? x != y
                       : d == "LT" ? x < y
                       : d == "LE" ? x <= y
                       : d == "GT" ? x > y
                                   : x >= y);
      }
      ExpectEqual(out["c"], want, shape + " " + d);
    }
  }
}

// The values of TotalOrderValues() in XLA's total order, each paired with
// each: a[i*n + j] = v[i], b[i*n + j] = v[j].
std::vector<double> TotalOrderValues() {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  return {-nan, -inf, -2.5, -0.25, -0.0, 0.0, 0.25, 3, inf, nan};
}

bool HoldsOnRanks(const std::string& d, size_t x, size_t y) {
  return d == "EQ"   ? x == y
         : d == "NE" ? x != y
         : d == "LT" ? x < y
         : d == "LE" ? x <= y
         : d == "GT" ? x > y
                     : x >= y;
}

// type=TOTALORDER orders -NaN < -inf < ... < -0 < +0 < ... < inf < +NaN
// with EQ on equal bits only (-0 != +0, NaN == NaN); the default (FLOAT)
// is IEEE's partial order (-0 == +0, NaN unordered).
TEST(EvalElementwiseTest, CompareTotalOrderOrdersSignedZerosAndNans) {
  const std::vector<double> v = TotalOrderValues();
  const size_t n = v.size();
  std::vector<double> a, b;
  for (size_t i = 0; i < n; ++i) {
    for (size_t j = 0; j < n; ++j) {
      a.push_back(v[i]);
      b.push_back(v[j]);
    }
  }
  for (const char* type : {"f32", "bf16", "f16", "f64"}) {
    const std::string shape = fmt::format("{}[{}]", type, n * n);
    for (const char* dir : {"EQ", "NE", "LT", "LE", "GT", "GE"}) {
      const std::string text = fmt::format(
          "HloModule m\nENTRY e {{\n  a = {0} parameter(0)\n  b = {0} parameter(1)\n"
          "  t = pred[{1}] compare(a, b), direction={2}, type=TOTALORDER\n"
          "  f = pred[{1}] compare(a, b), direction={2}, type=FLOAT\n"
          "  ROOT r = (pred[{1}], pred[{1}]) tuple(t, f)\n}}\n",
          shape, n * n, dir);
      const HostTensor ta = HostTensor::FromDoubles(ParseShape(shape), a);
      const HostTensor tb = HostTensor::FromDoubles(ParseShape(shape), b);
      auto out = RunNamed(text, {ta, tb}, {"t", "f"});
      std::vector<double> total, ieee;
      for (size_t i = 0; i < n; ++i) {
        for (size_t j = 0; j < n; ++j) {
          total.push_back(HoldsOnRanks(dir, i, j));
          const double x = v[i], y = v[j];
          const std::string d = dir;
          ieee.push_back(d == "EQ"   ? x == y
                         : d == "NE" ? x != y
                         : d == "LT" ? x < y
                         : d == "LE" ? x <= y
                         : d == "GT" ? x > y
                                     : x >= y);
        }
      }
      ExpectEqual(out["t"], total, shape + " TOTALORDER " + dir);
      ExpectEqual(out["f"], ieee, shape + " FLOAT " + dir);
    }
  }
}

TEST(EvalElementwiseTest, IntegerArithmeticFollowsXlaSemantics) {
  const char* text = R"(HloModule m
ENTRY e {
  a = s32[6] parameter(0)
  b = s32[6] parameter(1)
  add = s32[6] add(a, b)
  sub = s32[6] subtract(a, b)
  mul = s32[6] multiply(a, b)
  div = s32[6] divide(a, b)
  rem = s32[6] remainder(a, b)
  mx = s32[6] maximum(a, b)
  neg = s32[6] negate(a)
  abs = s32[6] abs(a)
  sgn = s32[6] sign(a)
  pw = s32[6] power(a, b)
  and = s32[6] and(a, b)
  or = s32[6] or(a, b)
  xor = s32[6] xor(a, b)
  ROOT not = s32[6] not(a)
})";
  const double int_min = std::numeric_limits<int32_t>::min();
  HostTensor a =
      HostTensor::FromDoubles(ParseShape("s32[6]"), std::vector<double>{7, -7, 5, int_min, 3, -2});
  HostTensor b =
      HostTensor::FromDoubles(ParseShape("s32[6]"), std::vector<double>{2, 2, 0, -1, 3, 3});
  auto out = RunNamed(text, {a, b},
                      {"add", "sub", "mul", "div", "rem", "mx", "neg", "abs", "sgn", "pw", "and",
                       "or", "xor", "not"});
  ExpectEqual(out["add"], {9, -5, 5, 2147483647, 6, 1}, "add");  // INT_MIN + -1 wraps
  ExpectEqual(out["sub"], {5, -9, 5, int_min + 1, 0, -5});
  ExpectEqual(out["mul"], {14, -14, 0, int_min, 9, -6});
  // Truncating division; x / 0 = -1; INT_MIN / -1 = INT_MIN.
  ExpectEqual(out["div"], {3, -3, -1, int_min, 1, 0});
  // x % 0 = x; INT_MIN % -1 = 0; the sign follows the dividend.
  ExpectEqual(out["rem"], {1, -1, 5, 0, 0, -2});
  ExpectEqual(out["mx"], {7, 2, 5, -1, 3, 3});
  ExpectEqual(out["neg"], {-7, 7, -5, int_min, -3, 2});
  ExpectEqual(out["abs"], {7, 7, 5, int_min, 3, 2});
  ExpectEqual(out["sgn"], {1, -1, 1, -1, 1, -1});
  ExpectEqual(out["pw"], {49, 49, 1, 0, 27, -8});
  ExpectEqual(out["and"], {7 & 2, -7 & 2, 0, int_min, 3, -2 & 3});
  ExpectEqual(out["or"], {7 | 2, -7 | 2, 5, -1, 3, -2 | 3});
  ExpectEqual(out["xor"], {7 ^ 2, -7 ^ 2, 5, 2147483647, 0, -2 ^ 3});
  ExpectEqual(out["not"], {~7, ~-7, ~5, 2147483647, ~3, ~-2});
}

TEST(EvalElementwiseTest, WideAndUnsignedIntegers) {
  const char* text = R"(HloModule m
ENTRY e {
  a = s64[3] parameter(0)
  b = s64[3] parameter(1)
  m = s64[3] multiply(a, b)
  u = u32[3] parameter(2)
  v = u32[3] parameter(3)
  d = u32[3] divide(u, v)
  ROOT s = u32[3] subtract(u, v)
})";
  HostTensor a = HostTensor::FromVector<int64_t>(PrimitiveType::kS64, {3}, {1ll << 40, -3, 5});
  HostTensor b = HostTensor::FromVector<int64_t>(PrimitiveType::kS64, {3}, {1000, 1ll << 35, -7});
  HostTensor u = HostTensor::FromVector<uint32_t>(PrimitiveType::kU32, {3}, {4000000000u, 7, 1});
  HostTensor v = HostTensor::FromVector<uint32_t>(PrimitiveType::kU32, {3}, {3, 0, 2});
  auto out = RunNamed(text, {a, b, u, v}, {"m", "d", "s"});
  EXPECT_EQ(out["m"].data<int64_t>()[0], (1ll << 40) * 1000);
  EXPECT_EQ(out["m"].data<int64_t>()[1], -3 * (1ll << 35));
  EXPECT_EQ(out["m"].data<int64_t>()[2], -35);
  EXPECT_EQ(out["d"].data<uint32_t>()[0], 4000000000u / 3);
  EXPECT_EQ(out["d"].data<uint32_t>()[1], 0xffffffffu);  // x / 0 = all ones
  EXPECT_EQ(out["s"].data<uint32_t>()[2], 0xffffffffu);  // 1 - 2 wraps
}

// XLA's shifts, popcnt and count-leading-zeros on every integer type,
// against a reference on the values' bits as unsigned 64-bit words: the
// amount is read as unsigned, so negative amounts and amounts of the bit
// width or more shift every bit out (sign-filled for an arithmetic shift
// right, which shifts an unsigned type's bits as the signed type's).
template <typename T>
void ExpectIntegerBitOps(PrimitiveType type, std::mt19937_64& rng) {
  constexpr int kBits = sizeof(T) * 8;
  constexpr uint64_t kMask = kBits == 64 ? ~uint64_t{0} : (uint64_t{1} << kBits) - 1;
  const int64_t n = 3 * (kBits + 8);
  std::vector<T> x(n), amount(n);
  for (int64_t i = 0; i < n; ++i) {
    x[i] = static_cast<T>(rng());
    if (i % 7 == 0) x[i] = static_cast<T>(uint64_t{1} << (kBits - 1));  // the sign bit alone
    amount[i] = static_cast<T>(i % (kBits + 8) - 3);                    // -3 .. width + 4
  }
  const std::string t(PrimitiveTypeName(type)), shape = fmt::format("{}[{}]", t, n);
  const std::string text = fmt::format(R"(HloModule m
ENTRY e {{
  x = {0} parameter(0)
  a = {0} parameter(1)
  shl = {0} shift-left(x, a)
  srl = {0} shift-right-logical(x, a)
  sra = {0} shift-right-arithmetic(x, a)
  pop = {0} popcnt(x)
  ROOT clz = {0} count-leading-zeros(x)
}})",
                                       shape);
  std::map<std::string, HostTensor> out = RunNamed(
      text, {HostTensor::FromVector<T>(type, {n}, x), HostTensor::FromVector<T>(type, {n}, amount)},
      {"shl", "srl", "sra", "pop", "clz"});
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t bits = static_cast<uint64_t>(x[i]) & kMask;
    const uint64_t by = static_cast<uint64_t>(amount[i]) & kMask;
    const bool negative = (bits >> (kBits - 1)) & 1;
    uint64_t shl = 0, srl = 0, sra = negative ? kMask : 0;
    if (by < static_cast<uint64_t>(kBits)) {
      shl = (bits << by) & kMask;
      srl = bits >> by;
      sra = srl | (negative && by > 0 ? (kMask << (kBits - by)) & kMask : 0);
    }
    uint64_t pop = 0, clz = 0;
    for (int b = 0; b < kBits; ++b) pop += (bits >> b) & 1;
    while (clz < static_cast<uint64_t>(kBits) && ((bits >> (kBits - 1 - clz)) & 1) == 0) ++clz;
    const std::string what = fmt::format("{} x={} amount={}", t, bits, by);
    EXPECT_EQ(out["shl"].data<T>()[i], static_cast<T>(shl)) << what;
    EXPECT_EQ(out["srl"].data<T>()[i], static_cast<T>(srl)) << what;
    EXPECT_EQ(out["sra"].data<T>()[i], static_cast<T>(sra)) << what;
    EXPECT_EQ(out["pop"].data<T>()[i], static_cast<T>(pop)) << what;
    EXPECT_EQ(out["clz"].data<T>()[i], static_cast<T>(clz)) << what;
  }
}

TEST(EvalElementwiseTest, ShiftsPopcntAndClzFollowXlaOnEveryIntegerType) {
  std::mt19937_64 rng(16);
  ExpectIntegerBitOps<int32_t>(PrimitiveType::kS32, rng);
  ExpectIntegerBitOps<int64_t>(PrimitiveType::kS64, rng);
  ExpectIntegerBitOps<uint16_t>(PrimitiveType::kU16, rng);
  ExpectIntegerBitOps<uint32_t>(PrimitiveType::kU32, rng);
  ExpectIntegerBitOps<uint64_t>(PrimitiveType::kU64, rng);
}

TEST(EvalElementwiseTest, F64AndU16ThroughCompareSelectClampAndConvert) {
  const char* text = R"(HloModule m
ENTRY e {
  x = f64[6] parameter(0)
  y = f64[6] parameter(1)
  lt = pred[6] compare(x, y), direction=LT
  lo = f64[] constant(-0.5)
  hi = f64[] constant(0.5)
  c = f64[6] clamp(lo, x, hi)
  s = f64[6] select(lt, x, y)
  to_f32 = f32[6] convert(x)
  back = f64[6] convert(to_f32)
  to_u16 = u16[6] convert(x)
  u = u16[6] parameter(2)
  v = u16[6] parameter(3)
  m = u16[6] multiply(u, v)
  a = u16[6] add(u, v)
  d = u16[6] subtract(u, v)
  q = u16[6] divide(u, v)
  ug = pred[6] compare(u, v), direction=GT
  u_f64 = f64[6] convert(u)
  ROOT u_s32 = s32[6] convert(u)
})";
  const std::vector<double> xv = {0.1234567890123, -2.5e-9, 7.25, -1e300, 70000.7, -0.75};
  const std::vector<double> yv = {0.2, -3e-9, 7.25, 1, 0, 1e-300};
  const HostTensor x = HostTensor::FromDoubles(ParseShape("f64[6]"), xv);
  const HostTensor y = HostTensor::FromDoubles(ParseShape("f64[6]"), yv);
  const std::vector<uint16_t> uv = {65535, 300, 0, 12345, 2, 40000};
  const std::vector<uint16_t> vv = {2, 300, 1, 54321, 0, 40001};
  const HostTensor u = HostTensor::FromVector<uint16_t>(PrimitiveType::kU16, {6}, uv);
  const HostTensor v = HostTensor::FromVector<uint16_t>(PrimitiveType::kU16, {6}, vv);
  auto out = RunNamed(
      text, {x, y, u, v},
      {"lt", "c", "s", "to_f32", "back", "to_u16", "m", "a", "d", "q", "ug", "u_f64", "u_s32"});
  std::vector<double> lt, c, s, f32, u16, m, a, d, q, ug, uf;
  for (size_t i = 0; i < 6; ++i) {
    lt.push_back(xv[i] < yv[i]);
    c.push_back(std::clamp(xv[i], -0.5, 0.5));
    s.push_back(xv[i] < yv[i] ? xv[i] : yv[i]);
    f32.push_back(static_cast<float>(xv[i]));
    u16.push_back(std::clamp(std::trunc(xv[i]), 0.0, 65535.0));   // saturates
    m.push_back(static_cast<uint16_t>(uint32_t{uv[i]} * vv[i]));  // wraps mod 2^16
    a.push_back(static_cast<uint16_t>(uv[i] + vv[i]));
    d.push_back(static_cast<uint16_t>(uv[i] - vv[i]));
    q.push_back(vv[i] == 0 ? 65535 : uv[i] / vv[i]);  // x / 0 = all ones
    ug.push_back(uv[i] > vv[i]);
    uf.push_back(uv[i]);
  }
  ExpectEqual(out["lt"], lt, "lt");
  ExpectEqual(out["c"], c, "clamp");
  ExpectEqual(out["s"], s, "select");
  ExpectEqual(out["to_f32"], f32, "to_f32");
  ExpectEqual(out["back"], f32, "back");
  ExpectEqual(out["to_u16"], u16, "to_u16");
  ExpectEqual(out["m"], m, "multiply");
  ExpectEqual(out["a"], a, "add");
  ExpectEqual(out["d"], d, "subtract");
  ExpectEqual(out["q"], q, "divide");
  ExpectEqual(out["ug"], ug, "compare");
  ExpectEqual(out["u_f64"], uf, "u_f64");
  ExpectEqual(out["u_s32"], uf, "u_s32");
}

TEST(EvalElementwiseTest, ComplexValuesAreRefusedNamingTheInstruction) {
  const char* text = R"(HloModule m
ENTRY e {
  a = c64[4] parameter(0)
  ROOT t = c64[4] add(a, a)
})";
  auto module = ParseHloModule(text);
  testing::ExpectErrorContaining([&] { Executor executor(*module); },
                                 {"'a' (parameter)", "complex (c64)"});
}

TEST(EvalElementwiseTest, PredLogic) {
  const char* text = R"(HloModule m
ENTRY e {
  a = pred[4] parameter(0)
  b = pred[4] parameter(1)
  and = pred[4] and(a, b)
  or = pred[4] or(a, b)
  xor = pred[4] xor(a, b)
  ROOT not = pred[4] not(a)
})";
  HostTensor a = HostTensor::FromDoubles(ParseShape("pred[4]"), std::vector<double>{0, 0, 1, 1});
  HostTensor b = HostTensor::FromDoubles(ParseShape("pred[4]"), std::vector<double>{0, 1, 0, 1});
  auto out = RunNamed(text, {a, b}, {"and", "or", "xor", "not"});
  ExpectEqual(out["and"], {0, 0, 0, 1});
  ExpectEqual(out["or"], {0, 1, 1, 1});
  ExpectEqual(out["xor"], {0, 1, 1, 0});
  ExpectEqual(out["not"], {1, 1, 0, 0});
}

TEST(EvalElementwiseTest, SelectAndClamp) {
  const char* text = R"(HloModule m
ENTRY e {
  p = pred[40] parameter(0)
  a = f32[40] parameter(1)
  b = f32[40] parameter(2)
  sel = f32[40] select(p, a, b)
  t = pred[] parameter(3)
  sel_scalar = f32[40] select(t, a, b)
  lo = f32[] constant(-0.25)
  hi = f32[40] parameter(4)
  ROOT cl = f32[40] clamp(lo, a, hi)
})";
  std::mt19937 rng(4);
  HostTensor p = Random("pred[40]", rng);
  HostTensor a = Random("f32[40]", rng);
  HostTensor b = Random("f32[40]", rng);
  HostTensor t = HostTensor::Scalar(PrimitiveType::kPred, 0);
  HostTensor hi = Random("f32[40]", rng, 0.1, 0.6);
  auto out = RunNamed(text, {p, a, b, t, hi}, {"sel", "sel_scalar", "cl"});
  std::vector<double> sel, cl;
  for (int64_t i = 0; i < 40; ++i) {
    sel.push_back(p.GetDouble(i) != 0 ? a.GetDouble(i) : b.GetDouble(i));
    cl.push_back(std::min(std::max(a.GetDouble(i), -0.25), hi.GetDouble(i)));
  }
  ExpectEqual(out["sel"], sel);
  ExpectEqual(out["sel_scalar"], b.ToDoubles());
  ExpectEqual(out["cl"], cl);
}

TEST(EvalElementwiseTest, ConvertBetweenTypes) {
  const char* text = R"(HloModule m
ENTRY e {
  x = f32[8] parameter(0)
  to_bf16 = bf16[8] convert(x)
  back = f32[8] convert(to_bf16)
  to_s32 = s32[8] convert(x)
  to_pred = pred[8] convert(x)
  to_f16 = f16[8] convert(x)
  i = s32[8] parameter(1)
  to_f32 = f32[8] convert(i)
  ROOT to_s64 = s64[8] convert(i)
})";
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  HostTensor x = HostTensor::FromDoubles(
      ParseShape("f32[8]"), std::vector<double>{1.00390625, -2.7, 0.0, 3e9, -3e9, nan, inf, 0.3});
  HostTensor i = HostTensor::FromDoubles(
      ParseShape("s32[8]"), std::vector<double>{-5, 16777217, 0, 1, -2147483648.0, 7, 8, 9});
  auto out = RunNamed(text, {x, i},
                      {"to_bf16", "back", "to_s32", "to_pred", "to_f16", "to_f32", "to_s64"});
  std::vector<double> bf16, f16;
  for (double v : x.ToDoubles()) {
    bf16.push_back(RoundToType(v, PrimitiveType::kBF16));
    f16.push_back(RoundToType(v, PrimitiveType::kF16));
  }
  ExpectEqual(out["to_bf16"], bf16);
  ExpectEqual(out["back"], bf16);
  ExpectEqual(out["to_f16"], f16);
  // Truncation toward zero, saturation, NaN -> 0.
  ExpectEqual(out["to_s32"], {1, -2, 0, 2147483647, -2147483648.0, 0, 2147483647, 0});
  ExpectEqual(out["to_pred"], {1, 1, 0, 1, 1, 1, 1, 1});
  ExpectEqual(out["to_f32"], {-5, 16777216, 0, 1, -2147483648.0, 7, 8, 9});
  ExpectEqual(out["to_s64"], i.ToDoubles());
}

TEST(EvalElementwiseTest, Bf16ArithmeticRoundsEachResult) {
  const char* text = R"(HloModule m
ENTRY e {
  a = bf16[100] parameter(0)
  b = bf16[100] parameter(1)
  m = bf16[100] multiply(a, b)
  ROOT t = bf16[100] tanh(m)
})";
  std::mt19937 rng(5);
  HostTensor a = Random("bf16[100]", rng, -2, 2);
  HostTensor b = Random("bf16[100]", rng, -2, 2);
  auto out = RunNamed(text, {a, b}, {"m", "t"});
  std::vector<double> m, t;
  for (int64_t i = 0; i < 100; ++i) {
    m.push_back(RoundToType(a.GetDouble(i) * b.GetDouble(i), PrimitiveType::kBF16));
    t.push_back(RoundToType(std::tanh(m.back()), PrimitiveType::kBF16));
  }
  ExpectNear(out["m"], m, 0, 0, "multiply");
  ExpectNear(out["t"], t, 8e-3, 0, "tanh");  // one bf16 ulp
}

TEST(EvalElementwiseTest, LargeOpsSplitOverThreadsGiveTheSameResult) {
  const char* text = R"(HloModule m
ENTRY e {
  a = f32[300001] parameter(0)
  b = f32[300001] parameter(1)
  s = f32[300001] add(a, b)
  e = f32[300001] exponential(s)
  ROOT h = bf16[300001] convert(e)
})";
  std::mt19937 rng(6);
  HostTensor a = Random("f32[300001]", rng);
  HostTensor b = Random("f32[300001]", rng);
  auto out = RunNamed(text, {a, b}, {"e", "h"});
  std::vector<double> e, h;
  for (int64_t i = 0; i < a.element_count(); ++i) {
    const float s = a.data<float>()[i] + b.data<float>()[i];
    e.push_back(std::exp(static_cast<double>(s)));
    h.push_back(RoundToType(out["e"].data<float>()[i], PrimitiveType::kBF16));
  }
  ExpectNear(out["e"], e, 1e-6, 0, "exp");
  ExpectEqual(out["h"], h, "convert");
}

TEST(EvalElementwiseTest, UnsupportedTypeIsAnErrorNamingTheInstruction) {
  const char* text = R"(HloModule m
ENTRY e {
  a = s32[4] parameter(0)
  ROOT t = s32[4] tanh(a)
})";
  // The parser's verifier already rejects it; without verification the
  // executor does.
  HloParseOptions options;
  options.verify = false;
  auto module = ParseHloModule(text, options);
  testing::ExpectErrorContaining([&] { Executor executor(*module); },
                                 {"'t' (tanh)", "tanh of s32 is not supported"});
}

}  // namespace
}  // namespace weft::runtime
