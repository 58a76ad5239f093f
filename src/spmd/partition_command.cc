#include "weft/spmd/partition_command.h"

#include <cstdio>
#include <iostream>

#include "weft/base/atomic_file.h"
#include "weft/base/error.h"
#include "weft/hlo/parser.h"
#include "weft/hlo/printer.h"
#include "weft/spmd/spmd_partitioner.h"

namespace weft {

int RunPartitionCommand(const PartitionCommandOptions& options) {
  // The flag before the file is read.
  WEFT_CHECK(!options.num_partitions ||
                 (*options.num_partitions >= 1 && *options.num_partitions <= kMaxDevices),
             "--num-partitions must be between 1 and {} (leave it out for the module's count), "
             "got {}",
             kMaxDevices, options.num_partitions.value_or(0));
  std::unique_ptr<HloModule> module = ParseHloModuleFile(options.input);

  PartitionOptions partition;
  partition.num_partitions = options.num_partitions.value_or(0);
  std::unique_ptr<HloModule> partitioned = PartitionModule(*module, partition);
  const std::string printed = PrintModule(
      *partitioned, options.xla_style ? HloPrintOptions::XlaStyle() : HloPrintOptions::Canonical());

  if (options.output.empty()) {
    (options.out ? *options.out : std::cout) << printed;
    return 0;
  }
  WriteFileAtomically(options.output, printed, OutputTarget::kUserPath);
  return 0;
}

}  // namespace weft
