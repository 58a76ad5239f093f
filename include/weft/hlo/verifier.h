// HLO verifier: structural checks (definition order, parameters, names,
// called computations), the call graph (CheckCallGraph: no recursion, calls
// nested at most kMaxCallDepth deep) and shape inference per instruction,
// plus sharding validity. Messages name the instruction and, for parsed modules, its
// line:col: "7:3: 'd' (dot): result f32[4,8] does not match f32[4,16] inferred
// from the operands (...)".
#pragma once

#include <string>
#include <vector>

#include "weft/hlo/module.h"

namespace weft {

// Every problem found, in program order (empty: the module is valid).
std::vector<std::string> FindHloModuleProblems(const HloModule& module);

// Throws weft::Error with the first problem.
void VerifyHloModule(const HloModule& module);

}  // namespace weft
