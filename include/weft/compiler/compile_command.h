// `weft compile FILE.hlo [--num-devices N] [--fuse] [--out FILE] [--xla-style]`:
// compiles an HLO text module for N devices (compiler/compile.h: propagate
// shardings when some instruction has none, partition, and with --fuse loop
// fusion) and prints the per-device program as HLO text, which `weft run`
// and the parser read back, followed by a summary as HLO comments:
//
//   // weft compile: 4 devices, shardings propagated
//   // 23 instructions (entry 17), 2 fusions of 9 instructions (1 duplicated)
#pragma once

#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>

#include "weft/compiler/compile.h"

namespace weft::compiler {

struct CompileCommandOptions {
  std::string input;  // FILE.hlo
  // --num-devices, at least 1 when given; unset: the device count the
  // module's shardings are written for (ShardingDeviceCount), 1 when it has
  // none.
  std::optional<int64_t> num_devices;
  bool fuse = false;            // --fuse
  std::string output;           // --out: write here (temp file + rename); empty: stdout
  bool xla_style = false;       // print with XLA's default options (%names, layouts)
  std::ostream* out = nullptr;  // stdout when null
};

// The summary's lines ("// ..." each, newline-terminated) for `program`.
std::string CompileSummary(const CompiledProgram& program);

// Returns 0. Throws weft::Error for an unreadable or invalid input (parse
// errors carry FILE:line:col), a device count outside [1, kMaxDevices], a
// module sharded for another device count, or shardings the partitioner
// cannot honour; the CLI prints "error: ..." and exits 2.
int RunCompileCommand(const CompileCommandOptions& options);

}  // namespace weft::compiler
