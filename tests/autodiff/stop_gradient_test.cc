// StopGradient: the mark round-trips through the text and leaves the forward
// alone; autodiff passes no gradient through a marked value, in the entry
// and in a scan body (both remat modes), against float64 references; the
// cross-entropy's logsumexp with its max stopped has the same gradient as
// without the mark and as softmax - one-hot, and no max mask.
#include "weft/autodiff/stop_gradient.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "count_opcode.h"
#include "grad_check.h"

namespace weft {
namespace {

using runtime::Executor;
using runtime::HostTensor;
using testing::RandomTensor;

using weft::testing::CountOpcode;

TEST(StopGradientTest, TheMarkIsAFrontendAttributeThatRoundTrips) {
  auto module = ParseHloModule(R"(HloModule m
ENTRY e {
  a = f32[4] parameter(0)
  b = f32[4] negate(a), frontend_attributes={other="x,weft_stop_gradient=\"true\""}
  ROOT c = f32[4] exponential(b)
})");
  HloInstruction* b = module->entry_computation()->GetInstruction("b");
  HloInstruction* c = module->entry_computation()->GetInstruction("c");
  // The key inside another attribute's quoted value is not the mark.
  EXPECT_FALSE(IsGradientStopped(*b));
  EXPECT_FALSE(IsGradientStopped(*c));
  EXPECT_EQ(StopGradient(b), b);
  EXPECT_EQ(StopGradient(b), b);  // idempotent
  StopGradient(c);
  EXPECT_TRUE(IsGradientStopped(*b));
  EXPECT_TRUE(IsGradientStopped(*c));
  ASSERT_EQ(b->attrs().passthrough.size(), 1u);
  EXPECT_EQ(b->attrs().passthrough[0].second,
            R"({weft_stop_gradient="true",other="x,weft_stop_gradient=\"true\""})");
  ASSERT_EQ(c->attrs().passthrough.size(), 1u);
  EXPECT_EQ(c->attrs().passthrough[0].second, R"({weft_stop_gradient="true"})");
  const std::string text = module->ToString();
  auto reparsed = ParseHloModule(text);
  EXPECT_EQ(reparsed->ToString(), text);
  EXPECT_TRUE(IsGradientStopped(*reparsed->entry_computation()->GetInstruction("b")));
  EXPECT_TRUE(IsGradientStopped(*reparsed->entry_computation()->GetInstruction("c")));
  EXPECT_FALSE(IsGradientStopped(*reparsed->entry_computation()->GetInstruction("a")));
}

// f(x) = sum(x * stop(x) * w): df/dx = stop(x) * w = x * w, not 2 x w.
TEST(StopGradientTest, NoGradientFlowsThroughAMarkedValue) {
  auto module = ParseHloModule(testing::LossModule(R"(  x = f32[3,5] parameter(0)
  s = f32[3,5] add(x, x)
  h = f32[] constant(0.5)
  hb = f32[3,5] broadcast(h), dimensions={}
  sx = f32[3,5] multiply(s, hb)
  r = f32[3,5] multiply(x, sx))",
                                                   "f32[3,5]", 1));
  std::mt19937 rng(3);
  const HloComputation* entry = module->entry_computation();
  const std::vector<HostTensor> in = {RandomTensor(entry->parameter_instruction(0)->shape(), rng),
                                      RandomTensor(entry->parameter_instruction(1)->shape(), rng)};
  const std::vector<double> x = in[0].ToDoubles(), w = in[1].ToDoubles();
  auto gradient = [&](const HloModule& m) {
    GradOptions options;
    options.wrt = {0};
    auto step = BuildTrainingStep(m, options);
    Executor exec(*step);
    auto out = exec.Run(in);
    return std::make_pair(out[0].GetDouble(0), out[1].ToDoubles());
  };
  const auto [plain_loss, plain] = gradient(*module);
  // The mark on sx (the product with 0.5, not only s): its whole subtree
  // is a constant to autodiff.
  StopGradient(module->entry_computation()->GetInstruction("sx"));
  const auto [stopped_loss, stopped] = gradient(*module);
  EXPECT_EQ(stopped_loss, plain_loss);
  EXPECT_EQ(stopped_loss, testing::RunLoss(*module, in));
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_NEAR(plain[i], 2 * x[i] * w[i], 1e-6 * std::abs(x[i] * w[i])) << i;
    EXPECT_NEAR(stopped[i], x[i] * w[i], 1e-6 * std::abs(x[i] * w[i])) << i;
  }
}

// Mean cross-entropy over rows of logits, logsumexp shifted by the row max
// (models/llama.cc's loss), with the max marked or not.
std::unique_ptr<HloModule> CrossEntropy(bool stop, int64_t n, int64_t v) {
  auto module = ParseHloModule(fmt::format(R"(HloModule ce
add {{
  ax = f32[] parameter(0)
  ay = f32[] parameter(1)
  ROOT as = f32[] add(ax, ay)
}}
max {{
  mx = f32[] parameter(0)
  my = f32[] parameter(1)
  ROOT ms = f32[] maximum(mx, my)
}}
ENTRY e {{
  x = f32[{0},{1}] parameter(0)
  t = s32[{0}] parameter(1)
  mask = f32[{0}] parameter(2)
  ninf = f32[] constant(-inf)
  m = f32[{0}] reduce(x, ninf), dimensions={{1}}, to_apply=max
  mb = f32[{0},{1}] broadcast(m), dimensions={{0}}
  d = f32[{0},{1}] subtract(x, mb)
  ex = f32[{0},{1}] exponential(d)
  zero = f32[] constant(0)
  s = f32[{0}] reduce(ex, zero), dimensions={{1}}, to_apply=add
  ls = f32[{0}] log(s)
  lse = f32[{0}] add(ls, m)
  io = s32[{0},{1}] iota(), iota_dimension=1
  tb = s32[{0},{1}] broadcast(t), dimensions={{0}}
  hot = pred[{0},{1}] compare(io, tb), direction=EQ
  zb = f32[{0},{1}] broadcast(zero), dimensions={{}}
  sel = f32[{0},{1}] select(hot, x, zb)
  tl = f32[{0}] reduce(sel, zero), dimensions={{1}}, to_apply=add
  nl = f32[{0}] subtract(lse, tl)
  nll = f32[{0}] multiply(nl, mask)
  total = f32[] reduce(nll, zero), dimensions={{0}}, to_apply=add
  cnt = f32[] reduce(mask, zero), dimensions={{0}}, to_apply=add
  ROOT loss = f32[] divide(total, cnt)
}})",
                                           n, v));
  if (stop) StopGradient(module->entry_computation()->GetInstruction("m"));
  return module;
}

TEST(StopGradientTest, LogsumexpWithTheMaxStoppedHasTheSoftmaxGradient) {
  constexpr int64_t n = 6, v = 37;
  std::mt19937 rng(17);
  std::vector<HostTensor> in = {RandomTensor(Shape(PrimitiveType::kF32, {n, v}), rng, 4.0)};
  std::vector<double> targets(n), mask(n, 1.0);
  for (int64_t i = 0; i < n; ++i) targets[i] = static_cast<double>(rng() % v);
  mask[2] = 0;
  in.push_back(HostTensor::FromDoubles(Shape(PrimitiveType::kS32, {n}), targets));
  in.push_back(HostTensor::FromDoubles(Shape(PrimitiveType::kF32, {n}), mask));

  // float64: d loss / d x = mask (softmax(x) - one_hot(t)) / count.
  const std::vector<double> x = in[0].ToDoubles();
  std::vector<double> want(n * v);
  double count = 0, loss = 0;
  for (double m : mask) count += m;
  for (int64_t i = 0; i < n; ++i) {
    const double* row = x.data() + i * v;
    const double mx = *std::max_element(row, row + v);
    double sum = 0;
    for (int64_t j = 0; j < v; ++j) sum += std::exp(row[j] - mx);
    loss += mask[i] * (std::log(sum) + mx - row[static_cast<int64_t>(targets[i])]) / count;
    for (int64_t j = 0; j < v; ++j) {
      want[i * v + j] =
          mask[i] * (std::exp(row[j] - mx) / sum - (j == targets[i] ? 1.0 : 0.0)) / count;
    }
  }
  double scale = 0;
  for (double g : want) scale = std::max(scale, std::abs(g));

  GradOptions options;
  options.wrt = {0};
  std::vector<std::vector<double>> grads;
  std::vector<std::unique_ptr<HloModule>> steps;
  std::vector<float> losses;
  for (bool stop : {false, true}) {
    auto forward = CrossEntropy(stop, n, v);
    steps.push_back(BuildTrainingStep(*forward, options));
    Executor exec(*steps.back());
    const auto out = exec.Run(in);
    losses.push_back(out[0].data<float>()[0]);
    // The loss is the same formula, to the bit, and the forward's.
    EXPECT_EQ(losses.back(), testing::RunLoss(*forward, in));
    EXPECT_NEAR(losses.back(), loss, 1e-6 * loss) << "stop=" << stop;
    grads.push_back(out[1].ToDoubles());
    for (int64_t k = 0; k < n * v; ++k) {
      ASSERT_NEAR(grads.back()[k], want[k], 1e-6 * scale) << "stop=" << stop << " element " << k;
    }
  }
  EXPECT_EQ(losses[0], losses[1]);
  for (int64_t k = 0; k < n * v; ++k) ASSERT_NEAR(grads[0][k], grads[1][k], 1e-6 * scale) << k;
  // Without the mark the backward compares x with its max (max's vjp) and
  // adds that path's (cancelling) cotangent; with it only the one-hot
  // compare is left.
  EXPECT_EQ(CountOpcode(*steps[0], HloOpcode::kCompare), 2) << steps[0]->ToString();
  EXPECT_EQ(CountOpcode(*steps[1], HloOpcode::kCompare), 1) << steps[1]->ToString();
  EXPECT_LT(steps[1]->entry_computation()->instruction_count(),
            steps[0]->entry_computation()->instruction_count());
}

// In a scan body: carry' = t (1 + stop(t)), t = tanh(x W_i), for 4 steps,
// loss sum(carry * c). The backward (both remat modes: the saving loop and
// the recomputing one clone the body) takes the gradient through the first
// factor only, d carry' / dt = 1 + t (without the mark 1 + 2t); float64
// references by hand.
TEST(StopGradientTest, ScanBodiesHonourTheMark) {
  constexpr int64_t kSteps = 4;
  auto module = ParseHloModule(R"(HloModule m
add {
  ax = f32[] parameter(0)
  ay = f32[] parameter(1)
  ROOT as = f32[] add(ax, ay)
}
cond {
  cs = (s32[], f32[2,3], f32[4,3,3]) parameter(0)
  ci = s32[] get-tuple-element(cs), index=0
  cn = s32[] constant(4)
  ROOT lt = pred[] compare(ci, cn), direction=LT
}
body {
  s = (s32[], f32[2,3], f32[4,3,3]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  x = f32[2,3] get-tuple-element(s), index=1
  ws = f32[4,3,3] get-tuple-element(s), index=2
  z = s32[] constant(0)
  w1 = f32[1,3,3] dynamic-slice(ws, i, z, z), dynamic_slice_sizes={1,3,3}
  w = f32[3,3] reshape(w1)
  h = f32[2,3] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  t = f32[2,3] tanh(h)
  ts = f32[2,3] tanh(h), frontend_attributes={weft_stop_gradient="true"}
  c1 = f32[] constant(1)
  ones = f32[2,3] broadcast(c1), dimensions={}
  tp = f32[2,3] add(ts, ones)
  u = f32[2,3] multiply(t, tp)
  one = s32[] constant(1)
  next = s32[] add(i, one)
  ROOT o = (s32[], f32[2,3], f32[4,3,3]) tuple(next, u, ws)
}
ENTRY e {
  x0 = f32[2,3] parameter(0)
  wst = f32[4,3,3] parameter(1)
  c = f32[2,3] parameter(2)
  zero = s32[] constant(0)
  init = (s32[], f32[2,3], f32[4,3,3]) tuple(zero, x0, wst)
  loop = (s32[], f32[2,3], f32[4,3,3]) while(init), condition=cond, body=body, backend_config={"scan": {"length": 4, "carry": 1, "xs": 1, "consts": 0, "ys": 0}}
  xl = f32[2,3] get-tuple-element(loop), index=1
  m = f32[2,3] multiply(xl, c)
  z0 = f32[] constant(0)
  ROOT loss = f32[] reduce(m, z0), dimensions={0,1}, to_apply=add
})");
  ASSERT_TRUE(IsGradientStopped(*module->GetComputation("body")->GetInstruction("ts")));
  std::mt19937 rng(31);
  std::vector<HostTensor> in;
  for (int i = 0; i < 3; ++i) {
    in.push_back(
        RandomTensor(module->entry_computation()->parameter_instruction(i)->shape(), rng, 0.6));
  }
  // float64 forward, keeping each step's input and tanh.
  const std::vector<double> x0 = in[0].ToDoubles(), ws = in[1].ToDoubles(), c = in[2].ToDoubles();
  std::vector<std::vector<double>> xs = {x0}, ts;
  for (int64_t l = 0; l < kSteps; ++l) {
    std::vector<double> t(6), next(6);
    for (int r = 0; r < 2; ++r) {
      for (int j = 0; j < 3; ++j) {
        double h = 0;
        for (int k = 0; k < 3; ++k) h += xs[l][r * 3 + k] * ws[l * 9 + k * 3 + j];
        t[r * 3 + j] = std::tanh(h);
        next[r * 3 + j] = t[r * 3 + j] * (1 + t[r * 3 + j]);
      }
    }
    ts.push_back(t);
    xs.push_back(next);
  }
  // Backward: d carry_{l+1} -> dh = d (1 + k t) (1 - t^2), k = 1 with the
  // mark, 2 without.
  auto reference = [&](double k) {
    std::vector<double> dx = c, dws(ws.size());
    for (int64_t l = kSteps - 1; l >= 0; --l) {
      std::vector<double> dh(6), prev(6, 0.0);
      for (int e = 0; e < 6; ++e) {
        dh[e] = dx[e] * (1 + k * ts[l][e]) * (1 - ts[l][e] * ts[l][e]);
      }
      for (int r = 0; r < 2; ++r) {
        for (int j = 0; j < 3; ++j) {
          for (int k = 0; k < 3; ++k) {
            prev[r * 3 + k] += dh[r * 3 + j] * ws[l * 9 + k * 3 + j];
            dws[l * 9 + k * 3 + j] += xs[l][r * 3 + k] * dh[r * 3 + j];
          }
        }
      }
      dx = prev;
    }
    dx.insert(dx.end(), dws.begin(), dws.end());
    return dx;
  };
  double apart = 0;  // the two references differ: the test tells them apart
  for (size_t e = 0; e < x0.size(); ++e) {
    apart = std::max(apart, std::abs(reference(1.0)[e] - reference(2.0)[e]));
  }
  EXPECT_GT(apart, 0.05);
  for (bool stop : {true, false}) {
    if (!stop) {
      module->GetComputation("body")->GetInstruction("ts")->mutable_attrs().passthrough.clear();
    }
    const std::vector<double> want = reference(stop ? 1.0 : 2.0);
    for (Remat remat : {Remat::kNone, Remat::kFull}) {
      GradOptions options;
      options.wrt = {0, 1};
      options.remat.kind = remat;
      auto step = BuildTrainingStep(*module, options);
      Executor exec(*step);
      const auto out = exec.Run(in);
      std::vector<double> got = out[1].ToDoubles();
      const std::vector<double> gw = out[2].ToDoubles();
      got.insert(got.end(), gw.begin(), gw.end());
      ASSERT_EQ(got.size(), want.size());
      for (size_t k = 0; k < got.size(); ++k) {
        EXPECT_NEAR(got[k], want[k], 1e-5 * (1 + std::abs(want[k])))
            << "stop " << stop << " remat " << static_cast<int>(remat) << " element " << k;
      }
    }
  }
}

}  // namespace
}  // namespace weft
