#include "weft/spmd/propagate_command.h"

#include <cstdio>
#include <iostream>

#include "weft/base/atomic_file.h"
#include "weft/base/error.h"
#include "weft/hlo/parser.h"
#include "weft/hlo/printer.h"
#include "weft/spmd/sharding_propagation.h"

namespace weft {

std::vector<bool> ParseBoolList(std::string_view text, std::string_view flag) {
  std::vector<bool> values;
  if (text.empty()) return values;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = text.find(',', start);
    std::string_view item = text.substr(
        start, comma == std::string_view::npos ? std::string_view::npos : comma - start);
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
    if (item == "true" || item == "1") {
      values.push_back(true);
    } else if (item == "false" || item == "0") {
      values.push_back(false);
    } else {
      Fail("{}: '{}' is not a boolean; write true or false, comma-separated (e.g. true,false)",
           flag, item);
    }
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return values;
}

int RunPropagateCommand(const PropagateCommandOptions& options) {
  std::ostream& out = options.out ? *options.out : std::cout;
  std::unique_ptr<HloModule> module = ParseHloModuleFile(options.input);

  PropagationOptions propagation;
  if (!options.allow_output.empty()) {
    propagation.allow_spmd_sharding_propagation_to_output =
        ParseBoolList(options.allow_output, "--allow-output");
  }
  if (!options.allow_params.empty()) {
    propagation.allow_spmd_sharding_propagation_to_parameters =
        ParseBoolList(options.allow_params, "--allow-params");
  }
  propagation.replicate_unsharded = true;
  propagation.record_decisions = !options.explain.empty();
  PropagationResult result = PropagateShardings(*module, propagation);

  const std::string printed = PrintModule(
      *module, options.xla_style ? HloPrintOptions::XlaStyle() : HloPrintOptions::Canonical());
  if (!options.explain.empty()) {
    out << ExplainSharding(*module, result, options.explain);
  }
  if (options.output.empty()) {
    if (options.explain.empty()) out << printed;
    return 0;
  }
  WriteFileAtomically(options.output, printed, OutputTarget::kUserPath);
  return 0;
}

}  // namespace weft
