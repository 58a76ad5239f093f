// The Llama forward: its loss, its gradients (against central differences of
// the executor's forward, along random directions), remat, and the weight
// gradients' shardings after propagation on a fsdp=2 x tensor=2 mesh.
#include "weft/models/llama.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "weft/autodiff/grad.h"
#include "weft/autodiff/stop_gradient.h"
#include "weft/runtime/executor.h"
#include "weft/spmd/sharding_propagation.h"

namespace weft {
namespace {

using runtime::Executor;
using runtime::HostTensor;

constexpr int64_t kB = 2, kS = 16;

RunConfig MicroConfig(bool tie) {
  return ParseRunConfig(std::string(R"([model]
vocab_size = 32
dim = 16
n_layers = 2
n_heads = 2
n_kv_heads = 1
ffn_dim = 32
seq_len = 16
tie_embeddings = )") + (tie ? "true" : "false") +
                            R"(

[mesh]
fsdp = 2
tensor = 2

[sharding]
"tok_embeddings" = ["tensor", "fsdp"]
"layers.*.attention.wq" = ["fsdp", "tensor"]
"layers.*.attention.wk" = ["fsdp", "tensor"]
"layers.*.attention.wv" = ["fsdp", "tensor"]
"layers.*.attention.wo" = ["tensor", "fsdp"]
"layers.*.feed_forward.w1" = ["fsdp", "tensor"]
"layers.*.feed_forward.w3" = ["fsdp", "tensor"]
"layers.*.feed_forward.w2" = ["tensor", "fsdp"]
"*norm*" = []
"output" = ["fsdp", "tensor"]
)",
                        "micro.toml");
}

// Two rows of packed documents (each with positions from 0), some targets masked.
std::vector<HostTensor> Inputs(const LlamaForward& f, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> tok(0, 31);
  std::vector<int32_t> tokens(kB * kS), targets(kB * kS), seg(kB * kS), pos(kB * kS);
  std::vector<double> mask(kB * kS, 1.0);
  const int64_t doc_start[kB] = {7, 11};
  for (int64_t b = 0; b < kB; ++b) {
    for (int64_t s = 0; s < kS; ++s) {
      const int64_t i = b * kS + s;
      tokens[i] = tok(rng);
      targets[i] = tok(rng);
      seg[i] = s < doc_start[b] ? 0 : 1;
      pos[i] = static_cast<int32_t>(s < doc_start[b] ? s : s - doc_start[b]);
    }
    mask[b * kS + doc_start[b] - 1] = 0;  // no target across a document end
  }
  std::vector<HostTensor> in = {
      HostTensor::FromVector<int32_t>(PrimitiveType::kS32, {kB, kS}, tokens),
      HostTensor::FromVector<int32_t>(PrimitiveType::kS32, {kB, kS}, targets),
      HostTensor::FromDoubles(Shape(PrimitiveType::kF32, {kB, kS}), mask),
      HostTensor::FromVector<int32_t>(PrimitiveType::kS32, {kB, kS}, seg),
      HostTensor::FromVector<int32_t>(PrimitiveType::kS32, {kB, kS}, pos)};
  std::uniform_real_distribution<double> mag(0.1, 0.5);
  std::bernoulli_distribution sign(0.5);
  for (const LlamaWeight& w : f.weights) {
    std::vector<double> v(w.shape.ElementsCount());
    const bool norm = w.name.find("norm") != std::string::npos;
    for (double& x : v)
      x = norm ? 1.0 + (sign(rng) ? 1 : -1) * 0.5 * mag(rng) : (sign(rng) ? 1 : -1) * mag(rng);
    in.push_back(HostTensor::FromDoubles(w.shape, v));
  }
  return in;
}

double Loss(const HloModule& m, const std::vector<HostTensor>& in) {
  Executor exec(m);
  return exec.Run(in)[0].GetDouble(0);
}

LlamaForward Build(const RunConfig& config, bool sharded, Precision precision = Precision::kF32) {
  LlamaBuildOptions o;
  o.batch_size = kB;
  o.seq_len = kS;
  o.run = sharded ? &config : nullptr;
  o.precision = precision;
  return BuildLlamaForward(config.model, o);
}

TEST(LlamaTest, ParametersFollowTheDocumentedLayout) {
  const RunConfig config = MicroConfig(false);
  LlamaForward f = Build(config, false);
  std::vector<std::string> names;
  for (const LlamaWeight& w : f.weights) names.push_back(w.name);
  EXPECT_EQ(names, (std::vector<std::string>{
                       "tok_embeddings", "layers.attention_norm", "layers.attention.wq",
                       "layers.attention.wk", "layers.attention.wv", "layers.attention.wo",
                       "layers.ffn_norm", "layers.feed_forward.w1", "layers.feed_forward.w2",
                       "layers.feed_forward.w3", "norm", "output"}));
  EXPECT_EQ(f.weights[3].shape, Shape(PrimitiveType::kF32, {2, 16, 8}));  // GQA: 1 kv head of 8
  EXPECT_EQ(f.weights[0].parameter_number, LlamaForward::kNumDataInputs);
  int64_t count = 0;
  for (const LlamaWeight& w : f.weights) count += w.shape.ElementsCount();
  EXPECT_EQ(count, config.model.NumParameters());
}

TEST(LlamaTest, LossIsNearUniformAtSmallWeights) {
  const RunConfig config = MicroConfig(true);
  LlamaForward f = Build(config, false);
  auto in = Inputs(f, 1);
  const double loss = Loss(*f.module, in);
  EXPECT_TRUE(std::isfinite(loss));
  EXPECT_GT(loss, 1.0);
  EXPECT_LT(loss, 3 * std::log(32.0));
}

void CheckGradients(bool tie) {
  const RunConfig config = MicroConfig(tie);
  LlamaForward f = Build(config, false);
  auto in = Inputs(f, 2);
  GradOptions o;
  o.wrt = f.WeightParameters();
  auto step = BuildTrainingStep(*f.module, o);
  Executor exec(*step);
  const auto out = exec.Run(in);
  EXPECT_NEAR(out[0].GetDouble(0), Loss(*f.module, in), 1e-5);
  std::mt19937 rng(5);
  std::uniform_real_distribution<double> u(-1, 1);
  double worst = 0;
  for (size_t k = 0; k < f.weights.size(); ++k) {
    const int64_t p = f.weights[k].parameter_number;
    const std::vector<double> g = out[k + 1].ToDoubles();
    const std::vector<double> x = in[p].ToDoubles();
    std::vector<double> v(x.size());
    double dot = 0, norm = 0;
    for (size_t i = 0; i < v.size(); ++i) {
      v[i] = u(rng);
      dot += g[i] * v[i];
      norm += g[i] * g[i];
    }
    // Truncation error falls as h^2 (3.6e-2 at h = 1e-2, 7e-4 at 1e-3) while
    // f32 rounding of the loss stays ~1e-4 here.
    const double h = 1e-3;
    auto at = [&](double sgn) {
      std::vector<double> y(x.size());
      for (size_t i = 0; i < y.size(); ++i) y[i] = x[i] + sgn * h * v[i];
      auto shifted = in;
      shifted[p] = HostTensor::FromDoubles(in[p].shape(), y);
      return Loss(*f.module, shifted);
    };
    const double numeric = (at(1) - at(-1)) / (2 * h);
    const double rel = std::abs(dot - numeric) / std::max(std::abs(numeric), std::sqrt(norm));
    worst = std::max(worst, rel);
    EXPECT_LT(rel, 5e-3) << f.weights[k].name << ": analytic " << dot << " numeric " << numeric;
  }
  std::printf("llama (tie=%d) worst relative error of directional derivatives: %.2e\n", tie, worst);
}

TEST(LlamaTest, GradientsMatchFiniteDifferences) { CheckGradients(false); }
TEST(LlamaTest, TiedEmbeddingGradientsMatchFiniteDifferences) { CheckGradients(true); }

// The loss's logsumexp stops the gradient at the row max (its path
// cancels): the training step compares no logits with their max, only the
// targets' one-hot remains a [B, S, V] compare.
TEST(LlamaTest, TheLossStopsTheGradientAtTheRowMax) {
  const RunConfig config = MicroConfig(false);
  LlamaForward f = Build(config, false);
  const HloInstruction* max = nullptr;
  for (const HloInstruction* instr : f.module->entry_computation()->instructions()) {
    if (IsGradientStopped(*instr)) {
      EXPECT_EQ(max, nullptr) << "a second mark: " << instr->Describe();
      max = instr;
    }
  }
  ASSERT_NE(max, nullptr) << "no value of the loss is marked with StopGradient";
  EXPECT_EQ(max->opcode(), HloOpcode::kReduce);
  EXPECT_EQ(max->to_apply()->root_instruction()->opcode(), HloOpcode::kMaximum);
  EXPECT_EQ(max->shape(), Shape(PrimitiveType::kF32, {kB, kS}));
  GradOptions o;
  o.wrt = f.WeightParameters();
  auto step = BuildTrainingStep(*f.module, o);
  int64_t bsv_compares = 0;
  for (const HloInstruction* instr : step->entry_computation()->instructions()) {
    bsv_compares += instr->opcode() == HloOpcode::kCompare &&
                    instr->shape().dimensions() == std::vector<int64_t>{kB, kS, 32};
  }
  EXPECT_EQ(bsv_compares, 1) << step->ToString();
}

TEST(LlamaTest, RematFullGivesTheSameGradients) {
  const RunConfig config = MicroConfig(false);
  LlamaForward f = Build(config, false);
  auto in = Inputs(f, 3);
  auto grads = [&](Remat remat) {
    GradOptions o;
    o.wrt = f.WeightParameters();
    o.remat.kind = remat;
    auto step = BuildTrainingStep(*f.module, o);
    Executor exec(*step);
    return exec.Run(in);
  };
  const auto none = grads(Remat::kNone);
  const auto full = grads(Remat::kFull);
  ASSERT_EQ(none.size(), full.size());
  for (size_t k = 0; k < none.size(); ++k) {
    const auto a = none[k].ToDoubles(), b = full[k].ToDoubles();
    for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], 1e-5 * (1 + std::abs(a[i])));
  }
}

TEST(LlamaTest, WeightGradientsKeepTheWeightShardingOnlyWithShardAs) {
  const RunConfig config = MicroConfig(false);
  for (bool shard_as : {true, false}) {
    LlamaForward f = Build(config, true);
    GradOptions o;
    o.wrt = f.WeightParameters();
    o.shard_as = shard_as;
    auto step = BuildTrainingStep(*f.module, o);
    PropagateShardings(*step);
    const HloComputation* entry = step->entry_computation();
    const HloInstruction* root = entry->root_instruction();
    int64_t stacked = 0, same = 0;
    for (size_t k = 0; k < f.weights.size(); ++k) {
      const LlamaWeight& w = f.weights[k];
      if (w.name.rfind("layers.", 0) != 0 || w.name.find("norm") != std::string::npos) continue;
      ++stacked;
      const HloSharding want = entry->parameter_instruction(w.parameter_number)
                                   ->sharding()
                                   ->WithShardGroup(std::nullopt);
      const HloInstruction* g = root->operand(k + 1);
      ASSERT_TRUE(g->has_sharding()) << w.name;
      const HloSharding got = g->sharding()->WithShardGroup(std::nullopt);
      if (got == want) ++same;
      if (shard_as) {
        EXPECT_EQ(got, want) << w.name << ": " << got.ToString();
      }
      if (!shard_as && got != want) {
        std::printf("without shard_as d%s: %s (weight %s)\n", w.name.c_str(),
                    got.ToString().c_str(), want.ToString().c_str());
      }
    }
    EXPECT_EQ(stacked, 7);
    if (!shard_as) {
      EXPECT_LT(same, stacked) << "some weight gradient should lose its sharding";
    }
  }
}

// The bf16 policy (llama_config.h Precision) as types: f32 weights are the
// parameters, every dot reads bf16 operands and returns bf16 (the logits
// too, cast to f32 where the loss reads them), attention runs on bf16 q, k,
// v with f32 statistics, every reduce (norms, softmax, loss) reads f32; in
// the training step every weight gradient is f32, straight from its dot.
TEST(LlamaTest, Bf16PolicyTypesTheProgram) {
  const RunConfig config = MicroConfig(false);
  LlamaForward f = Build(config, true, Precision::kBf16);
  const PrimitiveType bf16 = PrimitiveType::kBF16, f32 = PrimitiveType::kF32;
  for (const LlamaWeight& w : f.weights) {
    EXPECT_EQ(f.module->entry_computation()
                  ->parameter_instruction(w.parameter_number)
                  ->shape()
                  .element_type(),
              f32)
        << w.name;
  }
  int64_t dots = 0, f32_dots = 0, attention = 0, reduces = 0;
  for (const HloComputation* c : f.module->computations()) {
    for (const HloInstruction* instr : c->instructions()) {
      if (instr->opcode() == HloOpcode::kDot) {
        ++dots;
        EXPECT_EQ(instr->operand(0)->shape().element_type(), bf16) << instr->ToString();
        EXPECT_EQ(instr->operand(1)->shape().element_type(), bf16) << instr->ToString();
        f32_dots += instr->shape().element_type() == f32;
      } else if (instr->opcode() == HloOpcode::kCustomCall) {
        ++attention;
        EXPECT_EQ(instr->operand(0)->shape().element_type(), bf16);
        EXPECT_EQ(instr->shape().tuple_shapes(0).element_type(), bf16);
        EXPECT_EQ(instr->shape().tuple_shapes(1).element_type(), f32);
      } else if (instr->opcode() == HloOpcode::kReduce) {
        ++reduces;
        EXPECT_EQ(instr->operand(0)->shape().element_type(), f32) << instr->ToString();
      }
    }
  }
  EXPECT_EQ(dots, 8);  // q k v o, gate up down, the head
  EXPECT_EQ(f32_dots, 0);
  EXPECT_EQ(attention, 1);
  EXPECT_GT(reduces, 0);

  GradOptions o;
  o.wrt = f.WeightParameters();
  auto step = BuildTrainingStep(*f.module, o);
  const HloInstruction* root = step->entry_computation()->root_instruction();
  for (int64_t k = 0; k < root->operand_count(); ++k) {
    EXPECT_EQ(root->operand(k)->shape().element_type(), f32) << k;
  }
  int64_t widened = 0, casts_of_dots = 0;
  for (const HloComputation* c : step->computations()) {
    for (const HloInstruction* instr : c->instructions()) {
      casts_of_dots +=
          instr->opcode() == HloOpcode::kConvert && instr->operand(0)->opcode() == HloOpcode::kDot;
      widened += instr->opcode() == HloOpcode::kDot &&
                 instr->operand(0)->shape().element_type() == bf16 &&
                 instr->shape().element_type() == f32;
    }
  }
  // The seven layer weights' and the head's; the one cast of a dot left is
  // the forward's logits'.
  EXPECT_EQ(widened, 8) << step->ToString();
  EXPECT_EQ(casts_of_dots, 1) << step->ToString();
}

// The bf16 step against the f32 one on the same inputs: bf16 keeps 8
// significant bits (relative rounding 2^-9 per stored value, some twenty
// roundings on each path through two layers and back), so the loss agrees
// to ~1e-2 relative and every weight gradient points the same way: relative
// L2 differences measured 0.7e-2 to 4.9e-2 on this near-random model (whose
// gradients are differences of nearly cancelling softmax terms), bounded
// here by 8e-2; a wrong cast or a dropped term moves a gradient by O(1).
TEST(LlamaTest, Bf16LossAndGradientsFollowF32) {
  for (bool tie : {false, true}) {
    const RunConfig config = MicroConfig(tie);
    LlamaForward f32 = Build(config, false, Precision::kF32);
    LlamaForward bf16 = Build(config, false, Precision::kBf16);
    const auto in = Inputs(f32, 4);
    auto run = [&](const LlamaForward& f) {
      GradOptions o;
      o.wrt = f.WeightParameters();
      auto step = BuildTrainingStep(*f.module, o);
      Executor exec(*step);
      return exec.Run(in);
    };
    const auto a = run(f32), b = run(bf16);
    const double la = a[0].GetDouble(0), lb = b[0].GetDouble(0);
    EXPECT_NEAR(lb, la, 1e-2 * std::abs(la)) << "tie " << tie;
    double worst = 0;
    for (size_t k = 1; k < a.size(); ++k) {
      const auto x = a[k].ToDoubles(), y = b[k].ToDoubles();
      double diff = 0, norm = 0;
      for (size_t i = 0; i < x.size(); ++i) {
        diff += (x[i] - y[i]) * (x[i] - y[i]);
        norm += x[i] * x[i];
      }
      const double rel = std::sqrt(diff / norm);
      worst = std::max(worst, rel);
      EXPECT_LT(rel, 8e-2) << f32.weights[k - 1].name << " tie " << tie;
      std::printf("  %s %.2e\n", f32.weights[k - 1].name.c_str(), rel);
    }
    std::printf("bf16 vs f32 (tie=%d): loss %.6f vs %.6f, worst gradient L2 difference %.2e\n", tie,
                lb, la, worst);
  }
}

}  // namespace
}  // namespace weft
