// Counting instructions of a module in tests (any test target can include it).
#pragma once

#include <cstdint>

#include "weft/hlo/module.h"

namespace weft::testing {

// The instructions of `module` (every computation) with opcode `op`.
inline int64_t CountOpcode(const HloModule& module, HloOpcode op) {
  int64_t n = 0;
  for (const HloComputation* c : module.computations()) {
    for (const HloInstruction* i : c->instructions()) n += i->opcode() == op;
  }
  return n;
}

}  // namespace weft::testing
