// `weft bench checkpoint`: see bench_checkpoint.h.
#include "bench_checkpoint.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>
#include <vector>

#include "timer.h"
#include "weft/base/atomic_file.h"
#include "weft/base/data_files.h"
#include "weft/base/error.h"
#include "weft/models/llama_config.h"
#include "weft/runtime/comm_threads.h"
#include "weft/runtime/executor_tensor.h"
#include "weft/train/checkpoint.h"
#include "weft/train/program.h"
#include "weft/train/run_dir.h"

namespace weft::bench {
namespace {

namespace fs = std::filesystem;

// The step program's weights and their shardings on `mesh`.
StepProgram ProgramOn(RunConfig config, const std::string& mesh) {
  config.mesh = ParseMeshFlag(mesh);
  StepProgramOptions po;
  po.expected_devices = config.mesh.num_devices();
  return BuildStepProgram(config, po);
}

// Each device's tiles of the parameters and both moments, random.
struct DeviceState {
  std::vector<runtime::HostTensor> tiles;  // per weight: param, m, v
  std::vector<SavePiece> pieces;
  int64_t bytes = 0;  // of the tiles this device saves
};

std::vector<DeviceState> MakeStates(const StepProgram& program) {
  const auto& c = program.compiled;
  const auto& weights = program.forward.weights;
  std::vector<DeviceState> states(static_cast<size_t>(program.num_devices));
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  for (int64_t d = 0; d < program.num_devices; ++d) {
    DeviceState& state = states[static_cast<size_t>(d)];
    state.tiles.reserve(weights.size() * 3);
    for (size_t k = 0; k < weights.size(); ++k) {
      const size_t leaf = StepProgram::kNumDataInputs + k;
      const auto& dims = weights[k].shape.dimensions();
      const bool owner = OwnsTile(c.input_shardings[leaf], dims, d);
      const TensorBox box = ShardBox(c.input_shardings[leaf], dims, d);
      for (const char* suffix : {"", ".m", ".v"}) {
        state.tiles.emplace_back(c.local_input_shapes[leaf]);
        runtime::HostTensor& t = state.tiles.back();
        float* values = t.mutable_data<float>();
        for (int64_t i = 0; i < t.element_count(); ++i) values[i] = normal(rng);
        if (!owner) continue;
        SavePiece& piece = state.pieces.emplace_back();
        piece.part = *suffix ? CheckpointPart::kOptimizer : CheckpointPart::kModel;
        piece.name = weights[k].name + suffix;
        piece.global = TensorSpec{PrimitiveType::kF32, dims};
        piece.box = box;
        piece.data = static_cast<const std::byte*>(t.raw_data());
        piece.buffer_dims = t.dimensions();
        state.bytes += box.num_elements() * 4;
      }
    }
  }
  return states;
}

// Seconds to read every device's tiles of `program` from the checkpoint.
double LoadSeconds(const fs::path& dir, const StepProgram& program) {
  const auto& c = program.compiled;
  const auto& weights = program.forward.weights;
  const double t0 = NowSeconds();
  runtime::LocalCluster cluster(program.num_devices);
  cluster.Run([&](int64_t device, runtime::Communicator&) {
    const CheckpointIndex index = OpenCheckpoint(dir);
    for (size_t k = 0; k < weights.size(); ++k) {
      const size_t leaf = StepProgram::kNumDataInputs + k;
      const auto& dims = weights[k].shape.dimensions();
      const TensorBox box = ShardBox(c.input_shardings[leaf], dims, device);
      for (const char* suffix : {"", ".m", ".v"}) {
        runtime::HostTensor t(c.local_input_shapes[leaf]);
        ReadTensorBox(
            index, *suffix ? CheckpointPart::kOptimizer : CheckpointPart::kModel,
            weights[k].name + suffix, box,
            {static_cast<std::byte*>(t.mutable_raw_data()), static_cast<size_t>(t.byte_size())},
            t.dimensions());
      }
    }
  });
  return NowSeconds() - t0;
}

// One stream of `bytes` in 4 MiB writes, fsynced; then read back the same way.
std::pair<double, double> DiskSeconds(const fs::path& path, int64_t bytes) {
  std::vector<char> block(static_cast<size_t>(kCheckpointChunkBytes), 'w');
  const double t0 = NowSeconds();
  {
    OutputFile out(path);
    for (int64_t done = 0; done < bytes; done += kCheckpointChunkBytes) {
      out.Write(block.data(), static_cast<size_t>(std::min(kCheckpointChunkBytes, bytes - done)));
    }
    out.SyncAndClose();
  }
  const double write = NowSeconds() - t0;
  const double t1 = NowSeconds();
  {
    InputFile in(path);
    for (int64_t done = 0; done < bytes; done += kCheckpointChunkBytes) {
      in.ReadAt(static_cast<uint64_t>(done), block.data(),
                static_cast<size_t>(std::min(kCheckpointChunkBytes, bytes - done)));
    }
  }
  const double read = NowSeconds() - t1;
  fs::remove(path);
  return {write, read};
}

int64_t DirectoryBytes(const fs::path& dir) {
  int64_t total = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    total += static_cast<int64_t>(entry.file_size());
  }
  return total;
}

}  // namespace

int RunCheckpointBench(const CheckpointBenchOptions& options) {
  const RunConfig config = LoadRunConfig(FindDataFile(options.config));
  const StepProgram program = ProgramOn(config, options.mesh);
  const std::string load_mesh = options.load_mesh.empty()
                                    ? fmt::format("fsdp={},tensor=1", program.num_devices)
                                    : options.load_mesh;
  const StepProgram other = ProgramOn(config, load_mesh);
  std::vector<DeviceState> states = MakeStates(program);

  fs::path root = options.dir;
  if (root.empty()) {
    std::string pattern = (fs::temp_directory_path() / "weft_bench_checkpoint_XXXXXX").string();
    WEFT_CHECK(mkdtemp(pattern.data()) != nullptr, "cannot create a directory in {}",
               fs::temp_directory_path().string());
    root = pattern;
  }
  CheckDirectoryWritable(root, "--dir");
  std::error_code error;
  fs::create_directories(root, error);
  WEFT_CHECK(!error, "--dir {}: cannot create it ({}); give a writable directory", root.string(),
             error.message());
  const fs::path dir = root / "checkpoint";
  TrainState train_state;
  train_state.step = 1;
  auto save = [&] {
    runtime::LocalCluster cluster(program.num_devices);
    cluster.Run([&](int64_t device, runtime::Communicator& comm) {
      SaveShardedCheckpoint(dir, states[static_cast<size_t>(device)].pieces, train_state, comm);
    });
  };
  save();  // the files exist from here on: a save replaces a checkpoint, as in training
  const int64_t bytes = DirectoryBytes(dir);
  double save_s = 1e300, write_s = 1e300, read_s = 1e300, load_same_s = 1e300, load_other_s = 1e300;
  for (int r = 0; r < std::max(1, options.reps); ++r) {
    const auto [write, read] = DiskSeconds(root / "sequential.bin", bytes);
    write_s = std::min(write_s, write);
    read_s = std::min(read_s, read);
    save_s = std::min(save_s, BestSeconds(1, save));
    load_same_s = std::min(load_same_s, LoadSeconds(dir, program));
    load_other_s = std::min(load_other_s, LoadSeconds(dir, other));
  }
  if (options.dir.empty()) fs::remove_all(root);

  const double mb = static_cast<double>(bytes) / 1e6;
  nlohmann::json out = {{"config", options.config},
                        {"mesh", options.mesh},
                        {"load_mesh", load_mesh},
                        {"devices", program.num_devices},
                        {"bytes", bytes},
                        {"disk_write_mb_per_s", mb / write_s},
                        {"disk_read_mb_per_s", mb / read_s},
                        {"save_mb_per_s", mb / save_s},
                        {"save_fraction_of_disk_write", write_s / save_s},
                        {"load_same_mesh_mb_per_s", mb / load_same_s},
                        {"load_other_mesh_mb_per_s", mb / load_other_s},
                        {"load_same_fraction_of_read", read_s / load_same_s},
                        {"load_other_fraction_of_read", read_s / load_other_s}};
  if (options.json) {
    fmt::print("{}\n", out.dump(2));
    return 0;
  }
  fmt::print(
      "checkpoint of {} ({} devices, {}): {:.1f} MB (parameters and AdamW moments, "
      "float32), best of {}\n",
      options.config, program.num_devices, options.mesh, mb, options.reps);
  fmt::print("  disk, one stream:      write {:8.1f} MB/s   read {:8.1f} MB/s (page cache)\n",
             mb / write_s, mb / read_s);
  fmt::print("  save ({} devices):      {:8.1f} MB/s   {:.2f} of the sequential write\n",
             program.num_devices, mb / save_s, write_s / save_s);
  fmt::print("  load, same mesh:       {:8.1f} MB/s   {:.2f} of the sequential read\n",
             mb / load_same_s, read_s / load_same_s);
  fmt::print("  load, {}: {:8.1f} MB/s   {:.2f} of the sequential read\n", load_mesh,
             mb / load_other_s, read_s / load_other_s);
  return 0;
}

}  // namespace weft::bench
