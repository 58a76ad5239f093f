// The loop-fusion evaluator: each fused module must give the bits of the
// same instructions run unfused (broadcast fast paths and the general path,
// iota, splatted scalars, converts, bf16 rounding, pred and s32, tile and
// thread-chunk boundaries, chains of index maps), take over a dying
// operand's buffer only when no broadcast or index map reads it, and refuse
// what it cannot run.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "executor_test_util.h"
#include "weft/base/error.h"

namespace weft::runtime {
namespace {

using testing::Parse;

// The executor refuses `text` with an error that contains every one of `parts`.
void ExpectRefused(const std::string& text, const std::vector<std::string>& parts) {
  try {
    Executor executor(*Parse(text));
    ADD_FAILURE() << "ran: " << text;
  } catch (const Error& e) {
    for (const std::string& part : parts) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  }
}

// A fused computation's body (parameters p0, p1, ... of `params`; the last
// line is the ROOT) as an unfused entry and as one loop fusion.
struct Case {
  std::vector<std::string> params;  // shapes
  std::vector<std::string> body;
  std::string result;  // the root's shape
};

std::string ParamLines(const Case& c) {
  std::string text;
  for (size_t i = 0; i < c.params.size(); ++i) {
    text += fmt::format("  p{} = {} parameter({})\n", i, c.params[i], i);
  }
  return text;
}

std::string Body(const Case& c) {
  std::string text;
  for (const std::string& line : c.body) text += "  " + line + "\n";
  return text;
}

std::string Unfused(const Case& c) {
  return "HloModule unfused\nENTRY main {\n" + ParamLines(c) + Body(c) + "}\n";
}

std::string Fused(const Case& c) {
  std::vector<std::string> names;
  for (size_t i = 0; i < c.params.size(); ++i) names.push_back(fmt::format("p{}", i));
  return "HloModule fused\nfused_computation {\n" + ParamLines(c) + Body(c) + "}\nENTRY main {\n" +
         ParamLines(c) +
         fmt::format("  ROOT f = {} fusion({}), kind=kLoop, calls=fused_computation\n}}\n",
                     c.result, fmt::join(names, ", "));
}

// Never-zero inputs.
std::vector<HostTensor> Inputs(const Case& c, std::mt19937& rng) {
  std::vector<HostTensor> inputs;
  for (const std::string& shape : c.params) {
    HostTensor t = testing::Random(shape, rng, 0.25, 2.0);
    if (t.element_type() != PrimitiveType::kPred) {
      std::vector<double> v = t.ToDoubles();
      for (double& x : v) x = (rng() & 1) ? x : -x;
      t = HostTensor::FromDoubles(t.shape(), v);
    }
    inputs.push_back(std::move(t));
  }
  return inputs;
}

void ExpectSameBits(const Case& c, uint32_t seed) {
  std::mt19937 rng(seed);
  const std::vector<HostTensor> inputs = Inputs(c, rng);
  std::vector<HostTensor> a, b;
  for (const HostTensor& t : inputs) {
    a.push_back(t.Clone());
    b.push_back(t.Clone());
  }
  const HostTensor want = testing::Run(*Parse(Unfused(c)), std::move(a)).at(0);
  const HostTensor got = testing::Run(*Parse(Fused(c)), std::move(b)).at(0);
  ASSERT_EQ(want.shape(), got.shape());
  const int64_t width = ByteWidth(want.element_type());
  for (int64_t k = 0; k < want.element_count(); ++k) {
    if (std::memcmp(static_cast<const std::byte*>(want.raw_data()) + k * width,
                    static_cast<const std::byte*>(got.raw_data()) + k * width, width) != 0) {
      FAIL() << "element " << k << ": unfused " << want.GetDouble(k) << ", fused "
             << got.GetDouble(k) << "\n"
             << Fused(c);
    }
  }
}

// Every broadcast path, at sizes that cut tiles (2048) mid-row and, the
// largest, span several thread-pool chunks.
TEST(EvalFusion, BroadcastsMatchUnfused) {
  struct Bcast {
    std::vector<int64_t> operand_dims;  // indices into the output dims
  };
  const std::vector<std::vector<int64_t>> shapes = {{5, 77, 33}, {3, 129, 111}, {7}, {1, 4099}};
  uint32_t seed = 1;
  for (const std::vector<int64_t>& dims : shapes) {
    const int64_t rank = static_cast<int64_t>(dims.size());
    std::vector<std::vector<int64_t>> maps = {{}};  // scalar
    for (int64_t mask = 1; mask < (1 << rank); ++mask) {
      std::vector<int64_t> m;
      for (int64_t d = 0; d < rank; ++d) {
        if (mask & (1 << d)) m.push_back(d);
      }
      maps.push_back(m);
    }
    for (const char* type : {"f32", "bf16", "s32", "pred"}) {
      for (const std::vector<int64_t>& map : maps) {
        std::vector<int64_t> small;
        for (int64_t d : map) small.push_back(dims[d]);
        const std::string full = fmt::format("{}[{}]", type, fmt::join(dims, ","));
        const std::string op = std::string(type) == "pred" ? "xor" : "multiply";
        Case c;
        c.params = {full, fmt::format("{}[{}]", type, fmt::join(small, ","))};
        c.body = {fmt::format("b = {} broadcast(p1), dimensions={{{}}}", full, fmt::join(map, ",")),
                  fmt::format("ROOT r = {} {}(p0, b)", full, op)};
        c.result = full;
        SCOPED_TRACE(Fused(c));
        ExpectSameBits(c, seed++);
        if (HasFatalFailure()) return;
      }
    }
  }
}

// Index maps (reshape, transpose, slice, reverse, concatenate, pad and a
// broadcast of them) composed down to the parameters, in every element
// type, at sizes that cut tiles mid-row; a reshape as the root.
TEST(EvalFusion, IndexMapChainsMatchUnfused) {
  uint32_t seed = 100;
  for (const char* t : {"f32", "bf16", "s32", "pred"}) {
    const std::string op = std::string(t) == "pred" ? "xor" : "add";
    auto s = [&](const std::string& dims) { return fmt::format("{}[{}]", t, dims); };
    std::vector<Case> cases;
    // transpose of a slice of a reshape, added to a reversed parameter
    cases.push_back({{s("61,4,70"), s("70,61,3")},
                     {fmt::format("r = {} reshape(p0)", s("61,280")),
                      fmt::format("sl = {} slice(r), slice={{[0:61], [7:217:3]}}", s("61,70")),
                      fmt::format("tr = {} transpose(sl), dimensions={{1,0}}", s("70,61")),
                      fmt::format("b = {} broadcast(tr), dimensions={{0,1}}", s("70,61,3")),
                      fmt::format("rv = {} reverse(p1), dimensions={{0,2}}", s("70,61,3")),
                      fmt::format("ROOT x = {} {}(b, rv)", s("70,61,3"), op)},
                     s("70,61,3")});
    // concatenate of a padded slice and a transposed parameter (RoPE-like halves)
    cases.push_back({{s("37,128"), s("64,37"), s("")},
                     {fmt::format("lo = {} slice(p0), slice={{[0:37], [64:128]}}", s("37,64")),
                      fmt::format("pd = {} pad(lo, p2), padding=0_0x-1_1_0", s("37,64")),
                      fmt::format("tr = {} transpose(p1), dimensions={{1,0}}", s("37,64")),
                      fmt::format("c = {} concatenate(pd, tr), dimensions={{1}}", s("37,128")),
                      fmt::format("ROOT x = {} {}(c, p0)", s("37,128"), op)},
                     s("37,128")});
    // interior and edge padding, then an elementwise op and a reshape root
    cases.push_back({{s("20,33"), s("41,35"), s("")},
                     {fmt::format("pd = {} pad(p0, p2), padding=1_1_1x2_0", s("41,35")),
                      fmt::format("e = {} {}(pd, p1)", s("41,35"), op),
                      fmt::format("ROOT x = {} reshape(e)", s("1435"))},
                     s("1435")});
    for (const Case& c : cases) {
      SCOPED_TRACE(Fused(c));
      ExpectSameBits(c, seed++);
      if (HasFatalFailure()) return;
    }
  }
}

// Pads of the innermost dimension only and concatenates along it, of
// parameters (through reshapes), are copied a column band at a time: RoPE's
// pairs (one column each), several bands of different widths, negative
// padding that crops, in every element type; rows cut by tiles.
TEST(EvalFusion, ColumnBandsMatchUnfused) {
  uint32_t seed = 300;
  for (const char* t : {"f32", "bf16", "s32", "pred"}) {
    const std::string op = std::string(t) == "pred" ? "xor" : "add";
    auto s = [&](const std::string& dims) { return fmt::format("{}[{}]", t, dims); };
    std::vector<Case> cases;
    // RoPE's gradient: two single-column halves padded into pairs and added
    cases.push_back({{s("7,8,131"), s("7,8,131"), s("")},
                     {fmt::format("a = {} reshape(p0)", s("7,8,131,1")),
                      fmt::format("b = {} reshape(p1)", s("7,8,131,1")),
                      fmt::format("pa = {} pad(a, p2), padding=0_0x0_0x0_0x0_1", s("7,8,131,2")),
                      fmt::format("pb = {} pad(b, p2), padding=0_0x0_0x0_0x1_0", s("7,8,131,2")),
                      fmt::format("ROOT x = {} {}(pa, pb)", s("7,8,131,2"), op)},
                     s("7,8,131,2")});
    // three bands of widths 3, 5 and 1
    cases.push_back({{s("9,70,3"), s("9,70,5"), s("9,70,1"), s("9,70,9")},
                     {fmt::format("c = {} concatenate(p0, p1, p2), dimensions={{2}}", s("9,70,9")),
                      fmt::format("ROOT x = {} {}(c, p3)", s("9,70,9"), op)},
                     s("9,70,9")});
    // negative low padding crops, a single column offset inside wider rows
    cases.push_back({{s("5,301,40"), s("5,301,1"), s(""), s("5,301,44")},
                     {fmt::format("pa = {} pad(p0, p2), padding=0_0x0_0x-3_7", s("5,301,44")),
                      fmt::format("pb = {} pad(p1, p2), padding=0_0x0_0x2_41", s("5,301,44")),
                      fmt::format("e = {} {}(pa, pb)", s("5,301,44"), op),
                      fmt::format("ROOT x = {} {}(e, p3)", s("5,301,44"), op)},
                     s("5,301,44")});
    for (const Case& c : cases) {
      SCOPED_TRACE(Fused(c));
      ExpectSameBits(c, seed++);
      if (HasFatalFailure()) return;
    }
  }
}

TEST(EvalFusion, ChainsInBf16RoundEveryResult) {
  // Unrounded f32 intermediates would differ from the unfused bf16 program.
  Case c;
  c.params = {"bf16[33,257]", "bf16[257]", "bf16[33,257]"};
  c.body = {"e = bf16[33,257] exponential(p0)", "b = bf16[33,257] broadcast(p1), dimensions={1}",
            "m = bf16[33,257] multiply(e, b)",  "t = bf16[33,257] tanh(m)",
            "d = bf16[33,257] divide(t, p2)",   "s = bf16[33,257] subtract(d, e)",
            "ROOT r = bf16[33,257] add(s, m)"};
  c.result = "bf16[33,257]";
  ExpectSameBits(c, 7);
}

TEST(EvalFusion, IotaConvertsAndIntegers) {
  for (int64_t d = 0; d < 3; ++d) {
    Case c;
    c.params = {"f32[6,50,41]", "bf16[6,50,41]"};
    c.body = {fmt::format("i = s32[6,50,41] iota(), iota_dimension={}", d),
              "j = s32[6,50,41] convert(p0)",
              "k = s32[6,50,41] multiply(i, j)",
              "three = s32[] constant(3)",
              "tb = s32[6,50,41] broadcast(three), dimensions={}",
              "q = s32[6,50,41] divide(k, tb)",
              "lt = pred[6,50,41] compare(q, i), direction=LT",
              "f = bf16[6,50,41] convert(q)",
              "h = f16[6,50,41] convert(p1)",
              "hf = bf16[6,50,41] convert(h)",
              "n = bf16[6,50,41] negate(hf)",
              "s = bf16[6,50,41] select(lt, f, n)",
              "ROOT r = f32[6,50,41] convert(s)"};
    c.result = "f32[6,50,41]";
    SCOPED_TRACE(d);
    ExpectSameBits(c, 11 + static_cast<uint32_t>(d));
  }
}

// compare's type=TOTALORDER inside a fusion: -NaN < -inf < ... < -0 < +0
// < ... < inf < +NaN (bf16 widened to f32 keeps the order), as unfused.
TEST(EvalFusion, CompareInTotalOrder) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<double> v = {-nan, -inf, -2.5, -0.25, -0.0, 0.0, 0.25, 3, inf, nan};
  const size_t n = v.size();
  std::vector<double> a, b, want;
  for (size_t i = 0; i < n; ++i) {
    for (size_t j = 0; j < n; ++j) {
      a.push_back(v[i]);
      b.push_back(v[j]);
      want.push_back(i < j ? 1 : 0);  // LT on ranks; a float compare would differ at -0/+0 and NaN
    }
  }
  for (const char* type : {"f32", "bf16"}) {
    const std::string shape = fmt::format("{}[{}]", type, n * n);
    Case c;
    c.params = {shape, shape};
    c.body = {fmt::format("lt = pred[{}] compare(p0, p1), direction=LT, type=TOTALORDER", n * n),
              fmt::format("ROOT r = s32[{}] convert(lt)", n * n)};
    c.result = fmt::format("s32[{}]", n * n);
    const HostTensor ta = HostTensor::FromDoubles(ParseShape(shape), a);
    const HostTensor tb = HostTensor::FromDoubles(ParseShape(shape), b);
    const HostTensor got = testing::Run(*Parse(Fused(c)), {ta.Clone(), tb.Clone()}).at(0);
    testing::ExpectEqual(got, want, shape);
    ExpectSameBits(c, 21);
  }
}

TEST(EvalFusion, ScalarOperandsAreSplatted) {
  Case c;
  c.params = {"f32[9,300]", "f32[]", "f32[]", "pred[]", "f32[9,300]"};
  c.body = {"cl = f32[9,300] clamp(p1, p0, p2)", "ROOT s = f32[9,300] select(p3, cl, p4)"};
  c.result = "f32[9,300]";
  ExpectSameBits(c, 21);
  Case h = c;
  h.params = {"bf16[9,300]", "bf16[]", "bf16[]", "pred[]", "bf16[9,300]"};
  h.body = {"cl = bf16[9,300] clamp(p1, p0, p2)", "ROOT s = bf16[9,300] select(p3, cl, p4)"};
  h.result = "bf16[9,300]";
  ExpectSameBits(h, 22);
}

TEST(EvalFusion, BroadcastRoots) {
  // A broadcast root (bf16: its bits copied, not rounded through f32), in
  // the general path (a middle dimension repeated) and a fast one.
  for (const char* dims : {"0,2", "1,2"}) {
    Case c;
    c.params = {"bf16[3,70]"};
    if (std::string(dims) == "1,2") c.params = {"bf16[40,70]"};
    c.body = {fmt::format("ROOT b = bf16[3,40,70] broadcast(p0), dimensions={{{}}}", dims)};
    c.result = "bf16[3,40,70]";
    ExpectSameBits(c, 31);
  }
}

TEST(EvalFusion, TakesOverADyingOperandUnlessABroadcastReadsIt) {
  const std::string module = R"(HloModule reuse
fc {
  a = f32[64,256] parameter(0)
  b = f32[256] parameter(1)
  bb = f32[64,256] broadcast(b), dimensions={1}
  ROOT r = f32[64,256] add(a, bb)
}
ENTRY main {
  x = f32[64,256] parameter(0)
  w = f32[256] parameter(1)
  n = f32[64,256] negate(x)
  ROOT f = f32[64,256] fusion(n, w), kind=kLoop, calls=fc
})";
  std::mt19937 rng(41);
  HostTensor x = testing::Random("f32[64,256]", rng), w = testing::Random("f32[256]", rng);
  ExecutorStats stats;
  const HostTensor out = testing::Run(*Parse(module), {x.Clone(), w.Clone()}, &stats).at(0);
  // The arena and the output copied out of it. (The buffer assignment does
  // not yet let a fusion take over a dying operand: n and f are two buffers.)
  EXPECT_EQ(stats.allocations, 2);
  for (int64_t i = 0; i < out.element_count(); ++i) {
    const float want = -x.data<float>()[i] + w.data<float>()[i % 256];
    ASSERT_EQ(out.data<float>()[i], want) << i;
  }

  // The same value as the in-place operand and as a broadcast's source (an
  // identity broadcast reads it at other indices than it writes): no reuse.
  const std::string shared = R"(HloModule shared
fc {
  a = f32[64,256] parameter(0)
  b = f32[64,256] parameter(1)
  bt = f32[64,256] broadcast(b), dimensions={0,1}
  ROOT r = f32[64,256] add(a, bt)
}
ENTRY main {
  x = f32[64,256] parameter(0)
  n = f32[64,256] negate(x)
  ROOT f = f32[64,256] fusion(n, n), kind=kLoop, calls=fc
})";
  const HostTensor twice = testing::Run(*Parse(shared), {x.Clone()}, &stats).at(0);
  EXPECT_EQ(stats.allocations, 2);
  for (int64_t i = 0; i < twice.element_count(); ++i) {
    ASSERT_EQ(twice.data<float>()[i], -2 * x.data<float>()[i]) << i;
  }
}

TEST(EvalFusion, RefusesWhatItCannotRun) {
  // An elementwise op read through a transpose would have to be computed at
  // other indices than the tile's: the fusion pass never makes one.
  const std::string gathered = R"(HloModule bad
fc {
  a = f32[4,8] parameter(0)
  n = f32[4,8] negate(a)
  t = f32[8,4] transpose(n), dimensions={1,0}
  ROOT e = f32[8,4] exponential(t)
}
ENTRY main {
  x = f32[4,8] parameter(0)
  ROOT f = f32[8,4] fusion(x), kind=kLoop, calls=fc
})";
  try {
    Executor executor(*Parse(gathered));
    FAIL() << "an elementwise op under a transpose in a loop fusion ran";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("may feed an index map in a loop fusion"),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("'f' (fusion)"), std::string::npos) << e.what();
  }
  // kInput fusions: a reduce root of innermost f32 rows only.
  const auto refused = [](const std::string& root_lines, const std::string& result,
                          const std::string& why) {
    const std::string text = fmt::format(R"(HloModule input
add {{
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}}
fc {{
  a = f32[4,8] parameter(0)
  n = f32[4,8] negate(a)
  zero = f32[] constant(0)
  {0}
}}
ENTRY main {{
  x = f32[4,8] parameter(0)
  ROOT f = {1} fusion(x), kind=kInput, calls=fc
}})",
                                         root_lines, result);
    ExpectRefused(text, {why, "input fusion"});
  };
  refused("ROOT r = f32[4,8] negate(n)", "f32[4,8]", "must be a reduce");
  refused("ROOT r = f32[8] reduce(n, zero), dimensions={0}, to_apply=add", "f32[8]",
          "innermost dims");
}

// Empty rows fold nothing: every output is the init value (as the unfused
// reduce gives).
TEST(EvalFusion, InputFusionOfEmptyRowsIsTheInit) {
  const auto module = Parse(R"(HloModule empty
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
fc {
  x = f32[3,0] parameter(0)
  n = f32[3,0] negate(x)
  init = f32[] constant(1.25)
  ROOT r = f32[3] reduce(n, init), dimensions={1}, to_apply=add
}
ENTRY main {
  x = f32[3,0] parameter(0)
  ROOT f = f32[3] fusion(x), kind=kInput, calls=fc
})");
  Executor executor(*module);
  std::vector<HostTensor> inputs;
  inputs.push_back(HostTensor::FromDoubles(Shape(PrimitiveType::kF32, {3, 0}), {}));
  const std::vector<HostTensor> out = executor.Run(std::move(inputs));
  ASSERT_EQ(out.size(), 1u);
  for (int64_t r = 0; r < 3; ++r) EXPECT_EQ(out[0].GetDouble(r), 1.25);
}

// An input fusion against a float64 reference: sum over rows of
// (tanh(x) * 2 + w) plus the init, rows crossing tile boundaries.
TEST(EvalFusion, InputFusionSumsRowsLikeTheReference) {
  std::mt19937 rng(5);
  const int64_t rows = 6, cols = 2500;
  const std::string text = fmt::format(R"(HloModule input
add {{
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}}
fc {{
  x = f32[{0},{1}] parameter(0)
  w = f32[{1}] parameter(1)
  i = f32[] parameter(2)
  t = f32[{0},{1}] tanh(x)
  two = f32[] constant(2)
  tb = f32[{0},{1}] broadcast(two), dimensions={{}}
  m = f32[{0},{1}] multiply(t, tb)
  wb = f32[{0},{1}] broadcast(w), dimensions={{1}}
  v = f32[{0},{1}] add(m, wb)
  ROOT r = f32[{0}] reduce(v, i), dimensions={{1}}, to_apply=add
}}
ENTRY main {{
  x = f32[{0},{1}] parameter(0)
  w = f32[{1}] parameter(1)
  i = f32[] parameter(2)
  ROOT f = f32[{0}] fusion(x, w, i), kind=kInput, calls=fc
}})",
                                       rows, cols);
  std::uniform_real_distribution<double> u(-2, 2);
  std::vector<double> x(rows * cols), w(cols);
  for (double& v : x) v = u(rng);
  for (double& v : w) v = u(rng);
  const double init = u(rng);
  const auto module = Parse(text);
  Executor executor(*module);
  std::vector<HostTensor> inputs;
  inputs.push_back(HostTensor::FromDoubles(Shape(PrimitiveType::kF32, {rows, cols}), x));
  inputs.push_back(HostTensor::FromDoubles(Shape(PrimitiveType::kF32, {cols}), w));
  const std::vector<double> init_value = {init};
  inputs.push_back(HostTensor::FromDoubles(Shape(PrimitiveType::kF32, {}), init_value));
  const std::vector<HostTensor> out = executor.Run(std::move(inputs));
  ASSERT_EQ(out.size(), 1u);
  for (int64_t r = 0; r < rows; ++r) {
    double want = init, magnitude = std::abs(init);
    for (int64_t c = 0; c < cols; ++c) {
      // The inputs as float32 holds them.
      const double v = std::tanh(static_cast<double>(static_cast<float>(x[r * cols + c]))) * 2 +
                       static_cast<double>(static_cast<float>(w[c]));
      want += v;
      magnitude += std::abs(v);
    }
    EXPECT_NEAR(out[0].GetDouble(r), want, 1e-6 * magnitude) << "row " << r;
  }
}

// A hand-written output fusion (kind=kOutput): a batched dot with a
// transposed rhs, then add(residual, dot) and multiply(dot', scale), run as
// one matmul with two binary post-ops, against a float64 reference.
TEST(EvalFusion, OutputFusionMatchesTheReference) {
  std::mt19937 rng(21);
  const int64_t b = 2, m = 9, k = 37, n = 13;
  const std::string text = fmt::format(R"(HloModule output
fc {{
  l = f32[{0},{1},{2}] parameter(0)
  r = f32[{0},{3},{2}] parameter(1)
  res = f32[{0},{1},{3}] parameter(2)
  sc = f32[{0},{1},{3}] parameter(3)
  d = f32[{0},{1},{3}] dot(l, r), lhs_batch_dims={{0}}, rhs_batch_dims={{0}}, lhs_contracting_dims={{2}}, rhs_contracting_dims={{2}}
  a = f32[{0},{1},{3}] add(res, d)
  ROOT p = f32[{0},{1},{3}] multiply(a, sc)
}}
ENTRY main {{
  l = f32[{0},{1},{2}] parameter(0)
  r = f32[{0},{3},{2}] parameter(1)
  res = f32[{0},{1},{3}] parameter(2)
  sc = f32[{0},{1},{3}] parameter(3)
  ROOT f = f32[{0},{1},{3}] fusion(l, r, res, sc), kind=kOutput, calls=fc
}})",
                                       b, m, k, n);
  std::uniform_real_distribution<double> u(-2, 2);
  auto fill = [&](int64_t size) {
    std::vector<double> v(size);
    for (double& x : v) x = static_cast<float>(u(rng));  // as float32 holds them
    return v;
  };
  const std::vector<double> l = fill(b * m * k), r = fill(b * n * k), res = fill(b * m * n),
                            sc = fill(b * m * n);
  const auto module = Parse(text);
  Executor executor(*module);
  for (int run = 0; run < 2; ++run) {  // the second run reuses the cached primitive
    std::vector<HostTensor> inputs;
    inputs.push_back(HostTensor::FromDoubles(Shape(PrimitiveType::kF32, {b, m, k}), l));
    inputs.push_back(HostTensor::FromDoubles(Shape(PrimitiveType::kF32, {b, n, k}), r));
    inputs.push_back(HostTensor::FromDoubles(Shape(PrimitiveType::kF32, {b, m, n}), res));
    inputs.push_back(HostTensor::FromDoubles(Shape(PrimitiveType::kF32, {b, m, n}), sc));
    const std::vector<HostTensor> out = executor.Run(std::move(inputs));
    ASSERT_EQ(out.size(), 1u);
    for (int64_t p = 0; p < b; ++p) {
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) {
          double dot = 0, magnitude = 0;
          for (int64_t c = 0; c < k; ++c) {
            const double term = l[(p * m + i) * k + c] * r[(p * n + j) * k + c];
            dot += term;
            magnitude += std::abs(term);
          }
          const int64_t e = (p * m + i) * n + j;
          const double want = (res[e] + dot) * sc[e];
          const double tol = 1e-6 * (magnitude + std::abs(res[e])) * std::abs(sc[e]) + 1e-30;
          ASSERT_NEAR(out[0].GetDouble(e), want, tol) << "run " << run << " element " << e;
        }
      }
    }
  }
}

TEST(EvalFusion, RefusesOutputFusionsItCannotRun) {
  const auto refused = [](const std::string& fused_lines, const std::string& why,
                          const std::string& operands = "l, r, y, v, lb, rb") {
    const std::string text = fmt::format(R"(HloModule output
fc {{
  l = f32[4,8] parameter(0)
  r = f32[8,6] parameter(1)
  y = f32[4,6] parameter(2)
  v = f32[6] parameter(3)
  lb = bf16[4,8] parameter(4)
  rb = bf16[8,6] parameter(5)
  {0}
}}
ENTRY main {{
  l = f32[4,8] parameter(0)
  r = f32[8,6] parameter(1)
  y = f32[4,6] parameter(2)
  v = f32[6] parameter(3)
  lb = bf16[4,8] parameter(4)
  rb = bf16[8,6] parameter(5)
  ROOT f = f32[4,6] fusion({1}), kind=kOutput, calls=fc
}})",
                                         fused_lines, operands);
    ExpectRefused(text, {why, "output fusion 'f'"});
  };
  const std::string dot =
      "d = f32[4,6] dot(l, r), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n  ";
  // Not a dot root chain: a subtract, a tanh, the dot alone, no dot at all.
  refused(dot + "ROOT s = f32[4,6] subtract(d, y)", "not a chain of add / multiply over a dot");
  refused(dot + "t = f32[4,6] tanh(d)\n  ROOT s = f32[4,6] add(t, y)",
          "'t' (tanh) at 10:3 is in the way");
  refused(dot + "ROOT s = f32[4,6] add(d, d)", "must combine");
  refused("ROOT s = f32[4,6] add(y, y)", "must combine");
  refused("ROOT d = f32[4,6] dot(l, r), lhs_contracting_dims={1}, rhs_contracting_dims={0}",
          "its root is the dot itself");
  refused(dot + "e = f32[4,6] add(d, y)\n  ROOT s = f32[4,6] negate(e)", "negate");
  // A bf16 dot (converted to f32).
  refused(
      "d = bf16[4,6] dot(lb, rb), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
      "  c = f32[4,6] convert(d)\n  ROOT s = f32[4,6] add(c, y)",
      "(convert) at 10:3 is in the way");
  refused(
      "d = f32[4,6] dot(lb, rb), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
      "  ROOT s = f32[4,6] add(d, y)",
      "must be f32 of f32 operands");
  // An operand not of the dot's shape (a broadcast bias).
  refused(dot + "vb = f32[4,6] broadcast(v), dimensions={1}\n  ROOT s = f32[4,6] add(d, vb)",
          "must combine");
  // (A parameter whose shape differs from its fusion operand's is refused
  // by the verifier before the executor sees it.)
}

}  // namespace
}  // namespace weft::runtime
