// The compile pipeline: from a (partly) sharded HLO module to the program one
// device executes.
//
//   propagate shardings (when some instruction has none)
//     -> partition into the per-device (SPMD) program
//     -> remove the instructions no result needs
//     -> simplify (transposes that move no element become reshapes:
//        compiler/algebraic_simplifier.h)
//     -> merge duplicate collectives (compiler/collective_cse.h)
//     -> decompose collectives across slices (hierarchical_collectives.h)
//     -> combine independent small collectives (collective_combiner.h)
//     -> drop the fills of loop inits the loop overwrites before reading
//        (dead_loop_init.h)
//     -> fuse (CompileOptions::fuse: loop fusion, compiler/fusion.h)
//     -> schedule (compiler/schedule.h)
//     -> assign buffers
//
// `weft run`, `weft train`, `weft plan` and `weft compile` all compile
// through CompileForDevices, so the planner analyses and the executor runs the
// same per-device program.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "weft/compiler/algebraic_simplifier.h"
#include "weft/compiler/collective_combiner.h"
#include "weft/compiler/collective_cse.h"
#include "weft/compiler/dead_loop_init.h"
#include "weft/compiler/fusion.h"
#include "weft/compiler/hierarchical_collectives.h"
#include "weft/hlo/module.h"
#include "weft/sharding/hlo_sharding.h"

namespace weft::compiler {

struct CompileOptions {
  int64_t num_devices = 1;
  // Run loop fusion (FuseLoops) on the per-device program.
  bool fuse = false;
  // The devices form this many equal slices (device d in slice d / (n /
  // slices)): collectives whose groups span slices are decomposed into a
  // level inside and a level across slices (hierarchical_collectives.h).
  int64_t slices = 1;
};

// A module compiled for `num_devices` devices. Leaves are the entry
// parameters' / root's array leaves in order (runtime/executor.h).
// How many values an entry leaf of sharding `s` on `num_devices` devices
// stands for: under {manual} each device's own (num_devices); under a
// partly manual sharding each manual group's own (the manual subgroup's
// size); otherwise 0 (one value). CompiledProgram's global shape of such a
// leaf stacks them along a new leading dim.
int64_t ManualValueCount(const HloSharding& s, int64_t num_devices);

struct CompiledProgram {
  std::unique_ptr<HloModule> program;  // the per-device program
  int64_t num_devices = 1;
  bool propagated = false;  // shardings were completed by propagation
  std::vector<std::string> input_names, output_names;
  // Global; a leaf with ManualValueCount M > 0 stacks its M values: [M, dims...].
  std::vector<Shape> input_shapes, output_shapes;
  std::vector<Shape> local_input_shapes, local_output_shapes;  // per device (padded tiles)
  std::vector<HloSharding> input_shardings, output_shardings;
  // What fusion did (all zero without CompileOptions::fuse).
  LoopFusionStats fusion;
  // Instructions of the partitioned program that no result needs, removed
  // before the passes below run (HloComputation::RemoveDeadInstructions).
  int64_t dead_instructions_removed = 0;
  // What the algebraic simplifier rewrote (algebraic_simplifier.h).
  AlgebraicSimplifierStats simplifier;
  // Duplicate collectives merged (collective_cse.h).
  CollectiveCseStats collective_cse;
  // Collectives decomposed across slices (all zero with one slice).
  HierarchyStats hierarchy;
  // Independent collectives combined into variadic ones
  // (collective_combiner.h).
  CollectiveCombinerStats combiner;
  // Loop inits that nothing reads, no longer filled (dead_loop_init.h).
  DeadLoopInitStats dead_inits;
  // The schedule and the buffer assignment are not fields: the executor
  // (runtime/executor.h) and the planner (analysis/memory_plan.h) each call
  // compiler::AssignBuffers(*program, compiler::ScheduleComputation)
  // (buffer_assignment.h, schedule.h), which gives both the same offsets.
};

// The number of devices the module's shardings are written for: its
// num_partitions when set, else the largest tile assignment (or maximal
// device + 1); 1 when it has no sharding.
int64_t ShardingDeviceCount(const HloModule& module);

// Propagates shardings in `module` (in place; parameters and outputs without
// a sharding may receive one, the rest becomes {replicated}) unless every
// instruction outside scalar computations (reducers) has one, partitions it
// for options.num_devices devices and, with options.fuse, fuses the
// per-device program. Throws weft::Error when the number of devices is below
// 1, when the shardings are written for another number of devices, or are
// manual on an entry parameter or output.
CompiledProgram CompileForDevices(HloModule& module, const CompileOptions& options);

}  // namespace weft::compiler
