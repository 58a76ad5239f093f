// `weft propagate` and `weft partition`: the compiler passes on HLO text files.
#include <memory>

#include "commands.h"
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
                   "Allow propagation to the parameters: true, false, or one per parameter");
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
}

}  // namespace weft::cli
