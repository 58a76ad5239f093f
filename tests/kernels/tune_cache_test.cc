// The tune cache: entries round-trip and steer the kernels; corrupted,
// missing and stale files give a warning and the heuristic, never a crash or
// a wrong result.
#include "weft/kernels/tune_cache.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "attention_reference.h"
#include "weft/kernels/attention.h"
#include "weft/kernels/simd.h"

namespace weft::kernels {
namespace {

using testing::RandomVector;

class TuneCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ =
        std::filesystem::temp_directory_path() / ("weft_tune_test_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
    // A fresh file per test: warnings are printed once per message.
    path_ = dir_ / (std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()) +
                    ".json");
    setenv("WEFT_TUNE_CACHE", path_.c_str(), 1);
  }
  void TearDown() override {
    unsetenv("WEFT_TUNE_CACHE");
    std::filesystem::remove_all(dir_);
  }
  std::filesystem::path dir_, path_;
};

// A small causal forward against the reference; returns the forward's tiles.
TileSizes RunAndCheck(uint32_t seed) {
  AttentionDims d{1, 1, 1, 128, 128, 32, 32};
  std::mt19937 rng(seed);
  auto q = RandomVector(128 * 32, rng), k = RandomVector(128 * 32, rng),
       v = RandomVector(128 * 32, rng);
  auto bm = BlockMask::Create(CausalMask(), 1, 1, 128, 128);
  AttentionOptions o;
  o.block_mask = &bm;
  std::vector<float> out(128 * 32), lse(128);
  FlexAttentionForward(d, q.data(), k.data(), v.data(), o, out.data(), lse.data());
  testing::RefMods mods;
  mods.mask = [](int64_t, int64_t, int64_t i, int64_t j) { return i >= j; };
  auto ref = testing::ReferenceAttention(d, q, k, v, 1.0 / std::sqrt(32.0), mods);
  EXPECT_LE(testing::RelativeError(out, ref.out), 1e-5);
  ConfigProblem p = ConfigProblem::From(d, o, PrimitiveType::kF32);
  p.isa = simd::GetPrimitives().isa;
  return ChooseTiles(p, o, false).tiles;
}

TEST_F(TuneCacheTest, EntryRoundTripsAndIsUsed) {
  AttentionDims d{1, 1, 1, 128, 128, 32, 32};
  auto bm = BlockMask::Create(CausalMask(), 1, 1, 128, 128);
  AttentionOptions o;
  o.block_mask = &bm;
  ConfigProblem p = ConfigProblem::From(d, o, PrimitiveType::kF32);
  p.isa = simd::GetPrimitives().isa;
  TuneEntry e;
  e.forward = {16, 32};
  e.backward = {32, 16};
  e.split = BackwardSplit::kSplit;
  StoreTuneEntry(TuneKey(p), e);
  auto back = LookupTuneEntry(TuneKey(p));
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->forward, e.forward);
  EXPECT_EQ(back->backward, e.backward);
  EXPECT_EQ(back->split, BackwardSplit::kSplit);
  EXPECT_EQ(RunAndCheck(51), (TileSizes{16, 32}));
  EXPECT_EQ(ChooseTiles(p, o, true).source, ConfigSource::kCache);
}

TEST_F(TuneCacheTest, CorruptedFileWarnsOnceAndUsesTheHeuristic) {
  std::ofstream(path_) << "{\"version\": 1, \"entries\": {\"x\": [1, 2";  // truncated
  ::testing::internal::CaptureStderr();
  TileSizes first = RunAndCheck(52);
  TileSizes second = RunAndCheck(53);
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(first, second);
  EXPECT_NE(err.find("unreadable"), std::string::npos) << err;
  EXPECT_EQ(err.find("unreadable"), err.rfind("unreadable")) << "warned twice: " << err;
  // Storing replaces the corrupted file with a valid one.
  StoreTuneEntry("k", TuneEntry{{16, 16}, {16, 16}});
  EXPECT_TRUE(LookupTuneEntry("k").has_value());
}

// WEFT_TUNE_CACHE=/dev/zero was read until memory ran out.
TEST_F(TuneCacheTest, ADeviceIsAnUnreadableCacheNotReadWhole) {
  setenv("WEFT_TUNE_CACHE", "/dev/zero", 1);
  ::testing::internal::CaptureStderr();
  RunAndCheck(55);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("tune cache /dev/zero is unreadable"), std::string::npos) << err;
  EXPECT_NE(err.find("is a character device"), std::string::npos) << err;
}

TEST_F(TuneCacheTest, MissingExplicitFileAndStaleEntryFallBack) {
  ::testing::internal::CaptureStderr();
  RunAndCheck(54);
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("does not exist"), std::string::npos) << err;

  // An entry whose tiles no longer fit (or break the mask rule) is stale.
  AttentionDims d{1, 1, 1, 128, 128, 32, 32};
  auto bm = BlockMask::Create(CausalMask(), 1, 1, 128, 128);
  AttentionOptions o;
  o.block_mask = &bm;
  ConfigProblem p = ConfigProblem::From(d, o, PrimitiveType::kF32);
  p.isa = simd::GetPrimitives().isa;
  StoreTuneEntry(TuneKey(p), TuneEntry{{48, 48}, {48, 48}});
  ::testing::internal::CaptureStderr();
  TileSizes t = RunAndCheck(55);
  err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("stale"), std::string::npos) << err;
  EXPECT_EQ(64 % t.block_m, 0);
}

}  // namespace
}  // namespace weft::kernels
