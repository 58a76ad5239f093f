#include "weft/train/checkpoint.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>

#include "error_of.h"
#include "scratch_dir.h"
#include "weft/base/atomic_file.h"
#include "weft/base/crc32c.h"
#include "weft/base/error.h"
#include "weft/models/llama.h"
#include "weft/models/llama_config.h"
#include "weft/runtime/comm_threads.h"

// Bytes this thread holds through operator new, and the most it held since
// the last PeakReset: what the memory test measures per device thread.
namespace {

using weft::testing::ErrorOf;
thread_local int64_t t_live = 0;
thread_local int64_t t_peak = 0;
constexpr size_t kHeader = 16;  // keeps operator new's 16-byte alignment
}  // namespace

void* operator new(size_t size) {
  void* block = std::malloc(size + kHeader);
  if (block == nullptr) throw std::bad_alloc();
  std::memcpy(block, &size, sizeof(size));
  t_live += static_cast<int64_t>(size);
  t_peak = std::max(t_peak, t_live);
  return static_cast<char*>(block) + kHeader;
}
void operator delete(void* data) noexcept {
  if (data == nullptr) return;
  char* block = static_cast<char*>(data) - kHeader;
  size_t size;
  std::memcpy(&size, block, sizeof(size));
  t_live -= static_cast<int64_t>(size);
  std::free(block);
}
void operator delete(void* data, size_t) noexcept { operator delete(data); }

namespace weft {
namespace {

namespace fs = std::filesystem;
using runtime::HostTensor;

// One process saving alone writes one file per part.
constexpr const char* kModelFile = "model-00001-of-00001.safetensors";
constexpr const char* kOptimizerFile = "optimizer-00001-of-00001.safetensors";

Checkpoint RandomCheckpoint(uint64_t seed, int64_t step) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal;
  auto floats = [&](size_t n) {
    std::vector<float> v(n);
    for (auto& x : v) x = normal(rng);
    return v;
  };
  Checkpoint checkpoint;
  checkpoint.model["tok_embeddings"] = F32Tensor({16, 8}, floats(128));
  checkpoint.model["layers.0.attention.wq"] = F32Tensor({8, 8}, floats(64));
  checkpoint.model["norm"] = F32Tensor({8}, floats(8));
  for (const auto& [name, tensor] : checkpoint.model) {
    checkpoint.optimizer[name + ".m"] =
        F32Tensor(tensor.dimensions(), floats(tensor.element_count()));
    checkpoint.optimizer[name + ".v"] =
        F32Tensor(tensor.dimensions(), floats(tensor.element_count()));
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
  EXPECT_TRUE(SameTensors(a.model, b.model));
  EXPECT_TRUE(SameTensors(a.optimizer, b.optimizer));
  EXPECT_EQ(a.state, b.state);
}

class CheckpointTest : public ::testing::Test {
 protected:
  // Entries beside the checkpoint: only the checkpoint itself should remain.
  std::vector<std::string> Siblings() const {
    std::vector<std::string> names;
    for (const auto& entry : fs::directory_iterator(dir_.parent_path())) {
      names.push_back(entry.path().filename().string());
    }
    return names;
  }
  weft::testing::ScratchDir scratch_{"weft_ckpt"};
  const fs::path root_ = scratch_.path();
  const fs::path dir_ = root_ / "run" / "checkpoint";
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
  EXPECT_TRUE(SameTensors(ReadSafetensors(dir_ / kModelFile).tensors, saved.model));
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
    for (std::string_view failing : {"shards", "state.json", "synced"}) {
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
  WriteFileAtomically(temp / kModelFile, "half");
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
  std::string model = ReadFileToString(dir_ / kModelFile);
  WriteFileAtomically(dir_ / kModelFile, model.substr(0, model.size() - 10));
  std::string message = ErrorOf([&] { LoadCheckpoint(dir_); });
  EXPECT_NE(message.find(std::string(kModelFile) + " is damaged: it has " +
                         std::to_string(model.size() - 10) + " bytes, state.json recorded " +
                         std::to_string(model.size())),
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

// state.json is read whole: a device there (/dev/zero was read until memory
// ran out), a directory or a file over 1 GiB is refused by name, unread.
TEST_F(CheckpointTest, AStateThatIsNoFileOrTooLargeIsRefusedUnread) {
  SaveCheckpoint(dir_, RandomCheckpoint(8, 1));
  const fs::path state = dir_ / "state.json";
  fs::remove(state);
  fs::create_symlink("/dev/zero", state);
  std::string message = ErrorOf([&] { LoadCheckpoint(dir_); });
  EXPECT_NE(message.find("checkpoint state " + state.string() + " is a character device"),
            std::string::npos)
      << message;
  fs::remove(state);
  fs::create_directory(state);
  message = ErrorOf([&] { LoadCheckpoint(dir_); });
  EXPECT_NE(message.find("checkpoint state " + state.string() + " is a directory"),
            std::string::npos)
      << message;
  fs::remove(state);
  WriteFileAtomically(state, "");
  fs::resize_file(state, (int64_t{1} << 30) + 1);  // sparse: nothing is written
  const int64_t live = t_live;
  t_peak = t_live;
  message = ErrorOf([&] { LoadCheckpoint(dir_); });
  EXPECT_NE(message.find("checkpoint state " + state.string() + " is 1.00 GiB"), std::string::npos)
      << message;
  EXPECT_NE(message.find("more than the 1.00 GiB"), std::string::npos) << message;
  EXPECT_LT(t_peak - live, int64_t{1} << 20);  // unread
}

// A save cleans up the siblings an earlier save left ("checkpoint.old-…",
// "checkpoint.tmp-…") when their .weft-owned marker holds their name; a
// marker larger than a name (a 2 GiB sparse file) is not ours and not read.
TEST_F(CheckpointTest, AHugeOwnerMarkerIsNotReadAndItsDirectoryIsKept) {
  SaveCheckpoint(dir_, RandomCheckpoint(8, 1));
  const fs::path sibling = dir_.parent_path() / "checkpoint.old-planted";
  fs::create_directories(sibling);
  WriteFileAtomically(sibling / ".weft-owned", "");
  fs::resize_file(sibling / ".weft-owned", int64_t{2} << 30);  // sparse
  const int64_t live = t_live;
  t_peak = t_live;
  SaveCheckpoint(dir_, RandomCheckpoint(9, 2));
  EXPECT_LT(t_peak - live, int64_t{64} << 20);  // the marker was not read
  EXPECT_TRUE(fs::exists(sibling / ".weft-owned"));
  EXPECT_EQ(LoadCheckpoint(dir_).state.step, 2);
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
      SaveCheckpoint(dir_, RandomCheckpoint(12 + step, step),
                     {.after_stage = {}, .exchange = exchange});
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

// A checkpoint directory that is a link (to a checkpoint elsewhere) is neither
// written through nor replaced; links planted at leftover names are neither
// followed nor removed.
TEST_F(CheckpointTest, LinksAreNeverWrittenThroughReplacedOrCleanedUp) {
  const fs::path elsewhere = root_ / "elsewhere";
  SaveCheckpoint(elsewhere, RandomCheckpoint(31, 10));
  const auto listing = [](const fs::path& dir) {
    std::vector<std::string> names;
    for (const auto& entry : fs::directory_iterator(dir)) {
      names.push_back(entry.path().filename().string());
    }
    std::sort(names.begin(), names.end());
    return names;
  };
  const std::vector<std::string> before = listing(elsewhere);
  fs::create_directories(dir_.parent_path());
  fs::create_symlink(elsewhere, dir_);
  const std::string message = ErrorOf([&] { SaveCheckpoint(dir_, RandomCheckpoint(32, 20)); });
  EXPECT_NE(message.find(dir_.string() + " is a symbolic link"), std::string::npos) << message;
  EXPECT_TRUE(fs::is_symlink(dir_));
  EXPECT_EQ(listing(elsewhere), before) << "no .weft-owned (or anything) written through the link";
  EXPECT_EQ(LoadCheckpoint(elsewhere).state.step, 10);
  // A link at a leftover's name, to a directory that looks owned, stays.
  fs::remove(dir_);
  const fs::path planted = dir_.parent_path() / "checkpoint.tmp-planted";
  const fs::path target = root_ / "target";
  fs::create_directories(target);
  WriteFileAtomically(target / ".weft-owned", "checkpoint.tmp-planted");
  WriteFileAtomically(target / "data", "keep");
  fs::create_symlink(target, planted);
  SaveCheckpoint(dir_, RandomCheckpoint(33, 30));
  EXPECT_TRUE(fs::is_symlink(planted));
  EXPECT_EQ(ReadFileToString(target / "data"), "keep");
  EXPECT_EQ(LoadCheckpoint(dir_).state.step, 30);
}

TEST_F(CheckpointTest, FlippedSwappedOrRenamedTensorsAreNamed) {
  SaveCheckpoint(dir_, RandomCheckpoint(13, 7));
  const std::string pristine_model = ReadFileToString(dir_ / kModelFile);
  const std::string pristine_state = ReadFileToString(dir_ / "state.json");
  auto restore = [&] {
    WriteFileAtomically(dir_ / kModelFile, pristine_model);
    WriteFileAtomically(dir_ / "state.json", pristine_state);
  };
  std::mt19937_64 rng(std::random_device{}());

  // One flipped bit anywhere in a tensor's bytes (the data section is the tail).
  const SafetensorsFile parsed = ParseSafetensors(pristine_model, "model");
  int64_t data_bytes = 0;
  for (const auto& [name, t] : parsed.tensors) data_bytes += t.byte_size();
  for (int trial = 0; trial < 8; ++trial) {
    std::string model = pristine_model;
    const size_t at = model.size() - 1 - rng() % static_cast<size_t>(data_bytes);
    model[at] ^= static_cast<char>(1 << (rng() % 7));  // low bits: stays a finite float
    WriteFileAtomically(dir_ / kModelFile, model);
    const std::string message = ErrorOf([&] { LoadCheckpoint(dir_); });
    EXPECT_NE(message.find(std::string(kModelFile) + " is damaged: tensor '"), std::string::npos)
        << message;
    EXPECT_NE(message.find("has checksum crc32c:"), std::string::npos) << message;
  }
  restore();

  // Two tensors of one shape with their bytes swapped (sizes all still agree).
  {
    const std::string pristine_optimizer = ReadFileToString(dir_ / kOptimizerFile);
    SafetensorsFile optimizer = ParseSafetensors(pristine_optimizer, "optimizer");
    std::swap(optimizer.tensors.at("norm.m"), optimizer.tensors.at("norm.v"));
    WriteSafetensors(dir_ / kOptimizerFile, optimizer.tensors, optimizer.metadata);
    ASSERT_EQ(fs::file_size(dir_ / kOptimizerFile), pristine_optimizer.size());
    const std::string message = ErrorOf([&] { LoadCheckpoint(dir_); });
    EXPECT_NE(message.find(std::string(kOptimizerFile) + " is damaged: tensor 'norm."),
              std::string::npos)
        << message;
    WriteFileAtomically(dir_ / kOptimizerFile, pristine_optimizer);
  }
  restore();

  // A renamed tensor: the file's name is not the one state.json records.
  {
    TensorMap tensors = parsed.tensors;
    auto node = tensors.extract("norm");
    node.key() = "nrom";
    tensors.insert(std::move(node));
    WriteSafetensors(dir_ / kModelFile, tensors, parsed.metadata);
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
  for (const char* file : {kModelFile, kOptimizerFile}) {
    for (float bad :
         {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
      // A NaN written by another tool, with a checksum that agrees.
      Checkpoint poisoned = good;  // copies share bytes: clone them before writing
      for (auto& [name, t] : poisoned.model) t = t.Clone();
      for (auto& [name, t] : poisoned.optimizer) t = t.Clone();
      TensorMap& tensors = std::string(file) == kModelFile ? poisoned.model : poisoned.optimizer;
      auto it = std::next(tensors.begin(), static_cast<long>(rng() % tensors.size()));
      const size_t element = rng() % static_cast<size_t>(it->second.element_count());
      it->second.mutable_data<float>()[element] = bad;
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
      const TensorMap& good_tensors = std::string(file) == kModelFile ? good.model : good.optimizer;
      const uint32_t old_crc =
          Crc32c(good_tensors.at(it->first).raw_data(), good_tensors.at(it->first).byte_size());
      EditState(dir_, Crc32cText(old_crc),
                Crc32cText(Crc32c(it->second.raw_data(), it->second.byte_size())));
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

// A version 2 checkpoint (whole tensors in two files, a checksum per tensor)
// written as weft wrote them before sharded saves: still read.
TEST_F(CheckpointTest, VersionTwoCheckpointsAreStillRead) {
  const Checkpoint saved = RandomCheckpoint(16, 9);
  fs::create_directories(dir_);
  WriteSafetensors(dir_ / "model.safetensors", saved.model, {{"format", "pt"}});
  WriteSafetensors(dir_ / "optimizer.safetensors", saved.optimizer, {{"format", "pt"}});
  std::string files;
  for (const auto& [file, tensors] : {std::pair{"model.safetensors", &saved.model},
                                      std::pair{"optimizer.safetensors", &saved.optimizer}}) {
    std::string sums;
    for (const auto& [name, t] : *tensors) {
      sums += fmt::format("{}\"{}\": \"{}\"", sums.empty() ? "" : ", ", name,
                          Crc32cText(Crc32c(t.raw_data(), t.byte_size())));
    }
    files += fmt::format("{}\"{}\": {{\"bytes\": {}, \"crc32c\": {{{}}}}}",
                         files.empty() ? "" : ", ", file, fs::file_size(dir_ / file), sums);
  }
  WriteFileAtomically(
      dir_ / "state.json",
      fmt::format(R"({{"format": "weft-checkpoint", "version": 2, "step": 9, "rng_state": "{}",
        "data_position": 72, "config_hash": "0123456789abcdef", "files": {{{}}},
        "extra": {{"loss": "2.25"}}}})",
                  saved.state.rng_state, files));
  ExpectSame(LoadCheckpoint(dir_), saved);
  // Its checksums are still checked.
  std::string model = ReadFileToString(dir_ / "model.safetensors");
  model[model.size() - 3] ^= 1;
  WriteFileAtomically(dir_ / "model.safetensors", model);
  EXPECT_NE(ErrorOf([&] { LoadCheckpoint(dir_); }).find("has checksum crc32c:"), std::string::npos);
}

// A tensor of `shape` with fresh random values, and the pieces of it that
// each of `devices` devices holds under a tiling of `tiles` per dim:
// row-major tile order, each tile padded to the tile shape (padding NaN, which
// must never reach a file).
struct TiledTensor {
  std::vector<int64_t> shape, tiles;
  std::vector<float> values;
  std::vector<std::vector<float>> tile_data;  // per tile, padded
  std::vector<TensorBox> boxes;
  std::vector<int64_t> tile_dims;
};

TiledTensor Tile(std::vector<int64_t> shape, std::vector<int64_t> tiles, std::mt19937_64& rng) {
  TiledTensor t{shape, tiles, {}, {}, {}, {}};
  std::normal_distribution<float> normal;
  int64_t n = 1, count = 1;
  for (size_t d = 0; d < shape.size(); ++d) {
    n *= shape[d];
    count *= tiles[d];
    t.tile_dims.push_back((shape[d] + tiles[d] - 1) / tiles[d]);
  }
  t.values.resize(static_cast<size_t>(n));
  for (float& v : t.values) v = normal(rng);
  int64_t tile_elements = 1;
  for (int64_t d : t.tile_dims) tile_elements *= d;
  for (int64_t k = 0; k < count; ++k) {
    TensorBox box;
    std::vector<int64_t> index(shape.size());
    for (size_t d = shape.size(), rest = static_cast<size_t>(k); d-- > 0;) {
      index[d] = static_cast<int64_t>(rest % static_cast<size_t>(tiles[d]));
      rest /= static_cast<size_t>(tiles[d]);
    }
    for (size_t d = 0; d < shape.size(); ++d) {
      const int64_t begin = std::min(index[d] * t.tile_dims[d], shape[d]);
      box.offset.push_back(begin);
      box.extent.push_back(std::min(shape[d], begin + t.tile_dims[d]) - begin);
    }
    std::vector<float> data(static_cast<size_t>(tile_elements),
                            std::numeric_limits<float>::quiet_NaN());
    for (int64_t i = 0; i < tile_elements; ++i) {
      int64_t global = 0, stride = 1, rest = i;
      bool inside = true;
      for (size_t d = shape.size(); d-- > 0;) {
        const int64_t at = rest % t.tile_dims[d];
        rest /= t.tile_dims[d];
        inside = inside && at < box.extent[d];
        global += (box.offset[d] + at) * stride;
        stride *= shape[d];
      }
      if (inside) data[static_cast<size_t>(i)] = t.values[static_cast<size_t>(global)];
    }
    t.tile_data.push_back(std::move(data));
    t.boxes.push_back(std::move(box));
  }
  return t;
}

SavePiece PieceOf(CheckpointPart part, const std::string& name, const TiledTensor& t, size_t k) {
  return {part,
          name,
          {PrimitiveType::kF32, t.shape},
          t.boxes[k],
          reinterpret_cast<const std::byte*>(t.tile_data[k].data()),
          t.tile_dims};
}

// Four devices save a model whose tensors are tiled 2 x 2, 4 x 1 and
// replicated (one owner), with uneven shapes (padding) and a tensor of
// several 4 MiB chunks; a fresh process reads any box of any tensor back.
class ShardedCheckpointTest : public CheckpointTest {
 protected:
  void SetUp() override {
    CheckpointTest::SetUp();
    std::mt19937_64 rng(std::random_device{}());
    tensors_.emplace("layers.wq", Tile({3, 37, 29}, {1, 2, 2}, rng));
    tensors_.emplace("big", Tile({2101, 2099}, {2, 2}, rng));  // 2 chunks per tile
    tensors_.emplace("rows", Tile({10, 6}, {4, 1}, rng));
    tensors_.emplace("norm", Tile({13}, {1}, rng));  // replicated: device 0 owns it
    tensors_.emplace("norm.m", Tile({13}, {1}, rng));
  }
  // Device `device`'s pieces: tile `device` of tiled tensors, replicated ones on device 0.
  std::vector<SavePiece> PiecesOf(int64_t device) const {
    std::vector<SavePiece> pieces;
    for (const auto& [name, t] : tensors_) {
      const CheckpointPart part =
          name.ends_with(".m") ? CheckpointPart::kOptimizer : CheckpointPart::kModel;
      if (t.tile_data.size() == 1 && device != 0) continue;
      pieces.push_back(PieceOf(part, name, t, t.tile_data.size() == 1 ? 0 : size_t(device)));
    }
    return pieces;
  }
  void SaveOnFourDevices(int64_t step, const CheckpointSaveOptions& options = {}) {
    TrainState state;
    state.step = step;
    state.config_hash = "0123456789abcdef";
    runtime::LocalCluster cluster(4);
    cluster.Run([&](int64_t device, runtime::Communicator& comm) {
      SaveShardedCheckpoint(dir_, PiecesOf(device), state, comm, options);
    });
  }
  std::map<std::string, TiledTensor> tensors_;
};

std::vector<float> Floats(const HostTensor& t) { return TensorToF32(t); }

TEST_F(ShardedCheckpointTest, EachDeviceWritesItsTilesAndAnyBoxReadsBack) {
  SaveOnFourDevices(30);
  // Each device wrote its own files; they are plain safetensors.
  for (int device = 1; device <= 4; ++device) {
    const SafetensorsFile file =
        ReadSafetensors(dir_ / fmt::format("model-{:05}-of-00004.safetensors", device));
    EXPECT_EQ(file.tensors.contains("norm"), device == 1);
    // Of the padded tiles, only the part inside the tensor.
    EXPECT_EQ(file.tensors.at("rows").dimensions(), (std::vector<int64_t>{device == 4 ? 1 : 3, 6}));
  }
  EXPECT_EQ(Siblings(), std::vector<std::string>{"checkpoint"});
  // The whole model in one process.
  const Checkpoint whole = LoadCheckpoint(dir_);
  EXPECT_EQ(whole.state.step, 30);
  for (const auto& [name, t] : tensors_) {
    const TensorMap& part = name.ends_with(".m") ? whole.optimizer : whole.model;
    EXPECT_EQ(Floats(part.at(name)), t.values) << name;
  }
  // Other tilings (a resume on another mesh): boxes into padded buffers,
  // whose padding is left alone.
  const CheckpointIndex index = OpenCheckpoint(dir_);
  std::mt19937_64 rng(std::random_device{}());
  for (const auto& [name, t] : tensors_) {
    std::vector<int64_t> tiles(t.shape.size(), 1);
    tiles[rng() % tiles.size()] = 3;
    const TiledTensor expected = Tile(t.shape, tiles, rng);
    for (size_t k = 0; k < expected.boxes.size(); ++k) {
      std::vector<float> got(expected.tile_data[k].size(), 7.0f);
      ReadTensorBox(
          index, name.ends_with(".m") ? CheckpointPart::kOptimizer : CheckpointPart::kModel, name,
          expected.boxes[k], std::as_writable_bytes(std::span<float>(got)), expected.tile_dims);
      // Element by element: inside the box the saved value, outside 7.
      for (size_t i = 0; i < got.size(); ++i) {
        int64_t global = 0, stride = 1, rest = static_cast<int64_t>(i);
        bool inside = true;
        for (size_t d = t.shape.size(); d-- > 0;) {
          const int64_t at = rest % expected.tile_dims[d];
          rest /= expected.tile_dims[d];
          inside = inside && at < expected.boxes[k].extent[d];
          global += (expected.boxes[k].offset[d] + at) * stride;
          stride *= t.shape[d];
        }
        const float want = inside ? t.values[static_cast<size_t>(global)] : 7.0f;
        ASSERT_EQ(got[i], want) << name << " box " << k << " element " << i;
      }
    }
  }
}

TEST_F(ShardedCheckpointTest, AFailureOnAnyDeviceKeepsTheLastCheckpoint) {
  SaveOnFourDevices(10);
  const Checkpoint before = LoadCheckpoint(dir_);
  for (std::string_view failing : {"shards", "state.json", "synced"}) {
    SCOPED_TRACE(failing);
    // Device 2 fails writing its shards; device 0 in the later stages.
    std::string message;
    try {
      SaveOnFourDevices(20, {.after_stage =
                                 [&](std::string_view stage) {
                                   if (stage == failing) throw Error("injected failure");
                                 },
                             .exchange = true});
    } catch (const Error& e) {
      message = e.what();
    }
    EXPECT_NE(message.find("injected failure"), std::string::npos) << message;
    ExpectSame(LoadCheckpoint(dir_), before);
    EXPECT_EQ(Siblings(), std::vector<std::string>{"checkpoint"});
  }
}

// A device whose tiles hold a NaN stops every device's save before anything
// is made on disk.
TEST_F(ShardedCheckpointTest, ANonFiniteTileOnAnyDeviceStopsTheSaveEverywhere) {
  SaveOnFourDevices(10);
  const Checkpoint before = LoadCheckpoint(dir_);
  tensors_.at("big").tile_data[3][17] = std::numeric_limits<float>::infinity();
  const std::string message = ErrorOf([&] { SaveOnFourDevices(20); });
  EXPECT_NE(message.find("refusing to write checkpoint"), std::string::npos) << message;
  EXPECT_NE(message.find("tensor 'big' (model) holds a non-finite value"), std::string::npos)
      << message;
  ExpectSame(LoadCheckpoint(dir_), before);
  EXPECT_EQ(Siblings(), std::vector<std::string>{"checkpoint"});
}

// A real crash: the process dies (SIGKILL) mid-save, on device 1 after it
// wrote its shards, or on device 0 after the index is written or synced.
TEST_F(ShardedCheckpointTest, AKilledSaveLeavesThePreviousCheckpointLoadable) {
  SaveOnFourDevices(10);
  const Checkpoint before = LoadCheckpoint(dir_);
  for (const char* crash : {"shards:1", "state.json:0", "synced:0"}) {
    SCOPED_TRACE(crash);
    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      setenv("WEFT_CRASH_AT", crash, 1);
      try {
        SaveOnFourDevices(20);
      } catch (...) {
        _exit(3);
      }
      _exit(0);  // not killed: the parent reports it
    }
    int status = 0;
    ASSERT_EQ(waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "status " << status;
    ExpectSame(LoadCheckpoint(dir_), before);
    // The next save cleans up what the crash left.
    SaveOnFourDevices(10);
    EXPECT_EQ(Siblings(), std::vector<std::string>{"checkpoint"});
  }
}

TEST_F(ShardedCheckpointTest, IndexDamageIsNamed) {
  SaveOnFourDevices(5);
  const std::string pristine = ReadFileToString(dir_ / "state.json");
  using Json = nlohmann::json;
  struct Case {
    std::function<void(Json&)> edit;
    std::string expect;
  };
  const std::vector<Case> cases = {
      {[](Json& j) { j["tensors"]["model"]["norm"]["slices"][0]["extent"][0] = 12; },
       "tensor 'norm': its slices cover 12 of its 13 elements"},
      {[](Json& j) { j["tensors"]["model"]["norm"]["slices"][0]["file"] = "../elsewhere"; },
       "names file \"../elsewhere\", not a file of the checkpoint directory"},
      {[](Json& j) { j["chunk_bytes"] = 0; }, "\"chunk_bytes\" is 0"},
      {[](Json& j) { j["tensors"]["model"]["big"]["slices"][2]["offset"][0] = 0; },
       "tensor 'big': the slices at [0,0] and [0,0] overlap"},
      {[](Json& j) { j["tensors"]["model"]["big"]["slices"][0]["crc32c"].erase(0); },
       "tensor 'big' needs 2 checksums"},
  };
  for (const Case& c : cases) {
    Json json = Json::parse(pristine);
    c.edit(json);
    WriteFileAtomically(dir_ / "state.json", json.dump(1));
    const std::string message = ErrorOf([&] { OpenCheckpoint(dir_); });
    EXPECT_NE(message.find("state.json is damaged: "), std::string::npos) << message;
    EXPECT_NE(message.find(c.expect), std::string::npos) << c.expect << "\n" << message;
  }
  WriteFileAtomically(dir_ / "state.json", pristine);
  fs::remove(dir_ / "model-00003-of-00004.safetensors");
  EXPECT_NE(ErrorOf([&] {
              OpenCheckpoint(dir_);
            }).find("model-00003-of-00004.safetensors, which is missing"),
            std::string::npos);
}

// configs/small.toml's weights on 4 devices (2 x 2 tiles of each matrix,
// norms on device 0), parameters and both moments: neither saving nor
// loading makes a device hold more than its own shard and one I/O buffer.
TEST_F(CheckpointTest, DevicesHoldTheirShardAndOneBufferWhileSavingAndLoading) {
  const RunConfig config = LoadRunConfig(fs::path(WEFT_SOURCE_DIR) / "configs/small.toml");
  std::mt19937_64 rng(std::random_device{}());
  std::map<std::string, TiledTensor> weights;
  for (const LlamaWeight& w : LlamaWeights(config.model)) {
    std::vector<int64_t> dims = w.shape.dimensions(), tiles(dims.size(), 1);
    if (w.name.find("norm") == std::string::npos)
      tiles[dims.size() - 1] = tiles[dims.size() - 2] = 2;
    weights.emplace(w.name, Tile(dims, tiles, rng));
  }
  constexpr int64_t kSlack = 1 << 20;  // names, the index, paths
  std::array<int64_t, 4> shard{}, save_extra{}, load_peak{};
  runtime::LocalCluster cluster(4);
  cluster.Run([&](int64_t device, runtime::Communicator& comm) {
    std::vector<SavePiece> pieces;
    for (const auto& [name, t] : weights) {
      if (t.boxes.size() == 1 && device != 0) continue;
      const size_t k = t.boxes.size() == 1 ? 0 : static_cast<size_t>(device);
      for (const char* suffix : {"", ".m", ".v"}) {
        pieces.push_back(PieceOf(*suffix ? CheckpointPart::kOptimizer : CheckpointPart::kModel,
                                 name + suffix, t, k));
        shard[size_t(device)] += static_cast<int64_t>(t.tile_data[k].size() * sizeof(float));
      }
    }
    TrainState state;
    state.step = 1;
    const int64_t before = t_live;
    t_peak = t_live;
    SaveShardedCheckpoint(dir_, pieces, state, comm);
    save_extra[size_t(device)] = t_peak - before;
    comm.Barrier();
    // A resume: this device's tiles, allocated and read.
    const CheckpointIndex index = OpenCheckpoint(dir_);
    const int64_t start = t_live;
    t_peak = t_live;
    std::vector<std::vector<float>> tiles;
    for (const SavePiece& p : pieces) {
      int64_t n = 1;
      for (int64_t d : p.buffer_dims) n *= d;
      tiles.emplace_back(static_cast<size_t>(n));
      ReadTensorBox(index, p.part, p.name, p.box, std::as_writable_bytes(std::span(tiles.back())),
                    p.buffer_dims);
      ASSERT_EQ(std::memcmp(tiles.back().data(), p.data, sizeof(float) * size_t(n)), 0) << p.name;
    }
    load_peak[size_t(device)] = t_peak - start;
  });
  for (size_t d = 0; d < 4; ++d) {
    const std::string figures = fmt::format("device {}: shard {} B, save +{} B, load peak {} B", d,
                                            shard[d], save_extra[d], load_peak[d]);
    std::printf("%s\n", figures.c_str());
    SCOPED_TRACE(figures);
    EXPECT_GT(shard[d], 20'000'000);  // a quarter of 27M parameters x 3, as floats
    EXPECT_LE(save_extra[d], kCheckpointChunkBytes + kSlack);
    EXPECT_LE(load_peak[d], shard[d] + kCheckpointChunkBytes + kSlack);
  }
}

}  // namespace
}  // namespace weft
