// The training loop: sharded runs (2D, FSDP, HSDP, a 2-slice mesh) follow the
// unsharded run's losses, the memorization config reaches ~0 loss sharded,
// a resumed run repeats the uninterrupted one bit for bit, and bad input
// stops before any compute without touching the output directory; loop
// fusion leaves configs/tiny.toml's first 20 losses unchanged; gradient
// accumulation gives the whole batch's losses and weights; fine-tuning from
// a Hugging Face export of a run starts from that run's weights exactly.
#include "weft/train/trainer.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <sstream>

#include "error_of.h"
#include "weft/base/atomic_file.h"
#include "weft/base/cpu.h"
#include "weft/base/error.h"
#include "weft/kernels/simd.h"
#include "weft/runtime/comm_threads.h"
#include "weft/runtime/executor.h"
#include "weft/runtime/run_command.h"
#include "weft/train/checkpoint.h"
#include "weft/train/dataset.h"
#include "weft/train/eval.h"
#include "weft/train/hf_checkpoint.h"
#include "weft/train/program.h"
#include "weft/train/run_dir.h"

namespace weft {
namespace {

namespace fs = std::filesystem;

const fs::path kSource = WEFT_SOURCE_DIR;

fs::path TempDir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("weft_trainer_test_" + name);
  fs::remove_all(dir);
  return dir;
}

RunConfig Micro() { return LoadRunConfig(kSource / "tests/train/data/micro.toml"); }

std::vector<double> Losses(const TrainResult& r) {
  std::vector<double> out;
  for (const StepMetrics& m : r.steps) out.push_back(m.loss);
  return out;
}

TrainResult Quiet(const RunConfig& config, TrainOptions o, const std::string& name) {
  static std::ostringstream sink;
  o.progress = false;
  o.log = &sink;
  if (o.out.empty()) o.out = TempDir(name);
  return Train(config, o);
}

struct ShardedCase {
  std::string name;
  MeshConfig mesh;
  std::vector<ShardingRule> activations = {};
  std::string remat = "none";  // a RematPolicy preset or names
};

// Each case's losses against the unsharded run's in `precision`, within
// `tolerance` relative.
void ExpectShardedRunsFollowUnsharded(Precision precision, const std::vector<ShardedCase>& cases,
                                      double tolerance) {
  RunConfig unsharded = Micro();
  unsharded.mesh = {};
  unsharded.sharding.clear();
  unsharded.train.precision = precision;
  const std::string tag(PrecisionName(precision));
  const std::vector<double> reference = Losses(Quiet(unsharded, {}, "unsharded_" + tag));
  ASSERT_EQ(reference.size(), 20u);
  EXPECT_LT(reference.back(), reference.front() - 0.5) << "the loss should fall";
  for (const ShardedCase& c : cases) {
    TrainOptions o;
    o.mesh = c.mesh;
    RunConfig config = Micro();
    config.train.precision = precision;
    config.activations = c.activations;
    config.train.remat = ParseRematPolicy(c.remat, c.name);
    const TrainResult r = Quiet(config, o, c.name + "_" + tag);
    EXPECT_EQ(r.num_devices, c.mesh.num_devices());
    const std::vector<double> losses = Losses(r);
    ASSERT_EQ(losses.size(), reference.size()) << c.name;
    double worst = 0;
    for (size_t i = 0; i < losses.size(); ++i) {
      worst = std::max(worst, std::abs(losses[i] - reference[i]) / std::abs(reference[i]));
      EXPECT_NEAR(losses[i], reference[i], tolerance * std::abs(reference[i]))
          << c.name << " " << tag << " step " << i + 1;
    }
    std::printf("%s %s: worst relative loss difference %.2e\n", c.name.c_str(), tag.c_str(), worst);
  }
}

// In f32 every mesh, remat policy and slice layout gives the unsharded
// losses to 1e-5: only the order of f32 sums differs.
TEST(TrainerTest, ShardedRunsFollowTheUnshardedLosses) {
  const std::vector<ShardedCase> cases = {
      {"fsdp2_tensor2", {{"fsdp", "tensor"}, {2, 2}}},
      // Two slices: the batch split over DCN, weights over fsdp within a slice.
      {"dcn2_fsdp2", {{"dcn", "fsdp", "tensor"}, {2, 2, 1}}},
      // FSDP alone: the embedding table split along D only (each device
      // looks up and scatters its own rows).
      {"fsdp4", {{"fsdp", "tensor"}, {4, 1}}},
      // HSDP: gradients reduce-scattered over fsdp, the shards all-reduced over data.
      {"data2_fsdp2", {{"data", "fsdp", "tensor"}, {2, 2, 1}}},
      {"data2_fsdp2_tensor2", {{"data", "fsdp", "tensor"}, {2, 2, 2}}},
      // fsdp across 2 slices (a hybrid mesh: devices slice-major, not row-major).
      {"data2_dcn_fsdp2_tensor2", {{"data", "fsdp", "tensor"}, {2, 2, 2}, {1, 2, 1}}},
      // Without sequence parallelism (on by default with a tensor axis).
      {"fsdp2_tensor2_no_sp",
       {{"fsdp", "tensor"}, {2, 2}},
       {{"residual", PartitionSpec{"fsdp"}, "test"}}},
      // Remat presets: the backward recomputes what they do not save.
      {"fsdp2_tensor2_full", {{"fsdp", "tensor"}, {2, 2}}, {}, "full"},
      {"fsdp2_tensor2_save_qkv_proj", {{"fsdp", "tensor"}, {2, 2}}, {}, "save_qkv_proj"},
      {"data2_fsdp2_tensor2_save_dot_except_mlp",
       {{"data", "fsdp", "tensor"}, {2, 2, 2}},
       {},
       "save_dot_except_mlp"},
  };
  ExpectShardedRunsFollowUnsharded(Precision::kF32, cases, 1e-5);
}

// In bf16 a sharded step can round at other points than the unsharded one
// (a tensor-parallel dot's partial sums are added in f32 before the bf16
// rounding, the unsharded dot rounds its whole sum once), each such
// rounding up to 2^-9 relative, and 20 steps of training carry the
// differences on. Measured: 3e-5 to 7e-5 relative over the 20 losses; the
// bound is 1e-3.
TEST(TrainerTest, ShardedBf16RunsFollowTheUnshardedBf16Losses) {
  const std::vector<ShardedCase> cases = {
      {"fsdp2_tensor2", {{"fsdp", "tensor"}, {2, 2}}},
      {"dcn2_fsdp2", {{"dcn", "fsdp", "tensor"}, {2, 2, 1}}},
      {"data2_fsdp2_tensor2_full", {{"data", "fsdp", "tensor"}, {2, 2, 2}}, {}, "full"},
  };
  ExpectShardedRunsFollowUnsharded(Precision::kBf16, cases, 1e-3);
}

// The bf16 policy trains like f32: over micro's 20 steps on the 2x2 mesh
// every loss within 2% of f32's (measured: within 0.1%). configs/tiny.toml
// over its 300 steps: 3.7124 in bf16, 3.7108 in f32 (docs/PERFORMANCE.md).
TEST(TrainerTest, Bf16LossesFollowF32) {
  std::vector<double> losses[2];
  for (Precision precision : {Precision::kF32, Precision::kBf16}) {
    RunConfig config = Micro();
    config.train.precision = precision;
    losses[precision == Precision::kBf16] =
        Losses(Quiet(config, {}, "precision_" + std::string(PrecisionName(precision))));
  }
  ASSERT_EQ(losses[0].size(), 20u);
  ASSERT_EQ(losses[1].size(), 20u);
  EXPECT_NE(losses[0], losses[1]) << "bf16 should round somewhere";
  for (size_t i = 0; i < 20; ++i) {
    EXPECT_NEAR(losses[1][i], losses[0][i], 0.02 * losses[0][i]) << "step " << i + 1;
  }
  std::printf("final loss: bf16 %.5f, f32 %.5f\n", losses[1].back(), losses[0].back());
}

TEST(TrainerTest, ResumeRepeatsTheUninterruptedRunBitForBit) {
  const RunConfig config = Micro();
  TrainOptions whole;
  whole.steps = 10;
  const std::vector<double> uninterrupted = Losses(Quiet(config, whole, "whole"));

  TrainOptions first = whole;
  first.stop_after = 5;  // checkpoint_every = 5: a checkpoint at step 5
  first.out = TempDir("interrupted");
  const TrainResult a = Quiet(config, first, "interrupted");
  ASSERT_EQ(a.steps.size(), 5u);
  EXPECT_EQ(LoadCheckpoint(first.out / "checkpoint").state.step, 5);

  TrainOptions second = whole;
  second.resume = first.out;
  second.out = first.out;
  const TrainResult b = Quiet(config, second, "interrupted");
  ASSERT_EQ(b.steps.size(), 5u);
  EXPECT_EQ(b.steps.front().step, 6);
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(a.steps[i].loss, uninterrupted[i]) << "step " << i + 1;
    EXPECT_EQ(b.steps[i].loss, uninterrupted[5 + i]) << "step " << 6 + i;
  }
  // The metrics file holds every step once, in order.
  std::ifstream metrics(first.out / "metrics.jsonl");
  int64_t lines = 0;
  for (std::string line; std::getline(metrics, line);) ++lines;
  EXPECT_EQ(lines, 10);
  EXPECT_TRUE(fs::exists(first.out / "loss.svg"));
  EXPECT_TRUE(fs::exists(first.out / "tokenizer.model"));
}

// A checkpoint saved on one mesh resumes on others: each device reads only
// its tiles of the new sharding, cut from the old one's slices.
TEST(TrainerTest, AResumeOnAnotherMeshFollowsTheUninterruptedRun) {
  // f32: in bf16 another mesh rounds its partial sums differently from the
  // first step on (1e-4 on micro), resumed or not.
  RunConfig config = Micro();  // fsdp=2 x tensor=2
  config.train.precision = Precision::kF32;
  TrainOptions whole;
  whole.steps = 8;
  const std::vector<double> uninterrupted = Losses(Quiet(config, whole, "whole"));
  for (const char* mesh : {"fsdp=4,tensor=1", "fsdp=1,tensor=2", "fsdp=1,tensor=1"}) {
    SCOPED_TRACE(mesh);
    TrainOptions first = whole;
    first.stop_after = 5;  // a checkpoint at step 5
    first.out = TempDir("resharded");
    Quiet(config, first, "resharded");
    TrainOptions second = whole;
    second.out = first.out;
    second.mesh = ParseMeshFlag(mesh);
    const TrainResult b = Quiet(config, second, "resharded");
    ASSERT_EQ(b.steps.size(), 3u);
    for (size_t i = 0; i < 3; ++i) {
      EXPECT_NEAR(b.steps[i].loss, uninterrupted[5 + i], 1e-5) << "step " << 6 + i;
    }
  }
}

TEST(TrainerTest, MemorizationReachesNearZeroLossSharded) {
  // Three passages packed in one row, fsdp=2 (segment ids split with the
  // rows), in bf16 (forced: the config does not say, which on a CPU without
  // a bf16 unit means f32). A segment-id sharding bug leaves the loss well
  // above zero. 100 of the config's 300 steps: the loss is ~0.02 after 80.
  RunConfig config = LoadRunConfig(kSource / "configs/memorize.toml");
  config.train.precision = Precision::kBf16;
  ASSERT_EQ(config.mesh.num_devices(), 2);
  TrainOptions o;
  o.steps = 100;
  const TrainResult r = Quiet(config, o, "memorize");
  ASSERT_EQ(r.steps.size(), 100u);
  double best = r.steps.front().loss;
  for (const StepMetrics& m : r.steps) best = std::min(best, m.loss);
  std::printf("memorize: loss %.4f at step 1, %.4f at step 100 (best %.4f)\n", r.steps.front().loss,
              r.steps.back().loss, best);
  EXPECT_EQ(config.train.precision, Precision::kBf16);
  EXPECT_LT(r.steps.back().loss, 0.05);
}

TEST(TrainerTest, BadInputStopsBeforeAnyCompute) {
  auto expect_error = [](const RunConfig& config, const TrainOptions& o, const std::string& part) {
    const fs::path out = TempDir("bad");
    TrainOptions oo = o;
    oo.out = out;
    try {
      Quiet(config, oo, "bad");
      ADD_FAILURE() << "expected an error containing: " << part;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
    EXPECT_FALSE(fs::exists(out)) << "nothing may be written on bad input";
  };
  {
    RunConfig c = Micro();
    c.train.batch_size = 3;  // not divisible by fsdp = 2
    expect_error(c, {}, "batch_size 3 is not divisible");
  }
  {
    RunConfig c = Micro();
    c.model.ffn_dim = 66;  // w1 [32, 66] split 2 ways along ffn by tensor: fine; w2 [66, 32] too
    c.model.dim = 30;      // 30 / n_heads 4 is not an integer
    expect_error(c, {}, "model.dim = 30 is not divisible by model.n_heads = 4");
  }
  {
    RunConfig c = Micro();
    c.model.ffn_dim = 66;  // tensor=2 splits 66 evenly, but not with fsdp=2 x 2 ...
    TrainOptions o;
    o.mesh = MeshConfig{{"fsdp", "tensor"}, {1, 4}};  // 66 % 4 != 0
    expect_error(c, o, "is not divisible by 4");
  }
  {
    TrainOptions o;
    o.resume = TempDir("no_checkpoint");
    expect_error(Micro(), o, "no_checkpoint");
  }
  {
    TrainOptions o;
    o.grad_accum = 0;
    expect_error(Micro(), o, "--grad-accum 0: give the number of micro-batches");
  }
  // 0 read as "the default" (train.steps, run to the end) while negatives
  // were refused; both are refused by name: the default is leaving it unset.
  for (int64_t n : {int64_t{0}, int64_t{-1}}) {
    TrainOptions steps, stop;
    steps.steps = n;
    expect_error(Micro(), steps,
                 fmt::format("--steps {}: give the run's total number of steps", n));
    stop.stop_after = n;
    expect_error(Micro(), stop, fmt::format("--stop-after {}: give at least 1 step", n));
  }
  {
    TrainOptions o;
    o.grad_accum = 3;  // batch_size 4
    expect_error(Micro(), o,
                 "train.batch_size 4 is not divisible by the gradient accumulation steps 3");
  }
  {
    RunConfig c = Micro();
    c.train.grad_accum_steps = 4;  // micro-batches of 1 row, the mesh's fsdp = 2
    expect_error(c, {},
                 "the micro-batch, train.batch_size 4 / 4 gradient accumulation steps "
                 "(train.grad_accum_steps, weft train --grad-accum) = 1, is not divisible by "
                 "the 2 devices of the batch axes");
  }
}

// A run whose log the test reads.
TrainResult Logged(const RunConfig& config, TrainOptions o, std::ostringstream& log) {
  o.progress = false;
  o.log = &log;
  return Train(config, o);
}

std::vector<int64_t> MetricSteps(const fs::path& out) {
  std::vector<int64_t> steps;
  std::ifstream in(out / "metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    const size_t at = line.find("\"step\":");
    if (at != std::string::npos) steps.push_back(std::stoll(line.substr(at + 7)));
  }
  return steps;
}

using testing::ErrorOf;

TEST(TrainerTest, ASecondRunInTheSameOutDirContinuesInsteadOfStartingOver) {
  const RunConfig config = Micro();
  TrainOptions o;
  o.out = TempDir("again");
  o.steps = 4;
  std::ostringstream log1;
  Logged(config, o, log1);
  EXPECT_EQ(MetricSteps(o.out), (std::vector<int64_t>{1, 2, 3, 4}));

  // What a resume reads of metrics.jsonl is bounded: a torn line, and a 3 MB
  // line of NULs with no newline (no step's object), are dropped, not held.
  {
    std::ofstream damage(o.out / "metrics.jsonl", std::ios::app | std::ios::binary);
    damage << "{\"step\": 5, \"lo\n" << std::string(3 << 20, '\0');
  }

  // The same command with more steps continues from the checkpoint, and says so.
  o.steps = 6;
  std::ostringstream log2;
  const TrainResult more = Logged(config, o, log2);
  EXPECT_NE(log2.str().find("holds a checkpoint at step 4: continuing from it to step 6"),
            std::string::npos)
      << log2.str();
  ASSERT_EQ(more.steps.size(), 2u);
  EXPECT_EQ(more.steps.front().step, 5);
  EXPECT_EQ(MetricSteps(o.out), (std::vector<int64_t>{1, 2, 3, 4, 5, 6}));

  // Once more: the run is complete; nothing is trained and nothing changes.
  const std::string metrics = ReadFileToString(o.out / "metrics.jsonl");
  const std::string index = ReadFileToString(o.out / "checkpoint" / "state.json");
  std::ostringstream log3;
  EXPECT_TRUE(Logged(config, o, log3).steps.empty());
  EXPECT_NE(log3.str().find("already trained to step 6 of 6: nothing to do"), std::string::npos)
      << log3.str();
  EXPECT_EQ(ReadFileToString(o.out / "metrics.jsonl"), metrics);
  EXPECT_EQ(ReadFileToString(o.out / "checkpoint" / "state.json"), index);  // its checksums too

  // --overwrite is the one way to start over in place.
  o.overwrite = true;
  o.steps = 2;
  std::ostringstream log4;
  EXPECT_EQ(Logged(config, o, log4).steps.size(), 2u);
  EXPECT_NE(log4.str().find("--overwrite: starting over in"), std::string::npos) << log4.str();
  EXPECT_EQ(MetricSteps(o.out), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(LoadCheckpoint(o.out / "checkpoint").state.step, 2);
}

TEST(TrainerTest, AnOutDirThatWouldLoseWorkIsRefusedUntouched) {
  const RunConfig config = Micro();
  // Metrics of a run killed before its first checkpoint.
  const fs::path out = TempDir("metrics_only");
  fs::create_directories(out);
  WriteFileAtomically(out / "metrics.jsonl", "{\"step\": 1, \"loss\": 5.9}\n");
  TrainOptions o;
  o.out = out;
  o.steps = 2;
  std::ostringstream log;
  std::string message = ErrorOf([&] { Logged(config, o, log); });
  EXPECT_NE(message.find("holds metrics.jsonl of an earlier run but no checkpoint"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("--overwrite"), std::string::npos) << message;
  EXPECT_EQ(ReadFileToString(out / "metrics.jsonl"), "{\"step\": 1, \"loss\": 5.9}\n");

  // --resume from another run into an --out whose own checkpoint it would replace.
  const fs::path other = TempDir("other");
  TrainOptions first;
  first.out = other;
  first.steps = 2;
  Logged(config, first, log);
  TrainOptions second;
  second.out = TempDir("own");
  second.steps = 2;
  Logged(config, second, log);
  const std::string own_model = ReadFileToString(second.out / "checkpoint" / "state.json");
  second.resume = other;
  second.steps = 4;
  message = ErrorOf([&] { Logged(config, second, log); });
  EXPECT_NE(message.find("holds a checkpoint of its own"), std::string::npos) << message;
  EXPECT_EQ(ReadFileToString(second.out / "checkpoint" / "state.json"), own_model);
  second.overwrite = true;
  message = ErrorOf([&] { Logged(config, second, log); });
  EXPECT_NE(message.find("contradict"), std::string::npos) << message;
}

TEST(TrainerTest, ARunDirectoryHasOneOwner) {
  const fs::path out = TempDir("owned");
  RunDirLock other(out);  // as another process's `weft train` would hold it
  other.Keep();
  TrainOptions o;
  o.out = out;
  o.steps = 2;
  std::ostringstream log;
  const std::string message = ErrorOf([&] { Logged(Micro(), o, log); });
  EXPECT_NE(message.find("is in use by another weft process (pid " + std::to_string(getpid())),
            std::string::npos)
      << message;
  EXPECT_FALSE(fs::exists(out / "metrics.jsonl"));
}

TEST(TrainerTest, AResumeIsCheckedAgainstTheConfigBeforeAnythingIsWritten) {
  const RunConfig config = Micro();
  TrainOptions o;
  o.out = TempDir("checked");
  o.steps = 3;
  std::ostringstream log;
  Logged(config, o, log);
  const std::string metrics = ReadFileToString(o.out / "metrics.jsonl");
  o.steps = 5;

  RunConfig wider = config;
  wider.model.ffn_dim = 128;
  std::string message = ErrorOf([&] { Logged(wider, o, log); });
  EXPECT_NE(message.find("state.json: the checkpoint was written for model.ffn_dim = 64, the "
                         "config"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("says 128"), std::string::npos) << message;

  // Other data trains another tokenizer: token ids would mean other words.
  RunConfig fewer = config;
  fewer.data.max_documents = 12;
  message = ErrorOf([&] { Logged(fewer, o, log); });
  EXPECT_NE(message.find("trained with another tokenizer"), std::string::npos) << message;
  EXPECT_EQ(ReadFileToString(o.out / "metrics.jsonl"), metrics);

  // A changed [train] setting is allowed, and printed.
  RunConfig slower = config;
  slower.train.lr = 1e-3;
  std::ostringstream changed;
  Logged(slower, o, changed);
  EXPECT_NE(changed.str().find("resume: train.lr was 0.003 in"), std::string::npos)
      << changed.str();
  EXPECT_NE(changed.str().find("is 0.001 now"), std::string::npos) << changed.str();
}

// weft export hf, then weft train --init-from: the first step's loss is the
// loss of the exported checkpoint's weights on the first batch, bit for bit
// (the same step program on the same mesh, run on those weights here).
TEST(TrainerTest, InitFromAHuggingFaceExportStartsFromTheExportedWeights) {
  RunConfig config = Micro();
  TrainOptions source;
  source.steps = 3;
  const TrainResult trained = Quiet(config, source, "hf_source");
  const fs::path hf = TempDir("hf_export");
  ExportRunToHf(trained.out, hf, {});

  TrainOptions tune;
  tune.steps = 2;
  tune.init_from = hf;
  const TrainResult tuned = Quiet(config, tune, "hf_tuned");
  ASSERT_EQ(tuned.steps.size(), 2u);

  config.train.steps = *tune.steps;  // the data order of the tuned run
  // The precision the tuned run took (micro does not say; BuildStepProgram's
  // own default is bf16).
  config.train.precision = FastestPrecision().precision;
  const StepProgram p = BuildStepProgram(config);
  const Dataset data = LoadDataset(config);
  BatchIterator it = MakeBatchIterator(data, config);
  const Batch b = it.Next();
  using Tensor = runtime::HostTensor;
  const int64_t B = b.batch_size, S = b.seq_len;
  std::vector<Tensor> inputs = {
      Tensor::FromVector<int32_t>(PrimitiveType::kS32, {B, S}, b.tokens),
      Tensor::FromVector<int32_t>(PrimitiveType::kS32, {B, S}, b.targets),
      Tensor::FromVector<float>(PrimitiveType::kF32, {B, S}, b.loss_mask),
      Tensor::FromVector<int32_t>(PrimitiveType::kS32, {B, S}, b.segment_ids),
      Tensor::FromVector<int32_t>(PrimitiveType::kS32, {B, S}, b.positions)};
  const Checkpoint exported = LoadCheckpoint(trained.out / "checkpoint");
  for (const LlamaWeight& w : p.forward.weights) {
    inputs.push_back(exported.model.at(w.name));
  }
  runtime::LocalCluster cluster(p.num_devices);
  const double want = runtime::RunSharded(p.compiled, inputs, cluster).at(0).GetDouble(0);
  EXPECT_EQ(tuned.steps[0].loss, want);
  EXPECT_NE(tuned.steps[0].loss, trained.steps[0].loss) << "not the random init's loss";

  // Refused before anything is written: with --resume, and a [model] that
  // is not the exported one (named by field).
  const fs::path out = TempDir("hf_refused");
  TrainOptions both = tune;
  both.resume = trained.out;
  both.out = out;
  EXPECT_NE(ErrorOf([&] { Quiet(Micro(), both, "hf_refused"); }).find("contradict"),
            std::string::npos);
  RunConfig wider = Micro();
  wider.model.ffn_dim = 128;
  TrainOptions mismatch = tune;
  mismatch.out = out;
  const std::string message = ErrorOf([&] { Quiet(wider, mismatch, "hf_refused"); });
  EXPECT_NE(message.find("model.ffn_dim = 128"), std::string::npos) << message;
  EXPECT_NE(message.find("\"intermediate_size\": 64"), std::string::npos) << message;
  EXPECT_FALSE(fs::exists(out));
}

// Every device checks the chunks it reads before anything is written.
TEST(TrainerTest, ADamagedShardIsRefusedBeforeAnythingIsWritten) {
  const RunConfig config = Micro();
  TrainOptions o;
  o.out = TempDir("damaged");
  o.steps = 5;
  Quiet(config, o, "damaged");
  const fs::path shard = o.out / "checkpoint" / "optimizer-00003-of-00004.safetensors";
  std::string bytes = ReadFileToString(shard);
  bytes[bytes.size() - 5] ^= 0x01;
  WriteFileAtomically(shard, bytes);
  const std::string metrics = ReadFileToString(o.out / "metrics.jsonl");
  o.steps = 8;
  const std::string message = ErrorOf([&] { Quiet(config, o, "damaged"); });
  EXPECT_NE(message.find("optimizer-00003-of-00004.safetensors is damaged: tensor '"),
            std::string::npos)
      << message;
  EXPECT_EQ(ReadFileToString(o.out / "metrics.jsonl"), metrics);
}

TEST(TrainerTest, ARunThatCannotFitInMemoryIsRefusedBeforeAllocating) {
  RunConfig config = Micro();
  config.train.batch_size = int64_t{1} << 22;  // logits alone: 2^22 x 64 x 384 floats = 384 GiB
  TrainOptions o;
  o.out = TempDir("too_big");
  std::ostringstream log;
  const std::string message = ErrorOf([&] { Logged(config, o, log); });
  EXPECT_NE(message.find("training needs about"), std::string::npos) << message;
  EXPECT_NE(message.find("but this machine has"), std::string::npos) << message;
  EXPECT_NE(message.find("train.batch_size"), std::string::npos) << message;
  EXPECT_FALSE(fs::exists(o.out)) << "nothing may be written";
}

TEST(TrainerTest, AnUpdateThatWouldOverflowIsSkippedAndNaNMetricsAreRead) {
  // A learning rate so large that the first update overflows float32 though
  // the gradient is finite: every step is skipped, the weights stay finite,
  // and the checkpoint is written.
  RunConfig config = Micro();
  config.train.lr = 3e38;
  config.train.min_lr = 3e38;
  TrainOptions o;
  o.out = TempDir("overflow");
  o.steps = 3;
  std::ostringstream log;
  const TrainResult r = Logged(config, o, log);
  ASSERT_EQ(r.steps.size(), 3u);
  for (const StepMetrics& m : r.steps) {
    EXPECT_TRUE(m.skipped) << "step " << m.step;
    EXPECT_TRUE(std::isfinite(m.grad_norm)) << "step " << m.step;
  }
  EXPECT_NE(log.str().find("the update would make a parameter or an Adam moment non-finite"),
            std::string::npos)
      << log.str();
  EXPECT_EQ(LoadCheckpoint(o.out / "checkpoint").state.step, 3);

  // metrics.jsonl as a run with a NaN loss leaves it (the writer writes null):
  // the next run in the directory reads it.
  std::string metrics = ReadFileToString(o.out / "metrics.jsonl");
  const size_t at = metrics.find("\"loss\":");
  const size_t end = metrics.find(',', at);
  metrics.replace(at, end - at, "\"loss\":null");
  WriteFileAtomically(o.out / "metrics.jsonl", metrics);
  o.steps = 4;
  EXPECT_EQ(Logged(config, o, log).steps.size(), 1u);
  EXPECT_EQ(MetricSteps(o.out), (std::vector<int64_t>{1, 2, 3, 4}));
}

// The micro model on a few Bible verses (inline documents of uneven length)
// and a last document that pads the stream to 2 x 64 + 1 tokens: 3 rows of
// 64 per epoch, the last holding one token and so no loss token (its target
// would be past the stream). batch_size 8 straddles epochs. Rows thus have
// different numbers of loss tokens, some none: a micro-batch's weight in the
// accumulated gradient matters, and a micro-batch of the empty row alone
// contributes nothing.
// In f32: accumulation's arithmetic is exact up to the order of f32 sums,
// which bf16 roundings later in a run would amplify past the 1e-5 checks.
RunConfig UnevenRows() {
  RunConfig config = Micro();
  config.train.precision = Precision::kF32;
  config.train.batch_size = 8;
  config.train.steps = 5;
  config.train.checkpoint_every = 0;
  config.data.source = "inline";
  config.data.tokenizer_corpus = "kjv";
  config.data.documents = {"Jesus wept.", "Rejoice evermore.",
                           "The LORD is my shepherd; I shall not want.", "Pray without ceasing.",
                           "Thou shalt not kill."};
  const Dataset dataset = LoadDataset(config);
  const int64_t seq = config.model.seq_len;
  const int64_t tokens = dataset.corpus->num_tokens();
  // One more document: BOS + its pieces + EOS make the stream 2 x seq + 1 long.
  for (int words = 1; words < seq; ++words) {
    std::string last = "Amen";
    for (int w = 1; w < words; ++w) last += " amen";
    for (const char* end : {"", ".", ".."}) {
      const int64_t framed = static_cast<int64_t>(dataset.tokenizer.Encode(last + end).size()) + 2;
      if (tokens + framed == 2 * seq + 1) {
        config.data.documents.push_back(last + end);
        return config;
      }
    }
  }
  ADD_FAILURE() << "no padding document makes the stream " << 2 * seq + 1 << " tokens long";
  return config;
}

// The loss tokens of each row of `config`'s first batch.
std::vector<double> RowLossTokens(const RunConfig& config) {
  const Dataset dataset = LoadDataset(config);
  BatchIterator it = MakeBatchIterator(dataset, config);
  const Batch batch = it.Next();
  std::vector<double> rows(static_cast<size_t>(batch.batch_size), 0.0);
  for (int64_t i = 0; i < batch.batch_size * batch.seq_len; ++i) {
    rows[i / batch.seq_len] += batch.loss_mask[i];
  }
  return rows;
}

// Every weight of the checkpoints in `a` and `b` within `tolerance` of a's,
// relative: the norm of the difference over the norm of a's tensor. (Single
// elements can differ more: AdamW's first steps move an element whose
// gradient is near zero by up to lr, whatever rounding decides its sign.)
void ExpectSameWeights(const fs::path& a, const fs::path& b, double tolerance,
                       const std::string& label) {
  const TensorMap wa = LoadCheckpoint(a / "checkpoint").model;
  const TensorMap wb = LoadCheckpoint(b / "checkpoint").model;
  ASSERT_EQ(wa.size(), wb.size()) << label;
  for (const auto& [name, ta] : wa) {
    const std::vector<float> va = TensorToF32(ta), vb = TensorToF32(wb.at(name));
    ASSERT_EQ(va.size(), vb.size()) << label << " " << name;
    double norm = 0, difference = 0;
    for (size_t i = 0; i < va.size(); ++i) {
      const double x = va[i], d = x - vb[i];
      norm += x * x;
      difference += d * d;
    }
    EXPECT_LE(std::sqrt(difference), tolerance * std::sqrt(norm)) << label << " " << name;
  }
}

// Gradient accumulation (train.grad_accum_steps, --grad-accum): the batch run
// as N micro-batches, each weighted by its share of the batch's loss tokens,
// gives the whole batch's losses and weights, unsharded and on the 2x2 mesh,
// with micro-batches of 1 to 4 rows, some without a loss token. (Weighting
// every micro-batch 1 / N instead misses the losses by up to ~1e-3 relative
// and the weights by ~2%.)
TEST(TrainerTest, GradientAccumulationGivesTheWholeBatchsLossesAndWeights) {
  const RunConfig config = UnevenRows();
  const std::vector<double> rows = RowLossTokens(config);
  ASSERT_EQ(rows.size(), 8u);
  EXPECT_EQ(std::count(rows.begin(), rows.end(), 0.0), 3) << "one empty row per epoch";

  struct Case {
    std::string name;
    std::optional<MeshConfig> mesh;  // unset: the config's fsdp=2 x tensor=2
    std::vector<int64_t> accum;      // compared with the same mesh's grad_accum 1
  };
  const std::vector<Case> cases = {
      {"one_device", MeshConfig{}, {2, 4, 8}},
      {"fsdp2_tensor2", std::nullopt, {2, 4}},
  };
  for (const Case& c : cases) {
    RunConfig base = config;
    if (c.mesh) {
      base.mesh = *c.mesh;
      base.sharding.clear();
    }
    const std::string whole_name = "accum_" + c.name + "_1";
    const TrainResult whole = Quiet(base, {}, whole_name);
    const std::vector<double> reference = Losses(whole);
    ASSERT_EQ(reference.size(), 5u);
    for (int64_t n : c.accum) {
      const std::string name = "accum_" + c.name + "_" + std::to_string(n);
      TrainOptions o;
      o.grad_accum = n;
      const TrainResult r = Quiet(base, o, name);
      const std::vector<double> losses = Losses(r);
      ASSERT_EQ(losses.size(), reference.size()) << name;
      for (size_t i = 0; i < losses.size(); ++i) {
        EXPECT_NEAR(losses[i], reference[i], 1e-5 * std::abs(reference[i]))
            << name << " step " << i + 1;
        EXPECT_EQ(r.steps[i].tokens, whole.steps[i].tokens) << name;
      }
      ExpectSameWeights(whole.out, r.out, 1e-5, name);
      EXPECT_EQ(LoadCheckpoint(r.out / "checkpoint").state.data_position,
                LoadCheckpoint(whole.out / "checkpoint").state.data_position)
          << name;
    }
  }
}

// `weft bench train`'s loop (TrainStepsInMemory) accumulates as weft train
// does, and its profile of a step covers every micro-batch's program run.
TEST(TrainerTest, InMemoryStepsAccumulateToo) {
  RunConfig config = UnevenRows();
  config.mesh = {};
  config.sharding.clear();
  struct Steps {
    std::vector<double> losses;
    std::vector<int64_t> instructions;
  };
  auto run = [&](int64_t accum) {
    Steps r;
    RunConfig c = config;
    c.train.grad_accum_steps = accum;
    TrainStepsOptions o;
    o.steps = 3;
    o.on_step = [&](const StepMetrics& m, const StepProfile& p) {
      r.losses.push_back(m.loss);
      r.instructions.push_back(p.executor.instructions);
    };
    const TrainStepsInfo info = TrainStepsInMemory(c, o);
    EXPECT_EQ(info.batch_size, 8) << "rows per step, not per micro-batch";
    return r;
  };
  const Steps whole = run(1), halves = run(2);
  ASSERT_EQ(whole.losses.size(), 3u);
  ASSERT_EQ(halves.losses.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_NEAR(halves.losses[i], whole.losses[i], 1e-5 * whole.losses[i]) << "step " << i + 1;
    // Two runs of a program of the same structure (every micro-batch here
    // has loss tokens).
    EXPECT_GT(halves.instructions[i], 3 * whole.instructions[i] / 2) << "step " << i + 1;
  }
}

// A run with accumulation interrupted and resumed repeats the uninterrupted
// one bit for bit; resumed with another grad_accum_steps it says so, and its
// losses still agree.
TEST(TrainerTest, AResumedRunWithAccumulationRepeatsTheUninterruptedRun) {
  RunConfig config = UnevenRows();
  config.mesh = {};
  config.sharding.clear();
  config.train.grad_accum_steps = 2;
  TrainOptions whole;
  whole.steps = 6;
  const std::vector<double> uninterrupted = Losses(Quiet(config, whole, "accum_whole"));
  ASSERT_EQ(uninterrupted.size(), 6u);

  TrainOptions first = whole;
  first.stop_after = 3;
  first.out = TempDir("accum_interrupted");
  const TrainResult a = Quiet(config, first, "accum_interrupted");
  ASSERT_EQ(a.steps.size(), 3u);
  const fs::path copy = TempDir("accum_interrupted_copy");
  fs::copy(first.out, copy, fs::copy_options::recursive);

  TrainOptions second = whole;
  second.out = first.out;
  const TrainResult b = Quiet(config, second, "accum_interrupted");
  ASSERT_EQ(b.steps.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(a.steps[i].loss, uninterrupted[i]) << "step " << i + 1;
    EXPECT_EQ(b.steps[i].loss, uninterrupted[3 + i]) << "step " << 4 + i;
  }

  TrainOptions other = whole;
  other.out = copy;
  other.grad_accum = 4;
  std::ostringstream log;
  const TrainResult c = Logged(config, other, log);
  EXPECT_NE(log.str().find("resume: train.grad_accum_steps was 2 in"), std::string::npos)
      << log.str();
  EXPECT_NE(log.str().find("is 4 now"), std::string::npos) << log.str();
  ASSERT_EQ(c.steps.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_NEAR(c.steps[i].loss, uninterrupted[3 + i], 1e-5 * uninterrupted[3 + i])
        << "step " << 4 + i;
  }
  EXPECT_EQ(LoadCheckpoint(copy / "checkpoint").state.extra.at("train.grad_accum_steps"), "4");
}

// Issue 13's acceptance check for loop fusion: configs/tiny.toml itself (its
// model, batch 8 x seq 256 and 2x2 mesh), 50 steps through the trainer's own
// in-memory loop (TrainStepsInMemory, as `weft bench train` runs it) with
// compiler::FuseLoops on and off: every step's loss agrees within 1e-5
// relative. The fused program must really run fusions (the profile counts
// them) and the unfused one none, so the comparison is never of a program
// with itself. About 8 s per run on 2 cores.
TEST(TrainerTest, LoopFusionLeavesTinysLossesUnchanged) {
  const RunConfig tiny = LoadRunConfig(kSource / "configs/tiny.toml");
  constexpr int64_t kSteps = 20;
  const int fused_class = static_cast<int>(runtime::OpClass::kFusedLoops);
  struct Run {
    std::vector<double> losses;
    int64_t fused_instructions = 0;
  };
  auto run = [&](bool fuse) {
    Run r;
    TrainStepsOptions o;
    o.steps = kSteps;
    o.fuse_loops = fuse;
    o.profile = true;
    o.on_step = [&](const StepMetrics& m, const StepProfile& p) {
      r.losses.push_back(m.loss);
      r.fused_instructions += p.executor.class_instructions[fused_class];
    };
    const TrainStepsInfo info = TrainStepsInMemory(tiny, o);
    EXPECT_EQ(info.num_devices, 4);
    return r;
  };
  const Run unfused = run(false);
  const Run fused = run(true);
  EXPECT_EQ(unfused.fused_instructions, 0);
  EXPECT_GT(fused.fused_instructions, 0) << "the fused run ran no fusion";
  ASSERT_EQ(unfused.losses.size(), static_cast<size_t>(kSteps));
  ASSERT_EQ(fused.losses.size(), unfused.losses.size());
  EXPECT_LT(unfused.losses.back(), unfused.losses.front() - 0.5) << "the loss should fall";
  for (size_t i = 0; i < fused.losses.size(); ++i) {
    ASSERT_TRUE(std::isfinite(unfused.losses[i])) << "step " << i + 1;
    EXPECT_NEAR(fused.losses[i], unfused.losses[i], 1e-5 * std::abs(unfused.losses[i]))
        << "step " << i + 1;
  }
}

// A config that does not say takes the precision this CPU trains fastest
// (bf16 with a bf16 unit, else f32), and the run says which and why; a
// forced instruction set without bf16 instructions means f32 too. --precision
// and the config force either. A resume keeps the precision its checkpoint
// recorded (here the one the CPU would not pick), continuing as the
// uninterrupted run in that precision does, bit for bit.
TEST(TrainerTest, ARunTakesTheCpusFastestPrecisionUnlessToldAndAResumeKeepsItsOwn) {
  const CpuInfo& cpu = GetCpuInfo();
  const bool bf16_unit = cpu.avx512_bf16 || (cpu.amx_bf16 && cpu.amx_os && GetAmxStatus().usable);
  const PrecisionChoice fastest = FastestPrecision();
  EXPECT_EQ(fastest.precision, bf16_unit ? Precision::kBf16 : Precision::kF32) << cpu.model_name;
  EXPECT_NE(fastest.why.find(bf16_unit ? "this CPU has a bf16 unit"
                                       : "bf16 would be widened to f32 for every dot"),
            std::string::npos)
      << fastest.why;
  if (!bf16_unit) {
    EXPECT_NE(fastest.why.find("no avx512_bf16"), std::string::npos) << fastest.why;
  }
  {
    kernels::simd::ScopedIsa portable("portable");
    const PrecisionChoice forced = FastestPrecision();
    EXPECT_EQ(forced.precision, Precision::kF32);
    EXPECT_NE(forced.why.find("the forced instruction set portable (WEFT_ISA) has no bf16"),
              std::string::npos)
        << forced.why;
  }
  const Precision other =
      fastest.precision == Precision::kBf16 ? Precision::kF32 : Precision::kBf16;
  const std::string other_name(PrecisionName(other));
  const RunConfig config = Micro();  // says no precision
  ASSERT_FALSE(config.train.precision.has_value());
  auto recorded = [](const fs::path& out) {
    return LoadCheckpoint(out / "checkpoint").state.extra.at("train.precision");
  };

  TrainOptions o;
  o.steps = 2;
  o.out = TempDir("precision_default");
  std::ostringstream log;
  Logged(config, o, log);
  EXPECT_NE(log.str().find(
                fmt::format("precision {} ({})\n", PrecisionName(fastest.precision), fastest.why)),
            std::string::npos)
      << log.str();
  EXPECT_EQ(recorded(o.out), PrecisionName(fastest.precision));

  RunConfig says = config;
  says.train.precision = other;
  o.out = TempDir("precision_config");
  std::ostringstream config_log;
  Logged(says, o, config_log);
  EXPECT_NE(
      config_log.str().find("precision " + other_name + " (train.precision in " + config.source +
                            "; --precision " + std::string(PrecisionName(fastest.precision)) +
                            " forces the other)"),
      std::string::npos)
      << config_log.str();
  EXPECT_EQ(recorded(o.out), other_name);

  // --precision other, interrupted at step 5, resumed without it.
  TrainOptions whole;
  whole.steps = 8;
  whole.precision = other;
  const std::vector<double> uninterrupted = Losses(Quiet(config, whole, "precision_whole"));
  TrainOptions first = whole;
  first.stop_after = 5;  // checkpoint_every = 5
  first.out = TempDir("precision_resumed");
  std::ostringstream first_log;
  Logged(config, first, first_log);
  EXPECT_NE(first_log.str().find("precision " + other_name + " (--precision)"), std::string::npos)
      << first_log.str();
  TrainOptions second;
  second.steps = 8;
  second.out = first.out;
  std::ostringstream second_log;
  const TrainResult resumed = Logged(config, second, second_log);
  EXPECT_NE(second_log.str().find("precision " + other_name + " (the run's, as " +
                                  (first.out / "checkpoint" / "state.json").string() +
                                  " records it; --precision " +
                                  std::string(PrecisionName(fastest.precision)) + " changes it)"),
            std::string::npos)
      << second_log.str();
  ASSERT_EQ(resumed.steps.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(resumed.steps[i].loss, uninterrupted[5 + i]) << "step " << 6 + i;
  }
  EXPECT_EQ(recorded(first.out), other_name);
}

// Micro on the first 60 chapters of the Bible with 3 held out (chapters 10,
// 30 and 50: the middles of three equal stretches), validated every 4 steps
// and after the last. f32, so the sharded step program's loss and
// `weft eval`'s forward on one device agree to float rounding.
RunConfig Validated() {
  RunConfig config = Micro();
  config.train.precision = Precision::kF32;
  config.train.steps = 10;
  config.data.kjv_unit = "chapter";
  config.data.max_documents = 60;
  config.train.validation_documents = 3;
  config.train.validation_every = 4;
  return config;
}

// The validation loss is `weft eval`'s mean loss of the run's weights on the
// held-out documents (written to files, evaluated from the run directory on
// one device), reported at the validation steps only (progress lines,
// metrics.jsonl, loss.svg); a resumed run reports the uninterrupted run's
// figures bit for bit; a resume may not change what is held out.
TEST(TrainerTest, TheValidationLossIsWeftEvalsLossOnTheHeldOutDocuments) {
  const RunConfig config = Validated();
  TrainOptions o;
  o.out = TempDir("validated");
  std::ostringstream log;
  const TrainResult r = Logged(config, o, log);
  ASSERT_EQ(r.steps.size(), 10u);
  std::vector<int64_t> validated;
  for (const StepMetrics& m : r.steps) {
    if (m.validation_loss) validated.push_back(m.step);
  }
  EXPECT_EQ(validated, (std::vector<int64_t>{4, 8, 10}));
  EXPECT_NE(log.str().find("validation: 3 documents held out of training"), std::string::npos)
      << log.str();
  EXPECT_NE(log.str().find(fmt::format("val loss {:.4f}", *r.steps[3].validation_loss)),
            std::string::npos)
      << log.str();
  EXPECT_LT(*r.steps[9].validation_loss, *r.steps[3].validation_loss) << "it should learn";

  // The held-out chapters, chosen here by the documented rule.
  const std::vector<Document> all = LoadConfiguredDocuments(config.data);
  ASSERT_EQ(all.size(), 60u);
  const fs::path texts = TempDir("validated_texts");
  fs::create_directories(texts);
  EvalOptions eo;
  for (int64_t d : {10, 30, 50}) {
    eo.data_files.push_back(texts / fmt::format("held{}.txt", d));
    WriteFileAtomically(eo.data_files.back(), all[static_cast<size_t>(d)].text);
  }
  const EvalResult eval = Evaluate(LoadEvalModel(o.out), eo);
  EXPECT_NEAR(*r.steps.back().validation_loss, eval.loss, 1e-5 * eval.loss);
  std::printf("validation loss %.6f, weft eval %.6f over %lld tokens\n",
              *r.steps.back().validation_loss, eval.loss, static_cast<long long>(eval.tokens));
  const std::string metrics = ReadFileToString(o.out / "metrics.jsonl");
  size_t lines = 0, with = 0;
  for (size_t at = 0; (at = metrics.find('\n', at)) != std::string::npos; ++at) ++lines;
  for (size_t at = 0; (at = metrics.find("\"val_loss\":", at)) != std::string::npos; ++at) ++with;
  EXPECT_EQ(lines, 10u);
  EXPECT_EQ(with, 3u);
  EXPECT_NE(ReadFileToString(o.out / "loss.svg").find(">validation loss</text>"),
            std::string::npos);

  // Interrupted at step 5 (a checkpoint), resumed: the same figures.
  TrainOptions first;
  first.out = TempDir("validated_resumed");
  first.stop_after = 5;
  Quiet(config, first, "validated_resumed");
  TrainOptions second;
  second.out = first.out;
  const TrainResult b = Quiet(config, second, "validated_resumed");
  ASSERT_EQ(b.steps.size(), 5u);
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(b.steps[i].validation_loss, r.steps[5 + i].validation_loss) << "step " << 6 + i;
  }
  const std::string resumed_metrics = ReadFileToString(first.out / "metrics.jsonl");
  with = 0;  // step 4's kept, steps 8 and 10 added
  for (size_t at = 0; (at = resumed_metrics.find("\"val_loss\":", at)) != std::string::npos; ++at) {
    ++with;
  }
  EXPECT_EQ(with, 3u);

  RunConfig fewer = config;
  fewer.train.validation_documents = 2;
  fewer.train.steps = 12;
  const std::string message = ErrorOf([&] { Quiet(fewer, second, "validated_resumed"); });
  EXPECT_NE(message.find("the run held 3 of its documents out of training for validation, the "
                         "config"),
            std::string::npos)
      << message;
}

// --validation-documents and --validation-every replace the config's
// settings: training on two --data files, a config holding three documents
// out is refused by name, and one held out trains on the other.
TEST(TrainerTest, TheValidationFlagsReplaceTheConfigs) {
  RunConfig config = Validated();
  config.data.tokenizer_corpus = "kjv";  // two chapters are too little text for 384 pieces
  const std::vector<Document> chapters = LoadConfiguredDocuments(config.data);
  const fs::path texts = TempDir("validation_flags_texts");
  fs::create_directories(texts);
  TrainOptions o;
  o.steps = 2;
  for (size_t d = 0; d < 2; ++d) {
    o.data_files.push_back(texts / fmt::format("chapter{}.txt", d));
    WriteFileAtomically(o.data_files.back(), chapters[d].text);
  }
  std::string message = ErrorOf([&] { Quiet(config, o, "validation_flags"); });
  EXPECT_NE(message.find("train.validation_documents = 3 holds out every one of the 2 documents "
                         "the [data] section (or --data) yields"),
            std::string::npos)
      << message;
  o.validation_documents = -1;
  message = ErrorOf([&] { Quiet(config, o, "validation_flags"); });
  EXPECT_EQ(message.rfind("--validation-documents -1: give the number of documents", 0), 0u)
      << message;
  o.validation_documents = 1;
  o.validation_every = -2;
  message = ErrorOf([&] { Quiet(config, o, "validation_flags"); });
  EXPECT_EQ(message.rfind("--validation-every -2: give 0 or more steps", 0), 0u) << message;
  o.validation_every = 1;
  const TrainResult r = Quiet(config, o, "validation_flags");
  ASSERT_EQ(r.steps.size(), 2u);
  EXPECT_TRUE(r.steps[0].validation_loss.has_value());
  EXPECT_TRUE(r.steps[1].validation_loss.has_value());
  o.validation_documents = 0;  // none: no validation, whatever the config says
  const TrainResult none = Quiet(config, o, "validation_flags");
  EXPECT_FALSE(none.steps[0].validation_loss.has_value());
  EXPECT_FALSE(none.steps[1].validation_loss.has_value());
}

}  // namespace
}  // namespace weft
