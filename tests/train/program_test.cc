// The compiled training step: leaves and their shardings, the checks made
// before any compute, and the --mesh flag.
#include "weft/train/program.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <string>

#include "weft/analysis/memory_plan.h"
#include "weft/base/error.h"
#include "weft/runtime/run_command.h"

namespace weft {
namespace {

const std::filesystem::path kSource = WEFT_SOURCE_DIR;

RunConfig Micro() { return LoadRunConfig(kSource / "tests/train/data/micro.toml"); }

std::string ErrorOf(const RunConfig& config, const StepProgramOptions& o = {}) {
  try {
    BuildStepProgram(config, o);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(ProgramTest, GradientsLeaveTheStepShardedLikeTheirWeights) {
  const StepProgram p = BuildStepProgram(Micro());
  EXPECT_EQ(p.num_devices, 4);
  EXPECT_EQ(p.batch_size, 4);
  EXPECT_EQ(p.seq_len, 64);
  const auto& c = p.compiled;
  const size_t nw = p.forward.weights.size();
  ASSERT_EQ(c.input_shapes.size(), StepProgram::kNumDataInputs + nw);
  ASSERT_EQ(c.output_shapes.size(), 1 + nw);
  EXPECT_EQ(c.output_shapes[0].rank(), 0);  // the loss
  EXPECT_TRUE(c.output_shardings[0].IsReplicated());
  int64_t split = 0;
  for (size_t k = 0; k < nw; ++k) {
    const size_t in = StepProgram::kNumDataInputs + k;
    EXPECT_EQ(c.output_shapes[1 + k], c.input_shapes[in]) << p.forward.weights[k].name;
    EXPECT_EQ(c.output_shardings[1 + k], c.input_shardings[in]) << p.forward.weights[k].name;
    EXPECT_EQ(c.local_output_shapes[1 + k], c.local_input_shapes[in]);
    if (c.local_input_shapes[in] != c.input_shapes[in]) ++split;
  }
  // Every matrix is split (2D), only the norms are replicated.
  EXPECT_EQ(split, static_cast<int64_t>(nw) - 3);
  // The batch rows are split over fsdp: 2 of 4 rows per device.
  EXPECT_EQ(c.local_input_shapes[0].dimensions(0), 2);
}

TEST(ProgramTest, NoMeshGivesOneDevice) {
  RunConfig c = Micro();
  c.mesh = {};
  c.sharding.clear();
  const StepProgram p = BuildStepProgram(c);
  EXPECT_EQ(p.num_devices, 1);
  EXPECT_EQ(p.compiled.local_input_shapes, p.compiled.input_shapes);
  c.sharding = Micro().sharding;
  EXPECT_NE(ErrorOf(c).find("[sharding] rules need a [mesh]"), std::string::npos) << ErrorOf(c);
}

TEST(ProgramTest, MismatchesAreReportedBeforeCompute) {
  const RunConfig c = Micro();
  StepProgramOptions o;
  o.expected_devices = 8;
  const std::string devices = ErrorOf(c, o);
  EXPECT_NE(devices.find("has 4 devices but 8 are available"), std::string::npos) << devices;
  EXPECT_NE(devices.find("micro.toml"), std::string::npos) << devices;

  o = {};
  o.batch_size = 6;  // fsdp = 2 divides it: fine
  EXPECT_EQ(ErrorOf(c, o), "(no error)");
  o.batch_size = 5;
  EXPECT_NE(ErrorOf(c, o).find("--batch 5 is not divisible by the 2 devices"), std::string::npos)
      << ErrorOf(c, o);
  RunConfig from_key = Micro();
  from_key.train.batch_size = 5;  // no flag: the config's key is named
  EXPECT_NE(ErrorOf(from_key).find("micro.toml: train.batch_size 5 is not divisible by the 2 "
                                   "devices of the batch axes (dcn x data x fsdp) of the mesh "
                                   "fsdp=2,tensor=2"),
            std::string::npos)
      << ErrorOf(from_key);

  RunConfig odd = Micro();
  odd.model.ffn_dim = 66;
  odd.mesh = ParseMeshFlag("fsdp=1,tensor=4");
  const std::string split = ErrorOf(odd);
  EXPECT_NE(split.find("layers.feed_forward.w1"), std::string::npos) << split;
  EXPECT_NE(split.find("66 is not divisible by 4"), std::string::npos) << split;
  EXPECT_NE(split.find("micro.toml:"), std::string::npos) << "names the rule's line: " << split;
}

// Gradient accumulation: the program takes the micro-batch, batch_size /
// grad_accum_steps rows, split over the batch axes like a whole batch; a
// count that does not divide the batch, or a micro-batch the batch axes do
// not divide, is refused naming the key, the flag and what to change.
TEST(ProgramTest, GradAccumStepsBuildTheMicroBatchsProgram) {
  RunConfig c = Micro();
  c.train.batch_size = 8;
  StepProgramOptions o;
  o.grad_accum_steps = 2;
  const StepProgram p = BuildStepProgram(c, o);
  EXPECT_EQ(p.batch_size, 4);
  EXPECT_EQ(p.compiled.input_shapes[0].dimensions(), (std::vector<int64_t>{4, 64}));
  EXPECT_EQ(p.compiled.local_input_shapes[0].dimensions(), (std::vector<int64_t>{2, 64}));

  o.grad_accum_steps = 0;
  EXPECT_NE(ErrorOf(c, o).find("gradient accumulation steps 0 (train.grad_accum_steps, weft "
                               "train --grad-accum) must be at least 1"),
            std::string::npos)
      << ErrorOf(c, o);
  o.grad_accum_steps = 3;
  EXPECT_NE(ErrorOf(c, o).find("micro.toml: train.batch_size 8 is not divisible by the gradient "
                               "accumulation steps 3"),
            std::string::npos)
      << ErrorOf(c, o);
  o.grad_accum_steps = 8;  // micro-batches of 1 row, fsdp = 2
  const std::string micro = ErrorOf(c, o);
  EXPECT_NE(micro.find("the micro-batch, train.batch_size 8 / 8 gradient accumulation steps "
                       "(train.grad_accum_steps, weft train --grad-accum) = 1, is not divisible "
                       "by the 2 devices of the batch axes"),
            std::string::npos)
      << micro;
  EXPECT_NE(micro.find("a batch size that is a multiple of 8 x 2 = 16"), std::string::npos)
      << micro;
  o.batch_size = 16;  // weft plan's --batch: named as the flag
  EXPECT_EQ(ErrorOf(c, o).find("micro-batch"), std::string::npos) << "16 / 8 = 2 rows divide";
  o.batch_size = 12;
  EXPECT_NE(ErrorOf(c, o).find("--batch 12 is not divisible by the gradient accumulation steps 8"),
            std::string::npos)
      << ErrorOf(c, o);
}

// A rule that no weight uses would be silently ignored: a typo in a name,
// a stacked layer named without its layer, one layer alone, or a rule every
// weight of which an earlier rule takes.
TEST(ProgramTest, ShardingRulesThatMatchNoWeightAreRefused) {
  auto with_rule = [](const std::string& pattern, size_t replace = 1) {
    RunConfig c = Micro();
    c.sharding[replace].pattern = pattern;
    return c;
  };
  // "layers.*.attention.wq" misspelled.
  std::string e = ErrorOf(with_rule("layers.*.atention.wq"));
  EXPECT_NE(e.find("sharding rule \"layers.*.atention.wq\""), std::string::npos) << e;
  EXPECT_NE(e.find("micro.toml"), std::string::npos) << e;
  EXPECT_NE(e.find("matches no weight"), std::string::npos) << e;
  EXPECT_NE(e.find("Did you mean \"layers.*.attention.wq\"?"), std::string::npos) << e;
  EXPECT_NE(e.find("Weights: tok_embeddings, layers.*.attention_norm"), std::string::npos) << e;
  // The stacked name as the checkpoint writes it.
  e = ErrorOf(with_rule("layers.attention.wq"));
  EXPECT_NE(e.find("Did you mean \"layers.*.attention.wq\"?"), std::string::npos) << e;
  // One layer: the stack has one layout.
  e = ErrorOf(with_rule("layers.1.attention.wq"));
  EXPECT_NE(e.find("share one layout"), std::string::npos) << e;
  // Shadowed: "*" first takes every weight.
  RunConfig shadowed = Micro();
  shadowed.sharding.insert(shadowed.sharding.begin(), shadowed.sharding.back());
  shadowed.sharding.front().pattern = "*";
  shadowed.sharding.front().spec = PartitionSpec{};
  e = ErrorOf(shadowed);
  EXPECT_NE(e.find("sharding rule \"tok_embeddings\""), std::string::npos) << e;
  EXPECT_NE(e.find("is never used"), std::string::npos) << e;
  EXPECT_NE(e.find("tok_embeddings by \"*\""), std::string::npos) << e;
  // Refused before the program is built: CheckStepProgram alone finds it.
  EXPECT_THROW(CheckStepProgram(with_rule("outptu")), Error);
  // A rule for "output" with tied embeddings is not a typo: the config is fine.
  RunConfig tied = Micro();
  tied.model.tie_embeddings = true;
  EXPECT_EQ(ErrorOf(tied), "(no error)");
}

// Bad sizes the caller gives are refused with the config named, before any
// build; the model is checked again when it was changed after loading.
TEST(ProgramTest, SizesAreCheckedBeforeAnythingIsBuilt) {
  const RunConfig c = Micro();
  StepProgramOptions o;
  o.batch_size = 0;
  EXPECT_NE(ErrorOf(c, o).find("the batch size 0 must be at least 1"), std::string::npos)
      << ErrorOf(c, o);
  o = {};
  o.seq_len = -1;
  EXPECT_NE(ErrorOf(c, o).find("the sequence length -1 must be in [1, "), std::string::npos)
      << ErrorOf(c, o);
  o = {};
  o.seq_len = int64_t{1} << 30;
  o.batch_size = int64_t{1} << 30;
  std::string e = ErrorOf(c, o);
  EXPECT_NE(e.find("the step is too large to size"), std::string::npos) << e;
  RunConfig big = Micro();
  big.model.dim = 1000000;
  e = ErrorOf(big);
  EXPECT_NE(e.find("micro.toml: the head dimension model.dim / model.n_heads = 1000000 / 4"),
            std::string::npos)
      << e;
  // A mesh past the device bound; a rule naming an axis the mesh lacks.
  RunConfig huge = Micro();
  huge.mesh.axis_sizes = {int64_t{1} << 15, 4};
  EXPECT_NE(ErrorOf(huge).find("has more than 65536 devices"), std::string::npos) << ErrorOf(huge);
  RunConfig renamed = Micro();
  renamed.mesh.axis_names = {"fsdp", "model"};  // built in code: flags refuse "model"
  e = ErrorOf(renamed);
  EXPECT_NE(e.find("names mesh axis 'tensor', which the mesh fsdp=2,model=2 does not have"),
            std::string::npos)
      << e;
}

TEST(ProgramTest, ParsesTheMeshFlag) {
  const MeshConfig m = ParseMeshFlag("dcn=2,fsdp=64,tensor=4");
  EXPECT_EQ(m.axis_names, (std::vector<std::string>{"dcn", "fsdp", "tensor"}));
  EXPECT_EQ(m.axis_sizes, (std::vector<int64_t>{2, 64, 4}));
  EXPECT_EQ(m.num_devices(), 512);
  EXPECT_EQ(ParseMeshFlag("data=256,fsdp=256").num_devices(), 1 << 16);
  for (const char* bad : {"", "fsdp", "fsdp=", "fsdp=0", "fsdp=x", "fsdp=2,fsdp=2", "=2",
                          "data=256,fsdp=257", "data=4294967296,fsdp=4294967296"}) {
    EXPECT_THROW(ParseMeshFlag(bad), Error) << bad;
  }
}

// Axes weft gives no role are refused by name (the config's [mesh] alike,
// llama_config_test): `weft train`, `plan`, `eval` and `bench train` read
// --mesh here.
TEST(ProgramTest, TheMeshFlagRefusesAxesWithoutARole) {
  for (const char* text : {"pipeline=2,fsdp=2,tensor=2", "context=4", "foo=2"}) {
    SCOPED_TRACE(text);
    const std::string axis(std::string_view(text).substr(0, std::string_view(text).find('=')));
    try {
      ParseMeshFlag(text);
      FAIL() << "expected an error";
    } catch (const Error& e) {
      EXPECT_EQ(
          std::string(e.what()).rfind(std::string("--mesh '") + text +
                                          "': weft gives a mesh axis named '" + axis + "' no role",
                                      0),
          0u)
          << e.what();
      EXPECT_NE(std::string(e.what()).find("dcn (data parallelism across slices)"),
                std::string::npos);
    }
  }
  EXPECT_EQ(ParseMeshFlag("dcn=2,data=2,fsdp=2,tensor=2").num_devices(), 16);
}

// Selective remat: each policy computes the same loss and gradients as
// saving everything (within float rounding: recomputation repeats the same
// operations), and saves more than full remat and less than none.
TEST(ProgramTest, RematPoliciesGiveTheSameGradientsAndSaveWhatTheyName) {
  RunConfig config = Micro();
  StepProgramOptions o;
  o.remat = RematPolicy{};
  // In f32, with weights at Llama's initial scale (std 0.02): what a policy
  // saves changes the program the partitioner sees, and where it splits a
  // dot differently the sums only run in another order; bf16 rounds such
  // partial results where they differ, and N(0, 1) weights saturate the
  // attention's softmax, both far beyond f32 rounding.
  o.precision = Precision::kF32;
  const StepProgram none = BuildStepProgram(config, o);
  std::vector<runtime::HostTensor> inputs = runtime::RandomInputs(none.compiled.input_shapes, 5);
  for (size_t i = StepProgram::kNumDataInputs; i < inputs.size(); ++i) {
    std::vector<double> w = inputs[i].ToDoubles();
    for (double& x : w) x *= 0.02;
    inputs[i] = runtime::HostTensor::FromDoubles(inputs[i].shape(), w);
  }
  runtime::LocalCluster cluster(none.num_devices);
  const std::vector<runtime::HostTensor> want = runtime::RunSharded(none.compiled, inputs, cluster);
  const auto saved = [](const StepProgram& p) {
    analysis::MemoryPlanOptions mo;
    mo.num_data_inputs = StepProgram::kNumDataInputs;
    for (const LlamaWeight& w : p.forward.weights) mo.weight_names.push_back(w.name);
    return analysis::PlanMemory(*p.compiled.program, mo).saved_bytes;
  };
  // Builds the step under a policy and checks its loss and gradients.
  const auto check = [&](const char* text) {
    SCOPED_TRACE(text);
    const RematPolicy policy = ParseRematPolicy(text, "test");
    o.remat = policy;
    StepProgram p = BuildStepProgram(config, o);
    const std::vector<runtime::HostTensor> got = runtime::RunSharded(p.compiled, inputs, cluster);
    EXPECT_EQ(got.size(), want.size());
    for (size_t i = 0; i < std::min(got.size(), want.size()); ++i) {
      EXPECT_LE(runtime::MaxRelativeError(got[i], want[i]), 1e-5) << p.compiled.output_names[i];
    }
    return p;
  };
  // Every preset (and tables with offloaded values) computes the same.
  for (const char* text : {"save_out_proj", "save_dot_except_mlp", "save_dot_except_mlpwi",
                           "offload", "mlp_up=offload,k_proj"}) {
    check(text);
  }
  // Saving more named activations saves more bytes.
  int64_t previous = 0;
  for (const char* text :
       {"full", "save_qkv_proj", "q_proj,attention,out_proj",
        "layer_input=offload,q_proj,attention,out_proj,mlp_gate=offload", "save_dots"}) {
    SCOPED_TRACE(text);
    const int64_t bytes = saved(check(text));
    EXPECT_GT(bytes, previous) << "each policy saves more than the one before";
    EXPECT_LT(bytes, saved(none));
    previous = bytes;
  }
  // A name the layer does not have is refused by the builder.
  o.remat = RematPolicy{Remat::kFull, {"qkv"}, {}};
  EXPECT_NE(ErrorOf(config, o).find("remat saves 'qkv', which no scan body"), std::string::npos)
      << ErrorOf(config, o);
}

TEST(ProgramTest, TheDcnFlagMakesAxesSpanSlices) {
  const MeshConfig m = ApplyDcnFlag(ParseMeshFlag("data=2,fsdp=64,tensor=4"), "fsdp=2");
  EXPECT_EQ(m.axis_sizes, (std::vector<int64_t>{2, 128, 4}));
  EXPECT_EQ(m.dcn_sizes, (std::vector<int64_t>{1, 2, 1}));
  EXPECT_EQ(m.num_slices(), 2);
  EXPECT_EQ(MeshText(m), "data=2,fsdp=128,tensor=4 (dcn fsdp=2)");
  // A second --dcn replaces the first: the per-slice sizes stay.
  const MeshConfig again = ApplyDcnFlag(m, "data=2");
  EXPECT_EQ(again.axis_sizes, (std::vector<int64_t>{4, 64, 4}));
  EXPECT_EQ(again.dcn_sizes, (std::vector<int64_t>{2, 1, 1}));
  for (const char* bad : {"", "model=2", "fsdp=0", "fsdp", "fsdp=2,fsdp=2", "data=65536"}) {
    EXPECT_THROW(ApplyDcnFlag(ParseMeshFlag("data=2,fsdp=64,tensor=4"), bad), Error) << bad;
  }
}

// The fused tiny step (StepProgramOptions::fuse, as weft train runs it)
// has kOutput fusions (a dot and its add chain), counted as FuseLoops
// reports them. On tiny's 2x2 mesh most dots are not fusible: a
// row-parallel dot's all-reduce stands between it and the residual add, and
// the up projection is also saved for the backward (a second user).
TEST(ProgramTest, FusedTinyStepHasOutputFusions) {
  const RunConfig tiny = LoadRunConfig(kSource / "configs/tiny.toml");
  // Output fusion takes f32 dots only (compiler/fusion.h).
  StepProgramOptions options;
  options.precision = Precision::kF32;
  options.fuse = true;
  const StepProgram p = BuildStepProgram(tiny, options);
  int64_t output = 0, dots_outside = 0;
  for (const HloComputation* c : p.compiled.program->computations()) {
    for (const HloInstruction* instr : c->instructions()) {
      output += instr->opcode() == HloOpcode::kFusion &&
                instr->attrs().fusion_kind == FusionKind::kOutput;
    }
  }
  for (const HloInstruction* instr : p.compiled.program->entry_computation()->instructions()) {
    dots_outside += instr->opcode() == HloOpcode::kDot;
  }
  EXPECT_EQ(output, p.compiled.fusion.output_fusions);
  EXPECT_GT(output, 0);
  std::printf(
      "tiny step (%lld devices): %lld fusions, %lld kOutput, %lld kInput; %lld dots "
      "left in the entry\n",
      static_cast<long long>(p.num_devices), static_cast<long long>(p.compiled.fusion.fusions),
      static_cast<long long>(output), static_cast<long long>(p.compiled.fusion.input_fusions),
      static_cast<long long>(dots_outside));
}

}  // namespace
}  // namespace weft
