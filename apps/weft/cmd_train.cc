// `weft train [CONFIG] [--mesh ..] [--steps N] [--backend threads|mpi]
// [--resume DIR] [--out DIR] [--no-shard-as]`: trains the Llama the config
// describes (train/trainer.h). Without CONFIG: configs/tiny.toml.
#include <memory>
#include <string>
#include <vector>

#include "commands.h"
#include "weft/base/error.h"
#include "weft/runtime/comm_mpi.h"
#include "weft/train/program.h"
#include "weft/train/trainer.h"

namespace weft::cli {
namespace {

struct TrainFlags {
  std::string config = "configs/tiny.toml";
  std::string mesh;
  std::string backend = "threads";
  std::string resume, out;
  std::vector<std::string> data;
  int64_t steps = 0;
  int64_t stop_after = 0;
  bool no_shard_as = false;
  bool no_progress = false;
};

int RunTrain(const TrainFlags& f) {
  const RunConfig config = LoadRunConfig(f.config);
  TrainOptions o;
  if (!f.mesh.empty()) o.mesh = ParseMeshFlag(f.mesh);
  o.steps = f.steps;
  o.stop_after = f.stop_after;
  for (const std::string& file : f.data) o.data_files.emplace_back(file);
  o.resume = f.resume;
  o.out = f.out;
  o.shard_as = !f.no_shard_as;
  o.progress = !f.no_progress;
  if (f.backend == "threads") {
    Train(config, o);
    return 0;
  }
  WEFT_CHECK(f.backend == "mpi", "--backend '{}': expected 'threads' or 'mpi'", f.backend);
  return runtime::RunMpiMain([&](runtime::Communicator& comm) {
    TrainOptions mine = o;
    if (comm.device_id() != 0) mine.progress = false;
    TrainOnMpiRank(config, mine, comm);
  });
}

}  // namespace

void AddTrain(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "train",
      "Train a Llama on packed documents over a device mesh (default: configs/tiny.toml, "
      "fsdp=2 x tensor=2 on 4 in-process devices)");
  auto f = std::make_shared<TrainFlags>();
  cmd->add_option("config", f->config, "Run config (TOML); default configs/tiny.toml");
  cmd->add_option("--mesh", f->mesh, "Mesh axes, major to minor, e.g. fsdp=2,tensor=2 "
                                     "(replaces the config's [mesh])");
  cmd->add_option("--steps", f->steps, "Total steps of the run (default: train.steps)");
  cmd->add_option("--backend", f->backend, "threads (default) or mpi (under mpirun, one "
                                           "device per rank)");
  cmd->add_option("--data", f->data, "UTF-8 text files to train on, one document each "
                                     "(replaces the config's [data] source)");
  cmd->add_option("--resume", f->resume, "Resume from a run directory or its checkpoint/");
  cmd->add_option("--out", f->out, "Output directory (default runs/<config name>)");
  cmd->add_option("--stop-after", f->stop_after,
                  "Stop after this many steps of this invocation (checkpointing there); the "
                  "schedule still spans --steps");
  cmd->add_flag("--no-shard-as", f->no_shard_as,
                "Do not tie scan-backward gradient carries to the weights with shard_as");
  cmd->add_flag("--no-progress", f->no_progress, "No progress bar; log lines instead");
  cmd->callback([f] { SetAction([f] { return RunTrain(*f); }); });
}

}  // namespace weft::cli
