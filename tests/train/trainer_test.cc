// The training loop: sharded runs (2D, FSDP, HSDP, a 2-slice mesh) follow the
// unsharded run's losses, the memorization config reaches ~0 loss sharded,
// a resumed run repeats the uninterrupted one bit for bit, and bad input
// stops before any compute without touching the output directory; loop
// fusion leaves configs/tiny.toml's 50 losses unchanged.
#include "weft/train/trainer.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

#include "weft/base/atomic_file.h"
#include "weft/base/error.h"
#include "weft/runtime/executor.h"
#include "weft/train/checkpoint.h"
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

TEST(TrainerTest, ShardedRunsFollowTheUnshardedLosses) {
  RunConfig unsharded = Micro();
  unsharded.mesh = {};
  unsharded.sharding.clear();
  const std::vector<double> reference = Losses(Quiet(unsharded, {}, "unsharded"));
  ASSERT_EQ(reference.size(), 20u);
  EXPECT_LT(reference.back(), reference.front() - 0.5) << "the loss should fall";

  struct Case {
    std::string name;
    MeshConfig mesh;
    std::vector<ShardingRule> activations = {};
    std::string remat = "none";  // a RematPolicy preset or names
  };
  const std::vector<Case> cases = {
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
  for (const Case& c : cases) {
    TrainOptions o;
    o.mesh = c.mesh;
    RunConfig config = Micro();
    config.activations = c.activations;
    const RematPolicy remat = ParseRematPolicy(c.remat, c.name);
    config.train.remat = remat.kind;
    config.train.remat_save = remat.save;
    const TrainResult r = Quiet(config, o, c.name);
    EXPECT_EQ(r.num_devices, c.mesh.num_devices());
    const std::vector<double> losses = Losses(r);
    ASSERT_EQ(losses.size(), reference.size()) << c.name;
    for (size_t i = 0; i < losses.size(); ++i) {
      EXPECT_NEAR(losses[i], reference[i], 1e-5 * std::abs(reference[i]))
          << c.name << " step " << i + 1;
    }
  }
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

TEST(TrainerTest, MemorizationReachesNearZeroLossSharded) {
  // Three passages packed in one row, fsdp=2 (segment ids split with the
  // rows). A segment-id sharding bug leaves the loss well above zero.
  const RunConfig config = LoadRunConfig(kSource / "configs/memorize.toml");
  ASSERT_EQ(config.mesh.num_devices(), 2);
  const TrainResult r = Quiet(config, {}, "memorize");
  ASSERT_EQ(r.steps.size(), 300u);
  double best = r.steps.front().loss;
  for (const StepMetrics& m : r.steps) best = std::min(best, m.loss);
  std::printf("memorize: loss %.4f at step 1, %.4f at step 300 (best %.4f)\n",
              r.steps.front().loss, r.steps.back().loss, best);
  EXPECT_LT(r.steps.back().loss, 0.02);
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

std::string ErrorOf(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(TrainerTest, ASecondRunInTheSameOutDirContinuesInsteadOfStartingOver) {
  const RunConfig config = Micro();
  TrainOptions o;
  o.out = TempDir("again");
  o.steps = 4;
  std::ostringstream log1;
  Logged(config, o, log1);
  EXPECT_EQ(MetricSteps(o.out), (std::vector<int64_t>{1, 2, 3, 4}));

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
  const std::string model = ReadFileToString(o.out / "checkpoint" / "model.safetensors");
  std::ostringstream log3;
  EXPECT_TRUE(Logged(config, o, log3).steps.empty());
  EXPECT_NE(log3.str().find("already trained to step 6 of 6: nothing to do"), std::string::npos)
      << log3.str();
  EXPECT_EQ(ReadFileToString(o.out / "metrics.jsonl"), metrics);
  EXPECT_EQ(ReadFileToString(o.out / "checkpoint" / "model.safetensors"), model);

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
  const std::string own_model = ReadFileToString(second.out / "checkpoint" / "model.safetensors");
  second.resume = other;
  second.steps = 4;
  message = ErrorOf([&] { Logged(config, second, log); });
  EXPECT_NE(message.find("holds a checkpoint of its own"), std::string::npos) << message;
  EXPECT_EQ(ReadFileToString(second.out / "checkpoint" / "model.safetensors"), own_model);
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

// Issue 13's acceptance check for loop fusion: configs/tiny.toml itself (its
// model, batch 8 x seq 256 and 2x2 mesh), 50 steps through the trainer's own
// in-memory loop (TrainStepsInMemory, as `weft bench train` runs it) with
// compiler::FuseLoops on and off: every step's loss agrees within 1e-5
// relative. The fused program must really run fusions (the profile counts
// them) and the unfused one none, so the comparison is never of a program
// with itself. About 10 s per run on 2 cores.
TEST(TrainerTest, LoopFusionLeavesTinysFiftyLossesUnchanged) {
  const RunConfig tiny = LoadRunConfig(kSource / "configs/tiny.toml");
  constexpr int64_t kSteps = 50;
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

}  // namespace
}  // namespace weft
