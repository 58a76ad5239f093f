// HLO text printer. The canonical form (default options) is what
// ParseHloModule reads back to an identical module, and what
// print(parse(text)) returns for any accepted text:
//
//   HloModule m, num_partitions=4
//
//   add {
//     x = f32[] parameter(0)
//     y = f32[] parameter(1)
//     ROOT sum = f32[] add(x, y)
//   }
//
//   ENTRY main {
//     p = f32[8,16] parameter(0), sharding={devices=[4,1]<=[4]}
//     ...
//   }
//
// XlaStyle() prints what XLA's default HloPrintOptions print (%names,
// operand shapes, layouts, computation signatures); it parses back too.
#pragma once

#include <string>

#include "weft/hlo/module.h"

namespace weft {

struct HloPrintOptions {
  bool print_percent = false;         // "%name"
  bool print_operand_shapes = false;  // "add(f32[4] x, f32[4] y)"
  bool print_layout = false;          // "f32[4,8]{1,0}"
  bool print_program_shape = false;   // "main (p: f32[4]) -> f32[4] {" and entry layout

  static HloPrintOptions Canonical() { return {}; }
  static HloPrintOptions XlaStyle() { return {true, true, true, true}; }
};

std::string PrintModule(const HloModule& module, const HloPrintOptions& options = {});
std::string PrintComputation(const HloComputation& computation,
                             const HloPrintOptions& options = {});
// One instruction line without indentation or trailing newline.
std::string PrintInstruction(const HloInstruction& instruction,
                             const HloPrintOptions& options = {});
// Attribute syntax pieces, shared with error messages.
std::string ReplicaGroupsToString(const std::vector<std::vector<int64_t>>& groups);
std::string PaddingToString(const std::vector<PadDim>& padding);

}  // namespace weft
