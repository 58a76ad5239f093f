// `weft propagate FILE.hlo [--allow-output=BOOLS] [--allow-params=BOOLS]
//  [-o OUT] [--explain NAME]`: propagates shardings through an HLO text
// module and prints it with a sharding on every instruction.
#pragma once

#include <iosfwd>
#include <string>
#include <string_view>
#include <vector>

namespace weft {

struct PropagateCommandOptions {
  std::string input;            // FILE.hlo
  std::string allow_output;     // "true", "false", "true,false"; empty: false
  std::string allow_params;     // same, per entry parameter
  std::string output;           // -o: write here (temp file + rename); empty: stdout
  std::string explain;          // --explain NAME: print the decision chain of NAME
  bool xla_style = false;       // print with XLA's default options (%names, layouts)
  std::ostream* out = nullptr;  // stdout when null
};

// "true" / "false" / "1" / "0", comma-separated. Throws weft::Error naming
// `flag` for anything else.
std::vector<bool> ParseBoolList(std::string_view text, std::string_view flag);

// Returns 0. Throws weft::Error for unreadable or invalid input (parse
// errors carry FILE:line:col), bad flags, or conflicting shard_as groups;
// the CLI prints "error: ..." and exits 2.
int RunPropagateCommand(const PropagateCommandOptions& options);

}  // namespace weft
