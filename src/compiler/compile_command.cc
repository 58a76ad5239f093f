#include "weft/compiler/compile_command.h"

#include <fmt/format.h>

#include <iostream>
#include <unordered_set>

#include "weft/base/atomic_file.h"
#include "weft/base/error.h"
#include "weft/base/limits.h"
#include "weft/hlo/parser.h"
#include "weft/hlo/printer.h"

namespace weft::compiler {

std::string CompileSummary(const CompiledProgram& program) {
  const HloModule& module = *program.program;
  std::unordered_set<const HloComputation*> fused;
  for (const HloComputation* c : module.computations()) {
    for (const HloInstruction* instr : c->instructions()) {
      if (instr->opcode() == HloOpcode::kFusion) {
        for (const HloComputation* called : instr->called_computations()) fused.insert(called);
      }
    }
  }
  // Instructions the executor dispatches: those outside fused computations.
  int64_t instructions = 0;
  for (const HloComputation* c : module.computations()) {
    if (!fused.count(c)) instructions += c->instruction_count();
  }
  std::string out = fmt::format("// weft compile: {} device{}{}\n", program.num_devices,
                                program.num_devices == 1 ? "" : "s",
                                program.propagated ? ", shardings propagated" : "");
  out +=
      fmt::format("// {} instructions (entry {}), {} fusion{} of {} instructions ({} duplicated)\n",
                  instructions, module.entry_computation()->instruction_count(),
                  program.fusion.fusions, program.fusion.fusions == 1 ? "" : "s",
                  program.fusion.fused_instructions, program.fusion.duplicated);
  if (program.dead_instructions_removed > 0) {
    out += fmt::format(
        "// {} instruction{} of the partitioned program that no result needs, removed\n",
        program.dead_instructions_removed, program.dead_instructions_removed == 1 ? "" : "s");
  }
  const AlgebraicSimplifierStats& simplified = program.simplifier;
  if (simplified.transposes_to_reshapes + simplified.transposes_removed > 0) {
    out += fmt::format(
        "// {} transpose{} that move no element: {} now reshape{}, {} removed\n",
        simplified.transposes_to_reshapes + simplified.transposes_removed,
        simplified.transposes_to_reshapes + simplified.transposes_removed == 1 ? "" : "s",
        simplified.transposes_to_reshapes, simplified.transposes_to_reshapes == 1 ? "" : "s",
        simplified.transposes_removed);
  }
  if (program.collective_cse.merged + program.collective_cse.kept_far_apart > 0) {
    out +=
        fmt::format("// {} duplicate collective{} merged, {} left (over {} instructions apart)\n",
                    program.collective_cse.merged, program.collective_cse.merged == 1 ? "" : "s",
                    program.collective_cse.kept_far_apart, kMaxExtension);
  }
  if (program.combiner.combined > 0) {
    out += fmt::format("// {} collective{} combined into {} variadic one{} (up to {} bytes each)\n",
                       program.combiner.removed + program.combiner.combined,
                       program.combiner.removed + program.combiner.combined == 1 ? "" : "s",
                       program.combiner.combined, program.combiner.combined == 1 ? "" : "s",
                       kCombineThresholdBytes);
  }
  if (program.dead_inits.inits_replaced > 0) {
    out += fmt::format(
        "// {} loop init{} the loop overwrites before reading: AllocateBuffer, not a fill "
        "({} bytes)\n",
        program.dead_inits.inits_replaced, program.dead_inits.inits_replaced == 1 ? "" : "s",
        program.dead_inits.bytes_not_filled);
  }
  return out;
}

int RunCompileCommand(const CompileCommandOptions& options) {
  WEFT_CHECK(
      !options.num_devices || (*options.num_devices >= 1 && *options.num_devices <= kMaxDevices),
      "--num-devices must be between 1 and {} (or left out: from the module), got {}", kMaxDevices,
      options.num_devices.value_or(0));
  std::unique_ptr<HloModule> module = ParseHloModuleFile(options.input);

  const int64_t written_for = ShardingDeviceCount(*module);
  const int64_t n = options.num_devices.value_or(written_for);
  WEFT_CHECK(written_for == 1 || written_for == n,
             "'{}': module '{}' is sharded for {} devices, not {}; compile it with "
             "--num-devices {} (or without --num-devices)",
             options.input, module->name(), written_for, n, written_for);
  CompileOptions compile;
  compile.num_devices = n;
  compile.fuse = options.fuse;
  const CompiledProgram program = CompileForDevices(*module, compile);
  const std::string printed =
      PrintModule(*program.program,
                  options.xla_style ? HloPrintOptions::XlaStyle() : HloPrintOptions::Canonical()) +
      CompileSummary(program);

  if (options.output.empty()) {
    (options.out ? *options.out : std::cout) << printed;
    return 0;
  }
  WriteFileAtomically(options.output, printed, OutputTarget::kUserPath);
  return 0;
}

}  // namespace weft::compiler
