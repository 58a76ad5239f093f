// `weft bench train`: runs the weft binary on the micro config and checks
// that its JSON has every field with sane values (structure, not speed).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>

#include "run_weft.h"
#include "weft/base/thread_pool.h"

namespace {

using weft::testing::Output;
using weft::testing::RunWeft;

const std::string kMicro = std::string(WEFT_SOURCE_DIR) + "/tests/train/data/micro.toml";

TEST(BenchTrainTest, JsonOfTwoMicroStepsHasEveryFieldWithSaneValues) {
  // weft chooses libgomp's spin count where the environment does not.
  unsetenv("GOMP_SPINCOUNT");
  unsetenv("OMP_WAIT_POLICY");
  const Output o = RunWeft("bench train '" + kMicro + "' --steps 2 --warmup 1 --json");
  ASSERT_EQ(o.exit_code, 0) << o.err << o.out;
  const nlohmann::json j = nlohmann::json::parse(o.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << "not one JSON object:\n" << o.out;

  // The micro config: 4 devices (fsdp=2 x tensor=2), batch 4 x seq 64.
  EXPECT_EQ(j.at("devices"), 4);
  EXPECT_EQ(j.at("mesh"), "fsdp=2,tensor=2");
  EXPECT_EQ(j.at("batch_size"), 4);
  EXPECT_EQ(j.at("seq_len"), 64);
  EXPECT_EQ(j.at("tokens_per_step").get<double>(), 256);
  EXPECT_EQ(j.at("warmup_steps"), 1);
  EXPECT_EQ(j.at("steps"), 2);
  ASSERT_EQ(j.at("step_seconds").size(), 2u);
  for (const auto& s : j.at("step_seconds")) EXPECT_GT(s.get<double>(), 0);
  const double median = j.at("step_seconds_median");
  EXPECT_LE(j.at("step_seconds_min").get<double>(), median);

  const double tokens_per_s = j.at("tokens_per_s");
  EXPECT_GT(tokens_per_s, 0);
  EXPECT_NEAR(tokens_per_s, 256 / median, 1e-6 * tokens_per_s);
  EXPECT_GE(j.at("tokens_per_s_best").get<double>(), tokens_per_s);

  // Model FLOPs, by the stated formula on micro's sizes: dim 32, 2 layers,
  // 4 heads of 8, 2 KV heads, ffn 64, vocab 384.
  const double dim = 32, hd = 8, layers = 2, heads = 4, kv_heads = 2, ffn = 64, vocab = 384;
  const double matmul_params =
      layers * (2 * dim * heads * hd + 2 * dim * kv_heads * hd + 3 * dim * ffn) + dim * vocab;
  const double attention = 3 * layers * 2 * 4 * heads * (64.0 * 65 / 2) * 2 * hd;
  EXPECT_DOUBLE_EQ(j.at("model_flops_per_step").get<double>(), 6 * matmul_params * 256 + attention);
  EXPECT_FALSE(j.at("model_flops_formula").get<std::string>().empty());

  const auto& peak = j.at("peak");
  EXPECT_FALSE(peak.at("isa").get<std::string>().empty());
  EXPECT_GE(peak.at("threads").get<int>(), 1);
  EXPECT_GT(peak.at("gflops_before").get<double>(), 0);
  EXPECT_GT(peak.at("gflops_after").get<double>(), 0);
  EXPECT_EQ(peak.at("gflops").get<double>(), std::max(peak.at("gflops_before").get<double>(),
                                                      peak.at("gflops_after").get<double>()));
  const double mfu = j.at("mfu");
  EXPECT_GT(mfu, 0);
  EXPECT_LE(mfu, 1);
  EXPECT_NEAR(
      mfu,
      j.at("model_flops_per_step").get<double>() / median / (peak.at("gflops").get<double>() * 1e9),
      1e-9);

  // The breakdown: every class, fractions summing to 1; on 4 devices with
  // profiling every kind of work shows up.
  EXPECT_TRUE(j.at("profile").get<bool>());
  const auto& b = j.at("breakdown");
  double fractions = 0, seconds = 0;
  for (const char* name :
       {"dot", "attention", "elementwise", "broadcast", "data_movement", "reduction", "collective",
        "fused_loops", "other_devices", "optimizer", "other"}) {
    ASSERT_TRUE(b.contains(name)) << name;
    const double f = b.at(name).at("fraction"), s = b.at(name).at("seconds_per_step");
    EXPECT_GE(f, 0) << name;
    EXPECT_LE(f, 1) << name;
    EXPECT_GE(s, 0) << name;
    fractions += f;
    seconds += s;
  }
  EXPECT_EQ(b.size(), 11u);
  // Device 0's thread runs other devices only where devices outnumber the
  // cores (LocalCluster::threads()).
  const double others = b.at("other_devices").at("seconds_per_step");
  if (j.at("devices").get<int64_t>() > weft::ThreadPool::Global().num_threads()) {
    EXPECT_GT(others, 0);
  } else {
    EXPECT_EQ(others, 0);
  }
  EXPECT_NEAR(fractions, 1.0, 1e-6);
  // The parts are disjoint pieces of the step, so they add up to its mean time.
  const double mean =
      (j.at("step_seconds")[0].get<double>() + j.at("step_seconds")[1].get<double>()) / 2;
  EXPECT_NEAR(seconds, mean, 0.02 * mean);
  for (const char* name :
       {"dot", "attention", "elementwise", "broadcast", "collective", "optimizer"}) {
    EXPECT_GT(b.at(name).at("seconds_per_step").get<double>(), 0) << name;
  }

  EXPECT_GT(j.at("instructions_per_step").get<double>(), 0);
  // The executor's buffer pool serves a step that repeats the last one:
  // micro's step fits the pool's smallest bound, so the timed steps (after a
  // warmup) ask the system for no fresh buffer at all.
  EXPECT_EQ(j.at("allocations_per_step").get<double>(), 0);
  EXPECT_EQ(j.at("allocated_bytes_per_step").get<double>(), 0);
  EXPECT_GE(j.at("minor_faults_per_step").get<double>(), 0);
  EXPECT_GE(j.at("major_faults_per_step").get<double>(), 0);
  EXPECT_GE(j.at("context_switches_per_step").get<double>(), 0);
  EXPECT_EQ(j.at("openmp_spin"), "2000");
  const int64_t peak_bytes = j.at("peak_bytes_per_device");
  EXPECT_GT(peak_bytes, 0);
  EXPECT_GE(j.at("max_rss_bytes").get<int64_t>(), peak_bytes);
  EXPECT_TRUE(std::isfinite(j.at("loss_first").get<double>()));
  EXPECT_GT(j.at("loss_last").get<double>(), 0);
}

// The environment's OpenMP settings win over weft's spin count.
TEST(BenchTrainTest, TheEnvironmentsOpenMpSpinCountIsKept) {
  setenv("GOMP_SPINCOUNT", "5000", 1);
  const Output spin =
      RunWeft("bench train '" + kMicro + "' --steps 1 --warmup 1 --json --no-profile");
  unsetenv("GOMP_SPINCOUNT");
  setenv("OMP_WAIT_POLICY", "passive", 1);
  const Output passive =
      RunWeft("bench train '" + kMicro + "' --steps 1 --warmup 1 --json --no-profile");
  unsetenv("OMP_WAIT_POLICY");
  ASSERT_EQ(spin.exit_code, 0) << spin.err << spin.out;
  ASSERT_EQ(passive.exit_code, 0) << passive.err << passive.out;
  EXPECT_EQ(nlohmann::json::parse(spin.out).at("openmp_spin"), "5000");
  EXPECT_EQ(nlohmann::json::parse(passive.out).at("openmp_spin"), "OMP_WAIT_POLICY=passive");
}

TEST(BenchTrainTest, NoWarmupIsRefusedNamingTheFlag) {
  const Output o = RunWeft("bench train '" + kMicro + "' --warmup 0 --json");
  EXPECT_EQ(o.exit_code, 2) << o.err;
  EXPECT_NE(o.err.find("--warmup 0"), std::string::npos) << o.err;
  EXPECT_TRUE(o.out.empty()) << o.out;
}

// --top N: device 0's slowest instructions, slowest first, each named once
// with a class of the breakdown; their times fit in the step.
TEST(BenchTrainTest, TopListsTheSlowestInstructionsWithinTheStep) {
  const Output o = RunWeft("bench train '" + kMicro + "' --steps 2 --warmup 1 --top 5 --json");
  ASSERT_EQ(o.exit_code, 0) << o.err << o.out;
  const nlohmann::json j = nlohmann::json::parse(o.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << o.out;
  const nlohmann::json& top = j.at("top");
  ASSERT_EQ(top.size(), 5u);
  double sum = 0, previous = 1e300;
  std::set<std::string> names;
  for (const nlohmann::json& t : top) {
    const double s = t.at("seconds_per_step").get<double>();
    EXPECT_GT(s, 0) << t.dump();
    EXPECT_LE(s, previous) << "not slowest first: " << top.dump();
    previous = s;
    sum += s;
    EXPECT_FALSE(t.at("name").get<std::string>().empty());
    EXPECT_FALSE(t.at("shape").get<std::string>().empty());
    EXPECT_TRUE(names.insert(t.at("name").get<std::string>()).second) << top.dump();
    EXPECT_TRUE(j.at("breakdown").contains(t.at("class").get<std::string>())) << t.dump();
  }
  EXPECT_LE(sum, j.at("step_seconds_median").get<double>() * 1.5);
}

TEST(BenchTrainTest, TopWithoutTheProfileIsRefused) {
  const Output o = RunWeft("bench train '" + kMicro + "' --top 3 --no-profile");
  EXPECT_EQ(o.exit_code, 2) << o.err;
  EXPECT_NE(o.err.find("--no-profile"), std::string::npos) << o.err;
  EXPECT_TRUE(o.out.empty()) << o.out;
}

}  // namespace
