// `weft train [CONFIG] [--mesh ..] [--steps N] [--grad-accum N]
// [--backend threads|mpi] [--resume DIR] [--init-from HF_DIR] [--out DIR]
// [--overwrite] [--no-shard-as]`: trains the
// Llama the config describes (train/trainer.h). Without CONFIG: configs/tiny.toml.
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "commands.h"
#include "weft/base/data_files.h"
#include "weft/base/error.h"
#include "weft/runtime/comm_mpi.h"
#include "weft/runtime/config.h"
#include "weft/train/program.h"
#include "weft/train/trainer.h"

namespace weft::cli {
namespace {

struct TrainFlags {
  std::string config = "configs/tiny.toml";
  std::string mesh;
  std::string dcn;
  std::string backend = "threads";
  std::string resume, out, init_from;
  std::vector<std::string> data;
  std::optional<int64_t> steps;
  std::optional<int64_t> stop_after;
  std::optional<int64_t> grad_accum;
  std::optional<int64_t> validation_documents, validation_every;  // unset: the config's
  std::string precision;                                          // empty: train.precision
  std::optional<int64_t> collective_timeout;                      // seconds
  bool overwrite = false;
  bool no_shard_as = false;
  bool no_progress = false;
};

// The number of processes a launcher (mpirun, srun) started in this job, if
// this process was started by one.
std::optional<int64_t> LauncherWorldSize() {
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "MPI_LOCALNRANKS"}) {
    if (const char* v = std::getenv(var)) {
      char* end = nullptr;
      const long long n = std::strtoll(v, &end, 10);
      if (end != v && *end == '\0' && n > 0) return n;
    }
  }
  return std::nullopt;
}

int RunTrain(const TrainFlags& f) {
  // Flags first: nothing is read or compiled for a command that will be refused.
  if (f.steps) {
    WEFT_CHECK(*f.steps >= 1,
               "--steps {}: give the run's total number of steps, at least 1 (leave --steps out "
               "to use the config's train.steps)",
               *f.steps);
  }
  if (f.stop_after) {
    WEFT_CHECK(*f.stop_after >= 1,
               "--stop-after {}: give at least 1 step (leave it out to run to the end)",
               *f.stop_after);
  }
  if (f.grad_accum) {
    WEFT_CHECK(*f.grad_accum >= 1,
               "--grad-accum {}: give the number of micro-batches each step's batch is split "
               "into, at least 1 (1: no accumulation; leave --grad-accum out to use the "
               "config's train.grad_accum_steps)",
               *f.grad_accum);
  }
  std::optional<runtime::ScopedConfigOverride> timeout;
  HoldCollectiveTimeout(f.collective_timeout, timeout);
  WEFT_CHECK(f.backend == "threads" || f.backend == "mpi",
             "--backend '{}': expected 'threads' or 'mpi'", f.backend);
  if (f.backend == "threads") {
    const std::optional<int64_t> ranks = LauncherWorldSize();
    WEFT_CHECK(!ranks || *ranks == 1,
               "this process is one of {} started by mpirun (or another launcher) but --backend "
               "is threads: that would be {} independent runs writing one directory. Add "
               "--backend mpi (one device per rank), or run weft train without mpirun",
               *ranks, *ranks);
  }
  const RunConfig config = LoadRunConfig(FindDataFile(f.config));
  TrainOptions o;
  if (!f.mesh.empty()) o.mesh = ParseMeshFlag(f.mesh);
  if (!f.dcn.empty()) o.mesh = ApplyDcnFlag(o.mesh ? *o.mesh : config.mesh, f.dcn);
  if (f.backend == "threads") {
    // In-process devices come from the mesh; a WEFT_NUM_DEVICES that says
    // otherwise is a mistake to point out, not to ignore.
    const int64_t mesh_devices = (o.mesh ? *o.mesh : config.mesh).num_devices();
    if (std::getenv(runtime::ConfigEnvVar(runtime::ConfigKey::kNumDevices).data())) {
      const int64_t env = runtime::CurrentConfig().num_devices;
      WEFT_CHECK(env == mesh_devices,
                 "WEFT_NUM_DEVICES={} but the mesh of {} ({}) has {} devices; weft train runs "
                 "one in-process device per mesh device: unset WEFT_NUM_DEVICES, or give a "
                 "--mesh of {} devices",
                 env, o.mesh ? "--mesh" : config.source, o.mesh ? f.mesh : "[mesh]", mesh_devices,
                 env);
    }
  }
  o.steps = f.steps;
  o.stop_after = f.stop_after;
  o.grad_accum = f.grad_accum;
  o.validation_documents = f.validation_documents;
  o.validation_every = f.validation_every;
  if (!f.precision.empty()) o.precision = ParsePrecision(f.precision, "--precision");
  o.overwrite = f.overwrite;
  for (const std::string& file : f.data) o.data_files.emplace_back(file);
  o.resume = f.resume;
  o.init_from = f.init_from;
  o.out = f.out;
  o.shard_as = !f.no_shard_as;
  o.progress = !f.no_progress;
  if (f.backend == "threads") {
    Train(config, o);
    return 0;
  }
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
  cmd->add_option("--mesh", f->mesh,
                  "Mesh axes, major to minor, e.g. fsdp=2,tensor=2: dcn, data, fsdp (the "
                  "batch split over them), tensor (replaces the config's [mesh] and [dcn])");
  cmd->add_option("--dcn", f->dcn,
                  "Slices each mesh axis spans, e.g. fsdp=2 (the --mesh sizes are then per "
                  "slice; replaces the config's [dcn])");
  cmd->add_option("--steps", f->steps, "Total steps of the run (default: train.steps)");
  cmd->add_option("--validation-documents", f->validation_documents,
                  "Documents held out of training, whose loss is reported (default: "
                  "train.validation_documents; 0: no validation)");
  cmd->add_option("--validation-every", f->validation_every,
                  "Steps between validation losses, reported after the last step too "
                  "(default: train.validation_every; 0: after the last step only)");
  cmd->add_option("--grad-accum", f->grad_accum,
                  "Gradient accumulation: run each step's batch as N micro-batches of "
                  "train.batch_size / N rows, one update per step (default: "
                  "train.grad_accum_steps)");
  cmd->add_option("--precision", f->precision,
                  "bf16 or f32: the mixed-precision policy (default: train.precision; when "
                  "the config does not say, a resumed run's own, else the one this CPU trains "
                  "fastest: bf16 with a bf16 unit (avx512_bf16, AMX), else f32)");
  cmd->add_option("--backend", f->backend,
                  "threads (default) or mpi (under mpirun, one "
                  "device per rank)");
  cmd->add_option("--data", f->data,
                  "UTF-8 text files to train on, one document each "
                  "(replaces the config's [data] source)");
  cmd->add_option("--resume", f->resume, "Resume from a run directory or its checkpoint/");
  cmd->add_option("--init-from", f->init_from,
                  "Fine-tune: start from a Hugging Face Llama directory's weights (its "
                  "config.json must match [model]; its tokenizer.model, if any, is used)");
  cmd->add_option("--out", f->out,
                  "Output directory (default runs/<config name>); when it holds a checkpoint, "
                  "the run continues from it");
  AddCollectiveTimeoutFlag(cmd, &f->collective_timeout);
  cmd->add_flag("--overwrite", f->overwrite,
                "Start over in --out even though it holds an earlier run (its checkpoint and "
                "metrics are replaced)");
  cmd->add_option("--stop-after", f->stop_after,
                  "Stop after this many steps of this invocation (checkpointing there); the "
                  "schedule still spans --steps");
  cmd->add_flag("--no-shard-as", f->no_shard_as,
                "Do not tie scan-backward gradient carries to the weights with shard_as");
  cmd->add_flag("--no-progress", f->no_progress, "No progress bar; log lines instead");
  cmd->callback([f] { SetAction([f] { return RunTrain(*f); }); });
}

}  // namespace weft::cli
