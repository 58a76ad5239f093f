#include "weft/train/checkpoint.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <random>

#include "weft/base/error.h"
#include "weft/base/atomic_file.h"

namespace weft {
namespace {

namespace fs = std::filesystem;

Checkpoint RandomCheckpoint(uint64_t seed, int64_t step) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal;
  auto floats = [&](size_t n) {
    std::vector<float> v(n);
    for (auto& x : v) x = normal(rng);
    return v;
  };
  Checkpoint checkpoint;
  checkpoint.model["tok_embeddings"] = HostTensor::F32({16, 8}, floats(128));
  checkpoint.model["layers.0.attention.wq"] = HostTensor::F32({8, 8}, floats(64));
  checkpoint.model["norm"] = HostTensor::F32({8}, floats(8));
  for (const auto& [name, tensor] : checkpoint.model) {
    checkpoint.optimizer[name + ".m"] =
        HostTensor::F32(tensor.shape, floats(tensor.num_elements()));
    checkpoint.optimizer[name + ".v"] =
        HostTensor::F32(tensor.shape, floats(tensor.num_elements()));
  }
  std::mt19937_64 trainer_rng(seed * 7 + 1);
  trainer_rng.discard(static_cast<unsigned long long>(step));
  checkpoint.state.step = step;
  checkpoint.state.rng_state = RngStateToString(trainer_rng);
  checkpoint.state.data_position = step * 8;
  checkpoint.state.config_hash = "0123456789abcdef";
  checkpoint.state.extra = {{"loss", "2.25"}};
  return checkpoint;
}

void ExpectSame(const Checkpoint& a, const Checkpoint& b) {
  EXPECT_EQ(a.model, b.model);
  EXPECT_EQ(a.optimizer, b.optimizer);
  EXPECT_EQ(a.state, b.state);
}

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (fs::temp_directory_path() / "weft_ckpt_XXXXXX").string();
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    root_ = pattern;
    dir_ = root_ / "run" / "checkpoint";
  }
  void TearDown() override { fs::remove_all(root_); }
  // Entries beside the checkpoint: only the checkpoint itself should remain.
  std::vector<std::string> Siblings() const {
    std::vector<std::string> names;
    for (const auto& entry : fs::directory_iterator(dir_.parent_path())) {
      names.push_back(entry.path().filename().string());
    }
    return names;
  }
  std::string ErrorOf(const std::function<void()>& fn) {
    try {
      fn();
    } catch (const Error& error) {
      return error.what();
    }
    return "";
  }
  fs::path root_, dir_;
};

TEST_F(CheckpointTest, RoundTripsTensorsAndState) {
  Checkpoint saved = RandomCheckpoint(1, 120);
  SaveCheckpoint(dir_, saved);
  EXPECT_TRUE(CheckpointExists(dir_));
  Checkpoint loaded = LoadCheckpoint(dir_, "0123456789abcdef");
  ExpectSame(saved, loaded);
  // The generator resumes exactly where it was.
  std::mt19937_64 expected(1 * 7 + 1);
  expected.discard(120);
  std::mt19937_64 resumed = RngStateFromString(loaded.state.rng_state, "state.json");
  for (int i = 0; i < 5; ++i) EXPECT_EQ(resumed(), expected());
  EXPECT_EQ(Siblings(), std::vector<std::string>{"checkpoint"});
  // The files are plain safetensors.
  EXPECT_EQ(ReadSafetensors(dir_ / "model.safetensors").tensors, saved.model);
}

TEST_F(CheckpointTest, ReplacesThePreviousCheckpoint) {
  for (bool exchange : {true, false}) {
    SaveCheckpoint(dir_, RandomCheckpoint(2, 10), {.after_stage = {}, .exchange = exchange});
    Checkpoint newer = RandomCheckpoint(3, 20);
    SaveCheckpoint(dir_ / "", newer,
                   {.after_stage = {}, .exchange = exchange});  // trailing slash is the same dir
    ExpectSame(LoadCheckpoint(dir_), newer);
    EXPECT_EQ(Siblings(), std::vector<std::string>{"checkpoint"});
  }
}

TEST_F(CheckpointTest, AFailureMidWriteKeepsTheLastCheckpoint) {
  for (bool exchange : {true, false}) {
    for (std::string_view failing :
         {"model.safetensors", "optimizer.safetensors", "state.json", "synced"}) {
      SCOPED_TRACE(std::string(failing) + (exchange ? " exchange" : " fallback"));
      Checkpoint old = RandomCheckpoint(4, 100);
      SaveCheckpoint(dir_, old, {.after_stage = {}, .exchange = exchange});
      CheckpointSaveOptions crash{.after_stage =
                                      [&](std::string_view stage) {
                                        if (stage == failing) throw Error("injected failure");
                                      },
                                  .exchange = exchange};
      EXPECT_THROW(SaveCheckpoint(dir_, RandomCheckpoint(5, 200), crash), Error);
      ExpectSame(LoadCheckpoint(dir_), old);
      EXPECT_EQ(Siblings(), std::vector<std::string>{"checkpoint"});
    }
  }
}

TEST_F(CheckpointTest, RecoversFromAHardCrash) {
  Checkpoint old = RandomCheckpoint(6, 50);
  SaveCheckpoint(dir_, old);
  // A crash leaves a half-written temporary and, in the fallback, the old
  // directory renamed aside with the new one not yet in place.
  fs::create_directories(dir_.parent_path() / "checkpoint.tmp-999-0");
  WriteFileAtomically(dir_.parent_path() / "checkpoint.tmp-999-0" / "model.safetensors", "half");
  fs::rename(dir_, dir_.parent_path() / "checkpoint.old-999-1");
  EXPECT_TRUE(CheckpointExists(dir_));
  ExpectSame(LoadCheckpoint(dir_), old);
  // The next save cleans up and puts the checkpoint back in its place.
  Checkpoint next = RandomCheckpoint(7, 60);
  SaveCheckpoint(dir_, next);
  ExpectSame(LoadCheckpoint(dir_), next);
  EXPECT_EQ(Siblings(), std::vector<std::string>{"checkpoint"});
}

TEST_F(CheckpointTest, DamageIsAClearError) {
  SaveCheckpoint(dir_, RandomCheckpoint(8, 1));
  std::string model = ReadFileToString(dir_ / "model.safetensors");
  WriteFileAtomically(dir_ / "model.safetensors", model.substr(0, model.size() - 10));
  std::string message = ErrorOf([&] { LoadCheckpoint(dir_); });
  EXPECT_NE(message.find("model.safetensors has " + std::to_string(model.size() - 10) +
                         " bytes, state.json recorded " + std::to_string(model.size())),
            std::string::npos)
      << message;

  WriteFileAtomically(dir_ / "state.json", "{\"format\": \"weft-checkpoint\", ");
  message = ErrorOf([&] { LoadCheckpoint(dir_); });
  EXPECT_NE(message.find("state.json is damaged: bad JSON"), std::string::npos) << message;

  message = ErrorOf([&] { LoadCheckpoint(root_ / "nowhere"); });
  EXPECT_NE(message.find("no checkpoint at"), std::string::npos) << message;
  EXPECT_FALSE(CheckpointExists(root_ / "nowhere"));

  WriteFileAtomically(dir_ / "state.json", R"({"format": "weft-checkpoint", "version": "one"})");
  message = ErrorOf([&] { LoadCheckpoint(dir_); });
  EXPECT_NE(message.find("state.json is damaged: version \"one\""), std::string::npos) << message;

  EXPECT_THROW(RngStateFromString("12 34", "state.json"), Error);
}

TEST_F(CheckpointTest, AnEmptyDirectoryMayBecomeTheCheckpoint) {
  fs::create_directories(dir_);
  Checkpoint checkpoint = RandomCheckpoint(10, 3);
  SaveCheckpoint(dir_, checkpoint);
  ExpectSame(LoadCheckpoint(dir_), checkpoint);
}

TEST_F(CheckpointTest, ConfigHashMismatchAndForeignDirectories) {
  SaveCheckpoint(dir_, RandomCheckpoint(9, 1));
  std::string message = ErrorOf([&] { LoadCheckpoint(dir_, "ffffffffffffffff"); });
  EXPECT_NE(message.find("config hash 0123456789abcdef"), std::string::npos) << message;

  fs::create_directories(root_ / "photos");
  WriteFileAtomically(root_ / "photos" / "cat.jpg", "meow");
  message = ErrorOf([&] { SaveCheckpoint(root_ / "photos", RandomCheckpoint(1, 1)); });
  EXPECT_NE(message.find("is not a checkpoint; refusing to replace it"), std::string::npos)
      << message;
  EXPECT_EQ(ReadFileToString(root_ / "photos" / "cat.jpg"), "meow");
}

}  // namespace
}  // namespace weft
