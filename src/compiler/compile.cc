#include "weft/compiler/compile.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>

#include "weft/base/error.h"
#include "weft/compiler/block_scaled_dot.h"
#include "weft/compiler/collective_cse.h"
#include "weft/spmd/sharding_propagation.h"
#include "weft/spmd/spmd_partitioner.h"

namespace weft::compiler {
namespace {

bool IsScalarComputation(const HloComputation& c) {
  for (const HloInstruction* p : c.parameter_instructions()) {
    if (!p->shape().IsScalar()) return false;
  }
  return !c.parameter_instructions().empty();
}

bool EveryInstructionSharded(const HloModule& module) {
  for (const HloComputation* c : module.computations()) {
    if (c != module.entry_computation() && IsScalarComputation(*c)) continue;
    for (const HloInstruction* instr : c->instructions()) {
      if (!instr->has_sharding()) return false;
    }
  }
  return true;
}

void CountDevices(const HloSharding& s, int64_t& count) {
  if (s.IsTuple()) {
    for (const HloSharding& e : s.tuple_elements()) CountDevices(e, count);
  } else if (s.IsTiled()) {
    count = std::max(count, s.tile_assignment().num_elements());
  } else if (s.IsMaximal()) {
    count = std::max(count, s.device() + 1);
  }
}

// The sharding of each array leaf of a value of `shape`.
std::vector<HloSharding> LeafShardings(const Shape& shape, const std::optional<HloSharding>& s,
                                       const std::string& what) {
  const int64_t leaves = shape.LeafCount();
  const HloSharding sharding = s.value_or(HloSharding::Replicate());
  std::vector<HloSharding> out;
  if (sharding.IsTuple()) {
    WEFT_CHECK(static_cast<int64_t>(sharding.tuple_elements().size()) == leaves,
               "{} has {} array leaves but its sharding {} has {} elements", what, leaves,
               sharding.ToString(), sharding.tuple_elements().size());
    out = sharding.tuple_elements();
  } else {
    out.assign(leaves, sharding);
  }
  for (const HloSharding& leaf : out) {
    WEFT_CHECK(!leaf.IsUnknown(),
               "{} has sharding {}; weft splits inputs and joins outputs only for "
               "replicated, maximal, tiled and manual shardings",
               what, leaf.ToString());
  }
  return out;
}

// A manual leaf's shape is one device's (or one manual group's) value: its
// global value stacks them along a new leading dim.
void StackManualLeaves(std::span<const HloSharding> shardings, std::span<Shape> shapes,
                       int64_t num_devices) {
  for (size_t i = 0; i < shardings.size(); ++i) {
    const int64_t count = ManualValueCount(shardings[i], num_devices);
    if (count == 0) continue;
    std::vector<int64_t> dims = {count};
    for (int64_t d : shapes[i].dimensions()) dims.push_back(d);
    shapes[i] = Shape(shapes[i].element_type(), std::move(dims));
  }
}

std::vector<std::string> LeafNames(const HloInstruction& instr) {
  const int64_t leaves = instr.shape().LeafCount();
  if (!instr.shape().IsTuple()) return {instr.name()};
  std::vector<std::string> out;
  for (int64_t i = 0; i < leaves; ++i) out.push_back(fmt::format("{}{{{}}}", instr.name(), i));
  return out;
}

void AppendLeaves(const Shape& shape, std::vector<Shape>& out) {
  for (Shape& leaf : shape.Leaves()) out.push_back(std::move(leaf));
}

}  // namespace

int64_t ManualValueCount(const HloSharding& s, int64_t num_devices) {
  if (s.IsTuple()) return 0;
  if (s.IsManual()) return num_devices;
  const int64_t manual = s.SubgroupManualDim();
  return manual < 0 ? 0 : s.tile_assignment().dim(manual);
}

int64_t ShardingDeviceCount(const HloModule& module) {
  int64_t count = 1;
  for (const HloComputation* c : module.computations()) {
    for (const HloInstruction* instr : c->instructions()) {
      if (instr->has_sharding()) CountDevices(*instr->sharding(), count);
    }
  }
  return module.num_partitions() > 1 ? module.num_partitions() : count;
}

CompiledProgram CompileForDevices(HloModule& module, const CompileOptions& options) {
  const int64_t num_devices = options.num_devices;
  WEFT_CHECK(num_devices >= 1, "the number of devices must be at least 1, got {}", num_devices);
  const int64_t written_for = ShardingDeviceCount(module);
  WEFT_CHECK(written_for == 1 || written_for == num_devices,
             "module '{}' is sharded for {} devices but would run on {}; run it on {} devices "
             "(--num-devices {} or mpirun -np {})",
             module.name(), written_for, num_devices, written_for, written_for, written_for);
  CompiledProgram p;
  p.num_devices = num_devices;
  if (!EveryInstructionSharded(module)) {
    // Parameters and outputs the user annotated keep their shardings (XLA's
    // "allow propagation" flags let it replace them); the others may get one.
    PropagationOptions propagation;
    const HloComputation* entry = module.entry_computation();
    propagation.allow_spmd_sharding_propagation_to_output = {
        !entry->root_instruction()->has_sharding()};
    propagation.allow_spmd_sharding_propagation_to_parameters.clear();
    for (const HloInstruction* param : entry->parameter_instructions()) {
      propagation.allow_spmd_sharding_propagation_to_parameters.push_back(!param->has_sharding());
    }
    if (entry->parameter_instructions().empty()) {
      propagation.allow_spmd_sharding_propagation_to_parameters = {false};
    }
    propagation.replicate_unsharded = true;
    propagation.record_decisions = false;
    PropagateShardings(module, propagation);
    p.propagated = true;
  }
  PartitionOptions partition;
  partition.num_partitions = num_devices;
  p.program = PartitionModule(module, partition);

  const HloComputation* global = module.entry_computation();
  const HloComputation* local = p.program->entry_computation();
  WEFT_CHECK(global->parameter_instructions().size() == local->parameter_instructions().size(),
             "internal: the partitioned program has {} parameters, the module {}",
             local->parameter_instructions().size(), global->parameter_instructions().size());
  for (size_t i = 0; i < global->parameter_instructions().size(); ++i) {
    const HloInstruction* param = global->parameter_instructions()[i];
    const HloInstruction* local_param = local->parameter_instructions()[i];
    for (std::string& name : LeafNames(*param)) p.input_names.push_back(std::move(name));
    AppendLeaves(param->shape(), p.input_shapes);
    AppendLeaves(local_param->shape(), p.local_input_shapes);
    const std::string what = fmt::format("parameter '{}'", param->name());
    const std::vector<HloSharding> written = LeafShardings(param->shape(), param->sharding(), what);
    std::vector<HloSharding> leaves = LeafShardings(param->shape(), local_param->sharding(), what);
    // The partitioned program writes no sharding on a parameter it takes
    // whole; a manual one is each device's own.
    for (size_t k = 0; k < leaves.size(); ++k) {
      if (ManualValueCount(written[k], num_devices) > 0) leaves[k] = written[k];
      p.input_shardings.push_back(std::move(leaves[k]));
    }
  }
  const HloInstruction* root = global->root_instruction();
  p.output_names = LeafNames(*root);
  AppendLeaves(root->shape(), p.output_shapes);
  AppendLeaves(local->root_instruction()->shape(), p.local_output_shapes);
  p.output_shardings = LeafShardings(root->shape(), local->root_instruction()->sharding(),
                                     fmt::format("the root '{}'", root->name()));
  StackManualLeaves(p.input_shardings, p.input_shapes, num_devices);
  StackManualLeaves(p.output_shardings, p.output_shapes, num_devices);
  for (size_t i = 0; i < p.input_shapes.size(); ++i) {
    if (ManualValueCount(p.input_shardings[i], num_devices) > 0) continue;
    p.input_shardings[i].Validate(p.input_shapes[i].dimensions(), num_devices);
  }
  for (size_t i = 0; i < p.output_shapes.size(); ++i) {
    if (ManualValueCount(p.output_shardings[i], num_devices) > 0) continue;
    p.output_shardings[i].Validate(p.output_shapes[i].dimensions(), num_devices);
  }
  WEFT_CHECK(options.slices >= 1 && num_devices % options.slices == 0,
             "{} slices do not split the {} devices into equal slices", options.slices,
             num_devices);
  for (HloComputation* c : p.program->computations()) {
    p.dead_instructions_removed += c->RemoveDeadInstructions();
  }
  ExpandBlockScaledDots(*p.program);
  p.simplifier = SimplifyAlgebra(*p.program);
  p.collective_cse = MergeCommonCollectives(*p.program);
  p.hierarchy = DecomposeCrossSliceCollectives(*p.program, num_devices, options.slices);
  p.combiner = CombineCollectives(*p.program);
  p.dead_inits = ElideDeadLoopInits(*p.program);
  if (options.fuse) p.fusion = FuseLoops(*p.program);
  return p;
}

}  // namespace weft::compiler
