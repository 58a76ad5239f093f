// `weft partition FILE.hlo [--num-partitions N] [-o OUT] [--xla-style]`:
// partitions a fully sharded HLO text module (e.g. the output of
// `weft propagate`) and prints the per-device program as HLO text.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>

namespace weft {

struct PartitionCommandOptions {
  std::string input;  // FILE.hlo
  // --num-partitions, at least 1 when given; unset: from the module / its
  // shardings.
  std::optional<int64_t> num_partitions;
  std::string output;           // -o: write here (temp file + rename); empty: stdout
  bool xla_style = false;       // print with XLA's default options (%names, layouts)
  std::ostream* out = nullptr;  // stdout when null
};

// Returns 0. Throws weft::Error for unreadable or invalid input (parse errors
// carry FILE:line:col) or shardings the partitioner cannot honour (naming the
// instruction); the CLI prints "error: ..." and exits 2.
int RunPartitionCommand(const PartitionCommandOptions& options);

}  // namespace weft
