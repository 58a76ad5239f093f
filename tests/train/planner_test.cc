// `weft plan` on the case that must come out right — Llama 3.1 405B, seq 8192,
// global batch 64, on v6e-256 (fsdp=64 x tensor=4) — and on bad input.
#include "weft/train/planner.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "../analysis/tiny_step.h"
#include "weft/base/algorithm.h"
#include "weft/base/error.h"
#include "weft/train/plan_report.h"

namespace weft {
namespace {

RunConfig Llama405b() {
  return LoadRunConfig(analysis::testing::kSource / "configs/llama3.1-405b.toml");
}

// Llama 3.1 8B's shapes with 2 layers (the per-layer work is what the mesh
// splits), sharded by the 405B config's rules.
RunConfig Llama8bShapes() {
  RunConfig config = Llama405b();
  config.model.dim = 4096;
  config.model.n_layers = 2;
  config.model.n_heads = 32;
  config.model.n_kv_heads = 8;
  config.model.ffn_dim = 14336;
  return config;
}

double MatmulParameters(const LlamaConfig& m) {
  const double q = m.n_heads * m.head_dim(), kv = m.n_kv_heads * m.head_dim();
  return m.n_layers * (m.dim * q + 2 * m.dim * kv + q * m.dim + 3.0 * m.dim * m.ffn_dim) +
         static_cast<double>(m.dim) * m.vocab_size;
}

PlanOptions V6e256(const std::string& remat, bool shard_as = true) {
  PlanOptions o;
  o.chip = "v6e";
  o.mesh = ParseMeshFlag("fsdp=64,tensor=4");
  o.batch_size = 64;
  o.seq_len = 8192;
  o.remat = remat;
  o.shard_as = shard_as;
  return o;
}

std::string ErrorOf(const RunConfig& config, const PlanOptions& o) {
  try {
    PlanTrainingStep(config, o);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(PlannerTest, StaticMemoryIsSixteenBytesPerParameterOver256Chips) {
  const RunConfig config = Llama405b();
  const double expected = static_cast<double>(config.model.NumParameters()) * 16 / 256;
  EXPECT_NEAR(expected / 1e9, 25.4, 0.1);  // 405.85e9 parameters x 16 bytes / 256 chips
  for (const char* remat : {"full", "offload"}) {
    const StepPlan p = PlanTrainingStep(config, V6e256(remat));
    EXPECT_EQ(p.num_devices, 256);
    EXPECT_EQ(p.precision, Precision::kBf16);
    // f32 master weights, f32 gradients, AdamW's m and v: 4 + 4 + 8 bytes.
    EXPECT_EQ(p.optimizer_bytes, 2 * p.parameter_bytes);
    EXPECT_EQ(p.gradient_bytes, p.parameter_bytes);
    std::printf("remat %s: static %.3f GB, expected %.3f GB (%.2f%%)\n", remat,
                p.static_bytes() / 1e9, expected / 1e9,
                100 * (p.static_bytes() - expected) / expected);
    EXPECT_NEAR(p.static_bytes() / expected, 1.0, 0.03);
  }
}

TEST(PlannerTest, WithShardAsNoStackedLayerBufferIsLeftWholeAlongFsdp) {
  const StepPlan p = PlanTrainingStep(Llama405b(), V6e256("full"));
  EXPECT_EQ(p.stacked_axis, "fsdp");
  EXPECT_TRUE(p.unsplit_stacked.empty())
      << p.unsplit_stacked.size() << " buffers, e.g. " << p.unsplit_stacked[0].instruction;
  int64_t stacked_seen = 0;
  for (const PeakBuffer& b : p.top_buffers) {
    if (!b.global_known || b.global_shape.rank() < 3 || b.global_shape.dimensions(0) != 126) {
      continue;
    }
    ++stacked_seen;
    EXPECT_TRUE(Contains(b.split_axes, "fsdp")) << b.buffer.instruction;
  }
  EXPECT_GT(stacked_seen, 0);
}

TEST(PlannerTest, WithoutShardAsTheStackedGradientIsAmongTheLargestBuffers) {
  const StepPlan on = PlanTrainingStep(Llama405b(), V6e256("full", true));
  const StepPlan off = PlanTrainingStep(Llama405b(), V6e256("full", false));
  const PeakBuffer* gradient = nullptr;
  for (const PeakBuffer& b : off.top_buffers) {
    if (b.buffer.category == analysis::BufferCategory::kGradients && b.global_known &&
        b.global_shape.dimensions(0) == 126 && !Contains(b.split_axes, "fsdp")) {
      gradient = &b;
      break;
    }
  }
  ASSERT_NE(gradient, nullptr) << FormatPlanText(off);
  EXPECT_EQ(gradient->buffer.role.rfind("grad layers.", 0), 0u) << gradient->buffer.role;
  std::printf("no shard_as: %s (%s) %.2f GB; peak %.2f GB vs %.2f GB with shard_as\n",
              gradient->buffer.instruction.c_str(), gradient->buffer.role.c_str(),
              gradient->buffer.bytes / 1e9, off.peak_bytes() / 1e9, on.peak_bytes() / 1e9);
  EXPECT_GE(off.peak_bytes() - on.peak_bytes(), gradient->buffer.bytes);
  EXPECT_FALSE(off.unsplit_stacked.empty());
  // The static memory does not change: the gradients leave the step sharded.
  EXPECT_EQ(off.static_bytes(), on.static_bytes());
}

TEST(PlannerTest, OffloadKeepsTheSavedLayerInputsInHostMemory) {
  const StepPlan full = PlanTrainingStep(Llama405b(), V6e256("full"));
  const StepPlan off = PlanTrainingStep(Llama405b(), V6e256("offload"));
  const int saved = static_cast<int>(analysis::BufferCategory::kSaved);
  // [126 layers, 1 row, 8192 / 4, 16384] bf16 per chip: the saved layer
  // inputs are the residual stream, split along seq over tensor (sequence
  // parallelism).
  EXPECT_EQ(full.memory.saved_bytes, int64_t{126} * 8192 / 4 * 16384 * 2);
  EXPECT_GT(full.memory.peak_by_category[saved], 0);
  EXPECT_EQ(off.memory.host_peak_bytes, full.memory.saved_bytes);
  EXPECT_EQ(off.memory.peak_by_category[saved], 0);
  EXPECT_LT(off.peak_bytes(), full.peak_bytes());
  EXPECT_GE(off.peak_bytes(), full.peak_bytes() - full.memory.saved_bytes);
  EXPECT_EQ(off.host_transfer_bytes, 2 * off.memory.host_peak_bytes);
  EXPECT_GT(off.time.host_s, 0);
  EXPECT_EQ(full.time.host_s, 0);
  for (const StepPlan* p : {&full, &off}) {
    std::printf("remat %s: peak %.2f GB of %.2f GB: %s by %.2f GB; step %.2f s, MFU %.1f%%\n",
                p->remat.c_str(), p->peak_bytes() / 1e9, p->hbm_bytes() / 1e9,
                p->fits() ? "fits" : "does not fit", std::abs(p->margin_bytes()) / 1e9,
                p->time.step_s, 100 * p->time.mfu);
    EXPECT_EQ(p->fits(), static_cast<double>(p->peak_bytes()) <= p->hbm_bytes());
    EXPECT_DOUBLE_EQ(p->margin_bytes(), p->hbm_bytes() - static_cast<double>(p->peak_bytes()));
    int64_t sum = p->optimizer_bytes;
    for (int64_t b : p->memory.peak_by_category) sum += b;
    EXPECT_EQ(sum, p->peak_bytes());
    EXPECT_GT(p->time.mfu, 0);
    EXPECT_LE(p->time.mfu, 1);
  }
}

TEST(PlannerTest, SlicesSendCrossingCollectivesOverDcn) {
  const RunConfig config = Llama405b();
  PlanOptions o = V6e256("full");
  const StepPlan one = PlanTrainingStep(config, o);
  EXPECT_EQ(one.slices, 1);
  EXPECT_EQ(one.time.dcn_s, 0);
  o.slices = 2;
  const StepPlan two = PlanTrainingStep(config, o);
  EXPECT_EQ(two.slices, 2);
  EXPECT_GT(two.time.dcn_s, 0);
  // The hierarchical collectives' reordering copies add a little.
  EXPECT_NEAR(static_cast<double>(two.peak_bytes()) / one.peak_bytes(), 1.0, 0.02);
  // H100: 8 GPUs per NVLink domain, so 256 GPUs are 32 slices unless told.
  o.slices.reset();
  o.chip = "h100";
  const StepPlan h100 = PlanTrainingStep(config, o);
  EXPECT_EQ(h100.slices, 32);
  EXPECT_GT(h100.time.dcn_s, 0) << "fsdp groups span NVLink domains";
  // A major "dcn" axis spans the slices by default.
  o.chip = "v6e";
  o.mesh = ParseMeshFlag("dcn=2,fsdp=64,tensor=4");
  o.batch_size = 128;
  EXPECT_EQ(PlanTrainingStep(config, o).slices, 2);
}

// Sequence parallelism by default where the mesh has a tensor axis: the
// residual stream (and so the layer inputs remat saves) is split along seq
// over tensor, without more matmul work; [activations] residual set to the
// batch split alone turns it off.
TEST(PlannerTest, SequenceParallelismSplitsTheSavedResidualStreamOverTensor) {
  RunConfig config = Llama8bShapes();
  PlanOptions o;
  o.mesh = ParseMeshFlag("data=1,fsdp=16,tensor=4");
  o.batch_size = 64;
  o.seq_len = 2048;
  o.remat = "full";
  const StepPlan sp = PlanTrainingStep(config, o);
  // [layers, rows per fsdp group, seq / tensor, dim] bf16.
  EXPECT_EQ(sp.memory.saved_bytes, int64_t{2} * 4 * 2048 / 4 * 4096 * 2);
  config.activations.push_back({"residual", PartitionSpec{AxisSpec{"data", "fsdp"}}, "test"});
  const StepPlan batch_only = PlanTrainingStep(config, o);
  EXPECT_EQ(batch_only.memory.saved_bytes, 4 * sp.memory.saved_bytes);
  EXPECT_LT(sp.peak_bytes(), batch_only.peak_bytes());
  EXPECT_NEAR(sp.flops.dot / batch_only.flops.dot, 1.0, 1e-9);
}

// --remat takes presets and activation names: what they save sits between
// full and none, and recomputing less executes fewer FLOPs.
TEST(PlannerTest, RematPresetsSitBetweenFullAndNone) {
  const RunConfig config = Llama8bShapes();
  PlanOptions o;
  o.mesh = ParseMeshFlag("data=1,fsdp=8,tensor=1");
  o.batch_size = 8;
  o.seq_len = 2048;
  o.chip = "h100";
  std::vector<StepPlan> plans;
  for (const char* remat : {"full", "save_qkv_proj", "save_dot_except_mlp", "save_dots", "none"}) {
    o.remat = remat;
    plans.push_back(PlanTrainingStep(config, o));
    EXPECT_EQ(plans.back().remat, remat);
  }
  for (size_t i = 1; i < plans.size(); ++i) {
    SCOPED_TRACE(plans[i].remat);
    EXPECT_GT(plans[i].memory.saved_bytes, plans[i - 1].memory.saved_bytes);
    EXPECT_LE(plans[i].flops.dot, plans[i - 1].flops.dot);
  }
  EXPECT_LT(plans.back().flops.dot, plans.front().flops.dot);
  o.remat = "v_proj,k_proj,q_proj";
  EXPECT_EQ(PlanTrainingStep(config, o).remat, "save_qkv_proj");

  // Offloading a named activation: stacked as when saved, but counted in
  // host memory (and prefetched a layer at a time in the backward).
  o.remat = "q_proj,mlp_up";
  const StepPlan saved = PlanTrainingStep(config, o);
  o.remat = "q_proj,mlp_up=offload";
  const StepPlan offloaded = PlanTrainingStep(config, o);
  EXPECT_EQ(offloaded.remat, "q_proj,mlp_up=offload");
  // [layers, rows, seq, ffn] bf16: mlp_up's stack moves to the host.
  const int64_t mlp_up = int64_t{2} * 1 * 2048 * 14336 * 2;
  EXPECT_EQ(offloaded.memory.host_peak_bytes, mlp_up);
  EXPECT_EQ(offloaded.memory.saved_bytes, saved.memory.saved_bytes);
  // Never higher; here not lower either: the step's peak is at its end, the
  // head's f32 gradient [D, V] before its reduce-scatter, when the saved
  // stacks are freed.
  EXPECT_LE(offloaded.peak_bytes(), saved.peak_bytes());
  EXPECT_EQ(offloaded.flops.dot, saved.flops.dot);
  EXPECT_GT(offloaded.host_transfer_bytes, 0);
}

// --dcn: a mesh axis spans slices (JAX's hybrid mesh). Data across slices
// (HSDP over DCN) sends only the gradient shards' all-reduce over DCN; fsdp
// across slices sends the weights' all-gathers and gradients' reduce-scatters.
// A major axis spanning slices plans as --slices did.
TEST(PlannerTest, DcnAxesChooseWhatCrossesSlices) {
  const RunConfig config = Llama8bShapes();
  PlanOptions o;
  o.batch_size = 64;
  o.seq_len = 2048;
  o.remat = "full";
  o.mesh = ApplyDcnFlag(ParseMeshFlag("data=1,fsdp=16,tensor=4"), "data=2");
  const StepPlan data_over_dcn = PlanTrainingStep(config, o);
  EXPECT_EQ(data_over_dcn.slices, 2);
  EXPECT_EQ(data_over_dcn.num_devices, 128);
  const int64_t dcn_data =
      data_over_dcn.collectives.per_device[data_over_dcn.collective_device].dcn_bytes();
  EXPECT_GT(dcn_data, 0);
  // The gradient shards (f32 in the program, the policy's bf16 on the wire)
  // are all-reduced between two slices: about a shard's bytes each.
  EXPECT_LE(dcn_data, 1.1 * data_over_dcn.gradient_bytes) << dcn_data;

  o.mesh = ApplyDcnFlag(ParseMeshFlag("data=2,fsdp=8,tensor=4"), "fsdp=2");
  const StepPlan fsdp_over_dcn = PlanTrainingStep(config, o);
  EXPECT_EQ(fsdp_over_dcn.slices, 2);
  const int64_t dcn_fsdp =
      fsdp_over_dcn.collectives.per_device[fsdp_over_dcn.collective_device].dcn_bytes();
  EXPECT_GT(dcn_fsdp, 2 * dcn_data);
  // Memory: the same program but for fsdp over DCN's hierarchical gathers
  // and reduce-scatters (below), each through a transposed copy of its
  // operand or result. The largest is the embedding gradient's
  // reduce-scatter (f32 [vocab / tensor, dim]); its peak is data over DCN's
  // plus at most one such copy.
  const int64_t copy = config.model.dim * (config.model.vocab_size / 4) * 4;  // f32
  EXPECT_GE(fsdp_over_dcn.peak_bytes(), data_over_dcn.peak_bytes());
  EXPECT_LE(fsdp_over_dcn.peak_bytes(), data_over_dcn.peak_bytes() + copy)
      << fsdp_over_dcn.peak_bytes() << " vs " << data_over_dcn.peak_bytes();
  // Collectives across slices are hierarchical: what crosses is a group of
  // one device per slice (the fsdp groups' 8 members per slice stay inside).
  for (const analysis::CollectiveSite& site : fsdp_over_dcn.collectives.sites) {
    if (site.crosses_slices) {
      EXPECT_EQ(site.group_size, 2) << site.instruction;
    }
  }

  // fsdp major: the hybrid order is the row-major one, as with --slices.
  o.mesh = ApplyDcnFlag(ParseMeshFlag("fsdp=16,tensor=4"), "fsdp=2");
  const StepPlan hybrid = PlanTrainingStep(config, o);
  o.mesh = ParseMeshFlag("fsdp=32,tensor=4");
  o.slices = 2;
  const StepPlan sliced = PlanTrainingStep(config, o);
  EXPECT_EQ(hybrid.collectives.per_device[0].dcn_bytes(),
            sliced.collectives.per_device[0].dcn_bytes());
  EXPECT_EQ(hybrid.peak_bytes(), sliced.peak_bytes());
  // --slices must agree with the mesh's DCN axes.
  o.mesh = ApplyDcnFlag(ParseMeshFlag("fsdp=16,tensor=4"), "fsdp=2");
  o.slices = 4;
  EXPECT_NE(ErrorOf(config, o).find("--slices 4 disagrees"), std::string::npos)
      << ErrorOf(config, o);
}

TEST(PlannerTest, BadInputIsReportedBeforeAnyCompute) {
  const RunConfig config = Llama405b();
  PlanOptions o = V6e256("full");
  o.chip = "tpu9";
  std::string e = ErrorOf(config, o);
  EXPECT_NE(e.find("unknown chip 'tpu9'"), std::string::npos) << e;
  EXPECT_NE(e.find("chips.toml"), std::string::npos) << e;
  EXPECT_NE(e.find("v5e, v5p, v6e, h100, h200, local-cpu"), std::string::npos) << e;

  o = V6e256("full");
  o.batch_size = 63;
  e = ErrorOf(config, o);
  EXPECT_NE(e.find("--batch 63 is not divisible by the 64 devices"), std::string::npos) << e;

  o = V6e256("full");
  o.mesh = ParseMeshFlag("fsdp=64,tensor=3");
  e = ErrorOf(config, o);
  EXPECT_NE(e.find("is not divisible by 3"), std::string::npos) << e;

  o = V6e256("partial");
  e = ErrorOf(config, o);
  EXPECT_NE(e.find("--remat 'partial': 'partial' is neither a remat preset"), std::string::npos)
      << e;

  o = V6e256("full");
  o.slices = 3;
  e = ErrorOf(config, o);
  EXPECT_NE(e.find("--slices 3: the mesh's major axis (fsdp of size 64, from --mesh) must span"),
            std::string::npos)
      << e;

  o = V6e256("full");
  o.chips_file = "/nonexistent/chips.toml";
  e = ErrorOf(config, o);
  EXPECT_NE(e.find("cannot read the chips file /nonexistent/chips.toml"), std::string::npos) << e;
}

// n_layers = 1e9 was refused by a message about `while.1`, naming neither
// the config nor n_layers.
TEST(PlannerTest, AnAbsurdLayerCountNamesTheConfigKey) {
  RunConfig config = LoadRunConfig(analysis::testing::kSource / "configs/tiny.toml");
  config.model.n_layers = 1000000000;
  PlanOptions o;
  o.chip = "v6e";
  const std::string e = ErrorOf(config, o);
  EXPECT_NE(e.find("n_layers"), std::string::npos) << e;
  EXPECT_NE(e.find("tiny.toml"), std::string::npos) << e;
  EXPECT_EQ(e.find("while"), std::string::npos) << e;
}

// A flag the user gives is used or refused, never replaced by the config's
// value: --batch 0, --batch -4, --seq 0 and --slices 0 are errors naming the
// flag, its value and what is allowed.
TEST(PlannerTest, FlagsBelowOneAreErrorsNotDefaults) {
  const RunConfig config = Llama405b();
  PlanOptions o = V6e256("full");
  o.batch_size = 0;
  std::string e = ErrorOf(config, o);
  EXPECT_EQ(e.rfind("--batch 0: the global batch size must be a positive integer", 0), 0u) << e;
  EXPECT_NE(e.find("train.batch_size = 2048 from"), std::string::npos) << e;
  o.batch_size = -4;
  e = ErrorOf(config, o);
  EXPECT_EQ(e.rfind("--batch -4: ", 0), 0u) << e;
  o = V6e256("full");
  o.seq_len = 0;
  e = ErrorOf(config, o);
  EXPECT_EQ(e.rfind("--seq 0: the sequence length must be an integer in [1, 2147483647]", 0), 0u)
      << e;
  EXPECT_NE(e.find("model.seq_len = 8192"), std::string::npos) << e;
  o = V6e256("full");
  o.slices = 0;
  e = ErrorOf(config, o);
  EXPECT_EQ(e.rfind("--slices 0: the number of slices must be a positive integer", 0), 0u) << e;
  o.slices = 512;
  e = ErrorOf(config, o);
  EXPECT_EQ(e.rfind("--slices 512: more slices than the 256 devices of --mesh", 0), 0u) << e;
}

// Slices the planner derived are named by where they came from, not as a
// --slices the user never gave.
TEST(PlannerTest, AnErrorAboutDerivedSlicesNamesTheUsersFlags) {
  const RunConfig config = Llama405b();
  PlanOptions o = V6e256("full");
  // 2048 v6e chips are 8 slices of 256, which the major axis (tensor=4) cannot span.
  o.mesh = ParseMeshFlag("tensor=4,fsdp=512");
  o.batch_size = 512;
  const std::string e = ErrorOf(config, o);
  EXPECT_EQ(e.find("--slices 8"), std::string::npos) << e;
  EXPECT_EQ(e.rfind("8 slices (no --slices given: the 2048 devices of --mesh over the largest v6e "
                    "slice of 256 chips)",
                    0),
            0u)
      << e;
  EXPECT_NE(e.find("major axis (tensor of size 4, from --mesh)"), std::string::npos) << e;
}

// An impossible mesh is refused before anything is built, however many
// chips it has (a benchmark, `weft bench plan`, times it; this checks the kind).
TEST(PlannerTest, AnImpossibleLargeMeshIsAnError) {
  const RunConfig config = Llama405b();
  PlanOptions o = V6e256("full");
  // 65,536 chips: dim 16384 cannot be split 32768 ways.
  o.mesh = ParseMeshFlag("fsdp=32768,tensor=2");
  o.batch_size = 32768;
  std::string e = ErrorOf(config, o);
  EXPECT_NE(e.find("(size 16384) is split 32768 ways"), std::string::npos) << e;
  EXPECT_NE(e.find("16384 is not divisible by 32768"), std::string::npos) << e;
  EXPECT_NE(e.find("fsdp=32768,tensor=2"), std::string::npos) << e;
  o.mesh = ParseMeshFlag("fsdp=8192,tensor=8");
  o.batch_size = 4096;
  e = ErrorOf(config, o);
  EXPECT_NE(e.find("--batch 4096 is not divisible by the 8192 devices"), std::string::npos) << e;
  EXPECT_THROW(ParseMeshFlag("fsdp=65536,tensor=2"), Error);
}

// The planner analyses the program `weft train --no-shard-as` runs: whatever
// shardings propagation picks inside, the step computes the same loss and
// gradients as with shard_as.
TEST(PlannerTest, WithoutShardAsTheStepComputesTheSameGradients) {
  const StepProgram on = analysis::testing::TinyStep(Remat::kFull, true);
  const StepProgram off = analysis::testing::TinyStep(Remat::kFull, false);
  const std::vector<runtime::HostTensor> inputs =
      runtime::RandomInputs(on.compiled.input_shapes, 11);
  runtime::LocalCluster cluster(4);
  const auto a = runtime::RunSharded(on.compiled, inputs, cluster);
  const auto b = runtime::RunSharded(off.compiled, inputs, cluster);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_LE(runtime::MaxRelativeError(b[i], a[i]), 1e-4) << on.compiled.output_names[i];
  }
}

TEST(PlannerTest, ModelFlopsAreSixTimesMatmulParametersPerToken) {
  LlamaConfig m;
  m.vocab_size = 1000;
  m.dim = 64;
  m.n_layers = 2;
  m.n_heads = 4;
  m.n_kv_heads = 2;
  m.ffn_dim = 128;
  const double per_layer = 64 * 64 + 2 * 64 * 32 + 64 * 64 + 3 * 64 * 128;
  const double params = 2 * per_layer + 64 * 1000;
  const double attention = 2 * 2.0 * 3 * 4 * (16.0 * 17 / 2) * 2 * 16;  // L B H pairs 2Dh
  EXPECT_DOUBLE_EQ(ModelFlopsPerStep(m, 3, 16), 6 * params * 48 + 3 * attention);
}

// With remat none every forward matmul runs once and its backward twice: the
// executed dot FLOPs of the tiny step are the model's matmul FLOPs, up to
// what the partitioner computes redundantly.
TEST(PlannerTest, TinyStepExecutesAboutTheModelsMatmulFlops) {
  const StepProgram p = analysis::testing::TinyStep(Remat::kNone);
  const analysis::FlopCount f = analysis::CountFlops(*p.compiled.program);
  const RunConfig config = LoadRunConfig(analysis::testing::kSource / "configs/tiny.toml");
  const double model = ModelFlopsPerStep(config.model, 4, 64) / 4;
  const double hd = config.model.head_dim();
  const double attention =
      3 * config.model.n_layers * 2.0 * 4 * config.model.n_heads * (64.0 * 65 / 2) * 2 * hd / 4;
  const double matmul = model - attention;
  EXPECT_NEAR(f.dot / matmul, 1.0, 0.15) << f.dot << " vs " << matmul;
  EXPECT_NEAR((f.attention_forward + f.attention_backward) / attention, 3.5 / 3, 0.01)
      << "the backward kernel recomputes: 2.5x the forward, against 2x in model FLOPs";
}

// Every device does its share of the matmuls and no more, whatever splits
// the batch and the weights: executed dot FLOPs per device = 6 x matmul
// parameters x tokens / devices (remat none: nothing is recomputed). A
// row-parallel projection once ran replicated on every tensor rank (1.80x
// the model's FLOPs at tensor=8).
TEST(PlannerTest, ExecutedMatmulFlopsAreTheModelsShareOnEveryMesh) {
  const RunConfig config = Llama8bShapes();
  const int64_t batch = 64, seq = 2048;
  for (const char* mesh :
       {"data=1,fsdp=64,tensor=1", "data=1,fsdp=32,tensor=2", "data=1,fsdp=16,tensor=4",
        "data=1,fsdp=8,tensor=8", "data=2,fsdp=32,tensor=1", "data=2,fsdp=8,tensor=4",
        "data=4,fsdp=2,tensor=8"}) {
    for (const char* dcn : {"", "data=2", "fsdp=2"}) {
      SCOPED_TRACE(fmt::format("{} --dcn {}", mesh, dcn));
      PlanOptions o;
      o.mesh = ParseMeshFlag(mesh);
      if (*dcn) o.mesh = ApplyDcnFlag(*o.mesh, dcn);  // twice the devices, across 2 slices
      o.batch_size = *dcn ? 2 * batch : batch;
      o.seq_len = seq;
      o.remat = "none";
      const StepPlan p = PlanTrainingStep(config, o);
      const double model = 6 * MatmulParameters(config.model) * *o.batch_size * seq / p.num_devices;
      EXPECT_NEAR(p.flops.dot / model, 1.0, 0.01) << p.flops.dot << " vs " << model;
    }
  }
}

// The embedding's lookup and gradient use the device's own batch rows: no
// per-device array of the step holds the global batch's activations, on an
// FSDP table (vocabulary whole) or a vocabulary-parallel one. (The gradient
// once all-gathered every device's cotangent rows, [batch, seq, dim].)
TEST(PlannerTest, NoDeviceHoldsTheGlobalBatchsActivations) {
  struct Case {
    RunConfig config;
    const char* mesh;
    int64_t batch, seq;
  };
  const std::vector<Case> cases = {{Llama8bShapes(), "data=1,fsdp=64,tensor=1", 64, 512},
                                   {Llama8bShapes(), "data=2,fsdp=32,tensor=1", 64, 512},
                                   {Llama8bShapes(), "data=1,fsdp=16,tensor=4", 64, 512},
                                   {Llama405b(), "data=1,fsdp=64,tensor=4", 64, 8192}};
  for (const Case& c : cases) {
    SCOPED_TRACE(fmt::format("dim {} on {}", c.config.model.dim, c.mesh));
    RunConfig config = c.config;
    const int64_t batch = c.batch, seq = c.seq;
    config.mesh = ParseMeshFlag(c.mesh);
    StepProgramOptions o;
    o.batch_size = batch;
    o.seq_len = seq;
    o.remat = RematPolicy{};
    const StepProgram p = BuildStepProgram(config, o);
    // Rows of the whole batch may exist only as thin column slices (the
    // device's share of the hidden dim, moved there by an all-to-all): no
    // larger than the device's own rows [batch / (data x fsdp), seq, dim].
    const int64_t batch_split = p.num_devices / config.mesh.axis_sizes.back();
    const int64_t own_rows = batch / batch_split * seq * config.model.dim;
    for (const HloComputation* c : p.compiled.program->computations()) {
      for (const HloInstruction* i : c->instructions()) {
        const Shape& s = i->shape();
        if (!s.IsArray() || s.rank() < 3 || s.dimensions(0) != batch) continue;
        EXPECT_LE(s.ElementsCount(), own_rows)
            << i->name() << " " << s.ToString() << " in " << c->name();
      }
    }
  }
}

TEST(PlannerTest, GradientAccumulationRunsTheMicroBatchStepThatManyTimes) {
  const RunConfig config = Llama8bShapes();
  PlanOptions o = V6e256("full");
  o.batch_size = 128;
  o.grad_accum = 2;
  const StepPlan accumulated = PlanTrainingStep(config, o);
  o.batch_size = 64;
  o.grad_accum = 1;
  const StepPlan micro = PlanTrainingStep(config, o);
  EXPECT_EQ(accumulated.batch_size, 128);
  EXPECT_EQ(accumulated.micro_batch_size, 64);
  EXPECT_EQ(accumulated.grad_accum, 2);
  EXPECT_NEAR(accumulated.time.step_s, 2 * micro.time.step_s, 1e-9 * micro.time.step_s);
  EXPECT_NEAR(accumulated.time.mfu, micro.time.mfu, 1e-9);
  EXPECT_NEAR(accumulated.flops.dot, 2 * micro.flops.dot, 1e-6 * micro.flops.dot);
  // The same program, plus the float32 sums of the local gradients.
  EXPECT_EQ(accumulated.memory.peak_bytes, micro.memory.peak_bytes);
  EXPECT_EQ(micro.accumulator_bytes, 0);
  EXPECT_EQ(accumulated.accumulator_bytes, micro.parameter_bytes);  // f32, as the weights
  EXPECT_EQ(accumulated.peak_bytes(), micro.peak_bytes() + accumulated.accumulator_bytes);
  o.batch_size = 64;
  o.grad_accum = 3;
  EXPECT_NE(ErrorOf(config, o).find("--batch 64 is not divisible by the gradient accumulation "
                                    "steps 3"),
            std::string::npos)
      << ErrorOf(config, o);
  o.grad_accum = 0;
  EXPECT_NE(ErrorOf(config, o).find("--grad-accum 0"), std::string::npos);
}

}  // namespace
}  // namespace weft
