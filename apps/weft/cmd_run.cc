// `weft run`: runs an HLO module end to end (propagate, partition, execute)
// on this process's devices, or on one device per rank under mpirun.
#include <cstdint>
#include <memory>
#include <optional>

#include "commands.h"
#include "weft/runtime/config.h"
#include "weft/runtime/run_command.h"

namespace weft::cli {

void AddRun(CLI::App& app) {
  auto* run = app.add_subcommand(
      "run",
      "Run an HLO module on the devices (threads, or one per rank under mpirun) with seeded "
      "random inputs; print per-device peak memory and collective bytes");
  auto opt = std::make_shared<runtime::RunCommandOptions>();
  run->add_option("file", opt->input, "HLO text module (shardings are completed if incomplete)")
      ->required();
  run->add_option("--seed", opt->seed,
                  "Seed of the random inputs (default 0): floats N(0, 1), pred a coin, integers "
                  "used as gather / scatter / dynamic-slice indices or conditional branch indices "
                  "uniform over the indexed extent (the branches) and 2 past each end, other "
                  "integers in [0, 3]");
  run->add_flag("--check", opt->check,
                "Also run the unsharded module on one device and print the maximum relative "
                "error per output; exit 3 if one exceeds 1e-5 (f32; 1e-2 for bf16 / f16 and for "
                "f32 results of a module that computes in bf16 or f16), times sqrt(n / 4096) where "
                "the module's longest sum adds n > 4096 terms. A module with manual "
                "regions (jax.shard_map), which has no unsharded run, is compared with its "
                "automatic parts run replicated");
  run->add_option("--num-devices", opt->num_devices,
                  "Devices (default: the ranks under mpirun, else what the shardings are "
                  "written for, else WEFT_NUM_DEVICES)");
  run->add_option("--max-iterations", opt->max_iterations,
                  "The most iterations one while loop may run before the run stops with an error "
                  "naming the loop (default 10000000)");
  auto timeout = std::make_shared<std::optional<int64_t>>();
  AddCollectiveTimeoutFlag(run, timeout.get());
  run->callback([opt, timeout] {
    SetAction([opt, timeout] {
      std::optional<runtime::ScopedConfigOverride> hold;
      HoldCollectiveTimeout(*timeout, hold);
      return runtime::RunRunCommand(*opt);
    });
  });
}

}  // namespace weft::cli
