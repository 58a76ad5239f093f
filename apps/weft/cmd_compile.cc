// `weft propagate`, `weft partition` and `weft compile`: the compiler passes
// on HLO text files.
#include <memory>

#include "commands.h"
#include "weft/base/limits.h"
#include "weft/compiler/compile_command.h"
#include "weft/spmd/partition_command.h"
#include "weft/spmd/propagate_command.h"

namespace weft::cli {

void AddCompile(CLI::App& app) {
  auto* prop = app.add_subcommand(
      "propagate",
      "Complete the sharding annotations of an HLO module (GSPMD semantics, with shard_as / "
      "shard_like groups) and print it with every sharding");
  auto popt = std::make_shared<PropagateCommandOptions>();
  prop->add_option("file", popt->input, "HLO text module")->required();
  prop->add_option("--allow-output", popt->allow_output,
                   "Allow propagation to the outputs: true, false, or one per output tuple "
                   "element (true,false,...)");
  prop->add_option("--allow-params", popt->allow_params,
                   "Allow propagation to the parameters: true, false, one per parameter, or one "
                   "per element of a single tuple parameter (as XLA reads them)");
  prop->add_option("-o,--output", popt->output, "Write the module here instead of stdout");
  prop->add_option("--explain", popt->explain,
                   "Print the chain of decisions that gave this instruction its sharding");
  prop->add_flag("--xla-style", popt->xla_style, "Print with XLA's default options");
  prop->callback([popt] { SetAction([popt] { return RunPropagateCommand(*popt); }); });

  auto* part = app.add_subcommand(
      "partition",
      "Partition a fully sharded HLO module into the per-device (SPMD) program and print it");
  auto qopt = std::make_shared<PartitionCommandOptions>();
  part->add_option("file", qopt->input, "HLO text module with a sharding on every instruction")
      ->required();
  part->add_option("--num-partitions", qopt->num_partitions,
                   "Number of devices, at most 65536 (default: from the module or its "
                   "shardings)");
  part->add_option("-o,--output", qopt->output, "Write the program here instead of stdout");
  part->add_flag("--xla-style", qopt->xla_style, "Print with XLA's default options");
  part->callback([qopt] { SetAction([qopt] { return RunPartitionCommand(*qopt); }); });

  auto* comp = app.add_subcommand(
      "compile",
      "Compile an HLO module for N devices (propagate shardings if needed, partition, "
      "optionally fuse) and print the per-device program, then a summary as // comments");
  auto copt = std::make_shared<compiler::CompileCommandOptions>();
  comp->add_option("file", copt->input, "HLO text module")->required();
  comp->add_option("--num-devices", copt->num_devices,
                   "Number of devices, 1 to 65536 (default: the count the module's shardings "
                   "are written for, 1 when it has none)")
      ->check(CLI::Range(int64_t{1}, kMaxDevices));
  comp->add_flag("--fuse", copt->fuse, "Run loop fusion on the per-device program");
  comp->add_option("-o,--out", copt->output,
                   "Write the program here (whole: a temporary file renamed) instead of stdout");
  comp->add_flag("--xla-style", copt->xla_style, "Print with XLA's default options");
  comp->callback([copt] { SetAction([copt] { return compiler::RunCompileCommand(*copt); }); });
}

}  // namespace weft::cli
