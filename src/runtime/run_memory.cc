// `weft run`'s memory refusal (run_command.h): what a run holds at once,
// from the memory plan of the per-device program (the executor's liveness
// rules), the inputs and the joined outputs, estimated before anything is
// allocated.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <limits>
#include <set>
#include <unordered_map>

#include "weft/analysis/loops.h"
#include "weft/analysis/memory_plan.h"
#include "weft/base/error.h"
#include "weft/base/memory.h"
#include "weft/runtime/run_command.h"

namespace weft::runtime {

using compiler::CompiledProgram;

namespace {

int64_t SatAdd(int64_t a, int64_t b) {
  const std::optional<int64_t> r = CheckedAdd(a, b);
  return r ? *r : std::numeric_limits<int64_t>::max();
}

int64_t SatMul(int64_t a, int64_t b) {
  const std::optional<int64_t> r = CheckedMul(a, b);
  return r ? *r : std::numeric_limits<int64_t>::max();
}

// The instructions the memory plan steps through (it runs every while trip
// by trip, twice), saturating. Throws weft::Error when a trip count cannot
// be derived, as the plan itself would.
int64_t PlannedSteps(const HloModule& program) {
  std::unordered_map<const HloComputation*, int64_t> runs;
  const std::vector<HloComputation*> order = program.MakeComputationPostOrder();
  runs[program.entry_computation()] = 1;
  int64_t steps = 0;
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    auto found = runs.find(*it);
    if (found == runs.end()) continue;
    const int64_t n = found->second;
    steps = SatAdd(steps, SatMul(n, (*it)->instruction_count()));
    for (const HloInstruction* instr : (*it)->instructions()) {
      if (instr->opcode() == HloOpcode::kWhile) {
        const int64_t trips = analysis::WhileTripCount(*instr);
        runs[instr->while_body()] = SatAdd(runs[instr->while_body()], SatMul(n, trips));
        runs[instr->while_condition()] =
            SatAdd(runs[instr->while_condition()], SatMul(n, SatAdd(trips, 1)));
      } else if (instr->opcode() == HloOpcode::kCall) {
        runs[instr->to_apply()] = SatAdd(runs[instr->to_apply()], n);
      }
    }
  }
  return SatMul(steps, 2);
}

// The peak of one device running `program`, from the memory plan (the
// executor's own liveness rules, analysis/memory_plan.h). When the plan
// cannot follow the program (a while whose trip count it cannot derive, or
// one too long to step through quickly), the largest single buffer: a lower
// bound. `shared`: entry parameters whose buffers are the caller's own
// inputs (borrowed, not copied): their bytes at the peak are `shared_bytes`.
struct DevicePeak {
  int64_t bytes = 0;
  int64_t shared_bytes = 0;
  bool planned = false;
  std::string why_not;
  std::vector<std::string> largest;  // "'b' f32[65536,65536] (16.00 GiB)"
};

DevicePeak PlanDevicePeak(const HloModule& program, const std::set<std::string>& shared) {
  // Enough for any real module in well under a second.
  constexpr int64_t kMaxPlannedSteps = 2'000'000;
  const std::string& entry = program.entry_computation()->name();
  DevicePeak peak;
  try {
    const int64_t steps = PlannedSteps(program);
    if (steps <= kMaxPlannedSteps) {
      analysis::MemoryPlanOptions options;
      options.executor_accounting = true;
      const analysis::MemoryPlan plan = analysis::PlanMemory(program, options);
      peak.bytes = plan.peak_bytes;
      peak.planned = true;
      for (const analysis::LiveBuffer& b : plan.live_at_peak) {
        if (b.computation == entry && shared.count(b.instruction)) {
          peak.shared_bytes = SatAdd(peak.shared_bytes, b.bytes);
        }
        if (peak.largest.size() < 3) {
          peak.largest.push_back(
              fmt::format("'{}' {} ({})", b.instruction, b.shape.ToString(), FormatBytes(b.bytes)));
        }
      }
      return peak;
    }
    peak.why_not = fmt::format("its loops run {} steps, too many to step through", steps / 2);
  } catch (const Error& e) {
    peak.why_not = e.what();
  }
  const HloInstruction* largest = nullptr;
  for (const HloComputation* c : program.computations()) {
    for (const HloInstruction* instr : c->instructions()) {
      if (!instr->shape().IsArray()) continue;
      if (largest == nullptr || instr->shape().ByteSize() > largest->shape().ByteSize()) {
        largest = instr;
      }
    }
  }
  if (largest != nullptr) {
    peak.bytes = largest->shape().ByteSize();
    if (largest->parent()->name() == entry && shared.count(largest->name())) {
      peak.shared_bytes = peak.bytes;
    }
    peak.largest.push_back(fmt::format("'{}' {} ({})", largest->name(), largest->shape().ToString(),
                                       FormatBytes(peak.bytes)));
  }
  return peak;
}

int64_t LeafBytes(std::span<const Shape> shapes) {
  int64_t total = 0;
  for (const Shape& s : shapes) total = SatAdd(total, s.ByteSize());
  return total;
}

}  // namespace

RunMemoryEstimate EstimateRunMemory(const HloModule& module, const CompiledProgram& program,
                                    int64_t devices, bool check, int64_t mpi_ranks_here) {
  RunMemoryEstimate e;
  e.devices = devices;
  e.processes = std::max<int64_t>(1, mpi_ranks_here);
  // The devices borrow (share) the global inputs they take whole; tiled
  // inputs are copied into shards, which the device peak counts.
  std::set<std::string> shared;
  const HloComputation* local_entry = program.program->entry_computation();
  for (const HloInstruction* p : local_entry->parameter_instructions()) {
    if (p->shape().IsArray() && !(p->has_sharding() && p->sharding()->IsTiled())) {
      shared.insert(p->name());
    }
  }
  const DevicePeak peak = PlanDevicePeak(*program.program, shared);
  e.device_peak_bytes = peak.bytes;
  e.device_shared_bytes = std::min(peak.shared_bytes, peak.bytes);
  e.device_peak_planned = peak.planned;
  e.not_planned_reason = peak.why_not;
  e.largest_buffers = peak.largest;
  e.input_bytes = LeafBytes(program.input_shapes);
  // Joined outputs: a tiled one is a new tensor, another is a device's own
  // (already in its peak). Under MPI the pieces are all-gathered first.
  for (size_t i = 0; i < program.output_shapes.size(); ++i) {
    const int64_t global = program.output_shapes[i].ByteSize();
    const bool tiled = program.output_shardings[i].IsTiled();
    if (mpi_ranks_here > 0) {
      // GatherTensor: the all-gathered bytes and a copy per piece, then the
      // joined tensor (a tiled one; otherwise one of the pieces).
      const int64_t pieces = SatMul(program.num_devices, program.local_output_shapes[i].ByteSize());
      e.output_bytes = SatAdd(e.output_bytes, SatAdd(tiled ? global : 0, SatMul(2, pieces)));
    } else if (tiled) {
      e.output_bytes = SatAdd(e.output_bytes, global);
    }
  }
  const int64_t running =
      SatAdd(SatAdd(e.input_bytes, e.output_bytes),
             SatMul(devices, std::max<int64_t>(0, peak.bytes - peak.shared_bytes)));
  int64_t checking = 0;
  if (check) {
    // The unsharded module on one device borrows every input.
    std::set<std::string> all;
    for (const HloInstruction* p : module.entry_computation()->parameter_instructions()) {
      all.insert(p->name());
    }
    const DevicePeak reference = PlanDevicePeak(module, all);
    e.check_peak_bytes = std::max<int64_t>(0, reference.bytes - reference.shared_bytes);
    checking = SatAdd(SatAdd(e.input_bytes, LeafBytes(program.output_shapes)), e.check_peak_bytes);
  }
  e.total_bytes = SatMul(e.processes, std::max(running, checking));
  return e;
}

void CheckRunFitsInMemory(const RunMemoryEstimate& e, int64_t available_bytes,
                          std::string_view input) {
  if (available_bytes <= 0 || e.total_bytes <= available_bytes) return;
  const int64_t own = e.device_peak_bytes - e.device_shared_bytes;
  std::string device =
      fmt::format("{} device{} x {}: ", e.devices, e.devices == 1 ? "" : "s", FormatBytes(own));
  if (e.device_peak_planned) {
    device += fmt::format("the memory plan's peak {} of the per-device program",
                          FormatBytes(e.device_peak_bytes));
    if (e.device_shared_bytes > 0) {
      device += fmt::format(" less {} of inputs it shares", FormatBytes(e.device_shared_bytes));
    }
    if (!e.largest_buffers.empty()) {
      device += fmt::format(" (largest at the peak: {})", fmt::join(e.largest_buffers, ", "));
    }
  } else {
    device += fmt::format(
        "at least the largest buffer of the per-device program{}, as the memory plan could not "
        "follow the program ({})",
        e.largest_buffers.empty() ? std::string()
                                  : fmt::format(", {}", fmt::join(e.largest_buffers, ", ")),
        e.not_planned_reason);
  }
  std::string holds = fmt::format("inputs {}; {}; joined outputs {}", FormatBytes(e.input_bytes),
                                  device, FormatBytes(e.output_bytes));
  if (e.check_peak_bytes > 0) {
    holds += fmt::format("; or, for --check, the unsharded module's own buffers {}",
                         FormatBytes(e.check_peak_bytes));
  }
  if (e.processes > 1) holds += fmt::format("; times {} ranks on this machine", e.processes);
  Fail(
      "weft run {}: the run needs {}{} ({} bytes) at once but this machine has {} ({} bytes) of "
      "physical memory. It would hold: {}. Nothing was allocated. Make the largest buffers "
      "smaller (their shapes in {}), or spread the devices over machines (mpirun -np N weft "
      "run, one rank per machine){}",
      input, e.device_peak_planned ? "about " : "at least ", FormatBytes(e.total_bytes),
      e.total_bytes, FormatBytes(available_bytes), available_bytes, holds, input,
      e.check_peak_bytes > 0 ? ", or drop --check" : "");
}

}  // namespace weft::runtime
