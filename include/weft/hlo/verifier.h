// HLO verifier: structural checks (definition order, parameters, names,
// called computations), the call graph (CheckCallGraph: no recursion, calls
// nested at most kMaxCallDepth deep) and shape inference per instruction,
// plus sharding validity. Messages name the instruction and, for parsed modules, its
// line:col: "7:3: 'd' (dot): result f32[4,8] does not match f32[4,16] inferred
// from the operands (...)".
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "weft/hlo/module.h"

namespace weft {

// Every problem found, in program order (empty: the module is valid).
std::vector<std::string> FindHloModuleProblems(const HloModule& module);

// Throws weft::Error with the first problem.
void VerifyHloModule(const HloModule& module);

// The device ids the module's instructions name, against a program on
// `num_devices` devices (`why` says where that count comes from, e.g.
// "--num-partitions 4"): sharding device lists (tiled over exactly those
// devices, a maximal device among them), replica groups (every id in range,
// each once, all covered, as the communicators need) and collective-permute
// pairs, read in the module's id modes (with num_partitions and
// replica_count both above 1, XLA's: a channel_id names partitions, none
// replicas, use_global_device_ids global ids). Throws weft::Error naming
// the first instruction at fault. The verifier applies the same rule to
// modules that declare num_partitions or replica_count, so every command
// refuses them at parse time; partition, compile and run check the count
// they partition for with this.
void CheckDeviceIds(const HloModule& module, int64_t num_devices, std::string_view why);

}  // namespace weft
