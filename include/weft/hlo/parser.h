// HLO text parser: XLA's module syntax for the ops weft supports. Accepts
// both the canonical form and XLA's default printing (%names, operand shapes,
// default layouts, computation signatures, metadata). Errors name line:col
// and what was expected:
//   "model.hlo:7:24: expected ',' or ')' in the operand list, found 'y'"
// After parsing, the module is verified (shape inference per instruction),
// so a shape mismatch is reported at the instruction's line:col too.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "weft/hlo/module.h"

namespace weft {

struct HloParseOptions {
  // Prefixes error locations, e.g. a file name. Empty: "line:col".
  std::string source_name;
  // Run VerifyHloModule on the result.
  bool verify = true;
  // The most device ids the module's shardings and iota replica groups may
  // expand to in all (8 bytes each). Identical sharding texts are expanded
  // once and shared, so real modules stay far below; distinct giant
  // shardings, one per line, are refused at the first one past it.
  int64_t max_expanded_device_ids = int64_t{1} << 26;  // 512 MiB
};

std::unique_ptr<HloModule> ParseHloModule(std::string_view text,
                                          const HloParseOptions& options = {});

// The HLO text module in file `path` (its errors located as path:line:col);
// an unreadable path is the user's error, naming it.
std::unique_ptr<HloModule> ParseHloModuleFile(const std::string& path);

// A shape on its own, e.g. "f32[4,8]" or "(f32[4]{0}, s32[])".
Shape ParseShape(std::string_view text);

}  // namespace weft
