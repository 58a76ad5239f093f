// Scan: its lowering, its backward (remat none and full give the same
// gradients, both match finite differences) and the shard_as ties that keep
// a stacked weight's gradient sharded like the weight.
#include "weft/models/scan.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "weft/autodiff/grad.h"
#include "weft/hlo/builder.h"
#include "weft/runtime/executor.h"
#include "weft/sharding/mesh.h"
#include "weft/spmd/sharding_propagation.h"

namespace weft {
namespace {

using runtime::Executor;
using runtime::HostTensor;
constexpr PrimitiveType kF32 = PrimitiveType::kF32;
constexpr int64_t kL = 3, kB = 4, kD = 8;

// x_{i+1} = tanh(x_i . W[i] + b[i]); ys[i] = sum over features of x_{i+1};
// loss = sum(x_L * c) + sum(ys * e).
std::unique_ptr<HloModule> ScanModel(const Mesh* mesh = nullptr) {
  auto m = std::make_unique<HloModule>("scan_model");
  HloComputation* add = m->AddComputation(MakeScalarReduction("add", HloOpcode::kAdd, kF32));
  HloComputationBuilder b("main");
  HloInstruction* x = b.Parameter(0, Shape(kF32, {kB, kD}), "x");
  HloInstruction* w = b.Parameter(1, Shape(kF32, {kL, kD, kD}), "w");
  HloInstruction* bias = b.Parameter(2, Shape(kF32, {kL, kD}), "bias");
  HloInstruction* c = b.Parameter(3, Shape(kF32, {kB, kD}), "c");
  HloInstruction* e = b.Parameter(4, Shape(kF32, {kL, kB}), "e");
  if (mesh) {
    m->set_num_partitions(mesh->num_devices());
    w->set_sharding(ToHloSharding(*mesh, PartitionSpec({AxisSpec(), "fsdp", "tensor"}), 3));
    x->set_sharding(ToHloSharding(*mesh, PartitionSpec({"fsdp"}), 2));
  }
  ScanBody body = [&](HloComputationBuilder& lb, const ScanStep& s) {
    DotDimensionNumbers d;
    d.lhs_contracting_dims = {1};
    d.rhs_contracting_dims = {0};
    HloInstruction* h = lb.Dot(s.carry[0], s.xs[0], d);
    h = lb.Add(h, lb.Broadcast(s.xs[1], {kB, kD}, {1}));
    HloInstruction* next = lb.Unary(HloOpcode::kTanh, h);
    HloInstruction* y = lb.Reduce(next, lb.ConstantScalar(kF32, 0), {1}, add);
    return ScanStepResult{{next}, {y}};
  };
  ScanOutputs out = Scan(*m, b, "layers", body, {x}, {w, bias});
  HloInstruction* zero = b.ConstantScalar(kF32, 0);
  HloInstruction* l1 = b.Reduce(b.Multiply(out.carry[0], c), zero, {0, 1}, add);
  HloInstruction* l2 = b.Reduce(b.Multiply(out.ys[0], e), zero, {0, 1}, add);
  b.Add(l1, l2);
  m->AddEntryComputation(b.Build());
  return m;
}

std::vector<HostTensor> Inputs(const HloModule& m, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(0.3, 0.9);
  std::bernoulli_distribution sign(0.5);
  std::vector<HostTensor> in;
  for (const HloInstruction* p : m.entry_computation()->parameter_instructions()) {
    std::vector<double> v(p->shape().ElementsCount());
    for (double& x : v) x = (sign(rng) ? 1 : -1) * u(rng);
    in.push_back(HostTensor::FromDoubles(p->shape(), v));
  }
  return in;
}

// A float64 reference of the model's loss.
double ReferenceLoss(const std::vector<std::vector<double>>& p) {
  std::vector<double> x = p[0];
  double loss = 0;
  for (int64_t l = 0; l < kL; ++l) {
    std::vector<double> next(kB * kD);
    for (int64_t i = 0; i < kB; ++i) {
      double row = 0;
      for (int64_t j = 0; j < kD; ++j) {
        double h = p[2][l * kD + j];
        for (int64_t k = 0; k < kD; ++k) h += x[i * kD + k] * p[1][(l * kD + k) * kD + j];
        next[i * kD + j] = std::tanh(h);
        row += next[i * kD + j];
      }
      loss += row * p[4][l * kB + i];
    }
    x = next;
  }
  for (int64_t i = 0; i < kB * kD; ++i) loss += x[i] * p[3][i];
  return loss;
}

TEST(ScanTest, ForwardMatchesReference) {
  auto m = ScanModel();
  auto in = Inputs(*m, 1);
  std::vector<std::vector<double>> p;
  for (const auto& t : in) p.push_back(t.ToDoubles());
  Executor exec(*m);
  EXPECT_NEAR(exec.Run(in)[0].GetDouble(0), ReferenceLoss(p), 1e-4);
}

std::vector<std::vector<double>> Grads(const HloModule& m, const std::vector<HostTensor>& in,
                                       Remat remat) {
  GradOptions o;
  o.wrt = {0, 1, 2};
  o.remat.kind = remat;
  auto step = BuildTrainingStep(m, o);
  Executor exec(*step);
  std::vector<std::vector<double>> g;
  for (const auto& t : exec.Run(in)) g.push_back(t.ToDoubles());
  return g;
}

TEST(ScanTest, BackwardMatchesFloat64ReferenceWithAndWithoutRemat) {
  auto m = ScanModel();
  auto in = Inputs(*m, 2);
  std::vector<std::vector<double>> p;
  for (const auto& t : in) p.push_back(t.ToDoubles());
  const auto none = Grads(*m, in, Remat::kNone);
  const auto full = Grads(*m, in, Remat::kFull);
  double max_err = 0;
  for (int k = 0; k < 3; ++k) {
    ASSERT_EQ(none[k + 1].size(), p[k].size());
    for (size_t i = 0; i < p[k].size(); ++i) {
      // Central difference of the float64 reference.
      const double h = 1e-5;
      auto q = p;
      q[k][i] += h;
      const double up = ReferenceLoss(q);
      q[k][i] -= 2 * h;
      const double numeric = (up - ReferenceLoss(q)) / (2 * h);
      max_err = std::max(max_err, std::abs(none[k + 1][i] - numeric));
      EXPECT_NEAR(none[k + 1][i], numeric, 2e-4) << "input " << k << " element " << i;
      // Recomputation runs the same ops on the same values.
      EXPECT_NEAR(full[k + 1][i], none[k + 1][i], 1e-6) << "input " << k << " element " << i;
    }
  }
  std::printf("scan gradient max |f32 analytic - f64 central difference| = %.2e\n", max_err);
}

TEST(ScanTest, RematFullSavesOnlyTheCarry) {
  auto m = ScanModel();
  GradOptions none, full;
  none.remat.kind = Remat::kNone;
  full.remat.kind = Remat::kFull;
  auto loop_state = [&](const GradOptions& o) {
    auto step = BuildTrainingStep(*m, o);
    for (const HloInstruction* i : step->entry_computation()->instructions()) {
      if (i->opcode() == HloOpcode::kWhile && i->name() == "while")
        return i->shape().tuple_shapes().size();
    }
    return size_t{0};
  };
  // Scan state: counter, carry, 2 xs, 1 ys = 5; full adds the stacked carry.
  EXPECT_EQ(loop_state(full), 6u);
  EXPECT_GT(loop_state(none), 6u);
}

// The stacked weight-gradient accumulator of the backward loop and the
// gradient it yields, found by structure: [L, D, D] values in the backward loop.
std::vector<const HloInstruction*> WeightGradients(const HloModule& step) {
  std::vector<const HloInstruction*> out;
  const HloInstruction* root = step.entry_computation()->root_instruction();
  out.push_back(root->operand(2));  // d w (wrt = {0, 1, 2}: x, w, bias)
  for (const HloComputation* c : step.computations()) {
    if (c->name().find(".backward") == std::string::npos) continue;
    for (const HloInstruction* i : c->instructions()) {
      if (i->opcode() == HloOpcode::kDynamicUpdateSlice &&
          i->shape().dimensions() == std::vector<int64_t>{kL, kD, kD}) {
        out.push_back(i);
      }
    }
  }
  return out;
}

TEST(ScanTest, ShardAsGivesWeightGradientsTheWeightSharding) {
  const Mesh mesh({"fsdp", "tensor"}, {2, 2});
  const HloSharding w_sharding =
      ToHloSharding(mesh, PartitionSpec({AxisSpec(), "fsdp", "tensor"}), 3);
  for (bool shard_as : {true, false}) {
    auto m = ScanModel(&mesh);
    GradOptions o;
    o.wrt = {0, 1, 2};
    o.shard_as = shard_as;
    auto step = BuildTrainingStep(*m, o);
    PropagateShardings(*step);
    const auto grads = WeightGradients(*step);
    ASSERT_EQ(grads.size(), 2u) << step->ToString();
    for (const HloInstruction* g : grads) {
      ASSERT_TRUE(g->has_sharding()) << g->name();
      const HloSharding s = g->sharding()->WithShardGroup(std::nullopt);
      if (shard_as) {
        EXPECT_EQ(s, w_sharding) << g->name() << ": " << s.ToString();
      } else {
        // The layer gradient x^T dy contracts the fsdp-split batch away: dW
        // is not split over fsdp on its input dim like the weight.
        EXPECT_NE(s, w_sharding) << g->name() << ": " << s.ToString();
        std::printf("without shard_as %s: %s (weight %s)\n", g->name().c_str(),
                    s.ToString().c_str(), w_sharding.ToString().c_str());
      }
    }
  }
}

// Scan is called by weft's own model builders: a misuse is weft's bug.
TEST(ScanTest, MismatchedStackedInputsAreAnInternalError) {
  HloModule m("bad");
  HloComputationBuilder b("main");
  HloInstruction* x = b.Parameter(0, Shape(kF32, {2}), "x");
  HloInstruction* a = b.Parameter(1, Shape(kF32, {3, 2}), "a");
  HloInstruction* c = b.Parameter(2, Shape(kF32, {4, 2}), "c");
  ScanBody body = [](HloComputationBuilder&, const ScanStep& s) {
    return ScanStepResult{{s.carry[0]}, {}};
  };
  try {
    Scan(m, b, "bad", body, {x}, {a, c});
    FAIL();
  } catch (const InternalError& e) {
    EXPECT_NE(std::string(e.what()).find("stack every input over the same steps"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace weft
