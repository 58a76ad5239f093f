#include "weft/train/checkpoint.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <random>

#include "weft/base/atomic_file.h"
#include "weft/base/crc32c.h"
#include "weft/base/error.h"

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
  // directory renamed aside with the new one not yet in place; a save marks
  // both as its own (a file naming them) before they take those names.
  const fs::path temp = dir_.parent_path() / "checkpoint.tmp-999-0";
  const fs::path old_aside = dir_.parent_path() / "checkpoint.old-999-1";
  fs::create_directories(temp);
  WriteFileAtomically(temp / ".weft-owned", "checkpoint.tmp-999-0");
  WriteFileAtomically(temp / "model.safetensors", "half");
  WriteFileAtomically(dir_ / ".weft-owned", "checkpoint.old-999-1");
  fs::rename(dir_, old_aside);
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
  EXPECT_NE(message.find("state.json is damaged: it is not valid JSON"), std::string::npos)
      << message;

  message = ErrorOf([&] { LoadCheckpoint(root_ / "nowhere"); });
  EXPECT_NE(message.find("no checkpoint at"), std::string::npos) << message;
  EXPECT_FALSE(CheckpointExists(root_ / "nowhere"));

  WriteFileAtomically(dir_ / "state.json", R"({"format": "weft-checkpoint", "version": "one"})");
  message = ErrorOf([&] { LoadCheckpoint(dir_); });
  EXPECT_NE(message.find("state.json is damaged: field \"version\" of the state is \"one\", "
                         "not an integer"),
            std::string::npos)
      << message;

  EXPECT_THROW(RngStateFromString("12 34", "state.json"), Error);
}

// Rewrites one field of state.json (as text, keeping everything else).
void EditState(const fs::path& dir, const std::string& from, const std::string& to) {
  std::string state = ReadFileToString(dir / "state.json");
  const size_t at = state.find(from);
  ASSERT_NE(at, std::string::npos) << from;
  state.replace(at, from.size(), to);
  WriteFileAtomically(dir / "state.json", state);
}

TEST_F(CheckpointTest, AUsersBackupBesideTheCheckpointIsNeverTouched) {
  for (bool exchange : {true, false}) {
    SCOPED_TRACE(exchange ? "exchange" : "fallback");
    fs::remove_all(dir_.parent_path());
    const Checkpoint first = RandomCheckpoint(11, 10);
    SaveCheckpoint(dir_, first, {.after_stage = {}, .exchange = exchange});
    // The user copies it aside under names a save's leftovers also use, and
    // keeps an unrelated folder of the same prefix.
    const fs::path backup = dir_.parent_path() / "checkpoint.old-backup";
    const fs::path notes = dir_.parent_path() / "checkpoint.tmp-notes";
    fs::copy(dir_, backup, fs::copy_options::recursive);
    fs::create_directories(notes);
    WriteFileAtomically(notes / "todo.txt", "keep me");
    // A backup renamed from a real leftover still names its old self: not ours.
    const fs::path renamed = dir_.parent_path() / "checkpoint.old-mine";
    fs::copy(dir_, renamed, fs::copy_options::recursive);
    WriteFileAtomically(renamed / ".weft-owned", "checkpoint.old-1234-0");
    for (int64_t step = 20; step <= 40; step += 10) {
      SaveCheckpoint(dir_, RandomCheckpoint(12 + step, step), {.after_stage = {}, .exchange = exchange});
    }
    ExpectSame(LoadCheckpoint(backup), first);
    EXPECT_EQ(ReadFileToString(notes / "todo.txt"), "keep me");
    EXPECT_TRUE(fs::exists(renamed / "state.json"));
    EXPECT_EQ(LoadCheckpoint(dir_).state.step, 40);
    // Nor is a backup "recovered" in place of a checkpoint that is missing.
    fs::remove_all(dir_);
    EXPECT_FALSE(CheckpointExists(dir_));
  }
}

TEST_F(CheckpointTest, FlippedSwappedOrRenamedTensorsAreNamed) {
  SaveCheckpoint(dir_, RandomCheckpoint(13, 7));
  const std::string pristine_model = ReadFileToString(dir_ / "model.safetensors");
  const std::string pristine_state = ReadFileToString(dir_ / "state.json");
  auto restore = [&] {
    WriteFileAtomically(dir_ / "model.safetensors", pristine_model);
    WriteFileAtomically(dir_ / "state.json", pristine_state);
  };
  std::mt19937_64 rng(std::random_device{}());

  // One flipped bit anywhere in a tensor's bytes (the data section is the tail).
  const SafetensorsFile parsed = ParseSafetensors(pristine_model, "model");
  int64_t data_bytes = 0;
  for (const auto& [name, t] : parsed.tensors) data_bytes += static_cast<int64_t>(t.bytes.size());
  for (int trial = 0; trial < 8; ++trial) {
    std::string model = pristine_model;
    const size_t at = model.size() - 1 - rng() % static_cast<size_t>(data_bytes);
    model[at] ^= static_cast<char>(1 << (rng() % 7));  // low bits: stays a finite float
    WriteFileAtomically(dir_ / "model.safetensors", model);
    const std::string message = ErrorOf([&] { LoadCheckpoint(dir_); });
    EXPECT_NE(message.find("model.safetensors is damaged: tensor '"), std::string::npos) << message;
    EXPECT_NE(message.find("has checksum crc32c:"), std::string::npos) << message;
  }
  restore();

  // Two tensors of one shape with their bytes swapped (sizes all still agree).
  {
    const std::string pristine_optimizer = ReadFileToString(dir_ / "optimizer.safetensors");
    SafetensorsFile optimizer = ParseSafetensors(pristine_optimizer, "optimizer");
    std::swap(optimizer.tensors.at("norm.m").bytes, optimizer.tensors.at("norm.v").bytes);
    WriteSafetensors(dir_ / "optimizer.safetensors", optimizer.tensors, optimizer.metadata);
    ASSERT_EQ(fs::file_size(dir_ / "optimizer.safetensors"), pristine_optimizer.size());
    const std::string message = ErrorOf([&] { LoadCheckpoint(dir_); });
    EXPECT_NE(message.find("optimizer.safetensors is damaged: tensor 'norm."), std::string::npos)
        << message;
    WriteFileAtomically(dir_ / "optimizer.safetensors", pristine_optimizer);
  }
  restore();

  // A renamed tensor: the file's name is not the one state.json records.
  {
    TensorMap tensors = parsed.tensors;
    auto node = tensors.extract("norm");
    node.key() = "nrom";
    tensors.insert(std::move(node));
    WriteSafetensors(dir_ / "model.safetensors", tensors, parsed.metadata);
    const std::string message = ErrorOf([&] { LoadCheckpoint(dir_); });
    EXPECT_NE(message.find("records tensor 'norm' but the file holds no tensor of that name"),
              std::string::npos)
        << message;
  }
  restore();
  ExpectSame(LoadCheckpoint(dir_), LoadCheckpoint(dir_));
}

TEST_F(CheckpointTest, NonFiniteTensorsAreNeitherLoadedNorWritten) {
  const Checkpoint good = RandomCheckpoint(14, 30);
  SaveCheckpoint(dir_, good);
  std::mt19937_64 rng(std::random_device{}());
  for (const char* file : {"model.safetensors", "optimizer.safetensors"}) {
    for (float bad : {std::numeric_limits<float>::quiet_NaN(),
                      std::numeric_limits<float>::infinity()}) {
      // A NaN written by another tool, with a checksum that agrees.
      Checkpoint poisoned = good;
      TensorMap& tensors = std::string(file) == "model.safetensors" ? poisoned.model
                                                                    : poisoned.optimizer;
      auto it = std::next(tensors.begin(), static_cast<long>(rng() % tensors.size()));
      const size_t element = rng() % static_cast<size_t>(it->second.num_elements());
      std::memcpy(it->second.bytes.data() + element * sizeof(float), &bad, sizeof(float));
      // Saving it is refused, and the good checkpoint stays.
      std::string message = ErrorOf([&] { SaveCheckpoint(dir_, poisoned); });
      EXPECT_NE(message.find("refusing to write checkpoint"), std::string::npos) << message;
      EXPECT_NE(message.find("tensor '" + it->first + "'"), std::string::npos) << message;
      ExpectSame(LoadCheckpoint(dir_), good);
      EXPECT_EQ(Siblings(), std::vector<std::string>{"checkpoint"});

      // Planted in the file (checksums recomputed to match): loading refuses it.
      const std::string saved_file = ReadFileToString(dir_ / file);
      const std::string saved_state = ReadFileToString(dir_ / "state.json");
      WriteSafetensors(dir_ / file, tensors, {{"format", "pt"}});
      const TensorMap& good_tensors =
          std::string(file) == "model.safetensors" ? good.model : good.optimizer;
      const uint32_t old_crc = Crc32c(good_tensors.at(it->first).bytes.data(),
                                      good_tensors.at(it->first).bytes.size());
      EditState(dir_, Crc32cText(old_crc),
                Crc32cText(Crc32c(it->second.bytes.data(), it->second.bytes.size())));
      message = ErrorOf([&] { LoadCheckpoint(dir_); });
      EXPECT_NE(message.find(std::string(file) + ": tensor '" + it->first +
                             "' holds a non-finite value (element " + std::to_string(element)),
                std::string::npos)
          << message;
      WriteFileAtomically(dir_ / file, saved_file);
      WriteFileAtomically(dir_ / "state.json", saved_state);
    }
  }
}

TEST_F(CheckpointTest, StateFieldsAreValidatedAndNamed) {
  SaveCheckpoint(dir_, RandomCheckpoint(15, 12));
  const std::string pristine = ReadFileToString(dir_ / "state.json");
  struct Case {
    std::string from, to, expect;
  };
  const std::vector<Case> cases = {
      {"\"step\": 12", "\"step\": -3", "\"step\" is -3; it counts steps done, from 0"},
      {"\"data_position\": 96", "\"data_position\": -1", "\"data_position\" is -1"},
      {"\"step\": 12", "\"step\": \"twelve\"",
       "field \"step\" of the state is \"twelve\", not an integer"},
      {"\"config_hash\": \"0123456789abcdef\"", "\"config_hash\": 5",
       "field \"config_hash\" of the state is 5, not a string"},
      {"\"step\": 12,", "", "the state has no field \"step\""},
  };
  for (const Case& c : cases) {
    WriteFileAtomically(dir_ / "state.json", pristine);
    EditState(dir_, c.from, c.to);
    const std::string message = ErrorOf([&] { LoadCheckpoint(dir_); });
    EXPECT_NE(message.find((dir_ / "state.json").string() + " is damaged: " + c.expect),
              std::string::npos)
        << message;
    EXPECT_EQ(message.find("json.exception"), std::string::npos) << message;
  }
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
