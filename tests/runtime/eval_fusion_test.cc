// The fusion evaluator: a loop fusion takes over a dying operand's buffer
// only when no broadcast or index map reads it; input fusions fold rows as
// the unfused reduce does; output fusions of a dot match a float64
// reference and refuse what they cannot run; a convolution inside a fusion
// (either kind) gives the unfused bits and matches a float64 reference.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "executor_test_util.h"
#include "fusion_test_util.h"
#include "weft/base/error.h"

namespace weft::runtime {
namespace {

using fusion_testing::ExpectRefused;
using fusion_testing::ExpectSameBits;
using testing::Parse;

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

// A convolution inside a fusion (XLA's `kind=kOutput, calls=%fused_conv`)
// is evaluated whole on its fused parameters and its epilogue a tile at a
// time reading its result: the unfused bits, in either fusion kind, with
// the epilogue's index maps and converts reading the convolution.
TEST(EvalFusion, ConvolutionEpiloguesMatchUnfused) {
  const std::string conv =
      "c = f32[2,7,3,5] convolution(p0, p1), window={size=3x3 stride=1x2 pad=1_1x0_1}, "
      "dim_labels=b01f_01io->b01f";
  for (const char* kind : {"kOutput", "kLoop"}) {
    // conv + bias, relu.
    ExpectSameBits(
        {{"f32[2,7,6,3]", "f32[3,3,3,5]", "f32[5]"},
         {conv, "b = f32[2,7,3,5] broadcast(p2), dimensions={3}", "a = f32[2,7,3,5] add(c, b)",
          "z = f32[] constant(0)", "zb = f32[2,7,3,5] broadcast(z), dimensions={}",
          "ROOT r = f32[2,7,3,5] maximum(a, zb)"},
         "f32[2,7,3,5]",
         kind},
        31);
    // The convolution alone; transposed and rounded to bf16 with a residual.
    ExpectSameBits({{"f32[2,7,6,3]", "f32[3,3,3,5]"}, {"ROOT " + conv}, "f32[2,7,3,5]", kind}, 32);
    ExpectSameBits({{"f32[2,7,6,3]", "f32[3,3,3,5]", "bf16[5,3,7,2]"},
                    {conv, "t = f32[5,3,7,2] transpose(c), dimensions={3,2,1,0}",
                     "h = bf16[5,3,7,2] convert(t)", "ROOT r = bf16[5,3,7,2] add(h, p2)"},
                    "bf16[5,3,7,2]",
                    kind},
                   33);
  }
  // bf16 operands, a grouped convolution, a parameter also read by the epilogue.
  ExpectSameBits({{"bf16[3,5,4]", "bf16[3,2,4]"},
                  {"c = bf16[3,5,4] convolution(p0, p1), window={size=3 pad=1_1}, "
                   "dim_labels=b0f_0io->b0f, feature_group_count=2",
                   "ROOT r = bf16[3,5,4] multiply(c, p0)"},
                  "bf16[3,5,4]",
                  "kOutput"},
                 34);
}

// The fused convolution and epilogue against a float64 reference.
TEST(EvalFusion, FusedConvolutionMatchesTheReference) {
  const int64_t b = 2, h = 9, w = 8, ci = 3, kh = 3, kw = 2, co = 4;
  const int64_t oh = h, ow = (w + 1 - kw) / 2 + 1;  // pad 1_1 / 0_1, stride 1 / 2
  const std::string text = fmt::format(R"(HloModule conv_fusion
fused_conv {{
  x = f32[{0},{1},{2},{3}] parameter(0)
  k = f32[{4},{5},{3},{6}] parameter(1)
  bias = f32[{6}] parameter(2)
  c = f32[{0},{1},{7},{6}] convolution(x, k), window={{size={4}x{5} stride=1x2 pad=1_1x0_1}}, dim_labels=b01f_01io->b01f
  bb = f32[{0},{1},{7},{6}] broadcast(bias), dimensions={{3}}
  a = f32[{0},{1},{7},{6}] add(c, bb)
  ROOT t = f32[{0},{1},{7},{6}] tanh(a)
}}
ENTRY main {{
  x = f32[{0},{1},{2},{3}] parameter(0)
  k = f32[{4},{5},{3},{6}] parameter(1)
  bias = f32[{6}] parameter(2)
  ROOT f = f32[{0},{1},{7},{6}] fusion(x, k, bias), kind=kOutput, calls=fused_conv
}})",
                                       b, h, w, ci, kh, kw, co, ow);
  std::mt19937 rng(41);
  const auto module = Parse(text);
  Executor executor(*module);
  for (int run = 0; run < 2; ++run) {  // fresh inputs each run
    std::vector<HostTensor> inputs;
    inputs.push_back(testing::Random(fmt::format("f32[{},{},{},{}]", b, h, w, ci), rng));
    inputs.push_back(testing::Random(fmt::format("f32[{},{},{},{}]", kh, kw, ci, co), rng));
    inputs.push_back(testing::Random(fmt::format("f32[{}]", co), rng));
    const std::vector<double> x = inputs[0].ToDoubles(), k = inputs[1].ToDoubles(),
                              bias = inputs[2].ToDoubles();
    std::vector<double> want(b * oh * ow * co);
    for (int64_t n = 0; n < b; ++n) {
      for (int64_t i = 0; i < oh; ++i) {
        for (int64_t j = 0; j < ow; ++j) {
          for (int64_t o = 0; o < co; ++o) {
            double sum = bias[o];
            for (int64_t di = 0; di < kh; ++di) {
              for (int64_t dj = 0; dj < kw; ++dj) {
                const int64_t u = i - 1 + di, v = j * 2 + dj;
                if (u < 0 || u >= h || v >= w) continue;
                for (int64_t c = 0; c < ci; ++c) {
                  sum += x[((n * h + u) * w + v) * ci + c] * k[((di * kw + dj) * ci + c) * co + o];
                }
              }
            }
            want[((n * oh + i) * ow + j) * co + o] = std::tanh(sum);
          }
        }
      }
    }
    const std::vector<HostTensor> out = executor.Run(std::move(inputs));
    ASSERT_EQ(out.size(), 1u);
    testing::ExpectNear(out[0], want, 1e-5, 1e-5, fmt::format("run {}", run));
  }
}

}  // namespace
}  // namespace weft::runtime
